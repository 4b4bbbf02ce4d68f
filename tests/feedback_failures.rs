//! Feedback jobs that fail: retried in place with backoff, dead-lettered after the last attempt
//! and never applied later, status kept across restarts, and an old plan replayed late never
//! overwrites what a newer job did. The real model does the embedding; a wrapper beside it
//! fails on purpose for texts carrying a marker.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use scopemem::config::Config;
use scopemem::embed::EmbedError;
use scopemem::host::PluginHost;
use serde_json::{json, Value};

fn retry_config(dir: &std::path::Path, max_attempts: u32) -> Config {
    Config::from_value(&json!({
        "conversation_scope_map": family_map(),
        "storage": {"db_dir": dir.join("lancedb").to_string_lossy()},
        "recall": {"similarity_threshold": -1.0, "similarity_cut": "fixed", "relevance_gate": false},
        "feedback": {"max_attempts": max_attempts, "retry_backoff_ms": 10},
    }))
    .unwrap()
    .config
}

async fn flaky_host(dir: &std::path::Path, marker: &'static str, failures: usize) -> PluginHost {
    // The real embedder, except that a batch containing `marker` fails `failures` times (or
    // forever with `usize::MAX`).
    let left = AtomicUsize::new(failures);
    let embedder = Arc::new(failing::Failing::new(embedder(), move |_, texts| {
        if !texts.iter().any(|t| t.contains(marker)) {
            return None;
        }
        let n = left.load(Ordering::SeqCst);
        if n == 0 {
            return None;
        }
        if n != usize::MAX {
            left.store(n - 1, Ordering::SeqCst);
        }
        Some(EmbedError::Model("injected failure".into()))
    }));
    let host = PluginHost::start_with(retry_config(dir, 3), None, embedder)
        .await
        .unwrap();
    host.start_background();
    host
}

