//! KakaoCloud's official API models as data, to hold the client and the simulator to them.
//!
//! `contract/official.models` transcribes the models of the official SDK
//! (`kakaoenterprise/kc-sdk-go` v1.3.0, generated from KakaoCloud's OpenAPI documents; each
//! model names its `services/<svc>/docs/<Model>.md`) for every call this crate makes. From it:
//! - [`Models::validate`] checks a JSON document against a model exactly (required fields
//!   present, nulls only where the schema allows them, enum values, no unknown fields), which
//!   the simulator applies to what it serves and to the requests it is sent;
//! - [`Models::fixtures`] writes documents a server may legally send (every nullable field
//!   null, every optional field absent, every enum value), which the client must decode.
//!
//! Behind the `contract` feature: production builds do not carry it.
//!
//! The file's format, one model per block:
//! ```text
//! model <Name> <source doc>
//!   <json field> <type> [req] [null]   # type: string int number bool time any
//!                                      # enum(a|b) [T] {T} or another model's name
//! ```

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde_json::{Map, Value, json};

/// The transcription of the official models.
pub const OFFICIAL: &str = include_str!("../contract/official.models");

/// The official models, parsed once. Panics only if the committed file is malformed, which
/// this crate's tests catch.
pub fn official() -> &'static Models {
    static MODELS: LazyLock<Models> =
        LazyLock::new(|| Models::parse(OFFICIAL).expect("contract/official.models parses"));
    &MODELS
}

