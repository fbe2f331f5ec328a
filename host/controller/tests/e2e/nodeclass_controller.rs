//! The KCNodeClass controller on the real API server (the shared control plane
//! of this test binary) against the KakaoCloud simulator: the install guide's
//! class reaches all six conditions True, each condition goes False with an
//! actionable reason when its input is wrong, and the finalizer holds a class
//! while a NodeClaim uses it.
//!
//! One controller serves every test of this binary; classes are cluster-scoped,
//! so every test uses its own names.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kakaocloud_sim::{SimConfig, Simulator};
use karpenter_kakaocloud::nodeclass::{self, Context};
use karpenter_kakaocloud::state::ClusterState;
use kk_apis::crd::{self, KCNodeClass, NodeClaim};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

const GUIDE_CLASS: &str = include_str!("../../../../examples/install-guide/kcnodeclass.yaml");
const SUBNET_A: &str = "subnet-proj-1-a";
const WORKER_SG: &str = "sg-proj-1-demo-cluster-worker";
const DEADLINE: Duration = Duration::from_secs(30);

struct Harness {
    cp: &'static controlplane::ControlPlane,
    _sim: Simulator,
}

/// Control plane, CRDs, simulator and one controller, on a runtime of their own
/// (each `#[tokio::test]` has its own runtime, which ends with the test).
async fn harness() -> &'static Harness {
    static HARNESS: OnceCell<Harness> = OnceCell::const_new();
    HARNESS
        .get_or_init(|| async {
            let (tx, rx) = tokio::sync::oneshot::channel();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Runtime::new().expect("runtime");
                rt.block_on(async move {
                    kakaocloud::install_crypto_provider();
                    let cp = controlplane::shared().await;
                    cp.install_crds(&crd::all()).await.expect("CRDs install");
                    let sim = Simulator::start(SimConfig::default())
                        .await
                        .expect("simulator");
                    let client = kakaocloud::Client::new(sim.client_config(), sim.credentials())
                        .expect("KakaoCloud client");
                    let kube = cp.client().await;
                    // Only the class controller runs here: nothing consumes the change feed.
                    let (changes, _) = tokio::sync::mpsc::unbounded_channel();
                    let (state, feeds) = ClusterState::start(&kube, changes);
                    state
                        .wait_synced(Duration::from_secs(60))
                        .await
                        .expect("cluster state syncs");
                    let mut ctx = Context::new(kube, client, state, "demo-cluster");
                    ctx.resync = Duration::from_secs(2);
                    ctx.blocked_retry = Duration::from_millis(500);
                    tokio::spawn(nodeclass::run(Arc::new(ctx), feeds.nodeclass));
                    tx.send(Harness { cp, _sim: sim }).ok();
                    std::future::pending::<()>().await;
                });
            });
            rx.await.expect("harness thread starts")
        })
        .await
}

/// The install guide's class with its placeholders filled for the simulator.
fn guide_class(name: &str) -> Value {
    let yaml = GUIDE_CLASS
        .replace("<SUBNET_ID>", SUBNET_A)
        .replace("<WORKER_SECURITY_GROUP_ID>", WORKER_SG)
        .replace("<KUBERNETES_MAJOR.MINOR>", "1.35");
    let mut value: Value = serde_yaml::from_str(&yaml).expect("guide YAML parses");
    value["metadata"]["name"] = json!(name);
    value
}

async fn create(h: &Harness, class: Value) -> Api<KCNodeClass> {
    let api: Api<KCNodeClass> = Api::all(h.cp.client().await);
    let class: KCNodeClass = serde_json::from_value(class).expect("a KCNodeClass");
    api.create(&PostParams::default(), &class)
        .await
        .expect("class is accepted");
    api
}

