//! Setting the `strength` column of many rows in one commit, each row compare-and-set against
//! the strength it is expected to have, with `last_recalled_at` set on all of them. The writer
//! reports a set that changed every listed row to its observers, so the resident copy patches
//! those rows in place instead of reloading the table.

use chrono::{DateTime, Utc};

use super::filter::{sql_literal, timestamp_literal};
use super::schema::COL_LAST_RECALLED_AT;

/// One row's strength change: written only where the row still has `expected` (any strength
/// when `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrengthChange {
    pub id: String,
    pub expected: Option<i32>,
    pub new: i32,
}

/// Strength changes committed together, and the `last_recalled_at` they all get.
#[derive(Debug, Clone)]
pub struct StrengthSet {
    pub changes: Vec<StrengthChange>,
    /// Microsecond precision, as the column stores it, so a patched copy equals a re-read.
    pub recalled_at: DateTime<Utc>,
}

impl StrengthSet {
    pub fn new(changes: Vec<StrengthChange>, recalled_at: DateTime<Utc>) -> StrengthSet {
        let recalled_at =
            DateTime::from_timestamp_micros(recalled_at.timestamp_micros()).unwrap_or(recalled_at);
        StrengthSet {
            changes,
            recalled_at,
        }
    }

    /// The update's predicate and its column values, or `None` when there is nothing to set.
    ///
    /// Rows are grouped by (expected, new), each group an `id IN (…)` term of both. Lance's SQL
    /// has no CASE, so the value is `strength + Σ CAST(id IN group AS INT) * (new - strength)`:
    /// each row's own group's new strength (a row is in one group).
    pub(super) fn update_sql(&self) -> Option<(String, Vec<(String, String)>)> {
        let mut groups: std::collections::BTreeMap<(Option<i32>, i32), Vec<String>> =
            Default::default();
        for c in &self.changes {
            groups
                .entry((c.expected, c.new))
                .or_default()
                .push(sql_literal(&c.id));
        }
        if groups.is_empty() {
            return None;
        }
        let mut predicate: Vec<String> = Vec::new();
        let mut value = String::from("strength");
        for ((expected, new), ids) in &groups {
            let rows = format!("id IN ({})", ids.join(", "));
            predicate.push(match expected {
                Some(old) => format!("({rows} AND strength = {old})"),
                None => format!("({rows})"),
            });
            value.push_str(&format!(" + CAST({rows} AS INT) * ({new} - strength)"));
        }
        let columns = vec![
            ("strength".to_string(), value),
            (
                COL_LAST_RECALLED_AT.to_string(),
                timestamp_literal(self.recalled_at),
            ),
        ];
        Some((predicate.join(" OR "), columns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_predicate_term_and_one_value_term_per_group() {
        let change = |id: &str, expected, new| StrengthChange {
            id: id.into(),
            expected,
            new,
        };
        let set = StrengthSet::new(
            vec![
                change("a", Some(50), 53),
                change("b", Some(50), 53),
                change("c", None, 20),
            ],
            Utc::now(),
        );
        let (predicate, columns) = set.update_sql().unwrap();
        assert_eq!(
            predicate,
            "(id IN ('c')) OR (id IN ('a', 'b') AND strength = 50)"
        );
        assert_eq!(
            columns[0].1,
            "strength + CAST(id IN ('c') AS INT) * (20 - strength) + CAST(id IN ('a', 'b') AS INT) * (53 - strength)"
        );
        assert_eq!(columns[1].0, COL_LAST_RECALLED_AT);
        let listed = set.changes.iter().map(|c| c.id.as_str());
        assert_eq!(crate::store::commit::distinct(listed), 3);
        assert!(StrengthSet::new(vec![], Utc::now()).update_sql().is_none());
    }
}
