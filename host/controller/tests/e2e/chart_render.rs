//! The Helm chart without a cluster: `helm lint`, and `helm template` checked object by object
//! (affinity, RBAC, probes, env names against what the binary reads, plugin ConfigMaps, CRDs,
//! the chart's refusals).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_karpenter-kakaocloud");

fn helm() -> Command {
    let path = kk_demo::helm_path();
    assert!(
        path.is_file(),
        "{} is missing: run tests/controlplane/build-helm.sh",
        path.display()
    );
    Command::new(path)
}

/// A copy of the chart without the gitignored plugins/ (so the result does not depend on
/// whether scripts/package-chart.sh ran here).
fn chart_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("cp")
        .arg("-r")
        .arg(kk_demo::chart_dir())
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let chart = dir.path().join("karpenter-provider-kakaocloud");
    let _ = std::fs::remove_dir_all(chart.join("plugins"));
    (dir, chart)
}

fn template(chart: &Path, sets: &[&str]) -> Result<Vec<Value>, String> {
    let mut cmd = helm();
    cmd.args(["template", "karpenter-provider-kakaocloud"])
        .arg(chart)
        .args(["-n", "karpenter-kakaocloud"]);
    for s in ["clusterName=demo-cluster", "projectID=proj-1"]
        .iter()
        .chain(sets)
    {
        cmd.args(["--set", s]);
    }
    let out = cmd.output().unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let text = String::from_utf8(out.stdout).unwrap();
    Ok(serde_yaml::Deserializer::from_str(&text)
        .filter_map(|d| {
            let v: Value = serde::Deserialize::deserialize(d).ok()?;
            (!v.is_null()).then_some(v)
        })
        .collect())
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

#[test]
fn helm_lint_is_clean() {
    let (_dir, chart) = chart_copy();
    let out = helm()
        .arg("lint")
        .arg(&chart)
        .args([
            "--strict",
            "--set",
            "clusterName=demo-cluster",
            "--set",
            "projectID=proj-1",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        !text.contains("[WARNING]") && !text.contains("[ERROR]"),
        "{text}"
    );
}

#[test]
fn rendered_deployment_matches_what_the_binary_reads() {
    let (_dir, chart) = chart_copy();
    let objects = template(&chart, &[]).unwrap();
    let deployment = find(&objects, "Deployment", "karpenter-provider-kakaocloud");
    let spec = &deployment["spec"]["template"]["spec"];
    assert_eq!(deployment["spec"]["replicas"], 2, "two replicas by default");
    let container = &spec["containers"][0];

    // Every variable the chart sets is one the binary reads.
    let out = Command::new(BIN).arg("--list-env").output().unwrap();
    let read: BTreeSet<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let set: Vec<String> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect();
    let unknown: Vec<&String> = set.iter().filter(|n| !read.contains(*n)).collect();
    assert!(
        unknown.is_empty(),
        "the chart sets {unknown:?}, which the binary never reads"
    );
    for needed in [
        "CLUSTER_NAME",
        "KAKAOCLOUD_PROJECT_ID",
        "KAKAOCLOUD_APPLICATION_CREDENTIAL_ID",
        "KAKAOCLOUD_APPLICATION_CREDENTIAL_SECRET",
        "KAKAOCLOUD_REGION",
        "SIGKEY_SECRET_NAME",
        "SYSTEM_NAMESPACE",
        "POD_NAME",
        "LEADER_ELECTION_NAME",
        "DISABLE_LEADER_ELECTION",
        "METRICS_PORT",
        "HEALTH_PROBE_PORT",
    ] {
        assert!(
            set.iter().any(|n| n == needed),
            "the chart does not set {needed}"
        );
    }
    // Credentials only by reference to the named Secret, never as values.
    for e in container["env"].as_array().unwrap() {
        if e["name"]
            .as_str()
            .unwrap()
            .starts_with("KAKAOCLOUD_APPLICATION_CREDENTIAL")
        {
            assert!(e.get("value").is_none(), "{e}");
            assert_eq!(
                e["valueFrom"]["secretKeyRef"]["name"],
                "kakaocloud-credentials"
            );
        }
    }

    // Probes on the health port, which is HEALTH_PROBE_PORT.
    let ports = container["ports"].as_array().unwrap();
    let http = ports.iter().find(|p| p["name"] == "http").unwrap();
    assert_eq!(http["containerPort"], 8081);
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["livenessProbe"]["httpGet"]["port"], "http");
    assert_eq!(container["readinessProbe"]["httpGet"]["port"], "http");
    let metrics = ports.iter().find(|p| p["name"] == "http-metrics").unwrap();
    assert_eq!(metrics["containerPort"], 8080);

    // Never on a node Karpenter manages.
    let terms = &spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    for term in terms.as_array().unwrap() {
        assert!(
            term["matchExpressions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["key"] == "karpenter.sh/nodepool" && e["operator"] == "DoesNotExist"),
            "{term}"
        );
    }
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    // Two replicas get a PDB.
    find(
        &objects,
        "PodDisruptionBudget",
        "karpenter-provider-kakaocloud",
    );
}

#[test]
fn rbac_is_least_privilege() {
    let (_dir, chart) = chart_copy();
    let objects = template(&chart, &[]).unwrap();
    // Secrets in the release namespace: only the two named ones, read-only.
    let role = find(&objects, "Role", "karpenter-provider-kakaocloud");
    assert_eq!(role["metadata"]["namespace"], "karpenter-kakaocloud");
    let rules = role["rules"].as_array().unwrap();
    let secret_rules: Vec<&Value> = rules
        .iter()
        .filter(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x == "secrets")
        })
        .collect();
    assert_eq!(secret_rules.len(), 1);
    assert_eq!(
        secret_rules[0]["resourceNames"],
        serde_json::json!(["kakaocloud-credentials", "karpenter-sigkey"])
    );
    assert_eq!(
        secret_rules[0]["verbs"],
        serde_json::json!(["get", "list", "watch"])
    );
    // The Lease: create (cannot be limited by name), everything else only on the named Lease.
    let lease_rules: Vec<&Value> = rules
        .iter()
        .filter(|r| r["apiGroups"][0] == "coordination.k8s.io")
        .collect();
    assert_eq!(lease_rules.len(), 2);
    for r in &lease_rules {
        if r["verbs"] != serde_json::json!(["create"]) {
            assert_eq!(
                r["resourceNames"],
                serde_json::json!(["karpenter-leader-election"])
            );
        }
    }
    // kube-system: bootstrap tokens are created and deleted by name, never read or listed.
    let bootstrap = find(&objects, "Role", "karpenter-provider-kakaocloud-bootstrap");
    assert_eq!(bootstrap["metadata"]["namespace"], "kube-system");
    for r in bootstrap["rules"].as_array().unwrap() {
        if r["resources"] == serde_json::json!(["secrets"]) {
            assert_eq!(r["verbs"], serde_json::json!(["create", "delete"]));
            assert!(r.get("resourceNames").is_none() || r["resourceNames"].is_null());
        } else {
            let verbs = r["verbs"].as_array().unwrap();
            assert!(
                verbs.iter().all(|v| v == "get"),
                "kube-system: only the CA ConfigMap is read: {r}"
            );
        }
    }
    // No Secret access cluster-wide; no wildcard anywhere.
    for o in objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
    {
        for r in o["rules"].as_array().unwrap() {
            let text = r.to_string();
            assert!(
                !text.contains("\"*\""),
                "wildcard in {}: {text}",
                o["metadata"]["name"]
            );
            if o["kind"] == "ClusterRole" {
                assert!(!text.contains("secrets"), "cluster-wide secrets: {text}");
            }
        }
    }
    // Bootstrap-token Secrets only in kube-system.
    let bootstrap = find(&objects, "Role", "karpenter-provider-kakaocloud-bootstrap");
    assert_eq!(bootstrap["metadata"]["namespace"], "kube-system");
}

