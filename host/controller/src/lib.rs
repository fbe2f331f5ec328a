//! karpenter-provider-kakaocloud: the controller. The wiring of the crates below it, the one
//! shared cluster state ([`state`]), and one module per controller: [`nodeclass`],
//! [`provisioning`], [`lifecycle`] (by phase), [`termination`], [`disruption`], [`gc`].
//! Policies run as WebAssembly components (`kk_plugin_runtime`); decisions are computed by the
//! pure `kk_engine` on blocking threads. See `docs/architecture.md`.
pub mod claim_conditions;
pub mod config;
pub mod disruption;
pub mod events;
pub mod explain;
pub mod gc;
pub mod keyring;
pub mod lifecycle;
pub mod metrics;
pub mod nodeclass;
pub mod nodepool;
pub mod operator;
pub mod podevents;
pub mod provisioning;
pub mod repair;
pub mod retry;
pub mod state;
pub mod static_capacity;
pub mod supervisor;
pub mod termination;
pub mod views;
