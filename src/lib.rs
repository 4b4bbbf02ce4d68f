//! scopemem: scope-aware long-term memory for chatbots, on LanceDB and an offline embedding model.
//!
//! Data flows one way: `api` -> `host` -> `memory` -> (`scope`, `store`, `embed`), with
//! `config` feeding all of them. See docs/design.md for the contracts.
//!
//! Modules are `pub(crate)` by default. A module is `pub` only when the binary (`main.rs`), an
//! integration test or a bench reaches into it, and each layer's `mod.rs` re-exports the types
//! its callers name (`store::{Store, RowFilter, Selection, ..}`, `embed::{Embedder, Script,
//! ModelInfo, ..}`, `host::{PluginHost, Request, ..}`), so a path into a private file is a
//! compile error rather than a dependency nobody meant to create.

pub mod api;
pub mod config;
pub mod embed;
pub mod host;
pub mod memory;
pub mod migrate;
pub mod scope;
pub mod store;
pub(crate) mod task;
#[cfg(test)]
mod test_logs;
pub mod transfer;
