//! What draining a node means for each of its pods, as a pure function of the pods and the time,
//! so the rules are unit-tested without an API server:
//! - mirror pods, finished pods and pods that tolerate the `karpenter.sh/disrupted` taint stay
//!   (the last would be scheduled straight back);
//! - the rest go in upstream's order, one group at a time, each only once the groups before it
//!   are gone: non-critical pods, non-critical DaemonSet pods, critical pods
//!   (`system-cluster-critical` / `system-node-critical`), critical DaemonSet pods;
//! - `do-not-disrupt` holds a pod until the grace period ends, then everything left is deleted;
//! - within a step, the largest pods (CPU, then memory) are evicted first. Consolidation packs
//!   the moved pods largest first, and kube-scheduler favours the emptiest node (a fresh
//!   replacement): evicted smallest first, small pods took the room the plan kept for a large
//!   one, which then needed a new node.

use jiff::Timestamp;
use kk_apis::cached_pod::CachedPod;
use kk_apis::names::taint;
use kk_apis::pod::{do_not_disrupt, is_daemonset_pod, is_mirror_pod, is_terminal};
use kk_engine::scheduling::resources::{Dim, pod_requests};
use kube::ResourceExt;

/// How long past its deletion time a terminating pod is waited for.
const STUCK_TERMINATING: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);

/// Priority classes upstream drains last.
const CRITICAL: [&str; 2] = ["system-cluster-critical", "system-node-critical"];

/// The pod's drain group: lower groups go first.
fn group(pod: &CachedPod) -> u8 {
    let critical = pod
        .spec
        .as_ref()
        .and_then(|s| s.priority_class_name.as_deref())
        .is_some_and(|c| CRITICAL.contains(&c));
    u8::from(critical) * 2 + u8::from(is_daemonset_pod(pod))
}

/// A pod's CPU and memory requests, the order consolidation packs pods in.
fn size(pod: &CachedPod) -> (u64, u64) {
    pod.spec
        .as_ref()
        .and_then(|s| pod_requests(s).ok())
        .map_or((0, 0), |r| (r.get(Dim::CpuMillis), r.get(Dim::MemoryBytes)))
}

/// The API server's default `terminationGracePeriodSeconds`.
const DEFAULT_POD_GRACE_SECONDS: i64 = 30;

/// The pod's `terminationGracePeriodSeconds` (the API's default when unset), in seconds.
pub fn grace_seconds(pod: &CachedPod) -> i64 {
    pod.spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(DEFAULT_POD_GRACE_SECONDS)
        .max(0)
}

fn grace_period(pod: &CachedPod) -> jiff::SignedDuration {
    jiff::SignedDuration::from_secs(grace_seconds(pod))
}

/// Whether the pod tolerates the taint a draining node carries (it would be scheduled back).
fn tolerates_disrupted(pod: &CachedPod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .into_iter()
        .flatten()
        .any(|t| {
            let effect_ok = t
                .effect
                .as_deref()
                .is_none_or(|e| e.is_empty() || e == "NoSchedule");
            let key_ok = match t.key.as_deref().filter(|k| !k.is_empty()) {
                None => t.operator.as_deref() == Some("Exists"),
                Some(k) => k == taint::DISRUPTED,
            };
            effect_ok && key_ok
        })
}

/// `namespace/name` of a pod to act on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One drain step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainStep {
    /// Evict through the Eviction API (PodDisruptionBudgets apply).
    pub evict: Vec<PodRef>,
    /// Delete outright: the NodeClaim's terminationGracePeriod is over.
    pub delete: Vec<PodRef>,
    /// Held by `karpenter.sh/do-not-disrupt` until the grace period ends.
    pub held: Vec<PodRef>,
    /// Already terminating; the node waits for them to go.
    pub terminating: usize,
    /// In a later drain group: evicted once the earlier groups are gone.
    pub waiting: usize,
}

impl DrainStep {
    /// Nothing left that the node must wait for.
    pub fn is_done(&self) -> bool {
        self.evict.is_empty()
            && self.delete.is_empty()
            && self.held.is_empty()
            && self.terminating == 0
            && self.waiting == 0
    }
}

