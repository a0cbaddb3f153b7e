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

pub use breaker::{Breaker, BreakerConfig, Config, Gate, State};

use ferry_plugin_sdk::{
    Failure, Message, Plugin, Processor, RetryAfter, SendOutcome, SettlingProcessor, Verdict, log, now,
};

/// The breaker a message belongs to: its `key_header`'s value as text (a
/// message without it, or with a bytes value, shares the breaker `-`).
fn key_of(breaker: &Breaker, msg: &Message) -> String {
    match breaker.key_header() {
        None => "route".to_owned(),
        Some(h) => msg.header_text(h).unwrap_or_else(|| "-".to_owned()),
    }
}

impl Plugin for Breaker {
    type Config = BreakerConfig;

    fn init(config: BreakerConfig) -> Result<Self, String> {
        Config::new(config).map(Breaker::new)
    }
}

impl Processor for Breaker {
    fn process(&self, msg: &Message) -> Result<Verdict, Failure> {
        let key = key_of(self, msg);
        match self.admit(&key, now()) {
            Ok(Gate::Pass { transition }) => {
                if let Some(t) = transition {
                    log::info(&format!("circuit {key}: {t}"));
                }
                Ok(Verdict::Pass)
            }
            Ok(Gate::Wait { delay_ms, reason }) => Err(Failure::Retry(RetryAfter { delay_ms, reason })),
            // The store refused a write: let the message through rather
            // than hold traffic on the breaker's own bookkeeping.
            Err(e) => {
                log::warn(&format!("circuit {key}: {e}; passing the message"));
                Ok(Verdict::Pass)
            }
        }
    }
}

impl SettlingProcessor for Breaker {
    fn settled(&self, msg: &Message, outcome: SendOutcome) {
        let failed = match outcome {
            SendOutcome::Delivered => false,
            SendOutcome::Failed(_) => true,
            SendOutcome::Rejected(_) => self.counts_rejected(),
        };
        let key = key_of(self, msg);
        match self.record(&key, !failed, now()) {
            Ok(Some(t)) => log::info(&format!("circuit {key}: {t}")),
            Err(e) => log::warn(&format!("circuit {key}: {e}")),
            Ok(None) => {}
        }
    }
}

ferry_plugin_sdk::export_settling_processor!(Breaker);

#[cfg(test)]
mod tests {
    use ferry_plugin_sdk::{Level, testing};
    use serde_json::json;

    use super::*;

    #[test]
    fn opens_per_key_on_failed_sends_and_closes_after_a_probe() {
        testing::set_now(1_000);
        let b = testing::plugin::<Breaker>(json!({"key_header": "device", "failure_threshold": 2, "open_ms": 500}))
            .expect("valid config");
        let d1 = || testing::message().header("device", "d1").build();
        for _ in 0..2 {
            let msg = d1();
            assert_eq!(b.process(&msg), Ok(Verdict::Pass));
            b.settled(&msg, SendOutcome::Failed("broker down".into()));
        }
        assert_eq!(testing::logs(), vec![(Level::Info, "circuit d1: open after 2 failed sends".to_owned())]);
        let Err(Failure::Retry(RetryAfter { delay_ms, .. })) = b.process(&d1()) else { panic!("must hold d1") };
        assert_eq!(delay_ms, 500);
        // Another key, and a number header written as text, pass.
        assert_eq!(b.process(&testing::message().header("device", 7).build()), Ok(Verdict::Pass));
        testing::advance(500);
        let probe = d1();
        assert_eq!(b.process(&probe), Ok(Verdict::Pass));
        b.settled(&probe, SendOutcome::Delivered);
        assert_eq!(b.process(&d1()), Ok(Verdict::Pass));
        let lines: Vec<String> = testing::logs().into_iter().map(|(_, l)| l).collect();
        assert_eq!(lines, ["circuit d1: half-open, probing", "circuit d1: closed: the probes succeeded"]);
    }

    #[test]
    fn rejections_count_only_when_asked() {
        let lenient = testing::plugin::<Breaker>(json!({"failure_threshold": 1})).expect("valid config");
        let msg = testing::message().build();
        lenient.settled(&msg, SendOutcome::Rejected("too big".into()));
        assert_eq!(lenient.process(&msg), Ok(Verdict::Pass));
        let strict =
            testing::plugin::<Breaker>(json!({"failure_threshold": 1, "count_rejected": true})).expect("valid config");
        strict.settled(&msg, SendOutcome::Rejected("too big".into()));
        assert!(matches!(strict.process(&msg), Err(Failure::Retry(_))));
    }
}
