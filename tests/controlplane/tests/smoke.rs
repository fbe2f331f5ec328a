//! The control plane works end to end: kwok plays a Node's kubelet, a Pod
//! bound to it runs, kube-scheduler places an unbound one, service-account
//! tokens authenticate, and a private control plane's processes die with it.
//!
//! Tests here share the process's control plane ([`controlplane::shared`]),
//! except `private_control_plane_stops_on_drop`.

use std::collections::BTreeMap;
use std::time::Duration;

use controlplane::{KWOK_NODE_ANNOTATION, eventually};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Container, Node, NodeSpec, NodeStatus, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};

const TIMEOUT: Duration = Duration::from_secs(60);

fn kwok_node(name: &str, label: &str) -> Node {
    let (key, value) = KWOK_NODE_ANNOTATION;
    let resources: BTreeMap<String, Quantity> = [
        ("cpu".to_owned(), Quantity("4".into())),
        ("memory".to_owned(), Quantity("8Gi".into())),
        ("pods".to_owned(), Quantity("110".into())),
    ]
    .into();
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            annotations: Some([(key.to_owned(), value.to_owned())].into()),
            labels: Some(
                [
                    ("kk-smoke".to_owned(), label.to_owned()),
                    ("kubernetes.io/hostname".to_owned(), name.to_owned()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(NodeSpec::default()),
        status: Some(NodeStatus {
            capacity: Some(resources.clone()),
            allocatable: Some(resources),
            ..Default::default()
        }),
    }
}

fn pod(name: &str, node_name: Option<&str>, selector: Option<(&str, &str)>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: node_name.map(str::to_owned),
            node_selector: selector.map(|(k, v)| [(k.to_owned(), v.to_owned())].into()),
            containers: vec![Container {
                name: "app".into(),
                image: Some("registry.example/app:1".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

async fn wait_running(pods: &Api<Pod>, name: &str) -> anyhow::Result<Pod> {
    eventually(&format!("pod {name} Running"), TIMEOUT, || async {
        let pod = pods.get(name).await?;
        let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
        Ok((phase.as_deref() == Some("Running")).then_some(pod))
    })
    .await
}

#[tokio::test]
async fn kwok_runs_pods_and_scheduler_places_them() -> anyhow::Result<()> {
    // Not an assertion: the start time is reported for docs/testing.md (`--nocapture`).
    eprintln!(
        "shared control plane started in {:.2} s",
        controlplane::shared().await.started_in().as_secs_f64()
    );
    let cp = controlplane::shared().await;
    let client = cp.client().await;
    let namespace = cp.fresh_namespace("smoke").await?;
    let node_name = format!("kwok-{namespace}");

    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(&PostParams::default(), &kwok_node(&node_name, &namespace))
        .await?;
    let node = eventually("kwok node Ready", TIMEOUT, || async {
        let node = nodes.get(&node_name).await?;
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        Ok(ready.then_some(node))
    })
    .await?;
    let allocatable = node.status.and_then(|s| s.allocatable).unwrap_or_default();
    assert_eq!(
        allocatable.get("cpu"),
        Some(&Quantity("4".into())),
        "kwok keeps the capacity"
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    // Bound by hand: only kwok is involved.
    pods.create(
        &PostParams::default(),
        &pod("bound", Some(&node_name), None),
    )
    .await?;
    let bound = wait_running(&pods, "bound").await?;
    assert!(
        bound
            .status
            .and_then(|s| s.pod_ip)
            .is_some_and(|ip| !ip.is_empty()),
        "a running pod gets an IP from kwok"
    );

    // Unbound: kube-scheduler must pick our node (the only one with the label).
    pods.create(
        &PostParams::default(),
        &pod("scheduled", None, Some(("kk-smoke", &namespace))),
    )
    .await?;
    let scheduled = wait_running(&pods, "scheduled").await?;
    assert_eq!(
        scheduled.spec.and_then(|s| s.node_name).as_deref(),
        Some(node_name.as_str())
    );

    // Deleting a pod on a kwok node completes (kwok plays the kubelet's part).
    pods.delete("bound", &DeleteParams::default()).await?;
    eventually("pod bound gone", TIMEOUT, || async {
        Ok(pods.get_opt("bound").await?.is_none().then_some(()))
    })
    .await?;

    nodes.delete(&node_name, &DeleteParams::default()).await?;
    Ok(())
}

#[tokio::test]
async fn service_account_tokens_authenticate() -> anyhow::Result<()> {
    let cp = controlplane::shared().await;
    let namespace = cp.fresh_namespace("sa").await?;
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(cp.client().await, &namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            ..Default::default()
        },
        ..Default::default()
    };
    let token = sas
        .create_token_request("default", &PostParams::default(), &request)
        .await?
        .status
        .map(|s| s.token)
        .unwrap_or_default();
    assert!(!token.is_empty());

    let mut config = kube::Config::new(cp.server_url().parse()?);
    config.root_cert = Some(vec![pem_to_der(cp.ca_pem())?]);
    config.auth_info.token = Some(token.into());
    let as_sa = kube::Client::try_from(config)?;
    // The default ServiceAccount may not list pods: RBAC (not authentication) refuses it.
    let error = Api::<Pod>::namespaced(as_sa, &namespace)
        .list(&Default::default())
        .await
        .unwrap_err();
    let kube::Error::Api(status) = error else {
        panic!("expected an API error, got {error}");
    };
    assert_eq!(status.code, 403, "{status:?}");
    assert!(
        status
            .message
            .contains(&format!("system:serviceaccount:{namespace}:default")),
        "the token authenticated as the ServiceAccount: {}",
        status.message
    );
    Ok(())
}

fn pem_to_der(pem: &str) -> anyhow::Result<Vec<u8>> {
    use base64::Engine as _;
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    Ok(base64::engine::general_purpose::STANDARD.decode(body)?)
}

#[test]
fn kubectl_talks_to_the_shared_control_plane() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let cp = runtime.block_on(controlplane::shared());
    let output = cp
        .kubectl()
        .args(["get", "namespace", "kube-system", "-o", "name"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "namespace/kube-system"
    );
}

#[tokio::test]
async fn private_control_plane_stops_on_drop() -> anyhow::Result<()> {
    let cp = controlplane::start(controlplane::Options {
        controller_manager: false,
        scheduler: false,
        kwok: false,
        ..Default::default()
    })
    .await?;
    let pids = cp.pids();
    assert_eq!(pids.len(), 2, "{pids:?}");
    let dir = cp.dir().to_owned();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(cp.client().await);
    assert!(namespaces.get_opt("default").await?.is_some());
    drop(cp);
    for (name, pid) in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "{name} ({pid}) still runs"
        );
    }
    assert!(!dir.exists());
    Ok(())
}
