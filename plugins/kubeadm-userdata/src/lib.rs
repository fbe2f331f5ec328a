//! The default userdata-renderer plugin: cloud-init that joins the node with `kubeadm join`.
//!
//! It writes a kubeadm `JoinConfiguration` (bootstrap-token discovery with the CA hash, the node
//! name, labels as `node-labels`, taints and startup taints), a `KubeletConfiguration` patch for
//! the kubelet settings (max pods, kube/system reserved, eviction thresholds, cluster DNS), the CA
//! bundle, and runs `kubeadm join`. With Cilium it adds the startup taint
//! `node.cilium.io/agent-not-ready=true:NoExecute` (Cilium's agent removes it when ready); with
//! Calico and other CNIs it adds nothing.
//!
//! Every value is checked (token, hash, endpoint, label syntax) and written as a double-quoted
//! YAML string, so input cannot inject YAML or shell.
//!
//! Settings (`config.json`, all optional): `{"preJoinCommands": ["modprobe br_netfilter"]}`
//! (each one run with `sh -c` before the join).

use std::fmt::Write;

use karpenter_kakaocloud_sdk::prelude::*;
use serde::Deserialize;

/// The plugin's settings.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Shell commands run before `kubeadm join`.
    pub pre_join_commands: Vec<String>,
}

/// The policy.
pub struct KubeadmJoin;

/// Cilium's startup taint.
pub const CILIUM_AGENT_NOT_READY: &str = "node.cilium.io/agent-not-ready";

/// Where the join configuration is written on the node.
pub const JOIN_CONFIG_PATH: &str = "/etc/kubernetes/kubeadm-join.yaml";

/// A YAML double-quoted scalar (JSON string syntax is valid YAML).
fn q(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn is_token(t: &str) -> bool {
    let ok = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    matches!(t.split_once('.'), Some((id, secret)) if ok(id, 6) && ok(secret, 16))
}

fn is_ca_hash(h: &str) -> bool {
    h.strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A label key (`prefix/name`) or value, Kubernetes syntax: alphanumerics, `-`, `_`, `.`, at
/// most 63 characters per name segment; values may be empty.
fn is_label_part(s: &str, allow_empty: bool) -> bool {
    if s.is_empty() {
        return allow_empty;
    }
    s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
}

fn is_label_key(k: &str) -> bool {
    match k.rsplit_once('/') {
        Some((prefix, name)) => {
            !prefix.is_empty()
                && prefix.len() <= 253
                && prefix.split('.').all(|p| is_label_part(p, false))
                && is_label_part(name, false)
        }
        None => is_label_part(k, false),
    }
}

fn effect(e: TaintEffect) -> &'static str {
    match e {
        TaintEffect::NoSchedule => "NoSchedule",
        TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        TaintEffect::NoExecute => "NoExecute",
    }
}

/// The kubeadm API version for a Kubernetes version: v1beta4 from 1.31, v1beta3 before.
fn kubeadm_api(version: &str) -> Result<&'static str, String> {
    let v = version.trim_start_matches('v');
    let mut parts = v.split('.');
    let major: u32 = parts
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| format!("bad kubernetes version {version:?}"))?;
    let minor: u32 = parts
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| format!("bad kubernetes version {version:?}"))?;
    if major != 1 || minor < 26 {
        return Err(format!(
            "kubernetes version {version} is not supported (1.26 or newer)"
        ));
    }
    Ok(if minor >= 31 {
        "kubeadm.k8s.io/v1beta4"
    } else {
        "kubeadm.k8s.io/v1beta3"
    })
}

/// The taints the node registers with: its taints, its startup taints and the CNI's.
pub fn registration_taints(input: &UserdataInput) -> Vec<Taint> {
    let mut taints: Vec<Taint> = input
        .taints
        .iter()
        .chain(&input.startup_taints)
        .cloned()
        .collect();
    if input.cni == Cni::Cilium && !taints.iter().any(|t| t.key == CILIUM_AGENT_NOT_READY) {
        taints.push(Taint {
            key: CILIUM_AGENT_NOT_READY.into(),
            value: "true".into(),
            effect: TaintEffect::NoExecute,
        });
    }
    taints
}

