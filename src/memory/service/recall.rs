//! The service's part of a recall (docs/design.md section 5.2): check the request, build the
//! conversation's filter, search each tier under it, gate, rank and select. The stages
//! themselves are the modules of `memory/recall/`; this strings them together for one
//! request and answers it.

use std::sync::atomic::Ordering;
use std::time::Instant;

use chrono::Utc;

use super::{conversation, invalid, MemoryService, Visibility, MAX_QUERY_CHARS};
use crate::config::{RecallConfig, SearchKind, SimilarityCut};
use crate::embed::calibration::Calibration;
use crate::memory::model::*;
use crate::memory::recall::{
    self,
    chained::{self, ChainedLimits},
    distinct::{self, Ranked},
    hybrid::{CandidateQuery, Searchers},
};
use crate::memory::redact::redact;
use crate::memory::speakers::Person;
use crate::memory::turns::{Embedded, TooManyTurns, TurnBound, TURNS_MATCHED, TURN_CHARS};
use crate::memory::MemoryError;
use crate::store::{RowFilter, Tier};

/// What a recall's ranking stage kept, and how many hits it merged into a better one (one
/// fact said twice).
pub(super) struct Selected {
    pub(super) memories: Vec<ScoredMemory>,
    pub(super) merged: usize,
}

/// What a recall asks with: the request and its checked query.
pub(super) struct Asked<'a> {
    pub(super) req: &'a RecallRequest,
    pub(super) query: &'a str,
    /// The question is about a person the service knows by id (`speakers::Person`): the
    /// working memory's tier holds it to the looser chat bound, as it does a long message.
    pub(super) about_person: bool,
    /// An injection event after a message to the bot whose turns were not foreseen
    /// (`recall::prefetch`): its vector is the message's alone, so the bot waits no longer
    /// than for the question alone; the keyword leg still reads the turns.
    pub(super) unforeseen_turns: bool,
}

/// What a recall's search stage found, and how it ran.
pub(super) struct Searched {
    pub(super) search: SearchKind,
    pub(super) found: recall::hybrid::Found,
    pub(super) degraded: Option<&'static str>,
    pub(super) gated: Option<&'static str>,
    pub(super) time_window: Option<TimeWindow>,
}

/// How much a question that names a person ("张三喜欢什么") lifts a memory said by them or
/// about them (`memory::speakers`).
const SPEAKER_BOOST: f32 = 2.0;

/// The query without surrounding blanks and leading mentions (`recall::mentions`): not empty
/// and at most [`MAX_QUERY_CHARS`] long.
pub(super) fn checked_query(query: &str) -> Result<&str, MemoryError> {
    let query = query.trim();
    if query.is_empty() {
        return Err(invalid("query", "query must not be empty"));
    }
    if query.chars().count() > MAX_QUERY_CHARS {
        return Err(invalid(
            "query",
            format!("query is longer than {MAX_QUERY_CHARS} characters"),
        ));
    }
    Ok(recall::mentions::without_mentions(query))
}

/// The time words `query` names (unless the request turns them off, `time_words: false`) and
/// the text searched: time words name a window of the prefilter and are left out of it. One
/// rule for a recall and for its texts embedded ahead (`service::prefetch`), whose cache
/// entries are only of use when they are the recall's very texts.
pub(super) fn in_time(
    query: &str,
    time_words: Option<bool>,
    zone: chrono_tz::Tz,
) -> (Option<recall::time_words::TimeQuery>, String) {
    let time = match time_words {
        Some(false) => None,
        _ => recall::time_words::find(query, Utc::now().with_timezone(&zone)),
    };
    let text = time.as_ref().map_or(query, |t| t.rest.as_str()).to_string();
    (time, text)
}

/// The request's limit, or the mode's default; within 1..=`recall.max_limit`.
fn recall_limit(cfg: &RecallConfig, req: &RecallRequest) -> Result<usize, MemoryError> {
    let max = cfg.max_limit.max(1);
    let default = match req.mode {
        RecallMode::Comprehensive => cfg.default_limit,
        RecallMode::Chained => cfg.final_limit,
    };
    let limit = req.limit.unwrap_or(default as i64);
    if limit < 1 || limit > max as i64 {
        return Err(invalid(
            "limit",
            format!("limit must be between 1 and {max}"),
        ));
    }
    Ok(limit as usize)
}

