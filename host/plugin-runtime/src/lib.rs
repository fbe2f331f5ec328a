//! Policy plugins: WebAssembly components loaded from ConfigMaps, verified by sha256, compiled
//! once (cached on disk), self-tested, and swapped atomically. A rejected plugin leaves the last
//! good one (or the native default) serving, and says why in an Event, a log line and a metric.
//!
//! * [`bindings`]: the three worlds and the `host` imports (no WASI at all).
//! * [`limits`]: per-call memory cap, epoch deadline, log cap.
//! * [`engine`]: the engine, compile cache, and calling a loaded plugin.
//! * [`convert`]: host types to WIT records.
//! * [`registry`]: the active plugin per role, and the adapters the controllers call (a call
//!   that fails is answered by the native default, counted and reported).
//! * [`replay`]: one call outside the seams, same bounds and checks (`kk-plugin run`/`test`).
//! * [`shadow`]: plugins that answer every decision beside the serving one and never act.
//! * [`trust`]: optional ed25519 signatures a plugin must carry to load.
//! * [`metrics`]: calls, durations, rejections, the active plugin per world.
//! * [`watcher`]: ConfigMaps in, registry updates and Events out.

pub mod bindings;
pub mod convert;
pub mod engine;
pub mod limits;
pub mod metrics;
pub mod registry;
pub mod replay;
pub mod shadow;
pub mod trust;
pub mod watcher;

use std::time::Duration;

pub use engine::{Allocator, Loaded, Runtime};
pub use limits::Bounds;
pub use registry::{Fallback, Mode, PluginRanker, PluginRenderer, PluginScorer, Registry, Source};
pub use trust::TrustRoot;

/// The ConfigMap binaryData key of the component (gzip or plain).
pub const WASM_KEY: &str = "plugin.wasm";
/// The ConfigMap data key of the plugin's JSON settings.
pub const CONFIG_KEY: &str = "config.json";

/// The role a plugin fills: one world each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Selector,
    Scorer,
    Userdata,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Selector, Kind::Scorer, Kind::Userdata];

    /// The WIT world name (and the ConfigMap label value).
    pub fn world(&self) -> &'static str {
        match self {
            Kind::Selector => "instance-selector",
            Kind::Scorer => "consolidation-scorer",
            Kind::Userdata => "userdata-renderer",
        }
    }

    /// The NodePool annotation naming the plugin of this world for its nodes.
    pub fn nodepool_annotation(&self) -> &'static str {
        use kk_apis::names::annotation;
        match self {
            Kind::Selector => annotation::NODEPOOL_INSTANCE_SELECTOR,
            Kind::Scorer => annotation::NODEPOOL_CONSOLIDATION_SCORER,
            Kind::Userdata => annotation::NODEPOOL_USERDATA_RENDERER,
        }
    }

    pub fn from_world(world: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.world() == world)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.world())
    }
}

/// Why a plugin was refused or a call failed. Messages name the plugin and what to fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PluginError {
    #[error("plugin engine: {0}")]
    Engine(String),
    #[error("plugin cache: {0}")]
    Cache(String),
    #[error(
        "digest mismatch: the karpenter.kakaocloud.com/plugin-sha256 annotation says {expected}, the component is {actual}"
    )]
    DigestMismatch { expected: String, actual: String },
    #[error("invalid plugin ConfigMap: {0}")]
    Invalid(String),
    #[error("not a valid component: {0}")]
    Compile(String),
    #[error("plugin {plugin} is not trusted: {why}")]
    Unsigned { plugin: String, why: String },
    #[error("plugin {plugin} does not implement the {expected} world: {detail}")]
    WrongWorld {
        plugin: String,
        expected: Kind,
        detail: String,
    },
    #[error("plugin {plugin} trapped: {detail}")]
    Trap { plugin: String, detail: String },
    #[error("plugin {plugin} ran past its deadline ({after:?})")]
    Timeout { plugin: String, after: Duration },
    #[error("plugin {plugin} refused the input: {message}")]
    Refused { plugin: String, message: String },
    #[error("plugin {plugin} returned too much: {detail}")]
    OversizedOutput { plugin: String, detail: String },
    #[error("plugin {plugin} returned an invalid result: {detail}")]
    InvalidOutput { plugin: String, detail: String },
}

impl PluginError {
    fn engine(e: wasmtime::Error) -> Self {
        PluginError::Engine(format!("{e:#}"))
    }

    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            PluginError::Engine(_) | PluginError::Cache(_) => "engine",
            PluginError::DigestMismatch { .. } => "digest",
            PluginError::Invalid(_) => "invalid",
            PluginError::Compile(_) => "compile",
            PluginError::Unsigned { .. } => "signature",
            PluginError::WrongWorld { .. } => "world",
            PluginError::Trap { .. } => "trap",
            PluginError::Timeout { .. } => "timeout",
            PluginError::Refused { .. } => "refused",
            PluginError::OversizedOutput { .. } => "oversized",
            PluginError::InvalidOutput { .. } => "invalid_output",
        }
    }
}
