//! Which rows a read may return, in one language with two readers.
//!
//! The recall rule ("this scope and public, legacy NULL rows while migrating, never expired")
//! used to exist twice: as SQL text for LanceDB, assembled in `scope` and `memory::retention`,
//! and as a second struct for the resident copy, assembled beside it in `memory`. A change to
//! one that missed the other was a scope leak no compiler caught. Now [`RowFilter`] is the
//! filter: LanceDB gets [`RowFilter::to_sql`], the resident copy asks
//! [`RowFilter::admits_scope`] and [`RowFilter::admits_expiry`], and `tests/filter_paths.rs`
//! checks on random tables and clocks that both admit exactly the same rows.
//!
//! The rows a delete, an erase, an update or an export names ([`Selection`]: ids, a
//! conversation, a scope set) are rendered here too, from the same [`ScopeSet`], so that no
//! `memory_scope` or `conversation_id` predicate is formatted anywhere else: the public-plus-NULL
//! rule of a forget is the recall rule's, not a copy of it.
//!
//! The SQL helpers every write path quotes its values with live here too, so the store needs
//! nothing from the layers above it.

use chrono::{DateTime, SecondsFormat, Utc};

use super::schema::{
    COL_ABOUT_IDS, COL_CONTENT, COL_CONVERSATION_ID, COL_CREATED_AT, COL_EXPIRES_AT, COL_ID,
    COL_MEMORY_SCOPE, COL_MEMORY_TYPE, COL_SOURCE_CONVERSATIONS, COL_SOURCE_IDS, COL_SPEAKER_ID,
    MESSAGE_TYPE,
};

/// Which rows a read may return.
#[derive(Debug, Clone, PartialEq)]
pub struct RowFilter {
    /// `None`: every scope (`scope_filter: disabled`, the rollback switch).
    pub scopes: Option<ScopeSet>,
    /// Rows whose `expires_at` is at or before this time are hidden; `None`: expiry ignored.
    pub alive_at: Option<DateTime<Utc>>,
    /// Only rows created in this window (a question that names a time, `memory::time_words`);
    /// `None`: any time.
    pub created: Option<TimeRange>,
    /// Only long-term memories, or only working-memory messages ([`Tier`]); `None`: both.
    pub tier: Option<Tier>,
}

/// The two tiers of the table: long-term memories, and the working memory's recent messages
/// (rows of `memory_type` [`MESSAGE_TYPE`], design 5.13). A recall searches each on its own,
/// so a busy chat's messages never crowd a memory out of its slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    Memories,
    Messages,
}

impl Tier {
    /// Whether a row of `memory_type` is in this tier.
    pub(crate) fn admits(self, memory_type: &str) -> bool {
        (memory_type == MESSAGE_TYPE) == (self == Tier::Messages)
    }
}

pub use scopemem_core::time_range::TimeRange;

/// Admitted `memory_scope` values.
#[derive(Debug, Clone, PartialEq)]
pub struct ScopeSet {
    pub names: Vec<String>,
    /// Whether rows with no scope (legacy, NULL) are admitted.
    pub null: bool,
}

impl ScopeSet {
    /// Exactly one scope, no legacy rows.
    pub(crate) fn only(name: &str) -> ScopeSet {
        ScopeSet {
            names: vec![name.to_owned()],
            null: false,
        }
    }

    /// Whether a row of `scope` (`None`: a legacy row) is in the set.
    pub(crate) fn admits(&self, scope: Option<&str>) -> bool {
        match scope {
            None => self.null,
            Some(s) => self.names.iter().any(|n| n == s),
        }
    }
}

