//! Recall ranking by similarity, strength and recency (off by default).
//!
//! `score = (1 - w) * similarity + w * effective_strength / 100`, with
//! `effective_strength = strength * 0.5 ^ (days since the last recall, or since creation when
//! never recalled, / half_life)`. With `w = 0` (the default) the order is pure similarity; with a
//! half-life of 0 strength does not decay. Recalls and useful-feedback reinforcement reset the
//! clock (`last_recalled_at`), and reinforcement also raises `strength` itself, so memories in
//! use stay strong while forgotten ones fade.

use chrono::{DateTime, Utc};

use crate::config::RecallConfig;
use crate::store::MemoryRecord;

/// The ranking knobs from `recall.*`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Ranking {
    /// Weight of effective strength, in [0, 1].
    pub strength_weight: f32,
    /// Days for effective strength to halve (0: no decay).
    pub half_life_days: f32,
}

impl Ranking {
    pub(crate) fn from_config(config: &RecallConfig) -> Ranking {
        Ranking {
            strength_weight: config.strength_weight.clamp(0.0, 1.0),
            half_life_days: config.decay_half_life_days.max(0.0),
        }
    }

    /// Whether ranking differs from similarity order (and recalls must be recorded).
    pub(crate) fn weighs_strength(&self) -> bool {
        self.strength_weight > 0.0
    }

    /// Strength after decay since `r` was last recalled (or created), at `now`.
    pub(crate) fn effective_strength(&self, r: &MemoryRecord, now: DateTime<Utc>) -> f32 {
        let strength = r.strength.clamp(0, 100) as f32;
        if self.half_life_days <= 0.0 {
            return strength;
        }
        let Some(since) = r.last_recalled_at.or(r.created_at) else {
            return strength;
        };
        let days = (now - since).num_seconds().max(0) as f32 / 86_400.0;
        strength * 0.5f32.powf(days / self.half_life_days)
    }

    /// The ranking score of a candidate with `similarity` (1 − cosine distance).
    pub(crate) fn score(&self, similarity: f32, r: &MemoryRecord, now: DateTime<Utc>) -> f32 {
        let w = self.strength_weight;
        (1.0 - w) * similarity + w * self.effective_strength(r, now) / 100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(strength: i32, days_ago: i64, recalled_days_ago: Option<i64>) -> MemoryRecord {
        let now = Utc::now();
        MemoryRecord {
            id: "1".into(),
            content: "c".into(),
            reasoning: None,
            tags: vec![],
            memory_type: "knowledge".into(),
            strength,
            is_active: true,
            conversation_id: None,
            created_at: Some(now - chrono::Duration::days(days_ago)),
            memory_scope: Some("public".into()),
            scope_source: Some("unmapped".into()),
            expires_at: None,
            last_recalled_at: recalled_days_ago.map(|d| now - chrono::Duration::days(d)),
            speaker_id: None,
            speaker_name: None,
            source_ids: vec![],
            about_ids: vec![],
            source_conversations: vec![],
        }
    }

    #[test]
    fn default_is_pure_similarity() {
        let r = Ranking::default();
        assert!(!r.weighs_strength());
        assert_eq!(r.score(0.8, &record(10, 400, None), Utc::now()), 0.8);
    }

    #[test]
    fn strength_halves_per_half_life_since_the_last_recall() {
        let r = Ranking {
            strength_weight: 0.5,
            half_life_days: 30.0,
        };
        let now = Utc::now();
        let fresh = r.effective_strength(&record(80, 0, None), now);
        let month = r.effective_strength(&record(80, 30, None), now);
        let two = r.effective_strength(&record(80, 60, None), now);
        assert!((fresh - 80.0).abs() < 0.01, "{fresh}");
        assert!((month - 40.0).abs() < 0.05, "{month}");
        assert!((two - 20.0).abs() < 0.05, "{two}");
        // A recall resets the clock: created long ago, recalled today.
        let recalled = r.effective_strength(&record(80, 365, Some(0)), now);
        assert!((recalled - 80.0).abs() < 0.01, "{recalled}");
        // No half-life: no decay.
        let flat = Ranking {
            half_life_days: 0.0,
            ..r
        };
        assert_eq!(flat.effective_strength(&record(80, 365, None), now), 80.0);
    }

    #[test]
    fn weight_trades_similarity_for_strength() {
        let r = Ranking {
            strength_weight: 0.5,
            half_life_days: 0.0,
        };
        let now = Utc::now();
        let strong = r.score(0.70, &record(100, 1, None), now);
        let weak = r.score(0.75, &record(10, 1, None), now);
        assert!(strong > weak, "{strong} vs {weak}");
        assert!((strong - 0.85).abs() < 1e-6);
    }
}
