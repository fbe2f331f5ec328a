//! Cases: one plugin call as a JSON file, with the answer it must give. A plugin's native tests
//! ([`assert_rank_cases`] and its siblings) and `kk-plugin test` (against the built component,
//! under the host's limits) run the same files, so both builds of a plugin answer alike.
//!
//! ```json
//! { "config": { "preferFamilies": ["m2a"] },
//!   "rank": { "catalog": [ ... ], "input": { ... } },
//!   "expect": { "ok": [1, 0] } }
//! ```
//!
//! * exactly one of `rank` (the catalog and the input whose candidates index it), `score` (a
//!   score-input) or `render` (a userdata-input), the records of `wit/karpenter.wit` with
//!   snake_case fields and CamelCase enum values (`"OnDemand"`);
//! * `config`: the plugin's settings (`config.json` of its ConfigMap), `{}` when absent;
//! * `expect`: `{"ok": <result>}`, `{"error": "<part of the refusal>"}` or, for text,
//!   `{"contains": ["<part>", ...]}`; without it the case only runs.
//!
//! Write cases by hand, or build them with [`crate::testing`]'s builders and save them with
//! `serde_json::to_string_pretty`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::testing::{self, RankCase};
use crate::{ScoreInput, UserdataInput};

/// One call and what it must answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Case {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Value>,
    #[serde(flatten)]
    pub call: Call,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<Expect>,
}

/// The call, by the function of the world it exercises.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Call {
    Rank(RankCase),
    Score(ScoreInput),
    Render(UserdataInput),
}

impl Call {
    /// The WIT world whose function this calls.
    pub fn world(&self) -> &'static str {
        match self {
            Call::Rank(_) => "instance-selector",
            Call::Score(_) => "consolidation-scorer",
            Call::Render(_) => "userdata-renderer",
        }
    }
}

/// The answer a case expects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Expect {
    /// This result, exactly (numbers compare by value: `1` equals `1.0`).
    Ok(Value),
    /// A refusal whose message contains this.
    Error(String),
    /// A text result containing each of these.
    Contains(Vec<String>),
}

impl Expect {
    /// Why `outcome` is not what this expects (`None`: it is).
    pub fn mismatch(&self, outcome: &Result<Value, String>) -> Option<String> {
        match (self, outcome) {
            (Expect::Ok(want), Ok(got)) if same(want, got) => None,
            (Expect::Error(part), Err(message)) if message.contains(part.as_str()) => None,
            (Expect::Contains(parts), Ok(Value::String(text))) => {
                let missing: Vec<&String> = parts
                    .iter()
                    .filter(|p| !text.contains(p.as_str()))
                    .collect();
                (!missing.is_empty()).then(|| format!("the text lacks {missing:?}"))
            }
            (want, got) => Some(format!("expected {}, got {}", show_expect(want), show(got))),
        }
    }
}

fn show_expect(e: &Expect) -> String {
    match e {
        Expect::Ok(v) => format!("ok {v}"),
        Expect::Error(part) => format!("an error containing {part:?}"),
        Expect::Contains(parts) => format!("text containing {parts:?}"),
    }
}

/// An outcome for a report, long texts cut.
pub fn show(outcome: &Result<Value, String>) -> String {
    let text = match outcome {
        Ok(v) => format!("ok {v}"),
        Err(m) => format!("error {m:?}"),
    };
    if text.chars().count() > 300 {
        format!("{}…", text.chars().take(300).collect::<String>())
    } else {
        text
    }
}

/// JSON equality with numbers compared by value.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

impl Case {
    /// The settings as the plugin reads them (`config.json`).
    pub fn config_json(&self) -> String {
        self.config
            .as_ref()
            .map_or_else(|| "{}".to_owned(), Value::to_string)
    }

