//! The consolidation pass answered by the host's own LLM (design 5.13,
//! `consolidation::host_passes`): a plugin takes a due conversation's pass, asks the model its
//! framework is configured with, and hands back the text. Everything but the model call is the
//! server's own pass: which conversations are due, what is shown, how the answer is checked
//! and applied (as the conversation, so scope, redaction and dedup hold), what is counted.

use serde::Serialize;

use super::{MemoryService, PassOutcome};
use crate::memory::consolidation::host_passes::ANSWER_WITHIN;
use crate::memory::consolidation::{decisions, Counters, HostAnswer, HostPass};
use crate::memory::MemoryError;

/// Due conversations looked at per request (those whose messages are still being written
/// are skipped).
const MAX_EMPTY: usize = 16;

/// What became of a host's answer.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct HostPassOutcome {
    /// Whether the answer's decisions were applied.
    pub applied: bool,
    /// Why not: `"malformed"` (not the decisions JSON) or `"failed"` (the host's model failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    #[serde(flatten)]
    pub outcome: PassOutcome,
}

impl HostPassOutcome {
    fn not_applied(reason: &'static str) -> HostPassOutcome {
        HostPassOutcome {
            applied: false,
            reason: Some(reason),
            outcome: PassOutcome::default(),
        }
    }
}

impl MemoryService {
    /// The next due conversation's pass for the host's LLM, or `None` when none is due.
    pub(crate) async fn next_host_pass(&self) -> Result<Option<HostPass>, MemoryError> {
        let c = &self.consolidator;
        for gone in c.host.expired(ANSWER_WITHIN) {
            Counters::bump(&c.counters.failed, 1);
            tracing::warn!(
                conversation_id = %gone.conversation_id,
                "a consolidation pass handed to the host was never answered; its messages are read again"
            );
            c.triggers.finished(&gone.conversation_id, 0, None);
        }
        if !c.budget.open() {
            return Ok(None); // the day's tokens are spent: passes wait for tomorrow
        }
        let every = c.settings.every_messages.max(1);
        let admitted = self.admitted_to_passes();
        let mut later = Vec::new();
        let mut found = None;
        for _ in 0..MAX_EMPTY {
            let Some((conversation, since)) =
                c.triggers.due(every, c.settings.quiet, 1, &admitted).pop()
            else {
                break;
            };
            if self.feedback.pending().holds_conversation(&conversation) {
                later.push(conversation);
                continue;
            }
            found = Some((conversation, since));
            break;
        }
        for conversation in &later {
            c.triggers.later(conversation);
        }
        let Some((conversation, since)) = found else {
            return Ok(None);
        };
        self.hand_out_pass(conversation, since).await
    }

    /// Prepare `conversation`'s pass and keep it for the host's answer.
    async fn hand_out_pass(
        &self,
        conversation: String,
        since: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<Option<HostPass>, MemoryError> {
        let c = &self.consolidator;
        let pass = match self.prepare_pass(&conversation, since).await {
            Ok(Some(pass)) => pass,
            Ok(None) => {
                c.triggers.nothing_to_read(&conversation);
                return Ok(None);
            }
            Err(e) => {
                c.triggers.finished(&conversation, 0, None);
                return Err(e);
            }
        };
        let prompt = pass.shown.prompt();
        match c.host.issue(pass) {
            Ok(pass_id) => {
                Counters::bump(&c.counters.passes, 1);
                Ok(Some(HostPass {
                    pass_id,
                    conversation_id: conversation,
                    system: decisions::SYSTEM,
                    prompt,
                    answer_within_secs: ANSWER_WITHIN.as_secs(),
                }))
            }
            Err(_) => {
                c.triggers.finished(&conversation, 0, None);
                Ok(None)
            }
        }
    }

    /// Apply the host model's answer to the pass it was handed.
    pub(crate) async fn answer_host_pass(
        &self,
        answer: HostAnswer,
    ) -> Result<HostPassOutcome, MemoryError> {
        let c = &self.consolidator;
        let text = match (answer.answer, answer.error.is_some()) {
            (Some(text), false) => Some(text),
            (None, true) => None,
            _ => {
                return Err(MemoryError::InvalidInput {
                    field: "answer",
                    message: "give exactly one of answer (the model's text) and error".into(),
                })
            }
        };
        let Some(pass) = c.host.take(&answer.pass_id) else {
            return Err(MemoryError::InvalidInput {
                field: "pass_id",
                message: format!(
                    "no pass waits under this id (answered already, or given up after {} s)",
                    ANSWER_WITHIN.as_secs()
                ),
            });
        };
        let conversation = pass.conversation_id.clone();
        let prompt = pass.shown.prompt();
        c.budget.spend(
            &conversation,
            super::consolidation::pass_tokens(&prompt, text.as_deref().unwrap_or(""), answer.usage),
        );
        let Some(text) = text else {
            Counters::bump(&c.counters.failed, 1);
            c.triggers.finished(&conversation, 0, None);
            return Ok(HostPassOutcome::not_applied("failed"));
        };
        let newest = pass.newest;
        match self.apply_answer(pass, &text).await {
            Ok(Some(outcome)) => {
                c.triggers
                    .finished(&conversation, outcome.messages, Some(newest));
                Ok(HostPassOutcome {
                    applied: true,
                    reason: None,
                    outcome,
                })
            }
            Ok(None) => {
                c.triggers.finished(&conversation, 0, None);
                Ok(HostPassOutcome::not_applied("malformed"))
            }
            Err(e) => {
                c.triggers.finished(&conversation, 0, None);
                Err(e)
            }
        }
    }
}
