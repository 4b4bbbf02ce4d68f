//! `scopemem export` / `import` against real LanceDB directories and the real model: round
//! trips, filters, re-embedding, rejected lines, redaction, and both commands through the real
//! binary while a real `serve` runs on the same directory.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use common::serve::{post, spawn_serve};
use common::*;
use lancedb::arrow::arrow_array::{Array, FixedSizeListArray, Float32Array};
use scopemem::embed::ModelInfo;
use scopemem::store::{MemoryRecord, Store};
use scopemem::transfer::{self, ExportFilter, ExportOptions, ImportReport, Importer, Rejection};
use serde_json::{json, Value};

fn model() -> ModelInfo {
    let e = embedder();
    ModelInfo {
        id: e.model_id().to_string(),
        dimension: e.dimension(),
    }
}

async fn export_text(store: &Store, vectors: bool, filter: ExportFilter) -> (String, u64) {
    let mut out = Vec::new();
    let options = ExportOptions {
        filter,
        vectors,
        visibility: None,
    };
    let mut calls = 0;
    let report = transfer::export(store, &model(), &options, &mut out, &mut |_, _| calls += 1)
        .await
        .expect("export");
    assert!(calls >= 1, "progress is reported");
    (String::from_utf8(out).unwrap(), report.rows)
}

async fn import_text(store: &Store, text: &str) -> (ImportReport, Vec<Rejection>) {
    import_batched(store, text, 4).await
}

async fn import_batched(
    store: &Store,
    text: &str,
    batch_rows: usize,
) -> (ImportReport, Vec<Rejection>) {
    let mut rejected = Vec::new();
    let mut on_reject = |r: &Rejection| rejected.push(r.clone());
    let model = embedder();
    let mut importer = Importer {
        store,
        embedder: model.as_ref(),
        options: transfer::ImportOptions { batch_rows },
        on_progress: &mut |_| {},
        on_reject: &mut on_reject,
    };
    let report = importer
        .run(&mut text.as_bytes())
        .await
        .expect("import runs");
    (report, rejected)
}

/// A fresh table under `dir`, opened the way `scopemem import` opens it.
async fn fresh_store(dir: &Path) -> Store {
    transfer::open(&config(dir, family_map()), &model(), true)
        .await
        .expect("open target")
}

/// Every row with its vector, sorted by id.
async fn rows_of(store: &Store) -> Vec<(MemoryRecord, Vec<f32>)> {
    let batches = all_batches(store).await;
    let mut out = Vec::new();
    for b in &batches {
        let vectors = b
            .column_by_name("vector")
            .unwrap()
            .as_any()
            .downcast_ref::<FixedSizeListArray>()
            .unwrap();
        for (i, r) in scopemem::store::record::from_batch(b)
            .into_iter()
            .enumerate()
        {
            let v = vectors.value(i);
            let v = v.as_any().downcast_ref::<Float32Array>().unwrap();
            out.push((r, v.values().to_vec()));
        }
    }
    out.sort_by(|a, b| a.0.id.cmp(&b.0.id));
    out
}

/// A source table with family, work and public memories from the service, plus a legacy
/// NULL-scope row and a strengthened row written directly.
async fn source(dir: &Path) -> scopemem::host::PluginHost {
    let host = host(config(dir, family_map())).await;
    remember(&host, FAMILY, "Grandma likes orchids").await;
    remember(&host, FAMILY, "The family trip is to Dali in May").await;
    remember(&host, WORK, "The quarterly report is due Friday").await;
    remember(&host, PRIVATE, "Likes green tea").await;
    let legacy = MemoryRecord {
        id: "legacy-000001".into(),
        content: "An old note from before scopes".into(),
        reasoning: Some("legacy".into()),
        tags: vec!["old".into()],
        memory_type: "event".into(),
        strength: 77,
        is_active: false,
        conversation_id: Some("legacy:conv".into()),
        created_at: Utc.timestamp_micros(1_700_000_000_123_456).single(),
        memory_scope: None,
        scope_source: None,
        expires_at: None,
        last_recalled_at: None,
        speaker_id: None,
        speaker_name: None,
        source_ids: vec![],
        about_ids: vec![],
        source_conversations: vec![],
    };
    let v = embedder()
        .embed(
            scopemem::embed::TextRole::Passage,
            vec![legacy.content.clone()],
        )
        .await
        .unwrap();
    host.memory()
        .store()
        .append(vec![(legacy, v[0].clone())])
        .await
        .unwrap();
    host
}

