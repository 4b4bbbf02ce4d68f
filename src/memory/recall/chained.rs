//! Chained recall (docs/design.md section 5): entity matches first, then a per-type quota, so an
//! injected block covers several kinds of memory instead of ten near-duplicates.

use std::collections::{HashMap, HashSet};

use crate::memory::model::ScoredMemory;

#[derive(Debug, Clone, Copy)]
pub struct ChainedLimits {
    pub per_entity: usize,
    pub per_type_limit: usize,
    pub final_limit: usize,
}

/// Select from `pool` (best first): up to `per_entity` memories whose tags contain each entity
/// (case-insensitive), then the rest in order with at most `per_type_limit` per memory type,
/// truncated to `final_limit`.
pub(crate) fn select(
    pool: Vec<ScoredMemory>,
    entities: &[String],
    limits: ChainedLimits,
) -> Vec<ScoredMemory> {
    let mut taken = vec![false; pool.len()];
    let mut order: Vec<usize> = Vec::new();
    let mut seen_entities = HashSet::new();
    for entity in entities {
        let e = entity.trim().to_lowercase();
        if e.is_empty() || !seen_entities.insert(e.clone()) {
            continue;
        }
        let mut n = 0;
        for (i, m) in pool.iter().enumerate() {
            if n >= limits.per_entity {
                break;
            }
            if !taken[i] && m.memory.tags.iter().any(|t| t.to_lowercase() == e) {
                taken[i] = true;
                order.push(i);
                n += 1;
            }
        }
    }
    let mut per_type: HashMap<&str, usize> = HashMap::new();
    for i in &order {
        *per_type
            .entry(pool[*i].memory.memory_type.as_str())
            .or_default() += 1;
    }
    for (i, m) in pool.iter().enumerate() {
        if taken[i] {
            continue;
        }
        let count = per_type.entry(m.memory.memory_type.as_str()).or_default();
        if *count < limits.per_type_limit {
            *count += 1;
            taken[i] = true;
            order.push(i);
        }
    }
    order.truncate(limits.final_limit);
    let mut slots: Vec<Option<ScoredMemory>> = pool.into_iter().map(Some).collect();
    order.into_iter().filter_map(|i| slots[i].take()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::model::Memory;

    fn m(id: &str, ty: &str, tags: &[&str], score: f32) -> ScoredMemory {
        ScoredMemory {
            memory: Memory {
                id: id.into(),
                content: id.into(),
                reasoning: None,
                tags: tags.iter().map(|t| t.to_string()).collect(),
                memory_type: ty.into(),
                strength: 1,
                is_active: true,
                memory_scope: Some("public".into()),
                scope_source: Some("unmapped".into()),
                created_at: None,
                expires_at: None,
                speaker_id: None,
                speaker_name: None,
                source_ids: vec![],
                about_ids: vec![],
            },
            score,
        }
    }

    fn ids(v: &[ScoredMemory]) -> Vec<&str> {
        v.iter().map(|m| m.memory.id.as_str()).collect()
    }

    #[test]
    fn entities_first_then_type_quota_then_final_limit() {
        let pool = vec![
            m("a", "event", &[], 0.9),
            m("b", "event", &[], 0.8),
            m("c", "event", &[], 0.7),
            m("d", "knowledge", &["Alice"], 0.6),
            m("e", "skill", &["alice"], 0.5),
            m("f", "knowledge", &[], 0.4),
        ];
        let limits = ChainedLimits {
            per_entity: 1,
            per_type_limit: 2,
            final_limit: 5,
        };
        let out = select(pool, &["ALICE".into()], limits);
        // d is the best alice match; then the pool in order with <=2 events.
        assert_eq!(ids(&out), vec!["d", "a", "b", "e", "f"]);
    }

    #[test]
    fn no_entities_is_type_quota_only() {
        let pool = vec![
            m("a", "task", &[], 0.9),
            m("b", "task", &[], 0.8),
            m("c", "event", &[], 0.1),
        ];
        let limits = ChainedLimits {
            per_entity: 3,
            per_type_limit: 1,
            final_limit: 10,
        };
        assert_eq!(ids(&select(pool, &[], limits)), vec!["a", "c"]);
    }
}
