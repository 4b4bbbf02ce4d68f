//! The plan's acceptance lines (seed section 9) for new tables, against a real LanceDB
//! directory and the real embedding model.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::json;

fn scopes_seen(hits: &[(Option<String>, String)]) -> Vec<String> {
    let mut s: Vec<String> = hits
        .iter()
        .map(|(s, _)| s.clone().unwrap_or_else(|| "NULL".into()))
        .collect();
    s.sort();
    s.dedup();
    s
}

#[tokio::test]
async fn public_everywhere_family_only_in_family() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(config(dir.path(), family_map())).await;
    let fam = remember(&host, FAMILY, "Grandma's birthday dinner is on Saturday").await;
    assert_eq!(fam["memory"]["memory_scope"], "家人");
    assert_eq!(fam["memory"]["scope_source"], "conversation");
    let work = remember(&host, WORK, "The launch review moved to Thursday").await;
    assert_eq!(work["memory"]["memory_scope"], "工作");
    let public = remember(&host, PRIVATE, "The user likes spicy hotpot").await;
    assert_eq!(public["memory"]["memory_scope"], "public");
    assert_eq!(public["memory"]["scope_source"], "unmapped");

    let (scope, hits) = recall(&host, FAMILY, "what is happening this week").await;
    assert_eq!(scope, "家人");
    assert_eq!(scopes_seen(&hits), vec!["public", "家人"]);

    let (scope, hits) = recall(&host, WORK, "what is happening this week").await;
    assert_eq!(scope, "工作");
    assert_eq!(scopes_seen(&hits), vec!["public", "工作"]);

    // An unmapped conversation and a brand-new one see only public memories.
    for conv in [PRIVATE, "default:GroupMessage:99999"] {
        let (scope, hits) = recall(&host, conv, "birthday dinner Saturday").await;
        assert_eq!(scope, "public");
        assert_eq!(
            scopes_seen(&hits),
            vec!["public"],
            "{conv} must not see private scopes"
        );
        assert!(hits.iter().all(|(_, c)| !c.contains("Grandma")));
    }
}

#[tokio::test]
async fn conversation_policy_gives_unmapped_chats_their_own_scope() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), family_map());
    cfg.unmapped_scope = scopemem::config::UnmappedPolicy::Conversation;
    let host = host(cfg).await;
    let a = remember(
        &host,
        "default:FriendMessage:1",
        "Alice's secret recipe uses star anise",
    )
    .await;
    let scope_a = a["memory"]["memory_scope"].as_str().unwrap().to_string();
    assert!(
        scope_a.starts_with("c_") && scope_a.len() == 18,
        "{scope_a}"
    );
    let (_, hits) = recall(&host, "default:FriendMessage:2", "secret recipe").await;
    assert!(
        hits.is_empty(),
        "another private chat must not see it: {hits:?}"
    );
    let (scope, hits) = recall(&host, "default:FriendMessage:1", "secret recipe").await;
    assert_eq!(scope, scope_a);
    assert_eq!(hits.len(), 1);
}

#[tokio::test]
async fn persona_key_wins_over_conversation_key() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(config(
        dir.path(),
        json!({FAMILY: "家人", "persona:Alice": "恋爱"}),
    ))
    .await;
    let r = host
        .invoke("remember", json!({"conversation_id": FAMILY, "persona": "Alice", "content": "We first met at the lake"}))
        .await
        .unwrap();
    assert_eq!(r["memory"]["memory_scope"], "恋爱");
    assert_eq!(r["memory"]["scope_source"], "persona");
}

#[tokio::test]
async fn invalid_conversation_ids_are_rejected_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(config(dir.path(), family_map())).await;
    remember(&host, FAMILY, "baseline memory").await;
    let before = rows(&host).await;
    let oversized = "x".repeat(513);
    for bad in [
        "",
        "   ",
        "\t\n",
        oversized.as_str(),
        "default:Group\u{0}Message:1",
        "a\nb",
    ] {
        for op in ["remember", "recall"] {
            let payload = json!({"conversation_id": bad, "content": "should not be stored", "query": "anything"});
            let payload = if op == "remember" {
                json!({"conversation_id": payload["conversation_id"], "content": payload["content"]})
            } else {
                json!({"conversation_id": payload["conversation_id"], "query": payload["query"]})
            };
            let err = host.invoke(op, payload).await.expect_err("must be refused");
            assert_eq!(err.code, "invalid_conversation_id", "{op} {bad:?}: {err}");
            assert!(err.is_client_error());
        }
    }
    // A missing conversation id is a bad request too.
    let err = host
        .invoke("remember", json!({"content": "no id"}))
        .await
        .unwrap_err();
    assert!(err.is_client_error());
    assert_eq!(rows(&host).await, before, "nothing may be written");
}

