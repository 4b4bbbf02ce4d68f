//! Batches: the jobs waiting in the queue applied together, so N jobs cost one lookup, one
//! embedding call, one insert, one strength update and two journal fsyncs instead of N of each.
//!
//! Jobs are planned in acceptance order against the rows as the earlier jobs of the batch leave
//! them, so the net effect is the one applying them one by one would have had. Every plan is
//! journaled before anything is written: after a crash each job replays alone from its plan,
//! and replays are idempotent (insert-if-missing by id, compare-and-set strengths, a merge
//! whose merged row exists only deletes). A new memory whose fact the scope already holds
//! reinforces that memory instead (`door::repetition`), in the batch as in a job applied
//! alone. A batch whose writes fail is not replayed: each of its jobs is planned again and
//! applied alone.
//!
//! Merges join a batch too, with one bound ([`conflicts`]): no row a merge of the batch
//! deletes may be one a job of the batch creates. Replayed alone after a crash, that job would
//! insert its row again (insert-if-missing cannot tell "deleted" from "never written"), and the
//! merged-away row would come back. The first job that would break the bound ends the batch;
//! it and the jobs behind it make the next one.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::Utc;
use tokio::sync::Notify;

use super::journal::{PendingJob, Record};
use super::shared::Shared;
use super::worker::{finish, run_job, Run};
use super::*;
use crate::memory::door::{self, derived_id, Admitted};
use crate::memory::feedback::{
    ids_read, merged_record, new_memory_record, plan_from, set_strengths,
};
use crate::memory::model::Remembered;
use crate::memory::working::StoredMessage;
use crate::store::{MemoryRecord, Selection, StrengthChange};

/// Most jobs in one batch.
pub(super) const MAX_JOBS: usize = 64;
/// Most new memories (texts to embed) in one batch.
pub(super) const MAX_NEW: usize = 256;
/// Journal size past which a batch compacts it (finished jobs' text leaves the file).
const JOURNAL_COMPACT_BYTES: u64 = 32 << 20;

/// Apply the jobs as one batch, or as many of them from the first as [`conflicts`] allows;
/// returns the jobs left for the next batch. If any step fails, nothing is lost: the batch's
/// jobs are applied one by one from their journaled plans, each with its own retries and
/// dead-lettering.
pub(super) async fn run_batch(shared: &Shared, jobs: Vec<Job>, stop: &Notify) -> (Run, Vec<Job>) {
    let applying = shared.apply.hold().await;
    let mut jobs = skip_dropped(shared, jobs);
    if jobs.is_empty() {
        return (Run::Next, jobs);
    }
    let started = std::time::Instant::now();
    let result = apply_batch(shared, &jobs).await;
    let taken = match &result {
        Ok(outcomes) => outcomes.len(),
        Err(e) => e.plans.len(),
    };
    let rest = jobs.split_off(taken.min(jobs.len()));
    let error = match result {
        Ok(outcomes) => {
            shared
                .batches
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::debug!(
                jobs = outcomes.len(),
                ms = started.elapsed().as_millis() as u64,
                "feedback batch applied"
            );
            for (job, outcome) in jobs.iter().zip(outcomes) {
                for (what, why) in &outcome.refused {
                    tracing::warn!(job_id = %outcome.job_id, target = %what, reason = %why, "feedback refused a memory it cannot touch");
                }
                shared.record_written(job, &outcome);
                finish(shared, job, outcome);
            }
            if let Err(e) = shared
                .files
                .journal
                .compact_when_over(JOURNAL_COMPACT_BYTES)
            {
                tracing::warn!(error = %e, "could not compact the feedback journal");
            }
            return (Run::Next, rest);
        }
        Err(e) => e,
    };
    tracing::warn!(jobs = jobs.len(), error = %error.error, "feedback batch failed; applying its jobs one at a time");
    // The batch was every job's first attempt: it counts towards each one's dead-lettering (a
    // job still gets one attempt of its own, so a failure of its neighbour never kills it).
    // A job to be planned again is marked so in the journal too: after a crash its batch plan
    // (which assumed the earlier jobs applied) must not be what replays.
    let message = error.error.to_string();
    let mut records: Vec<Record> = Vec::with_capacity(jobs.len() * 2);
    for (job, plan) in jobs.iter().zip(&error.plans) {
        if plan.is_none() {
            records.push(Record::Unplanned {
                job_id: job.job_id().to_string(),
            });
        }
        records.push(Record::Attempt {
            job_id: job.job_id().to_string(),
            attempts: 1,
            error: message.clone(),
        });
    }
    if let Err(e) = shared.files.journal.append_all(&records) {
        tracing::error!(error = %e, "could not journal a failed batch attempt");
    }
    shared
        .retries
        .fetch_add(jobs.len() as u64, std::sync::atomic::Ordering::Relaxed);
    drop(applying);
    for (job, plan) in jobs.into_iter().zip(error.plans) {
        let pending = PendingJob {
            job,
            plan,
            attempts: 1,
        };
        if run_job(shared, pending, stop).await == Run::Stopped {
            return (Run::Stopped, rest);
        }
    }
    (Run::Next, rest)
}

