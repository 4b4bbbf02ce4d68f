//! Incognito conversations (`incognito` config): recall works as usual, every write path stores
//! nothing and answers `"stored": false`, never an error. Against a real `scopemem serve`
//! process so the HTTP status codes and the hot reload are the ones users get.

use crate::common;

use std::time::Duration;

use common::serve::{post, spawn_serve, status};
use common::*;
use serde_json::{json, Value};

const GHOST: &str = "Ghost";
const SECRET: &str = "incognito-secret-zebra-7781";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incognito_writes_store_nothing_and_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let extra = json!({"incognito": [PRIVATE, format!("persona:{GHOST}")]});
    let s = spawn_serve(dir.path(), "incognito", extra).await;
    let c = reqwest::Client::new();

    let (code, family) = post(
        &c,
        &s,
        "/v1/remember",
        json!({"conversation_id": FAMILY,
        "content": "Grandma likes orchids"}),
    )
    .await;
    assert_eq!((code, &family["stored"]), (200, &json!(true)), "{family}");
    let (code, public) = post(
        &c,
        &s,
        "/v1/remember",
        json!({"conversation_id":
        "default:GroupMessage:55555", "content": "The bot's name is Momo"}),
    )
    .await;
    assert_eq!((code, &public["stored"]), (200, &json!(true)), "{public}");

    // Every write path from the incognito conversation or persona: 200, stored false.
    let not_stored = json!({"memory": null, "stored": false, "deduplicated": false});
    let no_job = json!({"job_id": null, "stored": false});
    let writes = [
        (
            "/v1/remember",
            json!({"conversation_id": PRIVATE, "content": SECRET}),
            &not_stored,
        ),
        (
            "/v1/remember",
            json!({"conversation_id": FAMILY, "persona": GHOST, "content": SECRET}),
            &not_stored,
        ),
        (
            "/v1/tools/core_memory_remember",
            json!({"conversation_id": PRIVATE, "arguments": {"content": SECRET}}),
            &not_stored,
        ),
        (
            "/v1/feedback",
            json!({"conversation_id": PRIVATE, "useful_memory_ids": [public["memory"]["id"]],
                   "new_memories": [{"content": SECRET}]}),
            &no_job,
        ),
        (
            "/v1/events/after_message_sent",
            json!({"conversation_id": PRIVATE, "user_message": SECRET, "bot_reply": "ok",
                   "recalled_memory_ids": [],
                   "reflection": {"new_memories": [{"content": SECRET}]}}),
            &no_job,
        ),
    ];
    for (path, body, expected) in writes {
        let (code, r) = post(&c, &s, path, body).await;
        assert_eq!((code, &r), (200, expected), "{path}");
    }

    // Input is still validated: a bad request is a 400, not a silent "stored": false.
    for body in [
        json!({"conversation_id": PRIVATE, "content": "  "}),
        json!({"conversation_id": PRIVATE, "content": "x", "memory_scope": "家人"}),
    ] {
        let (code, _) = post(&c, &s, "/v1/remember", body).await;
        assert_eq!(code, 400);
    }

    // Recall works as usual: the private chat sees public memories, the family group its own.
    let (code, r) = post(
        &c,
        &s,
        "/v1/recall",
        json!({"conversation_id": PRIVATE, "query": "what is the bot called"}),
    )
    .await;
    assert_eq!(code, 200, "{r}");
    assert_eq!(contents(&r), ["The bot's name is Momo"]);
    let (_, r) = post(
        &c,
        &s,
        "/v1/recall",
        json!({"conversation_id": FAMILY, "persona": GHOST,
        "query": "flowers"}),
    )
    .await;
    assert!(
        contents(&r).contains(&"Grandma likes orchids".to_string()),
        "{r}"
    );

    // Nothing of the incognito writes reached the table, a journal or any other file, and the
    // reinforcement from the incognito chat did not happen. Once no feedback job is waiting,
    // anything one of those writes had queued by mistake would have been applied.
    let st = common::until_some(Duration::from_secs(120), || async {
        let st = status(&c, &s).await;
        (st["feedback_queue_depth"] == 0).then_some(st)
    })
    .await
    .expect("the feedback queue drains");
    assert_eq!(st["rows"], 2, "{st}");
    assert_eq!(st["scope_map"]["incognito"], 2, "{st}");
    let (_, r) = post(
        &c,
        &s,
        "/v1/recall",
        json!({"conversation_id": PRIVATE, "query": "bot name"}),
    )
    .await;
    assert_eq!(r["memories"][0]["strength"], 50, "{r}");
    assert!(files_containing(dir.path(), SECRET).is_empty());

    // Hot reload: once the conversation leaves the list, its writes are stored again.
    let path = dir.path().join("incognito.json");
    let mut cfg: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    cfg["incognito"] = json!([]);
    let tmp = dir.path().join("incognito.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(&cfg).unwrap()).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    let mut stored = false;
    for _ in 0..100 {
        let st = status(&c, &s).await;
        if st["scope_map"]["incognito"] == 0 {
            let (code, r) = post(
                &c,
                &s,
                "/v1/remember",
                json!({"conversation_id": PRIVATE, "content": "now remembered"}),
            )
            .await;
            assert_eq!(code, 200, "{r}");
            stored = r["stored"] == json!(true) && r["memory"]["memory_scope"] == "public";
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        stored,
        "the reload must take the conversation out of incognito"
    );
}

fn contents(recall: &Value) -> Vec<String> {
    recall["memories"]
        .as_array()
        .unwrap_or_else(|| panic!("{recall}"))
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}
