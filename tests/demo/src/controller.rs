//! The controller processes that play the Deployment's pods, and their logs.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams};
use serde_json::Value;

use crate::*;

impl Cluster {
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
        self.service_account_kubeconfig_via(self.cp.server_url(), "controller")
    }

    /// The same, reaching the API server at `server` (a proxy on the way, say).
    pub fn service_account_kubeconfig_via(
        &self,
        server: &str,
        name: &str,
    ) -> anyhow::Result<PathBuf> {
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
        let path = self.work.path().join(format!("{name}.kubeconfig"));
        let config = serde_json::json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": ca}}],
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
        let kubeconfig = self.service_account_kubeconfig()?;
        self.spawn_controller_with(binary, pod_name, overrides, &kubeconfig)
            .await
    }

    /// [`Cluster::spawn_controller`] with its own kubeconfig.
    pub async fn spawn_controller_with(
        &self,
        binary: &Path,
        pod_name: &str,
        overrides: &[(&str, &str)],
        kubeconfig: &Path,
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
        let log = self.work.path().join(format!("{pod_name}.log"));
        let file = std::fs::File::create(&log)?;
        let child = Command::new(binary)
            .env_clear()
            .envs(&env)
            .env("KUBECONFIG", kubeconfig)
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
}

/// `https://127.0.0.1:PORT` → ("127.0.0.1", PORT).
pub(crate) fn reqwest_free_url(url: &str) -> anyhow::Result<(String, u16)> {
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
    /// The process ID (for `/proc` readings).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

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
        http_get(port, path)
    }
}

/// GET `path` on a local port; `(status, body)`.
pub fn http_get(port: u16, path: &str) -> anyhow::Result<(u16, String)> {
    use std::io::Read as _;
    let mut sock = std::net::TcpStream::connect(("127.0.0.1", port))?;
    sock.set_read_timeout(Some(Duration::from_secs(5)))?;
    // HTTP/1.0: the body arrives whole, never chunked, and the connection closes after it.
    write!(sock, "GET {path} HTTP/1.0\r\nhost: localhost\r\n\r\n")?;
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

impl Drop for Controller {
    fn drop(&mut self) {
        if self.exited().is_none() {
            self.kill();
        }
    }
}

/// Reads a JSON value out of a controller's JSON log lines with `message`.
pub fn log_lines_with(log: &str, message: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["message"].as_str() == Some(message))
        .collect()
}
