//! The memory page inside AstrBot's dashboard (integrations/astrbot/views/memories/, issue 41
//! part 4), in a real browser against a real AstrBot 4.29.0 with its dashboard on.
//!
//! tests/astrbot/dashboard.py runs AstrBot (core and dashboard, on a free loopback port, with a
//! known admin password) with the plugin copied into data/plugins. The plugin runs this build's
//! `scopemem serve` itself (`scopemem_binary`), with a bearer token and the scope map in its own
//! config (one entry broken, so it fails closed). The test seeds memories over scopemem's API,
//! then tests/browser/astrbot.spec.mjs drives Debian's chromium through playwright-core: it
//! checks the plugin's web API refuses requests without the dashboard login, logs in, opens the
//! plugin's page and uses every part of it, checking each result against scopemem's own API.
//! Fails, never skips, when AstrBot's venv, chromium or playwright-core is missing.
//!
//! Screenshots go to `$CARGO_TARGET_TMPDIR/astrbot-dashboard/`; their paths are printed. With
//! `SCOPEMEM_UPDATE_SCREENSHOT=1` the one of the whole dashboard is also copied to
//! `docs/astrbot-memory-page.png` for integrations/astrbot/README.md.

use crate::common;
use crate::ui_browser::{check_prerequisites, deps_dir, CHROMIUM};

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::serve::free_port;
use common::{astrbot_python, FAMILY, PRIVATE, WORK};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

/// A chat whose map entry is broken (a space in the scope): scopemem fails it closed.
const BROKEN: &str = "default:GroupMessage:31337";
/// The chat the page maps and unmaps.
const NEW_KEY: &str = "default:GroupMessage:55555";

fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Where the set-up put the model files; the plugin's child gets it explicitly, because
/// AstrBot runs with HOME pointed at the temp dir.
fn assets_dir() -> PathBuf {
    match std::env::var_os("SCOPEMEM_ASSETS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
            .join(".cache/scopemem/assets"),
    }
}

