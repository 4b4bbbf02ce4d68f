//! A real S3 API on loopback: `moto_server` from the project's venv (`make test` installs
//! `moto[server]` there). Moto enforces `If-None-Match` and `If-Match` on PUT, which Lance's
//! commits and scopemem's bucket lease rely on; `moto_atomic.py` runs it with each
//! check-and-write under one lock, as S3 decides them (moto alone let two conditional PUTs
//! both pass under load). Its request log is the request counter.
//! Shared by tests/s3.rs and benches/s3.rs.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

/// A running `moto_server`; killed on drop.
pub struct Moto {
    child: Child,
    pub endpoint: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// The venv's Python, which runs `moto_server` through [`ATOMIC_LAUNCHER`].
fn moto_python() -> PathBuf {
    let venv = std::env::var_os("SCOPEMEM_VENV")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/scopemem/venv")))
        .expect("SCOPEMEM_VENV or HOME");
    let bin = venv.join("bin/moto_server");
    assert!(
        bin.exists(),
        "{} is missing: `make test` installs moto[server] into the venv \
         (scripts/setup-mcp-client.sh)",
        bin.display()
    );
    venv.join("bin/python")
}

/// The launcher that makes moto's conditional writes atomic, as S3's are (`moto_atomic.py`).
const ATOMIC_LAUNCHER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/moto_atomic.py");

/// A loopback port nobody listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Moto {
    /// Start a fresh server on a free loopback port and wait until it answers.
    pub async fn start() -> Moto {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("moto.log");
        for _attempt in 0..3 {
            let port = free_port();
            let mut child = Command::new(moto_python())
                .args([ATOMIC_LAUNCHER, "-H", "127.0.0.1", "-p", &port.to_string()])
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .expect("moto_server starts");
            let endpoint = format!("http://127.0.0.1:{port}");
            let client = reqwest::Client::new();
            for _ in 0..300 {
                if client.get(&endpoint).send().await.is_ok() {
                    return Moto {
                        child,
                        endpoint,
                        log,
                        _dir: dir,
                    };
                }
                if child.try_wait().ok().flatten().is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!(
            "moto_server did not come up; its log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// Create `bucket` and return `s3://bucket/prefix`.
    pub async fn bucket(&self, bucket: &str, prefix: &str) -> String {
        let r = reqwest::Client::new()
            .put(format!("{}/{bucket}", self.endpoint))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "create bucket {bucket}: {r:?}");
        format!("s3://{bucket}/{prefix}")
    }

    /// `storage.options` for this endpoint (moto accepts any credentials).
    pub fn options(&self) -> Value {
        json!({
            "aws_endpoint": self.endpoint,
            "aws_region": "us-east-1",
            "aws_access_key_id": "scopemem-test",
            "aws_secret_access_key": "scopemem-test",
            "allow_http": "true",
        })
    }

    /// The same options as a map, for lancedb and [`scopemem::config::DbLocation`].
    pub fn option_map(&self) -> std::collections::BTreeMap<String, String> {
        self.options()
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
            .collect()
    }

    /// `uri` with this endpoint's options.
    pub fn location(&self, uri: &str) -> scopemem::config::DbLocation {
        scopemem::config::DbLocation::parse(uri)
            .unwrap()
            .with_options(self.option_map())
            .unwrap()
    }

    /// Every object under `bucket` with its bytes (for "is this text anywhere in the bucket"),
    /// read with credentials through the same object store scopemem uses.
    pub async fn objects(&self, bucket: &str) -> Vec<(String, Vec<u8>)> {
        use futures::TryStreamExt;
        use object_store::ObjectStoreExt;
        let beside =
            scopemem::store::beside::Beside::open(&self.location(&format!("s3://{bucket}")))
                .await
                .unwrap();
        let scopemem::store::beside::Beside::Bucket { store, prefix, .. } = beside else {
            unreachable!("an s3:// location is a bucket")
        };
        let metas: Vec<object_store::ObjectMeta> =
            store.list(Some(&prefix)).try_collect().await.unwrap();
        let mut out = Vec::new();
        for meta in metas {
            // The version pruner may delete an object between the listing and the read.
            let read = async { store.get(&meta.location).await?.bytes().await };
            match read.await {
                Ok(bytes) => out.push((meta.location.to_string(), bytes.to_vec())),
                Err(object_store::Error::NotFound { .. }) => continue,
                Err(e) => panic!("{}: {e}", meta.location),
            }
        }
        out
    }

    /// Keys of the objects under `bucket` whose bytes contain `needle`.
    pub async fn objects_containing(&self, bucket: &str, needle: &str) -> Vec<String> {
        self.objects(bucket)
            .await
            .into_iter()
            .filter(|(_, b)| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
            .map(|(k, _)| k)
            .collect()
    }

    /// Requests served so far, by method (one log line per request).
    pub fn requests(&self) -> Requests {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut r = Requests::default();
        for line in log.lines() {
            for (method, n) in [
                ("\"GET ", &mut r.get),
                ("\"HEAD ", &mut r.head),
                ("\"PUT ", &mut r.put),
                ("\"POST ", &mut r.post),
                ("\"DELETE ", &mut r.delete),
            ] {
                // moto colours failed requests: `"\x1b[31m\x1b[1mPUT ...`.
                if line.contains(method) || line.contains(&format!("m{}", &method[1..])) {
                    *n += 1;
                }
            }
        }
        r
    }
}

/// S3 requests by method.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Requests {
    pub get: u64,
    pub head: u64,
    pub put: u64,
    pub post: u64,
    pub delete: u64,
}

impl Requests {
    pub fn total(&self) -> u64 {
        self.get + self.head + self.put + self.post + self.delete
    }

    pub fn since(&self, before: &Requests) -> Requests {
        Requests {
            get: self.get - before.get,
            head: self.head - before.head,
            put: self.put - before.put,
            post: self.post - before.post,
            delete: self.delete - before.delete,
        }
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
