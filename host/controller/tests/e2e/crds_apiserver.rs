//! The CRDs on a real API server (the shared control plane of this test
//! binary, see docs/testing.md): they install, the install guide's manifests
//! apply, and invalid objects are refused with a message naming the field.
//!
//! Objects are cluster-scoped, so every test uses its own names.

use std::io::Write;
use std::process::Stdio;

use kk_apis::crd;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

const GUIDE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/install-guide");

async fn control_plane() -> &'static controlplane::ControlPlane {
    let cp = controlplane::shared().await;
    cp.install_crds(&crd::all())
        .await
        .expect("CRDs install and become Established");
    cp
}

fn resource(kind: &str) -> ApiResource {
    let (group, plural) = match kind {
        "KCNodeClass" => ("karpenter.kakaocloud.com", "kcnodeclasses"),
        "NodePool" => ("karpenter.sh", "nodepools"),
        _ => ("karpenter.sh", "nodeclaims"),
    };
    let version = if group == "karpenter.sh" {
        "v1"
    } else {
        "v1alpha1"
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// Creates `object`; `Err` carries the API server's message.
async fn create(cp: &controlplane::ControlPlane, object: Value) -> Result<(), String> {
    let kind = object["kind"].as_str().unwrap_or_default().to_owned();
    let api: Api<DynamicObject> = Api::all_with(cp.client().await, &resource(&kind));
    let object: DynamicObject = serde_json::from_value(object).map_err(|e| e.to_string())?;
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err(status.message),
        Err(e) => Err(format!("not an API refusal: {e}")),
    }
}

fn kubectl_apply(cp: &controlplane::ControlPlane, manifest: &str) -> Result<String, String> {
    let mut child = cp
        .kubectl()
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(manifest.as_bytes())
        .map_err(|e| e.to_string())?;
    let output = child.wait_with_output().map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

fn kcnodeclass(name: &str, size_gib: i64, version: &str) -> Value {
    json!({
        "apiVersion": "karpenter.kakaocloud.com/v1alpha1",
        "kind": "KCNodeClass",
        "metadata": {"name": name},
        "spec": {
            "subnetSelectorTerms": [{"id": "subnet-1"}],
            "securityGroupSelectorTerms": [{"id": "sg-1"}],
            "rootVolume": {"sizeGiB": size_gib, "deleteOnTermination": true},
            "bootstrap": {"mode": "Kubeadm", "kubernetesVersion": version},
        }
    })
}

fn nodepool(name: &str, operator: &str) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {
            "requirements": [{"key": "kubernetes.io/arch", "operator": operator, "values": ["amd64"]}],
            "nodeClassRef": {"group": "karpenter.kakaocloud.com", "kind": "KCNodeClass", "name": "x"},
        }}}
    })
}

#[tokio::test]
async fn install_guide_manifests_apply() {
    let cp = control_plane().await;
    let nodeclass = std::fs::read_to_string(format!("{GUIDE}/kcnodeclass.yaml"))
        .unwrap()
        .replace("<SUBNET_ID>", "subnet-guide")
        .replace("<WORKER_SECURITY_GROUP_ID>", "sg-guide")
        .replace("<KUBERNETES_MAJOR.MINOR>", "1.35");
    let out = kubectl_apply(cp, &nodeclass).expect("kcnodeclass.yaml applies");
    assert!(
        out.contains("kcnodeclass.karpenter.kakaocloud.com/karpenter-default"),
        "{out}"
    );

    let nodepool = std::fs::read_to_string(format!("{GUIDE}/nodepool.yaml")).unwrap();
    let out = kubectl_apply(cp, &nodepool).expect("nodepool.yaml applies");
    assert!(
        out.contains("nodepool.karpenter.sh/karpenter-default"),
        "{out}"
    );

    // The Cilium variant: the guide's startupTaints under spec.template.spec.
    let taint =
        std::fs::read_to_string(format!("{GUIDE}/nodepool-cilium-startup-taint.yaml")).unwrap();
    let taint: serde_yaml::Value = serde_yaml::from_str(&taint).unwrap();
    let mut cilium: serde_yaml::Value = serde_yaml::from_str(&nodepool).unwrap();
    cilium["metadata"]["name"] = "karpenter-cilium".into();
    cilium["spec"]["template"]["spec"]["startupTaints"] = taint["startupTaints"].clone();
    kubectl_apply(cp, &serde_yaml::to_string(&cilium).unwrap())
        .expect("the Cilium NodePool applies");

    // What the API server stored reads back into our types, defaults filled in.
    let pools: Api<crd::NodePool> = Api::all(cp.client().await);
    let pool = pools.get("karpenter-default").await.unwrap();
    assert_eq!(pool.spec.template.spec.expire_after.to_string(), "720h");
    assert_eq!(pool.spec.disruption.consolidate_after.to_string(), "10m");
    assert_eq!(
        pool.spec.disruption.budgets[0].nodes, "10%",
        "upstream default budget"
    );
    let classes: Api<crd::KCNodeClass> = Api::all(cp.client().await);
    let class = classes.get("karpenter-default").await.unwrap();
    assert_eq!(class.spec.root_volume.size_gib, 50);
    assert_eq!(class.spec.bootstrap.kubernetes_version, "1.35");
}

