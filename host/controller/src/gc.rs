//! Garbage collection, every interval:
//!
//! * **Leaked instances**: an instance whose ownership tag verifies for this cluster but whose
//!   NodeClaim does not exist (a crash between create and the NodeClaim update, a NodeClaim
//!   removed by hand) is deleted once it has been seen orphaned for the grace period. Instances
//!   whose tag does not verify are never touched.
//! * **Duplicates**: an instance proved ours (tag, or only its create marker) for a NodeClaim
//!   whose providerID names another instance: a create whose answer was lost, then a list that
//!   lagged, made the launch create again. Deleted after the same grace period, unless its Node
//!   joined while the claim had none: the lifecycle adopts that one instead.
//! * **Orphaned Nodes**: a Karpenter Node whose instance is gone is deleted (its finalizer too:
//!   nothing is left to drain), unless its NodeClaim is being deleted: termination finishes
//!   that Node.
//! * **NodeClaims whose instance vanished** (after registration; the lifecycle controller handles
//!   the earlier ones) are deleted.

use kk_apis::names::{finalizer, label};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::metrics::{ActionLabel, Metrics};
use crate::state::ClusterState;
use kakaocloud::ownership::KeyringHandle;
use kakaocloud::{self, InstanceFilter, api::InstanceStatus};
use kk_apis::crd::NodeClaim;
use kk_apis::provider_id::node_instance;

/// Why an instance of ours is collected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leak {
    /// Its NodeClaim is gone.
    Orphan,
    /// Its NodeClaim launched another instance.
    Duplicate,
}

pub struct Collector {
    pub client: kube::Client,
    pub cloud: kakaocloud::Client,
    pub keyring: KeyringHandle,
    pub state: ClusterState,
    pub cluster_name: String,
    /// How long an instance must be seen without its NodeClaim before it is deleted.
    pub grace: Duration,
    pub interval: Duration,
    pub metrics: Arc<Metrics>,
    /// When each orphaned instance was first seen (memory only: a restart restarts the grace).
    pub first_seen: Mutex<HashMap<String, Instant>>,
}

