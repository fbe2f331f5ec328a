//! Pod predicates shared by provisioning, disruption and termination: which pods Karpenter
//! provisions for, which hold their node, which a PodDisruptionBudget protects right now.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PodAffinityTerm;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube_core::ResourceExt;

use crate::cached_pod::CachedPod;
use crate::names::{annotation, label};

/// Upstream's "effective zone" of a pending pod (`scheduler_pending_pods_by_effective_zone_count`):
/// the one zone its node selector and required node affinity allow, `flexible` when they allow
/// several or say nothing, `none` when they allow none. Unlike upstream, topology spread and
/// volume zones are not intersected in.
pub fn effective_zone(pod: &CachedPod) -> String {
    let spec = pod.spec.as_ref();
    let mut allowed: Option<BTreeSet<String>> = spec
        .and_then(|s| s.node_selector.as_ref())
        .and_then(|sel| sel.get(label::ZONE))
        .map(|z| BTreeSet::from([z.clone()]));
    let terms = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default();
    // Terms are ORed: the union of their zones, unless one leaves the zone open.
    let mut union: Option<BTreeSet<String>> = (!terms.is_empty()).then(BTreeSet::new);
    for term in terms {
        let zones = term
            .match_expressions
            .iter()
            .flatten()
            .filter(|e| e.key == label::ZONE && e.operator == "In")
            .map(|e| e.values.iter().flatten().cloned().collect::<BTreeSet<_>>())
            .reduce(|a, b| a.intersection(&b).cloned().collect());
        match (zones, union.as_mut()) {
            (Some(z), Some(u)) => u.extend(z),
            (None, _) => {
                union = None;
                break;
            }
            _ => {}
        }
    }
    if let Some(u) = union {
        allowed = Some(match allowed {
            Some(a) => a.intersection(&u).cloned().collect(),
            None => u,
        });
    }
    match allowed {
        None => "flexible".into(),
        Some(z) if z.is_empty() => "none".into(),
        Some(z) if z.len() == 1 => z.into_iter().next().unwrap_or_default(),
        Some(_) => "flexible".into(),
    }
}

/// Whether `pod` still waits for a node: not bound, and not being deleted.
pub fn awaits_node(pod: &CachedPod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .spec
            .as_ref()
            .is_some_and(|s| s.node_name.as_deref().is_none_or(str::is_empty))
}

/// Whether kube-scheduler gave up on `pod` and Karpenter should find it a node
/// (upstream `IsProvisionable`).
pub fn is_provisionable(pod: &CachedPod) -> bool {
    if !awaits_node(pod) {
        return false;
    }
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    let pending = status.phase.as_deref().is_none_or(|p| p == "Pending");
    let not_preempting = status
        .nominated_node_name
        .as_deref()
        .is_none_or(str::is_empty);
    let unschedulable = status.conditions.iter().flatten().any(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    });
    let owned_by_daemon_or_node = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet" || o.kind == "Node");
    pending && not_preempting && unschedulable && !owned_by_daemon_or_node
}

/// Whether the pod's `karpenter.sh/do-not-disrupt` annotation holds it at `now`: `"true"`
/// always; a duration (`"30m"`, `"1h30m"`) until that long after the pod started (from its
/// creation while it has no start time); any other value never (as upstream).
pub fn do_not_disrupt(pod: &CachedPod, now: Timestamp) -> bool {
    let Some(value) = pod.annotations().get(annotation::DO_NOT_DISRUPT) else {
        return false;
    };
    if value == "true" {
        return true;
    }
    let Ok(hold) = crate::crd::duration::parse_duration(value) else {
        return false;
    };
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .or(pod.metadata.creation_timestamp.as_ref());
    let Some(started) = started else {
        return true;
    };
    let held = now.duration_since(started.0);
    held.is_negative() || held.unsigned_abs() < hold
}

/// Owned by a DaemonSet: drains leave it, simulations count it as node overhead.
pub fn is_daemonset_pod(pod: &CachedPod) -> bool {
    pod.owner_references().iter().any(|o| o.kind == "DaemonSet")
}

/// A static pod's mirror: the kubelet owns it, the API cannot evict it.
pub fn is_mirror_pod(pod: &CachedPod) -> bool {
    pod.annotations().contains_key(annotation::MIRROR_POD)
}

