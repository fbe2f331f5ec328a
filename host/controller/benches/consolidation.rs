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
//! both candidates whose pods fit elsewhere and nodes too full to move.

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

fn cluster(nodes: usize, now: Timestamp) -> ClusterSnapshot {
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
            n.pods.push(PodState::new(
                "default",
                &format!("node-{i}-p{p}"),
                Resources::new(c, c * 2 * 1024 * 1024, 1),
            ));
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
    }
}

fn bench(label: &str, scorer: &dyn ConsolidationScorer) {
    println!("\nscorer: {label}");
    println!(
        "{:>6} {:>7} {:>28} {:>10} {:>12} {:>12}",
        "nodes", "pods", "action", "nodes out", "saved/h", "time/pass"
    );
    let now: Timestamp = "2026-12-03T12:00:00Z".parse().unwrap();
    for n in [100, 500, 2000] {
        let snapshot = cluster(n, now);
        let pods: usize = snapshot.nodes.iter().map(|x| x.pods.len()).sum();
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
            "{n:>6} {pods:>7} {action:>28} {out:>10} {saved:>12.3} {:>12.2?}",
            times[runs / 2]
        );
    }
}

fn main() {
    bench("native savings-per-disruption", &SavingsPerDisruption);
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
    );
}