/// A failed batch: the error, and each of its jobs' plan if the batch's writes were all done
/// (the one-by-one replay of those changes nothing); `None` plans the job again. One entry per
/// job of the batch: the jobs after the last are the next batch's.
struct BatchError {
    error: MemoryError,
    plans: Vec<Option<FeedbackPlan>>,
}

/// Finish the jobs an erase dropped while they waited; return the others.
fn skip_dropped(shared: &Shared, jobs: Vec<Job>) -> Vec<Job> {
    let Ok(mut dropped) = shared.dropped.lock() else {
        return jobs;
    };
    let mut kept = Vec::with_capacity(jobs.len());
    for job in jobs {
        if dropped.remove(job.job_id()) {
            let why = "dropped: the memories it would touch were erased first".to_string();
            let outcome =
                JobOutcome::unapplied(job.job_id().to_string(), JobState::Dropped, why, 0);
            finish(shared, &job, outcome);
        } else {
            kept.push(job);
        }
    }
    kept
}

async fn apply_batch(shared: &Shared, jobs: &[Job]) -> Result<Vec<JobOutcome>, BatchError> {
    let rows = rows_read(shared, jobs).await.map_err(|error| BatchError {
        error,
        plans: vec![None; jobs.len()],
    })?;
    let net = plan_batch(jobs, rows, shared.writes.gate.is_on());
    // The jobs this batch planned; the others wait for the next.
    let jobs = &jobs[..net.plans.len()];
    let unplanned = |error: MemoryError| BatchError {
        error,
        plans: vec![None; jobs.len()],
    };
    let planned: Vec<Record> = jobs
        .iter()
        .zip(&net.plans)
        .map(|(job, plan)| Record::Planned {
            job_id: job.job_id().to_string(),
            plan: plan.clone(),
        })
        .collect();
    shared
        .files
        .journal
        .append_all(&planned)
        .map_err(|e| unplanned(MemoryError::Internal(e.to_string())))?;
    // Later plans assume the earlier jobs applied: if the writes fail, every job is planned
    // again on its own (its new rows are inserted only if missing; the strengths are one
    // commit, so none of them was written).
    let written = write_net(shared, &net).await.map_err(unplanned)?;
    let outcomes = outcomes_of(jobs, &net, written);
    let finished: Vec<Record> = outcomes
        .iter()
        .map(|o| Record::Finished { outcome: o.clone() })
        .collect();
    // The writes are done: a failure here replays the jobs one by one, which changes nothing.
    shared
        .files
        .journal
        .append_all(&finished)
        .map_err(|e| BatchError {
            error: MemoryError::Internal(e.to_string()),
            plans: net.plans.iter().cloned().map(Some).collect(),
        })?;
    Ok(outcomes)
}

/// The rows the batch's plans read: the memories its reflections name (reinforced, merged or
/// new, for deduplication) and its messages (already stored, after a crash), fresh from the
/// store.
async fn rows_read(shared: &Shared, jobs: &[Job]) -> Result<Vec<MemoryRecord>, MemoryError> {
    let mut wanted: BTreeSet<String> = BTreeSet::new();
    for job in jobs {
        match job {
            Job::Reflection(job) => {
                wanted.extend(ids_read(job));
                wanted.extend(job.new_memories.iter().map(|m| m.id.clone()));
            }
            Job::Message(told) => {
                wanted.insert(told.message.id.clone());
            }
        }
    }
    let store = &shared.writes.store;
    store.refresh().await?;
    let wanted: Vec<String> = wanted.into_iter().collect();
    Ok(store.get_by_ids(&wanted, None).await?)
}

