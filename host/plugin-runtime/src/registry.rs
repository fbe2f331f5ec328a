//! The active plugin per role, swapped atomically, and the adapters the controllers call through
//! the host's seams ([`InstanceRanker`], [`ConsolidationScorer`], [`UserdataRenderer`]). With no
//! plugin loaded for a role, its native default answers.
//!
//! A plugin passed its self-test, but any later call may still fail (trap, deadline, invalid
//! output): that call is answered by the native default, counted in
//! `karpenter_kakaocloud_plugin_fallbacks`, and kept as a pending [`Fallback`] that the
//! watcher reports as an Event on the plugin's ConfigMap. Provisioning never stops because of
//! a plugin.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use super::bindings::types;
use super::convert::SelectorCatalog;
use super::engine::{Loaded, Runtime, sha256_hex};
use super::{Kind, PluginError, convert};
use crate::metrics::{PluginLabels, PluginMetrics, PluginRejection, PluginWorld};
use crate::replay::DecisionLog;
use crate::shadow::{Decision, Shadows};
use crate::trust::TrustRoot;
use kk_apis::names::label;
use kk_engine::disruption::Reason;
use kk_engine::disruption::scorer::{
    self as native_scorer, ConsolidationScorer, SavingsPerDisruption, ScoreCandidate, ScoreError,
};
use kk_engine::scheduling::Resources;
use kk_engine::scheduling::instance_types::{InstanceType, Offering};
use kk_engine::scheduling::ranker::{
    self, Candidate, Catalog, CheapestFitRanker, InstanceRanker, RankError, RankRequest,
};
use kk_engine::userdata::{
    self as native_userdata, KubeadmRenderer, UserdataError, UserdataInput, UserdataRenderer,
};

/// Largest component accepted, after decompression.
pub const MAX_COMPONENT_BYTES: u64 = 32 << 20;

/// A plugin as a ConfigMap carries it.
#[derive(Clone)]
pub struct Source {
    pub name: String,
    pub kind: Kind,
    /// The component, gzip-compressed or not.
    pub wasm: Vec<u8>,
    /// Hex sha256 of the uncompressed component.
    pub digest: String,
    pub config: String,
    /// The `karpenter.kakaocloud.com/plugin-signature` annotation, if any.
    pub signature: Option<String>,
    /// Which decisions it makes (the ConfigMap's `plugin-mode` label).
    pub mode: Mode,
}

/// What a loaded plugin serves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Its world's default: every NodePool that names no plugin of the world.
    #[default]
    Default,
    /// Answers beside what serves, never acts (`crate::shadow`).
    Shadow,
    /// Serves only the NodePools that name it in their annotation.
    NodePool,
}

impl Source {
    /// A plugin from its uncompressed component, its digest computed here (tests, benches, and
    /// anything loading a component it built itself rather than from a ConfigMap).
    pub fn new(name: &str, kind: Kind, wasm: Vec<u8>, config: &str) -> Source {
        Source {
            name: name.into(),
            kind,
            digest: sha256_hex(&wasm),
            wasm,
            config: config.into(),
            signature: None,
            mode: Mode::Default,
        }
    }
}

/// Whether plugins must be signed, and by whom.
#[derive(Debug, Clone, Default)]
pub enum Trust {
    /// No trust root configured: signatures are not checked.
    #[default]
    Off,
    /// Plugins load only when signed by one of these keys.
    Required(TrustRoot),
    /// A trust root is configured but cannot be read: every plugin is refused (fail closed).
    Unreadable(String),
}

/// Failed calls of one plugin answered by the native default since the last report.
#[derive(Debug, Clone, PartialEq)]
pub struct Fallback {
    pub kind: Kind,
    pub plugin: String,
    pub calls: u64,
    pub last_error: String,
}

