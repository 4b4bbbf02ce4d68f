//! Log capture in tests that run beside others: a test that asserts on what it logged installs a
//! thread-local subscriber, and `tracing` can cache a callsite as uninteresting before that
//! subscriber sees it. Compiled into the core crate's unit tests (`cfg(test)`) and, by path, into
//! the service's integration tests' `common`, so both use one fix.

/// Make a test's thread-local log capture see every event, whatever sibling tests run.
///
/// `tracing` caches each callsite's interest process-wide, computed when the callsite is first
/// hit. While only one dispatcher exists (the capturing test's `set_default`), a sibling
/// test's thread with no subscriber that hits the callsite first caches `never`, and the
/// capture misses the event (seen at `--test-threads=4`: "the refusals are logged" found no
/// refusal; tokio-rs/tracing#3611). A global subscriber that is interested in every callsite
/// (`sometimes`: asked per event) but enables nothing keeps the cache out of `never`; its level
/// is off, so it costs nothing outside a capture. Installed once per test process.
pub fn log_capture_baseline() {
    use tracing::subscriber::Interest;
    use tracing::{span, Event, Metadata};

    struct Baseline;
    impl tracing::Subscriber for Baseline {
        fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
            Interest::sometimes()
        }
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            false
        }
        // Off on its own: outside a capture no macro gets past the level check.
        fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
            Some(tracing::level_filters::LevelFilter::OFF)
        }
        fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
            span::Id::from_u64(1)
        }
        fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
        fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
        fn event(&self, _: &Event<'_>) {}
        fn enter(&self, _: &span::Id) {}
        fn exit(&self, _: &span::Id) {}
    }
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Already set (by another test) is as good.
        let _ = tracing::subscriber::set_global_default(Baseline);
    });
}
