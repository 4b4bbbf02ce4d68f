//! The resident (in-memory) vector search against a real LanceDB directory: it returns what
//! LanceDB's exact prefiltered search returns for every filter, follows the writer's appends
//! and deletes without re-reading the table, and leaves a search to LanceDB whenever it is
//! behind in a way it cannot follow (another process's erase). Then through the whole service with the real model: recalls are served
//! from memory and the scopes still never leak.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use scopemem::config::ScopeFilterMode;
use scopemem::embed::{Script, ScriptRescale};
use scopemem::memory::recall::read_filter::recall_filter;
use scopemem::scope::ScopeName;
use scopemem::store::resident::ResidentSearch;
use scopemem::store::{
    FulltextSearch, Hit, LanceSearch, MemoryRecord, NearestVisible, SearchRequest, Store,
};

const DIM: usize = 32;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    fn vector(&mut self) -> Vec<f32> {
        (0..DIM)
            .map(|_| (self.next() % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    }
}

fn row(
    id: String,
    scope: Option<&str>,
    vector: Vec<f32>,
    expired: bool,
) -> (MemoryRecord, Vec<f32>) {
    let now = Utc::now();
    (
        MemoryRecord {
            id,
            content: "x".into(),
            reasoning: None,
            tags: vec![],
            memory_type: "knowledge".into(),
            strength: 10,
            is_active: true,
            conversation_id: None,
            created_at: Some(now),
            memory_scope: scope.map(String::from),
            scope_source: scope.map(|_| "conversation".to_string()),
            expires_at: Some(if expired {
                now - chrono::Duration::seconds(5)
            } else {
                now + chrono::Duration::days(1)
            }),
            last_recalled_at: None,
            speaker_id: None,
            speaker_name: None,
            source_ids: vec![],
            about_ids: vec![],
            source_conversations: vec![],
        },
        vector,
    )
}

async fn open(dir: &std::path::Path) -> Store {
    common::test_store(dir, DIM).await
}

/// 300 rows: two scopes, public, legacy NULL rows, and expired rows in each.
fn table_rows(rng: &mut Rng) -> Vec<(MemoryRecord, Vec<f32>)> {
    let scopes = [Some("家人"), Some("工作"), Some("public"), None];
    (0..300)
        .map(|i| {
            let scope = scopes[i % scopes.len()];
            row(format!("r{i}"), scope, rng.vector(), i % 7 == 0)
        })
        .collect()
}

/// The request a recall in `scope` makes.
fn request(
    vector: Vec<f32>,
    scope: &str,
    migration: bool,
    filter: ScopeFilterMode,
) -> SearchRequest {
    let scope = ScopeName::parse(scope).unwrap();
    SearchRequest {
        vector,
        rows: recall_filter(&scope, migration, filter, Utc::now()),
        k: 10,
        rescale: None,
    }
}

fn ids(hits: &[Hit]) -> Vec<String> {
    hits.iter().map(|h| h.record.id.clone()).collect()
}

/// A recall's vector search from `scope` (migration off), as row ids best first.
async fn ids_in(resident: &ResidentSearch, vector: &[f32], scope: &str) -> Vec<String> {
    let req = request(vector.to_vec(), scope, false, ScopeFilterMode::Enforce);
    ids(&resident.nearest(&req).await.unwrap())
}

async fn searches(store: &Store) -> (ResidentSearch, Arc<LanceSearch>) {
    common::resident_and_lance(store).await
}

/// The resident search answers `req` from memory with what LanceDB's exact prefiltered search
/// returns: the same rows in the same order (a swap only between rows whose distances tie to
/// within the f16 copies' rounding), none expired, every one admitted by the filter.
async fn answers_as_lancedb(
    store: &Store,
    resident: &ResidentSearch,
    lance: &LanceSearch,
    req: &SearchRequest,
    label: &str,
) {
    let served = store.resident().stats().served;
    let got = resident.nearest(req).await.unwrap();
    assert_eq!(
        store.resident().stats().served,
        served + 1,
        "answered from memory"
    );
    let want = lance.nearest(req).await.unwrap();
    assert_eq!(got.len(), want.len(), "{label}");
    for (g, w) in got.iter().zip(&want) {
        assert!(
            g.record.id == w.record.id || (g.distance - w.distance).abs() < 1e-3,
            "{label}: {:?} vs {:?}",
            ids(&got),
            ids(&want)
        );
        assert!((g.distance - w.distance).abs() < 1e-3, "{label}");
    }
    for h in &got {
        assert!(h.record.expires_at.unwrap() > Utc::now(), "no expired row");
        assert!(req.rows.admits_scope(h.record.memory_scope.as_deref()));
    }
}

async fn loaded(store: &Store) {
    let resident = store.resident().clone();
    assert!(
        common::eventually(Duration::from_secs(20), || resident.stats().loads > 0).await,
        "the resident snapshot loads in the background"
    );
}

#[tokio::test]
async fn returns_what_lancedb_returns_for_every_filter() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let mut rng = Rng(7);
    store.append(table_rows(&mut rng)).await.unwrap();
    let (resident, lance) = searches(&store).await;
    loaded(&store).await;
    let cases = [
        ("家人", false, ScopeFilterMode::Enforce),
        ("家人", true, ScopeFilterMode::Enforce),
        ("public", false, ScopeFilterMode::Enforce),
        ("public", true, ScopeFilterMode::Enforce),
        ("工作", false, ScopeFilterMode::Disabled),
    ];
    for (scope, migration, filter) in cases {
        for _ in 0..10 {
            let req = request(rng.vector(), scope, migration, filter);
            let label = format!("{scope} {migration} {filter:?}");
            answers_as_lancedb(&store, &resident, &lance, &req, &label).await;
        }
    }
}

