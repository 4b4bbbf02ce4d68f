//! The operator page in a real browser: a real `scopemem serve` with a token, a table seeded
//! over HTTP, then tests/browser/ui.spec.mjs drives Debian's chromium through playwright-core
//! (installed by scripts/setup-browser.sh). Fails, never skips, when either is missing.
//!
//! The screenshot goes to `$CARGO_TARGET_TMPDIR/ui/operator-page.png`; with
//! `SCOPEMEM_UPDATE_SCREENSHOT=1` it is also copied to `docs/operator-page.png` for the README.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::serve::spawn_serve;
use common::*;
use serde_json::{json, Value};

const TOKEN: &str = "ui-browser-token-3b9e";
pub(crate) const CHROMIUM: &str = "/usr/bin/chromium";

pub(crate) fn deps_dir() -> PathBuf {
    match std::env::var_os("SCOPEMEM_BROWSER_DEPS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
            .join(".cache/scopemem/browser"),
    }
}

/// Chromium and the driver must be there: a missing browser is a failure, not a skip.
pub(crate) fn check_prerequisites(deps: &Path) {
    let hint =
        "run scripts/setup-browser.sh (installs chromium with apt and playwright-core with npm ci)";
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: {hint}"
    );
    assert!(
        deps.join("node_modules/playwright-core/package.json")
            .exists(),
        "playwright-core is missing from {}: {hint}",
        deps.display()
    );
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.is_ok_and(|o| o.status.success()),
        "node is not on PATH (Node.js 20+ is needed to drive the browser)"
    );
}

/// Seed the table over the API: family and work groups (mapped) and public rows (unmapped).
async fn seed(base: &str) -> Value {
    let family = [
        "Grandma likes orchids",
        "<img src=x onerror=alert(1)> is how Grandpa signs his notes",
        "The cat is called Mochi",
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
                .bearer_auth(TOKEN)
                .json(&json!({"conversation_id": conversation, "content": content}))
                .send()
                .await
                .expect("remember");
            assert_eq!(
                r.status().as_u16(),
                200,
                "{}",
                r.text().await.unwrap_or_default()
            );
        }
    }
    json!({
        "family_conversation": FAMILY,
        "work_conversation": WORK,
        "counts": {"家人": family.len(), "工作": work.len(), "public": public.len()},
        "family": family,
        "work": work,
        "public": public,
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn operator_page_in_chromium() {
    let deps = deps_dir();
    check_prerequisites(&deps);
    let dir = tempfile::tempdir().unwrap();
    let serve = spawn_serve(dir.path(), "ui", json!({"server": {"auth_token": TOKEN}})).await;
    let seed = seed(&serve.base).await;
    // The tokenless service holds a legacy row without a scope that the backfill skips (it has
    // no date), so it stays NULL and visible while migration mode is on.
    let open_dir = tempfile::tempdir().unwrap();
    let legacy = LegacyRow {
        content: "A legacy note nobody dated".into(),
        created_at: None,
        ..LegacyRow::default()
    };
    make_legacy_table(&open_dir.path().join("db"), &[legacy], false, true).await;
    let open = spawn_serve(open_dir.path(), "ui-open", json!({"migration_mode": "on"})).await;

    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui");
    std::fs::create_dir_all(&out).unwrap();
    let screenshot = out.join("operator-page.png");
    let _ = std::fs::remove_file(&screenshot);
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/ui.spec.mjs");
    let started = Instant::now();
    let run = tokio::task::spawn_blocking({
        let (base, seed, out) = (serve.base.clone(), seed.to_string(), out.clone());
        let open_base = open.base.clone();
        move || {
            Command::new("node")
                .arg(spec)
                .env("SCOPEMEM_UI_BASE", base)
                .env("SCOPEMEM_UI_TOKEN", TOKEN)
                .env("SCOPEMEM_UI_OPEN_BASE", open_base)
                .env("SCOPEMEM_UI_PUBLIC_CONVERSATION", PRIVATE)
                .env("SCOPEMEM_UI_SEED", seed)
                .env("SCOPEMEM_UI_OUT", out)
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
    println!("{stdout}{stderr}browser run took {:?}", started.elapsed());
    assert!(
        run.status.success(),
        "the browser checks failed:\n{stdout}\n{stderr}"
    );
    assert!(
        screenshot.exists(),
        "no screenshot at {}",
        screenshot.display()
    );
    println!("screenshot: {}", screenshot.display());

    if std::env::var_os("SCOPEMEM_UPDATE_SCREENSHOT").is_some_and(|v| v == "1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::copy(&screenshot, docs.join("operator-page.png")).unwrap();
        println!("copied to docs/operator-page.png");
    }
}
