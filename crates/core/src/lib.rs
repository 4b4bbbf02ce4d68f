//! scopemem-core: what scopemem decides before anything is embedded or stored, without LanceDB.
//!
//! Why a crate of its own: the service crate links lance, so a one-line change to redaction or
//! the scope map rebuilt and relinked the whole test binary before a test could run. What is
//! here depends on no store, model or network: the configuration and its validation
//! (`config`), the conversation-to-scope map and its hot reload (`scope`), redaction of personal
//! data and secrets (`redact`), the folding that tells two texts are one fact and names its row
//! (`fact`), whether a line means something without the line it answers (`standalone`), and the time words of a question with the window they name (`time_words`,
//! `time_range`). Its tests build and run in seconds (`cargo test -p scopemem-core`).
//!
//! The service crate re-exports `config` and `scope` at its root, so `scopemem::config::Config`
//! and every `crate::config` path inside it are unchanged. This crate never depends on the
//! service crate: the layer rule (config < scope < the rest) is a crate boundary here.

pub mod config;
pub mod fact;
pub mod redact;
pub mod scope;
pub mod standalone;
#[cfg(test)]
mod test_logs;
pub mod time_range;
pub mod time_words;
