//! `new`: a standalone plugin crate for one world, ready to test and ship: the policy (a small
//! working example), the WIT contract vendored in `wit/`, cases in `cases/` that the native
//! test runs (and `kk-plugin test` runs on the component), a README and a CI workflow.
//! The cases are built with the SDK's builders and serialized, so they are always in the
//! format this SDK reads.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use karpenter_kakaocloud_sdk::ScoreInput;
use karpenter_kakaocloud_sdk::case::{Call, Case, Expect};
use karpenter_kakaocloud_sdk::testing::{
    InstanceTypeBuilder, RankInputBuilder, consolidation_candidate, userdata_input,
};
use serde_json::json;

/// The contract, vendored into every new crate.
const WIT: &str = include_str!("../../../wit/karpenter.wit");
const CARGO_TOML: &str = include_str!("../templates/Cargo.toml.tmpl");
const README: &str = include_str!("../templates/README.md.tmpl");
const CI: &str = include_str!("../templates/ci.yml.tmpl");
const GITIGNORE: &str = include_str!("../templates/gitignore");
const SELECTOR: &str = include_str!("../templates/selector.rs");
const SCORER: &str = include_str!("../templates/scorer.rs");
const RENDERER: &str = include_str!("../templates/renderer.rs");

/// The SDK this tool was built with, by version.
const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");
const REPOSITORY: &str = env!("CARGO_PKG_REPOSITORY");

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum World {
    InstanceSelector,
    ConsolidationScorer,
    UserdataRenderer,
}

impl World {
    fn name(self) -> &'static str {
        match self {
            World::InstanceSelector => "instance-selector",
            World::ConsolidationScorer => "consolidation-scorer",
            World::UserdataRenderer => "userdata-renderer",
        }
    }
}

#[derive(clap::Args)]
pub struct New {
    /// The world the plugin implements.
    pub world: World,
    /// The crate's name (lowercase letters, digits and '-'; also the ConfigMap's name).
    pub name: String,
    /// Where the crate is created (default: ./<name>).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Depend on the SDK at this path (with its version) instead of the one this tool knows.
    #[arg(long)]
    pub sdk_path: Option<PathBuf>,
}

