//! Questions that name a time (issue 41, part 3): does recall put the memory of that day, week,
//! month or year first, among memories of the same kind at other dates?
//!
//! The set is built around today, in Asia/Shanghai (the bench's `recall.timezone`), so every
//! question has exactly one right memory whatever day the bench runs:
//! - days: dinners, outings with the child, phone calls (家人) and meeting decisions (工作), one of
//!   each kind 1, 2, 3, 5, 9 and 20 days ago, asked with 昨天, 前天, 大前天, 三天前, 周X (the
//!   weekday of five days ago), 五天前, 九天前, a `YYYY-MM-DD`, a `M月D日`, and their English
//!   forms (yesterday, the day before yesterday, N days ago, on Monday);
//! - weeks: films and purchases on last week's Wednesday, a week and five weeks before, and
//!   last year, asked with 上周, 上周三 and "last week";
//! - recently: books, 4, 40 and 400 days ago, asked with 最近 and "recently";
//! - months and years: trips and haircuts on last month's 15th, June of last year and March of
//!   the year before, asked with 上个月, 去年, 前年, "last month", "last year" (the `去年` questions
//!   are left out in January, when last month is last year too).
//!
//! 300 memories of the quality bench's filler (`benches/quality/filler.jsonl`) sit in the same
//! scopes at dates spread over two years, so a window holds other memories too.
//!
//! It runs an in-process host with the default config (so the default model) and prints:
//! hit@1 and hit@5 of the time questions with their window, the same questions searched as
//! written (`time_words: false`: similarity alone, what recall did before), hit@1 per kind of
//! time word, rows from another scope (must be 0); for questions without time words, how many
//! of this set's and of the quality bench's questions got a window (must be 0: their recall
//! takes the path it took before), and whether their top 5 equals the top 5 with
//! `time_words: false`. Target (issue 41): hit@1 ≥ 0.9 on the time questions.
//!
//! Run with `make bench-time` (SCOPEMEM_BENCH_PROFILE=dev for a debug build; a few minutes).

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc, Weekday};
use chrono_tz::Asia::Shanghai;
use scopemem::host::PluginHost;
use scopemem::store::MemoryRecord;
use serde_json::{json, Value};

mod common;

const FAMILY: &str = "default:GroupMessage:12345";
const WORK: &str = "default:GroupMessage:67890";
const GAME: &str = "default:GroupMessage:24680";
const CLASS: &str = "default:GroupMessage:13579";
const PUBLIC: &str = "default:GroupMessage:99999";
const FILLER: usize = 300;

/// One memory of the set: its scope, its creation day and its text.
struct Seeded {
    scope: &'static str,
    created: DateTime<Utc>,
    text: String,
}

/// One time question: who asks, the words, the right memory, and the kind of time word.
struct Question {
    conversation: &'static str,
    text: String,
    want: String,
    span: &'static str,
}

fn today() -> NaiveDate {
    Utc::now().with_timezone(&Shanghai).date_naive()
}

/// Noon in Shanghai on `date`.
fn noon(date: NaiveDate) -> DateTime<Utc> {
    Shanghai
        .from_local_datetime(&date.and_hms_opt(12, 0, 0).expect("noon"))
        .single()
        .expect("one noon")
        .with_timezone(&Utc)
}

fn ymd(y: i32, m: u32, d: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(y, m, d).expect("a day")
}

fn zh_weekday(d: Weekday) -> &'static str {
    match d {
        Weekday::Mon => "一",
        Weekday::Tue => "二",
        Weekday::Wed => "三",
        Weekday::Thu => "四",
        Weekday::Fri => "五",
        Weekday::Sat => "六",
        Weekday::Sun => "日",
    }
}

/// A kind of memory: its scope's conversation, one text per date, and how to ask for it.
struct Kind {
    conversation: &'static str,
    texts: &'static [&'static str],
    zh: &'static str,
    en: &'static str,
}

fn scope_of(conversation: &str) -> &'static str {
    match conversation {
        FAMILY => "家人",
        WORK => "工作",
        GAME => "游戏群",
        CLASS => "同学",
        _ => "public",
    }
}

