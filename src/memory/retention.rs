//! Memory life cycle: when a new memory expires.
//!
//! Expiry is decided once, when a memory is written (from an explicit `expires_at` or the TTL
//! of its type), and stored in the row. Recall hides a row as soon as its time has passed, in
//! the same filter as the scope (`read_filter`, applied by `store::filter`), so an expired
//! memory is never recalled even before the sweeper has erased it.
//!
//! A memory the rules without an LLM made of a chat message (`working::recurrence`,
//! `working::restatement`) is the exception that moves: the rules judge a message by its shape
//! and by how recalls use it, and on the group-chat bench a third of what they kept was
//! chatter a wrong recall had put first twice. Such a memory lives
//! `retention.rule_made_ttl_days` (30) and each recall that returns it pushes that out again:
//! what the bot keeps needing stays, what nobody asks about again fades. Its `reasoning` says
//! which rule made it ([`RULE_MADE_REASONINGS`]), so the recall's write-back finds it with no
//! column of its own.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};

use super::MemoryError;
use crate::config::RetentionConfig;

/// The `reasoning` of a memory the threshold rule made (a message recalled again).
pub const RECALLED_AGAIN_REASONING: &str = "said in the chat and recalled again (working memory)";
/// The `reasoning` of a memory the restatement rule made (a second member said it).
pub const RESTATED_REASONING: &str =
    "said in the chat and stated again by another member (working memory)";
/// The `reasoning` of every memory a rule without an LLM made.
pub const RULE_MADE_REASONINGS: [&str; 2] = [RECALLED_AGAIN_REASONING, RESTATED_REASONING];
/// How far short of the rule-made TTL a memory's expiry may fall before a recall pushes it
/// out: a rule-made memory recalled all day long is one row update a day.
pub const RULE_MADE_SLACK: Duration = Duration::days(1);

/// TTLs per memory type, from `retention.*`.
#[derive(Debug, Clone, Default)]
pub struct Retention {
    ttl: BTreeMap<String, Duration>,
    /// How long a memory a rule without an LLM made lives unless recalled again.
    pub rule_made_ttl: Option<Duration>,
    /// How often the maintenance process erases expired rows.
    pub sweep_interval: std::time::Duration,
    /// Recalls push returned memories' expiry out to now + their type's TTL.
    pub refresh_on_recall: bool,
}

impl Retention {
    pub(crate) fn from_config(config: &RetentionConfig) -> Retention {
        let ttl = config
            .ttl_days
            .iter()
            .filter(|(_, days)| **days > 0)
            .map(|(t, days)| (t.clone(), Duration::days(i64::from(*days))))
            .collect();
        Retention {
            ttl,
            sweep_interval: std::time::Duration::from_secs(config.sweep_interval_secs.max(1)),
            refresh_on_recall: config.refresh_on_recall,
            rule_made_ttl: (config.rule_made_ttl_days > 0)
                .then(|| Duration::days(i64::from(config.rule_made_ttl_days))),
        }
    }

    /// Whether a recall that returns a memory with this `reasoning` and `expires_at` (RFC 3339)
    /// should push its expiry out: a rule-made memory whose expiry falls a day or more
    /// ([`RULE_MADE_SLACK`]) short of now + the rule-made TTL. The rest of the time a recall
    /// of it writes nothing.
    pub(crate) fn rule_made_due(
        &self,
        reasoning: Option<&str>,
        expires_at: Option<&str>,
        now: DateTime<Utc>,
    ) -> bool {
        let (Some(ttl), Some(reasoning), Some(expires_at)) =
            (self.rule_made_ttl, reasoning, expires_at)
        else {
            return false;
        };
        RULE_MADE_REASONINGS.contains(&reasoning)
            && DateTime::parse_from_rfc3339(expires_at)
                .is_ok_and(|t| t.with_timezone(&Utc) < now + ttl - RULE_MADE_SLACK)
    }

    /// Memory types with a TTL, and the TTL.
    pub(crate) fn ttls(&self) -> impl Iterator<Item = (&str, Duration)> + '_ {
        self.ttl.iter().map(|(t, d)| (t.as_str(), *d))
    }

    /// When a memory of `memory_type` created at `created_at` expires: `explicit` if given,
    /// else the type's TTL, else never.
    pub(crate) fn expires_at(
        &self,
        memory_type: &str,
        created_at: DateTime<Utc>,
        explicit: Option<DateTime<Utc>>,
    ) -> Option<DateTime<Utc>> {
        explicit.or_else(|| self.ttl.get(memory_type).map(|ttl| created_at + *ttl))
    }
}

/// Parse a caller's `expires_at` (RFC 3339 with an offset); it must lie in the future, since
/// writing an already expired memory can only be a mistake.
pub(crate) fn parse_expires_at(
    raw: &str,
    now: DateTime<Utc>,
) -> Result<DateTime<Utc>, MemoryError> {
    let invalid = |message: String| MemoryError::InvalidInput {
        field: "expires_at",
        message,
    };
    let t = DateTime::parse_from_rfc3339(raw.trim())
        .map_err(|e| {
            invalid(format!(
                "expires_at must be an RFC 3339 time such as 2027-01-31T00:00:00Z: {e}"
            ))
        })?
        .with_timezone(&Utc);
    if t <= now {
        return Err(invalid("expires_at must be in the future".into()));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(task: u32) -> RetentionConfig {
        RetentionConfig {
            ttl_days: [("task".to_string(), task), ("knowledge".to_string(), 0)]
                .into_iter()
                .collect(),
            sweep_interval_secs: 60,
            refresh_on_recall: false,
            rule_made_ttl_days: 30,
        }
    }

    #[test]
    fn a_rule_made_memory_is_pushed_out_only_when_a_day_or_more_short() {
        let r = Retention::from_config(&config(0));
        let now = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let at = |days: i64| (now + Duration::days(days)).to_rfc3339();
        let rule = Some(RECALLED_AGAIN_REASONING);
        assert!(r.rule_made_due(rule, Some(&at(2)), now));
        assert!(!r.rule_made_due(rule, Some(&at(30)), now), "fresh");
        assert!(!r.rule_made_due(rule, None, now), "permanent");
        assert!(!r.rule_made_due(Some("the bot remembered it"), Some(&at(2)), now));
        let off = Retention {
            rule_made_ttl: None,
            ..r.clone()
        };
        assert!(!off.rule_made_due(rule, Some(&at(2)), now));
    }

    #[test]
    fn ttl_per_type_and_explicit_wins() {
        let r = Retention::from_config(&config(30));
        let t0 = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            r.expires_at("task", t0, None),
            Some(t0 + Duration::days(30))
        );
        assert_eq!(r.expires_at("knowledge", t0, None), None);
        assert_eq!(r.expires_at("event", t0, None), None);
        let later = t0 + Duration::days(2);
        assert_eq!(r.expires_at("task", t0, Some(later)), Some(later));
        assert_eq!(r.expires_at("knowledge", t0, Some(later)), Some(later));
    }

    #[test]
    fn expires_at_must_be_a_future_rfc3339_time() {
        let now = Utc::now();
        assert!(parse_expires_at("2999-01-01T00:00:00+08:00", now).is_ok());
        for bad in ["2000-01-01T00:00:00Z", "tomorrow", "2999-01-01", ""] {
            let err = parse_expires_at(bad, now).unwrap_err();
            assert!(
                matches!(
                    err,
                    MemoryError::InvalidInput {
                        field: "expires_at",
                        ..
                    }
                ),
                "{bad}"
            );
        }
    }
}
