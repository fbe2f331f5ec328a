//! The cluster as disruption sees it: a plain snapshot with no API handles, so every rule is a
//! pure function of it (and of the time it was taken) and can be unit-tested and benchmarked.
//!
//! [`super::build`] fills one from Kubernetes objects; tests and benchmarks build them directly.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{NodeSelectorTerm, Taint, Toleration};

use crate::scheduling::{InstanceType, NodePoolInput, PoolRequirement, Resources};
use kk_apis::cached_pod::CachedPod;
use kk_apis::crd::nodepool::{Budget, ConsolidationPolicy};

/// Why a node is a disruption candidate (the WIT `disruption-reason`, plus the budget reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// No pods but daemonset and mirror pods.
    Empty,
    /// Its pods fit elsewhere, or on one cheaper node.
    Underutilized,
    /// Its NodeClaim no longer matches its NodePool or KCNodeClass.
    Drifted,
    /// It lived longer than `expireAfter` (forceful: not budgeted).
    Expired,
}

impl Reason {
    /// The metric label (`karpenter_nodeclaims_disrupted_total{reason}`).
    pub fn as_metric(&self) -> &'static str {
        match self {
            Reason::Empty => "empty",
            Reason::Underutilized => "underutilized",
            Reason::Drifted => "drifted",
            Reason::Expired => "expired",
        }
    }

    /// Upstream's spelling in conditions and Events (`DisruptionReason`, `DisruptionLaunching`).
    pub fn as_condition_reason(&self) -> &'static str {
        match self {
            Reason::Empty => "Empty",
            Reason::Underutilized => "Underutilized",
            Reason::Drifted => "Drifted",
            Reason::Expired => "Expired",
        }
    }

    /// The budget reason, for reasons budgets can name.
    pub fn budget_reason(&self) -> Option<kk_apis::crd::nodepool::DisruptionReason> {
        use kk_apis::crd::nodepool::DisruptionReason as R;
        match self {
            Reason::Empty => Some(R::Empty),
            Reason::Underutilized => Some(R::Underutilized),
            Reason::Drifted => Some(R::Drifted),
            Reason::Expired => None,
        }
    }
}

/// Why a NodeClaim drifted (the `Drifted` condition's reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriftReason {
    /// The NodePool's template hash differs from the one the NodeClaim was made from.
    NodePoolDrifted,
    /// The NodePool's requirements no longer admit the NodeClaim's labels.
    RequirementsDrifted,
    /// The KCNodeClass resolves to another image, subnet set or security-group set, or its hash changed.
    NodeClassDrifted(String),
}

impl DriftReason {
    pub fn as_condition_reason(&self) -> &'static str {
        match self {
            DriftReason::NodePoolDrifted => "NodePoolDrifted",
            DriftReason::RequirementsDrifted => "RequirementsDrifted",
            DriftReason::NodeClassDrifted(_) => "NodeClassDrifted",
        }
    }

    /// The condition's message: what changed, where it is known.
    pub fn message(&self) -> &str {
        match self {
            DriftReason::NodeClassDrifted(why) => why,
            other => other.as_condition_reason(),
        }
    }
}

/// A NodePool's disruption settings and what a replacement node from it could be.
#[derive(Debug, Clone)]
pub struct PoolState {
    pub name: String,
    pub weight: i32,
    pub consolidation_policy: ConsolidationPolicy,
    /// `None` is `Never`: no emptiness or consolidation.
    pub consolidate_after: Option<Duration>,
    /// `None` is `Never`.
    pub expire_after: Option<Duration>,
    pub budgets: Vec<Budget>,
    /// Requirements a replacement must satisfy (instance type, zone, capacity type, arch...).
    pub requirements: Vec<PoolRequirement>,
    /// Template labels every node of the pool carries.
    pub labels: BTreeMap<String, String>,
    /// Template taints (a pod must tolerate them to move onto a replacement).
    pub taints: Vec<Taint>,
    /// Template startup taints (an agent removes them; pods need not tolerate them).
    pub startup_taints: Vec<Taint>,
    /// A static NodePool (`replicas`): never consolidated; its drifted and expired nodes are
    /// deleted without a replacement, and the static controller brings the count back.
    pub is_static: bool,
    /// The pool's usage has reached one of its `spec.limits`: it launches no more nodes, so a
    /// pending pod only it could hold waits on the limit, not on new capacity.
    pub at_limit: bool,
}

