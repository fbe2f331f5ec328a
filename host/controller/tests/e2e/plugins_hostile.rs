//! Hostile components written in WebAssembly text (what a Rust plugin cannot express): a table
//! that grows without end, a compile bomb, a WASI-importing selector, a renderer whose output
//! breaks only on inputs its self-test does not use; plus a gzip bomb and the compile deadline.
//! Each is checked against the same runtime the controller uses.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use kk_engine::disruption::{ConsolidationScorer, Reason, ScoreCandidate};
use kk_engine::userdata::{UserdataInput, UserdataRenderer};
use kk_plugin_runtime::engine::sha256_hex;
use kk_plugin_runtime::{
    Allocator, Bounds, Kind, PluginRenderer, PluginScorer, Registry, Runtime, Source,
};

const WIT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../wit");

/// A component of `world` (of `package`, which may extend the project's WIT) from a core
/// module in WebAssembly text, encoded the way `kk-plugin componentize` does.
fn component(extra_wit: &[&str], world: &str, core_wat: &str) -> Vec<u8> {
    let mut resolve = wit_parser::Resolve::default();
    let (ours, _) = resolve.push_dir(WIT_DIR).expect("the project's WIT parses");
    let mut main = ours;
    for (i, text) in extra_wit.iter().enumerate() {
        main = resolve
            .push_str(format!("extra{i}.wit"), text)
            .expect("test WIT parses");
    }
    let world = resolve
        .select_world(&[main], Some(world))
        .expect("the world exists");
    let mut core = wat::parse_str(core_wat).expect("the test module parses");
    wit_component::embed_component_metadata(
        &mut core,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .unwrap();
    wit_component::ComponentEncoder::default()
        .module(&core)
        .unwrap()
        .validate(true)
        .encode()
        .expect("the component encodes")
}

/// A bump allocator as `cabi_realloc` (the host places inputs with it) and an export memory.
const ALLOCATOR: &str = r#"
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 4096))
  (func $alloc (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $p i32)
    (local.set $p (i32.and (i32.add (global.get $heap) (i32.const 7)) (i32.const -8)))
    (global.set $heap (i32.add (local.get $p) (local.get 3)))
    (block $fits
      (br_if $fits (i32.le_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536))))
      (drop (memory.grow (i32.add (i32.const 1)
        (i32.div_u (i32.sub (global.get $heap) (i32.mul (memory.size) (i32.const 65536)))
                   (i32.const 65536))))))
    (local.get $p))
"#;

fn registry(bounds: Bounds) -> Arc<Registry> {
    Registry::new(Runtime::new(bounds, None).unwrap(), None)
}

