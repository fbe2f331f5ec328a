//! Disruption, termination and garbage collection end to end, each test on a private control plane
//! with the simulator and the operator (see `support`). Disruption passes run every second with a
//! one-second validation delay; NodePools here use short `consolidateAfter` values.

use crate::support;

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use kakaocloud::LaunchSpec;
use kk_apis::crd::NodeClaim;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use std::process::Command;
use support::{Env, Options, deployment, eventually, nodepool, run_ok};

fn small() -> serde_json::Value {
    json!({"requests": {"cpu": "1", "memory": "2Gi"}})
}

fn tiny() -> serde_json::Value {
    json!({"requests": {"cpu": "100m", "memory": "128Mi"}})
}

fn one_per_node(app: &str) -> serde_json::Value {
    json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": app}}}
    ]}}})
}

/// A pool named `name` that consolidates after `after`, with `disruption` merged in.
fn pool(
    name: &str,
    after: &str,
    disruption: serde_json::Value,
    template: serde_json::Value,
) -> String {
    let mut v: serde_json::Value =
        serde_json::from_str(&nodepool(name, template, Some(serde_json::Value::Null))).unwrap();
    v["spec"]["disruption"]["consolidateAfter"] = json!(after);
    if let Some(extra) = disruption.as_object() {
        for (k, val) in extra {
            v["spec"]["disruption"][k] = val.clone();
        }
    }
    serde_json::to_string(&v).unwrap()
}

async fn delete_deployment(env: &Env, ns: &str, name: &str) {
    env.kubectl(&["-n", ns, "delete", "deployment", name, "--wait=false"]);
    eventually(&format!("pods of {name} gone"), || async {
        env.pods(ns, name).await.is_empty().then_some(())
    })
    .await;
}

fn live_instances(env: &Env) -> usize {
    env.instances().len()
}

async fn delete_claim(env: &Env, name: &str) {
    let api: Api<NodeClaim> = Api::all(env.kube.clone());
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete NodeClaim");
}

/// The cluster's hourly price as the disruption controller last computed it.
fn hourly_price(env: &Env) -> Option<f64> {
    env.metrics_text()
        .lines()
        .find(|l| l.starts_with("karpenter_kakaocloud_cluster_hourly_price_micros "))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
}

