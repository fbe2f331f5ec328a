//! The solver's inputs and outputs.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kk_apis::cached_pod::CachedPod;

use super::instance_types::InstanceType;
use super::resources::Resources;

/// A NodePool requirement with its optional minValues.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolRequirement {
    pub requirement: NodeSelectorRequirement,
    pub min_values: Option<u32>,
}

/// The parts of a NodePool that scheduling reads.
#[derive(Debug, Clone, Default)]
pub struct NodePoolInput {
    pub name: String,
    /// Higher weights are tried first; no weight is 0.
    pub weight: i32,
    pub requirements: Vec<PoolRequirement>,
    /// Template labels: every node of the pool carries them.
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// Taints the node starts with and an agent removes; pods need not tolerate them.
    pub startup_taints: Vec<Taint>,
    /// `spec.limits` (cpu, memory, nvidia.com/gpu, ..., and `nodes`).
    pub limits: BTreeMap<String, Quantity>,
    /// Capacity of the pool's existing nodes and in-flight NodeClaims, counted against the limits.
    pub in_use: Resources,
    /// How many nodes the pool already has, for a `nodes` limit.
    pub nodes_in_use: u64,
}

/// A node (or an in-flight NodeClaim) pods may be placed on.
///
/// For an in-flight NodeClaim pass its resolved single-valued requirements as labels, its
/// allocatable, and its taints without startup taints (those do not keep pods off a new node).
#[derive(Debug, Clone, Default)]
pub struct ExistingNode {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub allocatable: Resources,
    /// Pods bound to it (daemonsets included): their requests are used, their labels count in
    /// topology. Shared with the watch caches, never copied.
    pub pods: Vec<std::sync::Arc<CachedPod>>,
}

/// One solve's input.
#[derive(Debug, Clone, Copy)]
pub struct SchedulingProblem<'a> {
    /// The pods to place, shared with the watch caches.
    pub pods: &'a [std::sync::Arc<CachedPod>],
    pub node_pools: &'a [NodePoolInput],
    pub instance_types: &'a [InstanceType],
    pub existing_nodes: &'a [ExistingNode],
    /// DaemonSet pod templates (as pods): their requests are reserved on every new node they would run on.
    pub daemonsets: &'a [CachedPod],
}

/// A NodeClaim to create, with everything launch needs to fall back across instance types and zones.
#[derive(Debug, Clone)]
pub struct NodeClaimDraft {
    pub node_pool: String,
    /// Resolved requirements: the pool's, the pods', topology's, plus `node.kubernetes.io/instance-type In
    /// [ranked types]`, `topology.kubernetes.io/zone In [...]` and `karpenter.sh/capacity-type In [...]`.
    pub requirements: Vec<PoolRequirement>,
    /// Template labels, `karpenter.sh/nodepool`, and single-valued custom requirements.
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    /// Feasible instance types, best first as the ranker ordered them.
    pub instance_types: Vec<String>,
    /// Sum of the pods' requests plus daemonset overhead.
    pub requests: Resources,
    /// Indices into [`SchedulingProblem::pods`].
    pub pods: Vec<usize>,
}

/// Pods placed on an existing node or in-flight NodeClaim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExistingPlacement {
    pub node: String,
    pub pods: Vec<usize>,
}

/// A pod that found no place, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unschedulable {
    pub pod: usize,
    pub reason: String,
}

/// One solve's output.
#[derive(Debug, Clone, Default)]
pub struct SchedulingResult {
    pub new_node_claims: Vec<NodeClaimDraft>,
    pub existing: Vec<ExistingPlacement>,
    pub unschedulable: Vec<Unschedulable>,
    /// How many times the ranker was called (the rest were cache hits).
    pub ranker_calls: usize,
    /// Calls whose ranker failed and were ranked natively instead, with why.
    pub ranker_fallbacks: Vec<String>,
    /// NodePools whose requirements leave no available instance type (upstream's
    /// `NoCompatibleInstanceTypes`).
    pub pools_without_types: Vec<String>,
}
