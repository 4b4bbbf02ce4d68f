//! Passes the host's own LLM answers (design 5.13): a plugin whose framework already has a
//! configured model (AstrBot's provider, streaming or not) takes a due conversation's pass
//! (`POST /v1/consolidation/next`: the system prompt and the data), asks its model, and hands
//! the answer back (`POST /v1/consolidation/answer`). scopemem keeps what it showed under the
//! pass id, so the answer is checked against exactly that, as the server's own LLM's answer
//! is (`decisions::parse`): the host relays text and chooses nothing.
//!
//! A pass not answered within [`ANSWER_WITHIN`] is given up (counted as failed) and its
//! messages are read again by the conversation's next pass.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::decisions::Shown;

/// How long a host has to answer a pass it took.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(10 * 60);
/// Passes handed out and not answered, at most (a host that takes and never answers cannot
/// grow the map).
const MAX_ISSUED: usize = 256;

/// One conversation's pass, prepared: what the model is shown, and what applying its answer
/// needs.
#[derive(Debug, Clone)]
pub struct PreparedPass {
    pub conversation_id: String,
    /// The scope the messages were stored in.
    pub said_in: Option<String>,
    pub shown: Shown,
    /// The newest message shown: the next pass reads after it.
    pub newest: DateTime<Utc>,
}

/// What a host is handed: ask the model with `system` and `prompt`, answer under `pass_id`.
#[derive(Debug, Clone, Serialize)]
pub struct HostPass {
    pub pass_id: String,
    pub conversation_id: String,
    pub system: &'static str,
    pub prompt: String,
    /// Answer within this many seconds, or the pass is given up.
    pub answer_within_secs: u64,
}

/// `POST /v1/consolidation/answer`: the model's text, or why there is none.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostAnswer {
    pub pass_id: String,
    /// The model's answer, as it came (a code fence or a sentence around the JSON is fine).
    #[serde(default)]
    pub answer: Option<String>,
    /// Set instead of `answer` when the host's model failed: the pass is given up.
    #[serde(default)]
    pub error: Option<String>,
    /// The tokens the host's provider reports the call spent (`budget::Usage`); estimated from
    /// the prompt and the answer when absent.
    #[serde(default)]
    pub usage: Option<super::budget::Usage>,
}

/// Passes handed to a host and not answered yet, by pass id.
#[derive(Debug, Default)]
pub struct HostPasses {
    issued: Mutex<HashMap<String, (Instant, PreparedPass)>>,
}

impl HostPasses {
    /// Keep `pass` for its answer; returns the id the host answers under, or gives the pass
    /// back when too many are waiting.
    pub(crate) fn issue(&self, pass: PreparedPass) -> Result<String, PreparedPass> {
        let Ok(mut issued) = self.issued.lock() else {
            return Err(pass);
        };
        if issued.len() >= MAX_ISSUED {
            return Err(pass);
        }
        let id = format!("pass-{}", uuid::Uuid::new_v4().simple());
        issued.insert(id.clone(), (Instant::now(), pass));
        Ok(id)
    }

    /// The pass `id`, taken (an answer is applied once); `None` when unknown or given up.
    pub(crate) fn take(&self, id: &str) -> Option<PreparedPass> {
        let mut issued = self.issued.lock().ok()?;
        match issued.remove(id) {
            Some((at, pass)) if at.elapsed() < ANSWER_WITHIN => Some(pass),
            Some((at, pass)) => {
                issued.insert(id.to_string(), (at, pass));
                None
            }
            None => None,
        }
    }

    /// The passes not answered within `within`, removed.
    pub(crate) fn expired(&self, within: Duration) -> Vec<PreparedPass> {
        let Ok(mut issued) = self.issued.lock() else {
            return Vec::new();
        };
        let old: Vec<String> = issued
            .iter()
            .filter(|(_, (at, _))| at.elapsed() >= within)
            .map(|(id, _)| id.clone())
            .collect();
        old.iter()
            .filter_map(|id| issued.remove(id).map(|(_, p)| p))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(conversation: &str) -> PreparedPass {
        PreparedPass {
            conversation_id: conversation.into(),
            said_in: Some("家人".into()),
            shown: Shown::default(),
            newest: Utc::now(),
        }
    }

    #[test]
    fn a_pass_is_answered_once_and_an_old_one_is_given_up() {
        let passes = HostPasses::default();
        let id = passes.issue(pass("a:1")).unwrap();
        assert_eq!(passes.take(&id).unwrap().conversation_id, "a:1");
        assert!(passes.take(&id).is_none(), "answered once");
        assert!(passes.take("pass-unknown").is_none());
        let late = passes.issue(pass("b:1")).unwrap();
        assert!(passes.expired(Duration::from_secs(3600)).is_empty());
        let gone = passes.expired(Duration::ZERO);
        assert_eq!(gone.len(), 1);
        assert!(passes.take(&late).is_none());
    }

    #[test]
    fn a_host_that_never_answers_cannot_grow_the_map() {
        let passes = HostPasses::default();
        for _ in 0..MAX_ISSUED {
            passes.issue(pass("a:1")).unwrap();
        }
        assert!(passes.issue(pass("a:1")).is_err());
    }
}