/// The rows a delete, an erase, an update or an export names: every part given must hold
/// (AND); no part at all names every row. Expiry plays no part: an erase reaches expired rows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selection {
    /// Rows with one of these ids.
    pub ids: Option<Vec<String>>,
    /// Rows this conversation wrote.
    pub conversation: Option<String>,
    /// Rows whose text holds this conversation's words: those it wrote, and those that name it
    /// among their `source_conversations` (what a forget of it erases).
    pub words_of: Option<String>,
    /// Rows a person said or that are about them: `(platform, sender id)`, on conversations of
    /// that platform (what their browse lists and their forget erases, issue 77).
    pub person: Option<(String, String)>,
    /// Rows written in a conversation of this platform (the conversation id's first part).
    pub platform: Option<String>,
    /// Rows in these scopes (with legacy NULL rows when the set says so).
    pub scopes: Option<ScopeSet>,
}

impl Selection {
    /// The rows with these ids.
    pub(crate) fn ids<I, S>(ids: I) -> Selection
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Selection {
            ids: Some(ids.into_iter().map(Into::into).collect()),
            ..Selection::default()
        }
    }

    /// The rows `conversation` wrote.
    pub(crate) fn conversation(conversation: &str) -> Selection {
        Selection {
            conversation: Some(conversation.to_owned()),
            ..Selection::default()
        }
    }

    /// The rows whose text holds `conversation`'s words: every row it wrote, and every row
    /// another writer made of its messages or memories (a pass's UPDATE, a restatement, a
    /// merge). What a forget of the conversation erases.
    pub(crate) fn words_of(conversation: &str) -> Selection {
        Selection {
            words_of: Some(conversation.to_owned()),
            ..Selection::default()
        }
    }

    /// The rows the member `sender_id` of `platform` said, or that are about them (their
    /// `about_ids`), written in a conversation of that platform.
    pub(crate) fn person(platform: &str, sender_id: &str) -> Selection {
        Selection {
            person: Some((platform.to_owned(), sender_id.to_owned())),
            ..Selection::default()
        }
    }

    /// The rows written in a conversation of `platform`.
    pub(crate) fn platform(platform: &str) -> Selection {
        Selection {
            platform: Some(platform.to_owned()),
            ..Selection::default()
        }
    }

    /// The rows of one scope.
    pub(crate) fn scope(scope: &str) -> Selection {
        Selection {
            scopes: Some(ScopeSet::only(scope)),
            ..Selection::default()
        }
    }

    /// These rows, narrowed to `scopes`.
    pub(crate) fn within(mut self, scopes: ScopeSet) -> Selection {
        self.scopes = Some(scopes);
        self
    }

    /// The DataFusion predicate; `None` names every row. An empty id list names none.
    pub(crate) fn to_sql(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(ids) = &self.ids {
            parts.push(id_list_sql(ids));
        }
        if let Some(c) = &self.conversation {
            parts.push(format!("{COL_CONVERSATION_ID} = {}", sql_literal(c)));
        }
        if let Some((platform, id)) = &self.person {
            let (prefix, id) = (sql_literal(&format!("{platform}:")), sql_literal(id));
            parts.push(format!(
                "({COL_SPEAKER_ID} = {id} OR array_has_any({COL_ABOUT_IDS}, make_array({id}))) AND starts_with({COL_CONVERSATION_ID}, {prefix})"
            ));
        }
        if let Some(platform) = &self.platform {
            let prefix = sql_literal(&format!("{platform}:"));
            parts.push(format!("starts_with({COL_CONVERSATION_ID}, {prefix})"));
        }
        if let Some(c) = &self.words_of {
            let c = sql_literal(c);
            parts.push(format!(
                "({COL_CONVERSATION_ID} = {c} OR array_has_any({COL_SOURCE_CONVERSATIONS}, make_array({c})))"
            ));
        }
        if let Some(set) = &self.scopes {
            parts.push(scope_set_sql(set));
        }
        (!parts.is_empty()).then(|| parts.join(" AND "))
    }

    /// The predicate of a delete, an erase or an update: like [`Self::to_sql`], but a selection
    /// with no part names no row, so a missing part never widens a delete to the whole table.
    pub(crate) fn rows_sql(&self) -> String {
        self.to_sql().unwrap_or_else(|| "false".to_string())
    }

    /// [`Self::to_sql`] AND `predicate` (an erase notice's, recorded earlier by this code).
    pub(crate) fn and_sql(&self, predicate: &str) -> String {
        match self.to_sql() {
            Some(own) => format!("{own} AND ({predicate})"),
            None => predicate.to_owned(),
        }
    }
}

