//! Provisioning end to end: the install guide's Step 5 and the lifecycle's failure paths, each on
//! a private control plane with the simulator and the operator (see `support`).

mod support;

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use support::{Env, Options, eventually};

/// Pods of `namespace` matching `selector` that are Running on a node.
async fn running(env: &Env, namespace: &str, selector: &str, want: usize) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(env.kube.clone(), namespace);
    eventually(&format!("{want} pods Running ({selector})"), || async {
        let list = pods
            .list(&ListParams::default().labels(selector))
            .await
            .ok()?;
        let running: Vec<Pod> = list
            .items
            .into_iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .collect();
        (running.len() >= want).then_some(running)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_guide_step_5_runs_the_demo_on_new_nodes() {
    let env = Env::start(Options::default()).await;
    env.apply_guide().await;
    let ns = env.cp.fresh_namespace("demo").await.unwrap();
    env.kubectl(&[
        "-n",
        &ns,
        "apply",
        "-f",
        &format!(
            "{}/../examples/install-guide/karpenter-demo.yaml",
            env!("CARGO_MANIFEST_DIR")
        ),
    ]);

    let pods = running(&env, &ns, "app=karpenter-demo", 3).await;
    let node_names: BTreeSet<String> = pods
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();

    // Every pod landed on a node Karpenter launched for the guide's NodePool.
    let nodes = env.nodes().await;
    for name in &node_names {
        let node = nodes
            .iter()
            .find(|n| n.metadata.name.as_ref() == Some(name))
            .expect("node exists");
        let labels = node.metadata.labels.clone().unwrap_or_default();
        for key in [
            "karpenter.sh/nodepool",
            "kakaoi.io/kke-nodepool",
            "node.kubernetes.io/instance-type",
            "topology.kubernetes.io/zone",
            "kubernetes.io/arch",
            "karpenter.sh/capacity-type",
            "workload-type",
        ] {
            assert!(
                labels.contains_key(key),
                "node {name} lacks {key}: {labels:?}"
            );
        }
        assert_eq!(labels["karpenter.sh/nodepool"], "karpenter-default");
        assert_eq!(labels["kakaoi.io/kke-nodepool"], "karpenter-default");
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        assert!(
            !taints.iter().any(|t| t.key == "karpenter.sh/unregistered"),
            "the unregistered taint is removed once the node is synced: {taints:?}"
        );
    }

    // NodeClaims are listed by kubectl with the upstream columns, and all are Ready.
    let claims = env.nodeclaims().await;
    assert!(!claims.is_empty());
    let table = env.kubectl(&["get", "nodeclaims"]);
    let header = table.lines().next().unwrap_or_default();
    for column in ["TYPE", "CAPACITY", "ZONE", "NODE", "READY"] {
        assert!(header.contains(column), "{table}");
    }
    for claim in &claims {
        let name = claim.metadata.name.clone().unwrap();
        assert!(table.contains(&name), "{table}");
        let status = claim.status.clone().expect("status");
        for type_ in ["Launched", "Registered", "Initialized", "Ready"] {
            assert!(
                status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == type_ && c.status == "True"),
                "{name}: {type_} not True: {:?}",
                status.conditions
            );
        }
        assert!(
            status
                .provider_id
                .as_deref()
                .is_some_and(|p| p.starts_with("kakaocloud:///"))
        );
    }

    // The instances exist in the simulator and their ownership tags verify for their NodeClaim.
    let instances = env.instances();
    assert_eq!(instances.len(), claims.len(), "one instance per NodeClaim");
    let keyring = env.keyring.current();
    for instance in &instances {
        let description = instance.description.clone().unwrap_or_default();
        let owner = keyring
            .verify_description(&description, support::CLUSTER, &instance.id)
            .unwrap_or_else(|e| {
                panic!(
                    "instance {} tag does not verify: {e} ({description})",
                    instance.id
                )
            });
        assert!(
            claims
                .iter()
                .any(|c| c.metadata.name.as_deref() == Some(owner.nodeclaim.as_str())),
            "tag names a NodeClaim of this cluster: {owner:?}"
        );
    }

    // The create counter saw them.
    let text = env.metrics_text();
    assert!(
        text.contains("karpenter_nodeclaims_created_total"),
        "{text}"
    );
}
