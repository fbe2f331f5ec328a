//! Provisioning end to end: the install guide's Step 5 and the lifecycle's failure paths, each on
//! a private control plane with the simulator and the operator (see `support`).

use crate::support;

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
    env.kubectl(&["-n", &ns, "apply", "-f", &support::guide_demo()]);

    let pods = running(&env, &ns, "app=karpenter-demo", 3).await;
    // Every node registered, so no bootstrap token is left in kube-system.
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(env.kube.clone(), "kube-system");
    eventually(
        "the registered nodes' bootstrap tokens are deleted",
        || async {
            let tokens = secrets
                .list(&kube::api::ListParams::default().labels(kk_apis::names::label::NODECLAIM))
                .await
                .ok()?;
            tokens.items.is_empty().then_some(())
        },
    )
    .await;
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

    // Binding the demo's pods was a pod event on each node: consolidateAfter counts from it.
    eventually("lastPodEventTime on every NodeClaim with pods", || async {
        let claims = env.nodeclaims().await;
        claims
            .iter()
            .filter(|c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some_and(|n| node_names.contains(n))
            })
            .all(|c| c.status.as_ref().unwrap().last_pod_event_time.is_some())
            .then_some(())
    })
    .await;

    // `kubectl get nodepools` shows real NODES and READY, and `-o wide` CPU and MEMORY: the
    // sum of the NodeClaims' capacity (upstream's nodepool counter and readiness controllers).
    let mut cpu_millis = 0u64;
    for c in &claims {
        let q = &c.status.as_ref().unwrap().capacity["cpu"].0;
        cpu_millis += q
            .strip_suffix('m')
            .map_or_else(|| q.parse::<u64>().unwrap() * 1000, |m| m.parse().unwrap());
    }
    let cpu = if cpu_millis.is_multiple_of(1000) {
        (cpu_millis / 1000).to_string()
    } else {
        format!("{cpu_millis}m")
    };
    let wide = eventually("the NodePool's status in kubectl get nodepools", || async {
        let wide = env.kubectl(&["get", "nodepools", "karpenter-default", "-o", "wide"]);
        // Cells by the header's offsets: kubectl leaves an unset column (WEIGHT) blank.
        let (header, row) = (wide.lines().next()?, wide.lines().nth(1)?);
        let cell = |column: &str| -> Option<String> {
            let at = header.find(column)?;
            Some(row.get(at..)?.split_whitespace().next()?.to_owned())
        };
        (cell("NODES") == Some(claims.len().to_string())
            && cell("READY").as_deref() == Some("True")
            && cell("CPU") == Some(cpu.clone()))
        .then_some(wide)
    })
    .await;
    let header = wide.lines().next().unwrap_or_default();
    for column in ["NODECLASS", "NODES", "READY", "CPU", "MEMORY"] {
        assert!(header.contains(column), "{wide}");
    }
    let pools: kube::Api<kk_apis::crd::NodePool> = kube::Api::all(env.kube.clone());
    let status = pools
        .get("karpenter-default")
        .await
        .unwrap()
        .status
        .unwrap();
    for type_ in ["ValidationSucceeded", "NodeClassReady", "Ready"] {
        assert!(
            status
                .conditions
                .iter()
                .any(|c| c.type_ == type_ && c.status == "True"),
            "{type_}: {:?}",
            status.conditions
        );
    }
    assert!(status.node_class_observed_generation.is_some());
    assert!(
        status.resources["memory"].0.ends_with("Gi"),
        "{:?}",
        status.resources
    );
    // `kubectl get nodeclaims -o wide`: upstream's wide columns, filled.
    let wide = env.kubectl(&["get", "nodeclaims", "-o", "wide"]);
    let header = wide.lines().next().unwrap_or_default();
    for column in ["ID", "NODEPOOL", "NODECLASS", "DRIFTED"] {
        assert!(header.contains(column), "{wide}");
    }
    for line in wide.lines().skip(1) {
        assert!(line.contains("kakaocloud:///"), "{wide}");
        assert!(line.contains("karpenter-default"), "{wide}");
    }
}

use std::time::Duration;

use kakaocloud_sim::routes;
use serde_json::json;
use support::{deployment, label, nodepool};

fn small() -> serde_json::Value {
    json!({"requests": {"cpu": "1", "memory": "2Gi"}})
}

