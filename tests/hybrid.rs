//! Hybrid recall: BM25 full-text search fused with the vector search by reciprocal rank, under
//! the same scope prefilter. A fixed EN/ZH set measures first-place hit rates for vector alone
//! and for hybrid; the other tests pin the prefilter of each search, NULL rows in migration
//! mode, keyword-only candidates, index freshness and bad input. Real model, real LanceDB.

use crate::common;

use common::*;
use scopemem::host::PluginHost;
use serde_json::{json, Value};

/// Exact-term queries (names, room numbers, codes, rare words) with the memory they must find
/// first, next to look-alikes an embedding confuses with it.
const EXACT: &[(&str, &str, &[&str])] = &[
    (
        "订单ZX-99812到哪了",
        "订单ZX-99812已经退货退款",
        &[
            "订单ZX-99821还在配送中",
            "订单ZX-98812明天送达",
            "订单XZ-99812已取消",
        ],
    ),
    (
        "王小明搬去哪了",
        "王小明下个月搬去杭州",
        &[
            "王晓明下个月搬去苏州",
            "王小敏上周搬去了南京",
            "李小明打算搬去成都",
        ],
    ),
    (
        "4B会议室",
        "周五的例会改到4B会议室",
        &[
            "周五的例会改到4D会议室",
            "周三的例会在B4会议室",
            "周一的培训在4楼大会议室",
        ],
    ),
    (
        "which router is the RAX50?",
        "The router in the study is a Netgear RAX50",
        &[
            "The router in the bedroom is a Netgear RAX40",
            "The router in the garage is a Netgear RAX80",
            "The router in the kitchen is a Netgear R7000",
        ],
    ),
    (
        "what about Dr. Okonkwo?",
        "Dr. Okonkwo moved our appointment to Thursday",
        &[
            "Dr. Okafor moved our appointment to Friday",
            "Dr. Okoye moved the dentist appointment to Monday",
            "Dr. Smith moved our appointment to Wednesday",
        ],
    ),
    (
        "快递SF1234567890",
        "快递单号SF1234567890已经签收",
        &[
            "快递单号SF1234567809还在路上",
            "快递单号SF1243567890派送中",
            "快递单号YT1234567890已揽收",
        ],
    ),
    (
        "room 1207",
        "The offsite is in room 1207 of the Hilton",
        &[
            "The offsite is in room 1702 of the Hyatt",
            "The workshop is in room 1027 of the library",
            "The review is in room 2107 of building C",
        ],
    ),
    (
        "陈静是做什么的",
        "陈静是我们新来的产品经理",
        &[
            "陈晶是我们新来的设计师",
            "程静是我们新来的工程师",
            "陈婧是隔壁组的测试",
        ],
    ),
    (
        "tell me about the axolotl",
        "My neighbour keeps an axolotl in a tank",
        &[
            "My neighbour keeps a salamander in a tank",
            "My neighbour keeps newts in the garden pond",
            "My cousin keeps a gecko in a terrarium",
        ],
    ),
    (
        "奶奶学古筝了吗",
        "奶奶最近在学习古筝",
        &[
            "奶奶最近在学习古琴",
            "奶奶最近在学习二胡",
            "外婆最近在学习琵琶",
        ],
    ),
];

/// Paraphrases that share few or no words with the memory they mean.
const SEMANTIC: &[(&str, &str)] = &[
    (
        "what is the name of my pet?",
        "The user's cat is named Mochi and she is three years old",
    ),
    (
        "when do I have to file taxes?",
        "The quarterly tax filing is due on the fifteenth",
    ),
    (
        "which programming language does the team like for servers?",
        "The team prefers Rust for backend services",
    ),
    (
        "how was the weather in Shanghai?",
        "It rained heavily in Shanghai last Tuesday",
    ),
    (
        "what instrument am I practising?",
        "The user is learning to play the violin",
    ),
    (
        "what does Dad drink in the morning?",
        "Dad has black coffee every morning",
    ),
    (
        "is anyone in the family allergic to food?",
        "My brother cannot eat peanuts",
    ),
    (
        "where is my sister employed?",
        "My sister works as a nurse at a hospital in Hangzhou",
    ),
    ("奶奶喜欢什么花", "奶奶最喜欢兰花"),
    ("周末有什么计划", "这个周六打算去爬山"),
];

