//! The service's part of embedding a question ahead of its recall (`memory::recall::prefetch`):
//! each chat line the service is told goes to the conversation's foresight; a member's message
//! to the bot hands its recall's texts to one background task, which embeds them into the query
//! cache. Off every request's path: the hand-off never waits (what does not fit is skipped), and
//! a burst of messages to the bot in one conversation costs one embedding, the latest's.

use std::sync::Weak;

use tokio::sync::mpsc;

use super::recall::{checked_query, in_time};
use super::MemoryService;
use crate::config::SearchKind;
use crate::memory::recall::prefetch::Prefetch;
use crate::memory::redact::redact;
use crate::memory::turns::{Embedded, TurnBound};

impl MemoryService {
    /// A line said in `conversation` (`is_bot`: the bot's), as the service was told it; for a
    /// member's message to the bot (`to_bot`), its recall's texts are embedded ahead.
    pub(super) fn foresee(&self, conversation: &str, text: &str, is_bot: bool, to_bot: bool) {
        let bound = TurnBound::EMBEDDED;
        let Some(ahead) = self
            .foresight
            .said(conversation, text, is_bot, to_bot, bound)
        else {
            return;
        };
        // Nothing to embed for a keyword-only recall, or while the table's vectors are another
        // model's (a re-embed: recalls search by keyword then).
        if self.settings.recall.search != SearchKind::Keyword && self.reembed.vectors_current() {
            self.prefetches.offer(ahead);
        }
    }

    /// Embed the texts the recall after `ahead` will ask with, built the way it builds them.
    async fn prefetch(&self, ahead: Prefetch) {
        let Ok(query) = checked_query(&ahead.message) else {
            return;
        };
        let Ok(zone) = self.zone(None) else {
            return;
        };
        let (time, text) = in_time(query, None, zone);
        let Ok(embedded) = Embedded::of(&ahead.history(), &text, TurnBound::EMBEDDED) else {
            return;
        };
        let mut texts = embedded.texts();
        // The recent messages are searched with the message as written (no window).
        if time.is_some() {
            texts.push(redact(query));
        }
        match self.queries.embed_all(self.embedder.as_ref(), &texts).await {
            Ok(_) => self.foresight.embedded_ahead(),
            Err(e) => {
                tracing::debug!(error = %e, "a question could not be embedded ahead of its recall")
            }
        }
    }
}

/// Embed each message to the bot ahead of its recall, the latest of each conversation when
/// several wait, until the service is gone.
pub(super) async fn prefetch_queries(
    service: Weak<MemoryService>,
    mut asked: mpsc::Receiver<Prefetch>,
) {
    while let Some(first) = asked.recv().await {
        let mut due = vec![first];
        while let Ok(next) = asked.try_recv() {
            due.retain(|p| p.conversation != next.conversation);
            due.push(next);
        }
        let Some(service) = service.upgrade() else {
            return;
        };
        for ahead in due {
            service.prefetch(ahead).await;
        }
    }
}
