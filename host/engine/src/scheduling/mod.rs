//! Provisioning: the scheduling simulation that turns pending pods into NodeClaim drafts.
//!
//! [`Scheduler::solve`] takes pending pods, the NodePools, the instance-type catalog, existing
//! nodes (and in-flight NodeClaims) and daemonsets, and returns where each pod goes: an existing
//! node, or a new NodeClaim draft with its resolved requirements and its ranked instance types
//! (so launch can fall back across them), plus the pods that fit nowhere and why.
//!
//! Upstream Karpenter semantics are followed (see `karpenter-behaviour.md` §3): NodePool
//! requirements and template labels intersected with nodeSelector and required node affinity,
//! preferences relaxed in Karpenter's order when unmet, taints and tolerations, topology spread
//! on zone and hostname, pod affinity and anti-affinity (including that of running pods), daemonset
//! and kubelet overhead, NodePool limits (held pessimistically at the largest candidate's
//! capacity) and weights, minValues (strict).
//!
//! Instance types for a new node are ordered by an [`InstanceRanker`]; the ranking is computed
//! once per (NodePool, pod constraints, pod shape) and reused.

pub mod fixtures;
pub mod instance_types;
pub mod model;
pub mod pod_class;
pub mod ranker;
pub mod requirements;
pub mod resources;
pub mod scheduler;
pub mod symbols;
pub mod taints;
pub mod topology;
pub mod translate;

pub use instance_types::{InstanceType, Offering, Overhead};
pub use model::{
    ExistingNode, ExistingPlacement, NodeClaimDraft, NodePoolInput, PoolRequirement,
    SchedulingProblem, SchedulingResult, Unschedulable,
};
pub use ranker::{
    Candidate, Catalog, CheapestFitRanker, InstanceRanker, OfferingSet, RankError, RankRequest,
};
pub use resources::Resources;
pub use scheduler::{Scheduler, SchedulerOptions};

#[cfg(test)]
mod behaviour_tests;
