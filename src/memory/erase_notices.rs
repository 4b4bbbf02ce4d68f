//! Erase notices: how an erase in one process reaches every other process on the table.
//!
//! The rows an erase deletes are gone for everyone at once: the table is shared. What is not
//! shared is each process's feedback journal. A job another process accepted may still be
//! waiting to write the erased conversation's text, its journal still holds the text of jobs it
//! has applied, and a job it applies while the erase runs can land just after the delete. So
//! each erase leaves a small notice beside the table (`<table>.erased.<micros>-<instance>.json`:
//! the SQL it deleted with, the conversation or scope it selected, the ids it deleted; never
//! memory text). Every process lists the notices every `storage.read_consistency_ms`. For each
//! new notice it drops the matching unapplied jobs, rewrites its journal without them and
//! without finished jobs' text, and erases again the rows its own jobs created after the erase
//! began, should they match. Notices are kept for a day, so a process that was down replays
//! them when it starts.

use std::collections::HashSet;
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::intake::Job;
use super::person::PersonKey;
use crate::store::beside::{Beside, BesideError};

/// How long a notice stays beside the table: as long as finished feedback outcomes stay, and
/// longer than any restart.
pub const NOTICE_RETENTION: chrono::TimeDelta = chrono::TimeDelta::hours(25);

/// Ids one notice lists at most; a wider erase (a whole scope, an expiry sweep) selects by its
/// predicate and conversation or scope instead.
const MAX_NOTICE_IDS: usize = 10_000;

/// What one erase selected, as the other processes need it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EraseNotice {
    /// When the erase started: rows another process created from this moment on may have
    /// landed after its delete.
    pub began: DateTime<Utc>,
    /// The SQL predicate the rows were deleted with.
    pub predicate: String,
    /// Set when the erase was every memory of one conversation (its feedback jobs go too).
    #[serde(default)]
    pub conversation_id: Option<String>,
    /// Set when the erase was a whole scope.
    #[serde(default)]
    pub scope: Option<String>,
    /// The ids it deleted (at most [`MAX_NOTICE_IDS`]): planned merges that read one are void.
    #[serde(default)]
    pub ids: Vec<String>,
    /// Set when the erase was a person's (their message jobs go too).
    #[serde(default)]
    pub person: Option<PersonKey>,
}

impl EraseNotice {
    pub(crate) fn new(
        began: DateTime<Utc>,
        predicate: String,
        conversation_id: Option<String>,
        scope: Option<String>,
        mut ids: Vec<String>,
    ) -> EraseNotice {
        ids.truncate(MAX_NOTICE_IDS);
        EraseNotice {
            began,
            predicate,
            conversation_id,
            scope,
            ids,
            person: None,
        }
    }

    /// Whether an unapplied feedback job would write what this erase removed: a job of the
    /// erased conversation or scope.
    pub(crate) fn selects(&self, job: &Job) -> bool {
        self.conversation_id.as_deref() == Some(job.conversation_id())
            || self.scope.as_deref() == Some(job.scope())
            || self.person.as_ref().is_some_and(|p| {
                job.speaker_id()
                    .is_some_and(|s| p.said(job.conversation_id(), s))
            })
    }
}

/// The notices of one table, as this process writes and reads them.
pub struct EraseNotices {
    beside: Beside,
    prefix: String,
    instance: String,
    /// Notices already handled (or written) by this process.
    seen: Mutex<HashSet<String>>,
}

impl EraseNotices {
    pub(crate) fn new(beside: Beside, table: &str, instance: &str) -> EraseNotices {
        EraseNotices {
            beside,
            prefix: format!("{table}.erased."),
            instance: instance.to_owned(),
            seen: Mutex::new(HashSet::new()),
        }
    }

    /// Leave `notice` beside the table for the other processes.
    pub(crate) async fn publish(&self, notice: &EraseNotice) -> Result<(), BesideError> {
        let name = format!(
            "{}{:020}-{}.json",
            self.prefix,
            notice.began.timestamp_micros().max(0),
            self.instance
        );
        let bytes = serde_json::to_vec(notice).map_err(|e| BesideError {
            at: String::new(),
            name: name.clone(),
            message: e.to_string(),
        })?;
        self.beside.write(&name, &bytes).await?;
        if let Ok(mut seen) = self.seen.lock() {
            seen.insert(name);
        }
        Ok(())
    }

    /// Notices this process has not handled yet, oldest first. Each is returned once; notices
    /// older than [`NOTICE_RETENTION`] are removed instead (by whichever process sees them).
    /// One that does not parse is skipped with a warning (once).
    pub(crate) async fn unseen(&self) -> Result<Vec<(String, EraseNotice)>, BesideError> {
        let names = self.beside.list(&self.prefix).await?;
        let fresh: Vec<String> = {
            let seen = self.seen.lock().map_err(|_| BesideError {
                at: String::new(),
                name: self.prefix.clone(),
                message: "erase notice bookkeeping poisoned".into(),
            })?;
            names.into_iter().filter(|n| !seen.contains(n)).collect()
        };
        let cutoff = Utc::now() - NOTICE_RETENTION;
        let mut notices = Vec::with_capacity(fresh.len());
        for name in fresh {
            let parsed = match self.beside.read(&name).await? {
                // Removed by another process since the listing.
                None => continue,
                Some((bytes, _)) => serde_json::from_slice::<EraseNotice>(&bytes),
            };
            match parsed {
                Ok(n) if n.began < cutoff => {
                    self.beside.remove(&name).await?;
                    self.mark_seen(&name);
                }
                Ok(n) => notices.push((name, n)),
                Err(e) => {
                    // Written whole or not at all, so it will not become readable: once.
                    tracing::warn!(notice = %name, error = %e, "unreadable erase notice; skipped");
                    self.mark_seen(&name);
                }
            }
        }
        Ok(notices)
    }

    /// Count `name` as handled.
    pub(crate) fn mark_seen(&self, name: &str) {
        if let Ok(mut seen) = self.seen.lock() {
            seen.insert(name.to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice(at: DateTime<Utc>, conversation: &str) -> EraseNotice {
        EraseNotice::new(
            at,
            crate::store::Selection::conversation(conversation).rows_sql(),
            Some(conversation.into()),
            None,
            vec!["m1".into()],
        )
    }

    #[tokio::test]
    async fn each_process_reads_the_others_notices_once_and_old_ones_go() {
        let dir = tempfile::tempdir().unwrap();
        let beside = Beside::Dir(dir.path().to_path_buf());
        let a = EraseNotices::new(beside.clone(), "memories", "a");
        let b = EraseNotices::new(beside.clone(), "memories", "b");
        let fresh = notice(Utc::now(), "c:1");
        a.publish(&fresh).await.unwrap();
        assert!(a.unseen().await.unwrap().is_empty(), "its own notice");
        let got = b.unseen().await.unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1, fresh);
        assert_eq!(
            b.unseen().await.unwrap().len(),
            1,
            "until it is marked seen"
        );
        b.mark_seen(&got[0].0);
        assert!(b.unseen().await.unwrap().is_empty());

        let old = notice(
            Utc::now() - NOTICE_RETENTION - chrono::TimeDelta::minutes(1),
            "c:2",
        );
        a.publish(&old).await.unwrap();
        std::fs::write(dir.path().join("memories.erased.x-z.json"), b"{torn").unwrap();
        assert!(
            b.unseen().await.unwrap().is_empty(),
            "old: removed; torn: skipped"
        );
        let left = beside.list("memories.erased.").await.unwrap();
        assert_eq!(left.len(), 2, "{left:?}");
        assert!(beside.list("other.").await.unwrap().is_empty());
    }
}