#[tokio::test]
async fn a_scope_cannot_be_set_by_the_caller() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(config(dir.path(), family_map())).await;
    for field in ["memory_scope", "scope_source", "scope"] {
        let err = host
            .invoke(
                "remember",
                json!({"conversation_id": PRIVATE, "content": "try to plant this", field: "家人"}),
            )
            .await
            .unwrap_err();
        assert_eq!(err.code, "invalid_input", "{field}");
    }
    assert_eq!(rows(&host).await, 0);
}

#[tokio::test]
async fn invalid_map_values_are_ignored_and_the_rest_applies() {
    let dir = tempfile::tempdir().unwrap();
    let map = json!({FAMILY: "家人", WORK: "public'--", "default:GroupMessage:3": "has space", "default:GroupMessage:4": 7});
    let host = host(config(dir.path(), map)).await;
    let summary = host.memory().scopes().snapshot().summary();
    assert_eq!(summary.entries, 1);
    assert_eq!(summary.ignored, 3);
    assert_eq!(summary.failed_closed, 3);
    let r = remember(&host, WORK, "work memory with a broken mapping").await;
    let scope = r["memory"]["memory_scope"].as_str().unwrap();
    assert!(
        scope.starts_with("c_"),
        "an ignored mapping fails closed to a private scope, never public: {r}"
    );
    let (_, hits) = recall(&host, PRIVATE, "work memory").await;
    assert!(
        hits.is_empty(),
        "an unmapped chat must not see it: {hits:?}"
    );
    let r = remember(&host, FAMILY, "family memory").await;
    assert_eq!(r["memory"]["memory_scope"], "家人");
}

#[tokio::test]
async fn hot_reload_changes_only_new_writes_and_removing_a_mapping_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg_path = dir.path().join("config.json");
    let write_cfg = |map: serde_json::Value| {
        let body = json!({
            "conversation_scope_map": map,
            "storage": {"db_dir": dir.path().join("lancedb").to_string_lossy()},
            "recall": {"similarity_threshold": -1.0, "similarity_cut": "fixed", "relevance_gate": false},
        });
        let tmp = dir.path().join("config.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(&body).unwrap()).unwrap();
        std::fs::rename(&tmp, &cfg_path).unwrap();
    };
    write_cfg(json!({FAMILY: "家人"}));
    let cfg = scopemem::config::Config::load(Some(&cfg_path))
        .unwrap()
        .config;
    let host = scopemem::host::PluginHost::start_with(cfg, Some(cfg_path.clone()), embedder())
        .await
        .unwrap();

    remember(&host, FAMILY, "old family memory about the garden").await;
    // Remove the mapping: the family group becomes unmapped (public).
    let loaded_at = host.memory().scopes().snapshot().summary().loaded_at;
    write_cfg(json!({}));
    let scopes = host.memory().scopes().clone();
    assert!(
        eventually(Duration::from_secs(60), || scopes
            .snapshot()
            .summary()
            .loaded_at
            != loaded_at)
        .await,
        "the map reload must be picked up"
    );
    assert_eq!(host.memory().scopes().snapshot().summary().entries, 0);

    let r = remember(&host, FAMILY, "new memory after unmapping").await;
    assert_eq!(
        r["memory"]["memory_scope"], "public",
        "new writes use the new map"
    );
    assert_eq!(rows(&host).await, 2, "removing a mapping deletes nothing");
    let stats = host.memory().store().stats().await.unwrap();
    assert_eq!(
        stats.rows_by_scope.get("家人"),
        Some(&1),
        "historic rows keep their scope"
    );

    // The family conversation now recalls as public: the old 家人 row is invisible, not gone.
    let (scope, hits) = recall(&host, FAMILY, "garden").await;
    assert_eq!(scope, "public");
    assert!(hits.iter().all(|(s, _)| s.as_deref() == Some("public")));

    // Re-adding the mapping makes it visible again.
    let loaded_at = host.memory().scopes().snapshot().summary().loaded_at;
    write_cfg(json!({FAMILY: "家人"}));
    assert!(
        eventually(Duration::from_secs(60), || scopes
            .snapshot()
            .summary()
            .loaded_at
            != loaded_at)
        .await
    );
    let (scope, hits) = recall(&host, FAMILY, "garden").await;
    assert_eq!(scope, "家人");
    assert!(hits.iter().any(|(_, c)| c.contains("garden")));

    // An unparseable edit keeps the last good map (once the watcher has read and refused it).
    let refused = host.refused_config_reloads();
    std::fs::write(&cfg_path, b"{ not json").unwrap();
    assert!(
        eventually(Duration::from_secs(120), || host.refused_config_reloads()
            > refused)
        .await,
        "the watcher never read the bad edit"
    );
    assert_eq!(host.memory().scopes().snapshot().summary().entries, 1);
}

