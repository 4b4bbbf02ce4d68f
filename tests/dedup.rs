//! One copy of a repeated fact (issue 41, part 1; `memory::fact`, `service/remember.rs`): a
//! remember whose text folds to a memory its scope already holds reinforces that memory; two
//! different facts, or one fact in two scopes, stay two memories; two processes remembering
//! one fact at once leave one row. Real LanceDB, the real model, real `serve` processes.

use crate::common;

use std::time::Duration;

use common::serve::{post, spawn_serve};
use common::{family_map, host, FAMILY, WORK};
use serde_json::{json, Value};

const PUBLIC: &str = "default:GroupMessage:99999";

async fn remember_with(host: &scopemem::host::PluginHost, body: Value) -> Value {
    host.invoke("remember", body)
        .await
        .unwrap_or_else(|e| panic!("remember failed: {e}"))
}

/// The rows of one scope whose text is `content`, as stored.
async fn rows_with(
    host: &scopemem::host::PluginHost,
    scope: &str,
    content_prefix: &str,
) -> Vec<scopemem::store::MemoryRecord> {
    common::all_rows(host)
        .await
        .into_iter()
        .filter(|r| r.memory_scope.as_deref() == Some(scope))
        .filter(|r| r.content.starts_with(content_prefix))
        .collect()
}

#[tokio::test]
async fn a_repeated_fact_reinforces_the_memory_it_repeats() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(common::config(dir.path(), family_map())).await;
    let soon = (chrono::Utc::now() + chrono::Duration::days(10)).to_rfc3339();
    let later = (chrono::Utc::now() + chrono::Duration::days(30)).to_rfc3339();
    let first = remember_with(
        &host,
        json!({"conversation_id": FAMILY, "content": "妈妈对青霉素过敏。", "tags": ["妈妈"],
               "strength": 40, "expires_at": soon}),
    )
    .await;
    assert_eq!(first["deduplicated"], false, "{first}");
    let id = first["memory"]["id"].as_str().unwrap().to_string();

    // The same fact with other spacing, punctuation and width, from another conversation of
    // the same scope is not needed: the same conversation says it again.
    let again = remember_with(
        &host,
        json!({"conversation_id": FAMILY, "content": "妈妈 对 青霉素 过敏！！", "tags": ["过敏", "妈妈"],
               "expires_at": later}),
    )
    .await;
    assert_eq!(again["stored"], true, "{again}");
    assert_eq!(again["deduplicated"], true, "{again}");
    assert_eq!(
        again["memory"]["id"],
        id.as_str(),
        "names the existing memory"
    );
    assert_eq!(
        again["memory"]["content"], "妈妈对青霉素过敏。",
        "its text stays"
    );
    // max(40, 50 by default) + 10.
    assert_eq!(again["memory"]["strength"], 60, "{again}");
    assert_eq!(again["memory"]["tags"], json!(["妈妈", "过敏"]));

    let rows = rows_with(&host, "家人", "妈妈").await;
    assert_eq!(rows.len(), 1, "one row: {rows:?}");
    let row = &rows[0];
    assert_eq!(row.id, id);
    assert_eq!(row.strength, 60);
    assert_eq!(row.tags, vec!["妈妈".to_string(), "过敏".to_string()]);
    let expiry = row.expires_at.expect("an expiry");
    assert!(
        expiry > chrono::Utc::now() + chrono::Duration::days(29),
        "the later expiry is kept: {expiry}"
    );
    assert!(row.last_recalled_at.is_some(), "last seen is recorded");

    // A third time without an expiry: the memory no longer expires (no expiry beats a date).
    let third = remember_with(
        &host,
        json!({"conversation_id": FAMILY, "content": "妈妈对青霉素过敏", "memory_type": "knowledge"}),
    )
    .await;
    assert_eq!(third["deduplicated"], true, "{third}");
    let rows = rows_with(&host, "家人", "妈妈").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].strength, 70);
    assert_eq!(rows[0].tags, vec!["妈妈".to_string(), "过敏".to_string()]);
    assert!(rows[0].expires_at.is_none(), "{:?}", rows[0].expires_at);
    host.shutdown().await;
}

