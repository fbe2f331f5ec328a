//! Launch: resolve the KCNodeClass, render the userdata (with a bootstrap token), create the
//! instance under its deterministic name (or find it after a restart), sign its ownership tag,
//! and write providerID, capacity and `Launched` on the NodeClaim. Falls back across the ranked
//! offerings when one is out of capacity.

use super::*;
use std::collections::HashMap;
use std::sync::Mutex;

/// How long a created instance is remembered: long past any watch lag, short enough that the
/// map stays small.
const LAUNCH_CACHE_TTL: Duration = Duration::from_secs(60);

/// Userdata renders in flight at once, process-wide.
static RENDER_SLOTS: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(kk_plugin_runtime::engine::MAX_CONCURRENT_CALLS as usize);

/// The instances this process created, by NodeClaim UID (upstream keeps the same cache in
/// `nodeclaim/lifecycle/launch.go`). A reconcile of a claim whose cached copy predates its
/// `status.providerID` takes the instance from here instead of creating a second one.
#[derive(Default)]
pub struct LaunchCache(Mutex<HashMap<String, (Instance, Instant)>>);

impl LaunchCache {
    fn get(&self, uid: &str) -> Option<Instance> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, (_, at)| at.elapsed() < LAUNCH_CACHE_TTL);
        map.get(uid).map(|(instance, _)| instance.clone())
    }

    pub(super) fn insert(&self, uid: &str, instance: &Instance) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.insert(uid.to_owned(), (instance.clone(), Instant::now()));
    }
}

impl Lifecycle {
    pub(super) fn nodeclass(&self, nc: &NodeClaim) -> Result<Arc<KCNodeClass>, String> {
        let name = &nc.spec.node_class_ref.name;
        self.state
            .nodeclasses
            .state()
            .into_iter()
            .find(|c| &c.name_any() == name)
            .ok_or_else(|| format!("KCNodeClass {name} not found"))
    }

