//! Consolidation benchmark: a full disruption pass (emptiness, drift, scoring every candidate,
//! multi-node binary search, single-node) over simulated clusters of 100, 500 and 2,000 nodes,
//! scheduling simulation only, no API server.
//!
//! `cargo bench -p karpenter-kakaocloud --bench consolidation` prints, per scorer: nodes, pods,
//! the action found, the hourly saving, and the median time per pass. `KK_BENCH_SCORER_WASM`
//! (a consolidation-scorer component; default: the built plugins/consolidation-scorer) gives the
//! plugin's row.
//!
//! The cluster: nodes of 2 to 16 vCPUs from a 4-size catalog, 3 zones, each running pods at a
//! random 10-90 % of its CPU (seed 7), some nodes a few hours old and some fresh; so there are
//! both candidates whose pods fit elsewhere and nodes too full to move. The second table gives the
//! pods upstream's diverse mix of constraints, which the full solver decides (within its time
//! budget per pass, `disruption::full::FULL_CHECK_BUDGET`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use kk_apis::crd::nodepool::Budget;
use kk_engine::disruption::{
    ClusterSnapshot, ConsolidationScorer, NodeState, PodState, PoolState, SavingsPerDisruption,
    plan,
};
use kk_engine::scheduling::{InstanceType, Offering, Resources};
use kk_plugin_runtime::{Bounds, Kind, PluginScorer, Registry, Runtime, Source};
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::json;

const GI: u64 = 1 << 30;
const ZONES: [&str; 3] = ["kr-central-2-a", "kr-central-2-b", "kr-central-2-c"];

fn catalog() -> Vec<InstanceType> {
    [
        ("m2a.large", 2u64),
        ("m2a.xlarge", 4),
        ("m2a.2xlarge", 8),
        ("m2a.4xlarge", 16),
    ]
    .into_iter()
    .map(|(name, cpus)| {
        let offerings = ZONES
            .iter()
            .map(|z| Offering {
                zone: (*z).into(),
                capacity_type: "on-demand".into(),
                price_micros: cpus * 50_000,
                available: true,
            })
            .collect();
        let mut t = InstanceType::new(
            name,
            Resources::new(cpus * 1000, cpus * 4 * GI, 110),
            offerings,
        );
        t.overhead = Default::default();
        t
    })
    .collect()
}

/// The pod object of `state` on `node`, of app `k` of 20: one app in five each plain, zonal
/// spread, hostname spread, zonal pod affinity and hostname anti-affinity (upstream's diverse
/// mix). Returns whether the full solver decides it (every kind but plain).
fn diverse(state: &mut PodState, node: &str, k: usize) -> bool {
    use kk_engine::scheduling::resources::Dim;
    let app = format!("app-{k}");
    let selector = json!({"matchLabels": {"app": app}});
    let mut spec = json!({"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {
        "cpu": format!("{}m", state.requests.get(Dim::CpuMillis)),
        "memory": state.requests.get(Dim::MemoryBytes).to_string(),
    }}}]});
    let spread = |key: &str| {
        json!([{"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": selector}])
    };
    let term = |key: &str| json!([{"topologyKey": key, "labelSelector": selector}]);
    match k % 5 {
        0 => {}
        1 => spec["topologySpreadConstraints"] = spread("topology.kubernetes.io/zone"),
        2 => spec["topologySpreadConstraints"] = spread("kubernetes.io/hostname"),
        3 => {
            spec["affinity"] = json!({"podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": term("topology.kubernetes.io/zone")}})
        }
        _ => {
            spec["affinity"] = json!({"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": term("kubernetes.io/hostname")}})
        }
    }
    let pod = json!({"metadata": {"namespace": state.namespace, "name": state.name,
        "labels": {"app": app}}, "spec": spec});
    state.pod = Some(Arc::new(serde_json::from_value(pod).expect("a pod")));
    state.needs_full_simulation = !k.is_multiple_of(5);
    state.needs_full_simulation
}

