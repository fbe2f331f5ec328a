//! `rank` through the plugin runtime against the same policy called natively.
//!
//! `cargo bench -p karpenter-kakaocloud --bench plugin_rank` prints, for 10, 100 and 500
//! candidate instance types, the median time of:
//! - `native policy`: the default instance-selector's code (plugins/instance-selector) compiled
//!   into this binary and called through the SDK's native harness (config parsed, candidates
//!   resolved against the catalog, the policy), on the SDK's own records;
//! - `component`: the same crate built as a WebAssembly component, called as the controller
//!   calls it (host candidates converted to flat WIT records, a warm instance that already holds
//!   the catalog, its own store, limits and deadline, the result validated);
//! - `comp. on-demand`: the same without the pooling allocator;
//! - `host native`: the controller's built-in cheapest-fit ranker, for reference;
//! - first, the fixed costs: instantiating (pooled and not) and an empty `rank` on a warm instance;
//! - the target: component within 2x native plus 20 us;
//! - last, the breakdown: building the records, the call, how much of it is the boundary (the
//!   same call to an identity selector, the hostile-selector fixture), and what a catalog change
//!   costs once (converting it, `load-catalog`).
//!
//! Needs the built component ($KK_PLUGIN_DIR/instance-selector.wasm, scripts/build-plugins.sh).

use std::time::{Duration, Instant};

use karpenter_kakaocloud_sdk::testing::{self, InstanceTypeBuilder, RankInputBuilder};
use kk_engine::scheduling::instance_types::{InstanceType, Offering};
use kk_engine::scheduling::{
    Candidate, Catalog, CheapestFitRanker, InstanceRanker, RankRequest, Resources,
};
use kk_plugin_runtime::convert;
use kk_plugin_runtime::{Allocator, Bounds, Kind, PluginRanker, Registry, Runtime, Source};

const GI: u64 = 1 << 30;
const ZONES: [&str; 3] = ["kr-central-2-a", "kr-central-2-b", "kr-central-2-c"];
const FAMILIES: [(&str, u64); 4] = [("m2a", 4), ("c2a", 2), ("r2a", 8), ("t1i", 4)];

/// `n` instance types: four families, sizes of 1 to 64 vCPUs, three zones each (every fifth
/// offering unavailable), prices that grow with size and differ per family.
struct Shape {
    name: String,
    cpus: u64,
    mem_gib: u64,
    prices: [u64; 3],
    available: [bool; 3],
}

fn shapes(n: usize) -> Vec<Shape> {
    (0..n)
        .map(|i| {
            let (family, gib_per_cpu) = FAMILIES[i % FAMILIES.len()];
            let cpus = 1 + (i as u64 * 7) % 64;
            let base = cpus * 40_000 + gib_per_cpu * cpus * 4_000 + (i as u64 % 13) * 100;
            Shape {
                name: format!("{family}.s{i}"),
                cpus,
                mem_gib: cpus * gib_per_cpu,
                prices: [base, base + 1_000, base + 2_000],
                available: [0, 1, 2].map(|z| (i + z) % 5 != 0),
            }
        })
        .collect()
}

fn host_types(shapes: &[Shape]) -> Vec<InstanceType> {
    shapes
        .iter()
        .map(|s| {
            let offerings = (0..3)
                .map(|z| Offering {
                    zone: ZONES[z].into(),
                    capacity_type: "on-demand".into(),
                    price_micros: s.prices[z],
                    available: s.available[z],
                })
                .collect();
            InstanceType::new(
                s.name.clone(),
                Resources::new(s.cpus * 1000, s.mem_gib * GI, 110),
                offerings,
            )
        })
        .collect()
}

fn sdk_input(shapes: &[Shape]) -> testing::RankCase {
    RankInputBuilder::new()
        .pods(3)
        .requests(1500, 3 * GI)
        .candidates(shapes.iter().map(|s| {
            (0..3)
                .fold(
                    InstanceTypeBuilder::new(&s.name, s.cpus * 1000, s.mem_gib * GI),
                    |b, z| b.offering(ZONES[z], s.prices[z], s.available[z]),
                )
                .build()
        }))
        .build()
}

