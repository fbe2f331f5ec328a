//! {{name}}: a userdata-renderer policy for karpenter-provider-kakaocloud.
//!
//! Renders cloud-init that joins the node with kubeadm, with the NodePool's labels and taints
//! (startup taints included) on the kubelet. Settings (`config.json` of its ConfigMap), all
//! optional: `{"extraCommands": ["sysctl -w vm.max_map_count=262144"]}`, run before the join.

use karpenter_kakaocloud_sdk::prelude::*;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    pub extra_commands: Vec<String>,
}

pub struct Policy;

fn taint_arg(t: &Taint) -> String {
    let effect = match t.effect {
        TaintEffect::NoSchedule => "NoSchedule",
        TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        TaintEffect::NoExecute => "NoExecute",
    };
    format!("{}={}:{effect}", t.key, t.value)
}

impl UserdataRenderer for Policy {
    type Config = Config;

    fn render(input: &UserdataInput, config: &Config) -> Result<String, String> {
        let labels: Vec<String> = input.labels.iter().map(|e| format!("{}={}", e.key, e.value)).collect();
        let taints: Vec<String> = input.taints.iter().chain(&input.startup_taints).map(taint_arg).collect();
        let mut kubelet = format!("--node-labels={}", labels.join(","));
        if !taints.is_empty() {
            kubelet.push_str(&format!(" --register-with-taints={}", taints.join(",")));
        }
        let mut out = String::from("#cloud-config\nwrite_files:\n");
        out.push_str("  - path: /etc/default/kubelet\n    permissions: '0644'\n");
        out.push_str(&format!("    content: \"KUBELET_EXTRA_ARGS={kubelet}\\n\"\n"));
        out.push_str("runcmd:\n");
        for command in &config.extra_commands {
            out.push_str(&format!("  - {}\n", serde_json::to_string(command).map_err(|e| e.to_string())?));
        }
        out.push_str(&format!(
            "  - kubeadm join {} --token {} --discovery-token-ca-cert-hash {}\n",
            input.api_endpoint, input.bootstrap_token, input.ca_cert_hash
        ));
        Ok(out)
    }
}

karpenter_kakaocloud_sdk::export_userdata_renderer!(Policy);

#[cfg(test)]
mod tests {
    /// The cases `kk-plugin test` also runs against the built component.
    #[test]
    fn cases() {
        karpenter_kakaocloud_sdk::case::assert_render_cases::<super::Policy>("cases");
    }
}
