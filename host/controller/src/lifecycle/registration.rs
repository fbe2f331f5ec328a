//! Registration and initialization: the Node with the NodeClaim's providerID is synced once
//! (labels, taints, finalizer, owner; the unregistered taint dropped), then the NodeClaim is
//! `Initialized` once the Node is Ready and no startup or ephemeral taint is left
//! (see [`super::initialization`]).
//!
//! A duplicate that joined first is adopted: a create whose answer was lost, then a list that
//! lagged, leaves two instances under the claim's name, with one userdata and so one Node name.
//! Whichever kubelet joins first holds that name (a later kubelet adopts the Node object, and
//! kubeadm refuses to join beside a Ready Node of its name), so when the duplicate's Node joins
//! first the NodeClaim takes the duplicate as its instance ([`joined_from_duplicate`]), and
//! garbage collection removes the one launched. Only an instance whose ownership marker or tag
//! verifies for this cluster and this NodeClaim, of the flavor and zone launched, is adopted.

use super::*;

/// The Node's taints after its first sync: the NodeClaim's taints and startup taints added
/// (unless the Node opts out with `karpenter.sh/do-not-sync-taints`), the unregistered taint gone.
pub(super) fn synced_taints(nc: &NodeClaim, node: &Node) -> Vec<Taint> {
    let mut taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let sync = node
        .labels()
        .get(label::DO_NOT_SYNC_TAINTS)
        .is_none_or(|v| v != "true");
    if sync {
        for t in nc
            .spec
            .taints
            .iter()
            .chain(nc.spec.startup_taints.iter())
            .map(Taint::from)
        {
            if !taints.iter().any(|x| taint_eq(x, &t)) {
                taints.push(t);
            }
        }
    }
    taints.retain(|t| t.key != taint::UNREGISTERED);
    taints
}

/// The merge patch of the first sync: the NodeClaim's labels plus `karpenter.sh/registered`,
/// the termination finalizer, the NodeClaim as owner, and [`synced_taints`]. The Node's
/// resourceVersion makes it a compare-and-swap.
pub(super) fn registration_patch(nc: &NodeClaim, node: &Node) -> serde_json::Value {
    let mut labels: BTreeMap<String, String> = nc.labels().clone();
    labels.insert(label::REGISTERED.into(), "true".into());
    let mut finalizers = node.finalizers().to_vec();
    if !finalizers.iter().any(|f| f == finalizer::TERMINATION) {
        finalizers.push(finalizer::TERMINATION.into());
    }
    json!({
        "metadata": {
            "labels": labels,
            "finalizers": finalizers,
            "ownerReferences": [{
                "apiVersion": NodeClaim::api_version(&()),
                "kind": NodeClaim::kind(&()),
                "name": nc.name_any(),
                "uid": nc.uid().unwrap_or_default(),
                "blockOwnerDeletion": true,
            }],
            "resourceVersion": node.resource_version(),
        },
        "spec": { "taints": synced_taints(nc, node) },
    })
}

/// A Node that joined for `nc` from another instance than `pid` names: it carries the
/// NodeClaim's label, a providerID of its own, and was never synced.
pub(super) fn joined_from_duplicate<'n>(
    nc: &NodeClaim,
    pid: &str,
    nodes: &'n [Arc<Node>],
) -> Option<&'n Node> {
    let name = nc.name_any();
    nodes
        .iter()
        .filter(|n| n.labels().get(label::NODECLAIM) == Some(&name) && !is_synced(n))
        .find(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|p| p != pid && parse_provider_id(p).is_some())
        })
        .map(AsRef::as_ref)
}

/// Whether the Node was synced already (it carries `karpenter.sh/registered`).
fn is_synced(node: &Node) -> bool {
    node.labels()
        .get(label::REGISTERED)
        .is_some_and(|v| v == "true")
}

/// Whether the Node still needs its one sync. Once only, as upstream: a second sync from a stale
/// read would put back the startup taints an agent has already removed, and the Node's watch can
/// lag our own patch by seconds at scale.
pub(super) fn needs_sync(nc: &NodeClaim, node: &Node) -> bool {
    !is_true(nc.conditions(), condition::REGISTERED) && !is_synced(node)
}

