//! Time-aware recall (issue 41, part 3; `memory::time_words`): a question that names a time
//! recalls from memories created in that window, computed in `recall.timezone` or the zone the
//! request passes; the window is part of the prefilter (the resident copy and LanceDB alike),
//! an empty window says so and falls back, and other scopes stay invisible. Real LanceDB and the
//! default model (multilingual-e5-small).

use crate::common;

use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc};
use chrono_tz::Asia::Shanghai;
use common::{family_map, FAMILY, WORK};
use scopemem::host::PluginHost;
use serde_json::{json, Value};

/// Noon, Shanghai time, `days` days before today (Shanghai's today).
fn days_ago(days: i64) -> DateTime<Utc> {
    let today = Utc::now().with_timezone(&Shanghai).date_naive();
    noon(today - Duration::days(days))
}

fn noon(date: NaiveDate) -> DateTime<Utc> {
    Shanghai
        .from_local_datetime(&date.and_hms_opt(12, 0, 0).unwrap())
        .single()
        .unwrap()
        .with_timezone(&Utc)
}

/// The 15th of last month, and June 15th of last year, at noon in Shanghai.
fn last_month() -> DateTime<Utc> {
    let today = Utc::now().with_timezone(&Shanghai).date_naive();
    let first = NaiveDate::from_ymd_opt(today.year(), today.month(), 1).unwrap();
    let previous = first - Duration::days(1);
    noon(NaiveDate::from_ymd_opt(previous.year(), previous.month(), 15).unwrap())
}

fn last_year() -> DateTime<Utc> {
    let today = Utc::now().with_timezone(&Shanghai).date_naive();
    noon(NaiveDate::from_ymd_opt(today.year() - 1, 6, 15).unwrap())
}

/// Memories of the same kinds at different times: where the family ate, what they did, and
/// (last month and last year only) which film they saw. Until the 12th of a month the memories
/// of a few days ago are last month's too, so the question of last month asks for the one kind
/// nothing else of last month's window is: the film.
fn memories() -> Vec<(&'static str, DateTime<Utc>, &'static str)> {
    vec![
        (FAMILY, days_ago(1), "晚饭去了海底捞吃火锅"),
        (FAMILY, days_ago(1), "下午带孩子去公园放风筝"),
        (FAMILY, days_ago(3), "晚饭去了西贝吃莜面"),
        (FAMILY, days_ago(3), "下午带孩子去游泳"),
        (FAMILY, days_ago(12), "晚饭去了外婆家吃杭帮菜"),
        (FAMILY, days_ago(12), "下午带孩子去科技馆"),
        (FAMILY, last_month(), "晚饭去了绿茶餐厅"),
        (FAMILY, last_month(), "下午带孩子去动物园看熊猫"),
        (FAMILY, last_month(), "全家看了电影《哪吒》"),
        (FAMILY, last_year(), "晚饭去了全聚德吃烤鸭"),
        (FAMILY, last_year(), "下午带孩子去故宫"),
        (FAMILY, last_year(), "全家看了电影《封神》"),
        // Another scope, yesterday: never visible to the family.
        (WORK, days_ago(1), "晚饭去了肯德基开会"),
    ]
}

/// Question → the memory it must recall first.
const QUESTIONS: [(&str, &str); 10] = [
    ("昨天晚饭去哪吃的", "晚饭去了海底捞吃火锅"),
    ("昨天下午带孩子去哪玩了", "下午带孩子去公园放风筝"),
    ("三天前晚饭吃的什么", "晚饭去了西贝吃莜面"),
    ("大前天下午孩子干嘛了", "下午带孩子去游泳"),
    ("12天前去哪家餐厅吃的饭", "晚饭去了外婆家吃杭帮菜"),
    ("上个月看的什么电影", "全家看了电影《哪吒》"),
    ("去年看的什么电影", "全家看了电影《封神》"),
    ("去年晚饭去哪吃的", "晚饭去了全聚德吃烤鸭"),
    ("去年带孩子去哪玩了", "下午带孩子去故宫"),
    (
        "what did we have for dinner yesterday",
        "晚饭去了海底捞吃火锅",
    ),
];

async fn seed(host: &PluginHost) {
    let e5 = common::e5();
    let texts: Vec<String> = memories().iter().map(|(_, _, t)| t.to_string()).collect();
    let vectors = e5
        .embed(scopemem::embed::TextRole::Passage, texts)
        .await
        .unwrap();
    let rows = memories()
        .into_iter()
        .zip(vectors)
        .map(|((conversation, created, text), vector)| {
            let scope = if conversation == FAMILY {
                "家人"
            } else {
                "工作"
            };
            let record = scopemem::store::MemoryRecord {
                id: uuid::Uuid::now_v7().to_string(),
                content: text.into(),
                reasoning: None,
                tags: vec![],
                memory_type: "event".into(),
                strength: 50,
                is_active: true,
                conversation_id: Some(conversation.into()),
                created_at: Some(created),
                memory_scope: Some(scope.into()),
                scope_source: Some("conversation".into()),
                expires_at: None,
                last_recalled_at: None,
                speaker_id: None,
                speaker_name: None,
                source_ids: vec![],
                about_ids: vec![],
                source_conversations: vec![],
            };
            (record, vector)
        })
        .collect();
    host.memory().store().append(rows).await.unwrap();
}

async fn recall(host: &PluginHost, conversation: &str, query: &str) -> Value {
    host.invoke(
        "recall",
        json!({"conversation_id": conversation, "query": query, "limit": 5, "relevance_gate": false}),
    )
    .await
    .unwrap_or_else(|e| panic!("{query}: {e}"))
}

