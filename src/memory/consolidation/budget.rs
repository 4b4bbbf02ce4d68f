//! What the LLM passes may spend (issue 78): which chats get passes, and how many tokens a day.
//!
//! Why: operators pay for the bot's LLM by the token. With the defaults the host's chat model
//! was asked every 20 messages of every chat, or after 10 quiet minutes, chats that never
//! address the bot included, and nothing counted the tokens: a bot in 50 busy groups spent on
//! chats its operator may not care about. So
//! - a chat gets LLM passes only while it is mapped (the operator named it) or addressed the
//!   bot (an @, a wake word, a private chat: the plugins' `to_bot`) in the last
//!   `consolidation.active_days`; the others' talk still reaches the working memory and the
//!   rules without an LLM ([`Active`]);
//! - the passes of a day spend at most `consolidation.daily_tokens`, counted from the
//!   provider's `usage` when it reports one, else estimated ([`estimate_tokens`]); past the
//!   cap no pass is handed out until the next day (in `recall.timezone`, else the machine's
//!   zone). A pass already handed out still counts when it is answered, so the cap is
//!   exceeded by at most one pass ([`Budget`]).
//!
//! Both live in the process: a restart starts the day's count over and forgets which chats
//! addressed the bot (mapped chats keep their passes).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{NaiveDate, Utc};
use serde::{Deserialize, Serialize};

/// Chats that addressed the bot lately, kept at most; past it the stalest goes.
const ADDRESSED_KEPT: usize = 100_000;

/// The chats that addressed the bot, and when.
#[derive(Debug)]
pub struct Active {
    window: Duration,
    addressed: Mutex<HashMap<String, Instant>>,
}

impl Active {
    /// `window`: how long after it addressed the bot a chat gets passes; zero: every chat.
    pub(crate) fn new(window: Duration) -> Active {
        Active {
            window,
            addressed: Mutex::new(HashMap::new()),
        }
    }

    /// A member of `conversation` addressed the bot.
    pub(crate) fn addressed(&self, conversation: &str) {
        let Ok(mut a) = self.addressed.lock() else {
            return;
        };
        if a.len() >= ADDRESSED_KEPT && !a.contains_key(conversation) {
            if let Some(stalest) = a.iter().min_by_key(|(_, t)| **t).map(|(c, _)| c.clone()) {
                a.remove(&stalest);
            }
        }
        a.insert(conversation.to_owned(), Instant::now());
    }

    /// Whether `conversation` gets LLM passes: every chat with a zero window, a mapped one,
    /// one that addressed the bot within the window.
    pub(crate) fn admits(&self, conversation: &str, mapped: bool) -> bool {
        if self.window.is_zero() || mapped {
            return true;
        }
        self.addressed
            .lock()
            .ok()
            .and_then(|a| a.get(conversation).map(|t| t.elapsed() < self.window))
            .unwrap_or(false)
    }
}

/// Token counts as a provider reports them (`usage` of an OpenAI-compatible answer); a host
/// passes its model's the same way (`POST /v1/consolidation/answer`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
}

impl Usage {
    /// The tokens spent: the total, else its parts; `None` when it reports nothing.
    pub(crate) fn spent(&self) -> Option<u64> {
        let parts = self.prompt_tokens + self.completion_tokens;
        match self.total_tokens.max(parts) {
            0 => None,
            n => Some(n),
        }
    }
}

/// Tokens `text` costs, estimated when the provider reports none: a CJK character a token,
/// four other characters a token (rounded up).
pub(crate) fn estimate_tokens(text: &str) -> u64 {
    let (mut cjk, mut other) = (0u64, 0u64);
    for c in text.chars() {
        if u32::from(c) >= 0x2E80 {
            cjk += 1;
        } else if !c.is_whitespace() {
            other += 1;
        }
    }
    cjk + other.div_ceil(4)
}

/// One day's spending.
#[derive(Debug, Default)]
struct Day {
    date: Option<NaiveDate>,
    tokens: u64,
    passes: u64,
    chats: HashSet<String>,
}

