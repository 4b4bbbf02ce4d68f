//! Entry points for frameworks and operators: HTTP (axum), the demo client, the migrate CLI.

pub mod demo;
pub mod http;
pub mod metrics;
pub mod migrate_cli;
