//! Queries from the conversation (issue 48, `memory::turns`): a follow-up that names nothing
//! recalls the memory the turns before it were about, through `/v1/recall` and the injection
//! event, with the real e5 model on a real LanceDB directory; the history is bounded and
//! checked; and recalls with different histories at once each get their own answer.

use crate::common;

use std::sync::Arc;

use common::{family_map, FAMILY, WORK};
use scopemem::host::PluginHost;
use serde_json::{json, Value};

const FAMILY_MEMORIES: [&str; 6] = [
    "奶奶上个月做了白内障手术，现在看东西清楚多了",
    "外公有糖尿病，月饼和粽子都不能多吃",
    "小雨的生日是三月十二号，她一直想要一只小狗",
    "爸爸周末要去钓鱼，别约他吃饭",
    "妈妈对青霉素过敏，打针前一定要提醒医生",
    "表哥在深圳做程序员，过年才回来",
];

/// Turns as a host sends them, oldest first.
fn history(turns: &[(&str, &str)]) -> Value {
    Value::Array(
        turns
            .iter()
            .map(|(role, content)| json!({"role": role, "content": content}))
            .collect(),
    )
}

async fn calibrated_host(dir: &std::path::Path) -> PluginHost {
    let host = PluginHost::start_with(common::shipped_config(dir), None, common::e5())
        .await
        .expect("host starts");
    for m in FAMILY_MEMORIES {
        common::remember(&host, FAMILY, m).await;
    }
    common::calibrated(&host).await;
    host
}

fn first(r: &Value) -> Option<String> {
    common::recalled_texts(r).into_iter().next()
}

/// "那后来呢？" names nothing: alone, the injection event injects nothing and a recall's first
/// memory is anyone's guess; with the turns about grandma's eyes, both find the operation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follow_up_finds_what_the_turns_before_it_were_about() {
    let dir = tempfile::tempdir().unwrap();
    let host = calibrated_host(dir.path()).await;
    let turns = history(&[
        ("user", "我想聊聊奶奶，她的眼睛之前一直看不清楚"),
        ("assistant", "是啊，记得她说过要去医院看看。"),
    ]);
    let follow_up = "那后来呢？";

    let ask = |op: &'static str, conversation: &'static str, query: &'static str, with: bool| {
        let host = &host;
        let mut body = json!({"conversation_id": conversation, "query": query});
        if op == "recall" {
            body["limit"] = json!(3);
        }
        if with {
            body["history"] = turns.clone();
        }
        async move { host.invoke(op, body).await.unwrap() }
    };
    let before = host.memory().query_cost();
    let alone = ask("on_llm_request", FAMILY, follow_up, false).await;
    assert_eq!(alone["injection"], "", "{alone}");
    let after_alone = host.memory().query_cost();
    let injected = ask("on_llm_request", FAMILY, follow_up, true).await;
    // What the turns cost is counted (`/metrics`): the message came from the query cache, the
    // context took the model.
    let after_turns = host.memory().query_cost();
    assert_eq!(after_alone.texts_embedded - before.texts_embedded, 1);
    assert_eq!(after_turns.texts_embedded - after_alone.texts_embedded, 1);
    assert_eq!(after_turns.hits - after_alone.hits, 1);
    assert!(after_turns.model_seconds > after_alone.model_seconds);
    assert!(
        injected["injection"]
            .as_str()
            .is_some_and(|b| b.contains("白内障手术")),
        "{injected}"
    );
    let r = ask("recall", FAMILY, follow_up, true).await;
    assert_eq!(first(&r).as_deref(), Some(FAMILY_MEMORIES[0]), "{r}");
    // The current message still leads: a new question after the same turns is answered.
    let r = ask("recall", FAMILY, "外公能吃月饼吗", true).await;
    assert_eq!(first(&r).as_deref(), Some(FAMILY_MEMORIES[1]), "{r}");
    // Turns never widen the scope: the work group sees none of it.
    let r = ask("recall", WORK, follow_up, true).await;
    assert!(common::recalled_texts(&r).is_empty(), "{r}");
    host.shutdown().await;
}

