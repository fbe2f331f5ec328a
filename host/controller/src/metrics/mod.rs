//! Prometheus metrics under upstream Karpenter's names, label names and buckets (v1.14), so
//! existing dashboards and alerts keep working; docs/metrics.md lists every upstream family as
//! exported here or not applicable.
//!
//! Three kinds: counters and histograms recorded where things happen (the families below),
//! gauges of the disruption pass (set from its snapshot), and gauges read from the cluster state
//! at scrape time ([`cluster::ClusterGauges`]). Summaries ([`summary`]) are rendered by
//! [`render`], since `prometheus-client` has none.

pub mod cluster;
pub mod pods;
pub mod summary;

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kk_apis::crd::NodeClaim;
use kk_apis::names::label;
use kk_plugin_runtime::metrics::PluginMetrics;
use kube::ResourceExt;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use cluster::ClusterGauges;
use summary::Summary;

type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;
type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

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
pub struct CreatedLabels {
    pub reason: String,
    pub nodepool: String,
    /// Whether minValues were relaxed to launch it; this provider never relaxes them.
    pub min_values_relaxed: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DisruptedLabels {
    pub reason: String,
    pub nodepool: String,
    pub capacity_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClaimTerminatedLabels {
    pub nodepool: String,
    pub capacity_type: String,
    pub zone: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodePoolZone {
    pub nodepool: String,
    pub zone: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UnhealthyLabels {
    pub condition: String,
    pub nodepool: String,
    pub capacity_type: String,
    pub image_id: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    /// The HTTP status of the eviction request.
    pub code: String,
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
pub struct NodePoolDecisionLabels {
    pub nodepool: String,
    pub decision: String,
    pub reason: String,
    pub consolidation_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConsolidationTypeLabel {
    pub consolidation_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MoveLabels {
    /// `approved` or `rejected`.
    pub decision: String,
    pub nodepool: String,
    /// The NodePool's consolidation policy.
    pub policy: String,
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SchedulerLabels {
    pub controller: String,
    /// One ID per scheduling simulation, as upstream's scheduler UUID.
    pub scheduling_id: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerZone {
    pub controller: String,
    /// A zone, `flexible` or `none` ([`kk_apis::pod::effective_zone`]).
    pub zone: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InstanceTypeLabel {
    pub instance_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OfferingLabels {
    pub instance_type: String,
    pub capacity_type: String,
    pub zone: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildInfo {
    pub version: String,
    /// Upstream's label for its Go toolchain; here the minimum Rust version (`rust1.95`).
    pub goversion: String,
    pub goarch: String,
    pub commit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PodLabels {
    pub name: String,
    pub namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub controller: String,
    /// `success` or `error`.
    pub result: String,
}

/// Labels of upstream's disruption evaluation histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvaluationLabels {
    /// Upstream evaluates one method at a time; one pass here plans every method at once, so
    /// this is `all`.
    pub reason: String,
    pub consolidation_type: String,
}

/// Upstream's `metrics.DurationBuckets()` (controller-runtime's, extended past 60 s).
pub const DURATION_BUCKETS: [f64; 45] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0, 120.0, 150.0, 300.0, 450.0, 600.0,
];
/// client_golang's `DefBuckets` (upstream's cloud-provider histogram sets none).
pub const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Upstream's node lifetime buckets: 15 min to 30 days.
pub const LIFETIME_BUCKETS: [f64; 21] = [
    900.0, 1800.0, 2700.0, 3600.0, 7200.0, 14400.0, 21600.0, 28800.0, 36000.0, 43200.0, 57600.0,
    72000.0, 86400.0, 172800.0, 259200.0, 432000.0, 864000.0, 1296000.0, 1728000.0, 2160000.0,
    2592000.0,
];
/// Upstream's consolidation score buckets.
pub const SCORE_BUCKETS: [f64; 8] = [0.1, 0.25, 0.33, 0.5, 1.0, 2.0, 5.0, 10.0];

/// controller-runtime's reconcile buckets: [`DURATION_BUCKETS`] up to 60 s.
fn reconcile_durations() -> Histogram {
    Histogram::new(DURATION_BUCKETS[..40].iter().copied())
}
fn durations() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}
fn default_buckets() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS)
}
fn lifetimes() -> Histogram {
    Histogram::new(LIFETIME_BUCKETS)
}
fn scores() -> Histogram {
    Histogram::new(SCORE_BUCKETS)
}
/// `ExponentialBuckets(1, 2, 12)`: 1 s to 2048 s.
fn claim_terminations() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 12))
}
/// `ExponentialBuckets(1, 2, 11)`: 1 s to 1024 s.
fn instance_terminations() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 11))
}

/// A NodeClaim's NodePool, capacity type and zone, from its labels ("" when unset).
fn claim_labels(nc: &NodeClaim) -> (String, String, String) {
    let get = |k: &str| nc.labels().get(k).cloned().unwrap_or_default();
    (
        get(label::NODEPOOL),
        get(label::CAPACITY_TYPE),
        get(label::ZONE),
    )
}

fn seconds_since(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<f64> {
    t.map(|t| Timestamp::now().duration_since(t.0).as_secs_f64().max(0.0))
}

/// Every metric the controllers record.
pub struct Metrics {
    pub build_info: Family<BuildInfo, Gauge>,
    pub nodeclaims_created: Family<CreatedLabels, Counter>,
    pub nodeclaims_terminated: Family<ClaimTerminatedLabels, Counter>,
    pub nodeclaims_disrupted: Family<DisruptedLabels, Counter>,
    pub nodeclaims_unhealthy_disrupted: Family<UnhealthyLabels, Counter>,
    pub nodeclaims_termination_duration: Histograms<NodePoolLabel>,
    pub nodeclaims_instance_termination_duration: Histograms<NodePoolLabel>,
    pub nodes_created: Family<NodePoolZone, Counter>,
    pub nodes_terminated: Family<NodePoolZone, Counter>,
    pub nodes_drained: Family<NodePoolLabel, Counter>,
    pub nodes_lifetime_duration: Histograms<NodePoolLabel>,
    pub nodes_termination_duration: Arc<Summary>,
    pub pods_drained: Family<ReasonLabel, Counter>,
    pub pods_eviction_requests: Family<CodeLabel, Counter>,
    pub pods_startup_duration: Arc<Summary>,
    pub pods_bound_duration: Histogram,
    pub pods_provisioning_bound_duration: Histogram,
    pub pods_provisioning_startup_duration: Histogram,
    pub pods_scheduling_decision_duration: Histogram,
    pub pods_provisioning_unbound_time: Family<PodLabels, FloatGauge>,
    pub pods_provisioning_unstarted_time: Family<PodLabels, FloatGauge>,
    pub pods_provisioning_undecided_time: Family<PodLabels, FloatGauge>,
    pub cloudprovider_duration: Histograms<CloudCall>,
    pub cloudprovider_errors: Family<CloudError, Counter>,
    pub cloudprovider_instance_type_cpu_cores: Family<InstanceTypeLabel, Gauge>,
    pub cloudprovider_instance_type_memory_bytes: Family<InstanceTypeLabel, FloatGauge>,
    pub cloudprovider_offering_available: Family<OfferingLabels, Gauge>,
    pub cloudprovider_offering_price_estimate: Family<OfferingLabels, FloatGauge>,
    pub scheduling_duration: Histograms<ControllerLabel>,
    pub unschedulable_pods: Family<ControllerLabel, Gauge>,
    pub queue_depth: Family<SchedulerLabels, Gauge>,
    pub pending_pods_by_zone: Family<ControllerZone, Gauge>,
    pub disruption_decisions: Family<DecisionLabels, Counter>,
    pub disruption_decisions_by_nodepool: Family<NodePoolDecisionLabels, Counter>,
    pub disruption_eligible_nodes: Family<ReasonLabel, Gauge>,
    pub disruption_failed_validations: Family<ConsolidationTypeLabel, Counter>,
    pub disruption_queue_failures: Family<DecisionLabels, Counter>,
    /// Wall time of a disruption pass's planning (snapshot, simulations, scoring).
    pub disruption_evaluation: Histograms<EvaluationLabels>,
    pub nodepools_allowed_disruptions: Family<NodePoolReason, Gauge>,
    pub nodepools_nodes_consuming_budgets: Family<NodePoolReason, Gauge>,
    pub nodepools_cost_total: Family<NodePoolLabel, FloatGauge>,
    pub consolidation_score: Histograms<MoveLabels>,
    pub consolidation_moves: Family<MoveLabels, Counter>,
    /// controller-runtime's reconcile count and time, per NodeClaim controller (upstream's
    /// Performance dashboard reads them).
    pub reconciles: Family<ReconcileLabels, Counter>,
    pub reconcile_time: Histograms<ControllerLabel>,
    /// Gauges read from the cluster state on each scrape.
    pub cluster: Arc<ClusterGauges>,
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
    /// Every family's name as exposed (counters without `_total`), registered or collected;
    /// families without series yet are not in the exposition, so tests read this.
    pub families: Vec<String>,
}

impl Metrics {
    /// Registers every metric in `registry` (prefix `karpenter`).
    pub fn register(registry: &mut Registry) -> Arc<Metrics> {
        let m = Metrics {
            build_info: Family::default(),
            nodeclaims_created: Family::default(),
            nodeclaims_terminated: Family::default(),
            nodeclaims_disrupted: Family::default(),
            nodeclaims_unhealthy_disrupted: Family::default(),
            nodeclaims_termination_duration: Family::new_with_constructor(claim_terminations),
            nodeclaims_instance_termination_duration: Family::new_with_constructor(
                instance_terminations,
            ),
            nodes_created: Family::default(),
            nodes_terminated: Family::default(),
            nodes_drained: Family::default(),
            nodes_lifetime_duration: Family::new_with_constructor(lifetimes),
            nodes_termination_duration: Arc::new(Summary::new(
                "karpenter_nodes_termination_duration_seconds",
                "The time taken between a node's deletion request and the removal of its finalizer",
                Some("nodepool"),
            )),
            pods_drained: Family::default(),
            pods_eviction_requests: Family::default(),
            pods_startup_duration: Arc::new(Summary::new(
                "karpenter_pods_startup_duration_seconds",
                "The time from pod creation until the pod is running.",
                None,
            )),
            pods_bound_duration: durations(),
            pods_provisioning_bound_duration: durations(),
            pods_provisioning_startup_duration: durations(),
            pods_scheduling_decision_duration: durations(),
            pods_provisioning_unbound_time: Family::default(),
            pods_provisioning_unstarted_time: Family::default(),
            pods_provisioning_undecided_time: Family::default(),
            cloudprovider_duration: Family::new_with_constructor(default_buckets),
            cloudprovider_errors: Family::default(),
            cloudprovider_instance_type_cpu_cores: Family::default(),
            cloudprovider_instance_type_memory_bytes: Family::default(),
            cloudprovider_offering_available: Family::default(),
            cloudprovider_offering_price_estimate: Family::default(),
            scheduling_duration: Family::new_with_constructor(durations),
            unschedulable_pods: Family::default(),
            queue_depth: Family::default(),
            pending_pods_by_zone: Family::default(),
            disruption_decisions: Family::default(),
            disruption_decisions_by_nodepool: Family::default(),
            disruption_eligible_nodes: Family::default(),
            disruption_failed_validations: Family::default(),
            disruption_queue_failures: Family::default(),
            disruption_evaluation: Family::new_with_constructor(durations),
            nodepools_allowed_disruptions: Family::default(),
            nodepools_nodes_consuming_budgets: Family::default(),
            nodepools_cost_total: Family::default(),
            consolidation_score: Family::new_with_constructor(scores),
            consolidation_moves: Family::default(),
            reconciles: Family::default(),
            reconcile_time: Family::new_with_constructor(reconcile_durations),
            cluster: Arc::default(),
            ownership_refusals: Family::default(),
            garbage_collected: Family::default(),
            cluster_hourly_price_micros: Gauge::default(),
            consolidation_reverted: Family::default(),
            plugins: Arc::default(),
            families: Vec::new(),
        };
        m.build_info
            .get_or_create(&BuildInfo {
                version: env!("CARGO_PKG_VERSION").into(),
                goversion: concat!("rust", env!("CARGO_PKG_RUST_VERSION")).into(),
                goarch: match std::env::consts::ARCH {
                    "x86_64" => "amd64".into(),
                    "aarch64" => "arm64".into(),
                    other => other.into(),
                },
                commit: option_env!("KK_COMMIT").unwrap_or("unspecified").into(),
            })
            .set(1);
        let runtime = registry.sub_registry_with_prefix("controller_runtime");
        runtime.register(
            "reconcile",
            "Total number of reconciliations per controller",
            m.reconciles.clone(),
        );
        runtime.register(
            "reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            m.reconcile_time.clone(),
        );
        let r = registry.sub_registry_with_prefix("karpenter");
        let mut families: Vec<String> = vec![
            "controller_runtime_reconcile".into(),
            "controller_runtime_reconcile_time_seconds".into(),
        ];
        macro_rules! reg {
            ($name:literal, $help:literal, $metric:expr) => {{
                families.push(concat!("karpenter_", $name).into());
                r.register($name, $help, $metric.clone())
            }};
        }
        reg!(
            "build_info",
            "A metric with a constant '1' value labeled by version from which karpenter was built.",
            m.build_info
        );
        reg!(
            "nodeclaims_created",
            "Number of nodeclaims created in total by Karpenter. Labeled by reason the nodeclaim was created and the owning nodepool.",
            m.nodeclaims_created
        );
        reg!(
            "nodeclaims_terminated",
            "Number of nodeclaims terminated in total by Karpenter. Labeled by the owning nodepool.",
            m.nodeclaims_terminated
        );
        reg!(
            "nodeclaims_disrupted",
            "Number of nodeclaims disrupted in total by Karpenter. Labeled by reason the nodeclaim was disrupted and the owning nodepool.",
            m.nodeclaims_disrupted
        );
        reg!(
            "nodeclaims_unhealthy_disrupted",
            "Number of unhealthy nodeclaims disrupted in total by Karpenter. Labeled by condition on the node was disrupted, the owning nodepool, and the image ID.",
            m.nodeclaims_unhealthy_disrupted
        );
        reg!(
            "nodeclaims_termination_duration_seconds",
            "Duration of NodeClaim termination in seconds.",
            m.nodeclaims_termination_duration
        );
        reg!(
            "nodeclaims_instance_termination_duration_seconds",
            "Duration of CloudProvider Instance termination in seconds.",
            m.nodeclaims_instance_termination_duration
        );
        reg!(
            "nodes_created",
            "Number of nodes created in total by Karpenter. Labeled by owning nodepool.",
            m.nodes_created
        );
        reg!(
            "nodes_terminated",
            "Number of nodes terminated in total by Karpenter. Labeled by owning nodepool.",
            m.nodes_terminated
        );
        reg!(
            "nodes_drained",
            "The number of nodes drained by Karpenter",
            m.nodes_drained
        );
        reg!(
            "nodes_lifetime_duration_seconds",
            "The lifetime duration of the nodes since creation.",
            m.nodes_lifetime_duration
        );
        reg!(
            "pods_drained",
            "Number of pods drained during node termination. Labeled by the disruption reason.",
            m.pods_drained
        );
        reg!(
            "pods_eviction_requests",
            "The number of requests to the eviction API. Labeled by the status code of the request.",
            m.pods_eviction_requests
        );
        reg!(
            "pods_bound_duration_seconds",
            "The time from pod creation until the pod is bound.",
            m.pods_bound_duration
        );
        reg!(
            "pods_provisioning_bound_duration_seconds",
            "The time from when Karpenter first thinks the pod can schedule until it binds.",
            m.pods_provisioning_bound_duration
        );
        reg!(
            "pods_provisioning_startup_duration_seconds",
            "The time from when Karpenter first thinks the pod can schedule until the pod is running.",
            m.pods_provisioning_startup_duration
        );
        reg!(
            "pods_scheduling_decision_duration_seconds",
            "The time it takes for Karpenter to first try to schedule a pod after it's been seen.",
            m.pods_scheduling_decision_duration
        );
        reg!(
            "pods_provisioning_unbound_time_seconds",
            "The time from when Karpenter first thinks the pod can schedule until it binds. Note: this calculated from a point in memory, not by the pod creation timestamp.",
            m.pods_provisioning_unbound_time
        );
        reg!(
            "pods_provisioning_unstarted_time_seconds",
            "The time from when Karpenter first thinks the pod can schedule until the pod is running.",
            m.pods_provisioning_unstarted_time
        );
        reg!(
            "pods_provisioning_scheduling_undecided_time_seconds",
            "The time from when Karpenter has seen a pod without making a scheduling decision for the pod.",
            m.pods_provisioning_undecided_time
        );
        reg!(
            "cloudprovider_duration_seconds",
            "Duration of cloud provider method calls. Labeled by the controller, method name and provider.",
            m.cloudprovider_duration
        );
        reg!(
            "cloudprovider_errors",
            "Total number of errors returned from CloudProvider calls.",
            m.cloudprovider_errors
        );
        reg!(
            "cloudprovider_instance_type_cpu_cores",
            "VCPUs cores for a given instance type.",
            m.cloudprovider_instance_type_cpu_cores
        );
        reg!(
            "cloudprovider_instance_type_memory_bytes",
            "Memory, in bytes, for a given instance type.",
            m.cloudprovider_instance_type_memory_bytes
        );
        reg!(
            "cloudprovider_instance_type_offering_available",
            "Instance type offering availability, based on instance type, capacity type, and zone",
            m.cloudprovider_offering_available
        );
        reg!(
            "cloudprovider_instance_type_offering_price_estimate",
            "Instance type offering estimated hourly price used when making informed decisions on node cost calculation, based on instance type, capacity type, and zone.",
            m.cloudprovider_offering_price_estimate
        );
        reg!(
            "scheduler_scheduling_duration_seconds",
            "Duration of scheduling simulations used for deprovisioning and provisioning in seconds.",
            m.scheduling_duration
        );
        reg!(
            "scheduler_unschedulable_pods_count",
            "The number of unschedulable Pods.",
            m.unschedulable_pods
        );
        reg!(
            "scheduler_pending_pods_by_effective_zone_count",
            "The number of pending pods by effective zone constraint.",
            m.pending_pods_by_zone
        );
        reg!(
            "scheduler_queue_depth",
            "The number of pods currently waiting to be scheduled.",
            m.queue_depth
        );
        reg!(
            "voluntary_disruption_decisions",
            "Number of disruption decisions performed. Labeled by disruption decision, reason, and consolidation type.",
            m.disruption_decisions
        );
        reg!(
            "voluntary_disruption_decisions_by_nodepool",
            "Number of disruption decisions performed. Labeled by nodepool, disruption decision, reason, and consolidation type.",
            m.disruption_decisions_by_nodepool
        );
        reg!(
            "voluntary_disruption_eligible_nodes",
            "Number of nodes eligible for disruption by Karpenter. Labeled by disruption reason.",
            m.disruption_eligible_nodes
        );
        reg!(
            "voluntary_disruption_failed_validations",
            "Number of candidates that were selected for disruption but failed validation.",
            m.disruption_failed_validations
        );
        reg!(
            "voluntary_disruption_queue_failures",
            "The number of times that an enqueued disruption decision failed. Labeled by disruption method.",
            m.disruption_queue_failures
        );
        reg!(
            "voluntary_disruption_decision_evaluation_duration_seconds",
            "Duration of the disruption decision evaluation process in seconds. Labeled by method and consolidation type.",
            m.disruption_evaluation
        );
        reg!(
            "nodepools_allowed_disruptions",
            "The number of nodes for a given NodePool that can be concurrently disrupting at a point in time. Labeled by NodePool. Note that allowed disruptions can change very rapidly, as new nodes may be created and others may be deleted at any point.",
            m.nodepools_allowed_disruptions
        );
        reg!(
            "nodepools_nodes_consuming_budgets",
            "The number of nodes for a given NodePool that are currently consuming disruption budgets. Labeled by NodePool and reason.",
            m.nodepools_nodes_consuming_budgets
        );
        reg!(
            "nodepools_cost_total",
            "The hourly cost of the nodes of a NodePool, at the catalog's on-demand prices.",
            m.nodepools_cost_total
        );
        reg!(
            "consolidation_score",
            "Consolidation scores of candidate moves under the Balanced policy. Labeled by decision, nodepool, and policy.",
            m.consolidation_score
        );
        reg!(
            "consolidation_moves",
            "Consolidation moves evaluated under the Balanced policy. Labeled by decision, nodepool, and policy.",
            m.consolidation_moves
        );
        r.register_collector(Box::new(Arc::clone(&m.cluster)));
        reg!(
            "kakaocloud_ownership_refusals",
            "Instances not deleted because their ownership tag did not verify",
            m.ownership_refusals
        );
        reg!(
            "kakaocloud_garbage_collected",
            "Leaked instances, orphaned Nodes and NodeClaims removed",
            m.garbage_collected
        );
        reg!(
            "kakaocloud_cluster_hourly_price_micros",
            "Hourly price of the managed nodes, micro-units",
            m.cluster_hourly_price_micros
        );
        reg!(
            "kakaocloud_consolidation_reverted",
            "Controllers whose pods consolidation moved and that then needed new capacity; consolidation leaves their pods alone for a while",
            m.consolidation_reverted
        );
        for t in ["multi", "single"] {
            // Upstream starts both at 0, so a rate() has a series before the first failure.
            drop(
                m.disruption_failed_validations
                    .get_or_create(&ConsolidationTypeLabel {
                        consolidation_type: t.into(),
                    }),
            );
        }
        let plugin_families = m.plugins.register(r);
        families.extend(
            plugin_families
                .into_iter()
                .map(|f| format!("karpenter_{f}")),
        );
        families.extend(
            cluster::FAMILIES
                .iter()
                .map(|(_, name, _)| format!("karpenter_{name}")),
        );
        families.extend(
            [&m.nodes_termination_duration, &m.pods_startup_duration]
                .iter()
                .map(|s| s.name().to_string()),
        );
        Arc::new(Metrics { families, ..m })
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

    /// One reconcile of `controller` that started at `started`.
    pub fn reconciled(&self, controller: &str, started: std::time::Instant, ok: bool) {
        self.reconcile_time
            .get_or_create(&ControllerLabel {
                controller: controller.into(),
            })
            .observe(started.elapsed().as_secs_f64());
        self.reconciles
            .get_or_create(&ReconcileLabels {
                controller: controller.into(),
                result: if ok { "success" } else { "error" }.into(),
            })
            .inc();
    }

    /// A NodeClaim created for `nodepool` (`provisioned`, a disruption reason, `static`).
    pub fn claim_created(&self, nodepool: &str, reason: &str) {
        self.nodeclaims_created
            .get_or_create(&CreatedLabels {
                reason: reason.into(),
                nodepool: nodepool.into(),
                min_values_relaxed: "false".into(),
            })
            .inc();
    }

    /// `nc` is being removed for `reason` (upstream's snake_case reasons).
    pub fn claim_disrupted(&self, nc: &NodeClaim, reason: &str) {
        let (nodepool, capacity_type, _) = claim_labels(nc);
        self.nodeclaims_disrupted
            .get_or_create(&DisruptedLabels {
                reason: reason.into(),
                nodepool,
                capacity_type,
            })
            .inc();
    }

    /// Node repair removes `nc` because its node's `condition` stayed unhealthy.
    pub fn claim_unhealthy(&self, nc: &NodeClaim, condition: &str) {
        let (nodepool, capacity_type, _) = claim_labels(nc);
        let image_id = nc.status.as_ref().and_then(|s| s.image_id.clone());
        self.nodeclaims_unhealthy_disrupted
            .get_or_create(&UnhealthyLabels {
                condition: to_snake_case(condition),
                nodepool,
                capacity_type,
                image_id: image_id.unwrap_or_default(),
            })
            .inc();
    }

    /// `nc`'s finalizer is gone: counted, and its termination timed from its deletion.
    pub fn claim_terminated(&self, nc: &NodeClaim) {
        let (nodepool, capacity_type, zone) = claim_labels(nc);
        if let Some(s) = seconds_since(nc.metadata.deletion_timestamp.as_ref()) {
            self.nodeclaims_termination_duration
                .get_or_create(&NodePoolLabel {
                    nodepool: nodepool.clone(),
                })
                .observe(s);
        }
        self.nodeclaims_terminated
            .get_or_create(&ClaimTerminatedLabels {
                nodepool,
                capacity_type,
                zone,
            })
            .inc();
    }

    /// `nc`'s instance is confirmed gone, `seconds` after its delete was first sent.
    pub fn instance_terminated(&self, nc: &NodeClaim, seconds: f64) {
        let (nodepool, _, _) = claim_labels(nc);
        self.nodeclaims_instance_termination_duration
            .get_or_create(&NodePoolLabel { nodepool })
            .observe(seconds);
    }

    /// `nc`'s Node registered.
    pub fn node_created(&self, nc: &NodeClaim) {
        let (nodepool, _, zone) = claim_labels(nc);
        self.nodes_created
            .get_or_create(&NodePoolZone { nodepool, zone })
            .inc();
    }

    /// `node` drained (before its instance is deleted).
    pub fn node_drained(&self, nc: &NodeClaim) {
        let (nodepool, _, _) = claim_labels(nc);
        self.nodes_drained
            .get_or_create(&NodePoolLabel { nodepool })
            .inc();
    }

    /// `nc`'s Node is released (or was already gone): counted, its lifetime and its termination
    /// time observed.
    pub fn node_terminated(&self, nc: &NodeClaim, node: Option<&Node>) {
        let (nodepool, _, zone) = claim_labels(nc);
        let created = node.and_then(|n| n.metadata.creation_timestamp.as_ref());
        if let Some(s) = seconds_since(created) {
            self.nodes_lifetime_duration
                .get_or_create(&NodePoolLabel {
                    nodepool: nodepool.clone(),
                })
                .observe(s);
        }
        // A Node deleted through its NodeClaim has no deletionTimestamp of its own yet.
        let since = node
            .and_then(|n| n.metadata.deletion_timestamp.as_ref())
            .or(nc.metadata.deletion_timestamp.as_ref());
        if let Some(s) = seconds_since(since) {
            self.nodes_termination_duration.observe(&nodepool, s);
        }
        self.nodes_terminated
            .get_or_create(&NodePoolZone { nodepool, zone })
            .inc();
    }

    /// One eviction request answered with HTTP `code`.
    pub fn eviction(&self, code: u16) {
        self.pods_eviction_requests
            .get_or_create(&CodeLabel {
                code: code.to_string(),
            })
            .inc();
    }
}

/// `MemoryPressure` → `memory_pressure` (upstream's condition label).
fn to_snake_case(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The registry rendered in the OpenMetrics text format, with `metrics`' summaries.
pub fn render(registry: &Registry, metrics: &Metrics) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = render_to(&mut out, registry, metrics);
    out
}

/// About how many bytes of the exposition [`render_chunked`] hands out at a time.
pub const CHUNK_BYTES: usize = 64 * 1024;

/// [`render`], handed to `send` in chunks of about [`CHUNK_BYTES`] as it is written, so a scrape
/// never holds the whole text: `karpenter_pods_state` alone is about 10 MiB at 20,000 pods.
/// `send` returns false once nobody reads any more, and the rendering stops there.
pub fn render_chunked(
    registry: &Registry,
    metrics: &Metrics,
    send: impl FnMut(String) -> bool,
) -> std::fmt::Result {
    let mut out = Chunks {
        buf: String::with_capacity(CHUNK_BYTES),
        send,
    };
    render_to(&mut out, registry, metrics)?;
    let rest = std::mem::take(&mut out.buf);
    if !rest.is_empty() && !(out.send)(rest) {
        return Err(std::fmt::Error);
    }
    Ok(())
}

fn render_to(
    out: &mut impl std::fmt::Write,
    registry: &Registry,
    metrics: &Metrics,
) -> std::fmt::Result {
    prometheus_client::encoding::text::encode_registry(out, registry)?;
    metrics.nodes_termination_duration.encode(out)?;
    metrics.pods_startup_duration.encode(out)?;
    prometheus_client::encoding::text::encode_eof(out)
}

/// A writer that hands its text on whenever [`CHUNK_BYTES`] have gathered.
struct Chunks<F> {
    buf: String,
    send: F,
}

impl<F: FnMut(String) -> bool> std::fmt::Write for Chunks<F> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.buf.push_str(s);
        if self.buf.len() >= CHUNK_BYTES {
            let full = std::mem::replace(&mut self.buf, String::with_capacity(CHUNK_BYTES));
            if !(self.send)(full) {
                return Err(std::fmt::Error);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_names_labels_and_buckets_are_exposed() {
        let (registry, m) = Metrics::standalone();
        m.claim_created("default", "provisioned");
        m.observe_cloud("Create", 0.2, Some("InsufficientCapacityError"));
        m.scheduling_duration
            .get_or_create(&ControllerLabel {
                controller: "provisioner".into(),
            })
            .observe(0.05);
        m.pods_startup_duration.observe("", 3.0);
        let text = render(&registry, &m);
        for want in [
            r#"karpenter_nodeclaims_created_total{reason="provisioned",nodepool="default",min_values_relaxed="false"} 1"#,
            r#"karpenter_cloudprovider_duration_seconds_bucket{le="0.25",controller="nodeclaim.lifecycle",method="Create",provider="kakaocloud"} 1"#,
            r#"karpenter_cloudprovider_errors_total{controller="nodeclaim.lifecycle",method="Create",provider="kakaocloud",error="InsufficientCapacityError"} 1"#,
            r#"karpenter_scheduler_scheduling_duration_seconds_bucket{le="600.0",controller="provisioner"} 1"#,
            r#"karpenter_voluntary_disruption_failed_validations_total{consolidation_type="multi"} 0"#,
            r#"karpenter_pods_startup_duration_seconds{quantile="0.5"} 3"#,
            "# TYPE karpenter_nodes_termination_duration_seconds summary",
            "karpenter_build_info{",
        ] {
            assert!(text.contains(want), "missing {want}\n{text}");
        }
        assert!(text.trim_end().ends_with("# EOF"), "{text}");
    }

    #[test]
    fn a_scrape_is_handed_out_in_chunks_and_stops_when_nobody_reads() {
        let (registry, m) = Metrics::standalone();
        for i in 0..3_000 {
            m.claim_created(&format!("pool-{i}"), "provisioned");
        }
        let whole = render(&registry, &m);
        let mut chunks = Vec::new();
        render_chunked(&registry, &m, |c| {
            chunks.push(c);
            true
        })
        .unwrap();
        assert!(chunks.len() > 2, "{} chunks", chunks.len());
        let (last, full) = chunks.split_last().unwrap();
        assert!(!last.is_empty());
        assert!(
            full.iter()
                .all(|c| c.len() >= CHUNK_BYTES && c.len() < 2 * CHUNK_BYTES)
        );
        assert_eq!(chunks.concat(), whole);

        let mut sent = 0;
        let stopped = render_chunked(&registry, &m, |_| {
            sent += 1;
            false
        });
        assert!(stopped.is_err());
        assert_eq!(sent, 1, "nothing is rendered after the reader left");
    }

    #[test]
    fn conditions_become_snake_case() {
        assert_eq!(to_snake_case("Ready"), "ready");
        assert_eq!(to_snake_case("MemoryPressure"), "memory_pressure");
    }
}
