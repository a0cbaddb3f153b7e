//! Exponential backoff with jitter, used for retries and reconnects.

use std::time::Duration;

use rand::Rng;
use tokio_util::sync::CancellationToken;

/// Retry delays: `initial * multiplier^attempt`, capped at `max`, spread by
/// ±`jitter` (a fraction of the delay) so that many clients do not retry in
/// lock step.
#[derive(Debug, Clone, PartialEq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
    pub multiplier: f64,
    pub jitter: f64,
}

impl Backoff {
    /// Reconnect delays of a transport client: doubling from `initial_ms`
    /// up to `max_ms`, ±30% jitter.
    pub fn reconnect(initial_ms: u64, max_ms: u64) -> Self {
        Self {
            initial: Duration::from_millis(initial_ms),
            max: Duration::from_millis(max_ms),
            multiplier: 2.0,
            jitter: 0.3,
        }
    }

    /// The delay before attempt number `*attempts`, which it then counts:
    /// the step of a reconnect loop.
    pub fn next(&self, attempts: &mut u32) -> Duration {
        let delay = self.delay(*attempts);
        *attempts = attempts.saturating_add(1);
        delay
    }

    /// The delay before retry number `attempt` (0 = first retry).
    pub fn delay(&self, attempt: u32) -> Duration {
        let base = self.initial.as_secs_f64() * self.multiplier.powi(i32::try_from(attempt).unwrap_or(i32::MAX));
        let capped = base.min(self.max.as_secs_f64());
        let spread = capped * self.jitter.clamp(0.0, 1.0);
        let jittered = if spread > 0.0 { capped + rand::rng().random_range(-spread..=spread) } else { capped };
        Duration::from_secs_f64(jittered.clamp(0.0, self.max.as_secs_f64()))
    }
}

impl From<&ferry_config::BackoffConfig> for Backoff {
    fn from(c: &ferry_config::BackoffConfig) -> Self {
        Self {
            initial: Duration::from_millis(c.initial_ms),
            max: Duration::from_millis(c.max_ms),
            multiplier: c.multiplier,
            jitter: c.jitter,
        }
    }
}

/// Sleeps `delay` unless `shutdown` fires first; false when it did.
pub async fn sleep_or_shutdown(delay: Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = tokio::time::sleep(delay) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_grows_and_is_capped() {
        let b =
            Backoff { initial: Duration::from_millis(100), max: Duration::from_secs(1), multiplier: 2.0, jitter: 0.0 };
        assert_eq!(b.delay(0), Duration::from_millis(100));
        assert_eq!(b.delay(2), Duration::from_millis(400));
        assert_eq!(b.delay(10), Duration::from_secs(1));
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(1));
    }

    #[test]
    fn jitter_stays_within_its_band_and_under_the_cap() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(150),
            multiplier: 2.0,
            jitter: 0.5,
        };
        for _ in 0..200 {
            let d = b.delay(0);
            assert!(d >= Duration::from_millis(50) && d <= Duration::from_millis(150), "{d:?}");
        }
    }
}
