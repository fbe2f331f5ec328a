//! The wasmtime engine plugins run on, compiling with an on-disk artifact cache, and one loaded
//! plugin: its component pre-linked against its world, each call in a bounded store. Selector
//! instances stay warm between calls with the catalog they were given; the other worlds get a
//! fresh instance per call, and an instance that trapped or timed out is never called again.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Weak};
use std::time::Instant;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, Store};

use super::bindings::{scorer, selector, types, userdata};
use super::convert::SelectorCatalog;
use super::limits::{self, Bounds, EPOCH_TICK, PluginState};
use super::{Kind, PluginError};

/// The shared engine: component model, epoch interruption, Cranelift at speed.
pub struct Runtime {
    pub engine: Engine,
    pub bounds: Bounds,
    cache_dir: Option<PathBuf>,
    selector_linker: Linker<PluginState>,
    scorer_linker: Linker<PluginState>,
    userdata_linker: Linker<PluginState>,
    /// Compiles that overran their deadline and still run (their threads cannot be stopped).
    overrunning_compiles: Arc<AtomicUsize>,
}

/// How instances get their memories and tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocator {
    /// Pre-reserved slots reused call after call: every call instantiates afresh, so this is
    /// where the pooling allocator pays. Falls back to on-demand when the host refuses the
    /// reservation.
    Pooling,
    /// mmap per instance (for comparison, and hosts with little address space).
    OnDemand,
}

/// Calls that may run at once under the pooling allocator (beyond it an instantiation fails
/// and that one call errors); the controllers call plugins from a few threads.
pub const MAX_CONCURRENT_CALLS: u32 = 32;

fn base_config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true).epoch_interruption(true);
    config.cranelift_opt_level(wasmtime::OptLevel::Speed);
    config
}

fn pooled_engine(bounds: &Bounds) -> wasmtime::Result<Engine> {
    let mut pool = wasmtime::PoolingAllocationConfig::new();
    pool.total_component_instances(MAX_CONCURRENT_CALLS)
        .total_core_instances(MAX_CONCURRENT_CALLS * 8)
        .total_memories(MAX_CONCURRENT_CALLS * 2)
        .total_tables(MAX_CONCURRENT_CALLS * 8)
        .max_memory_size(bounds.memory_bytes);
    let mut config = base_config();
    config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&config)
}

impl Runtime {
    /// A runtime whose compiled artifacts are kept in `cache_dir` (if given), so a restart
    /// deserializes instead of recompiling. Uses the pooling allocator where the host allows it.
    pub fn new(bounds: Bounds, cache_dir: Option<PathBuf>) -> Result<Arc<Runtime>, PluginError> {
        Self::with_allocator(bounds, cache_dir, Allocator::Pooling)
    }

    pub fn with_allocator(
        bounds: Bounds,
        cache_dir: Option<PathBuf>,
        allocator: Allocator,
    ) -> Result<Arc<Runtime>, PluginError> {
        let engine = match allocator {
            Allocator::Pooling => pooled_engine(&bounds).or_else(|e| {
                tracing::warn!(error = %e, "pooling allocator unavailable; instantiating on demand");
                Engine::new(&base_config())
            }),
            Allocator::OnDemand => Engine::new(&base_config()),
        }
        .map_err(PluginError::engine)?;
        let mut selector_linker = Linker::new(&engine);
        selector::InstanceSelector::add_to_linker::<_, HasSelf<_>>(&mut selector_linker, |s| s)
            .map_err(PluginError::engine)?;
        let mut scorer_linker = Linker::new(&engine);
        scorer::ConsolidationScorer::add_to_linker::<_, HasSelf<_>>(&mut scorer_linker, |s| s)
            .map_err(PluginError::engine)?;
        let mut userdata_linker = Linker::new(&engine);
        userdata::UserdataRenderer::add_to_linker::<_, HasSelf<_>>(&mut userdata_linker, |s| s)
            .map_err(PluginError::engine)?;
        if let Some(dir) = &cache_dir {
            std::fs::create_dir_all(dir).map_err(|e| PluginError::Cache(e.to_string()))?;
        }
        let runtime = Arc::new(Runtime {
            engine,
            bounds,
            cache_dir,
            selector_linker,
            scorer_linker,
            userdata_linker,
            overrunning_compiles: Arc::default(),
        });
        // Without the ticker no deadline ever fires: a looping plugin would hang its caller.
        spawn_ticker(Arc::downgrade(&runtime))
            .map_err(|e| PluginError::Engine(format!("cannot start the epoch ticker: {e}")))?;
        Ok(runtime)
    }

