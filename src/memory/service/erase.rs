//! The one erase path, and how it reaches the other processes on the table.
//!
//! Every erase (forget by conversation, by ids or by scope, and the expiry sweep) runs
//! [`MemoryService::erase_where`]: with this process's feedback worker paused, it reads the ids
//! on the latest version, deletes them there and purges them from every data file and older
//! version, drops the unapplied jobs that would write them back, rewrites the journal without
//! them (and without finished jobs' text), and leaves an erase notice beside the table. Every
//! process applies the others' notices within `storage.read_consistency_ms`
//! ([`MemoryService::follow_erasures`]): the same drop and rewrite in its own journal, and a
//! second erase of the rows its jobs wrote while the first one ran.

use std::collections::HashSet;
use std::time::Duration;

use chrono::Utc;

use super::super::erase_notices::EraseNotice;
use super::super::model::ForgetOutcome;
use super::super::MemoryError;
use super::MemoryService;
use crate::memory::door::derived_id;
use crate::memory::person::PersonKey;
use crate::store::schema::MESSAGE_TYPE;
use crate::store::Selection;
use crate::store::StoreError;

/// Clock difference allowed between processes when deciding which rows a job wrote after
/// another process's erase began (processes sharing a bucket run on different machines).
const CLOCK_MARGIN: chrono::TimeDelta = chrono::TimeDelta::seconds(2);

/// The unapplied jobs an erase drops besides those whose merges read what it erased.
#[derive(Debug, Default)]
pub(crate) struct EraseJobs {
    /// Every job of this conversation (here and, through the notice, in every process).
    pub(crate) conversation: Option<String>,
    /// Every job of this scope (likewise).
    pub(crate) scope: Option<String>,
    /// The jobs of these messages, still waiting for their vectors in this process: a forget
    /// by id of a message not in the table yet.
    pub(crate) messages: HashSet<String>,
    /// A forget by id: the long-term memories it erases, and the messages they were made of,
    /// are recorded as forgotten first (`door::forgotten`), so no rule writes them again.
    pub(crate) forgets_facts: bool,
    /// Every message job of this person (here and, through the notice, in every process).
    pub(crate) person: Option<PersonKey>,
}

impl EraseJobs {
    pub(crate) fn of_conversation(c: String) -> EraseJobs {
        EraseJobs {
            conversation: Some(c),
            ..EraseJobs::default()
        }
    }

    pub(crate) fn of_scope(s: String) -> EraseJobs {
        EraseJobs {
            scope: Some(s),
            ..EraseJobs::default()
        }
    }

    pub(crate) fn of_person(person: PersonKey) -> EraseJobs {
        EraseJobs {
            person: Some(person),
            ..EraseJobs::default()
        }
    }

    pub(crate) fn of_messages(ids: HashSet<String>) -> EraseJobs {
        EraseJobs {
            messages: ids,
            ..EraseJobs::default()
        }
    }

    fn drops_message(&self, job: &crate::memory::intake::Job) -> bool {
        job.message_id()
            .is_some_and(|id| self.messages.contains(id))
    }
}

