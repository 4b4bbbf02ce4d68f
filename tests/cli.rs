//! The operator CLI against a real legacy table: `migrate status`, `migrate run`,
//! `migrate revert-backfill`, `scope check`.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

#[tokio::test]
async fn migrate_status_run_and_revert_on_a_legacy_table() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    std::fs::create_dir_all(&db).unwrap();
    let mut rows = legacy_rows(90, "hiking");
    rows[0].created_at = None;
    make_legacy_table(&db, &rows, false, false).await;
    let cfg = dir.path().join("config.json");
    std::fs::write(
        &cfg,
        serde_json::to_vec(
            &json!({"storage": {"db_dir": db}, "backfill": {"batch_size": 25, "pause_ms": 0}}),
        )
        .unwrap(),
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();

    let (code, out, err) = scopemem(&["migrate", "status", "--config", cfg]);
    assert_eq!(code, 0, "{err}");
    let s: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["schema_version"], 1, "status is read-only: {s}");
    assert_eq!(s["pending_migrations"].as_array().unwrap().len(), 5);
    assert_eq!(s["unscoped_rows"], 90);

    let (code, out, err) = scopemem(&["migrate", "run", "--config", cfg]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("backfill done") && out.contains("filled 89") && out.contains("skipped 1"),
        "{out}"
    );
    assert!(err.contains("filled 89"), "progress is shown: {err}");

    let (_, out, _) = scopemem(&["migrate", "status", "--config", cfg]);
    let s: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["schema_version"], 6);
    assert_eq!(s["backfill"]["state"], "done");
    assert_eq!(
        s["unscoped_rows"], 1,
        "the damaged row is left and reported"
    );

    let (code, _, err) = scopemem(&["migrate", "revert-backfill", "--config", cfg]);
    assert_ne!(code, 0, "revert needs confirmation");
    assert!(err.contains("--yes"), "{err}");
    let (code, out, err) = scopemem(&["migrate", "revert-backfill", "--config", cfg, "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("reverted 89"), "{out}");
    let (_, out, _) = scopemem(&["migrate", "status", "--config", cfg]);
    let s: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["unscoped_rows"], 90);
    assert!(s["backfill"].is_null());
}