fn id_list_sql(ids: &[String]) -> String {
    if ids.is_empty() {
        return "false".to_string();
    }
    let listed: Vec<String> = ids.iter().map(|id| sql_literal(id)).collect();
    format!("{COL_ID} IN ({})", listed.join(", "))
}

/// The long-term memories made of any of `messages` (their `source_ids`), in chunks of at most
/// 500 ids, each chunk one predicate.
pub(crate) fn made_of(messages: &[String]) -> Vec<String> {
    messages
        .chunks(500)
        .map(|chunk| {
            let listed: Vec<String> = chunk.iter().map(|id| sql_literal(id)).collect();
            format!(
                "array_has_any({COL_SOURCE_IDS}, make_array({}))",
                listed.join(", ")
            )
        })
        .collect()
}

/// Rows the legacy backfill still has to scope: no scope, or a blank one.
pub const UNSCOPED: &str = "memory_scope IS NULL OR btrim(memory_scope) = ''";

/// Rows the legacy backfill filled that still hold a scope: its mark in `scope_source` and a
/// scope that is not blank (a lost column patch leaves neither, `migrate::backfill`).
pub const BACKFILLED: &str =
    "scope_source = 'backfill' AND NOT (memory_scope IS NULL OR btrim(memory_scope) = '')";

impl RowFilter {
    /// Every row, expired or not.
    pub const ALL: RowFilter = RowFilter {
        scopes: None,
        alive_at: None,
        created: None,
        tier: None,
    };

    /// This filter for one tier only.
    pub fn in_tier(mut self, tier: Tier) -> RowFilter {
        self.tier = Some(tier);
        self
    }

    pub(crate) fn admits_type(&self, memory_type: &str) -> bool {
        self.tier.is_none_or(|t| t.admits(memory_type))
    }

    pub fn admits_scope(&self, scope: Option<&str>) -> bool {
        self.scopes.as_ref().is_none_or(|set| set.admits(scope))
    }

    /// `expires_at` in microseconds since the epoch, as stored; NULL never expires.
    pub(crate) fn admits_expiry(&self, expires_at_micros: Option<i64>) -> bool {
        match (self.alive_at, expires_at_micros) {
            (Some(now), Some(t)) => t > now.timestamp_micros(),
            _ => true,
        }
    }

    /// `created_at` in microseconds since the epoch, as stored; a row without one is outside
    /// every window.
    pub(crate) fn admits_created(&self, created_at_micros: Option<i64>) -> bool {
        match (self.created, created_at_micros) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(w), Some(t)) => t >= w.from.timestamp_micros() && t < w.until.timestamp_micros(),
        }
    }

    /// The same filter as a DataFusion predicate for LanceDB; `None` when it admits every row.
    pub fn to_sql(&self) -> Option<String> {
        let scopes = self.scopes.as_ref().map(scope_set_sql);
        let alive = self.alive_at.map(alive_clause);
        let visible = match (scopes, alive) {
            (Some(s), Some(a)) => Some(format!("({s}) AND {a}")),
            (Some(s), None) => Some(s),
            (None, Some(a)) => Some(a),
            (None, None) => None,
        };
        let created = self.created.map(|w| {
            format!(
                "{COL_CREATED_AT} >= {} AND {COL_CREATED_AT} < {}",
                timestamp_literal(w.from),
                timestamp_literal(w.until)
            )
        });
        let tier = self.tier.map(|t| {
            let op = if t == Tier::Messages { "=" } else { "<>" };
            format!("{COL_MEMORY_TYPE} {op} {}", sql_literal(MESSAGE_TYPE))
        });
        [created, tier]
            .into_iter()
            .flatten()
            .fold(visible, |sql, more| {
                Some(match sql {
                    Some(v) => format!("({v}) AND {more}"),
                    None => more,
                })
            })
    }
}

