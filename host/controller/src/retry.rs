//! How controllers retry: the delay a failed reconcile waits comes from the error (the API's
//! Retry-After when it gave one) or from a per-object exponential backoff, reset on success.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kube::runtime::controller::Action;

/// An error that may say when to try again.
pub trait RetryHint: std::fmt::Display {
    /// The delay the remote side asked for (HTTP 429 / 503 Retry-After).
    fn retry_after(&self) -> Option<Duration> {
        None
    }
}

impl RetryHint for kakaocloud::Error {
    fn retry_after(&self) -> Option<Duration> {
        match self {
            kakaocloud::Error::Throttled { retry_after } => *retry_after,
            _ => None,
        }
    }
}

/// Per-object failure counts: `base`, `2 x base`, ... up to `max`.
#[derive(Debug)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Backoff {
            base,
            max,
            failures: Mutex::default(),
        }
    }

    /// One more failure of `key`: how long to wait before the next try.
    pub fn failed(&self, key: &str) -> Duration {
        let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let n = f.entry(key.to_owned()).or_insert(0);
        *n = n.saturating_add(1);
        let factor = 1u32 << (*n - 1).min(16);
        self.base.saturating_mul(factor).min(self.max)
    }

    /// `key` reconciled: its next failure starts from `base` again.
    pub fn succeeded(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }

    /// The error policy every controller uses: Retry-After when the error carries one, the
    /// object's backoff otherwise; the failure is logged in the caller's span.
    pub fn error_policy<E: RetryHint>(&self, key: &str, error: &E) -> Action {
        let delay = error.retry_after().unwrap_or_else(|| self.failed(key));
        tracing::warn!(error = %error, retry_in = ?delay, "reconcile failed");
        Action::requeue(delay)
    }
}

impl Default for Backoff {
    /// 1 s doubling to 5 minutes, like controller-runtime's per-item limiter.
    fn default() -> Self {
        Backoff::new(Duration::from_secs(1), Duration::from_secs(300))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Plain;
    impl std::fmt::Display for Plain {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("plain")
        }
    }
    impl RetryHint for Plain {}

    #[test]
    fn backoff_doubles_per_object_up_to_the_cap_and_resets() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(5));
        assert_eq!(b.failed("a"), Duration::from_secs(1));
        assert_eq!(b.failed("a"), Duration::from_secs(2));
        assert_eq!(
            b.failed("b"),
            Duration::from_secs(1),
            "objects back off alone"
        );
        assert_eq!(b.failed("a"), Duration::from_secs(4));
        assert_eq!(b.failed("a"), Duration::from_secs(5));
        b.succeeded("a");
        assert_eq!(b.failed("a"), Duration::from_secs(1));
    }

    #[test]
    fn retry_after_wins_over_backoff() {
        let b = Backoff::default();
        let throttled = kakaocloud::Error::Throttled {
            retry_after: Some(Duration::from_secs(7)),
        };
        assert_eq!(
            b.error_policy("x", &throttled),
            Action::requeue(Duration::from_secs(7))
        );
        assert_eq!(
            b.error_policy("x", &Plain),
            Action::requeue(Duration::from_secs(1))
        );
        assert_eq!(
            b.error_policy("x", &Plain),
            Action::requeue(Duration::from_secs(2))
        );
    }
}
