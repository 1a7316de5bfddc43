//! Waiting out a failure that passes: a full disk, or a database server that is away. The
//! host's own bookkeeping writes — its journal events, a turn's outcome, a turn's episodes —
//! and the reads that tell whether an earlier attempt made them are tried again until they
//! go through, so a full disk or a PostgreSQL outage stalls the host's work instead of
//! losing an event, leaving a batch `running` for ever or answering it twice after a
//! restart. Producers (`buffer.push`, `cairn send`, a webhook) are refused at once instead:
//! they still hold the message and can send it again.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// The longest pause between two tries.
const MAX_PAUSE: Duration = Duration::from_secs(1);
/// How often a write that keeps failing is logged again.
const WARN_EVERY: Duration = Duration::from_secs(30);

/// Run `write` until it succeeds or fails for another reason than one `passing` says
/// passes.
pub async fn while_passing<T, E, F, Fut>(
    what: &str,
    passing: fn(&E) -> bool,
    mut write: F,
) -> Result<T, E>
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut pause = Duration::from_millis(50);
    let mut warned_at: Option<Instant> = None;
    loop {
        match write().await {
            Err(e) if passing(&e) => {
                if warned_at.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                    tracing::warn!("{what}: {e}; trying again until it goes through");
                    warned_at = Some(Instant::now());
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_PAUSE);
            }
            outcome => {
                if warned_at.is_some() && outcome.is_ok() {
                    tracing::info!("{what}: done now");
                }
                return outcome;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn a_passing_failure_is_waited_out_and_other_errors_are_not() {
        let tries = AtomicU32::new(0);
        let written: Result<u32, String> = while_passing(
            "test",
            |e: &String| e == "full",
            || async {
                match tries.fetch_add(1, Ordering::SeqCst) {
                    0 | 1 => Err("full".to_string()),
                    n => Ok(n),
                }
            },
        )
        .await;
        assert_eq!(written, Ok(2));
        let refused: Result<u32, String> = while_passing(
            "test",
            |e: &String| e == "full",
            || async { Err("bad input".to_string()) },
        )
        .await;
        assert_eq!(refused, Err("bad input".to_string()));
    }
}