/// A scorer that grows its function table 1,000 elements at a time up to a million, then scores
/// every candidate with the table's size.
fn table_grower() -> Vec<u8> {
    let wat = format!(
        r#"(module {ALLOCATOR}
  (table $t 1 funcref)
  (func (export "score") (param $ptr i32) (param $n i32) (result i32)
    (local $i i32) (local $out i32)
    (block $done (loop $grow
      (br_if $done (i32.ge_u (local.get $i) (i32.const 1000)))
      (br_if $done (i32.eq (table.grow $t (ref.null func) (i32.const 1000)) (i32.const -1)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $grow)))
    (local.set $out (call $alloc (i32.const 0) (i32.const 0) (i32.const 8)
                       (i32.mul (local.get $n) (i32.const 8))))
    (local.set $i (i32.const 0))
    (block $end (loop $fill
      (br_if $end (i32.ge_u (local.get $i) (local.get $n)))
      (f64.store (i32.add (local.get $out) (i32.mul (local.get $i) (i32.const 8)))
                 (f64.convert_i32_u (table.size $t)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $fill)))
    (i32.store8 (i32.const 16) (i32.const 0))
    (i32.store (i32.const 20) (local.get $out))
    (i32.store (i32.const 24) (local.get $n))
    (i32.const 16)))"#
    );
    component(&[], "consolidation-scorer", &wat)
}

fn candidates(n: usize) -> Vec<ScoreCandidate> {
    (0..n)
        .map(|i| ScoreCandidate {
            node_name: format!("node-{i}"),
            instance_type: "m2a.large".into(),
            node_pool: "default".into(),
            zone: "kr-central-2-a".into(),
            capacity_type: "on-demand".into(),
            price_micros: 100_000,
            cpu_utilisation_permille: 100,
            memory_utilisation_permille: 100,
            age_seconds: 3600,
            pod_count: 1,
            disruption_cost: 1.0,
            pods_fit_elsewhere: true,
            replacement_price_micros: None,
            reason: Reason::Underutilized,
        })
        .collect()
}

#[test]
fn a_table_that_grows_without_end_is_stopped_at_the_bound() {
    let wasm = table_grower();
    // Unbounded (a runtime without our limits would let it): the million elements are reached.
    let unbounded = Bounds {
        table_elements: usize::MAX,
        ..Bounds::default()
    };
    let reg = Registry::new(
        Runtime::with_allocator(unbounded, None, Allocator::OnDemand).unwrap(),
        None,
    );
    reg.apply(&Source::new("grower", Kind::Scorer, wasm.clone(), "{}"))
        .expect("without a table bound the component runs");
    let scores = PluginScorer {
        registry: reg.clone(),
    }
    .score(&candidates(2))
    .unwrap();
    assert_eq!(scores, vec![1_000_001.0; 2], "the table grew to a million");

    // The default bound stops it: the plugin is refused and nothing serves in its place.
    let reg = registry(Bounds::default());
    let err = reg
        .apply(&Source::new("grower", Kind::Scorer, wasm, "{}"))
        .expect_err("the table bound traps the self-test")
        .to_string();
    assert!(err.contains("trapped"), "{err}");
    assert!(reg.active(Kind::Scorer).is_none());
}

#[test]
fn a_compile_bomb_and_a_gzip_bomb_are_refused_before_the_compiler_runs() {
    let reg = registry(Bounds::default());
    // One function of 1.2 MB: register allocation is superlinear in a function's size.
    let body = "i32.const 0 drop ".repeat(400_000);
    let bomb = wat::parse_str(format!("(component (core module (func {body})))")).unwrap();
    let started = std::time::Instant::now();
    let err = reg
        .apply(&Source::new("bomb", Kind::Selector, bomb, "{}"))
        .expect_err("refused")
        .to_string();
    assert!(err.contains("function body of"), "{err}");
    assert_eq!(reg.compiled(), 0, "the compiler never saw it");
    eprintln!("compile bomb refused in {:?}", started.elapsed());

    // 40 MiB of zeros is 40 KiB of gzip; inflation stops at the component size limit.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..40 {
        gz.write_all(&zeros).unwrap();
    }
    let gz = gz.finish().unwrap();
    assert!(gz.len() < 1 << 20, "{} bytes of gzip", gz.len());
    let source = Source {
        name: "gzip-bomb".into(),
        kind: Kind::Selector,
        wasm: gz,
        digest: "0".repeat(64),
        config: "{}".into(),
        signature: None,
        mode: kk_plugin_runtime::Mode::Default,
    };
    let err = reg.apply(&source).expect_err("refused").to_string();
    assert!(err.contains("larger than"), "{err}");
}

#[test]
fn a_compile_past_its_deadline_is_refused() {
    let reg = registry(Bounds {
        compile_deadline: Duration::from_micros(1),
        ..Bounds::default()
    });
    let wasm = kk_demo::read_plugin("instance-selector").unwrap_or_else(|e| panic!("{e:#}"));
    let err = reg
        .apply(&Source::new("slow", Kind::Selector, wasm.clone(), "{}"))
        .expect_err("one microsecond is not enough to compile")
        .to_string();
    assert!(err.contains("took longer than"), "{err}");
    // While the abandoned compile still runs, no other starts (it cannot be stopped).
    let again = reg
        .apply(&Source::new("slow", Kind::Selector, wasm, "{}"))
        .expect_err("still refused")
        .to_string();
    assert!(
        again.contains("still running") || again.contains("took longer than"),
        "{again}"
    );
    assert!(reg.active(Kind::Selector).is_none());
}

/// The selector world's exports, answering an empty ranking; `import` adds a WASI call.
fn selector_core(wasi: bool) -> String {
    let (import, call) = if wasi {
        (
            r#"(import "wasi:random/random@0.2.0" "get-random-u64" (func $random (result i64)))"#,
            "(drop (call $random))",
        )
    } else {
        ("", "")
    };
    format!(
        r#"(module {import} {ALLOCATOR}
  (func (export "load-catalog") (param i32 i32) (result i32)
    {call}
    (i32.store8 (i32.const 16) (i32.const 0))
    (i32.const 16))
  (func (export "rank") (param i32) (result i32)
    (i32.store8 (i32.const 32) (i32.const 0))
    (i32.store (i32.const 36) (i32.const 0))
    (i32.store (i32.const 40) (i32.const 0))
    (i32.const 32)))"#
    )
}