/// A search that puts the query's other script on its scale (a Chinese question reaching an
/// English memory) scores each row by the script of its text, the same way in memory and in
/// LanceDB: half the rows are English and are lifted, and both paths return the same rows.
#[tokio::test]
async fn rescales_the_other_script_as_lancedb_does() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let mut rng = Rng(23);
    let rows: Vec<_> = table_rows(&mut rng)
        .into_iter()
        .enumerate()
        .map(|(i, (mut record, vector))| {
            record.content = if i % 2 == 0 {
                format!("第{i}条中文的记忆")
            } else {
                format!("English memory number {i}")
            };
            (record, vector)
        })
        .collect();
    store.append(rows).await.unwrap();
    let (resident, lance) = searches(&store).await;
    loaded(&store).await;
    let rescale = ScriptRescale {
        script: Script::Latin,
        mul: 0.8,
        add: 0.25,
    };
    let mut lifted = 0;
    for _ in 0..10 {
        let vector = rng.vector();
        let mut req = request(vector.clone(), "家人", true, ScopeFilterMode::Enforce);
        // k wide enough that LanceDB's rescaled pool holds every row of the table.
        req.k = 40;
        let raw = resident.nearest(&req).await.unwrap();
        req.rescale = Some(rescale);
        answers_as_lancedb(&store, &resident, &lance, &req, "rescaled").await;
        let got = resident.nearest(&req).await.unwrap();
        let english = |hits: &[Hit]| {
            hits.iter()
                .take(10)
                .filter(|h| h.record.content.starts_with("English"))
                .count()
        };
        assert!(english(&got) >= english(&raw));
        lifted += english(&got) - english(&raw);
        // An English row's score is its similarity on the query's scale.
        for h in got
            .iter()
            .filter(|h| h.record.content.starts_with("English"))
        {
            let raw_hit = raw.iter().find(|r| r.record.id == h.record.id);
            if let Some(r) = raw_hit {
                let want = r.similarity() * 0.8 + 0.25;
                assert!(
                    (h.similarity() - want).abs() < 1e-3,
                    "{} vs {want}",
                    h.similarity()
                );
            }
        }
    }
    assert!(lifted > 0, "the lift moved English rows up");
}

