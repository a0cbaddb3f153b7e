//! The breaker state machine over the host's key-value store (the SDK's
//! double of it in unit tests), with compare-and-swap between instances.

use ferry_plugin_sdk::kv;
use serde::{Deserialize, Serialize};

/// The breaker's config (the route's `config` table).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerConfig {
    key_header: Option<String>,
    failure_threshold: Option<u32>,
    open_ms: Option<u64>,
    half_open_probes: Option<u32>,
    #[serde(default)]
    count_rejected: bool,
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    key_header: Option<String>,
    failure_threshold: u32,
    open_ms: u64,
    half_open_probes: u32,
    count_rejected: bool,
}

impl Config {
    pub fn new(raw: BreakerConfig) -> Result<Self, String> {
        let c = Config {
            key_header: raw.key_header,
            failure_threshold: raw.failure_threshold.unwrap_or(5),
            open_ms: raw.open_ms.unwrap_or(30_000),
            half_open_probes: raw.half_open_probes.unwrap_or(1),
            count_rejected: raw.count_rejected,
        };
        if c.failure_threshold == 0 || c.half_open_probes == 0 || c.open_ms == 0 {
            return Err("failure_threshold, open_ms and half_open_probes must be at least 1".into());
        }
        if c.key_header.as_deref() == Some("") {
            return Err("key_header: empty".into());
        }
        Ok(c)
    }
}

/// One breaker's state, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum State {
    Closed { failures: u32 },
    Open { since: i64 },
    HalfOpen { since: i64, probes: u32, successes: u32 },
}

/// What `admit` decided.
#[derive(Debug, PartialEq)]
pub enum Gate {
    /// Let the message through; `transition` names a state change to log.
    Pass { transition: Option<String> },
    /// Hold it: fail as retry-after.
    Wait { delay_ms: u64, reason: String },
}

pub struct Breaker {
    config: Config,
}

const ATTEMPTS: usize = 64;

impl Breaker {
    pub fn new(config: Config) -> Self {
        Self { config }
    }

    pub fn key_header(&self) -> Option<&str> {
        self.config.key_header.as_deref()
    }

    pub fn counts_rejected(&self) -> bool {
        self.config.count_rejected
    }

    fn store_key(key: &str) -> String {
        format!("cb/{key}")
    }

    /// Reads the state, computes the next one and writes it if nobody else
    /// changed it meanwhile; retries on a lost race.
    fn update<R>(&self, key: &str, step: impl Fn(State) -> (Option<State>, R)) -> Result<R, String> {
        let k = Self::store_key(key);
        for _ in 0..ATTEMPTS {
            let raw = kv::get(&k);
            let state =
                raw.as_deref().and_then(|b| serde_json::from_slice(b).ok()).unwrap_or(State::Closed { failures: 0 });
            let (next, result) = step(state.clone());
            match next {
                Some(next) if next != state => {
                    let bytes = serde_json::to_vec(&next).map_err(|e| e.to_string())?;
                    if kv::compare_and_swap(&k, raw.as_deref(), Some(&bytes))? {
                        return Ok(result);
                    }
                }
                _ => return Ok(result),
            }
        }
        Err(format!("breaker state for {key:?} kept changing under contention"))
    }

    /// Whether a message with `key` may go through now.
    pub fn admit(&self, key: &str, now: i64) -> Result<Gate, String> {
        let c = &self.config;
        let open_ms = i64::try_from(c.open_ms).unwrap_or(i64::MAX);
        self.update(key, |state| match state {
            State::Closed { .. } => (None, Gate::Pass { transition: None }),
            State::Open { since } if now < since.saturating_add(open_ms) => {
                let left = since.saturating_add(open_ms) - now;
                let gate = Gate::Wait {
                    delay_ms: u64::try_from(left).unwrap_or(0).max(1),
                    reason: format!("circuit open for {key:?}"),
                };
                (None, gate)
            }
            State::Open { .. } => (
                Some(State::HalfOpen { since: now, probes: 1, successes: 0 }),
                Gate::Pass { transition: Some("half-open, probing".into()) },
            ),
            // A probe that never settles (the route stopped) must not block
            // the key for good: after open_ms, probing starts over.
            State::HalfOpen { since, .. } if now >= since.saturating_add(open_ms) => {
                (Some(State::HalfOpen { since: now, probes: 1, successes: 0 }), Gate::Pass { transition: None })
            }
            State::HalfOpen { since, probes, successes } if probes < c.half_open_probes => {
                (Some(State::HalfOpen { since, probes: probes + 1, successes }), Gate::Pass { transition: None })
            }
            State::HalfOpen { .. } => (
                None,
                Gate::Wait {
                    delay_ms: c.open_ms.clamp(1, 1000),
                    reason: format!("circuit half-open for {key:?}; waiting for the probes"),
                },
            ),
        })
    }