/// What each job of an applied batch did: the rows it created, deduplicated into another,
/// merged and reinforced, and what it refused.
fn outcomes_of(jobs: &[Job], net: &NetEffect, written: Vec<Remembered>) -> Vec<JobOutcome> {
    let mut created = vec![Vec::new(); jobs.len()];
    let mut deduplicated = vec![Vec::new(); jobs.len()];
    let mut merged = vec![Vec::new(); jobs.len()];
    for (job, admitted) in net.merge_jobs.iter().zip(&net.merged) {
        merged[*job].push(admitted.record().id.clone());
    }
    for (job, record) in net.message_jobs.iter().zip(&net.messages) {
        created[*job].push(record.record().id.clone());
    }
    for (job, memory) in net.insert_jobs.iter().zip(written) {
        match memory.deduplicated {
            true => deduplicated[*job].push(memory.memory.id),
            false => created[*job].push(memory.memory.id),
        }
    }
    jobs.iter()
        .zip(&net.plans)
        .zip(&net.reinforced)
        .zip(created.into_iter().zip(deduplicated).zip(merged))
        .map(
            |(((job, plan), reinforced), ((created, deduplicated), merged))| JobOutcome {
                job_id: job.job_id().to_string(),
                state: JobState::Done,
                reinforced: *reinforced,
                created,
                deduplicated,
                merged,
                refused: plan.refused.clone(),
                error: None,
                attempts: 1,
                finished_at: Utc::now(),
            },
        )
        .collect()
}

/// What a batch writes, net of all its jobs, and what each job did.
#[derive(Debug, Default)]
struct NetEffect {
    plans: Vec<FeedbackPlan>,
    /// Rows each job reinforced.
    reinforced: Vec<usize>,
    /// New rows, with the strength they are inserted with (under the id assigned at
    /// acceptance; `write_net` writes each under its fact's id).
    inserts: Vec<Admitted>,
    /// The job (index in the batch) each insert comes from.
    insert_jobs: Vec<usize>,
    /// Final strength per row, compare-and-set against the strength it has in the table.
    strengths: Vec<StrengthChange>,
    /// Working-memory messages to insert, the job each comes from, and the passage each is
    /// embedded as (`working::replies`: one that follows a question, with the question).
    messages: Vec<Admitted>,
    message_jobs: Vec<usize>,
    message_passages: Vec<String>,
    /// The rows merges make, and the job each comes from.
    merged: Vec<Admitted>,
    merge_jobs: Vec<usize>,
    /// The rows merges replace, deleted last.
    deletes: Vec<String>,
}