#[tokio::test]
async fn follows_appends_and_deletes_without_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let mut rng = Rng(11);
    store.append(table_rows(&mut rng)).await.unwrap();
    let (resident, lance) = searches(&store).await;
    loaded(&store).await;
    let loads = store.resident().stats().loads;

    // A new row is found at once, from memory, without reading the table again.
    let fresh = rng.vector();
    store
        .append(vec![row(
            "fresh".into(),
            Some("家人"),
            fresh.clone(),
            false,
        )])
        .await
        .unwrap();
    let before = store.resident().stats();
    let hits = ids_in(&resident, &fresh, "家人").await;
    assert_eq!(hits[0], "fresh");
    let after = store.resident().stats();
    assert_eq!(after.served, before.served + 1);
    assert_eq!(after.loads, loads, "appends need no reload");
    // ...and never in another scope.
    let hits = ids_in(&resident, &fresh, "工作").await;
    assert!(hits.iter().all(|id| id != "fresh"));

    // A delete: the writer reports the ids it removed, and memory answers without them.
    let rows = store.resident().stats().rows;
    store.writer().delete("id = 'fresh'".into()).await.unwrap();
    let before = store.resident().stats();
    let req = request(fresh.clone(), "家人", false, ScopeFilterMode::Enforce);
    let got = ids(&resident.nearest(&req).await.unwrap());
    assert!(got.iter().all(|id| id != "fresh"), "deleted row recalled");
    let after = store.resident().stats();
    assert_eq!(after.served, before.served + 1, "answered from memory");
    assert_eq!(after.deferred, before.deferred);
    assert_eq!(after.rows, rows - 1);
    assert_eq!(got, ids(&lance.nearest(&req).await.unwrap()));

    // An erase (the delete, a rewrite of its fragments, every older version pruned): the
    // same, although the versions a reader would need to work the ids out are gone.
    let victims: Vec<String> = got.iter().take(3).cloned().collect();
    let list: Vec<String> = victims.iter().map(|id| format!("'{id}'")).collect();
    let erased = store
        .writer()
        .erase(format!("id IN ({})", list.join(", ")))
        .await
        .unwrap();
    assert_eq!(erased.deleted, 3);
    let before = store.resident().stats();
    let got = ids(&resident.nearest(&req).await.unwrap());
    assert!(
        got.iter().all(|id| !victims.contains(id)),
        "erased row recalled"
    );
    let after = store.resident().stats();
    assert_eq!(after.served, before.served + 1, "answered from memory");
    assert_eq!(after.rows, rows - 4);
    assert_eq!(got, ids(&lance.nearest(&req).await.unwrap()));
    assert_eq!(after.loads, loads, "deletes need no reload");
}

