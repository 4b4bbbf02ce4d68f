//! A full disk, for real: `db_dir` on a small tmpfs filled to the last byte. Writes answer 503
//! `disk_full` (never a 500 or a hang), nothing acknowledged before is lost, the journal stays
//! readable, and everything works again once space is freed. Mounting needs root, which `make
//! test` has on these machines (as CI does).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::json;

/// A mounted tmpfs, unmounted on drop (also when the test fails).
struct TinyFs(PathBuf);

impl TinyFs {
    fn mount(at: &Path, size: &str) -> TinyFs {
        std::fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mounting a tmpfs needs root: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        TinyFs(at.to_path_buf())
    }
}

impl Drop for TinyFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fill the filesystem to the last byte; returns the filler's path.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 4096];
    while f.write_all(&chunk).is_ok() {}
    for _ in 0..4096 {
        if f.write_all(&[0]).is_err() {
            break;
        }
    }
    path
}

#[tokio::test]
async fn a_full_disk_answers_503_and_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    let _fs = TinyFs::mount(&mnt, "8m");
    let host = host(config(&mnt, family_map())).await;
    host.start_background();
    let mut acknowledged = Vec::new();
    for i in 0..5 {
        let m = remember(&host, FAMILY, &format!("acknowledged memory {i}")).await;
        acknowledged.push(m["memory"]["id"].as_str().unwrap().to_string());
    }

    let filler = fill(&mnt);
    let e = host
        .invoke(
            "remember",
            json!({"conversation_id": FAMILY, "content": "written to a full disk"}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, "disk_full", "{}", e.message);
    assert!(
        e.retry_after().is_some() && !e.is_client_error(),
        "503 with Retry-After"
    );
    let e = host
        .invoke(
            "feedback",
            json!({"conversation_id": FAMILY,
                   "new_memories": [{"content": "reflection on a full disk"}]}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, "disk_full", "{}", e.message);
    // Everything acknowledged is still there and readable.
    let stored = host
        .memory()
        .store()
        .get_by_ids(&acknowledged, None)
        .await
        .unwrap();
    assert_eq!(stored.len(), 5);

    std::fs::remove_file(filler).unwrap();
    remember(&host, FAMILY, "written after space was freed").await;
    let r = host
        .invoke(
            "feedback",
            json!({"conversation_id": FAMILY,
                   "new_memories": [{"content": "reflection after space was freed"}]}),
        )
        .await
        .unwrap();
    let job = r["job_id"].as_str().unwrap();
    let o = host
        .memory()
        .feedback()
        .wait_for(job, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(o.error.is_none(), "{o:?}");
    assert_eq!(
        rows(&host).await,
        7,
        "5 acknowledged + 2 after; the refused ones never landed"
    );
    host.shutdown().await;

    // The journal survived the refused append: a new process reads it without a bad line.
    let again = host_for(&mnt).await;
    assert_eq!(again.memory().feedback().depth(), 0);
    assert_eq!(rows(&again).await, 7);
    again.shutdown().await;
}

async fn host_for(dir: &Path) -> scopemem::host::PluginHost {
    host(config(dir, family_map())).await
}
