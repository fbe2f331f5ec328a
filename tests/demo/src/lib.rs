//! The install guide, driven the way a user follows it, on a local cluster: a private control
//! plane (kwok plays the kubelets), the KakaoCloud simulator in this process (its boot hook plays
//! the kubelet of each instance that boots, registering the Node from the instance's userdata),
//! the chart installed with helm, and the controller binary run as local processes with the env
//! of the Deployment helm rendered (secretKeyRefs resolved from the Secrets, fieldRefs from the
//! Deployment's pods) and a kubeconfig of the chart's ServiceAccount, so the chart's RBAC is what
//! the controller gets. kwok shows the Deployment's pods Running and Ready but does not execute
//! them; the local processes are those pods.
//!
//! Used by `kk-demo` (scripts/demo.sh) and by the chart tests of the host crate.

mod cluster;
mod controller;
mod install;
mod kubelet;
mod plugins;
mod proxy;
mod registry;
mod tools;

pub use cluster::*;
pub use controller::*;
pub use kubelet::*;
pub use plugins::*;
pub use proxy::Proxy;
pub use registry::*;
pub use tools::*;

pub const NAMESPACE: &str = "karpenter-kakaocloud";
pub const RELEASE: &str = "karpenter-provider-kakaocloud";
pub const CLUSTER: &str = "demo-cluster";
pub const PROJECT: &str = "proj-1";
pub const SUBNET: &str = "subnet-proj-1-a";
pub const WORKER_SG: &str = "sg-proj-1-demo-cluster-worker";
pub const KUBERNETES_MINOR: &str = "1.35";
/// The managed node the controller pods run on (a KE node pool node, played by kwok).
pub const MANAGED_NODE: &str = "ke-managed-worker-1";