    /// Reads one case file.
    pub fn load(path: &Path) -> Result<Case, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// Every `*.json` of `dir`, by file name.
pub fn load_dir(dir: impl AsRef<Path>) -> Result<Vec<(PathBuf, Case)>, String> {
    let dir = dir.as_ref();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("reading {}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(format!("{} holds no *.json case", dir.display()));
    }
    paths
        .into_iter()
        .map(|p| Case::load(&p).map(|c| (p, c)))
        .collect()
}

/// Runs every case of `dir` through `call` and panics with a report of those that did not
/// answer as expected.
fn assert_cases(dir: &str, world: &str, call: impl Fn(&Call) -> Result<Value, String>) {
    let cases = load_dir(dir).unwrap_or_else(|e| panic!("{e}"));
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|(path, case)| {
            let name = path.display();
            if case.call.world() != world {
                return Some(format!("{name}: a {} case", case.call.world()));
            }
            let outcome = testing::with_config(&case.config_json(), || call(&case.call));
            let expect = case.expect.as_ref()?;
            expect
                .mismatch(&outcome)
                .map(|why| format!("{name}: {why}"))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

fn json<T: Serialize>(result: Result<T, String>) -> Result<Value, String> {
    result.and_then(|v| serde_json::to_value(v).map_err(|e| e.to_string()))
}

/// Runs the `rank` cases of `dir` against selector `P`, natively.
pub fn assert_rank_cases<P: crate::InstanceSelector>(dir: &str) {
    assert_cases(dir, "instance-selector", |call| match call {
        Call::Rank(case) => json(testing::rank::<P>(case)),
        _ => unreachable!("checked by world"),
    })
}

/// Runs the `score` cases of `dir` against scorer `P`, natively.
pub fn assert_score_cases<P: crate::ConsolidationScorer>(dir: &str) {
    assert_cases(dir, "consolidation-scorer", |call| match call {
        Call::Score(input) => json(testing::score::<P>(input)),
        _ => unreachable!("checked by world"),
    })
}

/// Runs the `render` cases of `dir` against renderer `P`, natively.
pub fn assert_render_cases<P: crate::UserdataRenderer>(dir: &str) {
    assert_cases(dir, "userdata-renderer", |call| match call {
        Call::Render(input) => json(testing::render::<P>(input)),
        _ => unreachable!("checked by world"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{InstanceTypeBuilder, RankInputBuilder};

    #[test]
    fn a_case_round_trips_and_its_expectation_checks_the_outcome() {
        let rank = RankInputBuilder::new()
            .requests(500, 1 << 30)
            .candidate(
                InstanceTypeBuilder::new("m2a.large", 2000, 8 << 30)
                    .offering("kr-central-2-a", 100_000, true)
                    .build(),
            )
            .build();
        let case = Case {
            config: Some(serde_json::json!({"denyFamilies": ["c2a"]})),
            call: Call::Rank(rank),
            expect: Some(Expect::Ok(serde_json::json!([0]))),
        };
        let text = serde_json::to_string(&case).unwrap();
        assert!(text.contains(r#""capacity_type":"OnDemand""#), "{text}");
        let back: Case = serde_json::from_str(&text).unwrap();
        assert_eq!(back, case);
        assert_eq!(back.call.world(), "instance-selector");
        assert_eq!(back.config_json(), r#"{"denyFamilies":["c2a"]}"#);

        let ok = Expect::Ok(serde_json::json!([1, 0.5]));
        assert_eq!(ok.mismatch(&Ok(serde_json::json!([1.0, 0.5]))), None);
        assert!(ok.mismatch(&Ok(serde_json::json!([0.5, 1]))).is_some());
        assert!(ok.mismatch(&Err("no".into())).is_some());
        let refused = Expect::Error("no flavor".into());
        assert_eq!(refused.mismatch(&Err("no flavor fits".into())), None);
        assert!(refused.mismatch(&Ok(Value::Null)).is_some());
        let text = Expect::Contains(vec!["#cloud-config".into(), "kubeadm".into()]);
        assert_eq!(
            text.mismatch(&Ok(Value::String("#cloud-config\nkubeadm join".into()))),
            None
        );
        assert!(
            text.mismatch(&Ok(Value::String("#cloud-config".into())))
                .unwrap()
                .contains("kubeadm")
        );
    }

    #[test]
    fn a_case_names_exactly_one_call() {
        let none = serde_json::from_str::<Case>(r#"{"expect": {"ok": []}}"#);
        assert!(none.is_err());
        let unknown = serde_json::from_str::<Case>(r#"{"rnak": {}}"#);
        assert!(unknown.is_err());
    }
}
