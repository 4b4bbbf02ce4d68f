//! The `scopemem` command line: serve the HTTP API, run the demo, check a scope map.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use scopemem::api::guard;
use scopemem::config::Config;
use scopemem::host::PluginHost;
use scopemem::scope::ScopeMap;

#[derive(Parser)]
#[command(
    name = "scopemem",
    version,
    about = "Scope-aware long-term memory for chatbots"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API on server.http_addr (default 127.0.0.1:8787).
    Serve {
        #[arg(long)]
        config: Option<PathBuf>,
        /// Stop (cleanly, as on SIGTERM) when stdin reaches its end: a supervisor that passes
        /// a pipe as stdin and dies, even by kill -9, takes this server with it.
        #[arg(long)]
        exit_with_parent: bool,
    },
    /// Serve the LLM tools over MCP on stdin/stdout (logs go to stderr).
    Mcp {
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Write memories from three conversations through a running service and show who sees what.
    Demo {
        #[arg(long, default_value = "http://127.0.0.1:8787")]
        url: String,
    },
    /// Delete every memory of a scope, or everything one person said or that is about them
    /// (operator only).
    Forget {
        /// Every memory of this scope.
        #[arg(long, conflicts_with = "person", required_unless_present = "person")]
        scope: Option<String>,
        /// PLATFORM:SENDER_ID: every message the person sent in any chat of the platform, every
        /// memory they said, that is about them or that was made of their words.
        #[arg(long)]
        person: Option<String>,
        #[arg(long)]
        config: Option<PathBuf>,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
    /// Schema migrations and the legacy-row backfill.
    Migrate {
        #[command(subcommand)]
        command: MigrateCommand,
    },
    /// Write memories as JSON lines (header line first) to stdout or --output; progress on
    /// stderr. Safe while the service runs.
    Export {
        #[arg(long)]
        config: Option<PathBuf>,
        /// Only memories of this scope.
        #[arg(long)]
        scope: Option<String>,
        /// Only memories written from this conversation id.
        #[arg(long)]
        conversation: Option<String>,
        /// Include each memory's vector (an import with the same model then skips embedding).
        #[arg(long)]
        vectors: bool,
        /// Write to this file (atomically: temp file, fsync, rename) instead of stdout.
        #[arg(long)]
        output: Option<PathBuf>,
        /// No progress bar (only the final count line on stderr).
        #[arg(long)]
        quiet: bool,
    },
    /// Import an export file ('-' for stdin), keeping ids and scopes; existing ids are skipped,
    /// never overwritten. Exits 2 when lines were rejected. Safe while the service runs.
    Import {
        /// The JSON-lines file written by `scopemem export`.
        file: PathBuf,
        #[arg(long)]
        config: Option<PathBuf>,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
    },
    /// Scope-map tools.
    Scope {
        #[command(subcommand)]
        command: ScopeCommand,
    },
}

#[derive(Subcommand)]
enum MigrateCommand {
    /// Show the schema version, pending migrations and backfill progress (read-only).
    Status {
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Apply pending migrations and run the backfill in the foreground with a progress bar.
    Run {
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Re-embed every memory with the configured embedding model, then switch the table to it
    /// in one commit (resumable; progress bar on stderr). Refused while a service holds the
    /// maintenance lease.
    Reembed {
        #[arg(long)]
        config: Option<PathBuf>,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
    },
    /// Set every row the backfill filled (scope_source = 'backfill') back to a NULL scope.
    RevertBackfill {
        #[arg(long)]
        config: Option<PathBuf>,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Subcommand)]
enum ScopeCommand {
    /// Validate conversation_scope_map and print the summary (entries, ignored, scopes).
    Check {
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

fn init_logging(default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("{default_level},lance=warn,lancedb=warn"))
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn level_of(config: Option<&PathBuf>) -> String {
    Config::load(config.map(PathBuf::as_path))
        .map(|l| l.config.log_level)
        .unwrap_or_else(|_| "info".into())
}

fn confirm(question: &str) -> anyhow::Result<bool> {
    use std::io::{BufRead, IsTerminal};
    if !std::io::stdin().is_terminal() {
        anyhow::bail!("{question} Pass --yes to confirm non-interactively.");
    }
    eprint!("{question} Type 'yes' to continue: ");
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(line.trim() == "yes")
}

/// Resolves when stdin reaches its end (or fails): the write end of the pipe closes when the
/// process holding it exits, however it exits. Bytes sent on it are ignored.
async fn parent_gone() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut stdin = std::io::stdin();
        let mut buf = [0u8; 256];
        while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
        let _ = tx.send(());
    });
    let _ = rx.await;
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
    tracing::info!("shutdown requested");
}

/// glibc's allocator gives every thread that allocates under contention its own arena (up to
/// 8 per core) and rarely returns their free pages: on `make bench-burst` (10k remembers from
/// 16 clients, debug build) `serve` peaked at 681 MB RSS with the default and 530 MB with two
/// arenas, and ingested 91 rather than 81 remembers/s. Set before any thread starts; an
/// operator's own `MALLOC_ARENA_MAX` wins.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; it is called before any other
        // thread exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

/// The e5 engine's OpenMP team (libgomp) spins while it waits, by default, for the next
/// parallel region. On 2 cores shared with the async runtime, the writer and anything else the
/// machine runs, a spinning team member holds the core the other one needs: measured on this
/// 2-core machine under load (`SCOPEMEM_BENCH_SMOKE=1 make bench-embedding`), a 2-thread query
/// took 63 ms p50 / 139 ms p95 spinning and 34 / 36 ms with `PASSIVE`, and one loaded run saw
/// 2.5 s. libgomp reads the variable when the engine is loaded; it is set here, before any
/// thread exists, and an operator's own `OMP_WAIT_POLICY` wins.
fn passive_openmp_waits() {
    if std::env::var_os("OMP_WAIT_POLICY").is_none() {
        std::env::set_var("OMP_WAIT_POLICY", "PASSIVE");
    }
}

fn main() -> anyhow::Result<()> {
    limit_malloc_arenas();
    passive_openmp_waits();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(run())
}

async fn run() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Serve {
            config,
            exit_with_parent,
        } => serve(config, exit_with_parent).await,
        Command::Mcp { config } => mcp(config).await,
        Command::Demo { url } => {
            init_logging("warn");
            Ok(scopemem::api::demo::run(&url).await?)
        }
        Command::Forget {
            scope,
            person,
            config,
            yes,
        } => match (scope, person) {
            (Some(scope), _) => forget_scope(&scope, config, yes).await,
            (None, Some(person)) => forget_person(&person, config, yes).await,
            (None, None) => anyhow::bail!("give --scope or --person"),
        },
        Command::Export {
            config,
            scope,
            conversation,
            vectors,
            output,
            quiet,
        } => {
            let filter = scopemem::transfer::ExportFilter {
                scope,
                conversation,
                visible_to: None,
            };
            export(config, filter, vectors, output, quiet).await
        }
        Command::Import {
            file,
            config,
            quiet,
        } => import(&file, config, quiet).await,
        Command::Migrate { command } => migrate(command).await,
        Command::Scope {
            command: ScopeCommand::Check { config },
        } => scope_check(config),
    }
}

