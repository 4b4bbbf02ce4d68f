//! The recall prefilter (DESIGN rule 7), built in exactly one place.

use crate::config::ScopeFilterMode;

use super::ScopeName;
use crate::store::ScopeSet;

/// Column holding a row's scope.
pub const SCOPE_COLUMN: &str = "memory_scope";

/// A single-quoted SQL string literal with `'` doubled.
///
/// Defence in depth: `ScopeName` already forbids quotes, but the escaping must not rely on it.
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

/// The scopes a recall in `current` may read: `public` sees only `public`; any other scope
/// sees itself and `public`; migration mode also admits legacy NULL-scope rows. `None` means
/// no filter (the `disabled` rollback switch). [`recall_predicate`] is this set as SQL.
pub fn recall_scopes(
    current: &ScopeName,
    migration_mode_on: bool,
    filter: ScopeFilterMode,
) -> Option<ScopeSet> {
    if filter == ScopeFilterMode::Disabled {
        return None;
    }
    let mut names = vec![current.as_str().to_owned()];
    if !current.is_public() {
        names.push(ScopeName::public().as_str().to_owned());
    }
    Some(ScopeSet {
        names,
        null: migration_mode_on,
    })
}

/// The DataFusion filter LanceDB applies as a prefilter for a recall in `current`:
/// [`recall_scopes`] written as SQL.
pub fn recall_predicate(
    current: &ScopeName,
    migration_mode_on: bool,
    filter: ScopeFilterMode,
) -> Option<String> {
    recall_scopes(current, migration_mode_on, filter).map(|set| scope_set_sql(&set))
}

fn scope_set_sql(set: &ScopeSet) -> String {
    let listed: Vec<String> = set.names.iter().map(|n| sql_literal(n)).collect();
    let visible = match listed.as_slice() {
        [one] => format!("{SCOPE_COLUMN} = {one}"),
        many => format!("{SCOPE_COLUMN} IN ({})", many.join(", ")),
    };
    if set.null {
        format!("({visible} OR {SCOPE_COLUMN} IS NULL)")
    } else {
        visible
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(s: &str) -> ScopeName {
        ScopeName::parse(s).unwrap()
    }

    #[test]
    fn literal_escaping() {
        assert_eq!(sql_literal("a'b"), "'a''b'");
        assert_eq!(sql_literal("''"), "''''''");
        assert_eq!(sql_literal(""), "''");
        assert_eq!(sql_literal("家人"), "'家人'");
    }

    #[test]
    fn predicates() {
        let e = ScopeFilterMode::Enforce;
        assert_eq!(
            recall_predicate(&ScopeName::public(), false, e).as_deref(),
            Some("memory_scope = 'public'")
        );
        assert_eq!(
            recall_predicate(&scope("家人"), false, e).as_deref(),
            Some("memory_scope IN ('家人', 'public')")
        );
        assert_eq!(
            recall_predicate(&ScopeName::public(), true, e).as_deref(),
            Some("(memory_scope = 'public' OR memory_scope IS NULL)")
        );
        assert_eq!(
            recall_predicate(&scope("work_team-2"), true, e).as_deref(),
            Some("(memory_scope IN ('work_team-2', 'public') OR memory_scope IS NULL)")
        );
        for migration in [false, true] {
            for s in [ScopeName::public(), scope("家人")] {
                assert_eq!(
                    recall_predicate(&s, migration, ScopeFilterMode::Disabled),
                    None
                );
            }
        }
    }
}