fn claim_name(c: &NodeClaim) -> String {
    c.metadata.name.clone().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_guide_cleanup_removes_empty_nodes_and_their_instances() {
    let env = Env::start(Options::default()).await;
    env.apply_guide().await;
    let ns = env.run_guide_demo().await;
    assert!(live_instances(&env) > 0);
    env.clean_up_guide_demo(&ns).await;
    eventually("NodeClaims, Nodes and instances gone", || async {
        let claims = env.claims_of("karpenter-default").await;
        let nodes = env.nodes().await;
        (claims.is_empty() && nodes.is_empty() && live_instances(&env) == 0).then_some(())
    })
    .await;
    let text = env.metrics_text();
    assert!(
        text.contains("karpenter_voluntary_disruption_decisions_total"),
        "{text}"
    );
    assert!(
        text.contains("karpenter_nodeclaims_terminated_total"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn underutilized_nodes_are_packed_and_the_hourly_price_falls() {
    let env = Env::start(Options::default()).await;
    env.apply_guide().await;
    env.kubectl_apply(&pool("pack", "3s", json!({}), json!({})));
    let ns = env.cp.fresh_namespace("pack").await.unwrap();
    // Four nodes, one big pod each; then small pods spread over them; then the big pods go.
    env.apply_in(
        &ns,
        &deployment("big", 4, "pack", small(), one_per_node("big")),
    );
    env.wait_running(&ns, "big", 4).await;
    env.apply_in(&ns, &deployment("small", 4, "pack", tiny(), json!({})));
    env.wait_running(&ns, "small", 4).await;
    let before = env.claims_of("pack").await.len();
    assert!(before >= 4);
    let conditions = env.record_conditions();
    let instances_before = live_instances(&env);
    let price_before = eventually("the hourly price of four nodes", || async {
        hourly_price(&env).filter(|p| *p > 0.0)
    })
    .await;
    delete_deployment(&env, &ns, "big").await;

    eventually("the small pods packed onto one node", || async {
        let claims = env.claims_of("pack").await;
        let running = env.pods(&ns, "small").await;
        let nodes: BTreeSet<String> = running
            .iter()
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect();
        let all_running = running.len() == 4
            && running
                .iter()
                .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        (claims.len() == 1 && nodes.len() == 1 && all_running).then_some(())
    })
    .await;
    assert!(
        live_instances(&env) < instances_before,
        "fewer instances run"
    );
    let price_after = eventually("the hourly price falls", || async {
        hourly_price(&env).filter(|p| *p < price_before)
    })
    .await;
    assert!(price_after > 0.0, "one node still runs");
    // Upstream's status on the way: consolidatable after consolidateAfter, then the reason the
    // command took it, on a NodeClaim that is gone now.
    let gone: Vec<String> = conditions_seen_on_gone(&env, &conditions).await;
    assert!(
        gone.iter().any(
            |c| conditions.saw(c, "Consolidatable", "True", "Consolidatable")
                && (conditions.saw(c, "DisruptionReason", "True", "Underutilized")
                    || conditions.saw(c, "DisruptionReason", "True", "Empty"))
        ),
        "a consolidated NodeClaim was Consolidatable, then held for Underutilized or Empty: {:?}",
        gone.iter()
            .map(|c| (c, conditions.of(c)))
            .collect::<Vec<_>>()
    );
}

/// The NodeClaims the log saw that no longer exist.
async fn conditions_seen_on_gone(env: &Env, log: &support::ConditionLog) -> Vec<String> {
    let live: BTreeSet<String> = env.nodeclaims().await.iter().map(claim_name).collect();
    log.claims()
        .into_iter()
        .filter(|c| !live.contains(c))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pdb_blocks_the_drain_and_a_restarted_controller_finishes_it() {
    let mut env = Env::start(Options::default()).await;
    env.apply_guide().await;
    let ns = env.cp.fresh_namespace("pdb").await.unwrap();
    env.apply_in(
        &ns,
        &deployment("guarded", 1, "karpenter", small(), json!({})),
    );
    env.apply_in(
        &ns,
        &serde_json::to_string(&json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "guarded"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "guarded"}}},
        }))
        .unwrap(),
    );
    let pods = env.wait_running(&ns, "guarded", 1).await;
    let pod_name = pods[0].metadata.name.clone().unwrap();
    let claim = env.claims_of("karpenter-default").await.remove(0);
    let name = claim_name(&claim);
    let conditions = env.record_conditions();
    delete_claim(&env, &name).await;

    eventually("an EvictionBlocked event", || async {
        (!env.events("EvictionBlocked").await.is_empty()).then_some(())
    })
    .await;
    eventually("Drained=Unknown (Draining) while the PDB holds", || async {
        conditions
            .saw(&name, "Drained", "Unknown", "Draining")
            .then_some(())
    })
    .await;
    assert!(
        !conditions.saw(&name, "Drained", "True", "Drained"),
        "not drained while the pod stays: {:?}",
        conditions.of(&name)
    );
    let pod_api: Api<Pod> = Api::namespaced(env.kube.clone(), &ns);
    assert!(
        pod_api
            .get_opt(&pod_name)
            .await
            .unwrap()
            .is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
        "the guarded pod is not evicted"
    );
    assert_eq!(
        live_instances(&env),
        1,
        "the instance stays while the drain is blocked"
    );
    let node = env.nodes().await.remove(0);
    assert!(
        node.spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == "karpenter.sh/disrupted"),
        "the node is cordoned with the disrupted taint"
    );
    assert_eq!(
        node.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("node.kubernetes.io/exclude-from-external-load-balancers"))
            .map(String::as_str),
        Some("true"),
        "load balancers stop using a draining node"
    );
    eventually("a FailedDraining event", || async {
        (!env.events("FailedDraining").await.is_empty()).then_some(())
    })
    .await;

    // The controller dies mid-drain; the PDB is lifted; a new controller finishes the job.
    env.stop_operator();
    env.kubectl(&["-n", &ns, "delete", "pdb", "guarded"]);
    env.start_operator().await;
    eventually(
        "the NodeClaim, the old node and its instance gone",
        || async {
            let claims = env.nodeclaims().await;
            (!claims.iter().any(|c| claim_name(c) == claim_name(&claim))
                && !env.instances().iter().any(|i| {
                    Some(i.id.as_str())
                        == claim
                            .status
                            .as_ref()
                            .and_then(|s| s.provider_id.as_deref())
                            .and_then(|p| p.rsplit('/').next())
                }))
            .then_some(())
        },
    )
    .await;
    for (type_, status) in [
        ("Drained", "True"),
        ("VolumesDetached", "True"),
        ("InstanceTerminating", "True"),
    ] {
        assert!(
            conditions.saw(&name, type_, status, type_),
            "{type_}={status} on the way out: {:?}",
            conditions.of(&name)
        );
    }
    // The drained pod was evicted, and its Event says so.
    eventually("an Evicted event", || async {
        (!env.events("Evicted").await.is_empty()).then_some(())
    })
    .await;
    // Nothing is lost: the deployment's pod runs again, on a new node.
    env.wait_running(&ns, "guarded", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn do_not_disrupt_pods_hold_their_node() {
    let env = Env::start(Options::default()).await;
    env.apply_guide().await;
    env.kubectl_apply(&pool(
        "held",
        "2s",
        json!({}),
        json!({"terminationGracePeriod": "1h"}),
    ));
    let ns = env.cp.fresh_namespace("held").await.unwrap();
    // Two nodes, one pod each.
    env.apply_in(
        &ns,
        &deployment("held", 2, "held", tiny(), one_per_node("held")),
    );
    env.wait_running(&ns, "held", 2).await;
    let pod_api: Api<Pod> = Api::namespaced(env.kube.clone(), &ns);
    for p in env.pods(&ns, "held").await {
        let patch = json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}});
        pod_api
            .patch(
                p.metadata.name.as_deref().unwrap(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .unwrap();
    }
    // Deleting a held node's NodeClaim cordons it but the pod stays until terminationGracePeriod.
    let claim = env.claims_of("held").await.remove(0);
    delete_claim(&env, &claim_name(&claim)).await;
    eventually("a DisruptionBlocked event", || async {
        (!env.events("DisruptionBlocked").await.is_empty()).then_some(())
    })
    .await;
    assert!(
        env.nodeclaims()
            .await
            .iter()
            .any(|c| claim_name(c) == claim_name(&claim)),
        "the held NodeClaim stays"
    );
    // Upstream's marker of when the grace period ends, an hour after the deletion.
    let marked = eventually("the termination timestamp annotation", || async {
        let c = env
            .nodeclaims()
            .await
            .into_iter()
            .find(|c| claim_name(c) == claim_name(&claim))?;
        let at = c
            .metadata
            .annotations
            .as_ref()?
            .get("karpenter.sh/nodeclaim-termination-timestamp")?
            .parse::<jiff::Timestamp>()
            .ok()?;
        let deleted = c.metadata.deletion_timestamp.as_ref()?.0;
        Some((deleted, at))
    })
    .await;
    assert_eq!(marked.1.duration_since(marked.0).as_secs(), 3600);
    assert_eq!(
        env.pods(&ns, "held")
            .await
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .count(),
        2
    );
    assert!(
        env.events("DisruptionTerminating").await.is_empty(),
        "consolidation never picked a held node"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn termination_grace_period_deletes_a_held_pod_in_time_for_its_own_grace_period() {
    let env = Env::start(Options::default()).await;
    env.apply_guide().await;
    // 35 s for the node; the pod's default 30 s grace period: deleted 5 s after the claim.
    env.kubectl_apply(&pool(
        "deadline",
        "1h",
        json!({}),
        json!({"terminationGracePeriod": "35s"}),
    ));
    let ns = env.cp.fresh_namespace("deadline").await.unwrap();
    let held = json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}});
    let mut d: serde_json::Value =
        serde_json::from_str(&deployment("stubborn", 1, "deadline", tiny(), json!({}))).unwrap();
    d["spec"]["template"]["metadata"]["annotations"] = held["metadata"]["annotations"].clone();
    env.apply_in(&ns, &serde_json::to_string(&d).unwrap());
    let pod = env.wait_running(&ns, "stubborn", 1).await.remove(0);
    let claim = env.claims_of("deadline").await.remove(0);
    delete_claim(&env, &claim_name(&claim)).await;

    let name = claim_name(&claim);
    eventually(
        "TerminationGracePeriodExpiring on the NodeClaim",
        || async {
            env.events("TerminationGracePeriodExpiring")
                .await
                .iter()
                .any(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str())
                        && e.note
                            .as_deref()
                            .is_some_and(|n| n.starts_with("All pods will be deleted by"))
                })
                .then_some(())
        },
    )
    .await;
    // The do-not-disrupt pod is deleted (not evicted) once the deadline leaves it exactly its
    // own grace period, with upstream's Disrupted event.
    let pod_name = pod.metadata.name.clone().unwrap();
    eventually("a Disrupted event on the held pod", || async {
        env.events("Disrupted")
            .await
            .iter()
            .any(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod_name.as_str())
            })
            .then_some(())
    })
    .await;
    eventually("the NodeClaim gone", || async {
        (!env.nodeclaims().await.iter().any(|c| claim_name(c) == name)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_of_one_disrupts_one_node_at_a_time() {
    let env = Env::start(Options::default()).await;
    env.apply_guide().await;
    env.kubectl_apply(&pool(
        "budget",
        "2s",
        json!({"budgets": [{"nodes": "1"}]}),
        json!({}),
    ));
    let ns = env.cp.fresh_namespace("budget").await.unwrap();
    env.apply_in(
        &ns,
        &deployment("wide", 3, "budget", small(), one_per_node("wide")),
    );
    env.wait_running(&ns, "wide", 3).await;
    assert_eq!(env.claims_of("budget").await.len(), 3);

    // A watch sees every change in order (a poll could miss a disruption that takes a few
    // milliseconds): the most claims being deleted at once, until all are gone.
    use futures::StreamExt as _;
    use kube::runtime::watcher;
    let api: Api<NodeClaim> = Api::all(env.kube.clone());
    let selector = format!("{}=budget", kk_apis::names::label::NODEPOOL);
    let mut stream = watcher(api, watcher::Config::default().labels(&selector)).boxed();
    let mut live: BTreeSet<String> = BTreeSet::new();
    let mut disrupting: BTreeSet<String> = BTreeSet::new();
    let mut listed = false;
    let mut most = 0;
    delete_deployment(&env, &ns, "wide").await;
    let deadline = tokio::time::Instant::now() + support::DEADLINE;
    while !(listed && live.is_empty()) {
        let event = tokio::time::timeout_at(deadline, stream.next())
            .await
            .expect("empty nodes are removed within the deadline")
            .expect("the watch goes on")
            .expect("watch event");
        match event {
            watcher::Event::Apply(c) | watcher::Event::InitApply(c) => {
                let name = claim_name(&c);
                live.insert(name.clone());
                if c.metadata.deletion_timestamp.is_some() {
                    disrupting.insert(name);
                }
            }
            watcher::Event::Delete(c) => {
                live.remove(&claim_name(&c));
                disrupting.remove(&claim_name(&c));
            }
            watcher::Event::Init => {
                live.clear();
                disrupting.clear();
                listed = false;
            }
            watcher::Event::InitDone => listed = true,
        }
        most = most.max(disrupting.len());
    }
    assert_eq!(most, 1, "never more than one node disrupting at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expire_after_deletes_an_old_node_and_its_pod_moves_to_new_capacity() {
    let env = Env::start(Options::default()).await;
    env.apply_guide().await;
    env.kubectl_apply(&pool(
        "expiring",
        "1h",
        json!({}),
        json!({"expireAfter": "20s"}),
    ));
    let ns = env.cp.fresh_namespace("expire").await.unwrap();
    // Recording starts first: on a loaded machine the node can expire, and its claim go, before
    // the pod is seen Running.
    let conditions = env.record_conditions();
    env.apply_in(&ns, &deployment("aging", 1, "expiring", small(), json!({})));
    env.wait_running(&ns, "aging", 1).await;
    let old = env.claims_of("expiring").await.remove(0);

    // Upstream v1: expiration deletes the NodeClaim (no replacement first).
    eventually("the old NodeClaim deleted", || async {
        let claims = env.claims_of("expiring").await;
        claims
            .iter()
            .all(|c| claim_name(c) != claim_name(&old) || c.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
    // New nodes would expire 20 s after they start too; let them live.
    let api: Api<kk_apis::crd::NodePool> = Api::all(env.kube.clone());
    let patch = json!({"spec": {"template": {"spec": {"expireAfter": "Never"}}}});
    api.patch("expiring", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    // The evicted pod went pending and provisioning gave it a new node.
    eventually(
        "the old NodeClaim gone and the pod running on a new one",
        || async {
            let claims = env.claims_of("expiring").await;
            let gone = !claims.iter().any(|c| claim_name(c) == claim_name(&old));
            let pods = env.pods(&ns, "aging").await;
            let running = pods.iter().any(|p| {
                p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    && p.metadata.deletion_timestamp.is_none()
            });
            (gone && running && !claims.is_empty()).then_some(())
        },
    )
    .await;
    let old_name = claim_name(&old);
    assert!(
        conditions.saw(&old_name, "DisruptionReason", "True", "Expired"),
        "the old NodeClaim was taken for Expired: {:?}",
        conditions.of(&old_name)
    );
    let text = env.metrics_text();
    assert!(
        text.contains(
            r#"karpenter_nodeclaims_disrupted_total{reason="expired",nodepool="expiring""#
        ),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_kcnodeclass_image_drifts_and_replaces_nodes() {
    let env = Env::start(Options::default()).await;
    env.apply_guide().await;
    let ns = env.cp.fresh_namespace("drift").await.unwrap();
    env.apply_in(
        &ns,
        &deployment("drifty", 1, "karpenter", small(), json!({})),
    );
    env.wait_running(&ns, "drifty", 1).await;
    let old = env.claims_of("karpenter-default").await.remove(0);
    let old_image = old
        .status
        .as_ref()
        .and_then(|s| s.image_id.clone())
        .unwrap();

    let conditions = env.record_conditions();
    // One minor below the control plane resolves to another worker image.
    let classes: Api<kk_apis::crd::KCNodeClass> = Api::all(env.kube.clone());
    let patch = json!({"spec": {"bootstrap": {"kubernetesVersion": "1.34"}}});
    classes
        .patch(
            "karpenter-default",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();

    let replacement = eventually(
        "a NodeClaim with the new image, the old one gone",
        || async {
            let claims = env.claims_of("karpenter-default").await;
            let old_gone = !claims.iter().any(|c| claim_name(c) == claim_name(&old));
            let new = claims.into_iter().find(|c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.image_id.as_deref())
                    .is_some_and(|i| i != old_image)
            })?;
            old_gone.then_some(new)
        },
    )
    .await;
    assert!(
        replacement
            .status
            .unwrap()
            .image_id
            .unwrap()
            .contains("k8s134")
    );
    let old_name = claim_name(&old);
    assert!(
        conditions.saw(&old_name, "Drifted", "True", "NodeClassDrifted")
            && conditions.saw(&old_name, "DisruptionReason", "True", "Drifted"),
        "the old NodeClaim was Drifted (NodeClassDrifted), then held for Drifted: {:?}",
        conditions.of(&old_name)
    );
    // Upstream's events on the old NodeClaim while its replacement came up, then as it went.
    for reason in [
        "DisruptionLaunching",
        "DisruptionWaitingReadiness",
        "DisruptionTerminating",
    ] {
        eventually(
            &format!("a {reason} event on the old NodeClaim"),
            || async {
                env.events(reason)
                    .await
                    .iter()
                    .any(|e| {
                        e.regarding
                            .as_ref()
                            .is_some_and(|r| r.name.as_deref() == Some(old_name.as_str()))
                    })
                    .then_some(())
            },
        )
        .await;
    }
    env.wait_running(&ns, "drifty", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaked_instances_are_collected_and_forged_tags_are_never_deleted() {
    let env = Env::start(Options::default()).await;
    env.apply_guide().await;
    let class: kk_apis::crd::KCNodeClass = Api::all(env.kube.clone())
        .get("karpenter-default")
        .await
        .unwrap();
    let status = class.status.unwrap();
    let launch = |name: &str| LaunchSpec {
        name: name.into(),
        flavor_id: kakaocloud_sim::catalog::flavor_id("m2a.large").unwrap(),
        image_id: status.image.as_ref().unwrap().id.clone(),
        subnet_id: status.subnets[0].id.clone(),
        security_groups: vec!["demo-cluster-worker".into()],
        key_name: None,
        root_volume_gib: 50,
        delete_root_volume_on_termination: true,
        user_data: None,
        availability_zone: status.subnets[0].zone.clone(),
        description: None,
        disable_hyper_threading: false,
    };
    let instances = env.cloud.instances();
    // A leak: our signed tag, but its NodeClaim never existed (a crash after create).
    let leaked = instances.create(&launch("leaked")).await.unwrap();
    let tag = env
        .keyring
        .current()
        .sign(support::CLUSTER, "ghost-claim", &leaked.id)
        .unwrap();
    instances
        .update_description(&leaked.id, &format!("karpenter node {tag}"))
        .await
        .unwrap();
    // A forgery: the right shape, a wrong MAC.
    let forged = instances.create(&launch("forged")).await.unwrap();
    let bad = format!("kk:1:k1:ghost-claim:{}", "A".repeat(22));
    instances
        .update_description(&forged.id, &bad)
        .await
        .unwrap();
    // A foreign cluster's instance, signed for another cluster name.
    let foreign = instances.create(&launch("foreign")).await.unwrap();
    let other = env
        .keyring
        .current()
        .sign("other-cluster", "theirs", &foreign.id)
        .unwrap();
    instances
        .update_description(&foreign.id, &other)
        .await
        .unwrap();

    eventually("the leaked instance collected", || async {
        (!env.instances().iter().any(|i| i.id == leaked.id)).then_some(())
    })
    .await;
    let ids: Vec<String> = env.instances().into_iter().map(|i| i.id).collect();
    assert!(ids.contains(&forged.id), "a forged tag is never deleted");
    assert!(
        ids.contains(&foreign.id),
        "another cluster's instance is never deleted"
    );

    // A NodeClaim whose instance's tag was tampered with: terminated, the instance left alone.
    let ns = env.cp.fresh_namespace("tamper").await.unwrap();
    env.apply_in(
        &ns,
        &deployment("tamper", 1, "karpenter", small(), json!({})),
    );
    env.wait_running(&ns, "tamper", 1).await;
    let claim = env.claims_of("karpenter-default").await.remove(0);
    let id = claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .and_then(|p| p.rsplit('/').next())
        .unwrap()
        .to_owned();
    instances.update_description(&id, &bad).await.unwrap();
    env.kubectl(&["-n", &ns, "delete", "deployment", "tamper"]);
    delete_claim(&env, &claim_name(&claim)).await;
    eventually("an OwnershipUnverified event", || async {
        (!env.events("OwnershipUnverified").await.is_empty()).then_some(())
    })
    .await;
    assert!(
        env.instances().iter().any(|i| i.id == id),
        "the unverifiable instance is not deleted"
    );
    let text = env.metrics_text();
    assert!(
        text.contains("karpenter_kakaocloud_ownership_refusals_total"),
        "{text}"
    );
}

/// How many disruption passes the controller has evaluated (one observation per pass).
fn passes(env: &Env) -> u64 {
    env.metrics_text()
        .lines()
        .find(|l| {
            l.starts_with(
                "karpenter_voluntary_disruption_decision_evaluation_duration_seconds_count",
            )
        })
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Waits until `n` more disruption passes have run.
async fn wait_passes(env: &Env, n: u64) {
    let start = passes(env);
    eventually(&format!("{n} more disruption passes"), || async {
        (passes(env) >= start + n).then_some(())
    })
    .await;
}

fn names(claims: &[NodeClaim]) -> BTreeSet<String> {
    claims.iter().map(claim_name).collect()
}

fn anti_affinity_to(app: &str) -> serde_json::Value {
    json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": app}}}
    ]}}})
}

/// Upstream's disruption scenario with required hostname anti-affinity between two Deployments
/// on two underutilized nodes: `x` keeps `y` off its node, so no move exists. Consolidation must
/// see the running pod's term (kube-scheduler checks it for every incoming pod) and leave both
/// nodes alone, instead of deleting `y`'s node and launching a replacement for `y` in a loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consolidation_respects_running_pods_anti_affinity_and_never_churns() {
    let env = Env::start(Options::default()).await;
    env.apply_guide().await;
    env.kubectl_apply(&pool("anti", "2s", json!({}), json!({})));
    let ns = env.cp.fresh_namespace("anti").await.unwrap();
    env.apply_in(
        &ns,
        &deployment("x", 1, "anti", tiny(), anti_affinity_to("y")),
    );
    env.wait_running(&ns, "x", 1).await;
    env.apply_in(&ns, &deployment("y", 2, "anti", tiny(), json!({})));
    env.wait_running(&ns, "y", 2).await;
    let x_node = env.node_of(&env.pods(&ns, "x").await[0]).await;
    let before = names(&env.claims_of("anti").await);
    assert_eq!(before.len(), 2, "x's node and y's node");

    // Well past consolidateAfter and the nominations' 20 s: the passes see two underutilized
    // nodes and no valid move.
    wait_passes(&env, 40).await;
    assert_eq!(
        names(&env.claims_of("anti").await),
        before,
        "no NodeClaim was disrupted or replaced"
    );
    let y = env.pods(&ns, "y").await;
    assert_eq!(y.len(), 2);
    for p in &y {
        assert_eq!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Running")
        );
        assert_ne!(env.node_of(p).await.metadata.name, x_node.metadata.name);
    }
    assert!(
        env.events("DisruptionTerminating").await.is_empty(),
        "no node was picked"
    );
    // And each NodeClaim says why (upstream's Unconsolidatable event).
    let notes = eventually("an Unconsolidatable event on each NodeClaim", || async {
        let events = env.events("Unconsolidatable").await;
        let notes: Vec<(String, String)> = events
            .iter()
            .filter_map(|e| {
                Some((
                    e.regarding.as_ref()?.name.clone()?,
                    e.note.clone().unwrap_or_default(),
                ))
            })
            .filter(|(name, _)| before.contains(name))
            .collect();
        let named: BTreeSet<&String> = notes.iter().map(|(n, _)| n).collect();
        (named.len() == 2).then_some(notes)
    })
    .await;
    // The solver decides x's move too: x's own term keeps it off y's nodes, and both are on
    // the cheapest flavor already.
    for (_, note) in &notes {
        assert!(
            note.contains("cheaper") || note.contains("would schedule"),
            "{note}"
        );
    }
}

/// The pod template of `deployment(...)` with a `karpenter.sh/do-not-disrupt` annotation and a
/// node selector pinning it to `node`.
fn pinned_holder(name: &str, pool: &str, node: &str) -> String {
    let mut d: serde_json::Value = serde_json::from_str(&deployment(
        name,
        1,
        pool,
        tiny(),
        json!({"nodeSelector": {"workload-type": pool, "kubernetes.io/hostname": node}}),
    ))
    .unwrap();
    d["spec"]["template"]["metadata"]["annotations"] =
        json!({"karpenter.sh/do-not-disrupt": "true"});
    serde_json::to_string(&d).unwrap()
}

fn preferring(node: &str) -> serde_json::Value {
    json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
        ]}}
    ]}}})
}

