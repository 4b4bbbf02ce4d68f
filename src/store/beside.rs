//! Small state kept beside the table (the backfill checkpoint, the maintenance lease record),
//! in the same directory or bucket prefix, so every instance that opens the table reads the
//! same copy. In a bucket, writes that must not race use S3's conditional PUT (`If-None-Match`
//! to create, `If-Match` on the ETag to replace), the same mechanism Lance commits with.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use lance::io::{ObjectStore as LanceObjectStore, ObjectStoreParams, ObjectStoreRegistry};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};

use crate::config::DbLocation;

/// Where the side state of one database lives.
#[derive(Clone, Debug)]
pub enum Beside {
    Dir(PathBuf),
    Bucket {
        store: Arc<dyn ObjectStore>,
        prefix: ObjectPath,
        uri: String,
    },
}

/// An object's version as read, for a later conditional replace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version(Option<String>);

/// What a conditional write found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// Written; the object is now at this version.
    Done(Version),
    /// Someone else created or replaced the object first.
    Lost,
}

#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", if name.is_empty() { at.clone() } else { format!("{at}/{name}") })]
pub struct BesideError {
    pub at: String,
    pub name: String,
    pub message: String,
}

impl Beside {
    /// The side state of `location`: its directory, or its prefix in the bucket (reached with
    /// the same options and `AWS_*` environment lancedb uses for the table).
    pub async fn open(location: &DbLocation) -> Result<Beside, BesideError> {
        if let Some(dir) = location.local_dir() {
            return Ok(Beside::Dir(dir.to_path_buf()));
        }
        let uri = location.uri();
        let params = ObjectStoreParams {
            storage_options_accessor: Some(Arc::new(
                lance::io::StorageOptionsAccessor::with_static_options(location.options_map()),
            )),
            ..Default::default()
        };
        let (store, prefix) = LanceObjectStore::from_uri_and_params(
            Arc::new(ObjectStoreRegistry::default()),
            &uri,
            &params,
        )
        .await
        .map_err(|e| BesideError {
            at: uri.clone(),
            name: String::new(),
            message: e.to_string(),
        })?;
        Ok(Beside::Bucket {
            store: store.inner.clone(),
            prefix,
            uri,
        })
    }

    /// One listing of the prefix, so a wrong endpoint, bucket or credentials fail at start-up
    /// with a one-line reason instead of Lance's nested retry report.
    pub(crate) async fn probe(&self) -> Result<(), BesideError> {
        let Beside::Bucket { store, prefix, .. } = self else {
            return Ok(());
        };
        match store.list_with_delimiter(Some(prefix)).await {
            Ok(_) => Ok(()),
            Err(e) => Err(self.err("", plain_reason(&e))),
        }
    }

    /// Where the state lives, for messages.
    pub(crate) fn describe(&self, name: &str) -> String {
        match self {
            Beside::Dir(d) => d.join(name).display().to_string(),
            Beside::Bucket { uri, .. } => format!("{uri}/{name}"),
        }
    }

    fn err(&self, name: &str, message: impl ToString) -> BesideError {
        BesideError {
            at: match self {
                Beside::Dir(d) => d.display().to_string(),
                Beside::Bucket { uri, .. } => uri.clone(),
            },
            name: name.to_owned(),
            message: message.to_string(),
        }
    }

    fn object(prefix: &ObjectPath, name: &str) -> ObjectPath {
        prefix.clone().join(name)
    }