/// Another process's deletes and strength updates are read back from the fragments they
/// name. Its erase prunes the versions that would tell which rows went: then LanceDB
/// answers until a reload catches up, and the erased row is never recalled either way.
#[tokio::test]
async fn follows_another_processes_deletes_and_defers_after_its_erase() {
    use scopemem::store::{StrengthChange, StrengthSet};
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let mut rng = Rng(14);
    store.append(table_rows(&mut rng)).await.unwrap();
    let (resident, lance) = searches(&store).await;
    loaded(&store).await;
    let loads = store.resident().stats().loads;
    let probe = rng.vector();
    let req = request(probe.clone(), "家人", false, ScopeFilterMode::Enforce);
    let first = ids(&resident.nearest(&req).await.unwrap());

    let other = open(dir.path()).await;
    let gone = first[0].clone();
    assert_eq!(
        other
            .writer()
            .delete(format!("id = '{gone}'"))
            .await
            .unwrap(),
        1
    );
    let kept = first[1].clone();
    let set = StrengthSet::new(
        vec![StrengthChange {
            id: kept.clone(),
            expected: Some(10),
            new: 42,
        }],
        Utc::now(),
    );
    assert_eq!(other.writer().set_strengths(set).await.unwrap(), 1);
    // This process sees the other's commits within the read-consistency interval.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let before = store.resident().stats();
    let hits = resident.nearest(&req).await.unwrap();
    let after = store.resident().stats();
    assert_eq!(after.served, before.served + 1, "answered from memory");
    assert_eq!(after.loads, loads, "no reload");
    assert!(
        hits.iter().all(|h| h.record.id != gone),
        "deleted row recalled"
    );
    let updated = hits.iter().find(|h| h.record.id == kept).unwrap();
    assert_eq!(updated.record.strength, 42, "the other's update followed");
    assert_eq!(ids(&hits), ids(&lance.nearest(&req).await.unwrap()));
    assert_eq!(after.rows, 299);

    // The other's erase leaves only its last version: nothing tells which rows went.
    let erased = hits[0].record.id.clone();
    other
        .writer()
        .erase(format!("id = '{erased}'"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let before = store.resident().stats();
    let got = ids(&resident.nearest(&req).await.unwrap());
    assert!(got.iter().all(|id| *id != erased), "erased row recalled");
    assert_eq!(store.resident().stats().deferred, before.deferred + 1);
    assert_eq!(got, ids(&lance.nearest(&req).await.unwrap()));
    // The reload it scheduled catches up, and memory answers again, still without the row.
    let r = store.resident().clone();
    assert!(common::eventually(Duration::from_secs(20), || r.stats().loads > loads).await);
    let served = store.resident().stats().served;
    let got = ids(&resident.nearest(&req).await.unwrap());
    assert!(got.iter().all(|id| *id != erased), "erased row recalled");
    assert_eq!(store.resident().stats().served, served + 1);
    other.shutdown().await;
}

/// Another process's remembers (a second instance on the same table) are read from the
/// fragments their appends wrote: found from memory, with no reload of the whole table.
#[tokio::test]
async fn follows_another_processes_appends_by_reading_their_fragments() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let mut rng = Rng(13);
    store.append(table_rows(&mut rng)).await.unwrap();
    let (resident, lance) = searches(&store).await;
    loaded(&store).await;
    let loads = store.resident().stats().loads;

    let other = open(dir.path()).await;
    let fresh: Vec<Vec<f32>> = (0..3).map(|_| rng.vector()).collect();
    for (i, v) in fresh.iter().enumerate() {
        other
            .append(vec![
                row(format!("other{i}"), Some("家人"), v.clone(), false),
                row(format!("other{i}w"), Some("工作"), rng.vector(), false),
            ])
            .await
            .unwrap();
    }
    // This process sees the other's commits within the read-consistency interval.
    tokio::time::sleep(Duration::from_millis(600)).await;
    for (i, v) in fresh.iter().enumerate() {
        let before = store.resident().stats();
        let req = request(v.clone(), "家人", false, ScopeFilterMode::Enforce);
        let got = resident.nearest(&req).await.unwrap();
        let after = store.resident().stats();
        assert_eq!(got[0].record.id, format!("other{i}"));
        assert_eq!(after.served, before.served + 1, "answered from memory");
        assert_eq!(ids(&got), ids(&lance.nearest(&req).await.unwrap()));
        assert!(ids(&got).iter().all(|id| !id.ends_with('w')), "no 工作 row");
    }
    assert_eq!(store.resident().stats().loads, loads, "no reload");
    assert_eq!(store.resident().stats().rows, 306);
    other.shutdown().await;
}

#[tokio::test]
async fn follows_compaction_and_strength_sets_without_a_reload() {
    use scopemem::store::{StrengthChange, StrengthSet};
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let mut rng = Rng(12);
    // Several appends (several fragments), so a full maintenance pass has work to do.
    for round in 0..3 {
        let mut rows = table_rows(&mut rng);
        for (r, _) in &mut rows {
            r.id = format!("{round}-{}", r.id);
        }
        store.append(rows).await.unwrap();
    }
    let (resident, lance) = searches(&store).await;
    loaded(&store).await;
    let loads = store.resident().stats().loads;
    let version = store.table().version().await.unwrap();

    // Compaction and the index builds commit new versions that leave every row as it was:
    // their transactions say so, and the snapshot only moves its version.
    store.writer().maintain_with(true).await.unwrap();
    assert!(
        store.table().version().await.unwrap() > version,
        "maintenance committed"
    );
    let probe = rng.vector();
    let family = request(probe.clone(), "家人", false, ScopeFilterMode::Enforce);
    let before = store.resident().stats();
    let got = ids_in(&resident, &probe, "家人").await;
    let after = store.resident().stats();
    assert_eq!(after.served, before.served + 1, "served from memory");
    assert_eq!(after.deferred, before.deferred);
    assert_eq!(after.loads, loads, "no reload after compaction");
    let want = ids(&lance.nearest(&family).await.unwrap());
    assert_eq!(got, want, "still LanceDB's answer");

    // A strength set that changed every row it lists is patched into memory.
    let hits = resident.nearest(&family).await.unwrap();
    let (a, b) = (hits[0].record.id.clone(), hits[1].record.id.clone());
    let change = |id: &str, expected, new| StrengthChange {
        id: id.to_string(),
        expected,
        new,
    };
    let set = StrengthSet::new(
        vec![change(&a, Some(10), 77), change(&b, None, 5)],
        Utc::now(),
    );
    assert_eq!(store.writer().set_strengths(set).await.unwrap(), 2);
    let before = store.resident().stats();
    let hits = resident.nearest(&family).await.unwrap();
    assert_eq!(store.resident().stats().served, before.served + 1);
    let from_lance = store
        .get_by_ids(&[a.clone(), b.clone()], None)
        .await
        .unwrap();
    for h in hits.iter().filter(|h| h.record.id == a || h.record.id == b) {
        let stored = from_lance.iter().find(|r| r.id == h.record.id).unwrap();
        assert_eq!(h.record.strength, stored.strength);
        assert_eq!(h.record.last_recalled_at, stored.last_recalled_at);
    }
    assert_eq!(hits[0].record.strength, 77);

    // A set that misses a row (compare-and-set failed) is not reported: LanceDB answers.
    let set = StrengthSet::new(vec![change(&a, Some(10), 99)], Utc::now());
    assert_eq!(store.writer().set_strengths(set).await.unwrap(), 0);
    assert_eq!(store.resident().stats().loads, loads, "no reload so far");
}

#[tokio::test]
async fn follows_the_backfill_moving_null_rows_to_public() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let mut rng = Rng(14);
    let rows = table_rows(&mut rng);
    let legacy: Vec<(String, Vec<f32>)> = rows
        .iter()
        .filter(|(r, _)| r.memory_scope.is_none() && r.expires_at.unwrap() > Utc::now())
        .map(|(r, v)| (r.id.clone(), v.clone()))
        .collect();
    store.append(rows).await.unwrap();
    let (resident, lance) = searches(&store).await;
    loaded(&store).await;
    let loads = store.resident().stats().loads;
    let (moved, _) = legacy.split_at(legacy.len() / 2);
    let filled = store
        .writer()
        .fill_blank(
            moved.iter().map(|(id, _)| id.clone()).collect(),
            vec![
                ("memory_scope".into(), "public".into()),
                ("scope_source".into(), "backfill".into()),
            ],
        )
        .await
        .unwrap();
    assert_eq!(filled as usize, moved.len());
    for (id, vector) in moved.iter().take(5) {
        for (scope, migration) in [("家人", false), ("工作", true)] {
            let req = request(vector.clone(), scope, migration, ScopeFilterMode::Enforce);
            let before = store.resident().stats();
            let got = resident.nearest(&req).await.unwrap();
            assert_eq!(
                store.resident().stats().served,
                before.served + 1,
                "from memory"
            );
            assert_eq!(got[0].record.id, *id, "a backfilled row is public now");
            assert_eq!(got[0].record.memory_scope.as_deref(), Some("public"));
            assert_eq!(got[0].record.scope_source.as_deref(), Some("backfill"));
            let want = lance.nearest(&req).await.unwrap();
            assert_eq!(ids(&got), ids(&want), "LanceDB's answer, {scope}");
        }
    }
    // A row left NULL is still invisible without migration mode.
    let (still_null, vector) = &legacy[legacy.len() - 1];
    let got = ids_in(&resident, vector, "家人").await;
    assert!(!got.contains(still_null));
    assert_eq!(store.resident().stats().loads, loads, "no reload");
    assert_eq!(store.resident().stats().rows, 300, "rows moved, not added");
}