impl MemoryService {
    /// Erase the rows `predicate` selects and the unapplied jobs `jobs` names: those of a
    /// conversation or a scope in this process and (through the notice) in every other one,
    /// and this process's waiting messages.
    pub(super) async fn erase_where(
        &self,
        predicate: String,
        jobs: EraseJobs,
    ) -> Result<ForgetOutcome, MemoryError> {
        let began = Utc::now();
        let paused = self.feedback.erase_lock().hold().await;
        // `ids_where` reads the latest version, and the writer deletes on it.
        let erased_ids = self.store.ids_where(&predicate).await?;
        if jobs.forgets_facts {
            self.record_forgotten(&erased_ids).await?;
        }
        let report = self.store.writer().erase(predicate.clone()).await?;
        self.remove_orphans(erased_ids.iter().cloned().collect())
            .await?;
        let (conversation_id, scope) = (jobs.conversation.clone(), jobs.scope.clone());
        let mut notice = EraseNotice::new(began, predicate, conversation_id, scope, erased_ids);
        notice.person = jobs.person.clone();
        let mut erased: HashSet<&str> = notice.ids.iter().map(String::as_str).collect();
        erased.extend(jobs.messages.iter().map(String::as_str));
        self.working.forget_statements(&erased);
        // (The replies' recent lines, the foresight's and the queries embedded ahead of their
        // recalls know no row ids: all go, so none erased rides along.)
        self.working.last_said.forget_all();
        self.foresight.forget_all();
        self.queries.forget_all();
        let dropped = self.feedback.drop_pending(&paused, |job, plan| {
            notice.selects(job)
                || jobs.drops_message(job)
                || plan.is_some_and(|p| {
                    p.merges
                        .iter()
                        .any(|m| m.delete_ids.iter().any(|id| erased.contains(id.as_str())))
                })
        })?;
        drop(paused);
        let selects_jobs =
            notice.conversation_id.is_some() || notice.scope.is_some() || notice.person.is_some();
        if report.deleted > 0 || selects_jobs {
            // The rows are gone; without the notice another process's journal keeps its copy.
            self.erase_notices.publish(&notice).await.map_err(|e| {
                MemoryError::Internal(format!(
                    "the rows are erased, but the other processes could not be told (forget again to retry): {e}"
                ))
            })?;
        }
        self.tell_local_readers().await;
        Ok(ForgetOutcome {
            deleted: report.deleted,
            refused: Vec::new(),
            pending_feedback_dropped: dropped,
        })
    }

    /// Record the long-term memories among `ids` (read on the latest version) as forgotten, with
    /// the messages they were made of, before they are deleted: a failure leaves everything
    /// in place and the forget fails.
    async fn record_forgotten(&self, ids: &[String]) -> Result<(), MemoryError> {
        let rows = self.store.get_by_ids(ids, None).await?;
        let facts = rows.iter().filter(|r| r.memory_type != MESSAGE_TYPE);
        let mut fact_ids = Vec::new();
        let mut messages = Vec::new();
        for r in facts {
            let scope = r.memory_scope.as_deref().unwrap_or_default();
            fact_ids.extend(derived_id(scope, &r.content));
            messages.extend(r.source_ids.iter().cloned());
        }
        self.forgotten
            .record(fact_ids, messages)
            .await
            .map_err(|e| {
                MemoryError::Internal(format!(
                    "nothing erased: the forgotten facts could not be recorded: {e}"
                ))
            })
    }

    /// After an update replaced the row `id` and erased its old copy here: drop this process's
    /// unapplied merges that read the old text, and leave a notice so every other process does
    /// the same and rewrites its journal without finished jobs' text. The notice's predicate
    /// selects no row: the new row under the same id must not be erased again.
    pub(super) async fn tell_others_update_erased(
        &self,
        began: chrono::DateTime<Utc>,
        id: &str,
    ) -> Result<(), MemoryError> {
        let none = Selection::ids(Vec::<String>::new()).rows_sql();
        let notice = EraseNotice::new(began, none, None, None, vec![id.to_owned()]);
        let paused = self.feedback.erase_lock().hold().await;
        self.feedback.drop_pending(&paused, |_, plan| {
            plan.is_some_and(|p| {
                p.merges
                    .iter()
                    .any(|m| m.delete_ids.iter().any(|d| d == id))
            })
        })?;
        drop(paused);
        self.erase_notices.publish(&notice).await.map_err(|e| {
            MemoryError::Internal(format!(
                "the memory is updated, but the other processes could not be told to drop copies of its old text: {e}"
            ))
        })?;
        self.tell_local_readers().await;
        Ok(())
    }

    /// After an erase committed: bump the erase generation, so every other process on this
    /// machine catches up before its next read ([`Self::caught_up_with_erasures`]).
    async fn tell_local_readers(&self) {
        if let Err(e) = self.erase_generation.bump().await {
            tracing::warn!(error = %e, "could not bump the erase generation; other processes learn of this erase within storage.read_consistency_ms");
        }
    }

