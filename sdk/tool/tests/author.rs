//! A plugin author's path, through the real tools: `kk-plugin new`, the crate's own native
//! test (`cargo test`), `kk-plugin build` to a component, the same cases on the component
//! (`kk-plugin test`, `kk-plugin run`) under the controller's bounds, and the ConfigMap. A case
//! whose answer is wrong fails both the native test and the component test.
//!
//! Needs a wasm32 toolchain (rustup's target, or the one `scripts/setup.sh` installs).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::Digest;

fn tool() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kk-plugin"))
}

fn run(mut cmd: Command) -> Output {
    let shown = format!("{cmd:?}");
    let out = cmd.output().unwrap_or_else(|e| panic!("{shown}: {e}"));
    eprintln!("{shown}\n{}", String::from_utf8_lossy(&out.stderr));
    out
}

fn ok(cmd: Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Build directories kept between runs (the project's cache when set), so a second run
/// rebuilds only the plugin.
fn cache(name: &str, scratch: &Path) -> PathBuf {
    std::env::var_os("KK_CACHE").map_or_else(|| scratch.join(name), |c| PathBuf::from(c).join(name))
}

fn cargo_test(krate: &Path, target: &Path) -> Output {
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo
        .args(["test", "--quiet", "--manifest-path"])
        .arg(krate.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", target)
        .env_remove("RUSTFLAGS");
    run(cargo)
}

#[test]
fn a_new_plugin_passes_its_cases_natively_and_as_a_component() {
    let scratch = tempfile::tempdir().unwrap();
    let krate = scratch.path().join("team-selector");
    let mut new = tool();
    new.args(["new", "instance-selector", "team-selector", "--dir"])
        .arg(&krate);
    ok(new);
    for file in [
        "Cargo.toml",
        "README.md",
        "ci.yml",
        "wit/karpenter.wit",
        "src/lib.rs",
    ] {
        assert!(krate.join(file).exists(), "{file} scaffolded");
    }
    // A second `new` into the same place refuses rather than overwrite.
    let mut again = tool();
    again
        .args(["new", "instance-selector", "team-selector", "--dir"])
        .arg(&krate);
    assert!(!run(again).status.success());
    // Seeded with the workspace's lockfile: the dependency versions already fetched.
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::copy(workspace.join("Cargo.lock"), krate.join("Cargo.lock")).unwrap();

    let native_target = cache("author-target", scratch.path());
    let tested = cargo_test(&krate, &native_target);
    assert!(
        tested.status.success(),
        "the scaffold's native test passes: {}",
        String::from_utf8_lossy(&tested.stdout)
    );

    let out_dir = scratch.path().join("out");
    let mut build = tool();
    build
        .arg("build")
        .arg("--manifest-path")
        .arg(krate.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(cache("author-wasm-target", scratch.path()))
        .arg("--out-dir")
        .arg(&out_dir);
    let built = ok(build);
    let component = out_dir.join("team-selector.wasm");
    let bytes = std::fs::read(&component).unwrap();
    let digest = hex::encode(sha2::Sha256::digest(&bytes));
    assert!(
        built.contains("instance-selector") && built.contains(&digest),
        "build prints the world and digest: {built}"
    );

    let mut test = tool();
    test.arg("test")
        .arg(&component)
        .arg("--cases")
        .arg(krate.join("cases"));
    let report = ok(test);
    assert!(report.contains("ok    self-test"), "{report}");
    assert!(
        report.contains("ok    cheapest-available-first.json"),
        "{report}"
    );
    assert!(report.contains("3 of 3 passed"), "{report}");

    let mut one = tool();
    one.arg("run")
        .arg(&component)
        .arg("--input")
        .arg(krate.join("cases/denied-family-left-out.json"));
    let answer: serde_json::Value = serde_json::from_str(&ok(one)).unwrap();
    assert_eq!(answer, serde_json::json!([0]));

    // A wrong answer fails both builds' tests.
    let case = krate.join("cases/cheapest-available-first.json");
    let wrong = std::fs::read_to_string(&case)
        .unwrap()
        .replace("\"ok\": [\n      1,\n      0\n    ]", "\"ok\": [0, 1]");
    assert!(
        wrong.contains("[0, 1]"),
        "the expectation was rewritten: {wrong}"
    );
    std::fs::write(krate.join("cases/wrong.json"), wrong).unwrap();
    let mut test = tool();
    test.arg("test")
        .arg(&component)
        .arg("--cases")
        .arg(krate.join("cases"));
    let failed = run(test);
    let report = String::from_utf8_lossy(&failed.stdout);
    assert!(!failed.status.success(), "{report}");
    assert!(
        report.contains("FAIL  wrong.json: expected ok [0,1], got ok [1,0]"),
        "{report}"
    );
    let native = cargo_test(&krate, &native_target);
    assert!(
        !native.status.success(),
        "the native test fails the wrong case too"
    );

    // The ConfigMap the controller loads: world label, digest, gzip-compressed component.
    let mut cm = tool();
    cm.arg("configmap").arg(&component).args(["--name", "team"]);
    let yaml: serde_json::Value = serde_yaml::from_str(&ok(cm)).unwrap();
    assert_eq!(yaml["kind"], "ConfigMap");
    assert_eq!(yaml["metadata"]["name"], "team");
    assert_eq!(
        yaml["metadata"]["labels"]["karpenter.kakaocloud.com/plugin-world"],
        "instance-selector"
    );
    assert_eq!(
        yaml["metadata"]["annotations"]["karpenter.kakaocloud.com/plugin-sha256"],
        digest.as_str()
    );
    assert_eq!(yaml["data"]["config.json"], "{}");
    use base64::Engine as _;
    let gz = base64::engine::general_purpose::STANDARD
        .decode(yaml["binaryData"]["plugin.wasm"].as_str().unwrap())
        .unwrap();
    let mut unzipped = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut unzipped).unwrap();
    assert_eq!(unzipped, bytes);
}