impl PoolState {
    /// A pool with upstream's defaults: `WhenEmptyOrUnderutilized`, `consolidateAfter: 0s`,
    /// `expireAfter: 720h`, one budget of 10%.
    pub fn new(name: impl Into<String>) -> Self {
        let d = kk_apis::crd::nodepool::Disruption::default();
        PoolState {
            name: name.into(),
            weight: 0,
            consolidation_policy: d.consolidation_policy,
            consolidate_after: d.consolidate_after.duration(),
            expire_after: Some(kk_apis::crd::nodepool::DEFAULT_EXPIRE_AFTER),
            budgets: d.budgets,
            requirements: Vec::new(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            is_static: false,
            at_limit: false,
        }
    }

    /// The pool as the provisioning solver reads it, for the full check of a replacement. Limits
    /// are left out: a consolidation replacement is smaller than what it replaces.
    pub fn scheduling_input(&self) -> NodePoolInput {
        NodePoolInput {
            name: self.name.clone(),
            weight: self.weight,
            requirements: self.requirements.clone(),
            labels: self.labels.clone(),
            taints: self.taints.clone(),
            startup_taints: self.startup_taints.clone(),
            ..NodePoolInput::default()
        }
    }
}

/// One pod bound to a node.
#[derive(Debug, Clone, Default)]
pub struct PodState {
    pub namespace: String,
    pub name: String,
    pub requests: Resources,
    /// Owned by a DaemonSet: not rescheduled (it goes with the node), but it uses room.
    pub daemonset: bool,
    /// A static pod mirrored by the kubelet: ignored like upstream.
    pub mirror: bool,
    /// Already terminating (deletionTimestamp set): it will not move.
    pub terminating: bool,
    /// `karpenter.sh/do-not-disrupt` is in force now (`"true"`, or a duration not yet elapsed).
    pub do_not_disrupt: bool,
    /// A PodDisruptionBudget covering it allows no disruption now.
    pub pdb_blocked: bool,
    /// `spec.priority`.
    pub priority: i32,
    /// `controller.kubernetes.io/pod-deletion-cost`.
    pub deletion_cost: i64,
    /// `spec.nodeSelector`.
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity (ORed terms); empty means none.
    pub affinity_terms: Vec<NodeSelectorTerm>,
    pub tolerations: Vec<Toleration>,
    /// The UID of the pod's controller (ReplicaSet, StatefulSet, Job...), if it has one.
    pub owner: Option<String>,
    /// A consolidation moved this owner's pods and they came back pending needing new capacity:
    /// consolidation leaves its pods alone for a while (the churn guard).
    pub consolidation_held: bool,
    /// Topology domains (label key, value) this pod must keep out of: a running pod there has a
    /// required anti-affinity term that selects it (kube-scheduler checks the existing pods'
    /// terms against every incoming pod, so a move into one of these would stay pending).
    pub kept_out_of: Vec<(String, String)>,
    /// The pod has constraints the fast fit check does not model (pod (anti-)affinity,
    /// topology spread, host ports): a plan moving it is confirmed by the full solver.
    pub needs_full_simulation: bool,
    /// The pod itself, shared with the watch cache: what the full solver reads. `None` in
    /// hand-built snapshots, whose complex pods then stay unmodelled.
    pub pod: Option<Arc<CachedPod>>,
}

impl PodState {
    pub fn new(namespace: &str, name: &str, requests: Resources) -> Self {
        PodState {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            requests,
            ..Default::default()
        }
    }

    /// Whether disruption must move this pod elsewhere (daemonset, mirror and terminating pods
    /// are not rescheduled).
    pub fn reschedulable(&self) -> bool {
        !self.daemonset && !self.mirror && !self.terminating
    }

