//! NodeClaim conditions written outside the lifecycle controller: disruption owns `Drifted`,
//! `Consolidatable` and `DisruptionReason`; termination owns `Drained`, `VolumesDetached` and
//! `InstanceTerminating` (upstream's types, reasons and presence rules).
//!
//! Invariant: a status merge patch replaces the whole list, so every write carries the
//! resourceVersion it was computed from, and a conflict re-reads the NodeClaim and recomputes.
//! No writer drops a condition another one set, and nothing is written when the conditions
//! already hold (a pass over thousands of NodeClaims costs no requests when nothing changed).

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use kk_apis::NodeClaim;
use kk_apis::crd::conditions::{DesiredCondition, set_condition};

/// One change to a NodeClaim's conditions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Set(DesiredCondition),
    /// Removes the condition (upstream clears Drifted and Consolidatable when they stop holding).
    Clear(&'static str),
}

impl Change {
    /// Applies the change to `conditions`; whether anything changed.
    fn apply(&self, conditions: &mut Vec<Condition>, generation: Option<i64>, now: &Time) -> bool {
        match self {
            Change::Set(desired) => set_condition(conditions, desired, generation, now),
            Change::Clear(type_) => {
                let before = conditions.len();
                conditions.retain(|c| c.type_ != *type_);
                conditions.len() != before
            }
        }
    }
}

/// Whether `changes` would change `nc`'s conditions.
pub fn needed(nc: &NodeClaim, changes: &[Change]) -> bool {
    let mut conditions = conditions_of(nc);
    let now = Time(Timestamp::now());
    let generation = nc.metadata.generation;
    changes.iter().fold(false, |changed, c| {
        c.apply(&mut conditions, generation, &now) | changed
    })
}

fn conditions_of(nc: &NodeClaim) -> Vec<Condition> {
    nc.status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default()
}

/// How many times a write conflicting with another writer is recomputed.
const ATTEMPTS: usize = 5;

/// Applies `changes` to the NodeClaim `nc` (as cached), guarded by its resourceVersion; a gone
/// NodeClaim is not an error.
pub async fn apply(
    api: &Api<NodeClaim>,
    nc: &NodeClaim,
    changes: &[Change],
) -> Result<(), kube::Error> {
    let name = nc.name_any();
    let mut current = std::borrow::Cow::Borrowed(nc);
    for attempt in 1..=ATTEMPTS {
        let mut conditions = conditions_of(&current);
        let now = Time(Timestamp::now());
        let generation = current.metadata.generation;
        let changed = changes.iter().fold(false, |changed, c| {
            c.apply(&mut conditions, generation, &now) | changed
        });
        if !changed {
            return Ok(());
        }
        let patch = json!({
            "metadata": {"resourceVersion": current.resource_version()},
            "status": {"conditions": conditions},
        });
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 && attempt < ATTEMPTS => {
                match api.get_opt(&name).await? {
                    Some(fresh) => current = std::borrow::Cow::Owned(fresh),
                    None => return Ok(()),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kk_apis::names::condition;

    fn claim(conditions: serde_json::Value) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c"},
            "spec": {"nodeClassRef": {"group": "karpenter.kakaocloud.com", "kind": "KCNodeClass", "name": "d"},
                     "requirements": []},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    #[test]
    fn nothing_is_needed_when_the_conditions_already_hold() {
        let nc = claim(
            json!([{"type": "Drifted", "status": "True", "reason": "NodePoolDrifted",
                               "message": "NodePoolDrifted", "lastTransitionTime": "2026-01-01T00:00:00Z"}]),
        );
        let drifted =
            DesiredCondition::truthy(condition::DRIFTED, "NodePoolDrifted", "NodePoolDrifted");
        assert!(!needed(&nc, &[Change::Set(drifted.clone())]));
        assert!(!needed(&nc, &[Change::Clear(condition::CONSOLIDATABLE)]));
        assert!(needed(&nc, &[Change::Clear(condition::DRIFTED)]));
        let other = DesiredCondition::truthy(
            condition::DRIFTED,
            "RequirementsDrifted",
            "RequirementsDrifted",
        );
        assert!(needed(&nc, &[Change::Set(other)]));
    }
}