#[tokio::test]
async fn disabled_filter_recalls_across_scopes() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), family_map());
    cfg.scope_filter = scopemem::config::ScopeFilterMode::Disabled;
    let host = host(cfg).await;
    remember(&host, FAMILY, "family secret").await;
    let (_, hits) = recall(&host, WORK, "secret").await;
    assert_eq!(hits.len(), 1, "rollback mode shows every scope");
}

/// Two rows with one id in two scopes: scopemem never writes that, but another writer or an old
/// import can leave it in a legacy table. Browse and forget-by-ids apply the caller's scope
/// inside the query itself: the work chat pages and erases only its own row. Before, browse
/// fetched its page rows by id alone (showing the family row to the work chat) and forget
/// deleted `id IN (…)` (erasing the family's row too).
#[tokio::test]
async fn duplicate_ids_in_a_legacy_table_never_cross_scopes() {
    use scopemem::embed::TextRole;
    use scopemem::store::MemoryRecord;
    let dir = tempfile::tempdir().unwrap();
    let host = host(config(dir.path(), family_map())).await;
    let texts = [
        ("家人", FAMILY, "family only: the safe code is 4711"),
        ("工作", WORK, "work only: the badge printer is on floor 3"),
    ];
    let vectors = embedder()
        .embed(
            TextRole::Passage,
            texts.iter().map(|(_, _, t)| t.to_string()).collect(),
        )
        .await
        .unwrap();
    let rows = texts
        .iter()
        .zip(vectors)
        .map(|((scope, conversation, text), v)| {
            let record = MemoryRecord {
                id: "dup-0001".into(),
                content: text.to_string(),
                reasoning: None,
                tags: vec![],
                memory_type: "knowledge".into(),
                strength: 10,
                is_active: true,
                conversation_id: Some(conversation.to_string()),
                created_at: Some(chrono::Utc::now()),
                memory_scope: Some(scope.to_string()),
                scope_source: Some("conversation".into()),
                expires_at: None,
                last_recalled_at: None,
                speaker_id: None,
                speaker_name: None,
                source_ids: vec![],
                about_ids: vec![],
                source_conversations: vec![],
            };
            (record, v)
        })
        .collect();
    host.memory().store().append(rows).await.unwrap();

    let contents = |page: &serde_json::Value| -> Vec<String> {
        page["memories"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap().to_string())
            .collect()
    };
    let browse = |conversation: &'static str| {
        let host = &host;
        async move {
            host.invoke("browse", json!({"conversation_id": conversation}))
                .await
                .unwrap()
        }
    };
    let work = browse(WORK).await;
    assert_eq!(contents(&work), [texts[1].2], "{work}");
    let family = browse(FAMILY).await;
    assert_eq!(contents(&family), [texts[0].2], "{family}");

    let out = host
        .invoke(
            "forget",
            json!({"conversation_id": WORK, "memory_ids": ["dup-0001"]}),
        )
        .await
        .unwrap();
    assert_eq!(out["deleted"], 1, "{out}");
    let left: Vec<String> = all_rows(&host)
        .await
        .into_iter()
        .map(|r| r.content)
        .collect();
    assert_eq!(
        left,
        [texts[0].2],
        "the family's row survives the work chat's forget"
    );
    assert_eq!(contents(&browse(FAMILY).await), [texts[0].2]);
    assert!(contents(&browse(WORK).await).is_empty());
}
