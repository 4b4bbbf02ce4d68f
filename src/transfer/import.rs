//! `scopemem import`: read an export back into a table, keeping each row's id and scope.
//!
//! This is the operator's restore path, not a conversation write path: scopes come from the
//! file, not from the scope map, and the incognito list does not apply. Every row is still
//! validated and redacted like a live write, and goes through the door every write goes through
//! as the operator's restore (`door::Admitted::restored`). Rows go in with `insert_missing` (a
//! merge on `id` that only inserts), so a re-run inserts nothing and an existing row is never
//! overwritten.

use std::collections::HashMap;
use std::io::{BufRead, Read};
use std::time::Instant;

use crate::embed::Embedder;
use crate::memory::door::{self, Admitted};
use crate::store::Selection;
use crate::store::{MemoryRecord, Store};

use super::format::{parse_header, parse_row, Header};
use super::validate::{validate, ValidRow};
use super::TransferError;

/// Longest line read; longer lines are rejected without being parsed.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Tunables for an import.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// Rows per existence check, embedding run and commit.
    pub batch_rows: usize,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions { batch_rows: 512 }
    }
}

/// A line that was not imported, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// 1-based line number in the file.
    pub line: u64,
    pub reason: String,
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ImportReport {
    /// Rows written.
    pub imported: u64,
    /// Valid rows whose id the table already had (left untouched).
    pub already_present: u64,
    /// Rows embedded again (model differs, no usable vector, or the text changed on the way in).
    pub re_embedded: u64,
    /// Rows whose text redaction or clean-up changed.
    pub redacted: u64,
    /// Lines refused (see the rejections reported as they happened).
    pub rejected: u64,
    /// Memory lines read (the header and blank lines excluded).
    pub lines: u64,
    /// Whether the file's vectors could be reused at all (same model id and dimension).
    pub vectors_reusable: bool,
    pub seconds: f64,
}

/// How the import is going, for a progress bar.
pub struct Progress<'a> {
    /// Lines read so far (including the header).
    pub line: u64,
    pub report: &'a ImportReport,
}

/// A validated row waiting for its batch.
struct Pending {
    line: u64,
    row: ValidRow,
}

/// Where import needs the outside world: the store, the model, and someone to tell.
pub struct Importer<'a> {
    pub store: &'a Store,
    pub embedder: &'a dyn Embedder,
    pub options: ImportOptions,
    pub on_progress: &'a mut dyn FnMut(Progress<'_>),
    pub on_reject: &'a mut dyn FnMut(&Rejection),
}

