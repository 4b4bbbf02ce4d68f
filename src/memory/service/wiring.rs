//! How a [`MemoryService`] is put together and kept running: `open` wires the store, the
//! embedder's calibration, the backfill, the re-embed, the feedback queue and the resident
//! copy; `start_background` starts what must not delay start-up; the maintenance loop waits
//! for the lease and runs what only the lease holder runs. The operations themselves
//! (remember, recall, forget, ...) are in `service.rs`.

use super::*;

/// Messages to the bot waiting for the prefetch task (`service::prefetch`); more are skipped,
/// and their recalls embed their texts as before.
const PREFETCHES_WAITING: usize = 64;

impl MemoryService {
    /// Open the store for this embedder and wire everything up.
    pub(crate) async fn open(
        config: &Config,
        embedder: Arc<dyn Embedder>,
        scopes: Arc<ScopeResolver>,
    ) -> Result<MemoryService, MemoryError> {
        let model = embedder.model_info();
        crate::store::cache::configure(crate::store::cache::CacheLimits {
            index_bytes: config.storage.index_cache_mb << 20,
            metadata_bytes: config.storage.metadata_cache_mb << 20,
        });
        let (store, outcome) = crate::migrate::reembed::open_store(
            &config.storage.db_dir,
            &config.storage.table_name,
            &model,
            writer_settings(config),
            config.storage.read_consistency(),
            config.migration.reembed == crate::config::ReembedMode::Auto,
        )
        .await?;
        let search = open_search(config, &store).await?;
        let latency = Arc::new(crate::migrate::ForegroundLatency::default());
        // How often this process reads what the others did (the backfill checkpoint, erase
        // notices): as stale as a read may be, and no busier than ten times a second.
        let follow_others = config
            .storage
            .read_consistency()
            .max(std::time::Duration::from_millis(100));
        let backfill = prepare_backfill(
            config,
            &store,
            &latency,
            follow_others,
            outcome.backfill_needed,
        )
        .await?;
        let reembed = crate::migrate::reembed::ReembedHandle::open(
            store.clone(),
            embedder.clone(),
            crate::migrate::reembed::ReembedSettings::from_config(config, &latency),
        )
        .await
        .map_err(|e| MemoryError::Internal(e.to_string()))?;
        if config.scope_filter == ScopeFilterMode::Disabled {
            tracing::warn!(
                "scope_filter = disabled: recall ignores scopes (emergency rollback mode)"
            );
        }
        let reembed = Arc::new(reembed);
        let vectors = Arc::new(resident_search(config, &store, &search));
        let repetitions =
            crate::memory::door::Repetitions::new(store.clone(), vectors.clone(), reembed.clone());
        let feedback = open_feedback(
            config,
            &store,
            &embedder,
            &scopes,
            &backfill,
            repetitions.clone(),
        )?;
        let lease = take_lease(config, &store, &feedback).await;
        let zone = match config.recall.timezone.trim() {
            "" => crate::memory::recall::time_words::machine_zone(),
            z => crate::memory::recall::time_words::parse_zone(z)
                .unwrap_or_else(|_| crate::memory::recall::time_words::machine_zone()),
        };
        let consolidator =
            crate::memory::consolidation::Consolidator::from_config(&config.consolidation, zone)
                .map_err(|e| MemoryError::Internal(e.to_string()))?;
        let calibration = Arc::new(std::sync::OnceLock::new());
        measure_model(embedder.clone(), calibration.clone(), CALIBRATION_WAIT).await;
        let backfill = Arc::new(backfill);
        let erase_generation = crate::memory::erase_generation::EraseGeneration::open(
            store.beside(),
            &config.storage.table_name,
        );
        let erase_notices = crate::memory::erase_notices::EraseNotices::new(
            store.beside().clone(),
            &config.storage.table_name,
            feedback.instance(),
        );
        let forgotten = crate::memory::door::Forgotten::new(
            store.beside().clone(),
            &config.storage.table_name,
            feedback.instance(),
        );
        // The names the members went by, from the rows (`memory::speakers`): a rename before
        // a restart still joins the two names.
        let speakers = crate::memory::speakers::SpeakerNames::default();
        match store.speakers().await {
            Ok(rows) => speakers.learn_rows(rows),
            Err(e) => {
                tracing::warn!(error = %e, "could not read the speakers' names from the table; they are learned from new messages")
            }
        }
        // From the moment the service opens: a process that never runs the backfill still
        // closes its gate when another one finishes it.
        tokio::spawn(BackfillHandle::follow_checkpoint(Arc::downgrade(&backfill)));
        Ok(MemoryService {
            lease,
            vectors,
            queries: Default::default(),
            store,
            search,
            embedder,
            scopes,
            settings: service_settings(config, follow_others),
            backfill,
            reembed,
            repetitions,
            forgotten,
            refusals: Default::default(),
            latency,
            erase_notices,
            erase_generation,
            feedback,
            touches: std::sync::OnceLock::new(),
            degraded_recalls: AtomicU64::new(0),
            calibration,
            speakers,
            working: crate::memory::working::WorkingMemory::new(chrono::Duration::minutes(
                i64::from(config.working_memory.reply_context_minutes),
            )),
            foresight: Default::default(),
            prefetches: crate::memory::working::Handoff::with_capacity(PREFETCHES_WAITING),
            consolidator,
        })
    }

