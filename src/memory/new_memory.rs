//! The fields every write path takes from its caller (remember, the remember tool, feedback
//! new memories, import), validated and redacted in one place so the rules cannot drift apart.

use serde::{Deserialize, Serialize};

use super::model::MEMORY_TYPES;
use super::redact::redact;
use super::MemoryError;

/// Longest content or reasoning, in characters.
pub const MAX_TEXT_CHARS: usize = 4000;
/// Most tags on one memory.
pub const MAX_TAGS: usize = 32;
/// Longest tag, in characters.
pub const MAX_TAG_CHARS: usize = 64;
/// Longest memory id a caller may name, in bytes.
pub const MAX_ID_BYTES: usize = 128;
/// Strength a caller may give a memory: 1 to this.
pub const MAX_STRENGTH: i64 = 100;
/// Strength a memory gets when its writer names none (a caller, or a rule that consolidates
/// chat messages).
pub(crate) const DEFAULT_STRENGTH: i64 = 50;

/// A memory as a caller proposes it. No scope: that is derived from the conversation.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NewMemory {
    #[serde(alias = "judgment")]
    pub content: String,
    #[serde(default)]
    pub reasoning: Option<String>,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    #[serde(default)]
    pub memory_type: Option<String>,
}

/// A [`NewMemory`] that passed validation, with personal data redacted from every text field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidMemory {
    pub content: String,
    pub reasoning: Option<String>,
    pub tags: Vec<String>,
    pub memory_type: String,
}

impl NewMemory {
    /// Validate (trimmed content 1–4000 characters, reasoning at most 4000, at most 32 tags of
    /// at most 64 characters, a known memory type) and redact. Blank tags and duplicates are
    /// dropped; anything over a limit is an error naming the field, never silently cut.
    pub(crate) fn parse(self) -> Result<ValidMemory, MemoryError> {
        let content = self.content.trim();
        if content.is_empty() {
            return Err(invalid("content", "content must not be empty"));
        }
        if content.chars().count() > MAX_TEXT_CHARS {
            return Err(invalid(
                "content",
                format!("content is longer than {MAX_TEXT_CHARS} characters"),
            ));
        }
        let reasoning = match self.reasoning.as_deref().map(str::trim) {
            Some(r) if r.chars().count() > MAX_TEXT_CHARS => {
                return Err(invalid(
                    "reasoning",
                    format!("reasoning is longer than {MAX_TEXT_CHARS} characters"),
                ))
            }
            Some("") | None => None,
            Some(r) => Some(redact(r)),
        };
        let memory_type = match self.memory_type.as_deref().map(str::trim) {
            None | Some("") => "knowledge".to_string(),
            Some(t) if MEMORY_TYPES.contains(&t) => t.to_string(),
            Some(t) => {
                return Err(invalid(
                    "memory_type",
                    format!(
                        "unknown memory_type '{t}'; expected one of {}",
                        MEMORY_TYPES.join(", ")
                    ),
                ))
            }
        };
        Ok(ValidMemory {
            content: redact(content),
            reasoning,
            tags: clean_tags(self.tags.unwrap_or_default())?,
            memory_type,
        })
    }
}

fn clean_tags(tags: Vec<String>) -> Result<Vec<String>, MemoryError> {
    if tags.len() > MAX_TAGS {
        return Err(invalid("tags", format!("at most {MAX_TAGS} tags")));
    }
    let mut out: Vec<String> = Vec::with_capacity(tags.len());
    for t in tags {
        let t = t.trim();
        if t.is_empty() {
            continue;
        }
        if t.chars().count() > MAX_TAG_CHARS {
            return Err(invalid(
                "tags",
                format!("a tag is longer than {MAX_TAG_CHARS} characters"),
            ));
        }
        let t = redact(t);
        if !out.contains(&t) {
            out.push(t);
        }
    }
    Ok(out)
}

fn invalid(field: &'static str, message: impl Into<String>) -> MemoryError {
    MemoryError::InvalidInput {
        field,
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(content: &str) -> NewMemory {
        NewMemory {
            content: content.into(),
            ..NewMemory::default()
        }
    }

    #[test]
    fn one_set_of_rules() {
        let ok = NewMemory {
            content: "  手机13812345678  ".into(),
            reasoning: Some(" ".into()),
            tags: Some(vec![
                "a".into(),
                " a ".into(),
                "".into(),
                "bob@example.com".into(),
            ]),
            memory_type: None,
        }
        .parse()
        .unwrap();
        assert_eq!(ok.content, "手机[REDACTED_PHONE]");
        assert_eq!(ok.reasoning, None);
        assert_eq!(ok.tags, vec!["a", "[REDACTED_EMAIL]"]);
        assert_eq!(ok.memory_type, "knowledge");

        let field = |m: NewMemory| match m.parse() {
            Err(MemoryError::InvalidInput { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(memory(" ")), "content");
        assert_eq!(field(memory(&"x".repeat(4001))), "content");
        let mut m = memory("x");
        m.reasoning = Some("r".repeat(4001));
        assert_eq!(field(m), "reasoning");
        let mut m = memory("x");
        m.tags = Some(vec!["t".into(); 33]);
        assert_eq!(field(m), "tags", "extra tags are refused, not dropped");
        let mut m = memory("x");
        m.tags = Some(vec!["t".repeat(65)]);
        assert_eq!(field(m), "tags");
        let mut m = memory("x");
        m.memory_type = Some("gossip".into());
        assert_eq!(field(m), "memory_type");
    }
}
