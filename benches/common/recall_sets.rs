//! The dialogue sets the recall benches share (`benches/madial.rs`, `benches/context_turns.rs`):
//! MADial-Bench zh (`benches/madial/`) and RealMem (`benches/realmem/`, English), loaded into one
//! shape (a question is a dialogue's last user message, its turns before it, and the memories it
//! should find), and the MADial paper's metric code (`embedding_score_new.py`, ported: its nDCG
//! takes the ideal order from the returned list itself, and this port keeps that), so both sets
//! are scored the same way.

use std::collections::HashSet;
use std::path::Path;

use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// The paper's metrics (embedding_score_new.py)

pub fn reciprocal_rank(actual: &[i64], predicted: &[i64], k: usize) -> f64 {
    predicted
        .iter()
        .take(k)
        .position(|p| actual.contains(p))
        .map_or(0.0, |i| 1.0 / (i as f64 + 1.0))
}

pub fn dcg(relevance: &[f64], k: usize) -> f64 {
    relevance
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, r)| r / (i as f64 + 2.0).log2())
        .sum()
}

/// As the paper computes it: the ideal order is the returned list's own hits, sorted.
pub fn ndcg(actual: &[i64], predicted: &[i64], k: usize) -> f64 {
    let rel: Vec<f64> = predicted
        .iter()
        .take(k)
        .map(|p| f64::from(u8::from(actual.contains(p))))
        .collect();
    let mut ideal = rel.clone();
    ideal.sort_by(|a, b| b.total_cmp(a));
    let idcg = dcg(&ideal, k);
    if idcg == 0.0 {
        0.0
    } else {
        dcg(&rel, k) / idcg
    }
}

pub fn recall(actual: &[i64], predicted: &[i64], k: usize) -> f64 {
    let got: HashSet<&i64> = predicted.iter().take(k).collect();
    let want: HashSet<&i64> = actual.iter().collect();
    got.intersection(&want).count() as f64 / actual.len().max(1) as f64
}

/// R@1, R@3, R@5, R@10, nDCG@5, MRR@10 of one question.
pub fn metrics(actual: &[i64], predicted: &[i64]) -> [f64; 6] {
    [
        recall(actual, predicted, 1),
        recall(actual, predicted, 3),
        recall(actual, predicted, 5),
        recall(actual, predicted, 10),
        ndcg(actual, predicted, 5),
        reciprocal_rank(actual, predicted, 10),
    ]
}

// ---------------------------------------------------------------------------------------------
// The data

pub struct Memory {
    pub id: i64,
    pub user: i64,
    /// When it was said: the dialogues of a later session may find it (MADial's are all 0).
    pub session: usize,
    /// MADial: the paper's memory text, the Python repr of {'scene', 'emotion', 'event'}.
    pub text: String,
}

pub struct Turn {
    pub assistant: bool,
    pub text: String,
}

pub struct Dialogue {
    pub id: i64,
    pub user: i64,
    /// Its session: the memories of earlier sessions are its pool (MADial's are all 1).
    pub session: usize,
    pub relevant: Vec<i64>,
    /// The paper's query: every line of the dialogue before the test turn, joined.
    pub history_text: String,
    /// The turns before the test turn, oldest first (the last is the user's message).
    pub turns: Vec<Turn>,
}

impl Dialogue {
    /// The memories this question may find: its user's, from the sessions before its own.
    pub fn may_find(&self, m: &Memory) -> bool {
        m.user == self.user && m.session < self.session
    }

    /// The message asked with (the last turn) and the turns before it.
    pub fn message_and_history(&self) -> (&str, &[Turn]) {
        match self.turns.split_last() {
            Some((last, earlier)) => (last.text.as_str(), earlier),
            None => ("", &[]),
        }
    }
}

pub fn lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e} (vendored in benches/)", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .collect()
}

pub fn as_i64(v: &Value) -> i64 {
    v.as_i64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("not an id: {v}"))
}

/// Python's `str()` of a dict of strings, as the paper embedded memories.
pub fn python_repr(fields: &[(&str, &str)]) -> String {
    let quote = |s: &str| {
        if s.contains('\'') && !s.contains('"') {
            format!("\"{s}\"")
        } else {
            format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
        }
    };
    let parts: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}: {}", quote(k), quote(v)))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

