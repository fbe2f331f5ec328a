//! The install guide Steps 1-5 with helm, on a private control plane and the simulator (see
//! `kk_demo`): Secrets exactly as the guide creates them, `helm upgrade --install ... --wait`
//! with the Deployment READY, then the controller binary run as the Deployment's pods (its
//! rendered env, the ServiceAccount's RBAC), the guide's KCNodeClass, NodePool and demo.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kk_demo::{Cluster, wait_for};

const BIN: &str = env!("CARGO_BIN_EXE_karpenter-kakaocloud");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_guide_with_helm() {
    assert!(
        kk_demo::chart_dir()
            .join("plugins/instance-selector/plugin.wasm.gz")
            .is_file(),
        "the chart has no default plugins: run scripts/package-chart.sh --no-package"
    );
    let began = Instant::now();
    let cluster = Cluster::start(kakaocloud_sim::SimConfig::default())
        .await
        .expect("cluster starts");
    let started = began.elapsed();

    // Step 1.
    cluster.step1_secrets().expect("Step 1");
    // Step 2.
    let helm_took = cluster.step2_install(&[]).expect("Step 2: helm --wait");
    assert_eq!(
        cluster.deployment_ready().unwrap(),
        "2/2",
        "Deployment READY"
    );
    let crds = cluster
        .kubectl(&["get", "crd", "-o", "name"], None)
        .unwrap();
    for crd in [
        "kcnodeclasses.karpenter.kakaocloud.com",
        "nodepools.karpenter.sh",
        "nodeclaims.karpenter.sh",
    ] {
        assert!(crds.contains(crd), "helm installed the CRDs: {crds}");
    }
    eprintln!(
        "control plane {:.1}s, helm upgrade --install --wait {:.1}s",
        started.as_secs_f64(),
        helm_took.as_secs_f64()
    );

    // The two pods, played by two controller processes: one leads, the other stands by.
    let pods = cluster.controller_pods().await.unwrap();
    assert_eq!(pods.len(), 2, "{pods:?}");
    let env = cluster.controller_env(&pods[0]).await.unwrap();
    assert_eq!(env["SYSTEM_NAMESPACE"], kk_demo::NAMESPACE);
    assert_eq!(env["KAKAOCLOUD_REGION"], "kr-central-2");
    assert!(env["KAKAOCLOUD_ENDPOINTS"].contains("bcs=http://127.0.0.1:"));
    let mut a = cluster
        .spawn_controller(BIN.as_ref(), &pods[0], &[])
        .await
        .unwrap();
    let holder = wait_for("a leader", Duration::from_secs(60), || async {
        Ok(cluster.lease_holder().await)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", a.log_text()));
    assert_eq!(holder, pods[0]);
    let mut b = cluster
        .spawn_controller(BIN.as_ref(), &pods[1], &[])
        .await
        .unwrap();

    // Both ready (leader and standby), both alive; metrics served.
    for c in [&a, &b] {
        wait_for("readyz 200", Duration::from_secs(30), || async {
            Ok(c.http_get(c.health_port, "/readyz")
                .ok()
                .filter(|(s, _)| *s == 200))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", c.log_text()));
        assert_eq!(c.http_get(c.health_port, "/healthz").unwrap().0, 200);
    }
    let (status, body) = a.http_get(a.metrics_port, "/metrics").unwrap();
    assert_eq!(status, 200);
    assert!(
        body.contains("leader_election_master_status{name=\"karpenter-leader-election\"} 1"),
        "{body}"
    );
    let (_, body) = b.http_get(b.metrics_port, "/metrics").unwrap();
    assert!(!body.contains("leader_election_master_status{name=\"karpenter-leader-election\"} 1"));

    // Step 3, 4, 5.
    let conditions = cluster
        .step3_nodeclass(Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", a.log_text()));
    let types: BTreeSet<&str> = conditions.iter().map(|(t, _)| t.as_str()).collect();
    for t in [
        "KubernetesVersionReady",
        "ImagesReady",
        "SubnetsReady",
        "SecurityGroupsReady",
        "KeyPairReady",
        "Ready",
    ] {
        assert!(types.contains(t), "{conditions:?}");
    }
    cluster.step4_nodepool().unwrap();
    let applied = Instant::now();
    cluster.step5_demo().unwrap();
    let pods = wait_for("3 demo pods Running", Duration::from_secs(120), || async {
        let running = cluster.running_demo_pods().await?;
        Ok((running.len() >= 3).then_some(running))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", a.log_text()));
    eprintln!(
        "demo pods Running {:.1}s after kubectl apply",
        applied.elapsed().as_secs_f64()
    );
    let nodes = cluster.karpenter_nodes().await.unwrap();
    let node_names: BTreeSet<String> = nodes
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    for p in &pods {
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
        assert!(
            node_names.contains(&node),
            "pod on {node}, not a Karpenter node"
        );
    }
    let claims = cluster.nodeclaims().await.unwrap();
    assert_eq!(
        claims.len(),
        cluster.instances().len(),
        "one instance per NodeClaim"
    );

    // The chart brought the default plugins and the leader serves them.
    for name in [
        "instance-selector",
        "consolidation-scorer",
        "kubeadm-userdata",
    ] {
        cluster
            .wait_plugin_event(name, "PluginActive", "", Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", a.log_text()));
    }
    let (_, body) = a.http_get(a.metrics_port, "/metrics").unwrap();
    assert!(
        body.lines()
            .any(|l| l.starts_with("karpenter_kakaocloud_plugin_active")
                && l.contains("plugin=\"instance-selector\"")
                && l.ends_with(" 1")),
        "{body}"
    );

    // Hot swap: the example selector, preferring a family the default did not choose, replaces
    // the instance-selector ConfigMap; the next node is of that family, with no restart.
    let before = cluster
        .instance_types_of("karpenter-default")
        .await
        .unwrap();
    let prefer = kk_demo::family_not_among(&before);
    let swapped_at = Instant::now();
    let digest = cluster
        .swap_selector(
            "gpu-aware-selector",
            &format!(r#"{{"preferFamilies": ["{prefer}"]}}"#),
        )
        .unwrap();
    cluster
        .wait_plugin_event(
            "instance-selector",
            "PluginActive",
            &digest,
            Duration::from_secs(60),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", a.log_text()));
    eprintln!(
        "plugin swapped {:.1}s after kubectl apply",
        swapped_at.elapsed().as_secs_f64()
    );
    cluster.apply_swap_workload().unwrap();
    let swapped = wait_for(
        "a swap-demo NodeClaim",
        Duration::from_secs(120),
        || async {
            let types = cluster.instance_types_of("swap-demo").await?;
            Ok((!types.is_empty()).then_some(types))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", a.log_text()));
    assert!(
        swapped.iter().all(|t| kk_demo::family(t) == prefer),
        "default chose {before:?}; after the swap to prefer {prefer}: {swapped:?}"
    );

    // A tampered ConfigMap (digest of other bytes) is refused; the example keeps serving.
    let wasm = kk_demo::read_plugin("instance-selector").unwrap();
    let tampered = kk_demo::plugin_configmap_json(
        "instance-selector",
        "instance-selector",
        &wasm,
        &digest,
        "{}",
    )
    .unwrap();
    cluster
        .kubectl(&["apply", "-f", "-"], Some(&tampered))
        .unwrap();
    let rejection = cluster
        .wait_plugin_event(
            "instance-selector",
            "PluginRejected",
            "",
            Duration::from_secs(60),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", a.log_text()));
    assert!(rejection.contains("digest mismatch"), "{rejection}");
    assert!(
        rejection.contains(&digest[..12]),
        "names who keeps serving: {rejection}"
    );
    assert_eq!(a.exited(), None, "no restart: {}", a.log_text());

    // Only the leader acted; the standby never started controllers.
    assert!(a.log_text().contains("controllers started (leader)"));
    assert!(
        !b.log_text().contains("controllers started"),
        "{}",
        b.log_text()
    );
    // Logs are JSON (the chart's logFormat) and never carry the credential secret.
    let secret = cluster.sim.describe()["applicationCredentialSecret"]
        .as_str()
        .unwrap()
        .to_owned();
    for c in [&a, &b] {
        let log = c.log_text();
        assert!(
            !log.contains(&secret),
            "the secret is in the log of {}",
            c.pod
        );
        let first = log.lines().next().unwrap_or_default();
        assert!(
            serde_json::from_str::<serde_json::Value>(first).is_ok(),
            "not JSON: {first}"
        );
    }

    // SIGTERM: the leader releases the Lease and the standby takes over at once.
    assert_eq!(a.terminate(Duration::from_secs(10)), Some(0));
    let took_over = Instant::now();
    wait_for("the standby leads", Duration::from_secs(10), || async {
        Ok((cluster.lease_holder().await.as_deref() == Some(b.pod.as_str())).then_some(()))
    })
    .await
    .unwrap();
    assert!(
        took_over.elapsed() < Duration::from_secs(5),
        "released, not expired"
    );
    assert_eq!(b.terminate(Duration::from_secs(10)), Some(0));
    eprintln!("whole test {:.1}s", began.elapsed().as_secs_f64());
}
