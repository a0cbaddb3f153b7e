//! Where a route reads the time: the system clock in the daemon, and
//! tokio's clock in tests, which can be paused and advanced, so route tests
//! run on virtual time (`#[tokio::test(start_paused = true)]`) instead of
//! real sleeps.

use ferry_envelope::Timestamp;

/// A source of "now" for expiry checks and retry schedules.
#[derive(Debug, Clone, Copy, Default)]
pub enum Clock {
    /// The wall clock.
    #[default]
    System,
    /// Wall-clock time when the clock was made plus tokio's elapsed time
    /// since: follows a paused tokio clock.
    Tokio { base: Timestamp, start: tokio::time::Instant },
}

impl Clock {
    /// A clock that moves with tokio's (paused or not).
    pub fn tokio() -> Self {
        Self::Tokio { base: Timestamp::now(), start: tokio::time::Instant::now() }
    }

    pub fn now(&self) -> Timestamp {
        match self {
            Clock::System => Timestamp::now(),
            Clock::Tokio { base, start } => base.plus(start.elapsed()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_tokio_clock_follows_paused_time() {
        let clock = Clock::tokio();
        let before = clock.now();
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(clock.now().as_millis() - before.as_millis(), 3_600_000);
    }
}