impl Lifecycle {
    /// `node` joined for `nc` from a duplicate instance (see the module docs): the NodeClaim
    /// takes that instance when it is provably this claim's and launched alike; otherwise it
    /// waits for its own instance's Node as before.
    pub(super) async fn adopt_duplicate(
        &self,
        nc: &NodeClaim,
        pid: &str,
        node: &Node,
    ) -> Result<Action, LifecycleError> {
        let name = nc.name_any();
        let joined = node.spec.as_ref().and_then(|s| s.provider_id.clone());
        let Some((zone, id)) = joined.as_deref().and_then(parse_provider_id) else {
            return self.await_registration(nc, pid).await;
        };
        let instance = match self.cloud.instances().get(id).await {
            Ok(i) if i.status != Some(InstanceStatus::Deleted) => i,
            Ok(_) | Err(kakaocloud::Error::NotFound { .. }) => {
                return self.await_registration(nc, pid).await;
            }
            Err(e) => return Err(e.into()),
        };
        let owner = self.keyring.current().owner(
            instance.description.as_deref().unwrap_or(""),
            instance.name.as_deref().unwrap_or(""),
            &self.settings.cluster_name,
            &instance.id,
        );
        let flavor = instance
            .flavor
            .as_ref()
            .and_then(|f| f.name.as_deref())
            .or(instance.instance_type.as_deref());
        let alike = flavor == nc.labels().get(label::INSTANCE_TYPE).map(String::as_str)
            && Some(zone) == nc.labels().get(label::ZONE).map(String::as_str);
        if !owner.is_ok_and(|o| o.nodeclaim == name) || !alike {
            tracing::warn!(NodeClaim = %name, node = %node.name_any(), instance = %id,
                "a Node joined under this NodeClaim's name from an instance it cannot adopt");
            return self.await_registration(nc, pid).await;
        }
        self.ensure_tagged(&name, &instance).await?;
        self.launches
            .insert(&nc.uid().unwrap_or_default(), &instance);
        let launched = parse_provider_id(pid).map_or(pid, |(_, id)| id);
        tracing::info!(NodeClaim = %name, instance = %id, replaces = %launched,
            "adopted the duplicate instance whose Node joined first");
        self.event(
            nc,
            EventType::Normal,
            "DuplicateAdopted",
            format!(
                "instance {id} (a duplicate from a lost create answer) joined first as Node {}; \
                 it replaces instance {launched}, which garbage collection removes",
                node.name_any()
            ),
        );
        let mut status = json!({ "providerID": joined });
        if let Some(image) = instance.image.as_ref() {
            status["imageID"] = json!(image.id);
        }
        self.set_conditions(nc, &[], Some(status)).await?;
        Ok(Action::requeue(Duration::from_secs(1)))
    }

