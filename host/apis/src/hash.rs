//! The hashes drift compares: what a NodePool stamps on its nodes and what a KCNodeClass
//! shapes an instance with. Launch stamps them on NodeClaims; disruption compares them.

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::crd::{HyperThreading, KCNodeClassSpec, NodePoolSpec};

/// Version of [`nodepool_hash`]; hashes of different versions are never compared.
pub const NODEPOOL_HASH_VERSION: &str = "v3";

fn short_hash<T: Serialize>(value: &T) -> String {
    // Serialising plain data cannot fail; an empty input still hashes deterministically.
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    hex::encode(&Sha256::digest(&bytes)[..8])
}

/// Hash of what a NodePool stamps on its nodes, excluding requirements (checked on their own)
/// and the disruption settings and limits (they do not change a node).
pub fn nodepool_hash(spec: &NodePoolSpec) -> String {
    let t = &spec.template;
    short_hash(&(
        &t.metadata,
        &t.spec.taints,
        &t.spec.startup_taints,
        &t.spec.node_class_ref,
        &t.spec.expire_after,
        &t.spec.termination_grace_period,
    ))
}

/// Hash of the KCNodeClass fields that shape an instance.
pub fn nodeclass_hash(spec: &KCNodeClassSpec) -> String {
    let fields = (
        &spec.subnet_selector_terms,
        &spec.security_group_selector_terms,
        &spec.root_volume,
        &spec.bootstrap,
        &spec.key_name,
        &spec.tags,
    );
    // Hyper-threading joins the hash only when it departs from the default, so classes
    // written before the field existed keep their hash and their nodes do not drift.
    match spec.hyper_threading() {
        HyperThreading::Enabled => short_hash(&fields),
        disabled => short_hash(&(fields, disabled)),
    }
}

#[cfg(test)]
mod hyper_threading_tests {
    use super::*;
    use crate::crd::KCNodeClass;

    #[test]
    fn the_default_hyper_threading_keeps_the_hash_a_change_drifts() {
        let class: KCNodeClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.kakaocloud.com/v1alpha1",
            "kind": "KCNodeClass",
            "metadata": {"name": "c"},
            "spec": {
                "subnetSelectorTerms": [{"id": "sn-1"}],
                "securityGroupSelectorTerms": [{"id": "sg-1"}],
                "bootstrap": {"kubernetesVersion": "1.35"}
            }
        }))
        .unwrap();
        let unset = nodeclass_hash(&class.spec);
        let mut spec = class.spec.clone();
        spec.hyper_threading = Some(HyperThreading::Enabled);
        assert_eq!(nodeclass_hash(&spec), unset, "explicit default: no drift");
        spec.hyper_threading = Some(HyperThreading::Disabled);
        assert_ne!(nodeclass_hash(&spec), unset, "a real change drifts");
    }
}