#[tokio::test]
async fn keyword_matches_are_lancedbs_and_respect_the_filter() {
    use scopemem::store::{KeywordMatching, KeywordRequest};
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let mut rng = Rng(13);
    let words = [
        "orchids", "garden", "birthday", "ZX-99812", "兰花", "外婆", "deploy", "freeze",
    ];
    let scopes = [Some("家人"), Some("工作"), Some("public"), None];
    let rows: Vec<(MemoryRecord, Vec<f32>)> = (0..240)
        .map(|i| {
            let (mut r, v) = row(format!("k{i}"), scopes[i % 4], rng.vector(), i % 11 == 0);
            // Two or three words per row, some repeated, of varying length.
            r.content = format!(
                "{} {} {}",
                words[i % 8],
                words[(i / 8) % 8],
                if i % 3 == 0 { words[(i / 3) % 8] } else { "" }
            );
            if i % 5 == 0 {
                r.tags = vec!["Grandma".into()];
            }
            (r, v)
        })
        .collect();
    store.append(rows).await.unwrap();
    scopemem::store::maintenance::indexes::ensure_fulltext_indexes(store.table())
        .await
        .unwrap();
    let (resident, _) = searches(&store).await;
    loaded(&store).await;
    let lance = FulltextSearch::new(store.table().clone());
    for (query, scope, migration) in [
        ("orchids", "家人", false),
        ("garden birthday", "工作", false),
        ("zx 99812", "家人", true),
        ("外婆喜欢兰花", "家人", false),
        ("grandma", "工作", true),
        ("the", "家人", false),
    ] {
        let filter = request(vec![0.0; DIM], scope, migration, ScopeFilterMode::Enforce);
        let req = KeywordRequest {
            text: query.into(),
            rows: filter.rows.clone(),
            k: 500,
        };
        let before = store.resident().stats().keyword_served;
        let got = KeywordMatching::matching(&resident, &req).await.unwrap();
        assert_eq!(
            store.resident().stats().keyword_served,
            before + 1,
            "{query}"
        );
        let want = lance.matching(&req).await.unwrap();
        let mut got_ids: Vec<&str> = got.iter().map(|h| h.record.id.as_str()).collect();
        let mut want_ids: Vec<&str> = want.iter().map(|h| h.record.id.as_str()).collect();
        got_ids.sort();
        want_ids.sort();
        // The same rows match; the scores are plain BM25 over content and tags together, where
        // Lance scores each column on its own, so the order may differ.
        assert_eq!(got_ids, want_ids, "the same rows match {query:?}");
        for h in &got {
            assert!(h.record.expires_at.unwrap() > Utc::now(), "no expired row");
            assert!(filter.rows.admits_scope(h.record.memory_scope.as_deref()));
        }
        // Best first, by a score that only falls.
        assert!(got.windows(2).all(|w| w[0].score >= w[1].score));
    }
}

