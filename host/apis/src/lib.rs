//! The bottom of the host: Kubernetes-facing types and rules that every other crate shares,
//! with no client and no runtime.
//!
//! - [`crd`]: the custom resources (`KCNodeClass`, `karpenter.sh/v1` `NodePool`/`NodeClaim`)
//!   and their generated CRDs;
//! - [`names`]: every label, annotation, taint, finalizer and condition type, defined once;
//! - [`provider_id`], [`hash`] (the drift hashes), [`pod`] (pod predicates), [`cached_pod`]
//!   (the pod as the caches keep it, its spec shared);
//! - [`plugin_signing`]: what a plugin signature covers (the tool signs it, the runtime checks it).

pub mod cached_pod;
pub mod crd;
pub mod hash;
pub mod names;
pub mod plugin_signing;
pub mod pod;
pub mod provider_id;

pub use crd::{
    KCNodeClass, KCNodeClassSpec, KCNodeClassStatus, NodeClaim, NodeClaimSpec, NodeClaimStatus,
    NodePool, NodePoolSpec, NodePoolStatus,
};
/// Object metadata accessors, for crates that read objects without a client.
pub use kube_core::ResourceExt;
