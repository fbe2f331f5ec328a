//! Node bootstrap userdata: the [`UserdataRenderer`] seam (the userdata plugin implements it) and
//! a native default that renders a kubeadm-join cloud-init document. [`parse_registration`]
//! reads back what the kubelet would register with, so tests can boot "kubelets" from the real
//! rendered output.

use kk_apis::names::taint;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;

/// Everything a node needs to join.
#[derive(Clone, PartialEq)]
pub struct UserdataInput {
    /// `https://host:port` of the API server.
    pub api_endpoint: String,
    /// PEM of the cluster CA.
    pub ca_pem: String,
    /// `sha256:<hex>` of the CA's public key, as kubeadm wants it.
    pub ca_hash: String,
    /// `<id>.<secret>`; never logged.
    pub bootstrap_token: String,
    pub kubernetes_version: String,
    pub node_name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    /// Extra kubelet flags (`max-pods`, reservations...).
    pub kubelet_args: BTreeMap<String, String>,
    /// `cilium`, `calico` or `none`.
    pub cni: String,
}

impl std::fmt::Debug for UserdataInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserdataInput")
            .field("api_endpoint", &self.api_endpoint)
            .field("node_name", &self.node_name)
            .field("kubernetes_version", &self.kubernetes_version)
            .field("bootstrap_token", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// Why userdata could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserdataError {
    #[error("userdata renderer {renderer} failed: {message}")]
    Failed { renderer: String, message: String },
    #[error("userdata renderer {renderer} produced invalid output: {message}")]
    Invalid { renderer: String, message: String },
}

/// Largest userdata sent to KakaoCloud, before base64: the official Terraform provider's
/// instance docs allow "up to 16KB" of base64, which holds 12 KiB of text.
pub const USERDATA_MAX_BYTES: usize = 12 * 1024;

/// The first lines cloud-init acts on (its user-data formats); anything else would boot a node
/// that never joins.
const USERDATA_HEADERS: [&str; 5] = [
    "#cloud-config",
    "#!",
    "#cloud-boothook",
    "#include",
    "Content-Type: multipart/",
];

/// Why rendered userdata is refused before it reaches an instance.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidUserdata {
    #[error("userdata is empty")]
    Empty,
    #[error("userdata has {len} bytes, the limit is {max}")]
    TooLarge { len: usize, max: usize },
    #[error("userdata contains a NUL byte")]
    Nul,
    #[error(
        "userdata starts with {start:?}, not a cloud-init format (#cloud-config, #!, #cloud-boothook, #include, MIME multipart)"
    )]
    UnknownFormat { start: String },
}

/// Checks rendered userdata: non-empty, at most `max` bytes, no NUL, a cloud-init format.
pub fn validate(text: &str, max: usize) -> Result<(), InvalidUserdata> {
    if text.trim().is_empty() {
        return Err(InvalidUserdata::Empty);
    }
    if text.len() > max {
        return Err(InvalidUserdata::TooLarge {
            len: text.len(),
            max,
        });
    }
    if text.contains('\0') {
        return Err(InvalidUserdata::Nul);
    }
    if !USERDATA_HEADERS.iter().any(|h| text.starts_with(h)) {
        return Err(InvalidUserdata::UnknownFormat {
            start: text.chars().take(20).collect(),
        });
    }
    Ok(())
}

/// Renders a node's cloud-init. Implementations must be pure functions of the input.
pub trait UserdataRenderer: Send + Sync {
    fn name(&self) -> &str;
    fn render(&self, input: &UserdataInput) -> Result<String, UserdataError>;
}

/// The native default: `#cloud-config` writing a kubeadm `JoinConfiguration` and running
/// `kubeadm join`; the kubelet registers with the labels, the taints, the startup taints and
/// `karpenter.sh/unregistered:NoExecute`.
#[derive(Debug, Clone, Copy, Default)]
pub struct KubeadmRenderer;