    /// Work that must not delay start-up: scalar indexes and the legacy backfill. Call once
    /// the service is serving.
    pub(crate) fn start_background(self: &Arc<Self>) {
        tokio::spawn(erase::keep_following_erasures(
            Arc::downgrade(self),
            self.settings.follow_erasures,
        ));
        if let Some(returned) = self.working.returned_again.take_receiver() {
            tokio::spawn(working::consolidate_returned_again(
                Arc::downgrade(self),
                returned,
            ));
        }
        if let Some(asked) = self.prefetches.take_receiver() {
            tokio::spawn(super::prefetch::prefetch_queries(
                Arc::downgrade(self),
                asked,
            ));
        }
        if let Some(stored) = self.feedback.stored_messages().take_receiver() {
            tokio::spawn(working::follow_stored_messages(
                Arc::downgrade(self),
                stored,
            ));
        }
        self.feedback.start();
        self.store.start_pruner(self.settings.keep_versions);
        tokio::spawn(sweeper::run_sweeper(
            Arc::downgrade(self),
            self.settings.retention.sweep_interval,
        ));
        if self.consolidator.client.is_some() {
            tokio::spawn(super::consolidation::run_consolidation(Arc::downgrade(
                self,
            )));
        }
        if self.records_recalls() {
            let _ = self
                .touches
                .set(crate::memory::recall::touch::RecallTouches::spawn(
                    self.store.clone(),
                    self.settings.retention.clone(),
                    self.stamps_recalls(),
                ));
        }
        self.reembed.start(self.search.clone());
        tokio::spawn(keep_maintaining(
            self.lease.downgrade(),
            self.store.beside().clone(),
            self.store.clone(),
            Arc::downgrade(&self.backfill),
            self.search.clone(),
            self.settings.index_check,
        ));
    }
}

/// The store writer's settings from `storage.*` (batch cap, linger, maintenance, durability).
fn writer_settings(config: &Config) -> WriterSettings {
    WriterSettings {
        max_batch_rows: config.storage.write_batch_max.max(1),
        commit_linger: std::time::Duration::from_millis(config.storage.commit_linger_ms),
        maintenance_interval: config
            .storage
            .compaction_interval()
            .max(std::time::Duration::from_secs(1)),
        durability: match config.storage.durability {
            crate::config::DurabilityMode::Process => crate::store::durability::Durability::Process,
            crate::config::DurabilityMode::Power => crate::store::durability::Durability::Power,
        },
        ..WriterSettings::default()
    }
}

/// The LanceDB vector search over the store's table, told whether this process maintains it.
async fn open_search(config: &Config, store: &Store) -> Result<Arc<LanceSearch>, MemoryError> {
    Ok(Arc::new(
        LanceSearch::new(
            store.table().clone(),
            config.storage.index_threshold_rows,
            4,
        )
        .await?
        .with_maintainer(store.maintainer().clone()),
    ))
}