    /// The content of `name` and its version, `None` when it does not exist.
    pub(crate) async fn read(&self, name: &str) -> Result<Option<(Vec<u8>, Version)>, BesideError> {
        match self {
            Beside::Dir(d) => match std::fs::read(d.join(name)) {
                Ok(bytes) => Ok(Some((bytes, Version(None)))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(self.err(name, e)),
            },
            Beside::Bucket { store, prefix, .. } => {
                match store.get(&Self::object(prefix, name)).await {
                    Ok(got) => {
                        let version = Version(got.meta.e_tag.clone());
                        let bytes = got.bytes().await.map_err(|e| self.err(name, e))?;
                        Ok(Some((bytes.to_vec(), version)))
                    }
                    Err(object_store::Error::NotFound { .. }) => Ok(None),
                    Err(e) => Err(self.err(name, e)),
                }
            }
        }
    }

    /// Replace `name` whole: readers see the old or the new content, never half (a local file
    /// is written, fsynced and renamed; an S3 PUT is atomic).
    pub(crate) async fn write(&self, name: &str, bytes: &[u8]) -> Result<(), BesideError> {
        match self {
            Beside::Dir(d) => write_file(&d.join(name), bytes).map_err(|e| self.err(name, e)),
            Beside::Bucket { store, prefix, .. } => store
                .put(
                    &Self::object(prefix, name),
                    PutPayload::from(bytes.to_vec()),
                )
                .await
                .map(|_| ())
                .map_err(|e| self.err(name, e)),
        }
    }

    /// Create `name` only if it does not exist, or replace it only if it is still at `version`
    /// (as [`Beside::read`] returned it). Only for bucket state: local processes coordinate
    /// through OS locks instead.
    pub(crate) async fn write_if(
        &self,
        name: &str,
        bytes: &[u8],
        version: Option<&Version>,
    ) -> Result<Written, BesideError> {
        let Beside::Bucket { store, prefix, .. } = self else {
            return Err(self.err(name, "conditional writes need an object store"));
        };
        let mode = match version {
            None => PutMode::Create,
            Some(Version(e_tag)) => PutMode::Update(UpdateVersion {
                e_tag: e_tag.clone(),
                version: None,
            }),
        };
        let opts = PutOptions {
            mode,
            ..Default::default()
        };
        match store
            .put_opts(
                &Self::object(prefix, name),
                PutPayload::from(bytes.to_vec()),
                opts,
            )
            .await
        {
            Ok(put) => Ok(Written::Done(Version(put.e_tag))),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => Ok(Written::Lost),
            Err(e) => Err(self.err(name, e)),
        }
    }

    /// The names beside the table that start with `prefix` (one directory level: a local
    /// `read_dir`, or one delimited bucket listing, never the table's own files).
    pub(crate) async fn list(&self, prefix: &str) -> Result<Vec<String>, BesideError> {
        let mut names: Vec<String> = match self {
            Beside::Dir(d) => match std::fs::read_dir(d) {
                Ok(entries) => entries
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|n| n.starts_with(prefix))
                    .collect(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(self.err(prefix, e)),
            },
            Beside::Bucket {
                store, prefix: at, ..
            } => store
                .list_with_delimiter(Some(at))
                .await
                .map_err(|e| self.err(prefix, e))?
                .objects
                .into_iter()
                .filter_map(|o| o.location.filename().map(str::to_owned))
                .filter(|n| n.starts_with(prefix))
                .collect(),
        };
        names.sort();
        Ok(names)
    }

    /// Remove `name` (absent already is fine).
    pub(crate) async fn remove(&self, name: &str) -> Result<(), BesideError> {
        match self {
            Beside::Dir(d) => match std::fs::remove_file(d.join(name)) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(self.err(name, e)),
            },
            Beside::Bucket { store, prefix, .. } => {
                match store.delete(&Self::object(prefix, name)).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(self.err(name, e)),
                }
            }
        }
    }
}

/// What went wrong, in the words an operator acts on; the raw error after them.
fn plain_reason(e: &object_store::Error) -> String {
    let raw = e.to_string();
    let hint = if raw.contains("NoSuchBucket") {
        "the bucket does not exist"
    } else if raw.contains("error sending request") || raw.contains("Connection refused") {
        "the endpoint cannot be reached (check storage.options.aws_endpoint and the network)"
    } else if raw.contains("403")
        || raw.contains("AccessDenied")
        || raw.contains("InvalidAccessKeyId")
    {
        "access denied (check the AWS_* credentials)"
    } else {
        return raw;
    };
    format!("{hint}: {raw}")
}

/// Write atomically (temp file, fsync, rename, fsync the directory). The temp name is unique
/// per process and call: two processes saving at once must not rename each other's file.
fn write_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.{seq}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_directory_reads_back_what_was_written_and_refuses_conditional_writes() {
        let dir = tempfile::tempdir().unwrap();
        let b = Beside::open(&DbLocation::dir(dir.path())).await.unwrap();
        assert!(b.read("x.json").await.unwrap().is_none());
        b.write("x.json", b"1").await.unwrap();
        b.write("x.json", b"22").await.unwrap();
        assert_eq!(b.read("x.json").await.unwrap().unwrap().0, b"22");
        assert!(b.write_if("x.json", b"3", None).await.is_err());
        b.remove("x.json").await.unwrap();
        b.remove("x.json").await.unwrap();
        assert!(b.read("x.json").await.unwrap().is_none());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "no temp file left"
        );
    }
}
