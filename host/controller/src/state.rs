//! Cluster state the controllers read: reflector stores of Pods, Nodes, NodePools, NodeClaims,
//! DaemonSets and KCNodeClasses, kept current by watches.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use kk_apis::crd::{KCNodeClass, NodeClaim, NodePool};

/// What changed; provisioning and lifecycle wake up on these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A pod that is waiting for a node (see [`kk_apis::pod::is_provisionable`]).
    PendingPod,
    Pod,
    Node(String),
    NodeClaim(String),
    Other,
}

/// Read-only views of the cluster, current to the last watch event.
#[derive(Clone)]
pub struct ClusterState {
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    pub nodepools: Store<NodePool>,
    pub nodeclaims: Store<NodeClaim>,
    pub daemonsets: Store<DaemonSet>,
    pub nodeclasses: Store<KCNodeClass>,
    tasks: Arc<Vec<JoinHandle<()>>>,
}

impl Debug for ClusterState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterState")
            .field("pods", &self.pods.state().len())
            .field("nodes", &self.nodes.state().len())
            .field("nodeclaims", &self.nodeclaims.state().len())
            .finish()
    }
}

fn spawn<K>(
    api: Api<K>,
    changes: mpsc::UnboundedSender<Change>,
    classify: fn(&K) -> Change,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    );
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Apply(obj) | watcher::Event::Delete(obj)) => {
                    let _ = changes.send(classify(&obj));
                }
                Ok(watcher::Event::InitDone) => {
                    let _ = changes.send(Change::Other);
                }
                Ok(_) => {}
                Err(err) => tracing::warn!(error = %err, "watch failed; retrying"),
            }
        }
    });
    (store, task)
}

impl ClusterState {
    /// Starts the watches; every change is sent on `changes`.
    pub fn start(client: &Client, changes: mpsc::UnboundedSender<Change>) -> ClusterState {
        let (pods, t1) = spawn(Api::<Pod>::all(client.clone()), changes.clone(), |p| {
            if kk_apis::pod::is_provisionable(p) {
                Change::PendingPod
            } else {
                Change::Pod
            }
        });
        let (nodes, t2) = spawn(Api::<Node>::all(client.clone()), changes.clone(), |n| {
            Change::Node(n.metadata.name.clone().unwrap_or_default())
        });
        let (nodepools, t3) = spawn(
            Api::<NodePool>::all(client.clone()),
            changes.clone(),
            |_| Change::Other,
        );
        let (nodeclaims, t4) = spawn(
            Api::<NodeClaim>::all(client.clone()),
            changes.clone(),
            |c| Change::NodeClaim(c.metadata.name.clone().unwrap_or_default()),
        );
        let (daemonsets, t5) = spawn(
            Api::<DaemonSet>::all(client.clone()),
            changes.clone(),
            |_| Change::Other,
        );
        let (nodeclasses, t6) = spawn(Api::<KCNodeClass>::all(client.clone()), changes, |_| {
            Change::Other
        });
        ClusterState {
            pods,
            nodes,
            nodepools,
            nodeclaims,
            daemonsets,
            nodeclasses,
            tasks: Arc::new(vec![t1, t2, t3, t4, t5, t6]),
        }
    }

    /// Waits until every store has its initial list, at most `timeout`.
    pub async fn wait_synced(&self, timeout: Duration) -> Result<(), &'static str> {
        let all = async {
            self.pods.wait_until_ready().await.map_err(|_| "pods")?;
            self.nodes.wait_until_ready().await.map_err(|_| "nodes")?;
            self.nodepools
                .wait_until_ready()
                .await
                .map_err(|_| "nodepools")?;
            self.nodeclaims
                .wait_until_ready()
                .await
                .map_err(|_| "nodeclaims")?;
            self.daemonsets
                .wait_until_ready()
                .await
                .map_err(|_| "daemonsets")?;
            self.nodeclasses
                .wait_until_ready()
                .await
                .map_err(|_| "kcnodeclasses")?;
            Ok(())
        };
        tokio::time::timeout(timeout, all)
            .await
            .map_err(|_| "timed out waiting for the cluster state to sync")?
    }

    /// Stops the watches.
    pub fn stop(&self) {
        for t in self.tasks.iter() {
            t.abort();
        }
    }
}
