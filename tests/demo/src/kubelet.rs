//! The simulated kubelet: Nodes registered from booted instances' userdata; Cilium's agents.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kakaocloud_sim::BootedInstance;
use kk_apis::names::taint::CILIUM_AGENT_NOT_READY;
use kk_engine::userdata::parse_registration;
use kube::ResourceExt;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};

use crate::*;

impl Cluster {
    pub(crate) async fn register_managed_node(&self) -> anyhow::Result<()> {
        let capacity: BTreeMap<String, Quantity> = [
            ("cpu", "4"),
            ("memory", "16Gi"),
            ("pods", "110"),
            ("ephemeral-storage", "100Gi"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Quantity(v.to_owned())))
        .collect();
        let (ann_key, ann_value) = controlplane::KWOK_NODE_ANNOTATION;
        let node = Node {
            metadata: ObjectMeta {
                name: Some(MANAGED_NODE.into()),
                labels: Some(
                    [
                        ("kubernetes.io/hostname", MANAGED_NODE),
                        ("kubernetes.io/os", "linux"),
                        ("kubernetes.io/arch", "amd64"),
                        ("kakaoi.io/kke-nodepool", "system"),
                    ]
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
                ),
                annotations: Some([(ann_key.to_owned(), ann_value.to_owned())].into()),
                ..Default::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                allocatable: Some(capacity.clone()),
                capacity: Some(capacity),
                ..Default::default()
            }),
        };
        Api::<Node>::all(self.kube.clone())
            .create(&PostParams::default(), &node)
            .await?;
        Ok(())
    }
}

/// What kubelet does on first start: register the Node from the userdata's JoinConfiguration
/// (labels, taints, name), with the flavor's capacity, the providerID kubelet reports and the
/// kwok annotation (kwok then keeps it Ready and runs its pods). Same as the host tests' support.
pub async fn register_node(client: &kube::Client, booted: &BootedInstance) {
    let Some(userdata) = booted.user_data.as_deref() else {
        tracing::warn!(instance = %booted.id, "booted without userdata: no kubelet");
        return;
    };
    let reg = parse_registration(userdata);
    let name = reg.node_name.clone().unwrap_or_else(|| booted.name.clone());
    let mut labels = reg.labels.clone();
    labels.insert("kubernetes.io/hostname".into(), name.clone());
    labels.insert("kubernetes.io/os".into(), "linux".into());
    labels.insert("kubernetes.io/arch".into(), "amd64".into());
    labels.insert(
        "node.kubernetes.io/instance-type".into(),
        booted.flavor.name.clone(),
    );
    labels.insert("topology.kubernetes.io/zone".into(), booted.zone.clone());
    let mut capacity = BTreeMap::new();
    capacity.insert("cpu".to_owned(), Quantity(booted.flavor.vcpus.to_string()));
    capacity.insert(
        "memory".to_owned(),
        Quantity(format!("{}Mi", booted.flavor.memory_mib)),
    );
    capacity.insert("pods".to_owned(), Quantity("110".into()));
    capacity.insert("ephemeral-storage".to_owned(), Quantity("50Gi".into()));
    if booted.flavor.gpus > 0 {
        capacity.insert(
            "nvidia.com/gpu".to_owned(),
            Quantity(booted.flavor.gpus.to_string()),
        );
    }
    let (ann_key, ann_value) = controlplane::KWOK_NODE_ANNOTATION;
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(labels),
            annotations: Some([(ann_key.to_owned(), ann_value.to_owned())].into()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(kk_apis::provider_id::provider_id(&booted.zone, &booted.id)),
            taints: (!reg.taints.is_empty()).then_some(reg.taints.clone()),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            allocatable: Some(capacity.clone()),
            capacity: Some(capacity),
            ..Default::default()
        }),
    };
    // Like a real kubelet, registration is retried while the API server cannot be reached (it
    // falls behind in the scale bench's ramp), and a Node of the same name is adopted as it is
    // (a duplicate instance of the same userdata joined first).
    let nodes = Api::<Node>::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => break,
            Err(kube::Error::Api(s)) if s.code == 409 => {
                tracing::info!(node = %name, instance = %booted.id, "a Node of this name exists: kubelet adopts it");
                return;
            }
            Err(e) if transient(&e) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => {
                tracing::warn!(node = %name, error = %e, "simulated kubelet could not register");
                return;
            }
        }
    }
}

/// An error a kubelet retries: the API server throttling, failing or out of reach.
fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::Service(_) | kube::Error::HyperError(_) => true,
        _ => false,
    }
}

/// The simulated Cilium agents of every node; they stop when this is dropped.
pub struct CiliumAgents(tokio::task::JoinHandle<()>);

impl Drop for CiliumAgents {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How many Nodes the agents untaint at once.
const CILIUM_PARALLELISM: usize = 16;

/// Plays Cilium's agent on every node: once kwok reports a Node Ready, it removes
/// `node.cilium.io/agent-not-ready`, as the agent does when the node's networking is up. One
/// watch over all Nodes rather than one per node: at 2,000 nodes, per-node watches were the API
/// server's largest load, and their agents timed out before their nodes were Ready.
pub fn cilium_agents(client: kube::Client) -> CiliumAgents {
    let api = Api::<Node>::all(client);
    let tainted_and_ready = |n: &Node| {
        let ready = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        ready && has_agent_taint(n)
    };
    let nodes = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .filter_map(|n| async move { n.ok() })
        .filter(move |n| std::future::ready(tainted_and_ready(n)));
    CiliumAgents(tokio::spawn(
        nodes.for_each_concurrent(CILIUM_PARALLELISM, move |node| {
            untaint(api.clone(), node.name_any())
        }),
    ))
}

fn has_agent_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == CILIUM_AGENT_NOT_READY))
}

async fn untaint(api: Api<Node>, node: String) {
    // The taint patch is guarded by the resourceVersion it was computed from; kwok's status
    // heartbeats can move it in between, so a conflict reads again.
    for _ in 0..10 {
        let Ok(Some(current)) = api.get_opt(&node).await else {
            return;
        };
        if !has_agent_taint(&current) {
            return;
        }
        let taints: Vec<_> = current
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|t| t.key != CILIUM_AGENT_NOT_READY)
            .collect();
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": current.metadata.resource_version},
            "spec": {"taints": taints},
        });
        match api
            .patch(
                &node,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => return,
            Err(e) => tracing::debug!(%node, error = %e, "simulated cilium agent retries"),
        }
    }
    tracing::warn!(%node, "simulated cilium agent: could not remove the taint");
}