#[test]
fn plugin_configmaps_render_only_when_packaged() {
    let (_dir, chart) = chart_copy();
    let objects = template(&chart, &[]).unwrap();
    assert!(
        !objects.iter().any(|o| o["kind"] == "ConfigMap"),
        "no components, no plugin ConfigMaps"
    );

    // What scripts/package-chart.sh writes (here a stand-in component).
    use sha2::Digest as _;
    let component = b"\0asm\x0d\x00\x01\x00stand-in component".to_vec();
    let dir = chart.join("plugins/instance-selector");
    std::fs::create_dir_all(&dir).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut gz, &component).unwrap();
    std::fs::write(dir.join("plugin.wasm.gz"), gz.finish().unwrap()).unwrap();
    std::fs::write(
        dir.join("sha256"),
        format!("{}\n", hex::encode(sha2::Sha256::digest(&component))),
    )
    .unwrap();
    std::fs::write(dir.join("world"), "instance-selector\n").unwrap();

    let objects = template(&chart, &["plugins.config.instance-selector.weight=3"]).unwrap();
    let cm = find(&objects, "ConfigMap", "instance-selector");
    assert_eq!(
        cm["metadata"]["labels"]["karpenter.kakaocloud.com/plugin-world"],
        "instance-selector"
    );
    assert_eq!(
        cm["metadata"]["annotations"]["karpenter.kakaocloud.com/plugin-sha256"],
        hex::encode(sha2::Sha256::digest(&component))
    );
    assert_eq!(cm["data"]["config.json"], r#"{"weight":3}"#);
    use base64::Engine as _;
    let gz = base64::engine::general_purpose::STANDARD
        .decode(cm["binaryData"]["plugin.wasm"].as_str().unwrap())
        .unwrap();
    let mut raw = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut raw).unwrap();
    assert_eq!(raw, component);
    assert_eq!(
        objects.iter().filter(|o| o["kind"] == "ConfigMap").count(),
        1,
        "only the packaged plugin"
    );
    assert!(
        template(&chart, &["plugins.installDefaults=false"])
            .unwrap()
            .iter()
            .all(|o| o["kind"] != "ConfigMap")
    );

    // A corrupt digest file is refused rather than shipped.
    std::fs::write(dir.join("sha256"), "not-a-digest\n").unwrap();
    let err = template(&chart, &[]).unwrap_err();
    assert!(err.contains("not a sha256 digest"), "{err}");
}

