//! `scopemem migrate reembed`: re-embed every memory with the configured model in the
//! foreground, with a progress bar on stderr, then switch the table to it (the design is in
//! `migrate::reembed`). Refused while a running service holds the maintenance lease: that
//! service runs the re-embed itself with `migration.reembed: "auto"`.

use std::path::Path;
use std::sync::Arc;

use crate::api::progress::Bar;
use crate::api::transfer_cli::{load_embedder, TransferCliError};
use crate::config::{Config, ConfigError, ReembedMode};
use crate::host::{HostError, PluginHost};
use crate::memory::model_choice::Purpose;
use crate::migrate::reembed::{prepare_at, ReembedProgress};
use crate::migrate::status::LeaseHolder;
use crate::migrate::MigrateError;

#[derive(Debug, thiserror::Error)]
pub enum ReembedCliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Embedder(#[from] TransferCliError),
    #[error(transparent)]
    Host(#[from] HostError),
    #[error(transparent)]
    Migrate(#[from] MigrateError),
    #[error("{0}")]
    Refused(String),
}

fn refused(holder: Option<LeaseHolder>) -> ReembedCliError {
    ReembedCliError::Refused(match holder {
        Some(h) => format!(
            "cannot re-embed: process {} (instance {}, since {}) holds the maintenance lease; \
             stop it first, or set migration.reembed to \"auto\" so the service re-embeds in \
             the background",
            h.pid, h.instance, h.since
        ),
        None => "cannot re-embed: another process holds the maintenance lease".into(),
    })
}

/// Re-embed the configured table with the configured model. Returns the final progress
/// (`done` once switched; `none` when the table already held that model's vectors).
pub async fn reembed(
    config_path: Option<&Path>,
    quiet: bool,
) -> Result<ReembedProgress, ReembedCliError> {
    let loaded = Config::load(config_path)?;
    for w in &loaded.warnings {
        tracing::warn!(warning = %w, "config");
    }
    let mut config = loaded.config;
    let embedder = load_embedder(&config, Purpose::Reembed).await?;
    let model = embedder.model_info();
    let db = config.storage.db_dir.clone();
    let name = config.storage.table_name.clone();
    let consistency = config.storage.read_consistency();
    // Before anything changes: a running service that holds the lease refuses us.
    if let Some(holder) = crate::migrate::status::lease_holder(&db, &name, consistency).await? {
        return Err(refused(Some(holder)));
    }
    prepare_at(&db, &name, &model, consistency)
        .await
        .map_err(MigrateError::from)?;
    config.migration.reembed = ReembedMode::Auto;
    let host = PluginHost::start_with(config, None, embedder as Arc<_>).await?;
    if !host.memory().is_maintainer() {
        let holder = host.memory().lease_holder().await;
        host.shutdown().await;
        return Err(refused(holder));
    }
    let bar = Bar::new(quiet);
    let result = host
        .memory()
        .reembed()
        .run(|p| bar.draw(p.done, Some(p.total), &format!("rows  {}", eta(p))))
        .await;
    bar.clear();
    host.shutdown().await;
    Ok(result?)
}

fn eta(p: &ReembedProgress) -> String {
    match p.eta_secs {
        Some(s) if p.state == "running" => format!("ETA {s}s"),
        _ => p.state.to_string(),
    }
}
