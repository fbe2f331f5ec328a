//! What one plugin call may use: a store per call with a memory cap (`StoreLimits`), an epoch
//! deadline (a background ticker advances the engine's epoch), and a bounded log.

use std::time::Duration;

use wasmtime::{StoreLimits, StoreLimitsBuilder};

/// Per-call bounds.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Linear memory a call may grow to.
    pub memory_bytes: usize,
    /// Wall time a call may run before it traps.
    pub deadline: Duration,
    /// Log lines a call may emit (more are dropped and counted).
    pub log_lines: usize,
    /// Characters kept of one log line.
    pub log_line_chars: usize,
    /// Largest rendered userdata accepted (KakaoCloud takes 16 KB of base64, 12 KiB raw).
    pub userdata_bytes: usize,
    /// Wall time compiling one component may take; a slower compile is refused.
    pub compile_deadline: Duration,
    /// Elements a table may grow to (a function table; growth beyond traps).
    pub table_elements: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            memory_bytes: 64 << 20,
            deadline: Duration::from_millis(200),
            log_lines: 100,
            log_line_chars: 1000,
            userdata_bytes: kk_engine::userdata::USERDATA_MAX_BYTES,
            compile_deadline: Duration::from_secs(30),
            table_elements: 10_000,
        }
    }
}

/// How often the engine's epoch advances; deadlines are counted in these ticks.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Store data of one call.
pub struct PluginState {
    pub plugin: String,
    pub config: String,
    pub limits: StoreLimits,
    logged: usize,
    dropped: usize,
    line_chars: usize,
    max_lines: usize,
}

impl PluginState {
    pub fn new(plugin: &str, config: &str, bounds: &Bounds) -> Self {
        PluginState {
            plugin: plugin.to_owned(),
            config: config.to_owned(),
            limits: StoreLimitsBuilder::new()
                .memory_size(bounds.memory_bytes)
                .table_elements(bounds.table_elements)
                .instances(4)
                .tables(8)
                .memories(2)
                .trap_on_grow_failure(true)
                .build(),
            logged: 0,
            dropped: 0,
            line_chars: bounds.log_line_chars,
            max_lines: bounds.log_lines,
        }
    }

    /// A plugin log line, as a tracing event with the plugin's name; capped per call.
    pub fn log(&mut self, level: tracing::Level, message: &str) {
        if self.logged >= self.max_lines {
            self.dropped += 1;
            return;
        }
        self.logged += 1;
        let message: String = message.chars().take(self.line_chars).collect();
        let plugin = self.plugin.as_str();
        match level {
            tracing::Level::ERROR => tracing::error!(plugin, "{message}"),
            tracing::Level::WARN => tracing::warn!(plugin, "{message}"),
            tracing::Level::INFO => tracing::info!(plugin, "{message}"),
            tracing::Level::DEBUG => tracing::debug!(plugin, "{message}"),
            _ => tracing::trace!(plugin, "{message}"),
        }
    }

    /// A new call on a reused instance: the log budget starts over.
    pub fn begin_call(&mut self) {
        self.logged = 0;
        self.dropped = 0;
    }

    /// Lines dropped by the cap during this call.
    pub fn dropped(&self) -> usize {
        self.dropped
    }
}

/// Core modules a component may carry (ours have one; adapters add a few).
pub const MAX_CORE_MODULES: usize = 16;
/// Functions across all core modules.
pub const MAX_FUNCTIONS: u64 = 100_000;
/// Bytes of one function body. The compiler's time and memory grow with the largest function
/// (register allocation is superlinear in it), so a huge body is a compile bomb; the largest
/// in our plugins is a few KiB.
pub const MAX_FUNCTION_BODY_BYTES: usize = 1 << 20;

/// Checks a component's shape before it is compiled, so the compiler only ever sees bounded
/// input: a parse error, too many modules or functions, or an oversized function body is a
/// [`PluginError::Compile`] naming the bound.
pub fn inspect(wasm: &[u8]) -> Result<(), crate::PluginError> {
    use wasmparser::{Parser, Payload};
    let refuse = |why: String| crate::PluginError::Compile(why);
    let (mut modules, mut functions) = (0usize, 0u64);
    for payload in Parser::new(0).parse_all(wasm) {
        match payload.map_err(|e| refuse(e.to_string()))? {
            Payload::Version {
                encoding: wasmparser::Encoding::Module,
                ..
            } => {
                modules += 1;
                if modules > MAX_CORE_MODULES {
                    return Err(refuse(format!("more than {MAX_CORE_MODULES} core modules")));
                }
            }
            Payload::CodeSectionStart { count, .. } => {
                functions += u64::from(count);
                if functions > MAX_FUNCTIONS {
                    return Err(refuse(format!("more than {MAX_FUNCTIONS} functions")));
                }
            }
            Payload::CodeSectionEntry(body) => {
                let len = body.range().len();
                if len > MAX_FUNCTION_BODY_BYTES {
                    return Err(refuse(format!(
                        "a function body of {len} bytes (limit {MAX_FUNCTION_BODY_BYTES})"
                    )));
                }
            }
            _ => {}
        }
    }
    Ok(())
}