#[test]
fn scope_check_reports_ignored_entries() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.json");
    std::fs::write(&cfg, r#"{"conversation_scope_map": "{\"default:GroupMessage:1\": \"家人\", \"default:GroupMessage:2\": \"bad name\"}"}"#).unwrap();
    let (code, out, _) = scopemem(&["scope", "check", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("1 entries applied, 1 ignored (1 failed closed)"),
        "{out}"
    );
    assert!(out.contains("default:GroupMessage:2"), "{out}");
    // The broken entry's group is confined to its private scope, never public.
    assert!(
        out.contains("private scope c_") && out.contains("never public"),
        "{out}"
    );
    let (code, _, err) = scopemem(&[
        "serve",
        "--config",
        dir.path().join("missing.json").to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("missing.json"),
        "a missing config names the file: {err}"
    );
}

#[tokio::test]
async fn forget_scope_deletes_one_scope_after_confirmation() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let cfg = dir.path().join("config.json");
    std::fs::write(
        &cfg,
        serde_json::to_vec(
            &json!({"storage": {"db_dir": db}, "conversation_scope_map": family_map()}),
        )
        .unwrap(),
    )
    .unwrap();
    {
        let config = scopemem::config::Config::load(Some(&cfg)).unwrap().config;
        let host = scopemem::host::PluginHost::start_with(config, None, embedder())
            .await
            .unwrap();
        remember(&host, FAMILY, "family one zanzibarquill").await;
        remember(&host, FAMILY, "family two").await;
        remember(&host, WORK, "work one").await;
        host.shutdown().await;
    }
    let on_disk = |needle: &str| !files_containing(&db, needle).is_empty();
    assert!(on_disk("zanzibarquill"), "the scan sees the text first");
    let cfg = cfg.to_str().unwrap();
    let (code, _, err) = scopemem(&["forget", "--scope", "家人", "--config", cfg]);
    assert_ne!(code, 0, "needs confirmation");
    assert!(err.contains("--yes"), "{err}");
    let (code, _, err) = scopemem(&["forget", "--scope", "bad name", "--config", cfg, "--yes"]);
    assert_ne!(code, 0, "an invalid scope name is refused: {err}");
    let (code, out, err) = scopemem(&["forget", "--scope", "家人", "--config", cfg, "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("deleted 2 memories"), "{out}");
    assert!(
        !on_disk("zanzibarquill"),
        "the CLI erase leaves no version or file holding the text"
    );
    let config = scopemem::config::Config::load(Some(std::path::Path::new(cfg)))
        .unwrap()
        .config;
    let host = scopemem::host::PluginHost::start_with(config, None, embedder())
        .await
        .unwrap();
    assert_eq!(rows(&host).await, 1);
}

#[tokio::test]
async fn serve_shuts_down_cleanly_on_sigterm_and_keeps_what_it_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = dir.path().join("config.json");
    std::fs::write(
        &cfg,
        serde_json::to_vec(&json!({
            "storage": {"db_dir": dir.path().join("db")},
            "server": {"http_addr": format!("127.0.0.1:{port}")},
            "conversation_scope_map": family_map(),
        }))
        .unwrap(),
    )
    .unwrap();
    let start = || {
        Command::new(crate::common::scopemem_bin())
            .args(["serve", "--config", cfg.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let wait_up = || async {
        for _ in 0..200 {
            if client.get(format!("{base}/healthz")).send().await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("server did not come up");
    };
    let child = start();
    wait_up().await;
    let r = client
        .post(format!("{base}/v1/remember"))
        .json(&json!({"conversation_id": FAMILY, "content": "written just before shutdown"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r = client
        .post(format!("{base}/v1/feedback"))
        .json(&json!({"conversation_id": FAMILY, "new_memories": [{"content": "reflection accepted before shutdown"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 202);
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {err}", out.status);
    assert!(err.contains("stopped cleanly"), "{err}");

    // Restart: both memories are there (the feedback job replays if it was not applied yet).
    let mut child = start();
    wait_up().await;
    let mut n = 0;
    for _ in 0..100 {
        let s: Value = get_json(&client, &format!("{base}/v1/status")).await;
        n = s["rows"].as_u64().unwrap();
        if n == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    assert_eq!(n, 2, "nothing accepted is lost across a restart");
}

/// `serve --exit-with-parent`: a parent that passes a pipe as stdin and is killed with kill -9
/// (as AstrBot may be) takes the server with it; without the flag the server outlives its
/// parent, as before.
#[tokio::test]
async fn serve_exits_with_a_parent_killed_by_sigkill_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    for with_flag in [true, false] {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let cfg = dir.path().join(format!("parent-{with_flag}.json"));
        std::fs::write(
            &cfg,
            json!({
                "storage": {"db_dir": dir.path().join(format!("db-{with_flag}"))},
                "server": {"http_addr": format!("127.0.0.1:{port}")},
            })
            .to_string(),
        )
        .unwrap();
        // The parent: Python starting serve with a pipe as stdin, printing its pid, then idling.
        let mut args = vec![
            crate::common::scopemem_bin().to_string(),
            "serve".into(),
            "--config".into(),
            cfg.to_string_lossy().into_owned(),
        ];
        if with_flag {
            args.push("--exit-with-parent".into());
        }
        let script = format!(
            "import subprocess, time\n\
             p = subprocess.Popen({args:?}, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)\n\
             print(p.pid, flush=True)\n\
             time.sleep(600)\n"
        );
        let mut parent = Command::new("python3")
            .args(["-c", &script])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(parent.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let serve_pid: i32 = line.trim().parse().expect("the parent prints serve's pid");
        let base = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::new();
        assert!(
            eventually(Duration::from_secs(60), || {
                std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            })
            .await,
            "serve never listened"
        );
        let r = client
            .post(format!("{base}/v1/remember"))
            .json(&json!({"conversation_id": FAMILY, "content": "said just before the crash"}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
        parent.kill().unwrap(); // SIGKILL: no handler runs in the parent
        parent.wait().unwrap();
        let alive = || {
            std::path::Path::new(&format!("/proc/{serve_pid}")).exists()
                && !std::fs::read_to_string(format!("/proc/{serve_pid}/stat"))
                    .unwrap_or_default()
                    .contains(") Z ")
        };
        let wait = Duration::from_secs(if with_flag { 60 } else { 5 });
        let gone = eventually(wait, || !alive()).await;
        if with_flag {
            assert!(gone, "serve {serve_pid} outlived its killed parent");
        } else {
            assert!(!gone, "without the flag serve keeps running");
            // SAFETY: kill(2) on a pid this test started; it only sends a signal.
            unsafe {
                libc::kill(serve_pid, libc::SIGKILL);
            }
            assert!(eventually(Duration::from_secs(60), || !alive()).await);
        }
    }
}

/// `scopemem demo`, what `make run` shows, against a real serve with the demo's map: each
/// memory is seen where its scope says, and the greeting said to the bot (the injection path,
/// as a bot asks) injects nothing in any of the three chats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_shows_each_scope_where_it_belongs_and_small_talk_injects_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // The defaults `make run` serves with: the default model (e5) and recall settings.
    let defaults = json!({
        "embedding": {"provider": "auto"},
        "recall": {"similarity_threshold": 0.5, "similarity_cut": "calibrated", "relevance_gate": true},
    });
    let serve = common::serve::spawn_serve(dir.path(), "demo", defaults).await;
    let base = serve.base.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(crate::common::scopemem_bin())
            .args(["demo", "--url", &base])
            .output()
            .expect("demo runs")
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen_by = |memory: &str| -> Vec<String> {
        let line = text
            .lines()
            .find(|l| l.contains(memory) && (l.contains("sees") || l.ends_with('-')))
            .unwrap_or_else(|| panic!("no table row for {memory}:\n{text}"));
        let cells: Vec<&str> = line.split_whitespace().collect();
        cells[cells.len() - 3..]
            .iter()
            .map(|c| c.to_string())
            .collect()
    };
    assert_eq!(seen_by("奶奶的八十大寿"), ["sees", "-", "-"], "{text}");
    assert_eq!(seen_by("第三季度发布评审"), ["-", "sees", "-"], "{text}");
    assert_eq!(seen_by("spicy hotpot"), ["sees", "sees", "sees"], "{text}");
    let (before_group, group) = text
        .split_once("== A group chat")
        .unwrap_or_else(|| panic!("no group-chat section:\n{text}"));
    let small_talk = before_group
        .split("said to the bot in each conversation")
        .nth(1)
        .unwrap_or_else(|| panic!("no small-talk section:\n{text}"));
    assert_eq!(
        small_talk.matches("(nothing injected").count(),
        3,
        "{small_talk}"
    );
    assert!(!small_talk.contains("<memory_context>"), "{small_talk}");
    // The group: the answer the members gave each other reaches the bot's prompt, the private
    // chat's line stays out, and a greeting injects nothing.
    let block = group
        .split("what the bot's prompt gets")
        .nth(1)
        .unwrap_or_else(|| panic!("no block:\n{group}"));
    assert!(
        block.contains("老地方") && block.contains("<memory_context>"),
        "{group}"
    );
    assert!(
        group.contains("the private chat's line in the group's block: no"),
        "{group}"
    );
    assert!(!block.contains("手术"), "{group}");
    assert!(group.contains("to the bot: nothing injected"), "{group}");
}

/// `make run` (scripts/run-demo.sh) with a demo config an earlier run left on another port:
/// the demo talks to the address the config serves on, and says so, instead of waiting a
/// minute on `PORT` and failing with "cannot reach scopemem".
#[test]
fn make_run_talks_to_the_port_its_demo_config_names() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let (served, asked) = (common::moto::free_port(), common::moto::free_port());
    let config = json!({
        "conversation_scope_map": {"default:GroupMessage:12345": "家人",
                                   "default:GroupMessage:67890": "工作"},
        "unmapped_scope": "public",
        "storage": {"db_dir": "./data/lancedb-demo"},
        "server": {"http_addr": format!("127.0.0.1:{served}")},
    });
    std::fs::write(data.join("demo-config.json"), config.to_string()).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/run-demo.sh");
    let out = Command::new("bash")
        .args([script, crate::common::scopemem_bin(), &asked.to_string()])
        .current_dir(dir.path())
        .output()
        .expect("run-demo.sh runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let log = std::fs::read_to_string(data.join("demo-serve.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "{text}{}\nserve log:\n{log}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("serving on http://127.0.0.1:{served}")),
        "{text}"
    );
    assert!(text.contains(&format!("PORT={asked} applies to a new demo config only")));
    assert!(text.contains("== Summary =="), "{text}");
}
