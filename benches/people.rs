//! Members as people (issue 77), through a real `scopemem serve` with the default config.
//!
//! 1. **First-person questions.** Two groups (Chinese and English), four members each; every
//!    member states five first-person facts of the same kinds (an allergy, a trip, a job, a
//!    pet, a birthday) among chatter, and two members rename themselves after stating theirs.
//!    Then every member asks about each of their own facts in two phrasings ("我对什么过敏来
//!    着？", "what am I allergic to?"), as the plugins ask: the question as a `to_bot` message,
//!    then the injection event with the asker's `sender_id` (80 questions, 20 of them asked by
//!    a renamed member). A hit: of the members' lines of that kind, the asker's own stands first
//!    in the injected block (target ≥ 90 %), or among the first three (target ≥ 98 %). Then a
//!    member asks about each other member by name, the old name of a renamed one for half the
//!    kinds and the new name for the rest (40 questions): that member's line first (target
//!    ≥ 90 %). Printed beside the same questions asked without `sender_id` (as before).
//! 2. **Forget me.** 10,000 messages of 20 members across 5 chats of one platform; one member
//!    forgets themselves (`POST /v1/people/forget`): the time it takes (target under 10 s),
//!    files under the data directory that still hold any of their lines (target 0), other
//!    members' messages lost (target 0), and their lines a recall in any chat returns after it
//!    returned, in this serve and in a second one on the same directory (target 0).
//!
//! `make bench-people`; `SCOPEMEM_BENCH_SERVE_BIN` serves with that binary (the release one
//! users get); `SCOPEMEM_BENCH_SMOKE=1` runs a tenth of part 2.

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::serve::{self, post};

/// A member: sender id, name, and the name after a rename (if any).
struct Member {
    id: &'static str,
    name: &'static str,
    renamed: Option<&'static str>,
    /// The five facts, one per kind, in the order of [`KINDS`].
    facts: [String; 5],
}

/// The kinds of fact each member states, with two first-person questions and a question
/// naming the member (`{}` is the name), per language.
const KINDS: usize = 5;

