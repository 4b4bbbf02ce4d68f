//! What a conversation may read (docs/design.md rule 7), decided in exactly one place.
//!
//! `public` reads only `public`; any other scope reads itself and `public`; while migration
//! mode is on, legacy rows without a scope are readable too; expired rows never are; and
//! `scope_filter: disabled` (the rollback switch) drops the scope part. `scope` resolved the
//! conversation to its scope before this; the store applies the result, as SQL inside
//! LanceDB or column by column in the resident copy, from this one [`RowFilter`].

use chrono::{DateTime, Utc};

use crate::config::ScopeFilterMode;
use crate::scope::ScopeName;
use crate::store::{RowFilter, ScopeSet};

/// The rows a recall (or browse) in `current` may return, alive at `now`.
pub fn recall_filter(
    current: &ScopeName,
    migration_mode_on: bool,
    mode: ScopeFilterMode,
    now: DateTime<Utc>,
) -> RowFilter {
    let scopes = (mode != ScopeFilterMode::Disabled).then(|| {
        let mut names = vec![current.as_str().to_owned()];
        if !current.is_public() {
            names.push(ScopeName::public().as_str().to_owned());
        }
        ScopeSet {
            names,
            null: migration_mode_on,
        }
    });
    RowFilter {
        scopes,
        alive_at: Some(now),
        created: None,
        tier: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(s: &str) -> ScopeName {
        ScopeName::parse(s).unwrap()
    }

    /// The scope part of the SQL, for readability.
    fn sql(current: &ScopeName, migration: bool, mode: ScopeFilterMode) -> Option<String> {
        RowFilter {
            alive_at: None,
            created: None,
            ..recall_filter(current, migration, mode, Utc::now())
        }
        .to_sql()
    }

    #[test]
    fn public_reads_public_others_read_themselves_and_public() {
        let e = ScopeFilterMode::Enforce;
        assert_eq!(
            sql(&ScopeName::public(), false, e).as_deref(),
            Some("memory_scope = 'public'")
        );
        assert_eq!(
            sql(&scope("家人"), false, e).as_deref(),
            Some("memory_scope IN ('家人', 'public')")
        );
        assert_eq!(
            sql(&ScopeName::public(), true, e).as_deref(),
            Some("(memory_scope = 'public' OR memory_scope IS NULL)")
        );
        assert_eq!(
            sql(&scope("work_team-2"), true, e).as_deref(),
            Some("(memory_scope IN ('work_team-2', 'public') OR memory_scope IS NULL)")
        );
        for migration in [false, true] {
            for s in [ScopeName::public(), scope("家人")] {
                let f = recall_filter(&s, migration, ScopeFilterMode::Disabled, Utc::now());
                assert_eq!(f.scopes, None);
                assert!(
                    f.alive_at.is_some(),
                    "expired rows stay hidden when disabled"
                );
            }
        }
    }

    #[test]
    fn another_scope_and_expired_rows_are_never_read() {
        let now = Utc::now();
        let f = recall_filter(&scope("家人"), false, ScopeFilterMode::Enforce, now);
        assert!(f.admits_scope(Some("家人")) && f.admits_scope(Some("public")));
        assert!(!f.admits_scope(Some("工作")) && !f.admits_scope(None));
        assert!(!f.admits_expiry(Some(now.timestamp_micros())));
    }
}
