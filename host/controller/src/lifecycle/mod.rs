//! The NodeClaim lifecycle: launch (instance, userdata, bootstrap token, ownership tag),
//! registration (match the Node by providerID, sync labels and taints, drop the unregistered
//! taint), initialization (startup taints gone, node Ready) and liveness (claims that never
//! register, or whose instance failed, are deleted so their pods are provisioned again).

pub mod bootstrap;
pub mod controller;

pub use controller::{JoinInfo, Lifecycle, LifecycleError};
