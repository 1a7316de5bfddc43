//! The host's periodic jobs (buffer and journal retention, memory hygiene) run through one
//! helper: the job runs at start, then every period, until the host stops; a stop never
//! waits for the next period.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

/// Run `job` now and then every `period` until `stop` turns true.
pub async fn every<F, Fut>(period: Duration, mut stop: watch::Receiver<bool>, mut job: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    loop {
        if *stop.borrow() {
            return;
        }
        job().await;
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn a_job_runs_at_start_and_a_stop_does_not_wait_for_the_period() {
        let runs = Arc::new(AtomicUsize::new(0));
        let (stop, stopping) = watch::channel(false);
        let counted = runs.clone();
        let task = tokio::spawn(every(Duration::from_secs(3_600), stopping, move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        }));
        while runs.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        stop.send(true).expect("stop");
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("the stop ended the loop without waiting out the hour")
            .expect("the loop did not panic");
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
}
