//! Where the table lives: a local directory, or a prefix in an object store (`s3://bucket/p`)
//! that several instances on machines of their own share. Lance commits to S3 with a
//! conditional PUT, so concurrent writers need no lock service; what differs for scopemem is
//! only where the small state beside the table goes ([`crate::store::beside`]) and what can be
//! fsynced. A plain config value: it lives here so that `config` imports nothing above it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

/// `storage.db_dir` parsed, with the `storage.options` passed to the object store.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DbLocation {
    root: Root,
    /// Object-store settings (endpoint, region, `allow_http`, ...); credentials also come from
    /// the `AWS_*` environment, which Lance reads itself.
    #[serde(
        skip_serializing_if = "BTreeMap::is_empty",
        serialize_with = "redacted"
    )]
    options: BTreeMap<String, String>,
}

/// Options as shown (config dumps, status): secrets are replaced by `***`.
fn redacted<S: serde::Serializer>(
    options: &BTreeMap<String, String>,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = s.serialize_map(Some(options.len()))?;
    for (k, v) in options {
        let lower = k.to_ascii_lowercase();
        let secret = ["secret", "key", "token", "password", "session"]
            .iter()
            .any(|w| lower.contains(w));
        map.serialize_entry(k, if secret { "***" } else { v })?;
    }
    map.end()
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
enum Root {
    Dir(PathBuf),
    Bucket(String),
}

/// Why a `storage.db_dir` value cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LocationError {
    #[error("'{0}' has no bucket: write it as scheme://bucket/prefix")]
    NoBucket(String),
    #[error(
        "'{uri}': this build of scopemem reads {supported} (and local directories); \
         '{scheme}://' is not one of them"
    )]
    Unsupported {
        uri: String,
        scheme: String,
        supported: &'static str,
    },
    #[error("storage.options are for object stores; '{0}' is a local directory")]
    OptionsOnDir(String),
}

/// The object-store schemes this build can open (each is a lancedb cargo feature).
const SCHEMES: &[&str] = &["s3"];

impl DbLocation {
    /// Parse `storage.db_dir`: `scheme://bucket/prefix` for an object store, `file://` or a
    /// plain path for a local directory.
    pub fn parse(text: &str) -> Result<DbLocation, LocationError> {
        let text = text.trim();
        let Some((scheme, rest)) = text.split_once("://") else {
            return Ok(DbLocation::dir(text));
        };
        let scheme = scheme.to_ascii_lowercase();
        if scheme == "file" {
            return Ok(DbLocation::dir(rest));
        }
        if !SCHEMES.contains(&scheme.as_str()) {
            return Err(LocationError::Unsupported {
                uri: text.to_owned(),
                scheme,
                supported: "s3://",
            });
        }
        let rest = rest.trim_end_matches('/');
        if rest.is_empty() || rest.starts_with('/') {
            return Err(LocationError::NoBucket(text.to_owned()));
        }
        Ok(DbLocation {
            root: Root::Bucket(format!("{scheme}://{rest}")),
            options: BTreeMap::new(),
        })
    }

    /// A local directory.
    pub fn dir(path: impl Into<PathBuf>) -> DbLocation {
        DbLocation {
            root: Root::Dir(path.into()),
            options: BTreeMap::new(),
        }
    }

    /// With object-store options (refused on a local directory, where they would be ignored).
    pub fn with_options(
        mut self,
        options: BTreeMap<String, String>,
    ) -> Result<DbLocation, LocationError> {
        if !options.is_empty() {
            if let Root::Dir(d) = &self.root {
                return Err(LocationError::OptionsOnDir(d.display().to_string()));
            }
        }
        self.options = options;
        Ok(self)
    }

    /// The directory, when the table is local (fsync, disk usage and OS locks need one).
    pub fn local_dir(&self) -> Option<&Path> {
        match &self.root {
            Root::Dir(d) => Some(d),
            Root::Bucket(_) => None,
        }
    }

    /// Whether the table is in an object store.
    #[cfg(test)]
    pub(crate) fn is_remote(&self) -> bool {
        matches!(self.root, Root::Bucket(_))
    }

    /// What lancedb connects to.
    pub fn uri(&self) -> String {
        match &self.root {
            Root::Dir(d) => d.to_string_lossy().into_owned(),
            Root::Bucket(b) => b.clone(),
        }
    }

    /// The options handed to lancedb and to the object store beside it.
    pub fn options(&self) -> &BTreeMap<String, String> {
        &self.options
    }

    pub fn options_map(&self) -> HashMap<String, String> {
        self.options
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// `<db>/<table>.lance` on a local directory (what `power` durability fsyncs).
    pub fn table_dir(&self, table: &str) -> Option<PathBuf> {
        self.local_dir().map(|d| d.join(format!("{table}.lance")))
    }
}

impl fmt::Display for DbLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.uri())
    }
}

impl From<&Path> for DbLocation {
    fn from(p: &Path) -> Self {
        DbLocation::dir(p)
    }
}

impl From<&PathBuf> for DbLocation {
    fn from(p: &PathBuf) -> Self {
        DbLocation::dir(p.as_path())
    }
}

impl From<PathBuf> for DbLocation {
    fn from(p: PathBuf) -> Self {
        DbLocation::dir(p)
    }
}

impl From<&DbLocation> for DbLocation {
    fn from(l: &DbLocation) -> Self {
        l.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_uris_parse_to_what_lancedb_opens() {
        let d = DbLocation::parse("./data/lancedb").unwrap();
        assert_eq!(d.local_dir(), Some(Path::new("./data/lancedb")));
        assert_eq!(
            d.table_dir("m"),
            Some(PathBuf::from("./data/lancedb/m.lance"))
        );
        assert_eq!(
            DbLocation::parse("file:///srv/db").unwrap().local_dir(),
            Some(Path::new("/srv/db"))
        );
        let b = DbLocation::parse(" S3://bucket/team/memories/ ").unwrap();
        assert!(b.is_remote());
        assert_eq!(b.uri(), "s3://bucket/team/memories");
        assert_eq!(b.local_dir(), None);
        assert_eq!(b.table_dir("m"), None);
    }

    #[test]
    fn bad_uris_and_misplaced_options_are_refused_with_the_reason() {
        assert_eq!(
            DbLocation::parse("s3://"),
            Err(LocationError::NoBucket("s3://".into()))
        );
        let e = DbLocation::parse("gs://b/p").unwrap_err();
        assert!(e.to_string().contains("'gs://' is not one of them"), "{e}");
        let opts = BTreeMap::from([("aws_endpoint".to_string(), "http://x".to_string())]);
        assert!(DbLocation::dir("d").with_options(opts.clone()).is_err());
        let b = DbLocation::parse("s3://b/p")
            .unwrap()
            .with_options(opts)
            .unwrap();
        assert_eq!(b.options_map()["aws_endpoint"], "http://x");
        let shown = serde_json::to_value(
            b.with_options(BTreeMap::from([
                ("aws_secret_access_key".to_string(), "hunter2".to_string()),
                ("aws_region".to_string(), "eu".to_string()),
            ]))
            .unwrap(),
        )
        .unwrap();
        assert_eq!(shown["options"]["aws_secret_access_key"], "***");
        assert_eq!(shown["options"]["aws_region"], "eu");
    }
}
