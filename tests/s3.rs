//! scopemem on a real S3 API (`moto_server` on loopback): one instance keeps the whole public
//! contract with its table in a bucket; three `serve` processes share one bucket without losing,
//! doubling or leaking a row; the bucket lease passes to another instance when its holder is
//! killed, and that instance finishes the backfill.

use crate::common;

use std::time::{Duration, Instant};

use common::moto::Moto;
use common::serve::*;
use common::*;
use scopemem::config::Config;
use scopemem::store::beside::Beside;
use scopemem::store::lease::Lease;
use serde_json::{json, Value};

fn s3_config(moto: &Moto, uri: &str, state: &std::path::Path, extra: Value) -> Config {
    let user = merged(
        json!({
            "conversation_scope_map": family_map(),
            "storage": {"db_dir": uri, "options": moto.options(), "state_dir": state,
                        "keep_versions_minutes": 0},
            "recall": {"similarity_threshold": -1.0, "similarity_cut": "fixed", "relevance_gate": false},
        }),
        &extra,
    );
    Config::from_value(&user).unwrap().config
}

const SECRET: &str = "okapizebraquokka";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_keeps_the_public_contract_in_a_bucket() {
    let moto = Moto::start().await;
    let uri = moto.bucket("contract", "team/memories").await;
    let state = tempfile::tempdir().unwrap();
    let host = host(s3_config(&moto, &uri, state.path(), json!({}))).await;
    host.start_background();
    assert!(
        eventually(Duration::from_secs(60), || host.memory().is_maintainer()).await,
        "a lone instance takes the bucket lease"
    );

    let a = remember(
        &host,
        FAMILY,
        &format!("Grandma's recipe uses {SECRET} paste"),
    )
    .await;
    let a_id = a["memory"]["id"].as_str().unwrap().to_string();
    remember(&host, WORK, "the quarterly report is due on friday").await;
    remember(&host, PRIVATE, "the library opens at nine").await;

    // Recall: each chat sees its own scope and public, nothing else.
    let (scope, hits) = recall(&host, FAMILY, "recipe paste").await;
    assert_eq!(scope, "家人");
    assert!(hits.iter().any(|(_, c)| c.contains(SECRET)), "{hits:?}");
    assert!(hits
        .iter()
        .all(|(s, _)| matches!(s.as_deref(), Some("家人" | "public"))));
    let (_, hits) = recall(&host, WORK, "recipe paste").await;
    assert!(hits.iter().all(|(_, c)| !c.contains(SECRET)), "{hits:?}");
    assert!(
        hits.iter().any(|(_, c)| c.contains("library")),
        "public is visible"
    );

    // Feedback: a reflection and a reinforcement, applied through the journal.
    for body in [
        json!({"conversation_id": FAMILY,
               "new_memories": [{"content": "Grandpa keeps the orchids in the shed"}]}),
        json!({"conversation_id": FAMILY, "useful_memory_ids": [a_id]}),
    ] {
        feedback_and_wait(&host, body).await;
    }
    let (_, hits) = recall(&host, FAMILY, "orchids in the shed").await;
    assert!(hits.iter().any(|(_, c)| c.contains("orchids")), "{hits:?}");
    assert_eq!(rows(&host).await, 4);
    assert!(
        !moto.objects_containing("contract", SECRET).await.is_empty(),
        "the bucket holds the text before the erase"
    );

    // Forget with erase: no object in the bucket holds the text afterwards.
    let r = host
        .invoke("forget", json!({"conversation_id": FAMILY}))
        .await
        .unwrap();
    assert_eq!(r["deleted"], 2, "{r}");
    assert_eq!(
        moto.objects_containing("contract", SECRET).await,
        Vec::<String>::new(),
        "no data, index or version object may hold an erased memory"
    );
    assert_eq!(rows(&host).await, 2);
    let status = host.invoke("status", Value::Null).await.unwrap();
    assert_eq!(status["maintenance"]["this_process"], true, "{status}");
    assert!(
        status["maintenance"]["holder"]["expires_at"].is_string(),
        "{status}"
    );
    assert_eq!(
        status["scope_map"]["content_hash"].as_str().unwrap().len(),
        64
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_table_in_a_bucket_is_migrated_and_backfilled() {
    let moto = Moto::start().await;
    let uri = moto.bucket("legacy", "old").await;
    make_legacy_table_in(
        &moto.location(&uri),
        &legacy_rows(60, "tennis"),
        false,
        false,
    )
    .await;
    let state = tempfile::tempdir().unwrap();
    let config = s3_config(
        &moto,
        &uri,
        state.path(),
        json!({"migration_mode": "auto", "backfill": {"batch_size": 25, "pause_ms": 0}}),
    );
    let host = host(config).await;
    assert!(host.memory().migration_active(), "legacy rows stay visible");
    let (_, hits) = recall(&host, FAMILY, "tennis note").await;
    assert_eq!(
        hits.len(),
        60,
        "every legacy row is visible during the migration"
    );
    host.start_background();
    assert!(wait_backfill_done(&host, Duration::from_secs(120)).await);
    assert!(!host.memory().migration_active());
    let all = all_rows(&host).await;
    assert_eq!(all.len(), 60);
    assert!(all
        .iter()
        .all(|r| r.memory_scope.as_deref() == Some("public")));
    // The checkpoint is in the bucket beside the table, where the next lease holder reads it.
    let keys: Vec<String> = moto
        .objects("legacy")
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert!(
        keys.contains(&"old/memories.backfill.json".to_string()),
        "{keys:?}"
    );
    host.shutdown().await;
}

/// The lease itself, two instances on one bucket: one holder at a time, takeover only after
/// the TTL, a holder that was taken over from learns it at its next renewal, and a release
/// hands the lease over at once. The TTL is long enough that no step here, against moto on a
/// loaded machine, outlasts it (with 3 s, a slow request let the lease lapse between two steps).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bucket_lease_has_one_holder_and_passes_on_when_it_lapses() {
    let moto = Moto::start().await;
    let uri = moto.bucket("lease", "t").await;
    let beside = Beside::open(&moto.location(&uri)).await.unwrap();
    let ttl = Duration::from_secs(15);
    let a = Lease::new(&beside, "memories", "a", Default::default(), ttl);
    let b = Lease::new(&beside, "memories", "b", Default::default(), ttl);
    assert!(a.try_acquire().await.unwrap());
    assert!(!b.try_acquire().await.unwrap(), "held by a");
    let holder = scopemem::store::lease::current_holder(&beside, "memories").await;
    assert_eq!(holder.unwrap().instance, "a");
    // a renews once, then stops (its process hangs): b and c may take over only once the TTL
    // has passed since that renewal, and when both try at once, exactly one wins (If-Match on
    // the lapsed record).
    let stopped = Instant::now();
    assert!(a.renew().await.unwrap());
    let c = Lease::new(&beside, "memories", "c", Default::default(), ttl);
    let winner = loop {
        let (got_b, got_c) = tokio::join!(b.try_acquire(), c.try_acquire());
        match (got_b.unwrap(), got_c.unwrap()) {
            (false, false) => {}
            (true, false) => break "b",
            (false, true) => break "c",
            (true, true) => panic!("two instances took one lease"),
        }
        assert!(
            stopped.elapsed() < ttl + Duration::from_secs(120),
            "nobody took over"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Less a margin for the wall clock the record holds against this monotonic one.
    assert!(
        stopped.elapsed() >= ttl - Duration::from_millis(500),
        "taken before the TTL"
    );
    assert!(!a.renew().await.unwrap(), "a learns it lost the lease");
    assert!(!a.is_held());
    let (b, c) = if winner == "b" { (b, c) } else { (c, b) };
    assert!(b.is_held() && !c.is_held());
    assert!(b.renew().await.unwrap());
    assert!(!c.try_acquire().await.unwrap(), "renewed: still b's");
    b.release().await;
    assert!(!b.is_held());
    // Released, the record is marked lapsed (b's renewal would have run 15 s more), so the
    // next instance takes it without waiting.
    let holder = scopemem::store::lease::current_holder(&beside, "memories").await;
    assert!(holder.is_none(), "released: no holder ({holder:?})");
    assert!(
        a.try_acquire().await.unwrap(),
        "a released lease is free at once"
    );
}

fn instance_config(
    moto: &Moto,
    uri: &str,
    dir: &std::path::Path,
    name: &str,
    extra: Value,
) -> Value {
    merged(
        json!({"storage": {"db_dir": uri, "options": moto.options(),
                           "state_dir": dir.join(format!("{name}-state")),
                           "lease_ttl_secs": 3}}),
        &extra,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_share_one_bucket_without_losing_doubling_or_leaking() {
    let moto = Moto::start().await;
    let uri = moto.bucket("shared", "memories").await;
    let dir = tempfile::tempdir().unwrap();
    let mut instances = Vec::new();
    for name in ["a", "b", "c"] {
        let cfg = instance_config(&moto, &uri, dir.path(), name, json!({}));
        instances.push(spawn_serve(dir.path(), name, cfg).await);
    }
    let client = reqwest::Client::new();
    let hashes: Vec<Value> =
        futures::future::join_all(instances.iter().map(|s| status(&client, s)))
            .await
            .iter()
            .map(|s| s["scope_map"]["content_hash"].clone())
            .collect();
    assert!(
        hashes.iter().all(|h| h == &hashes[0] && h.is_string()),
        "{hashes:?}"
    );

    // Concurrent remembers: 8 per instance, all at once, across three scopes.
    let conversations = [(FAMILY, "家人"), (WORK, "工作"), (PRIVATE, "public")];
    let mut writes = Vec::new();
    for (i, s) in instances.iter().enumerate() {
        for j in 0..8 {
            let (conversation, scope) = conversations[(i + j) % 3];
            let content = format!("shared bucket note {i}-{j} about the harbour");
            writes.push((s, conversation, scope, content));
        }
    }
    let results = futures::future::join_all(writes.iter().map(|(s, conversation, _, content)| {
        post(
            &client,
            s,
            "/v1/remember",
            json!({"conversation_id": conversation, "content": content}),
        )
    }))
    .await;
    for (status, r) in &results {
        assert_eq!(*status, 200, "{r}");
    }

    // Each instance sees every write (within the read-consistency interval), each exactly once,
    // and each chat only its own scope and public.
    let deadline = Instant::now() + Duration::from_secs(30);
    for s in &instances {
        for (conversation, own) in conversations {
            loop {
                let hits = recalled(&client, s, conversation, "shared bucket note harbour").await;
                for m in &hits {
                    let scope = m["memory_scope"].as_str().unwrap_or("");
                    assert!(scope == own || scope == "public", "{conversation} saw {m}");
                }
                let expected: Vec<&String> = writes
                    .iter()
                    .filter(|(_, _, scope, _)| *scope == own || *scope == "public")
                    .map(|(_, _, _, c)| c)
                    .collect();
                let complete = expected
                    .iter()
                    .all(|c| hits.iter().filter(|m| m["content"] == c.as_str()).count() == 1);
                if complete && hits.len() == expected.len() {
                    break;
                }
                if Instant::now() >= deadline {
                    // Say which rows: missing (a lost write or a stale read), doubled (a
                    // commit retried after it had landed) or unexpected.
                    let count = |c: &str| hits.iter().filter(|m| m["content"] == c).count();
                    let missing: Vec<&&String> =
                        expected.iter().filter(|c| count(c) == 0).collect();
                    let doubled: Vec<&&String> = expected.iter().filter(|c| count(c) > 1).collect();
                    let unexpected: Vec<&Value> = hits
                        .iter()
                        .filter(|m| !expected.iter().any(|c| m["content"] == c.as_str()))
                        .collect();
                    let state = status(&client, s).await;
                    panic!(
                        "{}: {} of {} expected rows visible in {conversation} after 30 s; \
                         missing {missing:?}, doubled {doubled:?}, unexpected {unexpected:?}; \
                         rows {} by scope {}",
                        s.base,
                        hits.len(),
                        expected.len(),
                        state["rows"],
                        state["rows_by_scope"]
                    );
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    // Visibility delay, one instance writing and another reading, in turn.
    let mut delays = Vec::new();
    for i in 0..6 {
        let (writer, reader) = (&instances[i % 3], &instances[(i + 1) % 3]);
        let content = format!("fresh note {i} about the lighthouse");
        let (status, r) = post(
            &client,
            writer,
            "/v1/remember",
            json!({"conversation_id": FAMILY, "content": content}),
        )
        .await;
        assert_eq!(status, 200, "{r}");
        let written = Instant::now();
        while !recalled(&client, reader, FAMILY, &content)
            .await
            .iter()
            .any(|m| m["content"] == content.as_str())
        {
            assert!(
                written.elapsed() < Duration::from_secs(5),
                "note {i} never became visible"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        delays.push(written.elapsed());
    }
    delays.sort();
    println!(
        "RESULT s3 cross-instance visibility over {} writes: p50 {:?}, max {:?} (read_consistency_ms 500)",
        delays.len(),
        delays[delays.len() / 2],
        delays[delays.len() - 1]
    );
    // One lease holder among the three.
    let mut holders = 0;
    for s in &instances {
        if status(&client, s).await["maintenance"]["this_process"] == true {
            holders += 1;
        }
    }
    assert_eq!(holders, 1, "exactly one instance maintains the table");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = status(&client, &instances[2]).await;
        if st["rows"] == 30 {
            break;
        }
        assert!(Instant::now() < deadline, "no row lost or doubled: {st}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Feedback accepted by one instance, its conversation forgotten through another: the
    // erase notice in the bucket reaches the first, whose journal (in its own state_dir) then
    // drops the text. Once applied and once still queued.
    for (round, wait_applied) in [(0, true), (1, false)] {
        let conversation = format!("default:GroupMessage:7700{round}");
        let text = format!("zq-s3fb-{round} the pelican owes us three sandwiches");
        let (status, r) = post(
            &client,
            &instances[0],
            "/v1/feedback",
            json!({"conversation_id": conversation, "new_memories": [{"content": text}]}),
        )
        .await;
        assert_eq!(status, 202, "{r}");
        if wait_applied {
            let url = format!(
                "{}/v1/feedback/{}",
                instances[0].base,
                r["job_id"].as_str().unwrap()
            );
            let applied = Instant::now();
            while client
                .get(&url)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()["state"]
                != "done"
            {
                assert!(
                    applied.elapsed() < Duration::from_secs(10),
                    "job never applied"
                );
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
        let (status, r) = post(
            &client,
            &instances[1],
            "/v1/forget",
            json!({"conversation_id": conversation}),
        )
        .await;
        assert_eq!(status, 200, "{r}");
        let forgot = Instant::now();
        loop {
            let objects = moto.objects_containing("shared", &text[..9]).await;
            let files = files_containing(dir.path(), &text[..9]);
            if objects.is_empty() && files.is_empty() {
                break;
            }
            assert!(
                forgot.elapsed() < Duration::from_secs(10),
                "erased feedback text still in objects {objects:?} and files {files:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        println!(
            "RESULT s3 feedback here, forget there ({}): no copy {:?} after the forget",
            if wait_applied { "applied" } else { "queued" },
            forgot.elapsed()
        );
        // A recall reads other instances' commits at most read_consistency_ms late.
        for s in &instances {
            loop {
                let hits = recalled(&client, s, &conversation, &text).await;
                if hits.iter().all(|m| m["content"] != text.as_str()) {
                    break;
                }
                assert!(
                    forgot.elapsed() < Duration::from_secs(5),
                    "{} still recalls the erased feedback memory",
                    s.base
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_instance_takes_the_lease_and_finishes_a_killed_holders_backfill() {
    let moto = Moto::start().await;
    let uri = moto.bucket("takeover", "memories").await;
    make_legacy_table_in(
        &moto.location(&uri),
        &legacy_rows(400, "sailing"),
        false,
        false,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let slow = json!({"migration_mode": "auto",
                      "backfill": {"batch_size": 20, "pause_ms": 300, "pacing": "fixed"}});
    let cfg = |name: &str| instance_config(&moto, &uri, dir.path(), name, slow.clone());
    let client = reqwest::Client::new();
    let mut a = spawn_serve(dir.path(), "a", cfg("a")).await;
    // a holds the lease and is part-way through the backfill.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = status(&client, &a).await;
        let filled = st["migration"]["filled"].as_u64().unwrap_or(0);
        if st["maintenance"]["this_process"] == true && filled >= 40 {
            assert_ne!(st["migration"]["state"], "done", "{st}");
            break;
        }
        assert!(Instant::now() < deadline, "a never got going: {st}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let b = spawn_serve(dir.path(), "b", cfg("b")).await;
    let sb = status(&client, &b).await;
    assert_eq!(sb["maintenance"]["this_process"], false, "{sb}");
    assert_eq!(sb["maintenance"]["holder"]["pid"], a.child.id(), "{sb}");
    assert_eq!(
        sb["migration"]["active"], true,
        "b keeps legacy rows visible"
    );
    a.kill9();
    let killed = Instant::now();

    let deadline = Instant::now() + Duration::from_secs(120);
    let mut took_over = None;
    loop {
        let st = status(&client, &b).await;
        if took_over.is_none() && st["maintenance"]["this_process"] == true {
            took_over = Some(killed.elapsed());
        }
        if st["migration"]["state"] == "done" {
            assert_eq!(st["migration"]["active"], false, "{st}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "b did not finish the backfill: {st}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let took_over = took_over.expect("b took the lease");
    println!("RESULT s3 lease takeover after kill -9: {took_over:?} (lease_ttl_secs 3)");
    // Every legacy row filled exactly once (counts are reconciled from the table).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = status(&client, &b).await;
        if st["rows_by_scope"]["public"] == 400 {
            assert_eq!(st["rows"], 400, "{st}");
            assert_eq!(st["null_scope_rows"], 0, "{st}");
            break;
        }
        assert!(Instant::now() < deadline, "{st}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let hits = recalled(&client, &b, WORK, "sailing note").await;
    assert_eq!(hits.len(), 100, "legacy rows are public now");
}

/// A wrong bucket or endpoint fails at start-up with the reason first, not Lance's nested
/// retry report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_bucket_or_unreachable_endpoint_is_named_at_start_up() {
    let moto = Moto::start().await;
    let state = tempfile::tempdir().unwrap();
    let config = s3_config(&moto, "s3://no-such-bucket/x", state.path(), json!({}));
    let e = scopemem::host::PluginHost::start_with(config, None, embedder())
        .await
        .err()
        .expect("a missing bucket is an error")
        .to_string();
    assert!(
        e.starts_with("s3://no-such-bucket/x: the bucket does not exist"),
        "{e}"
    );
    let mut options = moto.options();
    options["aws_endpoint"] = json!(format!("http://127.0.0.1:{}", free_port()));
    let config = s3_config(
        &moto,
        "s3://b/x",
        state.path(),
        json!({"storage": {"options": options}}),
    );
    let e = scopemem::host::PluginHost::start_with(config, None, embedder())
        .await
        .err()
        .expect("an unreachable endpoint is an error")
        .to_string();
    assert!(
        e.contains("s3://b/x: the endpoint cannot be reached"),
        "{e}"
    );
}