/// A field's type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Type {
    String,
    Int,
    Number,
    Bool,
    /// An RFC 3339 date-time string.
    Time,
    /// Any JSON value (the schema leaves it open).
    Any,
    Enum(Vec<String>),
    List(Box<Type>),
    /// An object with arbitrary keys whose values have this type.
    Map(Box<Type>),
    Model(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub ty: Type,
    pub required: bool,
    pub nullable: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Model {
    pub name: String,
    /// Where the official SDK documents it.
    pub source: String,
    pub fields: Vec<Field>,
}

/// A set of models that refer to each other by name.
#[derive(Debug, Clone, Default)]
pub struct Models {
    models: BTreeMap<String, Model>,
}

impl Models {
    /// Parses the format above; every referenced model must be defined.
    pub fn parse(text: &str) -> Result<Models, String> {
        let mut models = BTreeMap::new();
        let mut current: Option<Model> = None;
        for (n, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim_end();
            if line.trim().is_empty() {
                continue;
            }
            let at = |msg: &str| format!("line {}: {msg}: {raw:?}", n + 1);
            if let Some(rest) = line.strip_prefix("model ") {
                if let Some(done) = current.take() {
                    models.insert(done.name.clone(), done);
                }
                let mut words = rest.split_whitespace();
                let name = words.next().ok_or_else(|| at("model without a name"))?;
                if models.contains_key(name) {
                    return Err(at("model defined twice"));
                }
                current = Some(Model {
                    name: name.to_owned(),
                    source: words.collect::<Vec<_>>().join(" "),
                    fields: Vec::new(),
                });
                continue;
            }
            let model = current
                .as_mut()
                .ok_or_else(|| at("field outside a model"))?;
            if !line.starts_with("  ") {
                return Err(at("fields are indented by two spaces"));
            }
            let words = words(line);
            let [name, ty, flags @ ..] = words.as_slice() else {
                return Err(at("a field needs a name and a type"));
            };
            let ty = parse_type(ty).map_err(|e| at(&e))?;
            let (mut required, mut nullable) = (false, false);
            for flag in flags {
                match *flag {
                    "req" => required = true,
                    "null" => nullable = true,
                    other => return Err(at(&format!("unknown flag {other}"))),
                }
            }
            model.fields.push(Field {
                name: (*name).to_owned(),
                ty,
                required,
                nullable,
            });
        }
        if let Some(done) = current.take() {
            models.insert(done.name.clone(), done);
        }
        let parsed = Models { models };
        for model in parsed.models.values() {
            for field in &model.fields {
                if let Some(missing) = field.ty.models().find(|m| !parsed.models.contains_key(*m)) {
                    return Err(format!(
                        "{}.{} refers to undefined model {missing}",
                        model.name, field.name
                    ));
                }
            }
        }
        Ok(parsed)
    }

    pub fn get(&self, name: &str) -> Option<&Model> {
        self.models.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.models.keys().map(String::as_str)
    }

    /// Every way `value` departs from `model`, each with its JSON path; empty if it conforms.
    pub fn violations(&self, model: &str, value: &Value) -> Vec<String> {
        let mut out = Vec::new();
        self.check_model(model, value, "$", &mut out);
        out
    }

    /// `Ok` if `value` conforms to `model`, else every violation in one message.
    pub fn validate(&self, model: &str, value: &Value) -> Result<(), String> {
        let found = self.violations(model, value);
        if found.is_empty() {
            Ok(())
        } else {
            Err(format!("not a {model}: {}", found.join("; ")))
        }
    }

    fn check_model(&self, name: &str, value: &Value, path: &str, out: &mut Vec<String>) {
        let Some(model) = self.models.get(name) else {
            out.push(format!("{path}: unknown model {name}"));
            return;
        };
        let Some(object) = value.as_object() else {
            out.push(format!(
                "{path}: expected an object ({name}), got {}",
                kind(value)
            ));
            return;
        };
        for field in &model.fields {
            let at = format!("{path}.{}", field.name);
            match object.get(&field.name) {
                None if field.required => out.push(format!("{at}: required, missing")),
                None => {}
                Some(Value::Null) if field.nullable => {}
                Some(Value::Null) => out.push(format!("{at}: null, not nullable")),
                Some(v) => self.check_type(&field.ty, v, &at, out),
            }
        }
        for key in object.keys() {
            if !model.fields.iter().any(|f| &f.name == key) {
                out.push(format!("{path}.{key}: not a field of {name}"));
            }
        }
    }

    fn check_type(&self, ty: &Type, value: &Value, path: &str, out: &mut Vec<String>) {
        let ok = match ty {
            Type::String => value.is_string(),
            Type::Int => value.is_i64() || value.is_u64(),
            Type::Number => value.is_number(),
            Type::Bool => value.is_boolean(),
            Type::Time => value
                .as_str()
                .is_some_and(|s| s.parse::<jiff::Timestamp>().is_ok()),
            Type::Any => true,
            Type::Enum(values) => value
                .as_str()
                .is_some_and(|s| values.iter().any(|v| v == s)),
            Type::List(item) => match value.as_array() {
                Some(items) => {
                    for (i, v) in items.iter().enumerate() {
                        self.check_item(item, v, &format!("{path}[{i}]"), out);
                    }
                    true
                }
                None => false,
            },
            Type::Map(item) => match value.as_object() {
                Some(entries) => {
                    for (k, v) in entries {
                        self.check_item(item, v, &format!("{path}.{k}"), out);
                    }
                    true
                }
                None => false,
            },
            Type::Model(name) => {
                self.check_model(name, value, path, out);
                true
            }
        };
        if !ok {
            out.push(format!("{path}: expected {ty}, got {}", short(value)));
        }
    }

    /// Items of lists and maps are never null in the official models.
    fn check_item(&self, ty: &Type, value: &Value, path: &str, out: &mut Vec<String>) {
        if value.is_null() {
            out.push(format!("{path}: null item"));
        } else {
            self.check_type(ty, value, path, out);
        }
    }

    /// Documents a server may legally send as `model`, each with a name saying what it
    /// exercises: `full` (every field, one item per list), `nulls` (every nullable field
    /// null), `minimal` (required fields only), and one per enum value.
    pub fn fixtures(&self, model: &str) -> Vec<(String, Value)> {
        let mut out = vec![
            ("full".to_owned(), self.sample(model, Fill::Full, 0)),
            ("nulls".to_owned(), self.sample(model, Fill::Nulls, 0)),
            ("minimal".to_owned(), self.sample(model, Fill::Minimal, 0)),
        ];
        let mut enums = Vec::new();
        self.enum_paths(model, &mut Vec::new(), &mut enums, 0);
        for (path, values) in enums {
            for v in values {
                let mut doc = self.sample(model, Fill::Full, 0);
                if set_path(&mut doc, &path, Value::String(v.clone())) {
                    out.push((format!("{}={v}", path.join(".")), doc));
                }
            }
        }
        out
    }

    fn sample(&self, name: &str, fill: Fill, depth: usize) -> Value {
        let mut object = Map::new();
        let Some(model) = self.models.get(name) else {
            return Value::Object(object);
        };
        for field in &model.fields {
            let value = match fill {
                Fill::Minimal if !field.required => continue,
                Fill::Nulls if field.nullable => Value::Null,
                _ => self.sample_type(&field.ty, &field.name, fill, depth),
            };
            object.insert(field.name.clone(), value);
        }
        Value::Object(object)
    }

    fn sample_type(&self, ty: &Type, field: &str, fill: Fill, depth: usize) -> Value {
        match ty {
            Type::String => json!(format!("{field}-1")),
            Type::Int => json!(1),
            Type::Number => json!(1.5),
            Type::Bool => json!(true),
            Type::Time => json!("2026-01-02T03:04:05Z"),
            Type::Any => json!({}),
            Type::Enum(values) => json!(values.first().cloned().unwrap_or_default()),
            // Deep or minimal documents keep lists empty so recursion ends.
            Type::List(_) if fill == Fill::Minimal || depth > 6 => json!([]),
            Type::List(item) => json!([self.sample_type(item, field, fill, depth + 1)]),
            Type::Map(_) if fill == Fill::Minimal || depth > 6 => json!({}),
            Type::Map(item) => {
                json!({ format!("{field}-key"): self.sample_type(item, field, fill, depth + 1) })
            }
            Type::Model(name) => self.sample(name, fill, depth + 1),
        }
    }

    /// Paths (through models and first list items) to every enum-typed field.
    fn enum_paths(
        &self,
        name: &str,
        prefix: &mut Vec<String>,
        out: &mut Vec<(Vec<String>, Vec<String>)>,
        depth: usize,
    ) {
        let Some(model) = self.models.get(name) else {
            return;
        };
        if depth > 6 {
            return;
        }
        for field in &model.fields {
            prefix.push(field.name.clone());
            let mut ty = &field.ty;
            while let Type::List(item) = ty {
                prefix.push("0".to_owned());
                ty = item;
            }
            match ty {
                Type::Enum(values) => out.push((prefix.clone(), values.clone())),
                Type::Model(inner) => self.enum_paths(inner, prefix, out, depth + 1),
                _ => {}
            }
            while prefix.last().is_some_and(|p| p == "0") {
                prefix.pop();
            }
            prefix.pop();
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fill {
    Full,
    Nulls,
    Minimal,
}

impl Type {
    /// Names of the models this type refers to.
    fn models(&self) -> Box<dyn Iterator<Item = &str> + '_> {
        match self {
            Type::Model(name) => Box::new(std::iter::once(name.as_str())),
            Type::List(t) | Type::Map(t) => t.models(),
            _ => Box::new(std::iter::empty()),
        }
    }
}

impl std::fmt::Display for Type {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Type::String => f.write_str("string"),
            Type::Int => f.write_str("int"),
            Type::Number => f.write_str("number"),
            Type::Bool => f.write_str("bool"),
            Type::Time => f.write_str("time"),
            Type::Any => f.write_str("any"),
            Type::Enum(v) => write!(f, "enum({})", v.join("|")),
            Type::List(t) => write!(f, "[{t}]"),
            Type::Map(t) => write!(f, "{{{t}}}"),
            Type::Model(m) => f.write_str(m),
        }
    }
}

/// Splits on whitespace outside brackets, so an enum value may hold spaces
/// (`enum(Running|Running (Scheduling Disable))`).
fn words(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, None);
    for (i, c) in line.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            c if c.is_whitespace() && depth == 0 => {
                if let Some(s) = start.take() {
                    out.push(&line[s..i]);
                }
                continue;
            }
            _ => {}
        }
        start.get_or_insert(i);
    }
    if let Some(s) = start {
        out.push(&line[s..]);
    }
    out
}

