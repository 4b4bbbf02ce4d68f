//! A chat message as the plugins send it (`POST /v1/events/message`), checked and made ready
//! for the journal: the scope derived once from the conversation id (never from the text or
//! the caller; an unmapped chat's own private scope, design rule 11), the text redacted before it is stored or embedded, and an id that makes a
//! resent platform message the same row.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::memory::redact::redact;
use crate::memory::MemoryError;
use crate::scope::{derive_chat_scope, ConversationId, ScopeName, ScopeResolver, ScopeSource};
use crate::store::MemoryRecord;

/// Longest message text kept (characters); a longer one is refused, not cut.
pub const MAX_TEXT_CHARS: usize = 4000;
/// Longest sender id, sender name and platform message id (characters).
pub const MAX_ID_CHARS: usize = 128;
pub const MAX_NAME_CHARS: usize = 64;
/// How far in the future `sent_at` may lie (clock skew between the host and this machine).
const FUTURE_SKEW_SECS: i64 = 300;

/// `POST /v1/events/message`. Unknown fields are refused: no caller sets a scope.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageEvent {
    pub conversation_id: String,
    pub sender_id: String,
    #[serde(default)]
    pub sender_name: Option<String>,
    pub text: String,
    /// The platform's id of the message: the same `(conversation_id, message_id)` is one row.
    #[serde(default)]
    pub message_id: Option<String>,
    /// RFC 3339; now when absent.
    #[serde(default)]
    pub sent_at: Option<String>,
    /// The bot's own reply.
    #[serde(default)]
    pub is_bot: Option<bool>,
    /// A member's message that addresses the bot (an @, a wake word, a private chat): a recall
    /// for it is about to come, so its texts are embedded now (`recall::prefetch`).
    #[serde(default)]
    pub to_bot: Option<bool>,
}

/// A validated message as journaled: everything its row needs, decided once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageJob {
    pub id: String,
    /// Redacted.
    pub content: String,
    pub speaker_id: String,
    pub speaker_name: Option<String>,
    pub sent_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub is_bot: bool,
    /// The message this short one answers (redacted), embedded with it (`replies`); absent in
    /// messages journaled before contextual passages, which are embedded alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<String>,
}

/// What `accept` made of a message: `None` scope for an incognito conversation.
#[derive(Debug, Clone)]
pub struct MessageAccepted {
    pub conversation_id: ConversationId,
    pub scope: ScopeName,
    pub scope_source: ScopeSource,
    pub job: MessageJob,
}

fn invalid(field: &'static str, message: impl Into<String>) -> MemoryError {
    MemoryError::InvalidInput {
        field,
        message: message.into(),
    }
}

fn bounded(field: &'static str, value: &str, max: usize) -> Result<String, MemoryError> {
    let value = value.trim();
    if value.chars().count() > max {
        return Err(invalid(field, format!("at most {max} characters")));
    }
    Ok(value.to_string())
}

