//! Shadow rollout of a processor: a processor entry with `shadow = "…"`
//! runs the shadow plugin on a copy of each message after the live one, and
//! counts whether the two agreed (`ferry_plugin_shadow_total{route, plugin,
//! shadow, agreement}`). The shadow's verdict and its changes never reach
//! delivery, and a shadow that traps, stalls or refuses fails nothing.
//!
//! The shadow runs on a task of its own, at most [`IN_FLIGHT`] at a time
//! per entry: a message never waits for it. When that many are already
//! running the copy is not processed and counted as `skipped`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use ferry_envelope::Envelope;
use tokio::sync::Semaphore;
use tracing::info;

use crate::metrics::{CounterHandle, Metrics, labels};
use crate::ports::{ProcessError, Processor, SendOutcome, SharedProcessor, Verdict};

/// Shadow calls running at once per processor entry.
pub const IN_FLIGHT: usize = 64;

/// Disagreements logged in full before sampling starts; then every
/// [`LOG_EVERY`]-th one.
const LOG_FIRST: u64 = 10;
const LOG_EVERY: u64 = 100;

/// A live processor with a shadow beside it.
pub struct Shadowed {
    live: SharedProcessor,
    shadow: SharedProcessor,
    route: String,
    permits: Arc<Semaphore>,
    counts: Arc<Counts>,
}

struct Counts {
    agree: CounterHandle,
    disagree: CounterHandle,
    error: CounterHandle,
    skipped: CounterHandle,
    disagreements: AtomicU64,
}

/// A verdict reduced to what agreement compares: the decision, the
/// addresses of a route, and an error's kind.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Decision {
    Pass,
    Drop,
    Route(Vec<String>),
    Retry,
    Reject(&'static str),
}

fn decision(result: &Result<Verdict, ProcessError>) -> Decision {
    match result {
        Ok(Verdict::Pass) => Decision::Pass,
        Ok(Verdict::Drop(_)) => Decision::Drop,
        Ok(Verdict::Route(to)) => {
            let mut to = to.clone();
            to.sort();
            to.dedup();
            Decision::Route(to)
        }
        Err(ProcessError::Retry { .. }) => Decision::Retry,
        Err(ProcessError::Reject(f)) => Decision::Reject(f.reason.as_str()),
    }
}

impl Shadowed {
    pub fn new(live: SharedProcessor, shadow: SharedProcessor, route: &str, metrics: &Metrics) -> Self {
        let counter = |agreement: &str| {
            let l = labels(&[
                ("route", route),
                ("plugin", live.name()),
                ("shadow", shadow.name()),
                ("agreement", agreement),
            ]);
            metrics.plugin_shadow.get_or_create(&l).clone()
        };
        let counts = Counts {
            agree: counter("agree"),
            disagree: counter("disagree"),
            error: counter("error"),
            skipped: counter("skipped"),
            disagreements: AtomicU64::new(0),
        };
        Self {
            live,
            shadow,
            route: route.to_owned(),
            permits: Arc::new(Semaphore::new(IN_FLIGHT)),
            counts: Arc::new(counts),
        }
    }
}

#[async_trait]
impl Processor for Shadowed {
    fn name(&self) -> &str {
        self.live.name()
    }

