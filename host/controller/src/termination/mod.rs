//! Termination of a registered node: when its NodeClaim is deleted (by disruption, expiration, or
//! a user), taint the Node `karpenter.sh/disrupted:NoSchedule`, drain it through the Eviction API
//! (PodDisruptionBudgets apply, daemonset and mirror pods stay, `do-not-disrupt` pods hold it until
//! the NodeClaim's `terminationGracePeriod`, after which what is left is deleted), wait for volumes
//! to detach, delete the KakaoCloud instance **only if its ownership tag verifies**, then release
//! the Node's and the NodeClaim's `karpenter.sh/termination` finalizers.
//!
//! Every step reads the current state and is safe to repeat, so a restart mid-drain resumes it.
//! A Node deleted by hand gets its NodeClaim deleted, which runs the same path.
//! (NodeClaims that never registered are finished by the lifecycle controller.)

pub mod drain;

use kk_apis::cached_pod::CachedPod;
use kk_apis::names::{annotation, condition, finalizer, label, taint};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, EvictParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::claim_conditions::{self, Change};
use crate::events::Events;
use crate::metrics::{ActionLabel, Metrics, ReasonLabel};
use crate::retry::{Backoff, RetryHint};
use crate::state::{ClusterState, Feeds};
use kakaocloud::ownership::KeyringHandle;
use kakaocloud::{self, DeleteOwnedError};
use kk_apis::crd::NodeClaim;
use kk_apis::crd::conditions::{DesiredCondition, is_true};
use kk_apis::pod::pdb_blocked;
use tracing::instrument;

/// How long one eviction call may take (the client retries 429s internally).
const EVICTION_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the drain's `TerminationGracePeriodExpiring` warning repeats.
const GRACE_EVENT_EVERY: Duration = Duration::from_secs(5 * 60);

/// What termination needs.
pub struct Terminator {
    pub client: kube::Client,
    pub cloud: kakaocloud::Client,
    pub state: ClusterState,
    pub keyring: KeyringHandle,
    pub cluster_name: String,
    pub metrics: Arc<Metrics>,
    pub events: Events,
    /// How often a drain is looked at again while pods are leaving.
    pub poll: Duration,
    /// Per-NodeClaim retry delays of failed steps.
    pub backoff: Backoff,
}

/// Why a termination step must be retried.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("KakaoCloud API: {0}")]
    KakaoCloud(#[from] kakaocloud::Error),
}

fn disrupted_taint() -> Taint {
    Taint {
        key: taint::DISRUPTED.into(),
        effect: "NoSchedule".into(),
        value: None,
        time_added: None,
    }
}

impl RetryHint for Error {
    fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::KakaoCloud(e) => e.retry_after(),
            Error::Kube(_) => None,
        }
    }
}

/// One termination step of one NodeClaim.
#[instrument(skip_all, fields(nodeclaim = %nc.name_any()))]
pub async fn reconcile(nc: Arc<NodeClaim>, ctx: Arc<Terminator>) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    let result = ctx.step(&nc).await;
    ctx.metrics
        .reconciled("nodeclaim.termination", started, result.is_ok());
    let action = result?;
    ctx.backoff.succeeded(&nc.name_any());
    Ok(action)
}

/// Retry-After from KakaoCloud when it sent one, the NodeClaim's backoff otherwise.
pub fn error_policy(nc: Arc<NodeClaim>, error: &Error, ctx: Arc<Terminator>) -> Action {
    ctx.backoff.error_policy(&nc.name_any(), error)
}

impl Terminator {
    /// Runs until the process stops, driven by the shared NodeClaim and Node watches.
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

    fn event(&self, nc: &NodeClaim, type_: EventType, reason: &str, note: String) {
        self.events
            .publish(&nc.object_ref(&()), type_, reason, note);
    }

    /// Upstream's termination conditions on the NodeClaim, written only when they change.
    async fn mark<const N: usize>(
        &self,
        nc: &NodeClaim,
        desired: [DesiredCondition; N],
    ) -> Result<(), Error> {
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        let changes = desired.map(Change::Set);
        claim_conditions::apply(&api, nc, &changes).await?;
        Ok(())
    }