    /// The Node of `nc` exists: sync it once, then follow its initialization.
    pub(super) async fn registered(
        &self,
        nc: &NodeClaim,
        node: &Node,
    ) -> Result<Action, LifecycleError> {
        let node_name = node.name_any();
        let node = if needs_sync(nc, node) {
            let had_taint = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|ts| ts.iter().any(|t| t.key == taint::UNREGISTERED));
            if !had_taint {
                self.event(
                    nc,
                    EventType::Warning,
                    "UnregisteredTaintMissing",
                    format!(
                        "node {node_name} registered without the {} taint",
                        taint::UNREGISTERED
                    ),
                );
            }
            let nodes: Api<Node> = Api::all(self.client.clone());
            // The kubelet writes the Node often while it joins: on a conflict, read it again and
            // retry now rather than after a requeue.
            let mut current = node.clone();
            let mut attempts = 0;
            let synced = loop {
                attempts += 1;
                match nodes
                    .patch(
                        &node_name,
                        &PatchParams::default(),
                        &Patch::Merge(registration_patch(nc, &current)),
                    )
                    .await
                {
                    Err(kube::Error::Api(e)) if e.code == 409 && attempts < 5 => {
                        current = nodes.get(&node_name).await?;
                        if is_synced(&current) {
                            // An earlier reconcile synced it; this read was stale.
                            break None;
                        }
                    }
                    result => break Some(result?),
                }
            };
            match synced {
                Some(synced) => {
                    tracing::info!(node = %node_name, "registered nodeclaim");
                    // The node joined: its bootstrap token has no use left.
                    self.delete_bootstrap_token(&nc.name_any()).await?;
                    self.metrics.node_created(nc);
                    synced
                }
                None => current,
            }
        } else {
            node.clone()
        };
        let registered = DesiredCondition::truthy(condition::REGISTERED, "Registered", "");
        let initialized = self.initialize(nc, &node).await?;
        let init_cond = initialized.condition();
        let recorded = nc.status.as_ref().and_then(|s| s.node_name.as_deref());
        let node_name_patch =
            (recorded != Some(node_name.as_str())).then(|| json!({ "nodeName": node_name }));
        self.set_conditions(nc, &[registered, init_cond], node_name_patch)
            .await?;
        Ok(if initialized.done() {
            Action::requeue(Duration::from_secs(300))
        } else {
            Action::requeue(Duration::from_secs(2))
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(crate) fn claim(taints: serde_json::Value, startup: serde_json::Value) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-x1", "uid": "uid-1", "labels": {label::NODEPOOL: "default"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.kakaocloud.com", "kind": "KCNodeClass", "name": "default"},
                "requirements": [], "taints": taints, "startupTaints": startup
            }
        }))
        .unwrap()
    }

    pub(crate) fn node(taints: serde_json::Value, extra: serde_json::Value) -> Node {
        let mut n = json!({
            "metadata": {"name": "node-1", "resourceVersion": "7", "finalizers": ["other/keep"]},
            "spec": {"taints": taints},
        });
        if let (Some(m), Some(e)) = (n["metadata"].as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        serde_json::from_value(n).unwrap()
    }

    fn keys(taints: &[Taint]) -> Vec<&str> {
        taints.iter().map(|t| t.key.as_str()).collect()
    }

    #[test]
    fn first_sync_adds_claim_taints_and_drops_the_unregistered_one() {
        let nc = claim(
            json!([{"key": "team", "effect": "NoSchedule"}]),
            json!([{"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"}]),
        );
        let n = node(
            json!([{"key": taint::UNREGISTERED, "effect": "NoExecute"}]),
            json!({}),
        );
        assert_eq!(
            keys(&synced_taints(&nc, &n)),
            ["team", taint::CILIUM_AGENT_NOT_READY]
        );
    }

    #[test]
    fn a_node_is_synced_once_whatever_a_stale_read_shows() {
        let mut nc = claim(json!([]), json!([]));
        let fresh = node(
            json!([{"key": taint::UNREGISTERED, "effect": "NoExecute"}]),
            json!({}),
        );
        assert!(needs_sync(&nc, &fresh));
        let labelled = node(json!([]), json!({"labels": {label::REGISTERED: "true"}}));
        assert!(!needs_sync(&nc, &labelled));
        nc.status = Some(kk_apis::NodeClaimStatus {
            conditions: vec![
                serde_json::from_value(json!({
                    "type": condition::REGISTERED, "status": "True", "reason": "Registered",
                    "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"
                }))
                .unwrap(),
            ],
            ..Default::default()
        });
        assert!(
            !needs_sync(&nc, &fresh),
            "a Registered claim is not synced again from a Node read before its sync"
        );
    }

    #[test]
    fn only_an_unsynced_node_of_this_claim_from_another_instance_is_a_joined_duplicate() {
        let nc = claim(json!([]), json!([]));
        let pid = "kakaocloud:///kr-central-2-a/launched";
        let joined = |name: &str, claim: &str, provider: &str, synced: bool| {
            let mut labels = json!({label::NODECLAIM: claim});
            if synced {
                labels[label::REGISTERED] = json!("true");
            }
            let mut n = node(json!([]), json!({"name": name, "labels": labels}));
            n.spec.get_or_insert_default().provider_id = Some(provider.to_owned());
            Arc::new(n)
        };
        let nodes = vec![
            joined("own", "default-x1", pid, false),
            joined(
                "other-claim",
                "default-x2",
                "kakaocloud:///kr-central-2-a/b",
                false,
            ),
            joined(
                "synced",
                "default-x1",
                "kakaocloud:///kr-central-2-a/c",
                true,
            ),
        ];
        assert!(joined_from_duplicate(&nc, pid, &nodes).is_none());
        let mut with_dup = nodes.clone();
        with_dup.push(joined(
            "dup",
            "default-x1",
            "kakaocloud:///kr-central-2-a/d",
            false,
        ));
        assert_eq!(
            joined_from_duplicate(&nc, pid, &with_dup).map(|n| n.name_any()),
            Some("dup".to_owned())
        );
    }

    #[test]
    fn do_not_sync_taints_leaves_the_nodes_taints() {
        let nc = claim(json!([{"key": "team", "effect": "NoSchedule"}]), json!([]));
        let n = node(
            json!([{"key": taint::UNREGISTERED, "effect": "NoExecute"}, {"key": "own", "effect": "NoSchedule"}]),
            json!({"labels": {label::DO_NOT_SYNC_TAINTS: "true"}}),
        );
        assert_eq!(keys(&synced_taints(&nc, &n)), ["own"]);
    }

    #[test]
    fn the_patch_labels_owns_and_holds_the_node() {
        let nc = claim(json!([]), json!([]));
        let n = node(json!([]), json!({}));
        let p = registration_patch(&nc, &n);
        assert_eq!(p["metadata"]["labels"][label::REGISTERED], "true");
        assert_eq!(p["metadata"]["labels"][label::NODEPOOL], "default");
        assert_eq!(
            p["metadata"]["finalizers"],
            json!(["other/keep", finalizer::TERMINATION]),
            "existing finalizers are kept"
        );
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "NodeClaim");
        assert_eq!(p["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        assert_eq!(p["metadata"]["resourceVersion"], "7", "a compare-and-swap");
    }
}
