//! A token bucket: `rate` per second on average, bursts of up to `burst`. Used for what a
//! plugin may do often but not without end — log lines, journal emits.

use std::sync::Mutex;
use std::time::Instant;

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
}

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
            }),
        }
    }

    /// Take one token: how many were refused since the last one taken, or `None` when the
    /// bucket is empty.
    pub fn take(&self) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let elapsed = now.duration_since(state.refilled_at).as_secs_f64();
        state.tokens = (state.tokens + elapsed * self.rate_per_sec).min(self.burst);
        state.refilled_at = now;
        if state.tokens < 1.0 {
            state.refused += 1;
            return None;
        }
        state.tokens -= 1.0;
        Some(std::mem::take(&mut state.refused))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_allowed_then_refused_and_counted() {
        let bucket = TokenBucket::new(1, 3);
        assert_eq!(bucket.take(), Some(0));
        assert_eq!(bucket.take(), Some(0));
        assert_eq!(bucket.take(), Some(0));
        assert_eq!(bucket.take(), None);
        assert_eq!(bucket.take(), None);
    }
}