/// The legacy-row backfill, paced as `backfill.*` says, checkpointed beside the table.
async fn prepare_backfill(
    config: &Config,
    store: &Store,
    latency: &Arc<crate::migrate::ForegroundLatency>,
    follow_others: std::time::Duration,
    backfill_needed: bool,
) -> Result<BackfillHandle, MemoryError> {
    BackfillHandle::prepare(
        store.clone(),
        BackfillSettings {
            batch_size: config.backfill.batch_size.max(1),
            pacing: match config.backfill.pacing {
                crate::config::BackfillPacing::Fixed => {
                    crate::migrate::Pacing::Fixed(config.backfill.pause())
                }
                crate::config::BackfillPacing::Adaptive => {
                    crate::migrate::Pacing::Adaptive(latency.clone())
                }
            },
            mode: config.migration_mode,
            checkpoint: checkpoint::CheckpointFile::new(
                store.beside().clone(),
                &config.storage.table_name,
            ),
            follow_every: follow_others,
        },
        backfill_needed,
    )
    .await
    .map_err(|e| MemoryError::Internal(e.to_string()))
}

/// The durable feedback queue (`feedback.*`), its jobs gated like recall by the backfill.
fn open_feedback(
    config: &Config,
    store: &Store,
    embedder: &Arc<dyn Embedder>,
    scopes: &Arc<ScopeResolver>,
    backfill: &BackfillHandle,
    repetitions: crate::memory::door::Repetitions,
) -> Result<crate::memory::intake::FeedbackQueue, MemoryError> {
    crate::memory::intake::FeedbackQueue::open(
        &config.storage.state_dir(),
        &config.storage.table_name,
        crate::memory::intake::QueueSettings {
            capacity: config.feedback.queue_capacity,
            retry: crate::memory::intake::RetryPolicy {
                max_attempts: config.feedback.max_attempts,
                base: std::time::Duration::from_millis(config.feedback.retry_backoff_ms),
                cap: std::time::Duration::from_secs(30),
            },
            retention: crate::memory::retention::Retention::from_config(&config.retention),
            message_capacity: config.working_memory.queue_capacity,
        },
        crate::memory::feedback::Writes {
            store: store.clone(),
            embedder: embedder.clone(),
            gate: backfill.gate().clone(),
            repetitions,
        },
        scopes.clone(),
    )
}

/// The maintenance lease for this process, tried once now (a failure is retried later).
async fn take_lease(
    config: &Config,
    store: &Store,
    feedback: &crate::memory::intake::FeedbackQueue,
) -> Lease {
    let lease = Lease::new(
        store.beside(),
        &config.storage.table_name,
        feedback.instance(),
        store.maintainer().clone(),
        config.storage.lease_ttl(),
    );
    if let Err(e) = lease.try_acquire().await {
        tracing::warn!(error = %e, "could not try the maintenance lease; will retry");
    }
    lease
}

/// The vector search recalls use, over the resident copy capped at `recall.resident_max_rows`.
fn resident_search(
    config: &Config,
    store: &Store,
    search: &Arc<LanceSearch>,
) -> crate::store::resident::ResidentSearch {
    store.resident().limit_rows(config.recall.resident_max_rows);
    crate::store::resident::ResidentSearch::new(
        store.table().clone(),
        store.resident().clone(),
        search.clone(),
        std::sync::Arc::new(crate::store::FulltextSearch::new(store.table().clone())),
    )
}

/// The service's settings: recall, scope filter, versions kept, index checks, retention.
fn service_settings(config: &Config, follow_others: std::time::Duration) -> ServiceSettings {
    ServiceSettings {
        recall: config.recall.clone(),
        scope_filter: config.scope_filter,
        migration_mode: config.migration_mode,
        keep_versions: VersionLimits {
            max_age: config.storage.keep_versions(),
            max_count: config.storage.keep_versions_max,
            max_old_bytes_factor: config.storage.keep_bytes_factor,
            reader_grace: VersionLimits::grace_for(config.storage.read_consistency()),
        },
        index_check: config
            .storage
            .compaction_interval()
            .max(std::time::Duration::from_secs(1)),
        retention: crate::memory::retention::Retention::from_config(&config.retention),
        follow_erasures: follow_others,
        working: crate::memory::working::WorkingSettings::from_config(&config.working_memory),
    }
}

/// How often a process without the maintenance lease tries to take it.
const LEASE_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