async fn wait_for(url: &str, what: &str, timeout: Duration, log: &Path) {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(r) = client.get(url).send().await {
            if r.status().is_success() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!(
        "{what} did not answer at {url}; AstrBot log tail:\n{}",
        tail(log, 60)
    );
}

async fn seed(base: &str, token: &str) -> Value {
    let family = [
        "Grandma likes orchids",
        "The cat is called Mochi",
        "Grandpa's birthday is on May 3rd",
    ];
    let work = [
        "The quarterly report is due Friday",
        "The staging server restarts at 3am",
        "Design review moved to Thursday",
    ];
    let public = [
        "The bot's name is Aster",
        "The bot answers in short sentences",
    ];
    let client = reqwest::Client::new();
    for (conversation, contents) in [
        (FAMILY, &family[..]),
        (WORK, &work[..]),
        (PRIVATE, &public[..]),
    ] {
        for content in contents {
            let r = client
                .post(format!("{base}/v1/remember"))
                .bearer_auth(token)
                .json(&json!({"conversation_id": conversation, "content": content}))
                .send()
                .await
                .expect("remember");
            let status = r.status().as_u16();
            assert_eq!(status, 200, "{}", r.text().await.unwrap_or_default());
        }
    }
    // Two members talk in the family group: the people view lists them, and forgets one.
    let members = [
        (
            "m-ann",
            "Ann",
            &[
                "I'm allergic to peanuts, remember that",
                "My flight lands at 9pm",
            ][..],
        ),
        (
            "m-bob",
            "Bob",
            &["The car needs new tyres before winter"][..],
        ),
    ];
    for (sender, name, lines) in members {
        for line in lines {
            let r = client
                .post(format!("{base}/v1/events/message"))
                .bearer_auth(token)
                .json(&json!({"conversation_id": FAMILY, "sender_id": sender,
                    "sender_name": name, "text": line}))
                .send()
                .await
                .expect("message");
            assert_eq!(r.status().as_u16(), 202);
        }
    }
    // A message is a row once the worker embeds it: wait for both members' rows (no fixed time).
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let r: Value = client
            .post(format!("{base}/v1/people"))
            .bearer_auth(token)
            .json(&json!({"conversation_id": FAMILY}))
            .send()
            .await
            .expect("people")
            .json()
            .await
            .expect("people json");
        let said = |id: &str| {
            r["people"]
                .as_array()
                .and_then(|p| p.iter().find(|p| p["sender_id"] == id))
                .and_then(|p| p["said"].as_u64())
                .unwrap_or(0)
        };
        if said("m-ann") == 2 && said("m-bob") == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the members' messages never became rows: {r}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let people: Value = members
        .iter()
        .map(|(id, name, lines)| json!({"sender_id": id, "name": name, "lines": lines}))
        .collect();
    json!({
        "people": people,
        "family_conversation": FAMILY,
        "work_conversation": WORK,
        "public_conversation": PRIVATE,
        "family": family,
        "work": work,
        "public": public,
        "broken_key": BROKEN,
        "new_key": NEW_KEY,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_page_in_astrbot_dashboard() {
    let python = astrbot_python();
    let deps = deps_dir();
    check_prerequisites(&deps);
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));

    // Secrets go through files, never a command line.
    let token = format!("dash-{}", uuid::Uuid::now_v7().simple());
    let password = format!("Dash{}9x", uuid::Uuid::now_v7().simple());
    let token_file = dir.path().join("scopemem.token");
    let password_file = dir.path().join("dashboard.password");
    std::fs::write(&token_file, &token).unwrap();
    std::fs::write(&password_file, &password).unwrap();

    // scopemem's config as an operator would leave it: the plugin rewrites the keys it owns
    // (map, unmapped policy, incognito, embedding) and keeps these.
    let scopemem_port = free_port();
    let scopemem_base = format!("http://127.0.0.1:{scopemem_port}");
    let scopemem_config = dir.path().join("scopemem.json");
    let kept = json!({
        "server": {"http_addr": format!("127.0.0.1:{scopemem_port}")},
        "storage": {"db_dir": dir.path().join("db"), "read_consistency_ms": 500},
        "recall": {"similarity_threshold": -1.0, "similarity_cut": "fixed", "relevance_gate": false},
    });
    std::fs::write(&scopemem_config, serde_json::to_vec(&kept).unwrap()).unwrap();
    let plugin_config = json!({
        "scopemem_url": "",
        "scopemem_binary": crate::common::scopemem_bin(),
        "scopemem_config": scopemem_config,
        "auth_token": token,
        "conversation_scope_map": {FAMILY: "家人", WORK: "工作", BROKEN: "家 人"},
        "unmapped_scope": "public",
        "embedding_provider": "local",
        "reflection": "off",
    });
    let plugin_config_file = dir.path().join("plugin-config.json");
    std::fs::write(
        &plugin_config_file,
        serde_json::to_vec(&plugin_config).unwrap(),
    )
    .unwrap();

    let dash_port = free_port();
    let dash_base = format!("http://127.0.0.1:{dash_port}");
    let log_path = dir.path().join("astrbot.log");
    let mut astrbot = tokio::process::Command::new(&python)
        .arg(manifest.join("tests/astrbot/dashboard.py"))
        .arg("--root")
        .arg(dir.path().join("astrbot-root"))
        .arg("--plugin-src")
        .arg(manifest.join("integrations/astrbot"))
        .args(["--port", &dash_port.to_string()])
        .arg("--password-file")
        .arg(&password_file)
        .arg("--plugin-config")
        .arg(&plugin_config_file)
        // Nothing of the user's: AstrBot's data lives under the temp root, its home too.
        .env("HOME", dir.path())
        .env("SCOPEMEM_ASSETS", assets_dir())
        .env_remove("ASTRBOT_ROOT")
        .env_remove("SCOPEMEM_AUTH_TOKEN")
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(astrbot.stdout.take().unwrap()).lines();
    let plugin: Value = loop {
        let line = tokio::time::timeout(Duration::from_secs(300), lines.next_line()).await;
        match line {
            Ok(Ok(Some(l))) => {
                if let Some(j) = l.strip_prefix("@@DASHBOARD PLUGIN ") {
                    break serde_json::from_str(j).unwrap();
                }
                if let Some(why) = l.strip_prefix("@@DASHBOARD FAILED ") {
                    panic!("AstrBot failed: {why}\nlog tail:\n{}", tail(&log_path, 80));
                }
            }
            other => panic!(
                "AstrBot never loaded the plugin ({other:?}); log tail:\n{}",
                tail(&log_path, 80)
            ),
        }
    };
    // AstrBot's own plugin manager imported the plugin and took its web API.
    assert_eq!(
        plugin["module"], "data.plugins.astrbot_plugin_scopemem.main",
        "{plugin}"
    );
    assert_eq!(plugin["activated"], true, "{plugin}");
    let routes = plugin["web_apis"].to_string();
    for r in [
        "status",
        "scope_map/set",
        "browse",
        "update",
        "forget",
        "export",
        "people",
        "people/browse",
        "people/forget",
    ] {
        assert!(
            routes.contains(&format!("/astrbot_plugin_scopemem/memories/{r}\"")),
            "{routes}"
        );
    }
    wait_for(
        &format!("{scopemem_base}/healthz"),
        "the plugin's scopemem",
        Duration::from_secs(240),
        &log_path,
    )
    .await;
    wait_for(
        &format!("{dash_base}/"),
        "AstrBot's dashboard",
        Duration::from_secs(120),
        &log_path,
    )
    .await;
    // The plugin handed its token to the scopemem it runs: nothing answers without it.
    let anonymous = reqwest::Client::new()
        .get(format!("{scopemem_base}/v1/status"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    let seeded = seed(&scopemem_base, &token).await;
    println!("AstrBot and scopemem up, seeded in {:?}", started.elapsed());

    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("astrbot-dashboard");
    std::fs::create_dir_all(&out).unwrap();
    for old in std::fs::read_dir(&out).unwrap().flatten() {
        let _ = std::fs::remove_file(old.path());
    }
    let spec = manifest.join("tests/browser/astrbot.spec.mjs");
    let browser_started = Instant::now();
    let run = tokio::task::spawn_blocking({
        let out = out.clone();
        let (dash_base, scopemem_base) = (dash_base.clone(), scopemem_base.clone());
        let (password_file, token_file) = (password_file.clone(), token_file.clone());
        let username = plugin["username"].as_str().unwrap().to_string();
        let seeded = seeded.to_string();
        move || {
            std::process::Command::new("node")
                .arg(spec)
                .env("DASH_BASE", dash_base)
                .env("DASH_USER", username)
                .env("DASH_PASSWORD_FILE", password_file)
                .env("SCOPEMEM_BASE", scopemem_base)
                .env("SCOPEMEM_TOKEN_FILE", token_file)
                .env("SEED", seeded)
                .env("OUT", out)
                .env("SCOPEMEM_BROWSER_DEPS", deps)
                .env("SCOPEMEM_CHROMIUM", CHROMIUM)
                .output()
        }
    })
    .await
    .unwrap()
    .expect("node runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    println!(
        "{stdout}{stderr}browser run took {:?}",
        browser_started.elapsed()
    );
    // The check that failed leads the message: a CI log that keeps only a message's first
    // lines still names it.
    let failed = stderr
        .lines()
        .find(|l| l.contains("[astrbot.spec] FAILED"))
        .unwrap_or("(no FAILED line)");
    assert!(
        run.status.success(),
        "the browser checks failed: {failed}\n{stdout}\n{stderr}\nAstrBot log tail:\n{}",
        tail(&log_path, 60)
    );
    let mut shots: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "png"))
        .collect();
    shots.sort();
    assert!(shots.len() >= 5, "screenshots missing in {}", out.display());
    for s in &shots {
        println!("screenshot: {}", s.display());
    }
    if std::env::var_os("SCOPEMEM_UPDATE_SCREENSHOT").is_some_and(|v| v == "1") {
        let docs = manifest.join("docs/astrbot-memory-page.png");
        std::fs::copy(out.join("astrbot-memories-map.png"), &docs).unwrap();
        println!("copied to {}", docs.display());
    }

    // AstrBot's log (which holds the plugin's and its scopemem's) names no memory text, no
    // token and no password.
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    for secret in [token.as_str(), password.as_str()] {
        assert!(!log.contains(secret), "a secret reached AstrBot's log");
    }
    let lines = seeded["people"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["lines"].as_array().unwrap());
    for content in ["family", "work", "public"]
        .iter()
        .flat_map(|list| seeded[*list].as_array().unwrap())
        .chain(lines)
    {
        let content = content.as_str().unwrap();
        assert!(
            !log.contains(content),
            "memory text reached AstrBot's log: {content}"
        );
    }
    astrbot.start_kill().unwrap();
    astrbot.wait().await.unwrap();
    println!(
        "astrbot dashboard test wall time {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