    pub(super) async fn launch(&self, nc: &NodeClaim) -> Result<Action, LifecycleError> {
        let name = nc.name_any();
        let instance_name = naming::instance_name(&self.settings.cluster_name, &name);
        // Liveness of launch: give up after the launch timeout.
        if let Some(created) = nc.metadata.creation_timestamp.as_ref()
            && since(created) > self.settings.launch_timeout
        {
            self.event(
                nc,
                EventType::Warning,
                "LaunchTimeout",
                "not launched in time".into(),
            );
            self.state.registration_failed(&Self::pool(nc));
            return self.delete_claim(nc, "launch_timeout").await;
        }
        // Nothing is created for a claim whose instance could never carry its ownership tag.
        if let Err(err) = self
            .keyring
            .current()
            .check_signable(&self.settings.cluster_name, &name)
        {
            let message = format!("NodeClaim name cannot be signed into the instance: {err}");
            self.event(
                nc,
                EventType::Warning,
                "InvalidNodeClaimName",
                message.clone(),
            );
            self.set_conditions(
                nc,
                &[DesiredCondition::unknown(
                    condition::LAUNCHED,
                    "InvalidNodeClaimName",
                    message,
                )],
                None,
            )
            .await?;
            return self.delete_claim(nc, "invalid_name").await;
        }
        let class = match self.nodeclass(nc) {
            Ok(c) => c,
            Err(msg) => {
                self.set_conditions(
                    nc,
                    &[DesiredCondition::unknown(
                        condition::LAUNCHED,
                        "NodeClassNotReady",
                        msg,
                    )],
                    None,
                )
                .await?;
                return Ok(Action::requeue(Duration::from_secs(5)));
            }
        };
        let status = class.status.clone().unwrap_or_default();
        let Some(image) = status.image.clone() else {
            self.set_conditions(
                nc,
                &[DesiredCondition::unknown(
                    condition::LAUNCHED,
                    "NodeClassNotReady",
                    "KCNodeClass has no resolved image",
                )],
                None,
            )
            .await?;
            return Ok(Action::requeue(Duration::from_secs(5)));
        };
        if status.subnets.is_empty() {
            self.set_conditions(
                nc,
                &[DesiredCondition::unknown(
                    condition::LAUNCHED,
                    "NodeClassNotReady",
                    "KCNodeClass has no resolved subnets",
                )],
                None,
            )
            .await?;
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
        let catalog = self.catalog.instance_types().await?;

        // A stale read of a claim this process already launched.
        let uid = nc.uid().unwrap_or_default();
        if let Some(instance) = self.launches.get(&uid) {
            return self.launched(nc, &instance, &catalog, &image.id).await;
        }
        // Restart safety: an instance of this name is this claim's.
        let started = Instant::now();
        let existing = self.cloud.instances().find_by_name(&instance_name).await;
        self.metrics.observe_cloud(
            "Get",
            started.elapsed().as_secs_f64(),
            existing.as_ref().err().map(|_| "List"),
        );
        if let Some(instance) = existing? {
            tracing::info!(NodeClaim = %name, instance = %instance.id, "found instance launched earlier");
            return self.launched(nc, &instance, &catalog, &image.id).await;
        }

        let mut tried = Vec::new();
        for (it, offering) in launch_candidates(nc, &catalog) {
            {
                let Some(subnet) = status
                    .subnets
                    .iter()
                    .find(|s| s.zone.as_deref().is_none_or(|z| z == offering.zone))
                else {
                    continue;
                };
                let user_data = self
                    .userdata(
                        nc,
                        it,
                        &offering.zone,
                        &instance_name,
                        &image.kubernetes_version,
                    )
                    .await?;
                let spec = LaunchSpec {
                    name: instance_name.clone(),
                    flavor_id: it.label(label::FLAVOR_ID).unwrap_or(&it.name).to_owned(),
                    image_id: image.id.clone(),
                    subnet_id: subnet.id.clone(),
                    security_groups: status
                        .security_groups
                        .iter()
                        .map(|g| g.name.clone().unwrap_or_else(|| g.id.clone()))
                        .collect(),
                    key_name: class.spec.key_name.clone(),
                    root_volume_gib: class.spec.root_volume.size_gib.max(1) as u32,
                    delete_root_volume_on_termination: class.spec.root_volume.delete_on_termination,
                    user_data: Some(user_data),
                    availability_zone: Some(offering.zone.clone()),
                    // Attributable from its first moment: a duplicate made by a lost answer
                    // and a lagging list is found by garbage collection through this marker.
                    description: Some(ownership::compose_description(
                        &format!("karpenter node {name}"),
                        &self
                            .keyring
                            .current()
                            .mark(&self.settings.cluster_name, &name)?,
                    )),
                    disable_hyper_threading: class.spec.hyper_threading()
                        == kk_apis::crd::HyperThreading::Disabled,
                };
                let started = Instant::now();
                let created = self.cloud.instances().create(&spec).await;
                let err_kind = created.as_ref().err().map(|e| {
                    if e.is_capacity() {
                        "InsufficientCapacity"
                    } else {
                        "CreateError"
                    }
                });
                self.metrics
                    .observe_cloud("Create", started.elapsed().as_secs_f64(), err_kind);
                match created {
                    Ok(instance) => {
                        self.launches.insert(&uid, &instance);
                        tracing::info!(NodeClaim = %name, instance = %instance.id,
                            instance_type = %it.name, zone = %offering.zone, "launched nodeclaim");
                        return self.launched(nc, &instance, &catalog, &image.id).await;
                    }
                    Err(err) if err.is_capacity() => {
                        tracing::info!(NodeClaim = %name, instance_type = %it.name, zone = %offering.zone,
                            error = %err, "offering has no capacity; trying the next");
                        self.catalog.unavailable.mark(
                            &it.name,
                            &offering.zone,
                            names::CAPACITY_TYPE_ON_DEMAND,
                        );
                        tried.push(format!("{}/{}", it.name, offering.zone));
                    }
                    Err(err) => {
                        self.set_conditions(
                            nc,
                            &[DesiredCondition::unknown(
                                condition::LAUNCHED,
                                "LaunchFailed",
                                err.to_string().chars().take(300).collect::<String>(),
                            )],
                            None,
                        )
                        .await?;
                        return Err(err.into());
                    }
                }
            }
        }
        // Nothing could launch: let the pods be provisioned again with fresh availability.
        self.event(
            nc,
            EventType::Warning,
            "InsufficientCapacityError",
            format!(
                "NodeClaim {name} could not launch: no capacity in {}",
                if tried.is_empty() {
                    "any offering".into()
                } else {
                    tried.join(", ")
                }
            ),
        );
        self.metrics.claim_disrupted(nc, "insufficient_capacity");
        self.delete_claim(nc, "insufficient_capacity").await
    }

    pub(super) async fn userdata(
        &self,
        nc: &NodeClaim,
        it: &InstanceType,
        zone: &str,
        node_name: &str,
        version: &str,
    ) -> Result<String, LifecycleError> {
        let token = BootstrapToken::for_claim(&self.settings.cluster_name, &nc.name_any());
        let secret = token.secret(
            &nc.name_any(),
            Timestamp::now(),
            self.settings.bootstrap_token_ttl,
        );
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.client.clone(), "kube-system");
        match secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => {}
            // One token per claim: a retried launch replaces the token of the earlier attempt.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                self.delete_bootstrap_token(&nc.name_any()).await?;
                secrets.create(&PostParams::default(), &secret).await?;
            }
            Err(e) => return Err(e.into()),
        }
        let input = UserdataInput {
            api_endpoint: self.join.api_endpoint.clone(),
            ca_pem: self.join.ca_pem.clone(),
            ca_hash: self.join.ca_hash.clone(),
            bootstrap_token: token.token(),
            kubernetes_version: self
                .settings
                .kubernetes_version
                .clone()
                .unwrap_or_else(|| version.to_owned()),
            node_name: node_name.to_owned(),
            labels: self.node_labels(nc, it, zone),
            taints: nc.spec.taints.iter().map(Taint::from).collect(),
            startup_taints: nc.spec.startup_taints.iter().map(Taint::from).collect(),
            kubelet_args: [("max-pods".to_owned(), self.settings.max_pods.to_string())].into(),
            cni: self.settings.cni.clone(),
        };
        // A plugin renderer runs WebAssembly: off the async workers, and no more calls at once
        // than the runtime's instance pool holds (a launch wave of hundreds of claims would
        // otherwise fail instantiations beyond it, each on a blocking thread of its own).
        let _slot = RENDER_SLOTS
            .acquire()
            .await
            .map_err(|e| LifecycleError::NotReady(format!("userdata slots closed: {e}")))?;
        let renderer = Arc::clone(&self.renderer);
        let text = tokio::task::spawn_blocking(move || renderer.render(&input))
            .await
            .map_err(|e| LifecycleError::NotReady(format!("userdata task failed: {e}")))??;
        // Whatever rendered it, nothing malformed reaches an instance.
        kk_engine::userdata::validate(&text, kk_engine::userdata::USERDATA_MAX_BYTES).map_err(
            |e| kk_engine::userdata::UserdataError::Invalid {
                renderer: self.renderer.name().to_owned(),
                message: e.to_string(),
            },
        )?;
        Ok(text)
    }

    /// The labels a node of `it` in `zone` for `nc` carries.
    pub(super) fn node_labels(
        &self,
        nc: &NodeClaim,
        it: &InstanceType,
        zone: &str,
    ) -> BTreeMap<String, String> {
        let mut labels: BTreeMap<String, String> = it
            .labels
            .iter()
            .filter(|(k, _)| k != label::FLAVOR_ID)
            .cloned()
            .collect();
        labels.insert(label::INSTANCE_TYPE.into(), it.name.clone());
        labels.insert(label::ZONE.into(), zone.to_owned());
        labels.insert(
            label::CAPACITY_TYPE.into(),
            names::CAPACITY_TYPE_ON_DEMAND.into(),
        );
        for (k, v) in nc.labels() {
            labels.insert(k.clone(), v.clone());
        }
        labels.insert(label::NODECLAIM.into(), nc.name_any());
        labels
    }

    /// Signs `instance` (created for NodeClaim `claim`, found by its deterministic name) unless
    /// its tag already verifies. The create and the tag are two calls (the tag binds the
    /// instance ID), so a controller killed between them leaves an untagged instance that only
    /// this step adopts.
    pub(super) async fn ensure_tagged(
        &self,
        claim: &str,
        instance: &Instance,
    ) -> Result<(), LifecycleError> {
        let keyring = self.keyring.current();
        let description = instance.description.as_deref().unwrap_or("");
        match keyring.adoption(
            description,
            &self.settings.cluster_name,
            claim,
            &instance.id,
        ) {
            Adoption::AlreadyOurs => Ok(()),
            Adoption::Sign => {
                let tag = keyring.sign(&self.settings.cluster_name, claim, &instance.id)?;
                let description = ownership::compose_description(description, &tag);
                self.cloud
                    .instances()
                    .update_description(&instance.id, &description)
                    .await?;
                Ok(())
            }
            // Another cluster's (or another claim's) instance under our name: leave it as it is.
            Adoption::Refuse(why) => Err(LifecycleError::NotOurs {
                instance: instance.id.clone(),
                why,
            }),
        }
    }

    pub(super) async fn launched(
        &self,
        nc: &NodeClaim,
        instance: &Instance,
        catalog: &[InstanceType],
        image_id: &str,
    ) -> Result<Action, LifecycleError> {
        let name = nc.name_any();
        // Ownership tag first: an untagged instance could never be deleted safely.
        if let Err(err) = self.ensure_tagged(&name, instance).await {
            if matches!(err, LifecycleError::NotOurs { .. }) {
                self.event(
                    nc,
                    EventType::Warning,
                    "OwnershipUnverified",
                    err.to_string(),
                );
            }
            return Err(err);
        }
        let flavor = instance
            .flavor
            .as_ref()
            .and_then(|f| f.name.clone())
            .or_else(|| instance.instance_type.clone());
        let it = flavor
            .as_deref()
            .and_then(|f| catalog.iter().find(|t| t.name == f))
            .or_else(|| {
                let id = instance.flavor.as_ref().map(|f| f.id.as_str());
                catalog.iter().find(|t| t.label(label::FLAVOR_ID) == id)
            });
        let Some(it) = it else {
            return Err(LifecycleError::NotReady(format!(
                "instance {} has a flavor the catalog does not know",
                instance.id
            )));
        };
        let zone = instance.availability_zone.clone().unwrap_or_default();
        let pid = provider_id(&zone, &instance.id);
        // Metadata: the resolved well-known labels.
        let mut labels = self.node_labels(nc, it, &zone);
        labels.remove(label::NODECLAIM);
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": labels } })),
        )
        .await?;
        let image = instance
            .image
            .as_ref()
            .map(|i| i.id.clone())
            .unwrap_or_else(|| image_id.to_owned());
        self.set_conditions(
            nc,
            &[
                DesiredCondition::truthy(condition::LAUNCHED, "Launched", ""),
                DesiredCondition::unknown(
                    condition::REGISTERED,
                    "NodeNotFound",
                    "Node not registered with cluster",
                ),
            ],
            Some(json!({
                "providerID": pid,
                "imageID": image,
                "capacity": it.capacity.to_quantities(),
                "allocatable": it.allocatable().to_quantities(),
            })),
        )
        .await?;
        Ok(Action::requeue(Duration::from_secs(1)))
    }
}