    /// Where the compiled artifact of `digest` lives: keyed by the component's digest and the
    /// engine's compatibility hash (another wasmtime or other settings never reuse it).
    fn artifact_path(&self, digest: &str) -> Option<PathBuf> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.engine.precompile_compatibility_hash().hash(&mut h);
        let dir = self.cache_dir.as_ref()?;
        Some(dir.join(format!("{digest}-{:016x}.cwasm", h.finish())))
    }

    /// Compiles `wasm` (whose sha256 is `digest`), or loads its cached artifact.
    /// Returns the component and whether it came from the cache.
    pub fn compile(&self, wasm: &[u8], digest: &str) -> Result<(Component, bool), PluginError> {
        if let Some(path) = self.artifact_path(digest)
            && let Some(artifact) = read_verified(&path)
        {
            // SAFETY: the bytes were written by `Component::serialize` of this engine
            // configuration (the name carries the compatibility hash) and their sha256, stored
            // with them, still matches: a truncated or altered entry never reaches here.
            #[allow(unsafe_code)]
            let cached = unsafe { Component::deserialize(&self.engine, &artifact) };
            match cached {
                Ok(c) => return Ok((c, true)),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "ignoring unreadable plugin cache entry")
                }
            }
        }
        let component = self.compile_bounded(wasm)?;
        if let Some(path) = self.artifact_path(digest) {
            match component.serialize() {
                Ok(bytes) => write_atomically(&path, &bytes),
                Err(e) => tracing::warn!(error = %e, "could not serialize compiled plugin"),
            }
        }
        Ok((component, false))
    }

    /// Compiles on a thread of its own under the compile deadline, after [`limits::inspect`]
    /// bounded what the compiler sees. A compile past the deadline is refused; its thread cannot
    /// be stopped and finishes on its own, so while one still runs no other compile starts.
    fn compile_bounded(&self, wasm: &[u8]) -> Result<Component, PluginError> {
        limits::inspect(wasm)?;
        if self.overrunning_compiles.load(Ordering::Acquire) > 0 {
            return Err(PluginError::Compile(
                "a compile that overran its deadline is still running; try again later".into(),
            ));
        }
        let slot = Arc::new((
            std::sync::Mutex::new(CompileSlot::default()),
            Condvar::new(),
        ));
        let (engine, wasm, theirs) = (self.engine.clone(), wasm.to_vec(), slot.clone());
        let overrunning = self.overrunning_compiles.clone();
        std::thread::Builder::new()
            .name("plugin-compile".into())
            .spawn(move || {
                let result = Component::new(&engine, &wasm);
                let (lock, done) = &*theirs;
                let mut slot = lock.lock().unwrap_or_else(|p| p.into_inner());
                if slot.abandoned {
                    overrunning.fetch_sub(1, Ordering::AcqRel);
                } else {
                    slot.result = Some(result);
                    done.notify_one();
                }
            })
            .map_err(|e| PluginError::Engine(format!("cannot start a compile thread: {e}")))?;
        let deadline = self.bounds.compile_deadline;
        let (lock, done) = &*slot;
        let guard = lock.lock().unwrap_or_else(|p| p.into_inner());
        let (mut guard, _) = done
            .wait_timeout_while(guard, deadline, |s| s.result.is_none())
            .unwrap_or_else(|p| p.into_inner());
        match guard.result.take() {
            Some(result) => result.map_err(|e| PluginError::Compile(format!("{e:#}"))),
            None => {
                guard.abandoned = true;
                self.overrunning_compiles.fetch_add(1, Ordering::AcqRel);
                Err(PluginError::Compile(format!(
                    "compiling took longer than {deadline:?}; refused"
                )))
            }
        }
    }

    /// Links `component` against `kind`'s world; fails when it is another world or imports
    /// anything but the `host` interface (WASI included).
    pub fn link(
        self: &Arc<Self>,
        name: &str,
        kind: Kind,
        component: &Component,
        config: String,
        digest: String,
    ) -> Result<Loaded, PluginError> {
        let wrong = |e: wasmtime::Error| PluginError::WrongWorld {
            plugin: name.to_owned(),
            expected: kind,
            detail: format!("{e:#}"),
        };
        let pre = match kind {
            Kind::Selector => Pre::Selector(
                selector::InstanceSelectorPre::new(
                    self.selector_linker
                        .instantiate_pre(component)
                        .map_err(wrong)?,
                )
                .map_err(wrong)?,
            ),
            Kind::Scorer => Pre::Scorer(
                scorer::ConsolidationScorerPre::new(
                    self.scorer_linker
                        .instantiate_pre(component)
                        .map_err(wrong)?,
                )
                .map_err(wrong)?,
            ),
            Kind::Userdata => Pre::Userdata(
                userdata::UserdataRendererPre::new(
                    self.userdata_linker
                        .instantiate_pre(component)
                        .map_err(wrong)?,
                )
                .map_err(wrong)?,
            ),
        };
        Ok(Loaded {
            name: name.to_owned(),
            kind,
            digest,
            config,
            pre,
            runtime: self.clone(),
            idle_selectors: Default::default(),
        })
    }
}

