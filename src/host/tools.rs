//! The LLM tools of the memory plugin (names and limits modelled on the upstream plugin's
//! `core_memory_remember` / `core_memory_recall`), and `core_memory_update`, which corrects or
//! deletes a memory the conversation was shown (injected memories carry their ids). The
//! schemas' limits are the write and recall paths' own constants, so they cannot drift.

use serde_json::{json, Map, Value};

use super::{CallContext, PluginError, ToolSpec};
use crate::memory::new_memory::{
    MAX_ID_BYTES, MAX_STRENGTH, MAX_TAGS, MAX_TAG_CHARS, MAX_TEXT_CHARS,
};
use crate::memory::service::MAX_QUERY_CHARS;
use crate::memory::{
    ForgetRequest, RecallMode, RecallRequest, RememberRequest, UpdateRequest, MEMORY_TYPES,
};

pub const REMEMBER: &str = "core_memory_remember";
pub const RECALL: &str = "core_memory_recall";
pub const UPDATE: &str = "core_memory_update";

pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: REMEMBER,
            description:
                "Save a long-term memory about the user or the conversation: a fact, event, \
                          skill, task or feeling worth recalling in later conversations.",
            input_schema: json!({
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "content": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT_CHARS,
                                "description": "What to remember, as a self-contained statement."},
                    "judgment": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT_CHARS,
                                 "description": "Alias of content."},
                    "reasoning": {"type": "string", "maxLength": MAX_TEXT_CHARS,
                                  "description": "Why this is worth remembering."},
                    "tags": {"type": "array", "maxItems": MAX_TAGS,
                             "items": {"type": "string", "minLength": 1, "maxLength": MAX_TAG_CHARS},
                             "description": "People, places and keywords this memory is about."},
                    "memory_type": {"type": "string", "enum": MEMORY_TYPES, "default": "knowledge"},
                    "strength": {"type": "integer", "minimum": 1, "maximum": MAX_STRENGTH, "default": crate::memory::service::DEFAULT_STRENGTH,
                                 "description": "How important it is."},
                    "expires_at": {"type": "string", "format": "date-time",
                                   "description": "When to forget it (RFC 3339, in the future), \
                                                   e.g. for a one-off plan; leave out to keep \
                                                   the default for its type."}
                }
            }),
        },
        ToolSpec {
            name: RECALL,
            description: "Search long-term memory for what is relevant to a question or topic.",
            input_schema: json!({
                "type": "object",
                "additionalProperties": false,
                "required": ["query"],
                "properties": {
                    "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS,
                              "description": "What to look for, in natural language."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 5},
                    "search": {"type": "string", "enum": ["hybrid", "vector", "keyword"],
                               "description": "keyword finds exact words (names, codes, room numbers); vector finds meaning; hybrid (the usual default) fuses both."}
                }
            }),
        },
        ToolSpec {
            name: UPDATE,
            description: "Correct or delete a long-term memory when the user says it is wrong \
                          or no longer wanted (e.g. '不对，妈妈是对阿莫西林过敏' or '这条不用记了'). \
                          Use the id shown on the memory.",
            input_schema: json!({
                "type": "object",
                "additionalProperties": false,
                "required": ["memory_id"],
                "properties": {
                    "memory_id": {"type": "string", "minLength": 1, "maxLength": MAX_ID_BYTES,
                                  "description": "The id of the memory to correct or delete."},
                    "content": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT_CHARS,
                                "description": "The corrected memory, as a self-contained statement."},
                    "tags": {"type": "array", "maxItems": MAX_TAGS,
                             "items": {"type": "string", "minLength": 1, "maxLength": MAX_TAG_CHARS}},
                    "delete": {"type": "boolean", "default": false,
                               "description": "true: forget this memory instead of correcting it."}
                }
            }),
        },
    ]
}

/// What the update tool asks for: a correction, or the memory's deletion.
pub enum UpdateCall {
    Correct(UpdateRequest),
    Delete(ForgetRequest),
}

pub(crate) fn update_request(ctx: CallContext, args: Value) -> Result<UpdateCall, PluginError> {
    let mut map = arguments(UPDATE, args)?;
    let memory_id: String = take(&mut map, "memory_id")?
        .ok_or_else(|| PluginError::bad_request("invalid_arguments", "'memory_id' is required"))?;
    let content: Option<String> = take(&mut map, "content")?;
    let tags: Option<Vec<String>> = take(&mut map, "tags")?;
    if take::<bool>(&mut map, "delete")?.unwrap_or(false) {
        if content.is_some() || tags.is_some() {
            return Err(PluginError::bad_request(
                "invalid_arguments",
                "'delete' cannot be combined with 'content' or 'tags'",
            ));
        }
        return Ok(UpdateCall::Delete(ForgetRequest {
            conversation_id: ctx.conversation_id,
            persona: ctx.persona,
            memory_ids: Some(vec![memory_id]),
        }));
    }
    Ok(UpdateCall::Correct(UpdateRequest {
        conversation_id: ctx.conversation_id,
        persona: ctx.persona,
        memory_id,
        content,
        tags,
        expires_at: None,
    }))
}