impl Collector {
    pub async fn run(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(err) = self.pass().await {
                tracing::warn!(error = %err, "garbage collection pass failed");
            }
        }
    }

    fn count(&self, action: &str) {
        self.metrics
            .garbage_collected
            .get_or_create(&ActionLabel {
                action: action.into(),
            })
            .inc();
    }

    /// One pass over instances, Nodes and NodeClaims.
    pub async fn pass(&self) -> anyhow::Result<()> {
        let instances = self
            .cloud
            .instances()
            .list(&InstanceFilter::default())
            .await?;
        let keyring = self.keyring.current();
        let claims: Api<NodeClaim> = Api::all(self.client.clone());
        let mut orphans = Vec::new();
        for instance in &instances {
            if instance
                .status
                .as_ref()
                .is_some_and(|s| *s == InstanceStatus::Deleted)
            {
                continue;
            }
            let Ok(owner) = keyring.owner(
                instance.description.as_deref().unwrap_or(""),
                instance.name.as_deref().unwrap_or(""),
                &self.cluster_name,
                &instance.id,
            ) else {
                continue;
            };
            // The shared state answers for almost every instance; one the cache does not know is
            // confirmed with the API server (a NodeClaim created a moment ago must count), so a
            // pass makes a GET only per suspected orphan.
            let claim = match self.state.nodeclaim(&owner.nodeclaim) {
                Some(c) => Some(c),
                None => claims.get_opt(&owner.nodeclaim).await?.map(Arc::new),
            };
            let launched_as = claim
                .as_ref()
                .and_then(|c| c.instance())
                .map(|(_, id)| id.to_owned());
            match (claim, launched_as) {
                (None, _) => orphans.push((instance.id.clone(), owner.nodeclaim, Leak::Orphan)),
                // A duplicate whose Node joined before its claim registered is left to the
                // lifecycle, which adopts it (see `lifecycle::registration`).
                (Some(c), Some(id))
                    if id != instance.id && (c.is_registered() || !self.joined(&instance.id)) =>
                {
                    orphans.push((instance.id.clone(), owner.nodeclaim, Leak::Duplicate))
                }
                // Ours, or a claim still launching (it may yet adopt this instance).
                _ => {}
            }
        }
        let now = Instant::now();
        let due: Vec<(String, String, Leak)> = {
            let mut seen = self.first_seen.lock().unwrap_or_else(|p| p.into_inner());
            seen.retain(|id, _| orphans.iter().any(|(o, _, _)| o == id));
            orphans
                .into_iter()
                .filter(|(id, _, _)| {
                    now.duration_since(*seen.entry(id.clone()).or_insert(now)) >= self.grace
                })
                .collect()
        };
        for (id, claim, leak) in due {
            match self
                .cloud
                .instances()
                .delete_owned(&id, &keyring, &self.cluster_name, &claim)
                .await
            {
                // Already being deleted: counted when it was requested.
                Ok((kakaocloud::DeleteOutcome::InProgress, _)) => {}
                Ok(_)
                | Err(kakaocloud::DeleteOwnedError::Api(kakaocloud::Error::NotFound { .. })) => {
                    match leak {
                        Leak::Orphan => {
                            tracing::info!(instance = %id, NodeClaim = %claim, "deleted leaked instance: its NodeClaim is gone");
                            self.count("instance");
                        }
                        Leak::Duplicate => {
                            tracing::info!(instance = %id, NodeClaim = %claim, "deleted duplicate instance: its NodeClaim launched another");
                            self.count("duplicate-instance");
                        }
                    }
                }
                Err(kakaocloud::DeleteOwnedError::NotOwned(why)) => {
                    self.metrics
                        .ownership_refusals
                        .get_or_create(&ActionLabel {
                            action: "garbage-collect".into(),
                        })
                        .inc();
                    tracing::warn!(instance = %id, reason = %why, "leaked instance left alone: tag no longer verifies");
                }
                Err(kakaocloud::DeleteOwnedError::Api(e)) => return Err(e.into()),
            }
        }
        let live: Vec<&str> = instances
            .iter()
            .filter(|i| {
                !i.status
                    .as_ref()
                    .is_some_and(|s| *s == InstanceStatus::Deleted)
            })
            .map(|i| i.id.as_str())
            .collect();
        self.collect_nodes(&live).await?;
        self.collect_claims(&live).await?;
        Ok(())
    }

    /// Whether the instance is really gone (the list may lag a create; confirm by ID).
    async fn gone(&self, id: &str, live: &[&str]) -> bool {
        if live.contains(&id) {
            return false;
        }
        match self.cloud.instances().get(id).await {
            Err(kakaocloud::Error::NotFound { .. }) => true,
            Ok(i) => i
                .status
                .as_ref()
                .is_some_and(|s| *s == InstanceStatus::Deleted),
            Err(_) => false,
        }
    }

    /// Whether a Node of instance `id` has joined.
    fn joined(&self, id: &str) -> bool {
        self.state
            .nodes
            .state()
            .iter()
            .any(|n| node_instance(n).is_some_and(|(_, node_id)| node_id == id))
    }

    async fn collect_nodes(&self, live: &[&str]) -> anyhow::Result<()> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        // A NodeClaim being deleted has termination finish its Node: deleting it here too
        // would only race that.
        let terminating: HashSet<String> = self
            .state
            .nodeclaims
            .state()
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_some())
            .filter_map(|c| Some(c.instance()?.1.to_owned()))
            .collect();
        for node in self.state.nodes.state() {
            if !node.labels().contains_key(label::NODEPOOL) {
                continue;
            }
            let Some((_, id)) = node_instance(&node) else {
                continue;
            };
            if terminating.contains(id) || !self.gone(id, live).await {
                continue;
            }
            let name = node.name_any();
            tracing::info!(Node = %name, instance = %id, "deleting node: its instance is gone");
            let kept: Vec<&String> = node
                .finalizers()
                .iter()
                .filter(|f| *f != finalizer::TERMINATION)
                .collect();
            let _ = nodes
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"finalizers": kept}})),
                )
                .await;
            match nodes.delete(&name, &DeleteParams::default()).await {
                Ok(_) => self.count("node"),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    async fn collect_claims(&self, live: &[&str]) -> anyhow::Result<()> {
        let claims: Api<NodeClaim> = Api::all(self.client.clone());
        for claim in self.state.nodeclaims.state() {
            if !claim.is_registered() || claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some((_, id)) = claim.instance() else {
                continue;
            };
            if !self.gone(id, live).await {
                continue;
            }
            tracing::info!(NodeClaim = %claim.name_any(), instance = %id, "deleting nodeclaim: its instance is gone");
            match claims
                .delete(&claim.name_any(), &DeleteParams::default())
                .await
            {
                Ok(_) => self.count("nodeclaim"),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}
