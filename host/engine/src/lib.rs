//! The decision engine: pure functions from cluster objects to decisions.
//!
//! - [`scheduling`]: the scheduling simulation that turns pending pods into NodeClaim drafts,
//!   and the [`scheduling::InstanceRanker`] seam the instance-selector plugin implements;
//! - [`disruption`]: the disruption planner (model, plan, simulate, budgets, cron) and the
//!   [`disruption::ConsolidationScorer`] seam;
//! - [`userdata`]: the [`userdata::UserdataRenderer`] seam and the built-in kubeadm renderer.
//!
//! Invariant: nothing here does I/O or needs an async runtime (the crate does not depend on
//! kube's client, tokio, reqwest or wasmtime), so the controller runs it on blocking threads
//! and the benches run it alone.

pub mod disruption;
pub mod scheduling;
pub mod userdata;
