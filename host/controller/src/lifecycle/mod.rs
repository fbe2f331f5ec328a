//! The NodeClaim lifecycle controller, one module per phase like upstream's
//! `nodeclaim/lifecycle`: [`launch`] (instance, userdata, bootstrap token, ownership tag),
//! [`registration`] (match the Node by providerID, sync labels and taints, drop the unregistered
//! taint; adopt a duplicate instance whose Node joined first), [`initialization`] (startup
//! taints gone, node Ready), [`liveness`] (claims that never register, or whose instance failed,
//! are deleted so their pods are provisioned again), and [`finalize`] for claims that never
//! registered.
//!
//! Restart safety: the instance name is a pure function of (cluster, NodeClaim), and launch
//! looks the name up before creating, so a controller killed between "create" and "status
//! written" finds its instance instead of launching a second one. Within one process a
//! [`LaunchCache`] covers the other gap, as upstream's launch cache does: a reconcile that reads
//! the claim from a cache that has not yet seen `status.providerID` (and a cloud list that does
//! not yet show the new instance) reuses the instance this process created.
//!
//! A registered NodeClaim's drain and deletion belong to `termination`.

pub mod bootstrap;
mod finalize;
mod initialization;
mod launch;
pub use launch::LaunchCache;
mod liveness;
mod registration;

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
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::config::Settings;
use crate::metrics::Metrics;
use crate::provisioning::catalog::LiveCatalog;
use kakaocloud::api::{Instance, InstanceStatus};
use kakaocloud::ownership::{self, Adoption, KeyringHandle};
use kakaocloud::{self, LaunchSpec, naming};
use kk_apis::crd::conditions::{DesiredCondition, is_true, set_condition};
use kk_apis::crd::{KCNodeClass, NodeClaim};
use kk_engine::scheduling::{InstanceType, Offering};

use crate::state::{ClusterState, Feeds};

use bootstrap::BootstrapToken;
use kk_apis::provider_id::{parse_provider_id, provider_id};
use kk_engine::userdata::{UserdataInput, UserdataRenderer};

use crate::events::Events;
use crate::retry::{Backoff, RetryHint};
use tracing::instrument;
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
    #[error(
        "instance {instance} carries an ownership tag that is not this NodeClaim's ({why}); it is never re-signed or adopted"
    )]
    NotOurs {
        instance: String,
        why: ownership::VerifyError,
    },
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
    pub events: Events,
    /// Per-NodeClaim retry delays of failed reconciles.
    pub backoff: Backoff,
    pub join: JoinInfo,
    /// Instances this process created, by NodeClaim UID, until the claim's status shows them.
    pub launches: LaunchCache,
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
/// One reconcile of one NodeClaim: the phase its status says it is in.
#[instrument(skip_all, fields(nodeclaim = %nc.name_any()))]
pub async fn reconcile(nc: Arc<NodeClaim>, ctx: Arc<Lifecycle>) -> Result<Action, LifecycleError> {
    let started = std::time::Instant::now();
    let result = ctx.step(&nc).await;
    ctx.metrics
        .reconciled("nodeclaim.lifecycle", started, result.is_ok());
    let action = result?;
    ctx.backoff.succeeded(&nc.name_any());
    Ok(action)
}

/// Retry-After from KakaoCloud when it sent one, the NodeClaim's backoff otherwise.
pub fn error_policy(nc: Arc<NodeClaim>, error: &LifecycleError, ctx: Arc<Lifecycle>) -> Action {
    ctx.backoff.error_policy(&nc.name_any(), error)
}

impl RetryHint for LifecycleError {
    fn retry_after(&self) -> Option<Duration> {
        match self {
            LifecycleError::Cloud(e) => e.retry_after(),
            _ => None,
        }
    }
}

impl Lifecycle {
    /// Runs the controller until the process stops, driven by the shared NodeClaim and Node
    /// watches (a Node event wakes the NodeClaim its `karpenter.kakaocloud.com/nodeclaim` names).
    pub async fn run(self: Arc<Self>, feeds: Feeds) {
        Controller::for_shared_stream(feeds.nodeclaims, self.state.nodeclaims.clone())
            .watches_shared_stream(feeds.nodes, |node: Arc<Node>| {
                node.labels()
                    .get(label::NODECLAIM)
                    .map(|n| ObjectRef::<NodeClaim>::new(n))
            })
            .run(reconcile, error_policy, self)
            .for_each(|_| async {})
            .await;
    }

    /// Deletes NodeClaim `claim`'s bootstrap token, if it has one (the token joined its node, or
    /// the claim is going away).
    async fn delete_bootstrap_token(&self, claim: &str) -> Result<(), LifecycleError> {
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.client.clone(), "kube-system");
        let name = bootstrap::secret_name(&self.settings.cluster_name, claim);
        match secrets.delete(&name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn event(&self, nc: &NodeClaim, type_: EventType, reason: &str, note: String) {
        self.events
            .publish(&nc.object_ref(&()), type_, reason, note);
    }

    fn pool(nc: &NodeClaim) -> String {
        nc.labels()
            .get(label::NODEPOOL)
            .cloned()
            .unwrap_or_default()
    }

    /// The next step of `nc`, by phase.
    async fn step(&self, nc: &NodeClaim) -> Result<Action, LifecycleError> {
        if nc.metadata.deletion_timestamp.is_some() {
            return self.finalize(nc).await;
        }
        if !is_true(nc.conditions(), condition::LAUNCHED) {
            return self.launch(nc).await;
        }
        let Some(pid) = nc.status.as_ref().and_then(|s| s.provider_id.clone()) else {
            return self.launch(nc).await;
        };
        let nodes = self.state.nodes.state();
        let node = nodes
            .iter()
            .filter(|n| {
                n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(pid.as_str())
            })
            .collect::<Vec<_>>();
        match node.as_slice() {
            [] => match registration::joined_from_duplicate(nc, &pid, &nodes) {
                Some(node) => self.adopt_duplicate(nc, &pid, node).await,
                None => self.await_registration(nc, &pid).await,
            },
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
        // The root condition over its dependents, worded as upstream's operatorpkg does: False
        // when one is False, Unknown while one is still Unknown (or missing).
        let unhealthy: Vec<String> = [
            condition::LAUNCHED,
            condition::REGISTERED,
            condition::INITIALIZED,
        ]
        .into_iter()
        .filter(|c| !is_true(&conditions, c))
        .map(|c| {
            let status = conditions
                .iter()
                .find(|x| x.type_ == c)
                .map_or("Unknown", |x| x.status.as_str());
            format!("{c}={status}")
        })
        .collect();
        let ready_cond = if unhealthy.is_empty() {
            DesiredCondition::truthy(condition::READY, "Ready", "")
        } else if unhealthy.iter().any(|u| u.ends_with("=False")) {
            DesiredCondition::falsy(
                condition::READY,
                "UnhealthyDependents",
                unhealthy.join(", "),
            )
        } else {
            DesiredCondition::unknown(
                condition::READY,
                "ReconcilingDependents",
                unhealthy.join(", "),
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
}
