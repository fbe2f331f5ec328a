//! Liveness: a NodeClaim whose instance failed or vanished, or whose Node did not register
//! within the registration TTL, is deleted so its pods are provisioned again.

use super::*;

impl Lifecycle {
    pub(super) async fn await_registration(
        &self,
        nc: &NodeClaim,
        pid: &str,
    ) -> Result<Action, LifecycleError> {
        // An instance that failed will never register.
        if let Some((_, id)) = parse_provider_id(pid) {
            match self.cloud.instances().get(id).await {
                Ok(instance) if instance.status == Some(InstanceStatus::Error) => {
                    self.event(
                        nc,
                        EventType::Warning,
                        "InstanceFailed",
                        format!("instance {id} is in ERROR"),
                    );
                    self.state.registration_failed(&Self::pool(nc));
                    return self.delete_claim(nc, "instance_error").await;
                }
                Err(kakaocloud::Error::NotFound { .. }) => {
                    self.event(
                        nc,
                        EventType::Warning,
                        "InstanceNotFound",
                        format!("instance {id} is gone"),
                    );
                    return self.delete_claim(nc, "garbage_collected").await;
                }
                _ => {}
            }
        }
        if registration_timed_out(nc, self.settings.registration_ttl, Timestamp::now()) {
            self.event(
                nc,
                EventType::Warning,
                "RegistrationTimeout",
                format!(
                    "no Node registered within {:?}",
                    self.settings.registration_ttl
                ),
            );
            self.state.registration_failed(&Self::pool(nc));
            return self.delete_claim(nc, "registration_timeout").await;
        }
        Ok(Action::requeue(Duration::from_secs(2)))
    }

    pub(super) async fn delete_claim(
        &self,
        nc: &NodeClaim,
        reason: &str,
    ) -> Result<Action, LifecycleError> {
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        match api.delete(&nc.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(err) => return Err(err.into()),
        }
        tracing::info!(NodeClaim = %nc.name_any(), reason, "deleting nodeclaim");
        self.metrics.claim_disrupted(nc, reason);
        Ok(Action::requeue(Duration::from_secs(1)))
    }
}

/// Launched longer than `ttl` before `now` without a Node registering.
pub(super) fn registration_timed_out(nc: &NodeClaim, ttl: Duration, now: Timestamp) -> bool {
    condition(nc, condition::LAUNCHED).is_some_and(|c| {
        let waited = now.duration_since(c.last_transition_time.0);
        waited.as_secs() > 0 && waited.as_secs() as u64 > ttl.as_secs()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launched_at(t: &str) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "x"},
            "spec": {"nodeClassRef": {"group": "karpenter.kakaocloud.com", "kind": "KCNodeClass", "name": "default"}, "requirements": []},
            "status": {"conditions": [{"type": "Launched", "status": "True", "reason": "Launched", "message": "", "lastTransitionTime": t}]}
        }))
        .unwrap()
    }

    #[test]
    fn registration_times_out_only_after_the_ttl() {
        let nc = launched_at("2026-01-01T00:00:00Z");
        let ttl = Duration::from_secs(15 * 60);
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        assert!(!registration_timed_out(
            &nc,
            ttl,
            at("2026-01-01T00:10:00Z")
        ));
        assert!(!registration_timed_out(
            &nc,
            ttl,
            at("2026-01-01T00:15:00Z")
        ));
        assert!(registration_timed_out(&nc, ttl, at("2026-01-01T00:15:01Z")));
    }

    #[test]
    fn a_claim_not_yet_launched_never_times_out() {
        let mut nc = launched_at("2026-01-01T00:00:00Z");
        nc.status = None;
        assert!(!registration_timed_out(
            &nc,
            Duration::ZERO,
            Timestamp::now()
        ));
    }
}
