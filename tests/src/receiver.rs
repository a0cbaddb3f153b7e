//! Runs a transport receiver in the background for transport-level tests
//! and hands out its deliveries.

use std::time::Duration;

use ferry_core::ports::{Delivery, Receiver};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// A receiver running on its own task.
pub struct RunningReceiver {
    rx: mpsc::Receiver<Delivery>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl RunningReceiver {
    /// Starts `receiver` with a delivery channel of `capacity`.
    pub fn start(receiver: impl Receiver + 'static, capacity: usize) -> Self {
        let (tx, rx) = mpsc::channel(capacity);
        let stop = CancellationToken::new();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            receiver.run(tx, token).await.expect("receiver runs");
        });
        Self { rx, stop, task }
    }

    /// The next delivery, if one comes within `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Option<Delivery> {
        tokio::time::timeout(timeout, self.rx.recv()).await.ok().flatten()
    }

    /// The next delivery; panics when none comes within `timeout`.
    pub async fn expect(&mut self, timeout: Duration) -> Delivery {
        self.next(timeout).await.unwrap_or_else(|| panic!("no delivery within {timeout:?}"))
    }

    /// Stops the receiver and waits for it to disconnect.
    pub async fn stop(self) {
        drop(self.rx);
        self.stop.cancel();
        let _ = self.task.await;
    }
}
