//! The plugin runtime against the real components built by `scripts/build-plugins.sh`
//! (`$KK_PLUGIN_DIR/<crate>.wasm`): ranking results, every hostile behaviour rejected while the
//! previous plugin keeps answering, wrong worlds and digests refused, gzip accepted, hot swap
//! under concurrent calls, the userdata and scorer plugins, and the compiled-artifact cache.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use kk_engine::disruption::{ConsolidationScorer, Reason, ScoreCandidate};
use kk_engine::scheduling::instance_types::{InstanceType, Offering};
use kk_engine::scheduling::resources::Dim;
use kk_engine::scheduling::{Candidate, Catalog, InstanceRanker, RankRequest, Resources};
use kk_engine::userdata::parse_registration;
use kk_engine::userdata::{UserdataInput, UserdataRenderer};
use kk_plugin_runtime::engine::sha256_hex;
use kk_plugin_runtime::{
    Bounds, Kind, Mode, PluginRanker, PluginRenderer, PluginScorer, Registry, Runtime, Source,
};

fn component(name: &str) -> Vec<u8> {
    kk_demo::read_plugin(name).unwrap_or_else(|e| panic!("{e:#}"))
}

fn source(name: &str, crate_name: &str, kind: Kind, config: &str) -> Source {
    Source::new(name, kind, component(crate_name), config)
}

fn registry() -> Arc<Registry> {
    Registry::new(Runtime::new(Bounds::default(), None).unwrap(), None)
}

/// A registry serving the built component `crate_name` as plugin `name` with `config`.
fn loaded(name: &str, crate_name: &str, kind: Kind, config: &str) -> Arc<Registry> {
    let reg = registry();
    reg.apply(&source(name, crate_name, kind, config))
        .unwrap_or_else(|e| panic!("{name} loads: {e}"));
    reg
}

fn catalog() -> Vec<InstanceType> {
    [
        ("m2a.large", 2u64, 8u64, 0u64, 96_000u64),
        ("c2a.large", 2, 4, 0, 80_000),
        ("m2a.xlarge", 4, 16, 0, 192_000),
        ("r2a.large", 2, 16, 0, 120_000),
        ("gn1i.xlarge", 4, 16, 1, 900_000),
    ]
    .into_iter()
    .map(|(name, cpu, mem, gpu, price)| {
        let mut capacity = Resources::new(cpu * 1000, mem << 30, 110);
        if gpu > 0 {
            capacity = capacity.add(&Resources::ZERO.with(Dim::Gpus, gpu));
        }
        InstanceType::new(
            name,
            capacity,
            vec![Offering {
                zone: "kr-central-2-a".into(),
                capacity_type: "on-demand".into(),
                price_micros: price,
                available: true,
            }],
        )
    })
    .collect()
}

fn rank_names(
    ranker: &dyn InstanceRanker,
    types: &[InstanceType],
    requests: Resources,
) -> Result<Vec<String>, String> {
    rank_subset(ranker, types, 0..types.len(), requests)
}

/// Ranks the types at `indices` of the catalog `types` (available offerings only).
fn rank_subset(
    ranker: &dyn InstanceRanker,
    types: &[InstanceType],
    indices: impl IntoIterator<Item = usize>,
    requests: Resources,
) -> Result<Vec<String>, String> {
    let catalog = Catalog::new(types);
    let candidates: Vec<Candidate<'_>> = indices
        .into_iter()
        .map(|i| Candidate::available(&catalog, i))
        .collect();
    let req = RankRequest {
        node_pool: "default",
        requests,
        catalog,
        candidates: &candidates,
    };
    ranker
        .rank(&req)
        .map(|o| {
            o.into_iter()
                .map(|i| candidates[i].instance_type.name.clone())
                .collect()
        })
        .map_err(|e| e.to_string())
}

/// An underutilized m2a.large of `pool` whose pods fit elsewhere, disruption cost 1.
fn score_candidate(name: &str, pool: &str) -> ScoreCandidate {
    ScoreCandidate {
        node_name: name.into(),
        instance_type: "m2a.large".into(),
        node_pool: pool.into(),
        zone: "kr-central-2-a".into(),
        capacity_type: "on-demand".into(),
        price_micros: 100_000,
        cpu_utilisation_permille: 100,
        memory_utilisation_permille: 100,
        age_seconds: 7200,
        pod_count: 1,
        disruption_cost: 1.0,
        pods_fit_elsewhere: true,
        replacement_price_micros: None,
        reason: Reason::Underutilized,
    }
}

