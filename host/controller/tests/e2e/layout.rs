//! The layout holds: crates depend downward only, no module of a host crate depends on
//! another in a cycle, and every well-known name is spelled once (in `kk_apis::names`).
//!
//! These read the source tree and `cargo tree`, so a change that breaks the layout fails here
//! with the offending modules, files or crates named.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The host crates' `src` directories.
fn host_crates() -> Vec<(String, PathBuf)> {
    [
        "apis",
        "kakaocloud",
        "engine",
        "plugin-runtime",
        "controller",
    ]
    .iter()
    .map(|c| (c.to_string(), repo().join("host").join(c).join("src")))
    .collect()
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("readable source dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The code lines of a file before its `#[cfg(test)]` module, with their line numbers,
/// comment lines left out. Files that are test modules as a whole are named `*_tests.rs`.
fn production_code(path: &Path) -> Vec<(usize, String)> {
    if path
        .file_name()
        .is_some_and(|n| n.to_string_lossy().ends_with("_tests.rs"))
    {
        return Vec::new();
    }
    let text = std::fs::read_to_string(path).expect("readable source");
    text.lines()
        .enumerate()
        .take_while(|(_, l)| l.trim() != "#[cfg(test)]")
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .map(|(i, l)| (i + 1, l.to_owned()))
        .collect()
}

/// The top-level module a file belongs to (`src/a/b.rs` and `src/a.rs` are both `a`).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel
        .components()
        .next()?
        .as_os_str()
        .to_string_lossy()
        .to_string();
    let name = first.trim_end_matches(".rs").to_owned();
    (!matches!(name.as_str(), "lib" | "main" | "bin")).then_some(name)
}

fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == node) {
            let mut cycle = path[i..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    assert_eq!(
        find_cycle(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])),
        None
    );
    assert_eq!(
        find_cycle(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}

#[test]
fn no_module_cycles_in_any_host_crate() {
    let mut cycles = Vec::new();
    for (krate, src) in host_crates() {
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for file in rust_files(&src) {
            let Some(module) = top_module(&src, &file) else {
                continue;
            };
            let deps = graph.entry(module.clone()).or_default();
            for (_, line) in production_code(&file) {
                for (i, _) in line.match_indices("crate::") {
                    let rest = &line[i + "crate::".len()..];
                    let target: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !target.is_empty() && target != module {
                        deps.insert(target);
                    }
                }
            }
        }
        if let Some(cycle) = find_cycle(&graph) {
            cycles.push(format!("{krate}: {}", cycle.join(" -> ")));
        }
    }
    assert!(cycles.is_empty(), "module cycles: {cycles:#?}");
}

/// Prefixes of label, annotation, taint and finalizer keys the project reads or writes.
const WELL_KNOWN_PREFIXES: [&str; 9] = [
    "karpenter.sh/",
    "karpenter.kakaocloud.com/",
    "kakaoi.io/",
    "node.kubernetes.io/",
    "topology.kubernetes.io/",
    "kubernetes.io/",
    "node.cilium.io/",
    "node.cloudprovider.kubernetes.io/",
    "controller.kubernetes.io/",
];

#[test]
fn well_known_names_are_spelled_only_in_the_names_module() {
    // kk-apis holds the names module and the CRD schemas, whose CEL rules quote label keys.
    let mut copies = Vec::new();
    for (krate, src) in host_crates().into_iter().filter(|(c, _)| c != "apis") {
        for file in rust_files(&src) {
            for (n, line) in production_code(&file) {
                for prefix in WELL_KNOWN_PREFIXES {
                    let quoted = format!("\"{prefix}");
                    for (i, _) in line.match_indices(&quoted) {
                        let literal: String =
                            line[i + 1..].chars().take_while(|c| *c != '"').collect();
                        // apiVersions (`karpenter.sh/v1`) are not names.
                        let is_api_version = literal.rsplit('/').next().is_some_and(|v| {
                            v.starts_with('v')
                                && v[1..].chars().all(|c| c.is_ascii_digit())
                                && v.len() > 1
                        });
                        if !is_api_version {
                            copies.push(format!(
                                "{krate}: {}:{}: {literal}",
                                file.strip_prefix(repo()).unwrap_or(&file).display(),
                                n
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(
        copies.is_empty(),
        "well-known names spelled outside kk_apis::names (use the constant): {copies:#?}"
    );
}

/// The normal (non-dev) dependency closure of `package`, as crate names.
fn dependencies(package: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(repo())
        .args([
            "tree",
            "--offline",
            "--locked",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}", "-p", package])
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn crates_depend_downward_only() {
    let forbidden: [(&str, &[&str]); 5] = [
        (
            "kk-apis",
            &[
                "kube-client",
                "tokio",
                "reqwest",
                "wasmtime",
                "kk-engine",
                "kk-kakaocloud",
            ],
        ),
        (
            "kk-engine",
            &[
                "kube",
                "kube-client",
                "kube-runtime",
                "tokio",
                "reqwest",
                "wasmtime",
                "kk-kakaocloud",
            ],
        ),
        (
            "kk-kakaocloud",
            &["kube", "wasmtime", "kk-engine", "karpenter-kakaocloud"],
        ),
        (
            "kk-plugin-runtime",
            &["reqwest", "kk-kakaocloud", "karpenter-kakaocloud"],
        ),
        (
            "kakaocloud-sim",
            &[
                "karpenter-kakaocloud",
                "kk-engine",
                "kk-plugin-runtime",
                "wasmtime",
            ],
        ),
    ];
    let mut wrong = Vec::new();
    for (package, never) in forbidden {
        let deps = dependencies(package);
        for n in never {
            if deps.contains(*n) {
                wrong.push(format!("{package} depends on {n}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
