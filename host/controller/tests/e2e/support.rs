//! A whole cluster for end-to-end tests: a private control plane, the KakaoCloud simulator whose
//! boot hook plays the kubelet, and the controller's operator, wired the way `main` wires them.
//!
//! The simulated kubelet registers a Node for each instance that boots, from the instance's real
//! rendered userdata (name, labels, taints), with the flavor's capacity, the providerID kubelet
//! would report and the kwok annotation, so kwok then keeps it Ready and runs its pods.
#![allow(dead_code)] // each test binary uses part of it

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kakaocloud::ownership::{Keyring, KeyringHandle};
use kakaocloud_sim::{SimConfig, Simulator};
use karpenter_kakaocloud::config::Settings;
use karpenter_kakaocloud::lifecycle::JoinInfo;
use karpenter_kakaocloud::lifecycle::bootstrap::ca_cert_hash;
use karpenter_kakaocloud::metrics::Metrics;
use karpenter_kakaocloud::operator::{Operator, Plugins};
use kk_apis::crd;
use kk_engine::scheduling::InstanceRanker;
use kk_engine::userdata::UserdataRenderer;
use kube::api::Api;
use serde_json::{Value, json};

pub const CLUSTER: &str = "demo-cluster";
pub const SUBNETS: [&str; 3] = ["subnet-proj-1-a", "subnet-proj-1-b", "subnet-proj-1-c"];
pub const WORKER_SG: &str = "sg-proj-1-demo-cluster-worker";
pub const DEADLINE: Duration = Duration::from_secs(90);
pub const KEYRING: &str = r#"{"activeKeyID":"k1","keys":[{"id":"k1","key":"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}]}"#;

const GUIDE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/install-guide");

/// What differs between tests.
pub struct Options {
    pub settings: Settings,
    pub sim: SimConfig,
    pub ranker: Option<Arc<dyn InstanceRanker>>,
    pub renderer: Option<Arc<dyn UserdataRenderer>>,
    /// Every seam served through this plugin registry (NodePool routes included), as the
    /// controller process does.
    pub plugins: Option<Arc<kk_plugin_runtime::Registry>>,
    /// Register Nodes for booted instances (off to test registration timeouts).
    pub kubelets: bool,
}

impl Default for Options {
    fn default() -> Self {
        let mut settings = Settings::for_cluster(CLUSTER);
        settings.batch_idle = Duration::from_millis(300);
        settings.batch_max = Duration::from_secs(3);
        settings.cni = "calico".into();
        settings.disruption_interval = Duration::from_secs(1);
        settings.disruption_validation_delay = Duration::from_secs(1);
        settings.gc_grace = Duration::from_secs(2);
        Options {
            settings,
            sim: SimConfig::default(),
            ranker: None,
            renderer: None,
            plugins: None,
            kubelets: true,
        }
    }
}

pub struct Env {
    pub cp: controlplane::ControlPlane,
    pub sim: Simulator,
    pub kube: kube::Client,
    pub cloud: kakaocloud::Client,
    pub keyring: KeyringHandle,
    pub settings: Settings,
    pub join: JoinInfo,
    pub metrics: Arc<Metrics>,
    pub registry: Arc<std::sync::Mutex<prometheus_client::registry::Registry>>,
    pub operator: Option<Operator>,
    /// What `/explain` answers from (the e2e tests serve `views::router` on it).
    pub explain: karpenter_kakaocloud::explain::Explain,
    ranker: Option<Arc<dyn InstanceRanker>>,
    renderer: Option<Arc<dyn UserdataRenderer>>,
    plugins: Option<Arc<kk_plugin_runtime::Registry>>,
    _cilium: Option<kk_demo::CiliumAgents>,
}