/// Each pod of `app` on a node of its own.
fn one_per_node(app: &str) -> serde_json::Value {
    json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": app}}}
    ]}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodepool_limits_stop_provisioning_with_an_event() {
    let env = Env::start(Options::default()).await;
    env.apply_guide().await;
    env.kubectl_apply(&nodepool("limited", json!({}), Some(json!({"cpu": "4"}))));
    let ns = env.cp.fresh_namespace("limits").await.unwrap();
    env.apply_in(&ns, &deployment("many", 8, "limited", small(), json!({})));

    let events = eventually("a NodePoolLimitsExceeded event", || async {
        let events = env.events("NodePoolLimitsExceeded").await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    let regarding = events[0].regarding.clone().unwrap_or_default();
    assert_eq!(regarding.kind.as_deref(), Some("NodePool"));
    assert_eq!(regarding.name.as_deref(), Some("limited"));

    // What was launched stays within the limit, and the rest of the pods wait.
    let claims = env.claims_of("limited").await;
    let cpus: f64 = claims
        .iter()
        .filter_map(|c| {
            c.status
                .as_ref()?
                .capacity
                .get("cpu")
                .map(|q| q.0.parse::<f64>().unwrap_or(f64::MAX))
        })
        .sum();
    assert!(
        cpus <= 4.0,
        "NodeClaims of the limited pool have {cpus} CPUs"
    );
    let pending = env
        .pods(&ns, "many")
        .await
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none())
        .count();
    assert!(pending > 0, "pods beyond the limit stay pending");

    // A pool whose requirements leave no instance type says so on itself.
    env.kubectl_apply(&nodepool(
        "nothing",
        json!({"requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["x9.huge"]}
        ]}),
        None,
    ));
    env.apply_in(&ns, &deployment("none", 1, "nothing", small(), json!({})));
    let event = eventually("a NoCompatibleInstanceTypes event", || async {
        env.events("NoCompatibleInstanceTypes")
            .await
            .into_iter()
            .next()
    })
    .await;
    let regarding = event.regarding.unwrap_or_default();
    assert_eq!(regarding.kind.as_deref(), Some("NodePool"));
    assert_eq!(regarding.name.as_deref(), Some("nothing"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taints_keep_intolerant_pods_off_and_tolerating_pods_get_tainted_nodes() {
    let env = Env::start(Options::default()).await;
    env.apply_guide().await;
    let taint = json!([{"key": "team", "value": "batch", "effect": "NoSchedule"}]);
    env.kubectl_apply(&nodepool("tainted", json!({"taints": taint}), None));
    let ns = env.cp.fresh_namespace("taints").await.unwrap();
    env.apply_in(
        &ns,
        &deployment("intolerant", 1, "tainted", small(), json!({})),
    );
    let tolerations = json!({"tolerations": [{"key": "team", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}]});
    env.apply_in(
        &ns,
        &deployment("tolerant", 1, "tainted", small(), tolerations),
    );

    let pods = env.wait_running(&ns, "tolerant", 1).await;
    let node = env.node_of(&pods[0]).await;
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t.key == "team" && t.effect == "NoSchedule"),
        "{taints:?}"
    );

    // The intolerant pod is reported, and nothing was launched for it.
    eventually("FailedScheduling for the intolerant pod", || async {
        let events = env.events("FailedScheduling").await;
        events
            .iter()
            .any(|e| {
                e.regarding
                    .as_ref()
                    .and_then(|r| r.name.as_deref())
                    .is_some_and(|n| n.starts_with("intolerant"))
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("taint") || n.contains("tolerat"))
            })
            .then_some(())
    })
    .await;
    let intolerant = env.pods(&ns, "intolerant").await;
    assert!(
        intolerant
            .iter()
            .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none())
    );
    assert_eq!(
        env.claims_of("tainted").await.len(),
        1,
        "only the tolerating pod got a node"
    );
}

