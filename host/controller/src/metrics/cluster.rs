//! Gauges read from the shared cluster state when Prometheus scrapes: upstream's `metrics/node`,
//! `metrics/nodepool`, `metrics/pod` and `state` controllers refresh theirs every 5 s; reading
//! the watch caches on each scrape gives the same values, and a node or pod that is gone simply
//! has no series (nothing to forget to delete).
//!
//! Invariants:
//! - every node gauge of one node carries the same label names and values (upstream's dashboards
//!   add and divide them one-to-one), built by [`node_labels`];
//! - label names are upstream's: a well-known label key's part after `/`, lower-cased, `-` → `_`.

use std::collections::BTreeMap;
use std::sync::RwLock;

use k8s_openapi::api::core::v1::{Node, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;

use crate::state::ClusterState;
use kk_apis::names::label;
use kk_apis::pod::{is_daemonset_pod, is_terminal};
use kk_engine::scheduling::resources::{parse_milli, pod_requests};

/// The node label keys that become metric labels: upstream's well-known labels (without the
/// hostname, which upstream does not list) and this provider's instance labels, as AWS adds its.
pub const NODE_LABEL_KEYS: [&str; 14] = [
    label::NODEPOOL,
    label::ZONE,
    label::REGION,
    label::INSTANCE_TYPE,
    label::ARCH,
    label::OS,
    label::CAPACITY_TYPE,
    label::WINDOWS_BUILD,
    label::INSTANCE_FAMILY,
    label::INSTANCE_SIZE,
    label::INSTANCE_CPU,
    label::INSTANCE_MEMORY,
    label::INSTANCE_GPU_COUNT,
    label::INSTANCE_GPU_NAME,
];

type Labels = Vec<(String, String)>;

/// Upstream's metric label name for a label key: `topology.kubernetes.io/zone` → `zone`.
pub fn metric_label_name(key: &str) -> String {
    key.rsplit('/')
        .next()
        .unwrap_or(key)
        .to_lowercase()
        .replace('-', "_")
}

/// Upstream's `resource_type` value: `ephemeral-storage` → `ephemeral_storage`.
fn resource_type(name: &str) -> String {
    name.to_lowercase().replace('-', "_")
}

/// A quantity in its unit (cores for CPU, bytes for memory), as upstream's gauges carry it.
fn amount(q: &Quantity) -> Option<f64> {
    parse_milli(&q.0).map(|m| m as f64 / 1000.0)
}

fn amounts(list: Option<&BTreeMap<String, Quantity>>) -> BTreeMap<String, f64> {
    list.into_iter()
        .flatten()
        .filter_map(|(k, q)| Some((k.clone(), amount(q)?)))
        .collect()
}

/// The labels every node gauge of `node` carries (before `resource_type`).
pub fn node_labels(node: &Node, managed: bool) -> Labels {
    let labels = node.labels();
    let mut out: Labels = NODE_LABEL_KEYS
        .iter()
        .map(|k| {
            (
                metric_label_name(k),
                labels.get(*k).cloned().unwrap_or_default(),
            )
        })
        .collect();
    out.push(("node_name".into(), node.name_any()));
    let phase = node.status.as_ref().and_then(|s| s.phase.clone());
    out.push(("phase".into(), phase.unwrap_or_default()));
    out.push(("managed".into(), managed.to_string()));
    out
}

/// A pod's requests by resource name, as kube-scheduler counts them (one `pods` slot each).
fn requests_of(spec: &PodSpec) -> BTreeMap<String, f64> {
    let Ok(r) = pod_requests(spec) else {
        return BTreeMap::new();
    };
    r.named()
        .map(|(name, v)| {
            let v = if name == kk_engine::scheduling::resources::CPU {
                v as f64 / 1000.0
            } else {
                v as f64
            };
            (name.to_string(), v)
        })
        .collect()
}

/// A pod's limits by resource name: the containers' sum, or the largest init container's.
fn limits_of(spec: &PodSpec) -> BTreeMap<String, f64> {
    let of = |c: &k8s_openapi::api::core::v1::Container| {
        amounts(c.resources.as_ref().and_then(|r| r.limits.as_ref()))
    };
    let mut total: BTreeMap<String, f64> = BTreeMap::new();
    for c in &spec.containers {
        add_into(&mut total, &of(c));
    }
    for c in spec.init_containers.iter().flatten() {
        for (k, v) in of(c) {
            let slot = total.entry(k).or_default();
            *slot = slot.max(v);
        }
    }
    add_into(&mut total, &amounts(spec.overhead.as_ref()));
    total
}

fn add_into(total: &mut BTreeMap<String, f64>, more: &BTreeMap<String, f64>) {
    for (k, v) in more {
        *total.entry(k.clone()).or_default() += v;
    }
}

/// The families this collector exports (name under the `karpenter` prefix, help).
pub const FAMILIES: [(&str, &str); 16] = [
    (
        "nodes_allocatable",
        "Node allocatable are the resources allocatable by nodes.",
    ),
    (
        "nodes_system_overhead",
        "Node system daemon overhead are the resources reserved for system overhead, the difference between the node's capacity and allocatable values are reported by the status.",
    ),
    (
        "nodes_total_pod_requests",
        "Node total pod requests are the resources requested by pods bound to nodes, including the DaemonSet pods.",
    ),
    (
        "nodes_total_pod_limits",
        "Node total pod limits are the resources specified by pod limits, including the DaemonSet pods.",
    ),
    (
        "nodes_total_daemon_requests",
        "Node total daemon requests are the resource requested by DaemonSet pods bound to nodes.",
    ),
    (
        "nodes_total_daemon_limits",
        "Node total daemon limits are the resources specified by DaemonSet pod limits.",
    ),
    ("nodes_current_lifetime_seconds", "Node age in seconds"),
    (
        "cluster_utilization_percent",
        "Utilization of allocatable resources by pod requests",
    ),
    (
        "cluster_state_node_count",
        "Current count of nodes in cluster state",
    ),
    (
        "cluster_state_synced",
        "Returns 1 if cluster state is synced and 0 otherwise. Synced checks that nodeclaims and nodes that are stored in the APIServer have the same representation as Karpenter's cluster state",
    ),
    (
        "cluster_state_unsynced_time_seconds",
        "The time for which cluster state is not synced",
    ),
    (
        "nodepools_usage",
        "The amount of resources that have been provisioned for a nodepool. Labeled by nodepool name and resource type.",
    ),
    (
        "nodepools_limit",
        "Limits specified on the nodepool that restrict the quantity of resources provisioned. Labeled by nodepool name and resource type.",
    ),
    (
        "pods_state",
        "Pod state is the current state of pods. This metric can be used several ways as it is labeled by the pod name, namespace, owner, node, nodepool name, zone, architecture, capacity type, instance type and pod phase.",
    ),
    (
        "pods_unbound_time_seconds",
        "The time from pod creation until the pod is bound.",
    ),
    (
        "pods_unstarted_time_seconds",
        "The time from pod creation until the pod is running.",
    ),
];

/// One gauge series.
struct Series {
    labels: Labels,
    value: f64,
}

/// The gauges of one family, gathered before encoding.
#[derive(Default)]
struct Gauges(BTreeMap<&'static str, (&'static str, Vec<Series>)>);