/// `scopemem serve`: the HTTP API until a signal (or the parent's exit).
async fn serve(config: Option<PathBuf>, exit_with_parent: bool) -> anyhow::Result<()> {
    init_logging(&level_of(config.as_ref()));
    // Refuse an open listener (non-loopback, no token) or a bad allowed_hosts entry before
    // the model loads or the store is opened (which may migrate it).
    let loaded = Config::load(config.as_deref()).context("loading config")?;
    guard::check_server(&loaded.config.server).await?;
    let host = Arc::new(
        PluginHost::start(config.as_deref())
            .await
            .context("starting scopemem")?,
    );
    // Check again on the config the guard enforces, and bind exactly what was checked.
    let addr = host.config().server.http_addr.clone();
    let addrs = guard::check_server(&host.config().server).await?;
    let listener = tokio::net::TcpListener::bind(addrs.as_slice())
        .await
        .with_context(|| format!("cannot listen on server.http_addr '{addr}'"))?;
    // Indexes and the legacy backfill start only once we are accepting requests.
    host.start_background();
    let stop = async move {
        tokio::select! {
            _ = shutdown_signal() => {}
            _ = parent_gone(), if exit_with_parent => {
                tracing::info!("stdin closed: the parent is gone; shutting down");
            }
        }
    };
    scopemem::api::http::serve(host.clone(), listener, stop)
        .await
        .with_context(|| format!("serving on {addr}"))?;
    host.shutdown().await;
    tracing::info!("stopped cleanly");
    Ok(())
}