fn validate(input: &UserdataInput) -> Result<(), String> {
    if !is_token(&input.bootstrap_token) {
        return Err("bootstrap token is not of the form [a-z0-9]{6}.[a-z0-9]{16}".into());
    }
    if !is_ca_hash(&input.ca_cert_hash) {
        return Err("ca-cert-hash is not sha256:<64 hex digits>".into());
    }
    let ep = &input.api_endpoint;
    if ep.is_empty()
        || ep.contains("://")
        || ep
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b == b'"' || b == b'\\')
        || !ep.contains(':')
    {
        return Err(format!("api endpoint {ep:?} is not host:port"));
    }
    if !input.ca_bundle_pem.contains("-----BEGIN CERTIFICATE-----") {
        return Err("CA bundle holds no PEM certificate".into());
    }
    for l in &input.labels {
        if !is_label_key(&l.key) || !is_label_part(&l.value, true) {
            return Err(format!("invalid label {}={}", l.key, l.value));
        }
    }
    for t in input.taints.iter().chain(&input.startup_taints) {
        if !is_label_key(&t.key) || !is_label_part(&t.value, true) {
            return Err(format!("invalid taint {}={}", t.key, t.value));
        }
    }
    if let Some(name) = &input.node_name
        && (name.is_empty()
            || name.len() > 253
            || !name.split('.').all(|p| is_label_part(p, false))
            || name.bytes().any(|b| b.is_ascii_uppercase() || b == b'_'))
    {
        return Err(format!("invalid node name {name:?}"));
    }
    Ok(())
}

fn map_block(out: &mut String, indent: &str, key: &str, entries: &[Entry]) {
    if entries.is_empty() {
        return;
    }
    let _ = writeln!(out, "{indent}{key}:");
    for e in entries {
        let _ = writeln!(out, "{indent}  {}: {}", q(&e.key), q(&e.value));
    }
}

impl UserdataRenderer for KubeadmJoin {
    type Config = Config;

    fn render(input: &UserdataInput, config: &Config) -> Result<String, String> {
        validate(input)?;
        let api = kubeadm_api(&input.kubernetes_version)?;
        let c = "      "; // indent of file content inside write_files
        let mut join = String::new();
        let _ = writeln!(join, "{c}apiVersion: {api}");
        let _ = writeln!(join, "{c}kind: JoinConfiguration");
        let _ = writeln!(join, "{c}discovery:");
        let _ = writeln!(join, "{c}  bootstrapToken:");
        let _ = writeln!(join, "{c}    apiServerEndpoint: {}", q(&input.api_endpoint));
        let _ = writeln!(join, "{c}    token: {}", q(&input.bootstrap_token));
        let _ = writeln!(join, "{c}    caCertHashes:");
        let _ = writeln!(join, "{c}      - {}", q(&input.ca_cert_hash));
        let _ = writeln!(
            join,
            "{c}  tlsBootstrapToken: {}",
            q(&input.bootstrap_token)
        );
        let _ = writeln!(join, "{c}nodeRegistration:");
        if let Some(name) = &input.node_name {
            let _ = writeln!(join, "{c}  name: {}", q(name));
        }
        let labels: Vec<String> = input
            .labels
            .iter()
            .map(|l| format!("{}={}", l.key, l.value))
            .collect();
        if !labels.is_empty() {
            if api.ends_with("v1beta4") {
                let _ = writeln!(join, "{c}  kubeletExtraArgs:");
                let _ = writeln!(join, "{c}    - name: node-labels");
                let _ = writeln!(join, "{c}      value: {}", q(&labels.join(",")));
            } else {
                let _ = writeln!(join, "{c}  kubeletExtraArgs:");
                let _ = writeln!(join, "{c}    node-labels: {}", q(&labels.join(",")));
            }
        }
        let taints = registration_taints(input);
        if taints.is_empty() {
            let _ = writeln!(join, "{c}  taints: []");
        } else {
            let _ = writeln!(join, "{c}  taints:");
            for t in &taints {
                let _ = writeln!(join, "{c}    - key: {}", q(&t.key));
                if !t.value.is_empty() {
                    let _ = writeln!(join, "{c}      value: {}", q(&t.value));
                }
                let _ = writeln!(join, "{c}      effect: {}", effect(t.effect));
            }
        }
        let _ = writeln!(join, "{c}patches:");
        let _ = writeln!(join, "{c}  directory: /etc/kubernetes/patches");

        let k = &input.kubelet;
        let mut kubelet = String::new();
        let _ = writeln!(kubelet, "{c}apiVersion: kubelet.config.k8s.io/v1beta1");
        let _ = writeln!(kubelet, "{c}kind: KubeletConfiguration");
        if let Some(max) = k.max_pods {
            let _ = writeln!(kubelet, "{c}maxPods: {max}");
        }
        map_block(&mut kubelet, c, "kubeReserved", &k.kube_reserved);
        map_block(&mut kubelet, c, "systemReserved", &k.system_reserved);
        map_block(&mut kubelet, c, "evictionHard", &k.eviction_hard);
        if !k.cluster_dns.is_empty() {
            let _ = writeln!(kubelet, "{c}clusterDNS:");
            for d in &k.cluster_dns {
                let _ = writeln!(kubelet, "{c}  - {}", q(d));
            }
        }

        let mut out = String::from("#cloud-config\n");
        out.push_str(
            "# rendered by the kubeadm-userdata plugin of karpenter-provider-kakaocloud\n",
        );
        out.push_str("write_files:\n");
        let _ = writeln!(
            out,
            "  - path: {JOIN_CONFIG_PATH}\n    permissions: \"0600\"\n    content: |"
        );
        out.push_str(&join);
        out.push_str("  - path: /etc/kubernetes/patches/kubeletconfiguration+strategic.yaml\n    permissions: \"0644\"\n    content: |\n");
        out.push_str(&kubelet);
        out.push_str("  - path: /etc/kubernetes/karpenter-kakaocloud/ca-bundle.crt\n    permissions: \"0644\"\n    content: |\n");
        for line in input.ca_bundle_pem.lines() {
            let _ = writeln!(out, "{c}{line}");
        }
        out.push_str("runcmd:\n");
        for cmd in &config.pre_join_commands {
            let _ = writeln!(out, "  - [\"sh\", \"-c\", {}]", q(cmd));
        }
        let _ = writeln!(
            out,
            "  - [\"kubeadm\", \"join\", \"--config\", \"{JOIN_CONFIG_PATH}\"]"
        );
        Ok(out)
    }
}

