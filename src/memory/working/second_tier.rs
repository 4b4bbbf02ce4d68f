//! A recall's second tier after its search (design 5.13): the stored messages the recall path's
//! own stages found and ranked, joined by the messages still waiting for their vectors that
//! hold the query's words, cut to what is shown (`shown`), and the statement that answers best
//! counted toward the threshold rule (`recurrence`). The search itself is the recall path's
//! (the same scope filter and relevance gate as the memories), so it stays in the service; what
//! a message tier shows and counts is decided here.

use super::{could_state_a_fact, shown, Chorus, WorkingMemory};
use crate::memory::model::ScoredMemory;
use crate::store::MemoryRecord;

/// What the second tier's search found.
pub(crate) struct Found {
    /// The stored messages, ranked by the recall path's stages.
    pub(crate) ranked: Vec<ScoredMemory>,
    /// Messages waiting for their vectors that hold the query's words, with their scores.
    pub(crate) waiting: Vec<(MemoryRecord, f32)>,
    /// Lines several members said word for word among the search's candidates.
    pub(crate) chorus: Chorus,
}

/// How the recall that searched asks.
pub(crate) struct Asked<'a> {
    pub(crate) query: &'a str,
    /// The injection event's recall, for a prompt (never shows the asking message).
    pub(crate) for_prompt: bool,
    pub(crate) limit: usize,
    /// Whether this recall counts toward the threshold rule (it is on, and the recall counts).
    pub(crate) counts: bool,
}

impl WorkingMemory {
    /// The messages the second tier shows, at most `asked.limit`; a counted recall hands the
    /// stored statement that answers best to the threshold rule when it is returned a second
    /// time.
    pub(crate) fn second_tier(&self, found: Found, asked: &Asked<'_>) -> Vec<ScoredMemory> {
        let Found {
            mut ranked,
            waiting,
            chorus,
        } = found;
        let stored: Vec<String> = ranked.iter().map(|h| h.memory.id.clone()).collect();
        for (record, score) in waiting {
            if !ranked.iter().any(|h| h.memory.id == record.id) {
                ranked.push(ScoredMemory {
                    memory: record.into(),
                    score,
                });
            }
        }
        let hits = shown(ranked, asked.query, asked.for_prompt, asked.limit, &chorus);
        if !asked.counts {
            return hits;
        }
        // Only the statement that answers best counts: the others a recall shows beside it
        // share the question's words, and on the group-chat bench two in three were chatter.
        let returned = hits
            .iter()
            .map(|h| &h.memory)
            .filter(|m| stored.contains(&m.id))
            .filter(|m| could_state_a_fact(&m.content, &m.tags, m.speaker_id.as_deref()))
            .filter(|m| !chorus.sings(&m.content))
            .take(1)
            .map(|m| m.id.as_str());
        for id in self.recurrences.returned(returned) {
            self.returned_again.offer(id);
        }
        hits
    }
}