impl Importer<'_> {
    /// Import every line of `input`. A missing or unknown header fails the whole import before
    /// anything is written; a bad memory line is reported and skipped. Store or model failures
    /// stop the import (rows already committed stay; re-running is safe).
    pub async fn run(&mut self, input: &mut dyn BufRead) -> Result<ImportReport, TransferError> {
        let started = Instant::now();
        let mut buf = Vec::new();
        let header = self.read_header(input, &mut buf)?;
        let mut report = ImportReport {
            vectors_reusable: header.embedding_model == self.embedder.model_id()
                && header.dimension == self.store.dimension(),
            ..ImportReport::default()
        };
        tracing::info!(
            file_model = %header.embedding_model,
            table_model = %self.embedder.model_id(),
            vectors_in_file = header.vectors,
            vectors_reusable = report.vectors_reusable,
            "import started"
        );
        let mut seen: HashMap<String, u64> = HashMap::new();
        let mut pending = Vec::with_capacity(self.options.batch_rows);
        let mut line = 1u64;
        while read_line(input, &mut buf)? {
            line += 1;
            match self.accept(line, &buf, &mut seen, &mut report) {
                Some(row) => pending.push(Pending { line, row }),
                None => continue,
            }
            if pending.len() >= self.options.batch_rows.max(1) {
                self.flush(&mut pending, &mut report).await?;
                (self.on_progress)(Progress {
                    line,
                    report: &report,
                });
            }
        }
        self.flush(&mut pending, &mut report).await?;
        report.seconds = started.elapsed().as_secs_f64();
        (self.on_progress)(Progress {
            line,
            report: &report,
        });
        tracing::info!(
            imported = report.imported,
            already_present = report.already_present,
            re_embedded = report.re_embedded,
            rejected = report.rejected,
            seconds = report.seconds,
            "import finished"
        );
        Ok(report)
    }

    fn read_header(
        &self,
        input: &mut dyn BufRead,
        buf: &mut Vec<u8>,
    ) -> Result<Header, TransferError> {
        if !read_line(input, buf)? {
            return Err(TransferError::Header {
                line: 1,
                message: "the file is empty; line 1 must be the export header".into(),
            });
        }
        let text = std::str::from_utf8(buf).map_err(|_| TransferError::Header {
            line: 1,
            message: "not UTF-8".into(),
        })?;
        parse_header(text)
    }

    /// Parse and validate one line; `None` (after reporting it) when it cannot be imported.
    fn accept(
        &mut self,
        line: u64,
        buf: &[u8],
        seen: &mut HashMap<String, u64>,
        report: &mut ImportReport,
    ) -> Option<ValidRow> {
        if buf.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        report.lines += 1;
        let checked = if buf.len() > MAX_LINE_BYTES {
            Err(format!("line is longer than {MAX_LINE_BYTES} bytes"))
        } else {
            std::str::from_utf8(buf)
                .map_err(|_| "not UTF-8".to_string())
                .and_then(parse_row)
                .and_then(validate)
        };
        let checked = checked.and_then(|row| match seen.get(&row.record.id) {
            Some(first) => Err(format!("duplicate id (first on line {first})")),
            None => Ok(row),
        });
        match checked {
            Ok(row) => {
                seen.insert(row.record.id.clone(), line);
                report.redacted += u64::from(row.changed);
                Some(row)
            }
            Err(reason) => {
                report.rejected += 1;
                let rejection = Rejection { line, reason };
                // The reason can quote a value from the line (a serde error does), so it goes to
                // the operator's terminal via `on_reject` and to the log only at debug.
                tracing::debug!(line, reason = %rejection.reason, "import line rejected");
                (self.on_reject)(&rejection);
                None
            }
        }
    }

    /// Skip rows the table already has, embed what needs it, insert the rest.
    async fn flush(
        &mut self,
        pending: &mut Vec<Pending>,
        report: &mut ImportReport,
    ) -> Result<(), TransferError> {
        if pending.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(pending);
        let present = self.present_ids(&batch).await?;
        let fresh: Vec<Pending> = batch
            .into_iter()
            .filter(|p| !present.contains_key(&p.row.record.id))
            .collect();
        report.already_present += present.len() as u64;
        let rows = self.vectors_for(fresh, report).await?;
        let offered = rows.len() as u64;
        let rows = rows
            .into_iter()
            .map(|(record, vector)| (Admitted::restored(record), vector))
            .collect();
        let inserted = door::insert_missing(self.store, rows).await?;
        report.imported += inserted;
        // Another process may have inserted the same id between the check and the commit.
        report.already_present += offered.saturating_sub(inserted);
        Ok(())
    }

    async fn present_ids(&self, batch: &[Pending]) -> Result<HashMap<String, ()>, TransferError> {
        let offered = Selection::ids(batch.iter().map(|p| p.row.record.id.clone()));
        let ids = self.store.ids_where(&offered.rows_sql()).await?;
        Ok(ids.into_iter().map(|id| (id, ())).collect())
    }

    /// Pair each row with a vector: the file's when the model is the table's, the vector has
    /// the right dimension and finite values, and the text was not changed by redaction (the
    /// old vector would then encode the removed data); otherwise a fresh embedding.
    async fn vectors_for(
        &self,
        rows: Vec<Pending>,
        report: &mut ImportReport,
    ) -> Result<Vec<(MemoryRecord, Vec<f32>)>, TransferError> {
        let dim = self.store.dimension();
        let reusable = report.vectors_reusable;
        let usable = |r: &ValidRow| match &r.vector {
            Some(v) => reusable && !r.changed && v.len() == dim && v.iter().all(|x| x.is_finite()),
            None => false,
        };
        let texts: Vec<String> = rows
            .iter()
            .filter(|p| !usable(&p.row))
            .map(|p| p.row.record.content.clone())
            .collect();
        report.re_embedded += texts.len() as u64;
        let mut fresh = self
            .embedder
            .embed(crate::embed::TextRole::Passage, texts)
            .await?
            .into_iter();
        let mut out = Vec::with_capacity(rows.len());
        for Pending { line, row } in rows {
            let vector = match (usable(&row), row.vector) {
                (true, Some(v)) => v,
                _ => fresh
                    .next()
                    .ok_or_else(|| TransferError::Embedding { line })?,
            };
            out.push((row.record, vector));
        }
        Ok(out)
    }
}

/// Read one line (without its newline) into `buf`; false at end of input. At most
/// `MAX_LINE_BYTES + 1` bytes are kept: the rest of a longer line is skipped, so a hostile file
/// cannot make the import hold a huge line in memory (the kept prefix is then rejected).
fn read_line(input: &mut dyn BufRead, buf: &mut Vec<u8>) -> Result<bool, TransferError> {
    buf.clear();
    let limit = MAX_LINE_BYTES as u64 + 1;
    if (&mut *input).take(limit).read_until(b'\n', buf)? == 0 {
        return Ok(false);
    }
    if buf.last() != Some(&b'\n') && buf.len() as u64 >= limit {
        skip_rest_of_line(input)?;
    }
    while matches!(buf.last(), Some(b'\n' | b'\r')) {
        buf.pop();
    }
    Ok(true)
}

fn skip_rest_of_line(input: &mut dyn BufRead) -> Result<(), TransferError> {
    loop {
        let chunk = input.fill_buf()?;
        if chunk.is_empty() {
            return Ok(());
        }
        match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => {
                input.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = chunk.len();
                input.consume(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlong_lines_are_cut_and_the_next_line_still_read() {
        let long = "x".repeat(MAX_LINE_BYTES + 10);
        let text = format!("{long}\nnext\r\n");
        let mut input = text.as_bytes();
        let mut buf = Vec::new();
        assert!(read_line(&mut input, &mut buf).unwrap());
        assert_eq!(buf.len(), MAX_LINE_BYTES + 1);
        assert!(read_line(&mut input, &mut buf).unwrap());
        assert_eq!(buf, b"next");
        assert!(!read_line(&mut input, &mut buf).unwrap());
    }
}
