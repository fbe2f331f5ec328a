//! Static NodePools (`spec.replicas`, upstream's static capacity): each keeps exactly `replicas`
//! NodeClaims, whatever the pods need. `kubectl scale nodepool/<name> --replicas=N` sets it.
//!
//! Every [`INTERVAL`], per static NodePool, counting its NodeClaims that are not being deleted
//! and whose node no disruption command holds:
//! - too few: the missing NodeClaims are created, all from one scheduling of a pod that asks for
//!   nothing, on that NodePool alone, so its requirements, its KCNodeClass's zones, the
//!   DaemonSets' overhead and the instance selector choose the instance types as for any
//!   NodeClaim; never past `limits.nodes`;
//! - too many: the surplus is deleted, the NodeClaims that matter least first (not initialized,
//!   then fewest pods, then newest). Deleting a NodeClaim runs termination: drain, then the
//!   verified instance delete.
//!
//! Provisioning never uses a static NodePool for pending pods, and consolidation never takes its
//! nodes; drift and expiration delete them and this controller brings the count back.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use crate::events::Events;
use crate::metrics::Metrics;
use crate::provisioning::catalog::LiveCatalog;
use crate::provisioning::is_managed_pool;
use crate::state::ClusterState;
use kk_apis::cached_pod::CachedPod;
use kk_apis::crd::{NodeClaim, NodePool};
use kk_apis::names::{condition, label};
use kk_engine::scheduling::model::{NodeClaimDraft, SchedulingProblem};
use kk_engine::scheduling::resources::Resources;
use kk_engine::scheduling::{InstanceRanker, Scheduler, SchedulerOptions, translate};

/// How often every static NodePool's count is checked.
pub const INTERVAL: Duration = Duration::from_secs(5);

pub struct StaticCapacity {
    pub client: kube::Client,
    pub state: ClusterState,
    pub catalog: Arc<LiveCatalog>,
    pub ranker: Arc<dyn InstanceRanker>,
    pub metrics: Arc<Metrics>,
    pub events: Events,
}

/// What a static NodePool needs now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Create(usize),
    /// NodeClaim names, in the order they go.
    Delete(Vec<String>),
}

/// The NodeClaims of `pool` that count toward its replicas (not being deleted, not held by a
/// disruption command), and what the count needs: `None` when it is right.
pub fn change(
    pool: &NodePool,
    claims: &[Arc<NodeClaim>],
    pods_on: impl Fn(&str) -> usize,
    held: impl Fn(&str) -> bool,
) -> Option<Change> {
    let want = usize::try_from(pool.spec.replicas?).unwrap_or(0);
    let name = pool.name_any();
    let mut live: Vec<&NodeClaim> = claims
        .iter()
        .map(Arc::as_ref)
        .filter(|c| c.labels().get(label::NODEPOOL) == Some(&name))
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| !node_of(c).is_some_and(&held))
        .collect();
    if live.len() < want {
        let cap = node_limit(pool).map_or(usize::MAX, |l| l.saturating_sub(live.len()));
        let missing = (want - live.len()).min(cap);
        return (missing > 0).then_some(Change::Create(missing));
    }
    if live.len() == want {
        return None;
    }
    // Least valuable first: not initialized, then fewest pods, then newest.
    live.sort_by_key(|c| {
        let initialized = c.status.as_ref().is_some_and(|s| {
            kk_apis::crd::conditions::is_true(&s.conditions, condition::INITIALIZED)
        });
        let pods = node_of(c).map_or(0, &pods_on);
        let created = c.metadata.creation_timestamp.as_ref().map(|t| t.0);
        (initialized, pods, std::cmp::Reverse(created))
    });
    let surplus = live.len() - want;
    Some(Change::Delete(
        live.iter().take(surplus).map(|c| c.name_any()).collect(),
    ))
}

fn node_of(claim: &NodeClaim) -> Option<&str> {
    claim.status.as_ref()?.node_name.as_deref()
}

/// `limits.nodes`, the only limit a static NodePool may set.
fn node_limit(pool: &NodePool) -> Option<usize> {
    let q = pool.spec.limits.as_ref()?.get("nodes")?;
    q.0.parse().ok()
}

/// A pod that asks for nothing: scheduled on a static NodePool alone, it yields the NodeClaim
/// that NodePool makes with nothing to fit.
fn placeholder() -> CachedPod {
    CachedPod {
        metadata: Default::default(),
        spec: Some(Arc::new(PodSpec {
            containers: vec![Container {
                name: "static-capacity".into(),
                ..Default::default()
            }],
            ..Default::default()
        })),
        status: None,
    }
}

impl StaticCapacity {
    /// Runs passes until the process stops.
    pub async fn run(self: Arc<Self>) {
        let mut tick = tokio::time::interval(INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.pass().await;
        }
    }

    #[tracing::instrument(skip_all)]
    async fn pass(&self) {
        let claims = self.state.nodeclaims.state();
        for pool in self.state.nodepools.state() {
            if !is_managed_pool(&pool) || !pool.spec.is_static() {
                continue;
            }
            let needed = change(
                &pool,
                &claims,
                |node| self.state.pods_on(node).len(),
                |node| self.state.is_marked_for_deletion(node),
            );
            let result = match needed {
                None => Ok(()),
                Some(Change::Create(n)) => self.create(&pool, n).await,
                Some(Change::Delete(names)) => self.delete(&pool, &names).await,
            };
            if let Err(err) = result {
                tracing::warn!(NodePool = %pool.name_any(), error = %err, "static capacity pass failed");
            }
        }
    }