async fn host_with(config: scopemem::config::Config) -> PluginHost {
    host(config).await
}

async fn remember_set(host: &PluginHost) {
    for (_, target, others) in EXACT {
        remember(host, PRIVATE, target).await;
        for o in *others {
            remember(host, PRIVATE, o).await;
        }
    }
    for (_, target) in SEMANTIC {
        remember(host, PRIVATE, target).await;
    }
}

async fn recall_with(host: &PluginHost, conversation: &str, query: &str, search: &str) -> Value {
    host.invoke(
        "recall",
        json!({"conversation_id": conversation, "query": query, "search": search, "limit": 5}),
    )
    .await
    .unwrap_or_else(|e| panic!("recall failed: {e}"))
}

fn contents(r: &Value) -> Vec<String> {
    r["memories"]
        .as_array()
        .expect("memories")
        .iter()
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Which queries of `set` rank their memory first under `search`.
async fn firsts(host: &PluginHost, set: &[(&str, &str)], search: &str) -> Vec<bool> {
    let mut out = Vec::new();
    for (query, target) in set {
        let got = contents(&recall_with(host, PRIVATE, query, search).await);
        out.push(got.first().map(String::as_str) == Some(*target));
    }
    out
}

fn rate(hits: &[bool]) -> String {
    format!("{}/{}", hits.iter().filter(|h| **h).count(), hits.len())
}

/// The product defaults (the calibrated similarity cut), not the test helper's fixed -1.
fn default_config(dir: &std::path::Path) -> scopemem::config::Config {
    common::shipped_config(dir)
}

/// First-place hit rates of vector and hybrid on both halves of the set, asserting that hybrid
/// ranks every exact-term memory first and loses no paraphrase vector alone ranks first.
async fn measure(host: &PluginHost, label: &str) {
    remember_set(host).await;
    let exact: Vec<(&str, &str)> = EXACT.iter().map(|(q, t, _)| (*q, *t)).collect();
    let exact_vector = firsts(host, &exact, "vector").await;
    let exact_hybrid = firsts(host, &exact, "hybrid").await;
    let semantic_vector = firsts(host, SEMANTIC, "vector").await;
    let semantic_hybrid = firsts(host, SEMANTIC, "hybrid").await;
    println!(
        "RESULT hybrid test set ({label}), first-place hits: exact terms vector {} hybrid {}; paraphrases vector {} hybrid {}",
        rate(&exact_vector),
        rate(&exact_hybrid),
        rate(&semantic_vector),
        rate(&semantic_hybrid)
    );
    for ((query, target), hit) in exact.iter().zip(&exact_hybrid) {
        assert!(
            hit,
            "{label}: hybrid must rank {target:?} first for {query:?}"
        );
    }
    for (((query, target), v), h) in SEMANTIC.iter().zip(&semantic_vector).zip(&semantic_hybrid) {
        assert!(
            !v || *h,
            "{label}: hybrid lost {target:?} for {query:?}, which vector alone ranks first"
        );
    }
}

#[tokio::test]
async fn exact_terms_rank_first_under_hybrid_and_paraphrases_do_not_get_worse() {
    let dir = tempfile::tempdir().unwrap();
    let host = host_with(default_config(dir.path())).await;
    measure(&host, "calibrated similarity cut, the default").await;
    // The default search is hybrid: a request without `search` answers like one with it.
    for (query, _) in EXACT
        .iter()
        .map(|(q, t, _)| (*q, *t))
        .chain(SEMANTIC.iter().copied())
    {
        let default = host
            .invoke(
                "recall",
                json!({"conversation_id": PRIVATE, "query": query, "limit": 5}),
            )
            .await
            .unwrap();
        assert_eq!(
            contents(&default),
            contents(&recall_with(&host, PRIVATE, query, "hybrid").await)
        );
    }
    host.shutdown().await;
    // Without a threshold the vector list is never empty: fusion must still hold.
    let dir = tempfile::tempdir().unwrap();
    let unfiltered = host_with(config(dir.path(), family_map())).await;
    measure(&unfiltered, "no similarity threshold").await;
    unfiltered.shutdown().await;
}

#[tokio::test]
async fn keyword_only_candidates_survive_the_similarity_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = default_config(dir.path());
    cfg.recall.similarity_cut = scopemem::config::SimilarityCut::Fixed;
    cfg.recall.similarity_threshold = 0.95;
    let host = host(cfg).await;
    remember(&host, PRIVATE, "快递单号SF1234567890已经签收").await;
    remember(&host, PRIVATE, "The team prefers Rust for backend services").await;
    let vector = recall_with(&host, PRIVATE, "SF1234567890", "vector").await;
    assert!(
        contents(&vector).is_empty(),
        "below the 0.95 threshold the vector search alone finds nothing: {vector}"
    );
    for search in ["hybrid", "keyword"] {
        let r = recall_with(&host, PRIVATE, "SF1234567890", search).await;
        assert_eq!(
            contents(&r),
            ["快递单号SF1234567890已经签收"],
            "{search}: {r}"
        );
        let score = r["memories"][0]["score"].as_f64().unwrap();
        assert!(score > 0.0 && score <= 1.0, "{r}");
    }
    host.shutdown().await;
}