/// Lowercase letters, digits and '-', starting with a letter: a crate name, a ConfigMap name
/// and a file name alike.
fn valid_name(name: &str) -> bool {
    name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The SDK dependency line: by version, from the SDK beside this tool's sources when they are
/// there (a checkout), else from the project's repository.
fn sdk_dependency(sdk_path: Option<&Path>) -> String {
    let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let path = sdk_path
        .map(Path::to_path_buf)
        .or_else(|| beside.join("Cargo.toml").exists().then_some(beside));
    let version = toml_string(SDK_VERSION);
    match path.and_then(|p| p.canonicalize().ok()) {
        Some(p) => format!(
            "{{ version = {version}, path = {} }}",
            toml_string(&p.to_string_lossy())
        ),
        None => format!(
            "{{ version = {version}, git = {} }}",
            toml_string(REPOSITORY)
        ),
    }
}

/// A TOML basic string (JSON's escapes are TOML's).
fn toml_string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

fn fill(template: &str, vars: &[(&str, &str)]) -> String {
    vars.iter().fold(template.to_owned(), |t, (k, v)| {
        t.replace(&format!("{{{{{k}}}}}"), v)
    })
}

const GI: u64 = 1 << 30;

/// The example cases of `world`, named, with the answers the template policy gives.
fn cases(world: World) -> Vec<(&'static str, Case)> {
    match world {
        World::InstanceSelector => {
            let rank = RankInputBuilder::new()
                .requests(1000, 2 * GI)
                .candidate(
                    InstanceTypeBuilder::new("m2a.large", 2000, 8 * GI)
                        .offering("kr-central-2-a", 100_000, true)
                        .build(),
                )
                .candidate(
                    InstanceTypeBuilder::new("c2a.large", 2000, 4 * GI)
                        .offering("kr-central-2-a", 80_000, true)
                        .build(),
                )
                .candidate(
                    InstanceTypeBuilder::new("m2a.xlarge", 4000, 16 * GI)
                        .offering("kr-central-2-a", 200_000, false)
                        .build(),
                )
                .build();
            vec![
                (
                    "cheapest-available-first.json",
                    Case {
                        config: None,
                        call: Call::Rank(rank.clone()),
                        expect: Some(Expect::Ok(json!([1, 0]))),
                    },
                ),
                (
                    "denied-family-left-out.json",
                    Case {
                        config: Some(json!({"denyFamilies": ["c2a"]})),
                        call: Call::Rank(rank),
                        expect: Some(Expect::Ok(json!([0]))),
                    },
                ),
            ]
        }
        World::ConsolidationScorer => {
            let mut stuck = consolidation_candidate("node-b", 200_000, 300);
            stuck.pods_fit_elsewhere = false;
            let input = ScoreInput {
                candidates: vec![consolidation_candidate("node-a", 100_000, 200), stuck],
            };
            vec![(
                "savings-per-disruption.json",
                Case {
                    config: None,
                    call: Call::Score(input),
                    expect: Some(Expect::Ok(json!([100_000.0, 0.0]))),
                },
            )]
        }
        World::UserdataRenderer => vec![(
            "kubeadm-join.json",
            Case {
                config: Some(json!({"extraCommands": ["sysctl -w vm.max_map_count=262144"]})),
                call: Call::Render(userdata_input()),
                expect: Some(Expect::Contains(vec![
                    "#cloud-config".into(),
                    "kubeadm join 10.0.0.1:6443".into(),
                    "--node-labels=karpenter.sh/nodepool=default".into(),
                    "vm.max_map_count".into(),
                ])),
            },
        )],
    }
}

/// The files of a new crate, by path relative to its root.
pub fn files(world: World, name: &str, sdk: &str) -> Result<Vec<(PathBuf, String)>> {
    let cases = cases(world);
    let first_case = cases.first().map_or("", |(n, _)| *n);
    let vars = [
        ("name", name),
        ("world", world.name()),
        ("sdk", sdk),
        ("sdk_version", SDK_VERSION),
        ("repo", REPOSITORY),
        ("case", first_case),
    ];
    let policy = match world {
        World::InstanceSelector => SELECTOR,
        World::ConsolidationScorer => SCORER,
        World::UserdataRenderer => RENDERER,
    };
    let mut out = vec![
        ("Cargo.toml".into(), fill(CARGO_TOML, &vars)),
        ("README.md".into(), fill(README, &vars)),
        ("ci.yml".into(), fill(CI, &vars)),
        (".gitignore".into(), GITIGNORE.to_owned()),
        ("wit/karpenter.wit".into(), WIT.to_owned()),
        ("src/lib.rs".into(), fill(policy, &vars)),
    ];
    for (file, case) in cases {
        let mut text = serde_json::to_string_pretty(&case)?;
        text.push('\n');
        out.push((Path::new("cases").join(file), text));
    }
    Ok(out)
}

pub fn new(args: &New) -> Result<()> {
    if !valid_name(&args.name) {
        bail!(
            "{:?} is not a plugin name: lowercase letters, digits and '-', starting with a letter, at most 63",
            args.name
        );
    }
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    if dir.read_dir().is_ok_and(|mut d| d.next().is_some()) {
        bail!("{} exists and is not empty", dir.display());
    }
    let sdk = sdk_dependency(args.sdk_path.as_deref());
    for (path, text) in files(args.world, &args.name, &sdk)? {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    println!(
        "created {} ({} plugin {}). Next:\n  cd {}\n  cargo test\n  kk-plugin build\n  kk-plugin test target/plugin/{}.wasm --cases cases",
        dir.display(),
        args.world.name(),
        args.name,
        dir.display(),
        args.name
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_every_world_has_a_crate_with_cases() {
        assert!(valid_name("my-selector2"));
        for bad in ["", "My", "9lives", "a_b", "trailing-", &"a".repeat(64)] {
            assert!(!valid_name(bad), "{bad}");
        }
        for world in [
            World::InstanceSelector,
            World::ConsolidationScorer,
            World::UserdataRenderer,
        ] {
            let files = files(world, "demo", "\"0.1.0\"").unwrap();
            let text = |p: &str| {
                files
                    .iter()
                    .find(|(path, _)| path == Path::new(p))
                    .map(|(_, t)| t.clone())
                    .unwrap_or_else(|| panic!("{p} missing"))
            };
            assert!(text("Cargo.toml").contains("name = \"demo\""));
            assert!(text("Cargo.toml").contains("karpenter-kakaocloud-sdk = \"0.1.0\""));
            assert!(
                !text("src/lib.rs").contains("{{"),
                "every placeholder filled"
            );
            assert!(text("README.md").contains("target/plugin/demo.wasm"));
            let cases: Vec<Case> = files
                .iter()
                .filter(|(p, _)| p.starts_with("cases"))
                .map(|(_, t)| serde_json::from_str(t).unwrap())
                .collect();
            assert!(!cases.is_empty());
            assert!(cases.iter().all(|c| c.call.world() == world.name()));
        }
    }

    #[test]
    fn the_sdk_is_named_by_version_and_found_beside_the_tool() {
        let dep = sdk_dependency(None);
        assert!(
            dep.starts_with(&format!("{{ version = \"{SDK_VERSION}\", path = ")),
            "{dep}"
        );
        let elsewhere = sdk_dependency(Some(Path::new("/nonexistent/sdk")));
        assert!(elsewhere.contains("git = "), "{elsewhere}");
    }
}
