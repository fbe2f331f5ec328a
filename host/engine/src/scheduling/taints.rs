//! Taints and tolerations, compiled to interned ids.

use k8s_openapi::api::core::v1::{Taint, Toleration};

use super::symbols::{Sym, Symbols};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Effect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl Effect {
    fn parse(s: &str) -> Option<Effect> {
        match s {
            "NoSchedule" => Some(Effect::NoSchedule),
            "PreferNoSchedule" => Some(Effect::PreferNoSchedule),
            "NoExecute" => Some(Effect::NoExecute),
            _ => None,
        }
    }
}

/// A compiled taint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CTaint {
    pub key: Sym,
    /// The empty string's id when the taint has no value.
    pub value: Sym,
    pub effect: Effect,
}

impl CTaint {
    /// `None` for an effect Kubernetes does not define (such a taint cannot be set on a node).
    pub fn compile(syms: &mut Symbols, t: &Taint) -> Option<CTaint> {
        Some(CTaint {
            key: syms.intern(&t.key),
            value: syms.intern(t.value.as_deref().unwrap_or("")),
            effect: Effect::parse(&t.effect)?,
        })
    }
}

/// A compiled toleration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CToleration {
    /// `None`: matches every key (only with `Exists`).
    key: Option<Sym>,
    exists: bool,
    value: Sym,
    /// `None`: every effect.
    effect: Option<Effect>,
}

impl CToleration {
    pub fn compile(syms: &mut Symbols, t: &Toleration) -> CToleration {
        let key = t
            .key
            .as_deref()
            .filter(|k| !k.is_empty())
            .map(|k| syms.intern(k));
        CToleration {
            key,
            exists: t.operator.as_deref() == Some("Exists"),
            value: syms.intern(t.value.as_deref().unwrap_or("")),
            effect: t.effect.as_deref().and_then(Effect::parse),
        }
    }

    /// Tolerates every `PreferNoSchedule` taint: the last relaxation step for a pod that fits nowhere else.
    pub fn prefer_no_schedule_any() -> CToleration {
        CToleration {
            key: None,
            exists: true,
            value: 0,
            effect: Some(Effect::PreferNoSchedule),
        }
    }

    pub fn tolerates(&self, t: &CTaint) -> bool {
        if self.effect.is_some_and(|e| e != t.effect) {
            return false;
        }
        match self.key {
            None => self.exists,
            Some(k) => k == t.key && (self.exists || self.value == t.value),
        }
    }
}

/// Whether `tolerations` tolerate every taint that keeps pods off (NoSchedule, NoExecute, and PreferNoSchedule
/// unless relaxed: Karpenter treats PreferNoSchedule as binding until the pod is relaxed).
pub fn tolerates_all(tolerations: &[CToleration], taints: &[CTaint]) -> Result<(), CTaint> {
    for t in taints {
        if !tolerations.iter().any(|tol| tol.tolerates(t)) {
            return Err(*t);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(s: &mut Symbols, key: &str, value: Option<&str>, effect: &str) -> CTaint {
        CTaint::compile(
            s,
            &Taint {
                key: key.into(),
                value: value.map(Into::into),
                effect: effect.into(),
                time_added: None,
            },
        )
        .unwrap()
    }

    fn tol(
        s: &mut Symbols,
        key: Option<&str>,
        op: &str,
        value: Option<&str>,
        effect: Option<&str>,
    ) -> CToleration {
        CToleration::compile(
            s,
            &Toleration {
                key: key.map(Into::into),
                operator: Some(op.into()),
                value: value.map(Into::into),
                effect: effect.map(Into::into),
                toleration_seconds: None,
            },
        )
    }

    #[test]
    fn equal_exists_and_wildcards() {
        let mut s = Symbols::new();
        let gpu = taint(&mut s, "nvidia.com/gpu", Some("true"), "NoSchedule");
        let equal = tol(
            &mut s,
            Some("nvidia.com/gpu"),
            "Equal",
            Some("true"),
            Some("NoSchedule"),
        );
        let wrong_value = tol(&mut s, Some("nvidia.com/gpu"), "Equal", Some("false"), None);
        let exists = tol(&mut s, Some("nvidia.com/gpu"), "Exists", None, None);
        let wrong_effect = tol(
            &mut s,
            Some("nvidia.com/gpu"),
            "Exists",
            None,
            Some("NoExecute"),
        );
        let everything = tol(&mut s, None, "Exists", None, None);
        assert!(equal.tolerates(&gpu));
        assert!(!wrong_value.tolerates(&gpu));
        assert!(exists.tolerates(&gpu));
        assert!(!wrong_effect.tolerates(&gpu));
        assert!(everything.tolerates(&gpu));
        assert_eq!(tolerates_all(&[], &[gpu]), Err(gpu));
        assert!(tolerates_all(&[exists], &[gpu]).is_ok());
        let soft = taint(&mut s, "soft", None, "PreferNoSchedule");
        assert!(tolerates_all(&[], &[soft]).is_err());
        assert!(tolerates_all(&[CToleration::prefer_no_schedule_any()], &[soft]).is_ok());
        assert!(
            CTaint::compile(
                &mut s,
                &Taint {
                    key: "k".into(),
                    effect: "Sometimes".into(),
                    ..Default::default()
                }
            )
            .is_none()
        );
    }
}
