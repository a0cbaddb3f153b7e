//! `ferry ctl`: runtime control of a running daemon through its admin
//! server ([`crate::control`]): `routes`, `pause ROUTE`, `resume ROUTE`,
//! `drain ROUTE`, `reload`. The daemon is found as `ferry dlq` finds it
//! (`FERRY_ADMIN`, else the config's `admin.listen`), with the config's
//! `admin.token`.
//!
//! Exit codes: 0 done; 1 a drain that timed out with deliveries still held,
//! or a reload the daemon refused (nothing changed); 2 no daemon reached, or
//! a request it refused (unknown route, read-only, wrong token).

use std::path::Path;
use std::process::ExitCode;

use serde::de::DeserializeOwned;

use crate::api::{ControlReply, ErrorReply, ReloadOutcome, ReloadReply, RouteState, RouteStatus};
use crate::cli::dlq::Admin;

/// What `ferry ctl` asks.
#[derive(Debug, Clone)]
pub enum Ctl {
    Routes,
    Pause(String),
    Resume(String),
    Drain { route: String, timeout_s: u64 },
    Reload,
}

pub async fn run(config: &Path, ctl: Ctl) -> ExitCode {
    super::exit(ask(config, ctl).await.map_err(super::Failure::input))
}

async fn ask(config: &Path, ctl: Ctl) -> Result<ExitCode, String> {
    let admin = Admin::of_file(config)?;
    match ctl {
        Ctl::Routes => {
            let routes: Vec<RouteStatus> = call(&admin, reqwest::Method::GET, "/routes", &[200]).await?.1;
            println!("{:<24} {:<8} {:>9} {:>10}", "ROUTE", "STATE", "IN FLIGHT", "GENERATION");
            for r in routes {
                println!("{:<24} {:<8} {:>9} {:>10}", r.id, state_name(r.state), r.in_flight, r.generation);
            }
            Ok(ExitCode::SUCCESS)
        }
        Ctl::Pause(route) => control(&admin, &route, "pause", "").await,
        Ctl::Resume(route) => control(&admin, &route, "resume", "").await,
        Ctl::Drain { route, timeout_s } => control(&admin, &route, "drain", &format!("?timeout_s={timeout_s}")).await,
        Ctl::Reload => {
            let (_, reply): (u16, ReloadReply) = call(&admin, reqwest::Method::POST, "/reload", &[200, 422]).await?;
            if reply.outcome == ReloadOutcome::Refused {
                eprintln!("reload refused; nothing changed:");
                for e in &reply.errors {
                    eprintln!("  {e}");
                }
                return Ok(ExitCode::FAILURE);
            }
            println!("reload applied");
            for (id, v) in &reply.routes {
                println!("  {id}: generation {} ({:?})", v.generation, v.change);
            }
            for id in &reply.stopped {
                println!("  {id}: stopped (no longer in the config)");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn control(admin: &Admin, route: &str, verb: &str, query: &str) -> Result<ExitCode, String> {
    let path =
        format!("/routes/{}/{verb}{query}", url::form_urlencoded::byte_serialize(route.as_bytes()).collect::<String>());
    let (_, reply): (u16, ControlReply) = call(admin, reqwest::Method::POST, &path, &[200, 504]).await?;
    let changed = if reply.changed { "" } else { " (already)" };
    println!("{}: {}{changed}, {} in flight", reply.route, state_name(reply.state), reply.in_flight);
    Ok(if reply.drained == Some(false) {
        eprintln!("{}: still holds {} deliveries; it stays paused", reply.route, reply.in_flight);
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn state_name(state: RouteState) -> &'static str {
    match state {
        RouteState::Running => "running",
        RouteState::Paused => "paused",
        RouteState::Stopped => "stopped",
    }
}

/// One admin request; its answer read as `T` when its status is one of
/// `expected`, else the server's error text.
pub(crate) async fn call<T: DeserializeOwned>(
    admin: &Admin,
    method: reqwest::Method,
    path: &str,
    expected: &[u16],
) -> Result<(u16, T), String> {
    let client = reqwest::Client::new();
    let response = admin.request(&client, method, path).send().await.map_err(|e| format!("{path}: {e}"))?;
    let status = response.status().as_u16();
    let body = response.bytes().await.map_err(|e| format!("{path}: {e}"))?;
    if expected.contains(&status) {
        return serde_json::from_slice(&body)
            .map(|v| (status, v))
            .map_err(|e| format!("{path}: unexpected answer: {e}"));
    }
    Err(match serde_json::from_slice::<ErrorReply>(&body) {
        Ok(e) => e.error,
        Err(_) => format!("{path}: HTTP {status}: {}", String::from_utf8_lossy(&body)),
    })
}
