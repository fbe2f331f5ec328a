//! Gauges read from the shared cluster state when Prometheus scrapes: upstream's `metrics/node`,
//! `metrics/nodepool`, `metrics/pod` and `state` controllers refresh theirs every 5 s; reading
//! the watch caches on each scrape gives the same values, and a node or pod that is gone simply
//! has no series (nothing to forget to delete).
//!
//! Invariants:
//! - every node gauge of one node carries the same label names and values (upstream's dashboards
//!   add and divide them one-to-one), built by [`node_labels`];
//! - label names are upstream's: a well-known label key's part after `/`, lower-cased, `-` → `_`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::{Node, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;

use crate::state::ClusterState;
use kk_apis::cached_pod::CachedPod;
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

/// What a family's series are read from; [`Scrape::encode`] matches on it, so every family
/// in [`FAMILIES`] has its encoder.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    /// One node's resources: the index into [`NodeRow::resources`].
    NodeResource(usize),
    NodeLifetime,
    Utilization,
    NodeCount,
    Synced,
    UnsyncedTime,
    Pool(PoolFamily),
    PodState,
    PodWait(PodWait),
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum PoolFamily {
    Usage,
    Limit,
}

/// What a pod is waiting for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum PodWait {
    /// To be bound to a node.
    Unbound,
    /// To run.
    Unstarted,
}

/// The families this collector exports, in name order (name under the `karpenter` prefix,
/// help); each name is written here only.
pub(crate) const FAMILIES: [(Family, &str, &str); 16] = [
    (
        Family::NodeCount,
        "cluster_state_node_count",
        "Current count of nodes in cluster state",
    ),
    (
        Family::Synced,
        "cluster_state_synced",
        "Returns 1 if cluster state is synced and 0 otherwise. Synced checks that nodeclaims and nodes that are stored in the APIServer have the same representation as Karpenter's cluster state",
    ),
    (
        Family::UnsyncedTime,
        "cluster_state_unsynced_time_seconds",
        "The time for which cluster state is not synced",
    ),
    (
        Family::Utilization,
        "cluster_utilization_percent",
        "Utilization of allocatable resources by pod requests",
    ),
    (
        Family::Pool(PoolFamily::Limit),
        "nodepools_limit",
        "Limits specified on the nodepool that restrict the quantity of resources provisioned. Labeled by nodepool name and resource type.",
    ),
    (
        Family::Pool(PoolFamily::Usage),
        "nodepools_usage",
        "The amount of resources that have been provisioned for a nodepool. Labeled by nodepool name and resource type.",
    ),
    (
        Family::NodeResource(0),
        "nodes_allocatable",
        "Node allocatable are the resources allocatable by nodes.",
    ),
    (
        Family::NodeLifetime,
        "nodes_current_lifetime_seconds",
        "Node age in seconds",
    ),
    (
        Family::NodeResource(1),
        "nodes_system_overhead",
        "Node system daemon overhead are the resources reserved for system overhead, the difference between the node's capacity and allocatable values are reported by the status.",
    ),
    (
        Family::NodeResource(5),
        "nodes_total_daemon_limits",
        "Node total daemon limits are the resources specified by DaemonSet pod limits.",
    ),
    (
        Family::NodeResource(4),
        "nodes_total_daemon_requests",
        "Node total daemon requests are the resource requested by DaemonSet pods bound to nodes.",
    ),
    (
        Family::NodeResource(3),
        "nodes_total_pod_limits",
        "Node total pod limits are the resources specified by pod limits, including the DaemonSet pods.",
    ),
    (
        Family::NodeResource(2),
        "nodes_total_pod_requests",
        "Node total pod requests are the resources requested by pods bound to nodes, including the DaemonSet pods.",
    ),
    (
        Family::PodState,
        "pods_state",
        "Pod state is the current state of pods. This metric can be used several ways as it is labeled by the pod name, namespace, owner, node, nodepool name, zone, architecture, capacity type, instance type and pod phase.",
    ),
    (
        Family::PodWait(PodWait::Unbound),
        "pods_unbound_time_seconds",
        "The time from pod creation until the pod is bound.",
    ),
    (
        Family::PodWait(PodWait::Unstarted),
        "pods_unstarted_time_seconds",
        "The time from pod creation until the pod is running.",
    ),
];