/// Candidates searched beyond the limit when a question is about a person the service knows by
/// id (the asker of a first-person question, a member it names), in either tier: in a group
/// where every member stated a fact of the same kind, the nearest 18 messages to "我对什么过敏
/// 来着？" held the asker's own line about one time in three.
pub(super) const PERSON_POOL: usize = 48;

/// Candidates searched beyond the limit and the merged ones, when facts said twice gave up
/// slots (`memory::distinct`).
const DISTINCT_SPARE: usize = 3;

impl MemoryService {
    /// The person `query` names (`memory::speakers`), with the asking member when the question
    /// is in the first person and the request says who asks (`memory::asker`).
    fn person_asked_about(
        &self,
        req: &RecallRequest,
        visible: &super::Visibility,
        query: &str,
    ) -> Result<Person, MemoryError> {
        let person = visible.named(&self.speakers, query);
        let asker = crate::memory::asker::sender(req.sender_id.as_deref())
            .map_err(|e| invalid("sender_id", e))?;
        Ok(match asker {
            Some(id) if crate::memory::asker::in_first_person(query) => {
                let names = visible.names_of(&self.speakers, &id);
                person.with_asker(&id, names)
            }
            _ => person,
        })
    }

    pub(super) fn ranking(&self) -> recall::ranking::Ranking {
        recall::ranking::Ranking::from_config(&self.settings.recall)
    }

    /// Recall what this conversation may see: its scope plus `public` (plus legacy NULL rows
    /// while migration mode is on), filtered inside LanceDB before ranking.
    pub(crate) async fn recall(&self, req: RecallRequest) -> Result<RecallResponse, MemoryError> {
        let started = Instant::now();
        let conversation = conversation(&req.conversation_id)?;
        let query = checked_query(&req.query)?;
        let limit = recall_limit(&self.settings.recall, &req)?;
        crate::memory::turns::check(&req.history).map_err(|e| invalid("history", e.to_string()))?;
        let mut unforeseen_turns = false;
        if req.for_prompt {
            // What the host's history was, for the next question's texts embedded ahead.
            unforeseen_turns = self.foresight.asked(
                conversation.as_str(),
                &req.query,
                &req.history,
                TurnBound::EMBEDDED,
            );
            // The bot answers this chat: it gets LLM passes (`consolidation::budget`).
            if req.counted {
                self.consolidator.active.addressed(conversation.as_str());
            }
        }
        self.caught_up_with_erasures().await?;
        // A recall of a cached query over the resident copy finishes without waiting on
        // anything, so a caller recalling in a loop never gave its worker back: tasks woken on
        // that worker (an erase's) waited up to two minutes. Yield once the task's budget is spent.
        tokio::task::consume_budget().await;

        // Long-term memories here; the working memory's messages are their own tier below.
        let visible = self.visibility(&conversation, req.persona.as_deref());
        let person = self.person_asked_about(&req, &visible, query)?;
        let asked = Asked {
            req: &req,
            query,
            about_person: !person.ids.is_empty(),
            unforeseen_turns,
        };
        // A question about a person searches deeper: their line is lifted only if it is among
        // the candidates, and their fellow members' lines of the same kind crowd it out.
        let deeper = match person.ids.is_empty() {
            true => 0,
            false => PERSON_POOL,
        };
        let mut searched = self.search_visible(&asked, limit, deeper, &visible).await?;
        let mut ranked =
            self.rank_and_select(&req, limit, searched.search, searched.found, &person);
        // A fact said twice gave up a slot: search once more, deeper, for the next one. (The
        // first search keeps its usual depth, so fusion ranks as it always did.)
        if ranked.merged > 0
            && ranked.memories.len() < limit
            && req.mode == RecallMode::Comprehensive
        {
            let extra = ranked.merged + DISTINCT_SPARE + deeper;
            searched = self.search_visible(&asked, limit, extra, &visible).await?;
            ranked = self.rank_and_select(&req, limit, searched.search, searched.found, &person);
        }
        if searched.degraded == Some("embedding_unavailable") {
            self.degraded_recalls.fetch_add(1, Ordering::Relaxed);
        }
        let (memories, merged_duplicates) = (ranked.memories, ranked.merged);
        if let Some(touches) = self.touches.get() {
            let every = self.stamps_recalls();
            let now = Utc::now();
            let rule_made = |m: &&ScoredMemory| {
                self.settings.retention.rule_made_due(
                    m.memory.reasoning.as_deref(),
                    m.memory.expires_at.as_deref(),
                    now,
                )
            };
            touches.record(
                memories
                    .iter()
                    .filter(|m| every || rule_made(m))
                    .map(|m| m.memory.id.clone())
                    .collect(),
            );
        }
        // Each tier answers to the gate on its own evidence: a question whose only answer was
        // said in the chat gets that message though no long-term memory answers it.
        let recent_messages = self.recent_messages(&asked, &visible, &person).await?;
        self.latency.record(started.elapsed());
        tracing::info!(
            conversation_id = conversation.as_str(),
            memory_scope = visible.memory_scope.as_str(),
            migration_mode = visible.migration_mode,
            search = searched.search.as_str(),
            degraded = searched.degraded,
            gated = searched.gated,
            rows = memories.len(),
            recent_messages = recent_messages.len(),
            ms = started.elapsed().as_millis() as u64,
            "recalled"
        );
        Ok(RecallResponse {
            memory_scope: visible.memory_scope,
            migration_mode: visible.migration_mode,
            memories,
            degraded: searched.degraded,
            gated: searched.gated,
            time_window: searched.time_window,
            merged_duplicates,
            recent_messages,
        })
    }

