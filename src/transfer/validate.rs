//! Checks one imported memory line before it may reach the table. An import file may come from
//! another machine or have been edited by hand, so every column is checked as strictly as the
//! live write paths check theirs, and the texts go through the same redaction.

use chrono::{DateTime, Duration, Utc};

use crate::memory::new_memory::NewMemory;
use crate::scope::{ConversationId, ScopeName, ScopeSource};
use crate::store::MemoryRecord;

use super::format::RowIn;

/// Longest id accepted (ids are UUIDs here; legacy tables used other short strings).
pub const MAX_ID_CHARS: usize = 128;

/// How far in the future a `created_at` may lie (clock skew between machines).
const FUTURE_SLACK_HOURS: i64 = 24;

/// A line that passed validation, redacted.
#[derive(Debug, Clone)]
pub struct ValidRow {
    pub record: MemoryRecord,
    /// The file's vector, if any (whether it may be reused is decided later).
    pub vector: Option<Vec<f32>>,
    /// Content, reasoning or tags changed on the way in (redaction, trimming, duplicate tags).
    pub changed: bool,
}

/// Validate and redact one row; the error says what is wrong, for the line's report.
pub(crate) fn validate(row: RowIn) -> Result<ValidRow, String> {
    let RowIn { record, vector } = row;
    check_id(&record.id)?;
    check_scope(
        record.memory_scope.as_deref(),
        record.scope_source.as_deref(),
    )?;
    if !(1..=100).contains(&record.strength) {
        return Err(format!("strength {} is outside 1..=100", record.strength));
    }
    check_created_at(record.created_at)?;
    let conversation_id = match record.conversation_id.as_deref() {
        Some(c) => Some(
            ConversationId::parse(c)
                .map_err(|e| e.to_string())?
                .as_str()
                .to_owned(),
        ),
        None => None,
    };
    let valid = NewMemory {
        content: record.content.clone(),
        reasoning: record.reasoning.clone(),
        tags: Some(record.tags.clone()),
        memory_type: Some(record.memory_type.clone()),
    }
    .parse()
    .map_err(|e| e.to_string())?;
    if valid.memory_type != record.memory_type {
        return Err(format!("unknown memory_type {:?}", record.memory_type));
    }
    let changed = valid.content != record.content
        || valid.reasoning != record.reasoning
        || valid.tags != record.tags;
    let record = MemoryRecord {
        content: valid.content,
        reasoning: valid.reasoning,
        tags: valid.tags,
        conversation_id,
        ..record
    };
    Ok(ValidRow {
        record,
        vector,
        changed,
    })
}

fn check_id(id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.chars().count() <= MAX_ID_CHARS
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid id: 1-{MAX_ID_CHARS} characters of A-Z a-z 0-9 - _ . : expected"
        ))
    }
}

/// A NULL scope is a legacy row and keeps NULL (with a NULL source); a scope must be a valid
/// name and its source one of the known ways a scope is decided.
fn check_scope(scope: Option<&str>, source: Option<&str>) -> Result<(), String> {
    match (scope, source) {
        (None, None) => Ok(()),
        (None, Some(_)) => Err("scope_source is set but memory_scope is null".into()),
        (Some(s), source) => {
            ScopeName::parse(s).map_err(|e| format!("memory_scope: {e}"))?;
            match source {
                Some(src) if ScopeSource::parse(src).is_none() => {
                    Err(format!("unknown scope_source {src:?}"))
                }
                _ => Ok(()),
            }
        }
    }
}

fn check_created_at(t: Option<DateTime<Utc>>) -> Result<(), String> {
    let Some(t) = t else {
        return Err("created_at is null (a damaged legacy row); set it or drop the line".into());
    };
    if t.timestamp() < 0 {
        return Err("created_at is before 1970".into());
    }
    if t > Utc::now() + Duration::hours(FUTURE_SLACK_HOURS) {
        return Err("created_at is in the future".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transfer::format::parse_row;

    fn line(patch: serde_json::Value) -> RowIn {
        let mut v = serde_json::json!({
            "id": "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "content": "Grandma likes orchids",
            "reasoning": null, "tags": ["grandma"], "memory_type": "knowledge", "strength": 10,
            "is_active": true, "conversation_id": "default:GroupMessage:1",
            "created_at": "2024-05-01T10:00:00.123456Z", "memory_scope": "家人",
            "scope_source": "conversation"
        });
        if let (Some(o), Some(p)) = (v.as_object_mut(), patch.as_object()) {
            o.extend(p.clone());
        }
        parse_row(&v.to_string()).unwrap()
    }

    #[test]
    fn a_good_row_passes_unchanged() {
        let r = validate(line(serde_json::json!({}))).unwrap();
        assert!(!r.changed);
        assert_eq!(r.record.memory_scope.as_deref(), Some("家人"));
    }

    #[test]
    fn bad_columns_are_named() {
        let cases = [
            (serde_json::json!({"id": ""}), "invalid id"),
            (serde_json::json!({"id": "a b"}), "invalid id"),
            (serde_json::json!({"memory_scope": "家 人"}), "memory_scope"),
            (serde_json::json!({"scope_source": "llm"}), "scope_source"),
            (
                serde_json::json!({"memory_scope": null}),
                "memory_scope is null",
            ),
            (serde_json::json!({"strength": 0}), "strength"),
            (serde_json::json!({"strength": 101}), "strength"),
            (serde_json::json!({"memory_type": "gossip"}), "memory_type"),
            (serde_json::json!({"content": "  "}), "content"),
            (
                serde_json::json!({"created_at": null}),
                "created_at is null",
            ),
            (
                serde_json::json!({"created_at": "2999-01-01T00:00:00Z"}),
                "future",
            ),
            (serde_json::json!({"conversation_id": "a\u{7}b"}), "control"),
        ];
        for (patch, want) in cases {
            let e = validate(line(patch.clone())).unwrap_err();
            assert!(e.contains(want), "{patch}: {e}");
        }
    }

    #[test]
    fn legacy_null_scope_is_kept() {
        let r = validate(line(
            serde_json::json!({"memory_scope": null, "scope_source": null}),
        ))
        .unwrap();
        assert_eq!(r.record.memory_scope, None);
    }

    #[test]
    fn personal_data_is_redacted_and_flagged() {
        let r = validate(line(serde_json::json!({
            "content": "我的手机号13812345678，记住",
            "tags": ["bob@example.com"]
        })))
        .unwrap();
        assert!(r.changed);
        assert_eq!(r.record.content, "我的手机号[REDACTED_PHONE]，记住");
        assert_eq!(r.record.tags, vec!["[REDACTED_EMAIL]".to_string()]);
    }
}
