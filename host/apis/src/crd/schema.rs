//! Small schema helpers: CEL rules and list semantics the derive cannot express.

use schemars::Schema;
use serde_json::{Value, json};

/// A qualified label key (`prefix/name`), as Kubernetes validates it.
pub const LABEL_KEY_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";
/// A label value (may be empty).
pub const LABEL_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";

/// Appends CEL rules (`rule`, `message`) to a schema's `x-kubernetes-validations`.
pub(crate) fn add_rules(schema: &mut Schema, rules: &[(&str, &str)]) {
    let new = rules
        .iter()
        .map(|(rule, message)| json!({ "rule": rule, "message": message }));
    match schema.get_mut("x-kubernetes-validations") {
        Some(Value::Array(existing)) => existing.extend(new),
        _ => {
            schema.insert(
                "x-kubernetes-validations".into(),
                Value::Array(new.collect()),
            );
        }
    }
}

/// `status.conditions`: a map keyed by `type`, so server-side apply merges per condition.
pub(crate) fn conditions_list(schema: &mut Schema) {
    schema.insert("x-kubernetes-list-type".into(), json!("map"));
    schema.insert("x-kubernetes-list-map-keys".into(), json!(["type"]));
}

/// Lists replaced as a whole on apply (upstream's `atomic`).
pub(crate) fn atomic_list(schema: &mut Schema) {
    schema.insert("x-kubernetes-list-type".into(), json!("atomic"));
}
