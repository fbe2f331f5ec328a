//! What draining a node means for each of its pods, as a pure function of the pods and the time,
//! so the rules (daemonsets stay, mirror pods stay, `do-not-disrupt` holds until the grace period
//! ends, then everything left is deleted) are unit-tested without an API server.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kk_apis::pod::{do_not_disrupt, is_daemonset_pod, is_mirror_pod, is_terminal};
use kube::ResourceExt;

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
}

impl DrainStep {
    /// Nothing left that the node must wait for.
    pub fn is_done(&self) -> bool {
        self.evict.is_empty()
            && self.delete.is_empty()
            && self.held.is_empty()
            && self.terminating == 0
    }
}

/// The next step for `pods` (those bound to the node). `deadline` is when the NodeClaim's
/// terminationGracePeriod ends (`None`: never), after which what is left is deleted.
pub fn step(pods: &[Pod], now: Timestamp, deadline: Option<Timestamp>) -> DrainStep {
    let expired = deadline.is_some_and(|d| now >= d);
    let mut out = DrainStep::default();
    for pod in pods {
        if is_daemonset_pod(pod) || is_mirror_pod(pod) || is_terminal(pod) {
            continue;
        }
        if pod.metadata.deletion_timestamp.is_some() {
            out.terminating += 1;
            continue;
        }
        let r = PodRef {
            namespace: pod.namespace().unwrap_or_default(),
            name: pod.name_any(),
        };
        if expired {
            out.delete.push(r);
        } else if do_not_disrupt(pod) {
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

    fn pod(name: &str, extra: serde_json::Value) -> Pod {
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
    fn daemonsets_mirrors_and_finished_pods_stay() {
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
    fn terminating_pods_are_waited_for() {
        let mut going = pod("going", json!({}));
        going.metadata.deletion_timestamp = Some(Time(at(5)));
        let s = step(&[going], at(10), None);
        assert_eq!(s.terminating, 1);
        assert!(!s.is_done());
        assert!(step(&[], at(10), None).is_done());
    }
}
