//! A window of creation times: what a question's time words name (`time_words`) and what the
//! store's row filter admits. It lives below both, so the words and the filter share one type.

use chrono::{DateTime, Utc};

/// A half-open window of creation times, `[from, until)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    pub from: DateTime<Utc>,
    pub until: DateTime<Utc>,
}
