//! The neutral workload format shared by `cargo bench --bench workload` and the other
//! systems of `make bench-compare` (benches/compare/others.py):
//! `vectors.f32` (N×dim little-endian f32, row-major), `scopes.txt` (N lines), `queries.f32`
//! (Q×dim), `query_scopes.txt` (Q lines), `name.txt`. Query i may see rows of its own scope
//! and `public`.

use std::collections::HashSet;
use std::path::Path;

use scopemem::embed::Embedder;

use super::{embed_all, question, sentence, Rng, SCOPES};

pub const DIM: usize = 384;
/// Private chats of a handful of rows each (≤ 0.1% of the table).
pub const TINY_SCOPES: usize = 10;
/// Share of queries asked from a tiny scope, near its rows.
pub const TINY_QUERY_SHARE: f64 = 0.2;

pub struct Workload {
    pub name: String,
    pub dim: usize,
    pub vectors: Vec<f32>,
    pub scopes: Vec<String>,
    pub queries: Vec<f32>,
    pub query_scopes: Vec<String>,
}

impl Workload {
    pub fn n(&self) -> usize {
        self.scopes.len()
    }

    pub fn q(&self) -> usize {
        self.query_scopes.len()
    }

    pub fn vector(&self, i: usize) -> &[f32] {
        &self.vectors[i * self.dim..(i + 1) * self.dim]
    }

    pub fn query(&self, i: usize) -> &[f32] {
        &self.queries[i * self.dim..(i + 1) * self.dim]
    }

    pub fn is_complete(dir: &Path) -> bool {
        [
            "vectors.f32",
            "scopes.txt",
            "queries.f32",
            "query_scopes.txt",
        ]
        .iter()
        .all(|f| dir.join(f).exists())
    }

    pub fn read(dir: &Path) -> std::io::Result<Workload> {
        let lines = |f: &str| -> std::io::Result<Vec<String>> {
            Ok(std::fs::read_to_string(dir.join(f))?
                .lines()
                .map(String::from)
                .collect())
        };
        let floats = |f: &str| -> std::io::Result<Vec<f32>> {
            Ok(std::fs::read(dir.join(f))?
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect())
        };
        let scopes = lines("scopes.txt")?;
        let vectors = floats("vectors.f32")?;
        let dim = vectors.len() / scopes.len().max(1);
        let name = std::fs::read_to_string(dir.join("name.txt"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| dir.display().to_string());
        Ok(Workload {
            name,
            dim,
            vectors,
            scopes,
            queries: floats("queries.f32")?,
            query_scopes: lines("query_scopes.txt")?,
        })
    }

    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        std::fs::write(dir.join("name.txt"), format!("{}\n", self.name))?;
        std::fs::write(dir.join("scopes.txt"), self.scopes.join("\n") + "\n")?;
        std::fs::write(
            dir.join("query_scopes.txt"),
            self.query_scopes.join("\n") + "\n",
        )?;
        std::fs::write(dir.join("queries.f32"), bytes(&self.queries))?;
        // Written last: its presence marks a complete directory.
        std::fs::write(dir.join("vectors.f32"), bytes(&self.vectors))
    }

    /// Whether query `qi` may see row `row`.
    pub fn admits(&self, qi: usize, row: usize) -> bool {
        let s = &self.scopes[row];
        s == "public" || *s == self.query_scopes[qi]
    }

    /// Exact filtered top-k of query `qi` by cosine (every vector here is unit length).
    pub fn exact_top(&self, qi: usize, k: usize) -> Vec<usize> {
        let q = self.query(qi);
        let mut scored: Vec<(f32, usize)> = (0..self.n())
            .filter(|&i| self.admits(qi, i))
            .map(|i| (dot(q, self.vector(i)), i))
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        scored.into_iter().take(k).map(|(_, i)| i).collect()
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= n);
    v
}

