//! The built-in `circuitbreaker` processor. It targets the
//! `settling-processor` world: besides `process`, the host tells it how each
//! send attempt of a message it passed ended, and it keeps one breaker per
//! key in the host's key-value store, so the state survives instance
//! replacement and hot reloads.
//!
//! Config (the route's `config` table):
//!
//! ```toml
//! config = { key_header = "device", failure_threshold = 5, open_ms = 30000, half_open_probes = 1 }
//! ```
//!
//! - `key_header`: one breaker per value of this header (messages without
//!   it share the breaker `-`). Without it, one breaker for the route.
//! - `failure_threshold` (default 5): consecutive failed send attempts that
//!   open the breaker.
//! - `open_ms` (default 30000): how long it stays open. While open, every
//!   message with its key fails as retry-after (the time left), so the
//!   source keeps it and nothing is sent to the failing target.
//! - `half_open_probes` (default 1): after `open_ms`, this many messages go
//!   through as probes; when that many succeed the breaker closes, and when
//!   one fails it opens again. Other messages wait (retry-after) meanwhile.
//! - `count_rejected` (default false): whether a permanent refusal by the
//!   target counts as a failure too (by default only transient failures,
//!   the kind an outage causes, do).
//!
//! Transitions are written to the host's log at info level.

mod breaker;

pub use breaker::{Breaker, Config, Gate, State, Store};

mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "settling-processor",
        generate_all,
    });
}

use bindings::ferry::plugin::host::{Level, log, now};
use bindings::ferry::plugin::kv;
use bindings::ferry::plugin::types::{Failure, HeaderValue, Message, RetryAfter, SendOutcome, Verdict};

/// The host's key-value store.
struct HostKv;

impl Store for HostKv {
    fn get(&self, key: &str) -> Option<Vec<u8>> {
        kv::get(key)
    }

    fn compare_and_swap(&self, key: &str, expected: Option<&[u8]>, value: &[u8]) -> Result<bool, String> {
        kv::compare_and_swap(key, expected, Some(value))
    }
}

thread_local! {
    static BREAKER: std::cell::RefCell<Option<Breaker>> = const { std::cell::RefCell::new(None) };
}

fn with_breaker<R>(f: impl FnOnce(&Breaker) -> R) -> Option<R> {
    BREAKER.with(|b| b.borrow().as_ref().map(f))
}

fn key_of(breaker: &Breaker, msg: &Message) -> String {
    match breaker.key_header() {
        None => "route".to_owned(),
        Some(h) => match msg.header(h) {
            Some(HeaderValue::Text(s)) => s,
            Some(HeaderValue::Integer(i)) => i.to_string(),
            Some(HeaderValue::Boolean(b)) => b.to_string(),
            Some(_) | None => "-".to_owned(),
        },
    }
}

struct Guest;

impl bindings::Guest for Guest {
    fn init(config: String) -> Result<(), String> {
        let config: serde_json::Value =
            serde_json::from_str(&config).map_err(|e| format!("config is not valid JSON: {e}"))?;
        let breaker = Breaker::new(Config::from_json(config)?);
        BREAKER.with(|b| *b.borrow_mut() = Some(breaker));
        Ok(())
    }

    fn process(msg: &Message) -> Result<Verdict, Failure> {
        let gate = with_breaker(|b| {
            let key = key_of(b, msg);
            (b.admit(&HostKv, &key, now()), key)
        });
        match gate {
            None => Err(Failure::Reject("circuitbreaker used before init".into())),
            Some((Ok(Gate::Pass { transition }), key)) => {
                if let Some(t) = transition {
                    log(Level::Info, &format!("circuit {key}: {t}"));
                }
                Ok(Verdict::Pass)
            }
            Some((Ok(Gate::Wait { delay_ms, reason }), _)) => Err(Failure::Retry(RetryAfter { delay_ms, reason })),
            // The store refused a write: let the message through rather
            // than hold traffic on the breaker's own bookkeeping.
            Some((Err(e), key)) => {
                log(Level::Warn, &format!("circuit {key}: {e}; passing the message"));
                Ok(Verdict::Pass)
            }
        }
    }

    fn settled(msg: &Message, outcome: SendOutcome) {
        let failed = match outcome {
            SendOutcome::Delivered => false,
            SendOutcome::Failed(_) => true,
            SendOutcome::Rejected(_) => with_breaker(|b| b.counts_rejected()).unwrap_or(false),
        };
        let transition = with_breaker(|b| {
            let key = key_of(b, msg);
            (b.record(&HostKv, &key, !failed, now()), key)
        });
        match transition {
            Some((Ok(Some(t)), key)) => log(Level::Info, &format!("circuit {key}: {t}")),
            Some((Err(e), key)) => log(Level::Warn, &format!("circuit {key}: {e}")),
            _ => {}
        }
    }
}

bindings::export!(Guest with_types_in bindings);