    /// Before a read (recall, browse, export, the tools, injection): when another process on
    /// this machine erased since this one last looked (`memory::erase_generation`), read the
    /// latest version of the table (the resident copy follows it) and apply the erase notices
    /// first. So no process serves a row whose forget has returned. One 8-byte read when
    /// nothing was erased.
    pub(crate) async fn caught_up_with_erasures(&self) -> Result<(), MemoryError> {
        if self.erase_generation.unseen().is_none() {
            return Ok(());
        }
        let _one = self.erase_generation.catching_up.lock().await;
        let Some(generation) = self.erase_generation.unseen() else {
            return Ok(());
        };
        self.store.refresh().await?;
        self.follow_erasures().await?;
        self.erase_generation.mark_seen(generation);
        Ok(())
    }

    /// Apply the erases other processes made since the last call: drop this process's
    /// unapplied jobs they select, rewrite the journal without them and without finished jobs'
    /// text, and erase again the rows this process's jobs wrote while such an erase ran (a job
    /// accepted before it began and applied after its delete). Returns the notices applied.
    pub(crate) async fn follow_erasures(&self) -> Result<usize, MemoryError> {
        let notices = self
            .erase_notices
            .unseen()
            .await
            .map_err(|e| MemoryError::Internal(e.to_string()))?;
        if notices.is_empty() {
            return Ok(0);
        }
        let paused = self.feedback.erase_lock().hold().await;
        let erased: HashSet<&str> = notices
            .iter()
            .flat_map(|(_, n)| n.ids.iter().map(String::as_str))
            .collect();
        self.working.forget_statements(&erased);
        // (The replies' recent lines, the foresight's and the queries embedded ahead of their
        // recalls know no row ids: all go, so none erased rides along.)
        self.working.last_said.forget_all();
        self.foresight.forget_all();
        self.queries.forget_all();
        let dropped = self.feedback.drop_pending(&paused, |job, plan| {
            notices.iter().any(|(_, n)| n.selects(job))
                || plan.is_some_and(|p| {
                    p.merges
                        .iter()
                        .any(|m| m.delete_ids.iter().any(|id| erased.contains(id.as_str())))
                })
        })?;
        // A compaction that failed against the erase after its own sweep left copies behind.
        self.remove_orphans(erased.iter().map(|id| id.to_string()).collect())
            .await?;
        let mut erased_again = 0;
        for (_, notice) in &notices {
            let written = self.feedback.written_across(notice.began, CLOCK_MARGIN);
            if written.is_empty() {
                continue;
            }
            let late =
                Selection::ids(written.iter().map(|id| id.to_string())).and_sql(&notice.predicate);
            // `ids_where` reads the latest version.
            let late_ids = self.store.ids_where(&late).await?;
            if !late_ids.is_empty() {
                erased_again += self.store.writer().erase(late).await?.deleted;
                self.remove_orphans(late_ids.into_iter().collect()).await?;
            }
        }
        drop(paused);
        for (name, _) in &notices {
            self.erase_notices.mark_seen(name);
        }
        tracing::info!(
            notices = notices.len(),
            pending_feedback_dropped = dropped,
            rows_erased_again = erased_again,
            "applied other processes' erases"
        );
        Ok(notices.len())
    }

    /// Remove unreferenced data files holding any of `erased` (see `store::orphans`).
    async fn remove_orphans(&self, erased: HashSet<String>) -> Result<(), MemoryError> {
        let report = self.store.remove_orphans_holding(&erased).await?;
        if report.removed > 0 {
            tracing::info!(
                unreferenced = report.unreferenced,
                removed = report.removed,
                "removed data files that failed commits left holding erased rows"
            );
        }
        Ok(())
    }
}

/// Apply other processes' erases every `every`, until the service or its writer is gone.
pub(super) async fn keep_following_erasures(
    memory: std::sync::Weak<MemoryService>,
    every: Duration,
) {
    loop {
        let Some(m) = memory.upgrade() else { return };
        match m.follow_erasures().await {
            Ok(_) => {}
            Err(MemoryError::Store(StoreError::WriterGone)) => return,
            Err(e) => {
                tracing::warn!(error = %e, "could not apply other processes' erases; retrying")
            }
        }
        drop(m);
        tokio::time::sleep(every).await;
    }
}
