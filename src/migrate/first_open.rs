//! The first start of a new store, by several processes at once.
//!
//! Why: a new install brings the AstrBot plugin's `serve` and an MCP client's `scopemem mcp`
//! (or two CLIs) up together on an empty `db_dir`. Three races sit in creating the table:
//! - LanceDB lists a table as soon as its directory exists, before its first version is
//!   committed: a process that opened it then got "Table 'memories' was not found" and exited
//!   (issue 50: 5 times under load);
//! - two creations race on the first manifest: one commits, the other gets
//!   `TableAlreadyExists`;
//! - the creator's next commit (the primary key) can lose to the other process's first
//!   migration commit.
//!
//! On one machine (a local `db_dir`) the whole opening, create-or-open and migrations, runs
//! under an exclusive lock on `<db_dir>/<table>.opening.lock` ([`OpeningLock`]): first starts
//! follow one another, each a few milliseconds, and none of the races above can happen. This
//! matters beyond a failed start: Lance does not make the first commit of an empty table
//! exclusive across connections, and a creation that lost that race can commit as an overwrite
//! on top of what the winner did since (seen here: an `Overwrite` at version 20, after the
//! others' migrations and indexes). In a bucket there is no such lock; there the loop below
//! and the retried metadata commits are what hold.
//!
//! So a table is created or opened in one loop: a table that cannot be opened is created; a
//! creation that lost is opened; a directory another process is still filling is waited for
//! (its first commit follows within milliseconds; [`FIRST_COMMIT_WAIT`] bounds it, so a
//! directory left half-made by a crash is created over). Lance does not make the first commit
//! of an empty table exclusive across connections: two openers may both report creating it
//! (the same empty version 1), and both then go on as on any other new table. The primary key
//! is set after the migrations by every opener of an empty table ([`set_primary_key`]).

use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;
use std::time::{Duration, Instant};

use lancedb::arrow::arrow_schema::SchemaRef;
use lancedb::{Connection, Table};

use super::MigrateError;
use crate::store::schema::COL_ID;

/// How long a start keeps trying to open or create the table while others race it.
pub const FIRST_COMMIT_WAIT: Duration = Duration::from_secs(60);
/// The longest pause between two tries.
const MAX_PAUSE: Duration = Duration::from_millis(500);
/// What Lance's field metadata keys of an unenforced primary key start with.
const PRIMARY_KEY_METADATA: &str = "lance-schema:unenforced-primary-key";

/// Held while this process opens the table of a local directory (see the module). Dropped, the
/// lock is released; a process that dies holding it releases it too (an OS file lock).
#[derive(Debug)]
pub struct OpeningLock {
    _file: Option<File>,
}

