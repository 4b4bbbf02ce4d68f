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
//! The SQL helpers every write path quotes its values with live here too, so the store needs
//! nothing from the layers above it.

use chrono::{DateTime, SecondsFormat, Utc};

use super::schema::{COL_EXPIRES_AT, COL_MEMORY_SCOPE};

/// Which rows a read may return.
#[derive(Debug, Clone, PartialEq)]
pub struct RowFilter {
    /// `None`: every scope (`scope_filter: disabled`, the rollback switch).
    pub scopes: Option<ScopeSet>,
    /// Rows whose `expires_at` is at or before this time are hidden; `None`: expiry ignored.
    pub alive_at: Option<DateTime<Utc>>,
}

/// Admitted `memory_scope` values.
#[derive(Debug, Clone, PartialEq)]
pub struct ScopeSet {
    pub names: Vec<String>,
    /// Whether rows with no scope (legacy, NULL) are admitted.
    pub null: bool,
}

impl RowFilter {
    /// Every row, expired or not.
    pub const ALL: RowFilter = RowFilter {
        scopes: None,
        alive_at: None,
    };

    pub fn admits_scope(&self, scope: Option<&str>) -> bool {
        match (&self.scopes, scope) {
            (None, _) => true,
            (Some(set), None) => set.null,
            (Some(set), Some(s)) => set.names.iter().any(|n| n == s),
        }
    }

    /// `expires_at` in microseconds since the epoch, as stored; NULL never expires.
    pub fn admits_expiry(&self, expires_at_micros: Option<i64>) -> bool {
        match (self.alive_at, expires_at_micros) {
            (Some(now), Some(t)) => t > now.timestamp_micros(),
            _ => true,
        }
    }

    /// The same filter as a DataFusion predicate for LanceDB; `None` when it admits every row.
    pub fn to_sql(&self) -> Option<String> {
        let scopes = self.scopes.as_ref().map(scope_set_sql);
        let alive = self.alive_at.map(alive_clause);
        match (scopes, alive) {
            (Some(s), Some(a)) => Some(format!("({s}) AND {a}")),
            (Some(s), None) => Some(s),
            (None, Some(a)) => Some(a),
            (None, None) => None,
        }
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

/// Rows still alive at `now`: NULL never expires.
pub fn alive_clause(now: DateTime<Utc>) -> String {
    format!(
        "({COL_EXPIRES_AT} IS NULL OR {COL_EXPIRES_AT} > {})",
        timestamp_literal(now)
    )
}

/// Rows that expired at or before `now`: what the sweeper erases.
pub fn expired_clause(now: DateTime<Utc>) -> String {
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
    fn literal_escaping() {
        assert_eq!(sql_literal("a'b"), "'a''b'");
        assert_eq!(sql_literal("''"), "''''''");
        assert_eq!(sql_literal(""), "''");
        assert_eq!(sql_literal("家人"), "'家人'");
    }

    #[test]
    fn sql_of_scopes_and_expiry() {
        let f = |scopes, alive_at| RowFilter { scopes, alive_at }.to_sql();
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
        };
        assert!(f.admits_scope(Some("a")) && f.admits_scope(Some("public")));
        assert!(!f.admits_scope(Some("b")) && !f.admits_scope(None) && !f.admits_scope(Some("")));
        let t = now.timestamp_micros();
        assert!(f.admits_expiry(None) && f.admits_expiry(Some(t + 1)));
        assert!(!f.admits_expiry(Some(t)), "expiring exactly now is expired");
        assert!(RowFilter::ALL.admits_scope(None) && RowFilter::ALL.admits_expiry(Some(0)));
    }
}
