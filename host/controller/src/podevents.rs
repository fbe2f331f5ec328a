//! Pod events (upstream's `nodeclaim.podevents` controller): when a pod is bound to a node or
//! leaves it, the node's NodeClaim gets `status.lastPodEventTime`, and disruption counts
//! `consolidateAfter` from it instead of from initialization.
//!
//! Invariants:
//! - at most one write per NodeClaim per [`DEDUPE`] (upstream's dedupe timeout), so a scale-out
//!   that binds hundreds of pods costs one status patch per node, not one per pod;
//! - only `status.lastPodEventTime` is written (a merge patch of status);
//! - which pod changes are events is decided where the pod watch classifies them
//!   ([`crate::state::Change::PodEvent`]).

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio::sync::mpsc;

use crate::state::ClusterState;
use kk_apis::crd::NodeClaim;

/// The shortest time between two writes of one NodeClaim's `lastPodEventTime`.
pub const DEDUPE: Duration = Duration::from_secs(10);

/// Status writes in flight at once.
const WRITES_IN_FLIGHT: usize = 8;

/// Whether `claim` recorded a pod event less than [`DEDUPE`] before `now`.
pub fn recently_recorded(claim: &NodeClaim, now: Timestamp) -> bool {
    claim
        .status
        .as_ref()
        .and_then(|s| s.last_pod_event_time.as_ref())
        .is_some_and(|t| now.duration_since(t.0).as_secs() < DEDUPE.as_secs() as i64)
}

/// Writes `lastPodEventTime` for the NodeClaims of the nodes named on `events`.
pub async fn run(
    client: kube::Client,
    state: ClusterState,
    mut events: mpsc::UnboundedReceiver<String>,
) {
    let api: Api<NodeClaim> = Api::all(client);
    let mut written: HashMap<String, Instant> = HashMap::new();
    while let Some(first) = events.recv().await {
        // Everything queued meanwhile goes in the same round.
        let mut nodes = BTreeSet::from([first]);
        while let Ok(more) = events.try_recv() {
            nodes.insert(more);
        }
        written.retain(|_, at| at.elapsed() < DEDUPE);
        let now = Timestamp::now();
        let claims: Vec<String> = state
            .nodeclaims
            .state()
            .iter()
            .filter(|c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some_and(|n| nodes.contains(n))
            })
            .filter(|c| !recently_recorded(c, now) && !written.contains_key(&c.name_any()))
            .map(|c| c.name_any())
            .collect();
        let patch = json!({ "status": { "lastPodEventTime": now } });
        let results: Vec<(String, Result<NodeClaim, kube::Error>)> =
            futures::stream::iter(claims.into_iter().map(|name| {
                let (api, patch) = (&api, &patch);
                async move {
                    let r = api
                        .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
                        .await;
                    (name, r)
                }
            }))
            .buffer_unordered(WRITES_IN_FLIGHT)
            .collect()
            .await;
        for (name, result) in results {
            match result {
                Ok(_) => {
                    written.insert(name, Instant::now());
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(err) => {
                    tracing::warn!(NodeClaim = %name, error = %err, "recording a pod event failed")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recent_pod_event_is_not_written_again() {
        let claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c"},
            "spec": {"nodeClassRef": {"group": "karpenter.kakaocloud.com", "kind": "KCNodeClass", "name": "default"}, "requirements": []},
            "status": {"lastPodEventTime": "2026-12-06T00:00:00Z"}
        }))
        .unwrap();
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        assert!(recently_recorded(&claim, at("2026-12-06T00:00:09Z")));
        assert!(!recently_recorded(&claim, at("2026-12-06T00:00:10Z")));
        let mut never = claim.clone();
        never.status = None;
        assert!(!recently_recorded(&never, at("2026-12-06T00:00:09Z")));
    }
}