#[test]
fn chart_crds_are_the_generated_crds() {
    let repo = kk_demo::repo_root().join("crds");
    let chart = kk_demo::chart_dir().join("crds");
    let names = |d: &Path| -> BTreeSet<String> {
        std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(
        names(&repo),
        names(&chart),
        "same files in crds/ and the chart's crds/"
    );
    for name in names(&repo) {
        assert!(
            std::fs::read(repo.join(&name)).unwrap() == std::fs::read(chart.join(&name)).unwrap(),
            "{name} differs: cp crds/*.yaml charts/karpenter-provider-kakaocloud/crds/"
        );
    }
}

#[test]
fn chart_refuses_unsafe_values() {
    let (_dir, chart) = chart_copy();
    let run = |args: &[&str]| {
        let mut cmd = helm();
        cmd.args(["template", "r"]).arg(&chart).args(args);
        let out = cmd.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, err) = run(&["--set", "projectID=p"]);
    assert!(!ok && err.contains("clusterName is required"), "{err}");
    let (ok, err) = run(&["--set", "clusterName=c"]);
    assert!(!ok && err.contains("projectID is required"), "{err}");
    let (ok, err) = run(&[
        "--set",
        "clusterName=c",
        "--set",
        "projectID=p",
        "--set",
        "leaderElection.enabled=false",
    ]);
    assert!(!ok && err.contains("needs leaderElection.enabled"), "{err}");
    let (ok, err) = run(&[
        "--set",
        "clusterName=c",
        "--set",
        "projectID=p",
        // Helm merges maps: null is how a user drops the default term.
        "--set",
        "affinity.nodeAffinity=null",
    ]);
    assert!(!ok && err.contains("karpenter.sh/nodepool"), "{err}");
    let (ok, _) = run(&[
        "--set",
        "clusterName=c",
        "--set",
        "projectID=p",
        "--set",
        "replicas=1",
        "--set",
        "leaderElection.enabled=false",
    ]);
    assert!(ok, "one replica without leader election is fine");
}

#[test]
fn values_off_the_schema_are_refused_naming_the_value() {
    let (_dir, chart) = chart_copy();
    for (set, says) in [
        ("logFormat=xml", "/logFormat"),
        ("settings.cni=weave", "/settings/cni"),
        ("controller.image.digest=latest", "/controller/image/digest"),
        ("replicas=0", "/replicas"),
        (
            "settings.batchIdleDuration=soon",
            "/settings/batchIdleDuration",
        ),
        // A typo is refused rather than silently ignored.
        ("replica=3", "replica"),
        ("metrics.port=70000", "/metrics/port"),
    ] {
        let err = template(&chart, &[set]).expect_err(set);
        assert!(err.contains("schema") && err.contains(says), "{set}: {err}");
    }
}

#[test]
fn upstream_parity_values_render() {
    let (_dir, chart) = chart_copy();
    let digest = format!("sha256:{}", "a".repeat(64));
    let objects = template(
        &chart,
        &[
            &format!("controller.image.digest={digest}"),
            "imagePullSecrets[0].name=regcred",
            "controller.envFrom[0].configMapRef.name=extra-env",
            "controller.extraVolumeMounts[0].name=certs",
            "controller.extraVolumeMounts[0].mountPath=/etc/extra",
            "extraVolumes[0].name=certs",
            "extraVolumes[0].configMap.name=certs",
            "topologySpreadConstraints[0].maxSkew=1",
            "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
            "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
            "podSecurityContext.runAsUser=65533",
            "controller.securityContext.readOnlyRootFilesystem=true",
        ],
    )
    .unwrap();
    let pod =
        &find(&objects, "Deployment", "karpenter-provider-kakaocloud")["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(
        container["image"],
        format!(
            "ke-container-registry.kr-central-2.kcr.dev/ke-helm-public/karpenter-provider-kakaocloud:0.1.0@{digest}"
        )
    );
    assert_eq!(pod["imagePullSecrets"][0]["name"], "regcred");
    assert_eq!(container["envFrom"][0]["configMapRef"]["name"], "extra-env");
    let mounts: Vec<&str> = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(mounts, ["plugin-cache", "certs"]);
    assert_eq!(pod["volumes"][1]["configMap"]["name"], "certs");
    assert_eq!(
        pod["topologySpreadConstraints"][0]["topologyKey"],
        "topology.kubernetes.io/zone"
    );
    assert_eq!(pod["securityContext"]["runAsUser"], 65533);
    assert_eq!(
        pod["securityContext"]["runAsNonRoot"], true,
        "defaults kept"
    );
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"][0],
        "ALL"
    );
    // The guard stays whatever else is set.
    assert!(
        pod["affinity"]
            .to_string()
            .contains("karpenter.sh/nodepool")
    );

    // `helm test` asks the controller through its Service with the image's own binary.
    let check = find(&objects, "Pod", "karpenter-provider-kakaocloud-check");
    assert_eq!(check["metadata"]["annotations"]["helm.sh/hook"], "test");
    assert_eq!(check["spec"]["containers"][0]["image"], container["image"]);
    assert_eq!(check["spec"]["containers"][0]["args"][0], "--check");
    assert_eq!(
        check["spec"]["containers"][0]["args"][1],
        "http://karpenter-provider-kakaocloud.karpenter-kakaocloud.svc:8080/metrics"
    );
}

