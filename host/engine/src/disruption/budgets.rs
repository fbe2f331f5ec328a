//! Disruption budgets: how many of a NodePool's nodes may be disrupting at once, per reason.
//!
//! Upstream semantics (`GetAllowedDisruptionsByReason`): a budget applies when it names the reason
//! (or names none) and, if it has a schedule, while a window of `duration` opened by the schedule
//! is open. The allowance is the minimum over applicable budgets (percentages round up) of the
//! pool's node count, minus the nodes already disrupting. A malformed budget fails closed.

use jiff::Timestamp;

use super::cron::Schedule;
use super::model::{ClusterSnapshot, Reason};
use kk_apis::crd::nodepool::Budget;

/// Whether `budget` is in force at `now`; `Err` when its schedule or duration is unusable.
pub fn budget_active(budget: &Budget, now: Timestamp) -> Result<bool, String> {
    match (&budget.schedule, &budget.duration) {
        (None, None) => Ok(true),
        (Some(schedule), Some(duration)) => {
            let s = Schedule::parse(schedule).map_err(|e| e.to_string())?;
            Ok(s.active(now, duration.0))
        }
        _ => Err("schedule and duration must be set together".into()),
    }
}

/// How many nodes of `total` the budgets let be disrupted for `reason` at `now`, before
/// subtracting those already disrupting. `None` reason (expiration) is not budgeted.
pub fn allowed_by_budgets(budgets: &[Budget], reason: Reason, total: u32, now: Timestamp) -> u32 {
    let Some(budget_reason) = reason.budget_reason() else {
        return u32::MAX;
    };
    let mut allowed = u32::MAX;
    for b in budgets {
        if b.reasons
            .as_ref()
            .is_some_and(|rs| !rs.contains(&budget_reason))
        {
            continue;
        }
        match budget_active(b, now) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(_) => return 0,
        }
        match b.allowed(total) {
            Some(n) => allowed = allowed.min(n),
            None => return 0,
        }
    }
    allowed
}

/// Disruptions left for each pool and reason in this snapshot.
#[derive(Debug, Clone, Default)]
pub struct BudgetTracker {
    /// (pool, reason) -> nodes that may still start disrupting.
    left: Vec<(String, Reason, u32)>,
    /// pool -> nodes already disrupting (deleting or not ready), which consume its budgets.
    disrupting: Vec<(String, u32)>,
}

impl BudgetTracker {
    /// Counts, per pool, the managed initialized nodes (the base of percentages) and the nodes
    /// already disrupting (deleting, or not ready), then evaluates every reason's budgets.
    pub fn new(snapshot: &ClusterSnapshot) -> BudgetTracker {
        let mut left = Vec::new();
        let mut disrupting_by_pool = Vec::new();
        for pool in &snapshot.pools {
            let nodes = snapshot
                .nodes
                .iter()
                .filter(|n| n.managed() && n.node_pool.as_deref() == Some(pool.name.as_str()));
            let (mut total, mut disrupting) = (0u32, 0u32);
            for n in nodes {
                if n.initialized {
                    total += 1;
                }
                if n.deleting || !n.ready {
                    disrupting += 1;
                }
            }
            for reason in [
                Reason::Empty,
                Reason::Underutilized,
                Reason::Drifted,
                Reason::Expired,
            ] {
                let allowed = allowed_by_budgets(&pool.budgets, reason, total, snapshot.now);
                left.push((
                    pool.name.clone(),
                    reason,
                    allowed.saturating_sub(disrupting),
                ));
            }
            disrupting_by_pool.push((pool.name.clone(), disrupting));
        }
        BudgetTracker {
            left,
            disrupting: disrupting_by_pool,
        }
    }

    /// Nodes of `pool` that may still start disrupting for `reason`.
    pub fn remaining(&self, pool: &str, reason: Reason) -> u32 {
        self.left
            .iter()
            .find(|(p, r, _)| p == pool && *r == reason)
            .map_or(0, |(_, _, n)| *n)
    }

