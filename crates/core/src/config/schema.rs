//! AstrBot `_conf_schema.json` reader and validator.
//!
//! The schema file is the single source of truth for config keys, types and defaults: the
//! service never repeats a default in code. [`Schema::resolve`] merges a user's JSON over the
//! schema defaults, checks every value's type, and reports unknown keys as warnings (AstrBot
//! keeps keys from older plugin versions, so an unknown key must not stop the service).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::ConfigError;

/// The value types an AstrBot schema field can declare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    /// A single-line string.
    String,
    /// A multi-line string; with `editor_language: "json"` it may also hold JSON itself.
    Text,
    /// A JSON integer (a float such as `5.0` is rejected).
    Int,
    /// Any JSON number.
    Float,
    /// `true` or `false`.
    Bool,
    /// A nested group of fields described by `items`.
    Object,
    /// A JSON array.
    List,
}

impl FieldType {
    fn name(self) -> &'static str {
        match self {
            FieldType::String => "string",
            FieldType::Text => "text",
            FieldType::Int => "int",
            FieldType::Float => "float",
            FieldType::Bool => "bool",
            FieldType::Object => "object",
            FieldType::List => "list",
        }
    }
}

/// One field of the schema; keys AstrBot uses only for display are kept where useful and the
/// rest are ignored, so the schema can carry any AstrBot UI option.
#[derive(Clone, Debug, Deserialize)]
pub struct FieldSchema {
    /// Shown as the field label in AstrBot.
    #[serde(default)]
    pub description: String,
    /// Value type.
    #[serde(rename = "type")]
    pub kind: FieldType,
    /// Longer help text.
    #[serde(default)]
    pub hint: Option<String>,
    /// Default value; when absent the type's empty value is used.
    #[serde(default)]
    pub default: Option<Value>,
    /// Nested fields of an `object`.
    #[serde(default)]
    pub items: Option<BTreeMap<String, FieldSchema>>,
    /// Allowed values (AstrBot renders a drop-down).
    #[serde(default)]
    pub options: Option<Vec<Value>>,
    /// Language of a `text` field's editor; `"json"` makes the field accept a JSON value.
    #[serde(default)]
    pub editor_language: Option<String>,
}

impl FieldSchema {
    fn is_json_text(&self) -> bool {
        self.kind == FieldType::Text && self.editor_language.as_deref() == Some("json")
    }
}

/// A parsed `_conf_schema.json`: top-level keys to field schemas.
#[derive(Clone, Debug)]
pub struct Schema {
    fields: BTreeMap<String, FieldSchema>,
}

impl Schema {
    /// Parses schema text; an error means the schema itself (not a user file) is broken.
    pub(crate) fn parse(text: &str) -> Result<Schema, ConfigError> {
        let fields: BTreeMap<String, FieldSchema> = serde_json::from_str(text)
            .map_err(|e| ConfigError::Schema(format!("not a valid schema: {e}")))?;
        let schema = Schema { fields };
        schema.check_shape(&schema.fields, "")?;
        Ok(schema)
    }

    fn check_shape(
        &self,
        fields: &BTreeMap<String, FieldSchema>,
        prefix: &str,
    ) -> Result<(), ConfigError> {
        for (key, field) in fields {
            let path = join(prefix, key);
            match (field.kind, &field.items) {
                (FieldType::Object, Some(items)) => self.check_shape(items, &path)?,
                (FieldType::Object, None) => {
                    return Err(ConfigError::Schema(format!(
                        "object field `{path}` has no `items`"
                    )))
                }
                (_, Some(_)) => {
                    return Err(ConfigError::Schema(format!(
                        "field `{path}` has `items` but is not an object"
                    )))
                }
                (_, None) => {}
            }
        }
        Ok(())
    }

    /// The defaults object: every field with its schema default (validated like user input,
    /// so a broken default is caught).
    pub(crate) fn defaults(&self) -> Result<Value, ConfigError> {
        let mut warnings = Vec::new();
        resolve_object(&self.fields, None, "", &mut warnings).map(Value::Object)
    }

