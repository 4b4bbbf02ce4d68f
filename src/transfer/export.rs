//! `scopemem export`: stream the table's rows as JSON lines, batch by batch, so memory use does
//! not grow with the table. Reads only: safe while other processes write (each batch comes from
//! one consistent table version).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use chrono::{SecondsFormat, Utc};
use futures::TryStreamExt;
use lancedb::arrow::arrow_array::{Array, FixedSizeListArray, Float32Array, RecordBatch};
use lancedb::query::{ExecutableQuery, QueryBase, Select};

use crate::embed::ModelInfo;
use crate::scope::{ConversationId, ScopeName};
use crate::store::schema::{COL_VECTOR, RECORD_COLUMNS};
use crate::store::{record, Store};
use crate::store::{ScopeSet, Selection};

use super::format::{ExportFilter, Header, RowOut, FORMAT_VERSION};
use super::TransferError;

/// What to export.
#[derive(Debug, Clone, Default)]
pub struct ExportOptions {
    pub filter: ExportFilter,
    /// Include each row's vector (lets an import with the same model skip re-embedding).
    pub vectors: bool,
    /// A predicate ANDed to the filter's: what `filter.visible_to` may read, computed by the
    /// memory service from its scope map (the export itself knows rows, not scopes).
    pub visibility: Option<String>,
}

/// What an export wrote.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExportReport {
    pub rows: u64,
    pub seconds: f64,
}

/// Validate the filter and build its SQL predicate. The conversation id is trimmed as the write
/// paths trim it before storing, so the filter matches what was stored.
pub(crate) fn normalize_filter(filter: &ExportFilter) -> Result<ExportFilter, TransferError> {
    let scope = match &filter.scope {
        Some(s) => Some(ScopeName::parse(s)?.as_str().to_owned()),
        None => None,
    };
    let conversation = match &filter.conversation {
        Some(c) => Some(ConversationId::parse(c)?.as_str().to_owned()),
        None => None,
    };
    let visible_to = match &filter.visible_to {
        Some(c) => Some(ConversationId::parse(c)?.as_str().to_owned()),
        None => None,
    };
    Ok(ExportFilter {
        scope,
        conversation,
        visible_to,
    })
}

fn predicate(filter: &ExportFilter) -> Option<String> {
    Selection {
        conversation: filter.conversation.clone(),
        scopes: filter.scope.as_deref().map(ScopeSet::only),
        ..Selection::default()
    }
    .to_sql()
}

/// Write the header and every matching row to `out`. `progress(done, total)` is called after
/// each batch; `total` is the count when the export started (rows written meanwhile by other
/// processes may or may not be included).
///
/// Generic over the writer and the callback so the future is `Send` exactly when they are (an
/// HTTP handler needs that; the CLI's progress bar is not `Sync`).
pub async fn export<W, P>(
    store: &Store,
    model: &ModelInfo,
    options: &ExportOptions,
    out: &mut W,
    progress: &mut P,
) -> Result<ExportReport, TransferError>
where
    W: Write + ?Sized,
    P: FnMut(u64, u64) + ?Sized,
{
    let started = Instant::now();
    let filter = normalize_filter(&options.filter)?;
    let predicate = match (predicate(&filter), &options.visibility) {
        (Some(p), Some(v)) => Some(format!("({p}) AND ({v})")),
        (p, v) => p.or_else(|| v.clone()),
    };
    let viewer = filter.visible_to.clone();
    let header = Header {
        scopemem_export: FORMAT_VERSION,
        embedding_model: model.id.clone(),
        dimension: model.dimension,
        exported_at: Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true),
        filter,
        vectors: options.vectors,
    };
    write_line(out, &header)?;
    let total = store.count(predicate.clone()).await? as u64;
    progress(0, total);
    let schema = store.table().schema().await?;
    let mut columns: Vec<&str> = RECORD_COLUMNS
        .into_iter()
        .filter(|c| schema.field_with_name(c).is_ok())
        .collect();
    if options.vectors {
        columns.push(COL_VECTOR);
    }
    let mut query = store.table().query().select(Select::columns(&columns));
    if let Some(p) = &predicate {
        query = query.only_if(p.as_str());
    }
    let mut stream = query.execute().await?;
    let mut rows = 0u64;
    while let Some(batch) = stream.try_next().await? {
        rows += write_batch(out, &batch, options.vectors, viewer.as_deref())?;
        progress(rows, total.max(rows));
    }
    out.flush()?;
    let seconds = started.elapsed().as_secs_f64();
    tracing::info!(rows, seconds, vectors = options.vectors, "export finished");
    Ok(ExportReport { rows, seconds })
}

