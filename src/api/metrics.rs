//! Prometheus text metrics: request counts and latency histograms per endpoint (recorded by a
//! middleware), plus gauges read from the service at scrape time.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::host::PluginHost;

const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    latency: Mutex<BTreeMap<String, Histogram>>,
    /// Requests the guard refused before any route saw them, by error code and status.
    refused: Mutex<BTreeMap<(&'static str, u16), u64>>,
}

impl Metrics {
    /// Count a request the guard refused (`code` is the response's `error.code`).
    pub fn refused(&self, code: &'static str, status: u16) {
        if let Ok(mut r) = self.refused.lock() {
            *r.entry((code, status)).or_default() += 1;
        }
    }

    fn observe(&self, route: &str, status: u16, secs: f64) {
        if let Ok(mut r) = self.requests.lock() {
            *r.entry((route.to_string(), status)).or_default() += 1;
        }
        if let Ok(mut l) = self.latency.lock() {
            let h = l.entry(route.to_string()).or_default();
            for (i, b) in BUCKETS.iter().enumerate() {
                if secs <= *b {
                    h.counts[i] += 1;
                }
            }
            h.sum += secs;
            h.count += 1;
        }
    }
}

/// Axum middleware: time every request, labelled by its route pattern (not the raw path, so
/// ids in paths do not explode the label set).
pub async fn track(State(metrics): State<Arc<Metrics>>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let started = Instant::now();
    let response = next.run(req).await;
    metrics.observe(
        &route,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Render everything in the Prometheus text exposition format.
pub async fn render(metrics: &Metrics, host: &PluginHost) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP scopemem_http_requests_total HTTP requests by route and status."
    );
    let _ = writeln!(out, "# TYPE scopemem_http_requests_total counter");
    if let Ok(r) = metrics.requests.lock() {
        for ((route, status), n) in r.iter() {
            let _ = writeln!(
                out,
                "scopemem_http_requests_total{{route=\"{}\",status=\"{status}\"}} {n}",
                label(route)
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP scopemem_http_refused_total HTTP requests refused by the Host, origin, media-type or token check, by error code and status."
    );
    let _ = writeln!(out, "# TYPE scopemem_http_refused_total counter");
    if let Ok(r) = metrics.refused.lock() {
        for ((code, status), n) in r.iter() {
            let _ = writeln!(
                out,
                "scopemem_http_refused_total{{code=\"{code}\",status=\"{status}\"}} {n}"
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP scopemem_http_request_duration_seconds HTTP request latency by route."
    );
    let _ = writeln!(
        out,
        "# TYPE scopemem_http_request_duration_seconds histogram"
    );
    if let Ok(l) = metrics.latency.lock() {
        for (route, h) in l.iter() {
            let route = label(route);
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(out, "scopemem_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{b}\"}} {}", h.counts[i]);
            }
            let _ = writeln!(
                out,
                "scopemem_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "scopemem_http_request_duration_seconds_sum{{route=\"{route}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "scopemem_http_request_duration_seconds_count{{route=\"{route}\"}} {}",
                h.count
            );
        }
    }
    let memory = host.memory();
    if let Ok(stats) = memory.store().stats().await {
        let _ = writeln!(
            out,
            "# HELP scopemem_rows Rows in the memories table by scope: the {METRIC_SCOPES} largest scopes, the rest summed as (other), NULL scope as \"\"."
        );
        let _ = writeln!(out, "# TYPE scopemem_rows gauge");
        let (top, other) = top_scopes(&stats.rows_by_scope, METRIC_SCOPES);
        for (scope, n) in top {
            let _ = writeln!(
                out,
                "scopemem_rows{{memory_scope=\"{}\"}} {n}",
                label(scope)
            );
        }
        if let Some((scopes, rows)) = other {
            let _ = writeln!(out, "scopemem_rows{{memory_scope=\"(other)\"}} {rows}");
            let _ = writeln!(
                out,
                "# HELP scopemem_other_scopes Scopes summed into memory_scope=\"(other)\".\n# TYPE scopemem_other_scopes gauge\nscopemem_other_scopes {scopes}"
            );
        }
        let _ = writeln!(
            out,
            "scopemem_rows{{memory_scope=\"\"}} {}",
            stats.null_scope_rows
        );
        let _ = writeln!(
            out,
            "# TYPE scopemem_fragments gauge\nscopemem_fragments {}",
            stats.fragments
        );
        let _ = writeln!(
            out,
            "# HELP scopemem_table_versions Table versions on disk (pruned after storage.keep_versions_minutes).\n# TYPE scopemem_table_versions gauge\nscopemem_table_versions {}",
            stats.versions
        );
        let _ = writeln!(
            out,
            "# HELP scopemem_disk_bytes Bytes of every file under a local storage.db_dir (0 for an s3:// table).\n# TYPE scopemem_disk_bytes gauge\nscopemem_disk_bytes {}",
            stats.disk_bytes
        );
    }
    let _ = writeln!(
        out,
        "# HELP scopemem_feedback_queue_depth Feedback jobs accepted and not yet applied."
    );
    let _ = writeln!(
        out,
        "# TYPE scopemem_feedback_queue_depth gauge\nscopemem_feedback_queue_depth {}",
        memory.feedback().depth()
    );
    let _ = writeln!(
        out,
        "# HELP scopemem_feedback_dead_letters Feedback jobs dead-lettered in the last day.\n# TYPE scopemem_feedback_dead_letters gauge\nscopemem_feedback_dead_letters {}",
        memory.feedback().dead_letters().len()
    );
    let _ = writeln!(
        out,
        "# HELP scopemem_feedback_retries_total Failed feedback attempts that were retried.\n# TYPE scopemem_feedback_retries_total counter\nscopemem_feedback_retries_total {}",
        memory.feedback().retries()
    );
    let _ = writeln!(
        out,
        "# HELP scopemem_recall_degraded_total Recalls answered by keyword alone because the embedding provider failed.\n# TYPE scopemem_recall_degraded_total counter\nscopemem_recall_degraded_total {}",
        memory.degraded_recalls()
    );
    let _ = writeln!(
        out,
        "# HELP scopemem_feedback_batches_total Batches of feedback jobs applied together.\n# TYPE scopemem_feedback_batches_total counter\nscopemem_feedback_batches_total {}",
        memory.feedback().batches()
    );
    let p = memory.backfill().progress();
    let _ = writeln!(
        out,
        "# HELP scopemem_backfill_rows Legacy-row backfill progress."
    );
    let _ = writeln!(out, "# TYPE scopemem_backfill_rows gauge");
    for (k, v) in [
        ("scanned", p.scanned),
        ("filled", p.filled),
        ("skipped", p.skipped),
        ("remaining", p.remaining),
    ] {
        let _ = writeln!(out, "scopemem_backfill_rows{{kind=\"{k}\"}} {v}");
    }
    let _ = writeln!(out, "# TYPE scopemem_backfill_state gauge");
    for s in ["none", "pending", "running", "done"] {
        let _ = writeln!(
            out,
            "scopemem_backfill_state{{state=\"{s}\"}} {}",
            u8::from(p.state == s)
        );
    }
    let _ = writeln!(
        out,
        "# TYPE scopemem_migration_mode_active gauge\nscopemem_migration_mode_active {}",
        u8::from(memory.migration_active())
    );
    let c = memory.store().writer().counters();
    use std::sync::atomic::Ordering::Relaxed;
    let _ = writeln!(
        out,
        "# TYPE scopemem_writer_commits_total counter\nscopemem_writer_commits_total {}",
        c.commits.load(Relaxed)
    );
    let _ = writeln!(out, "# TYPE scopemem_writer_rows_appended_total counter\nscopemem_writer_rows_appended_total {}", c.rows_appended.load(Relaxed));
    let _ = writeln!(out, "# TYPE scopemem_writer_conflicts_retried_total counter\nscopemem_writer_conflicts_retried_total {}", c.conflicts_retried.load(Relaxed));
    let _ = writeln!(
        out,
        "# TYPE scopemem_compactions_total counter\nscopemem_compactions_total {}",
        c.compactions.load(Relaxed)
    );
    let _ = writeln!(
        out,
        "# TYPE scopemem_vector_index_retrains_total counter\nscopemem_vector_index_retrains_total {}",
        c.retrains.load(Relaxed)
    );
    out
}

/// Scopes with their own `scopemem_rows` series. With `unmapped_scope: conversation` every chat
/// is a scope, and one series per chat would grow without bound; `(other)` cannot be a scope
/// name, so it never collides with one.
pub const METRIC_SCOPES: usize = 20;

/// `(scopes, rows)` of the scopes summed into `(other)`.
type Rest = Option<(usize, usize)>;

/// The `n` largest scopes (ties by name), and the count and rows of the rest, if any.
fn top_scopes(
    rows_by_scope: &std::collections::BTreeMap<String, usize>,
    n: usize,
) -> (Vec<(&String, usize)>, Rest) {
    let mut all: Vec<(&String, usize)> = rows_by_scope.iter().map(|(s, n)| (s, *n)).collect();
    all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let rest = all.split_off(n.min(all.len()));
    let other = (!rest.is_empty()).then(|| (rest.len(), rest.iter().map(|(_, n)| n).sum()));
    (all, other)
}

#[cfg(test)]
mod top_scope_tests {
    use super::*;

    #[test]
    fn the_largest_scopes_keep_their_series_and_the_rest_are_summed() {
        let counts: std::collections::BTreeMap<String, usize> =
            [("a", 5), ("b", 9), ("c", 1), ("d", 5)]
                .into_iter()
                .map(|(s, n)| (s.to_string(), n))
                .collect();
        let (top, other) = top_scopes(&counts, 2);
        assert_eq!(top, [(&"b".to_string(), 9), (&"a".to_string(), 5)]);
        assert_eq!(other, Some((2, 6)));
        let (top, other) = top_scopes(&counts, 10);
        assert_eq!(top.len(), 4);
        assert_eq!(other, None);
        assert!(
            crate::scope::ScopeName::parse("(other)").is_err(),
            "(other) must not be a possible scope name"
        );
    }
}