fn day_kinds() -> Vec<Kind> {
    vec![
        Kind {
            conversation: FAMILY,
            texts: &[
                "晚饭去了海底捞吃火锅",
                "晚饭去了西贝吃莜面",
                "晚饭在家包了韭菜饺子",
                "晚饭去了楼下的兰州拉面",
                "晚饭去了外婆家吃杭帮菜",
                "晚饭去了太二吃酸菜鱼",
            ],
            zh: "{t}晚饭去哪吃的",
            en: "where did we have dinner {t}",
        },
        Kind {
            conversation: FAMILY,
            texts: &[
                "下午带孩子去公园放风筝",
                "下午带孩子去游泳馆学游泳",
                "下午带孩子去图书馆看绘本",
                "下午带孩子去科技馆",
                "下午带孩子去动物园看熊猫",
                "下午带孩子去小区里学骑自行车",
            ],
            zh: "{t}下午带孩子去哪玩了",
            en: "where did we take the kid {t}",
        },
        Kind {
            conversation: FAMILY,
            texts: &[
                "晚上和外婆视频聊了一个小时",
                "晚上给舅舅打电话问装修的事",
                "晚上和老同学打电话叙旧",
                "晚上和表姐视频商量过年回家",
                "晚上给爷爷打电话问他的腰好点没",
                "晚上和大姨视频看她新养的猫",
            ],
            zh: "{t}晚上和谁打电话了",
            en: "who did I call {t}",
        },
        Kind {
            conversation: WORK,
            texts: &[
                "开会定了下周发布 v2.4",
                "开会定了周五前修完登录的 bug",
                "开会定了新人由小李带",
                "开会定了服务器迁到华东区",
                "开会定了这个季度先做留存",
                "开会定了周报改成双周报",
            ],
            zh: "{t}开会定了什么",
            en: "what did the meeting decide {t}",
        },
    ]
}

/// Days ago of each day kind's texts, in order.
const DAYS: [i64; 6] = [1, 2, 3, 5, 9, 20];

fn english_weekday(d: Weekday) -> &'static str {
    match d {
        Weekday::Mon => "Monday",
        Weekday::Tue => "Tuesday",
        Weekday::Wed => "Wednesday",
        Weekday::Thu => "Thursday",
        Weekday::Fri => "Friday",
        Weekday::Sat => "Saturday",
        Weekday::Sun => "Sunday",
    }
}

fn english_days(n: i64) -> &'static str {
    [
        "", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
    ][n as usize]
}