fn small() -> Resources {
    Resources::new(1000, 2 << 30, 1)
}

#[test]
fn default_selector_ranks_the_cheapest_fitting_offering_first_and_honours_its_config() {
    let reg = loaded(
        "instance-selector",
        "instance-selector",
        Kind::Selector,
        "{}",
    );
    let ranker = PluginRanker {
        registry: reg.clone(),
    };
    let types = catalog();
    let order = rank_names(&ranker, &types, small()).unwrap();
    assert_eq!(
        order.first().map(String::as_str),
        Some("c2a.large"),
        "{order:?}"
    );
    assert!(
        !order.contains(&"gn1i.xlarge".to_owned())
            || order.last().map(String::as_str) == Some("gn1i.xlarge")
    );

    reg.apply(&source(
        "instance-selector",
        "instance-selector",
        Kind::Selector,
        r#"{"denyFamilies": ["c2a"]}"#,
    ))
    .unwrap();
    let order = rank_names(&ranker, &types, small()).unwrap();
    assert!(
        !order.iter().any(|n| n.starts_with("c2a")),
        "denied family left out: {order:?}"
    );
    assert_eq!(order[0], "m2a.large");
}

#[test]
fn warm_instances_follow_catalog_changes_and_each_calls_availability() {
    let reg = loaded(
        "instance-selector",
        "instance-selector",
        Kind::Selector,
        "{}",
    );
    let ranker = PluginRanker { registry: reg };
    let mut types = catalog();
    // Candidates are a subset of the catalog: answers name candidates, not catalog positions.
    let subset = rank_subset(&ranker, &types, [3, 0, 2], small()).unwrap();
    assert_eq!(subset, ["m2a.large", "r2a.large", "m2a.xlarge"]);
    // The same catalog with c2a's offering unavailable (same fingerprint, so no reload): the
    // availability travels with the candidates and c2a is left out.
    types[1].offerings[0].available = false;
    let order = rank_names(&ranker, &types, small()).unwrap();
    assert_eq!(order[0], "m2a.large", "{order:?}");
    assert!(!order.contains(&"c2a.large".to_owned()), "{order:?}");
    // A price change is a new catalog: the warm instances reload it before ranking.
    types[1].offerings[0].available = true;
    types[3].offerings[0].price_micros = 10_000;
    let order = rank_names(&ranker, &types, small()).unwrap();
    assert_eq!(order[0], "r2a.large", "{order:?}");
    types[3].offerings[0].price_micros = 120_000;
    let order = rank_names(&ranker, &types, small()).unwrap();
    assert_eq!(order[0], "c2a.large", "{order:?}");
}

#[test]
fn the_gpu_example_keeps_gpu_flavors_for_gpu_pods() {
    let reg = loaded(
        "gpu-aware",
        "gpu-aware-selector",
        Kind::Selector,
        r#"{"preferFamilies": ["r2a"]}"#,
    );
    let ranker = PluginRanker { registry: reg };
    let types = catalog();
    let cpu = rank_names(&ranker, &types, small()).unwrap();
    assert_eq!(cpu[0], "r2a.large", "the preferred family first: {cpu:?}");
    assert!(!cpu.contains(&"gn1i.xlarge".to_owned()));
    let gpu = rank_names(
        &ranker,
        &types,
        small().add(&Resources::ZERO.with(Dim::Gpus, 1)),
    )
    .unwrap();
    assert_eq!(gpu, ["gn1i.xlarge"]);
}

