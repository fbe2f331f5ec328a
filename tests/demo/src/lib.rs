//! The install guide, driven the way a user follows it, on a local cluster: a private control
//! plane (kwok plays the kubelets), the KakaoCloud simulator in this process (its boot hook plays
//! the kubelet of each instance that boots, registering the Node from the instance's userdata),
//! the chart installed with helm, and the controller binary run as local processes with the env
//! of the Deployment helm rendered (secretKeyRefs resolved from the Secrets, fieldRefs from the
//! Deployment's pods) and a kubeconfig of the chart's ServiceAccount, so the chart's RBAC is what
//! the controller gets. kwok shows the Deployment's pods Running and Ready but does not execute
//! them; the local processes are those pods.
//!
//! Used by `kk-demo` (scripts/demo.sh) and by the chart tests of the host crate.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Pod, Secret};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kakaocloud_sim::{BootedInstance, SimConfig, Simulator};
use kk_apis::crd;
use kk_apis::names::taint::CILIUM_AGENT_NOT_READY;
use kk_engine::userdata::parse_registration;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use serde_json::Value;

pub const NAMESPACE: &str = "karpenter-kakaocloud";
pub const RELEASE: &str = "karpenter-provider-kakaocloud";
pub const CLUSTER: &str = "demo-cluster";
pub const PROJECT: &str = "proj-1";
pub const SUBNET: &str = "subnet-proj-1-a";
pub const WORKER_SG: &str = "sg-proj-1-demo-cluster-worker";
pub const KUBERNETES_MINOR: &str = "1.35";
/// The managed node the controller pods run on (a KE node pool node, played by kwok).
pub const MANAGED_NODE: &str = "ke-managed-worker-1";

/// A plugin component built by scripts/build-plugins.sh (`<crate_file>.wasm` in $KK_PLUGIN_DIR).
pub fn plugin_component(crate_file: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::var_os("KK_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/karpenter-kakaocloud/plugins")
        });
    let path = dir.join(format!("{crate_file}.wasm"));
    if !path.is_file() {
        bail!(
            "{} is missing: run scripts/build-plugins.sh",
            path.display()
        );
    }
    Ok(path)
}

/// The family of an instance type name (`r2a` of `r2a.large`).
pub fn family(instance_type: &str) -> &str {
    instance_type.split('.').next().unwrap_or_default()
}

/// A general-purpose family none of `instance_types` belongs to: what the hot-swap demos ask
/// the example selector to prefer, so its effect is visible.
pub fn family_not_among(instance_types: &[String]) -> &'static str {
    ["r2a", "m2a", "c2a"]
        .into_iter()
        .find(|f| !instance_types.iter().any(|t| family(t) == *f))
        .expect("three families, the default picks at most two")
}

/// The bytes of a built plugin component (see [`plugin_component`]).
pub fn read_plugin(crate_file: &str) -> anyhow::Result<Vec<u8>> {
    let path = plugin_component(crate_file)?;
    std::fs::read(&path).with_context(|| format!("reading {}", path.display()))
}

/// A plugin ConfigMap of the release namespace, as scripts/plugin-configmap.sh writes it: the
/// gzip component, `digest` as its sha256 annotation, the world label, `config` as config.json.
pub fn plugin_configmap_json(
    name: &str,
    world: &str,
    wasm: &[u8],
    digest: &str,
    config: &str,
) -> anyhow::Result<String> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(wasm)?;
    let cm = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {kk_apis::names::label::PLUGIN_WORLD: world},
            "annotations": {kk_apis::names::annotation::PLUGIN_SHA256: digest},
        },
        "data": {"config.json": config},
        "binaryData": {"plugin.wasm": base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            gz.finish()?,
        )},
    });
    Ok(cm.to_string())
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn chart_dir() -> PathBuf {
    repo_root().join("charts/karpenter-provider-kakaocloud")
}