/// The day questions: each kind at each day, in Chinese and English time words.
fn day_set(seeded: &mut Vec<Seeded>, questions: &mut Vec<Question>) {
    let t = today();
    for kind in day_kinds() {
        for (&n, text) in DAYS.iter().zip(kind.texts) {
            let date = t - Duration::days(n);
            seeded.push(Seeded {
                scope: scope_of(kind.conversation),
                created: noon(date),
                text: text.to_string(),
            });
            let mut words: Vec<(&'static str, String, bool)> = Vec::new();
            match n {
                1 => {
                    words.push(("day", "昨天".into(), false));
                    words.push(("day", "yesterday".into(), true));
                }
                2 => {
                    words.push(("day", "前天".into(), false));
                    words.push(("day", "the day before yesterday".into(), true));
                }
                3 => {
                    words.push(("day", "大前天".into(), false));
                    words.push(("days ago", "三天前".into(), false));
                    words.push(("days ago", "three days ago".into(), true));
                }
                5 => {
                    let wd = date.weekday();
                    words.push(("weekday", format!("周{}", zh_weekday(wd)), false));
                    words.push(("days ago", "五天前".into(), false));
                    words.push(("weekday", format!("on {}", english_weekday(wd)), true));
                }
                9 => {
                    words.push(("days ago", "九天前".into(), false));
                    words.push(("date", date.format("%Y-%m-%d").to_string(), false));
                    words.push(("days ago", format!("{} days ago", english_days(n)), true));
                }
                _ => {
                    words.push(("date", format!("{}月{}日", date.month(), date.day()), false));
                    words.push(("date", date.format("on %Y-%m-%d").to_string(), true));
                }
            }
            for (span, w, english) in words {
                let template = if english { kind.en } else { kind.zh };
                questions.push(Question {
                    conversation: kind.conversation,
                    text: template.replace("{t}", &w),
                    want: text.to_string(),
                    span,
                });
            }
        }
    }
}

/// Week, recent, month and year questions.
fn calendar_set(seeded: &mut Vec<Seeded>, questions: &mut Vec<Question>) {
    let t = today();
    let monday = t - Duration::days(t.weekday().num_days_from_monday() as i64);
    let last_wednesday = monday - Duration::days(5);
    let mut add = |scope: &'static str, date: NaiveDate, text: &str| {
        seeded.push(Seeded {
            scope,
            created: noon(date),
            text: text.to_string(),
        });
    };
    let week_dates = [
        last_wednesday,
        last_wednesday - Duration::days(7),
        last_wednesday - Duration::days(35),
        last_wednesday - Duration::days(300),
    ];
    let films = [
        "看了电影《流浪地球3》",
        "看了电影《哪吒之魔童闹海》",
        "看了电影《封神第二部》",
        "看了电影《唐探1900》",
    ];
    let buys = [
        "在京东买了一台空气炸锅",
        "在淘宝买了一个扫地机器人",
        "在拼多多买了一箱车厘子",
        "在商场买了一双跑鞋",
    ];
    for (i, date) in week_dates.iter().enumerate() {
        add("家人", *date, films[i]);
        add("家人", *date, buys[i]);
    }
    let q = |text: &str, want: &str, span: &'static str| Question {
        conversation: FAMILY,
        text: text.to_string(),
        want: want.to_string(),
        span,
    };
    questions.push(q("上周看了什么电影", films[0], "week"));
    questions.push(q("上周三看的哪部电影", films[0], "weekday"));
    questions.push(q("what film did we watch last week", films[0], "week"));
    questions.push(q("上周买了什么东西", buys[0], "week"));
    questions.push(q("上周三在网上买了啥", buys[0], "weekday"));
    questions.push(q("what did I buy last week", buys[0], "week"));

    let books = ["在读《三体》", "在读《活着》", "在读《人类简史》"];
    for (book, n) in books.iter().zip([4, 40, 400]) {
        add("家人", t - Duration::days(n), book);
    }
    questions.push(q("最近在读什么书", books[0], "recent"));
    questions.push(q("这几天在看哪本书", books[0], "recent"));
    questions.push(q("what book am I reading recently", books[0], "recent"));

    let first = ymd(t.year(), t.month(), 1);
    let prev = first - Duration::days(1);
    let month_dates = [
        ymd(prev.year(), prev.month(), 15),
        ymd(t.year() - 1, 6, 15),
        ymd(t.year() - 2, 3, 15),
    ];
    let trips = [
        "去杭州西湖玩了两天",
        "去成都看了大熊猫",
        "去厦门鼓浪屿玩了一趟",
    ];
    let hair = ["剪了短发", "烫了卷发", "染了栗色头发"];
    for (i, date) in month_dates.iter().enumerate() {
        add("家人", *date, trips[i]);
        add("家人", *date, hair[i]);
    }
    questions.push(q("上个月去哪旅游了", trips[0], "month"));
    questions.push(q("where did we travel last month", trips[0], "month"));
    questions.push(q("上个月做了什么发型", hair[0], "month"));
    questions.push(q("前年去哪旅游了", trips[2], "year"));
    questions.push(q("前年做的什么发型", hair[2], "year"));
    if t.month() != 1 {
        questions.push(q("去年去哪旅游了", trips[1], "year"));
        questions.push(q("where did we go on holiday last year", trips[1], "year"));
        questions.push(q("去年做了什么发型", hair[1], "year"));
    }
}