#[test]
fn hostile_plugins_are_rejected_and_the_previous_one_keeps_answering() {
    let reg = loaded(
        "selector",
        "hostile-selector",
        Kind::Selector,
        r#"{"mode": "reverse"}"#,
    );
    let ranker = PluginRanker {
        registry: reg.clone(),
    };
    let types = catalog();
    let before = rank_names(&ranker, &types, small()).unwrap();
    for (mode, expect) in [
        ("trap", "trapped"),
        ("loop", "deadline"),
        ("alloc", "trapped"),
        ("recurse", "trapped"),
        ("out-of-range", "out of range"),
        ("duplicate", "twice"),
        ("oversized", "too much"),
    ] {
        let err = reg
            .apply(&source(
                "selector",
                "hostile-selector",
                Kind::Selector,
                &format!(r#"{{"mode": "{mode}"}}"#),
            ))
            .expect_err(mode)
            .to_string();
        assert!(err.contains(expect), "{mode}: {err}");
        assert!(
            err.contains("selector"),
            "the error names the plugin: {err}"
        );
        assert_eq!(
            rank_names(&ranker, &types, small()).unwrap(),
            before,
            "after {mode} the previous plugin answers"
        );
    }
    // Flooding the log is capped, not fatal.
    reg.apply(&source(
        "selector",
        "hostile-selector",
        Kind::Selector,
        r#"{"mode": "log-flood"}"#,
    ))
    .unwrap();
}

#[test]
fn wrong_world_digest_mismatch_and_garbage_are_refused_and_gzip_is_accepted() {
    let reg = registry();
    let err = reg
        .apply(&source(
            "scorer-as-selector",
            "consolidation-scorer",
            Kind::Selector,
            "{}",
        ))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("does not implement the instance-selector world"),
        "{err}"
    );

    let mut bad = source("selector", "instance-selector", Kind::Selector, "{}");
    bad.digest = "0".repeat(64);
    let err = reg.apply(&bad).unwrap_err().to_string();
    assert!(err.contains("digest mismatch"), "{err}");
    assert!(
        reg.active(Kind::Selector).is_none(),
        "nothing refused ever serves"
    );

    let mut junk = source("selector", "instance-selector", Kind::Selector, "{}");
    junk.wasm = b"not wasm".to_vec();
    junk.digest = sha256_hex(&junk.wasm);
    assert!(
        reg.apply(&junk)
            .unwrap_err()
            .to_string()
            .contains("not a valid component")
    );

    let mut gz = source("selector", "instance-selector", Kind::Selector, "{}");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut enc, &gz.wasm).unwrap();
    gz.wasm = enc.finish().unwrap();
    let loaded = reg.apply(&gz).expect("gzip accepted");
    assert_eq!(
        loaded.digest,
        sha256_hex(&component("instance-selector")),
        "digest is over the uncompressed component"
    );
}

#[test]
fn a_swap_under_concurrent_calls_gives_only_old_or_new_answers() {
    let reg = loaded(
        "selector",
        "hostile-selector",
        Kind::Selector,
        r#"{"mode": "identity"}"#,
    );
    let types = Arc::new(catalog());
    let identity: Vec<String> = types.iter().map(|t| t.name.clone()).collect();
    let reverse: Vec<String> = identity.iter().rev().cloned().collect();
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (reg, types, stop, calls) =
                (reg.clone(), types.clone(), stop.clone(), calls.clone());
            let (identity, reverse) = (identity.clone(), reverse.clone());
            std::thread::spawn(move || {
                let ranker = PluginRanker { registry: reg };
                let mut seen_new = false;
                while !stop.load(Ordering::Relaxed) {
                    let got =
                        rank_names(&ranker, &types, small()).expect("no call fails during a swap");
                    assert!(got == identity || got == reverse, "{got:?}");
                    seen_new |= got == reverse;
                    calls.fetch_add(1, Ordering::Relaxed);
                }
                seen_new
            })
        })
        .collect();
    while calls.load(Ordering::Relaxed) < 20 {
        std::thread::yield_now();
    }
    for i in 0..6 {
        let mode = if i % 2 == 0 { "reverse" } else { "identity" };
        reg.apply(&source(
            "selector",
            "hostile-selector",
            Kind::Selector,
            &format!(r#"{{"mode": "{mode}"}}"#),
        ))
        .unwrap();
    }
    reg.apply(&source(
        "selector",
        "hostile-selector",
        Kind::Selector,
        r#"{"mode": "reverse"}"#,
    ))
    .unwrap();
    let target = calls.load(Ordering::Relaxed) + 20;
    while calls.load(Ordering::Relaxed) < target {
        std::thread::yield_now();
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        assert!(
            w.join().expect("worker saw no error"),
            "the new plugin answered after the swap"
        );
    }
}