impl Gauges {
    fn declare(&mut self, name: &'static str, help: &'static str) {
        self.0.entry(name).or_insert((help, Vec::new()));
    }

    fn set(&mut self, name: &'static str, labels: Labels, value: f64) {
        if let Some((_, series)) = self.0.get_mut(name) {
            series.push(Series { labels, value });
        }
    }

    fn per_resource(&mut self, name: &'static str, base: &Labels, values: &BTreeMap<String, f64>) {
        for (resource, v) in values {
            let mut labels = base.clone();
            labels.push(("resource_type".into(), resource_type(resource)));
            self.set(name, labels, *v);
        }
    }

    fn encode(self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (name, (help, series)) in self.0 {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for s in series {
                let gauge = ConstGauge::new(s.value);
                gauge.encode(metric.encode_family(&s.labels)?)?;
            }
        }
        Ok(())
    }
}

/// The scrape-time collector; registered under the `karpenter` prefix when the process starts,
/// and given the cluster state once this replica leads and its caches have synced.
#[derive(Debug, Default)]
pub struct ClusterGauges {
    state: RwLock<Option<ClusterState>>,
}

impl ClusterGauges {
    /// Starts reading `state`, whose caches have listed everything.
    pub fn attach(&self, state: ClusterState) {
        *self.state.write().unwrap_or_else(|e| e.into_inner()) = Some(state);
    }

