//! Every integration test, in one test binary. Each `tests/<area>.rs` is a module here, so the
//! lance tree is linked once instead of once per file (each binary is ~500 MB in debug; the
//! ~35 links took minutes of a cold `make test`), and `tests/common` is compiled once.
//! Run one area with `cargo test --test it <area>::`, e.g. `cargo test --test it reembed::`.

#[path = "common/mod.rs"]
mod common;

#[path = "astrbot.rs"]
mod astrbot;

#[path = "astrbot_dashboard.rs"]
mod astrbot_dashboard;

#[path = "cli.rs"]
mod cli;

#[path = "concurrency.rs"]
mod concurrency;
#[path = "consolidation.rs"]
mod consolidation;

#[path = "crash.rs"]
mod crash;

#[path = "dedup.rs"]
mod dedup;

#[path = "disk_full.rs"]
mod disk_full;

#[path = "docs.rs"]
mod docs;

#[path = "e5.rs"]
mod e5;

#[path = "erase_processes.rs"]
mod erase_processes;

#[path = "feedback.rs"]
mod feedback;

#[path = "feedback_failures.rs"]
mod feedback_failures;

#[path = "filter_paths.rs"]
mod filter_paths;

#[path = "hostile_answers.rs"]
mod hostile_answers;

#[path = "http_api.rs"]
mod http_api;

#[path = "hybrid.rs"]
mod hybrid;

#[path = "incognito.rs"]
mod incognito;

#[path = "injection.rs"]
mod injection;

#[path = "introspection.rs"]
mod introspection;

#[path = "legacy.rs"]
mod legacy;

#[path = "life_cycle.rs"]
mod life_cycle;

#[path = "mcp.rs"]
mod mcp;

#[path = "nonebot.rs"]
mod nonebot;

#[path = "openai_provider.rs"]
mod openai_provider;

#[path = "people.rs"]
mod people;

#[path = "privacy.rs"]
mod privacy;

#[path = "processes.rs"]
mod processes;

#[path = "provider_down.rs"]
mod provider_down;

#[path = "reembed.rs"]
mod reembed;

#[path = "resident.rs"]
mod resident;

#[path = "s3.rs"]
mod s3;

#[path = "scope_isolation.rs"]
mod scope_isolation;

#[path = "security.rs"]
mod security;

#[path = "semantic.rs"]
mod semantic;

#[path = "shape.rs"]
mod shape;

#[path = "transfer.rs"]
mod transfer;

#[path = "update.rs"]
mod update;

#[path = "time_recall.rs"]
mod time_recall;

#[path = "turns.rs"]
mod turns;
#[path = "working_memory.rs"]
mod working_memory;

#[path = "ui.rs"]
mod ui;

#[path = "ui_browser.rs"]
mod ui_browser;

#[path = "wheel.rs"]
mod wheel;