/// Questions without time words, each with one right memory of the set.
fn plain_questions() -> Vec<Question> {
    let q = |conversation, text: &str, want: &str| Question {
        conversation,
        text: text.to_string(),
        want: want.to_string(),
        span: "none",
    };
    vec![
        q(FAMILY, "海底捞吃的什么", "晚饭去了海底捞吃火锅"),
        q(FAMILY, "孩子在哪看的熊猫", "下午带孩子去动物园看熊猫"),
        q(FAMILY, "舅舅家装修的事问了谁", "晚上给舅舅打电话问装修的事"),
        q(WORK, "服务器要迁到哪里", "开会定了服务器迁到华东区"),
        q(WORK, "新人谁来带", "开会定了新人由小李带"),
        q(FAMILY, "空气炸锅在哪买的", "在京东买了一台空气炸锅"),
        q(FAMILY, "《三体》", "在读《三体》"),
        q(FAMILY, "谁养了新猫", "晚上和大姨视频看她新养的猫"),
        q(FAMILY, "where did we see pandas", "去成都看了大熊猫"),
        q(FAMILY, "what did we eat at Xibei", "晚饭去了西贝吃莜面"),
        q(WORK, "when is v2.4 released", "开会定了下周发布 v2.4"),
        q(FAMILY, "头发染成什么颜色了", "染了栗色头发"),
    ]
}

/// Chat that names a time and asks for no memory: it must recall nothing, as other small talk.
const TIME_SMALL_TALK: [&str; 20] = [
    "今天好累啊",
    "昨天喝多了，头疼",
    "今晚早点睡吧",
    "今天天气真不错",
    "最近好忙啊",
    "今天也要加油鸭",
    "哈哈哈昨天那个视频笑死我了",
    "这周过得好快",
    "今年过得真快",
    "上周太累了😮‍💨",
    "今天周五啦！",
    "最近怎么样？",
    "晚安，今天辛苦了",
    "昨天睡得好香",
    "yesterday was fun lol",
    "last week was crazy",
    "good morning, today is a good day",
    "this week flew by",
    "lol today",
    "recently I'm so tired",
];

/// The quality bench's filler, `n` lines, at days spread over two years (deterministic).
fn filler(dir: &Path, n: usize) -> Vec<Seeded> {
    let raw =
        std::fs::read_to_string(dir.join("filler.jsonl")).expect("benches/quality/filler.jsonl");
    let mut rng = common::Rng(41);
    raw.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .take(n)
        .map(|v| {
            let scope = match v["scope"].as_str().unwrap_or("public") {
                "家人" => "家人",
                "工作" => "工作",
                "游戏群" => "游戏群",
                "同学" => "同学",
                _ => "public",
            };
            let days = (rng.next() % 730) as i64;
            Seeded {
                scope,
                created: noon(today() - Duration::days(days)),
                text: v["text"].as_str().unwrap_or_default().to_string(),
            }
        })
        .collect()
}

/// Every question text of the quality bench (none names a time on purpose).
fn quality_questions(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for name in [
        "family",
        "work",
        "game",
        "classmates",
        "public",
        "isolation",
    ] {
        let raw = std::fs::read_to_string(dir.join(format!("{name}.jsonl"))).expect("quality set");
        for line in raw.lines() {
            if let Some(q) = serde_json::from_str::<Value>(line)
                .ok()
                .and_then(|v| v["q"].as_str().map(String::from))
            {
                out.push(q);
            }
        }
    }
    out
}

fn conversation_of(scope: &str) -> &'static str {
    match scope {
        "家人" => FAMILY,
        "工作" => WORK,
        "游戏群" => GAME,
        "同学" => CLASS,
        _ => PUBLIC,
    }
}

