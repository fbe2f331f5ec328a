//! Disruption: which nodes to take away, and when, so the cluster costs less without losing pods.
//!
//! The rules are pure functions of a [`ClusterSnapshot`] (see [`plan`]): expiration, emptiness,
//! drift, multi-node and single-node consolidation in upstream Karpenter's order, bounded by each
//! NodePool's disruption [`budgets`]. Consolidation candidates are simulated alone, scored by a
//! [`ConsolidationScorer`] (the plugin, or the native [`SavingsPerDisruption`]), then the host
//! checks by simulation that their pods fit on the remaining nodes or on one cheaper replacement.

pub mod budgets;
pub mod build;
pub mod cron;
pub mod drift;
pub mod explain;
pub mod full;
pub mod model;
pub mod plan;
pub mod scorer;
pub mod simulate;

pub use model::{ClusterSnapshot, DriftReason, NodeState, PodState, PoolState, Reason};
pub use plan::{Blocker, Command, Method, Plan, Replacement, plan, still_valid};
pub use scorer::{ConsolidationScorer, SavingsPerDisruption, ScoreCandidate, ScoreError};
pub use simulate::{Outcome, Placement, Simulator};

#[cfg(test)]
mod rules_tests;