    /// Stops reading it (the replica lost its lease).
    pub fn detach(&self) {
        *self.state.write().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn gather(&self) -> Gauges {
        let mut g = Gauges::default();
        for (name, help) in FAMILIES {
            g.declare(name, help);
        }
        let state = self.state.read().unwrap_or_else(|e| e.into_inner()).clone();
        // A standby replica has no cluster state (as upstream's, whose state runs on the
        // leader): the families are declared, without series.
        let Some(state) = state else {
            return g;
        };
        let now = jiff::Timestamp::now();
        let views = state.node_views();
        let mut allocatable_sum: BTreeMap<String, f64> = BTreeMap::new();
        let mut requested_sum: BTreeMap<String, f64> = BTreeMap::new();
        let mut node_count = 0;
        let mut node_of_pod: BTreeMap<String, Labels> = BTreeMap::new();
        for view in &views {
            let Some(node) = &view.node else { continue };
            node_count += 1;
            let base = node_labels(node, view.claim.is_some());
            let status = node.status.as_ref();
            let allocatable = amounts(status.and_then(|s| s.allocatable.as_ref()));
            let capacity = amounts(status.and_then(|s| s.capacity.as_ref()));
            let overhead: BTreeMap<String, f64> = capacity
                .iter()
                .map(|(k, c)| (k.clone(), c - allocatable.get(k).copied().unwrap_or(0.0)))
                .collect();
            // Every allocatable resource has a request and limit series, 0 when nothing asks
            // for it: the dashboards add these gauges one-to-one, and a node without DaemonSet
            // pods would otherwise drop out of the sum.
            let zeros: BTreeMap<String, f64> =
                allocatable.keys().map(|k| (k.clone(), 0.0)).collect();
            let (mut pod_req, mut pod_lim) = (zeros.clone(), zeros.clone());
            let (mut ds_req, mut ds_lim) = (zeros.clone(), zeros);
            for pod in view.pods.iter().filter(|p| !is_terminal(p)) {
                let Some(spec) = &pod.spec else { continue };
                let (req, lim) = (requests_of(spec), limits_of(spec));
                add_into(&mut pod_req, &req);
                add_into(&mut pod_lim, &lim);
                if is_daemonset_pod(pod) {
                    add_into(&mut ds_req, &req);
                    add_into(&mut ds_lim, &lim);
                }
            }
            g.per_resource("nodes_allocatable", &base, &allocatable);
            g.per_resource("nodes_system_overhead", &base, &overhead);
            g.per_resource("nodes_total_pod_requests", &base, &pod_req);
            g.per_resource("nodes_total_pod_limits", &base, &pod_lim);
            g.per_resource("nodes_total_daemon_requests", &base, &ds_req);
            g.per_resource("nodes_total_daemon_limits", &base, &ds_lim);
            if let Some(created) = node.metadata.creation_timestamp.as_ref() {
                let age = now.duration_since(created.0).as_secs_f64().max(0.0);
                g.set("nodes_current_lifetime_seconds", base.clone(), age);
            }
            add_into(&mut allocatable_sum, &allocatable);
            add_into(&mut requested_sum, &pod_req);
            node_of_pod.insert(view.name.clone(), base);
        }
        for (resource, total) in &allocatable_sum {
            if *total > 0.0 {
                let used = requested_sum.get(resource).copied().unwrap_or(0.0);
                g.set(
                    "cluster_utilization_percent",
                    vec![("resource_type".into(), resource_type(resource))],
                    100.0 * used / total,
                );
            }
        }
        g.set("cluster_state_node_count", vec![], node_count as f64);
        g.set("cluster_state_synced", vec![], 1.0);
        g.set("cluster_state_unsynced_time_seconds", vec![], 0.0);
        for np in state.nodepools.state() {
            let pool = [("nodepool".to_string(), np.name_any())];
            let usage = amounts(np.status.as_ref().map(|s| &s.resources));
            let limits = amounts(np.spec.limits.as_ref());
            for (name, values) in [("nodepools_usage", usage), ("nodepools_limit", limits)] {
                for (resource, v) in values {
                    let mut labels = vec![("resource_type".into(), resource_type(&resource))];
                    labels.extend(pool.iter().cloned());
                    g.set(name, labels, v);
                }
            }
        }
        for pod in state.pods.state() {
            pod_gauges(&mut g, &pod, &node_of_pod, now);
        }
        g
    }
}

/// `pods_state` and the per-pod waiting times for one pod.
fn pod_gauges(g: &mut Gauges, pod: &Pod, nodes: &BTreeMap<String, Labels>, now: jiff::Timestamp) {
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.clone()).unwrap_or_default();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let node_labels = node.as_ref().and_then(|n| nodes.get(n));
    let from_node = |name: &str| {
        node_labels
            .and_then(|l| l.iter().find(|(k, _)| k == name))
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let owner = pod
        .owner_references()
        .first()
        .map(|o| {
            format!(
                "/apis/{}/namespaces/{}/{}s/{}",
                o.api_version,
                pod.namespace().unwrap_or_default(),
                o.kind.to_lowercase(),
                o.name
            )
        })
        .unwrap_or_default();
    let (name, namespace) = (pod.name_any(), pod.namespace().unwrap_or_default());
    let labels: Labels = vec![
        ("name".into(), name.clone()),
        ("namespace".into(), namespace.clone()),
        ("owner".into(), owner),
        ("node".into(), node.clone().unwrap_or_default()),
        ("scheduled".into(), node.is_some().to_string()),
        ("nodepool".into(), from_node("nodepool")),
        ("zone".into(), from_node("zone")),
        ("arch".into(), from_node("arch")),
        ("capacity_type".into(), from_node("capacity_type")),
        ("instance_type".into(), from_node("instance_type")),
        ("phase".into(), phase.clone()),
        ("ready".into(), ready.to_string()),
        (
            "managed".into(),
            (!from_node("nodepool").is_empty()).to_string(),
        ),
    ];
    g.set("pods_state", labels, 1.0);
    let Some(created) = pod.metadata.creation_timestamp.as_ref() else {
        return;
    };
    let waited = now.duration_since(created.0).as_secs_f64().max(0.0);
    let id = vec![("name".into(), name), ("namespace".into(), namespace)];
    if node.is_none() && !is_terminal(pod) {
        g.set("pods_unbound_time_seconds", id.clone(), waited);
    }
    if phase != "Running" && !is_terminal(pod) {
        g.set("pods_unstarted_time_seconds", id, waited);
    }
}

impl Collector for ClusterGauges {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.gather().encode(encoder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_names_follow_upstream() {
        assert_eq!(metric_label_name(label::ZONE), "zone");
        assert_eq!(metric_label_name(label::INSTANCE_TYPE), "instance_type");
        assert_eq!(metric_label_name(label::CAPACITY_TYPE), "capacity_type");
        assert_eq!(
            metric_label_name(label::INSTANCE_GPU_COUNT),
            "instance_gpu_count"
        );
        assert_eq!(resource_type("ephemeral-storage"), "ephemeral_storage");
        assert_eq!(resource_type("nvidia.com/gpu"), "nvidia.com/gpu");
    }

    #[test]
    fn requests_count_a_pod_slot_and_limits_take_the_largest_init_container() {
        let spec: PodSpec = serde_json::from_value(json!({
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1"}}},
                {"name": "b", "resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "1", "memory": "2Gi"}}}
            ],
            "initContainers": [
                {"name": "i", "resources": {"limits": {"cpu": "4"}}}
            ]
        }))
        .unwrap();
        let r = requests_of(&spec);
        assert_eq!(r.get("pods"), Some(&1.0));
        // b's memory limit without a request defaults its request to 2Gi: 1Gi + 2Gi.
        assert_eq!(r.get("memory"), Some(&3221225472.0));
        // The init container's limit defaults its request to 4 cores, which wins over 0.75.
        assert_eq!(r.get("cpu"), Some(&4.0));
        let l = limits_of(&spec);
        assert_eq!(l.get("cpu"), Some(&4.0));
        assert_eq!(l.get("memory"), Some(&2147483648.0));
    }

    #[test]
    fn node_labels_are_the_same_set_for_every_node() {
        let node = |labels: serde_json::Value| -> Node {
            serde_json::from_value(json!({"metadata": {"name": "n", "labels": labels}})).unwrap()
        };
        let a = node_labels(&node(json!({label::ZONE: "kr-central-2-a"})), true);
        let b = node_labels(&node(json!({})), false);
        let names = |l: &Labels| l.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        assert_eq!(names(&a), names(&b));
        assert!(a.contains(&("zone".into(), "kr-central-2-a".into())));
        assert!(a.contains(&("managed".into(), "true".into())));
        assert!(b.contains(&("zone".into(), String::new())));
    }
}