fn scope_set_sql(set: &ScopeSet) -> String {
    let listed: Vec<String> = set.names.iter().map(|n| sql_literal(n)).collect();
    let visible = match listed.as_slice() {
        [] => "false".to_string(),
        [one] => format!("{COL_MEMORY_SCOPE} = {one}"),
        many => format!("{COL_MEMORY_SCOPE} IN ({})", many.join(", ")),
    };
    if set.null {
        format!("({visible} OR {COL_MEMORY_SCOPE} IS NULL)")
    } else {
        visible
    }
}

/// A merge's condition that the stored row (`target`) is still in `scope` (`None`: a legacy
/// row without one) and still reads `content`: a replacement planned on what a request read
/// writes nothing if another write changed the row since, and never touches a copy of the id
/// in another scope.
pub(crate) fn target_still(scope: Option<&str>, content: &str) -> String {
    let scope = match scope {
        Some(s) => format!("target.{COL_MEMORY_SCOPE} = {}", sql_literal(s)),
        None => format!("target.{COL_MEMORY_SCOPE} IS NULL"),
    };
    format!(
        "{scope} AND target.{COL_CONTENT} = {}",
        sql_literal(content)
    )
}

/// Rows still alive at `now`: NULL never expires.
pub(crate) fn alive_clause(now: DateTime<Utc>) -> String {
    format!(
        "({COL_EXPIRES_AT} IS NULL OR {COL_EXPIRES_AT} > {})",
        timestamp_literal(now)
    )
}

/// Rows that expired at or before `now`: what the sweeper erases.
pub(crate) fn expired_clause(now: DateTime<Utc>) -> String {
    format!(
        "{COL_EXPIRES_AT} IS NOT NULL AND {COL_EXPIRES_AT} <= {}",
        timestamp_literal(now)
    )
}

/// A single-quoted SQL string literal with `'` doubled.
///
/// Defence in depth: scope names and ids already forbid quotes, but the escaping must not rely
/// on it.
pub fn sql_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\'' {
            out.push('\'');
        }
        out.push(c);
    }
    out.push('\'');
    out
}

