//! The NodeClaim lifecycle controller (launch -> registration -> initialization -> liveness).
//!
//! Restart safety: the instance name is a pure function of (cluster, NodeClaim), and launch
//! looks the name up before creating, so a controller killed between "create" and "status
//! written" finds its instance instead of launching a second one.
//!
//! Finalization here covers NodeClaims that never registered (launch failures, liveness);
//! a registered NodeClaim's drain and deletion belong to `termination`.

use kk_apis::names;
use kk_apis::names::{condition, finalizer, label, taint};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::config::Settings;
use crate::metrics::{Metrics, NodePoolReason};
use crate::provisioning::catalog::LiveCatalog;
use kakaocloud::api::{Instance, InstanceStatus};
use kakaocloud::ownership::{self, KeyringHandle};
use kakaocloud::{self, LaunchSpec, naming};
use kk_apis::crd::conditions::{DesiredCondition, is_true, set_condition};
use kk_apis::crd::{KCNodeClass, NodeClaim};
use kk_engine::scheduling::instance_types::InstanceType;

use crate::state::ClusterState;
use kk_engine::scheduling::translate;

use super::bootstrap::BootstrapToken;
use kk_apis::provider_id::{parse_provider_id, provider_id};
use kk_engine::userdata::{UserdataInput, UserdataRenderer};

/// Where nodes join: the API server and its CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinInfo {
    pub api_endpoint: String,
    pub ca_pem: String,
    pub ca_hash: String,
}

