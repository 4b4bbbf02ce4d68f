//! Questions that name a time: "昨天说的那个餐厅叫什么", "上周开会定了什么", "what did I say last
//! week". The words name a window of creation times, which recall adds to its prefilter (the
//! same `RowFilter` as the scope rule, `store::filter::TimeRange`), and they are dropped from the
//! text that is embedded, so last year's restaurant does not compete with yesterday's.
//!
//! Days, weeks, months and years are the caller's calendar: the window is computed in a time
//! zone (`recall.timezone`, or the one a plugin passes) and then turned into UTC. Weeks start
//! on Monday. A window never ends after the next midnight: nothing is remembered in the future.
//!
//! Recognised, in Chinese: 今天 昨天 前天 大前天, N天前, 周X / 星期X / 礼拜X (the latest such day;
//! not after 每, since 每周四 is every Thursday, a habit and not when something was said),
//! 上周X, 这周 / 本周, 上周, 这个月 / 本月, 上个月, 今年, 去年, 前年, 最近 / 近期 / 这几天,
//! YYYY年M月D日, M月D日 (or 号), YYYY-MM-DD. In English: today, tonight, yesterday, the day before
//! yesterday, N days ago, this / last week, month, year, recently / lately, last Monday and on
//! Monday (both the latest Monday), (on) YYYY-MM-DD.

use std::sync::LazyLock;

use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc, Weekday};
use chrono_tz::Tz;
use regex::Regex;

use crate::time_range::TimeRange;

/// A question's time words, the window they name, and the question without them.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeQuery {
    pub window: TimeRange,
    /// The words, as written.
    pub words: String,
    /// The question without them (the whole question when nothing else is left).
    pub rest: String,
}

/// Days `最近` / "recently" reaches back.
const RECENT_DAYS: i64 = 7;

/// What a matched phrase names, before it is placed in a calendar.
#[derive(Debug, Clone, Copy)]
enum Span {
    /// The day `n` days before today.
    DaysAgo(i64),
    /// The latest `weekday` on or before today, or the one of last week.
    Weekday { day: Weekday, last_week: bool },
    /// This week (`0`) or the one before (`1`).
    Week(i64),
    /// This month (`0`) or the one before (`1`).
    Month(i64),
    /// This year (`0`), last year (`1`), the year before (`2`).
    Year(i64),
    /// The last [`RECENT_DAYS`] days.
    Recent,
    /// A calendar day (`None` year: the latest such day on or before today).
    Date {
        year: Option<i32>,
        month: u32,
        day: u32,
    },
}

