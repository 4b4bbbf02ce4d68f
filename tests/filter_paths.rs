//! One filter, two readers: for random tables, filters and clocks, LanceDB (the filter as SQL,
//! `RowFilter::to_sql`, as a prefilter) and the resident copy (the same filter column by
//! column) return exactly the same rows. The cases cover NULL and blank scopes, rows expiring
//! one microsecond before, at and after the clock, `scope_filter: disabled`, migration mode,
//! and scope sets no recall builds (empty, blank names). Real LanceDB, real resident copy.

use crate::common;

use std::time::Duration;

use chrono::{DateTime, Utc};
use scopemem::config::ScopeFilterMode;
use scopemem::memory::recall::read_filter::recall_filter;
use scopemem::scope::ScopeName;
use scopemem::store::{MemoryRecord, NearestVisible, RowFilter, ScopeSet, SearchRequest, Tier};

const DIM: usize = 8;
const ROWS: usize = 160;
const CASES: usize = 1500;
const SCOPES: [Option<&str>; 7] = [
    Some("public"),
    Some("家人"),
    Some("工作"),
    Some("游戏群"),
    None,
    Some(""),
    Some(" "),
];

/// splitmix64, seeded: the same cases on every run, and a failure names its case.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn coin(&mut self) -> bool {
        self.next().is_multiple_of(2)
    }
}

/// The clocks filters are evaluated at; rows expire around each of them.
fn clocks(base: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    [-3_600_000_000i64, -5_000_000, 0, 7_000_000, 86_400_000_000]
        .iter()
        .map(|us| base + chrono::Duration::microseconds(*us))
        .collect()
}

fn table(rng: &mut Rng, clocks: &[DateTime<Utc>]) -> Vec<(MemoryRecord, Vec<f32>)> {
    (0..ROWS)
        .map(|i| {
            let scope = SCOPES[rng.below(SCOPES.len())];
            let clock = clocks[rng.below(clocks.len())];
            let expires_at = match rng.below(5) {
                0 => None,
                1 => Some(clock - chrono::Duration::microseconds(1)),
                2 => Some(clock),
                3 => Some(clock + chrono::Duration::microseconds(1)),
                _ => Some(clock + chrono::Duration::days(30)),
            };
            let vector: Vec<f32> = (0..DIM)
                .map(|_| (rng.below(2001) as f32) / 1000.0 - 1.0)
                .collect();
            let record = MemoryRecord {
                id: format!("row-{i:03}"),
                content: format!("memory {i}"),
                reasoning: None,
                tags: vec![],
                // A working-memory message one row in three: the tier is part of the filter.
                memory_type: if rng.below(3) == 0 {
                    "message"
                } else {
                    "knowledge"
                }
                .into(),
                strength: 10,
                is_active: true,
                conversation_id: None,
                created_at: Some(clocks[0]),
                memory_scope: scope.map(String::from),
                scope_source: scope.map(|_| "conversation".to_string()),
                expires_at,
                last_recalled_at: None,
                speaker_id: None,
                speaker_name: None,
                source_ids: vec![],
                about_ids: vec![],
                source_conversations: vec![],
            };
            (record, vector)
        })
        .collect()
}

/// A filter a recall builds, or (one case in four) an arbitrary one.
fn filter(rng: &mut Rng, clocks: &[DateTime<Utc>]) -> RowFilter {
    let now = clocks[rng.below(clocks.len())];
    if rng.below(4) > 0 {
        let current = ["public", "家人", "工作", "游戏群"][rng.below(4)];
        let mode = if rng.below(5) == 0 {
            ScopeFilterMode::Disabled
        } else {
            ScopeFilterMode::Enforce
        };
        let rows = recall_filter(&ScopeName::parse(current).unwrap(), rng.coin(), mode, now);
        return match rng.below(3) {
            0 => rows,
            1 => rows.in_tier(Tier::Memories),
            _ => rows.in_tier(Tier::Messages),
        };
    }
    let scopes = (rng.below(5) > 0).then(|| ScopeSet {
        names: SCOPES
            .iter()
            .flatten()
            .filter(|_| rng.coin())
            .map(|s| s.to_string())
            .collect(),
        null: rng.coin(),
    });
    RowFilter {
        scopes,
        alive_at: rng.coin().then_some(now),
        created: None,
        tier: [None, Some(Tier::Memories), Some(Tier::Messages)][rng.below(3)],
    }
}

/// Row ids of a search, sorted.
async fn ids_of(search: &dyn NearestVisible, req: &SearchRequest) -> Vec<String> {
    let mut ids: Vec<String> = search
        .nearest(req)
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.record.id)
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn lancedb_sql_and_the_resident_copy_admit_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::test_store(dir.path(), DIM).await;
    let mut rng = Rng(2025);
    let clocks = clocks(Utc::now());
    let rows = table(&mut rng, &clocks);
    store.append(rows).await.unwrap();
    let (resident, lance) = common::resident_and_lance(&store).await;
    let copy = store.resident().clone();
    assert!(
        common::eventually(Duration::from_secs(20), || copy.stats().loads > 0).await,
        "the resident copy loads"
    );
    let mut nonempty = 0;
    // `k` is every row, so a reader's answer is the set its filter admits, whatever the
    // vector: LanceDB answers each distinct SQL once (recall-built filters repeat), and the
    // resident copy answers every case.
    let mut lance_answers: std::collections::HashMap<Option<String>, Vec<String>> =
        std::collections::HashMap::new();
    for case in 0..CASES {
        let rows = filter(&mut rng, &clocks);
        let req = SearchRequest {
            vector: (0..DIM)
                .map(|_| (rng.below(2001) as f32) / 1000.0 - 1.0)
                .collect(),
            rows: rows.clone(),
            k: ROWS,
            rescale: None,
        };
        let served = copy.stats().served;
        let from_memory = ids_of(&resident, &req).await;
        assert_eq!(
            copy.stats().served,
            served + 1,
            "case {case}: answered from memory"
        );
        let sql = rows.to_sql();
        let from_sql = match lance_answers.get(&sql) {
            Some(ids) => ids.clone(),
            None => {
                let ids = ids_of(lance.as_ref(), &req).await;
                lance_answers.insert(sql, ids.clone());
                ids
            }
        };
        assert_eq!(
            from_memory,
            from_sql,
            "case {case}: {rows:?}\nSQL: {:?}",
            rows.to_sql()
        );
        nonempty += usize::from(!from_sql.is_empty());
    }
    println!(
        "{CASES} cases, {} distinct filters asked of LanceDB",
        lance_answers.len()
    );
    // The cases are not vacuous: most filters admit some rows, and some admit none.
    assert!(
        nonempty > CASES / 2 && nonempty < CASES,
        "{nonempty} of {CASES} non-empty"
    );
    store.shutdown().await;
}