/// Check `ev`, derive its scope from the conversation id with `scopes`' current map, redact its
/// text. `Ok(None)`: the conversation is incognito, nothing may be stored.
pub(crate) fn accept(
    ev: MessageEvent,
    scopes: &ScopeResolver,
    ttl: chrono::Duration,
    now: DateTime<Utc>,
) -> Result<Option<MessageAccepted>, MemoryError> {
    let conversation = ConversationId::parse(&ev.conversation_id)?;
    let speaker_id = bounded("sender_id", &ev.sender_id, MAX_ID_CHARS)?;
    if speaker_id.is_empty() {
        return Err(invalid("sender_id", "must not be empty"));
    }
    let speaker_name = bounded(
        "sender_name",
        ev.sender_name.as_deref().unwrap_or(""),
        MAX_NAME_CHARS,
    )?;
    let text = ev.text.trim();
    if text.is_empty() {
        return Err(invalid("text", "must not be empty"));
    }
    if text.chars().count() > MAX_TEXT_CHARS {
        return Err(invalid(
            "text",
            format!("at most {MAX_TEXT_CHARS} characters"),
        ));
    }
    let message_id = match ev.message_id.as_deref() {
        Some(m) => Some(bounded("message_id", m, MAX_ID_CHARS)?).filter(|m| !m.is_empty()),
        None => None,
    };
    let sent_at = match ev.sent_at.as_deref() {
        None => now,
        Some(raw) => DateTime::parse_from_rfc3339(raw)
            .map_err(|e| invalid("sent_at", format!("not RFC 3339: {e}")))?
            .with_timezone(&Utc),
    };
    if sent_at > now + chrono::Duration::seconds(FUTURE_SKEW_SECS) {
        return Err(invalid("sent_at", "lies in the future"));
    }
    let map = scopes.snapshot();
    let Some(scope) = derive_chat_scope(&map, &conversation) else {
        return Ok(None);
    };
    let id = message_row_id(conversation.as_str(), message_id.as_deref());
    Ok(Some(MessageAccepted {
        conversation_id: conversation,
        scope: scope.scope,
        scope_source: scope.source,
        job: MessageJob {
            id,
            content: redact(text),
            speaker_id,
            speaker_name: Some(speaker_name).filter(|n| !n.is_empty()),
            sent_at,
            expires_at: sent_at + ttl,
            is_bot: ev.is_bot.unwrap_or(false),
            answers: None,
        },
    }))
}

/// `msg-` and 32 hex digits: of the conversation and platform id when there is one (so a
/// message the host sends twice is one row), else random.
fn message_row_id(conversation: &str, message_id: Option<&str>) -> String {
    let digest = match message_id {
        Some(m) => Sha256::digest(format!("{conversation}\u{0}{m}").as_bytes()).to_vec(),
        None => uuid::Uuid::now_v7().as_bytes().to_vec(),
    };
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("msg-{hex}")
}

pub use crate::store::schema::{BOT_TAG, REPLY_TAG};

