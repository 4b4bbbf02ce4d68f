//! What an acknowledged write survives. Lance's local store writes a commit's data files,
//! deletion files, transaction file and manifest without fsync: a commit survives the process
//! dying (`process`), but a power loss may lose it. `power` fsyncs every file the commit wrote,
//! and the directories holding them, before the write is acknowledged.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// `storage.durability`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Acknowledged after the Lance commit: survives kill -9.
    #[default]
    Process,
    /// Also fsyncs the commit's files and directories first: survives power loss.
    Power,
}

/// Slack for filesystem timestamp granularity: files modified this long before a commit
/// started are synced too.
const MTIME_SLACK: Duration = Duration::from_secs(2);

/// fsync every file under `table_dir` modified since `since` (minus a little slack), then each
/// directory on the way, deepest first, so new names are durable too. Returns files synced.
pub(crate) fn sync_since(table_dir: &Path, since: SystemTime) -> std::io::Result<usize> {
    let cutoff = since
        .checked_sub(MTIME_SLACK)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let mut dirs: Vec<PathBuf> = vec![table_dir.to_path_buf()];
    let mut synced = 0;
    let mut i = 0;
    while i < dirs.len() {
        let dir = dirs[i].clone();
        i += 1;
        for entry in std::fs::read_dir(&dir)?.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                dirs.push(entry.path());
            } else if meta.is_file() && meta.modified().is_ok_and(|m| m >= cutoff) {
                std::fs::File::open(entry.path())?.sync_all()?;
                synced += 1;
            }
        }
    }
    for dir in dirs.iter().rev() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    if let Some(parent) = table_dir.parent() {
        std::fs::File::open(parent)?.sync_all()?;
    }
    Ok(synced)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syncs_recent_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("t.lance");
        std::fs::create_dir_all(t.join("data")).unwrap();
        std::fs::write(t.join("data/old"), b"x").unwrap();
        let later = SystemTime::now() + Duration::from_secs(60);
        assert_eq!(sync_since(&t, later).unwrap(), 0);
        std::fs::write(t.join("data/new"), b"y").unwrap();
        assert_eq!(sync_since(&t, SystemTime::now()).unwrap(), 2);
    }
}