#[tokio::test]
async fn round_trip_keeps_everything_and_reimport_inserts_nothing() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let src = source(a.path()).await;
    let (text, n) = export_text(src.memory().store(), true, ExportFilter::default()).await;
    assert_eq!(n, 5);
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(header["scopemem_export"], 1);
    assert_eq!(header["embedding_model"], model().id.as_str());
    assert_eq!(header["dimension"], 384);
    assert_eq!(header["vectors"], true);
    let legacy_line = text.lines().find(|l| l.contains("legacy-000001")).unwrap();
    assert!(
        legacy_line.contains("\"memory_scope\":null"),
        "{legacy_line}"
    );

    let dst = fresh_store(b.path()).await;
    let (report, rejected) = import_text(&dst, &text).await;
    assert!(rejected.is_empty(), "{rejected:?}");
    assert_eq!(
        (
            report.imported,
            report.already_present,
            report.re_embedded,
            report.rejected
        ),
        (5, 0, 0, 0),
        "same model and vectors in the file: nothing re-embedded"
    );
    let (before, after) = (rows_of(src.memory().store()).await, rows_of(&dst).await);
    assert_eq!(
        before, after,
        "ids, scopes, sources, timestamps, strength, vectors kept"
    );
    assert!(after
        .iter()
        .any(|(r, _)| r.memory_scope.is_none() && r.strength == 77));

    let (again, _) = import_text(&dst, &text).await;
    assert_eq!(
        (again.imported, again.already_present, again.re_embedded),
        (0, 5, 0),
        "re-import is a no-op and embeds nothing"
    );
    assert_eq!(dst.count(None).await.unwrap(), 5);
    dst.shutdown().await;
    src.shutdown().await;
}