/// The day's token budget (see the module header).
#[derive(Debug)]
pub struct Budget {
    cap: u64,
    zone: chrono_tz::Tz,
    day: Mutex<Day>,
    /// Tokens spent since the process started.
    total: std::sync::atomic::AtomicU64,
}

/// The budget as `/v1/status` shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct BudgetStatus {
    /// `consolidation.daily_tokens` (0: no cap).
    pub daily_tokens: u64,
    pub tokens_today: u64,
    pub passes_today: u64,
    /// Chats whose passes ran today.
    pub chats_today: usize,
    /// Tokens spent since the process started.
    pub tokens_total: u64,
    /// Whether passes wait for the next day.
    pub spent: bool,
}

impl Budget {
    pub(crate) fn new(cap: u64, zone: chrono_tz::Tz) -> Budget {
        Budget {
            cap,
            zone,
            day: Mutex::new(Day::default()),
            total: Default::default(),
        }
    }

    fn today(&self) -> NaiveDate {
        Utc::now().with_timezone(&self.zone).date_naive()
    }

    /// Today's spending, started over when the day turned.
    fn with_day<T>(&self, f: impl FnOnce(&mut Day) -> T) -> T {
        let today = self.today();
        let mut day = self.day.lock().unwrap_or_else(|e| e.into_inner());
        if day.date != Some(today) {
            *day = Day {
                date: Some(today),
                ..Day::default()
            };
        }
        f(&mut day)
    }

    /// Whether a pass may be handed out now.
    pub(crate) fn open(&self) -> bool {
        self.cap == 0 || self.with_day(|d| d.tokens < self.cap)
    }

    /// A pass over `conversation` spent `tokens`.
    pub(crate) fn spend(&self, conversation: &str, tokens: u64) {
        self.total
            .fetch_add(tokens, std::sync::atomic::Ordering::Relaxed);
        self.with_day(|d| {
            d.tokens += tokens;
            d.passes += 1;
            d.chats.insert(conversation.to_owned());
        });
    }

    pub(crate) fn status(&self) -> BudgetStatus {
        let total = self.total.load(std::sync::atomic::Ordering::Relaxed);
        self.with_day(|d| BudgetStatus {
            daily_tokens: self.cap,
            tokens_today: d.tokens,
            passes_today: d.passes,
            chats_today: d.chats.len(),
            tokens_total: total,
            spent: self.cap > 0 && d.tokens >= self.cap,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_gets_passes_while_mapped_or_lately_addressed() {
        let active = Active::new(Duration::from_secs(3600));
        assert!(!active.admits("g:chatter", false));
        assert!(active.admits("g:chatter", true), "mapped");
        active.addressed("g:asks");
        assert!(active.admits("g:asks", false));
        let gone = Active::new(Duration::from_millis(1));
        gone.addressed("g:asks");
        std::thread::sleep(Duration::from_millis(5));
        assert!(!gone.admits("g:asks", false), "addressed too long ago");
        assert!(
            Active::new(Duration::ZERO).admits("g:chatter", false),
            "0: every chat"
        );
    }

    #[test]
    fn the_days_passes_stop_at_the_cap_and_count_their_chats() {
        let budget = Budget::new(1000, chrono_tz::UTC);
        assert!(budget.open());
        budget.spend("a", 600);
        assert!(budget.open());
        budget.spend("b", 600);
        assert!(!budget.open(), "past the cap: nothing until tomorrow");
        let s = budget.status();
        assert_eq!(
            (s.tokens_today, s.passes_today, s.chats_today, s.spent),
            (1200, 2, 2, true)
        );
        let free = Budget::new(0, chrono_tz::UTC);
        free.spend("a", 1_000_000);
        assert!(free.open(), "0: no cap");
    }

    #[test]
    fn usage_is_taken_as_reported_and_estimated_when_missing() {
        let reported = Usage {
            prompt_tokens: 900,
            completion_tokens: 100,
            total_tokens: 0,
        };
        assert_eq!(reported.spent(), Some(1000));
        assert_eq!(Usage::default().spent(), None);
        assert_eq!(estimate_tokens("妈妈对花生过敏"), 7);
        assert_eq!(estimate_tokens("peanuts!"), 2);
        assert_eq!(estimate_tokens("  "), 0);
    }
}