    /// The NodeClaim `pool` makes with nothing to fit (see [`placeholder`]).
    async fn draft(&self, pool: &NodePool) -> anyhow::Result<NodeClaimDraft> {
        let catalog = self.catalog.instance_types().await?;
        let class = self
            .state
            .nodeclasses
            .state()
            .into_iter()
            .find(|c| c.name_any() == pool.spec.template.spec.node_class_ref.name);
        let input = translate::nodepool_input(pool, class.as_deref(), Resources::ZERO, 0);
        let daemonsets = self.state.daemonset_pods();
        let ranker = Arc::clone(&self.ranker);
        // Scheduling calls the selector plugin: off the async workers.
        let result = tokio::task::spawn_blocking(move || {
            let pods = [Arc::new(placeholder())];
            let pools = [input];
            let problem = SchedulingProblem {
                pods: &pods,
                node_pools: &pools,
                instance_types: &catalog,
                existing_nodes: &[],
                daemonsets: &daemonsets,
            };
            Scheduler::new(&*ranker, SchedulerOptions::default()).solve(&problem)
        })
        .await?;
        match result.new_node_claims.into_iter().next() {
            Some(draft) => Ok(draft),
            None => {
                let why = result
                    .unschedulable
                    .first()
                    .map(|u| u.reason.clone())
                    .unwrap_or_else(|| "no instance type fits the NodePool".into());
                self.events.publish_deduped(
                    &pool.object_ref(&()),
                    EventType::Warning,
                    "NoCompatibleInstanceTypes",
                    format!("static NodePool cannot make a node: {why}"),
                    Duration::from_secs(300),
                );
                anyhow::bail!("no NodeClaim fits: {why}")
            }
        }
    }

    async fn create(&self, pool: &NodePool, count: usize) -> anyhow::Result<()> {
        let draft = self.draft(pool).await?;
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        let pool_name = pool.name_any();
        for _ in 0..count {
            let name = translate::nodeclaim_name(&pool_name);
            let claim = translate::nodeclaim_for(&draft, pool, name.clone());
            api.create(&PostParams::default(), &claim).await?;
            tracing::info!(NodeClaim = %name, NodePool = %pool_name, replicas = ?pool.spec.replicas, "created nodeclaim for a static nodepool");
            self.metrics.claim_created(&pool_name, "static");
        }
        Ok(())
    }

    async fn delete(&self, pool: &NodePool, names: &[String]) -> anyhow::Result<()> {
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        for name in names {
            tracing::info!(NodeClaim = %name, NodePool = %pool.name_any(), replicas = ?pool.spec.replicas, "deleting nodeclaim above a static nodepool's replicas");
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(replicas: i64, limit: Option<&str>) -> NodePool {
        let mut v = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "fixed"},
            "spec": {"replicas": replicas, "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.kakaocloud.com", "kind": "KCNodeClass", "name": "c"},
                "requirements": []}}}
        });
        if let Some(l) = limit {
            v["spec"]["limits"] = json!({"nodes": l});
        }
        serde_json::from_value(v).unwrap()
    }

    fn claim(name: &str, node: Option<&str>, initialized: bool, created: &str) -> Arc<NodeClaim> {
        let conditions = if initialized {
            json!([{"type": "Initialized", "status": "True", "reason": "Initialized", "message": "",
                    "lastTransitionTime": created}])
        } else {
            json!([])
        };
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": name, "labels": {label::NODEPOOL: "fixed"},
                             "creationTimestamp": created},
                "spec": {"nodeClassRef": {"group": "karpenter.kakaocloud.com", "kind": "KCNodeClass", "name": "c"},
                         "requirements": []},
                "status": {"nodeName": node, "conditions": conditions}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn too_few_creates_the_missing_within_the_node_limit() {
        let claims = vec![claim("a", Some("n-a"), true, "2026-01-01T00:00:00Z")];
        let none = |_: &str| false;
        assert_eq!(
            change(&pool(3, None), &claims, |_| 0, none),
            Some(Change::Create(2))
        );
        assert_eq!(
            change(&pool(3, Some("2")), &claims, |_| 0, none),
            Some(Change::Create(1))
        );
        assert_eq!(change(&pool(3, Some("1")), &claims, |_| 0, none), None);
        assert_eq!(change(&pool(1, None), &claims, |_| 0, none), None);
        // A node a disruption command holds does not count: it is on its way out.
        assert_eq!(
            change(&pool(1, None), &claims, |_| 0, |n| n == "n-a"),
            Some(Change::Create(1))
        );
    }

    #[test]
    fn too_many_deletes_the_least_valuable_first() {
        let claims = vec![
            claim("busy", Some("n-busy"), true, "2026-01-01T00:00:00Z"),
            claim("idle-old", Some("n-idle-old"), true, "2026-01-01T00:00:00Z"),
            claim("idle-new", Some("n-idle-new"), true, "2026-01-02T00:00:00Z"),
            claim("launching", None, false, "2026-01-01T00:00:00Z"),
        ];
        let pods = |n: &str| usize::from(n == "n-busy") * 5;
        assert_eq!(
            change(&pool(1, None), &claims, pods, |_| false),
            Some(Change::Delete(vec![
                "launching".into(),
                "idle-new".into(),
                "idle-old".into()
            ]))
        );
        assert_eq!(
            change(&pool(0, None), &claims, pods, |_| false),
            Some(Change::Delete(vec![
                "launching".into(),
                "idle-new".into(),
                "idle-old".into(),
                "busy".into()
            ]))
        );
    }
}