/// With a `viewer` (a conversation's own export), a row written in any other conversation
/// leaves its `conversation_id` out: the viewer may read the public row, not learn which other
/// group wrote it.
fn write_batch<W: Write + ?Sized>(
    out: &mut W,
    batch: &RecordBatch,
    vectors: bool,
    viewer: Option<&str>,
) -> Result<u64, TransferError> {
    let mut records = record::from_batch(batch);
    if let Some(viewer) = viewer {
        for r in &mut records {
            if r.conversation_id.as_deref() != Some(viewer) {
                r.conversation_id = None;
            }
        }
    }
    let column = batch
        .column_by_name(COL_VECTOR)
        .and_then(|c| c.as_any().downcast_ref::<FixedSizeListArray>());
    let values = column.and_then(|c| c.values().as_any().downcast_ref::<Float32Array>());
    let dim = column.map_or(0, |c| c.value_length() as usize);
    for (i, record) in records.iter().enumerate() {
        let vector = match (vectors, column, values) {
            (true, Some(c), Some(v)) if c.is_valid(i) => {
                let start = (c.value_offset(i) as usize).min(v.len());
                let end = (start + dim).min(v.len());
                Some(&v.values()[start..end])
            }
            _ => None,
        };
        write_line(out, &RowOut { record, vector })?;
    }
    Ok(records.len() as u64)
}

fn write_line<W: Write + ?Sized>(
    out: &mut W,
    value: &impl serde::Serialize,
) -> Result<(), TransferError> {
    serde_json::to_writer(&mut *out, value).map_err(|e| TransferError::Io(e.into()))?;
    out.write_all(b"\n")?;
    Ok(())
}

/// [`export`] into the file `path`, atomically: a temp file beside it, fsynced and renamed (and
/// the directory fsynced), so an interrupted export never leaves a truncated file under the
/// final name; the temp file is removed on failure.
pub(crate) async fn export_to_path(
    store: &Store,
    model: &ModelInfo,
    options: &ExportOptions,
    path: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ExportReport, TransferError> {
    let tmp = temp_path(path);
    let file = File::create(&tmp).map_err(file_error(&tmp))?;
    let mut out = BufWriter::with_capacity(1 << 16, file);
    let written = export(store, model, options, &mut out, progress).await;
    let finished = written.and_then(|report| {
        let file = out
            .into_inner()
            .map_err(|e| file_error(&tmp)(e.into_error()))?;
        file.sync_all().map_err(file_error(&tmp))?;
        std::fs::rename(&tmp, path).map_err(file_error(path))?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(file_error(dir))?;
        }
        Ok(report)
    });
    if finished.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    finished
}

fn file_error(path: &Path) -> impl FnOnce(std::io::Error) -> TransferError + '_ {
    move |source| TransferError::File {
        path: path.display().to_string(),
        source,
    }
}

fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "export".into());
    path.with_file_name(format!(".{name}.tmp.{}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_validated_and_escaped() {
        let f = normalize_filter(&ExportFilter {
            scope: Some("家人".into()),
            conversation: Some("  it's:1 ".into()),
            visible_to: None,
        })
        .unwrap();
        assert_eq!(f.conversation.as_deref(), Some("it's:1"));
        assert_eq!(
            predicate(&f).unwrap(),
            "conversation_id = 'it''s:1' AND memory_scope = '家人'"
        );
        assert!(predicate(&ExportFilter::default()).is_none());
        assert!(normalize_filter(&ExportFilter {
            scope: Some("x' OR 1=1 --".into()),
            ..ExportFilter::default()
        })
        .is_err());
    }
}