pub fn memories(dir: &Path) -> Vec<Memory> {
    lines(&dir.join("MADial-Bench-zh-memory.json"))
        .into_iter()
        .flat_map(|line| {
            line.as_object()
                .into_iter()
                .flat_map(|o| o.values().cloned())
                .collect::<Vec<_>>()
        })
        .map(|m| {
            let field = |k: &str| m[k].as_str().unwrap_or_default().to_string();
            Memory {
                id: as_i64(&m["id"]),
                user: as_i64(&m["user-id"]),
                session: 0,
                text: python_repr(&[
                    ("scene", &field("scene")),
                    ("emotion", &field("emotion")),
                    ("event", &field("event")),
                ]),
            }
        })
        .collect()
}

/// `<Name>:"text"` → who said it and what.
pub fn turn(line: &str) -> Option<Turn> {
    let line = line.trim();
    let rest = line.strip_prefix('<')?;
    let (name, said) = rest.split_once(">:")?;
    let text = said.trim().trim_matches('"').trim();
    (!text.is_empty()).then(|| Turn {
        assistant: name == "Assistant",
        text: text.to_string(),
    })
}

pub fn dialogues(dir: &Path) -> Vec<Dialogue> {
    lines(&dir.join("MADial-Bench-zh-dialogue.json"))
        .into_iter()
        .map(|d| {
            let all: Vec<&str> = d["dialogue"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let test = d["test-turn"][0].as_u64().expect("test-turn") as usize;
            let before = &all[..test.min(all.len())];
            Dialogue {
                id: as_i64(&d["id"]),
                user: as_i64(&d["user-id"]),
                session: 1,
                relevant: d["relevant-id"]
                    .as_array()
                    .map(|a| a.iter().map(as_i64).collect())
                    .unwrap_or_default(),
                history_text: before.concat(),
                turns: before.iter().filter_map(|l| turn(l)).collect(),
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// RealMem (English)

/// RealMem's memories (`realmem-memory.jsonl`): each persona a user (numbered in order of first
/// appearance), each memory point with the session it was extracted in.
pub fn realmem_memories(dir: &Path) -> (Vec<Memory>, Vec<String>) {
    let mut users: Vec<String> = Vec::new();
    let memories = lines(&dir.join("realmem-memory.jsonl"))
        .into_iter()
        .map(|m| Memory {
            id: as_i64(&m["id"]),
            user: user_number(&mut users, m["user"].as_str().unwrap_or_default()),
            session: m["session"].as_u64().expect("a session") as usize,
            text: m["content"].as_str().unwrap_or_default().to_string(),
        })
        .collect();
    (memories, users)
}

/// RealMem's questions (`realmem-dialogue.jsonl`): the turns of its session before the query,
/// then the query as the user's last message; `users` from [`realmem_memories`].
pub fn realmem_dialogues(dir: &Path, users: &mut Vec<String>) -> Vec<Dialogue> {
    lines(&dir.join("realmem-dialogue.jsonl"))
        .into_iter()
        .map(|q| {
            let mut turns: Vec<Turn> = q["turns"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| Turn {
                    assistant: t["role"].as_str() == Some("assistant"),
                    text: t["content"].as_str().unwrap_or_default().trim().to_string(),
                })
                .filter(|t| !t.text.is_empty())
                .collect();
            turns.push(Turn {
                assistant: false,
                text: q["query"].as_str().unwrap_or_default().trim().to_string(),
            });
            Dialogue {
                id: as_i64(&q["id"]),
                user: user_number(users, q["user"].as_str().unwrap_or_default()),
                session: q["session"].as_u64().expect("a session") as usize,
                relevant: q["relevant-id"]
                    .as_array()
                    .map(|a| a.iter().map(as_i64).collect())
                    .unwrap_or_default(),
                history_text: turns
                    .iter()
                    .map(|t| t.text.as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
                turns,
            }
        })
        .collect()
}

fn user_number(users: &mut Vec<String>, name: &str) -> i64 {
    let at = users.iter().position(|u| u == name).unwrap_or_else(|| {
        users.push(name.to_string());
        users.len() - 1
    });
    at as i64
}