/// Plan the jobs in order against `rows` as the earlier jobs leave them, up to the first that
/// [`conflicts`] with the ones before it (never the first: a job alone is planned as it would
/// be outside a batch), and sum up the writes: new memories inserted once, each row's strength
/// set once to its final value, merged rows inserted and their members deleted. `plans` holds
/// one plan per job planned.
fn plan_batch(jobs: &[Job], rows: Vec<MemoryRecord>, null_visible: bool) -> NetEffect {
    let mut state: HashMap<String, MemoryRecord> =
        rows.into_iter().map(|r| (r.id.clone(), r)).collect();
    // The strength each changed row has in the table (or is inserted with).
    let mut before: BTreeMap<String, i32> = BTreeMap::new();
    let mut net = NetEffect::default();
    let mut created: BTreeSet<String> = BTreeSet::new();
    for (index, job) in jobs.iter().enumerate() {
        let job = match job {
            Job::Reflection(job) => job,
            Job::Message(told) => {
                let id = told.message.id.clone();
                if index > 0 && net.deletes.contains(&id) {
                    break;
                }
                created.insert(id);
                plan_message(told, index, &mut state, &mut net);
                continue;
            }
        };
        let plan = plan_from(job, &state, null_visible);
        let creates = created_ids(job);
        if index > 0 && conflicts(&plan, &creates, &created, &net.deletes) {
            break;
        }
        created.extend(creates);
        for m in &plan.merges {
            let Ok(admitted) = merged_record(job, m) else {
                // Planned by an older release into another scope than the job's: its members
                // stay as they are.
                tracing::warn!("a merge planned into a scope its job may not write was skipped");
                continue;
            };
            for id in &m.delete_ids {
                state.remove(id);
            }
            state.insert(admitted.record().id.clone(), admitted.record().clone());
            net.merged.push(admitted);
            net.merge_jobs.push(index);
            net.deletes.extend(m.delete_ids.iter().cloned());
        }
        for m in &plan.new_memories {
            if !state.contains_key(&m.id) {
                let admitted = new_memory_record(job, m);
                state.insert(m.id.clone(), admitted.record().clone());
                net.inserts.push(admitted);
                net.insert_jobs.push(index);
            }
        }
        let mut reinforced = 0;
        for (id, new) in &plan.reinforce {
            let Some(row) = state.get_mut(id) else {
                continue;
            };
            if plan
                .expected_strength
                .get(id)
                .is_some_and(|e| *e != row.strength)
            {
                continue;
            }
            before.entry(id.clone()).or_insert(row.strength);
            row.strength = *new;
            reinforced += 1;
        }
        net.reinforced.push(reinforced);
        net.plans.push(plan);
    }
    net.strengths = before
        .into_iter()
        .filter_map(|(id, expected)| {
            let new = state.get(&id)?.strength;
            Some(StrengthChange {
                id,
                expected: Some(expected),
                new,
            })
        })
        .collect();
    net
}

/// The ids a job's new memories may be written under: the one assigned at acceptance and
/// the fact's own (`door::repetition`).
fn created_ids(job: &crate::memory::feedback::FeedbackJob) -> Vec<String> {
    job.new_memories
        .iter()
        .flat_map(|m| {
            [
                Some(m.id.clone()),
                derived_id(job.scope.as_str(), &m.content),
            ]
        })
        .flatten()
        .collect()
}

/// Whether a job's plan may not join the batch so far: a row one of its merges deletes is one
/// this batch creates (the job's own new memories included), or a row it creates is one an
/// earlier merge of the batch deleted. Replayed alone after a crash, the creating job would
/// write that row back.
fn conflicts(
    plan: &FeedbackPlan,
    creates: &[String],
    created: &BTreeSet<String>,
    deleted: &[String],
) -> bool {
    let deletes = plan.merges.iter().flat_map(|m| &m.delete_ids);
    creates.iter().any(|id| deleted.contains(id))
        || deletes
            .clone()
            .any(|id| created.contains(id) || creates.contains(id))
}

/// A message in a batch: stored as it is, once (insert-if-missing by its id), embedded with
/// the message it answers (`working::replies`); it plans nothing and reinforces nothing.
fn plan_message(
    told: &MessageTold,
    index: usize,
    state: &mut HashMap<String, MemoryRecord>,
    net: &mut NetEffect,
) {
    let record = told.record();
    if !state.contains_key(&record.id) {
        let Ok(admitted) = Admitted::message(record.clone()) else {
            tracing::warn!("a message job without its scope or conversation was skipped");
            net.reinforced.push(0);
            net.plans.push(FeedbackPlan::default());
            return;
        };
        let answers = told.message.answers.as_deref();
        net.message_passages
            .push(crate::memory::working::passage(answers, &record.content));
        net.messages.push(admitted);
        net.message_jobs.push(index);
        state.insert(record.id.clone(), record);
    }
    net.reinforced.push(0);
    net.plans.push(FeedbackPlan::default());
}