/// The flavors KakaoCloud lists as `instance_type: gpu` (the official enum's GPU kind).
async fn gpu_flavors(env: &Env) -> BTreeSet<String> {
    env.cloud
        .flavors()
        .list()
        .await
        .unwrap()
        .into_iter()
        .filter(|f| f.instance_type == Some(kakaocloud::api::InstanceKind::Gpu))
        .filter_map(|f| f.name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zone_topology_spread_uses_three_zones_and_gpu_pods_alone_get_gpu_flavors() {
    let env = Env::start(Options::default()).await;
    env.apply_guide().await;
    // Without limits: like upstream, each new NodeClaim holds its largest option against them,
    // and the guide's 40 CPUs would stop the fourth node.
    env.kubectl_apply(&nodepool("open", json!({}), Some(serde_json::Value::Null)));
    let ns = env.cp.fresh_namespace("spread").await.unwrap();
    // minDomains: kube-scheduler only counts zones that have nodes, so without it a late replica
    // (the ReplicaSet creates pods in slow-start batches) may bind to a node in a zone that
    // already has one. With minDomains 3 it stays pending until the third zone exists.
    let spread = json!({"topologySpreadConstraints": [{
        "maxSkew": 1, "minDomains": 3, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "spread"}},
    }]});
    env.apply_in(&ns, &deployment("spread", 3, "open", small(), spread));
    let gpu = json!({"requests": {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}});
    env.apply_in(&ns, &deployment("gpu", 1, "open", gpu, json!({})));

    let pods = env.wait_running(&ns, "spread", 3).await;
    let mut zones = BTreeSet::new();
    for pod in &pods {
        let node = env.node_of(pod).await;
        zones.insert(label(&node, "topology.kubernetes.io/zone").to_owned());
    }
    assert_eq!(zones.len(), 3, "one pod per zone: {zones:?}");

    let gpu_pods = env.wait_running(&ns, "gpu", 1).await;
    let node = env.node_of(&gpu_pods[0]).await;
    let flavor = label(&node, "node.kubernetes.io/instance-type");
    let gpu_kinds = gpu_flavors(&env).await;
    assert!(
        gpu_kinds.contains(flavor),
        "the GPU pod gets a flavor KakaoCloud reports as gpu: {flavor} not in {gpu_kinds:?}"
    );
    assert_eq!(label(&node, kk_apis::names::label::INSTANCE_GPU_COUNT), "1");

    // Only the GPU pod's NodeClaim is a GPU flavor; the spread pods' are not. (Once nodes exist,
    // kube-scheduler may still bind a CPU pod to the GPU node: taint GPU pools to prevent that.)
    let claims = env.claims_of("open").await;
    let flavor_of = |c: &kk_apis::crd::NodeClaim| {
        c.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("node.kubernetes.io/instance-type").cloned())
            .unwrap_or_default()
    };
    let gpu_claims = claims
        .iter()
        .filter(|c| gpu_kinds.contains(&flavor_of(c)))
        .count();
    assert_eq!(gpu_claims, 1, "one GPU NodeClaim of {}", claims.len());
    assert_eq!(
        claims.len(),
        4,
        "three CPU NodeClaims for the spread pods, one GPU NodeClaim"
    );
    // Hyper-threading was chosen explicitly: KakaoCloud would turn it off on the CPU flavors
    // had the create left `is_disable_hyper_threading` out (its default is true).
    let cpu_instances: Vec<_> = env
        .sim
        .instances()
        .into_iter()
        .filter(|i| {
            i.flavor
                .as_ref()
                .and_then(|f| f.name.as_deref())
                .is_some_and(|n| !gpu_kinds.contains(n))
        })
        .collect();
    assert_eq!(cpu_instances.len(), 3);
    assert!(
        cpu_instances
            .iter()
            .all(|i| i.is_hyper_threading == Some(true))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_error_on_the_cheapest_flavor_falls_back_to_the_next() {
    let env = Env::start(Options::default()).await;
    env.apply_guide().await;
    let ns = env.cp.fresh_namespace("capacity").await.unwrap();
    env.apply_in(
        &ns,
        &deployment("solo", 1, "karpenter", small(), one_per_node("solo")),
    );
    let first = env.wait_running(&ns, "solo", 1).await;
    let cheapest = label(
        &env.node_of(&first[0]).await,
        "node.kubernetes.io/instance-type",
    )
    .to_owned();

    // The same shape again, but KakaoCloud has none of the cheapest flavor left anywhere.
    for zone in kakaocloud_sim::catalog::ZONES {
        env.sim.faults().capacity_error(&cheapest, zone);
    }
    let creates_before = env.sim.request_count(routes::INSTANCES_CREATE);
    env.kubectl(&["-n", &ns, "scale", "deployment/solo", "--replicas=2"]);
    let pods = env.wait_running(&ns, "solo", 2).await;
    let mut flavors = BTreeSet::new();
    for pod in &pods {
        flavors
            .insert(label(&env.node_of(pod).await, "node.kubernetes.io/instance-type").to_owned());
    }
    assert_eq!(
        flavors.len(),
        2,
        "the second node is another flavor: {flavors:?}"
    );
    assert!(flavors.contains(&cheapest));
    assert!(
        env.sim.request_count(routes::INSTANCES_CREATE) - creates_before >= 2,
        "at least one refused create before the fallback"
    );
    assert_eq!(
        env.claims_of("karpenter-default").await.len(),
        2,
        "the fallback happened within one NodeClaim"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_stuck_in_build_past_the_registration_ttl_is_replaced() {
    let mut options = Options::default();
    options.settings.registration_ttl = Duration::from_secs(5);
    let env = Env::start(options).await;
    env.apply_guide().await;
    env.sim.faults().stuck_in_build("");
    let ns = env.cp.fresh_namespace("stuck").await.unwrap();
    env.apply_in(
        &ns,
        &deployment("stuck", 1, "karpenter", small(), json!({})),
    );

    let stuck = eventually("the first instance", || async {
        env.instances().into_iter().next()
    })
    .await;
    eventually("a RegistrationTimeout event", || async {
        (!env.events("RegistrationTimeout").await.is_empty()).then_some(())
    })
    .await;
    env.sim.faults().clear();
    env.wait_running(&ns, "stuck", 1).await;
    eventually("the stuck instance is deleted", || async {
        env.instances()
            .iter()
            .all(|i| i.id != stuck.id)
            .then_some(())
    })
    .await;
    assert_eq!(
        env.instances().len(),
        1,
        "exactly one live instance remains"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_mid_launch_creates_no_duplicate_instance() {
    let mut env = Env::start(Options::default()).await;
    env.apply_guide().await;
    // The create commits, then its response takes 4 s: the controller dies in between.
    env.sim
        .faults()
        .delay_after_commit(routes::INSTANCES_CREATE, 1, Duration::from_secs(4));
    let ns = env.cp.fresh_namespace("restart").await.unwrap();
    env.apply_in(
        &ns,
        &deployment("restart", 1, "karpenter", small(), json!({})),
    );
    eventually("the instance exists in KakaoCloud", || async {
        (!env.instances().is_empty()).then_some(())
    })
    .await;
    env.stop_operator();
    env.start_operator().await;

    env.wait_running(&ns, "restart", 1).await;
    assert_eq!(
        env.sim.instances_including_deleted().len(),
        1,
        "one instance ever"
    );
    assert_eq!(
        env.sim.request_count(routes::INSTANCES_CREATE),
        1,
        "one create call"
    );
    let claims = env.claims_of("karpenter-default").await;
    assert_eq!(claims.len(), 1);
    let instance = &env.instances()[0];
    let owner = env
        .keyring
        .current()
        .verify_description(
            instance.description.as_deref().unwrap_or(""),
            support::CLUSTER,
            &instance.id,
        )
        .expect("the adopted instance is tagged");
    assert_eq!(
        Some(owner.nodeclaim.as_str()),
        claims[0].metadata.name.as_deref()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_from_a_lost_answer_and_a_lagging_list_is_adopted_or_collected() {
    let env = Env::start(Options::default()).await;
    env.apply_guide().await;
    // The first create commits but its answer is lost; lists leave out instances younger than
    // 5 s, so the retried launch cannot find it and creates again.
    let faults = env.sim.faults();
    faults.list_lag(Duration::from_secs(5));
    faults.drop_after_commit(routes::INSTANCES_CREATE, 1);
    let ns = env.cp.fresh_namespace("lag").await.unwrap();
    env.apply_in(&ns, &deployment("lag", 1, "karpenter", small(), json!({})));
    let pods = env.wait_running(&ns, "lag", 1).await;
    let claims = env.claims_of("karpenter-default").await;
    assert_eq!(claims.len(), 1);
    let claim = claims[0].metadata.name.clone().unwrap();
    // Exactly one duplicate: a later reconcile that reads the claim before its status shows
    // the launch (and lists that still lag) reuses the instance from the launch cache.
    let creates = env.sim.request_count(routes::INSTANCES_CREATE);
    assert_eq!(
        creates, 2,
        "the lost answer and the lagging list made a second create, and only one"
    );

    // Both instances carry the claim's name and userdata, so one Node name, held by the kubelet
    // that joined first. The claim keeps that instance: the one it launched, or the duplicate
    // (adopted when its Node joined first, as it does here unless the machine is slow, having
    // been created first). Garbage collection removes the other: both were the claim's from
    // their first moment (the duplicate through its create marker).
    let ring = env.keyring.current();
    let kept = eventually("one instance left", || async {
        let live = env.instances();
        (live.len() == 1).then(|| live[0].clone())
    })
    .await;
    let owner = ring
        .verify_description(
            kept.description.as_deref().unwrap_or(""),
            support::CLUSTER,
            &kept.id,
        )
        .expect("the kept instance is tagged");
    assert_eq!(owner.nodeclaim, claim);
    let node = env.node_of(&pods[0]).await;
    let provider_id = node.spec.and_then(|s| s.provider_id).unwrap_or_default();
    assert!(
        provider_id.ends_with(&kept.id),
        "the pod runs on the kept instance: {provider_id}"
    );
    let all = env.sim.instances_including_deleted();
    assert_eq!(all.len(), creates, "one instance per create");
    for removed in all.iter().filter(|i| i.id != kept.id) {
        let marked = ring
            .owner(
                removed.description.as_deref().unwrap_or(""),
                removed.name.as_deref().unwrap_or(""),
                support::CLUSTER,
                &removed.id,
            )
            .expect("the removed instance is attributable");
        assert_eq!(marked.nodeclaim, claim);
    }
    for adopted in env.events("DuplicateAdopted").await {
        let note = adopted.note.unwrap_or_default();
        assert!(note.contains(&kept.id), "the adopted one is kept: {note}");
    }
    let counted = format!(r#"action="duplicate-instance"}} {}"#, creates - 1);
    assert!(env.metrics_text().contains(&counted), "counted: {counted}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_selection_plugin_from_examples_changes_the_flavor() {
    use kk_plugin_runtime::{Bounds, Kind, PluginRanker, Registry, Runtime, Source};

    // The operator ranks through the plugin seam; with nothing loaded the native default serves.
    let registry = Registry::new(Runtime::new(Bounds::default(), None).unwrap(), None);
    let env = Env::start(Options {
        ranker: Some(std::sync::Arc::new(PluginRanker {
            registry: registry.clone(),
        })),
        ..Options::default()
    })
    .await;
    env.apply_guide().await;
    let ns = env.cp.fresh_namespace("custom").await.unwrap();

    env.apply_in(
        &ns,
        &deployment("before", 1, "karpenter", small(), json!({})),
    );
    let pods = env.wait_running(&ns, "before", 1).await;
    let default_flavor = label(
        &env.node_of(&pods[0]).await,
        "node.kubernetes.io/instance-type",
    )
    .to_owned();

    // examples/gpu-aware-selector, built to a component, preferring a family the default did
    // not choose; the same pod shape in a second pool then gets that family.
    let prefer = kk_demo::family_not_among(std::slice::from_ref(&default_flavor));
    let wasm = kk_demo::read_plugin("gpu-aware-selector").unwrap_or_else(|e| panic!("{e:#}"));
    registry
        .apply(&Source::new(
            "gpu-aware-selector",
            Kind::Selector,
            wasm,
            &format!(r#"{{"preferFamilies": ["{prefer}"]}}"#),
        ))
        .expect("the example loads");
    env.kubectl_apply(&nodepool("custom", json!({}), None));
    env.apply_in(&ns, &deployment("after", 1, "custom", small(), json!({})));
    let pods = env.wait_running(&ns, "after", 1).await;
    let chosen = label(
        &env.node_of(&pods[0]).await,
        "node.kubernetes.io/instance-type",
    )
    .to_owned();
    assert_eq!(
        kk_demo::family(&chosen),
        prefer,
        "default chose {default_flavor}, the example preferring {prefer} chose {chosen}"
    );
    let claims = env.claims_of("custom").await;
    assert_eq!(claims.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodeclaim_whose_name_cannot_be_signed_creates_nothing_and_does_not_stick() {
    let env = Env::start(Options::default()).await;
    env.apply_guide().await;
    // 81 characters: a valid object name, but its ownership tag cannot fit the 100-character
    // instance description, so an instance launched for it could never be deleted safely.
    let name = format!("long-{}.{}", "n".repeat(40), "x".repeat(35));
    env.kubectl_apply(&format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: {name}
  labels:
    karpenter.sh/nodepool: karpenter-default
  finalizers: [karpenter.sh/termination]
spec:
  nodeClassRef: {{group: karpenter.kakaocloud.com, kind: KCNodeClass, name: karpenter-default}}
  requirements:
    - {{key: node.kubernetes.io/instance-type, operator: In, values: [m2a.large]}}
"#
    ));
    eventually(
        "the unlaunchable NodeClaim is deleted, its finalizer released",
        || async {
            let left = env.nodeclaims().await;
            (!left
                .iter()
                .any(|c| c.metadata.name.as_deref() == Some(name.as_str())))
            .then_some(())
        },
    )
    .await;
    assert!(
        env.sim.instances_including_deleted().is_empty(),
        "no instance was ever created"
    );
    assert_eq!(env.sim.request_count(routes::INSTANCES_CREATE), 0);
    // Events are published in the background, so the claim can be gone before its Event lands.
    eventually("an Event saying the tag would not fit", || async {
        env.events("InvalidNodeClaimName")
            .await
            .iter()
            .any(|e| {
                e.note
                    .as_deref()
                    .is_some_and(|n| n.contains("description limit"))
            })
            .then_some(())
    })
    .await;
}