/// Refuse any argument the schema does not declare: in particular nothing can name a scope or
/// a conversation, so a model cannot steer a memory into (or out of) another scope.
fn arguments(spec_name: &str, args: Value) -> Result<Map<String, Value>, PluginError> {
    let Value::Object(map) = (match args {
        Value::Null => Value::Object(Map::new()),
        other => other,
    }) else {
        return Err(PluginError::bad_request(
            "invalid_arguments",
            "tool arguments must be a JSON object",
        ));
    };
    let spec = specs().into_iter().find(|s| s.name == spec_name);
    let allowed = spec
        .as_ref()
        .and_then(|s| s.input_schema["properties"].as_object().cloned())
        .unwrap_or_default();
    for key in map.keys() {
        if !allowed.contains_key(key) {
            let why = if key.contains("scope") || key.contains("conversation") || key == "persona" {
                "the scope and conversation come from the request context, never from tool arguments"
            } else {
                "not an argument of this tool"
            };
            return Err(PluginError::bad_request(
                "invalid_arguments",
                format!("'{key}': {why}"),
            ));
        }
    }
    Ok(map)
}

fn take<T: serde::de::DeserializeOwned>(
    map: &mut Map<String, Value>,
    key: &str,
) -> Result<Option<T>, PluginError> {
    match map.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v)
            .map(Some)
            .map_err(|e| PluginError::bad_request("invalid_arguments", format!("'{key}': {e}"))),
    }
}

pub(crate) fn remember_request(
    ctx: CallContext,
    args: Value,
) -> Result<RememberRequest, PluginError> {
    let mut map = arguments(REMEMBER, args)?;
    let content: Option<String> = take(&mut map, "content")?;
    let judgment: Option<String> = take(&mut map, "judgment")?;
    let content = content.or(judgment).ok_or_else(|| {
        PluginError::bad_request("invalid_arguments", "'content' (or 'judgment') is required")
    })?;
    Ok(RememberRequest {
        conversation_id: ctx.conversation_id,
        persona: ctx.persona,
        content,
        reasoning: take(&mut map, "reasoning")?,
        tags: take(&mut map, "tags")?,
        memory_type: take(&mut map, "memory_type")?,
        strength: take(&mut map, "strength")?,
        expires_at: take(&mut map, "expires_at")?,
    })
}

pub(crate) fn recall_request(ctx: CallContext, args: Value) -> Result<RecallRequest, PluginError> {
    let mut map = arguments(RECALL, args)?;
    let query: String = take(&mut map, "query")?
        .ok_or_else(|| PluginError::bad_request("invalid_arguments", "'query' is required"))?;
    Ok(RecallRequest {
        conversation_id: ctx.conversation_id,
        persona: ctx.persona,
        query,
        limit: take(&mut map, "limit")?,
        search: take(&mut map, "search")?,
        mode: RecallMode::Comprehensive,
        entities: Vec::new(),
        relevance_gate: None,
        timezone: None,
        time_words: None,
        history: Vec::new(),
        for_prompt: false,
        counted: false,
        sender_id: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> CallContext {
        CallContext {
            conversation_id: "default:GroupMessage:1".into(),
            persona: None,
        }
    }

    #[test]
    fn schemas_never_mention_scope_or_conversation() {
        for spec in specs() {
            let text = spec.input_schema.to_string();
            assert!(
                !text.contains("scope") && !text.contains("conversation"),
                "{}",
                spec.name
            );
        }
    }

    #[test]
    fn steering_arguments_are_refused() {
        for key in [
            "memory_scope",
            "scope",
            "conversation_id",
            "persona",
            "scope_source",
        ] {
            let err = remember_request(ctx(), json!({"content": "x", key: "家人"})).unwrap_err();
            assert_eq!(err.code, "invalid_arguments", "{key}");
            let err = recall_request(ctx(), json!({"query": "x", key: "家人"})).unwrap_err();
            assert_eq!(err.code, "invalid_arguments", "{key}");
        }
    }

    #[test]
    fn judgment_is_an_alias_and_context_supplies_the_conversation() {
        let r = remember_request(ctx(), json!({"judgment": "likes tea", "strength": 70})).unwrap();
        assert_eq!(r.content, "likes tea");
        assert_eq!(r.conversation_id, "default:GroupMessage:1");
        assert_eq!(r.strength, Some(70));
        assert!(remember_request(ctx(), json!({})).is_err());
        assert!(recall_request(ctx(), json!({"query": 5})).is_err());
    }
}