    /// Deep-merges `user` over the defaults and validates the result.
    ///
    /// Returns the complete, normalised config object (every schema key present; JSON `text`
    /// fields given as strings are parsed) and warnings for unknown keys (dotted paths).
    pub(crate) fn resolve(&self, user: &Value) -> Result<(Value, Vec<String>), ConfigError> {
        let Value::Object(user) = user else {
            return Err(ConfigError::InvalidType {
                key: "<root>".to_owned(),
                expected: "object".to_owned(),
                got: describe(user),
            });
        };
        let mut warnings = Vec::new();
        let merged = resolve_object(&self.fields, Some(user), "", &mut warnings)?;
        Ok((Value::Object(merged), warnings))
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

fn resolve_object(
    fields: &BTreeMap<String, FieldSchema>,
    user: Option<&Map<String, Value>>,
    prefix: &str,
    warnings: &mut Vec<String>,
) -> Result<Map<String, Value>, ConfigError> {
    let mut out = Map::new();
    for (key, field) in fields {
        let path = join(prefix, key);
        let value = match user.and_then(|u| u.get(key)) {
            Some(given) => check_value(field, given, &path, warnings)?,
            None => default_value(field, &path, warnings)?,
        };
        out.insert(key.clone(), value);
    }
    if let Some(user) = user {
        for key in user.keys().filter(|k| !fields.contains_key(k.as_str())) {
            warnings.push(format!(
                "unknown config key `{}` ignored",
                join(prefix, key)
            ));
        }
    }
    Ok(out)
}

fn default_value(
    field: &FieldSchema,
    path: &str,
    warnings: &mut Vec<String>,
) -> Result<Value, ConfigError> {
    if field.kind == FieldType::Object {
        let items = field
            .items
            .as_ref()
            .ok_or_else(|| ConfigError::Schema(format!("object field `{path}` has no `items`")))?;
        return resolve_object(items, None, path, warnings).map(Value::Object);
    }
    let raw = match &field.default {
        Some(v) => v.clone(),
        None => match field.kind {
            FieldType::String | FieldType::Text => Value::String(String::new()),
            FieldType::Int => Value::from(0),
            FieldType::Float => Value::from(0.0),
            FieldType::Bool => Value::Bool(false),
            FieldType::List => Value::Array(Vec::new()),
            FieldType::Object => Value::Object(Map::new()),
        },
    };
    check_value(field, &raw, path, warnings)
        .map_err(|e| ConfigError::Schema(format!("default of `{path}` is invalid: {e}")))
}

fn check_value(
    field: &FieldSchema,
    given: &Value,
    path: &str,
    warnings: &mut Vec<String>,
) -> Result<Value, ConfigError> {
    let type_error = |expected: &str| ConfigError::InvalidType {
        key: path.to_owned(),
        expected: expected.to_owned(),
        got: describe(given),
    };
    let value = match field.kind {
        FieldType::Object => {
            let Value::Object(obj) = given else {
                return Err(type_error("object"));
            };
            let items = field.items.as_ref().ok_or_else(|| {
                ConfigError::Schema(format!("object field `{path}` has no `items`"))
            })?;
            return resolve_object(items, Some(obj), path, warnings).map(Value::Object);
        }
        FieldType::Text if field.is_json_text() => match given {
            // AstrBot stores text fields as strings; accept the JSON inside.
            Value::String(s) if s.trim().is_empty() => Value::Object(Map::new()),
            Value::String(s) => {
                serde_json::from_str::<Value>(s).map_err(|e| ConfigError::InvalidValue {
                    key: path.to_owned(),
                    reason: format!(
                        "the string is not valid JSON (line {}, column {}): {e}",
                        e.line(),
                        e.column()
                    ),
                    got: "string".to_owned(),
                })?
            }
            other => other.clone(),
        },
        FieldType::String | FieldType::Text => match given {
            Value::String(_) => given.clone(),
            _ => return Err(type_error(field.kind.name())),
        },
        FieldType::Int => {
            if given.is_i64() || given.is_u64() {
                given.clone()
            } else {
                return Err(type_error("int"));
            }
        }
        FieldType::Float => match given {
            Value::Number(_) => given.clone(),
            _ => return Err(type_error("float")),
        },
        FieldType::Bool => match given {
            Value::Bool(_) => given.clone(),
            _ => return Err(type_error("bool")),
        },
        FieldType::List => match given {
            Value::Array(_) => given.clone(),
            _ => return Err(type_error("list")),
        },
    };
    if let Some(options) = &field.options {
        if !options.contains(&value) {
            let allowed: Vec<String> = options.iter().map(Value::to_string).collect();
            return Err(ConfigError::InvalidValue {
                key: path.to_owned(),
                reason: format!("must be one of {}", allowed.join(", ")),
                got: describe(given),
            });
        }
    }
    Ok(value)
}

/// A short, type-first description of a JSON value for error messages.
pub(crate) fn describe(value: &Value) -> String {
    const MAX: usize = 40;
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("bool {b}"),
        Value::Number(n) if n.is_i64() || n.is_u64() => format!("integer {n}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => {
            let shown: String = s.chars().take(MAX).collect();
            let more = if s.chars().count() > MAX { "…" } else { "" };
            format!("string {shown:?}{more}")
        }
        Value::Array(_) => "list".to_owned(),
        Value::Object(_) => "object".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::parse(
            r#"{
              "a": {"type": "int", "default": 1},
              "s": {"type": "string", "options": ["x", "y"], "default": "x"},
              "t": {"type": "text", "editor_language": "json", "default": "{}"},
              "o": {"type": "object", "items": {"f": {"type": "float", "default": 0.5}}}
            }"#,
        )
        .unwrap()
    }

    #[test]
    fn defaults_are_built_from_schema() {
        let d = schema().defaults().unwrap();
        assert_eq!(d, json!({"a": 1, "s": "x", "t": {}, "o": {"f": 0.5}}));
    }

    #[test]
    fn int_rejects_float_and_float_accepts_int() {
        let s = schema();
        assert!(matches!(
            s.resolve(&json!({"a": 5.0})),
            Err(ConfigError::InvalidType { ref key, .. }) if key == "a"
        ));
        let (v, _) = s.resolve(&json!({"o": {"f": 1}})).unwrap();
        assert_eq!(v["o"]["f"], json!(1));
    }

    #[test]
    fn option_outside_list_is_error() {
        let err = schema().resolve(&json!({"s": "z"})).unwrap_err();
        assert!(matches!(err, ConfigError::InvalidValue { ref key, .. } if key == "s"));
        assert!(err.to_string().contains("\"x\""), "{err}");
    }

    #[test]
    fn broken_schema_is_schema_error() {
        assert!(matches!(
            Schema::parse(r#"{"o": {"type": "object"}}"#),
            Err(ConfigError::Schema(_))
        ));
        assert!(matches!(
            Schema::parse(r#"{"a": {"type": "int", "default": "one"}}"#)
                .unwrap()
                .defaults(),
            Err(ConfigError::Schema(_))
        ));
    }

    #[test]
    fn non_object_root_is_error() {
        assert!(matches!(
            schema().resolve(&json!([1])),
            Err(ConfigError::InvalidType { ref key, .. }) if key == "<root>"
        ));
    }
}