/// `scopemem mcp`: MCP on stdio until the client closes stdin (or a signal).
async fn mcp(config: Option<PathBuf>) -> anyhow::Result<()> {
    // stdout is the protocol: init_logging writes to stderr only.
    init_logging(&level_of(config.as_ref()));
    let host = Arc::new(
        PluginHost::start(config.as_deref())
            .await
            .context("starting scopemem")?,
    );
    host.start_background();
    // Ends when the client closes stdin (or on a signal); queued writes are flushed
    // either way before exiting.
    let served = tokio::select! {
        served = scopemem::api::mcp::serve_stdio(host.clone()) => served,
        _ = shutdown_signal() => Ok(()),
    };
    host.shutdown().await;
    served.context("serving MCP on stdio")?;
    tracing::info!("stopped cleanly");
    Ok(())
}

/// `scopemem forget --scope`: erase one scope, after a confirmation unless `--yes`.
async fn forget_scope(scope: &str, config: Option<PathBuf>, yes: bool) -> anyhow::Result<()> {
    init_logging(&level_of(config.as_ref()));
    let scope = scopemem::scope::ScopeName::parse(scope).context("--scope")?;
    if !yes
        && !confirm(&format!(
            "Delete every memory in scope '{}'?",
            scope.as_str()
        ))?
    {
        anyhow::bail!("not confirmed; nothing deleted");
    }
    let host = PluginHost::start(config.as_deref())
        .await
        .context("starting scopemem")?;
    let outcome = host.memory().forget_scope(&scope).await;
    host.shutdown().await;
    let outcome = outcome?;
    println!(
        "deleted {} memories in scope '{}'; older table versions pruned; {} unapplied feedback jobs dropped",
        outcome.deleted,
        scope.as_str(),
        outcome.pending_feedback_dropped
    );
    Ok(())
}

/// `scopemem forget --person PLATFORM:ID`: forget one person everywhere on their platform,
/// after a confirmation unless `--yes`.
async fn forget_person(person: &str, config: Option<PathBuf>, yes: bool) -> anyhow::Result<()> {
    init_logging(&level_of(config.as_ref()));
    let person = scopemem::memory::person::PersonKey::parse(person).context("--person")?;
    if !yes
        && !confirm(&format!(
            "Delete everything {} said on {}, and every memory about them?",
            person.sender_id, person.platform
        ))?
    {
        anyhow::bail!("not confirmed; nothing deleted");
    }
    let host = PluginHost::start(config.as_deref())
        .await
        .context("starting scopemem")?;
    let outcome = host.memory().forget_person_everywhere(&person).await;
    host.shutdown().await;
    let outcome = outcome?;
    println!(
        "deleted {} rows of {} on {}; older table versions pruned; {} unapplied jobs dropped",
        outcome.deleted, person.sender_id, person.platform, outcome.pending_feedback_dropped
    );
    Ok(())
}

/// `scopemem export`: JSON lines to stdout or `--output`, progress on stderr.
async fn export(
    config: Option<PathBuf>,
    filter: scopemem::transfer::ExportFilter,
    vectors: bool,
    output: Option<PathBuf>,
    quiet: bool,
) -> anyhow::Result<()> {
    // Info logs would interleave with the progress bar; RUST_LOG still overrides.
    init_logging("warn");
    let loaded = Config::load(config.as_deref()).context("loading config")?;
    let options = scopemem::transfer::ExportOptions {
        filter,
        vectors,
        visibility: None,
    };
    scopemem::api::transfer_cli::export(&loaded.config, &options, output.as_deref(), quiet)
        .await
        .context("export failed")?;
    Ok(())
}

