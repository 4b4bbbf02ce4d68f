//! What the service was told, as one job type: a reflection's feedback, or one chat message.
//!
//! Both are journaled before they are acknowledged and applied in the order they came, by one
//! worker; what differs is how a job is applied (`feedback::apply` plans and folds, a message is
//! stored as it is) and whether its outcome is kept (`GET /v1/feedback/{job_id}` answers for
//! feedback; nobody asks after a chat line). The kind is the enum's, never read off the id.
//!
//! Its conversation id and scope stay the validated types; they are read back through the same
//! checks (every line was checked when it was accepted). On disk a job keeps the layout every release since working memory wrote
//! ([`JournaledJob`]: feedback fields and an optional `message`), so a journal written by an
//! older release replays unchanged, and an older release can still adopt this one's.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::memory::feedback::{FeedbackJob, MergeGroupJob, NewMemoryJob};
use crate::memory::working::{MessageAccepted, MessageJob};
use crate::scope::{ConversationId, ScopeName, ScopeSource};
use crate::store::MemoryRecord;

/// One accepted job.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(from = "JournaledJob", into = "JournaledJob")]
pub enum Job {
    /// Feedback from a reflection: reinforcements, new memories, merges.
    Reflection(FeedbackJob),
    /// One chat message for the working memory.
    Message(MessageTold),
}

/// A chat message as a job: where it was said, and the message as validated.
#[derive(Debug, Clone)]
pub struct MessageTold {
    pub job_id: String,
    pub conversation_id: ConversationId,
    pub scope: ScopeName,
    pub scope_source: ScopeSource,
    pub accepted_at: DateTime<Utc>,
    pub message: MessageJob,
}

impl MessageTold {
    /// The job of an accepted message.
    pub(crate) fn of(m: MessageAccepted) -> MessageTold {
        MessageTold {
            job_id: uuid::Uuid::now_v7().to_string(),
            conversation_id: m.conversation_id,
            scope: m.scope,
            scope_source: m.scope_source,
            accepted_at: Utc::now(),
            message: m.job,
        }
    }

    /// The row the message is stored as.
    pub(crate) fn record(&self) -> MemoryRecord {
        self.message.record(
            self.conversation_id.as_str(),
            self.scope.as_str(),
            self.scope_source.as_str(),
        )
    }
}

impl Job {
    pub(crate) fn job_id(&self) -> &str {
        match self {
            Job::Reflection(j) => &j.job_id,
            Job::Message(m) => &m.job_id,
        }
    }

    pub(crate) fn conversation_id(&self) -> &str {
        match self {
            Job::Reflection(j) => j.conversation_id.as_str(),
            Job::Message(m) => m.conversation_id.as_str(),
        }
    }

    pub(crate) fn scope(&self) -> &str {
        match self {
            Job::Reflection(j) => j.scope.as_str(),
            Job::Message(m) => m.scope.as_str(),
        }
    }

    pub(crate) fn accepted_at(&self) -> DateTime<Utc> {
        match self {
            Job::Reflection(j) => j.accepted_at,
            Job::Message(m) => m.accepted_at,
        }
    }

    /// Whether its outcome is kept for `GET /v1/feedback/{job_id}`: a message's is asked for
    /// by nobody, and keeping it would crowd the day of feedback outcomes with a chat's lines.
    pub(crate) fn keeps_outcome(&self) -> bool {
        matches!(self, Job::Reflection(_))
    }

    /// Texts its application embeds: its new memories and merged rows, or its message.
    pub(crate) fn texts(&self) -> usize {
        match self {
            Job::Reflection(j) => j.new_memories.len() + j.merge_groups.len(),
            Job::Message(_) => 1,
        }
    }

    /// The stored row id of its message, if it is one.
    /// Who said a message job's message (`None` for a reflection).
    pub(crate) fn speaker_id(&self) -> Option<&str> {
        match self {
            Job::Message(m) => Some(&m.message.speaker_id),
            Job::Reflection(_) => None,
        }
    }

    pub(crate) fn message_id(&self) -> Option<&str> {
        match self {
            Job::Message(m) => Some(&m.message.id),
            Job::Reflection(_) => None,
        }
    }
}

/// A job as journaled: the header, feedback's fields (empty for a message) and the message
/// (`null` for feedback).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct JournaledJob {
    job_id: String,
    conversation_id: ConversationId,
    scope: ScopeName,
    scope_source: ScopeSource,
    accepted_at: DateTime<Utc>,
    #[serde(default)]
    useful_memory_ids: Vec<String>,
    #[serde(default)]
    new_memories: Vec<NewMemoryJob>,
    #[serde(default)]
    merge_groups: Vec<MergeGroupJob>,
    #[serde(default)]
    message: Option<MessageJob>,
}

impl From<JournaledJob> for Job {
    fn from(j: JournaledJob) -> Job {
        match j.message {
            Some(message) => Job::Message(MessageTold {
                job_id: j.job_id,
                conversation_id: j.conversation_id,
                scope: j.scope,
                scope_source: j.scope_source,
                accepted_at: j.accepted_at,
                message,
            }),
            None => Job::Reflection(FeedbackJob {
                job_id: j.job_id,
                conversation_id: j.conversation_id,
                scope: j.scope,
                scope_source: j.scope_source,
                accepted_at: j.accepted_at,
                useful_memory_ids: j.useful_memory_ids,
                new_memories: j.new_memories,
                merge_groups: j.merge_groups,
            }),
        }
    }
}

impl From<Job> for JournaledJob {
    fn from(job: Job) -> JournaledJob {
        match job {
            Job::Reflection(j) => JournaledJob {
                job_id: j.job_id,
                conversation_id: j.conversation_id,
                scope: j.scope,
                scope_source: j.scope_source,
                accepted_at: j.accepted_at,
                useful_memory_ids: j.useful_memory_ids,
                new_memories: j.new_memories,
                merge_groups: j.merge_groups,
                message: None,
            },
            Job::Message(m) => JournaledJob {
                job_id: m.job_id,
                conversation_id: m.conversation_id,
                scope: m.scope,
                scope_source: m.scope_source,
                accepted_at: m.accepted_at,
                useful_memory_ids: vec![],
                new_memories: vec![],
                merge_groups: vec![],
                message: Some(m.message),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two kinds of line the release of 6301a3e journaled (tests/fixtures), read back as
    /// their kinds and written again byte for byte.
    #[test]
    fn a_journaled_line_of_either_kind_reads_as_its_kind_and_writes_back_the_same() {
        let fixture = include_str!("../../../tests/fixtures/journal-6301a3e.journal");
        let mut kinds = Vec::new();
        for line in fixture.lines() {
            let record: serde_json::Value = serde_json::from_str(line).unwrap();
            if record["op"] != "accepted" {
                continue;
            }
            let job: Job = serde_json::from_value(record["job"].clone()).unwrap();
            kinds.push(job.keeps_outcome());
            assert_eq!(serde_json::to_value(&job).unwrap(), record["job"]);
        }
        assert_eq!(kinds, vec![true, false, false]);
    }
}