/// 10,000 rows in 45 scopes, `public` and legacy NULL, with every optional column set on some:
/// exported with vectors and imported into a fresh table, every row comes back identical.
#[tokio::test]
async fn a_10k_row_round_trip_keeps_every_row_and_scope() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let src = fresh_store(a.path()).await;
    let base = Utc
        .timestamp_micros(1_750_000_000_000_000)
        .single()
        .unwrap();
    let rows: Vec<(MemoryRecord, Vec<f32>)> = (0..10_000usize)
        .map(|i| {
            let scope = match i {
                i if i % 97 == 0 => None,
                i if i % 10 == 0 => Some("public".to_string()),
                i => Some(format!("scope_{:02}", i % 50)),
            };
            let record = MemoryRecord {
                id: format!("row-{i:05}"),
                content: format!("第{i}条记忆: note about topic {} 家人", i % 37),
                reasoning: (i % 3 == 0).then(|| format!("reason {i}")),
                tags: (0..i % 4).map(|t| format!("tag{t}")).collect(),
                memory_type: ["knowledge", "event", "skill", "task", "emotional"][i % 5].into(),
                strength: (i % 100) as i32 + 1,
                is_active: i % 2 == 0,
                conversation_id: Some(format!("default:GroupMessage:{}", i % 300)),
                created_at: Some(base + chrono::Duration::microseconds(i as i64 * 1_001)),
                scope_source: scope.as_ref().map(|_| "conversation".to_string()),
                memory_scope: scope,
                expires_at: (i % 7 == 0).then(|| base + chrono::Duration::days(3650 + i as i64)),
                last_recalled_at: (i % 11 == 0).then(|| base + chrono::Duration::hours(i as i64)),
                // Who said it and which messages it came from survive the round trip too.
                speaker_id: (i % 5 == 0).then(|| format!("u-{}", i % 13)),
                speaker_name: (i % 10 == 0).then(|| format!("成员{}", i % 13)),
                source_ids: (0..i % 3).map(|s| format!("msg-{i}-{s}")).collect(),
                about_ids: vec![],
                source_conversations: vec![],
            };
            let vector: Vec<f32> = (0..384)
                .map(|d| (((i * 31 + d * 7) % 101) as f32 - 50.0) / 500.0)
                .collect();
            (record, vector)
        })
        .collect();
    for chunk in rows.chunks(2_000) {
        src.append(chunk.to_vec()).await.unwrap();
    }
    let (text, n) = export_text(&src, true, ExportFilter::default()).await;
    assert_eq!(n, 10_000);
    let dst = fresh_store(b.path()).await;
    let (report, rejected) = import_batched(&dst, &text, 512).await;
    assert!(
        rejected.is_empty(),
        "{:?}",
        &rejected[..rejected.len().min(3)]
    );
    assert_eq!((report.imported, report.re_embedded), (10_000, 0));
    let (before, after) = (rows_of(&src).await, rows_of(&dst).await);
    assert_eq!(before.len(), 10_000);
    for (x, y) in before.iter().zip(&after) {
        assert_eq!(x, y, "row {} differs after the round trip", x.0.id);
    }
    assert_eq!(before.len(), after.len());
    let scopes = |rows: &[(MemoryRecord, Vec<f32>)]| {
        let mut m = std::collections::BTreeMap::<Option<String>, usize>::new();
        for (r, _) in rows {
            *m.entry(r.memory_scope.clone()).or_default() += 1;
        }
        m
    };
    assert_eq!(scopes(&before), scopes(&after));
    assert_eq!(scopes(&after).len(), 47, "45 scopes, public and NULL");
    src.shutdown().await;
    dst.shutdown().await;
}

#[tokio::test]
async fn scope_and_conversation_filters() {
    let a = tempfile::tempdir().unwrap();
    let src = source(a.path()).await;
    let store = src.memory().store();
    let only = |scope: Option<&str>, conversation: Option<&str>| ExportFilter {
        scope: scope.map(String::from),
        conversation: conversation.map(String::from),
        visible_to: None,
    };
    let (text, n) = export_text(store, false, only(Some("家人"), None)).await;
    assert_eq!(n, 2);
    assert!(text
        .lines()
        .skip(1)
        .all(|l| l.contains("\"memory_scope\":\"家人\"")));
    assert!(!text.contains("\"vector\""), "no vectors unless asked");
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(header["filter"]["scope"], "家人");

    let (text, n) = export_text(store, false, only(None, Some(WORK))).await;
    assert_eq!(n, 1);
    assert!(text.contains("quarterly report"));
    let (_, n) = export_text(store, false, only(Some("工作"), Some(FAMILY))).await;
    assert_eq!(n, 0, "both filters apply");

    let mut sink = Vec::new();
    let bad = ExportOptions {
        filter: only(Some("家' OR '1'='1"), None),
        vectors: false,
        visibility: None,
    };
    let e = transfer::export(store, &model(), &bad, &mut sink, &mut |_, _| {})
        .await
        .unwrap_err();
    assert!(e.to_string().contains("invalid scope name"), "{e}");
    src.shutdown().await;
}