/// The taint every node registers with until the lifecycle controller has synced it.
pub fn unregistered_taint() -> Taint {
    Taint {
        key: taint::UNREGISTERED.into(),
        value: None,
        effect: "NoExecute".into(),
        time_added: None,
    }
}

fn yaml_str(s: &str) -> String {
    // JSON strings are valid YAML flow scalars, with every special character escaped.
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn indent(text: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    text.lines()
        .map(|l| format!("{pad}{l}\n"))
        .collect::<String>()
}

impl UserdataRenderer for KubeadmRenderer {
    fn name(&self) -> &str {
        "native-kubeadm"
    }

    fn render(&self, input: &UserdataInput) -> Result<String, UserdataError> {
        let invalid = |m: &str| UserdataError::Invalid {
            renderer: self.name().into(),
            message: m.into(),
        };
        let endpoint = input
            .api_endpoint
            .trim_start_matches("https://")
            .trim_end_matches('/');
        if endpoint.is_empty() {
            return Err(invalid("the API endpoint is empty"));
        }
        if !input.bootstrap_token.contains('.') {
            return Err(invalid("the bootstrap token is not <id>.<secret>"));
        }
        let node_labels = input
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut taints = vec![unregistered_taint()];
        taints.extend(input.taints.iter().cloned());
        taints.extend(input.startup_taints.iter().cloned());
        let mut join = String::new();
        join.push_str("apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\n");
        join.push_str("discovery:\n  bootstrapToken:\n");
        join.push_str(&format!("    apiServerEndpoint: {}\n", yaml_str(endpoint)));
        join.push_str(&format!(
            "    token: {}\n",
            yaml_str(&input.bootstrap_token)
        ));
        join.push_str(&format!(
            "    caCertHashes: [{}]\n",
            yaml_str(&input.ca_hash)
        ));
        join.push_str("nodeRegistration:\n");
        join.push_str(&format!("  name: {}\n", yaml_str(&input.node_name)));
        join.push_str("  taints:\n");
        for t in &taints {
            join.push_str(&format!("  - key: {}\n", yaml_str(&t.key)));
            if let Some(v) = &t.value {
                join.push_str(&format!("    value: {}\n", yaml_str(v)));
            }
            join.push_str(&format!("    effect: {}\n", yaml_str(&t.effect)));
        }
        join.push_str("  kubeletExtraArgs:\n");
        join.push_str(&format!(
            "  - name: node-labels\n    value: {}\n",
            yaml_str(&node_labels)
        ));
        for (k, v) in &input.kubelet_args {
            join.push_str(&format!(
                "  - name: {}\n    value: {}\n",
                yaml_str(k),
                yaml_str(v)
            ));
        }
        let mut out = String::from("#cloud-config\n");
        out.push_str("write_files:\n");
        out.push_str("- path: /etc/kubernetes/pki/ca.crt\n  permissions: '0644'\n  content: |\n");
        out.push_str(&indent(&input.ca_pem, 4));
        out.push_str(
            "- path: /etc/kubernetes/kubeadm-join.yaml\n  permissions: '0600'\n  content: |\n",
        );
        out.push_str(&indent(&join, 4));
        out.push_str("runcmd:\n");
        match input.cni.as_str() {
            "cilium" => out.push_str("- [sysctl, -w, net.ipv4.conf.all.rp_filter=0]\n"),
            "calico" => out.push_str("- [modprobe, ipip]\n"),
            _ => {}
        }
        out.push_str(&format!(
            "- [kubeadm, join, --config, /etc/kubernetes/kubeadm-join.yaml]\n# kubernetes-version: {}\n",
            input.kubernetes_version
        ));
        Ok(out)
    }
}

/// What a kubelet started from some userdata registers with.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Registration {
    pub node_name: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
}

