//! Per-request cost of the HTTP guard (Host check + constant-time bearer token): the same
//! trivial handler behind a bare router and behind `api::guard::protect`, driven in-process with
//! `oneshot` (no network, no model, no store), so the difference is the guard alone.
//!
//! Prints `RESULT http guard: ...` lines from interleaved timing rounds (median of rounds), then
//! Criterion times the same four cases.

mod common;

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::http::Request;
use axum::routing::get;
use axum::Router;
use scopemem::api::guard::{protect, Guard};
use scopemem::config::Secret;
use tower::ServiceExt;

const TOKEN: &str = "bench-token-0123456789abcdef0123456789abcdef";
const ROUNDS: usize = 15;
/// Requests per round (a few in a smoke run).
fn per_round() -> usize {
    common::scaled(20_000, 20)
}

fn routes() -> Router {
    Router::new().route("/v1/status", get(|| async { "ok" }))
}

fn guarded(allowed: &[&str], token: Option<&str>) -> Router {
    let allowed: Vec<String> = allowed.iter().map(|s| s.to_string()).collect();
    let secret = token.and_then(Secret::new);
    let guard = Guard::new(&allowed, secret.as_ref()).expect("bench guard");
    protect(routes(), Arc::new(guard))
}

/// What a real client sends: a Host naming this machine (an `allowed_hosts` entry, so the check
/// walks past the loopback names) and the bearer. Every case gets the same headers, so building
/// them cancels out of the differences.
fn request() -> Request<Body> {
    Request::builder()
        .uri("/v1/status")
        .header("host", "memory.lan:8787")
        .header("user-agent", "bench")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Body::empty())
        .expect("request")
}

fn once(rt: &tokio::runtime::Runtime, router: &Router) {
    let resp = rt
        .block_on(router.clone().oneshot(request()))
        .expect("infallible");
    assert!(resp.status().is_success(), "{}", resp.status());
}

/// Median ns per request for each case, rounds interleaved so drift hits all cases alike.
fn measure(rt: &tokio::runtime::Runtime, cases: &[(&str, Router)]) -> Vec<f64> {
    let mut samples = vec![Vec::with_capacity(ROUNDS); cases.len()];
    for (_, router) in cases {
        for _ in 0..per_round() / 10 {
            once(rt, router);
        }
    }
    for _ in 0..ROUNDS {
        for (i, (_, router)) in cases.iter().enumerate() {
            let t = Instant::now();
            for _ in 0..per_round() {
                once(rt, router);
            }
            samples[i].push(t.elapsed().as_nanos() as f64 / per_round() as f64);
        }
    }
    samples
        .into_iter()
        .map(|mut s| {
            s.sort_by(f64::total_cmp);
            s[s.len() / 2]
        })
        .collect()
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let allowed = ["memory.lan", "other.lan:9000", "[fe80::1]"];
    let cases = [
        ("unguarded", routes()),
        ("host check only", guarded(&allowed, None)),
        ("host check + token", guarded(&allowed, Some(TOKEN))),
    ];
    let ns = measure(&rt, &cases);
    println!(
        "RESULT http guard: unguarded trivial request {:.0} ns (in-process oneshot, Host + Authorization headers sent)",
        ns[0]
    );
    println!(
        "RESULT http guard: +{:.0} ns per request (host check only, no token configured)",
        ns[1] - ns[0]
    );
    println!(
        "RESULT http guard: +{:.0} ns per request (host check + constant-time token)",
        ns[2] - ns[0]
    );

    let refusing = guarded(&allowed, Some(TOKEN));
    let mut criterion = common::criterion(50);
    let mut group = criterion.benchmark_group("http_guard");
    for (name, router) in &cases {
        group.bench_function(*name, |b| b.iter(|| once(&rt, router)));
    }
    // A refused request (wrong token): logged at warn, so this includes the disabled-log check.
    group.bench_function("refused (wrong token)", |b| {
        b.iter(|| {
            let req = Request::builder()
                .uri("/v1/status")
                .header("host", "localhost")
                .header("authorization", "Bearer nope")
                .body(Body::empty())
                .expect("request");
            let resp = rt
                .block_on(refusing.clone().oneshot(req))
                .expect("infallible");
            assert_eq!(resp.status().as_u16(), 401);
        })
    });
    group.finish();
    criterion.final_summary();
}
