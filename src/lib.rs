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
// The lance-free layers live in crates/core; re-exported so `crate::config` and
// `scopemem::scope` paths are the same inside and outside the crate.
pub use scopemem_core::{config, scope};
pub mod embed;
pub mod host;
pub mod memory;
pub mod migrate;
pub mod store;
pub(crate) mod task;
pub mod transfer;
