//! The recall path (docs/design.md section 5.2), one stage a file, in the order a recall runs
//! them. The service's part, which strings them together for one request, is
//! `service/recall.rs`.
//!
//! - [`mentions`]: the message to search with, without the bot's name it starts with;
//! - [`read_filter`]: what the conversation may read, as the one `RowFilter` (rule 7);
//! - [`time_words`]: a window the question names ("昨天", "last week"), added to that filter;
//! - [`hybrid`]: the vector and keyword candidates under the filter, fused; [`exact_terms`]: a
//!   question's codes and names that only a verbatim holder answers;
//! - [`brevity`]: a short chat line weighs less in the recent messages' vector list;
//! - [`echo`]: a chat line that says again what the asking message says, which the recent
//!   messages' search leaves out;
//! - [`relevance`]: the gate, whether the question asks for memory at all;
//! - [`ranking`]: similarity, or with strength and decay;
//! - [`distinct`]: one fact per answer;
//! - [`chained`]: by entity and type, for the injected block;
//! - [`injection`]: that block, escaped and labelled as data;
//! - [`touch`]: the returned ids recorded for the decay clock, off the request path;
//! - [`prefetch`]: before all of them, a question's query texts embedded when its message
//!   arrives, for the recall that follows.

pub(crate) mod brevity;
pub(crate) mod chained;
pub(crate) mod distinct;
pub(crate) mod echo;
pub(crate) mod exact_terms;
pub mod hybrid;
pub(crate) mod injection;
pub(crate) mod mentions;
pub(crate) mod prefetch;
pub(crate) mod ranking;
pub mod read_filter;
pub(crate) mod relevance;
pub use prefetch::AheadCounts;
pub(crate) use scopemem_core::time_words;
pub(crate) mod touch;