/// What one node's gauges read.
struct NodeRow {
    labels: Labels,
    /// Allocatable, overhead, pod requests and limits, DaemonSet requests and limits: the value
    /// by resource name ([`Family::NodeResource`]).
    resources: [BTreeMap<String, f64>; 6],
    age: Option<f64>,
}

/// What one scrape reads, gathered once. Series are encoded straight from it, family by family:
/// a scrape at 20,000 pods and 2,000 nodes would otherwise build a label list per series
/// (hundreds of MiB that the allocator then keeps).
struct Scrape {
    nodes: Vec<NodeRow>,
    /// Node name → index into `nodes`.
    node_index: HashMap<String, usize>,
    /// (resource_type, percent)
    utilization: Vec<(String, f64)>,
    /// (family, resource_type, nodepool, value)
    pools: Vec<(PoolFamily, String, String, f64)>,
    pods: Vec<Arc<CachedPod>>,
    now: jiff::Timestamp,
}

/// Borrowed label pairs for one series.
type LabelRefs<'a> = Vec<(&'a str, &'a str)>;

fn refs(labels: &Labels) -> LabelRefs<'_> {
    labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

fn encode_gauge(
    metric: &mut MetricEncoder<'_>,
    labels: &LabelRefs<'_>,
    value: f64,
) -> Result<(), std::fmt::Error> {
    ConstGauge::new(value).encode(metric.encode_family(labels)?)
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

    /// `None` on a standby replica: it has no cluster state (as upstream's, whose state runs
    /// on the leader), so its families are declared without series.
    fn gather(&self) -> Option<Scrape> {
        let state = self
            .state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()?;
        let now = jiff::Timestamp::now();
        let mut nodes = Vec::new();
        let mut node_index = HashMap::new();
        let mut allocatable_sum: BTreeMap<String, f64> = BTreeMap::new();
        let mut requested_sum: BTreeMap<String, f64> = BTreeMap::new();
        for view in state.node_views() {
            let Some(node) = &view.node else { continue };
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
            add_into(&mut allocatable_sum, &allocatable);
            add_into(&mut requested_sum, &pod_req);
            let age = node
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|created| now.duration_since(created.0).as_secs_f64().max(0.0));
            node_index.insert(view.name.clone(), nodes.len());
            nodes.push(NodeRow {
                labels: node_labels(node, view.claim.is_some()),
                resources: [allocatable, overhead, pod_req, pod_lim, ds_req, ds_lim],
                age,
            });
        }
        let utilization = allocatable_sum
            .iter()
            .filter(|(_, total)| **total > 0.0)
            .map(|(resource, total)| {
                let used = requested_sum.get(resource).copied().unwrap_or(0.0);
                (resource_type(resource), 100.0 * used / total)
            })
            .collect();
        let mut pools = Vec::new();
        for np in state.nodepools.state() {
            let usage = amounts(np.status.as_ref().map(|s| &s.resources));
            let limits = amounts(np.spec.limits.as_ref());
            for (family, values) in [(PoolFamily::Usage, usage), (PoolFamily::Limit, limits)] {
                for (resource, v) in values {
                    pools.push((family, resource_type(&resource), np.name_any(), v));
                }
            }
        }
        Some(Scrape {
            nodes,
            node_index,
            utilization,
            pools,
            pods: state.pods.state(),
            now,
        })
    }
}

