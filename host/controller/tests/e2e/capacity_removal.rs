//! Every way a user removes capacity, on the real control plane with the simulator: deleting a
//! Node, deleting a NodePool, and scaling a static NodePool down each drain the nodes and delete
//! their instances through the verified path. (Deleting a NodeClaim is
//! `disruption_e2e::a_pdb_blocks_the_drain_and_a_restarted_controller_finishes_it`; the
//! uninstall is `release_oci`.)

use crate::support;

use kk_apis::crd::NodeClaim;
use serde_json::json;
use support::{Env, Options, deployment, eventually, nodepool};

fn small() -> serde_json::Value {
    json!({"requests": {"cpu": "1", "memory": "2Gi"}})
}

fn provider_instance(claim: &NodeClaim) -> Option<String> {
    let id = claim.status.as_ref()?.provider_id.as_deref()?;
    Some(id.rsplit('/').next()?.to_owned())
}

/// Waits until none of `claims` exists and none of their instances runs.
async fn gone(env: &Env, claims: &[NodeClaim], what: &str) {
    let names: Vec<String> = claims
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    let instances: Vec<String> = claims.iter().filter_map(provider_instance).collect();
    assert_eq!(instances.len(), claims.len(), "every claim launched");
    eventually(what, || async {
        let left = env.nodeclaims().await;
        let claims_gone = !left
            .iter()
            .any(|c| c.metadata.name.as_ref().is_some_and(|n| names.contains(n)));
        let instances_gone = !env.instances().iter().any(|i| instances.contains(&i.id));
        (claims_gone && instances_gone).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_delete_node_drains_it_and_deletes_its_instance() {
    let env = Env::start(Options::default()).await;
    env.apply_guide().await;
    let ns = env.cp.fresh_namespace("delnode").await.unwrap();
    env.apply_in(&ns, &deployment("app", 1, "karpenter", small(), json!({})));
    let pods = env.wait_running(&ns, "app", 1).await;
    let node = env.node_of(&pods[0]).await;
    let claims = env.claims_of("karpenter-default").await;
    assert_eq!(claims.len(), 1);

    let name = node.metadata.name.clone().unwrap();
    env.kubectl(&["delete", "node", &name, "--wait=false"]);
    gone(&env, &claims, "the node's NodeClaim and instance gone").await;
    assert!(
        !env.nodes()
            .await
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(&name)),
        "the Node is gone once its finalizer is released"
    );
    // Its pod was evicted and runs again, on a new node.
    let pods = env.wait_running(&ns, "app", 1).await;
    assert_ne!(
        env.node_of(&pods[0]).await.metadata.name.as_deref(),
        Some(name.as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_nodepool_removes_its_nodes_and_instances() {
    let env = Env::start(Options::default()).await;
    env.apply_guide().await;
    env.kubectl_apply(&nodepool("temp", json!({}), Some(serde_json::Value::Null)));
    let ns = env.cp.fresh_namespace("delpool").await.unwrap();
    env.apply_in(&ns, &deployment("app", 2, "temp", small(), json!({})));
    env.wait_running(&ns, "app", 2).await;
    let claims = env.claims_of("temp").await;
    assert!(!claims.is_empty());

    env.kubectl(&["delete", "nodepool", "temp", "--wait=false"]);
    gone(
        &env,
        &claims,
        "the NodePool's NodeClaims and instances gone",
    )
    .await;
    eventually("no node of the NodePool left", || async {
        let left = env.nodes().await;
        (!left.iter().any(|n| {
            n.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("karpenter.sh/nodepool"))
                .is_some_and(|p| p == "temp")
        }))
        .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_nodepool_keeps_its_replicas_and_scaling_it_down_removes_nodes() {
    let env = Env::start(Options::default()).await;
    env.apply_guide().await;
    let mut pool: serde_json::Value =
        serde_json::from_str(&nodepool("fixed", json!({}), Some(json!({"nodes": "3"})))).unwrap();
    pool["spec"]["replicas"] = json!(2);
    env.kubectl_apply(&serde_json::to_string(&pool).unwrap());

    // Two nodes with no pod asking for them, initialized.
    let claims = eventually(
        "two initialized NodeClaims of the static NodePool",
        || async {
            let claims = env.claims_of("fixed").await;
            let initialized = claims.iter().all(|c| {
                c.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Initialized" && c.status == "True")
                })
            });
            (claims.len() == 2 && initialized).then_some(claims)
        },
    )
    .await;
    // The NodePool status pass (every 5 s) counts them.
    eventually("status.nodes of the static NodePool is 2", || async {
        let nodes = env.kubectl(&["get", "nodepool", "fixed", "-o", "jsonpath={.status.nodes}"]);
        (nodes.trim() == "2").then_some(())
    })
    .await;

    // The scale subresource, as `kubectl scale` uses it.
    env.kubectl(&["scale", "nodepool", "fixed", "--replicas=1"]);
    let removed = eventually("one NodeClaim and its instance removed", || async {
        let left = env.claims_of("fixed").await;
        let live: Vec<&NodeClaim> = left
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .collect();
        if left.len() != 1 || live.len() != 1 {
            return None;
        }
        let kept = live[0].metadata.name.clone();
        claims.iter().find(|c| c.metadata.name != kept).cloned()
    })
    .await;
    gone(&env, &[removed], "the removed NodeClaim's instance deleted").await;
    // The count holds: nothing is re-created after the scale-down.
    assert_eq!(env.claims_of("fixed").await.len(), 1);
}

/// Stops kwok playing the kubelet of `node` and reports it `Ready=False`, as a node whose kubelet
/// died would be.
fn fail_node(env: &Env, node: &str) {
    let (key, _) = controlplane::KWOK_NODE_ANNOTATION;
    env.kubectl(&["annotate", "node", node, &format!("{key}-")]);
    let now = jiff::Timestamp::now().to_string();
    let patch = json!({"status": {"conditions": [{
        "type": "Ready", "status": "False", "reason": "KubeletDown",
        "message": "the kubelet stopped posting status", "lastTransitionTime": now,
        "lastHeartbeatTime": now,
    }]}});
    env.kubectl(&[
        "patch",
        "node",
        node,
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch.to_string(),
    ]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_repair_replaces_a_node_that_stays_not_ready() {
    let mut options = Options::default();
    options.settings.node_repair = true;
    options.settings.node_repair_toleration = std::time::Duration::from_secs(2);
    let env = Env::start(options).await;
    env.apply_guide().await;
    let mut pool: serde_json::Value =
        serde_json::from_str(&nodepool("fixed", json!({}), Some(json!({"nodes": "2"})))).unwrap();
    pool["spec"]["replicas"] = json!(1);
    env.kubectl_apply(&serde_json::to_string(&pool).unwrap());
    let initialized = |c: &NodeClaim| {
        c.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Initialized" && c.status == "True")
        })
    };
    let sick = eventually("the static NodePool's node initialized", || async {
        env.claims_of("fixed").await.into_iter().find(initialized)
    })
    .await;
    let node = sick.status.as_ref().unwrap().node_name.clone().unwrap();
    fail_node(&env, &node);

    gone(
        &env,
        std::slice::from_ref(&sick),
        "the unhealthy node's NodeClaim and instance gone",
    )
    .await;
    eventually("a NodeRepair Event saying why", || async {
        env.events("NodeRepair")
            .await
            .iter()
            .any(|e| e.note.as_deref().is_some_and(|n| n.contains("Ready=False")))
            .then_some(())
    })
    .await;
    eventually("a new node replaces it", || async {
        env.claims_of("fixed")
            .await
            .iter()
            .any(|c| c.metadata.name != sick.metadata.name && initialized(c))
            .then_some(())
    })
    .await;
}