    /// The search stage of a recall: the candidates the visible rows offer for `query` (none
    /// when the relevance gate closes), with the search that ran and why it was degraded.
    pub(super) async fn search_visible(
        &self,
        asked: &Asked<'_>,
        limit: usize,
        extra: usize,
        visible: &Visibility,
    ) -> Result<Searched, MemoryError> {
        let (req, query) = (asked.req, asked.query);
        let cfg = &self.settings.recall;
        let k = self.pool_size(req.mode, limit, extra);
        // Keyword-only while the table's vectors are another model's (a re-embed is under way).
        let degraded = (!self.reembed.vectors_current()).then_some("reembedding");
        let search = match degraded {
            Some(_) => SearchKind::Keyword,
            None => req.search.unwrap_or(cfg.search),
        };
        let searchers = Searchers {
            embedder: self.embedder.as_ref(),
            queries: &self.queries,
            vectors: self.vectors.as_ref(),
            keywords: self.vectors.as_ref(),
        };
        let zone = self.zone(req.timezone.as_deref())?;
        let (time, text) = in_time(query, req.time_words, zone);
        let text = text.as_str();
        // The working memory's tier takes no window: it spans the last few days, and there a
        // question's time words name the event more often than the saying ("乐乐周六为什么要提前
        // 走？" asked on Sunday, of a line said on Friday). They stay words of its message (one
        // short text more to embed when a question names a time); its context is the memories'.
        let windowless = visible.rows.tier == Some(Tier::Messages);
        let time = time.filter(|_| !windowless);
        let words = if windowless { query } else { text };
        let calibration = self.calibration();
        let measured = calibration.as_ref().unwrap_or(&Calibration::UNMEASURED);
        let fit = *measured.for_query(text);
        let threshold = match (cfg.similarity_cut, calibration) {
            (SimilarityCut::Calibrated, Some(_)) => fit.similarity_cut(),
            _ => cfg.similarity_threshold,
        };
        // The earlier turns and the message, for a follow-up (`memory::turns`): more of them
        // for the keyword search, fewer for the vector, whose embedding is the cost.
        let history = &req.history;
        let bad_history = |e: TooManyTurns| invalid("history", e.to_string());
        let matched = TurnBound::Chars(TURN_CHARS);
        let context = crate::memory::turns::context(history, words, TURNS_MATCHED, matched)
            .map_err(bad_history)?
            .map(|c| redact(&c));
        let mut embedded = Embedded::of(history, text, TurnBound::EMBEDDED).map_err(bad_history)?;
        if asked.unforeseen_turns {
            embedded.context = None;
        }
        if windowless {
            embedded.message = redact(words);
        }
        // The turns before a message lift the gate's evidence only when the message asks
        // ("那后来呢？"): a remark after six turns about badminton ("腿好酸啊") asks nothing of
        // them, and is weighed on its own.
        let gating = req.relevance_gate.unwrap_or(false);
        // Asked as written: without its time words "今年春节在谁家过？" loses its question mark.
        let asks = crate::memory::working::asks(query);
        // The chat's raw lines, searched for a prompt: without the asking message's echoes,
        // and a short line weighs less (`recall::brevity`).
        let raw_chat_for_prompt = req.for_prompt && windowless;
        // The recent messages ask with a question's time words as written (above): embedded in
        // the memories' model call when the chat may hold messages to search.
        let working = &self.settings.working;
        let ahead = (!windowless
            && text != query
            && working.enabled
            && working.recall_limit > 0
            && self.working.present.known())
        .then(|| redact(query));
        let search_in = |rows: RowFilter| CandidateQuery {
            text: &embedded.message,
            context: context.as_deref(),
            embedded_context: embedded.context.as_deref(),
            rows,
            k,
            threshold,
            kind: search,
            fit,
            rescale: measured.rescale_for(text),
            without_echoes: raw_chat_for_prompt,
            message_evidence: gating && !asks,
            brevity: raw_chat_for_prompt,
            embed_ahead: ahead.as_deref(),
        };
        let (found, time_window) = self
            .search_in_time(&searchers, &search_in, visible, time.as_ref(), zone)
            .await?;
        let degraded = degraded.or(found.degraded);
        let in_window = time_window.as_ref().is_some_and(|w| !w.empty);
        // The gate is for injection into every prompt; an explicit recall is never held back,
        // and a message that names a visible memory's own words asks for it.
        let gated = if gating {
            let named = found.keyword_named;
            let tier = visible.rows.tier;
            self.gate(
                text,
                &fit,
                found.vector.as_ref(),
                (in_window, named, tier, asks, asked.about_person),
            )
        } else {
            None
        };
        let found = match gated {
            Some(_) => recall::hybrid::Found::default(),
            None => found,
        };
        Ok(Searched {
            search,
            found,
            degraded,
            gated,
            time_window,
        })
    }