/// The next step for `pods` (those bound to the node). `deadline` is when the NodeClaim's
/// terminationGracePeriod ends (`None`: never), after which what is left is deleted.
pub fn step(pods: &[CachedPod], now: Timestamp, deadline: Option<Timestamp>) -> DrainStep {
    let expired = deadline.is_some_and(|d| now >= d);
    let mut out = DrainStep::default();
    let mut drained: Vec<&CachedPod> = pods
        .iter()
        .filter(|p| !is_mirror_pod(p) && !is_terminal(p) && !tolerates_disrupted(p))
        .collect();
    drained.sort_by_cached_key(|p| std::cmp::Reverse(size(p)));
    // The first group with pods left acts; later groups wait for it (all go once expired).
    let current = drained.iter().map(|p| group(p)).min().unwrap_or(0);
    for pod in drained {
        if let Some(deleted) = &pod.metadata.deletion_timestamp {
            // Upstream ignores a pod still terminating a minute past its grace period: its
            // kubelet is gone, and nothing will ever confirm the deletion.
            let stuck = deleted
                .0
                .checked_add(STUCK_TERMINATING)
                .is_ok_and(|t| now > t);
            if !stuck {
                out.terminating += 1;
            }
            continue;
        }
        // Deleted early enough to get its whole grace period before the node's deadline
        // (upstream's `DeleteExpiringPods`), whatever its group.
        let due = expired
            || deadline
                .and_then(|d| d.checked_sub(grace_period(pod)).ok())
                .is_some_and(|t| now >= t);
        if !due && group(pod) != current {
            out.waiting += 1;
            continue;
        }
        let r = PodRef {
            namespace: pod.namespace().unwrap_or_default(),
            name: pod.name_any(),
        };
        if due {
            out.delete.push(r);
        } else if do_not_disrupt(pod, now) {
            out.held.push(r);
        } else {
            out.evict.push(r);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use kk_apis::names::annotation;
    use serde_json::json;

    fn pod(name: &str, extra: serde_json::Value) -> CachedPod {
        let mut v =
            json!({"metadata": {"name": name, "namespace": "ns"}, "spec": {"containers": []}});
        if let (Some(m), Some(e)) = (v["metadata"].as_object_mut(), extra.as_object()) {
            for (k, val) in e {
                m.insert(k.clone(), val.clone());
            }
        }
        serde_json::from_value(v).unwrap()
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn groups_drain_in_upstreams_order() {
        let ds_owner = || {
            Some(vec![OwnerReference {
                kind: "DaemonSet".into(),
                name: "agent".into(),
                api_version: "apps/v1".into(),
                uid: "u".into(),
                ..Default::default()
            }])
        };
        let critical = |name: &str| {
            let mut p = pod(name, json!({}));
            std::sync::Arc::make_mut(p.spec.as_mut().unwrap()).priority_class_name =
                Some("system-node-critical".into());
            p
        };
        let web = pod("web", json!({}));
        let mut agent = pod("agent", json!({}));
        agent.metadata.owner_references = ds_owner();
        let dns = critical("dns");
        let mut csi = critical("csi");
        csi.metadata.owner_references = ds_owner();
        let all = [csi.clone(), dns.clone(), agent.clone(), web.clone()];
        let names = |s: &DrainStep| s.evict.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
        let s = step(&all, at(0), None);
        assert_eq!(names(&s), ["web"]);
        assert_eq!(s.waiting, 3);
        let s = step(&[csi.clone(), dns.clone(), agent.clone()], at(0), None);
        assert_eq!(names(&s), ["agent"]);
        let s = step(&[csi.clone(), dns.clone()], at(0), None);
        assert_eq!(names(&s), ["dns"]);
        let s = step(std::slice::from_ref(&csi), at(0), None);
        assert_eq!(names(&s), ["csi"]);
        // A terminating pod of an earlier group still holds the later ones back.
        let mut going = web.clone();
        going.metadata.deletion_timestamp = Some(Time(at(0)));
        let s = step(&[going, dns.clone()], at(1), None);
        assert!(s.evict.is_empty());
        assert_eq!((s.terminating, s.waiting), (1, 1));
        // Past the grace period everything left goes at once.
        let s = step(&all, at(10), Some(at(5)));
        assert_eq!(s.delete.len(), 4);
    }

    #[test]
    fn the_largest_pods_are_evicted_first() {
        let sized = |name: &str, cpu: &str, memory: &str| {
            let mut p = pod(name, json!({}));
            std::sync::Arc::make_mut(p.spec.as_mut().unwrap()).containers = vec![
                serde_json::from_value(json!({"name": "c",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}}}))
                .unwrap(),
            ];
            p
        };
        let pods = [
            sized("small", "250m", "512Mi"),
            pod("no-requests", json!({})),
            sized("large", "1500m", "4Gi"),
            sized("medium", "1", "2Gi"),
            sized("medium-more-memory", "1", "4Gi"),
        ];
        let s = step(&pods, at(0), None);
        let names: Vec<&str> = s.evict.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "large",
                "medium-more-memory",
                "medium",
                "small",
                "no-requests"
            ]
        );
    }

    #[test]
    fn pods_that_tolerate_the_disrupted_taint_stay() {
        let mut agent = pod("agent", json!({}));
        std::sync::Arc::make_mut(agent.spec.as_mut().unwrap()).tolerations =
            Some(vec![k8s_openapi::api::core::v1::Toleration {
                operator: Some("Exists".into()),
                ..Default::default()
            }]);
        let s = step(&[agent], at(0), None);
        assert!(s.is_done(), "{s:?}");
    }

    #[test]
    fn mirrors_and_finished_pods_stay_and_daemonsets_wait() {
        let mut ds = pod("ds", json!({}));
        ds.metadata.owner_references = Some(vec![OwnerReference {
            kind: "DaemonSet".into(),
            name: "agent".into(),
            api_version: "apps/v1".into(),
            uid: "u".into(),
            ..Default::default()
        }]);
        let mirror = pod(
            "static",
            json!({"annotations": {annotation::MIRROR_POD: "x"}}),
        );
        let mut done = pod("job", json!({}));
        done.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        });
        let web = pod("web", json!({}));
        let s = step(&[ds, mirror, done, web], at(0), None);
        assert_eq!(
            s.evict,
            vec![PodRef {
                namespace: "ns".into(),
                name: "web".into()
            }]
        );
        assert!(s.delete.is_empty() && s.held.is_empty());
        assert_eq!(s.waiting, 1, "the DaemonSet pod goes after web");
        assert!(!s.is_done());
    }

    #[test]
    fn do_not_disrupt_holds_until_the_grace_period_ends() {
        let held = pod(
            "db",
            json!({"annotations": {annotation::DO_NOT_DISRUPT: "true"}}),
        );
        let s = step(std::slice::from_ref(&held), at(10), Some(at(100)));
        assert_eq!(s.held.len(), 1);
        assert!(s.evict.is_empty());
        let s = step(std::slice::from_ref(&held), at(100), Some(at(100)));
        assert_eq!(
            s.delete.len(),
            1,
            "after terminationGracePeriod the pod is deleted"
        );
        let s = step(&[held], at(1_000_000), None);
        assert_eq!(s.held.len(), 1, "no grace period: held for good");
    }

    #[test]
    fn pods_are_deleted_early_enough_to_get_their_grace_period_before_the_deadline() {
        let mut slow = pod("slow", json!({}));
        std::sync::Arc::make_mut(slow.spec.as_mut().unwrap()).termination_grace_period_seconds =
            Some(60);
        let quick = pod("quick", json!({}));
        let deadline = Some(at(100));
        let s = step(&[slow.clone(), quick.clone()], at(39), deadline);
        assert_eq!(s.evict.len(), 2, "both still evicted: {s:?}");
        let s = step(&[slow.clone(), quick.clone()], at(40), deadline);
        assert_eq!(
            s.delete.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            ["slow"]
        );
        assert_eq!(s.evict.len(), 1);
        // The default 30 s grace period is honoured too.
        let s = step(&[slow, quick], at(70), deadline);
        assert_eq!(s.delete.len(), 2);
    }

    #[test]
    fn terminating_pods_are_waited_for() {
        let mut going = pod("going", json!({}));
        going.metadata.deletion_timestamp = Some(Time(at(5)));
        let s = step(&[going], at(10), None);
        assert_eq!(s.terminating, 1);
        assert!(!s.is_done());
        assert!(step(&[], at(10), None).is_done());
        // A minute past its deletion time it is stuck (its kubelet is gone): not waited for.
        let mut stuck = pod("stuck", json!({}));
        stuck.metadata.deletion_timestamp = Some(Time(at(5)));
        assert!(step(&[stuck], at(66), None).is_done());
    }
}