/// 30 matching memories in 家人 and one in 工作: the work chat asks for one memory. A search
/// that filtered after ranking would fill its single place with a family row and drop it.
async fn crowded(host: &PluginHost) {
    for i in 0..30 {
        remember(
            host,
            FAMILY,
            &format!("家里的密码箱编号是K{i:02}，放在衣柜里"),
        )
        .await;
    }
    remember(
        host,
        WORK,
        "公司的密码箱编号统一记在一楼前台的登记本上，需要时找行政同事查询",
    )
    .await;
}

#[tokio::test]
async fn keyword_and_vector_searches_both_prefilter_by_scope() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(config(dir.path(), family_map())).await;
    crowded(&host).await;
    for search in ["keyword", "vector", "hybrid"] {
        let r = host
            .invoke(
                "recall",
                json!({"conversation_id": WORK, "query": "密码箱编号", "search": search, "limit": 1}),
            )
            .await
            .unwrap();
        assert_eq!(
            contents(&r),
            ["公司的密码箱编号统一记在一楼前台的登记本上，需要时找行政同事查询"],
            "{search} must prefilter: {r}"
        );
        let r = recall_with(&host, PRIVATE, "密码箱编号", search).await;
        assert!(
            contents(&r).iter().all(|c| !c.contains("衣柜")),
            "{search}: an unmapped chat never sees 家人: {r}"
        );
    }
    // Family sees its own rows by keyword too (the filter admits, it does not only refuse).
    let r = recall_with(&host, FAMILY, "K07", "keyword").await;
    assert_eq!(contents(&r), ["家里的密码箱编号是K07，放在衣柜里"], "{r}");
    host.shutdown().await;
}

#[tokio::test]
async fn legacy_null_rows_are_found_by_keyword_only_in_migration_mode() {
    let dir = tempfile::tempdir().unwrap();
    let mut rows = legacy_rows(20, "gardening");
    rows[7].content = "legacy note: the greenhouse key is under the blue flowerpot".into();
    make_legacy_table(dir.path(), &rows, false, false).await;
    for (mode, visible) in [("on", true), ("off", false)] {
        let host = PluginHost::start_with(
            legacy_config(dir.path(), family_map(), mode),
            None,
            embedder(),
        )
        .await
        .unwrap();
        // What start_background does first; the backfill itself is not started, so the rows
        // keep their NULL scope.
        host.memory().store().ensure_indexes().await.unwrap();
        for search in ["keyword", "hybrid"] {
            let r = recall_with(&host, WORK, "flowerpot", search).await;
            let found = contents(&r).iter().any(|c| c.contains("flowerpot"));
            assert_eq!(found, visible, "migration_mode {mode}, {search}: {r}");
            if visible {
                assert_eq!(r["memories"][0]["memory_scope"], Value::Null, "{r}");
            }
        }
        host.shutdown().await;
    }
}

