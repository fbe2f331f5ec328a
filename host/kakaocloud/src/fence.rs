//! Fencing: a leader calls KakaoCloud only while its Lease is certainly still its own.
//!
//! A standby takes the Lease over once it has seen the same record for the lease duration on its
//! own clock, so it cannot acquire before `last renewal sent + lease duration`. The leader keeps
//! its fence open until `last renewal sent + renew deadline` (shorter by a margin), measured from
//! *before* the renewal was sent, so the fence closes before the standby could lead, whatever the
//! request's latency. Every call of a fenced client (token requests included) checks the fence
//! first: a partitioned leader stops calling the cloud at that moment, even with calls still
//! queued in its controllers or retry loops.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::Error;

/// Until when calls may be made; cheap to clone, clones share the deadline.
#[derive(Debug, Clone, Default)]
pub struct Fence {
    /// `None`: closed.
    until: Arc<Mutex<Option<Instant>>>,
}

impl Fence {
    /// A closed fence: nothing passes until [`Fence::open_until`].
    pub fn closed() -> Fence {
        Fence::default()
    }

    /// Calls may be made until `deadline` (a later renewal moves it on).
    pub fn open_until(&self, deadline: Instant) {
        *self.until.lock().unwrap_or_else(|p| p.into_inner()) = Some(deadline);
    }

    /// No call passes any more (leadership lost or released).
    pub fn close(&self) {
        *self.until.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Whether a call may be made now.
    pub fn is_open(&self) -> bool {
        self.until
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|until| Instant::now() < until)
    }

    /// `Ok` while open; the error every fenced call fails with otherwise.
    pub fn check(&self) -> Result<(), Error> {
        if self.is_open() {
            Ok(())
        } else {
            Err(Error::Fenced)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_fence_is_open_only_until_its_deadline() {
        let fence = Fence::closed();
        assert!(matches!(fence.check(), Err(Error::Fenced)));
        fence.open_until(Instant::now() + Duration::from_secs(60));
        assert!(fence.check().is_ok());
        let clone = fence.clone();
        clone.open_until(Instant::now() - Duration::from_millis(1));
        assert!(!fence.is_open(), "clones share the deadline");
        fence.open_until(Instant::now() + Duration::from_secs(60));
        fence.close();
        assert!(!clone.is_open());
    }
}