/// The component bytes, gunzipped when they are gzip (bounded, so a zip bomb is refused).
pub fn decode(bytes: &[u8]) -> Result<Vec<u8>, PluginError> {
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(bytes.to_vec());
    }
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .take(MAX_COMPONENT_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| PluginError::Invalid(format!("{} is not valid gzip: {e}", super::WASM_KEY)))?;
    if out.len() as u64 > MAX_COMPONENT_BYTES {
        return Err(PluginError::Invalid(format!(
            "component is larger than {MAX_COMPONENT_BYTES} bytes"
        )));
    }
    Ok(out)
}

pub struct Registry {
    runtime: Arc<Runtime>,
    slots: [RwLock<Option<Arc<Loaded>>>; 3],
    /// The shadow plugin per role, asked beside the serving one.
    shadow_slots: [RwLock<Option<Arc<Loaded>>>; 3],
    pub shadows: Shadows,
    /// The latest selector decisions, to replay a candidate plugin on (`kk-plugin what-if`).
    pub decisions: DecisionLog,
    /// Every loaded plugin a NodePool may name (default and `nodepool` mode), by world and name.
    named: RwLock<HashMap<(Kind, String), Arc<Loaded>>>,
    /// The plugin each NodePool names, by world and NodePool (set by the NodePool controller).
    routes: RwLock<HashMap<(Kind, String), String>>,
    metrics: Option<Arc<PluginMetrics>>,
    /// Components compiled (not loaded from the artifact cache), for tests and logs.
    compiled: AtomicUsize,
    /// The last catalog converted for selectors: solves reuse one catalog for many calls, and
    /// rounds rebuild equal ones, so it is converted once per fingerprint.
    selector_catalog: Mutex<Option<Arc<SelectorCatalog>>>,
    trust: RwLock<Trust>,
    /// Fallbacks not yet reported, per (world, plugin).
    fallbacks: Mutex<BTreeMap<(&'static str, String), Fallback>>,
}

/// Empties `slot` if it holds plugin `name`.
fn clear(slot: &RwLock<Option<Arc<Loaded>>>, name: &str) -> bool {
    let mut slot = slot.write().unwrap_or_else(|p| p.into_inner());
    let holds = slot.as_ref().is_some_and(|l| l.name == name);
    if holds {
        *slot = None;
    }
    holds
}

fn slot(kind: Kind) -> usize {
    match kind {
        Kind::Selector => 0,
        Kind::Scorer => 1,
        Kind::Userdata => 2,
    }
}

impl Registry {
    pub fn new(runtime: Arc<Runtime>, metrics: Option<Arc<PluginMetrics>>) -> Arc<Registry> {
        Arc::new(Registry {
            runtime,
            slots: Default::default(),
            shadow_slots: Default::default(),
            shadows: Shadows::new(metrics.clone()),
            decisions: DecisionLog::default(),
            named: Default::default(),
            routes: Default::default(),
            metrics,
            compiled: AtomicUsize::new(0),
            selector_catalog: Mutex::new(None),
            trust: RwLock::new(Trust::Off),
            fallbacks: Mutex::default(),
        })
    }

    /// The trust root later loads are checked against (already active plugins keep serving).
    pub fn set_trust(&self, trust: Trust) {
        *self.trust.write().unwrap_or_else(|p| p.into_inner()) = trust;
    }

    /// A call of `plugin` failed and the native default answered: counted now, reported later.
    pub fn fell_back(&self, kind: Kind, plugin: &str, error: &str) {
        if let Some(m) = &self.metrics {
            m.fallbacks
                .get_or_create(&PluginWorld {
                    world: kind.world().into(),
                })
                .inc();
        }
        let mut pending = self.fallbacks.lock().unwrap_or_else(|p| p.into_inner());
        let entry = pending
            .entry((kind.world(), plugin.to_owned()))
            .or_insert_with(|| {
                // Once per report period per plugin: a failing selector is called per node.
                tracing::warn!(plugin, world = %kind, error, "plugin call failed; the native default answered");
                Fallback {
                    kind,
                    plugin: plugin.to_owned(),
                    calls: 0,
                    last_error: String::new(),
                }
            });
        entry.calls += 1;
        entry.last_error = error.chars().take(500).collect();
    }

