//! `scopemem demo`: writes memories from a family group, a work group and an unmapped private
//! chat through a running service, then shows who recalls what: two questions searched by hand
//! (`/v1/recall`, never gated) and a greeting said to the bot (`/v1/events/llm_request`, the
//! injection path, which the relevance gate guards). Then what a group gets (issue 78): its
//! members talk among themselves, a fact among the chatter, and a member asks the bot; the
//! block the bot's prompt gets is printed, and a private chat's line stays out of it.

use serde_json::{json, Value};
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

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
    send(client.post(format!("{base}{path}")).json(&body), base, path).await
}

/// Send one request to `base` + `path`; its JSON body, or why there is none.
async fn send(
    request: reqwest::RequestBuilder,
    base: &str,
    path: &str,
) -> Result<Value, DemoError> {
    let url = format!("{base}{path}");
    let resp = request.send().await.map_err(|e| DemoError::Http {
        url: url.clone(),
        message: e.to_string(),
    })?;
    let status = resp.status().as_u16();
    let text = resp.text().await.map_err(|e| DemoError::Http {
        url: url.clone(),
        message: e.to_string(),
    })?;
    // 202: a chat message accepted for the working memory.
    if status != 200 && status != 202 {
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
    let written = write_memories(&client, base).await?;
    who_sees_what(&client, base, &written).await?;
    // An English question about a Chinese memory and a Chinese paraphrase, searched by hand.
    for q in [
        "When is grandma's birthday dinner?",
        "妈妈有什么东西不能吃？",
    ] {
        println!("\n== \"{q}\" searched from each conversation (/v1/recall) ==");
        for (conv, label) in CONVERSATIONS {
            ask(&client, base, conv, label, q).await?;
        }
    }
    // Small talk, as a bot asks before each prompt. The relevance gate weighs a message on
    // the model's measured scale, so the injection waits for the model's calibration.
    calibrated(&client, base).await?;
    let q = "早上好呀";
    println!("\n== \"{q}\" said to the bot in each conversation (/v1/events/llm_request) ==");
    for (conv, label) in CONVERSATIONS {
        ask_as_the_bot(&client, base, conv, label, q).await?;
    }
    println!("\nFamily memories stay in 家人, work memories in 工作; the unmapped private chat writes public memories that everyone sees. A search never returns another scope's memory, and small talk to the bot injects nothing.");
    group_chat(&client, base).await?;
    summary(&client, base).await
}

/// The demo's conversations and their labels, in the order the tables show them.
const CONVERSATIONS: [(&str, &str); 3] = [
    (FAMILY, "家人群"),
    (WORK, "work group"),
    (PRIVATE, "private chat"),
];

/// Write stage: remember the demo's memories, printing the scope each got; returns each
/// one's `(id, scope, content)`.
async fn write_memories(
    client: &reqwest::Client,
    base: &str,
) -> Result<Vec<(String, String, &'static str)>, DemoError> {
    let writes = [
        (
            FAMILY,
            "家人群",
            "奶奶的八十大寿定在周六晚上六点，在她家里吃饭",
            "event",
        ),
        (
            FAMILY,
            "家人群",
            "妈妈对花生过敏，点菜时千万别点沙爹",
            "knowledge",
        ),
        (
            WORK,
            "work group",
            "第三季度发布评审改到周四上午十点，在4B会议室",
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
            client,
            base,
            "/v1/remember",
            json!({"conversation_id": conv, "content": content, "memory_type": ty}),
        )
        .await?;
        println!(
            "  [{}] scope={} ({}) {content}",
            left(label, 12),
            left(r["memory"]["memory_scope"].as_str().unwrap_or("?"), 8),
            left(r["memory"]["scope_source"].as_str().unwrap_or("?"), 12),
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
    Ok(written)
}

/// Visibility stage: probe every memory from every conversation with its own text as the
/// query (a memory is visible when the recall returns its id), and print the table.
async fn who_sees_what(
    client: &reqwest::Client,
    base: &str,
    written: &[(String, String, &str)],
) -> Result<(), DemoError> {
    println!("\n== Who sees what (recall from each conversation) ==");
    println!(
        "  {} {} {} {}",
        left("[scope] memory", LABEL_WIDTH),
        centred("家人群", 12),
        centred("work group", 12),
        centred("private chat", 12)
    );
    for (id, scope, content) in written {
        let mut cells = Vec::new();
        for (conv, _) in CONVERSATIONS {
            let r = post(
                client,
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
        println!(
            "  {} {} {} {}",
            left(&format!("[{scope}] {content}"), LABEL_WIDTH),
            centred(cells[0], 12),
            centred(cells[1], 12),
            centred(cells[2], 12)
        );
    }
    Ok(())
}

/// Recall `q` from `conv` and print what comes back, or why nothing does.
async fn ask(
    client: &reqwest::Client,
    base: &str,
    conv: &str,
    label: &str,
    q: &str,
) -> Result<(), DemoError> {
    let r = post(
        client,
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
        match r["gated"].as_str() {
            Some(_) => println!("      (nothing: no visible memory answers this)"),
            None => println!("      (nothing above the similarity threshold)"),
        }
    }
    for h in hits {
        println!(
            "      {:.2}  [{}] {}",
            h["score"].as_f64().unwrap_or(0.0),
            h["memory_scope"].as_str().unwrap_or("NULL"),
            h["content"].as_str().unwrap_or("")
        );
    }
    Ok(())
}

/// How long the demo waits for the model's calibration (it takes seconds; a loaded machine
/// may take longer).
const CALIBRATION_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// Until `/v1/status` shows the model's calibration, at most [`CALIBRATION_WAIT`].
async fn calibrated(client: &reqwest::Client, base: &str) -> Result<(), DemoError> {
    let started = std::time::Instant::now();
    let mut said = false;
    loop {
        let status = send(client.get(format!("{base}/v1/status")), base, "/v1/status").await?;
        if !status["embedding_calibration"].is_null() || started.elapsed() > CALIBRATION_WAIT {
            return Ok(());
        }
        if !said {
            println!(
                "\n(waiting for the embedding model's calibration, which the relevance gate uses)"
            );
            said = true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// What the bot would get in its prompt for `q` in `conv` (the injection path), or that it
/// gets nothing.
async fn ask_as_the_bot(
    client: &reqwest::Client,
    base: &str,
    conv: &str,
    label: &str,
    q: &str,
) -> Result<(), DemoError> {
    let r = post(
        client,
        base,
        "/v1/events/llm_request",
        json!({"conversation_id": conv, "query": q}),
    )
    .await?;
    println!("-- {label} ({conv}):");
    match r["injection"].as_str().unwrap_or("") {
        "" => println!("      (nothing injected: the message asks for no memory)"),
        block => {
            for line in block.lines() {
                println!("      {line}");
            }
        }
    }
    Ok(())
}

/// What the family group's members say among themselves (sender, name, text): a fact among
/// the chatter, none of it said to the bot.
const GROUP_TALK: [(&str, &str, &str); 6] = [
    ("u-mei", "小红", "早上好呀各位"),
    ("u-ming", "小明", "周日外婆的生日宴订在哪了？"),
    (
        "u-wang",
        "老王",
        "订好了，还是老地方，周日中午十二点，包间叫牡丹厅",
    ),
    ("u-mei", "小红", "哈哈哈收到"),
    ("u-ming", "小明", "[图片]"),
    ("u-li", "李姐", "今天好冷啊，大家多穿点"),
];

/// A line said in the unmapped private chat: it stays there.
const PRIVATE_LINE: &str = "我下个月要去医院做个小手术，别告诉群里的人";

/// Group stage: the family's talk and a private line reach the working memory as the plugins
/// send every message; then a member asks the bot in the group, as the plugins ask (the
/// question to the chat, then the injection event with who asks), and a member greets it.
async fn group_chat(client: &reqwest::Client, base: &str) -> Result<(), DemoError> {
    println!("\n== A group chat: members talk among themselves, then one asks the bot ==");
    let say = |conv: &'static str,
               (id, name, text): (&'static str, &'static str, &'static str),
               to_bot: bool| {
        post(
            client,
            base,
            "/v1/events/message",
            json!({"conversation_id": conv, "sender_id": id, "sender_name": name,
                   "text": text, "to_bot": to_bot}),
        )
    };
    for line in GROUP_TALK {
        say(FAMILY, line, false).await?;
        println!("  [家人群] {}: {}", line.1, line.2);
    }
    say(PRIVATE, ("u-ming", "小明", PRIVATE_LINE), false).await?;
    println!("  [private chat] 小明: {PRIVATE_LINE}");
    messages_embedded(client, base).await?;
    let question = ("u-ming", "小明", "@小助手 外婆生日宴在哪来着？几点？");
    say(FAMILY, question, true).await?;
    println!("  [家人群] {}: {}  (to the bot)", question.1, question.2);
    let r = post(
        client,
        base,
        "/v1/events/llm_request",
        json!({"conversation_id": FAMILY, "query": question.2, "sender_id": question.0}),
    )
    .await?;
    let block = r["injection"].as_str().unwrap_or("");
    println!("-- what the bot's prompt gets in 家人群:");
    for line in block.lines() {
        println!("      {line}");
    }
    let leaked = block.contains("手术");
    println!(
        "-- the private chat's line in the group's block: {}",
        if leaked { "YES (a leak)" } else { "no" }
    );
    let greeting = ("u-mei", "小红", "@小助手 早上好");
    say(FAMILY, greeting, true).await?;
    let r = post(
        client,
        base,
        "/v1/events/llm_request",
        json!({"conversation_id": FAMILY, "query": greeting.2, "sender_id": greeting.0}),
    )
    .await?;
    match r["injection"].as_str().unwrap_or("") {
        "" => println!("-- \"{}\" to the bot: nothing injected", greeting.2),
        _ => println!("-- \"{}\" to the bot: injected a block", greeting.2),
    }
    Ok(())
}

/// Until the working memory has embedded every message it was sent (`/v1/status`), at most
/// [`CALIBRATION_WAIT`].
async fn messages_embedded(client: &reqwest::Client, base: &str) -> Result<(), DemoError> {
    let started = std::time::Instant::now();
    loop {
        let status = send(client.get(format!("{base}/v1/status")), base, "/v1/status").await?;
        let waiting = status["working_memory"]["waiting"].as_u64().unwrap_or(0);
        if waiting == 0 || started.elapsed() > CALIBRATION_WAIT {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The closing lines: what the table holds, where, and where to look next.
async fn summary(client: &reqwest::Client, base: &str) -> Result<(), DemoError> {
    let status = send(client.get(format!("{base}/v1/status")), base, "/v1/status").await?;
    let by_scope: Vec<String> = status["rows_by_scope"]
        .as_object()
        .map(|m| m.iter().map(|(scope, n)| format!("{scope} {n}")).collect())
        .unwrap_or_default();
    println!("\n== Summary ==");
    println!(
        "  {} memories ({}), stored in {}",
        status["rows"],
        by_scope.join(", "),
        status["location"].as_str().unwrap_or("?")
    );
    println!("  operator page: {base}/ui    status: {base}/v1/status");
    Ok(())
}

/// Display columns the memory column of the table takes.
const LABEL_WIDTH: usize = 64;

/// `text` cut and padded to `width` terminal columns: a CJK character takes two, so `{:<n}`
/// (which counts characters) misaligned every row holding Chinese.
fn left(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > width {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push_str(&" ".repeat(width - used));
    out
}

/// `text` centred in `width` terminal columns (cut to fit).
fn centred(text: &str, width: usize) -> String {
    let text = left(text, width.min(text.width()));
    let spare = width.saturating_sub(text.width());
    format!(
        "{}{text}{}",
        " ".repeat(spare / 2),
        " ".repeat(spare - spare / 2)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_counted_in_terminal_cells() {
        assert_eq!(left("家人群", 8), "家人群  ");
        assert_eq!(left("work", 6), "work  ");
        assert_eq!(
            left("家人群很长", 7),
            "家人群 ",
            "a wide character never splits"
        );
        assert_eq!(centred("家人群", 12).width(), 12);
        assert_eq!(centred("家人群", 12), "   家人群   ");
        assert_eq!(centred("sees", 12).width(), 12);
        for row in ["[家人] 妈妈对花生过敏", "[public] The user likes hotpot"] {
            assert_eq!(left(row, LABEL_WIDTH).width(), LABEL_WIDTH);
        }
    }
}