/// What a compile thread hands back, unless its caller gave up waiting.
#[derive(Default)]
struct CompileSlot {
    result: Option<wasmtime::Result<Component>>,
    abandoned: bool,
}

/// Compiled artifacts kept in the cache directory; older ones are removed.
const CACHE_ENTRIES: usize = 16;

/// A cache entry is the artifact's sha256 followed by the artifact.
fn read_verified(path: &Path) -> Option<Vec<u8>> {
    let bytes = std::fs::read(path).ok()?;
    let (sum, artifact) = bytes.split_at_checked(32)?;
    if Sha256::digest(artifact).as_slice() == sum {
        return Some(artifact.to_vec());
    }
    tracing::warn!(path = %path.display(), "plugin cache entry fails its checksum; recompiling");
    let _ = std::fs::remove_file(path);
    None
}

fn write_atomically(path: &Path, artifact: &[u8]) {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut bytes = Sha256::digest(artifact).to_vec();
    bytes.extend_from_slice(artifact);
    if std::fs::write(&tmp, &bytes)
        .and_then(|_| std::fs::rename(&tmp, path))
        .is_err()
    {
        let _ = std::fs::remove_file(&tmp);
        tracing::warn!(path = %path.display(), "could not write plugin cache entry");
        return;
    }
    if let Some(dir) = path.parent() {
        prune(dir, CACHE_ENTRIES);
    }
}

/// Keeps the `keep` most recently written artifacts of `dir`.
fn prune(dir: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut artifacts: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .collect();
    if artifacts.len() <= keep {
        return;
    }
    artifacts.sort_by_key(|(modified, _)| std::cmp::Reverse(*modified));
    for (_, old) in artifacts.into_iter().skip(keep) {
        let _ = std::fs::remove_file(old);
    }
}

