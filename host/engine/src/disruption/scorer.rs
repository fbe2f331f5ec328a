//! Ordering consolidation candidates: the seam where the consolidation-scorer plugin plugs in.
//!
//! The host first simulates each candidate on its own (do its pods fit on other nodes, or on one
//! cheaper replacement, and at what price), then asks a [`ConsolidationScorer`] to score all of
//! them at once. Higher scores are disrupted first; a score of zero or less keeps the node.

use super::model::Reason;

/// One candidate as the scorer sees it (the WIT `consolidation-candidate` record).
#[derive(Debug, Clone, PartialEq)]
pub struct ScoreCandidate {
    pub node_name: String,
    pub instance_type: String,
    pub node_pool: String,
    pub zone: String,
    pub capacity_type: String,
    pub price_micros: u64,
    /// Requested over allocatable, per mille (may exceed 1000).
    pub cpu_utilisation_permille: u32,
    pub memory_utilisation_permille: u32,
    pub age_seconds: u64,
    /// Pods that would be evicted (daemonset pods excluded).
    pub pod_count: u32,
    /// Sum of the evicted pods' eviction costs.
    pub disruption_cost: f64,
    /// The simulation placed all its pods on other existing nodes.
    pub pods_fit_elsewhere: bool,
    /// When its pods need a new node, the hourly price of the cheapest replacement.
    pub replacement_price_micros: Option<u64>,
    pub reason: Reason,
}

impl ScoreCandidate {
    /// Hourly saving of the candidate's own best action (0 when it has none).
    pub fn savings_micros(&self) -> u64 {
        if self.pods_fit_elsewhere {
            self.price_micros
        } else {
            self.replacement_price_micros
                .map_or(0, |r| self.price_micros.saturating_sub(r))
        }
    }
}

/// A scorer's failure: the pass falls back to the native scorer and reports it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScoreError {
    #[error("scorer {scorer} failed: {message}")]
    Failed { scorer: String, message: String },
    #[error("scorer {scorer} returned {got} scores for {want} candidates")]
    WrongLength {
        scorer: String,
        got: usize,
        want: usize,
    },
    #[error("scorer {scorer} returned a non-finite score at {index}")]
    NotFinite { scorer: String, index: usize },
}

/// Scores candidates; one score per candidate, in order. Must be a pure function of its input.
pub trait ConsolidationScorer: Send + Sync {
    fn name(&self) -> &str;
    fn score(&self, candidates: &[ScoreCandidate]) -> Result<Vec<f64>, ScoreError>;
}

/// Checks a scorer's answer: one finite score per candidate.
pub fn validate(scorer: &str, scores: &[f64], want: usize) -> Result<(), ScoreError> {
    if scores.len() != want {
        return Err(ScoreError::WrongLength {
            scorer: scorer.to_owned(),
            got: scores.len(),
            want,
        });
    }
    if let Some(index) = scores.iter().position(|s| !s.is_finite()) {
        return Err(ScoreError::NotFinite {
            scorer: scorer.to_owned(),
            index,
        });
    }
    Ok(())
}

/// The native default: least disruption per unit of cost saved, i.e. upstream's savings ratio
/// `savings / (1 + disruption cost)`. A candidate that saves nothing scores 0 (kept).
#[derive(Debug, Clone, Copy, Default)]
pub struct SavingsPerDisruption;

impl ConsolidationScorer for SavingsPerDisruption {
    fn name(&self) -> &str {
        "native-savings-per-disruption"
    }

    fn score(&self, candidates: &[ScoreCandidate]) -> Result<Vec<f64>, ScoreError> {
        Ok(candidates
            .iter()
            .map(|c| {
                let savings = c.savings_micros() as f64;
                if savings <= 0.0 {
                    return 0.0;
                }
                savings / (1.0 + c.disruption_cost.max(0.0))
            })
            .collect())
    }
}

/// Candidate indices ordered by score, best first, dropping scores <= 0. Ties keep the input order.
pub fn order(scores: &[f64]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..scores.len()).filter(|&i| scores[i] > 0.0).collect();
    idx.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(price: u64, fit: bool, replacement: Option<u64>, cost: f64) -> ScoreCandidate {
        ScoreCandidate {
            node_name: "n".into(),
            instance_type: "t".into(),
            node_pool: "p".into(),
            zone: "z".into(),
            capacity_type: "on-demand".into(),
            price_micros: price,
            cpu_utilisation_permille: 0,
            memory_utilisation_permille: 0,
            age_seconds: 0,
            pod_count: 1,
            disruption_cost: cost,
            pods_fit_elsewhere: fit,
            replacement_price_micros: replacement,
            reason: Reason::Underutilized,
        }
    }

    #[test]
    fn native_prefers_savings_per_disruption() {
        let cs = vec![
            cand(100, true, None, 1.0),       // 100 / 2 = 50
            cand(300, true, None, 9.0),       // 300 / 10 = 30
            cand(100, false, Some(20), 0.0),  // 80 / 1 = 80
            cand(100, false, Some(150), 0.0), // replacement dearer: 0
            cand(100, false, None, 0.0),      // nowhere to go: 0
        ];
        let scores = SavingsPerDisruption.score(&cs).unwrap();
        assert_eq!(order(&scores), vec![2, 0, 1]);
    }

    #[test]
    fn validation_rejects_bad_answers() {
        assert!(validate("s", &[1.0, 2.0], 2).is_ok());
        assert!(matches!(
            validate("s", &[1.0], 2),
            Err(ScoreError::WrongLength { .. })
        ));
        assert!(matches!(
            validate("s", &[1.0, f64::NAN], 2),
            Err(ScoreError::NotFinite { index: 1, .. })
        ));
    }
}
