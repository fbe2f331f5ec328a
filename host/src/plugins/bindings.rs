//! Typed bindings of the three plugin worlds (`wit/karpenter.wit`), one module per world, and
//! the `host` interface every plugin imports: a capped structured log and its JSON config.
//! Nothing else is linked: no WASI, so a plugin has no filesystem, network, clock or randomness.

use super::limits::PluginState;

pub mod selector {
    wasmtime::component::bindgen!({ path: "../wit", world: "instance-selector" });
}

pub mod scorer {
    wasmtime::component::bindgen!({ path: "../wit", world: "consolidation-scorer" });
}

pub mod userdata {
    wasmtime::component::bindgen!({ path: "../wit", world: "userdata-renderer" });
}

/// The `host` and `types` imports for one world's generated module.
macro_rules! host_imports {
    ($world:ident) => {
        impl $world::kakaocloud::karpenter::types::Host for PluginState {}

        impl $world::kakaocloud::karpenter::host::Host for PluginState {
            fn log(&mut self, level: $world::kakaocloud::karpenter::host::Level, message: String) {
                use $world::kakaocloud::karpenter::host::Level;
                let level = match level {
                    Level::Trace => tracing::Level::TRACE,
                    Level::Debug => tracing::Level::DEBUG,
                    Level::Info => tracing::Level::INFO,
                    Level::Warn => tracing::Level::WARN,
                    Level::Error => tracing::Level::ERROR,
                };
                self.log(level, &message);
            }

            fn config(&mut self) -> String {
                self.config.clone()
            }
        }
    };
}

host_imports!(selector);
host_imports!(scorer);
host_imports!(userdata);
