//! Prometheus metrics under upstream Karpenter's names (`karpenter-behaviour.md` §5), so existing
//! dashboards and alerts keep working.

use std::sync::Arc;

use kk_plugin_runtime::metrics::PluginMetrics;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodePoolReason {
    pub nodepool: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodePoolLabel {
    pub nodepool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    pub nodepool: String,
    pub node_name: String,
    pub resource_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PodState {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloudCall {
    pub controller: String,
    pub method: String,
    pub provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloudError {
    pub controller: String,
    pub method: String,
    pub provider: String,
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `delete` or `replace`.
    pub decision: String,
    /// `empty`, `underutilized`, `drifted`, `expired`.
    pub reason: String,
    /// `single`, `multi`, `empty` or "" for non-consolidation reasons.
    pub consolidation_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabel {
    /// What was refused or collected (`terminate`, `garbage-collect`, `instance`, `node`, `nodeclaim`).
    pub action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    pub controller: String,
}

/// Upstream's `metrics.DurationBuckets()` (controller-runtime's, extended past 60 s).
const DURATION_BUCKETS: [f64; 45] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0, 120.0, 150.0, 300.0, 450.0, 600.0,
];

fn upstream_duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// Labels of upstream's disruption evaluation histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvaluationLabels {
    /// Upstream evaluates one method at a time; one pass here plans every method at once, so
    /// this is `all`.
    pub reason: String,
    pub consolidation_type: String,
}

fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 18))
}

/// Every metric the provisioning and lifecycle controllers record.
pub struct Metrics {
    pub nodeclaims_created: Family<NodePoolReason, Counter>,
    pub nodeclaims_terminated: Family<NodePoolReason, Counter>,
    pub nodeclaims_disrupted: Family<NodePoolReason, Counter>,
    pub nodes_created: Family<NodePoolReason, Counter>,
    pub nodes_allocatable: Family<NodeLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub pods_state: Family<PodState, Gauge>,
    pub cloudprovider_duration: Family<CloudCall, Histogram, fn() -> Histogram>,
    pub cloudprovider_errors: Family<CloudError, Counter>,
    pub scheduling_duration: Family<ControllerLabel, Histogram, fn() -> Histogram>,
    pub unschedulable_pods: Family<ControllerLabel, Gauge>,
    pub queue_depth: Family<ControllerLabel, Gauge>,
    pub nodes_terminated: Family<NodePoolReason, Counter>,
    pub disruption_decisions: Family<DecisionLabels, Counter>,
    /// Wall time of a disruption pass's planning (snapshot, simulations, scoring).
    pub disruption_evaluation: Family<EvaluationLabels, Histogram, fn() -> Histogram>,
    /// Instances left alone because their ownership tag did not verify.
    pub ownership_refusals: Family<ActionLabel, Counter>,
    /// Leaked instances, orphaned Nodes and NodeClaims removed by garbage collection.
    pub garbage_collected: Family<ActionLabel, Counter>,
    /// Hourly price of the managed nodes, micro-units (the consolidation tests read it).
    pub cluster_hourly_price_micros: Gauge,
    /// Controllers whose consolidated pods came back needing new capacity (the churn guard).
    pub consolidation_reverted: Family<NodePoolLabel, Counter>,
    /// The plugin runtime's own families.
    pub plugins: Arc<PluginMetrics>,
}