/// `scopemem import`: exit code 2 when lines were rejected (the others are imported).
async fn import(file: &Path, config: Option<PathBuf>, quiet: bool) -> anyhow::Result<()> {
    init_logging("warn");
    let loaded = Config::load(config.as_deref()).context("loading config")?;
    let report = scopemem::api::transfer_cli::import(&loaded.config, file, quiet)
        .await
        .with_context(|| format!("import of {} failed", file.display()))?;
    println!("{}", scopemem::api::transfer_cli::summary(&report));
    if report.rejected > 0 {
        eprintln!(
            "{} lines rejected (listed above by line number); the other lines were imported",
            report.rejected
        );
        std::process::exit(2);
    }
    Ok(())
}

/// `scopemem migrate status|run|reembed|revert-backfill`.
async fn migrate(command: MigrateCommand) -> anyhow::Result<()> {
    match command {
        MigrateCommand::Status { config } => {
            init_logging("warn");
            let loaded = Config::load(config.as_deref()).context("loading config")?;
            let status = scopemem::api::migrate_cli::status(&loaded.config).await?;
            println!("{}", serde_json::to_string_pretty(&status)?);
        }
        MigrateCommand::Run { config } => {
            init_logging(&level_of(config.as_ref()));
            let p = scopemem::api::migrate_cli::run(config.as_deref()).await?;
            println!(
                "backfill {}: scanned {}, filled {}, skipped {} (damaged: {})",
                p.state,
                p.scanned,
                p.filled,
                p.skipped,
                serde_json::to_string(&p.damaged)?
            );
        }
        MigrateCommand::Reembed { config, quiet } => {
            init_logging(&level_of(config.as_ref()));
            let p = scopemem::api::reembed_cli::reembed(config.as_deref(), quiet).await?;
            println!(
                "re-embed {}: {} of {} rows have vectors of {} ({}-d), {:.0} rows/s",
                p.state, p.done, p.total, p.to_model, p.dimension, p.rows_per_sec
            );
        }
        MigrateCommand::RevertBackfill { config, yes } => {
            init_logging(&level_of(config.as_ref()));
            // Fail on a bad config before asking.
            Config::load(config.as_deref()).context("loading config")?;
            if !yes && !confirm("Set every backfilled row back to a NULL scope?")? {
                anyhow::bail!("not confirmed; nothing changed");
            }
            let n = scopemem::api::migrate_cli::revert(config.as_deref()).await?;
            println!("reverted {n} backfilled rows to a NULL scope; checkpoint removed");
        }
    }
    Ok(())
}

/// `scopemem scope check`: what the map applies and ignores; exit code 2 when it ignores any.
fn scope_check(config: Option<PathBuf>) -> anyhow::Result<()> {
    init_logging("info");
    let loaded = Config::load(config.as_deref()).context("loading config")?;
    for w in &loaded.warnings {
        println!("warning: {w}");
    }
    let map = ScopeMap::from_config(&loaded.config);
    for ignored in map.ignored() {
        match &ignored.fails_closed_to {
            Some(private) => println!(
                "ignored: {:?} ({}); until fixed it uses its private scope {private}, never public",
                ignored.key, ignored.reason
            ),
            None => println!("ignored: {:?} ({})", ignored.key, ignored.reason),
        }
    }
    let s = map.summary();
    println!(
        "conversation_scope_map: {} entries applied, {} ignored ({} failed closed), {} distinct scopes; unmapped conversations -> {}",
        s.entries, s.ignored, s.failed_closed, s.distinct_scopes, loaded.config.unmapped_scope
    );
    if s.ignored > 0 {
        std::process::exit(2);
    }
    Ok(())
}
