//! Drift: a NodeClaim that no longer matches what its NodePool or KCNodeClass would launch today.
//!
//! In upstream's order: the NodePool's template hash (compared only when both sides carry the
//! same hash version), the NodePool's requirements against the NodeClaim's labels, then the
//! provider's checks: the KCNodeClass's resolved image, subnets, security groups and spec hash.
//! The hashes are computed here so the lifecycle controller stamps the same values on new
//! NodeClaims.

use std::collections::BTreeSet;

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::model::DriftReason;
use crate::crd::{KCNodeClass, KCNodeClassSpec, NodeClaim, NodePool, NodePoolSpec};
use crate::provisioning::requirements::WELL_KNOWN_LABELS;

/// The NodePool template hash, on NodePools and the NodeClaims made from them.
pub const NODEPOOL_HASH_ANNOTATION: &str = "karpenter.sh/nodepool-hash";
/// Version of the hash algorithm; hashes of different versions are not compared.
pub const NODEPOOL_HASH_VERSION_ANNOTATION: &str = "karpenter.sh/nodepool-hash-version";
pub const NODEPOOL_HASH_VERSION: &str = "v3";
/// The KCNodeClass spec hash, on KCNodeClasses and the NodeClaims launched from them.
pub const NODECLASS_HASH_ANNOTATION: &str = "karpenter.kakaocloud.com/kcnodeclass-hash";
/// Subnet the instance was launched in (set by the lifecycle controller).
pub const SUBNET_ANNOTATION: &str = "karpenter.kakaocloud.com/subnet-id";
/// Comma-separated security-group IDs the instance was launched with.
pub const SECURITY_GROUPS_ANNOTATION: &str = "karpenter.kakaocloud.com/security-group-ids";

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
    short_hash(&(
        &spec.subnet_selector_terms,
        &spec.security_group_selector_terms,
        &spec.root_volume,
        &spec.bootstrap,
        &spec.key_name,
        &spec.tags,
    ))
}

fn annotation<'a>(meta: &'a kube::api::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// Why `claim` drifted from `pool` and `class`, if it did.
pub fn detect(
    claim: &NodeClaim,
    pool: &NodePool,
    class: Option<&KCNodeClass>,
) -> Option<DriftReason> {
    // 1. NodePool template hash, same version only.
    let versions_match = annotation(&claim.metadata, NODEPOOL_HASH_VERSION_ANNOTATION)
        == annotation(&pool.metadata, NODEPOOL_HASH_VERSION_ANNOTATION);
    let pool_hash = annotation(&pool.metadata, NODEPOOL_HASH_ANNOTATION)
        .map(str::to_owned)
        .unwrap_or_else(|| nodepool_hash(&pool.spec));
    if versions_match
        && let Some(claim_hash) = annotation(&claim.metadata, NODEPOOL_HASH_ANNOTATION)
        && claim_hash != pool_hash
    {
        return Some(DriftReason::NodePoolDrifted);
    }
    // 2. Requirements against the NodeClaim's labels (undefined well-known labels allowed).
    let empty = Default::default();
    let labels = claim.metadata.labels.as_ref().unwrap_or(&empty);
    for r in &pool.spec.template.spec.requirements {
        let value = labels.get(&r.key).map(String::as_str);
        let ok =
            r.allows(value) || (value.is_none() && WELL_KNOWN_LABELS.contains(&r.key.as_str()));
        if !ok {
            return Some(DriftReason::RequirementsDrifted);
        }
    }
    // 3. The KCNodeClass.
    let class = class?;
    if let Some(claim_hash) = annotation(&claim.metadata, NODECLASS_HASH_ANNOTATION)
        && claim_hash != nodeclass_hash(&class.spec)
    {
        return Some(DriftReason::NodeClassDrifted(
            "KCNodeClass spec changed".into(),
        ));
    }
    let status = class.status.as_ref()?;
    if let (Some(image), Some(claim_image)) = (
        status.image.as_ref(),
        claim.status.as_ref().and_then(|s| s.image_id.as_deref()),
    ) && image.id != claim_image
    {
        return Some(DriftReason::NodeClassDrifted(format!(
            "image {claim_image} is no longer the class's image {}",
            image.id
        )));
    }
    if let Some(subnet) = annotation(&claim.metadata, SUBNET_ANNOTATION)
        && !status.subnets.is_empty()
        && !status.subnets.iter().any(|s| s.id == subnet)
    {
        return Some(DriftReason::NodeClassDrifted(format!(
            "subnet {subnet} is no longer selected"
        )));
    }
    if let Some(groups) = annotation(&claim.metadata, SECURITY_GROUPS_ANNOTATION) {
        let have: BTreeSet<&str> = groups
            .split(',')
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .collect();
        let want: BTreeSet<&str> = status
            .security_groups
            .iter()
            .map(|g| g.id.as_str())
            .collect();
        if !want.is_empty() && have != want {
            return Some(DriftReason::NodeClassDrifted(
                "security groups changed".into(),
            ));
        }
    }
    None
}
