//! Fault injection, shared by the library API ([`Faults`]) and the admin HTTP
//! endpoint (`POST /admin/faults` with a [`FaultRequest`] as JSON), which are
//! the same code path.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Matches every route in a route-scoped fault.
pub const ANY_ROUTE: &str = "*";

/// One fault, as accepted by `POST /admin/faults`.
///
/// Routes are the names in [`crate::routes`] (or `"*"` for any route).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FaultRequest {
    /// Every response of `route` is delayed by `millis` (0 removes it).
    Latency { route: String, millis: u64 },
    /// The next `count` requests of `route` get 429 with `Retry-After`.
    Throttle {
        route: String,
        count: usize,
        retry_after_millis: u64,
    },
    /// The next `count` requests of `route` get HTTP `status` (5xx), not processed.
    ServerError {
        route: String,
        count: usize,
        status: u16,
    },
    /// The next `count` requests of `route` have their connection dropped
    /// before they are processed.
    DropConnection { route: String, count: usize },
    /// The next `count` requests of `route` are processed (an instance is
    /// created, say) and then the connection is dropped instead of answering.
    DropAfterCommit { route: String, count: usize },
    /// The next `count` requests of `route` are processed, then the answer is
    /// held for `millis` (longer than the client's timeout makes a timeout
    /// after commit).
    DelayAfterCommit {
        route: String,
        count: usize,
        millis: u64,
    },
    /// Creating `flavor` (name or ID) in `zone` fails with insufficient capacity.
    CapacityError { flavor: String, zone: String },
    /// Undoes [`FaultRequest::CapacityError`].
    ClearCapacityError { flavor: String, zone: String },
    /// Instances whose name contains `name_contains` ("" = all) stay in BUILD.
    StuckInBuild { name_contains: String },
    /// Instances whose name contains `name_contains` ("" = all) go to ERROR
    /// instead of ACTIVE.
    GoToError { name_contains: String },
    /// Instance lists leave out instances created less than `millis` ago (0 removes it), as
    /// an eventually consistent list would; GET by ID still finds them.
    ListLag { millis: u64 },
    /// Removes every fault.
    Clear,
}

/// A one-shot fault queued for a route.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Queued {
    Throttle(Duration),
    ServerError(u16),
    Drop,
    DropAfterCommit,
    DelayAfterCommit(Duration),
}

impl Queued {
    pub fn before_commit(&self) -> bool {
        matches!(
            self,
            Queued::Throttle(_) | Queued::ServerError(_) | Queued::Drop
        )
    }
}

#[derive(Debug, Default)]
pub(crate) struct FaultState {
    latency: BTreeMap<String, Duration>,
    queued: BTreeMap<String, VecDeque<Queued>>,
    capacity: BTreeSet<(String, String)>,
    stuck: Vec<String>,
    error: Vec<String>,
    list_lag: Duration,
}

/// Handle to the simulator's faults; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    inner: Arc<Mutex<FaultState>>,
}

impl Faults {
    fn lock(&self) -> MutexGuard<'_, FaultState> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies one fault request (what the admin endpoint calls).
    pub fn apply(&self, request: FaultRequest) {
        let mut s = self.lock();
        let mut push = |route: String, count: usize, fault: Queued| {
            let q = s.queued.entry(route).or_default();
            for _ in 0..count {
                q.push_back(fault.clone());
            }
        };
        match request {
            FaultRequest::Latency { route, millis } => {
                if millis == 0 {
                    s.latency.remove(&route);
                } else {
                    s.latency.insert(route, Duration::from_millis(millis));
                }
            }
            FaultRequest::Throttle {
                route,
                count,
                retry_after_millis,
            } => push(
                route,
                count,
                Queued::Throttle(Duration::from_millis(retry_after_millis)),
            ),
            FaultRequest::ServerError {
                route,
                count,
                status,
            } => push(route, count, Queued::ServerError(status)),
            FaultRequest::DropConnection { route, count } => push(route, count, Queued::Drop),
            FaultRequest::DropAfterCommit { route, count } => {
                push(route, count, Queued::DropAfterCommit)
            }
            FaultRequest::DelayAfterCommit {
                route,
                count,
                millis,
            } => push(
                route,
                count,
                Queued::DelayAfterCommit(Duration::from_millis(millis)),
            ),
            FaultRequest::CapacityError { flavor, zone } => {
                s.capacity.insert((flavor, zone));
            }
            FaultRequest::ClearCapacityError { flavor, zone } => {
                s.capacity.remove(&(flavor, zone));
            }
            FaultRequest::StuckInBuild { name_contains } => s.stuck.push(name_contains),
            FaultRequest::GoToError { name_contains } => s.error.push(name_contains),
            FaultRequest::ListLag { millis } => s.list_lag = Duration::from_millis(millis),
            FaultRequest::Clear => *s = FaultState::default(),
        }
    }

    /// Delays every response of `route` by `delay` (zero removes it).
    pub fn latency(&self, route: &str, delay: Duration) {
        let millis = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.apply(FaultRequest::Latency {
            route: route.into(),
            millis,
        });
    }

