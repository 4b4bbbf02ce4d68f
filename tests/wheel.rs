//! The pip path (issue 23): the binary `cargo test` built, packed by scripts/pack-wheel.py as
//! maturin packs `bindings = "bin"` wheels, with the offline model and ONNX Runtime as the
//! wheel's data, installs with pip into a fresh venv and into a venv of AstrBot's Python, and
//! runs from there with nothing else: no ORT_DYLIB_PATH, no model dir, no set-up cache (HOME
//! points at an empty directory). `scopemem --version`, then `scopemem serve`, which must answer
//! /healthz and remember and recall with the bundled model. Fails, never skips, when python3,
//! the assets or the AstrBot venv are missing (the Makefile installs them).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

fn assets() -> PathBuf {
    let dir = std::env::var_os("SCOPEMEM_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/scopemem/assets")
        });
    assert!(
        dir.join("all-MiniLM-L6-v2-int8/model.onnx").is_file(),
        "the offline assets are missing from {}: run scripts/setup.sh",
        dir.display()
    );
    dir
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("the command runs");
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn pack(out: &Path) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/pack-wheel.py");
    let printed = run(Command::new("python3")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_scopemem"))
        .arg(out)
        .arg(assets()));
    PathBuf::from(printed.trim())
}

fn site_packages(python: &Path) -> PathBuf {
    let printed = run(Command::new(python).args([
        "-c",
        "import sysconfig; print(sysconfig.get_paths()['purelib'])",
    ]));
    PathBuf::from(printed.trim())
}

/// A venv made by `python` with the wheel installed from the file alone (no index); `beside`
/// adds another environment's packages to its path (a `.pth` file), leaving that one as it was.
fn install(python: &Path, venv: &Path, wheel: &Path, beside: Option<&Path>) -> PathBuf {
    run(Command::new(python).args(["-m", "venv"]).arg(venv));
    if let Some(other) = beside {
        let pth = site_packages(&venv.join("bin/python")).join("beside.pth");
        std::fs::write(pth, format!("{}\n", site_packages(other).display())).unwrap();
    }
    run(Command::new(venv.join("bin/python"))
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-index",
            "--disable-pip-version-check",
        ])
        .arg(wheel));
    let exe = venv.join("bin/scopemem");
    assert!(exe.is_file(), "pip put no scopemem in {}", venv.display());
    exe
}

/// A command with nothing from the Makefile's environment: the installed assets must do.
fn bare(exe: &Path, home: &Path) -> Command {
    let mut cmd = Command::new(exe);
    cmd.env_clear()
        .env("HOME", home)
        .env("PATH", "/usr/bin:/bin")
        .env("RUST_LOG", "warn");
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
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.join("config.json");
    std::fs::write(
        &config,
        json!({
            "storage": {"db_dir": dir.join("db")},
            "server": {"http_addr": format!("127.0.0.1:{port}")},
            "conversation_scope_map": {"qq:GroupMessage:1": "家人"},
        })
        .to_string(),
    )
    .unwrap();
    let mut child = bare(exe, dir)
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("serve.log")).unwrap())
        .spawn()
        .expect("serve starts");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let started = Instant::now();
    loop {
        if let Ok(r) = client.get(format!("{base}/healthz")).send().await {
            if r.status().is_success() {
                break;
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
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test]
async fn the_wheel_installs_and_runs_with_no_other_set_up() {
    let dir = tempfile::tempdir().unwrap();
    let wheel = pack(&dir.path().join("dist"));
    println!(
        "{} ({:.1} MB, debug build)",
        wheel.display(),
        std::fs::metadata(&wheel).unwrap().len() as f64 / 1e6
    );
    let fresh = dir.path().join("fresh");
    std::fs::create_dir_all(&fresh).unwrap();
    let exe = install(Path::new("python3"), &fresh.join("venv"), &wheel, None);
    serves_from(&exe, &fresh).await;

    // AstrBot's Python (3.12), with AstrBot importable: the environment the plugin runs in.
    let astrbot = dir.path().join("astrbot");
    std::fs::create_dir_all(&astrbot).unwrap();
    let python = common::astrbot_python();
    let exe = install(&python, &astrbot.join("venv"), &wheel, Some(&python));
    run(Command::new(astrbot.join("venv/bin/python")).args(["-c", "import astrbot"]));
    serves_from(&exe, &astrbot).await;
}
