//! End-to-end provisioning latency on a real control plane with the simulator: from kube-scheduler
//! marking a pod `PodScheduled=False/Unschedulable` to its NodeClaim existing, and on to the pod
//! Running. One pod at a time (each needs a node of its own), for two batching settings.
//!
//! `cargo bench -p karpenter-kakaocloud --bench provisioning_latency` prints a table (needs the
//! control-plane binaries: `tests/controlplane/build.sh`).

#[path = "../tests/e2e/support.rs"]
mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::{Env, Options};

const SAMPLES: usize = 8;

fn unschedulable(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        })
}

async fn sample(env: &Env, ns: &str, i: usize) -> (Duration, Duration) {
    let pods: Api<Pod> = Api::namespaced(env.kube.clone(), ns);
    let claims_before = env.nodeclaims().await.len();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": format!("latency-{i}"), "labels": {"app": "latency"}},
        "spec": {
            "nodeSelector": {"workload-type": "karpenter"},
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "latency"}}}
            ]}},
            "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.9",
                "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let name = format!("latency-{i}");
    let poll = Duration::from_millis(5);
    let unsched_at = loop {
        let p = pods.get(&name).await.unwrap();
        if unschedulable(&p) {
            break Instant::now();
        }
        tokio::time::sleep(poll).await;
    };
    let claim_at = loop {
        if env.nodeclaims().await.len() > claims_before {
            break Instant::now();
        }
        tokio::time::sleep(poll).await;
    };
    loop {
        let p = pods.get(&name).await.unwrap();
        if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
            break;
        }
        tokio::time::sleep(poll).await;
    }
    (claim_at - unsched_at, unsched_at.elapsed())
}

async fn run(label: &str, idle: Duration, max: Duration) {
    let mut options = Options::default();
    options.settings.batch_idle = idle;
    options.settings.batch_max = max;
    let env = Env::start(options).await;
    env.apply_guide().await;
    let ns = env.cp.fresh_namespace("latency").await.unwrap();
    let mut to_claim = Vec::new();
    let mut to_running = Vec::new();
    for i in 0..SAMPLES {
        let (c, r) = sample(&env, &ns, i).await;
        to_claim.push(c);
        to_running.push(r);
    }
    to_claim.sort();
    to_running.sort();
    let med = |v: &[Duration]| v[v.len() / 2];
    println!(
        "{label:>28} {:>14.0?} {:>14.0?} {:>14.0?}",
        med(&to_claim),
        to_claim[to_claim.len() - 1],
        med(&to_running)
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        println!("{SAMPLES} pods, one at a time, each needing a new node");
        println!(
            "{:>28} {:>14} {:>14} {:>14}",
            "batching (idle/max)", "to NodeClaim", "max", "to Running"
        );
        run(
            "1s/10s (upstream default)",
            Duration::from_secs(1),
            Duration::from_secs(10),
        )
        .await;
        run(
            "100ms/1s",
            Duration::from_millis(100),
            Duration::from_secs(1),
        )
        .await;
    });
}