pub fn guide_path(name: &str) -> PathBuf {
    repo_root().join("examples/install-guide").join(name)
}

pub fn guide_file(name: &str) -> String {
    std::fs::read_to_string(guide_path(name)).unwrap_or_else(|e| panic!("guide file {name}: {e}"))
}

/// The helm binary `tests/controlplane/build-helm.sh` builds (version from its go.mod).
pub fn helm_path() -> PathBuf {
    let go_mod = include_str!("../../controlplane/go/helm/go.mod");
    let version = go_mod
        .lines()
        .find_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("helm.sh/helm/v4"))
                .then(|| words.next())
                .flatten()
        })
        .map(str::to_owned)
        .unwrap_or_else(|| "unknown".into());
    controlplane::default_bin_dir()
        .parent()
        .and_then(Path::parent)
        .map(|root| root.join(format!("helm-{version}/helm")))
        .unwrap_or_default()
}

/// The guide's KCNodeClass with its placeholders filled for the simulator.
pub fn guide_nodeclass() -> String {
    guide_file("kcnodeclass.yaml")
        .replace("<SUBNET_ID>", SUBNET)
        .replace("<WORKER_SECURITY_GROUP_ID>", WORKER_SG)
        .replace("<KUBERNETES_MAJOR.MINOR>", KUBERNETES_MINOR)
}

/// A free TCP port on loopback (bound and released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