async fn seed(host: &PluginHost, seeded: &[Seeded]) {
    let texts: Vec<String> = seeded.iter().map(|s| s.text.clone()).collect();
    let vectors = common::embed_all(host.memory().embedder().as_ref(), texts).await;
    let rows = seeded
        .iter()
        .zip(vectors)
        .map(|(s, vector)| {
            let record = MemoryRecord {
                id: uuid::Uuid::now_v7().to_string(),
                content: s.text.clone(),
                reasoning: None,
                tags: vec![],
                memory_type: "event".into(),
                strength: 50,
                is_active: true,
                conversation_id: Some(conversation_of(s.scope).into()),
                created_at: Some(s.created),
                memory_scope: Some(s.scope.into()),
                scope_source: Some("conversation".into()),
                expires_at: None,
                last_recalled_at: None,
                speaker_id: None,
                speaker_name: None,
                source_ids: vec![],
                about_ids: vec![],
                source_conversations: vec![],
            };
            (record, vector)
        })
        .collect();
    host.memory().store().append(rows).await.expect("seed");
}

async fn recall(host: &PluginHost, q: &Question, time_words: bool) -> Value {
    host.invoke(
        "recall",
        json!({"conversation_id": q.conversation, "query": q.text, "limit": 5,
               "time_words": time_words, "relevance_gate": true}),
    )
    .await
    .unwrap_or_else(|e| panic!("{}: {e}", q.text))
}