/// Median of `f` over enough runs for about 0.3 s (at least 20).
fn median(mut f: impl FnMut()) -> Duration {
    f();
    let probe = Instant::now();
    f();
    let one = probe.elapsed().max(Duration::from_nanos(200));
    let runs =
        ((Duration::from_millis(300).as_nanos() / one.as_nanos()) as usize).clamp(20, 20_000);
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

fn main() {
    let wasm = kk_demo::read_plugin("instance-selector").unwrap_or_else(|e| panic!("{e:#}"));
    let load = |allocator| {
        let registry = Registry::new(
            Runtime::with_allocator(Bounds::default(), None, allocator).unwrap(),
            None,
        );
        let compile = Instant::now();
        registry
            .apply(&Source::new(
                "instance-selector",
                Kind::Selector,
                wasm.clone(),
                "{}",
            ))
            .expect("the default selector loads");
        println!(
            "instance-selector component ({allocator:?}): compiled, linked and self-tested in {:.1?}",
            compile.elapsed()
        );
        registry
    };
    let pooled = load(Allocator::Pooling);
    let on_demand = load(Allocator::OnDemand);
    // The boundary alone: a selector that answers 0..n without looking (the test fixture).
    let identity = Registry::new(Runtime::new(Bounds::default(), None).unwrap(), None);
    identity
        .apply(&Source::new(
            "identity",
            Kind::Selector,
            kk_demo::read_plugin("hostile-selector").unwrap_or_else(|e| panic!("{e:#}")),
            r#"{"mode": "identity"}"#,
        ))
        .expect("the identity selector loads");
    let identity = identity.active(Kind::Selector).unwrap();
    let ranker = PluginRanker {
        registry: pooled.clone(),
    };
    let ranker_on_demand = PluginRanker {
        registry: on_demand.clone(),
    };

    let empty = RankRequest {
        node_pool: "bench",
        requests: Resources::new(1500, 3 * GI, 3),
        catalog: Catalog::new(&[]),
        candidates: &[],
    };
    let empty_catalog = convert::catalog(&empty.catalog);
    let empty_input = convert::rank_input(&empty);
    let fixed_costs = |registry: &Registry| {
        let plugin = registry.active(Kind::Selector).unwrap();
        let instantiate = median(|| plugin.instantiate_once().unwrap());
        let warm = median(|| {
            plugin.rank(&empty_catalog, &empty_input).unwrap();
        });
        (instantiate, warm)
    };
    for (label, registry) in [("pooling", &pooled), ("on demand", &on_demand)] {
        let (instantiate, warm) = fixed_costs(registry);
        println!(
            "{label}: instantiating {instantiate:.1?}; an empty rank on a warm instance {warm:.1?}"
        );
    }

    println!(
        "\n{:>10} {:>14} {:>14} {:>16} {:>14} {:>10} {:>14}",
        "candidates",
        "native policy",
        "component",
        "comp. on-demand",
        "host native",
        "ratio",
        "target"
    );
    let mut breakdown = Vec::new();
    for n in [10, 100, 500] {
        let shapes = shapes(n);
        let types = host_types(&shapes);
        let catalog = Catalog::new(&types);
        let candidates: Vec<Candidate<'_>> = (0..types.len())
            .map(|i| Candidate::available(&catalog, i))
            .collect();
        let request = RankRequest {
            node_pool: "bench",
            requests: Resources::new(1500, 3 * GI, 3),
            catalog,
            candidates: &candidates,
        };
        let input = sdk_input(&shapes);

        // Same policy, same answer: the component's order is the native crate's order.
        let native_order: Vec<usize> = testing::rank::<instance_selector::CheapestFit>(&input)
            .unwrap()
            .into_iter()
            .map(|i| i as usize)
            .collect();
        assert_eq!(
            ranker.rank(&request).unwrap(),
            native_order,
            "{n} candidates"
        );

        let native = median(|| {
            std::hint::black_box(testing::rank::<instance_selector::CheapestFit>(&input).unwrap());
        });
        let component = median(|| {
            std::hint::black_box(ranker.rank(&request).unwrap());
        });
        let component_on_demand = median(|| {
            std::hint::black_box(ranker_on_demand.rank(&request).unwrap());
        });
        let host = median(|| {
            std::hint::black_box(CheapestFitRanker.rank(&request).unwrap());
        });
        // Where the component's time goes: building the WIT records, the call itself (lower
        // the records into a warm instance, run, lift the answer), and what a catalog change
        // adds (converting it, and `load-catalog` once per warm instance).
        let converted = convert::rank_input(&request);
        let convert_only = median(|| {
            std::hint::black_box(convert::rank_input(&request));
        });
        let plugin = pooled.active(Kind::Selector).unwrap();
        let wit_catalog = pooled.selector_catalog(&catalog);
        let call_only = median(|| {
            std::hint::black_box(plugin.rank(&wit_catalog, &converted).unwrap());
        });
        let convert_catalog = median(|| {
            std::hint::black_box(convert::catalog(&catalog));
        });
        // Two fingerprints of the same types, alternated: every call reloads the catalog.
        let mut flip = [convert::catalog(&catalog), convert::catalog(&catalog)];
        flip[1].fingerprint ^= 1;
        let mut turn = 0;
        let reload = median(|| {
            turn ^= 1;
            std::hint::black_box(plugin.rank(&flip[turn], &converted).unwrap());
        });
        let boundary = median(|| {
            std::hint::black_box(identity.rank(&wit_catalog, &converted).unwrap());
        });
        breakdown.push((
            n,
            convert_only,
            call_only,
            boundary,
            convert_catalog,
            reload.saturating_sub(call_only),
        ));
        let target = native * 2 + Duration::from_micros(20);
        println!(
            "{n:>10} {:>14.1?} {:>14.1?} {:>16.1?} {:>14.1?} {:>9.1}x {:>14.1?} {}",
            native,
            component,
            component_on_demand,
            host,
            component.as_secs_f64() / native.as_secs_f64(),
            target,
            if component <= target { "met" } else { "MISSED" }
        );
    }
    println!(
        "\n{:>10} {:>14} {:>14} {:>20} {:>16} {:>13}",
        "candidates",
        "build records",
        "call (pooled)",
        "of which boundary",
        "convert catalog",
        "load-catalog"
    );
    for (n, convert_only, call_only, boundary, convert_catalog, load) in breakdown {
        println!(
            "{n:>10} {convert_only:>14.1?} {call_only:>14.1?} {boundary:>20.1?} {convert_catalog:>16.1?} {load:>13.1?}"
        );
    }
    println!(
        "(boundary: the same call to a selector that answers 0..n unread: lowering the \
         candidates, resolving them in the guest, lifting the answer)"
    );
    println!(
        "(a catalog is converted once per fingerprint and loaded once per warm instance; \
         a solve ranks against one catalog many times)"
    );
}
