//! Drift: a NodeClaim that no longer matches what its NodePool or KCNodeClass would launch today.
//!
//! In upstream's order: the NodePool's template hash (compared only when both sides carry the
//! same hash version), the NodePool's requirements against the NodeClaim's labels, then the
//! provider's checks: the KCNodeClass's resolved image, subnets, security groups and spec hash.
//! The hashes are computed here so the lifecycle controller stamps the same values on new
//! NodeClaims.

use kk_apis::hash;
use kk_apis::names::{annotation, label};
use std::collections::BTreeSet;

use super::model::DriftReason;
use kk_apis::crd::{KCNodeClass, NodeClaim, NodePool};

fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// Why `claim` drifted from `pool` and `class`, if it did.
pub fn detect(
    claim: &NodeClaim,
    pool: &NodePool,
    class: Option<&KCNodeClass>,
) -> Option<DriftReason> {
    // 1. NodePool template hash, computed here (the NodePool's annotation is a copy for users
    //    that lags a template change), compared only with a NodeClaim hash of the same version.
    let versions_match = annotation(&claim.metadata, annotation::NODEPOOL_HASH_VERSION)
        == Some(hash::NODEPOOL_HASH_VERSION);
    let pool_hash = hash::nodepool_hash(&pool.spec);
    if versions_match
        && let Some(claim_hash) = annotation(&claim.metadata, annotation::NODEPOOL_HASH)
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
            r.allows(value) || (value.is_none() && label::WELL_KNOWN.contains(&r.key.as_str()));
        if !ok {
            return Some(DriftReason::RequirementsDrifted);
        }
    }
    // 3. The KCNodeClass.
    let class = class?;
    if let Some(claim_hash) = annotation(&claim.metadata, annotation::NODECLASS_HASH)
        && claim_hash != hash::nodeclass_hash(&class.spec)
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
    if let Some(subnet) = annotation(&claim.metadata, annotation::SUBNET)
        && !status.subnets.is_empty()
        && !status.subnets.iter().any(|s| s.id == subnet)
    {
        return Some(DriftReason::NodeClassDrifted(format!(
            "subnet {subnet} is no longer selected"
        )));
    }
    if let Some(groups) = annotation(&claim.metadata, annotation::SECURITY_GROUPS) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(taint: &str) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.kakaocloud.com", "kind": "KCNodeClass", "name": "c"},
                "requirements": [],
                "taints": [{"key": taint, "effect": "NoSchedule"}]
            }}}
        }))
        .unwrap()
    }

    fn claim(annotations: serde_json::Value) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "p-1", "annotations": annotations},
            "spec": {"nodeClassRef": {"group": "karpenter.kakaocloud.com", "kind": "KCNodeClass", "name": "c"},
                     "requirements": []}
        }))
        .unwrap()
    }

    #[test]
    fn the_template_hash_drifts_only_between_hashes_of_one_version() {
        let old = hash::nodepool_hash(&pool("a").spec);
        let changed = pool("b");
        let stamped = |version: &str| {
            claim(
                json!({annotation::NODEPOOL_HASH: old, annotation::NODEPOOL_HASH_VERSION: version}),
            )
        };
        assert_eq!(
            detect(&stamped(hash::NODEPOOL_HASH_VERSION), &changed, None),
            Some(DriftReason::NodePoolDrifted)
        );
        assert_eq!(
            detect(&stamped(hash::NODEPOOL_HASH_VERSION), &pool("a"), None),
            None
        );
        // Another version (or none, from an older controller) is not compared.
        assert_eq!(detect(&stamped("v2"), &changed, None), None);
        assert_eq!(
            detect(
                &claim(json!({annotation::NODEPOOL_HASH: old})),
                &changed,
                None
            ),
            None
        );
    }
}
