//! What the pod cache holds per pod: heap bytes of pods as the API server sends them, kept as
//! k8s-openapi's `Pod` (trimmed as the watch trims) and as the cache keeps them now
//! (`kk_apis::cached_pod::CachedPod`, the spec shared through [`SharedSpecs`]).
//!
//! `cargo bench -p karpenter-kakaocloud --bench cache_memory` prints one row per layout for the
//! scale bench's steady state (one Deployment, ten pods to a node) and for upstream's diverse mix
//! (ten Deployments, one to three pods to a node). Bytes are counted by a wrapping allocator:
//! live heap after the pods are kept, minus before.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use k8s_openapi::api::core::v1::Pod;
use karpenter_kakaocloud::state::Trim;
use kk_apis::cached_pod::SharedSpecs;
use serde_json::{Value, json};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged; the counter only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract for `layout` is `System`'s.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` above with this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// A Running pod of Deployment `app` on `node`, with the fields kube-apiserver and the kubelet
/// fill in (defaults, the service-account token volume, managed fields, statuses).
fn wire_pod(app: &str, i: usize, node: &str, cpu: &str) -> Value {
    let name = format!("{app}-7d9f8b6c4d-{i:05}");
    let t = "2026-12-07T10:00:00Z";
    let conditions: Vec<Value> = [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]
    .iter()
    .map(|c| json!({"type": c, "status": "True", "lastTransitionTime": t}))
    .collect();
    json!({
        "metadata": {
            "name": name, "generateName": format!("{app}-7d9f8b6c4d-"), "namespace": "bench",
            "uid": format!("0b7c4d1e-{i:04}-4c2a-9f3e-{i:012}"), "resourceVersion": format!("{}", 100000 + i),
            "creationTimestamp": t,
            "labels": {"app": app, "pod-template-hash": "7d9f8b6c4d"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-7d9f8b6c4d"),
                "uid": "5a1e2b3c-0000-4000-8000-000000000001", "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": t,
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": t, "subresource": "status",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": {}, "f:phase": {}, "f:podIP": {}}}},
            ],
        },
        "spec": {
            "containers": [{
                "name": "app", "image": "registry.k8s.io/pause:3.10", "imagePullPolicy": "IfNotPresent",
                "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                "volumeMounts": [{"name": "kube-api-access", "readOnly": true,
                    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
            }],
            "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ]}}],
            "nodeName": node, "nodeSelector": {"karpenter.sh/nodepool": "bench"},
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default", "securityContext": {},
            "schedulerName": "default-scheduler", "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ],
        },
        "status": {
            "phase": "Running", "hostIP": "10.0.0.1", "podIP": format!("10.1.{}.{}", i / 250, i % 250),
            "startTime": t, "qosClass": "Burstable",
            "conditions": conditions,
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "started": true,
                "image": "registry.k8s.io/pause:3.10", "imageID": "sha256:873ed75102791e5b0b8a7fcd41606c92fcec98d56d05ead4ac5131650004c136",
                "containerID": format!("containerd://{i:064}"), "state": {"running": {"startedAt": t}}}],
        },
    })
}

/// `pods` wire pods: `apps` Deployments of distinct sizes, `per_node` pods of an app to a node.
fn workload(pods: usize, apps: usize, per_node: usize) -> Vec<Value> {
    (0..pods)
        .map(|i| {
            let app = i % apps;
            let node = (i / apps) / per_node * apps + app;
            wire_pod(
                &format!("app{app}"),
                i,
                &format!("node-{node:05}"),
                &format!("{}m", 250 + app * 50),
            )
        })
        .collect()
}

fn decode(v: &Value) -> Pod {
    let mut pod: Pod = serde_json::from_value(v.clone()).expect("a valid pod");
    pod.trim();
    pod
}

/// Heap bytes held by what `keep` returns for every pod.
fn held<T>(wire: &[Value], mut keep: impl FnMut(Pod) -> T) -> (isize, Vec<T>) {
    let before = live();
    let kept: Vec<T> = wire.iter().map(|v| keep(decode(v))).collect();
    (live() - before, kept)
}

fn main() {
    println!("| workload | pods | layout | bytes per pod | total MiB | distinct specs |");
    println!("| --- | --- | --- | --- | --- | --- |");
    let cases = [
        ("steady: 1 Deployment, 10 pods to a node", 20_000, 1, 10),
        ("mix: 10 Deployments, 2 pods of one to a node", 1_000, 10, 2),
    ];
    for (name, pods, apps, per_node) in cases {
        let wire = workload(pods, apps, per_node);
        let row = |layout: &str, bytes: isize, specs: String| {
            println!(
                "| {name} | {pods} | {layout} | {} | {:.1} | {specs} |",
                bytes / pods as isize,
                bytes as f64 / (1 << 20) as f64
            );
        };
        let (bytes, kept) = held(&wire, |p| p);
        row("Pod, trimmed", bytes, "n/a".into());
        drop(kept);
        let mut specs = SharedSpecs::default();
        let (bytes, kept) = held(&wire, |p| specs.cache(p));
        // The interner's own map is part of the cost.
        row("CachedPod, shared specs", bytes, specs.live().to_string());
        drop((kept, specs));
    }
}