impl Scrape {
    /// Every series of `family`.
    fn encode(
        &self,
        family: Family,
        metric: &mut MetricEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        match family {
            Family::NodeResource(i) => {
                for node in &self.nodes {
                    for (resource, v) in &node.resources[i] {
                        let mut labels = refs(&node.labels);
                        let rt = resource_type(resource);
                        labels.push(("resource_type", &rt));
                        encode_gauge(metric, &labels, *v)?;
                    }
                }
            }
            Family::NodeLifetime => {
                for node in &self.nodes {
                    if let Some(age) = node.age {
                        encode_gauge(metric, &refs(&node.labels), age)?;
                    }
                }
            }
            Family::Utilization => {
                for (rt, percent) in &self.utilization {
                    encode_gauge(metric, &vec![("resource_type", rt.as_str())], *percent)?;
                }
            }
            Family::NodeCount => encode_gauge(metric, &vec![], self.nodes.len() as f64)?,
            Family::Synced => encode_gauge(metric, &vec![], 1.0)?,
            Family::UnsyncedTime => encode_gauge(metric, &vec![], 0.0)?,
            Family::Pool(which) => {
                for (_, rt, pool, v) in self.pools.iter().filter(|p| p.0 == which) {
                    let labels = vec![("resource_type", rt.as_str()), ("nodepool", pool.as_str())];
                    encode_gauge(metric, &labels, *v)?;
                }
            }
            Family::PodState => {
                for pod in &self.pods {
                    self.pod_state(metric, pod)?;
                }
            }
            Family::PodWait(wait) => {
                for pod in &self.pods {
                    let Some(created) = pod.metadata.creation_timestamp.as_ref() else {
                        continue;
                    };
                    if is_terminal(pod) {
                        continue;
                    }
                    let waiting = match wait {
                        PodWait::Unbound => pod
                            .spec
                            .as_ref()
                            .and_then(|s| s.node_name.as_ref())
                            .is_none(),
                        PodWait::Unstarted => {
                            pod.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Running")
                        }
                    };
                    if waiting {
                        let waited = self.now.duration_since(created.0).as_secs_f64().max(0.0);
                        let (name, namespace) =
                            (pod.name_any(), pod.namespace().unwrap_or_default());
                        let labels =
                            vec![("name", name.as_str()), ("namespace", namespace.as_str())];
                        encode_gauge(metric, &labels, waited)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// `pods_state` of one pod.
    fn pod_state(
        &self,
        metric: &mut MetricEncoder<'_>,
        pod: &CachedPod,
    ) -> Result<(), std::fmt::Error> {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let status = pod.status.as_ref();
        let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or_default();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let node_labels = node
            .and_then(|n| self.node_index.get(n))
            .map(|&i| &self.nodes[i].labels);
        let from_node = |name: &str| {
            node_labels
                .and_then(|l| l.iter().find(|(k, _)| k == name))
                .map_or("", |(_, v)| v.as_str())
        };
        let namespace = pod.namespace().unwrap_or_default();
        let owner = pod
            .owner_references()
            .first()
            .map(|o| {
                format!(
                    "/apis/{}/namespaces/{namespace}/{}s/{}",
                    o.api_version,
                    o.kind.to_lowercase(),
                    o.name
                )
            })
            .unwrap_or_default();
        let name = pod.name_any();
        let labels: LabelRefs<'_> = vec![
            ("name", &name),
            ("namespace", &namespace),
            ("owner", &owner),
            ("node", node.unwrap_or_default()),
            ("scheduled", bool_str(node.is_some())),
            ("nodepool", from_node("nodepool")),
            ("zone", from_node("zone")),
            ("arch", from_node("arch")),
            ("capacity_type", from_node("capacity_type")),
            ("instance_type", from_node("instance_type")),
            ("phase", phase),
            ("ready", bool_str(ready)),
            ("managed", bool_str(!from_node("nodepool").is_empty())),
        ];
        encode_gauge(metric, &labels, 1.0)
    }
}

fn bool_str(b: bool) -> &'static str {
    if b { "true" } else { "false" }
}

impl Collector for ClusterGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let scrape = self.gather();
        for (family, name, help) in FAMILIES {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            if let Some(scrape) = &scrape {
                scrape.encode(family, &mut metric)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn families_are_named_once_in_name_order() {
        let names: Vec<&str> = FAMILIES.iter().map(|(_, name, _)| *name).collect();
        assert!(
            names.is_sorted_by(|a, b| a < b),
            "sorted, no repeats: {names:?}"
        );
        let resources: Vec<usize> = FAMILIES
            .iter()
            .filter_map(|(f, _, _)| match f {
                Family::NodeResource(i) => Some(*i),
                _ => None,
            })
            .collect();
        let mut sorted = resources.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [0, 1, 2, 3, 4, 5], "each node resource once");
    }

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
