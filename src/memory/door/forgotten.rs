//! Facts a forget by id erased, kept so that no rule lifts them again.
//!
//! Why: a forget of a consolidated fact by its id erases the fact and leaves the messages it
//! was made of (they expire after `working_memory.ttl_hours`). The restatement rule, the
//! threshold rule after a restart (its counts start over) and the LLM pass could lift the same
//! fact from them again, under the same derived id, and a member who forgot it would find it
//! back a day later. So an erase by id leaves a record beside the table
//! (`<table>.forgotten.<micros>-<instance>-<n>.json`): the derived ids of the long-term memories
//! it erased (sha256 of scope and folded text, as their rows were named: never the text) and the
//! ids of the messages they were made of. The door refuses a fact with such an id, or made of
//! such a message, from every rule and the pass ([`super::fact`]), in every process on the table
//! and after any restart. The bot remembering it again on purpose (the remember tool) is not a
//! rule and is not refused.
//!
//! One file per erase, never rewritten, so two processes forgetting at once never race (local
//! directory or bucket alike). A process reads each file once and lists the prefix before each
//! check: a fact written by a rule is rare, a listing cheap.

use std::collections::HashSet;
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::store::beside::{Beside, BesideError};

/// What one erase by id forgot.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
struct Record {
    at: DateTime<Utc>,
    /// Derived ids of the long-term memories erased (`door::derived_id`).
    #[serde(default)]
    facts: Vec<String>,
    /// Ids of the messages those memories were made of.
    #[serde(default)]
    messages: Vec<String>,
}

#[derive(Debug, Default)]
struct Known {
    files: HashSet<String>,
    facts: HashSet<String>,
    messages: HashSet<String>,
}

/// The forgotten facts of one table (see the module header).
pub(crate) struct Forgotten {
    beside: Beside,
    prefix: String,
    instance: String,
    known: Mutex<Known>,
}

impl Forgotten {
    pub(crate) fn new(beside: Beside, table: &str, instance: &str) -> Forgotten {
        Forgotten {
            beside,
            prefix: format!("{table}.forgotten."),
            instance: instance.to_string(),
            known: Mutex::new(Known::default()),
        }
    }

    /// Record `facts` (derived ids) and `messages` (ids) as forgotten, durably, before the
    /// erase that forgets them deletes anything. Nothing to record is no write.
    pub(crate) async fn record(
        &self,
        facts: Vec<String>,
        messages: Vec<String>,
    ) -> Result<(), BesideError> {
        if facts.is_empty() && messages.is_empty() {
            return Ok(());
        }
        let at = Utc::now();
        let name = format!(
            "{}{:020}-{}-{}.json",
            self.prefix,
            at.timestamp_micros(),
            self.instance,
            uuid::Uuid::now_v7().simple()
        );
        let record = Record {
            at,
            facts,
            messages,
        };
        let bytes = serde_json::to_vec(&record).unwrap_or_default();
        self.beside.write(&name, &bytes).await?;
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known.facts.extend(record.facts);
        known.messages.extend(record.messages);
        known.files.insert(name);
        Ok(())
    }

    /// Whether the fact `fact_id` (its derived id), or one of the messages `sources`, was
    /// forgotten, by this process or any other on the table.
    pub(crate) async fn holds(
        &self,
        fact_id: Option<&str>,
        sources: &[String],
    ) -> Result<bool, BesideError> {
        self.catch_up().await?;
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        Ok(fact_id.is_some_and(|id| known.facts.contains(id))
            || sources.iter().any(|s| known.messages.contains(s)))
    }

    /// Read the records written since the last look. A record that cannot be read (half a
    /// file from a crashed write) is skipped and looked at again next time.
    async fn catch_up(&self) -> Result<(), BesideError> {
        let names = self.beside.list(&self.prefix).await?;
        let new: Vec<String> = {
            let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
            names
                .into_iter()
                .filter(|n| n.ends_with(".json") && !known.files.contains(n))
                .collect()
        };
        for name in new {
            let Some((bytes, _)) = self.beside.read(&name).await? else {
                continue;
            };
            let Ok(record) = serde_json::from_slice::<Record>(&bytes) else {
                tracing::warn!(file = %name, "a forgotten-facts record could not be read; skipped for now");
                continue;
            };
            let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
            known.facts.extend(record.facts);
            known.messages.extend(record.messages);
            known.files.insert(name);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn what_one_process_forgot_every_other_and_a_restart_knows() {
        let dir = tempfile::tempdir().unwrap();
        let beside = Beside::Dir(dir.path().to_path_buf());
        let a = Forgotten::new(beside.clone(), "memories", "a");
        let b = Forgotten::new(beside.clone(), "memories", "b");
        assert!(!b.holds(Some("f1"), &[]).await.unwrap());
        a.record(vec!["f1".into()], vec!["m1".into(), "m2".into()])
            .await
            .unwrap();
        a.record(vec![], vec![]).await.unwrap();
        assert_eq!(beside.list("memories.forgotten.").await.unwrap().len(), 1);
        assert!(b.holds(Some("f1"), &[]).await.unwrap());
        assert!(b.holds(None, &["x".into(), "m2".into()]).await.unwrap());
        assert!(!b.holds(Some("f2"), &["m3".into()]).await.unwrap());
        let restarted = Forgotten::new(beside, "memories", "a");
        assert!(restarted.holds(Some("f1"), &[]).await.unwrap());
    }
}