/// What launch tries, in order: the NodeClaim's instance types as the selector ranked them,
/// each type's available offerings in the zones the NodeClaim allows.
pub(super) fn launch_candidates<'a>(
    nc: &NodeClaim,
    catalog: &'a [InstanceType],
) -> Vec<(&'a InstanceType, &'a Offering)> {
    let types = allowed(nc, label::INSTANCE_TYPE).unwrap_or_default();
    let zones = allowed(nc, label::ZONE);
    types
        .iter()
        .filter_map(|name| catalog.iter().find(|t| &t.name == name))
        .flat_map(|it| it.offerings.iter().map(move |o| (it, o)))
        .filter(|(_, o)| o.available && zones.as_ref().is_none_or(|z| z.contains(&o.zone)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kk_engine::scheduling::Resources;

    fn offering(zone: &str, available: bool) -> Offering {
        Offering {
            zone: zone.into(),
            capacity_type: names::CAPACITY_TYPE_ON_DEMAND.into(),
            price_micros: 1,
            available,
        }
    }

    #[test]
    fn launch_tries_ranked_types_then_their_allowed_available_zones() {
        let catalog = vec![
            InstanceType::new(
                "cheap",
                Resources::new(2000, 4 << 30, 110),
                vec![
                    offering("a", true),
                    offering("b", false),
                    offering("c", true),
                ],
            ),
            InstanceType::new(
                "big",
                Resources::new(4000, 8 << 30, 110),
                vec![offering("a", true), offering("c", true)],
            ),
        ];
        let nc: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "x"},
            "spec": {
                "nodeClassRef": {"group": "karpenter.kakaocloud.com", "kind": "KCNodeClass", "name": "default"},
                "requirements": [
                    {"key": label::INSTANCE_TYPE, "operator": "In", "values": ["big", "cheap", "unknown"]},
                    {"key": label::ZONE, "operator": "In", "values": ["a", "b"]}
                ]
            }
        }))
        .unwrap();
        let order: Vec<(&str, &str)> = launch_candidates(&nc, &catalog)
            .into_iter()
            .map(|(it, o)| (it.name.as_str(), o.zone.as_str()))
            .collect();
        assert_eq!(
            order,
            [("big", "a"), ("cheap", "a")],
            "b is unavailable, c not allowed"
        );
    }
}