/// Reads the node name, labels (`node-labels`) and registration taints out of rendered userdata:
/// a kubeadm `JoinConfiguration` anywhere in the document (embedded or as a `write_files`
/// entry), or kubelet flags `--node-labels=` / `--register-with-taints=` on any line.
pub fn parse_registration(userdata: &str) -> Registration {
    let mut reg = Registration::default();
    // kubelet flags, if the renderer used them.
    for token in userdata.split_whitespace() {
        let token =
            token.trim_matches(|c| c == '"' || c == '\'' || c == ',' || c == '[' || c == ']');
        if let Some(v) = token.strip_prefix("--node-labels=") {
            parse_labels(v, &mut reg.labels);
        } else if let Some(v) = token.strip_prefix("--register-with-taints=") {
            for t in v.split(',').filter(|t| !t.is_empty()) {
                if let Some(t) = parse_taint(t) {
                    reg.taints.push(t);
                }
            }
        }
    }
    // kubeadm JoinConfiguration inside cloud-config: find it in the write_files contents.
    let docs = embedded_documents(userdata);
    for doc in docs {
        if doc.get("kind").and_then(|k| k.as_str()) != Some("JoinConfiguration") {
            continue;
        }
        let Some(nr) = doc.get("nodeRegistration") else {
            continue;
        };
        if let Some(name) = nr.get("name").and_then(|n| n.as_str()) {
            reg.node_name = Some(name.to_owned());
        }
        for t in nr
            .get("taints")
            .and_then(|t| t.as_sequence())
            .into_iter()
            .flatten()
        {
            let key = t.get("key").and_then(|k| k.as_str());
            let effect = t.get("effect").and_then(|k| k.as_str());
            if let (Some(key), Some(effect)) = (key, effect) {
                reg.taints.push(Taint {
                    key: key.to_owned(),
                    value: t.get("value").and_then(|v| v.as_str()).map(str::to_owned),
                    effect: effect.to_owned(),
                    time_added: None,
                });
            }
        }
        for arg in nr
            .get("kubeletExtraArgs")
            .and_then(|a| a.as_sequence())
            .into_iter()
            .flatten()
        {
            if arg.get("name").and_then(|n| n.as_str()) == Some("node-labels")
                && let Some(v) = arg.get("value").and_then(|v| v.as_str())
            {
                parse_labels(v, &mut reg.labels);
            }
        }
    }
    reg
}

fn embedded_documents(userdata: &str) -> Vec<serde_yaml::Value> {
    let mut out = Vec::new();
    let Ok(top) = serde_yaml::from_str::<serde_yaml::Value>(userdata) else {
        return out;
    };
    out.push(top.clone());
    for f in top
        .get("write_files")
        .and_then(|w| w.as_sequence())
        .into_iter()
        .flatten()
    {
        if let Some(content) = f.get("content").and_then(|c| c.as_str()) {
            for doc in serde_yaml::Deserializer::from_str(content) {
                if let Ok(v) = serde_yaml::Value::deserialize(doc) {
                    out.push(v);
                }
            }
        }
    }
    out
}

use serde::Deserialize as _;

fn parse_labels(raw: &str, into: &mut BTreeMap<String, String>) {
    for pair in raw.split(',').filter(|p| !p.is_empty()) {
        if let Some((k, v)) = pair.split_once('=') {
            into.insert(k.to_owned(), v.to_owned());
        }
    }
}

