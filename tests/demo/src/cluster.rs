//! The local cluster: control plane, simulator, a managed node; kubectl, and what tests read.

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kakaocloud_sim::{SimConfig, Simulator};
use kk_apis::crd;
use kube::api::{Api, ListParams};

use crate::*;

/// A local cluster: control plane, simulator, a managed node, a work directory.
pub struct Cluster {
    pub cp: controlplane::ControlPlane,
    pub sim: Simulator,
    pub kube: kube::Client,
    pub work: tempfile::TempDir,
    _cilium: CiliumAgents,
}

impl Cluster {
    /// Starts a private control plane and the simulator (its cluster endpoint pointed at the
    /// control plane, its boot hook registering Nodes), and registers the managed node.
    pub async fn start(sim: SimConfig) -> anyhow::Result<Cluster> {
        Self::start_with(sim, controlplane::Options::default()).await
    }

    /// [`Cluster::start`] with control-plane options (extra API server flags, say).
    pub async fn start_with(
        sim: SimConfig,
        options: controlplane::Options,
    ) -> anyhow::Result<Cluster> {
        kakaocloud::install_crypto_provider();
        let cp = controlplane::start(options).await?;
        let kube = cp.client().await;
        let sim = Simulator::start(sim).await?;
        let url = reqwest_free_url(cp.server_url())?;
        sim.set_cluster_endpoint(&url.0, url.1, cp.ca_pem());
        let client = kube.clone();
        sim.set_boot_hook(move |booted| {
            let client = client.clone();
            Box::pin(async move { register_node(&client, &booted).await })
        });
        let cilium = cilium_agents(kube.clone());
        let cluster = Cluster {
            cp,
            sim,
            kube,
            work: tempfile::Builder::new().prefix("kk-demo-").tempdir()?,
            _cilium: cilium,
        };
        cluster.register_managed_node().await?;
        Ok(cluster)
    }
}

impl Cluster {
    /// `kubectl <args>` as the cluster admin.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
        let mut cmd = self.cp.kubectl();
        cmd.args(args);
        output(cmd, stdin, &format!("kubectl {}", args.join(" ")))
    }

    /// Runs a shell script the way a user types the guide's commands: `kubectl` and `helm` on
    /// PATH, KUBECONFIG the admin's, in the work directory.
    pub fn shell(&self, script: &str) -> anyhow::Result<String> {
        self.shell_with(script, &[])
    }

    /// [`Cluster::shell`] with extra environment (e.g. `SSL_CERT_FILE` trusting a test registry).
    pub fn shell_with(&self, script: &str, env: &[(&str, &Path)]) -> anyhow::Result<String> {
        let helm_dir = helm_path()
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let path = format!(
            "{}:{}:{}",
            self.cp.bin_dir().display(),
            helm_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let home = self.work.path().join("helm-home");
        let mut cmd = Command::new("bash");
        cmd.args(["-euo", "pipefail", "-c", script])
            .current_dir(self.work.path())
            .env("PATH", path)
            .env("KUBECONFIG", self.cp.kubeconfig_path())
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        output(cmd, None, "shell")
    }
}

impl Cluster {
    pub async fn nodeclaims(&self) -> anyhow::Result<Vec<crd::NodeClaim>> {
        Ok(Api::<crd::NodeClaim>::all(self.kube.clone())
            .list(&ListParams::default())
            .await?
            .items)
    }

    /// Nodes Karpenter launched for the guide's NodePool.
    pub async fn karpenter_nodes(&self) -> anyhow::Result<Vec<Node>> {
        Ok(Api::<Node>::all(self.kube.clone())
            .list(&ListParams::default().labels("karpenter.sh/nodepool=karpenter-default"))
            .await?
            .items)
    }

    pub async fn demo_pods(&self) -> anyhow::Result<Vec<Pod>> {
        Ok(Api::<Pod>::namespaced(self.kube.clone(), "default")
            .list(&ListParams::default().labels("app=karpenter-demo"))
            .await?
            .items)
    }

    /// Demo pods Running on a node.
    pub async fn running_demo_pods(&self) -> anyhow::Result<Vec<Pod>> {
        Ok(self
            .demo_pods()
            .await?
            .into_iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .collect())
    }
}

impl Cluster {
    /// Instance types of the NodeClaims of NodePool `pool`.
    pub async fn instance_types_of(&self, pool: &str) -> anyhow::Result<Vec<String>> {
        Ok(self
            .nodeclaims()
            .await?
            .into_iter()
            .filter(|c| {
                c.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("karpenter.sh/nodepool"))
                    .map(String::as_str)
                    == Some(pool)
            })
            .filter_map(|c| {
                c.metadata
                    .labels
                    .and_then(|mut l| l.remove("node.kubernetes.io/instance-type"))
            })
            .collect())
    }

    /// The leader-election Lease.
    pub async fn lease(&self) -> Option<Lease> {
        Api::<Lease>::namespaced(self.kube.clone(), NAMESPACE)
            .get_opt("karpenter-leader-election")
            .await
            .ok()?
    }

    /// Holder of the leader-election Lease.
    pub async fn lease_holder(&self) -> Option<String> {
        self.lease().await?.spec?.holder_identity
    }

    /// One line per NodeClaim, Node and demo pod, like the guide's three `kubectl get`s.
    pub async fn progress(&self) -> anyhow::Result<String> {
        let mut out = String::new();
        for claim in self.nodeclaims().await? {
            let v = serde_json::to_value(&claim)?;
            let true_conditions: Vec<&str> = v["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| c["status"] == "True")
                .filter_map(|c| c["type"].as_str())
                .collect();
            let labels = &v["metadata"]["labels"];
            out.push_str(&format!(
                "  nodeclaim {:<28} {:<12} {:<14} {}{}\n",
                claim.metadata.name.as_deref().unwrap_or(""),
                labels["node.kubernetes.io/instance-type"]
                    .as_str()
                    .unwrap_or("-"),
                labels["topology.kubernetes.io/zone"]
                    .as_str()
                    .unwrap_or("-"),
                true_conditions.join(","),
                if claim.metadata.deletion_timestamp.is_some() {
                    " (deleting)"
                } else {
                    ""
                }
            ));
        }
        for node in self.karpenter_nodes().await? {
            let ready = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .map(|c| c.status.as_str())
                .unwrap_or("Unknown");
            out.push_str(&format!(
                "  node      {:<28} Ready={ready}\n",
                node.metadata.name.as_deref().unwrap_or("")
            ));
        }
        for pod in self.demo_pods().await? {
            out.push_str(&format!(
                "  pod       {:<28} {:<10} {}\n",
                pod.metadata.name.as_deref().unwrap_or(""),
                pod.status
                    .as_ref()
                    .and_then(|s| s.phase.as_deref())
                    .unwrap_or(""),
                pod.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .unwrap_or("<pending>")
            ));
        }
        Ok(out)
    }

    /// Instances of the simulator (not deleted).
    pub fn instances(&self) -> Vec<kakaocloud::api::Instance> {
        self.sim.instances()
    }
}