struct Group {
    chat: &'static str,
    members: Vec<Member>,
    own: [[&'static str; 2]; KINDS],
    named: [&'static str; KINDS],
    chatter: [&'static str; 6],
}

fn groups() -> Vec<Group> {
    let zh = |x: [&str; 5]| -> [String; 5] {
        [
            format!("我对{}过敏，大家聚餐的时候记得", x[0]),
            format!("下周三我要去{}出差，周五回来", x[1]),
            format!("我现在在{}上班", x[2]),
            format!("我家养了一只{}", x[3]),
            format!("我的生日是{}，到时候请大家吃饭", x[4]),
        ]
    };
    let en = |x: [&str; 5]| -> [String; 5] {
        [
            format!("heads up for dinners: I'm allergic to {}", x[0]),
            format!(
                "next Wednesday I'm flying to {} for work, back Friday",
                x[1]
            ),
            format!("I work at {} these days", x[2]),
            format!("I have a {} at home", x[3]),
            format!("my birthday is on {}, drinks on me", x[4]),
        ]
    };
    vec![
        Group {
            chat: "qq:GroupMessage:bench-family",
            members: vec![
                Member {
                    id: "u-zhang",
                    name: "张三",
                    renamed: Some("老张"),
                    facts: zh(["花生", "上海", "银行做柜员", "橘猫叫年糕", "三月十二号"]),
                },
                Member {
                    id: "u-li",
                    name: "李四",
                    renamed: None,
                    facts: zh(["海鲜", "成都", "医院当护士", "柯基叫馒头", "五月二十号"]),
                },
                Member {
                    id: "u-wang",
                    name: "王五",
                    renamed: None,
                    facts: zh(["芒果", "广州", "中学教数学", "鹦鹉叫豆豆", "八月八号"]),
                },
                Member {
                    id: "u-zhao",
                    name: "赵六",
                    renamed: None,
                    facts: zh(["青霉素", "西安", "设计院画图纸", "仓鼠叫团子", "十一月三号"]),
                },
            ],
            own: [
                ["我对什么过敏来着？", "我过敏的东西是什么？"],
                ["我下周三要去哪出差？", "下周三我出差去哪儿来着？"],
                ["我现在在哪上班？", "我是做什么工作的来着？"],
                ["我家养的是什么宠物？", "我养的那只叫什么名字？"],
                ["我的生日是哪天？", "我几号过生日来着？"],
            ],
            named: [
                "{}对什么过敏？",
                "{}下周三去哪出差？",
                "{}在哪上班？",
                "{}家养了什么宠物？",
                "{}生日是哪天？",
            ],
            chatter: [
                "早上好",
                "哈哈哈哈",
                "今天好冷啊",
                "收到",
                "晚安啦",
                "[图片]",
            ],
        },
        Group {
            chat: "discord:GroupMessage:bench-club",
            members: vec![
                Member {
                    id: "u-ana",
                    name: "Ana",
                    renamed: None,
                    facts: en([
                        "peanuts",
                        "Berlin",
                        "the city library as an archivist",
                        "tabby cat named Miso",
                        "March 12",
                    ]),
                },
                Member {
                    id: "u-ben",
                    name: "Ben",
                    renamed: Some("Benny"),
                    facts: en([
                        "shellfish",
                        "Toronto",
                        "a bike shop as a mechanic",
                        "beagle named Waffles",
                        "May 20",
                    ]),
                },
                Member {
                    id: "u-cam",
                    name: "Cam",
                    renamed: None,
                    facts: en([
                        "mangoes",
                        "Lisbon",
                        "the high school teaching chemistry",
                        "parrot named Kiwi",
                        "August 8",
                    ]),
                },
                Member {
                    id: "u-dee",
                    name: "Dee",
                    renamed: None,
                    facts: en([
                        "penicillin",
                        "Seoul",
                        "a design studio as an illustrator",
                        "hamster named Pudding",
                        "November 3",
                    ]),
                },
            ],
            own: [
                [
                    "what am I allergic to again?",
                    "remind me what my allergy is",
                ],
                [
                    "where am I flying next Wednesday?",
                    "where's my work trip next week?",
                ],
                ["where do I work?", "what's my job again?"],
                ["what pet do I have?", "what's my pet's name?"],
                ["when is my birthday?", "what day is my birthday?"],
            ],
            named: [
                "what is {} allergic to?",
                "where is {} flying next Wednesday?",
                "where does {} work?",
                "what pet does {} have?",
                "when is {}'s birthday?",
            ],
            chatter: [
                "morning all",
                "lol",
                "so cold today",
                "ok",
                "night everyone",
                "[Sticker]",
            ],
        },
    ]
}

async fn say(
    client: &reqwest::Client,
    base: &str,
    chat: &str,
    id: &str,
    name: &str,
    text: &str,
    to_bot: bool,
) {
    let body = json!({"conversation_id": chat, "sender_id": id, "sender_name": name,
                      "text": text, "to_bot": to_bot});
    post(client, &format!("{base}/v1/events/message"), &body)
        .await
        .unwrap_or_else(|e| panic!("message: {e}"));
}

/// The question as the plugins ask it; the injected block.
async fn ask(
    client: &reqwest::Client,
    base: &str,
    chat: &str,
    asker: (&str, &str),
    question: &str,
    with_sender: bool,
) -> String {
    say(client, base, chat, asker.0, asker.1, question, true).await;
    let mut body = json!({"conversation_id": chat, "query": question});
    if with_sender {
        body["sender_id"] = json!(asker.0);
    }
    let r = post(client, &format!("{base}/v1/events/llm_request"), &body)
        .await
        .unwrap_or_else(|e| panic!("llm_request: {e}"));
    r["injection"].as_str().unwrap_or_default().to_string()
}

/// Where `want` stands among `lines` in the block (its text XML-escaped): 0 first, `None`
/// absent.
fn rank(block: &str, lines: &[&str], want: &str) -> Option<usize> {
    let block = block
        .replace("&apos;", "'")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    let block = block.as_str();
    let mut found: Vec<(usize, &str)> = lines
        .iter()
        .filter_map(|l| block.find(*l).map(|at| (at, *l)))
        .collect();
    found.sort();
    found.iter().position(|(_, l)| *l == want)
}

#[derive(Default)]
struct Tally {
    first: usize,
    top3: usize,
    n: usize,
}

impl Tally {
    fn add(&mut self, r: Option<usize>) {
        self.n += 1;
        self.first += usize::from(r == Some(0));
        self.top3 += usize::from(r.is_some_and(|r| r < 3));
    }
    fn show(&self) -> String {
        let pct = |k: usize| 100.0 * k as f64 / self.n.max(1) as f64;
        format!(
            "first {}/{} ({:.0} %), top 3 {}/{} ({:.0} %)",
            self.first,
            self.n,
            pct(self.first),
            self.top3,
            self.n,
            pct(self.top3)
        )
    }
}

async fn first_person(client: &reqwest::Client) {
    let dir = tempfile::tempdir_in(common::bench_root()).expect("a bench dir");
    let (_serve, base) = serve::start_serve(client, dir.path(), json!({}))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let groups = groups();
    for g in &groups {
        for k in 0..KINDS {
            for m in &g.members {
                say(client, &base, g.chat, m.id, m.name, &m.facts[k], false).await;
            }
            let c = &g.members[k % g.members.len()];
            say(client, &base, g.chat, c.id, c.name, g.chatter[k], false).await;
        }
        for m in g.members.iter().filter(|m| m.renamed.is_some()) {
            let new = m.renamed.unwrap_or(m.name);
            say(client, &base, g.chat, m.id, new, g.chatter[5], false).await;
        }
    }
    serve::messages_embedded(client, &base).await;
    let (mut own, mut anonymous, mut renamed, mut named) = (
        Tally::default(),
        Tally::default(),
        Tally::default(),
        Tally::default(),
    );
    for g in &groups {
        for k in 0..KINDS {
            let lines: Vec<&str> = g.members.iter().map(|m| m.facts[k].as_str()).collect();
            for m in &g.members {
                let now = m.renamed.unwrap_or(m.name);
                for q in g.own[k] {
                    let block = ask(client, &base, g.chat, (m.id, now), q, true).await;
                    let r = rank(&block, &lines, &m.facts[k]);
                    own.add(r);
                    if m.renamed.is_some() {
                        renamed.add(r);
                    }
                    let block = ask(client, &base, g.chat, (m.id, now), q, false).await;
                    anonymous.add(rank(&block, &lines, &m.facts[k]));
                }
                // Another member asks about them by name: the old name for even kinds, the new
                // one for odd kinds.
                let asker = g
                    .members
                    .iter()
                    .find(|o| o.id != m.id)
                    .expect("a second member");
                let name = match (k % 2, m.renamed) {
                    (1, Some(new)) => new,
                    _ => m.name,
                };
                let q = g.named[k].replace("{}", name);
                let block = ask(client, &base, g.chat, (asker.id, asker.name), &q, true).await;
                named.add(rank(&block, &lines, &m.facts[k]));
            }
        }
    }
    println!("people: first-person questions as the plugins ask, the asker's own line among the members' lines of its kind");
    println!(
        "  with sender_id (default):      {}  (targets: first ≥ 90 %, top 3 ≥ 98 %)",
        own.show()
    );
    println!("  of them asked after a rename:  {}", renamed.show());
    println!("  without sender_id (as before): {}", anonymous.show());
    println!(
        "  naming another member (old or new name): {}  (target: first ≥ 90 %)",
        named.show()
    );
}

async fn forget_me(client: &reqwest::Client) {
    let dir = tempfile::tempdir_in(common::bench_root()).expect("a bench dir");
    let (_serve, base) = serve::start_serve(client, dir.path(), json!({}))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let total = common::scaled(10_000, 1_000);
    let chats: Vec<String> = (0..5)
        .map(|c| format!("qq:GroupMessage:forget-{c}"))
        .collect();
    let started = Instant::now();
    for i in 0..total {
        let member = i % 20;
        let chat = &chats[(i / 20) % chats.len()];
        let text = format!("成员{member}的第{i}条消息，标记m{member}x{i}z，今天聊了聊周末的安排");
        say(
            client,
            &base,
            chat,
            &format!("u-{member}"),
            &format!("成员{member}"),
            &text,
            false,
        )
        .await;
    }
    serve::messages_embedded(client, &base).await;
    println!(
        "people: forget me: {total} messages of 20 members in 5 chats written in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let before = serve::get(client, &format!("{base}/v1/status"))
        .await
        .unwrap_or(Value::Null);
    let rows_before = before["rows"].as_u64().unwrap_or(0);
    let theirs = (0..total).filter(|i| i % 20 == 7).count() as u64;
    let started = Instant::now();
    let r = post(
        client,
        &format!("{base}/v1/people/forget"),
        &json!({"conversation_id": chats[0], "sender_id": "u-7"}),
    )
    .await
    .unwrap_or_else(|e| panic!("forget: {e}"));
    let took = started.elapsed();
    let after = serve::get(client, &format!("{base}/v1/status"))
        .await
        .unwrap_or(Value::Null);
    let rows_after = after["rows"].as_u64().unwrap_or(0);
    let others_lost = (rows_before - rows_after).saturating_sub(theirs);
    // Their lines on disk: each carries the marker `m7x<i>z`, and no other member's holds `m7x`.
    let files = files_holding(dir.path(), "m7x");
    // Served after it returned, by this serve and a second one on the same directory.
    let second_dir = tempfile::tempdir_in(common::bench_root()).expect("a bench dir");
    let cfg = json!({"storage": {"db_dir": dir.path().join("db")}});
    let (_second, second) = serve::start_serve(client, second_dir.path(), cfg)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut served = 0;
    for b in [&base, &second] {
        for chat in &chats {
            let r = post(
                client,
                &format!("{b}/v1/people/browse"),
                &json!({"conversation_id": chat, "sender_id": "u-7", "limit": 100}),
            )
            .await
            .unwrap_or_else(|e| panic!("browse: {e}"));
            served += r["total"].as_u64().unwrap_or(0);
            let q = json!({"conversation_id": chat, "query": "成员7的消息 标记m7", "limit": 100});
            let r = post(client, &format!("{b}/v1/recall"), &q)
                .await
                .unwrap_or_else(|e| panic!("recall: {e}"));
            served += r.to_string().matches("标记m7x").count() as u64;
        }
    }
    println!(
        "people: forget me: erased {} rows (their {theirs} messages) in {:.2} s (target < 10 s); files holding their lines {} (target 0); other members' messages lost {others_lost} (target 0); their lines served after it returned {served} (target 0, two serves)",
        r["deleted"],
        took.as_secs_f64(),
        files.len(),
    );
}

/// Files under `dir` holding `needle`.
fn files_holding(dir: &std::path::Path, needle: &str) -> Vec<String> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    hits.push(path.display().to_string());
                }
            }
        }
    }
    hits
}

fn main() {
    common::runtime().block_on(async {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(300))
            .build()
            .expect("an HTTP client");
        first_person(&client).await;
        forget_me(&client).await;
    });
}