impl Metrics {
    /// Registers every metric in `registry` (prefix `karpenter`).
    pub fn register(registry: &mut Registry) -> Arc<Metrics> {
        let m = Metrics {
            nodeclaims_created: Family::default(),
            nodeclaims_terminated: Family::default(),
            nodeclaims_disrupted: Family::default(),
            nodes_created: Family::default(),
            nodes_allocatable: Family::default(),
            pods_state: Family::default(),
            cloudprovider_duration: Family::new_with_constructor(duration_histogram),
            cloudprovider_errors: Family::default(),
            scheduling_duration: Family::new_with_constructor(duration_histogram),
            unschedulable_pods: Family::default(),
            queue_depth: Family::default(),
            nodes_terminated: Family::default(),
            disruption_decisions: Family::default(),
            disruption_evaluation: Family::new_with_constructor(upstream_duration_histogram),
            ownership_refusals: Family::default(),
            garbage_collected: Family::default(),
            cluster_hourly_price_micros: Gauge::default(),
            consolidation_reverted: Family::default(),
            plugins: Arc::default(),
        };
        let r = registry.sub_registry_with_prefix("karpenter");
        r.register(
            "nodeclaims_created",
            "NodeClaims created, by NodePool and reason",
            m.nodeclaims_created.clone(),
        );
        r.register(
            "nodeclaims_terminated",
            "NodeClaims terminated, by NodePool and reason",
            m.nodeclaims_terminated.clone(),
        );
        r.register(
            "nodeclaims_disrupted",
            "NodeClaims disrupted, by NodePool and reason",
            m.nodeclaims_disrupted.clone(),
        );
        r.register(
            "nodes_created",
            "Nodes registered for NodeClaims",
            m.nodes_created.clone(),
        );
        r.register(
            "nodes_allocatable",
            "Allocatable resources of the nodes Karpenter launched",
            m.nodes_allocatable.clone(),
        );
        r.register(
            "pods_state",
            "Pods seen by the provisioner, by state",
            m.pods_state.clone(),
        );
        r.register(
            "cloudprovider_duration_seconds",
            "Duration of cloud provider calls",
            m.cloudprovider_duration.clone(),
        );
        r.register(
            "cloudprovider_errors",
            "Cloud provider call errors",
            m.cloudprovider_errors.clone(),
        );
        r.register(
            "provisioner_scheduling_duration_seconds",
            "Duration of one scheduling simulation",
            m.scheduling_duration.clone(),
        );
        r.register(
            "scheduler_unschedulable_pods_count",
            "Pods the last simulation could not place",
            m.unschedulable_pods.clone(),
        );
        r.register(
            "scheduler_queue_depth",
            "Pods in the last provisioning batch",
            m.queue_depth.clone(),
        );
        r.register(
            "nodes_terminated",
            "Nodes drained and terminated, by NodePool and reason",
            m.nodes_terminated.clone(),
        );
        r.register(
            "voluntary_disruption_decisions",
            "Disruption decisions taken, by decision, reason and consolidation type",
            m.disruption_decisions.clone(),
        );
        r.register(
            "voluntary_disruption_decision_evaluation_duration_seconds",
            "Duration of the disruption decision evaluation process in seconds",
            m.disruption_evaluation.clone(),
        );
        r.register(
            "kakaocloud_ownership_refusals",
            "Instances not deleted because their ownership tag did not verify",
            m.ownership_refusals.clone(),
        );
        r.register(
            "kakaocloud_garbage_collected",
            "Leaked instances, orphaned Nodes and NodeClaims removed",
            m.garbage_collected.clone(),
        );
        r.register(
            "kakaocloud_cluster_hourly_price_micros",
            "Hourly price of the managed nodes, micro-units",
            m.cluster_hourly_price_micros.clone(),
        );
        r.register(
            "kakaocloud_consolidation_reverted",
            "Controllers whose pods consolidation moved and that then needed new capacity; \
             consolidation leaves their pods alone for a while",
            m.consolidation_reverted.clone(),
        );
        m.plugins.register(r);
        Arc::new(m)
    }

    /// A registry holding only these metrics (tests, or a binary without other metrics).
    pub fn standalone() -> (Registry, Arc<Metrics>) {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        (registry, m)
    }

    /// Records one cloud call's duration and, on failure, its error kind.
    pub fn observe_cloud(&self, method: &str, seconds: f64, error: Option<&str>) {
        let call = CloudCall {
            controller: "nodeclaim.lifecycle".into(),
            method: method.into(),
            provider: "kakaocloud".into(),
        };
        self.cloudprovider_duration
            .get_or_create(&call)
            .observe(seconds);
        if let Some(error) = error {
            self.cloudprovider_errors
                .get_or_create(&CloudError {
                    controller: call.controller,
                    method: call.method,
                    provider: call.provider,
                    error: error.into(),
                })
                .inc();
        }
    }
}

/// The registry rendered in the Prometheus text format.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_names_are_exposed() {
        let (registry, m) = Metrics::standalone();
        m.nodeclaims_created
            .get_or_create(&NodePoolReason {
                nodepool: "default".into(),
                reason: "provisioned".into(),
            })
            .inc();
        m.observe_cloud("Create", 0.2, Some("InsufficientCapacity"));
        m.scheduling_duration
            .get_or_create(&ControllerLabel {
                controller: "provisioner".into(),
            })
            .observe(0.05);
        let text = render(&registry);
        assert!(
            text.contains(
                r#"karpenter_nodeclaims_created_total{nodepool="default",reason="provisioned"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains("karpenter_cloudprovider_duration_seconds_bucket"));
        assert!(text.contains("karpenter_cloudprovider_errors_total"));
        assert!(
            text.contains("# HELP karpenter_provisioner_scheduling_duration_seconds"),
            "{text}"
        );
    }
}