/// Succeeded or Failed: it holds nothing on its node.
pub fn is_terminal(pod: &CachedPod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Whether `selector` selects `labels`. A missing selector selects nothing (a PDB without one
/// protects no pod); an empty one selects everything.
pub fn selects(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    let Some(sel) = selector else { return false };
    let labels_ok = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let exprs_ok = sel.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let values = e.values.clone().unwrap_or_default();
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    labels_ok && exprs_ok
}

/// The pod's required anti-affinity terms: every pod a term selects must keep out of the pod's
/// domain (kube-scheduler checks them for each incoming pod).
pub fn required_anti_affinity(pod: &CachedPod) -> &[PodAffinityTerm] {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref()?.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_deref()
        })
        .unwrap_or_default()
}

/// A PodDisruptionBudget covering `pod` allows no disruption now.
pub fn pdb_blocked<'a>(
    pod: &CachedPod,
    pdbs: impl IntoIterator<Item = &'a PodDisruptionBudget>,
) -> bool {
    let ns = pod.namespace().unwrap_or_default();
    pdbs.into_iter()
        .filter(|p| p.namespace().as_deref() == Some(ns.as_str()))
        .any(|p| {
            let allowed = p.status.as_ref().map_or(0, |s| s.disruptions_allowed);
            allowed <= 0
                && selects(
                    p.spec.as_ref().and_then(|s| s.selector.as_ref()),
                    pod.labels(),
                )
        })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;

    #[test]
    fn effective_zone_is_the_one_zone_a_pod_allows() {
        let pod = |spec: serde_json::Value| -> CachedPod {
            serde_json::from_value::<Pod>(
                serde_json::json!({"metadata": {"name": "p"}, "spec": spec}),
            )
            .unwrap()
            .into()
        };
        let containers = serde_json::json!([{"name": "c"}]);
        let affinity = |terms: serde_json::Value| serde_json::json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}});
        let zone_in = |zones: &[&str]| serde_json::json!({"matchExpressions": [{"key": label::ZONE, "operator": "In", "values": zones}]});
        assert_eq!(
            effective_zone(&pod(serde_json::json!({"containers": containers}))),
            "flexible"
        );
        let selected = serde_json::json!({"containers": containers, "nodeSelector": {label::ZONE: "kr-central-2-a"}});
        assert_eq!(effective_zone(&pod(selected)), "kr-central-2-a");
        let two = serde_json::json!({"containers": containers, "affinity": affinity(serde_json::json!([zone_in(&["a", "b"])]))});
        assert_eq!(effective_zone(&pod(two)), "flexible");
        let one = serde_json::json!({"containers": containers, "affinity": affinity(serde_json::json!([zone_in(&["a", "b"])])), "nodeSelector": {label::ZONE: "b"}});
        assert_eq!(effective_zone(&pod(one)), "b");
        let none = serde_json::json!({"containers": containers, "affinity": affinity(serde_json::json!([zone_in(&["a"])])), "nodeSelector": {label::ZONE: "b"}});
        assert_eq!(effective_zone(&pod(none)), "none");
        let open = serde_json::json!({"containers": containers, "affinity": affinity(serde_json::json!([zone_in(&["a"]), {"matchExpressions": []}]))});
        assert_eq!(effective_zone(&pod(open)), "flexible");
    }

    fn pod(annotation: &str, started: &str) -> CachedPod {
        serde_json::from_value::<Pod>(serde_json::json!({
            "metadata": {"name": "p", "annotations": {annotation::DO_NOT_DISRUPT: annotation},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"startTime": started},
        }))
        .unwrap()
        .into()
    }

    #[test]
    fn do_not_disrupt_is_true_or_a_duration_from_the_pod_start() {
        let at = |t: &str| t.parse::<Timestamp>().unwrap();
        let started = "2026-01-01T00:10:00Z";
        assert!(do_not_disrupt(
            &pod("true", started),
            at("2027-01-01T00:00:00Z")
        ));
        let thirty = pod("30m", started);
        assert!(do_not_disrupt(&thirty, at("2026-01-01T00:39:59Z")));
        assert!(!do_not_disrupt(&thirty, at("2026-01-01T00:40:00Z")));
        assert!(do_not_disrupt(
            &pod("1h30m", started),
            at("2026-01-01T01:00:00Z")
        ));
        assert!(!do_not_disrupt(
            &pod("false", started),
            at("2026-01-01T00:10:00Z")
        ));
        assert!(!do_not_disrupt(
            &pod("soon", started),
            at("2026-01-01T00:10:00Z")
        ));
    }
}