#[tokio::test]
async fn different_facts_and_one_fact_in_two_scopes_stay_apart() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(common::config(dir.path(), family_map())).await;
    let a = common::remember(&host, FAMILY, "妈妈对青霉素过敏").await;
    let b = common::remember(&host, FAMILY, "妈妈对阿莫西林过敏").await;
    assert_eq!(
        (a["deduplicated"].clone(), b["deduplicated"].clone()),
        (json!(false), json!(false))
    );
    assert_ne!(a["memory"]["id"], b["memory"]["id"]);
    // Numbers are part of the fact.
    let c = common::remember(&host, FAMILY, "会议改到3点").await;
    let d = common::remember(&host, FAMILY, "会议改到4点").await;
    assert_eq!(d["deduplicated"], false, "{c} {d}");

    // The same text in the work scope and in public: a memory each, never the family's.
    let w = common::remember(&host, WORK, "妈妈对青霉素过敏").await;
    let p = common::remember(&host, PUBLIC, "妈妈对青霉素过敏").await;
    for (r, scope) in [(&w, "工作"), (&p, "public")] {
        assert_eq!(r["deduplicated"], false, "{r}");
        assert_eq!(r["memory"]["memory_scope"], scope, "{r}");
        assert_ne!(r["memory"]["id"], a["memory"]["id"]);
    }
    assert_ne!(w["memory"]["id"], p["memory"]["id"]);
    // A family repetition reinforces the family's copy, not public's (which family also reads).
    let again = common::remember(&host, FAMILY, "妈妈对青霉素过敏。").await;
    assert_eq!(again["memory"]["id"], a["memory"]["id"], "{again}");
    assert_eq!(rows_with(&host, "public", "妈妈").await[0].strength, 50);

    // Both allergies are recalled.
    let (_, hits) = common::recall(&host, FAMILY, "妈妈对什么药过敏？").await;
    let texts: Vec<&str> = hits.iter().map(|(_, t)| t.as_str()).collect();
    for fact in ["妈妈对青霉素过敏", "妈妈对阿莫西林过敏"] {
        assert!(texts.contains(&fact), "{fact} missing from {texts:?}");
    }
    assert_eq!(rows_with(&host, "家人", "妈妈").await.len(), 2);
    host.shutdown().await;
}

/// A memory written before ids were derived from facts (or by an import) has an id of its
/// own; a repetition finds it by its text among the scope's nearest vectors.
#[tokio::test]
async fn a_fact_stored_under_an_older_id_is_found_by_its_text() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(common::config(dir.path(), family_map())).await;
    let text = "奶奶的生日是五月三号";
    let vector = common::embedder()
        .embed(scopemem::embed::TextRole::Passage, vec![text.to_string()])
        .await
        .unwrap()
        .remove(0);
    let old_id = uuid::Uuid::now_v7().to_string();
    let record = scopemem::store::MemoryRecord {
        id: old_id.clone(),
        content: text.into(),
        reasoning: None,
        tags: vec![],
        memory_type: "event".into(),
        strength: 30,
        is_active: true,
        conversation_id: Some(FAMILY.into()),
        created_at: Some(chrono::Utc::now()),
        memory_scope: Some("家人".into()),
        scope_source: Some("conversation".into()),
        expires_at: None,
        last_recalled_at: None,
        speaker_id: None,
        speaker_name: None,
        source_ids: vec![],
        about_ids: vec![],
        source_conversations: vec![],
    };
    host.memory()
        .store()
        .append(vec![(record, vector)])
        .await
        .unwrap();
    let r = common::remember(&host, FAMILY, "奶奶的生日是五月三号。").await;
    assert_eq!(r["deduplicated"], true, "{r}");
    assert_eq!(r["memory"]["id"], old_id.as_str());
    assert_eq!(rows_with(&host, "家人", "奶奶").await.len(), 1);
    host.shutdown().await;
}

