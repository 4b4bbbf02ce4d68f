//! The export file format: JSON lines, a header object first, then one memory per line.
//!
//! ```text
//! {"scopemem_export":1,"embedding_model":"onnx-sha256:…","dimension":384,"exported_at":"…","filter":{"scope":null,"conversation":null},"vectors":false}
//! {"id":"…","content":"…","reasoning":null,"tags":[],"memory_type":"knowledge","strength":10,…}
//! ```
//!
//! A memory line is a [`MemoryRecord`] as serde writes it (every column under its own name),
//! plus `"vector"` when the export was made with vectors. Keys a reader does not know are
//! ignored, so a file from a newer scopemem with extra columns still imports.

use serde::{Deserialize, Serialize};

use crate::store::MemoryRecord;

use super::TransferError;

/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Which rows an export selected (recorded in the header so a partial file says so).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportFilter {
    /// Only rows of this `memory_scope`.
    #[serde(default)]
    pub scope: Option<String>,
    /// Only rows written from this conversation id.
    #[serde(default)]
    pub conversation: Option<String>,
    /// Only rows this conversation may recall (`GET /v1/export`): its scope, `public`, and
    /// NULL-scope rows while migration mode is on; expired rows are left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visible_to: Option<String>,
}

/// Line 1 of every export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Format version; a reader refuses versions it does not know.
    pub scopemem_export: u32,
    /// The table's embedding model id: vectors are reused on import only under the same id.
    pub embedding_model: String,
    /// Vector dimension of that model.
    pub dimension: usize,
    /// RFC 3339, when the export started.
    pub exported_at: String,
    #[serde(default)]
    pub filter: ExportFilter,
    /// Whether memory lines carry `"vector"`.
    #[serde(default)]
    pub vectors: bool,
}

/// One memory line as written: the record's columns, then the vector if asked for.
#[derive(Serialize)]
pub struct RowOut<'a> {
    #[serde(flatten)]
    pub record: &'a MemoryRecord,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vector: Option<&'a [f32]>,
}

/// One memory line as read.
#[derive(Deserialize)]
pub struct RowIn {
    #[serde(flatten)]
    pub record: MemoryRecord,
    #[serde(default)]
    pub vector: Option<Vec<f32>>,
}

/// Parse line 1. A file that does not start with a header (e.g. a memory line, or something
/// that is not an export at all) or has an unknown version is refused as a whole: guessing
/// how to read it could import the wrong data.
pub(crate) fn parse_header(line: &str) -> Result<Header, TransferError> {
    let bad = |message: String| TransferError::Header { line: 1, message };
    let value: serde_json::Value =
        serde_json::from_str(line.trim()).map_err(|e| bad(format!("not a JSON object: {e}")))?;
    let Some(version) = value.get("scopemem_export") else {
        return Err(bad(
            "no \"scopemem_export\" key: this is not a scopemem export header (line 1 must be \
             the header written by `scopemem export`)"
                .into(),
        ));
    };
    if version.as_u64() != Some(u64::from(FORMAT_VERSION)) {
        return Err(bad(format!(
            "unknown format version {version}; this scopemem reads version {FORMAT_VERSION}"
        )));
    }
    serde_json::from_value(value).map_err(|e| bad(format!("malformed header: {e}")))
}

/// Parse one memory line (validation is [`super::validate`]'s job).
pub(crate) fn parse_row(line: &str) -> Result<RowIn, String> {
    serde_json::from_str(line).map_err(|e| format!("not a valid memory line: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            scopemem_export: FORMAT_VERSION,
            embedding_model: "m".into(),
            dimension: 3,
            exported_at: "2026-01-01T00:00:00Z".into(),
            filter: ExportFilter::default(),
            vectors: true,
        }
    }

    #[test]
    fn header_round_trips_and_versions_are_checked() {
        let text = serde_json::to_string(&header()).unwrap();
        assert_eq!(parse_header(&text).unwrap(), header());
        let newer = text.replace("\"scopemem_export\":1", "\"scopemem_export\":2");
        let e = parse_header(&newer).unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("version 2"), "{e}");
        let e = parse_header(r#"{"id":"x","content":"y"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a scopemem export header"), "{e}");
        assert!(parse_header("garbage").is_err());
    }

    #[test]
    fn rows_carry_vectors_only_when_given_and_ignore_unknown_keys() {
        let line = r#"{"id":"a","content":"c","memory_type":"event","strength":5,"is_active":false,
            "created_at":"2024-05-01T10:00:00.000001Z","memory_scope":null,"expires_at":null}"#;
        let row = parse_row(line).unwrap();
        assert_eq!(row.record.memory_scope, None);
        assert!(row.vector.is_none());
        let out = serde_json::to_string(&RowOut {
            record: &row.record,
            vector: Some(&[0.5, 1.0]),
        })
        .unwrap();
        assert!(out.ends_with(",\"vector\":[0.5,1.0]}"), "{out}");
        let again = parse_row(&out).unwrap();
        assert_eq!(again.record, row.record);
        assert_eq!(again.vector, Some(vec![0.5, 1.0]));
        let plain = serde_json::to_string(&RowOut {
            record: &row.record,
            vector: None,
        })
        .unwrap();
        assert!(!plain.contains("vector"));
    }
}