fn join_input(cni: &str) -> UserdataInput {
    UserdataInput {
        api_endpoint: "https://10.0.0.10:6443".into(),
        ca_pem: "-----BEGIN CERTIFICATE-----\nQ0E=\n-----END CERTIFICATE-----\n".into(),
        ca_hash: format!("sha256:{}", "a".repeat(64)),
        bootstrap_token: "abcdef.0123456789abcdef".into(),
        kubernetes_version: "1.35".into(),
        node_name: "node-1".into(),
        labels: [
            ("karpenter.sh/nodepool".to_owned(), "default".to_owned()),
            ("team".to_owned(), "web".to_owned()),
        ]
        .into(),
        taints: vec![k8s_openapi::api::core::v1::Taint {
            key: "dedicated".into(),
            value: Some("web".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        }],
        startup_taints: Vec::new(),
        kubelet_args: [("max-pods".to_owned(), "110".to_owned())].into(),
        cni: cni.into(),
    }
}

#[test]
fn the_userdata_plugin_joins_with_kubeadm_and_adds_the_cilium_taint_only_for_cilium() {
    let reg = loaded("kubeadm-userdata", "kubeadm-userdata", Kind::Userdata, "{}");
    let renderer = PluginRenderer { registry: reg };
    let cilium = renderer.render(&join_input("cilium")).unwrap();
    assert!(
        cilium.contains("kubeadm")
            && cilium.contains("abcdef.0123456789abcdef")
            && cilium.contains("10.0.0.10:6443"),
        "{cilium}"
    );
    let reg_c = parse_registration(&cilium);
    assert_eq!(reg_c.node_name.as_deref(), Some("node-1"));
    assert_eq!(reg_c.labels.get("team").map(String::as_str), Some("web"));
    assert!(
        reg_c
            .taints
            .iter()
            .any(|t| t.key == "node.cilium.io/agent-not-ready" && t.effect == "NoExecute"),
        "{:?}",
        reg_c.taints
    );
    assert!(reg_c.taints.iter().any(|t| t.key == "dedicated"));
    let calico = parse_registration(&renderer.render(&join_input("calico")).unwrap());
    assert!(
        !calico
            .taints
            .iter()
            .any(|t| t.key.starts_with("node.cilium.io")),
        "{:?}",
        calico.taints
    );
}

#[test]
fn the_scorer_plugin_returns_one_finite_score_per_candidate() {
    let reg = loaded(
        "consolidation-scorer",
        "consolidation-scorer",
        Kind::Scorer,
        "{}",
    );
    let scorer = PluginScorer { registry: reg };
    let candidate = |name: &str, fit: bool, cost: f64| ScoreCandidate {
        disruption_cost: cost,
        pods_fit_elsewhere: fit,
        ..score_candidate(name, "default")
    };
    let scores = scorer
        .score(&[
            candidate("cheap-to-move", true, 1.0),
            candidate("costly", true, 8.0),
            candidate("stuck", false, 1.0),
        ])
        .unwrap();
    assert_eq!(scores.len(), 3);
    assert!(scores.iter().all(|s| s.is_finite()));
    assert!(
        scores[0] > scores[1],
        "less disruption per saving scores higher: {scores:?}"
    );
    assert!(scores[2] <= 0.0, "a node with no saving keeps: {scores:?}");
}

#[test]
fn compiled_components_are_cached_so_a_restart_does_not_recompile() {
    let dir = std::env::temp_dir().join(format!("kk-plugin-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let first = Registry::new(
        Runtime::new(Bounds::default(), Some(dir.clone())).unwrap(),
        None,
    );
    first
        .apply(&source(
            "instance-selector",
            "instance-selector",
            Kind::Selector,
            "{}",
        ))
        .unwrap();
    assert_eq!(first.compiled(), 1);
    let second = Registry::new(
        Runtime::new(Bounds::default(), Some(dir.clone())).unwrap(),
        None,
    );
    second
        .apply(&source(
            "instance-selector",
            "instance-selector",
            Kind::Selector,
            "{}",
        ))
        .unwrap();
    assert_eq!(
        second.compiled(),
        0,
        "the restart loaded the cached artifact"
    );
    let ranker = PluginRanker { registry: second };
    assert_eq!(
        rank_names(&ranker, &catalog(), small()).unwrap()[0],
        "c2a.large"
    );

    // A corrupted entry is never deserialized: it fails its checksum and is recompiled.
    let entry = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .expect("one cache entry");
    let mut bytes = std::fs::read(&entry).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&entry, &bytes).unwrap();
    let third = Registry::new(
        Runtime::new(Bounds::default(), Some(dir.clone())).unwrap(),
        None,
    );
    third
        .apply(&source(
            "instance-selector",
            "instance-selector",
            Kind::Selector,
            "{}",
        ))
        .unwrap();
    assert_eq!(third.compiled(), 1, "the corrupted entry was recompiled");
    let ranker = PluginRanker { registry: third };
    assert_eq!(
        rank_names(&ranker, &catalog(), small()).unwrap()[0],
        "c2a.large"
    );
    assert_ne!(
        std::fs::read(&entry).unwrap(),
        bytes,
        "the entry was rewritten"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_call_that_traps_outside_the_self_test_falls_back_and_its_instance_is_never_reused() {
    let reg = loaded(
        "selector",
        "hostile-selector",
        Kind::Selector,
        r#"{"mode": "trap-on-one"}"#,
    );
    let ranker = PluginRanker {
        registry: reg.clone(),
    };
    let types = catalog();
    // Warm instances answer call after call.
    for _ in 0..3 {
        assert_eq!(
            rank_names(&ranker, &types, small()).unwrap().len(),
            types.len()
        );
    }
    // One candidate (a shape the self-test never used): the instance traps, and that call is
    // answered by the native ranking, counted for the plugin's Event...
    assert_eq!(
        rank_names(&ranker, &types[..1], small()).unwrap(),
        [types[0].name.clone()]
    );
    let fallbacks = reg.take_fallbacks();
    assert_eq!(fallbacks.len(), 1, "{fallbacks:?}");
    assert_eq!((fallbacks[0].kind, fallbacks[0].calls), (Kind::Selector, 1));
    assert!(
        fallbacks[0].last_error.contains("trapped"),
        "{}",
        fallbacks[0].last_error
    );
    // ...and the next calls run on instances that never trapped (a reused one would refuse).
    for _ in 0..3 {
        assert_eq!(
            rank_names(&ranker, &types, small()).unwrap().len(),
            types.len()
        );
    }
}

/// The shadow records of `reg` once `done` holds for the record of `plugin`.
fn shadow_stats(
    reg: &Registry,
    plugin: &str,
    done: impl Fn(&kk_plugin_runtime::shadow::Stats) -> bool,
) -> kk_plugin_runtime::shadow::Stats {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let found = reg.shadows.stats().into_iter().find(|s| s.plugin == plugin);
        match found {
            Some(s) if done(&s) => return s,
            last if std::time::Instant::now() > deadline => {
                panic!("shadow {plugin} never reached the state: {last:?}")
            }
            _ => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
}

#[test]
fn a_shadow_selector_answers_every_decision_never_acts_and_its_divergence_is_counted() {
    // The native default serves; the shadow denies the family the default picks.
    let reg = registry();
    let mut team = source(
        "team",
        "instance-selector",
        Kind::Selector,
        r#"{"denyFamilies": ["c2a"]}"#,
    );
    team.mode = Mode::Shadow;
    reg.apply(&team).unwrap();
    assert!(reg.active(Kind::Selector).is_none());
    assert!(reg.shadow(Kind::Selector).is_some());
    let ranker = PluginRanker {
        registry: reg.clone(),
    };
    let types = catalog();
    for _ in 0..3 {
        let order = rank_names(&ranker, &types, small()).unwrap();
        assert_eq!(order[0], "c2a.large", "the shadow never acts: {order:?}");
    }
    let stats = shadow_stats(&reg, "team", |s| s.decisions == 3);
    assert_eq!(stats.diverged.get("flavor"), Some(&3), "{stats:?}");
    // c2a.large at 80,000 against m2a.large at 96,000 per hour, three times.
    assert_eq!(stats.price_delta_micros, 3 * 16_000);
    let last = stats.recent.back().unwrap();
    assert!(last.serving.starts_with("c2a.large"), "{last:?}");
    assert!(last.shadow.starts_with("m2a.large"), "{last:?}");
    assert!(
        stats
            .summary()
            .contains("3 decisions, 3 diverged (flavor 3)")
    );

    // A shadow that traps (on a single candidate) changes no answer; its errors are counted.
    let mut hostile = source(
        "hostile",
        "hostile-selector",
        Kind::Selector,
        r#"{"mode": "trap-on-one"}"#,
    );
    hostile.mode = Mode::Shadow;
    reg.apply(&hostile).unwrap();
    let one = rank_subset(&ranker, &types, [1], small()).unwrap();
    assert_eq!(one, ["c2a.large"]);
    let stats = shadow_stats(&reg, "hostile", |s| s.decisions == 1);
    assert_eq!(stats.diverged.get("error"), Some(&1), "{stats:?}");

    // Promoted (the same ConfigMap without the shadow label): it serves from the next decision.
    team.mode = Mode::Default;
    reg.apply(&team).unwrap();
    assert_eq!(reg.active(Kind::Selector).unwrap().name, "team");
    assert_eq!(reg.shadow(Kind::Selector).unwrap().name, "hostile");
    let order = rank_names(&ranker, &types, small()).unwrap();
    assert_eq!(order[0], "m2a.large", "{order:?}");
    // Demoted again: the native default serves, it shadows.
    team.mode = Mode::Shadow;
    reg.apply(&team).unwrap();
    assert!(reg.active(Kind::Selector).is_none());
    assert_eq!(reg.shadow(Kind::Selector).unwrap().name, "team");
}

#[test]
fn a_nodepool_route_picks_its_named_plugin_per_world_and_scoring_splits_by_nodepool() {
    let metrics = Arc::new(kk_plugin_runtime::metrics::PluginMetrics::default());
    let reg = Registry::new(
        Runtime::new(Bounds::default(), None).unwrap(),
        Some(metrics.clone()),
    );
    let mut team = source("team-scorer", "consolidation-scorer", Kind::Scorer, "{}");
    team.mode = Mode::NodePool;
    reg.apply(&team).unwrap();
    assert!(
        reg.active(Kind::Scorer).is_none(),
        "not the world's default"
    );
    assert!(reg.serving(Kind::Scorer, "team").is_none(), "no route yet");
    reg.set_routes(
        [
            ((Kind::Scorer, "team".to_owned()), "team-scorer".to_owned()),
            ((Kind::Selector, "team".to_owned()), "missing".to_owned()),
        ]
        .into(),
    );
    assert_eq!(
        reg.serving(Kind::Scorer, "team").unwrap().name,
        "team-scorer"
    );
    assert!(reg.serving(Kind::Scorer, "other").is_none());
    assert!(
        reg.serving(Kind::Selector, "team").is_none(),
        "a missing plugin falls back to the default"
    );

    let scorer = PluginScorer {
        registry: reg.clone(),
    };
    let scores = scorer
        .score(&[
            score_candidate("a", "other"),
            score_candidate("b", "team"),
            score_candidate("c", "other"),
            score_candidate("d", "team"),
        ])
        .unwrap();
    assert_eq!(scores.len(), 4);
    assert!(
        scores.iter().all(|s| s.is_finite() && *s > 0.0),
        "{scores:?}"
    );
    let mut text = String::new();
    let mut prom = prometheus_client::registry::Registry::default();
    metrics.register(&mut prom);
    prometheus_client::encoding::text::encode(&mut text, &prom).unwrap();
    let calls: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("kakaocloud_plugin_calls_total{"))
        .collect();
    assert_eq!(calls.len(), 1, "{text}");
    assert!(
        calls[0].contains("plugin=\"team-scorer\"") && calls[0].ends_with(" 1"),
        "one call, for the team's two nodes: {calls:?}"
    );
}
