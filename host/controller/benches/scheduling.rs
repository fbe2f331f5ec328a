//! Scheduling-simulation benchmark on upstream Karpenter's workload (karpenter-behaviour.md §6):
//! 400 instance types, one NodePool, no existing nodes, 1 to 20,000 diverse pods (seed 42).
//!
//! `cargo bench -p karpenter-kakaocloud --bench scheduling` prints one table per ranker:
//! pods, nodes, pods scheduled, ranker calls, median time per solve, pods per second.
//! `KK_BENCH_MAX_PODS` caps the largest batch (default 20000). A second table ranks through
//! the default instance-selector component (up to 2,000 pods).

use std::time::{Duration, Instant};

use kk_engine::scheduling::fixtures::{LabelScheme, diverse_pods, fake_instance_types};
use kk_engine::scheduling::{
    CheapestFitRanker, InstanceRanker, NodePoolInput, Scheduler, SchedulerOptions,
    SchedulingProblem,
};
use kk_plugin_runtime::{Bounds, Kind, PluginRanker, Registry, Runtime, Source};

const SIZES: [usize; 9] = [1, 50, 100, 500, 1000, 2000, 5000, 10000, 20000];

fn runs_for(pods: usize) -> usize {
    match pods {
        0..=1000 => 15,
        1001..=5000 => 7,
        _ => 3,
    }
}

fn bench_ranker(label: &str, ranker: &dyn InstanceRanker, max_pods: usize) {
    let instance_types = fake_instance_types(400);
    let pools = [NodePoolInput {
        name: "default".into(),
        ..Default::default()
    }];
    println!("\nranker: {label}");
    println!(
        "{:>7} {:>7} {:>9} {:>8} {:>14} {:>12}",
        "pods", "nodes", "scheduled", "ranks", "time/solve", "pods/s"
    );
    for &n in SIZES.iter().filter(|&&n| n <= max_pods) {
        let pods: Vec<std::sync::Arc<_>> = diverse_pods(n, LabelScheme::Upstream)
            .into_iter()
            .map(|p| std::sync::Arc::new(p.into()))
            .collect();
        let problem = SchedulingProblem {
            pods: &pods,
            node_pools: &pools,
            instance_types: &instance_types,
            existing_nodes: &[],
            daemonsets: &[],
        };
        let scheduler = Scheduler::new(ranker, SchedulerOptions::default());
        let mut times: Vec<Duration> = Vec::new();
        let mut last = None;
        for _ in 0..runs_for(n) {
            let start = Instant::now();
            let result = scheduler.solve(&problem);
            times.push(start.elapsed());
            last = Some(result);
        }
        times.sort_unstable();
        let median = times[times.len() / 2];
        let Some(result) = last else { continue };
        let scheduled: usize = result.new_node_claims.iter().map(|c| c.pods.len()).sum();
        println!(
            "{:>7} {:>7} {:>9} {:>8} {:>14} {:>12.0}",
            n,
            result.new_node_claims.len(),
            scheduled,
            result.ranker_calls,
            format!("{:.3?}", median),
            n as f64 / median.as_secs_f64()
        );
    }
}

fn main() {
    let max_pods = std::env::var("KK_BENCH_MAX_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    bench_ranker("native cheapest-fit", &CheapestFitRanker, max_pods);

    // The default instance-selector component through the plugin seam, as the controller runs it.
    let wasm = match kk_demo::read_plugin("instance-selector") {
        Ok(wasm) => wasm,
        Err(e) => {
            println!("\n({e:#}: no plugin rows)");
            return;
        }
    };
    let registry = Registry::new(Runtime::new(Bounds::default(), None).unwrap(), None);
    registry
        .apply(&Source::new(
            "instance-selector",
            Kind::Selector,
            wasm,
            "{}",
        ))
        .expect("the default selector loads");
    // The component path costs about a millisecond per rank call over 400 types, so the
    // largest batches are left to the native rows.
    bench_ranker(
        "plugin instance-selector (component)",
        &PluginRanker { registry },
        max_pods.min(2000),
    );
}