fn condition<'a>(class: &'a KCNodeClass, type_: &str) -> Option<&'a Condition> {
    class
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// Polls until `check` holds for the class, returning it; fails with the last status seen.
async fn wait_for(
    api: &Api<KCNodeClass>,
    name: &str,
    what: &str,
    check: impl Fn(&KCNodeClass) -> bool,
) -> KCNodeClass {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let class = api.get_opt(name).await.expect("get class");
        if let Some(class) = class {
            if check(&class) {
                return class;
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "{name}: {what} within {DEADLINE:?}; status: {:#?}",
                    class.status
                );
            }
        } else if tokio::time::Instant::now() > deadline {
            panic!("{name}: gone while waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `type_` is False and returns its (reason, message).
async fn wait_false(api: &Api<KCNodeClass>, name: &str, type_: &str) -> (String, String) {
    let class = wait_for(api, name, &format!("{type_}=False"), |c| {
        condition(c, type_).is_some_and(|c| c.status == "False")
    })
    .await;
    let c = condition(&class, type_).unwrap();
    let ready = condition(&class, kk_apis::names::condition::READY).expect("Ready is reported");
    assert_eq!(ready.status, "False", "Ready follows a false {type_}");
    (c.reason.clone(), c.message.clone())
}

#[tokio::test]
async fn guide_class_reaches_all_six_conditions_true() {
    let h = harness().await;
    let api = create(h, guide_class("guide-ready")).await;
    let class = wait_for(&api, "guide-ready", "Ready=True", |c| {
        condition(c, kk_apis::names::condition::READY).is_some_and(|c| c.status == "True")
    })
    .await;
    for type_ in [
        kk_apis::names::condition::KUBERNETES_VERSION_READY,
        kk_apis::names::condition::IMAGES_READY,
        kk_apis::names::condition::SUBNETS_READY,
        kk_apis::names::condition::SECURITY_GROUPS_READY,
        kk_apis::names::condition::KEY_PAIR_READY,
        kk_apis::names::condition::READY,
    ] {
        let c = condition(&class, type_).unwrap_or_else(|| panic!("{type_} is reported"));
        assert_eq!(c.status, "True", "{type_}: {}", c.message);
    }
    let status = class.status.as_ref().unwrap();
    assert_eq!(status.subnets[0].id, SUBNET_A);
    assert_eq!(status.subnets[0].zone.as_deref(), Some("kr-central-2-a"));
    assert_eq!(status.security_groups[0].id, WORKER_SG);
    let image = status.image.as_ref().expect("image resolved");
    assert!(
        !image.id.contains("gpu"),
        "the CPU image is chosen: {}",
        image.id
    );
    assert_eq!(status.kubernetes_version.as_deref(), Some("1.35"));
    let finalizers = class.metadata.finalizers.clone().unwrap_or_default();
    assert!(
        finalizers
            .iter()
            .any(|f| f == kk_apis::names::finalizer::NODECLASS),
        "{finalizers:?}"
    );

    // The guide's command prints the six conditions.
    let out =
        h.cp.kubectl()
            .args(["get", "kcnodeclass", "guide-ready", "-o"])
            .arg("jsonpath={range .status.conditions[*]}{.type}{\"\\t\"}{.status}{\"\\n\"}{end}")
            .output()
            .expect("kubectl runs");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        printed.lines().filter(|l| l.ends_with("\tTrue")).count(),
        6,
        "{printed}"
    );
}

#[tokio::test]
async fn unknown_subnet_is_subnets_not_ready() {
    let h = harness().await;
    let mut class = guide_class("bad-subnet");
    class["spec"]["subnetSelectorTerms"] = json!([{"id": "subnet-nope"}]);
    let api = create(h, class).await;
    let (reason, message) =
        wait_false(&api, "bad-subnet", kk_apis::names::condition::SUBNETS_READY).await;
    assert_eq!(reason, "SubnetNotFound");
    assert!(message.contains("subnet-nope"), "{message}");
}

#[tokio::test]
async fn missing_security_group_is_security_groups_not_ready() {
    let h = harness().await;
    let mut class = guide_class("bad-sg");
    class["spec"]["securityGroupSelectorTerms"] = json!([{"id": WORKER_SG}, {"id": "sg-gone"}]);
    let api = create(h, class).await;
    let (reason, message) = wait_false(
        &api,
        "bad-sg",
        kk_apis::names::condition::SECURITY_GROUPS_READY,
    )
    .await;
    assert_eq!(reason, "SecurityGroupNotFound");
    assert!(message.contains("sg-gone"), "{message}");
}

#[tokio::test]
async fn unknown_key_pair_is_key_pair_not_ready_and_a_known_one_is_ready() {
    let h = harness().await;
    let mut class = guide_class("bad-key");
    class["spec"]["keyName"] = json!("nobody");
    let api = create(h, class).await;
    let (reason, message) =
        wait_false(&api, "bad-key", kk_apis::names::condition::KEY_PAIR_READY).await;
    assert_eq!(reason, "KeyPairNotFound");
    assert!(message.contains("nobody"), "{message}");

    // Fixing the input flips it back on the next reconcile (a spec change triggers one).
    let patch = json!({"spec": {"keyName": "demo-key"}});
    api.patch(
        "bad-key",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .expect("patch keyName");
    wait_for(&api, "bad-key", "Ready=True after fixing keyName", |c| {
        condition(c, kk_apis::names::condition::READY).is_some_and(|c| c.status == "True")
    })
    .await;
}

#[tokio::test]
async fn unsupported_version_lists_the_supported_ones() {
    let h = harness().await;
    let mut class = guide_class("old-version");
    class["spec"]["bootstrap"]["kubernetesVersion"] = json!("1.33");
    let api = create(h, class).await;
    let (reason, message) = wait_false(
        &api,
        "old-version",
        kk_apis::names::condition::KUBERNETES_VERSION_READY,
    )
    .await;
    assert_eq!(reason, "UnsupportedVersion");
    assert!(
        message.contains("1.35, 1.34"),
        "supported versions are listed: {message}"
    );
    let class = api.get("old-version").await.unwrap();
    assert_eq!(
        condition(&class, kk_apis::names::condition::IMAGES_READY)
            .unwrap()
            .status,
        "False"
    );
}

#[tokio::test]
async fn deletion_waits_for_the_nodeclaims_that_use_the_class() {
    let h = harness().await;
    let api = create(h, guide_class("in-use")).await;
    wait_for(&api, "in-use", "the finalizer", |c| {
        c.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == kk_apis::names::finalizer::NODECLASS)
    })
    .await;
    let claims: Api<NodeClaim> = Api::all(h.cp.client().await);
    let claim: NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "in-use-claim"},
        "spec": {
            "nodeClassRef": {"group": "karpenter.kakaocloud.com", "kind": "KCNodeClass", "name": "in-use"},
            "requirements": [],
        },
    }))
    .unwrap();
    claims
        .create(&PostParams::default(), &claim)
        .await
        .expect("NodeClaim is accepted");

    api.delete("in-use", &DeleteParams::default())
        .await
        .expect("delete is accepted");
    let held = wait_for(&api, "in-use", "WaitingOnNodeClaims", |c| {
        condition(c, kk_apis::names::condition::READY)
            .is_some_and(|c| c.reason == "WaitingOnNodeClaims")
    })
    .await;
    assert!(held.metadata.deletion_timestamp.is_some());
    assert!(
        condition(&held, kk_apis::names::condition::READY)
            .unwrap()
            .message
            .contains("in-use-claim")
    );

    claims
        .delete("in-use-claim", &DeleteParams::default())
        .await
        .expect("delete NodeClaim");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while api.get_opt("in-use").await.expect("get class").is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the class goes once no NodeClaim uses it"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