/// The maintenance loop of one service: wait for the lease, start the maintenance, keep the
/// lease renewed and the vector index checked, and go back to waiting if the lease is lost. It
/// holds the lease and the backfill weakly: it ends when the service is shut down or dropped.
async fn keep_maintaining(
    lease: lease::WeakLease,
    beside: Beside,
    store: Store,
    backfill: std::sync::Weak<BackfillHandle>,
    search: Arc<LanceSearch>,
    index_check: Duration,
) {
    let table = store.table().name().to_owned();
    loop {
        // Maintenance runs in the one instance holding the lease; the others take over when it
        // dies (the OS releases a local lock; a bucket lease lapses unrenewed).
        let mut announced = false;
        loop {
            let Some(l) = lease.upgrade().filter(|_| !store.writer().is_stopped()) else {
                return;
            };
            match l.try_acquire().await {
                Ok(true) => break,
                Ok(false) if !announced => {
                    announced = true;
                    let holder = lease::current_holder(&beside, &table).await;
                    tracing::info!(
                        holder = ?holder,
                        "another instance holds the maintenance lease; this one only serves"
                    );
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "could not try the maintenance lease"),
            }
            drop(l);
            tokio::time::sleep(LEASE_RETRY).await;
        }
        let Some(bf) = backfill.upgrade() else { return };
        start_maintenance(&store, &bf, &search).await;
        drop(bf);
        let (mut waited, mut since_renewal) = (Duration::ZERO, Duration::ZERO);
        loop {
            tokio::time::sleep(INDEX_CHECK_STEP).await;
            let Some(l) = lease.upgrade().filter(|_| !store.writer().is_stopped()) else {
                return;
            };
            since_renewal += INDEX_CHECK_STEP;
            if since_renewal >= l.renew_every() {
                since_renewal = Duration::ZERO;
                match l.renew().await {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => tracing::warn!(error = %e, "could not renew the maintenance lease"),
                }
            }
            waited += INDEX_CHECK_STEP;
            if waited < index_check {
                continue;
            }
            waited = Duration::ZERO;
            if let Err(e) = search.maybe_build_index().await {
                tracing::warn!(error = %e, "could not check whether a vector index is due");
            }
        }
    }
}

/// What the lease holder starts: scalar indexes, the legacy backfill, the vector index of a
/// large table opened from elsewhere (the writer's compaction and the pruner follow the flag).
async fn start_maintenance(store: &Store, backfill: &Arc<BackfillHandle>, search: &LanceSearch) {
    if let Err(e) = store.ensure_indexes().await {
        tracing::error!(error = %e, "could not build scalar indexes; recall still works, unindexed");
    }
    backfill.start();
    if let Err(e) = search.maybe_build_index().await {
        tracing::warn!(error = %e, "could not check whether a vector index is due");
    }
}

/// How long start-up waits to measure the embedder before serving with it unmeasured.
const CALIBRATION_WAIT: Duration = Duration::from_secs(10);
/// How long after a failed measurement (the provider did not answer) it is tried again.
const CALIBRATION_RETRY: Duration = Duration::from_secs(30);

/// Measure the embedder (see `embed::calibration`) before serving. Start-up waits up to
/// `wait` ([`CALIBRATION_WAIT`]) for it; a measurement still running then goes on in the background
/// and is never cut short (each provider call has its own timeout), and one that failed is
/// tried again every [`CALIBRATION_RETRY`]. A measurement cut at the wait and started over
/// never finished on a machine where it takes longer: on a loaded 2-core machine the debug
/// build's took more than 10 s, and the model stayed uncalibrated for good.
async fn measure_model(
    embedder: Arc<dyn Embedder>,
    into: Arc<std::sync::OnceLock<ModelFit>>,
    wait: Duration,
) {
    let (first_ended, ended) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let mut first_ended = Some(first_ended);
        loop {
            let measured = measure_once(embedder.as_ref(), &into).await;
            if let Some(tx) = first_ended.take() {
                let _ = tx.send(());
            }
            if measured {
                return;
            }
            tokio::time::sleep(CALIBRATION_RETRY).await;
        }
    });
    if tokio::time::timeout(wait, ended).await.is_err() {
        tracing::info!(
            waited_secs = wait.as_secs(),
            "embedding model not calibrated yet; serving meanwhile, the measurement goes on in the background"
        );
    }
}

