//! `scopemem demo`: writes memories from a family group, a work group and an unmapped private
//! chat through a running service, then shows who recalls what.

use serde_json::{json, Value};

/// The conversations the demo config maps (see scripts/run-demo.sh).
pub const FAMILY: &str = "default:GroupMessage:12345";
pub const WORK: &str = "default:GroupMessage:67890";
pub const PRIVATE: &str = "default:FriendMessage:424242";

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("cannot reach scopemem at {url}: {message}")]
    Http { url: String, message: String },
    #[error("{endpoint} answered {status}: {body}")]
    Status {
        endpoint: String,
        status: u16,
        body: String,
    },
}

async fn post(
    client: &reqwest::Client,
    base: &str,
    path: &str,
    body: Value,
) -> Result<Value, DemoError> {
    let url = format!("{base}{path}");
    let resp = client
        .post(&url)
        .json(&body)
        .send()
        .await
        .map_err(|e| DemoError::Http {
            url: url.clone(),
            message: e.to_string(),
        })?;
    let status = resp.status().as_u16();
    let text = resp.text().await.map_err(|e| DemoError::Http {
        url: url.clone(),
        message: e.to_string(),
    })?;
    if status != 200 {
        return Err(DemoError::Status {
            endpoint: path.into(),
            status,
            body: text,
        });
    }
    serde_json::from_str(&text).map_err(|e| DemoError::Http {
        url,
        message: e.to_string(),
    })
}

/// Run the demo against `base` (e.g. `http://127.0.0.1:8787`), printing to stdout.
pub async fn run(base: &str) -> Result<(), DemoError> {
    let base = base.trim_end_matches('/');
    let client = reqwest::Client::new();
    let writes = [
        (
            FAMILY,
            "家人群",
            "Grandma's birthday dinner is on Saturday at 6pm at her house",
            "event",
        ),
        (
            FAMILY,
            "家人群",
            "Mom is allergic to peanuts, never order satay for her",
            "knowledge",
        ),
        (
            WORK,
            "work group",
            "The Q3 launch review moved to Thursday at 10am in room 4B",
            "event",
        ),
        (
            WORK,
            "work group",
            "The staging database password rotates every Monday",
            "knowledge",
        ),
        (
            PRIVATE,
            "private chat",
            "The user's favourite food is spicy hotpot",
            "knowledge",
        ),
    ];
    println!("== Writing memories ==");
    let mut written = Vec::new();
    for (conv, label, content, ty) in writes {
        let r = post(
            &client,
            base,
            "/v1/remember",
            json!({"conversation_id": conv, "content": content, "memory_type": ty}),
        )
        .await?;
        println!(
            "  [{label:<12}] scope={:<8} ({:<12}) {content}",
            r["memory"]["memory_scope"].as_str().unwrap_or("?"),
            r["memory"]["scope_source"].as_str().unwrap_or("?"),
        );
        written.push((
            r["memory"]["id"].as_str().unwrap_or_default().to_string(),
            r["memory"]["memory_scope"]
                .as_str()
                .unwrap_or("?")
                .to_string(),
            content,
        ));
    }
    // Who sees what: probe every memory from every conversation with its own text as the
    // query; a memory is visible when the recall returns its id.
    let convs = [
        (FAMILY, "家人群"),
        (WORK, "work group"),
        (PRIVATE, "private chat"),
    ];
    println!("\n== Who sees what (recall from each conversation) ==");
    println!(
        "  {:<64} {:^8} {:^10} {:^12}",
        "memory [scope]", "家人群", "work group", "private chat"
    );
    for (id, scope, content) in &written {
        let mut cells = Vec::new();
        for (conv, _) in convs {
            let r = post(
                &client,
                base,
                "/v1/recall",
                json!({"conversation_id": conv, "query": content, "limit": 5}),
            )
            .await?;
            let seen = r["memories"]
                .as_array()
                .is_some_and(|ms| ms.iter().any(|m| m["id"].as_str() == Some(id)));
            cells.push(if seen { "sees" } else { "-" });
        }
        let label: String = format!("[{scope}] {content}").chars().take(64).collect();
        println!(
            "  {label:<64} {:^8} {:^10} {:^12}",
            cells[0], cells[1], cells[2]
        );
    }
    let q = "When is grandma's birthday dinner?";
    println!("\n== \"{q}\" asked from each conversation ==");
    for (conv, label) in convs {
        let r = post(
            &client,
            base,
            "/v1/recall",
            json!({"conversation_id": conv, "query": q, "limit": 5}),
        )
        .await?;
        println!(
            "-- {label} ({conv}), current scope {}:",
            r["memory_scope"].as_str().unwrap_or("?")
        );
        let empty = Vec::new();
        let hits = r["memories"].as_array().unwrap_or(&empty);
        if hits.is_empty() {
            println!("      (nothing above the similarity threshold)");
        }
        for h in hits {
            println!(
                "      {:.2}  [{}] {}",
                h["score"].as_f64().unwrap_or(0.0),
                h["memory_scope"].as_str().unwrap_or("NULL"),
                h["content"].as_str().unwrap_or("")
            );
        }
    }
    println!("\nFamily memories stay in 家人, work memories in 工作; the unmapped private chat writes public memories that everyone sees.");
    Ok(())
}