fn parse_type(raw: &str) -> Result<Type, String> {
    if let Some(inner) = raw.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return Ok(Type::List(Box::new(parse_type(inner)?)));
    }
    if let Some(inner) = raw.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
        return Ok(Type::Map(Box::new(parse_type(inner)?)));
    }
    if let Some(inner) = raw.strip_prefix("enum(").and_then(|r| r.strip_suffix(')')) {
        let values: Vec<String> = inner.split('|').map(|v| v.trim().to_owned()).collect();
        if values.iter().any(String::is_empty) {
            return Err("empty enum value".into());
        }
        return Ok(Type::Enum(values));
    }
    Ok(match raw {
        "string" => Type::String,
        "int" => Type::Int,
        "number" => Type::Number,
        "bool" => Type::Bool,
        "time" => Type::Time,
        "any" => Type::Any,
        name if name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && name.starts_with(|c: char| c.is_ascii_uppercase()) =>
        {
            Type::Model(name.to_owned())
        }
        other => return Err(format!("unknown type {other}")),
    })
}

fn set_path(doc: &mut Value, path: &[String], value: Value) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut at = doc;
    for key in parents {
        at = match at {
            Value::Object(o) => match o.get_mut(key) {
                Some(v) => v,
                None => return false,
            },
            Value::Array(a) => match key.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                Some(v) => v,
                None => return false,
            },
            _ => return false,
        };
    }
    match at.as_object_mut() {
        Some(o) if o.contains_key(last) => {
            o.insert(last.clone(), value);
            true
        }
        _ => false,
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 60 {
        format!("{}…", text.chars().take(60).collect::<String>())
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "
model Outer doc/Outer.md
  id string req
  status enum(active|error)
  tags [string] null
  inner Inner null
  sizes {int}

model Inner doc/Inner.md
  name string req
  at time
";

    #[test]
    fn validates_exactly() {
        let m = Models::parse(SAMPLE).unwrap();
        assert!(m.validate("Outer", &json!({"id": "a"})).is_ok());
        assert!(
            m.validate(
                "Outer",
                &json!({"id": "a", "status": "error", "tags": null, "inner": {"name": "n", "at": "2026-01-01T00:00:00Z"}, "sizes": {"x": 1}})
            )
            .is_ok()
        );
        let bad = m.violations(
            "Outer",
            &json!({"status": "ACTIVE", "tags": [null], "inner": {"at": "yesterday"}, "sizes": null, "extra": 1}),
        );
        for expected in [
            "$.id: required",
            "$.status: expected enum",
            "$.tags[0]: null item",
            "$.inner.name: required",
            "$.inner.at: expected time",
            "$.sizes: null, not nullable",
            "$.extra: not a field",
        ] {
            assert!(
                bad.iter().any(|v| v.starts_with(expected)),
                "{expected} in {bad:?}"
            );
        }
    }

    #[test]
    fn fixtures_conform_and_cover_nulls_absence_and_enums() {
        let m = Models::parse(SAMPLE).unwrap();
        let fixtures = m.fixtures("Outer");
        for (name, doc) in &fixtures {
            assert_eq!(m.violations("Outer", doc), Vec::<String>::new(), "{name}");
        }
        let by = |n: &str| &fixtures.iter().find(|(k, _)| k == n).unwrap().1;
        assert_eq!(by("nulls")["tags"], Value::Null);
        assert_eq!(by("minimal"), &json!({"id": "id-1"}));
        assert_eq!(by("status=error")["status"], "error");
    }

    #[test]
    fn malformed_definitions_are_refused() {
        assert!(Models::parse("model A x\n  b Missing\n").is_err());
        assert!(Models::parse("model A x\n  b string maybe\n").is_err());
        assert!(Models::parse("  b string\n").is_err());
        assert!(Models::parse("model A x\n  b strin\n").is_err());
    }

    #[test]
    fn the_official_models_parse() {
        let m = Models::parse(OFFICIAL).unwrap();
        assert!(m.names().count() > 20);
    }
}