/// Take the opening lock of `table` in the local directory `dir` (`None`: a bucket, no lock),
/// waiting for another process's opening to finish, at most [`FIRST_COMMIT_WAIT`].
pub(crate) async fn lock_opening(
    dir: Option<&Path>,
    table: &str,
) -> Result<OpeningLock, MigrateError> {
    let Some(dir) = dir else {
        return Ok(OpeningLock { _file: None });
    };
    let path = dir.join(format!("{table}.opening.lock"));
    let failed = |e: std::io::Error| MigrateError::Checkpoint {
        path: path.display().to_string(),
        message: format!("cannot take the opening lock: {e}"),
    };
    std::fs::create_dir_all(dir).map_err(failed)?;
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(failed)?;
    let started = Instant::now();
    let mut pause = Duration::from_millis(5);
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(OpeningLock { _file: Some(file) }),
            Err(TryLockError::WouldBlock) if started.elapsed() < FIRST_COMMIT_WAIT => {}
            Err(TryLockError::WouldBlock) => {
                return Err(failed(std::io::Error::other(format!(
                    "another process has held it for {} s",
                    FIRST_COMMIT_WAIT.as_secs()
                ))))
            }
            Err(TryLockError::Error(e)) => return Err(failed(e)),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// Open `name`, or create it empty with `schema`. Returns the table and whether this call
/// created it.
pub(crate) async fn create_or_open(
    conn: &Connection,
    name: &str,
    schema: SchemaRef,
) -> Result<(Table, bool), MigrateError> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(10);
    loop {
        match conn.open_table(name).execute().await {
            Ok(table) => return Ok((table, false)),
            Err(lancedb::Error::TableNotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        match conn
            .create_empty_table(name, schema.clone())
            .execute()
            .await
        {
            Ok(table) => return Ok((table, true)),
            // Another process committed the first version meanwhile: open theirs.
            Err(lancedb::Error::TableAlreadyExists { .. }) => continue,
            Err(e) if started.elapsed() < FIRST_COMMIT_WAIT => {
                tracing::debug!(table = name, error = %e, "creating the table raced another process; trying again");
            }
            Err(e) => return Err(e.into()),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// Declare `id` the table's (unenforced) primary key, unless it already is one; a commit that
/// lost to another process's is tried again on the latest version. Called by every process
/// that opens an empty table, after its migrations: another process's column addition,
/// planned on a version before the key, commits a schema without it, and that process then
/// sets it again.
pub(crate) async fn set_primary_key(table: &Table) -> Result<(), MigrateError> {
    let mut attempt = 0;
    loop {
        table.checkout_latest().await?;
        if has_primary_key(table).await? {
            return Ok(());
        }
        match table.set_unenforced_primary_key([COL_ID]).await {
            Ok(()) => return Ok(()),
            Err(e) if attempt < crate::store::RACE_ATTEMPTS => {
                attempt += 1;
                tracing::debug!(error = %e, attempt, "setting the primary key raced another commit; re-checking");
                tokio::time::sleep(crate::store::race_pause(attempt)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

async fn has_primary_key(table: &Table) -> Result<bool, MigrateError> {
    let schema = table.schema().await?;
    Ok(schema.field_with_name(COL_ID).is_ok_and(|f| {
        f.metadata()
            .keys()
            .any(|k| k.starts_with(PRIMARY_KEY_METADATA))
    }))
}

#[cfg(test)]
mod tests {
    use crate::migrate::tests::open;
    use crate::store::schema::SCHEMA_VERSION;
    use crate::store::testing::{model, row};
    use crate::store::WriterSettings;

    #[tokio::test]
    async fn the_scope_column_has_a_bitmap_index_and_id_is_the_primary_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        store.append(vec![row(1, "public")]).await.unwrap();
        let indices = store.table().list_indices().await.unwrap();
        assert!(indices
            .iter()
            .any(|i| i.columns == vec!["memory_scope".to_string()]
                && i.index_type == lancedb::index::IndexType::Bitmap));
        let schema = store.table().schema().await.unwrap();
        assert!(schema
            .field_with_name("memory_scope")
            .unwrap()
            .is_nullable());
    }

    /// Issue 50: four processes' worth of openers (each its own connection) start at once on an
    /// empty directory, 20 times: every one comes up, on one table at the latest schema with its
    /// primary key. Before `migrate::first_open`, an opener
    /// that listed the half-made table failed with "Table 'memories' was not found".
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn four_openers_starting_at_once_on_an_empty_directory_all_come_up_on_one_table() {
        const OPENERS: usize = 4;
        for round in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let start = std::sync::Arc::new(tokio::sync::Barrier::new(OPENERS));
            let openers: Vec<_> = (0..OPENERS)
                .map(|_| {
                    let (path, start) = (dir.path().to_path_buf(), start.clone());
                    tokio::spawn(async move {
                        start.wait().await;
                        crate::migrate::open_store(
                            path.as_path(),
                            "memories",
                            &model(),
                            WriterSettings::default(),
                        )
                        .await
                    })
                })
                .collect();
            let mut stores = Vec::new();
            let mut created = 0;
            for opener in openers {
                let (store, outcome) = opener
                    .await
                    .unwrap()
                    .unwrap_or_else(|e| panic!("round {round}: an opener failed: {e}"));
                assert_eq!(outcome.to, SCHEMA_VERSION, "round {round}: {outcome:?}");
                created += usize::from(outcome.created);
                stores.push(store);
            }
            // Lance may let two connections both commit an empty table's first version (the same
            // empty v1, see migrate::first_open): at least one opener created it.
            assert!(created >= 1, "round {round}: someone created the table");
            let schema = stores[0].table().schema().await.unwrap();
            let id = schema.field_with_name("id").unwrap();
            assert!(
                id.metadata()
                    .keys()
                    .any(|k| k.starts_with("lance-schema:unenforced-primary-key")),
                "round {round}: id is the primary key: {:?}",
                id.metadata()
            );
            // One table: what one opener writes, another reads.
            stores[0]
                .writer()
                .insert_missing(vec![row(round, "public")])
                .await
                .unwrap();
            let last = &stores[OPENERS - 1];
            last.refresh().await.unwrap();
            assert_eq!(last.count(None).await.unwrap(), 1, "round {round}");
            for store in stores {
                store.shutdown().await;
            }
        }
    }
}