fn output(mut cmd: Command, stdin: Option<&str>, what: &str) -> anyhow::Result<String> {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().with_context(|| format!("starting {what}"))?;
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .ok_or_else(|| anyhow!("no stdin"))?
            .write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A local cluster: control plane, simulator, a managed node, a work directory.
pub struct Cluster {
    pub cp: controlplane::ControlPlane,
    pub sim: Simulator,
    pub kube: kube::Client,
    pub work: tempfile::TempDir,
}

impl Cluster {
    /// Starts a private control plane and the simulator (its cluster endpoint pointed at the
    /// control plane, its boot hook registering Nodes), and registers the managed node.
    pub async fn start(sim: SimConfig) -> anyhow::Result<Cluster> {
        kakaocloud::install_crypto_provider();
        let cp = controlplane::start(controlplane::Options::default()).await?;
        let kube = cp.client().await;
        let sim = Simulator::start(sim).await?;
        let url = reqwest_free_url(cp.server_url())?;
        sim.set_cluster_endpoint(&url.0, url.1, cp.ca_pem());
        let client = kube.clone();
        sim.set_boot_hook(move |booted| {
            let client = client.clone();
            Box::pin(async move { register_node(&client, &booted).await })
        });
        let cluster = Cluster {
            cp,
            sim,
            kube,
            work: tempfile::Builder::new().prefix("kk-demo-").tempdir()?,
        };
        cluster.register_managed_node().await?;
        Ok(cluster)
    }

    async fn register_managed_node(&self) -> anyhow::Result<()> {
        let capacity: BTreeMap<String, Quantity> = [
            ("cpu", "4"),
            ("memory", "16Gi"),
            ("pods", "110"),
            ("ephemeral-storage", "100Gi"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Quantity(v.to_owned())))
        .collect();
        let (ann_key, ann_value) = controlplane::KWOK_NODE_ANNOTATION;
        let node = Node {
            metadata: ObjectMeta {
                name: Some(MANAGED_NODE.into()),
                labels: Some(
                    [
                        ("kubernetes.io/hostname", MANAGED_NODE),
                        ("kubernetes.io/os", "linux"),
                        ("kubernetes.io/arch", "amd64"),
                        ("kakaoi.io/kke-nodepool", "system"),
                    ]
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
                ),
                annotations: Some([(ann_key.to_owned(), ann_value.to_owned())].into()),
                ..Default::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                allocatable: Some(capacity.clone()),
                capacity: Some(capacity),
                ..Default::default()
            }),
        };
        Api::<Node>::all(self.kube.clone())
            .create(&PostParams::default(), &node)
            .await?;
        Ok(())
    }

    /// `kubectl <args>` as the cluster admin.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
        let mut cmd = self.cp.kubectl();
        cmd.args(args);
        output(cmd, stdin, &format!("kubectl {}", args.join(" ")))
    }

    /// Runs a shell script the way a user types the guide's commands: `kubectl` and `helm` on
    /// PATH, KUBECONFIG the admin's, in the work directory.
    pub fn shell(&self, script: &str) -> anyhow::Result<String> {
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
        output(cmd, None, "shell")
    }

    /// Step 1: the namespace and both Secrets, with the guide's commands (the simulator's
    /// application credential as the IAM access key).
    pub fn step1_secrets(&self) -> anyhow::Result<()> {
        let creds = self.sim.describe();
        let id = creds["applicationCredentialId"]
            .as_str()
            .unwrap_or_default();
        let secret = creds["applicationCredentialSecret"]
            .as_str()
            .unwrap_or_default();
        self.shell(&format!(
            r#"
kubectl create namespace karpenter-kakaocloud --dry-run=client -o yaml \
  | kubectl apply -f -

export APP_CRED_ID='{id}'
export APP_CRED_SECRET='{secret}'

kubectl -n karpenter-kakaocloud create secret generic kakaocloud-credentials \
  --from-literal=applicationCredentialId="$APP_CRED_ID" \
  --from-literal=applicationCredentialSecret="$APP_CRED_SECRET" \
  --from-literal=region=kr-central-2

unset APP_CRED_ID APP_CRED_SECRET

KEY=$(head -c 32 /dev/urandom | base64)
printf '{{"activeKeyID":"k1","keys":[{{"id":"k1","key":"%s"}}]}}\n' "$KEY" > keyring.json

kubectl -n karpenter-kakaocloud create secret generic karpenter-sigkey \
  --from-file=keyring.json=./keyring.json

unset KEY
rm keyring.json
"#
        ))?;
        let keys = self.shell(
            r#"kubectl -n karpenter-kakaocloud get secret kakaocloud-credentials \
  -o go-template='{{range $key, $value := .data}}{{$key}}{{"\n"}}{{end}}'"#,
        )?;
        let keys: Vec<&str> = keys.lines().collect();
        if keys
            != [
                "applicationCredentialId",
                "applicationCredentialSecret",
                "region",
            ]
        {
            bail!("the credentials Secret has keys {keys:?}");
        }
        Ok(())
    }

    /// Step 2: the guide's `helm upgrade --install ... --wait`, from the chart directory instead
    /// of the OCI registry, with the simulator's endpoints and `extra` `--set` flags. Returns how
    /// long helm took.
    pub fn step2_install(&self, extra: &[&str]) -> anyhow::Result<Duration> {
        let mut sets = String::new();
        for (service, url) in self.sim.endpoint_overrides() {
            sets.push_str(&format!("  --set endpoints.{service}={url} \\\n"));
        }
        for e in extra {
            sets.push_str(&format!("  --set {e} \\\n"));
        }
        let started = Instant::now();
        self.shell(&format!(
            r#"
helm upgrade --install karpenter-provider-kakaocloud \
  {chart} \
  --namespace karpenter-kakaocloud \
  --create-namespace \
  --set clusterName='{CLUSTER}' \
  --set projectID='{PROJECT}' \
  --set credentials.secretName=kakaocloud-credentials \
  --set sigKey.secretName=karpenter-sigkey \
{sets}  --wait \
  --timeout 10m
"#,
            chart = chart_dir().display()
        ))?;
        Ok(started.elapsed())
    }

    /// `kubectl get deployment` of Step 2: the READY column.
    pub fn deployment_ready(&self) -> anyhow::Result<String> {
        let out = self.kubectl(
            &[
                "-n",
                NAMESPACE,
                "get",
                "deployment",
                RELEASE,
                "-o",
                "jsonpath={.status.readyReplicas}/{.spec.replicas}",
            ],
            None,
        )?;
        Ok(out)
    }

    /// Names of the Deployment's pods (kwok runs them; our processes play them).
    pub async fn controller_pods(&self) -> anyhow::Result<Vec<String>> {
        let pods: Api<Pod> = Api::namespaced(self.kube.clone(), NAMESPACE);
        let list = pods
            .list(
                &ListParams::default()
                    .labels("app.kubernetes.io/name=karpenter-provider-kakaocloud"),
            )
            .await?;
        let mut names: Vec<String> = list
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        names.sort();
        Ok(names)
    }

    /// The controller container's env as the kubelet would give it to pod `pod_name`: values,
    /// secretKeyRefs read from the Secrets, fieldRefs of the pod.
    pub async fn controller_env(&self, pod_name: &str) -> anyhow::Result<BTreeMap<String, String>> {
        let deployment = Api::<Deployment>::namespaced(self.kube.clone(), NAMESPACE)
            .get(RELEASE)
            .await?;
        let container = deployment
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|s| s.containers.into_iter().find(|c| c.name == "controller"))
            .ok_or_else(|| anyhow!("the Deployment has no controller container"))?;
        let secrets: Api<Secret> = Api::namespaced(self.kube.clone(), NAMESPACE);
        let mut env = BTreeMap::new();
        for var in container.env.unwrap_or_default() {
            let value = if let Some(v) = var.value {
                v
            } else if let Some(from) = var.value_from {
                if let Some(r) = from.secret_key_ref {
                    let secret = secrets.get(&r.name).await?;
                    let bytes = secret
                        .data
                        .and_then(|d| d.get(&r.key).cloned())
                        .ok_or_else(|| anyhow!("Secret {} has no key {}", r.name, r.key))?;
                    String::from_utf8(bytes.0)?
                } else if let Some(f) = from.field_ref {
                    match f.field_path.as_str() {
                        "metadata.namespace" => NAMESPACE.to_owned(),
                        "metadata.name" => pod_name.to_owned(),
                        other => bail!("unexpected fieldRef {other}"),
                    }
                } else {
                    bail!("env {} has an unsupported valueFrom", var.name);
                }
            } else {
                String::new()
            };
            env.insert(var.name, value);
        }
        Ok(env)
    }

    /// A kubeconfig with a token of the chart's ServiceAccount (what the pod would mount).
    pub fn service_account_kubeconfig(&self) -> anyhow::Result<PathBuf> {
        let token = self.kubectl(
            &[
                "-n",
                NAMESPACE,
                "create",
                "token",
                RELEASE,
                "--duration",
                "2h",
            ],
            None,
        )?;
        let ca = self.work.path().join("ca.crt");
        std::fs::write(&ca, self.cp.ca_pem())?;
        let path = self.work.path().join("controller.kubeconfig");
        let config = serde_json::json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "local", "cluster": {"server": self.cp.server_url(), "certificate-authority": ca}}],
            "users": [{"name": "controller", "user": {"token": token.trim()}}],
            "contexts": [{"name": "controller", "context": {"cluster": "local", "user": "controller"}}],
            "current-context": "controller",
        });
        std::fs::write(&path, serde_yaml::to_string(&config)?)?;
        Ok(path)
    }

    /// Starts the controller binary as pod `pod_name` would run: its env, the ServiceAccount's
    /// kubeconfig, free local ports for metrics and probes (the pod's own would collide), and
    /// `overrides` on top.
    pub async fn spawn_controller(
        &self,
        binary: &Path,
        pod_name: &str,
        overrides: &[(&str, &str)],
    ) -> anyhow::Result<Controller> {
        let mut env = self.controller_env(pod_name).await?;
        let (metrics_port, health_port) = (free_port(), free_port());
        env.insert("METRICS_PORT".into(), metrics_port.to_string());
        env.insert("HEALTH_PROBE_PORT".into(), health_port.to_string());
        // The pod's emptyDir, one per pod.
        let cache = self.work.path().join(format!("{pod_name}-plugin-cache"));
        env.insert("PLUGIN_CACHE_DIR".into(), cache.display().to_string());
        for (k, v) in overrides {
            env.insert((*k).into(), (*v).into());
        }
        let kubeconfig = self.service_account_kubeconfig()?;
        let log = self.work.path().join(format!("{pod_name}.log"));
        let file = std::fs::File::create(&log)?;
        let child = Command::new(binary)
            .env_clear()
            .envs(&env)
            .env("KUBECONFIG", &kubeconfig)
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        Ok(Controller {
            pod: pod_name.to_owned(),
            child,
            log,
            metrics_port,
            health_port,
        })
    }

    /// Step 3: the guide's KCNodeClass; waits until its six conditions are True.
    pub async fn step3_nodeclass(
        &self,
        timeout: Duration,
    ) -> anyhow::Result<Vec<(String, String)>> {
        self.kubectl(&["apply", "-f", "-"], Some(&guide_nodeclass()))?;
        let deadline = Instant::now() + timeout;
        loop {
            let out = self.kubectl(
                &[
                    "get",
                    "kcnodeclass",
                    "karpenter-default",
                    "-o",
                    r#"jsonpath={range .status.conditions[*]}{.type}{"\t"}{.status}{"\n"}{end}"#,
                ],
                None,
            )?;
            let conditions: Vec<(String, String)> = out
                .lines()
                .filter_map(|l| l.split_once('\t'))
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .collect();
            if conditions.len() >= 6 && conditions.iter().all(|(_, s)| s == "True") {
                return Ok(conditions);
            }
            if Instant::now() > deadline {
                bail!("KCNodeClass not Ready in {timeout:?}: {conditions:?}");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Step 4: the guide's NodePool (this cluster's CNI is not Cilium: no startup taint).
    pub fn step4_nodepool(&self) -> anyhow::Result<()> {
        self.kubectl(
            &[
                "apply",
                "-f",
                &guide_path("nodepool.yaml").display().to_string(),
            ],
            None,
        )?;
        Ok(())
    }

    /// Step 5: the guide's demo Deployment, in `default`.
    pub fn step5_demo(&self) -> anyhow::Result<()> {
        self.kubectl(
            &[
                "apply",
                "-f",
                &guide_path("karpenter-demo.yaml").display().to_string(),
            ],
            None,
        )?;
        Ok(())
    }

    pub fn delete_demo(&self) -> anyhow::Result<()> {
        self.kubectl(
            &[
                "delete",
                "-f",
                &guide_path("karpenter-demo.yaml").display().to_string(),
            ],
            None,
        )?;
        Ok(())
    }

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

    /// The hot swap: replaces the `instance-selector` ConfigMap (the chart's) with the built
    /// component `crate_file` (e.g. `gpu_aware_selector`) and `config`, as
    /// `scripts/plugin-configmap.sh <crate> --name instance-selector | kubectl apply -f -` does.
    /// Returns the component's sha256.
    pub fn swap_selector(&self, crate_file: &str, config: &str) -> anyhow::Result<String> {
        let wasm = read_plugin(crate_file)?;
        let digest = kk_plugin_runtime::engine::sha256_hex(&wasm);
        let cm = plugin_configmap_json(
            "instance-selector",
            "instance-selector",
            &wasm,
            &digest,
            config,
        )?;
        self.kubectl(&["apply", "-f", "-"], Some(&cm))?;
        Ok(digest)
    }

    /// Events the controllers published on plugin ConfigMap `name`: (reason, message).
    pub async fn plugin_events(&self, name: &str) -> anyhow::Result<Vec<(String, String)>> {
        let events =
            Api::<k8s_openapi::api::events::v1::Event>::namespaced(self.kube.clone(), NAMESPACE)
                .list(&ListParams::default())
                .await?;
        Ok(events
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                    && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("ConfigMap")
            })
            .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect())
    }

    /// Waits until the controllers published a `reason` Event on plugin ConfigMap `name` whose
    /// message contains `containing`; returns the message.
    pub async fn wait_plugin_event(
        &self,
        name: &str,
        reason: &str,
        containing: &str,
        timeout: Duration,
    ) -> anyhow::Result<String> {
        wait_for(&format!("a {reason} Event on {name}"), timeout, || async {
            Ok(self
                .plugin_events(name)
                .await?
                .into_iter()
                .find(|(r, n)| r == reason && n.contains(containing))
                .map(|(_, n)| n))
        })
        .await
    }

    /// A second NodePool (`swap-demo`, same KCNodeClass) and a one-replica Deployment that only
    /// it can serve, so the next node is a new one whose flavor the active selector chose.
    pub fn apply_swap_workload(&self) -> anyhow::Result<()> {
        let manifest = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: swap-demo
spec:
  template:
    metadata:
      labels:
        workload-type: swap-demo
    spec:
      requirements:
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["on-demand"]
      nodeClassRef:
        group: karpenter.kakaocloud.com
        kind: KCNodeClass
        name: karpenter-default
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: swap-demo
  namespace: default
spec:
  replicas: 1
  selector:
    matchLabels: {app: swap-demo}
  template:
    metadata:
      labels: {app: swap-demo}
    spec:
      nodeSelector:
        workload-type: swap-demo
      containers:
        - name: app
          image: registry.k8s.io/pause:3.9
          resources:
            requests: {cpu: "1", memory: 2Gi}
"#;
        self.kubectl(&["apply", "-f", "-"], Some(manifest))?;
        Ok(())
    }

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

    /// Holder of the leader-election Lease.
    pub async fn lease_holder(&self) -> Option<String> {
        Api::<Lease>::namespaced(self.kube.clone(), NAMESPACE)
            .get_opt("karpenter-leader-election")
            .await
            .ok()??
            .spec?
            .holder_identity
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

/// `https://127.0.0.1:PORT` → ("127.0.0.1", PORT).
fn reqwest_free_url(url: &str) -> anyhow::Result<(String, u16)> {
    let rest = url
        .strip_prefix("https://")
        .ok_or_else(|| anyhow!("server URL {url} is not https"))?;
    let (host, port) = rest
        .trim_end_matches('/')
        .rsplit_once(':')
        .ok_or_else(|| anyhow!("server URL {url} has no port"))?;
    Ok((host.to_owned(), port.parse()?))
}

/// A controller process playing one of the Deployment's pods.
pub struct Controller {
    pub pod: String,
    child: Child,
    pub log: PathBuf,
    pub metrics_port: u16,
    pub health_port: u16,
}

impl Controller {
    /// SIGKILL: no chance to release the Lease.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait up to `grace`, then SIGKILL. Returns the exit code.
    pub fn terminate(&mut self, grace: Duration) -> Option<i32> {
        // The pid is our own child's.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
        None
    }

    /// `Some(code)` once the process has exited.
    pub fn exited(&mut self) -> Option<Option<i32>> {
        self.child.try_wait().ok().flatten().map(|s| s.code())
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GET `path` on one of its ports; `(status, body)`.
    pub fn http_get(&self, port: u16, path: &str) -> anyhow::Result<(u16, String)> {
        use std::io::Read as _;
        let mut sock = std::net::TcpStream::connect(("127.0.0.1", port))?;
        sock.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(
            sock,
            "GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n"
        )?;
        let mut out = String::new();
        sock.read_to_string(&mut out)?;
        let status = out
            .get(9..12)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| anyhow!("not an HTTP response: {out:?}"))?;
        let body = out
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        Ok((status, body))
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if self.exited().is_none() {
            self.kill();
        }
    }
}

/// What kubelet does on first start: register the Node from the userdata's JoinConfiguration
/// (labels, taints, name), with the flavor's capacity, the providerID kubelet reports and the
/// kwok annotation (kwok then keeps it Ready and runs its pods). Same as the host tests' support.
pub async fn register_node(client: &kube::Client, booted: &BootedInstance) {
    let Some(userdata) = booted.user_data.as_deref() else {
        tracing::warn!(instance = %booted.id, "booted without userdata: no kubelet");
        return;
    };
    let reg = parse_registration(userdata);
    let name = reg.node_name.clone().unwrap_or_else(|| booted.name.clone());
    let mut labels = reg.labels.clone();
    labels.insert("kubernetes.io/hostname".into(), name.clone());
    labels.insert("kubernetes.io/os".into(), "linux".into());
    labels.insert("kubernetes.io/arch".into(), "amd64".into());
    labels.insert(
        "node.kubernetes.io/instance-type".into(),
        booted.flavor.name.clone(),
    );
    labels.insert("topology.kubernetes.io/zone".into(), booted.zone.clone());
    let mut capacity = BTreeMap::new();
    capacity.insert("cpu".to_owned(), Quantity(booted.flavor.vcpus.to_string()));
    capacity.insert(
        "memory".to_owned(),
        Quantity(format!("{}Mi", booted.flavor.memory_mib)),
    );
    capacity.insert("pods".to_owned(), Quantity("110".into()));
    capacity.insert("ephemeral-storage".to_owned(), Quantity("50Gi".into()));
    if booted.flavor.gpus > 0 {
        capacity.insert(
            "nvidia.com/gpu".to_owned(),
            Quantity(booted.flavor.gpus.to_string()),
        );
    }
    let (ann_key, ann_value) = controlplane::KWOK_NODE_ANNOTATION;
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(labels),
            annotations: Some([(ann_key.to_owned(), ann_value.to_owned())].into()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(kk_apis::provider_id::provider_id(&booted.zone, &booted.id)),
            taints: (!reg.taints.is_empty()).then_some(reg.taints.clone()),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            allocatable: Some(capacity.clone()),
            capacity: Some(capacity),
            ..Default::default()
        }),
    };
    if let Err(e) = Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
    {
        tracing::warn!(node = %name, error = %e, "simulated kubelet could not register");
        return;
    }
    if reg.taints.iter().any(|t| t.key == CILIUM_AGENT_NOT_READY) {
        tokio::spawn(cilium_agent(client.clone(), name));
    }
}

/// Plays Cilium's agent on a node: once kwok reports the Node Ready, it removes
/// `node.cilium.io/agent-not-ready`, as the agent does when the node's networking is up.
async fn cilium_agent(client: kube::Client, node: String) {
    let api = Api::<Node>::all(client);
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let Ok(Some(current)) = api.get_opt(&node).await else {
            continue;
        };
        let ready = current
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if !ready {
            continue;
        }
        let taints: Vec<_> = current
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|t| t.key != CILIUM_AGENT_NOT_READY)
            .collect();
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": current.metadata.resource_version},
            "spec": {"taints": taints},
        });
        match api
            .patch(
                &node,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => return,
            Err(e) => tracing::debug!(%node, error = %e, "simulated cilium agent retries"),
        }
    }
}

/// Polls `check` every 200 ms until it gives `Some`, or fails after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, check: F) -> anyhow::Result<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_error = None;
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
        if Instant::now() > deadline {
            bail!(
                "timed out after {timeout:?} waiting for {what}{}",
                last_error
                    .map(|e| format!(" (last error: {e:#})"))
                    .unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Reads a JSON value out of a controller's JSON log lines with `message`.
pub fn log_lines_with(log: &str, message: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["message"].as_str() == Some(message))
        .collect()
}