    /// How many candidates a recall's searches return for `limit` answers.
    fn pool_size(&self, mode: RecallMode, limit: usize, extra: usize) -> usize {
        match mode {
            // Strength can lift a candidate past closer ones: rank a wider pool.
            RecallMode::Comprehensive if self.ranking().weighs_strength() => limit * 4 + extra,
            // Deeper (`extra`) after a fact said twice gave up a slot, or for a person.
            RecallMode::Comprehensive => limit + extra,
            RecallMode::Chained => self.settings.recall.pool_size.max(1).max(limit) + extra,
        }
    }

    /// The searches of a recall, within the window the question's time words name (`time`),
    /// if any: the candidates, and the window as the answer reports it. When nothing visible
    /// was created in the window, the search runs again over every visible row and the window
    /// is reported `empty`; candidates that the similarity cut left out of a window that holds
    /// memories are no reason to answer from other days.
    async fn search_in_time<'q>(
        &self,
        searchers: &Searchers<'_>,
        search_in: &(dyn Fn(RowFilter) -> CandidateQuery<'q> + Sync),
        visible: &Visibility,
        time: Option<&recall::time_words::TimeQuery>,
        zone: chrono_tz::Tz,
    ) -> Result<(recall::hybrid::Found, Option<TimeWindow>), MemoryError> {
        let everywhere = || search_in(visible.rows.clone());
        let Some(t) = time else {
            return Ok((searchers.candidates(&everywhere()).await?, None));
        };
        let mut rows = visible.rows.clone();
        rows.created = Some(t.window);
        let within = searchers.candidates(&search_in(rows.clone())).await?;
        let empty = within.candidates.is_empty() && self.store.count(rows.to_sql()).await? == 0;
        let window = TimeWindow {
            words: t.words.clone(),
            from: t.window.from.to_rfc3339(),
            until: t.window.until.to_rfc3339(),
            timezone: zone.name().to_string(),
            empty,
        };
        let found = if empty {
            searchers.candidates(&everywhere()).await?
        } else {
            within
        };
        Ok((found, Some(window)))
    }

