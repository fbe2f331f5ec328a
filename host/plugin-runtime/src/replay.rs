//! One plugin call outside the controller's seams: an author's case (`kk-plugin run` and
//! `kk-plugin test`) or a recorded decision replayed on a candidate plugin. Each call runs
//! under the runtime's bounds and the output checks the seams apply, so a component that
//! answers a case here answers it the same in the controller.
//!
//! A [`Call`] is JSON in the case format of the SDK (`karpenter_kakaocloud_sdk::case`): `{"rank":
//! {"catalog": [...], "input": {...}}}`, `{"score": {...}}` or `{"render": {...}}`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use wasmtime::component::Component;

use super::bindings::types as t;
use super::convert::SelectorCatalog;
use super::engine::{Loaded, Runtime, sha256_hex};
use super::{Kind, PluginError, registry};
use kk_engine::disruption::scorer as native_scorer;
use kk_engine::scheduling::ranker;
use kk_engine::userdata as native_userdata;

/// One call of a plugin world's function.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Call {
    Rank {
        catalog: Vec<t::InstanceType>,
        input: t::RankInput,
    },
    Score(t::ScoreInput),
    Render(t::UserdataInput),
}

impl Call {
    /// The world whose function this calls.
    pub fn kind(&self) -> Kind {
        match self {
            Call::Rank { .. } => Kind::Selector,
            Call::Score(_) => Kind::Scorer,
            Call::Render(_) => Kind::Userdata,
        }
    }
}

/// What a call answered and how long it took.
#[derive(Debug, Clone)]
pub struct Answer {
    pub outcome: Result<Value, PluginError>,
    pub took: Duration,
}

/// A component compiled once and linked anew for each settings document.
pub struct Candidate {
    runtime: Arc<Runtime>,
    pub name: String,
    pub kind: Kind,
    /// sha256 of the uncompressed component.
    pub digest: String,
    pub size: usize,
    component: Component,
}

impl std::fmt::Debug for Candidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Candidate")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("digest", &self.digest)
            .finish()
    }
}

impl Candidate {
    /// Decodes (gzip or plain), inspects and compiles `wasm` under the runtime's bounds, and
    /// finds the world it implements.
    pub fn load(runtime: &Arc<Runtime>, name: &str, wasm: &[u8]) -> Result<Candidate, PluginError> {
        let wasm = registry::decode(wasm)?;
        let digest = sha256_hex(&wasm);
        let (component, _) = runtime.compile(&wasm, &digest)?;
        let mut why = Vec::new();
        for kind in Kind::ALL {
            match runtime.link(name, kind, &component, String::new(), digest.clone()) {
                Ok(_) => {
                    return Ok(Candidate {
                        runtime: runtime.clone(),
                        name: name.to_owned(),
                        kind,
                        digest,
                        size: wasm.len(),
                        component,
                    });
                }
                Err(e) => why.push(e.to_string()),
            }
        }
        Err(PluginError::Invalid(format!(
            "{name} implements none of the plugin worlds: {}",
            why.join("; ")
        )))
    }

    /// Linked with `config`, ready to call.
    fn linked(&self, config: &str) -> Result<Loaded, PluginError> {
        self.runtime.link(
            &self.name,
            self.kind,
            &self.component,
            config.to_owned(),
            self.digest.clone(),
        )
    }

    /// What the controller checks before a plugin serves: its settings and the self-test call.
    pub fn accepted(&self, config: &str) -> Result<(), PluginError> {
        if !config.trim().is_empty() {
            serde_json::from_str::<Value>(config).map_err(|e| {
                PluginError::Invalid(format!("{} is not JSON: {e}", super::CONFIG_KEY))
            })?;
        }
        registry::self_test(&self.linked(config)?)
    }

    /// Runs `call` with `config`, in a fresh instance.
    pub fn call(&self, config: &str, call: &Call) -> Answer {
        let started = Instant::now();
        let outcome = self.linked(config).and_then(|loaded| answer(&loaded, call));
        Answer {
            outcome,
            took: started.elapsed(),
        }
    }
}

/// `call` on `loaded`, its output checked as the controller's seam checks it.
pub fn answer(loaded: &Loaded, call: &Call) -> Result<Value, PluginError> {
    let invalid = |detail: String| PluginError::InvalidOutput {
        plugin: loaded.name.clone(),
        detail,
    };
    let json = |v: Result<Value, serde_json::Error>| v.map_err(|e| invalid(e.to_string()));
    match call {
        Call::Rank { catalog, input } => {
            let catalog = SelectorCatalog {
                fingerprint: fingerprint(catalog),
                types: catalog.clone(),
            };
            let order = loaded.rank(&catalog, input)?;
            let as_usize: Vec<usize> = order.iter().map(|&i| i as usize).collect();
            ranker::validate(&loaded.name, &as_usize, input.candidates.len())
                .map_err(|e| invalid(e.to_string()))?;
            json(serde_json::to_value(order))
        }
        Call::Score(input) => {
            let scores = loaded.score(input)?;
            native_scorer::validate(&loaded.name, &scores, input.candidates.len())
                .map_err(|e| invalid(e.to_string()))?;
            json(serde_json::to_value(scores))
        }
        Call::Render(input) => {
            let text = loaded.render(input)?;
            native_userdata::validate(&text, loaded.bounds().userdata_bytes)
                .map_err(|e| invalid(e.to_string()))?;
            Ok(Value::String(text))
        }
    }
}