/// One measurement of the embedder, stored in `into`; whether it succeeded.
async fn measure_once(embedder: &dyn Embedder, into: &std::sync::OnceLock<ModelFit>) -> bool {
    match calibrate_once(embedder).await {
        Ok((fit, measured_before)) => {
            let c = &fit.calibration;
            tracing::info!(
                model = embedder.model_id(),
                measured_before,
                cjk_accuracy = c.cjk.accuracy,
                cjk_similarity_cut = c.cjk.similarity_cut(),
                cjk_vector_weight = c.cjk.vector_weight(),
                latin_accuracy = c.latin.accuracy,
                latin_similarity_cut = c.latin.similarity_cut(),
                latin_vector_weight = c.latin.vector_weight(),
                cjk_to_latin_accuracy = c.cjk_to_latin.accuracy,
                latin_to_cjk_accuracy = c.latin_to_cjk.accuracy,
                cjk_chat_floor = fit.small_talk.cjk.floor,
                latin_chat_floor = fit.small_talk.latin.floor,
                cjk_duplicate_bound = ?fit.duplicates.cjk.map(|b| b.similarity),
                latin_duplicate_bound = ?fit.duplicates.latin.map(|b| b.similarity),
                "embedding model calibrated"
            );
            let _ = into.set(fit);
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, retry_secs = CALIBRATION_RETRY.as_secs(), "embedding model not calibrated yet; retrying in the background");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::{EmbedError, TextRole};
    use futures::future::BoxFuture;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The real model, its calls held until the test opens them: a measurement that outlasts
    /// start-up's wait, as a debug build's on a loaded 2-core machine does. A call dropped
    /// before it returns (a measurement cut at the wait) is counted. Its id is its own, so a
    /// fit another test measured on the real model in this process is not taken for it
    /// (`calibration::calibrate_once`).
    struct HeldCalls {
        real: Arc<dyn Embedder>,
        id: String,
        open: tokio::sync::watch::Receiver<bool>,
        cut: Arc<AtomicUsize>,
    }

    /// Counts its call as cut unless the call returned.
    struct CutUnlessReturned(Arc<AtomicUsize>, bool);

    impl Drop for CutUnlessReturned {
        fn drop(&mut self) {
            if !self.1 {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    impl Embedder for HeldCalls {
        fn model_id(&self) -> &str {
            &self.id
        }
        fn dimension(&self) -> usize {
            self.real.dimension()
        }
        fn embed(
            &self,
            role: TextRole,
            texts: Vec<String>,
        ) -> BoxFuture<'_, Result<Vec<Vec<f32>>, EmbedError>> {
            Box::pin(async move {
                let mut call = CutUnlessReturned(self.cut.clone(), false);
                let mut open = self.open.clone();
                let _ = open.wait_for(|o| *o).await;
                let vectors = self.real.embed(role, texts).await;
                call.1 = true;
                vectors
            })
        }
    }

    /// A model whose measurement takes longer than start-up waits for it is still measured:
    /// the measurement goes on in the background instead of being cut at the wait and started
    /// over (which, on a loaded machine, left the model uncalibrated for good).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_measurement_longer_than_start_up_waits_still_finishes() {
        let files = crate::embed::e5_model::resolve_files(None);
        let real = crate::embed::E5Embedder::load(&files, 32, 2).expect("make setup installs e5");
        let (opened, open) = tokio::sync::watch::channel(false);
        let cut = Arc::new(AtomicUsize::new(0));
        let held = HeldCalls {
            id: format!("held:{}", real.model_id()),
            real: Arc::new(real),
            open,
            cut: cut.clone(),
        };
        let fit = Arc::new(std::sync::OnceLock::new());
        measure_model(Arc::new(held), fit.clone(), Duration::from_millis(200)).await;
        assert!(
            fit.get().is_none(),
            "start-up waited 200 ms; the measurement takes longer"
        );
        opened.send_replace(true);
        let started = std::time::Instant::now();
        while fit.get().is_none() {
            assert!(
                started.elapsed() < Duration::from_secs(300),
                "the model was not calibrated in 5 minutes"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(cut.load(Ordering::SeqCst), 0, "the measurement was cut");
    }
}
