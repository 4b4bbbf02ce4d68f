//! Entry points for frameworks and operators: HTTP (axum), MCP (rmcp), the operator page, the
//! demo client, the migrate and export/import CLIs.

pub mod demo;
pub(crate) mod error_text;
pub mod guard;
pub mod http;
pub mod mcp;
pub mod metrics;
pub mod migrate_cli;
pub(crate) mod progress;
pub mod reembed_cli;
pub mod transfer_cli;
pub(crate) mod ui;
