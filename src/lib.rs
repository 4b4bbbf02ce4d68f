//! scopemem: scope-aware long-term memory for chatbots, on LanceDB and an offline embedding model.
//!
//! Data flows one way: `api` -> `host` -> `memory` -> (`scope`, `embed`, `store`), with
//! `config` feeding all of them. See docs/design.md for the contracts.

pub mod api;
pub mod config;
pub mod embed;
pub mod host;
pub mod memory;
pub mod migrate;
pub mod scope;
pub mod store;
pub mod task;
#[cfg(test)]
mod test_logs;
pub mod transfer;
