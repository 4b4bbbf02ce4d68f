//! What an operation answers: one typed [`Reply`] per [`super::Request`], serialised as the
//! body the API documents (docs/api.md). Whether the work was done or only accepted for later
//! is a property of the type ([`Reply::queued`]), so the HTTP layer picks 200 or 202 without
//! looking inside a JSON value for a `job_id` or an `accepted` field.

use serde::Serialize;

use crate::memory::consolidation::HostPass;
use crate::memory::feedback::JobOutcome;
use crate::memory::service::HostPassOutcome;
use crate::memory::working::MessageOutcome;
use crate::memory::{
    BrowseResponse, ForgetOutcome, Memory, PeopleList, RecallResponse, Remembered, Status, Updated,
};
use crate::scope::MapView;

/// One operation's answer.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Reply {
    Remembered(Stored),
    Recalled(Box<RecallResponse>),
    Status(Box<Status>),
    Browsed(BrowseResponse),
    Updated(Updated),
    ScopeMap(MapView),
    /// Feedback, or a reflection: queued for the worker (with its job), or not stored.
    Feedback(FeedbackQueued),
    FeedbackState(FeedbackState),
    Forgot(ForgetOutcome),
    Injection(Injection),
    Message(MessageReply),
    ConsolidationPass(NextPass),
    ConsolidationAnswered(HostPassOutcome),
    People(PeopleList),
}

impl Reply {
    /// Whether the work was accepted for later (HTTP 202) rather than done (200): a feedback
    /// job queued, a chat message journaled for embedding.
    pub(crate) fn queued(&self) -> bool {
        match self {
            Reply::Feedback(f) => f.job_id.is_some(),
            Reply::Message(m) => matches!(m, MessageReply::Accepted { .. }),
            _ => false,
        }
    }
}

/// `remember`: the row written (or the stored copy of the same fact, `deduplicated`), or
/// nothing for an incognito conversation.
#[derive(Debug, Serialize)]
pub struct Stored {
    pub stored: bool,
    pub memory: Option<Memory>,
    pub deduplicated: bool,
}

impl From<Option<Remembered>> for Stored {
    fn from(outcome: Option<Remembered>) -> Stored {
        match outcome {
            None => Stored {
                stored: false,
                memory: None,
                deduplicated: false,
            },
            Some(r) => Stored {
                stored: true,
                memory: Some(r.memory),
                deduplicated: r.deduplicated,
            },
        }
    }
}

/// `feedback` and `after_message_sent`: the job that will apply it, or none (incognito, or no
/// reflection).
#[derive(Debug, Serialize)]
pub struct FeedbackQueued {
    pub job_id: Option<String>,
    pub stored: bool,
}

impl FeedbackQueued {
    pub(crate) fn of(job_id: Option<String>) -> FeedbackQueued {
        FeedbackQueued {
            stored: job_id.is_some(),
            job_id,
        }
    }
}

/// `feedback_status`: a finished job's outcome, or `pending_or_unknown` with the id asked.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum FeedbackState {
    Finished {
        state: crate::memory::feedback::JobState,
        outcome: JobOutcome,
    },
    PendingOrUnknown {
        state: &'static str,
        job_id: String,
    },
}

impl FeedbackState {
    pub(crate) fn of(job_id: String, outcome: Option<JobOutcome>) -> FeedbackState {
        match outcome {
            Some(outcome) => FeedbackState::Finished {
                state: outcome.state,
                outcome,
            },
            None => FeedbackState::PendingOrUnknown {
                state: "pending_or_unknown",
                job_id,
            },
        }
    }
}

/// `on_llm_request`: the prompt block and what it holds.
#[derive(Debug, Serialize)]
pub struct Injection {
    pub injection: String,
    pub memory_ids: Vec<String>,
    pub recent_message_ids: Vec<String>,
    pub memory_scope: String,
    pub migration_mode: bool,
}

/// `on_message`: journaled for the working memory, or not stored and why.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum MessageReply {
    Accepted {
        accepted: bool,
        id: String,
        memory_scope: String,
    },
    NotStored {
        accepted: bool,
        reason: &'static str,
    },
}

impl From<MessageOutcome> for MessageReply {
    fn from(outcome: MessageOutcome) -> MessageReply {
        match outcome {
            MessageOutcome::Accepted { id, memory_scope } => MessageReply::Accepted {
                accepted: true,
                id,
                memory_scope,
            },
            MessageOutcome::NotStored(reason) => MessageReply::NotStored {
                accepted: false,
                reason,
            },
        }
    }
}

/// `consolidation_next`: a due conversation's pass for the host's LLM, or none.
#[derive(Debug, Serialize)]
pub struct NextPass {
    pub pass: Option<HostPass>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_work_is_told_apart_by_type() {
        assert!(Reply::Feedback(FeedbackQueued::of(Some("j1".into()))).queued());
        assert!(!Reply::Feedback(FeedbackQueued::of(None)).queued());
        let accepted = MessageOutcome::Accepted {
            id: "m".into(),
            memory_scope: "public".into(),
        };
        assert!(Reply::Message(accepted.into()).queued());
        assert!(!Reply::Message(MessageOutcome::NotStored("incognito").into()).queued());
        assert!(!Reply::ConsolidationPass(NextPass { pass: None }).queued());
    }

    #[test]
    fn replies_serialise_as_the_api_documents() {
        let v = serde_json::to_value(Reply::Feedback(FeedbackQueued::of(None))).unwrap();
        assert_eq!(v, serde_json::json!({"job_id": null, "stored": false}));
        let v = serde_json::to_value(Reply::Message(
            MessageOutcome::NotStored("incognito").into(),
        ))
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"accepted": false, "reason": "incognito"})
        );
        let v = serde_json::to_value(Reply::FeedbackState(FeedbackState::of("j9".into(), None)))
            .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"state": "pending_or_unknown", "job_id": "j9"})
        );
        let v = serde_json::to_value(Reply::Remembered(None.into())).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"stored": false, "memory": null, "deduplicated": false})
        );
    }
}