fn contents(r: &Value) -> Vec<(String, String)> {
    r["memories"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| {
                    (
                        m["content"].as_str().unwrap_or_default().to_string(),
                        m["memory_scope"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[derive(Default)]
struct Tally {
    asked: usize,
    first: usize,
    five: usize,
}

impl Tally {
    /// Count one question whose right memory came at `rank` (or not at all).
    fn count(&mut self, rank: Option<usize>) {
        self.asked += 1;
        self.first += usize::from(rank == Some(0));
        self.five += usize::from(rank.is_some());
    }

    fn hit1(&self) -> f64 {
        self.first as f64 / self.asked.max(1) as f64
    }

    fn hit5(&self) -> f64 {
        self.five as f64 / self.asked.max(1) as f64
    }
}

fn main() {
    let rt = common::runtime();
    rt.block_on(run());
}

async fn run() {
    let quality = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/quality");
    let dir = tempfile::tempdir().expect("temp dir");
    let host = start(dir.path()).await;
    let model = host.memory().embedder().model_id();
    let mut seeded = Vec::new();
    let mut questions = Vec::new();
    day_set(&mut seeded, &mut questions);
    calendar_set(&mut seeded, &mut questions);
    let n = common::scaled(FILLER, 30);
    seeded.extend(filler(&quality, n));
    seed(&host, &seeded).await;
    println!(
        "data set: {} memories ({} dated by kind, {n} filler over two years), {} time questions, model {model}, today {} in Asia/Shanghai",
        seeded.len(),
        seeded.len() - n,
        questions.len(),
        today()
    );
    ask_time_questions(&host, &questions).await;
    ask_time_chat(&host).await;
    ask_plain_questions(&host, &quality).await;
    host.shutdown().await;
}

/// A host with the default config (so the default model) plus the bench's scopes and zone,
/// once the model is calibrated: the relevance gate needs the calibration, measured at
/// start-up (in the background when it takes long, as in a debug build).
async fn start(dir: &Path) -> PluginHost {
    let config = dir.join("config.json");
    std::fs::write(
        &config,
        serde_json::to_vec(&json!({
            "storage": {"db_dir": dir.join("db")},
            "conversation_scope_map": {FAMILY: "家人", WORK: "工作", GAME: "游戏群", CLASS: "同学"},
            "recall": {"timezone": "Asia/Shanghai"},
        }))
        .expect("json"),
    )
    .expect("config");
    let host = PluginHost::start(Some(&config)).await.expect("host starts");
    let started = std::time::Instant::now();
    while host.memory().calibration().is_none() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(600),
            "the model was never calibrated"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    host
}

/// The time questions with their window and as written: hit@1 and hit@5, per kind of time
/// word, and rows of other scopes.
async fn ask_time_questions(host: &PluginHost, questions: &[Question]) {
    let mut with = Tally::default();
    let mut without = Tally::default();
    let mut per_span: BTreeMap<&str, Tally> = BTreeMap::new();
    let (mut leaks, mut no_window, mut empty) = (0, 0, 0);
    for q in questions {
        let scope = scope_of(q.conversation);
        for (time_words, tally) in [(true, &mut with), (false, &mut without)] {
            let r = recall(host, q, time_words).await;
            let got = contents(&r);
            leaks += got
                .iter()
                .filter(|(_, s)| s != scope && s != "public")
                .count();
            let rank = got.iter().position(|(t, _)| *t == q.want);
            tally.count(rank);
            if !time_words {
                continue;
            }
            per_span.entry(q.span).or_default().count(rank);
            match r.get("time_window") {
                None => no_window += 1,
                Some(w) if w["empty"] == true => empty += 1,
                Some(_) => {}
            }
            if rank != Some(0) {
                println!(
                    "  missed: {} → {:?} (want {}); window {} {}",
                    q.text,
                    got.first().map(|g| &g.0),
                    q.want,
                    r["time_window"],
                    r.get("gated")
                        .map(|g| format!("gated {g}"))
                        .unwrap_or_default()
                );
            }
        }
    }
    println!("\n| time questions ({}) | hit@1 | hit@5 |", with.asked);
    println!("|---|---|---|");
    println!(
        "| with the time window (default) | **{:.2}** ({}) | {:.2} |",
        with.hit1(),
        with.first,
        with.hit5()
    );
    println!(
        "| searched as written (`time_words: false`) | {:.2} ({}) | {:.2} |",
        without.hit1(),
        without.first,
        without.hit5()
    );
    println!("\nhit@1 per kind of time word (with the window):");
    for (span, t) in &per_span {
        println!("  {span:<9} {}/{} ", t.first, t.asked);
    }
    println!("time questions that got no window: {no_window}; an empty window: {empty}");
    println!("rows from another scope, all recalls: {leaks}");
}

/// Small talk that names a time: it must recall nothing.
async fn ask_time_chat(host: &PluginHost) {
    let mut chatty = Vec::new();
    for (i, line) in TIME_SMALL_TALK.iter().enumerate() {
        let conversation = if i % 2 == 0 { FAMILY } else { WORK };
        let got = contents(&recall(host, &asked(conversation, line), true).await);
        if !got.is_empty() {
            chatty.push(format!("{line} ({})", got.len()));
        }
    }
    println!(
        "small talk naming a time that recalled something: {} of {}{}",
        chatty.len(),
        TIME_SMALL_TALK.len(),
        listed(&chatty)
    );
}

/// Questions without time words: no window, and the same top 5 as searched as written; and
/// which of the quality bench's questions name a time.
async fn ask_plain_questions(host: &PluginHost, quality: &Path) {
    let plain = plain_questions();
    let (mut windows, mut same, mut first) = (0, 0, 0);
    for q in &plain {
        let r = recall(host, q, true).await;
        let as_written = recall(host, q, false).await;
        windows += usize::from(r.get("time_window").is_some());
        same += usize::from(contents(&r) == contents(&as_written));
        first += usize::from(contents(&r).first().map(|g| g.0.as_str()) == Some(q.want.as_str()));
    }
    println!(
        "\nquestions without time words ({}): hit@1 {first}; given a window {windows}; top 5 equal to `time_words: false` in {same}",
        plain.len()
    );
    let texts = quality_questions(quality);
    let mut named = Vec::new();
    for text in &texts {
        let r = recall(host, &asked(FAMILY, text), true).await;
        if r.get("time_window").is_some() {
            named.push(text.clone());
        }
    }
    println!(
        "quality bench questions given a window: {} of {}{}",
        named.len(),
        texts.len(),
        listed(&named)
    );
}

/// A question with no right memory (chat, or a probe for a window).
fn asked(conversation: &'static str, text: &str) -> Question {
    Question {
        conversation,
        text: text.to_string(),
        want: String::new(),
        span: "none",
    }
}

/// `": [..]"` for a non-empty list, else nothing.
fn listed(items: &[String]) -> String {
    if items.is_empty() {
        String::new()
    } else {
        format!(": {items:?}")
    }
}