fn texts(r: &Value) -> Vec<String> {
    common::recalled_texts(r)
}

async fn start(dir: &std::path::Path, resident_max_rows: u64) -> PluginHost {
    start_with(common::config(dir, family_map()), resident_max_rows).await
}

async fn start_with(mut config: scopemem::config::Config, resident_max_rows: u64) -> PluginHost {
    config.recall.timezone = "Asia/Shanghai".into();
    config.recall.resident_max_rows = resident_max_rows as usize;
    let host = PluginHost::start_with(config, None, common::e5())
        .await
        .expect("host starts");
    seed(&host).await;
    host
}

/// Every time question, through the resident copy and through LanceDB (resident search off):
/// the right memory first, the window reported, nothing of another scope.
#[tokio::test]
async fn questions_that_name_a_time_recall_from_that_window() {
    for resident_max_rows in [1_000_000, 0] {
        let dir = tempfile::tempdir().unwrap();
        let host = start(dir.path(), resident_max_rows).await;
        let mut first = 0;
        for (question, want) in QUESTIONS {
            let r = recall(&host, FAMILY, question).await;
            let got = texts(&r);
            assert!(
                !got.iter().any(|t| t.contains("肯德基")),
                "{question}: {got:?}"
            );
            let window = &r["time_window"];
            assert_eq!(window["empty"], false, "{question}: {r}");
            assert_eq!(window["timezone"], "Asia/Shanghai");
            first += usize::from(got.first().map(String::as_str) == Some(want));
            assert_eq!(
                got.first().map(String::as_str),
                Some(want),
                "{question}: {got:?}"
            );
        }
        println!(
            "RESULT time questions (resident_max_rows {resident_max_rows}): hit@1 {first} of {}",
            QUESTIONS.len()
        );
        host.shutdown().await;
    }
}

/// A window with nothing in it says so and recalls as if no time was named; a question without
/// time words gets no window; a request's own zone is checked.
#[tokio::test]
async fn an_empty_window_falls_back_and_other_questions_are_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let host = start(dir.path(), 1_000_000).await;
    let r = recall(&host, FAMILY, "前年晚饭去哪吃的").await;
    assert_eq!(r["time_window"]["empty"], true, "{r}");
    assert!(!texts(&r).is_empty(), "falls back to no window: {r}");
    assert!(!texts(&r).iter().any(|t| t.contains("肯德基")));

    let r = recall(&host, FAMILY, "晚饭去哪吃的").await;
    assert!(r.get("time_window").is_none(), "{r}");
    assert_eq!(texts(&r).len(), 5);
    // `time_words: false` searches the words as written: no window, every dinner a candidate.
    let r = host
        .invoke(
            "recall",
            json!({"conversation_id": FAMILY, "query": "去年晚饭去哪吃的", "limit": 5,
                   "relevance_gate": false, "time_words": false}),
        )
        .await
        .unwrap();
    assert!(r.get("time_window").is_none(), "{r}");
    assert!(
        texts(&r).iter().filter(|t| t.starts_with("晚饭")).count() >= 3,
        "{r}"
    );

    let e = host
        .invoke(
            "recall",
            json!({"conversation_id": FAMILY, "query": "昨天吃了什么", "timezone": "Mars/Olympus"}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, "invalid_input", "{}", e.message);
    // A zone far west: "yesterday" there is another day, and the answer follows it.
    let r = host
        .invoke(
            "recall",
            json!({"conversation_id": FAMILY, "query": "昨天晚饭去哪吃的", "timezone": "Pacific/Honolulu",
                   "limit": 5, "relevance_gate": false}),
        )
        .await
        .unwrap();
    assert_eq!(r["time_window"]["timezone"], "Pacific/Honolulu", "{r}");
    host.shutdown().await;
}

/// With the relevance gate on (the default, as the injection path runs), a question that names
/// a time still recalls its memory, and chat that names a time recalls nothing: inside a
/// window the gate asks a smaller margin (`memory::relevance::WINDOW_GATE_MARGIN`), not none.
#[tokio::test]
async fn the_relevance_gate_lets_time_questions_through_and_holds_time_chat_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path(), family_map());
    // The shipped recall settings (the tests' config turns the gate and the cut off).
    config.recall = scopemem::config::Config::from_value(&json!({}))
        .unwrap()
        .config
        .recall;
    let host = start_with(config, 1_000_000).await;
    common::calibrated(&host).await;
    let gated = |query: &'static str| {
        let host = &host;
        async move {
            host.invoke(
                "recall",
                json!({"conversation_id": FAMILY, "query": query, "limit": 5,
                       "relevance_gate": true}),
            )
            .await
            .unwrap_or_else(|e| panic!("{query}: {e}"))
        }
    };
    let mut first = Vec::new();
    for (question, want) in QUESTIONS {
        let r = gated(question).await;
        if texts(&r).first().map(String::as_str) == Some(want) {
            first.push(question);
        }
    }
    println!(
        "RESULT time questions with the gate on: hit@1 {} of {}",
        first.len(),
        QUESTIONS.len()
    );
    assert!(first.len() >= 9, "answered first: {first:?}");
    for chat in [
        "今天好累啊",
        "昨天睡得好香",
        "最近好忙啊",
        "上周太累了",
        "lol today",
    ] {
        let r = gated(chat).await;
        assert!(texts(&r).is_empty(), "{chat}: {r}");
        assert_eq!(r["gated"], "no_relevant_memory", "{chat}: {r}");
    }
    host.shutdown().await;
}