/// Two nodes; `n1` holds a pod that blocks its own disruption (`blocker`), `n2` holds pods that
/// are free to move and fit on `n1`. `n2` is consolidated onto `n1`: a node that cannot be
/// disrupted is still a destination.
async fn blocked_node_receives_pods(blocker: &str) {
    let env = Env::start(Options::default()).await;
    env.apply_guide().await;
    env.kubectl_apply(&pool("dest", "2s", json!({}), json!({})));
    let ns = env.cp.fresh_namespace("dest").await.unwrap();
    // Two nodes sized for one small pod each.
    env.apply_in(
        &ns,
        &deployment("filler", 2, "dest", small(), one_per_node("filler")),
    );
    env.wait_running(&ns, "filler", 2).await;
    let mut hosts = Vec::new();
    for p in env.pods(&ns, "filler").await {
        hosts.push(env.node_of(&p).await.metadata.name.unwrap());
    }
    let (n1, n2) = (hosts[0].clone(), hosts[1].clone());
    match blocker {
        "do-not-disrupt" => env.apply_in(&ns, &pinned_holder("holder", "dest", &n1)),
        _ => {
            let mut d: serde_json::Value =
                serde_json::from_str(&pinned_holder("holder", "dest", &n1)).unwrap();
            d["spec"]["template"]["metadata"]["annotations"] = json!({});
            env.apply_in(&ns, &serde_json::to_string(&d).unwrap());
            env.apply_in(
                &ns,
                &serde_json::to_string(&json!({
                    "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": "holder"},
                    "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "holder"}}}
                }))
                .unwrap(),
            );
        }
    }
    env.wait_running(&ns, "holder", 1).await;
    let n1_claim = env
        .claims_of("dest")
        .await
        .into_iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(n1.as_str()))
        .map(|c| claim_name(&c))
        .unwrap();
    env.apply_in(&ns, &deployment("free", 2, "dest", tiny(), preferring(&n2)));
    env.wait_running(&ns, "free", 2).await;
    for p in env.pods(&ns, "free").await {
        assert_eq!(
            env.node_of(&p).await.metadata.name.as_deref(),
            Some(n2.as_str())
        );
    }
    delete_deployment(&env, &ns, "filler").await;

    eventually("n2 consolidated onto the blocked n1", || async {
        let claims = env.claims_of("dest").await;
        let free = env.pods(&ns, "free").await;
        let mut on_n1 = 0;
        for p in &free {
            let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            if running && p.spec.as_ref()?.node_name.as_deref() == Some(n1.as_str()) {
                on_n1 += 1;
            }
        }
        (claims.len() == 1 && free.len() == 2 && on_n1 == 2).then_some(())
    })
    .await;
    // n1 says why it stays (upstream's DisruptionBlocked event, naming the pod).
    eventually(
        "a DisruptionBlocked event on n1's NodeClaim naming the holder",
        || async {
            let all = env.events("DisruptionBlocked").await;
            all.into_iter().find(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(n1_claim.as_str())
                    && e.note.as_deref().is_some_and(|n| n.contains("holder"))
            })
        },
    )
    .await;
    let holder = env.pods(&ns, "holder").await;
    assert_eq!(holder.len(), 1);
    assert_eq!(
        env.node_of(&holder[0]).await.metadata.name.as_deref(),
        Some(n1.as_str())
    );
    if blocker != "do-not-disrupt" {
        return;
    }

    // The churn guard: the moved controller's pods now need new capacity (here because the
    // Deployment grows; a wrong move looks the same). The NodePool says so, and it is counted.
    env.kubectl(&["-n", &ns, "scale", "deployment", "free", "--replicas=40"]);
    let event = eventually("a ConsolidationReverted event on the NodePool", || async {
        env.events("ConsolidationReverted").await.into_iter().next()
    })
    .await;
    assert_eq!(
        event.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("dest")
    );
    let note = event.note.as_deref().unwrap_or("");
    assert!(note.contains("ReplicaSet/"), "{event:?}");
    assert!(
        note.contains("(5 min)"),
        "a first revert holds 5 minutes: {event:?}"
    );
    let counted = env.metrics_text().lines().any(|l| {
        l.starts_with("karpenter_kakaocloud_consolidation_reverted_total{nodepool=\"dest\"} ")
    });
    assert!(counted, "{}", env.metrics_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_held_by_do_not_disrupt_still_receives_consolidated_pods() {
    blocked_node_receives_pods("do-not-disrupt").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_held_by_a_pdb_still_receives_consolidated_pods() {
    blocked_node_receives_pods("pdb").await;
}

/// `GET` a JSON view of the controller.
async fn view(base: &str, path: &str) -> Option<serde_json::Value> {
    reqwest::get(format!("{base}{path}"))
        .await
        .ok()?
        .json()
        .await
        .ok()
}

/// The explanation of `node` once its verdict contains `needle`.
async fn verdict_containing(base: &str, node: &str, needle: &str) -> serde_json::Value {
    eventually(&format!("{node} explained as {needle:?}"), || async {
        let v = view(base, &format!("/explain/node/{node}")).await?;
        v["verdict"].as_str()?.contains(needle).then_some(v)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_names_the_pdb_and_the_budget_that_keep_nodes_and_what_if_replays_decisions() {
    let registry = kk_plugin_runtime::Registry::new(
        kk_plugin_runtime::Runtime::new(kk_plugin_runtime::Bounds::default(), None).unwrap(),
        None,
    );
    let env = Env::start(Options {
        plugins: Some(registry.clone()),
        ..Options::default()
    })
    .await;
    let (base, server) = env.serve_views(&registry).await;
    env.apply_guide().await;
    env.kubectl_apply(&pool("held", "0s", json!({}), json!({})));
    env.kubectl_apply(&pool(
        "frozen",
        "0s",
        json!({"budgets": [{"nodes": "0"}]}),
        json!({}),
    ));
    let ns = env.cp.fresh_namespace("explain").await.unwrap();
    env.apply_in(&ns, &deployment("held", 1, "held", small(), json!({})));
    env.apply_in(
        &ns,
        &serde_json::to_string(&json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "held"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "held"}}}
        }))
        .unwrap(),
    );
    env.apply_in(&ns, &deployment("frozen", 1, "frozen", small(), json!({})));
    let held_pod = env.wait_running(&ns, "held", 1).await.remove(0);
    let held_node = env.node_of(&held_pod).await.metadata.name.unwrap();
    let frozen_pod = env.wait_running(&ns, "frozen", 1).await.remove(0);
    let frozen_node = env.node_of(&frozen_pod).await.metadata.name.unwrap();

    // Why the pod runs there: the NodeClaim opened for it and the flavors ranked.
    let pod_name = held_pod.metadata.name.clone().unwrap();
    let pod = view(&base, &format!("/explain/pod/{ns}/{pod_name}"))
        .await
        .unwrap();
    let summary = pod["summary"].as_str().unwrap();
    assert!(
        summary.contains(&format!("runs on node {held_node}")),
        "{pod}"
    );
    assert!(summary.contains("NodePool held opened NodeClaim"), "{pod}");
    assert!(summary.contains("this one among them"), "{pod}");
    let first = pod["decision"]["ranked"][0]["instanceType"]
        .as_str()
        .unwrap();
    assert!(
        pod["launched"].as_str().unwrap().starts_with(first),
        "{pod}"
    );

    // The PDB keeps the held node, and the answer names the pod it protects.
    let held = verdict_containing(&base, &held_node, "PodDisruptionBudget").await;
    assert!(
        held["verdict"].as_str().unwrap().contains(&pod_name),
        "{held}"
    );
    assert_eq!(held["pods"][0]["pod"], format!("{ns}/{pod_name}"));

    // Emptied, the frozen node stays because its NodePool's budget is 0, and the answer says so.
    delete_deployment(&env, &ns, "frozen").await;
    let frozen = verdict_containing(&base, &frozen_node, "budget allows no Empty disruption").await;
    assert!(
        frozen["methods"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["method"] == "budget" && m["outcome"].as_str().unwrap().contains("Empty 0")),
        "{frozen}"
    );
    assert!(
        env.nodes()
            .await
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(frozen_node.as_str()))
    );
    // And the NodePool says so (upstream's DisruptionBlocked event on the NodePool).
    eventually(
        "a DisruptionBlocked event on the frozen NodePool",
        || async {
            env.events("DisruptionBlocked")
                .await
                .iter()
                .any(|e| {
                    e.regarding.as_ref().is_some_and(|r| {
                        r.kind.as_deref() == Some("NodePool") && r.name.as_deref() == Some("frozen")
                    })
                })
                .then_some(())
        },
    )
    .await;
    let missing = reqwest::get(format!("{base}/explain/node/no-such-node"))
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);

    // The same through kk-plugin, for a person; and the decisions replayed on a selector
    // that denies the family the default chose.
    let tool = support::kk_plugin_tool();
    let text =
        run_ok(Command::new(&tool).args(["explain", "node", &held_node, "--controller", &base]));
    assert!(
        text.contains("[keeps it] a PodDisruptionBudget forbids evicting pod"),
        "{text}"
    );
    let family = first.split('.').next().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(&config, json!({"denyFamilies": [family]}).to_string()).unwrap();
    let text = run_ok(
        Command::new(&tool)
            .arg("what-if")
            .arg(kk_demo::plugin_component("instance-selector").unwrap())
            .args(["--controller", &base, "--config"])
            .arg(&config),
    );
    let summary = text.lines().last().unwrap();
    let replayed: usize = summary.split(' ').next().unwrap().parse().unwrap();
    assert!(replayed >= 2, "{text}");
    assert!(
        summary.contains(&format!("{replayed} would choose another flavor first")),
        "every recorded decision picked {family} first: {text}"
    );
    server.abort();
}