/// Embed first (the step most likely to fail leaves nothing behind), add the new rows or
/// reinforce the stored copies of their facts (`door::repetition`) and insert the merged
/// rows, then set the strengths (after the inserts: a row created and reinforced in one batch
/// exists), then delete what merges replaced. Returns what became of each insert, in order.
async fn write_net(shared: &Shared, net: &NetEffect) -> Result<Vec<Remembered>, MemoryError> {
    let mut written = Vec::new();
    let texts: Vec<String> = net
        .inserts
        .iter()
        .map(|r| r.record().content.clone())
        .chain(net.message_passages.iter().cloned())
        .chain(net.merged.iter().map(|r| r.record().content.clone()))
        .collect();
    let mut vectors = match texts.is_empty() {
        true => Vec::new(),
        false => {
            shared
                .writes
                .embedder
                .embed(crate::embed::TextRole::Passage, texts)
                .await?
        }
    };
    let mut message_vectors = vectors.split_off(net.inserts.len().min(vectors.len()));
    let merged_vectors =
        message_vectors.split_off(net.message_passages.len().min(message_vectors.len()));
    if !net.messages.is_empty() {
        let rows: Vec<(Admitted, Vec<f32>)> =
            net.messages.iter().cloned().zip(message_vectors).collect();
        door::insert_missing(&shared.writes.store, rows.clone()).await?;
        for (admitted, vector) in rows {
            let record = admitted.into_record();
            shared.stored.offer(StoredMessage { record, vector });
        }
    }
    if !net.inserts.is_empty() {
        let rows = net
            .inserts
            .iter()
            .zip(vectors)
            .map(|(admitted, vector)| {
                let mut admitted = admitted.clone();
                let record = admitted.record();
                let accepted_id = record.id.clone();
                let scope = record.memory_scope.as_deref().unwrap_or_default();
                if let Some(id) = derived_id(scope, &record.content) {
                    admitted.set_id(id);
                }
                (admitted, vector, accepted_id)
            })
            .collect();
        written = shared.writes.repetitions.add_or_reinforce_all(rows).await?;
    }
    if !net.merged.is_empty() {
        let rows = net.merged.iter().cloned().zip(merged_vectors).collect();
        door::insert_missing(&shared.writes.store, rows).await?;
    }
    let changed = set_strengths(&shared.writes, &net.strengths).await?;
    if changed as usize != net.strengths.len() {
        // Another process changed some of these rows since they were read: its write stands.
        tracing::info!(
            rows = net.strengths.len(),
            changed,
            "some reinforcements found a strength changed by another writer"
        );
    }
    // Last: a crash before this replays each merge alone, which then only deletes.
    if !net.deletes.is_empty() {
        let members = Selection::ids(net.deletes.iter().cloned()).rows_sql();
        shared.writes.store.writer().delete(members).await?;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::feedback::{PASSIVE_STRENGTH, REINFORCE};

    fn row(id: &str, scope: &str, strength: i32) -> MemoryRecord {
        MemoryRecord {
            id: id.into(),
            content: format!("memory {id}"),
            reasoning: None,
            tags: vec![],
            memory_type: "knowledge".into(),
            strength,
            is_active: false,
            conversation_id: None,
            created_at: None,
            memory_scope: Some(scope.into()),
            scope_source: Some("mapped".into()),
            expires_at: None,
            last_recalled_at: None,
            speaker_id: None,
            speaker_name: None,
            source_ids: vec![],
            about_ids: vec![],
            source_conversations: vec![],
        }
    }

    fn job(id: &str, useful: &[&str], new: &[&str]) -> Job {
        Job::Reflection(crate::memory::feedback::FeedbackJob {
            job_id: id.into(),
            conversation_id: crate::scope::ConversationId::parse("c").unwrap(),
            scope: crate::scope::ScopeName::parse("family").unwrap(),
            scope_source: crate::scope::ScopeSource::Conversation,
            accepted_at: Utc::now(),
            useful_memory_ids: useful.iter().map(|s| s.to_string()).collect(),
            new_memories: new
                .iter()
                .map(|id| crate::memory::feedback::NewMemoryJob {
                    id: id.to_string(),
                    content: format!("new {id}"),
                    reasoning: None,
                    tags: vec![],
                    memory_type: "knowledge".into(),
                    expires_at: None,
                })
                .collect(),
            merge_groups: vec![],
        })
    }

    #[test]
    fn later_jobs_see_what_earlier_ones_did_and_each_row_is_written_once() {
        let rows = vec![row("a", "family", 50), row("b", "public", 99)];
        let jobs = [
            job("j1", &["a", "b"], &["n1"]),
            job("j2", &["a", "n1"], &[]),
            job("j3", &["b"], &[]),
        ];
        let net = plan_batch(&jobs, rows, false);
        assert_eq!(net.reinforced, vec![2, 2, 1]);
        // j2 planned against j1's result, j3 against j1's capped one.
        assert_eq!(net.plans[1].expected_strength.get("a"), Some(&53));
        assert_eq!(
            net.plans[1].expected_strength.get("n1"),
            Some(&PASSIVE_STRENGTH)
        );
        assert_eq!(net.plans[2].reinforce, vec![("b".to_string(), 100)]);
        assert_eq!(net.inserts.len(), 1);
        assert_eq!(
            net.inserts[0].record().strength,
            PASSIVE_STRENGTH,
            "inserted as created"
        );
        let change = |id: &str, expected: i32, new: i32| StrengthChange {
            id: id.into(),
            expected: Some(expected),
            new,
        };
        assert_eq!(
            net.strengths,
            vec![
                change("a", 50, 56),
                change("b", 99, 100),
                change("n1", PASSIVE_STRENGTH, PASSIVE_STRENGTH + REINFORCE)
            ]
        );
    }

    fn merging(mut j: Job, new_id: &str, ids: &[&str]) -> Job {
        if let Job::Reflection(f) = &mut j {
            f.merge_groups.push(crate::memory::feedback::MergeGroupJob {
                new_id: new_id.into(),
                ids: ids.iter().map(|s| s.to_string()).collect(),
            });
        }
        j
    }

    #[test]
    fn merges_join_a_batch_and_later_jobs_see_the_merged_row() {
        let rows = vec![
            row("a", "family", 50),
            row("b", "family", 70),
            row("c", "family", 20),
        ];
        let jobs = [
            job("j1", &["a"], &["n1"]),
            merging(job("j2", &[], &[]), "m", &["a", "b"]),
            job("j3", &["a", "m", "c"], &[]),
        ];
        let net = plan_batch(&jobs, rows, false);
        assert_eq!(net.plans.len(), 3, "one batch");
        assert_eq!(net.merge_jobs, vec![1]);
        // The merge saw j1's reinforcement of `a` (56) beside `b` (70).
        assert_eq!(net.merged[0].record().id, "m");
        assert_eq!(net.merged[0].record().strength, 70);
        assert_eq!(net.deletes, vec!["a".to_string(), "b".to_string()]);
        // j3: `a` is gone (refused, as it would be after j2 alone), `m` and `c` reinforced.
        assert_eq!(net.reinforced, vec![1, 0, 2]);
        assert!(net.plans[2].refused.iter().any(|(id, _)| id == "a"));
        let ids: Vec<&str> = net.strengths.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, vec!["c", "m"], "no write to a row the batch deletes");
        assert_eq!(
            net.strengths[1].expected,
            Some(70),
            "as the merge inserts it"
        );
    }

    #[test]
    fn a_merge_of_a_row_the_batch_creates_waits_for_the_next_batch() {
        let rows = vec![row("a", "family", 50), row("b", "family", 50)];
        // j2 merges the row j1 creates: replayed alone after a crash, j1 would write it back.
        let jobs = [
            job("j1", &[], &["n1"]),
            merging(job("j2", &[], &[]), "m", &["n1", "a"]),
        ];
        assert_eq!(plan_batch(&jobs, rows.clone(), false).plans.len(), 1);
        // And a row an earlier merge deleted is never created again in the same batch.
        let jobs = [
            merging(job("j1", &[], &[]), "m", &["a", "b"]),
            job("j2", &["m"], &["a"]),
            job("j3", &["m"], &[]),
        ];
        let net = plan_batch(&jobs, rows.clone(), false);
        assert_eq!(net.plans.len(), 1);
        // Alone, a job is planned as it would be outside a batch.
        let net = plan_batch(&jobs[1..], rows, false);
        assert_eq!(net.plans.len(), 2);
    }

    #[test]
    fn a_batch_never_touches_rows_its_conversation_cannot_see() {
        let rows = vec![row("x", "work", 50), row("p", "public", 20)];
        let net = plan_batch(&[job("j1", &["x", "p", "missing"], &[])], rows, false);
        assert_eq!(net.reinforced, vec![1]);
        assert_eq!(net.strengths.len(), 1);
        assert_eq!(net.strengths[0].id, "p");
        let refused: Vec<&str> = net.plans[0]
            .refused
            .iter()
            .map(|(w, _)| w.as_str())
            .collect();
        assert_eq!(refused, vec!["x", "missing"]);
    }
}
