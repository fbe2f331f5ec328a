//! Finalization of NodeClaims that never registered: their instance is deleted through the
//! verifying path, then the finalizer is dropped. Registered ones belong to `termination`.

use super::*;

/// How often a requested deletion is checked until the instance is gone (the official Terraform
/// provider polls every 2 s).
const DELETE_POLL: Duration = Duration::from_secs(2);

/// What finalizing a deleted NodeClaim means here.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Finalization {
    /// Not held by our finalizer, or registered: a registered node's drain and instance deletion
    /// are the termination controller's job.
    NotOurs,
    /// Launched: delete this instance.
    Instance(String),
    /// Maybe created but never recorded (killed between create and status): look the
    /// deterministic name up.
    ByName,
}

pub(super) fn finalization(nc: &NodeClaim) -> Finalization {
    let held = nc.finalizers().iter().any(|f| f == finalizer::TERMINATION);
    if !held || nc.is_registered() {
        return Finalization::NotOurs;
    }
    match nc.instance() {
        Some((_, id)) => Finalization::Instance(id.to_owned()),
        None => Finalization::ByName,
    }
}

impl Lifecycle {
    /// Deletes instance `id` of NodeClaim `claim` through the verifying path. An untagged
    /// instance with the claim's deterministic name was launched but never tagged (killed between
    /// create and tag): it is adopted the way the launch would have, then deleted. One carrying
    /// any other tag is not ours and is left alone. `Ok(false)` while the instance still exists
    /// (deletion requested or in progress): the caller asks again until it is gone.
    pub(super) async fn delete_instance(
        &self,
        claim: &str,
        instance_name: &str,
        id: &str,
    ) -> Result<bool, LifecycleError> {
        use kakaocloud::DeleteOwnedError::{Api, NotOwned};
        let keyring = self.keyring.current();
        let cluster = &self.settings.cluster_name;
        let not_owned = match self
            .cloud
            .instances()
            .delete_owned(id, &keyring, cluster, claim)
            .await
        {
            Ok((outcome, _)) => return Ok(outcome.is_gone()),
            Err(Api(kakaocloud::Error::NotFound { .. })) => return Ok(true),
            Err(Api(e)) => return Err(e.into()),
            Err(NotOwned(e)) => e,
        };
        let untagged_ours = self.cloud.instances().get(id).await.ok().filter(|i| {
            i.name.as_deref() == Some(instance_name)
                && i.description
                    .as_deref()
                    .is_none_or(|d| ownership::tags_in(d).next().is_none())
        });
        let Some(found) = untagged_ours else {
            return Err(LifecycleError::NotReady(format!(
                "instance {id} is not ours: {not_owned}"
            )));
        };
        self.ensure_tagged(claim, &found).await?;
        match self
            .cloud
            .instances()
            .delete_owned(id, &keyring, cluster, claim)
            .await
        {
            Ok((outcome, _)) => Ok(outcome.is_gone()),
            Err(Api(kakaocloud::Error::NotFound { .. })) => Ok(true),
            Err(e) => Err(LifecycleError::NotReady(format!(
                "instance {id} could not be deleted after tagging: {e}"
            ))),
        }
    }

    /// Deletes the instance of a NodeClaim that never registered, then drops the finalizer.
    pub(super) async fn finalize(&self, nc: &NodeClaim) -> Result<Action, LifecycleError> {
        let instance_name = naming::instance_name(&self.settings.cluster_name, &nc.name_any());
        let id = match finalization(nc) {
            Finalization::NotOurs => return Ok(Action::await_change()),
            Finalization::Instance(id) => Some(id),
            Finalization::ByName => self
                .cloud
                .instances()
                .find_by_name(&instance_name)
                .await?
                .map(|i| i.id),
        };
        if let Some(id) = id {
            if !self
                .delete_instance(&nc.name_any(), &instance_name, &id)
                .await?
            {
                tracing::info!(NodeClaim = %nc.name_any(), instance = %id, "waiting for the instance to be deleted");
                return Ok(Action::requeue(DELETE_POLL));
            }
            tracing::info!(NodeClaim = %nc.name_any(), instance = %id, "deleted instance");
        }
        self.delete_bootstrap_token(&nc.name_any()).await?;
        let finalizers: Vec<String> = nc
            .finalizers()
            .iter()
            .filter(|f| *f != finalizer::TERMINATION)
            .cloned()
            .collect();
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        api.patch(
            &nc.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "finalizers": finalizers, "resourceVersion": nc.resource_version() } })),
        )
        .await?;
        tracing::info!(NodeClaim = %nc.name_any(), "deleted nodeclaim");
        self.metrics.claim_terminated(nc);
        Ok(Action::await_change())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(finalizers: &[&str], status: serde_json::Value) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "x", "finalizers": finalizers},
            "spec": {"nodeClassRef": {"group": "karpenter.kakaocloud.com", "kind": "KCNodeClass", "name": "default"}, "requirements": []},
            "status": status
        }))
        .unwrap()
    }

    #[test]
    fn unregistered_claims_are_finalized_here_registered_ones_by_termination() {
        let pid = json!({"providerID": "kakaocloud:///kr-central-2-a/i-1"});
        assert_eq!(
            finalization(&claim(&[finalizer::TERMINATION], pid.clone())),
            Finalization::Instance("i-1".into())
        );
        assert_eq!(
            finalization(&claim(&[finalizer::TERMINATION], json!({}))),
            Finalization::ByName,
            "no providerID yet: the instance may exist under its deterministic name"
        );
        let registered = json!({"providerID": "kakaocloud:///kr-central-2-a/i-1", "nodeName": "n"});
        assert_eq!(
            finalization(&claim(&[finalizer::TERMINATION], registered)),
            Finalization::NotOurs
        );
        assert_eq!(finalization(&claim(&[], pid)), Finalization::NotOurs);
    }
}