/// Two `serve` processes on one table, each remembering the same fact several times at once
/// (in three spellings): one row, and every answer names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_remembering_one_fact_at_once_leave_one_row() {
    let dir = tempfile::tempdir().unwrap();
    let a = spawn_serve(dir.path(), "a", json!({})).await;
    let b = spawn_serve(dir.path(), "b", json!({})).await;
    let client = reqwest::Client::new();
    let spellings = [
        "哥哥在深圳做程序员",
        "哥哥在深圳做程序员。",
        "哥哥 在深圳 做程序员！",
    ];
    let mut calls = Vec::new();
    for i in 0..12 {
        let serve = if i % 2 == 0 { &a } else { &b };
        let body = json!({"conversation_id": FAMILY, "content": spellings[i % 3]});
        let client = client.clone();
        calls.push(async move { post(&client, serve, "/v1/remember", body).await });
    }
    let answers = futures::future::join_all(calls).await;
    let mut ids = std::collections::BTreeSet::new();
    for (code, body) in &answers {
        assert_eq!(*code, 200, "{body}");
        ids.insert(body["memory"]["id"].as_str().unwrap().to_string());
    }
    assert_eq!(ids.len(), 1, "every answer names the one memory: {ids:?}");
    let deduplicated = answers
        .iter()
        .filter(|(_, body)| body["deduplicated"] == true)
        .count();
    assert_eq!(deduplicated, 11, "{answers:?}");

    tokio::time::sleep(Duration::from_millis(800)).await; // read_consistency_ms is 500
    for serve in [&a, &b] {
        let (code, page) = post(
            &client,
            serve,
            "/v1/memories/browse",
            json!({"conversation_id": FAMILY, "limit": 50}),
        )
        .await;
        assert_eq!(code, 200, "{page}");
        assert_eq!(page["total"], 1, "one row: {page}");
    }
}

/// Two rows that are one fact in other words (MiniLM is uncased: a case change gives the same
/// vector, while the text folds differently) never both fill a recall: the newer keeps the
/// better slot and the next distinct memory takes the other.
#[tokio::test]
async fn a_recall_holds_one_fact_once_in_its_newer_wording() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(common::config(dir.path(), family_map())).await;
    let old = common::remember(&host, FAMILY, "Tom likes green tea").await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let new = common::remember(&host, FAMILY, "tom likes GREEN TEA").await;
    assert_eq!(
        new["deduplicated"], false,
        "case is not folded at remember: {new}"
    );
    assert_ne!(old["memory"]["id"], new["memory"]["id"]);
    common::remember(&host, FAMILY, "Tom plays the guitar on Sundays").await;
    common::remember(&host, FAMILY, "Tom lives in Leeds").await;
    let status = host.invoke("status", json!({})).await.unwrap();
    assert!(
        status["duplicate_bound"]["latin"]["similarity"]
            .as_f64()
            .is_some(),
        "{status}"
    );
    let r = host
        .invoke(
            "recall",
            json!({"conversation_id": FAMILY, "query": "what does Tom like to drink", "limit": 2,
                   "search": "vector"}),
        )
        .await
        .unwrap();
    let texts: Vec<&str> = r["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert_eq!(
        texts[0], "tom likes GREEN TEA",
        "the newer wording: {texts:?}"
    );
    assert!(!texts.contains(&"Tom likes green tea"), "{texts:?}");
    host.shutdown().await;
}

/// With the default model (multilingual-e5-small in-process): two facts that differ in one
/// word are both recalled, however close their vectors are.
#[tokio::test]
async fn different_facts_in_near_identical_words_are_both_recalled_with_e5() {
    let dir = tempfile::tempdir().unwrap();
    let host = scopemem::host::PluginHost::start_with(
        common::config(dir.path(), family_map()),
        None,
        common::e5(),
    )
    .await
    .expect("host starts");
    for fact in [
        "妈妈对青霉素过敏",
        "妈妈对阿莫西林过敏",
        "爸爸对花粉过敏",
        "会议改到3点",
        "会议改到4点",
    ] {
        common::remember(&host, FAMILY, fact).await;
    }
    let status = host.invoke("status", json!({})).await.unwrap();
    println!("RESULT e5 duplicate bound: {}", status["duplicate_bound"]);
    for (query, facts) in [
        (
            "妈妈对什么药过敏",
            ["妈妈对青霉素过敏", "妈妈对阿莫西林过敏"],
        ),
        ("会议改到几点", ["会议改到3点", "会议改到4点"]),
    ] {
        let r = host
            .invoke(
                "recall",
                json!({"conversation_id": FAMILY, "query": query, "limit": 5, "relevance_gate": false}),
            )
            .await
            .unwrap();
        let texts: Vec<&str> = r["memories"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap())
            .collect();
        for fact in facts {
            assert!(
                texts.contains(&fact),
                "{query}: {fact} missing from {texts:?}"
            );
        }
    }
    host.shutdown().await;
}