#[test]
fn the_check_mode_reports_whether_an_endpoint_answers() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut stream, _) = listener.accept().unwrap();
        let mut buf = [0u8; 1024];
        let _ = stream.read(&mut buf);
        stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
            .unwrap();
    });
    let ok = Command::new(BIN)
        .args(["--check", &format!("http://{addr}/metrics")])
        .output()
        .unwrap();
    server.join().unwrap();
    assert!(ok.status.success(), "{ok:?}");
    // Nothing listens there any more.
    let down = Command::new(BIN)
        .args(["--check", &format!("http://{addr}/metrics")])
        .output()
        .unwrap();
    assert_eq!(down.status.code(), Some(1), "{down:?}");
}

/// The chart, its appVersion, the crates and the plugin contract are released together
/// (scripts/release.sh refuses otherwise; CHANGELOG.md has the version's section).
#[test]
fn versions_move_in_step() {
    let root = kk_demo::repo_root();
    let chart = std::fs::read_to_string(kk_demo::chart_dir().join("Chart.yaml")).unwrap();
    let field = |key: &str| {
        chart
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim().trim_matches('"').to_owned())
            .unwrap()
    };
    let wit = std::fs::read_to_string(root.join("wit/karpenter.wit")).unwrap();
    let wit_version = wit
        .lines()
        .find_map(|l| l.strip_prefix("package kakaocloud:karpenter@"))
        .map(|v| v.trim_end_matches(';').to_owned())
        .unwrap();
    let crate_version = env!("CARGO_PKG_VERSION");
    assert_eq!(field("version:"), crate_version);
    assert_eq!(field("appVersion:"), crate_version);
    assert_eq!(wit_version, crate_version);
    let changelog = std::fs::read_to_string(root.join("CHANGELOG.md")).unwrap();
    assert!(changelog.contains(&format!("\n## {crate_version}\n")));
}