fn cluster(nodes: usize, now: Timestamp, mix: bool) -> ClusterSnapshot {
    let mut rng = StdRng::seed_from_u64(7);
    let types = catalog();
    let mut pool = PoolState::new("default");
    pool.budgets = vec![Budget {
        nodes: "10%".into(),
        schedule: None,
        duration: None,
        reasons: None,
    }];
    let mut out = Vec::with_capacity(nodes);
    for i in 0..nodes {
        let it = &types[rng.random_range(0..types.len())];
        let cpu = it
            .capacity
            .get(kk_engine::scheduling::resources::Dim::CpuMillis);
        let age_h = rng.random_range(0..48);
        let created = Timestamp::from_second(now.as_second() - age_h * 3600 - 600).unwrap();
        let price = it.offerings[0].price_micros;
        let mut n = NodeState::new(
            format!("node-{i}"),
            "default",
            &it.name,
            price,
            it.capacity,
            created,
        );
        n.zone = ZONES[i % 3].into();
        n.labels
            .insert("topology.kubernetes.io/zone".into(), n.zone.clone());
        n.labels
            .insert("node.kubernetes.io/instance-type".into(), it.name.clone());
        let used = cpu * rng.random_range(10..90) / 100;
        let mut left = used;
        let mut p = 0;
        while left >= 100 {
            let c = [100u64, 250, 500, 1000]
                .into_iter()
                .filter(|c| *c <= left)
                .nth(rng.random_range(0..2))
                .unwrap_or(100);
            let mut pod = PodState::new(
                "default",
                &format!("node-{i}-p{p}"),
                Resources::new(c, c * 2 * 1024 * 1024, 1),
            );
            if mix {
                diverse(&mut pod, &n.name, rng.random_range(0..20));
            }
            n.pods.push(pod);
            left -= c;
            p += 1;
        }
        out.push(n);
    }
    ClusterSnapshot {
        now,
        pools: vec![pool],
        nodes: out,
        instance_types: types,
        pending_pods: Vec::new(),
        daemonsets: Vec::new(),
        fingerprint: 0,
    }
}

fn bench(label: &str, scorer: &dyn ConsolidationScorer, mix: bool) {
    println!(
        "\nscorer: {label}; pods: {}",
        if mix {
            "upstream's diverse mix (4 in 5 decided by the full solver)"
        } else {
            "plain"
        }
    );
    println!(
        "{:>6} {:>7} {:>8} {:>28} {:>10} {:>12} {:>12}",
        "nodes", "pods", "complex", "action", "nodes out", "saved/h", "time/pass"
    );
    let now: Timestamp = "2026-12-03T12:00:00Z".parse().unwrap();
    for n in [100, 500, 2000] {
        let snapshot = cluster(n, now, mix);
        let pods: usize = snapshot.nodes.iter().map(|x| x.pods.len()).sum();
        let complex: usize = snapshot
            .nodes
            .iter()
            .flat_map(|x| &x.pods)
            .filter(|p| p.needs_full_simulation)
            .count();
        let runs = if n >= 2000 { 5 } else { 11 };
        let mut times: Vec<Duration> = Vec::with_capacity(runs);
        let mut last = None;
        for _ in 0..runs {
            let started = Instant::now();
            let p = plan(&snapshot, scorer);
            times.push(started.elapsed());
            last = Some(p);
        }
        times.sort();
        let p = last.unwrap();
        let (action, out, saved) = match &p.graceful {
            Some(c) => (
                format!(
                    "{}{}",
                    c.method.as_str(),
                    if c.replacement.is_some() {
                        " (replace)"
                    } else {
                        ""
                    }
                ),
                c.candidates.len(),
                c.savings_micros as f64 / 1e6,
            ),
            None => ("none".into(), 0, 0.0),
        };
        println!(
            "{n:>6} {pods:>7} {complex:>8} {action:>28} {out:>10} {saved:>12.3} {:>12.2?}",
            times[runs / 2]
        );
    }
}

fn main() {
    bench(
        "native savings-per-disruption",
        &SavingsPerDisruption,
        false,
    );
    bench("native savings-per-disruption", &SavingsPerDisruption, true);
    // The default consolidation-scorer component, the same policy through the plugin runtime.
    let wasm = match std::env::var_os("KK_BENCH_SCORER_WASM") {
        Some(path) => std::fs::read(&path).map_err(anyhow::Error::from),
        None => kk_demo::read_plugin("consolidation-scorer"),
    };
    let wasm = match wasm {
        Ok(wasm) => wasm,
        Err(e) => {
            println!("\n({e:#}: no plugin row)");
            return;
        }
    };
    let registry = Registry::new(Runtime::new(Bounds::default(), None).unwrap(), None);
    registry
        .apply(&Source::new(
            "consolidation-scorer",
            Kind::Scorer,
            wasm,
            "{}",
        ))
        .expect("the default scorer loads");
    bench(
        "plugin consolidation-scorer (component)",
        &PluginScorer { registry },
        false,
    );
}
