//! The plugin runtime's metrics, registered into the controller's Prometheus registry.

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    pub world: String,
    pub plugin: String,
    /// `ok` or `error`.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginRejection {
    pub world: String,
    /// `digest`, `compile`, `world`, `trap`, `timeout`, `oversized`, ...
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginWorld {
    pub world: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginActive {
    pub world: String,
    pub plugin: String,
    pub digest: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShadowLabels {
    pub world: String,
    pub plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShadowDivergence {
    pub world: String,
    pub plugin: String,
    /// `flavor`, `ranking`, `order`, `userdata` or `error`.
    pub divergence: String,
}

fn plugin_histogram() -> Histogram {
    // 10 µs to about 0.3 s.
    Histogram::new(exponential_buckets(0.00001, 2.0, 16))
}

/// Calls, durations, rejections and the active plugin per world.
#[derive(Debug)]
pub struct PluginMetrics {
    pub calls: Family<PluginLabels, Counter>,
    pub duration: Family<PluginLabels, Histogram, fn() -> Histogram>,
    pub rejections: Family<PluginRejection, Counter>,
    /// 1 for the plugin serving each world (absent: the native default serves).
    pub active: Family<PluginActive, Gauge>,
    /// Calls a plugin failed after its self-test, answered by the native default instead.
    pub fallbacks: Family<PluginWorld, Counter>,
    /// Decisions a shadow plugin was asked about (`crate::shadow`).
    pub shadow_decisions: Family<ShadowLabels, Counter>,
    pub shadow_divergences: Family<ShadowDivergence, Counter>,
    /// Sum of the hourly price differences a shadow's first choices would have made.
    pub shadow_price_delta: Family<ShadowLabels, Gauge>,
    pub shadow_dropped: Family<ShadowLabels, Counter>,
    active_by_world: Mutex<HashMap<String, PluginActive>>,
}

impl Default for PluginMetrics {
    fn default() -> Self {
        PluginMetrics {
            calls: Family::default(),
            duration: Family::new_with_constructor(plugin_histogram),
            rejections: Family::default(),
            active: Family::default(),
            fallbacks: Family::default(),
            shadow_decisions: Family::default(),
            shadow_divergences: Family::default(),
            shadow_price_delta: Family::default(),
            shadow_dropped: Family::default(),
            active_by_world: Mutex::default(),
        }
    }
}

impl PluginMetrics {
    /// Registers the families in `registry` (already prefixed `karpenter` by the controller);
    /// returns their names, unprefixed.
    pub fn register(&self, registry: &mut Registry) -> Vec<&'static str> {
        let mut names = Vec::new();
        macro_rules! reg {
            ($name:literal, $help:literal, $metric:expr) => {{
                names.push($name);
                registry.register($name, $help, $metric.clone());
            }};
        }
        reg!(
            "kakaocloud_plugin_calls",
            "Plugin calls, by world, plugin and result",
            self.calls
        );
        reg!(
            "kakaocloud_plugin_call_duration_seconds",
            "Duration of plugin calls",
            self.duration
        );
        reg!(
            "kakaocloud_plugin_rejections",
            "Plugins refused at load, by world and reason",
            self.rejections
        );
        reg!(
            "kakaocloud_plugin_fallbacks",
            "Plugin calls that failed after the self-test and were answered by the native default",
            self.fallbacks
        );
        reg!(
            "kakaocloud_plugin_shadow_decisions",
            "Decisions a shadow plugin was asked about beside the serving one",
            self.shadow_decisions
        );
        reg!(
            "kakaocloud_plugin_shadow_divergences",
            "Decisions a shadow plugin answered differently, by kind (flavor, ranking, order, userdata, error)",
            self.shadow_divergences
        );
        reg!(
            "kakaocloud_plugin_shadow_price_delta_micros",
            "Sum of the hourly price differences (KRW micros) a shadow selector's first choices would have made",
            self.shadow_price_delta
        );
        reg!(
            "kakaocloud_plugin_shadow_dropped",
            "Decisions not compared because the shadow queue was full",
            self.shadow_dropped
        );
        reg!(
            "kakaocloud_plugin_active",
            "The plugin serving each world, with its digest",
            self.active
        );
        names
    }

    /// Records `plugin` (of `digest`) as the one serving `world`.
    pub fn set_active(&self, world: &str, plugin: &str, digest: &str) {
        self.clear_active(world);
        let labels = PluginActive {
            world: world.into(),
            plugin: plugin.into(),
            digest: digest.into(),
        };
        self.active.get_or_create(&labels).set(1);
        self.active_by_world
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(world.into(), labels);
    }

    /// No plugin serves `world` any more.
    pub fn clear_active(&self, world: &str) {
        if let Some(old) = self
            .active_by_world
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(world)
        {
            self.active.remove(&old);
        }
    }
}
