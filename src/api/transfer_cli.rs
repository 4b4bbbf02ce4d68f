//! `scopemem export` / `scopemem import`: the CLI around [`crate::transfer`]. Data goes to
//! stdout (or `--output`), progress and rejected lines to stderr.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read};
use std::path::Path;
use std::sync::Arc;

use crate::config::Config;
use crate::embed::{EmbedError, Embedder};
use crate::memory::model_choice::{self, Purpose};
use crate::transfer::{self, ExportOptions, ExportReport, ImportOptions, ImportReport, Importer};

use super::progress::Bar;

#[derive(Debug, thiserror::Error)]
pub enum TransferCliError {
    #[error(transparent)]
    Transfer(#[from] transfer::TransferError),
    #[error(transparent)]
    Embed(#[from] EmbedError),
    #[error("{path}: {source}")]
    File {
        path: String,
        source: std::io::Error,
    },
}

fn file_error(path: &Path) -> impl FnOnce(std::io::Error) -> TransferCliError + '_ {
    move |source| TransferCliError::File {
        path: path.display().to_string(),
        source,
    }
}

/// Load the configured embedding model (its id decides whether vectors can be reused, and
/// `migrate::open_store` checks it against the table).
pub(crate) async fn load_embedder(
    config: &Config,
    purpose: Purpose,
) -> Result<Arc<dyn Embedder>, TransferCliError> {
    Ok(model_choice::load_embedder(config, purpose).await?)
}

/// Export to stdout, or to `output` atomically (a temp file beside it, fsynced, renamed), so
/// an interrupted export never leaves a truncated file under the final name.
pub async fn export(
    config: &Config,
    options: &ExportOptions,
    output: Option<&Path>,
    quiet: bool,
) -> Result<ExportReport, TransferCliError> {
    // A bad filter fails before the model loads.
    transfer::export::normalize_filter(&options.filter)?;
    let embedder = load_embedder(config, Purpose::Serve).await?;
    let model = embedder.model_info();
    let store = transfer::open(config, &model, false).await?;
    let bar = Bar::new(quiet);
    let mut progress = |done: u64, total: u64| bar.draw(done, Some(total), "rows");
    let result = match output {
        None => {
            let mut out = BufWriter::with_capacity(1 << 16, std::io::stdout());
            transfer::export(&store, &model, options, &mut out, &mut progress)
                .await
                .map_err(TransferCliError::from)
        }
        Some(path) => {
            transfer::export::export_to_path(&store, &model, options, path, &mut progress)
                .await
                .map_err(TransferCliError::from)
        }
    };
    store.shutdown().await;
    let report = result?;
    bar.finish(&format!(
        "exported {} memories{} in {:.1} s ({:.0} rows/s)",
        report.rows,
        if options.vectors { " with vectors" } else { "" },
        report.seconds,
        report.rows as f64 / report.seconds.max(1e-3)
    ));
    Ok(report)
}

/// Import `input` (a file, or `-` for stdin). Rejected lines are printed on stderr as they
/// are found; the caller prints the summary and picks the exit code.
pub async fn import(
    config: &Config,
    input: &Path,
    quiet: bool,
) -> Result<ImportReport, TransferCliError> {
    let (mut reader, total): (Box<dyn BufRead>, Option<u64>) = if input == Path::new("-") {
        (Box::new(BufReader::new(std::io::stdin())), None)
    } else {
        let total = count_lines(input)?;
        let file = File::open(input).map_err(file_error(input))?;
        (
            Box::new(BufReader::with_capacity(1 << 16, file)),
            Some(total),
        )
    };
    let embedder = load_embedder(config, Purpose::Serve).await?;
    let store = transfer::open(config, &embedder.model_info(), true).await?;
    let bar = Bar::new(quiet);
    let mut on_progress = |p: transfer::Progress<'_>| {
        let r = p.report;
        let detail = format!(
            "lines  imported {}  present {}  re-embedded {}  rejected {}",
            r.imported, r.already_present, r.re_embedded, r.rejected
        );
        bar.draw(p.line, total, &detail);
    };
    let mut on_reject =
        |r: &transfer::Rejection| bar.println(&format!("line {}: rejected: {}", r.line, r.reason));
    let mut importer = Importer {
        store: &store,
        embedder: embedder.as_ref(),
        options: ImportOptions {
            batch_rows: config.storage.write_batch_max.max(1),
        },
        on_progress: &mut on_progress,
        on_reject: &mut on_reject,
    };
    let result = importer.run(reader.as_mut()).await;
    store.shutdown().await;
    bar.clear();
    Ok(result?)
}

/// Lines in the file, for the progress bar's total (a fast byte scan; the data is then in the
/// page cache for the real read).
fn count_lines(path: &Path) -> Result<u64, TransferCliError> {
    let mut file = File::open(path).map_err(file_error(path))?;
    let mut buf = vec![0u8; 1 << 16];
    let (mut lines, mut last) = (0u64, b'\n');
    loop {
        let n = file.read(&mut buf).map_err(file_error(path))?;
        if n == 0 {
            break;
        }
        lines += buf[..n].iter().filter(|b| **b == b'\n').count() as u64;
        last = buf[n - 1];
    }
    Ok(lines + u64::from(last != b'\n'))
}

/// The one-line summary `scopemem import` prints.
pub fn summary(r: &ImportReport) -> String {
    let mut s = format!(
        "imported {}, already present {}, re-embedded {}, rejected {}",
        r.imported, r.already_present, r.re_embedded, r.rejected
    );
    if r.redacted > 0 {
        s.push_str(&format!("; {} redacted on the way in", r.redacted));
    }
    if r.imported == 0 && r.already_present > 0 {
        s.push_str("; nothing new (existing rows are never overwritten)");
    }
    s.push_str(&format!(
        " ({:.1} s, {:.0} lines/s)",
        r.seconds,
        r.lines as f64 / r.seconds.max(1e-3)
    ));
    s
}