    async fn process(&self, envelope: Envelope) -> (Envelope, Result<Verdict, ProcessError>) {
        // The copy as the live processor got it (the payload is shared).
        let copy = envelope.clone();
        let (envelope, result) = self.live.process(envelope).await;
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            self.counts.skipped.inc();
            return (envelope, result);
        };
        let live = decision(&result);
        let (shadow, counts, route) = (self.shadow.clone(), self.counts.clone(), self.route.clone());
        let plugin = self.live.name().to_owned();
        tokio::spawn(async move {
            let id = copy.id.clone();
            let (_, shadow_result) = shadow.process(copy).await;
            drop(permit);
            let theirs = decision(&shadow_result);
            if theirs == live {
                counts.agree.inc();
                return;
            }
            if matches!(theirs, Decision::Retry | Decision::Reject(_)) {
                counts.error.inc();
            } else {
                counts.disagree.inc();
            }
            let n = counts.disagreements.fetch_add(1, Ordering::Relaxed);
            if n < LOG_FIRST || n % LOG_EVERY == 0 {
                info!(
                    route = %route,
                    plugin = %plugin,
                    shadow = %shadow.name(),
                    message_id = %id,
                    live = ?live,
                    shadow_verdict = ?theirs,
                    disagreements = n + 1,
                    "shadow disagreed (sampled: the first {LOG_FIRST}, then every {LOG_EVERY}th)"
                );
            }
        });
        (envelope, result)
    }

    fn settles(&self) -> bool {
        self.live.settles()
    }

    async fn settled(&self, envelope: &Envelope, outcome: &SendOutcome) {
        self.live.settled(envelope, outcome).await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Failure, FailureReason};

    struct Fixed(&'static str, Result<Verdict, ProcessError>, Duration);

    #[async_trait]
    impl Processor for Fixed {
        fn name(&self) -> &str {
            self.0
        }

        async fn process(&self, mut envelope: Envelope) -> (Envelope, Result<Verdict, ProcessError>) {
            tokio::time::sleep(self.2).await;
            envelope.set_header("touched-by", self.0);
            (envelope, self.1.clone())
        }
    }

    fn fixed(name: &'static str, r: Result<Verdict, ProcessError>) -> SharedProcessor {
        Arc::new(Fixed(name, r, Duration::ZERO))
    }

    fn count(m: &Metrics, agreement: &str) -> u64 {
        Metrics::count(
            &m.plugin_shadow,
            &[("route", "r"), ("plugin", "live"), ("shadow", "next"), ("agreement", agreement)],
        )
    }

    async fn settle() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    #[tokio::test]
    async fn the_live_verdict_and_changes_go_on_and_agreement_is_counted() {
        let m = Metrics::new();
        let s = Shadowed::new(fixed("live", Ok(Verdict::Pass)), fixed("next", Ok(Verdict::Drop("no".into()))), "r", &m);
        let (env, result) = s.process(Envelope::new("a", &b"x"[..])).await;
        assert_eq!(result, Ok(Verdict::Pass));
        assert_eq!(env.text_header("touched-by"), Some("live"), "only the live processor's changes");
        settle().await;
        assert_eq!(count(&m, "disagree"), 1);

        let s = Shadowed::new(fixed("live", Ok(Verdict::Pass)), fixed("next", Ok(Verdict::Pass)), "r", &m);
        let _ = s.process(Envelope::new("b", &b"x"[..])).await;
        settle().await;
        assert_eq!(count(&m, "agree"), 1);

        let route_ab = Ok(Verdict::Route(vec!["a".into(), "b".into()]));
        let route_ba = Ok(Verdict::Route(vec!["b".into(), "a".into(), "a".into()]));
        let s = Shadowed::new(fixed("live", route_ab), fixed("next", route_ba), "r", &m);
        let _ = s.process(Envelope::new("c", &b"x"[..])).await;
        settle().await;
        assert_eq!(count(&m, "agree"), 2, "the same addresses in another order agree");
    }

    #[tokio::test]
    async fn a_failing_shadow_fails_nothing_and_is_counted_as_an_error() {
        let m = Metrics::new();
        let trap = Err(ProcessError::Reject(Failure::new(FailureReason::PluginTrap, "boom")));
        let s = Shadowed::new(fixed("live", Ok(Verdict::Pass)), fixed("next", trap), "r", &m);
        let (_, result) = s.process(Envelope::new("a", &b"x"[..])).await;
        assert_eq!(result, Ok(Verdict::Pass));
        settle().await;
        assert_eq!(count(&m, "error"), 1);
    }

    #[tokio::test]
    async fn a_slow_shadow_never_holds_a_message_and_the_excess_is_skipped() {
        let m = Metrics::new();
        let slow: SharedProcessor = Arc::new(Fixed("next", Ok(Verdict::Pass), Duration::from_secs(30)));
        let s = Shadowed::new(fixed("live", Ok(Verdict::Pass)), slow, "r", &m);
        let started = std::time::Instant::now();
        for i in 0..(IN_FLIGHT + 5) {
            let (_, r) = s.process(Envelope::new(i.to_string(), &b"x"[..])).await;
            assert_eq!(r, Ok(Verdict::Pass));
        }
        assert!(started.elapsed() < Duration::from_secs(5), "messages waited for the shadow");
        assert_eq!(count(&m, "skipped"), 5);
    }
}