#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    #[error("kakaocloud: {0}")]
    Cloud(#[from] kakaocloud::Error),
    #[error("userdata: {0}")]
    Userdata(#[from] kk_engine::userdata::UserdataError),
    #[error("ownership tag: {0}")]
    Sign(#[from] ownership::SignError),
    #[error("{0}")]
    NotReady(String),
}

/// Everything the controller needs; shared by every reconcile.
pub struct Lifecycle {
    pub client: kube::Client,
    pub cloud: kakaocloud::Client,
    pub state: ClusterState,
    pub settings: Settings,
    pub keyring: KeyringHandle,
    pub renderer: Arc<dyn UserdataRenderer>,
    pub catalog: Arc<LiveCatalog>,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    pub join: JoinInfo,
}

fn now() -> Time {
    Time(Timestamp::now())
}

fn since(t: &Time) -> Duration {
    let d = Timestamp::now().duration_since(t.0);
    Duration::from_secs(d.as_secs().max(0) as u64)
}

fn condition<'a>(
    nc: &'a NodeClaim,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    nc.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// Values a NodeClaim requirement allows for `key`, in order (`None`: unconstrained).
fn allowed(nc: &NodeClaim, key: &str) -> Option<Vec<String>> {
    nc.spec
        .requirements
        .iter()
        .find(|r| r.key == key && r.operator == kk_apis::crd::Operator::In)
        .map(|r| r.values.clone())
}

fn taint_eq(a: &Taint, b: &Taint) -> bool {
    a.key == b.key && a.effect == b.effect
}

impl Lifecycle {
    /// Runs the controller until the process stops.
    pub async fn run(self: Arc<Self>) {
        let claims: Api<NodeClaim> = Api::all(self.client.clone());
        let nodes: Api<Node> = Api::all(self.client.clone());
        Controller::new(claims, watcher::Config::default())
            .watches(nodes, watcher::Config::default(), |node: Node| {
                node.labels()
                    .get(label::NODECLAIM)
                    .map(|n| ObjectRef::<NodeClaim>::new(n))
            })
            .run(
                |nc, ctx: Arc<Lifecycle>| async move { ctx.reconcile(&nc).await },
                |_nc, err, _ctx| {
                    tracing::warn!(error = %err, "nodeclaim reconcile failed");
                    Action::requeue(Duration::from_secs(2))
                },
                self,
            )
            .for_each(|_| async {})
            .await;
    }

    async fn event(&self, nc: &NodeClaim, type_: EventType, reason: &str, note: String) {
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note.chars().take(1000).collect()),
            action: "Lifecycle".into(),
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&ev, &nc.object_ref(&())).await {
            tracing::debug!(error = %err, "could not publish event");
        }
    }

    fn pool(nc: &NodeClaim) -> String {
        nc.labels()
            .get(label::NODEPOOL)
            .cloned()
            .unwrap_or_default()
    }

    /// One reconcile of one NodeClaim.
    pub async fn reconcile(&self, nc: &NodeClaim) -> Result<Action, LifecycleError> {
        if nc.metadata.deletion_timestamp.is_some() {
            return self.finalize(nc).await;
        }
        if !is_true(
            nc.status
                .as_ref()
                .map(|s| s.conditions.as_slice())
                .unwrap_or(&[]),
            condition::LAUNCHED,
        ) {
            return self.launch(nc).await;
        }
        let Some(pid) = nc.status.as_ref().and_then(|s| s.provider_id.clone()) else {
            return self.launch(nc).await;
        };
        let node = self
            .state
            .nodes
            .state()
            .into_iter()
            .filter(|n| {
                n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(pid.as_str())
            })
            .collect::<Vec<_>>();
        match node.as_slice() {
            [] => self.await_registration(nc, &pid).await,
            [node] => self.registered(nc, node).await,
            many => {
                self.set_conditions(
                    nc,
                    &[DesiredCondition::falsy(
                        condition::REGISTERED,
                        "MultipleNodesFound",
                        format!("{} nodes have providerID {pid}", many.len()),
                    )],
                    None,
                )
                .await?;
                Ok(Action::requeue(Duration::from_secs(10)))
            }
        }
    }

    async fn set_conditions(
        &self,
        nc: &NodeClaim,
        desired: &[DesiredCondition],
        extra: Option<serde_json::Value>,
    ) -> Result<(), LifecycleError> {
        let mut conditions = nc
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let t = now();
        let mut changed = false;
        for d in desired {
            changed |= set_condition(&mut conditions, d, nc.metadata.generation, &t);
        }
        let ready = [
            condition::LAUNCHED,
            condition::REGISTERED,
            condition::INITIALIZED,
        ]
        .iter()
        .all(|c| is_true(&conditions, c));
        let ready_cond = if ready {
            DesiredCondition::truthy(condition::READY, "Ready", "")
        } else {
            let missing = [
                condition::LAUNCHED,
                condition::REGISTERED,
                condition::INITIALIZED,
            ]
            .into_iter()
            .find(|c| !is_true(&conditions, c))
            .unwrap_or(condition::LAUNCHED);
            DesiredCondition::falsy(
                condition::READY,
                "NotReady",
                format!("{missing} is not True"),
            )
        };
        changed |= set_condition(&mut conditions, &ready_cond, nc.metadata.generation, &t);
        if !changed && extra.is_none() {
            return Ok(());
        }
        let mut status = json!({ "conditions": conditions });
        if let Some(serde_json::Value::Object(extra)) = extra {
            for (k, v) in extra {
                status[k] = v;
            }
        }
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        api.patch_status(
            &nc.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await?;
        Ok(())
    }

    fn nodeclass(&self, nc: &NodeClaim) -> Result<Arc<KCNodeClass>, String> {
        let name = &nc.spec.node_class_ref.name;
        self.state
            .nodeclasses
            .state()
            .into_iter()
            .find(|c| &c.name_any() == name)
            .ok_or_else(|| format!("KCNodeClass {name} not found"))
    }

    async fn launch(&self, nc: &NodeClaim) -> Result<Action, LifecycleError> {
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
            )
            .await;
            return self.delete_claim(nc, "launch_timeout").await;
        }
        let class = match self.nodeclass(nc) {
            Ok(c) => c,
            Err(msg) => {
                self.set_conditions(
                    nc,
                    &[DesiredCondition::falsy(
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
                &[DesiredCondition::falsy(
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
                &[DesiredCondition::falsy(
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

        let types = allowed(nc, label::INSTANCE_TYPE).unwrap_or_default();
        let zones = allowed(nc, label::ZONE);
        let mut tried = Vec::new();
        for type_name in &types {
            let Some(it) = catalog.iter().find(|t| &t.name == type_name) else {
                continue;
            };
            for offering in &it.offerings {
                if !offering.available
                    || zones.as_ref().is_some_and(|z| !z.contains(&offering.zone))
                {
                    continue;
                }
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
                    description: Some(format!("karpenter node {name}")),
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
                            &[DesiredCondition {
                                type_: condition::LAUNCHED,
                                status: false,
                                reason: "LaunchFailed".into(),
                                message: err.to_string().chars().take(300).collect(),
                            }],
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
        )
        .await;
        self.metrics
            .nodeclaims_disrupted
            .get_or_create(&NodePoolReason {
                nodepool: Self::pool(nc),
                reason: "insufficient_capacity".into(),
            })
            .inc();
        self.delete_claim(nc, "insufficient_capacity").await
    }

    async fn userdata(
        &self,
        nc: &NodeClaim,
        it: &InstanceType,
        zone: &str,
        node_name: &str,
        version: &str,
    ) -> Result<String, LifecycleError> {
        let token = BootstrapToken::generate();
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.client.clone(), "kube-system");
        secrets
            .create(
                &PostParams::default(),
                &token.secret(
                    &nc.name_any(),
                    Timestamp::now(),
                    self.settings.bootstrap_token_ttl,
                ),
            )
            .await?;
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
        Ok(self.renderer.render(&input)?)
    }

    /// The labels a node of `it` in `zone` for `nc` carries.
    fn node_labels(
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
    async fn ensure_tagged(&self, claim: &str, instance: &Instance) -> Result<(), LifecycleError> {
        let keyring = self.keyring.current();
        let tagged = instance.description.as_deref().is_some_and(|d| {
            keyring
                .verify_description(d, &self.settings.cluster_name, &instance.id)
                .is_ok()
        });
        if !tagged {
            let tag = keyring.sign(&self.settings.cluster_name, claim, &instance.id)?;
            let description =
                ownership::compose_description(instance.description.as_deref().unwrap_or(""), &tag);
            self.cloud
                .instances()
                .update_description(&instance.id, &description)
                .await?;
        }
        Ok(())
    }

    async fn launched(
        &self,
        nc: &NodeClaim,
        instance: &Instance,
        catalog: &[InstanceType],
        image_id: &str,
    ) -> Result<Action, LifecycleError> {
        let name = nc.name_any();
        // Ownership tag first: an untagged instance could never be deleted safely.
        self.ensure_tagged(&name, instance).await?;
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
                DesiredCondition {
                    type_: condition::REGISTERED,
                    status: false,
                    reason: "NodeNotFound".into(),
                    message: "Node not registered with cluster".into(),
                },
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

    async fn await_registration(
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
                    )
                    .await;
                    return self.delete_claim(nc, "instance_error").await;
                }
                Err(kakaocloud::Error::NotFound { .. }) => {
                    self.event(
                        nc,
                        EventType::Warning,
                        "InstanceNotFound",
                        format!("instance {id} is gone"),
                    )
                    .await;
                    return self.delete_claim(nc, "garbage_collected").await;
                }
                _ => {}
            }
        }
        let launched_at =
            condition(nc, condition::LAUNCHED).map(|c| c.last_transition_time.clone());
        if let Some(at) = launched_at
            && since(&at) > self.settings.registration_ttl
        {
            self.event(
                nc,
                EventType::Warning,
                "RegistrationTimeout",
                format!(
                    "no Node registered within {:?}",
                    self.settings.registration_ttl
                ),
            )
            .await;
            return self.delete_claim(nc, "registration_timeout").await;
        }
        Ok(Action::requeue(Duration::from_secs(2)))
    }

    async fn registered(&self, nc: &NodeClaim, node: &Node) -> Result<Action, LifecycleError> {
        let node_name = node.name_any();
        let nodes: Api<Node> = Api::all(self.client.clone());
        let mut taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        let labels = node.labels();
        let first_sync = labels.get(label::REGISTERED).is_none_or(|v| v != "true");
        if first_sync {
            if !taints.iter().any(|t| t.key == taint::UNREGISTERED) {
                self.event(
                    nc,
                    EventType::Warning,
                    "UnregisteredTaintMissing",
                    format!(
                        "node {node_name} registered without the {} taint",
                        taint::UNREGISTERED
                    ),
                )
                .await;
            }
            let sync_taints = labels
                .get("karpenter.sh/do-not-sync-taints")
                .is_none_or(|v| v != "true");
            if sync_taints {
                for t in nc
                    .spec
                    .taints
                    .iter()
                    .chain(nc.spec.startup_taints.iter())
                    .map(Taint::from)
                {
                    if !taints.iter().any(|x| taint_eq(x, &t)) {
                        taints.push(t);
                    }
                }
            }
            taints.retain(|t| t.key != taint::UNREGISTERED);
            let mut new_labels: BTreeMap<String, String> = nc.labels().clone();
            new_labels.insert(label::REGISTERED.into(), "true".into());
            let mut finalizers = node.finalizers().to_vec();
            if !finalizers.iter().any(|f| f == finalizer::TERMINATION) {
                finalizers.push(finalizer::TERMINATION.into());
            }
            let owner = json!([{
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodeClaim",
                "name": nc.name_any(),
                "uid": nc.uid().unwrap_or_default(),
                "blockOwnerDeletion": true,
            }]);
            nodes
                .patch(
                    &node_name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({
                        "metadata": {
                            "labels": new_labels,
                            "finalizers": finalizers,
                            "ownerReferences": owner,
                            "resourceVersion": node.resource_version(),
                        },
                        "spec": { "taints": taints },
                    })),
                )
                .await?;
            tracing::info!(NodeClaim = %nc.name_any(), Node = %node_name, "registered nodeclaim");
            self.metrics
                .nodes_created
                .get_or_create(&NodePoolReason {
                    nodepool: Self::pool(nc),
                    reason: "provisioned".into(),
                })
                .inc();
        }
        let registered_cond = DesiredCondition::truthy(condition::REGISTERED, "Registered", "");
        // Initialization: Ready, no startup or ephemeral taints left.
        let node_ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let startup: Vec<Taint> = nc.spec.startup_taints.iter().map(Taint::from).collect();
        // With Cilium the userdata registers the node with the agent's taint; the agent removes
        // it once networking works, so it is a startup taint whether or not the NodePool says so.
        let cilium = self.settings.cni == "cilium";
        let blocking = taints
            .iter()
            .find(|t| {
                translate::is_ephemeral_taint(t)
                    || startup.iter().any(|s| taint_eq(s, t))
                    || (cilium && t.key == taint::CILIUM_AGENT_NOT_READY)
            })
            .map(|t| t.key.clone());
        let initialized = node_ready && blocking.is_none();
        let init_cond = if initialized {
            DesiredCondition::truthy(condition::INITIALIZED, "Initialized", "")
        } else if !node_ready {
            DesiredCondition::falsy(condition::INITIALIZED, "NodeNotReady", "Node is not Ready")
        } else {
            DesiredCondition::falsy(
                condition::INITIALIZED,
                "StartupTaintsExist",
                format!("taint {} is still present", blocking.unwrap_or_default()),
            )
        };
        if initialized && labels.get(label::INITIALIZED).is_none_or(|v| v != "true") {
            nodes
                .patch(
                    &node_name,
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({ "metadata": { "labels": { label::INITIALIZED: "true" } } }),
                    ),
                )
                .await?;
            tracing::info!(NodeClaim = %nc.name_any(), Node = %node_name, "initialized nodeclaim");
        }
        self.set_conditions(
            nc,
            &[registered_cond, init_cond],
            Some(json!({ "nodeName": node_name })),
        )
        .await?;
        Ok(if initialized {
            Action::requeue(Duration::from_secs(300))
        } else {
            Action::requeue(Duration::from_secs(2))
        })
    }

    async fn delete_claim(&self, nc: &NodeClaim, reason: &str) -> Result<Action, LifecycleError> {
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        match api.delete(&nc.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(err) => return Err(err.into()),
        }
        tracing::info!(NodeClaim = %nc.name_any(), reason, "deleting nodeclaim");
        self.metrics
            .nodeclaims_disrupted
            .get_or_create(&NodePoolReason {
                nodepool: Self::pool(nc),
                reason: reason.into(),
            })
            .inc();
        Ok(Action::requeue(Duration::from_secs(1)))
    }

    /// Deletes instance `id` of NodeClaim `claim` through the verifying path. An untagged
    /// instance with the claim's deterministic name was launched but never tagged (killed between
    /// create and tag): it is adopted the way the launch would have, then deleted. One carrying
    /// any other tag is not ours and is left alone.
    async fn delete_instance(
        &self,
        claim: &str,
        instance_name: &str,
        id: &str,
    ) -> Result<(), LifecycleError> {
        use kakaocloud::DeleteOwnedError::{Api, NotOwned};
        let keyring = self.keyring.current();
        let cluster = &self.settings.cluster_name;
        let not_owned = match self
            .cloud
            .instances()
            .delete_owned(id, &keyring, cluster)
            .await
        {
            Ok(_) | Err(Api(kakaocloud::Error::NotFound { .. })) => return Ok(()),
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
            .delete_owned(id, &keyring, cluster)
            .await
        {
            Ok(_) | Err(Api(kakaocloud::Error::NotFound { .. })) => Ok(()),
            Err(e) => Err(LifecycleError::NotReady(format!(
                "instance {id} could not be deleted after tagging: {e}"
            ))),
        }
    }

    /// Deletes the instance of a NodeClaim that never registered, then drops the finalizer.
    async fn finalize(&self, nc: &NodeClaim) -> Result<Action, LifecycleError> {
        if !nc.finalizers().iter().any(|f| f == finalizer::TERMINATION) {
            return Ok(Action::await_change());
        }
        let registered = nc
            .status
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some();
        if registered {
            // Drain and instance deletion of a registered node: the termination controller's job.
            return Ok(Action::await_change());
        }
        let instance_name = naming::instance_name(&self.settings.cluster_name, &nc.name_any());
        let id = match nc
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .and_then(parse_provider_id)
        {
            Some((_, id)) => Some(id.to_owned()),
            None => self
                .cloud
                .instances()
                .find_by_name(&instance_name)
                .await?
                .map(|i| i.id),
        };
        if let Some(id) = id {
            self.delete_instance(&nc.name_any(), &instance_name, &id)
                .await?;
            tracing::info!(NodeClaim = %nc.name_any(), instance = %id, "deleted instance");
        }
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
        self.metrics
            .nodeclaims_terminated
            .get_or_create(&NodePoolReason {
                nodepool: Self::pool(nc),
                reason: "deleted".into(),
            })
            .inc();
        Ok(Action::await_change())
    }
}