    /// The next step of `nc`'s termination.
    async fn step(&self, nc: &NodeClaim) -> Result<Action, Error> {
        let claims: Api<NodeClaim> = Api::all(self.client.clone());
        let node_name = nc.status.as_ref().and_then(|s| s.node_name.clone());
        let node = node_name
            .as_deref()
            .and_then(|name| self.state.node(name))
            .map(|n| (*n).clone());
        if nc.metadata.deletion_timestamp.is_none() {
            if node
                .as_ref()
                .is_some_and(|n| n.metadata.deletion_timestamp.is_some())
            {
                tracing::info!(NodeClaim = %nc.name_any(), "node deleted by hand: terminating its nodeclaim");
                claims
                    .delete(&nc.name_any(), &DeleteParams::default())
                    .await?;
            }
            return Ok(Action::await_change());
        }
        if !nc.finalizers().iter().any(|f| f == finalizer::TERMINATION) || node_name.is_none() {
            return Ok(Action::await_change());
        }
        // Upstream's marker of when the grace period ends, on the NodeClaim and its Node.
        if let Some(deadline) = grace_deadline(nc) {
            let value = deadline.to_string();
            let patch = json!({"metadata": {"annotations": {
                annotation::NODECLAIM_TERMINATION_TIMESTAMP: value
            }}});
            let marked = |a: &std::collections::BTreeMap<String, String>| {
                a.get(annotation::NODECLAIM_TERMINATION_TIMESTAMP) == Some(&value)
            };
            if !marked(nc.annotations()) {
                claims
                    .patch(
                        &nc.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await?;
            }
            if let Some(node) = node.as_ref().filter(|n| !marked(n.annotations())) {
                let nodes: Api<Node> = Api::all(self.client.clone());
                nodes
                    .patch(
                        &node.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await?;
            }
        }
        if let Some(node) = &node
            && let Some(wait) = self.drain(nc, node).await?
        {
            return Ok(Action::requeue(wait));
        }
        if nc.status.as_ref().is_some_and(|s| s.provider_id.is_some()) {
            self.mark(
                nc,
                [DesiredCondition::truthy(
                    condition::INSTANCE_TERMINATING,
                    condition::INSTANCE_TERMINATING,
                    "",
                )],
            )
            .await?;
        }
        if !self.delete_instance(nc).await? {
            return Ok(Action::requeue(self.poll));
        }
        if let Some(node) = &node {
            let nodes: Api<Node> = Api::all(self.client.clone());
            release(
                &nodes,
                &node.name_any(),
                node.finalizers(),
                node.resource_version(),
            )
            .await?;
        }
        // Counted even when the Node was already gone (deleted with its instance).
        self.metrics.node_terminated(nc, node.as_ref());
        release(
            &claims,
            &nc.name_any(),
            nc.finalizers(),
            nc.resource_version(),
        )
        .await?;
        self.metrics.claim_terminated(nc);
        tracing::info!(NodeClaim = %nc.name_any(), Node = node_name.as_deref().unwrap_or(""), "terminated nodeclaim");
        Ok(Action::await_change())
    }

    /// Cordons and drains `node`; `Some(wait)` while pods or volumes remain.
    async fn drain(&self, nc: &NodeClaim, node: &Node) -> Result<Option<Duration>, Error> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let name = node.name_any();
        let mut taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        let tainted = taints.iter().any(|t| t.key == taint::DISRUPTED);
        let excluded = node
            .labels()
            .get(label::EXCLUDE_FROM_LOAD_BALANCERS)
            .is_some_and(|v| v == "true");
        if !excluded {
            // Disruption may have tainted it already; load balancers stop using it either way.
            let patch =
                json!({"metadata": {"labels": {label::EXCLUDE_FROM_LOAD_BALANCERS: "true"}}});
            nodes
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        if !tainted {
            taints.push(disrupted_taint());
            let patch = json!({"spec": {"taints": taints}});
            nodes
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            self.event(
                nc,
                EventType::Normal,
                "Draining",
                format!(
                    "tainted {name} {}:NoSchedule and draining it",
                    taint::DISRUPTED
                ),
            );
        }
        if node.metadata.deletion_timestamp.is_none() {
            // Our finalizer holds the Node until the instance is gone.
            nodes.delete(&name, &DeleteParams::default()).await?;
        }
        let pods: Vec<CachedPod> = self
            .state
            .pods_on(&name)
            .iter()
            .map(|p| (**p).clone())
            .collect();
        let deadline = grace_deadline(nc);
        if let Some(deadline) = deadline {
            // Upstream's warning, on the NodeClaim and its Node, while the drain has a deadline.
            let note = format!("All pods will be deleted by {deadline}");
            for regarding in [nc.object_ref(&()), node.object_ref(&())] {
                self.events.publish_deduped(
                    &regarding,
                    EventType::Warning,
                    "TerminationGracePeriodExpiring",
                    note.clone(),
                    GRACE_EVENT_EVERY,
                );
            }
        }
        let step = drain::step(&pods, Timestamp::now(), deadline);
        let mut blocked = Vec::new();
        let pdbs: Vec<PodDisruptionBudget> = self
            .state
            .pdbs
            .state()
            .iter()
            .map(|p| (**p).clone())
            .collect();
        for p in &step.evict {
            // The client retries 429s with backoff, and a PDB answers 429 until it allows a
            // disruption: check the budget first, and bound the call for the race that remains.
            let pod = pods.iter().find(|x| {
                x.name_any() == p.name && x.namespace().as_deref() == Some(p.namespace.as_str())
            });
            if pod.is_some_and(|pod| pdb_blocked(pod, &pdbs)) {
                blocked.push(p.to_string());
                continue;
            }
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &p.namespace);
            match tokio::time::timeout(
                EVICTION_TIMEOUT,
                api.evict(&p.name, &EvictParams::default()),
            )
            .await
            {
                Ok(Ok(_)) => {
                    self.metrics.eviction(201);
                    self.metrics
                        .pods_drained
                        .get_or_create(&ReasonLabel {
                            reason: drain_reason(nc),
                        })
                        .inc();
                    if let Some(pod) = pod {
                        self.events.publish(
                            &pod.object_ref(&()),
                            EventType::Normal,
                            "Evicted",
                            format!("Evicted pod: draining node {name}"),
                        );
                    }
                }
                Ok(Err(kube::Error::Api(s))) if s.code == 404 => self.metrics.eviction(404),
                Ok(Err(kube::Error::Api(s))) if s.code == 429 => {
                    self.metrics.eviction(429);
                    blocked.push(p.to_string());
                }
                Ok(Err(kube::Error::Api(s))) => {
                    self.metrics.eviction(s.code);
                    return Err(kube::Error::Api(s).into());
                }
                Ok(Err(e)) => return Err(e.into()),
                Err(_) => blocked.push(p.to_string()),
            }
        }
        for p in &step.delete {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &p.namespace);
            match api.delete(&p.name, &DeleteParams::default()).await {
                Ok(_) => {
                    let pod = pods.iter().find(|x| {
                        x.name_any() == p.name
                            && x.namespace().as_deref() == Some(p.namespace.as_str())
                    });
                    if let Some(pod) = pod {
                        // Upstream's reason for a pod deleted to meet the node's deadline.
                        let tgp = drain::grace_seconds(pod);
                        self.events.publish(
                            &pod.object_ref(&()),
                            EventType::Normal,
                            "Disrupted",
                            format!(
                                "Deleting the pod so that it is gone by the node's termination time {}, keeping its terminationGracePeriodSeconds of {tgp}; this overrides its PodDisruptionBudget and {}",
                                deadline.map(|d| d.to_string()).unwrap_or_default(),
                                annotation::DO_NOT_DISRUPT
                            ),
                        );
                    }
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        if !blocked.is_empty() {
            self.event(
                nc,
                EventType::Warning,
                "EvictionBlocked",
                format!("PodDisruptionBudgets block evicting {}", blocked.join(", ")),
            );
            self.event(
                nc,
                EventType::Warning,
                "FailedDraining",
                format!(
                    "Failed to drain node, {} pods are waiting to be evicted",
                    blocked.len()
                ),
            );
        }
        if !step.held.is_empty() {
            let held: Vec<String> = step.held.iter().map(ToString::to_string).collect();
            self.event(
                nc,
                EventType::Warning,
                "DisruptionBlocked",
                format!(
                    "{} holds the node until terminationGracePeriod ends: {}",
                    annotation::DO_NOT_DISRUPT,
                    held.join(", ")
                ),
            );
        }
        if !step.is_done() {
            let draining = DesiredCondition::unknown(condition::DRAINED, "Draining", "Draining");
            self.mark(nc, [draining]).await?;
            let wait = if blocked.is_empty() && step.held.is_empty() {
                self.poll
            } else {
                self.poll * 5
            };
            return Ok(Some(wait));
        }
        let drained = DesiredCondition::truthy(condition::DRAINED, condition::DRAINED, "");
        if !nc
            .status
            .as_ref()
            .is_some_and(|s| is_true(&s.conditions, condition::DRAINED))
        {
            self.metrics.node_drained(nc);
        }
        let expired = deadline.is_some_and(|d| Timestamp::now() >= d);
        let attached = self
            .state
            .volume_attachments
            .state()
            .iter()
            .filter(|a| a.spec.node_name == name)
            .count();
        // Volumes are waited for until the grace period ends (upstream's awaitVolumeDetachment).
        let volumes = if expired {
            DesiredCondition::falsy(
                condition::VOLUMES_DETACHED,
                "TerminationGracePeriodElapsed",
                "TerminationGracePeriodElapsed",
            )
        } else if attached > 0 {
            DesiredCondition::unknown(
                condition::VOLUMES_DETACHED,
                "AwaitingVolumeDetachment",
                "AwaitingVolumeDetachment",
            )
        } else {
            DesiredCondition::truthy(condition::VOLUMES_DETACHED, condition::VOLUMES_DETACHED, "")
        };
        self.mark(nc, [drained, volumes]).await?;
        if !expired && attached > 0 {
            tracing::info!(Node = %name, attached, "waiting for volumes to detach");
            return Ok(Some(self.poll));
        }
        Ok(None)
    }

    /// Deletes the NodeClaim's instance if its tag verifies; `false` to ask again later (until
    /// the instance is gone).
    async fn delete_instance(&self, nc: &NodeClaim) -> Result<bool, Error> {
        let Some((_, id)) = nc.instance() else {
            return Ok(true);
        };
        let keyring = self.keyring.current();
        match self
            .cloud
            .instances()
            .delete_owned(id, &keyring, &self.cluster_name, &nc.name_any())
            .await
        {
            Ok((outcome, _)) if outcome.is_gone() => {
                tracing::info!(NodeClaim = %nc.name_any(), instance = %id, "deleted instance");
                if let Some(since) = condition_since(nc, condition::INSTANCE_TERMINATING) {
                    self.metrics.instance_terminated(nc, since);
                }
                Ok(true)
            }
            Ok((outcome, _)) => {
                // Released only once the instance is gone, so nothing bills unseen.
                tracing::info!(NodeClaim = %nc.name_any(), instance = %id, ?outcome, "waiting for the instance to be deleted");
                Ok(false)
            }
            Err(DeleteOwnedError::Api(kakaocloud::Error::NotFound { .. })) => Ok(true),
            Err(DeleteOwnedError::NotOwned(why)) => {
                // Never delete what we cannot prove is ours; say so and let the NodeClaim go.
                tracing::warn!(NodeClaim = %nc.name_any(), instance = %id, reason = %why, "instance left alone: ownership tag does not verify");
                self.metrics
                    .ownership_refusals
                    .get_or_create(&ActionLabel {
                        action: "terminate".into(),
                    })
                    .inc();
                self.event(
                    nc,
                    EventType::Warning,
                    "OwnershipUnverified",
                    format!("instance {id} was not deleted: its ownership tag does not verify ({why}); delete it by hand if it is yours"),
                )
                ;
                Ok(true)
            }
            Err(DeleteOwnedError::Api(e)) => Err(e.into()),
        }
    }
}

/// When the NodeClaim's terminationGracePeriod, counted from its deletion, ends; an earlier
/// `karpenter.sh/nodeclaim-termination-timestamp` (node repair sets it to the deletion time)
/// wins.
fn grace_deadline(nc: &NodeClaim) -> Option<Timestamp> {
    let marked = nc
        .annotations()
        .get(annotation::NODECLAIM_TERMINATION_TIMESTAMP)
        .and_then(|t| t.parse::<Timestamp>().ok());
    match (marked, grace_period_end(nc)) {
        (Some(m), Some(g)) => Some(m.min(g)),
        (m, g) => m.or(g),
    }
}

/// The deletion time plus `terminationGracePeriod`.
fn grace_period_end(nc: &NodeClaim) -> Option<Timestamp> {
    let deleted = nc.metadata.deletion_timestamp.as_ref()?.0;
    let grace = nc.spec.termination_grace_period?;
    let span = jiff::SignedDuration::try_from(grace.0).ok()?;
    deleted.checked_add(span).ok()
}

/// Drops the termination finalizer of `name`, guarded by its resourceVersion.
async fn release<K>(
    api: &Api<K>,
    name: &str,
    finalizers: &[String],
    version: Option<String>,
) -> Result<(), kube::Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if !finalizers.iter().any(|f| f == finalizer::TERMINATION) {
        return Ok(());
    }
    let kept: Vec<&String> = finalizers
        .iter()
        .filter(|f| *f != finalizer::TERMINATION)
        .collect();
    let patch = json!({"metadata": {"finalizers": kept, "resourceVersion": version}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Seconds since `nc`'s condition `type_` last changed.
fn condition_since(nc: &NodeClaim, type_: &str) -> Option<f64> {
    let c = nc
        .status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .find(|c| c.type_ == type_)?;
    let secs = Timestamp::now()
        .duration_since(c.last_transition_time.0)
        .as_secs_f64();
    Some(secs.max(0.0))
}

/// Upstream's `pods_drained_total` reason: the claim's DisruptionReason, else forceful.
fn drain_reason(nc: &NodeClaim) -> String {
    nc.status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .find(|c| c.type_ == condition::DISRUPTION_REASON && c.status == "True")
        .map(|c| c.reason.clone())
        .unwrap_or_else(|| "Forceful Termination".into())
}