#[tokio::test]
async fn recalls_are_served_from_memory_and_scopes_do_not_leak() {
    use common::*;
    let dir = tempfile::tempdir().unwrap();
    let host = host(config(dir.path(), family_map())).await;
    remember(
        &host,
        FAMILY,
        "Grandma's birthday dinner is at the lake house",
    )
    .await;
    remember(&host, WORK, "The quarterly report is due on Friday").await;
    remember(&host, PRIVATE, "The office is closed on public holidays").await;
    let store = host.memory().store().clone();
    loaded(&store).await;
    // Rows remembered after the load come through the writer's chain.
    remember(&host, FAMILY, "Grandpa plants tomatoes every spring").await;
    remember(&host, WORK, "The deploy freeze starts on Thursday").await;
    let served = store.resident().stats().served;
    let keyword_served = store.resident().stats().keyword_served;
    // The keyword half too: an exact word from another scope is never found.
    let words = |conversation: &'static str| {
        let host = &host;
        async move {
            let r = host
                .invoke(
                    "recall",
                    serde_json::json!({"conversation_id": conversation, "query": "tomatoes", "search": "keyword"}),
                )
                .await
                .unwrap();
            r["memories"].as_array().unwrap().len()
        }
    };
    assert_eq!(words(FAMILY).await, 1);
    assert_eq!(words(WORK).await, 0);
    assert_eq!(store.resident().stats().keyword_served, keyword_served + 2);
    for _ in 0..3 {
        let (scope, hits) = recall(&host, FAMILY, "what is happening").await;
        assert_eq!(scope, "家人");
        assert_eq!(hits.len(), 3, "{hits:?}");
        assert!(hits
            .iter()
            .all(|(s, _)| matches!(s.as_deref(), Some("家人" | "public"))));
        let (scope, hits) = recall(&host, WORK, "what is happening").await;
        assert_eq!(scope, "工作");
        assert_eq!(hits.len(), 3, "{hits:?}");
        assert!(hits
            .iter()
            .all(|(s, _)| matches!(s.as_deref(), Some("工作" | "public"))));
    }
    let status = host
        .invoke("status", serde_json::json!(null))
        .await
        .unwrap();
    assert!(
        status["resident_search"]["served"].as_u64().unwrap() >= served + 6,
        "{status}"
    );
    assert_eq!(status["resident_search"]["rows"], 5);
}