    /// The ranking stage of a recall: candidates scored by relevance (and strength), then the
    /// best `limit`, or the chained selection's spread over entities and memory types.
    pub(super) fn rank_and_select(
        &self,
        req: &RecallRequest,
        limit: usize,
        search: SearchKind,
        found: recall::hybrid::Found,
        person: &Person,
    ) -> Selected {
        let cfg = &self.settings.recall;
        let ranking = self.ranking();
        let now = Utc::now();
        let mut ranked: Vec<Ranked> = found
            .candidates
            .into_iter()
            .filter(|c| !person.about_someone_else(&c.record))
            .map(|c| Ranked {
                hit: ScoredMemory {
                    score: ranking.score(c.relevance, &c.record, now)
                        * if person.lifts(&req.query, &c.record) {
                            SPEAKER_BOOST
                        } else {
                            1.0
                        },
                    memory: c.record.into(),
                },
                vector: c.vector,
            })
            .collect();
        // A vector-only list is already in order.
        if ranking.weighs_strength() || search != SearchKind::Vector {
            ranked.sort_by(|a, b| b.hit.score.total_cmp(&a.hit.score));
        }
        let keep = match req.mode {
            RecallMode::Comprehensive => limit,
            RecallMode::Chained => usize::MAX,
        };
        let (scored, merged) = match self.calibration.get() {
            Some(fit) => distinct::keep_distinct(ranked, &fit.duplicates, keep),
            None => (ranked.into_iter().take(keep).map(|r| r.hit).collect(), 0),
        };
        let memories = match req.mode {
            RecallMode::Comprehensive => scored,
            RecallMode::Chained => chained::select(
                scored,
                &req.entities,
                ChainedLimits {
                    per_entity: cfg.per_entity,
                    per_type_limit: cfg.per_type_limit,
                    final_limit: limit,
                },
            ),
        };
        Selected { memories, merged }
    }

    /// The relevance gate (`memory::relevance`): `Some` when the message asks for no memory.
    /// Open when the vector search did not run or the model is not measured yet: nothing to
    /// weigh the message with. `named`: a visible memory holds every word of the message, which
    /// then passes unless it reads as chat. `asking`: the message asks something
    /// (`working::asks`), so its context's evidence counts and the recent messages may answer
    /// it; else the message's own evidence does, and only the memories may.
    fn gate(
        &self,
        query: &str,
        fit: &crate::embed::calibration::ScriptFit,
        vector: Option<&recall::hybrid::VectorEvidence>,
        (in_window, named, tier, asking, about_person): (bool, bool, Option<Tier>, bool, bool),
    ) -> Option<&'static str> {
        let measured = self.calibration.get()?;
        let vector = vector?;
        let best = match asking {
            true => vector.best_similarity?,
            false => vector.message_best?,
        };
        let relevance = recall::relevance::Relevance::measure(
            fit,
            &measured.small_talk,
            crate::embed::Script::of(query),
            best,
            &vector.message,
        );
        tracing::debug!(
            memory_z = relevance.memory_z,
            chat_z = relevance.chat_z,
            named,
            in_window,
            messages = tier == Some(Tier::Messages),
            "relevance gate"
        );
        let asks = match (in_window, tier) {
            (true, _) => relevance.asks_about_a_time(),
            // The chat's words answer a question or a request, not a remark: raw chat holds
            // the near twin of every remark ("今天降温了" for "今天好冷啊，大家多穿点衣服").
            // A question about a person the service knows ("我现在在哪上班？" from its asker)
            // asks for that person's lines (`asks_about_a_person`): in a group where every
            // member states facts of the same kinds, such questions sit near chat (2.2 for that
            // one), while first-person small talk ("我好累啊", "我饿了") sits at 7.5.
            (false, Some(Tier::Messages)) if about_person => {
                asking && relevance.asks_about_a_person()
            }
            (false, Some(Tier::Messages)) => {
                let long = !crate::memory::working::is_short(query);
                asking && relevance.asks_for_messages(long)
            }
            (false, _) => relevance.asks_for_memory(),
        };
        let names_a_memory = named
            && match tier {
                Some(Tier::Messages) => relevance.names_a_message(),
                _ => relevance.names_a_memory(),
            };
        (!asks && !names_a_memory).then_some("no_relevant_memory")
    }

    /// The zone a request's time words are read in: its own (a plugin's), else
    /// `recall.timezone`, else the machine's.
    pub(super) fn zone(&self, requested: Option<&str>) -> Result<chrono_tz::Tz, MemoryError> {
        let configured = self.settings.recall.timezone.as_str();
        match requested.map(str::trim).filter(|z| !z.is_empty()) {
            Some(z) => recall::time_words::parse_zone(z).map_err(|e| invalid("timezone", e)),
            None if !configured.is_empty() => {
                recall::time_words::parse_zone(configured).map_err(|e| invalid("timezone", e))
            }
            None => Ok(recall::time_words::machine_zone()),
        }
    }
}