fn parse_taint(raw: &str) -> Option<Taint> {
    let (kv, effect) = raw.rsplit_once(':')?;
    let (key, value) = match kv.split_once('=') {
        Some((k, v)) => (k, Some(v.to_owned())),
        None => (kv, None),
    };
    Some(Taint {
        key: key.to_owned(),
        value,
        effect: effect.to_owned(),
        time_added: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userdata_is_validated_for_size_nul_and_format() {
        let ok = "#cloud-config\nruncmd: []\n";
        assert_eq!(validate(ok, 100), Ok(()));
        assert_eq!(validate("#!/bin/sh\necho hi\n", 100), Ok(()));
        assert_eq!(validate("  \n", 100), Err(InvalidUserdata::Empty));
        assert_eq!(
            validate(ok, 10),
            Err(InvalidUserdata::TooLarge {
                len: ok.len(),
                max: 10
            })
        );
        assert_eq!(validate("#!/bin/sh\0", 100), Err(InvalidUserdata::Nul));
        assert!(matches!(
            validate("echo pwned", 100),
            Err(InvalidUserdata::UnknownFormat { .. })
        ));
    }

    #[test]
    fn the_native_renderer_output_is_valid_userdata() {
        let text = KubeadmRenderer.render(&input()).unwrap();
        assert_eq!(validate(&text, USERDATA_MAX_BYTES), Ok(()));
    }

    fn input() -> UserdataInput {
        UserdataInput {
            api_endpoint: "https://10.0.0.1:6443".into(),
            ca_pem: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into(),
            ca_hash: "sha256:abcd".into(),
            bootstrap_token: "abcdef.0123456789abcdef".into(),
            kubernetes_version: "1.35".into(),
            node_name: "kk-demo-default-abcde".into(),
            labels: [
                ("karpenter.sh/nodepool".to_owned(), "default".to_owned()),
                ("workload-type".to_owned(), "karpenter".to_owned()),
            ]
            .into(),
            taints: vec![Taint {
                key: "dedicated".into(),
                value: Some("gpu".into()),
                effect: "NoSchedule".into(),
                time_added: None,
            }],
            startup_taints: vec![Taint {
                key: "node.cilium.io/agent-not-ready".into(),
                value: Some("true".into()),
                effect: "NoExecute".into(),
                time_added: None,
            }],
            kubelet_args: [("max-pods".to_owned(), "110".to_owned())].into(),
            cni: "cilium".into(),
        }
    }

    #[test]
    fn rendered_userdata_parses_back_to_its_registration() {
        let text = KubeadmRenderer.render(&input()).unwrap();
        assert!(text.starts_with("#cloud-config\n"));
        let reg = parse_registration(&text);
        assert_eq!(reg.node_name.as_deref(), Some("kk-demo-default-abcde"));
        assert_eq!(reg.labels["workload-type"], "karpenter");
        assert_eq!(reg.labels["karpenter.sh/nodepool"], "default");
        let keys: Vec<&str> = reg.taints.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "karpenter.sh/unregistered",
                "dedicated",
                "node.cilium.io/agent-not-ready"
            ]
        );
        assert_eq!(reg.taints[1].value.as_deref(), Some("gpu"));
        assert_eq!(reg.taints[0].effect, "NoExecute");
    }

    #[test]
    fn kubelet_flags_are_understood_too() {
        let reg = parse_registration(
            "#!/bin/sh\nkubelet --node-labels=a=1,b=2 --register-with-taints=x=y:NoSchedule,z:NoExecute\n",
        );
        assert_eq!(reg.labels.len(), 2);
        assert_eq!(reg.taints.len(), 2);
        assert_eq!(reg.taints[1].key, "z");
        assert_eq!(reg.taints[1].value, None);
    }

    #[test]
    fn bad_inputs_are_refused_and_the_token_is_not_debug_printed() {
        let mut i = input();
        i.bootstrap_token = "nodot".into();
        assert!(KubeadmRenderer.render(&i).is_err());
        let i = input();
        assert!(!format!("{i:?}").contains("0123456789abcdef"));
        let mut i = input();
        i.api_endpoint = String::new();
        assert!(KubeadmRenderer.render(&i).is_err());
    }

    #[test]
    fn hostile_label_values_cannot_break_the_yaml() {
        let mut i = input();
        i.labels
            .insert("evil".into(), "x\"\n  injected: true".into());
        let text = KubeadmRenderer.render(&i).unwrap();
        let reg = parse_registration(&text);
        assert_eq!(reg.node_name.as_deref(), Some("kk-demo-default-abcde"));
        assert!(reg.labels["evil"].starts_with("x\""));
    }
}
