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
    pub(crate) fn refused(&self, code: &'static str, status: u16) {
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
pub(crate) async fn track(
    State(metrics): State<Arc<Metrics>>,
    req: Request,
    next: Next,
) -> Response {
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
    render_requests(&mut out, metrics);
    render_refused(&mut out, metrics);
    render_latency(&mut out, metrics);
    render_store(&mut out, host).await;
    render_feedback(&mut out, host);
    render_door(&mut out, host);
    render_backfill(&mut out, host);
    render_writer(&mut out, host);
    out
}

/// A family's `# HELP` line (when it has one) and its `# TYPE` line.
fn header(out: &mut String, name: &str, help: Option<&str>, kind: &str) {
    if let Some(help) = help {
        let _ = writeln!(out, "# HELP {name} {help}");
    }
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// One unlabelled series per `(name, help, kind, value)` row, each under its own header.
fn scalars(out: &mut String, rows: &[(&str, Option<&str>, &str, String)]) {
    for (name, help, kind, value) in rows {
        header(out, name, *help, kind);
        let _ = writeln!(out, "{name} {value}");
    }
}

/// `scopemem_http_requests_total`: what the middleware counted, by route and status.
fn render_requests(out: &mut String, metrics: &Metrics) {
    header(
        out,
        "scopemem_http_requests_total",
        Some("HTTP requests by route and status."),
        "counter",
    );
    if let Ok(r) = metrics.requests.lock() {
        for ((route, status), n) in r.iter() {
            let _ = writeln!(
                out,
                "scopemem_http_requests_total{{route=\"{}\",status=\"{status}\"}} {n}",
                label(route)
            );
        }
    }
}

/// `scopemem_http_refused_total`: what the guard refused, by error code and status.
fn render_refused(out: &mut String, metrics: &Metrics) {
    header(
        out,
        "scopemem_http_refused_total",
        Some("HTTP requests refused by the Host, origin, media-type or token check, by error code and status."),
        "counter",
    );
    if let Ok(r) = metrics.refused.lock() {
        for ((code, status), n) in r.iter() {
            let _ = writeln!(
                out,
                "scopemem_http_refused_total{{code=\"{code}\",status=\"{status}\"}} {n}"
            );
        }
    }
}

/// `scopemem_http_request_duration_seconds`: the latency histogram of every route.
fn render_latency(out: &mut String, metrics: &Metrics) {
    const NAME: &str = "scopemem_http_request_duration_seconds";
    header(
        out,
        NAME,
        Some("HTTP request latency by route."),
        "histogram",
    );
    if let Ok(l) = metrics.latency.lock() {
        for (route, h) in l.iter() {
            let route = label(route);
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{NAME}_bucket{{route=\"{route}\",le=\"{b}\"}} {}",
                    h.counts[i]
                );
            }
            let _ = writeln!(
                out,
                "{NAME}_bucket{{route=\"{route}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(out, "{NAME}_sum{{route=\"{route}\"}} {}", h.sum);
            let _ = writeln!(out, "{NAME}_count{{route=\"{route}\"}} {}", h.count);
        }
    }
}

/// The table's gauges (rows by scope, fragments, versions, bytes); none when its stats cannot
/// be read.
async fn render_store(out: &mut String, host: &PluginHost) {
    let Ok(stats) = host.memory().table_stats().await else {
        return;
    };
    header(
        out,
        "scopemem_rows",
        Some(&format!("Rows in the memories table by scope: the {METRIC_SCOPES} largest scopes, the rest summed as (other), NULL scope as \"\".")),
        "gauge",
    );
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
        scalars(
            out,
            &[(
                "scopemem_other_scopes",
                Some("Scopes summed into memory_scope=\"(other)\"."),
                "gauge",
                scopes.to_string(),
            )],
        );
    }
    let _ = writeln!(
        out,
        "scopemem_rows{{memory_scope=\"\"}} {}",
        stats.null_scope_rows
    );
    scalars(
        out,
        &[
            (
                "scopemem_fragments",
                None,
                "gauge",
                stats.fragments.to_string(),
            ),
            (
                "scopemem_table_versions",
                Some("Table versions on disk (pruned after storage.keep_versions_minutes)."),
                "gauge",
                stats.versions.to_string(),
            ),
            (
                "scopemem_disk_bytes",
                Some("Bytes of every file under a local storage.db_dir (0 for an s3:// table)."),
                "gauge",
                stats.disk_bytes.to_string(),
            ),
        ],
    );
}

/// The feedback queue's gauges and counters, and the degraded recalls.
fn render_feedback(out: &mut String, host: &PluginHost) {
    let memory = host.memory();
    let feedback = memory.feedback();
    let working = memory.working_status();
    let consolidation = memory.consolidation_status();
    let queries = memory.query_cost();
    let ahead = memory.embedded_ahead();
    scalars(
        out,
        &[
            (
                "scopemem_feedback_queue_depth",
                Some("Feedback jobs accepted and not yet applied."),
                "gauge",
                feedback.depth().to_string(),
            ),
            (
                "scopemem_working_memory_waiting",
                Some("Chat messages accepted and not yet embedded (keyword-searchable meanwhile)."),
                "gauge",
                working.waiting.to_string(),
            ),
            (
                "scopemem_working_memory_vector_lag_seconds",
                Some("How long the oldest waiting chat message has waited for its vector."),
                "gauge",
                format!("{:.3}", working.vector_lag_ms as f64 / 1000.0),
            ),
            (
                "scopemem_working_memory_restated_total",
                Some("Facts made long-term memories because a second member stated them again."),
                "counter",
                working.restated.to_string(),
            ),
            (
                "scopemem_working_memory_recalled_again_total",
                Some("Members' statements recalls returned a second time, handed to the threshold rule."),
                "counter",
                working.recalled_again.to_string(),
            ),
            (
                "scopemem_consolidation_passes_total",
                Some("LLM consolidation passes run over a conversation's recent messages."),
                "counter",
                consolidation.passes.to_string(),
            ),
            (
                "scopemem_consolidation_added_total",
                Some("Long-term memories the LLM consolidation passes added."),
                "counter",
                consolidation.added.to_string(),
            ),
            (
                "scopemem_consolidation_refused_total",
                Some("Consolidation decisions refused (a scope, an id not shown, no text, or by the write door)."),
                "counter",
                consolidation.refused.to_string(),
            ),
            (
                "scopemem_consolidation_malformed_total",
                Some("Consolidation answers dropped as not the JSON asked for."),
                "counter",
                consolidation.malformed.to_string(),
            ),
            (
                "scopemem_consolidation_failed_total",
                Some("Consolidation calls that failed or timed out."),
                "counter",
                consolidation.failed.to_string(),
            ),
            (
                "scopemem_feedback_dead_letters",
                Some("Feedback jobs dead-lettered in the last day."),
                "gauge",
                feedback.dead_letters().len().to_string(),
            ),
            (
                "scopemem_feedback_retries_total",
                Some("Failed feedback attempts that were retried."),
                "counter",
                feedback.retries().to_string(),
            ),
            (
                "scopemem_query_embedding_seconds_total",
                Some("Time the model ran for recall queries (the message, and the context of a recall with history)."),
                "counter",
                format!("{:.6}", queries.model_seconds),
            ),
            (
                "scopemem_query_embedding_runs_total",
                Some("Model calls for recall queries (each embeds one or more texts)."),
                "counter",
                queries.runs.to_string(),
            ),
            (
                "scopemem_query_texts_embedded_total",
                Some("Query texts the model embedded for recalls."),
                "counter",
                queries.texts_embedded.to_string(),
            ),
            (
                "scopemem_query_cache_hits_total",
                Some("Query texts answered from the query cache without the model."),
                "counter",
                queries.hits.to_string(),
            ),
            (
                "scopemem_query_joins_total",
                Some("Query texts a recall took from a run already under way (a question embedded ahead)."),
                "counter",
                queries.joins.to_string(),
            ),
            (
                "scopemem_questions_prefetched_total",
                Some("Messages to the bot whose recall texts were embedded when they arrived."),
                "counter",
                ahead.prefetched.to_string(),
            ),
            (
                "scopemem_prefetch_history_predicted_total",
                Some("Recalls whose history was the one embedded ahead of them."),
                "counter",
                ahead.predicted.to_string(),
            ),
            (
                "scopemem_prefetch_recalls_total",
                Some("Injection events that followed a message to the bot."),
                "counter",
                ahead.followed.to_string(),
            ),
            (
                "scopemem_prefetch_lead_seconds_total",
                Some("Time from a message to the bot to its injection event, summed."),
                "counter",
                format!("{:.6}", ahead.lead_seconds),
            ),
            (
                "scopemem_recall_degraded_total",
                Some("Recalls answered by keyword alone because the embedding provider failed."),
                "counter",
                memory.degraded_recalls().to_string(),
            ),
            (
                "scopemem_feedback_batches_total",
                Some("Batches of feedback jobs applied together."),
                "counter",
                feedback.batches().to_string(),
            ),
        ],
    );
}

/// The legacy-row backfill's progress and state, and whether migration mode is on.
/// `scopemem_writes_refused_total`: what the write door refused, by reason (every writer: the
/// rules, the LLM pass, corrections), and the pass's UPDATEs of read-only memories written as
/// ADDs.
fn render_door(out: &mut String, host: &PluginHost) {
    let memory = host.memory();
    header(
        out,
        "scopemem_writes_refused_total",
        Some("Memory writes the write door refused, by reason (read_only, sources_gone, forgotten, ...)."),
        "counter",
    );
    for (reason, n) in memory.writes_refused() {
        let _ = writeln!(
            out,
            "scopemem_writes_refused_total{{reason=\"{reason}\"}} {n}"
        );
    }
    let consolidation = memory.consolidation_status();
    scalars(
        out,
        &[
            (
                "scopemem_consolidation_updates_added_total",
                Some("UPDATEs of a memory the pass may only read, written as an ADD of the chat's scope."),
                "counter",
                consolidation.updates_added.to_string(),
            ),
            (
                "scopemem_consolidation_tokens_total",
                Some("LLM tokens the consolidation passes spent (the provider's count, else estimated)."),
                "counter",
                consolidation.budget.tokens_total.to_string(),
            ),
            (
                "scopemem_consolidation_tokens_today",
                Some("LLM tokens spent today, against consolidation.daily_tokens."),
                "gauge",
                consolidation.budget.tokens_today.to_string(),
            ),
            (
                "scopemem_consolidation_chats_today",
                Some("Chats whose consolidation passes ran today."),
                "gauge",
                consolidation.budget.chats_today.to_string(),
            ),
        ],
    );
}

fn render_backfill(out: &mut String, host: &PluginHost) {
    let memory = host.memory();
    let p = memory.backfill().progress();
    header(
        out,
        "scopemem_backfill_rows",
        Some("Legacy-row backfill progress."),
        "gauge",
    );
    for (k, v) in [
        ("scanned", p.scanned),
        ("filled", p.filled),
        ("skipped", p.skipped),
        ("remaining", p.remaining),
    ] {
        let _ = writeln!(out, "scopemem_backfill_rows{{kind=\"{k}\"}} {v}");
    }
    header(out, "scopemem_backfill_state", None, "gauge");
    for s in ["none", "pending", "running", "done"] {
        let _ = writeln!(
            out,
            "scopemem_backfill_state{{state=\"{s}\"}} {}",
            u8::from(p.state == s)
        );
    }
    scalars(
        out,
        &[(
            "scopemem_migration_mode_active",
            None,
            "gauge",
            u8::from(memory.migration_active()).to_string(),
        )],
    );
}

/// The store writer's counters: commits, rows, retried conflicts, compactions, retrains.
fn render_writer(out: &mut String, host: &PluginHost) {
    use std::sync::atomic::Ordering::Relaxed;
    let c = host.memory().writer_counters();
    scalars(
        out,
        &[
            (
                "scopemem_writer_commits_total",
                None,
                "counter",
                c.commits.load(Relaxed).to_string(),
            ),
            (
                "scopemem_writer_rows_appended_total",
                None,
                "counter",
                c.rows_appended.load(Relaxed).to_string(),
            ),
            (
                "scopemem_writer_conflicts_retried_total",
                None,
                "counter",
                c.conflicts_retried.load(Relaxed).to_string(),
            ),
            (
                "scopemem_compactions_total",
                None,
                "counter",
                c.compactions.load(Relaxed).to_string(),
            ),
            (
                "scopemem_vector_index_retrains_total",
                None,
                "counter",
                c.retrains.load(Relaxed).to_string(),
            ),
        ],
    );
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
