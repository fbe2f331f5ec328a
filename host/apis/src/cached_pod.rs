//! The pod as the controller's caches keep it: a `Pod` whose spec is shared.
//!
//! A cached `Pod` of k8s-openapi's types costs about 7 KiB even trimmed, and most of it is the
//! spec: `PodSpec` and each `Container` are over 2 KiB with every optional field empty. The pods
//! of one ReplicaSet on one node have the same spec, so the watch hands each distinct spec out
//! once ([`SharedSpecs`]) and every pod holding it points at it.
//!
//! Invariants:
//! - a `CachedPod` reads exactly like the `Pod` it came from: `metadata`, `spec` and `status`
//!   keep k8s-openapi's types and field names, and `spec.nodeName` stays in the spec (two pods
//!   share a spec only when they are bound to the same node, or both unbound);
//! - a shared spec is never written: the caches are read-only views.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::Hasher;
use std::sync::{Arc, Weak};

use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_core::Resource;

/// A pod with its spec behind an `Arc` that pods with the same spec share.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CachedPod {
    pub metadata: ObjectMeta,
    pub spec: Option<Arc<PodSpec>>,
    pub status: Option<PodStatus>,
}

/// A pod of its own: no sharing (tests, DaemonSet templates, a pod read straight from the API).
impl From<Pod> for CachedPod {
    fn from(pod: Pod) -> Self {
        CachedPod {
            metadata: pod.metadata,
            spec: pod.spec.map(Arc::new),
            status: pod.status,
        }
    }
}

/// Read as a `Pod` is (tests and fixtures write pods as JSON), with a spec of its own.
impl<'de> serde::Deserialize<'de> for CachedPod {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Pod::deserialize(d).map(CachedPod::from)
    }
}

impl Resource for CachedPod {
    type DynamicType = ();
    type Scope = <Pod as Resource>::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Pod::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        Pod::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        Pod::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        Pod::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The distinct pod specs alive in a cache, each handed out once. Held by the pod watch alone,
/// so it needs no lock. A spec is freed with the last pod that holds it; its entry goes at the
/// next sweep.
#[derive(Default)]
pub struct SharedSpecs {
    by_hash: HashMap<u64, Weak<PodSpec>>,
    /// Entries after the last sweep; the next sweep comes when the map has doubled.
    swept_len: usize,
}

impl SharedSpecs {
    /// `pod` as the cache keeps it, its spec the shared copy of an equal one when there is one.
    pub fn cache(&mut self, pod: Pod) -> CachedPod {
        let Pod {
            metadata,
            spec,
            status,
        } = pod;
        CachedPod {
            metadata,
            spec: spec.map(|s| self.share(s)),
            status,
        }
    }

    fn share(&mut self, spec: PodSpec) -> Arc<PodSpec> {
        let Some(key) = content_hash(&spec) else {
            return Arc::new(spec);
        };
        if let Some(shared) = self.by_hash.get(&key).and_then(Weak::upgrade) {
            // A hash collision is not a match: such a spec simply goes unshared.
            return if *shared == spec {
                shared
            } else {
                Arc::new(spec)
            };
        }
        let shared = Arc::new(spec);
        self.by_hash.insert(key, Arc::downgrade(&shared));
        if self.by_hash.len() > 2 * self.swept_len.max(512) {
            self.by_hash.retain(|_, w| w.strong_count() > 0);
            self.swept_len = self.by_hash.len();
        }
        shared
    }

    /// How many distinct specs are alive.
    pub fn live(&self) -> usize {
        self.by_hash
            .values()
            .filter(|w| w.strong_count() > 0)
            .count()
    }
}

/// A hash of the spec's JSON form (k8s-openapi's types implement no `Hash`). `None` only if it
/// cannot be serialized, which a spec just deserialized always can.
fn content_hash(spec: &PodSpec) -> Option<u64> {
    struct Writer<H>(H);
    impl<H: Hasher> std::io::Write for Writer<H> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.write(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut w = Writer(std::collections::hash_map::DefaultHasher::new());
    serde_json::to_writer(&mut w, spec).ok()?;
    Some(w.0.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: Option<&str>, cpu: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}],
            },
        }))
        .unwrap()
    }

    #[test]
    fn equal_specs_are_shared_and_different_ones_are_not() {
        let mut specs = SharedSpecs::default();
        let a = specs.cache(pod("a", Some("n1"), "1"));
        let b = specs.cache(pod("b", Some("n1"), "1"));
        let other_node = specs.cache(pod("c", Some("n2"), "1"));
        let other_size = specs.cache(pod("d", Some("n1"), "2"));
        let (a, b) = (a.spec.unwrap(), b.spec.unwrap());
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, other_node.spec.as_ref().unwrap()));
        assert!(!Arc::ptr_eq(&a, other_size.spec.as_ref().unwrap()));
        assert_eq!(
            other_node.spec.as_ref().unwrap().node_name.as_deref(),
            Some("n2")
        );
        assert_eq!(specs.live(), 3);
    }

    #[test]
    fn a_spec_goes_with_its_last_pod() {
        let mut specs = SharedSpecs::default();
        let first = specs.cache(pod("a", None, "1"));
        let weak = Arc::downgrade(first.spec.as_ref().unwrap());
        drop(first);
        assert!(weak.upgrade().is_none());
        assert_eq!(specs.live(), 0);
        // Cached again, it is a new copy, not the freed one.
        let again = specs.cache(pod("a", None, "1"));
        assert_eq!(again.spec.unwrap().containers[0].name, "app");
    }

    #[test]
    fn sweeps_keep_the_map_to_the_live_specs() {
        let mut specs = SharedSpecs::default();
        let mut kept = Vec::new();
        for i in 0..5_000 {
            let p = specs.cache(pod("p", None, &format!("{}m", i + 1)));
            if i % 10 == 0 {
                kept.push(p);
            }
        }
        assert!(specs.by_hash.len() <= 2 * 512, "{}", specs.by_hash.len());
        assert_eq!(specs.live(), 500);
        // The kept pods still resolve to their own spec.
        let again = specs.cache(pod("q", None, "11m"));
        assert!(Arc::ptr_eq(
            again.spec.as_ref().unwrap(),
            kept[1].spec.as_ref().unwrap()
        ));
    }
}
