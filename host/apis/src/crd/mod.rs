//! The custom resources: `KCNodeClass` (ours) and `NodePool`/`NodeClaim`
//! (`karpenter.sh/v1`, schema-compatible with upstream Karpenter for the fields
//! users write).
//!
//! The Rust types are the source of truth: `cargo run -p karpenter-kakaocloud
//! --bin crdgen` writes `crds/*.yaml` from [`generated_files`], and a test fails
//! when the committed YAML is stale. Validation lives in the schema (patterns,
//! ranges, enums, CEL rules), so the API server refuses bad objects with a
//! message naming the field, before any controller sees them.

// kube's derive takes repeated `#[kube(printcolumn = ..)]`, which clippy mistakes for duplicates.
#![allow(clippy::duplicated_attributes)]

pub mod common;
pub mod conditions;
pub mod duration;
pub mod kcnodeclass;
pub mod nodeclaim;
pub mod nodepool;
pub mod requirement;
mod schema;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, ValidationRule,
};
use kube_core::CustomResourceExt;

pub use common::{NodeClassRef, Taint, TaintEffect};
pub use duration::{DurationError, KDuration, NillableDuration};
pub use kcnodeclass::{HyperThreading, KCNodeClass, KCNodeClassSpec, KCNodeClassStatus};
pub use nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus};
pub use nodepool::{NodePool, NodePoolSpec, NodePoolStatus};
pub use requirement::{Operator, Requirement};

const HEADER: &str = "# Generated from the Rust types in host/apis/src/crd by\n\
# `cargo run -p karpenter-kakaocloud --bin crdgen`. Do not edit by hand.\n";

/// The NodePool CRD, with the root-level rules the derive cannot attach
/// (they need `self.metadata`).
pub fn nodepool_crd() -> CustomResourceDefinition {
    let mut crd = NodePool::crd();
    for version in &mut crd.spec.versions {
        if let Some(root) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            let (rule, message) = nodepool::NAME_LENGTH_RULE;
            root.x_kubernetes_validations
                .get_or_insert_with(Vec::new)
                .push(ValidationRule {
                    rule: rule.into(),
                    message: Some(message.into()),
                    ..Default::default()
                });
        }
    }
    crd
}

/// Every CRD this project installs, in apply order.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![KCNodeClass::crd(), nodepool_crd(), NodeClaim::crd()]
}

/// File name of a CRD under `crds/`, upstream style: `<group>_<plural>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// `(file name, YAML)` for each CRD, exactly what `crds/` must hold.
pub fn generated_files() -> Result<Vec<(String, String)>, serde_yaml::Error> {
    all()
        .iter()
        .map(|crd| {
            Ok((
                file_name(crd),
                format!("{HEADER}{}", serde_yaml::to_string(crd)?),
            ))
        })
        .collect()
}