/// The metric families the controller exports, plus the leader gauge `main` registers beside
/// them.
fn registered_families() -> BTreeSet<String> {
    let (_registry, metrics) = karpenter_kakaocloud::metrics::Metrics::standalone();
    let mut names: BTreeSet<String> = metrics.families.iter().cloned().collect();
    names.insert("leader_election_master_status".into());
    names
}

/// Metric names in a PromQL expression (ours, controller-runtime's and the leader gauge).
fn metric_names(expr: &str) -> BTreeSet<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| {
            ["karpenter_", "controller_runtime_", "leader_election_"]
                .iter()
                .any(|p| w.starts_with(p))
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_dashboard_and_alerts_are_off_by_default_and_query_only_registered_metrics() {
    let (_dir, chart) = chart_copy();
    let default = template(&chart, &[]).unwrap();
    assert!(
        !default.iter().any(|o| o["kind"] == "PrometheusRule"
            || o["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-dashboards"))),
        "off by default"
    );
    let on = template(
        &chart,
        &[
            "metrics.dashboards.enabled=true",
            "metrics.prometheusRule.enabled=true",
        ],
    )
    .unwrap();
    let dashboards = find(&on, "ConfigMap", "karpenter-provider-kakaocloud-dashboards");
    assert_eq!(dashboards["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: Value = serde_json::from_str(
        dashboards["data"]["karpenter-kakaocloud.json"]
            .as_str()
            .unwrap(),
    )
    .expect("the dashboard is JSON");
    let mut exprs: Vec<String> = json["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().iter())
        .map(|t| t["expr"].as_str().unwrap().to_owned())
        .collect();
    let rule = find(&on, "PrometheusRule", "karpenter-provider-kakaocloud");
    let alerts: Vec<&Value> = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    let alert_names: BTreeSet<&str> = alerts.iter().filter_map(|a| a["alert"].as_str()).collect();
    for want in [
        "KarpenterNoLeader",
        "KarpenterCloudProviderErrors",
        "KarpenterPluginRejected",
        "KarpenterOwnershipRefused",
    ] {
        assert!(alert_names.contains(want), "{want} in {alert_names:?}");
    }
    exprs.extend(
        alerts
            .iter()
            .map(|a| a["expr"].as_str().unwrap().to_owned()),
    );
    let families = registered_families();
    for expr in &exprs {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{expr} names a metric");
        for name in names {
            let family = ["_bucket", "_total", "_count", "_sum"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .filter(|f| families.contains(*f))
                .unwrap_or(&name);
            assert!(
                families.contains(family),
                "{name} (in {expr}) is not a metric the controller registers"
            );
        }
    }
}