    /// Karpenter's eviction cost: `clamp(1 + deletion-cost/2^27 + priority/2^25, -10, 10)`.
    pub fn eviction_cost(&self) -> f64 {
        let cost = 1.0
            + self.deletion_cost as f64 / f64::from(1u32 << 27)
            + f64::from(self.priority) / f64::from(1u32 << 25);
        cost.clamp(-10.0, 10.0)
    }
}

/// One node (a Node and its NodeClaim, or a Node Karpenter does not manage).
#[derive(Debug, Clone)]
pub struct NodeState {
    /// The Node's name (the NodeClaim's name when no Node exists yet).
    pub name: String,
    /// The NodeClaim's name; `None` for nodes Karpenter does not manage (they only receive pods).
    pub nodeclaim: Option<String>,
    /// `karpenter.sh/nodepool`.
    pub node_pool: Option<String>,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    /// Hourly price of its offering, micro-units.
    pub price_micros: u64,
    pub allocatable: Resources,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub created: Timestamp,
    pub initialized: bool,
    pub ready: bool,
    /// The NodeClaim or Node is being deleted, or a command already disrupts it.
    pub deleting: bool,
    /// Provisioning just placed pods here (nomination window): hands off.
    pub nominated: bool,
    /// The Node carries `karpenter.sh/do-not-disrupt: "true"`.
    pub do_not_disrupt: bool,
    /// `lastPodEventTime`, else the Initialized transition: consolidateAfter counts from it.
    pub last_pod_event: Option<Timestamp>,
    /// The NodeClaim's own `expireAfter` (copied from the pool at creation).
    pub expire_after: Option<Duration>,
    /// Set by [`super::drift`] (or the NodeClaim's `Drifted` condition).
    pub drift: Option<DriftReason>,
    pub pods: Vec<PodState>,
}

impl NodeState {
    /// A ready, initialized, managed node of `pool` with no pods.
    pub fn new(
        name: impl Into<String>,
        pool: &str,
        instance_type: &str,
        price_micros: u64,
        allocatable: Resources,
        created: Timestamp,
    ) -> Self {
        let name = name.into();
        NodeState {
            nodeclaim: Some(name.clone()),
            name,
            node_pool: Some(pool.to_owned()),
            instance_type: instance_type.to_owned(),
            zone: String::new(),
            capacity_type: "on-demand".into(),
            price_micros,
            allocatable,
            labels: BTreeMap::new(),
            taints: Vec::new(),
            created,
            initialized: true,
            ready: true,
            deleting: false,
            nominated: false,
            do_not_disrupt: false,
            last_pod_event: Some(created),
            expire_after: None,
            drift: None,
            pods: Vec::new(),
        }
    }

    pub fn managed(&self) -> bool {
        self.nodeclaim.is_some() && self.node_pool.is_some()
    }

    /// Sum of every pod's requests (daemonsets included).
    pub fn requested(&self) -> Resources {
        self.pods
            .iter()
            .filter(|p| !p.terminating)
            .fold(Resources::ZERO, |acc, p| acc.add(&p.requests))
    }

    /// Pods disruption would have to move.
    pub fn reschedulable_pods(&self) -> impl Iterator<Item = &PodState> {
        self.pods.iter().filter(|p| p.reschedulable())
    }

    /// No pods but daemonset, mirror and terminating ones.
    pub fn is_empty(&self) -> bool {
        self.reschedulable_pods().next().is_none()
    }

    /// Daemonset pods' requests: what a replacement node must also hold.
    pub fn daemon_requests(&self) -> Resources {
        self.pods
            .iter()
            .filter(|p| p.daemonset && !p.terminating)
            .fold(Resources::ZERO, |acc, p| acc.add(&p.requests))
    }

    /// Karpenter's disruption cost of this node: the sum of its evicted pods' eviction costs.
    pub fn disruption_cost(&self) -> f64 {
        self.reschedulable_pods().map(PodState::eviction_cost).sum()
    }
}

/// Everything one disruption pass reads.
#[derive(Debug, Clone)]
pub struct ClusterSnapshot {
    pub now: Timestamp,
    pub pools: Vec<PoolState>,
    pub nodes: Vec<NodeState>,
    /// The instance-type catalog (with offerings and prices) replacements are chosen from.
    pub instance_types: Vec<InstanceType>,
    /// Pods waiting for capacity: consolidation must not take room they need (they are
    /// simulated first, as upstream does).
    pub pending_pods: Vec<PodState>,
    /// DaemonSet pod templates (as pods): the full solver reserves their requests on a
    /// replacement.
    pub daemonsets: Vec<CachedPod>,
    /// What the snapshot was built from, hashed (see [`super::build`]); 0 when built by hand.
    /// With [`super::plan::quiet_key`] it tells a pass that nothing changed since the last one.
    pub fingerprint: u64,
}

impl ClusterSnapshot {
    pub fn pool(&self, name: &str) -> Option<&PoolState> {
        self.pools.iter().find(|p| p.name == name)
    }

    /// Sum of the hourly prices of every managed node.
    pub fn hourly_price_micros(&self) -> u64 {
        self.hourly_price_micros_of(None)
    }

    /// Sum of the hourly prices of the managed nodes of `pool` (of every pool for `None`),
    /// leaving out the nodes already being deleted.
    pub fn hourly_price_micros_of(&self, pool: Option<&str>) -> u64 {
        self.nodes
            .iter()
            .filter(|n| n.managed() && !n.deleting)
            .filter(|n| pool.is_none_or(|p| n.node_pool.as_deref() == Some(p)))
            .map(|n| n.price_micros)
            .sum()
    }
}