#[tokio::test]
async fn tags_are_searched_and_the_index_is_kept_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(config(dir.path(), family_map())).await;
    for i in 0..12 {
        host.invoke(
            "remember",
            json!({"conversation_id": PRIVATE, "content": format!("plain note number {i}"),
                   "tags": if i == 5 { vec!["Zephyrine"] } else { vec![] }}),
        )
        .await
        .unwrap();
    }
    let found = |r: &Value| contents(r) == ["plain note number 5"];
    assert!(found(
        &recall_with(&host, PRIVATE, "zephyrine", "keyword").await
    ));
    // Rows written after the index was built are found before and after maintenance folds
    // them in, and afterwards every full-text index covers every row.
    host.memory()
        .store()
        .writer()
        .maintain_with(false)
        .await
        .unwrap();
    let states = host.memory().store().index_states().await.unwrap();
    let fts: Vec<_> = states.iter().filter(|s| s.index_type == "FTS").collect();
    assert_eq!(fts.len(), 2, "content and tags: {states:?}");
    for s in fts {
        assert_eq!(s.unindexed_rows, Some(0), "{s:?}");
        assert_eq!(s.indexed_rows, Some(12), "{s:?}");
    }
    assert!(found(
        &recall_with(&host, PRIVATE, "zephyrine", "keyword").await
    ));
    host.shutdown().await;
}

#[tokio::test]
async fn bad_search_values_are_refused_and_stop_words_find_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(config(dir.path(), family_map())).await;
    remember(&host, PRIVATE, "The team prefers Rust for backend services").await;
    let err = host
        .invoke(
            "recall",
            json!({"conversation_id": PRIVATE, "query": "rust", "search": "fuzzy"}),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("fuzzy") && err.to_string().contains("hybrid"),
        "{err}"
    );
    // A query of stop words and punctuation has no terms: keyword finds nothing, no error.
    let r = recall_with(&host, PRIVATE, "the of and ???", "keyword").await;
    assert!(contents(&r).is_empty(), "{r}");
    let bad = scopemem::config::Config::from_value(&json!({"recall": {"search": "fuzzy"}}));
    assert!(bad.is_err());
    host.shutdown().await;
}

/// The keyword index matches single characters (n-grams of 1-3), so BM25 finds a memory that
/// shares one character with a chat line; such a hit is not recalled. A shared word (two
/// characters of a Chinese run, a Latin word) is, and a lone character asked alone is too.
#[tokio::test]
async fn a_keyword_hit_sharing_only_a_character_is_not_recalled() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(config(dir.path(), family_map())).await;
    remember(&host, FAMILY, "妈妈对青霉素过敏").await;
    remember(&host, FAMILY, "爸爸的降压药放在抽屉里").await;
    // 妈 and 药 alone are shared, no two characters in a row.
    let r = recall_with(&host, FAMILY, "他妈的今天好累，吃什么药都没用", "keyword").await;
    assert!(contents(&r).is_empty(), "{r}");
    let r = recall_with(&host, FAMILY, "妈妈过敏吗", "keyword").await;
    assert_eq!(contents(&r), ["妈妈对青霉素过敏"], "{r}");
    let r = recall_with(&host, FAMILY, "药", "keyword").await;
    assert_eq!(contents(&r), ["爸爸的降压药放在抽屉里"], "{r}");
    host.shutdown().await;
}
