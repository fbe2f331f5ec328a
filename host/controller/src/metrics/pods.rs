//! Pod latencies (upstream's `metrics/pod` controller): every [`INTERVAL`] the pods in the shared
//! state are compared with the last look, and each pod observed once per transition:
//! - bound: `pods_bound_duration_seconds` (creation → `PodScheduled`);
//! - running and ready: `pods_startup_duration_seconds` (creation → `Ready`);
//! - for pods this replica first saw unbound ("Karpenter first thinks the pod can schedule"),
//!   `pods_provisioning_bound_duration_seconds`, `pods_provisioning_startup_duration_seconds`
//!   and `pods_scheduling_decision_duration_seconds` (first seen → nominated by provisioning).
//!
//! The same pass sets, for each such pod still waiting, how long it has waited since first seen:
//! `pods_provisioning_unbound_time_seconds`, `pods_provisioning_unstarted_time_seconds` and
//! `pods_provisioning_scheduling_undecided_time_seconds` (one series per pod, gone with it).
//!
//! Invariants: a pod is observed at most once per histogram; pods already bound or ready when
//! the replica starts are not observed (their transition happened before it looked); the
//! times come from the pod's own conditions, so a 5 s pass does not blur them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use kk_apis::cached_pod::CachedPod;

use super::{Metrics, PodLabels};
use crate::state::ClusterState;

pub const INTERVAL: Duration = Duration::from_secs(5);

/// What was already observed of one pod.
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    /// When this replica first saw it unbound (it is then a provisioning pod).
    pending_since: Option<Instant>,
    decided: bool,
    bound: bool,
    started: bool,
}

/// When condition `type_` of `pod` turned True, if it is True.
fn became_true(pod: &CachedPod, type_: &str) -> Option<Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map(|c| {
            c.last_transition_time
                .as_ref()
                .map_or_else(Timestamp::now, |t| t.0)
        })
}

fn seconds(from: Timestamp, to: Timestamp) -> f64 {
    to.duration_since(from).as_secs_f64().max(0.0)
}

/// The tracker; [`PodLatencies::run`] drives it.
pub struct PodLatencies {
    pub state: ClusterState,
    pub metrics: Arc<Metrics>,
    seen: HashMap<String, Seen>,
}

impl PodLatencies {
    pub fn new(state: ClusterState, metrics: Arc<Metrics>) -> Self {
        PodLatencies {
            state,
            metrics,
            seen: HashMap::new(),
        }
    }

    pub async fn run(mut self) {
        self.pass(true);
        loop {
            tokio::time::sleep(INTERVAL).await;
            self.pass(false);
        }
    }

    /// One look at every pod; `first` only records what is already done.
    fn pass(&mut self, first: bool) {
        let pods = self.state.pods.state();
        let mut next = HashMap::with_capacity(pods.len());
        for pod in &pods {
            let Some(uid) = pod.metadata.uid.clone() else {
                continue;
            };
            let mut seen = self.seen.get(&uid).copied().unwrap_or_default();
            if first {
                seen.bound = became_true(pod, "PodScheduled").is_some();
                seen.started = became_true(pod, "Ready").is_some();
                seen.decided = seen.bound;
            }
            self.observe(pod, &uid, &mut seen);
            next.insert(uid, seen);
        }
        // Pods that are gone are forgotten.
        self.seen = next;
        self.set_waiting(&pods);
    }

    /// The per-pod waiting gauges of the provisioning pods still waiting.
    fn set_waiting(&self, pods: &[Arc<CachedPod>]) {
        let m = &self.metrics;
        m.pods_provisioning_unbound_time.clear();
        m.pods_provisioning_unstarted_time.clear();
        m.pods_provisioning_undecided_time.clear();
        for pod in pods {
            let Some(seen) = pod.metadata.uid.as_ref().and_then(|u| self.seen.get(u)) else {
                continue;
            };
            let Some(since) = seen.pending_since else {
                continue;
            };
            let waited = since.elapsed().as_secs_f64();
            let labels = PodLabels {
                name: pod.metadata.name.clone().unwrap_or_default(),
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            };
            for (waiting, family) in [
                (!seen.bound, &m.pods_provisioning_unbound_time),
                (!seen.started, &m.pods_provisioning_unstarted_time),
                (!seen.decided, &m.pods_provisioning_undecided_time),
            ] {
                if waiting {
                    family.get_or_create(&labels).set(waited);
                }
            }
        }
    }

    fn observe(&self, pod: &CachedPod, uid: &str, seen: &mut Seen) {
        let m = &self.metrics;
        let bound_node = pod.spec.as_ref().and_then(|s| s.node_name.as_ref());
        if bound_node.is_none() && seen.pending_since.is_none() && !seen.bound {
            seen.pending_since = Some(Instant::now());
        }
        let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let since_pending = |at: Timestamp| {
            seen.pending_since.map(|p| {
                let waited = p.elapsed().as_secs_f64();
                // From first seen to `at`: `at` is at most now.
                (waited - seconds(at, Timestamp::now())).max(0.0)
            })
        };
        if !seen.decided && self.state.nomination_of(uid).is_some() {
            seen.decided = true;
            if let Some(p) = seen.pending_since {
                m.pods_scheduling_decision_duration
                    .observe(p.elapsed().as_secs_f64());
            }
        }
        if !seen.bound
            && let Some(at) = became_true(pod, "PodScheduled")
        {
            seen.bound = true;
            if let Some(c) = created {
                m.pods_bound_duration.observe(seconds(c, at));
            }
            if let Some(s) = since_pending(at) {
                m.pods_provisioning_bound_duration.observe(s);
            }
        }
        if !seen.started
            && let Some(at) = became_true(pod, "Ready")
        {
            seen.started = true;
            if let Some(c) = created {
                m.pods_startup_duration.observe("", seconds(c, at));
            }
            if let Some(s) = since_pending(at) {
                m.pods_provisioning_startup_duration.observe(s);
            }
        }
    }
}
