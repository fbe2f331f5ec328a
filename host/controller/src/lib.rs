//! karpenter-provider-kakaocloud: the host controller.
//!
//! One module per responsibility (see DESIGN.md). Policies run as WebAssembly
//! components loaded by [`plugins`]; everything that touches money or safety
//! (KakaoCloud calls, signed ownership, NodeClaim reconciliation) lives here.
pub mod config;
pub mod disruption;
pub mod gc;
pub mod keyring;
pub mod lifecycle;
pub mod metrics;
pub mod nodeclass;
pub mod operator;
pub mod provisioning;
pub mod state;
pub mod termination;
