//! Status conditions (`metav1.Condition`) helpers shared by every controller.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A condition's status (`metav1.ConditionStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    True,
    False,
    /// Not decided yet (upstream sets its conditions Unknown while it waits).
    Unknown,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

/// A condition's desired state, before timestamps are attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredCondition {
    pub type_: &'static str,
    pub status: Status,
    pub reason: String,
    pub message: String,
}

impl DesiredCondition {
    fn new(
        type_: &'static str,
        status: Status,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_,
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }

    pub fn truthy(
        type_: &'static str,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::new(type_, Status::True, reason, message)
    }

    pub fn falsy(
        type_: &'static str,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::new(type_, Status::False, reason, message)
    }

    pub fn unknown(
        type_: &'static str,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::new(type_, Status::Unknown, reason, message)
    }
}

/// Sets `desired` in `conditions`. `lastTransitionTime` only moves when the status
/// flips, so watchers can tell how long a condition has held. Returns whether
/// anything a reader can see changed.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    desired: &DesiredCondition,
    observed_generation: Option<i64>,
    now: &Time,
) -> bool {
    let status = desired.status.as_str();
    match conditions.iter_mut().find(|c| c.type_ == desired.type_) {
        Some(existing) => {
            let unchanged = existing.status == status
                && existing.reason == desired.reason
                && existing.message == desired.message
                && existing.observed_generation == observed_generation;
            if unchanged {
                return false;
            }
            if existing.status != status {
                existing.last_transition_time = now.clone();
            }
            existing.status = status.to_owned();
            existing.reason.clone_from(&desired.reason);
            existing.message.clone_from(&desired.message);
            existing.observed_generation = observed_generation;
            true
        }
        None => {
            conditions.push(Condition {
                type_: desired.type_.to_owned(),
                status: status.to_owned(),
                reason: desired.reason.clone(),
                message: desired.message.clone(),
                observed_generation,
                last_transition_time: now.clone(),
            });
            true
        }
    }
}

/// Whether `type_` is present with status True.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn transition_time_moves_only_on_flip() {
        let mut c = Vec::new();
        let ready = DesiredCondition::truthy("Ready", "Ready", "");
        assert!(set_condition(&mut c, &ready, Some(1), &at(10)));
        assert!(!set_condition(&mut c, &ready, Some(1), &at(20)));
        let reworded = DesiredCondition::truthy("Ready", "Ready", "all good");
        assert!(set_condition(&mut c, &reworded, Some(1), &at(30)));
        assert_eq!(c[0].last_transition_time, at(10));
        let broken = DesiredCondition::falsy("Ready", "SubnetsNotFound", "x");
        assert!(set_condition(&mut c, &broken, Some(2), &at(40)));
        assert_eq!(c[0].last_transition_time, at(40));
        assert!(!is_true(&c, "Ready"));
    }
}