/// Candidate `i`'s instance type in `catalog`.
pub fn flavor<'a>(
    catalog: &'a [t::InstanceType],
    input: &t::RankInput,
    i: usize,
) -> Option<&'a t::InstanceType> {
    catalog.get(*input.candidates.get(i)? as usize)
}

/// The cheapest offering candidate `i` may launch as, per hour (KRW micros).
pub fn cheapest(catalog: &[t::InstanceType], input: &t::RankInput, i: usize) -> Option<u64> {
    let available = *input.available_offerings.get(i)?;
    flavor(catalog, input, i)?
        .offerings
        .iter()
        .enumerate()
        .filter(|(k, _)| *k < 64 && available & (1 << k) != 0)
        .map(|(_, o)| o.price_micros)
        .min()
}

/// How much more candidate `theirs` costs per hour than candidate `served` (KRW micros;
/// negative: cheaper), by their cheapest available offerings.
pub fn price_delta(
    catalog: &[t::InstanceType],
    input: &t::RankInput,
    served: Option<usize>,
    theirs: Option<usize>,
) -> Option<i64> {
    let a = cheapest(catalog, input, served?)?;
    let b = cheapest(catalog, input, theirs?)?;
    Some(b as i64 - a as i64)
}

/// Selector decisions kept for replay.
pub const DECISIONS: usize = 100;

/// One instance-selector decision as it was made.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Recorded {
    /// Seconds since the Unix epoch.
    pub at: u64,
    pub node_pool: String,
    /// What ranked it (a plugin and its digest, or the native ranker).
    pub serving: String,
    /// Indices into `input.candidates`, best first, as served.
    pub chosen: Vec<u32>,
    /// The catalog it ranked against: a key of [`Decisions::catalogs`].
    pub catalog: String,
    pub input: t::RankInput,
}

/// The latest decisions, each catalog once.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Decisions {
    pub catalogs: std::collections::BTreeMap<String, Vec<t::InstanceType>>,
    pub decisions: Vec<Recorded>,
}

impl Decisions {
    /// The call `r` was, to replay on another plugin.
    pub fn call(&self, r: &Recorded) -> Option<Call> {
        Some(Call::Rank {
            catalog: self.catalogs.get(&r.catalog)?.clone(),
            input: r.input.clone(),
        })
    }
}

/// The latest [`DECISIONS`] selector decisions (catalogs shared, not copied).
#[derive(Default)]
pub struct DecisionLog {
    ring: std::sync::Mutex<std::collections::VecDeque<(Arc<SelectorCatalog>, Recorded)>>,
}

impl DecisionLog {
    pub fn record(
        &self,
        catalog: Arc<SelectorCatalog>,
        node_pool: &str,
        serving: String,
        input: t::RankInput,
        chosen: &[usize],
    ) {
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let recorded = Recorded {
            at,
            node_pool: node_pool.to_owned(),
            serving,
            chosen: chosen.iter().map(|&i| i as u32).collect(),
            catalog: format!("{:016x}", catalog.fingerprint),
            input,
        };
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        if ring.len() == DECISIONS {
            ring.pop_front();
        }
        ring.push_back((catalog, recorded));
    }

    pub fn export(&self) -> Decisions {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Decisions::default();
        for (catalog, recorded) in ring.iter() {
            out.catalogs
                .entry(recorded.catalog.clone())
                .or_insert_with(|| catalog.types.clone());
            out.decisions.push(recorded.clone());
        }
        out
    }
}

/// Which catalog a warm selector instance holds: a digest of its records.
fn fingerprint(catalog: &[t::InstanceType]) -> u64 {
    let bytes = serde_json::to_vec(catalog).unwrap_or_default();
    let digest = Sha256::digest(bytes);
    u64::from_le_bytes(digest[..8].try_into().unwrap_or_default())
}

/// The message a case's `{"error": ...}` is matched against: a refusal's own words, else the
/// whole error.
pub fn message(error: &PluginError) -> String {
    match error {
        PluginError::Refused { message, .. } => message.clone(),
        other => other.to_string(),
    }
}
