//! Applying a chat message's job alone (a batch stores its messages in `batch`): embedded as
//! its passage and inserted as it is, once; a replay finds its id and writes nothing. No plan,
//! no folding into a stored fact: a message is what a member said, kept for its hours. It goes
//! through the write door as every row does (`door::Admitted::message`).

use chrono::Utc;

use super::shared::Shared;
use super::MessageTold;
use crate::memory::door::{self, Admitted};
use crate::memory::feedback::{JobOutcome, JobState};
use crate::memory::working::StoredMessage;
use crate::memory::MemoryError;

pub(super) async fn apply(shared: &Shared, told: &MessageTold) -> Result<JobOutcome, MemoryError> {
    let record = told.record();
    let passage = crate::memory::working::passage(told.message.answers.as_deref(), &record.content);
    let vector = crate::memory::embed_passage(shared.writes.embedder.as_ref(), &passage).await?;
    let id = record.id.clone();
    let admitted = Admitted::message(record.clone())?;
    door::insert_missing(&shared.writes.store, vec![(admitted, vector.clone())]).await?;
    shared.stored.offer(StoredMessage { record, vector });
    Ok(JobOutcome {
        job_id: told.job_id.clone(),
        state: JobState::Done,
        reinforced: 0,
        created: vec![id],
        deduplicated: vec![],
        merged: vec![],
        refused: vec![],
        error: None,
        attempts: 1,
        finished_at: Utc::now(),
    })
}