/// A feedback job's new memories fold like remembers, in a batch and in a job applied alone:
/// a fact the scope holds is reinforced (the job's outcome names it under `deduplicated`), the
/// same new fact from two jobs of one batch is one row, and the same text in another scope is
/// a row of its own.
#[tokio::test]
async fn feedback_new_memories_reinforce_the_fact_their_scope_holds() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(common::config(dir.path(), family_map())).await;
    let said = common::remember(&host, FAMILY, "爸爸每天早上跑步五公里").await;
    let held = said["memory"]["id"].as_str().unwrap().to_string();
    let feedback = |body: Value| {
        let host = &host;
        async move {
            host.invoke("feedback", body).await.unwrap()["job_id"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    // Queued before the worker starts: one batch.
    let repeat = feedback(json!({"conversation_id": FAMILY,
        "new_memories": [{"content": "爸爸每天早上跑步五公里！"}, {"content": "弟弟在学吉他"}]}))
    .await;
    let again = feedback(json!({"conversation_id": FAMILY,
        "new_memories": [{"content": "弟弟 在学吉他。"}]}))
    .await;
    let elsewhere = feedback(json!({"conversation_id": PUBLIC,
        "new_memories": [{"content": "爸爸每天早上跑步五公里"}]}))
    .await;
    host.start_background();
    let wait = |job: String| {
        let host = &host;
        async move {
            let o = host
                .memory()
                .feedback()
                .wait_for(&job, Duration::from_secs(60))
                .await
                .expect("the job finishes");
            assert!(o.error.is_none(), "{o:?}");
            o
        }
    };
    let o = wait(repeat).await;
    assert_eq!(o.deduplicated, vec![held.clone()], "{o:?}");
    assert_eq!(o.created.len(), 1, "{o:?}");
    let brother = o.created[0].clone();
    let o = wait(again).await;
    assert_eq!(
        (o.created.clone(), o.deduplicated.clone()),
        (vec![], vec![brother.clone()]),
        "the second job of the batch reinforces the row the first added"
    );
    let o = wait(elsewhere).await;
    assert!(o.deduplicated.is_empty() && o.created.len() == 1, "{o:?}");

    let family = rows_with(&host, "家人", "").await;
    let texts: Vec<&str> = family.iter().map(|r| r.content.as_str()).collect();
    assert_eq!(family.len(), 2, "{texts:?}");
    let dad = family.iter().find(|r| r.id == held).expect("the held fact");
    assert_eq!(dad.strength, 60, "remembered at 50, reinforced once");
    let brother_row = family.iter().find(|r| r.id == brother).expect("one row");
    // Added passive at 10, repeated once in the batch.
    assert_eq!(brother_row.strength, 20);
    assert_eq!(
        rows_with(&host, "public", "爸爸每天早上跑步").await.len(),
        1,
        "the public copy is a row of its own"
    );

    // A job with a merge (a batch of its own here, `intake::batch`): its repetition folds too.
    let a = common::remember(&host, FAMILY, "妹妹喜欢画画").await["memory"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let b = common::remember(&host, FAMILY, "妹妹每周上美术课").await["memory"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let alone = feedback(json!({"conversation_id": FAMILY, "merge_groups": [[a, b]],
        "new_memories": [{"content": "弟弟在学吉他!"}]}))
    .await;
    let o = wait(alone).await;
    assert_eq!(o.merged.len(), 1, "{o:?}");
    assert_eq!(
        (o.created.clone(), o.deduplicated.clone()),
        (vec![], vec![brother.clone()]),
        "{o:?}"
    );
    assert_eq!(rows_with(&host, "家人", "弟弟").await.len(), 1);
    host.shutdown().await;
}