impl Env {
    /// Starts everything and applies nothing; see [`Env::apply_guide`].
    pub async fn start(options: Options) -> Env {
        kakaocloud::install_crypto_provider();
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("TEST_LOG")
                    .unwrap_or_else(|_| "karpenter_kakaocloud=info,kakaocloud_sim=info".into()),
            )
            .try_init();
        let cp = controlplane::start(controlplane::Options::default())
            .await
            .expect("control plane starts");
        cp.install_crds(&crd::all()).await.expect("CRDs install");
        let kube = cp.client().await;
        let sim = Simulator::start(options.sim)
            .await
            .expect("simulator starts");
        let cilium = options.kubelets.then(|| cilium_agents(kube.clone()));
        if options.kubelets {
            let client = kube.clone();
            sim.set_boot_hook(move |booted| {
                let client = client.clone();
                Box::pin(async move { register_node(&client, &booted).await })
            });
        }
        let cloud =
            kakaocloud::Client::new(sim.client_config(), sim.credentials()).expect("client");
        let keyring = KeyringHandle::new(Keyring::from_json(KEYRING.as_bytes()).expect("keyring"));
        let ca_pem = cp.ca_pem().to_owned();
        let join = JoinInfo {
            api_endpoint: cp.server_url().to_owned(),
            ca_hash: ca_cert_hash(&ca_pem).expect("CA hash"),
            ca_pem,
        };
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = Metrics::register(&mut registry);
        let mut env = Env {
            cp,
            sim,
            kube,
            cloud,
            keyring,
            settings: options.settings,
            join,
            metrics,
            registry: Arc::new(std::sync::Mutex::new(registry)),
            operator: None,
            explain: Default::default(),
            ranker: options.ranker,
            renderer: options.renderer,
            plugins: options.plugins,
            _cilium: cilium,
        };
        env.start_operator().await;
        env
    }

    /// Starts (or restarts) the controllers, as a new process would.
    pub async fn start_operator(&mut self) {
        self.stop_operator();
        let mut plugins = match &self.plugins {
            Some(registry) => Plugins::from_registry(registry.clone()),
            None => Plugins::default(),
        };
        if let Some(r) = &self.ranker {
            plugins.ranker = r.clone();
        }
        if let Some(r) = &self.renderer {
            plugins.renderer = r.clone();
        }
        let op = Operator::start(
            self.kube.clone(),
            self.cloud.clone(),
            self.settings.clone(),
            self.keyring.clone(),
            self.join.clone(),
            plugins,
            self.metrics.clone(),
            self.explain.clone(),
        )
        .await
        .expect("operator starts");
        self.operator = Some(op);
    }

    pub fn stop_operator(&mut self) {
        if let Some(op) = self.operator.take() {
            op.stop();
        }
    }

    /// Applies YAML with kubectl (server-side validation, like the guide's `kubectl apply`).
    pub fn kubectl_apply(&self, yaml: &str) {
        use std::io::Write;
        let mut child = self
            .cp
            .kubectl()
            .args(["apply", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(yaml.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kubectl apply: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        let out = self.cp.kubectl().args(args).output().expect("kubectl runs");
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The install guide's KCNodeClass (all three subnets) and NodePool, waiting for the class
    /// to be Ready.
    pub async fn apply_guide(&self) {
        self.kubectl_apply(&guide_class());
        self.kubectl_apply(&guide_file("nodepool.yaml"));
        self.wait_class_ready("karpenter-default").await;
    }

    pub async fn wait_class_ready(&self, name: &str) {
        let api: Api<crd::KCNodeClass> = Api::all(self.kube.clone());
        eventually(&format!("KCNodeClass {name} Ready"), || async {
            let class = api.get_opt(name).await.ok()??;
            let ready = class
                .status?
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ready.then_some(())
        })
        .await;
    }

    pub async fn nodeclaims(&self) -> Vec<crd::NodeClaim> {
        let api: Api<crd::NodeClaim> = Api::all(self.kube.clone());
        api.list(&Default::default())
            .await
            .expect("list NodeClaims")
            .items
    }

    pub async fn nodes(&self) -> Vec<Node> {
        let api: Api<Node> = Api::all(self.kube.clone());
        api.list(&Default::default())
            .await
            .expect("list Nodes")
            .items
    }

    /// Active (not deleted) instances of the simulator.
    pub fn instances(&self) -> Vec<kakaocloud::api::Instance> {
        self.sim.instances()
    }

    /// Loads the plugin ConfigMaps of a fresh namespace into `registry`, as the controller's
    /// watcher does; returns once they are listed, with the namespace and the watch task.
    pub async fn watch_plugins(
        &self,
        registry: &Arc<kk_plugin_runtime::Registry>,
    ) -> (String, tokio::task::JoinHandle<()>) {
        let namespace = self.cp.fresh_namespace("plugins").await.unwrap();
        let (synced, mut listed) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(kk_plugin_runtime::watcher::run(
            self.kube.clone(),
            namespace.clone(),
            registry.clone(),
            None,
            synced,
        ));
        listed.wait_for(|done| *done).await.unwrap();
        (namespace, task)
    }

    /// The controller's JSON views (`views::router`) on a free local port: their base URL and
    /// the server task.
    pub async fn serve_views(
        &self,
        registry: &Arc<kk_plugin_runtime::Registry>,
    ) -> (String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let router = karpenter_kakaocloud::views::router(registry.clone(), self.explain.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        (base, task)
    }

    pub fn metrics_text(&self) -> String {
        karpenter_kakaocloud::metrics::render(&self.registry.lock().unwrap(), &self.metrics)
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.stop_operator();
    }
}

/// The install guide's Step 5 demo (a 3-replica Deployment), as a file for `kubectl -f`.
pub fn guide_demo() -> String {
    format!(
        "{}/../../examples/install-guide/karpenter-demo.yaml",
        env!("CARGO_MANIFEST_DIR")
    )
}

impl Env {
    /// Applies the guide's demo in a fresh namespace and waits for its 3 pods to run; returns
    /// the namespace.
    pub async fn run_guide_demo(&self) -> String {
        let ns = self.cp.fresh_namespace("demo").await.unwrap();
        self.kubectl(&["-n", &ns, "apply", "-f", &guide_demo()]);
        self.wait_running(&ns, "karpenter-demo", 3).await;
        ns
    }

    /// The guide's cleanup: deletes the demo, with the guide NodePool's consolidateAfter (10m)
    /// shortened to 3 s so its emptied nodes go within the test.
    pub async fn clean_up_guide_demo(&self, ns: &str) {
        let api: Api<crd::NodePool> = Api::all(self.kube.clone());
        let patch = json!({"spec": {"disruption": {"consolidateAfter": "3s"}}});
        api.patch(
            "karpenter-default",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
        self.kubectl(&["-n", ns, "delete", "-f", &guide_demo()]);
    }
}

pub fn guide_file(name: &str) -> String {
    std::fs::read_to_string(format!("{GUIDE}/{name}")).expect("guide file")
}

/// The guide's class, pointed at every subnet of the simulator (the guide names one; the zone
/// spread tests need three).
pub fn guide_class() -> String {
    let yaml = guide_file("kcnodeclass.yaml")
        .replace("<SUBNET_ID>", SUBNETS[0])
        .replace("<WORKER_SECURITY_GROUP_ID>", WORKER_SG)
        .replace("<KUBERNETES_MAJOR.MINOR>", "1.35");
    let mut v: Value = serde_yaml::from_str(&yaml).unwrap();
    v["spec"]["subnetSelectorTerms"] =
        json!(SUBNETS.iter().map(|s| json!({"id": s})).collect::<Vec<_>>());
    serde_json::to_string(&v).unwrap()
}

/// Polls `check` every 100 ms until it gives `Some`, failing after [`DEADLINE`].
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {DEADLINE:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What kubelet does on first start: register the Node from the userdata's JoinConfiguration
/// (and, with Cilium, what its agent does: clear its startup taint once the Node is Ready).
pub use kk_demo::{cilium_agents, register_node};

/// The guide's NodePool renamed to `name`, its nodes labelled `workload-type: <name>`, with
/// `spec` merged over its `spec.template.spec` and `limits` replacing its limits when given
/// (`Value::Null` removes them).
pub fn nodepool(name: &str, template_spec: Value, limits: Option<Value>) -> String {
    let mut v: Value = serde_yaml::from_str(&guide_file("nodepool.yaml")).unwrap();
    v["metadata"]["name"] = json!(name);
    v["spec"]["template"]["metadata"]["labels"]["workload-type"] = json!(name);
    v["spec"]["template"]["metadata"]["labels"]["kakaoi.io/kke-nodepool"] = json!(name);
    if let (Some(target), Some(extra)) = (
        v["spec"]["template"]["spec"].as_object_mut(),
        template_spec.as_object(),
    ) {
        for (k, val) in extra {
            target.insert(k.clone(), val.clone());
        }
    }
    match limits {
        Some(Value::Null) => {
            v["spec"].as_object_mut().map(|spec| spec.remove("limits"));
        }
        Some(limits) => v["spec"]["limits"] = limits,
        None => {}
    }
    serde_json::to_string(&v).unwrap()
}

/// A Deployment of pause pods selecting `workload-type: <pool>`, with `pod_spec` merged over the
/// pod spec and `resources` as the container's resources.
pub fn deployment(
    name: &str,
    replicas: u32,
    pool: &str,
    resources: Value,
    pod_spec: Value,
) -> String {
    let mut spec = json!({
        "nodeSelector": {"workload-type": pool},
        "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.9", "resources": resources}],
    });
    if let (Some(target), Some(extra)) = (spec.as_object_mut(), pod_spec.as_object()) {
        for (k, val) in extra {
            target.insert(k.clone(), val.clone());
        }
    }
    serde_json::to_string(&json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }))
    .unwrap()
}

impl Env {
    /// `kubectl apply` into `namespace`.
    pub fn apply_in(&self, namespace: &str, yaml: &str) {
        use std::io::Write;
        let mut child = self
            .cp
            .kubectl()
            .args(["-n", namespace, "apply", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(yaml.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kubectl apply: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Pods of `namespace` with label `app=<app>`.
    pub async fn pods(&self, namespace: &str, app: &str) -> Vec<k8s_openapi::api::core::v1::Pod> {
        let api: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(self.kube.clone(), namespace);
        api.list(&kube::api::ListParams::default().labels(&format!("app={app}")))
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    /// Waits until `want` pods of `app` run, returning them.
    pub async fn wait_running(
        &self,
        namespace: &str,
        app: &str,
        want: usize,
    ) -> Vec<k8s_openapi::api::core::v1::Pod> {
        eventually(&format!("{want} pods of {app} Running"), || async {
            let running: Vec<_> = self
                .pods(namespace, app)
                .await
                .into_iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .collect();
            (running.len() >= want).then_some(running)
        })
        .await
    }

    /// The Node a pod runs on.
    pub async fn node_of(&self, pod: &k8s_openapi::api::core::v1::Pod) -> Node {
        let name = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .expect("pod is bound");
        let api: Api<Node> = Api::all(self.kube.clone());
        api.get(&name).await.expect("node exists")
    }

    /// Events (events.k8s.io/v1) with `reason`, in every namespace.
    pub async fn events(&self, reason: &str) -> Vec<k8s_openapi::api::events::v1::Event> {
        let api: Api<k8s_openapi::api::events::v1::Event> = Api::all(self.kube.clone());
        api.list(&Default::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .collect()
    }

    /// NodeClaims of NodePool `pool`.
    pub async fn claims_of(&self, pool: &str) -> Vec<crd::NodeClaim> {
        self.nodeclaims()
            .await
            .into_iter()
            .filter(|c| {
                c.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("karpenter.sh/nodepool"))
                    .map(String::as_str)
                    == Some(pool)
            })
            .collect()
    }
}

/// Runs `cmd`, failing the test with its output unless it succeeds; its standard output.
pub fn run_ok(cmd: &mut std::process::Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `kk-plugin` tool `scripts/build-plugins.sh` built, beside this test binary's directory.
pub fn kk_plugin_tool() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("kk-plugin"))
        .unwrap()
}

pub fn label<'a>(node: &'a Node, key: &str) -> &'a str {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
        .unwrap_or("")
}

/// Every NodeClaim condition seen, per NodeClaim, while it lasts: `(type, status, reason)`.
/// Conditions a NodeClaim holds only for a moment (`DisruptionReason`, `Drained`) show up too,
/// since the watch delivers each write and the deletion carries the final object.
#[derive(Clone, Default)]
pub struct ConditionLog(Arc<std::sync::Mutex<SeenConditions>>);

/// NodeClaim name -> every `(type, status, reason)` it was seen with.
type SeenConditions =
    std::collections::BTreeMap<String, std::collections::BTreeSet<(String, String, String)>>;

impl ConditionLog {
    /// Whether NodeClaim `claim` was seen with condition `type_` at `status` for `reason`.
    pub fn saw(&self, claim: &str, type_: &str, status: &str, reason: &str) -> bool {
        self.0.lock().unwrap().get(claim).is_some_and(|seen| {
            seen.contains(&(type_.to_owned(), status.to_owned(), reason.to_owned()))
        })
    }

    /// Every NodeClaim seen.
    pub fn claims(&self) -> Vec<String> {
        self.0.lock().unwrap().keys().cloned().collect()
    }

    /// What was seen of `claim`, for failure messages.
    pub fn of(&self, claim: &str) -> Vec<(String, String, String)> {
        self.0
            .lock()
            .unwrap()
            .get(claim)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }
}

impl Env {
    /// Records NodeClaim conditions from now on (until the test ends).
    pub fn record_conditions(&self) -> ConditionLog {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let log = ConditionLog::default();
        let sink = log.clone();
        let api: Api<crd::NodeClaim> = Api::all(self.kube.clone());
        tokio::spawn(async move {
            // With backoff: once the test's control plane is gone, a watch retrying without
            // a pause never yields, and the test's runtime could not shut down (a failing
            // test would hang instead of failing).
            let stream = watcher(api, watcher::Config::default()).default_backoff();
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                let claims = match event {
                    Ok(
                        watcher::Event::Apply(c)
                        | watcher::Event::Delete(c)
                        | watcher::Event::InitApply(c),
                    ) => vec![c],
                    _ => continue,
                };
                let mut seen = sink.0.lock().unwrap();
                for c in claims {
                    let entry = seen
                        .entry(c.metadata.name.clone().unwrap_or_default())
                        .or_default();
                    for cond in c.status.iter().flat_map(|s| s.conditions.iter()) {
                        entry.insert((
                            cond.type_.clone(),
                            cond.status.clone(),
                            cond.reason.clone(),
                        ));
                    }
                }
            }
        });
        log
    }
}