/// Advances the epoch every tick while the runtime lives (a plain thread: calls are synchronous).
fn spawn_ticker(runtime: Weak<Runtime>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("plugin-epoch".into())
        .spawn(move || {
            while let Some(rt) = runtime.upgrade() {
                rt.engine.increment_epoch();
                drop(rt);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .map(|_| ())
}

enum Pre {
    Selector(selector::InstanceSelectorPre<PluginState>),
    Scorer(scorer::ConsolidationScorerPre<PluginState>),
    Userdata(userdata::UserdataRendererPre<PluginState>),
}

/// A plugin ready to call.
pub struct Loaded {
    pub name: String,
    pub kind: Kind,
    /// sha256 of the uncompressed component.
    pub digest: String,
    pub config: String,
    pre: Pre,
    runtime: Arc<Runtime>,
    /// Idle selector instances from earlier calls that returned normally. `rank` runs for every
    /// node the provisioner opens, so it skips instantiation; an instance that trapped or timed
    /// out is dropped, never reused.
    idle_selectors: std::sync::Mutex<Vec<WarmSelector>>,
}

/// A selector instance and the fingerprint of the catalog it holds.
struct WarmSelector {
    store: Store<PluginState>,
    instance: selector::InstanceSelector,
    catalog: Option<u64>,
}

/// Idle instances kept per plugin (each holds a pooling-allocator slot).
const MAX_IDLE: usize = 4;

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("digest", &self.digest)
            .finish()
    }
}

impl Loaded {
    /// The bounds every call of this plugin runs under.
    pub fn bounds(&self) -> &Bounds {
        &self.runtime.bounds
    }

    fn store(&self) -> Store<PluginState> {
        let bounds = &self.runtime.bounds;
        let mut store = Store::new(
            &self.runtime.engine,
            PluginState::new(&self.name, &self.config, bounds),
        );
        store.limiter(|s| &mut s.limits);
        self.arm(&mut store);
        store.epoch_deadline_trap();
        store
    }

    /// A fresh deadline (relative to now) and log budget for the next call.
    fn arm(&self, store: &mut Store<PluginState>) {
        let bounds = &self.runtime.bounds;
        let ticks = (bounds.deadline.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64;
        store.set_epoch_deadline(ticks);
        store.data_mut().begin_call();
    }

    fn trap(&self, e: wasmtime::Error, started: Instant) -> PluginError {
        let timed_out = e.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt);
        if timed_out {
            PluginError::Timeout {
                plugin: self.name.clone(),
                after: started.elapsed(),
            }
        } else {
            PluginError::Trap {
                plugin: self.name.clone(),
                detail: format!("{e:#}"),
            }
        }
    }

    fn refused(&self, message: String) -> PluginError {
        PluginError::Refused {
            plugin: self.name.clone(),
            message: message.chars().take(500).collect(),
        }
    }

    /// `rank` of an instance-selector plugin: raw indices, validated by the caller. The
    /// instance gets `catalog` first unless it already holds it.
    pub fn rank(
        &self,
        catalog: &SelectorCatalog,
        input: &types::RankInput,
    ) -> Result<Vec<u32>, PluginError> {
        let Pre::Selector(pre) = &self.pre else {
            return Err(self.not(Kind::Selector));
        };
        let started = Instant::now();
        let idle = self
            .idle_selectors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop();
        let mut warm = match idle {
            Some(mut warm) => {
                self.arm(&mut warm.store);
                warm
            }
            None => {
                let mut store = self.store();
                let instance = pre
                    .instantiate(&mut store)
                    .map_err(|e| self.trap(e, started))?;
                WarmSelector {
                    store,
                    instance,
                    catalog: None,
                }
            }
        };
        if warm.catalog != Some(catalog.fingerprint) {
            warm.instance
                .call_load_catalog(&mut warm.store, &catalog.types)
                .map_err(|e| self.trap(e, started))?
                .map_err(|m| self.refused(format!("load-catalog: {m}")))?;
            warm.catalog = Some(catalog.fingerprint);
        }
        let out = warm
            .instance
            .call_rank(&mut warm.store, input)
            .map_err(|e| self.trap(e, started))?;
        {
            let mut idle = self
                .idle_selectors
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if idle.len() < MAX_IDLE {
                idle.push(warm);
            }
        }
        let order = out.map_err(|m| self.refused(m))?;
        if order.len() > input.candidates.len() {
            return Err(PluginError::OversizedOutput {
                plugin: self.name.clone(),
                detail: format!(
                    "{} indices for {} candidates",
                    order.len(),
                    input.candidates.len()
                ),
            });
        }
        Ok(order)
    }

    /// Instantiates the plugin in a fresh store and drops it: what a call without a warm
    /// instance pays first (benchmarks).
    pub fn instantiate_once(&self) -> Result<(), PluginError> {
        let started = Instant::now();
        let mut store = self.store();
        match &self.pre {
            Pre::Selector(pre) => pre.instantiate(&mut store).map(drop),
            Pre::Scorer(pre) => pre.instantiate(&mut store).map(drop),
            Pre::Userdata(pre) => pre.instantiate(&mut store).map(drop),
        }
        .map_err(|e| self.trap(e, started))
    }

    /// `score` of a consolidation-scorer plugin.
    pub fn score(&self, input: &types::ScoreInput) -> Result<Vec<f64>, PluginError> {
        let Pre::Scorer(pre) = &self.pre else {
            return Err(self.not(Kind::Scorer));
        };
        let started = Instant::now();
        let mut store = self.store();
        let out = pre
            .instantiate(&mut store)
            .and_then(|i| i.call_score(&mut store, input))
            .map_err(|e| self.trap(e, started))?;
        let scores = out.map_err(|m| self.refused(m))?;
        if scores.len() > input.candidates.len() {
            return Err(PluginError::OversizedOutput {
                plugin: self.name.clone(),
                detail: format!(
                    "{} scores for {} candidates",
                    scores.len(),
                    input.candidates.len()
                ),
            });
        }
        Ok(scores)
    }

    /// `render` of a userdata-renderer plugin.
    pub fn render(&self, input: &types::UserdataInput) -> Result<String, PluginError> {
        let Pre::Userdata(pre) = &self.pre else {
            return Err(self.not(Kind::Userdata));
        };
        let started = Instant::now();
        let mut store = self.store();
        let out = pre
            .instantiate(&mut store)
            .and_then(|i| i.call_render(&mut store, input))
            .map_err(|e| self.trap(e, started))?;
        let text = out.map_err(|m| self.refused(m))?;
        if text.len() > self.runtime.bounds.userdata_bytes {
            return Err(PluginError::OversizedOutput {
                plugin: self.name.clone(),
                detail: format!(
                    "{} bytes of userdata, limit {}",
                    text.len(),
                    self.runtime.bounds.userdata_bytes
                ),
            });
        }
        Ok(text)
    }

    fn not(&self, wanted: Kind) -> PluginError {
        PluginError::WrongWorld {
            plugin: self.name.clone(),
            expected: wanted,
            detail: format!("it is loaded as {}", self.kind),
        }
    }
}

/// Hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_cache_keeps_the_newest_entries_and_refuses_altered_ones() {
        let dir = std::env::temp_dir().join(format!("kk-cache-prune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let base = std::time::SystemTime::now() - Duration::from_secs(100);
        for i in 0..5u64 {
            let path = dir.join(format!("{i}.cwasm"));
            write_atomically(&path, format!("artifact {i}").as_bytes());
            let f = std::fs::File::options().write(true).open(&path).unwrap();
            f.set_modified(base + Duration::from_secs(i)).unwrap();
        }
        std::fs::write(dir.join("notes.txt"), "not an artifact").unwrap();
        prune(&dir, 2);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["3.cwasm", "4.cwasm", "notes.txt"]);
        assert_eq!(read_verified(&dir.join("4.cwasm")).unwrap(), b"artifact 4");
        let mut altered = std::fs::read(dir.join("3.cwasm")).unwrap();
        altered[40] ^= 1;
        std::fs::write(dir.join("3.cwasm"), altered).unwrap();
        assert!(read_verified(&dir.join("3.cwasm")).is_none());
        assert!(!dir.join("3.cwasm").exists(), "an altered entry is removed");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
