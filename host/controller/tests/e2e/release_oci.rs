//! The release as a user gets it: `scripts/release.sh` builds the image and pushes it and the
//! chart to a real OCI registry (the CNCF distribution registry over TLS, trusted through
//! `SSL_CERT_FILE`), then the install guide's Step 2 runs verbatim from `oci://` (only the
//! registry host and the simulator's endpoints differ) and the controller processes are the
//! image's own binary, unpacked from the registry, so a broken image fails here. Then
//! docs/uninstall.md: `helm uninstall` run first (NodeClaims stuck, instances running), the
//! documented recovery, and the uninstall in order, ending with no instance and no finalizer.

use std::time::Duration;

use kk_demo::{Cluster, Registry, wait_for};

const VERSION: &str = env!("CARGO_PKG_VERSION");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guide_installs_the_released_chart_and_image_from_an_oci_registry() {
    let registry = Registry::start().await.expect("registry starts");
    let image = registry
        .release(VERSION, "ke-helm-public")
        .unwrap_or_else(|e| panic!("{e}"));
    let cluster = Cluster::start(kakaocloud_sim::SimConfig::default())
        .await
        .expect("cluster starts");
    cluster.step1_secrets().expect("Step 1");
    let chart = format!(
        "oci://{}/ke-helm-public/karpenter-provider-kakaocloud",
        registry.host
    );
    cluster
        .step2_install_oci(&chart, VERSION, &registry.ca_bundle, &[])
        .unwrap_or_else(|e| panic!("Step 2 from {chart}: {e}\n{}", registry.log()));
    assert_eq!(cluster.deployment_ready().unwrap(), "2/2");
    // The chart carries its own image, pinned by digest: the guide sets no controller.image.*.
    let deployed = cluster
        .kubectl(
            &[
                "-n",
                kk_demo::NAMESPACE,
                "get",
                "deployment",
                kk_demo::RELEASE,
                "-o",
                "jsonpath={.spec.template.spec.containers[0].image}",
            ],
            None,
        )
        .unwrap();
    assert_eq!(deployed.trim(), image);

    // The pods are the image's binary, taken from the registry.
    let binary = cluster.work.path().join("karpenter-kakaocloud-from-image");
    registry
        .extract(&image, "/karpenter-kakaocloud", &binary)
        .unwrap();
    let pods = cluster.controller_pods().await.unwrap();
    let controller = cluster
        .spawn_controller(&binary, &pods[0], &[])
        .await
        .unwrap();
    wait_for("a leader", Duration::from_secs(60), || async {
        Ok(cluster.lease_holder().await)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    cluster
        .step3_nodeclass(Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    cluster.step4_nodepool().unwrap();
    cluster.step5_demo().unwrap();
    wait_for("3 demo pods Running", Duration::from_secs(120), || async {
        let running = cluster.running_demo_pods().await?;
        Ok((running.len() >= 3).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));

    // `helm test`'s command, run by the image's binary against this controller.
    let check = std::process::Command::new(&binary)
        .args([
            "--check",
            &format!("http://127.0.0.1:{}/metrics", controller.metrics_port),
        ])
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");

    // docs/uninstall.md, the wrong order first: `helm uninstall` while nodes exist. The
    // controller goes with the release, so deleting the NodePools leaves their NodeClaims
    // terminating behind the finalizer and the instances running.
    let mut controller = controller;
    let helm = |script: &str| {
        cluster
            .shell_with(script, &[("SSL_CERT_FILE", registry.ca_bundle.as_path())])
            .unwrap_or_else(|e| panic!("{script}: {e}"))
    };
    helm("helm uninstall karpenter-provider-kakaocloud --namespace karpenter-kakaocloud");
    controller.terminate(Duration::from_secs(10));
    cluster.delete_demo().unwrap();
    helm("kubectl delete nodepools --all --wait=false");
    let stuck = wait_for(
        "NodeClaims terminating behind their finalizer",
        Duration::from_secs(60),
        || async {
            let claims = cluster.nodeclaims().await?;
            Ok((!claims.is_empty()
                && claims
                    .iter()
                    .all(|c| c.metadata.deletion_timestamp.is_some()))
            .then_some(claims.len()))
        },
    )
    .await
    .unwrap();
    let live = |cluster: &Cluster| {
        cluster
            .instances()
            .into_iter()
            .filter(|i| i.status != Some(kakaocloud::api::InstanceStatus::Deleting))
            .count()
    };
    assert_eq!(live(&cluster), stuck, "their instances still run");

    // Recovery: the chart again (same values, same signing key); it finishes the deletions.
    cluster
        .step2_install_oci(&chart, VERSION, &registry.ca_bundle, &[])
        .unwrap();
    let pods = cluster.controller_pods().await.unwrap();
    let mut controller = cluster
        .spawn_controller(&binary, &pods[0], &[])
        .await
        .unwrap();
    wait_for("every NodeClaim gone", Duration::from_secs(180), || async {
        Ok(cluster.nodeclaims().await?.is_empty().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    wait_for("every instance gone", Duration::from_secs(60), || async {
        Ok(cluster.instances().is_empty().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    assert!(cluster.karpenter_nodes().await.unwrap().is_empty());

    // The rest of the uninstall in order: the KCNodeClasses while the controller can still
    // release their finalizer, the release, then the CRDs (which would hang on any finalizer
    // left).
    helm("kubectl delete kcnodeclasses --all --timeout=60s");
    helm("helm uninstall karpenter-provider-kakaocloud --namespace karpenter-kakaocloud");
    controller.terminate(Duration::from_secs(10));
    helm(
        "kubectl delete crd nodepools.karpenter.sh nodeclaims.karpenter.sh kcnodeclasses.karpenter.kakaocloud.com --timeout=60s",
    );
    assert_eq!(live(&cluster), 0, "no instance left");
}

/// docs/uninstall.md's upgrade: CRDs applied from the new chart, then `helm upgrade` to the next
/// version. Running nodes, NodeClaims and instances stay as they are, and the new controller
/// provisions. (Nothing earlier than this release exists, so the next version is this release's
/// chart under a higher version: the upgrade's mechanics, not a data migration.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helm_upgrade_keeps_running_nodes_and_instances() {
    const NEXT: &str = "0.1.1-upgrade.test";
    let registry = Registry::start().await.expect("registry starts");
    let image = registry
        .release(VERSION, "ke-helm-public")
        .unwrap_or_else(|e| panic!("{e}"));
    registry
        .push_chart_as(VERSION, NEXT, "ke-helm-public")
        .unwrap();
    let cluster = Cluster::start(kakaocloud_sim::SimConfig::default())
        .await
        .expect("cluster starts");
    let chart = format!(
        "oci://{}/ke-helm-public/karpenter-provider-kakaocloud",
        registry.host
    );
    cluster.step1_secrets().unwrap();
    cluster
        .step2_install_oci(&chart, VERSION, &registry.ca_bundle, &[])
        .unwrap();
    let binary = cluster.work.path().join("karpenter-kakaocloud-from-image");
    registry
        .extract(&image, "/karpenter-kakaocloud", &binary)
        .unwrap();
    let pods = cluster.controller_pods().await.unwrap();
    let mut old = cluster
        .spawn_controller(&binary, &pods[0], &[])
        .await
        .unwrap();
    cluster
        .step3_nodeclass(Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", old.log_text()));
    cluster.step4_nodepool().unwrap();
    cluster.step5_demo().unwrap();
    wait_for("3 demo pods Running", Duration::from_secs(120), || async {
        Ok((cluster.running_demo_pods().await?.len() >= 3).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", old.log_text()));
    let claims_before: Vec<String> = names(&cluster).await;
    let instances_before: Vec<String> = cluster.instances().into_iter().map(|i| i.id).collect();
    assert!(!claims_before.is_empty());

    // The documented upgrade, verbatim but for the registry host.
    cluster
        .shell_with(
            &format!(
                r#"export KARPENTER_CHART_VERSION='{NEXT}'
helm pull {chart} --version "$KARPENTER_CHART_VERSION" --untar --untardir ./kk-chart
kubectl apply --server-side -f ./kk-chart/karpenter-provider-kakaocloud/crds/
helm upgrade --install karpenter-provider-kakaocloud {chart} \
  --version "$KARPENTER_CHART_VERSION" \
  --namespace karpenter-kakaocloud \
  --reuse-values \
  --wait --timeout 10m
"#
            ),
            &[("SSL_CERT_FILE", registry.ca_bundle.as_path())],
        )
        .unwrap_or_else(|e| panic!("upgrade: {e}\n{}", registry.log()));
    let chart_label = cluster
        .kubectl(
            &[
                "-n",
                kk_demo::NAMESPACE,
                "get",
                "deployment",
                kk_demo::RELEASE,
                "-o",
                "jsonpath={.metadata.labels.helm\\.sh/chart}",
            ],
            None,
        )
        .unwrap();
    assert_eq!(
        chart_label.trim(),
        format!("karpenter-provider-kakaocloud-{NEXT}")
    );

    // A rolling update replaces the pods when their template changed (the image, the env);
    // this upgrade keeps the same image, so the pod may well stay. Either way one controller
    // runs as a current pod.
    let current = cluster.controller_pods().await.unwrap();
    let new = if current.contains(&pods[0]) {
        old
    } else {
        old.terminate(Duration::from_secs(10));
        cluster
            .spawn_controller(&binary, &current[0], &[])
            .await
            .unwrap()
    };
    // The controller works after the upgrade: more replicas need another node, and it
    // launches one.
    cluster
        .kubectl(
            &["scale", "deployment", "karpenter-demo", "--replicas=6"],
            None,
        )
        .unwrap();
    wait_for("6 demo pods Running", Duration::from_secs(120), || async {
        Ok((cluster.running_demo_pods().await?.len() >= 6).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", new.log_text()));
    // Nothing that ran before the upgrade was replaced.
    let claims_after = names(&cluster).await;
    let instances_after: Vec<String> = cluster.instances().into_iter().map(|i| i.id).collect();
    for c in &claims_before {
        assert!(claims_after.contains(c), "{c} kept: {claims_after:?}");
    }
    for i in &instances_before {
        assert!(instances_after.contains(i), "instance {i} kept");
    }
    assert!(
        claims_after.len() > claims_before.len(),
        "the new controller provisioned"
    );
}

async fn names(cluster: &Cluster) -> Vec<String> {
    cluster
        .nodeclaims()
        .await
        .unwrap()
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect()
}
