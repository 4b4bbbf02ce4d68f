//! The real model ranks a remembered fact above unrelated memories, and embeddings are sane.

use crate::common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn embeddings_are_unit_norm_384d() {
    let e = embedder();
    assert_eq!(e.dimension(), 384);
    let v = e
        .embed(
            scopemem::embed::TextRole::Passage,
            vec!["hello world".into(), "你好，世界".into()],
        )
        .await
        .unwrap();
    for x in v {
        let n: f32 = x.iter().map(|a| a * a).sum::<f32>().sqrt();
        assert!((n - 1.0).abs() < 1e-3, "norm {n}");
    }
}

#[tokio::test]
async fn batching_does_not_change_embeddings() {
    let e = embedder();
    let alone = e
        .embed(
            scopemem::embed::TextRole::Passage,
            vec!["Grandma likes orchids".into()],
        )
        .await
        .unwrap();
    let texts: Vec<String> = (0..70)
        .map(|i| format!("a much longer unrelated sentence number {i} to pad the batch"))
        .chain(std::iter::once("Grandma likes orchids".to_string()))
        .collect();
    let batch = e
        .embed(scopemem::embed::TextRole::Passage, texts)
        .await
        .unwrap();
    assert_eq!(
        batch.len(),
        71,
        "more texts than the batch size are split, not refused"
    );
    let diff: f32 = alone[0]
        .iter()
        .zip(&batch[70])
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(diff < 1e-4, "max component difference {diff}");
    // The worker groups texts by length: each vector still lands at its own text's place.
    let mixed: Vec<String> = [
        "好久不见，最近怎么样？我们周末去爬山吧，顺便看看外婆",
        "ok",
        "a much longer line about the quarterly tax filing and the accountant's new office",
        "Grandma likes orchids",
    ]
    .map(String::from)
    .to_vec();
    let together = e
        .embed(scopemem::embed::TextRole::Passage, mixed.clone())
        .await
        .unwrap();
    for (text, vector) in mixed.into_iter().zip(&together) {
        let own = e
            .embed(scopemem::embed::TextRole::Passage, vec![text.clone()])
            .await
            .unwrap();
        let diff = own[0]
            .iter()
            .zip(vector)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(diff < 1e-4, "{text}: max component difference {diff}");
    }
}

#[tokio::test]
async fn a_query_about_a_fact_ranks_it_first() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(config(dir.path(), family_map())).await;
    for fact in [
        "The user's cat is named Mochi and she is three years old",
        "The quarterly tax filing is due on the fifteenth",
        "The team prefers Rust for backend services",
        "It rained heavily in Shanghai last Tuesday",
        "The user is learning to play the violin",
    ] {
        remember(&host, PRIVATE, fact).await;
    }
    let r = host
        .invoke(
            "recall",
            json!({"conversation_id": PRIVATE, "query": "what is the name of my pet?", "limit": 5}),
        )
        .await
        .unwrap();
    let top = &r["memories"][0];
    assert!(top["content"].as_str().unwrap().contains("Mochi"), "{r}");
    let scores: Vec<f64> = r["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["score"].as_f64().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    assert!(
        scores[0] - scores[1] > 0.05,
        "the fact must clearly beat unrelated memories: {scores:?}"
    );
}

/// The default cut (calibrated to the model, per script) and a fixed 0.5 both drop a memory
/// unrelated to the query, which a fixed -1 (no cut) returns.
#[tokio::test]
async fn the_default_threshold_drops_unrelated_memories() {
    use scopemem::config::SimilarityCut;
    let defaults = scopemem::config::Config::defaults().unwrap();
    assert_eq!(defaults.recall.similarity_cut, SimilarityCut::Calibrated);
    for (cut, threshold, kept) in [
        (
            SimilarityCut::Calibrated,
            defaults.recall.similarity_threshold,
            0,
        ),
        (SimilarityCut::Fixed, 0.5, 0),
        (SimilarityCut::Fixed, -1.0, 1),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(dir.path(), family_map());
        cfg.recall.similarity_cut = cut;
        cfg.recall.similarity_threshold = threshold;
        let host = host(cfg).await;
        remember(&host, PRIVATE, "The user's cat is named Mochi").await;
        for search in ["vector", "hybrid"] {
            let r = host
                .invoke(
                    "recall",
                    json!({"conversation_id": PRIVATE, "search": search,
                           "query": "quarterly tax deadlines for corporations"}),
                )
                .await
                .unwrap();
            let n = r["memories"].as_array().unwrap().len();
            assert_eq!(n, kept, "{cut} {threshold} {search}: {r}");
        }
        host.shutdown().await;
    }
}

#[tokio::test]
async fn secrets_are_redacted_before_storage() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(config(dir.path(), family_map())).await;
    let r = remember(
        &host,
        PRIVATE,
        "Email me at bob@example.com, card 4111 1111 1111 1111, key sk-abcdefghijklmnop123456",
    )
    .await;
    let content = r["memory"]["content"].as_str().unwrap();
    assert!(
        !content.contains("bob@example.com")
            && !content.contains("4111")
            && !content.contains("sk-abc"),
        "{content}"
    );
    let (_, hits) = recall(&host, PRIVATE, "email").await;
    assert!(hits.iter().all(|(_, c)| !c.contains("bob@")));
}

#[tokio::test]
async fn chained_recall_puts_entity_matches_first() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(config(dir.path(), family_map())).await;
    for (content, tags, ty) in [
        ("Weekend plans: hiking in the hills", vec![], "event"),
        ("Weekend plans: visit the museum", vec![], "event"),
        ("Alice prefers tea over coffee", vec!["Alice"], "knowledge"),
    ] {
        host.invoke("remember", json!({"conversation_id": PRIVATE, "content": content, "tags": tags, "memory_type": ty}))
            .await
            .unwrap();
    }
    let r = host
        .invoke("recall", json!({"conversation_id": PRIVATE, "query": "weekend plans", "mode": "chained", "entities": ["alice"], "limit": 3}))
        .await
        .unwrap();
    let first = r["memories"][0]["content"].as_str().unwrap();
    assert!(first.contains("Alice"), "{r}");
    assert_eq!(r["memories"].as_array().unwrap().len(), 3);
}
