//! `scopemem migrate status|run|revert-backfill`: the operator's view of schema migrations and
//! the legacy backfill.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::json;

use crate::config::Config;
use crate::host::{HostError, PluginHost};
use crate::migrate::backfill::BackfillProgress;
use crate::migrate::MigrateError;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error(transparent)]
    Migrate(#[from] MigrateError),
    #[error("{0}")]
    Other(String),
}

/// Read-only: shows the schema version, pending migrations and backfill progress without
/// applying anything or loading the model.
pub async fn status(config: &Config) -> Result<serde_json::Value, CliError> {
    let db = &config.storage.db_dir;
    let name = &config.storage.table_name;
    let Some(s) = crate::migrate::status::read(db, name, config.storage.read_consistency()).await?
    else {
        return Ok(json!({"table": name, "exists": false, "db_dir": db}));
    };
    Ok(json!({
        "table": name,
        "db_dir": db,
        "schema_version": s.schema.version,
        "latest_version": s.schema.latest,
        "pending_migrations": s.schema.pending,
        "rows": s.rows,
        "unscoped_rows": s.unscoped_rows,
        "migration_mode": config.migration_mode,
        "backfill": s.backfill,
        "maintenance_lease": s.maintenance_lease,
    }))
}

/// Refuses when another process holds the maintenance lease: two processes must not run the
/// backfill (or undo it) at once. The error names the holder.
async fn require_lease(host: &PluginHost, what: &str) -> Result<(), CliError> {
    if host.memory().is_maintainer() {
        return Ok(());
    }
    let holder = host.memory().lease_holder().await;
    Err(CliError::Other(match holder {
        Some(h) => format!(
            "cannot {what}: process {} (instance {}, since {}) holds the maintenance lease and \
             runs the backfill itself; watch it with `scopemem migrate status`, or stop it first",
            h.pid, h.instance, h.since
        ),
        None => format!("cannot {what}: another process holds the maintenance lease"),
    }))
}

/// Draws a one-line progress bar on a terminal, or a line every few seconds otherwise.
struct Bar {
    tty: bool,
    started: Instant,
    last: Mutex<Instant>,
}

impl Bar {
    fn draw(&self, p: &BackfillProgress) {
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        let every = if self.tty { 0.1 } else { 5.0 };
        if p.state != "done" && last.elapsed().as_secs_f64() < every {
            return;
        }
        *last = Instant::now();
        let done = p.filled + p.skipped;
        let total = (done + p.remaining).max(1);
        let frac = done as f64 / total as f64;
        let width = 30;
        let filled = ((frac * width as f64) as usize).min(width);
        let line = format!(
            "[{}{}] {:5.1}%  filled {}  skipped {}  remaining {}  {:.0} rows/s  {:.0}s",
            "#".repeat(filled),
            "-".repeat(width - filled),
            frac * 100.0,
            p.filled,
            p.skipped,
            p.remaining,
            p.rows_per_sec,
            self.started.elapsed().as_secs_f64()
        );
        let mut err = std::io::stderr();
        if self.tty {
            let _ = write!(err, "\r{line}");
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
    }
}

/// Applies pending migrations and runs the backfill in the foreground with a progress bar.
/// Refused, naming the holder, while a running service holds the maintenance lease (it runs
/// the backfill itself).
pub async fn run(config_path: Option<&Path>) -> Result<BackfillProgress, CliError> {
    let host = PluginHost::start(config_path).await?;
    if let Err(e) = require_lease(&host, "run the backfill").await {
        host.shutdown().await;
        return Err(e);
    }
    let bar = Bar {
        tty: std::io::stderr().is_terminal(),
        started: Instant::now(),
        last: Mutex::new(Instant::now()),
    };
    let result = host
        .memory()
        .backfill()
        .run_foreground(|p| bar.draw(p))
        .await;
    if bar.tty {
        eprintln!();
    }
    host.shutdown().await;
    Ok(result?)
}

/// Sets every row the backfill filled back to a NULL scope (the downgrade path).
pub async fn revert(config_path: Option<&Path>) -> Result<u64, CliError> {
    let host = PluginHost::start(config_path).await?;
    if let Err(e) = require_lease(&host, "revert the backfill").await {
        host.shutdown().await;
        return Err(e);
    }
    let reverted = host.memory().backfill().revert().await;
    host.shutdown().await;
    Ok(reverted?)
}