#[tokio::test]
async fn without_vectors_or_with_another_model_rows_are_re_embedded_and_recalled() {
    let (a, b, c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let src = source(a.path()).await;
    let (plain, _) = export_text(src.memory().store(), false, ExportFilter::default()).await;
    let (with_vectors, _) = export_text(src.memory().store(), true, ExportFilter::default()).await;
    src.shutdown().await;

    let dst = fresh_store(b.path()).await;
    let (report, _) = import_text(&dst, &plain).await;
    assert_eq!((report.imported, report.re_embedded), (5, 5));
    dst.shutdown().await;
    let host = host(config(b.path(), family_map())).await;
    let (_, hits) = recall(&host, FAMILY, "what flowers does grandma like").await;
    assert_eq!(hits[0].1, "Grandma likes orchids", "{hits:?}");
    assert!(
        hits.iter().all(|(s, _)| s.as_deref() != Some("工作")),
        "imported scopes still isolate: {hits:?}"
    );
    host.shutdown().await;

    let other = with_vectors.replacen(&model().id, "onnx-sha256:someothermodel", 1);
    let dst = fresh_store(c.path()).await;
    let (report, _) = import_text(&dst, &other).await;
    assert!(!report.vectors_reusable);
    assert_eq!((report.imported, report.re_embedded), (5, 5));
    dst.shutdown().await;
}

fn line(id: &str, content: &str, scope: &str) -> String {
    json!({"id": id, "content": content, "reasoning": null, "tags": ["t"],
           "memory_type": "knowledge", "strength": 10, "is_active": true,
           "conversation_id": FAMILY, "created_at": "2025-03-01T08:00:00.000001Z",
           "memory_scope": scope, "scope_source": "conversation"})
    .to_string()
}

fn header(model_id: &str) -> String {
    json!({"scopemem_export": 1, "embedding_model": model_id, "dimension": 384,
           "exported_at": "2026-01-01T00:00:00Z", "filter": {}, "vectors": false})
    .to_string()
}

#[tokio::test]
async fn bad_lines_are_reported_by_number_and_the_rest_imports() {
    let b = tempfile::tempdir().unwrap();
    let dst = fresh_store(b.path()).await;
    let text = [
        header(&model().id),
        line("good-1", "Grandma likes orchids", "家人"),
        "{not json".to_string(),
        line("bad-scope", "x", "家 人"),
        line("good-1", "a duplicate id", "家人"),
        String::new(),
        line("bad-strength", "y", "public").replace("\"strength\":10", "\"strength\":500"),
        line("good-2", "The report is due Friday", "工作"),
    ]
    .join("\n");
    let (report, rejected) = import_text(&dst, &text).await;
    let lines: Vec<u64> = rejected.iter().map(|r| r.line).collect();
    assert_eq!(lines, vec![3, 4, 5, 7], "{rejected:?}");
    assert!(rejected[1].reason.contains("memory_scope"), "{rejected:?}");
    assert!(
        rejected[2].reason.contains("first on line 2"),
        "{rejected:?}"
    );
    assert!(rejected[3].reason.contains("strength"), "{rejected:?}");
    assert_eq!((report.imported, report.rejected), (2, 4));

    for (text, want) in [
        (String::new(), "empty"),
        (line("x", "y", "public"), "not a scopemem export header"),
        (
            header("m").replace("\"scopemem_export\":1", "\"scopemem_export\":9"),
            "version 9",
        ),
    ] {
        let model = embedder();
        let mut importer = Importer {
            store: &dst,
            embedder: model.as_ref(),
            options: Default::default(),
            on_progress: &mut |_| {},
            on_reject: &mut |_| {},
        };
        let e = importer
            .run(&mut text.as_bytes())
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 1") && e.contains(want), "{e}");
    }
    assert_eq!(
        dst.count(None).await.unwrap(),
        2,
        "a bad header writes nothing"
    );
    dst.shutdown().await;
}

#[tokio::test]
async fn personal_data_in_an_imported_line_is_redacted_and_re_embedded() {
    let b = tempfile::tempdir().unwrap();
    let dst = fresh_store(b.path()).await;
    let mut row: Value =
        serde_json::from_str(&line("pii-1", "我的手机号13812345678，记住", "家人")).unwrap();
    row["tags"] = json!(["bob@example.com"]);
    row["vector"] = json!(vec![0.05f32; 384]);
    let text = format!("{}\n{row}\n", header(&model().id));
    let (report, _) = import_text(&dst, &text).await;
    assert_eq!(
        (report.imported, report.redacted, report.re_embedded),
        (1, 1, 1)
    );
    let rows = rows_of(&dst).await;
    assert_eq!(rows[0].0.content, "我的手机号[REDACTED_PHONE]，记住");
    assert_eq!(rows[0].0.tags, vec!["[REDACTED_EMAIL]".to_string()]);
    assert_ne!(
        rows[0].1,
        vec![0.05f32; 384],
        "the file's vector encoded the raw text"
    );
    dst.shutdown().await;
    assert!(files_containing(b.path(), "13812345678").is_empty());
    assert!(files_containing(b.path(), "bob@example.com").is_empty());
}

#[tokio::test]
async fn cli_export_and_import_while_serve_runs() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let serve = spawn_serve(dir.path(), "a", json!({})).await;
    let cfg = dir.path().join("a.json");
    let cfg = cfg.to_str().unwrap();
    for content in ["Grandma likes orchids", "The family trip is to Dali in May"] {
        let (status, r) = post(
            &client,
            &serve,
            "/v1/remember",
            json!({"conversation_id": FAMILY, "content": content}),
        )
        .await;
        assert_eq!(status, 200, "{r}");
    }

    let (code, out, err) = scopemem(&["export", "--config", cfg, "--scope", "家人"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 3, "{out}");
    assert!(
        err.contains("exported 2 memories"),
        "final count line: {err}"
    );
    let file = dir.path().join("out.jsonl");
    let (code, _, err) = scopemem(&[
        "export",
        "--config",
        cfg,
        "--vectors",
        "--quiet",
        "--output",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(written.lines().nth(1).unwrap().contains("\"vector\":["));

    // New rows for the same table: other ids, other texts, no vectors (so they are embedded).
    let mut lines = vec![out.lines().next().unwrap().to_string()];
    for (i, text) in [
        "Grandpa collects old stamps",
        "Grandpa's stamp album is blue",
    ]
    .iter()
    .enumerate()
    {
        lines.push(line(&format!("imported-{i}"), text, "家人"));
    }
    let import = dir.path().join("in.jsonl");
    std::fs::write(&import, lines.join("\n")).unwrap();
    let import = import.to_str().unwrap();
    let started = Instant::now();
    let (code, out, err) = scopemem(&["import", import, "--config", cfg]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("imported 2, already present 0, re-embedded 2, rejected 0"),
        "{out}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, r) = post(
            &client,
            &serve,
            "/v1/recall",
            json!({"conversation_id": FAMILY, "query": "grandpa stamps", "limit": 10}),
        )
        .await;
        let seen = r["memories"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["id"].as_str().unwrap_or("").starts_with("imported-"))
            .count();
        if seen == 2 {
            eprintln!(
                "imported rows visible to serve {:.0} ms after the import started",
                started.elapsed().as_secs_f64() * 1000.0
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "serve never saw the imported rows: {r}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, r) = post(
        &client,
        &serve,
        "/v1/recall",
        json!({"conversation_id": WORK, "query": "grandpa stamps", "limit": 10}),
    )
    .await;
    assert!(!r.to_string().contains("imported-"), "scope kept: {r}");

    let (code, out, err) = scopemem(&["import", import, "--config", cfg]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("imported 0, already present 2"), "{out}");
    assert!(out.contains("never overwritten"), "{out}");

    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, format!("{}\n{{broken\n", lines[0])).unwrap();
    let (code, out, err) = scopemem(&["import", bad.to_str().unwrap(), "--config", cfg]);
    assert_eq!(code, 2, "{out} {err}");
    assert!(err.contains("line 2: rejected"), "{err}");
}
