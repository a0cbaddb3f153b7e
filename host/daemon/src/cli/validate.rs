//! `ferry validate` (with `--explain` and `--connect`).

use std::path::Path;

use ferry_core::metrics::Metrics;

use crate::cli::{Failure, load_config};
use crate::wiring::{check_urls, validate_plugins};

/// `ferry validate`: config, plugins and each processor's `init`, without
/// connecting to any broker. Prints `ok` or `<key path>: <why>`.
pub fn validate(path: &Path) -> Result<(), Failure> {
    let config = load_config(path)?;
    check_urls(&config)
        .and_then(|()| validate_plugins(&config, &Metrics::new()))
        .map_err(|e| Failure::input(format!("{}: {e}", path.display())))?;
    println!("{}: ok", path.display());
    Ok(())
}

/// `ferry validate --explain`: the fidelity report (see
/// [`crate::explain`]); with `strict`, exit 1 when something is lost.
pub fn explain(path: &Path, strict: bool) -> Result<(), Failure> {
    let config = load_config(path)?;
    let (text, losses) = crate::explain::report(&config);
    print!("{text}");
    match losses {
        0 => println!("nothing is lost"),
        n => println!("{n} loss(es): see the LOST lines"),
    }
    if strict && losses > 0 { Err(Failure::failed("")) } else { Ok(()) }
}

/// `ferry validate --connect`: connects to every receiver's and sender's
/// broker or queue and prints one line each; exit 2 when one fails.
pub async fn probe(path: &Path) -> Result<(), Failure> {
    let config = load_config(path)?;
    let mut failed = 0;
    let mut report = |key: String, kind: &str, result: Result<String, ferry_core::TransportError>| match result {
        Ok(what) => println!("{key} ({kind}): ok, {what}"),
        Err(e) => {
            failed += 1;
            println!("{key} ({kind}): FAILED: {e}");
        }
    };
    for (name, r) in &config.receivers {
        let result = match crate::transports::of_receiver(r) {
            Ok(transport) => transport.probe_receiver(name, r).await,
            Err(e) => Err(ferry_core::TransportError::permanent(e)),
        };
        report(format!("receivers.{name}"), r.kind(), result);
    }
    for (name, s) in &config.senders {
        let result = match crate::transports::of_sender(s) {
            Ok(transport) => transport.probe_sender(name, s).await,
            Err(e) => Err(ferry_core::TransportError::permanent(e)),
        };
        report(format!("senders.{name}"), s.kind(), result);
    }
    if failed == 0 { Ok(()) } else { Err(Failure::input("")) }
}