#[tokio::test]
async fn nodepool_name_longer_than_38_is_refused() {
    let cp = control_plane().await;
    let ok = "a".repeat(38);
    create(cp, nodepool(&ok, "In"))
        .await
        .expect("38 characters are fine");
    let long = "b".repeat(39);
    let message = create(cp, nodepool(&long, "In")).await.unwrap_err();
    assert!(
        message.contains("metadata.name") && message.contains("38"),
        "{message}"
    );
}

#[tokio::test]
async fn root_volume_below_30_gib_is_refused() {
    let cp = control_plane().await;
    create(cp, kcnodeclass("size-30", 30, "1.35"))
        .await
        .expect("30 GiB is the minimum");
    let message = create(cp, kcnodeclass("size-20", 20, "1.35"))
        .await
        .unwrap_err();
    assert!(message.contains("spec.rootVolume.sizeGiB"), "{message}");
    assert!(message.contains("30"), "{message}");
}

#[tokio::test]
async fn kubernetes_version_must_be_major_minor() {
    let cp = control_plane().await;
    for (name, version) in [
        ("version-patch", "1.35.2"),
        ("version-word", "abc"),
        ("version-v", "v1.35"),
    ] {
        let message = create(cp, kcnodeclass(name, 50, version))
            .await
            .unwrap_err();
        assert!(
            message.contains("spec.bootstrap.kubernetesVersion"),
            "{version}: {message}"
        );
    }
    create(cp, kcnodeclass("version-ok", 50, "1.34"))
        .await
        .expect("1.34 is well-formed");
}

#[tokio::test]
async fn unknown_requirement_operator_is_refused() {
    let cp = control_plane().await;
    let message = create(cp, nodepool("operator-matches", "Matches"))
        .await
        .unwrap_err();
    assert!(
        message.contains("spec.template.spec.requirements[0].operator"),
        "{message}"
    );
    assert!(
        message.contains("Matches") && message.contains("NotIn"),
        "lists the operators: {message}"
    );
    for op in ["NotIn", "Exists", "DoesNotExist"] {
        let mut pool = nodepool(&format!("operator-{}", op.to_lowercase()), op);
        if op != "NotIn" {
            pool["spec"]["template"]["spec"]["requirements"][0]["values"] = json!([]);
        }
        create(cp, pool)
            .await
            .unwrap_or_else(|m| panic!("{op}: {m}"));
    }
    let mut gt = nodepool("operator-gt", "Gt");
    gt["spec"]["template"]["spec"]["requirements"][0] =
        json!({"key": "karpenter.kakaocloud.com/instance-cpu", "operator": "Gt", "values": ["3"]});
    create(cp, gt).await.expect("Gt with an integer");
    let mut gt_word = nodepool("operator-gt-word", "Gt");
    gt_word["spec"]["template"]["spec"]["requirements"][0]["values"] = json!(["abc"]);
    create(cp, gt_word).await.expect_err("Gt needs an integer");
}

#[tokio::test]
async fn nodeclaims_print_upstream_columns() {
    let cp = control_plane().await;
    let claim = json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "columns-claim", "labels": {
            "node.kubernetes.io/instance-type": "m2a.large",
            "karpenter.sh/capacity-type": "on-demand",
            "topology.kubernetes.io/zone": "kr-central-2-a",
            "karpenter.sh/nodepool": "karpenter-default",
        }},
        "spec": {
            "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
            "nodeClassRef": {"group": "karpenter.kakaocloud.com", "kind": "KCNodeClass", "name": "karpenter-default"},
        }
    });
    create(cp, claim).await.expect("a NodeClaim is accepted");
    let output = cp
        .kubectl()
        .args(["get", "nodeclaims", "columns-claim"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let header: Vec<&str> = text
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"],
        "{text}"
    );
    assert!(
        text.contains("m2a.large") && text.contains("kr-central-2-a"),
        "{text}"
    );

    // NodeClaim specs are immutable, like upstream.
    let api: Api<DynamicObject> = Api::all_with(cp.client().await, &resource("NodeClaim"));
    let patch = json!({"spec": {"nodeClassRef": {"group": "karpenter.kakaocloud.com", "kind": "KCNodeClass", "name": "other"}}});
    let error = api
        .patch(
            "columns-claim",
            &Default::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .unwrap_err();
    assert!(error.to_string().contains("immutable"), "{error}");
}