    /// The next `count` requests of `route` get 429 with `Retry-After`.
    pub fn throttle(&self, route: &str, count: usize, retry_after: Duration) {
        let retry_after_millis = u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX);
        self.apply(FaultRequest::Throttle {
            route: route.into(),
            count,
            retry_after_millis,
        });
    }

    /// The next `count` requests of `route` get `status` (e.g. 503).
    pub fn server_error(&self, route: &str, count: usize, status: u16) {
        self.apply(FaultRequest::ServerError {
            route: route.into(),
            count,
            status,
        });
    }

    /// The next `count` requests of `route` are dropped unprocessed.
    pub fn drop_connection(&self, route: &str, count: usize) {
        self.apply(FaultRequest::DropConnection {
            route: route.into(),
            count,
        });
    }

    /// The next `count` requests of `route` take effect, then the connection drops.
    pub fn drop_after_commit(&self, route: &str, count: usize) {
        self.apply(FaultRequest::DropAfterCommit {
            route: route.into(),
            count,
        });
    }

    /// The next `count` requests of `route` take effect, then the answer is held.
    pub fn delay_after_commit(&self, route: &str, count: usize, delay: Duration) {
        let millis = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.apply(FaultRequest::DelayAfterCommit {
            route: route.into(),
            count,
            millis,
        });
    }

    /// Creating `flavor` (name or ID) in `zone` fails with insufficient capacity.
    pub fn capacity_error(&self, flavor: &str, zone: &str) {
        self.apply(FaultRequest::CapacityError {
            flavor: flavor.into(),
            zone: zone.into(),
        });
    }

    pub fn clear_capacity_error(&self, flavor: &str, zone: &str) {
        self.apply(FaultRequest::ClearCapacityError {
            flavor: flavor.into(),
            zone: zone.into(),
        });
    }

    /// Instances whose name contains `name_contains` ("" = all) stay in BUILD.
    pub fn stuck_in_build(&self, name_contains: &str) {
        self.apply(FaultRequest::StuckInBuild {
            name_contains: name_contains.into(),
        });
    }

    /// Instances whose name contains `name_contains` ("" = all) go to ERROR.
    pub fn go_to_error(&self, name_contains: &str) {
        self.apply(FaultRequest::GoToError {
            name_contains: name_contains.into(),
        });
    }

    /// Lists leave out instances younger than `lag` (zero removes the fault).
    pub fn list_lag(&self, lag: Duration) {
        self.apply(FaultRequest::ListLag {
            millis: u64::try_from(lag.as_millis()).unwrap_or(u64::MAX),
        });
    }

    pub(crate) fn list_lag_of(&self) -> Duration {
        self.lock().list_lag
    }

    /// Removes every fault.
    pub fn clear(&self) {
        self.apply(FaultRequest::Clear);
    }

    pub(crate) fn latency_of(&self, route: &str) -> Duration {
        let s = self.lock();
        s.latency
            .get(route)
            .or_else(|| s.latency.get(ANY_ROUTE))
            .copied()
            .unwrap_or(Duration::ZERO)
    }

    /// Takes the next queued fault of `route` (route-specific first).
    pub(crate) fn take(&self, route: &str) -> Option<Queued> {
        let mut s = self.lock();
        for key in [route, ANY_ROUTE] {
            if let Some(fault) = s.queued.get_mut(key).and_then(VecDeque::pop_front) {
                return Some(fault);
            }
        }
        None
    }

    pub(crate) fn capacity_blocked(&self, flavor_id: &str, flavor_name: &str, zone: &str) -> bool {
        let s = self.lock();
        [flavor_id, flavor_name]
            .iter()
            .any(|f| s.capacity.contains(&(f.to_string(), zone.to_string())))
    }

    pub(crate) fn is_stuck(&self, name: &str) -> bool {
        self.lock().stuck.iter().any(|n| name.contains(n.as_str()))
    }

    pub(crate) fn goes_to_error(&self, name: &str) -> bool {
        self.lock().error.iter().any(|n| name.contains(n.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_faults_are_consumed_in_order_route_first() {
        let f = Faults::default();
        f.server_error(ANY_ROUTE, 1, 502);
        f.throttle("a", 1, Duration::from_millis(5));
        assert_eq!(
            f.take("a"),
            Some(Queued::Throttle(Duration::from_millis(5)))
        );
        assert_eq!(f.take("a"), Some(Queued::ServerError(502)));
        assert_eq!(f.take("a"), None);
    }

    #[test]
    fn admin_json_round_trips() {
        let req: FaultRequest = serde_json::from_str(
            r#"{"kind":"throttle","route":"iam.token","count":2,"retry_after_millis":100}"#,
        )
        .unwrap();
        assert_eq!(
            req,
            FaultRequest::Throttle {
                route: "iam.token".into(),
                count: 2,
                retry_after_millis: 100
            }
        );
    }
}