/// A message to the bot (`to_bot`) has its recall's texts embedded as it arrives, before the
/// host asks (`recall::prefetch`): after one exchange teaches the service that this host's
/// history is its dialogue with the bot, the next question's injection event runs the model
/// for nothing, with the real e5 model. A history the service did not foresee is not embedded
/// for an injection: its vector is the message's alone (issue 78).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_message_to_the_bot_is_embedded_before_its_recall_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let host = calibrated_host(dir.path()).await;
    // The embedding ahead is a background task, as the working memory's worker is.
    host.start_background();
    let say = |text: &'static str, is_bot: bool| {
        let host = &host;
        let (sender, to_bot) = if is_bot { ("bot", false) } else { ("u1", true) };
        async move {
            let body = json!({"conversation_id": FAMILY, "sender_id": sender, "text": text,
                              "is_bot": is_bot, "to_bot": to_bot});
            host.invoke("on_message", body).await.unwrap()
        }
    };
    let ask = |query: &'static str, turns: &[(&str, &str)]| {
        let host = &host;
        let body = json!({"conversation_id": FAMILY, "query": query, "history": history(turns)});
        async move { host.invoke("on_llm_request", body).await.unwrap() }
    };
    let embedded = || host.memory().query_cost().texts_embedded;
    // Waits for the texts embedded ahead: the message, and with known turns the context.
    let settled = |texts: u64| {
        let embedded = &embedded;
        async move {
            let done =
                common::eventually(std::time::Duration::from_secs(60), || embedded() >= texts)
                    .await;
            assert!(done, "{texts} query texts embedded ahead");
        }
    };
    let (q1, r1) = (
        "奶奶的眼睛最近怎么样？",
        "上个月做了白内障手术，现在好多了。",
    );
    let (q2, r2) = ("手术是哪家医院做的？", "我不记得医院的名字了。");
    let q3 = "那她现在能看书了吗？";

    let start = embedded();
    say(q1, false).await;
    // 最近 names a window for the memories, searched without it; the recent messages are
    // searched with the words as written (no window): two texts.
    settled(start + 2).await;
    ask(q1, &[]).await;
    assert_eq!(
        embedded(),
        start + 2,
        "the message alone was embedded ahead, with and without its time word"
    );
    say(r1, true).await;
    // The service does not know the history's shape yet: the injection's vector is the
    // message's alone (embedded ahead), so the bot waits no longer than for the question
    // alone; the unforeseen context is not embedded at all.
    say(q2, false).await;
    settled(start + 3).await;
    ask(q2, &[("user", q1), ("assistant", r1)]).await;
    assert_eq!(
        embedded(),
        start + 3,
        "the injection embedded an unforeseen context"
    );
    say(r2, true).await;
    // Now it does: the next question and its turns are embedded before it is asked.
    say(q3, false).await;
    settled(start + 5).await;
    let (joins, hits) = (
        host.memory().query_cost().joins,
        host.memory().query_cost().hits,
    );
    let injected = ask(
        q3,
        &[
            ("user", q1),
            ("assistant", r1),
            ("user", q2),
            ("assistant", r2),
        ],
    )
    .await;
    assert_eq!(
        embedded(),
        start + 5,
        "the recall ran the model for nothing"
    );
    let cost = host.memory().query_cost();
    assert!(cost.hits + cost.joins >= hits + joins + 2, "{cost:?}");
    let ahead = host.memory().embedded_ahead();
    assert_eq!(
        (ahead.prefetched, ahead.predicted, ahead.followed),
        (3, 1, 3),
        "{ahead:?}"
    );
    assert!(
        injected["injection"]
            .as_str()
            .is_some_and(|b| b.contains("白内障手术")),
        "{injected}"
    );
    host.shutdown().await;
}

/// A history is checked like any input: a role other than user or assistant, a turn without
/// content and more than 50 turns are the caller's error (400 on HTTP), and naming the field
/// wrong is refused rather than ignored.
#[tokio::test]
async fn a_bad_history_is_the_callers_error() {
    let dir = tempfile::tempdir().unwrap();
    let host = common::host(common::config(dir.path(), family_map())).await;
    let too_many: Vec<Value> = (0..51)
        .map(|i| json!({"role": "user", "content": format!("turn {i}")}))
        .collect();
    for (op, history) in [
        ("recall", json!([{"role": "system", "content": "x"}])),
        ("recall", json!([{"role": "user"}])),
        (
            "recall",
            json!([{"role": "user", "content": "x", "scope": "家人"}]),
        ),
        ("recall", Value::Array(too_many.clone())),
        ("on_llm_request", Value::Array(too_many)),
        ("on_llm_request", json!("not a list")),
    ] {
        let err = host
            .invoke(
                op,
                json!({"conversation_id": FAMILY, "query": "q", "history": history}),
            )
            .await
            .expect_err("refused");
        assert!(err.is_client_error(), "{op}: {}", err.message);
        assert_eq!(err.code, "invalid_input", "{op}: {}", err.message);
    }
    // 50 turns are fine; empty ones are skipped.
    let fifty: Vec<Value> = (0..50)
        .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": if i == 49 { String::new() } else { format!("turn {i}") }, "name": "张三"}))
        .collect();
    host.invoke(
        "recall",
        json!({"conversation_id": FAMILY, "query": "q", "history": fifty}),
    )
    .await
    .expect("50 turns");
    host.shutdown().await;
}

/// Sixteen recalls at once, each after its own turns, each get the memory its turns were
/// about: the batch embedding and the query cache keep every recall's vectors its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recalls_with_their_own_turns_at_once_each_get_their_answer() {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(calibrated_host(dir.path()).await);
    let topics: [(&str, &str); 4] = [
        ("奶奶的眼睛之前一直看不清楚，要去医院", FAMILY_MEMORIES[0]),
        ("外公最近血糖又高了，中秋快到了", FAMILY_MEMORIES[1]),
        ("妈妈下周要去医院打针", FAMILY_MEMORIES[4]),
        ("表哥过年回不回来？他在外地工作", FAMILY_MEMORIES[5]),
    ];
    let mut tasks = Vec::new();
    for i in 0..16usize {
        let host = host.clone();
        let (turn, want) = topics[i % topics.len()];
        tasks.push(tokio::spawn(async move {
            let turns = history(&[("user", turn), ("assistant", &format!("嗯嗯 ({i})"))]);
            let r = host
                .invoke(
                    "recall",
                    json!({"conversation_id": FAMILY, "query": "后来怎么样了？",
                           "history": turns, "limit": 3}),
                )
                .await
                .unwrap();
            (turn, want, first(&r))
        }));
    }
    let mut wrong = Vec::new();
    for t in tasks {
        let (turn, want, got) = t.await.unwrap();
        if got.as_deref() != Some(want) {
            wrong.push(format!("{turn}: want {want}, got {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