#[test]
fn a_wasi_importing_selector_is_refused_at_link() {
    let wasi = r#"package wasi:random@0.2.0;
interface random { get-random-u64: func() -> u64; }"#;
    let world = r#"package test:hostile;
world wasi-selector {
  include kakaocloud:karpenter/instance-selector@0.1.0;
  import wasi:random/random@0.2.0;
}"#;
    let runtime = Runtime::new(Bounds::default(), None).unwrap();
    let plain = component(&[], "instance-selector", &selector_core(false));
    let (c, _) = runtime.compile(&plain, &sha256_hex(&plain)).unwrap();
    runtime
        .link("plain", Kind::Selector, &c, "{}".into(), sha256_hex(&plain))
        .expect("the same exports without WASI link");

    let hostile = component(&[wasi, world], "wasi-selector", &selector_core(true));
    let err = registry(Bounds::default())
        .apply(&Source::new("wasi", Kind::Selector, hostile, "{}"))
        .expect_err("WASI is not offered")
        .to_string();
    assert!(
        err.contains("does not implement the instance-selector world") && err.contains("wasi"),
        "{err}"
    );
}

/// A renderer writing `#!/bin/sh` and 2,000 `#` per node label: valid for its self-test (one
/// label), over the userdata limit for a node with many labels.
fn label_sensitive_renderer() -> Vec<u8> {
    let wat = format!(
        r#"(module {ALLOCATOR}
  (func (export "render") (param $input i32) (result i32)
    (local $len i32) (local $out i32)
    ;; userdata-input: the labels list's length is at offset 64.
    (local.set $len (i32.add (i32.const 10)
      (i32.mul (i32.load (i32.add (local.get $input) (i32.const 64))) (i32.const 2000))))
    (local.set $out (call $alloc (i32.const 0) (i32.const 0) (i32.const 1) (local.get $len)))
    (memory.fill (local.get $out) (i32.const 35) (local.get $len))
    (i32.store8 (i32.add (local.get $out) (i32.const 1)) (i32.const 33))
    (i32.store8 (i32.add (local.get $out) (i32.const 2)) (i32.const 47))
    (i32.store8 (i32.add (local.get $out) (i32.const 3)) (i32.const 98))
    (i32.store8 (i32.add (local.get $out) (i32.const 4)) (i32.const 105))
    (i32.store8 (i32.add (local.get $out) (i32.const 5)) (i32.const 110))
    (i32.store8 (i32.add (local.get $out) (i32.const 6)) (i32.const 47))
    (i32.store8 (i32.add (local.get $out) (i32.const 7)) (i32.const 115))
    (i32.store8 (i32.add (local.get $out) (i32.const 8)) (i32.const 104))
    (i32.store8 (i32.add (local.get $out) (i32.const 9)) (i32.const 10))
    (i32.store8 (i32.const 16) (i32.const 0))
    (i32.store (i32.const 20) (local.get $out))
    (i32.store (i32.const 24) (local.get $len))
    (i32.const 16)))"#
    );
    component(&[], "userdata-renderer", &wat)
}

fn node_input(labels: usize) -> UserdataInput {
    UserdataInput {
        api_endpoint: "https://10.0.0.10:6443".into(),
        ca_pem: "-----BEGIN CERTIFICATE-----\nQ0E=\n-----END CERTIFICATE-----\n".into(),
        ca_hash: format!("sha256:{}", "a".repeat(64)),
        bootstrap_token: "abcdef.0123456789abcdef".into(),
        kubernetes_version: "1.35".into(),
        node_name: "node-1".into(),
        labels: (0..labels)
            .map(|i| (format!("label-{i}"), "x".to_owned()))
            .collect(),
        taints: Vec::new(),
        startup_taints: Vec::new(),
        kubelet_args: Default::default(),
        cni: "calico".into(),
    }
}

#[test]
fn a_renderer_that_breaks_outside_its_self_test_falls_back_to_kubeadm_for_that_call() {
    let reg = registry(Bounds::default());
    reg.apply(&Source::new(
        "labels",
        Kind::Userdata,
        label_sensitive_renderer(),
        "{}",
    ))
    .expect("passes its self-test");
    let renderer = PluginRenderer {
        registry: reg.clone(),
    };
    let small = renderer.render(&node_input(1)).unwrap();
    assert!(small.starts_with("#!/bin/sh\n"), "the plugin answers");
    assert!(reg.take_fallbacks().is_empty());

    let large = renderer.render(&node_input(10)).unwrap();
    assert!(
        large.starts_with("#cloud-config") && large.contains("kubeadm"),
        "the native renderer answered: {}",
        &large[..40.min(large.len())]
    );
    let fallbacks = reg.take_fallbacks();
    assert_eq!(fallbacks.len(), 1, "{fallbacks:?}");
    assert_eq!((fallbacks[0].kind, fallbacks[0].calls), (Kind::Userdata, 1));
    assert!(
        fallbacks[0].last_error.contains("userdata"),
        "{}",
        fallbacks[0].last_error
    );
    assert!(reg.take_fallbacks().is_empty(), "reported once");
    // The plugin still serves the calls it can answer.
    assert!(
        renderer
            .render(&node_input(2))
            .unwrap()
            .starts_with("#!/bin/sh")
    );
}