impl MessageJob {
    /// The row this message is stored as.
    pub(crate) fn record(
        &self,
        conversation_id: &str,
        scope: &str,
        scope_source: &str,
    ) -> MemoryRecord {
        MemoryRecord {
            id: self.id.clone(),
            content: self.content.clone(),
            reasoning: None,
            tags: [(self.is_bot, BOT_TAG), (self.answers.is_some(), REPLY_TAG)]
                .into_iter()
                .filter(|(on, _)| *on)
                .map(|(_, tag)| tag.to_string())
                .collect(),
            memory_type: super::MESSAGE_TYPE.to_string(),
            strength: 1,
            is_active: false,
            conversation_id: Some(conversation_id.to_string()),
            created_at: Some(self.sent_at),
            memory_scope: Some(scope.to_string()),
            scope_source: Some(scope_source.to_string()),
            expires_at: Some(self.expires_at),
            last_recalled_at: None,
            speaker_id: Some(self.speaker_id.clone()),
            speaker_name: self.speaker_name.clone(),
            source_ids: vec![],
            about_ids: vec![],
            source_conversations: vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::UnmappedPolicy;
    use crate::scope::ScopeMap;

    fn ev(text: &str) -> MessageEvent {
        MessageEvent {
            conversation_id: "default:GroupMessage:1".into(),
            sender_id: "u1".into(),
            sender_name: Some("张三".into()),
            text: text.into(),
            ..Default::default()
        }
    }

    fn resolver(map: serde_json::Value, incognito: &[&str]) -> ScopeResolver {
        let incognito: Vec<String> = incognito.iter().map(|s| s.to_string()).collect();
        ScopeResolver::new(ScopeMap::build(&map, UnmappedPolicy::Public).with_incognito(&incognito))
    }

    #[test]
    fn what_a_reply_answers_is_journaled_with_it_and_older_journal_lines_still_read() {
        let scopes = resolver(serde_json::json!({}), &[]);
        let ttl = chrono::Duration::hours(72);
        let mut job = accept(ev("订好了，在老地方"), &scopes, ttl, Utc::now())
            .unwrap()
            .unwrap()
            .job;
        let plain = serde_json::to_value(&job).unwrap();
        assert!(
            plain.get("answers").is_none(),
            "unchanged when alone: {plain}"
        );
        let old: MessageJob = serde_json::from_value(plain).unwrap();
        assert_eq!(old.answers, None);
        job.answers = Some("周日的家庭聚餐订在哪里了？".into());
        let line = serde_json::to_string(&job).unwrap();
        let back: MessageJob = serde_json::from_str(&line).unwrap();
        assert_eq!(back, job);
        let record = back.record("default:GroupMessage:1", "public", "unmapped");
        assert_eq!(
            record.content, "订好了，在老地方",
            "the row keeps its own words"
        );
        assert_eq!(record.tags, vec![REPLY_TAG.to_string()]);
    }

    #[test]
    fn the_scope_comes_from_the_conversation_and_the_text_is_redacted() {
        let scopes = resolver(serde_json::json!({"default:GroupMessage:1": "家人"}), &[]);
        let now = Utc::now();
        let ttl = chrono::Duration::hours(72);
        let a = accept(ev("我的手机号是13812345678，存到public"), &scopes, ttl, now)
            .unwrap()
            .unwrap();
        assert_eq!(a.scope.as_str(), "家人");
        assert!(!a.job.content.contains("13812345678"), "{}", a.job.content);
        assert_eq!(a.job.expires_at, now + ttl);
        assert_eq!(a.job.speaker_name.as_deref(), Some("张三"));
    }

    #[test]
    fn an_unmapped_chats_messages_stay_in_its_conversation_under_the_public_default() {
        let scopes = resolver(serde_json::json!({}), &[]);
        let now = Utc::now();
        let ttl = chrono::Duration::hours(72);
        let private = MessageEvent {
            conversation_id: "default:FriendMessage:42".into(),
            ..ev("我下个月要去医院做心脏手术，这件事别告诉群里的人")
        };
        let a = accept(private, &scopes, ttl, now).unwrap().unwrap();
        assert!(a.scope.as_str().starts_with("c_"), "{}", a.scope);
        assert_eq!(a.scope_source, ScopeSource::Unmapped);
        let group = accept(ev("明天公司要裁员"), &scopes, ttl, now)
            .unwrap()
            .unwrap();
        assert!(group.scope.as_str().starts_with("c_") && group.scope != a.scope);
    }

    #[test]
    fn incognito_stores_nothing_and_bad_input_names_its_field() {
        let scopes = resolver(serde_json::json!({}), &["default:GroupMessage:1"]);
        let ttl = chrono::Duration::hours(1);
        let now = Utc::now();
        assert!(accept(ev("hello"), &scopes, ttl, now).unwrap().is_none());
        let open = resolver(serde_json::json!({}), &[]);
        let field = |e: MessageEvent| match accept(e, &open, ttl, now) {
            Err(MemoryError::InvalidInput { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(ev("  ")), "text");
        assert_eq!(field(ev(&"x".repeat(MAX_TEXT_CHARS + 1))), "text");
        let mut no_sender = ev("hi");
        no_sender.sender_id = " ".into();
        assert_eq!(field(no_sender), "sender_id");
        let mut future = ev("hi");
        future.sent_at = Some((now + chrono::Duration::hours(1)).to_rfc3339());
        assert_eq!(field(future), "sent_at");
        let mut garbled = ev("hi");
        garbled.sent_at = Some("yesterday".into());
        assert_eq!(field(garbled), "sent_at");
    }

    #[test]
    fn a_platform_message_is_one_row_however_often_it_is_sent() {
        let a = message_row_id("c", Some("42"));
        assert_eq!(a, message_row_id("c", Some("42")));
        assert_ne!(a, message_row_id("d", Some("42")));
        assert_ne!(message_row_id("c", None), message_row_id("c", None));
        assert!(a.starts_with("msg-") && a.len() == 36);
    }
}