/// A UTC timestamp literal Lance's SQL filter compares with the microsecond UTC column.
pub fn timestamp_literal(t: DateTime<Utc>) -> String {
    format!(
        "arrow_cast('{}', 'Timestamp(Microsecond, Some(\"UTC\"))')",
        t.to_rfc3339_opts(SecondsFormat::Micros, true)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str], null: bool) -> Option<ScopeSet> {
        Some(ScopeSet {
            names: names.iter().map(|n| n.to_string()).collect(),
            null,
        })
    }

    #[test]
    fn a_selection_is_the_and_of_its_parts_with_the_recall_rules_scope_sql() {
        assert_eq!(Selection::default().to_sql(), None);
        assert_eq!(Selection::default().rows_sql(), "false");
        assert_eq!(
            Selection::conversation("it's:1").to_sql().as_deref(),
            Some("conversation_id = 'it''s:1'")
        );
        assert_eq!(
            Selection::person("qq", "o'k").to_sql().as_deref(),
            Some("(speaker_id = 'o''k' OR array_has_any(about_ids, make_array('o''k'))) AND starts_with(conversation_id, 'qq:')")
        );
        assert_eq!(
            made_of(&["m1".into(), "m'2".into()]),
            ["array_has_any(source_ids, make_array('m1', 'm''2'))"]
        );
        assert_eq!(
            Selection::words_of("it's:1").to_sql().as_deref(),
            Some("(conversation_id = 'it''s:1' OR array_has_any(source_conversations, make_array('it''s:1')))")
        );
        assert_eq!(
            Selection::scope("家人").to_sql().as_deref(),
            Some("memory_scope = '家人'")
        );
        let own = ScopeSet {
            names: vec!["public".into()],
            null: true,
        };
        assert_eq!(
            Selection::ids(["a", "b"])
                .within(own.clone())
                .to_sql()
                .as_deref(),
            Some("id IN ('a', 'b') AND (memory_scope = 'public' OR memory_scope IS NULL)")
        );
        assert_eq!(
            Selection::ids(Vec::<String>::new()).to_sql().as_deref(),
            Some("false")
        );
        let both = Selection {
            conversation: Some("c:1".into()),
            ..Selection::scope("work")
        };
        assert_eq!(
            both.to_sql().as_deref(),
            Some("conversation_id = 'c:1' AND memory_scope = 'work'")
        );
        assert_eq!(
            Selection::ids(["x"]).and_sql("conversation_id = 'c'"),
            "id IN ('x') AND (conversation_id = 'c')"
        );
        assert_eq!(
            UNSCOPED,
            format!("{COL_MEMORY_SCOPE} IS NULL OR btrim({COL_MEMORY_SCOPE}) = ''")
        );
        assert_eq!(
            BACKFILLED,
            format!(
                "{} = 'backfill' AND NOT ({UNSCOPED})",
                crate::store::schema::COL_SCOPE_SOURCE
            )
        );
    }

    #[test]
    fn literal_escaping() {
        assert_eq!(sql_literal("a'b"), "'a''b'");
        assert_eq!(sql_literal("''"), "''''''");
        assert_eq!(sql_literal(""), "''");
        assert_eq!(sql_literal("家人"), "'家人'");
    }

    #[test]
    fn sql_of_scopes_and_expiry() {
        let f = |scopes, alive_at| {
            RowFilter {
                scopes,
                alive_at,
                created: None,
                tier: None,
            }
            .to_sql()
        };
        assert_eq!(
            f(set(&["public"], false), None).as_deref(),
            Some("memory_scope = 'public'")
        );
        assert_eq!(
            f(set(&["家人", "public"], false), None).as_deref(),
            Some("memory_scope IN ('家人', 'public')")
        );
        assert_eq!(
            f(set(&["public"], true), None).as_deref(),
            Some("(memory_scope = 'public' OR memory_scope IS NULL)")
        );
        assert_eq!(f(None, None), None);
        let now = DateTime::parse_from_rfc3339("2026-01-02T03:04:05.123456789Z")
            .unwrap()
            .with_timezone(&Utc);
        let alive =
            "(expires_at IS NULL OR expires_at > arrow_cast('2026-01-02T03:04:05.123456Z', \
                     'Timestamp(Microsecond, Some(\"UTC\"))'))";
        assert_eq!(f(None, Some(now)).as_deref(), Some(alive));
        assert_eq!(
            f(set(&["a"], false), Some(now)),
            Some(format!("(memory_scope = 'a') AND {alive}"))
        );
    }

    #[test]
    fn column_terms_match_the_rule() {
        let now = Utc::now();
        let f = RowFilter {
            scopes: set(&["a", "public"], false),
            alive_at: Some(now),
            created: None,
            tier: None,
        };
        assert!(f.admits_scope(Some("a")) && f.admits_scope(Some("public")));
        assert!(!f.admits_scope(Some("b")) && !f.admits_scope(None) && !f.admits_scope(Some("")));
        let t = now.timestamp_micros();
        assert!(f.admits_expiry(None) && f.admits_expiry(Some(t + 1)));
        assert!(!f.admits_expiry(Some(t)), "expiring exactly now is expired");
        assert!(RowFilter::ALL.admits_scope(None) && RowFilter::ALL.admits_expiry(Some(0)));
    }
}
