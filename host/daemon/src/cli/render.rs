//! `ferry render`.

use std::path::Path;

use crate::cli::Failure;
use crate::runtime::masking::masked;

/// `ferry render`: the resolved config (defaults filled in, `${VAR}`
/// substituted) as JSON, with passwords in URLs and every secret read from
/// a file masked.
pub fn render(path: &Path) -> Result<(), Failure> {
    let input = |e: &dyn std::fmt::Display| Failure::input(format!("{}: {e}", path.display()));
    // An mqbridge config: the ferry TOML it became (its variables still
    // variables), once ferry reads it, so it can be saved and used as is.
    // The file is read and evaluated once; its TOML is checked as `load`
    // would check it. (A command of its own process, not on a runtime.)
    let translated = std::fs::read_to_string(path).ok().and_then(|text| crate::mqbridge::read(path, &text));
    if let Some(Ok(toml)) = translated {
        ferry_config::parse(&toml).map_err(|e| input(&e))?;
        print!("{toml}");
        return Ok(());
    }
    let (config, secrets) = ferry_config::load_with_secrets(path).map_err(|e| input(&e))?;
    let value = masked(&config, secrets).map_err(Failure::input)?;
    let text = serde_json::to_string_pretty(&value).map_err(|e| Failure::input(format!("cannot render: {e}")))?;
    println!("{text}");
    Ok(())
}