    /// Nodes of `pool` already disrupting when the tracker was built (upstream's
    /// `nodepools_nodes_consuming_budgets`).
    pub fn disrupting(&self, pool: &str) -> u32 {
        self.disrupting
            .iter()
            .find(|(p, _)| p == pool)
            .map_or(0, |(_, n)| *n)
    }

    /// Takes one disruption of `pool` for `reason`; false when none is left. A node taken for one
    /// reason also counts against the pool's other reasons (it is disrupting either way).
    pub fn take(&mut self, pool: &str, reason: Reason) -> bool {
        if self.remaining(pool, reason) == 0 {
            return false;
        }
        for (_, _, n) in self.left.iter_mut().filter(|(p, _, _)| p == pool) {
            *n = n.saturating_sub(1);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kk_apis::crd::KDuration;
    use kk_apis::crd::nodepool::DisruptionReason;
    use std::time::Duration;

    fn budget(nodes: &str) -> Budget {
        Budget {
            nodes: nodes.into(),
            schedule: None,
            duration: None,
            reasons: None,
        }
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn minimum_of_applicable_budgets_with_percent_rounding_up() {
        let now = at("2026-12-03T12:00:00Z");
        let bs = vec![budget("10%"), budget("3")];
        assert_eq!(allowed_by_budgets(&bs, Reason::Underutilized, 5, now), 1);
        assert_eq!(allowed_by_budgets(&bs, Reason::Underutilized, 100, now), 3);
        assert_eq!(
            allowed_by_budgets(&[budget("0")], Reason::Empty, 100, now),
            0
        );
        assert_eq!(allowed_by_budgets(&[], Reason::Empty, 100, now), u32::MAX);
        // Expiration is forceful: budgets do not apply.
        assert_eq!(
            allowed_by_budgets(&[budget("0")], Reason::Expired, 100, now),
            u32::MAX
        );
    }

    #[test]
    fn reasons_select_budgets() {
        let now = at("2026-12-03T12:00:00Z");
        let mut drift_only = budget("0");
        drift_only.reasons = Some(vec![DisruptionReason::Drifted]);
        let bs = vec![budget("50%"), drift_only];
        assert_eq!(allowed_by_budgets(&bs, Reason::Drifted, 10, now), 0);
        assert_eq!(allowed_by_budgets(&bs, Reason::Empty, 10, now), 5);
    }

    #[test]
    fn scheduled_budget_applies_only_inside_its_window() {
        // No disruption during business hours on weekdays.
        let mut b = budget("0");
        b.schedule = Some("0 9 * * mon-fri".into());
        b.duration = Some(KDuration(Duration::from_secs(8 * 3600)));
        let bs = vec![budget("100%"), b];
        assert_eq!(
            allowed_by_budgets(&bs, Reason::Empty, 4, at("2026-12-03T10:00:00Z")),
            0
        );
        assert_eq!(
            allowed_by_budgets(&bs, Reason::Empty, 4, at("2026-12-03T18:00:00Z")),
            4
        );
        assert_eq!(
            allowed_by_budgets(&bs, Reason::Empty, 4, at("2026-12-05T10:00:00Z")),
            4
        );
    }

    #[test]
    fn malformed_budgets_fail_closed() {
        let now = at("2026-12-03T12:00:00Z");
        let mut bad_cron = budget("100%");
        bad_cron.schedule = Some("every day".into());
        bad_cron.duration = Some(KDuration(Duration::from_secs(60)));
        assert_eq!(allowed_by_budgets(&[bad_cron], Reason::Empty, 10, now), 0);
        let mut half = budget("100%");
        half.schedule = Some("@daily".into());
        assert_eq!(allowed_by_budgets(&[half], Reason::Empty, 10, now), 0);
        assert_eq!(
            allowed_by_budgets(&[budget("lots")], Reason::Empty, 10, now),
            0
        );
    }
}