    /// Records how a send attempt of a message with `key` ended; returns a
    /// transition to log.
    pub fn record(&self, key: &str, success: bool, now: i64) -> Result<Option<String>, String> {
        let c = &self.config;
        self.update(key, |state| match (state, success) {
            (State::Closed { failures }, true) if failures > 0 => (Some(State::Closed { failures: 0 }), None),
            (State::Closed { .. }, true) => (None, None),
            (State::Closed { failures }, false) if failures + 1 >= c.failure_threshold => {
                (Some(State::Open { since: now }), Some(format!("open after {} failed sends", failures + 1)))
            }
            (State::Closed { failures }, false) => (Some(State::Closed { failures: failures + 1 }), None),
            (State::Open { .. }, _) => (None, None),
            (State::HalfOpen { successes, .. }, true) if successes + 1 >= c.half_open_probes => {
                (Some(State::Closed { failures: 0 }), Some("closed: the probes succeeded".into()))
            }
            (State::HalfOpen { since, probes, successes }, true) => {
                (Some(State::HalfOpen { since, probes, successes: successes + 1 }), None)
            }
            (State::HalfOpen { .. }, false) => {
                (Some(State::Open { since: now }), Some("open again: a probe failed".into()))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn config(config: Value) -> Result<Config, String> {
        Config::new(ferry_plugin_sdk::decode_config(&config.to_string())?)
    }

    fn breaker(c: Value) -> Breaker {
        Breaker::new(config(c).unwrap())
    }

    fn passes(g: Result<Gate, String>) -> bool {
        matches!(g, Ok(Gate::Pass { .. }))
    }

    #[test]
    fn closed_open_half_open_closed() {
        let b = breaker(json!({"failure_threshold": 2, "open_ms": 100, "half_open_probes": 2}));
        assert!(passes(b.admit("k", 0)));
        assert_eq!(b.record("k", false, 1).unwrap(), None);
        // A success in between resets the count: failures must be consecutive.
        b.record("k", true, 2).unwrap();
        b.record("k", false, 3).unwrap();
        assert!(b.record("k", false, 4).unwrap().unwrap().starts_with("open"));
        match b.admit("k", 50).unwrap() {
            Gate::Wait { delay_ms, .. } => assert_eq!(delay_ms, 54),
            g => panic!("{g:?}"),
        }
        // Other keys are not affected.
        assert!(passes(b.admit("other", 50)));
        // After open_ms: two probes pass, a third waits.
        assert_eq!(b.admit("k", 104).unwrap(), Gate::Pass { transition: Some("half-open, probing".into()) });
        assert!(passes(b.admit("k", 105)));
        assert!(matches!(b.admit("k", 106).unwrap(), Gate::Wait { .. }));
        assert_eq!(b.record("k", true, 107).unwrap(), None);
        assert!(b.record("k", true, 108).unwrap().unwrap().starts_with("closed"));
        assert!(passes(b.admit("k", 109)));
    }

    #[test]
    fn a_failed_probe_opens_again_and_a_lost_probe_does_not_block() {
        let b = breaker(json!({"failure_threshold": 1, "open_ms": 100}));
        b.record("k", false, 0).unwrap();
        assert!(passes(b.admit("k", 100)));
        assert!(b.record("k", false, 101).unwrap().unwrap().starts_with("open again"));
        assert!(matches!(b.admit("k", 150).unwrap(), Gate::Wait { .. }));
        // A probe that never settles: probing starts over after open_ms.
        assert!(passes(b.admit("k", 201)));
        assert!(matches!(b.admit("k", 202).unwrap(), Gate::Wait { .. }));
        assert!(passes(b.admit("k", 302)));
    }

    #[test]
    fn state_lives_in_the_store() {
        breaker(json!({"failure_threshold": 1})).record("k", false, 0).unwrap();
        // A new breaker (a new instance) over the same store sees it open.
        assert!(matches!(breaker(json!({"failure_threshold": 1})).admit("k", 1).unwrap(), Gate::Wait { .. }));
    }

    #[test]
    fn bad_configs_are_refused() {
        for bad in [json!({"failure_threshold": 0}), json!({"open_ms": 0}), json!({"key_header": ""}), json!({"x": 1})]
        {
            assert!(config(bad.clone()).is_err(), "{bad}");
        }
    }
}
