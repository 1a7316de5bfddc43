//! A token bucket: `rate` per second on average, bursts of up to `burst`. Used for what a
//! plugin may do often but not without end — log lines, journal emits.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Tokens refilled continuously at a rate, capped at a burst.
#[derive(Debug)]
pub struct TokenBucket {
    rate_per_sec: f64,
    burst: f64,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    tokens: f64,
    refilled_at: Instant,
    refused: u64,
    refused_at: Option<Instant>,
}

/// A refusal after this long without one starts a new run of refusals (see
/// [`Take::Refused`]): a flood's refusals are announced once, not at every token between.
const QUIET_BEFORE_FIRST: Duration = Duration::from_secs(10);

impl TokenBucket {
    /// A full bucket allowing `rate_per_sec` (at least 1) with bursts of `burst` (at least 1).
    pub fn new(rate_per_sec: u32, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            rate_per_sec: f64::from(rate_per_sec.max(1)),
            burst,
            state: Mutex::new(State {
                tokens: burst,
                refilled_at: Instant::now(),
                refused: 0,
                refused_at: None,
            }),
        }
    }

    /// Take one token, saying how many were refused since the last one taken, or refuse
    /// (saying whether this refusal starts a run of them, so the caller can say at once that
    /// it started refusing, and the count when it takes one again).
    pub fn take(&self) -> Take {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let elapsed = now.duration_since(state.refilled_at).as_secs_f64();
        state.tokens = (state.tokens + elapsed * self.rate_per_sec).min(self.burst);
        state.refilled_at = now;
        if state.tokens < 1.0 {
            state.refused += 1;
            let first = state
                .refused_at
                .is_none_or(|at| now.duration_since(at) > QUIET_BEFORE_FIRST);
            state.refused_at = Some(now);
            return Take::Refused { first };
        }
        state.tokens -= 1.0;
        Take::Taken {
            refused_before: std::mem::take(&mut state.refused),
        }
    }

    /// How many were refused since the last token taken, counted as reported (for a last
    /// report when the bucket's owner goes away).
    pub fn take_refused(&self) -> u64 {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut state.refused)
    }
}

/// What [`TokenBucket::take`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// A token was taken; `refused_before` were refused since the one before.
    Taken {
        /// Refusals since the last token taken.
        refused_before: u64,
    },
    /// The bucket is empty.
    Refused {
        /// The first refusal after a quiet spell (none for [`QUIET_BEFORE_FIRST`]): worth
        /// saying at once.
        first: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_allowed_then_refused_and_counted() {
        let bucket = TokenBucket::new(1, 3);
        let taken = Take::Taken { refused_before: 0 };
        assert_eq!(bucket.take(), taken);
        assert_eq!(bucket.take(), taken);
        assert_eq!(bucket.take(), taken);
        assert_eq!(bucket.take(), Take::Refused { first: true });
        assert_eq!(
            bucket.take(),
            Take::Refused { first: false },
            "the same run"
        );
        assert_eq!(bucket.take_refused(), 2);
        assert_eq!(bucket.take_refused(), 0, "counted once");
    }
}
