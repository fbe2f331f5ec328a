//! Leader failover with the chart's two replicas: two controller processes (the Deployment's two
//! pods, the chart's env with short lease timings), the leader SIGKILLed mid-provisioning (an
//! instance is launching); the standby takes the Lease over once it expires and provisioning
//! completes with exactly one instance per NodeClaim.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kk_demo::{Cluster, wait_for};

const BIN: &str = env!("CARGO_BIN_EXE_karpenter-kakaocloud");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_takes_over_when_the_leader_is_killed_mid_launch() {
    let sim = kakaocloud_sim::SimConfig {
        // Long enough that the kill lands while the instance is still in BUILD.
        boot_delay: Duration::from_secs(3),
        ..Default::default()
    };
    let cluster = Cluster::start(sim).await.expect("cluster starts");
    cluster.step1_secrets().unwrap();
    cluster
        .step2_install(&[
            "leaderElection.leaseDuration=4s",
            "leaderElection.renewDeadline=3s",
            "leaderElection.retryPeriod=1s",
        ])
        .unwrap();
    let pods = cluster.controller_pods().await.unwrap();
    assert_eq!(pods.len(), 2);
    let mut a = cluster
        .spawn_controller(BIN.as_ref(), &pods[0], &[])
        .await
        .unwrap();
    wait_for("a leads", Duration::from_secs(60), || async {
        Ok((cluster.lease_holder().await.as_deref() == Some(pods[0].as_str())).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", a.log_text()));
    let mut b = cluster
        .spawn_controller(BIN.as_ref(), &pods[1], &[])
        .await
        .unwrap();
    cluster
        .step3_nodeclass(Duration::from_secs(60))
        .await
        .unwrap();
    cluster.step4_nodepool().unwrap();
    cluster.step5_demo().unwrap();

    // Mid-provisioning: the first instance exists (BUILD), no Node yet.
    wait_for("an instance launching", Duration::from_secs(60), || async {
        Ok((!cluster.instances().is_empty()).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", a.log_text()));
    assert!(
        cluster.karpenter_nodes().await.unwrap().is_empty(),
        "killed before any node registered"
    );
    a.kill();
    let killed = Instant::now();

    wait_for("b leads", Duration::from_secs(15), || async {
        Ok((cluster.lease_holder().await.as_deref() == Some(pods[1].as_str())).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", b.log_text()));
    let takeover = killed.elapsed();
    // Lease 4 s after a's last renewal, plus one retry period.
    assert!(
        takeover < Duration::from_secs(7),
        "took over after {takeover:?}"
    );
    eprintln!(
        "standby took over {:.1}s after SIGKILL",
        takeover.as_secs_f64()
    );

    wait_for("3 demo pods Running", Duration::from_secs(120), || async {
        Ok((cluster.running_demo_pods().await?.len() >= 3).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", b.log_text()));
    eprintln!(
        "demo running {:.1}s after SIGKILL",
        killed.elapsed().as_secs_f64()
    );

    // Exactly one instance per NodeClaim: no duplicate launch by the new leader, no orphan.
    let claims = cluster.nodeclaims().await.unwrap();
    let instances = cluster.instances();
    let ids: BTreeSet<String> = instances.iter().map(|i| i.id.clone()).collect();
    let claimed: Vec<String> = claims
        .iter()
        .filter_map(|c| c.status.as_ref()?.provider_id.clone())
        .collect();
    assert_eq!(claimed.len(), claims.len(), "every NodeClaim launched");
    let claimed_ids: BTreeSet<String> = claimed
        .iter()
        .map(|p| p.rsplit('/').next().unwrap().to_owned())
        .collect();
    assert_eq!(
        claimed_ids.len(),
        claims.len(),
        "distinct instances: {claimed:?}"
    );
    assert_eq!(
        claimed_ids, ids,
        "instances and NodeClaims match one to one"
    );
    // The line may still be in the pipe when the demo already runs: poll for it.
    kk_demo::wait_for(
        "the standby's leader log line",
        Duration::from_secs(10),
        || async {
            Ok(b.log_text()
                .contains("controllers started (leader)")
                .then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", b.log_text()));
    b.terminate(Duration::from_secs(10));
}

/// The leader's API-server traffic is partitioned (a proxy holds every request) while it can
/// still reach KakaoCloud, and its garbage collector lists instances every second: it stops
/// calling KakaoCloud before the standby takes the Lease over (fencing), the standby finishes
/// the demo, and nothing is launched twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_stops_calling_kakaocloud_before_the_standby_leads() {
    use kk_demo::Proxy;
    use std::net::SocketAddr;
    use std::time::SystemTime;

    let cluster = Cluster::start(kakaocloud_sim::SimConfig::default())
        .await
        .expect("cluster starts");
    cluster.step1_secrets().unwrap();
    cluster
        .step2_install(&[
            "leaderElection.leaseDuration=4s",
            "leaderElection.renewDeadline=3s",
            "leaderElection.retryPeriod=1s",
        ])
        .unwrap();
    let pods = cluster.controller_pods().await.unwrap();

    // a reaches the API server and KakaoCloud through proxies; the test partitions the first
    // and watches the second.
    let apiserver: SocketAddr = cluster
        .cp
        .server_url()
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .parse()
        .unwrap();
    let kube_proxy = Proxy::start(apiserver).await.unwrap();
    let cloud_proxy = Proxy::start(cluster.sim.addr()).await.unwrap();
    let kubeconfig = cluster
        .service_account_kubeconfig_via(&format!("https://{}", kube_proxy.addr), "partitioned")
        .unwrap();
    let (sim, proxied) = (cluster.sim.addr().to_string(), cloud_proxy.addr.to_string());
    let env = cluster.controller_env(&pods[0]).await.unwrap();
    let mut overrides: Vec<(String, String)> = env
        .iter()
        .filter(|(_, v)| v.contains(&sim))
        .map(|(k, v)| (k.clone(), v.replace(&sim, &proxied)))
        .collect();
    assert!(
        !overrides.is_empty(),
        "the chart passes KakaoCloud endpoints"
    );
    // The garbage collector lists instances every second: a's steady stream of cloud calls.
    overrides.push(("DISRUPTION_INTERVAL".into(), "1s".into()));
    let overrides: Vec<(&str, &str)> = overrides
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut a = cluster
        .spawn_controller_with(BIN.as_ref(), &pods[0], &overrides, &kubeconfig)
        .await
        .unwrap();
    wait_for("a leads", Duration::from_secs(60), || async {
        Ok((cluster.lease_holder().await.as_deref() == Some(pods[0].as_str())).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", a.log_text()));
    let mut b = cluster
        .spawn_controller(BIN.as_ref(), &pods[1], &[])
        .await
        .unwrap();
    cluster
        .step3_nodeclass(Duration::from_secs(60))
        .await
        .unwrap();
    cluster.step4_nodepool().unwrap();
    wait_for("a calls KakaoCloud", Duration::from_secs(30), || async {
        Ok(cloud_proxy.last_forwarded().map(|_| ()))
    })
    .await
    .unwrap();

    kube_proxy.partition();
    let partitioned = SystemTime::now();
    cluster.step5_demo().unwrap();
    wait_for("b leads", Duration::from_secs(30), || async {
        Ok((cluster.lease_holder().await.as_deref() == Some(pods[1].as_str())).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", b.log_text()));
    let acquired: SystemTime = cluster
        .lease()
        .await
        .and_then(|l| l.spec?.acquire_time)
        .map(|t| SystemTime::from(t.0))
        .expect("the lease has an acquire time");

    wait_for("3 demo pods Running", Duration::from_secs(120), || async {
        Ok((cluster.running_demo_pods().await?.len() >= 3).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", b.log_text()));

    let last = cloud_proxy.last_forwarded().expect("a called KakaoCloud");
    let secs = |t: SystemTime, since: SystemTime| {
        t.duration_since(since)
            .map(|d| d.as_secs_f64())
            .unwrap_or_else(|e| -e.duration().as_secs_f64())
    };
    eprintln!(
        "after the partition: a's last KakaoCloud call {:.2}s, b acquired {:.2}s",
        secs(last, partitioned),
        secs(acquired, partitioned)
    );
    assert!(
        last < acquired,
        "a called KakaoCloud {:.2}s after b acquired the lease\n{}",
        secs(last, acquired),
        a.log_text()
    );
    // Exactly one instance per NodeClaim.
    let claims = cluster.nodeclaims().await.unwrap();
    assert_eq!(cluster.instances().len(), claims.len());
    a.kill();
    b.terminate(Duration::from_secs(10));
}