async fn submit(host: &PluginHost, body: Value) -> String {
    host.invoke("feedback", body).await.unwrap()["job_id"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn wait(host: &PluginHost, job: &str) -> scopemem::memory::feedback::JobOutcome {
    host.memory()
        .feedback()
        .wait_for(job, Duration::from_secs(60))
        .await
        .expect("job finishes")
}

async fn strength(host: &PluginHost, id: &str) -> i32 {
    host.memory()
        .store()
        .get_by_ids(&[id.to_string()], None)
        .await
        .unwrap()[0]
        .strength
}

#[tokio::test]
async fn a_failing_job_is_retried_then_applied_once() {
    let dir = tempfile::tempdir().unwrap();
    let host = flaky_host(dir.path(), "FLAKY", 2).await;
    let x = remember(&host, FAMILY, "grandma likes orchids").await["memory"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let job = submit(
        &host,
        json!({"conversation_id": FAMILY, "useful_memory_ids": [x],
               "new_memories": [{"content": "FLAKY grandma also likes roses"}]}),
    )
    .await;
    let o = wait(&host, &job).await;
    assert!(o.error.is_none(), "{o:?}");
    assert_eq!(o.attempts, 3, "two failures, then success");
    assert_eq!(
        strength(&host, &x).await,
        53,
        "reinforced once, not per attempt"
    );
    assert_eq!(rows(&host).await, 2);
    assert_eq!(host.memory().feedback().retries(), 2);
    host.shutdown().await;
}

#[tokio::test]
async fn a_job_that_always_fails_is_dead_lettered_and_never_applied() {
    let dir = tempfile::tempdir().unwrap();
    let (x, poisoned, later);
    {
        let host = flaky_host(dir.path(), "POISON", usize::MAX).await;
        x = remember(&host, FAMILY, "the family dog is called Bao").await["memory"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        poisoned = submit(
            &host,
            json!({"conversation_id": FAMILY, "useful_memory_ids": [x],
                   "new_memories": [{"content": "POISON this never embeds"}]}),
        )
        .await;
        later = submit(
            &host,
            json!({"conversation_id": FAMILY, "useful_memory_ids": [x]}),
        )
        .await;
        let o = wait(&host, &poisoned).await;
        assert_eq!(o.attempts, 3, "{o:?}");
        assert!(
            o.error.as_deref().unwrap_or("").contains("injected"),
            "{o:?}"
        );
        let o = wait(&host, &later).await;
        assert!(o.error.is_none(), "{o:?}");
        assert_eq!(
            strength(&host, &x).await,
            53,
            "only the later job reinforced"
        );

        let status = host.invoke("status", Value::Null).await.unwrap();
        let dead = status["feedback_dead_letters"].as_array().unwrap();
        assert_eq!(dead.len(), 1, "{status}");
        assert_eq!(dead[0]["job_id"], poisoned.as_str());
        assert_eq!(dead[0]["state"], "failed");
        assert_eq!(dead[0]["attempts"], 3);
        let s = host
            .invoke("feedback_status", json!({"job_id": poisoned}))
            .await
            .unwrap();
        assert_eq!(s["state"], "failed", "{s}");
        host.shutdown().await;
    }
    // A restart with a model that works: the dead letter is not replayed, and both jobs'
    // status is still answerable.
    let host = host(retry_config(dir.path(), 3)).await;
    host.start_background();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(host.memory().feedback().depth(), 0);
    assert_eq!(rows(&host).await, 1, "the poisoned memory never lands");
    assert_eq!(strength(&host, &x).await, 53);
    for (job, state) in [(&poisoned, "failed"), (&later, "done")] {
        let s = host
            .invoke("feedback_status", json!({"job_id": job}))
            .await
            .unwrap();
        assert_eq!(s["state"], state, "{s}");
    }
    host.shutdown().await;
}

#[tokio::test]
async fn an_old_plan_replayed_late_never_overwrites_a_newer_job() {
    use scopemem::memory::feedback::{FeedbackJob, FeedbackPlan};
    use scopemem::memory::journal::{Journal, Pending, PendingJob};
    let dir = tempfile::tempdir().unwrap();
    let x;
    {
        let host = host(retry_config(dir.path(), 3)).await;
        x = remember(&host, FAMILY, "the family car is blue").await["memory"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        // A newer job already took the strength from 50 to 60.
        host.memory()
            .store()
            .writer()
            .update(
                format!("id = '{x}'"),
                vec![("strength".into(), "60".into())],
            )
            .await
            .unwrap();
        host.shutdown().await;
    }
    // A dead instance left an old job planned at strength 50 -> 53 in its journal.
    let job = FeedbackJob {
        job_id: "old-job".into(),
        conversation_id: scopemem::scope::ConversationId::parse(FAMILY).unwrap(),
        scope: scopemem::scope::ScopeName::parse("家人").unwrap(),
        scope_source: scopemem::scope::ScopeSource::Conversation,
        accepted_at: chrono::Utc::now() - chrono::TimeDelta::minutes(5),
        useful_memory_ids: vec![x.clone()],
        new_memories: vec![],
        merge_groups: vec![],
    };
    let mut plan = FeedbackPlan {
        reinforce: vec![(x.clone(), 53)],
        ..FeedbackPlan::default()
    };
    plan.expected_strength.insert(x.clone(), 50);
    let db = dir.path().join("lancedb");
    Journal::create(
        &db.join("memories.feedback.deadbeef.journal"),
        &Pending {
            jobs: vec![PendingJob {
                job: scopemem::memory::intake::Job::Reflection(job),
                plan: Some(plan),
                attempts: 0,
            }],
            ..Pending::default()
        },
    )
    .unwrap();
    std::fs::write(db.join("memories.feedback.deadbeef.lock"), "4242").unwrap();

    let host = host(retry_config(dir.path(), 3)).await;
    host.start_background();
    let o = wait(&host, "old-job").await;
    assert!(o.error.is_none(), "{o:?}");
    assert_eq!(o.reinforced, 0, "{o:?}");
    assert_eq!(strength(&host, &x).await, 60, "the newer value stays");
    host.shutdown().await;
}
