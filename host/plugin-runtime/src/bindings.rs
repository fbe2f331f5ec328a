//! Typed bindings of the three plugin worlds (`wit/karpenter.wit`), one module per world, and
//! the `host` interface every plugin imports: a capped structured log and its JSON config.
//! Nothing else is linked: no WASI, so a plugin has no filesystem, network, clock or randomness.
//!
//! The shared interfaces (`types`, `host`) are generated once, in [`selector`], and the other
//! worlds reuse them through bindgen's `with:`, so there is one Rust type per WIT record and the
//! conversions in [`super::convert`] are written once.

use super::limits::PluginState;

pub mod selector {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "instance-selector",
        // Recorded decisions and authors' cases are these records as JSON (`replay`).
        additional_derives: [serde::Serialize, serde::Deserialize],
    });
}

pub mod scorer {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "consolidation-scorer",
        with: {
            "kakaocloud:karpenter/types": crate::bindings::types,
            "kakaocloud:karpenter/host": crate::bindings::host,
        },
    });
}

pub mod userdata {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "userdata-renderer",
        with: {
            "kakaocloud:karpenter/types": crate::bindings::types,
            "kakaocloud:karpenter/host": crate::bindings::host,
        },
    });
}

/// The WIT `host` interface plugins import.
pub use selector::kakaocloud::karpenter::host;
/// The WIT `types` interface: every record the worlds exchange.
pub use selector::kakaocloud::karpenter::types;

impl types::Host for PluginState {}

impl host::Host for PluginState {
    fn log(&mut self, level: host::Level, message: String) {
        let level = match level {
            host::Level::Trace => tracing::Level::TRACE,
            host::Level::Debug => tracing::Level::DEBUG,
            host::Level::Info => tracing::Level::INFO,
            host::Level::Warn => tracing::Level::WARN,
            host::Level::Error => tracing::Level::ERROR,
        };
        self.log(level, &message);
    }

    fn config(&mut self) -> String {
        self.config.clone()
    }
}