    /// The fallbacks since the last call, oldest world first.
    pub fn take_fallbacks(&self) -> Vec<Fallback> {
        std::mem::take(&mut *self.fallbacks.lock().unwrap_or_else(|p| p.into_inner()))
            .into_values()
            .collect()
    }

    /// `catalog` as selectors take it, converted once per fingerprint.
    pub fn selector_catalog(&self, catalog: &Catalog<'_>) -> Arc<SelectorCatalog> {
        let mut cached = self
            .selector_catalog
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match cached.as_ref() {
            Some(c) if c.fingerprint == catalog.fingerprint => c.clone(),
            _ => {
                let converted = Arc::new(convert::catalog(catalog));
                *cached = Some(converted.clone());
                converted
            }
        }
    }

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// How many components this registry compiled (cache misses).
    pub fn compiled(&self) -> usize {
        self.compiled.load(Ordering::Relaxed)
    }

    /// The plugin serving `kind`, if any (else the native default serves).
    pub fn active(&self, kind: Kind) -> Option<Arc<Loaded>> {
        self.slots[slot(kind)]
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The shadow plugin of `kind`, if any.
    pub fn shadow(&self, kind: Kind) -> Option<Arc<Loaded>> {
        self.shadow_slots[slot(kind)]
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The plugin serving `kind` for NodePool `pool`: the one the NodePool names when it is
    /// loaded, else the world's default (`None`: the native default).
    pub fn serving(&self, kind: Kind, pool: &str) -> Option<Arc<Loaded>> {
        let routes = self.routes.read().unwrap_or_else(|p| p.into_inner());
        if let Some(name) = routes.get(&(kind, pool.to_owned()))
            && let Some(named) = self.named(kind, name)
        {
            return Some(named);
        }
        self.active(kind)
    }

    /// The loaded plugin `name` of `kind` a NodePool may name (default or `nodepool` mode).
    pub fn named(&self, kind: Kind, name: &str) -> Option<Arc<Loaded>> {
        self.named
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(kind, name.to_owned()))
            .cloned()
    }

    /// Which plugin each NodePool names, by world and NodePool; replaces the previous routes.
    pub fn set_routes(&self, routes: HashMap<(Kind, String), String>) {
        *self.routes.write().unwrap_or_else(|p| p.into_inner()) = routes;
    }

    fn remember(&self, kind: Kind, name: &str, loaded: Option<Arc<Loaded>>) {
        let mut named = self.named.write().unwrap_or_else(|p| p.into_inner());
        match loaded {
            Some(l) => named.insert((kind, name.to_owned()), l),
            None => named.remove(&(kind, name.to_owned())),
        };
    }

    /// Verifies, compiles, links and self-tests `source`, then places it by its mode: its
    /// world's default, its shadow, or a plugin only the NodePools naming it use. A plugin
    /// changing mode (promoted, demoted) leaves its former place. On any failure nothing
    /// changes.
    pub fn apply(&self, source: &Source) -> Result<Arc<Loaded>, PluginError> {
        let result = self.load(source);
        match &result {
            Ok(loaded) if source.mode == Mode::Shadow => {
                self.remember(source.kind, &source.name, None);
                if self.remove_active(source.kind, &source.name) {
                    tracing::info!(plugin = %source.name, world = %source.kind, "plugin demoted to shadow; the native default serves");
                }
                *self.shadow_slots[slot(source.kind)]
                    .write()
                    .unwrap_or_else(|p| p.into_inner()) = Some(loaded.clone());
                tracing::info!(plugin = %source.name, world = %source.kind, digest = %loaded.digest, "plugin runs in shadow");
            }
            Ok(loaded) if source.mode == Mode::NodePool => {
                self.remove_shadow(source.kind, &source.name);
                self.remove_active(source.kind, &source.name);
                self.remember(source.kind, &source.name, Some(loaded.clone()));
                tracing::info!(plugin = %source.name, world = %source.kind, digest = %loaded.digest, "plugin loaded for the NodePools naming it");
            }
            Ok(loaded) => {
                self.remove_shadow(source.kind, &source.name);
                self.remember(source.kind, &source.name, Some(loaded.clone()));
                *self.slots[slot(source.kind)]
                    .write()
                    .unwrap_or_else(|p| p.into_inner()) = Some(loaded.clone());
                tracing::info!(plugin = %source.name, world = %source.kind, digest = %loaded.digest, "plugin active");
                if let Some(m) = &self.metrics {
                    m.set_active(source.kind.world(), &source.name, &loaded.digest);
                }
            }
            Err(e) => {
                tracing::warn!(plugin = %source.name, world = %source.kind, error = %e, "plugin rejected; the previous one keeps serving");
                if let Some(m) = &self.metrics {
                    m.rejections
                        .get_or_create(&PluginRejection {
                            world: source.kind.world().into(),
                            reason: e.kind().into(),
                        })
                        .inc();
                }
            }
        }
        result
    }

    fn load(&self, source: &Source) -> Result<Arc<Loaded>, PluginError> {
        let wasm = decode(&source.wasm)?;
        let actual = sha256_hex(&wasm);
        if !actual.eq_ignore_ascii_case(source.digest.trim()) {
            return Err(PluginError::DigestMismatch {
                expected: source.digest.trim().to_owned(),
                actual,
            });
        }
        match &*self.trust.read().unwrap_or_else(|p| p.into_inner()) {
            Trust::Off => {}
            Trust::Required(root) => root.verify(source)?,
            Trust::Unreadable(why) => {
                return Err(PluginError::Unsigned {
                    plugin: source.name.clone(),
                    why: format!("the trust root cannot be read: {why}"),
                });
            }
        }
        if !source.config.trim().is_empty() {
            serde_json::from_str::<serde_json::Value>(&source.config).map_err(|e| {
                PluginError::Invalid(format!("{} is not JSON: {e}", super::CONFIG_KEY))
            })?;
        }
        let (component, cached) = self.runtime.compile(&wasm, &actual)?;
        if !cached {
            self.compiled.fetch_add(1, Ordering::Relaxed);
        }
        let loaded = Arc::new(self.runtime.link(
            &source.name,
            source.kind,
            &component,
            source.config.clone(),
            actual,
        )?);
        self_test(&loaded)?;
        Ok(loaded)
    }

    /// Stops using plugin `name` for `kind`, active or shadow (its ConfigMap is gone).
    pub fn remove(&self, kind: Kind, name: &str) -> bool {
        self.remember(kind, name, None);
        let shadow = self.remove_shadow(kind, name);
        self.remove_active(kind, name) || shadow
    }

    fn remove_shadow(&self, kind: Kind, name: &str) -> bool {
        let removed = clear(&self.shadow_slots[slot(kind)], name);
        if removed {
            tracing::info!(plugin = name, world = %kind, "shadow plugin removed");
        }
        removed
    }

    /// Plugin `name` no longer serves `kind`: the native default does.
    fn remove_active(&self, kind: Kind, name: &str) -> bool {
        let removed = clear(&self.slots[slot(kind)], name);
        if removed {
            tracing::info!(plugin = name, world = %kind, "plugin removed; the native default serves");
            if let Some(m) = &self.metrics {
                m.clear_active(kind.world());
            }
        }
        removed
    }

    fn observe(&self, kind: Kind, plugin: &str, started: Instant, ok: bool) {
        if let Some(m) = &self.metrics {
            let labels = PluginLabels {
                world: kind.world().into(),
                plugin: plugin.into(),
                result: if ok { "ok" } else { "error" }.into(),
            };
            m.calls.get_or_create(&labels).inc();
            m.duration
                .get_or_create(&labels)
                .observe(started.elapsed().as_secs_f64());
        }
    }
}

/// A small realistic input per world; a plugin that fails it never serves.
pub(crate) fn self_test(loaded: &Loaded) -> Result<(), PluginError> {
    let invalid = |detail: String| PluginError::InvalidOutput {
        plugin: loaded.name.clone(),
        detail,
    };
    match loaded.kind {
        Kind::Selector => {
            let types = fixture_types();
            let catalog = Catalog::new(&types);
            let candidates: Vec<Candidate<'_>> = (0..types.len())
                .map(|i| Candidate::available(&catalog, i))
                .collect();
            let req = RankRequest {
                node_pool: "self-test",
                requests: Resources::new(500, 1 << 30, 1),
                catalog,
                candidates: &candidates,
            };
            let order = loaded.rank(&convert::catalog(&catalog), &convert::rank_input(&req))?;
            let order: Vec<usize> = order.into_iter().map(|i| i as usize).collect();
            ranker::validate(&loaded.name, &order, candidates.len())
                .map_err(|e| invalid(e.to_string()))?;
        }
        Kind::Scorer => {
            let candidates = fixture_candidates();
            let scores = loaded.score(&convert::score_input(&candidates))?;
            native_scorer::validate(&loaded.name, &scores, candidates.len())
                .map_err(|e| invalid(e.to_string()))?;
        }
        Kind::Userdata => {
            let input = fixture_userdata();
            let text = loaded.render(&convert::userdata_input(&input, "self-test"))?;
            native_userdata::validate(&text, loaded.bounds().userdata_bytes)
                .map_err(|e| invalid(e.to_string()))?;
        }
    }
    Ok(())
}

fn fixture_types() -> Vec<InstanceType> {
    [
        ("m2a.large", 2u64, 8u64, 100_000u64),
        ("m2a.xlarge", 4, 16, 200_000),
        ("c2a.large", 2, 4, 80_000),
    ]
    .into_iter()
    .map(|(name, cpu, mem, price)| {
        InstanceType::new(
            name,
            Resources::new(cpu * 1000, mem << 30, 110),
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

fn fixture_candidates() -> Vec<ScoreCandidate> {
    (0..2)
        .map(|i| ScoreCandidate {
            node_name: format!("self-test-{i}"),
            instance_type: "m2a.large".into(),
            node_pool: "self-test".into(),
            zone: "kr-central-2-a".into(),
            capacity_type: "on-demand".into(),
            price_micros: 100_000,
            cpu_utilisation_permille: 200 + 300 * i,
            memory_utilisation_permille: 300,
            age_seconds: 3600,
            pod_count: 2,
            disruption_cost: 2.0,
            pods_fit_elsewhere: i == 0,
            replacement_price_micros: (i == 1).then_some(50_000),
            reason: Reason::Underutilized,
        })
        .collect()
}

fn fixture_userdata() -> UserdataInput {
    UserdataInput {
        api_endpoint: "https://10.0.0.1:6443".into(),
        ca_pem: "-----BEGIN CERTIFICATE-----\nU0VMRi1URVNU\n-----END CERTIFICATE-----\n".into(),
        ca_hash: format!("sha256:{}", "0".repeat(64)),
        bootstrap_token: "abcdef.0123456789abcdef".into(),
        kubernetes_version: "1.35".into(),
        node_name: "self-test".into(),
        labels: [(label::NODEPOOL.to_owned(), "self-test".to_owned())].into(),
        taints: Vec::new(),
        startup_taints: Vec::new(),
        kubelet_args: Default::default(),
        cni: "cilium".into(),
    }
}

/// The instance-selector seam: the active plugin, else the native cheapest-fit ranker. A
/// shadow selector is offered the decision after it is made.
pub struct PluginRanker {
    pub registry: Arc<Registry>,
}

impl PluginRanker {
    /// `plugin`'s ranking of `input` (the WIT form of `request`), checked; the native ranker
    /// answers when it fails.
    fn serve(
        &self,
        plugin: &Loaded,
        catalog: &SelectorCatalog,
        input: &types::RankInput,
        request: &RankRequest<'_>,
    ) -> Result<Vec<usize>, RankError> {
        let started = Instant::now();
        let result = plugin
            .rank(catalog, input)
            .map_err(|e| RankError::Failed {
                ranker: plugin.name.clone(),
                message: e.to_string(),
            })
            .and_then(|order| {
                let order: Vec<usize> = order.into_iter().map(|i| i as usize).collect();
                ranker::validate(&plugin.name, &order, request.candidates.len()).map(|_| order)
            });
        self.registry
            .observe(Kind::Selector, &plugin.name, started, result.is_ok());
        result.or_else(|e| {
            self.registry
                .fell_back(Kind::Selector, &plugin.name, &e.to_string());
            CheapestFitRanker.rank(request)
        })
    }
}

/// What ranks: a plugin and its digest, or the native ranker.
fn describe(plugin: Option<&Loaded>) -> String {
    match plugin {
        Some(p) => format!(
            "plugin {} (sha256 {})",
            p.name,
            &p.digest[..12.min(p.digest.len())]
        ),
        None => CheapestFitRanker.name().to_owned(),
    }
}

impl InstanceRanker for PluginRanker {
    fn name(&self) -> &str {
        "plugin:instance-selector"
    }

    fn serving(&self, node_pool: &str) -> String {
        describe(self.registry.serving(Kind::Selector, node_pool).as_deref())
    }

    fn rank(&self, request: &RankRequest<'_>) -> Result<Vec<usize>, RankError> {
        let plugin = self.registry.serving(Kind::Selector, request.node_pool);
        // The WIT form of the request, converted once: the serving plugin, the shadow and the
        // decision log all take it.
        let catalog = self.registry.selector_catalog(&request.catalog);
        let input = convert::rank_input(request);
        let answer = match &plugin {
            Some(p) => self.serve(p, &catalog, &input, request),
            None => CheapestFitRanker.rank(request),
        };
        if let Ok(chosen) = &answer {
            if let Some(shadow) = self.registry.shadow(Kind::Selector) {
                self.registry.shadows.offer(
                    shadow,
                    Decision::Rank {
                        catalog: catalog.clone(),
                        input: input.clone(),
                        chosen: chosen.clone(),
                    },
                );
            }
            self.registry.decisions.record(
                catalog,
                request.node_pool,
                describe(plugin.as_deref()),
                input,
                chosen,
            );
        }
        answer
    }
}

/// The consolidation-scorer seam: the active plugin, else the native savings-per-disruption.
/// A shadow scorer is offered the decision after it is made.
pub struct PluginScorer {
    pub registry: Arc<Registry>,
}

impl PluginScorer {
    /// Each candidate scored by the plugin serving its NodePool: one call per plugin, over
    /// its candidates (scores of different plugins are then ranked together).
    fn serve(&self, candidates: &[ScoreCandidate]) -> Result<Vec<f64>, ScoreError> {
        let mut groups: Vec<(Option<Arc<Loaded>>, Vec<usize>)> = Vec::new();
        for (i, c) in candidates.iter().enumerate() {
            let plugin = self.registry.serving(Kind::Scorer, &c.node_pool);
            let same = |g: &&mut (Option<Arc<Loaded>>, Vec<usize>)| match (&g.0, &plugin) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            };
            match groups.iter_mut().find(same) {
                Some(g) => g.1.push(i),
                None => groups.push((plugin, vec![i])),
            }
        }
        if groups.len() <= 1 {
            let plugin = match groups.pop() {
                Some((plugin, _)) => plugin,
                None => self.registry.active(Kind::Scorer),
            };
            return self.score_with(plugin, candidates);
        }
        let mut scores = vec![0.0; candidates.len()];
        for (plugin, indices) in groups {
            let subset: Vec<ScoreCandidate> =
                indices.iter().map(|&i| candidates[i].clone()).collect();
            for (score, i) in self.score_with(plugin, &subset)?.into_iter().zip(indices) {
                scores[i] = score;
            }
        }
        Ok(scores)
    }

    fn score_with(
        &self,
        plugin: Option<Arc<Loaded>>,
        candidates: &[ScoreCandidate],
    ) -> Result<Vec<f64>, ScoreError> {
        let Some(plugin) = plugin else {
            return SavingsPerDisruption.score(candidates);
        };
        let started = Instant::now();
        let result = plugin
            .score(&convert::score_input(candidates))
            .map_err(|e| ScoreError::Failed {
                scorer: plugin.name.clone(),
                message: e.to_string(),
            })
            .and_then(|s| native_scorer::validate(&plugin.name, &s, candidates.len()).map(|_| s));
        self.registry
            .observe(Kind::Scorer, &plugin.name, started, result.is_ok());
        result.or_else(|e| {
            self.registry
                .fell_back(Kind::Scorer, &plugin.name, &e.to_string());
            SavingsPerDisruption.score(candidates)
        })
    }
}

impl ConsolidationScorer for PluginScorer {
    fn name(&self) -> &str {
        "plugin:consolidation-scorer"
    }

    fn score(&self, candidates: &[ScoreCandidate]) -> Result<Vec<f64>, ScoreError> {
        let answer = self.serve(candidates);
        if let (Ok(scores), Some(shadow)) = (&answer, self.registry.shadow(Kind::Scorer)) {
            self.registry.shadows.offer(
                shadow,
                Decision::Score {
                    input: convert::score_input(candidates),
                    scores: scores.clone(),
                },
            );
        }
        answer
    }
}

/// The userdata seam: the active plugin, else the native kubeadm renderer. A shadow renderer
/// is offered the decision after it is made.
pub struct PluginRenderer {
    pub registry: Arc<Registry>,
}

fn pool_of(input: &UserdataInput) -> String {
    input
        .labels
        .get(label::NODEPOOL)
        .cloned()
        .unwrap_or_default()
}

impl PluginRenderer {
    fn serve(&self, input: &UserdataInput) -> Result<String, UserdataError> {
        let Some(plugin) = self.registry.serving(Kind::Userdata, &pool_of(input)) else {
            return KubeadmRenderer.render(input);
        };
        let started = Instant::now();
        let limit = self.registry.runtime.bounds.userdata_bytes;
        let result = plugin
            .render(&convert::userdata_input(input, &pool_of(input)))
            .and_then(|text| {
                native_userdata::validate(&text, limit)
                    .map(|_| text)
                    .map_err(|e| PluginError::InvalidOutput {
                        plugin: plugin.name.clone(),
                        detail: e.to_string(),
                    })
            });
        self.registry
            .observe(Kind::Userdata, &plugin.name, started, result.is_ok());
        result.or_else(|e| {
            self.registry
                .fell_back(Kind::Userdata, &plugin.name, &e.to_string());
            KubeadmRenderer.render(input)
        })
    }
}

impl UserdataRenderer for PluginRenderer {
    fn name(&self) -> &str {
        "plugin:userdata-renderer"
    }

    fn render(&self, input: &UserdataInput) -> Result<String, UserdataError> {
        let answer = self.serve(input);
        if let (Ok(text), Some(shadow)) = (&answer, self.registry.shadow(Kind::Userdata)) {
            self.registry.shadows.offer(
                shadow,
                Decision::Render {
                    input: convert::userdata_input(input, &pool_of(input)),
                    text: text.clone(),
                },
            );
        }
        answer
    }
}