/// A standard normal sample (Box–Muller), so normalised vectors are uniform on the sphere.
fn normal(rng: &mut Rng) -> f32 {
    let u1 = ((rng.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    let u2 = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
    ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
}

/// Row scopes: 30% public, the rest over 50 scopes, and `TINY_SCOPES` private chats of
/// `max(5, n / 20000)` rows each.
fn row_scopes(n: usize, rng: &mut Rng) -> Vec<String> {
    let tiny_rows = (n / 20_000).max(5);
    (0..n)
        .map(|i| {
            if i < TINY_SCOPES * tiny_rows {
                format!("c_tiny_{:02}", i / tiny_rows)
            } else if rng.next() % 10 < 3 {
                "public".into()
            } else {
                format!("scope_{:02}", rng.next() % SCOPES as u64)
            }
        })
        .collect()
}

/// Which queries come from tiny scopes (and which of their rows they are near).
fn query_plan(q: usize, scopes: &[String], rng: &mut Rng) -> Vec<(String, Option<usize>)> {
    let tiny: Vec<usize> = (0..scopes.len())
        .filter(|&i| scopes[i].starts_with("c_tiny_"))
        .collect();
    (0..q)
        .map(|_| {
            if !tiny.is_empty() && (rng.next() % 1000) as f64 / 1000.0 < TINY_QUERY_SHARE {
                let row = tiny[(rng.next() % tiny.len() as u64) as usize];
                (scopes[row].clone(), Some(row))
            } else {
                (format!("scope_{:02}", rng.next() % SCOPES as u64), None)
            }
        })
        .collect()
}

/// Uniform random unit vectors; tiny-scope queries are one of their rows plus noise.
pub fn uniform(n: usize, q: usize) -> Workload {
    let mut rng = Rng(0x5EED ^ n as u64);
    let scopes = row_scopes(n, &mut rng);
    let mut vectors = Vec::with_capacity(n * DIM);
    for _ in 0..n {
        vectors.extend(unit((0..DIM).map(|_| normal(&mut rng)).collect()));
    }
    let mut queries = Vec::with_capacity(q * DIM);
    let mut query_scopes = Vec::with_capacity(q);
    for (scope, near) in query_plan(q, &scopes, &mut rng) {
        let v: Vec<f32> = match near {
            Some(row) => (0..DIM)
                .map(|d| vectors[row * DIM + d] + 0.05 * normal(&mut rng))
                .collect(),
            None => (0..DIM).map(|_| normal(&mut rng)).collect(),
        };
        queries.extend(unit(v));
        query_scopes.push(scope);
    }
    Workload {
        name: format!("uniform-{n}"),
        dim: DIM,
        vectors,
        scopes,
        queries,
        query_scopes,
    }
}

const ZH_WHO: &[&str] = &[
    "奶奶",
    "爷爷",
    "妈妈",
    "爸爸",
    "小李",
    "王经理",
    "张老师",
    "表哥",
    "同事小陈",
    "邻居阿姨",
    "陈静",
    "老周",
];
const ZH_DOES: &[&str] = &[
    "喜欢",
    "想学",
    "推荐了",
    "不吃",
    "正在准备",
    "忘了带",
    "订好了",
];
const ZH_WHAT: &[&str] = &[
    "红烧肉",
    "钢琴课",
    "周末的露营",
    "季度报告",
    "新买的相机",
    "广场舞",
    "羽毛球",
    "体检报告",
    "生日蛋糕",
    "搬家的事",
    "去杭州的火车票",
    "年夜饭",
    "英语考试",
    "牙医预约",
];
const ZH_WHEN: &[&str] = &[
    "上周一",
    "下周末",
    "每天早上",
    "周六晚上",
    "从去年开始",
    "春节期间",
    "截止日期前",
    "晚饭后",
    "三月份",
    "这个周五",
];

pub fn zh_sentence(rng: &mut Rng) -> String {
    format!(
        "{}{}{}{}。",
        rng.pick(ZH_WHO),
        rng.pick(ZH_WHEN),
        rng.pick(ZH_DOES),
        rng.pick(ZH_WHAT)
    )
}

/// Model embeddings of distinct memory-like sentences (EN, and 10% ZH); queries are
/// held-out questions, and tiny-scope queries ask about one of that scope's memories.
pub async fn realistic(e: &dyn Embedder, n: usize, q: usize) -> Workload {
    let mut rng = Rng(0xBEEF ^ n as u64);
    let scopes = row_scopes(n, &mut rng);
    let mut seen = HashSet::with_capacity(n);
    let mut texts = Vec::with_capacity(n);
    while texts.len() < n {
        let s = if rng.next().is_multiple_of(10) {
            zh_sentence(&mut rng)
        } else {
            sentence(&mut rng)
        };
        if seen.insert(s.clone()) {
            texts.push(s);
        }
    }
    let plan = query_plan(q, &scopes, &mut rng);
    let query_texts: Vec<String> = plan
        .iter()
        .map(|(_, near)| match near {
            Some(row) => format!("Remind me: {}", texts[*row]),
            None => question(&mut rng),
        })
        .collect();
    eprintln!("embedding {n} rows and {q} queries with the model");
    let vectors: Vec<f32> = embed_all(e, texts)
        .await
        .into_iter()
        .flat_map(unit)
        .collect();
    let queries: Vec<f32> = embed_all(e, query_texts)
        .await
        .into_iter()
        .flat_map(unit)
        .collect();
    Workload {
        name: format!("realistic-{n}"),
        dim: DIM,
        vectors,
        scopes,
        queries,
        query_scopes: plan.into_iter().map(|(s, _)| s).collect(),
    }
}