struct Pattern {
    regex: Regex,
    span: fn(&regex::Captures<'_>) -> Option<Span>,
}

fn pattern(re: &str, span: fn(&regex::Captures<'_>) -> Option<Span>) -> Pattern {
    Pattern {
        // The patterns are constants of this file: a bad one fails the unit tests at once.
        regex: Regex::new(re).unwrap_or_else(|e| panic!("time pattern {re}: {e}")),
        span,
    }
}

static PATTERNS: LazyLock<Vec<Pattern>> = LazyLock::new(|| {
    vec![
        pattern(
            r"(?i:\bon\s+)?(\d{4})[-/年](\d{1,2})[-/月](\d{1,2})[日号]?",
            |c| {
                Some(Span::Date {
                    year: c[1].parse().ok(),
                    month: c[2].parse().ok()?,
                    day: c[3].parse().ok()?,
                })
            },
        ),
        pattern(r"(\d{1,2})月(\d{1,2})[日号]", |c| {
            Some(Span::Date {
                year: None,
                month: c[1].parse().ok()?,
                day: c[2].parse().ok()?,
            })
        }),
        pattern(r"大前天", |_| Some(Span::DaysAgo(3))),
        pattern(r"前天", |_| Some(Span::DaysAgo(2))),
        pattern(r"昨天|昨日|昨晚|昨儿", |_| Some(Span::DaysAgo(1))),
        pattern(r"今天|今日|今晚|今早|今儿", |_| {
            Some(Span::DaysAgo(0))
        }),
        pattern(
            r"([0-9]+|[一二两三四五六七八九十]+)\s*天(?:之)?前",
            |c| Some(Span::DaysAgo(number(&c[1])?)),
        ),
        pattern(
            r"上(?:个)?(?:周|星期|礼拜)([一二三四五六日天])",
            |c| {
                Some(Span::Weekday {
                    day: cjk_weekday(&c[1])?,
                    last_week: true,
                })
            },
        ),
        pattern(
            r"(?:这|本)?(?:个)?(?:周|星期|礼拜)([一二三四五六日天])",
            |c| {
                Some(Span::Weekday {
                    day: cjk_weekday(&c[1])?,
                    last_week: false,
                })
            },
        ),
        pattern(r"上(?:个)?(?:周|星期|礼拜)", |_| Some(Span::Week(1))),
        pattern(r"(?:这|本)(?:个)?(?:周|星期|礼拜)", |_| {
            Some(Span::Week(0))
        }),
        pattern(r"上(?:个)?月", |_| Some(Span::Month(1))),
        pattern(r"(?:这|本)(?:个)?月", |_| Some(Span::Month(0))),
        pattern(r"前年", |_| Some(Span::Year(2))),
        pattern(r"去年", |_| Some(Span::Year(1))),
        pattern(r"今年", |_| Some(Span::Year(0))),
        pattern(r"最近|近期|这几天|这两天", |_| Some(Span::Recent)),
        pattern(r"(?i)\bthe\s+day\s+before\s+yesterday\b", |_| {
            Some(Span::DaysAgo(2))
        }),
        pattern(r"(?i)\byesterday\b", |_| Some(Span::DaysAgo(1))),
        pattern(r"(?i)\b(?:today|tonight|this\s+morning)\b", |_| {
            Some(Span::DaysAgo(0))
        }),
        pattern(
            r"(?i)\b([0-9]+|one|two|three|four|five|six|seven|eight|nine|ten)\s+days?\s+ago\b",
            |c| Some(Span::DaysAgo(number(&c[1])?)),
        ),
        pattern(
            r"(?i)\blast\s+(monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b",
            |c| {
                // "last Monday" said on a Friday is this week's Monday, unlike 上周一.
                Some(Span::Weekday {
                    day: c[1].to_ascii_lowercase().parse().ok()?,
                    last_week: false,
                })
            },
        ),
        pattern(
            r"(?i)\bon\s+(monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b",
            |c| {
                Some(Span::Weekday {
                    day: c[1].to_ascii_lowercase().parse().ok()?,
                    last_week: false,
                })
            },
        ),
        pattern(r"(?i)\blast\s+week\b", |_| Some(Span::Week(1))),
        pattern(r"(?i)\bthis\s+week\b", |_| Some(Span::Week(0))),
        pattern(r"(?i)\blast\s+month\b", |_| Some(Span::Month(1))),
        pattern(r"(?i)\bthis\s+month\b", |_| Some(Span::Month(0))),
        pattern(r"(?i)\blast\s+year\b", |_| Some(Span::Year(1))),
        pattern(r"(?i)\bthis\s+year\b", |_| Some(Span::Year(0))),
        pattern(r"(?i)\b(?:recently|lately)\b", |_| Some(Span::Recent)),
    ]
});

/// The first time phrase of `query` (the longest where two start together) and its window at
/// `now` in `now`'s zone; `None` when the query names no time (or an impossible date).
pub fn find(query: &str, now: DateTime<Tz>) -> Option<TimeQuery> {
    let mut best: Option<(usize, usize, Span)> = None;
    for p in PATTERNS.iter() {
        for caps in p.regex.captures_iter(query) {
            let Some(m) = caps.get(0) else { continue };
            if recurring(&query[..m.start()]) {
                continue;
            }
            let Some(span) = (p.span)(&caps) else {
                continue;
            };
            let better = match best {
                None => true,
                Some((start, end, _)) => m.start() < start || (m.start() == start && m.end() > end),
            };
            if better {
                best = Some((m.start(), m.end(), span));
            }
        }
    }
    let (start, end, span) = best?;
    let window = place(span, now)?;
    let rest = format!("{} {}", &query[..start], &query[end..]);
    let rest = rest.split_whitespace().collect::<Vec<_>>().join(" ");
    let rest = rest.trim_matches(|c: char| c.is_whitespace() || "的，,。？?！!".contains(c));
    Some(TimeQuery {
        window,
        words: query[start..end].to_string(),
        rest: if rest.chars().any(char::is_alphanumeric) {
            rest.to_string()
        } else {
            query.to_string()
        },
    })
}

/// Whether the words before a phrase make it a habit ("我每周四晚上去做咨询", "每个周六"): a
/// phrase that names every such day names no window of saying.
fn recurring(before: &str) -> bool {
    let before = before.trim_end();
    let before = before.strip_suffix('个').unwrap_or(before);
    before.ends_with('每')
}

/// The window `span` names at `now`, in UTC.
fn place(span: Span, now: DateTime<Tz>) -> Option<TimeRange> {
    let zone = now.timezone();
    let today = now.date_naive();
    let days = |from: NaiveDate, n: i64| -> Option<TimeRange> {
        Some(TimeRange {
            from: midnight(zone, from)?,
            until: midnight(zone, from + Duration::days(n))?,
        })
    };
    let tomorrow = today + Duration::days(1);
    match span {
        Span::DaysAgo(n) => days(today - Duration::days(n), 1),
        Span::Weekday { day, last_week } => {
            let monday = today - Duration::days(today.weekday().num_days_from_monday() as i64);
            let this_week = monday + Duration::days(day.num_days_from_monday() as i64);
            let date = if last_week || this_week > today {
                this_week - Duration::days(7)
            } else {
                this_week
            };
            days(date, 1)
        }
        Span::Week(back) => {
            let monday = today - Duration::days(today.weekday().num_days_from_monday() as i64);
            let from = monday - Duration::days(7 * back);
            let until = (from + Duration::days(7)).min(tomorrow);
            days(from, (until - from).num_days())
        }
        Span::Month(back) => {
            let first = NaiveDate::from_ymd_opt(today.year(), today.month(), 1)?;
            let from = first.checked_sub_months(chrono::Months::new(back as u32))?;
            let until = from
                .checked_add_months(chrono::Months::new(1))?
                .min(tomorrow);
            days(from, (until - from).num_days())
        }
        Span::Year(back) => {
            let from = NaiveDate::from_ymd_opt(today.year() - back as i32, 1, 1)?;
            let until =
                NaiveDate::from_ymd_opt(today.year() - back as i32 + 1, 1, 1)?.min(tomorrow);
            days(from, (until - from).num_days())
        }
        Span::Recent => days(today - Duration::days(RECENT_DAYS - 1), RECENT_DAYS),
        Span::Date { year, month, day } => {
            let date = match year {
                Some(y) => NaiveDate::from_ymd_opt(y, month, day)?,
                None => {
                    let this_year = NaiveDate::from_ymd_opt(today.year(), month, day)?;
                    if this_year > today {
                        NaiveDate::from_ymd_opt(today.year() - 1, month, day)?
                    } else {
                        this_year
                    }
                }
            };
            days(date, 1)
        }
    }
}

/// The first instant of `date` in `zone`, in UTC (the earliest one where a clock change makes
/// midnight ambiguous; the next hour where it skips midnight).
fn midnight(zone: Tz, date: NaiveDate) -> Option<DateTime<Utc>> {
    (0..3).find_map(|hour| {
        zone.from_local_datetime(&date.and_hms_opt(hour, 0, 0)?)
            .earliest()
            .map(|t| t.with_timezone(&Utc))
    })
}

fn cjk_weekday(c: &str) -> Option<Weekday> {
    Some(match c {
        "一" => Weekday::Mon,
        "二" => Weekday::Tue,
        "三" => Weekday::Wed,
        "四" => Weekday::Thu,
        "五" => Weekday::Fri,
        "六" => Weekday::Sat,
        "日" | "天" => Weekday::Sun,
        _ => return None,
    })
}

/// A count of days: digits, a Chinese numeral up to 99 (三, 十二, 二十), or an English word.
fn number(text: &str) -> Option<i64> {
    if let Ok(n) = text.parse::<i64>() {
        return (n <= 3660).then_some(n);
    }
    let words = [
        "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    ];
    if let Some(i) = words.iter().position(|w| text.eq_ignore_ascii_case(w)) {
        return Some(i as i64 + 1);
    }
    let digit = |c: char| "零一二三四五六七八九".find(c).map(|i| (i / 3) as i64);
    let digit = |c: char| if c == '两' { Some(2) } else { digit(c) };
    let chars: Vec<char> = text.chars().collect();
    match chars.as_slice() {
        [c] if *c == '十' => Some(10),
        [c] => digit(*c),
        ['十', u] => Some(10 + digit(*u)?),
        [t, '十'] => Some(digit(*t)? * 10),
        [t, '十', u] => Some(digit(*t)? * 10 + digit(*u)?),
        _ => None,
    }
}

/// The machine's time zone (its IANA name), or UTC when it cannot be read.
pub fn machine_zone() -> Tz {
    iana_time_zone::get_timezone()
        .ok()
        .and_then(|name| name.parse().ok())
        .unwrap_or(Tz::UTC)
}

/// An IANA zone name, as configured or passed by a plugin.
pub fn parse_zone(name: &str) -> Result<Tz, String> {
    name.trim()
        .parse()
        .map_err(|_| format!("'{name}' is not an IANA time zone name (such as Asia/Shanghai)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shanghai(y: i32, m: u32, d: u32, h: u32) -> DateTime<Tz> {
        chrono_tz::Asia::Shanghai
            .with_ymd_and_hms(y, m, d, h, 0, 0)
            .single()
            .unwrap()
    }

    /// The window as local dates in Shanghai: (first day, days).
    fn local(q: &TimeQuery) -> (NaiveDate, i64) {
        let z = chrono_tz::Asia::Shanghai;
        let from = q.window.from.with_timezone(&z);
        let until = q.window.until.with_timezone(&z);
        assert_eq!(
            (from.time(), until.time()),
            (chrono::NaiveTime::MIN, chrono::NaiveTime::MIN)
        );
        (
            from.date_naive(),
            (until.date_naive() - from.date_naive()).num_days(),
        )
    }

    fn date(y: i32, m: u32, d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, d).unwrap()
    }

    // Friday 2026-11-27, 10:00 in Shanghai (02:00 UTC).
    fn now() -> DateTime<Tz> {
        shanghai(2026, 11, 27, 10)
    }

    #[test]
    fn chinese_time_words_name_their_days() {
        let cases = [
            (
                "昨天说的那个餐厅叫什么",
                date(2026, 11, 26),
                1,
                "说的那个餐厅叫什么",
            ),
            ("前天谁来过", date(2026, 11, 25), 1, "谁来过"),
            ("大前天吃了什么", date(2026, 11, 24), 1, "吃了什么"),
            ("三天前去了哪里", date(2026, 11, 24), 1, "去了哪里"),
            ("12天前买的书", date(2026, 11, 15), 1, "买的书"),
            ("周三去了哪家店", date(2026, 11, 25), 1, "去了哪家店"),
            ("星期六打算干嘛", date(2026, 11, 21), 1, "打算干嘛"),
            ("上周三开会说了什么", date(2026, 11, 18), 1, "开会说了什么"),
            ("上周开会定了什么", date(2026, 11, 16), 7, "开会定了什么"),
            ("这周谁值班", date(2026, 11, 23), 5, "谁值班"),
            ("上个月去了哪家餐厅", date(2026, 10, 1), 31, "去了哪家餐厅"),
            ("本月花了多少钱", date(2026, 11, 1), 27, "花了多少钱"),
            ("去年去哪旅游了", date(2025, 1, 1), 365, "去哪旅游了"),
            ("最近在忙什么", date(2026, 11, 21), 7, "在忙什么"),
            ("11月3日那天下雨了吗", date(2026, 11, 3), 1, "那天下雨了吗"),
            ("12月25号吃了什么", date(2025, 12, 25), 1, "吃了什么"),
            ("2026年5月1日去了哪", date(2026, 5, 1), 1, "去了哪"),
        ];
        for (q, from, n, rest) in cases {
            let t = find(q, now()).unwrap_or_else(|| panic!("{q}: no time"));
            assert_eq!(local(&t), (from, n), "{q}: {t:?}");
            assert_eq!(t.rest, rest, "{q}");
        }
    }

    #[test]
    fn english_time_words_name_their_days() {
        let cases = [
            (
                "what did I say yesterday",
                date(2026, 11, 26),
                1,
                "what did I say",
            ),
            (
                "where did we eat the day before yesterday",
                date(2026, 11, 25),
                1,
                "where did we eat",
            ),
            (
                "where did we have dinner on 2026-11-07",
                date(2026, 11, 7),
                1,
                "where did we have dinner",
            ),
            (
                "who called two days ago?",
                date(2026, 11, 25),
                1,
                "who called",
            ),
            (
                "what did I say last week",
                date(2026, 11, 16),
                7,
                "what did I say",
            ),
            (
                "which restaurant last month",
                date(2026, 10, 1),
                31,
                "which restaurant",
            ),
            (
                "what happened on Monday",
                date(2026, 11, 23),
                1,
                "what happened",
            ),
            (
                "what happened last Monday",
                date(2026, 11, 23),
                1,
                "what happened",
            ),
            (
                "what was decided on 2026-11-02",
                date(2026, 11, 2),
                1,
                "what was decided",
            ),
        ];
        for (q, from, n, rest) in cases {
            let t = find(q, now()).unwrap_or_else(|| panic!("{q}: no time"));
            assert_eq!(local(&t), (from, n), "{q}: {t:?}");
            assert_eq!(t.rest, rest, "{q}");
        }
    }

    #[test]
    fn questions_without_time_words_get_no_window() {
        for q in [
            "妈妈对什么过敏",
            "周会改到几点了",
            "who likes weekly reports",
            "what is the wifi password",
            "星期几开会",
            "三天打鱼两天晒网",
            "2月30日",
            // A habit names no window: every Thursday, not the latest one.
            "我每周四晚上是去干什么的？",
            "每个星期六谁带球",
            "每礼拜三几点开始",
        ] {
            assert_eq!(find(q, now()), None, "{q}");
        }
    }

    #[test]
    fn a_question_of_only_time_words_is_embedded_whole() {
        let t = find("昨天？", now()).unwrap();
        assert_eq!(t.rest, "昨天？");
        let t = find("yesterday", now()).unwrap();
        assert_eq!(t.rest, "yesterday");
    }

    #[test]
    fn days_follow_the_zone_not_utc() {
        // 07:30 in Shanghai is still the day before in UTC: "today" is Shanghai's day.
        let early = shanghai(2026, 11, 27, 7);
        let t = find("今天吃了什么", early).unwrap();
        assert_eq!(local(&t), (date(2026, 11, 27), 1));
        assert_eq!(t.window.from.to_rfc3339(), "2026-11-26T16:00:00+00:00");
        assert!(parse_zone("Asia/Shanghai").is_ok());
        assert!(parse_zone("Mars/Olympus").is_err());
    }

    #[test]
    fn chinese_numbers_count_days() {
        for (text, n) in [
            ("三", 3),
            ("十", 10),
            ("十二", 12),
            ("二十", 20),
            ("两", 2),
            ("7", 7),
        ] {
            assert_eq!(number(text), Some(n), "{text}");
        }
        assert_eq!(number("百"), None);
    }
}