karpenter_kakaocloud_sdk::export_userdata_renderer!(KubeadmJoin, wit = "../../wit");

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_kakaocloud_sdk::testing::{self, taint, userdata_input};

    #[test]
    fn cilium_gets_its_startup_taint_and_join_settings() {
        let mut input = userdata_input();
        input
            .taints
            .push(taint("dedicated", "gpu", TaintEffect::NoSchedule));
        let out = testing::render::<KubeadmJoin>(&input).unwrap();
        assert!(out.starts_with("#cloud-config\n"));
        assert!(
            out.contains("apiServerEndpoint: \"10.0.0.1:6443\""),
            "{out}"
        );
        assert!(out.contains("token: \"abcdef.0123456789abcdef\""));
        assert!(out.contains(&format!("- \"sha256:{}\"", "ab".repeat(32))));
        assert!(out.contains("name: \"default-abcde\""));
        assert!(out.contains("value: \"karpenter.sh/nodepool=default\""));
        assert!(out.contains("- key: \"node.cilium.io/agent-not-ready\"\n            value: \"true\"\n            effect: NoExecute"), "{out}");
        assert!(out.contains(
            "- key: \"dedicated\"\n            value: \"gpu\"\n            effect: NoSchedule"
        ));
        assert!(out.contains("maxPods: 110"));
        assert!(out.contains("\"memory.available\": \"100Mi\""));
        assert!(out.contains("apiVersion: kubeadm.k8s.io/v1beta4"));
        assert!(out.ends_with(
            "[\"kubeadm\", \"join\", \"--config\", \"/etc/kubernetes/kubeadm-join.yaml\"]\n"
        ));
    }

    #[test]
    fn calico_gets_no_cni_taint() {
        let mut input = userdata_input();
        input.cni = Cni::Calico;
        let out = testing::render::<KubeadmJoin>(&input).unwrap();
        assert!(!out.contains("cilium"), "{out}");
        assert!(out.contains("taints: []"));
    }

    #[test]
    fn bad_inputs_are_errors_not_yaml() {
        let mut input = userdata_input();
        input.bootstrap_token = "abcdef.0123\"\nrm -rf".into();
        assert!(
            testing::render::<KubeadmJoin>(&input)
                .unwrap_err()
                .contains("bootstrap token")
        );
        let mut input = userdata_input();
        input.ca_cert_hash = "md5:00".into();
        assert!(
            testing::render::<KubeadmJoin>(&input)
                .unwrap_err()
                .contains("ca-cert-hash")
        );
        let mut input = userdata_input();
        input.labels.push(Entry {
            key: "a".into(),
            value: "x,y=z".into(),
        });
        assert!(
            testing::render::<KubeadmJoin>(&input)
                .unwrap_err()
                .contains("invalid label")
        );
        let mut input = userdata_input();
        input.kubernetes_version = "1.20.1".into();
        assert!(testing::render::<KubeadmJoin>(&input).is_err());
    }

    #[test]
    fn older_kubeadm_api_and_pre_join_commands() {
        let mut input = userdata_input();
        input.kubernetes_version = "v1.30.4".into();
        let out = testing::with_config(r#"{"preJoinCommands":["echo \"hi\""]}"#, || {
            testing::render::<KubeadmJoin>(&input)
        })
        .unwrap();
        assert!(out.contains("apiVersion: kubeadm.k8s.io/v1beta3"));
        assert!(out.contains("node-labels: \"karpenter.sh/nodepool=default\""));
        assert!(
            out.contains("- [\"sh\", \"-c\", \"echo \\\"hi\\\"\"]"),
            "{out}"
        );
    }

    #[test]
    fn quoting_escapes_everything() {
        assert_eq!(q("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
    }
}
