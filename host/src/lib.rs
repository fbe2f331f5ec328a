//! karpenter-provider-kakaocloud: the host controller.
//!
//! One module per responsibility (see DESIGN.md). Policies run as WebAssembly
//! components loaded by [`plugins`]; everything that touches money or safety
//! (KakaoCloud calls, signed ownership, NodeClaim reconciliation) lives here.
pub mod config;
pub mod crd;
pub mod disruption;
pub mod gc;
pub mod kakaocloud;
pub mod lifecycle;
pub mod metrics;
pub mod nodeclass;
pub mod operator;
pub mod ownership;
pub mod plugins;
pub mod provisioning;
pub mod termination;