/// A table written with `memory_scope` as LargeUtf8 or Utf8View and `expires_at` in
/// milliseconds (another writer's choice; LanceDB's SQL reads both). The resident copy reads
/// the same values and so returns what LanceDB returns, from memory. Before, a bare downcast
/// read every scope as NULL and every expiry as "never": the public recall in migration mode
/// returned other scopes' and expired rows.
#[tokio::test]
async fn reads_wider_text_and_millisecond_times_as_lancedb_does() {
    use lancedb::arrow::arrow_schema::{DataType, Field, Schema, TimeUnit};
    use scopemem::store::record::to_batch;
    use scopemem::store::schema::{memories_schema, COL_EXPIRES_AT, COL_MEMORY_SCOPE};
    for scope_type in [DataType::LargeUtf8, DataType::Utf8View] {
        let dir = tempfile::tempdir().unwrap();
        let fields: Vec<Field> = memories_schema(DIM)
            .fields()
            .iter()
            .map(|f| match f.name().as_str() {
                COL_MEMORY_SCOPE => Field::new(COL_MEMORY_SCOPE, scope_type.clone(), true),
                COL_EXPIRES_AT => Field::new(
                    COL_EXPIRES_AT,
                    DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
                    true,
                ),
                _ => f.as_ref().clone(),
            })
            .collect();
        let schema = Arc::new(Schema::new(fields));
        let mut rng = Rng(23);
        let batch = to_batch(&schema, &table_rows(&mut rng)).unwrap();
        let conn = lancedb::connect(dir.path().to_str().unwrap())
            .execute()
            .await
            .unwrap();
        conn.create_table("memories", batch)
            .execute()
            .await
            .unwrap();
        let store = open(dir.path()).await;
        let stored = store.table().schema().await.unwrap();
        let scope_stored = stored
            .field_with_name(COL_MEMORY_SCOPE)
            .unwrap()
            .data_type();
        // Lance writes Utf8View as Utf8; LargeUtf8 and millisecond timestamps it keeps.
        let kept = if scope_type == DataType::Utf8View {
            DataType::Utf8
        } else {
            scope_type.clone()
        };
        assert_eq!(scope_stored, &kept, "the table keeps its own type");
        assert_eq!(
            stored.field_with_name(COL_EXPIRES_AT).unwrap().data_type(),
            &DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))
        );
        let (resident, lance) = searches(&store).await;
        loaded(&store).await;
        for (scope, migration) in [("家人", false), ("public", true), ("工作", true)] {
            for _ in 0..5 {
                let req = request(rng.vector(), scope, migration, ScopeFilterMode::Enforce);
                let label = format!("{scope_type} {scope} {migration}");
                answers_as_lancedb(&store, &resident, &lance, &req, &label).await;
            }
        }
    }
}
