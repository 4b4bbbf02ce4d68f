//! Each member owns their words (issue 77): what a chat can recall that a member said or that is
//! about them, and "forget me".
//!
//! Why: a forget was per chat, and in a group only an admin may run it. A member who leaves a
//! group, or regrets what they told the bot, had no lever but asking the operator to erase the
//! whole chat, everyone else's memories with theirs; and nothing listed what was kept about one
//! person (GDPR articles 15 and 17 are about persons, not chats). A person is the platform and
//! the sender id (`memory::person`).
//!
//! - **List** (`POST /v1/people`, the AstrBot page's people view): the members a chat may read
//!   rows of, with their names and how many rows they said and are about (no text).
//! - **Browse** (`POST /v1/people/browse`, `/scopemem me`): the rows this conversation may read
//!   (both tiers, the recall rule as always) that the person said or that are about them
//!   (`about_ids`), newest first, with ids.
//! - **Forget** (`POST /v1/people/forget`, `/scopemem forget me`, `scopemem forget --person`):
//!   through the one erase path, on every scope: every message the person sent in any chat of
//!   the platform, every long-term memory they said or that is about them, and every memory
//!   made of any of their messages, whoever else's words it holds beside theirs (erased, not
//!   rewritten: a rewrite without their words would be a new text nobody said). Their waiting
//!   messages' jobs are dropped here and, through the erase notice, in every other process;
//!   the names they went by leave the speakers' index. Other members' messages stay.

use super::erase::EraseJobs;
use super::{conversation, invalid, MemoryService, BROWSE_DEFAULT_LIMIT};
use std::collections::BTreeMap;

use crate::memory::model::{
    BrowseResponse, ForgetOutcome, Memory, PeopleList, PeopleRequest, PersonRequest, PersonSeen,
};
use crate::memory::person::PersonKey;
use crate::memory::MemoryError;
use crate::store::schema::BOT_TAG;
use crate::store::schema::MESSAGE_TYPE;
use crate::store::{made_of, Selection};

impl MemoryService {
    /// What `req.conversation_id` may recall that `req.sender_id` said or that is about them.
    pub(crate) async fn browse_person(
        &self,
        req: PersonRequest,
    ) -> Result<BrowseResponse, MemoryError> {
        let conversation = conversation(&req.conversation_id)?;
        let person = PersonKey::in_conversation(&conversation, &req.sender_id)
            .map_err(|e| invalid("sender_id", e.to_string()))?;
        self.caught_up_with_erasures().await?;
        let offset = req.offset.unwrap_or(0);
        let max = self.settings.recall.max_limit.max(1);
        let limit = req.limit.unwrap_or(BROWSE_DEFAULT_LIMIT.min(max) as i64);
        if offset < 0 || limit < 1 || limit > max as i64 {
            return Err(invalid(
                "limit",
                format!("limit must be between 1 and {max}, offset not negative"),
            ));
        }
        let visible = self.visibility(&conversation, None);
        let theirs = Selection::person(&person.platform, &person.sender_id).rows_sql();
        let predicate = match visible.to_sql() {
            Some(v) => format!("({v}) AND ({theirs})"),
            None => theirs,
        };
        let page = self
            .store
            .page_newest(Some(&predicate), offset as usize, limit as usize)
            .await?;
        Ok(BrowseResponse {
            memory_scope: visible.memory_scope,
            migration_mode: visible.migration_mode,
            total: page.total,
            offset: offset as usize,
            limit: limit as usize,
            memories: page.rows.into_iter().map(Memory::from).collect(),
        })
    }

    /// The members of `conversation`'s platform in what it may read (both tiers): each with the
    /// names they went by there, how many rows they said and how many are about them (the
    /// bot's own replies are no member). Most rows first.
    pub(crate) async fn people_of(&self, req: PeopleRequest) -> Result<PeopleList, MemoryError> {
        let conversation = conversation(&req.conversation_id)?;
        self.caught_up_with_erasures().await?;
        let platform = crate::memory::person::platform_of(&conversation).to_string();
        let visible = self.visibility(&conversation, None);
        let of_platform = Selection::platform(&platform).rows_sql();
        let predicate = match visible.to_sql() {
            Some(v) => format!("({v}) AND ({of_platform})"),
            None => of_platform,
        };
        let mut people: BTreeMap<String, PersonSeen> = BTreeMap::new();
        for row in self.store.whose(&predicate).await? {
            if row.tags.iter().any(|t| t == BOT_TAG) {
                continue;
            }
            if let Some(id) = row.speaker_id.clone() {
                let seen = people
                    .entry(id.clone())
                    .or_insert_with(|| PersonSeen::new(id));
                seen.said += 1;
                if let Some(name) = row.speaker_name.filter(|n| !n.is_empty()) {
                    if !seen.names.contains(&name) {
                        seen.names.push(name);
                    }
                }
            }
            for id in row.about_ids {
                people
                    .entry(id.clone())
                    .or_insert_with(|| PersonSeen::new(id))
                    .about += 1;
            }
        }
        let mut people: Vec<PersonSeen> = people.into_values().collect();
        people.sort_by(|a, b| {
            (b.said + b.about)
                .cmp(&(a.said + a.about))
                .then(a.sender_id.cmp(&b.sender_id))
        });
        Ok(PeopleList {
            memory_scope: visible.memory_scope,
            platform,
            people,
        })
    }

    /// Forget `req.sender_id` of the platform `req.conversation_id` is on, everywhere.
    pub(crate) async fn forget_person(
        &self,
        req: PersonRequest,
    ) -> Result<ForgetOutcome, MemoryError> {
        let conversation = conversation(&req.conversation_id)?;
        let person = PersonKey::in_conversation(&conversation, &req.sender_id)
            .map_err(|e| invalid("sender_id", e.to_string()))?;
        self.forget_person_everywhere(&person).await
    }

    /// Erase what `person` said in every chat of their platform, what is about them and what
    /// was made of their words (see the module header), through the one erase path.
    pub async fn forget_person_everywhere(
        &self,
        person: &PersonKey,
    ) -> Result<ForgetOutcome, MemoryError> {
        let theirs = Selection::person(&person.platform, &person.sender_id).rows_sql();
        // Their messages on the latest version, for the memories made of them.
        let ids = self.store.ids_where(&theirs).await?;
        let rows = self.store.get_by_ids(&ids, None).await?;
        let messages: Vec<String> = rows
            .iter()
            .filter(|r| {
                r.memory_type == MESSAGE_TYPE && r.speaker_id.as_deref() == Some(&person.sender_id)
            })
            .map(|r| r.id.clone())
            .collect();
        let mut made = Vec::new();
        for predicate in made_of(&messages) {
            made.extend(self.store.ids_where(&predicate).await?);
        }
        let predicate = match made.is_empty() {
            true => theirs,
            false => format!("({theirs}) OR ({})", Selection::ids(made).rows_sql()),
        };
        let outcome = self
            .erase_where(predicate, EraseJobs::of_person(person.clone()))
            .await?;
        self.speakers.forget_id(&person.sender_id);
        tracing::info!(
            platform = person.platform.as_str(),
            rows = outcome.deleted,
            pending_feedback_dropped = outcome.pending_feedback_dropped,
            "forgot a person"
        );
        Ok(outcome)
    }
}
