//! One scope's rows in memory, laid out for an exact scan: int8 codes to score every row
//! cheaply (384 bytes a row, a quarter of the f32 vector), f16 copies to re-rank the best
//! candidates exactly enough that the order matches an f32 search.

use half::f16;

use super::super::filter::RowFilter;
use super::super::record::MemoryRecord;
use crate::embed::{Script, ScriptRescale};

/// Rows of one `memory_scope` value (or of the NULL scope).
#[derive(Default)]
pub struct Partition {
    dim: usize,
    pub(super) records: Vec<MemoryRecord>,
    /// `expires_at` in microseconds, checked during the scan (expired rows never compete).
    expires: Vec<Option<i64>>,
    /// Rows gone since the load: moved to another partition (a backfilled scope) or removed
    /// by a delete or an update. Skipped; their memory is freed by the next reload.
    gone: Vec<bool>,
    /// Each row's script, for a search that rescales the query's other script.
    scripts: Vec<Script>,
    /// Unit vector × 127 / its largest component, rounded: row i is `codes[i*dim..][..dim]`.
    codes: Vec<i8>,
    /// What one code unit is worth in row i (its largest component / 127).
    scales: Vec<f32>,
    /// The unit vector, for the re-ranking.
    fine: Vec<f16>,
    record_bytes: usize,
}

/// A scored row: which partition, which row, and its (approximate or exact) similarity.
#[derive(Debug, Clone, Copy)]
pub struct Scored {
    pub similarity: f32,
    pub partition: usize,
    pub row: usize,
}

/// The query, normalised and quantised once per search, with how it rescales the other script.
pub struct Query {
    codes: Vec<i8>,
    scale: f32,
    unit: Vec<f32>,
    rescale: Option<ScriptRescale>,
}

impl Query {
    pub(crate) fn new(vector: &[f32], rescale: Option<ScriptRescale>) -> Query {
        let unit = normalised(vector);
        let (codes, scale) = quantise(&unit);
        Query {
            codes,
            scale,
            unit,
            rescale,
        }
    }

    /// A row's similarity on the query's scale.
    #[inline(always)]
    fn scaled(&self, script: Script, similarity: f32) -> f32 {
        match &self.rescale {
            Some(r) => r.apply(script, similarity),
            None => similarity,
        }
    }
}

impl Partition {
    pub(crate) fn new(dim: usize) -> Partition {
        Partition {
            dim,
            ..Partition::default()
        }
    }

    pub(super) fn len(&self) -> usize {
        self.records.len()
    }

    /// Heap bytes this partition holds: the vectors' two copies, and each record with its
    /// text (kept as rows arrive, so `/v1/status` does not walk the rows).
    pub(super) fn bytes(&self) -> usize {
        self.record_bytes
            + self.codes.capacity()
            + self.fine.capacity() * 2
            + self.scales.capacity() * 4
            + self.expires.capacity() * std::mem::size_of::<Option<i64>>()
            + self.gone.capacity()
            + self.scripts.capacity()
    }

    /// Add a row. A vector of another dimension is refused by the caller (the table's schema
    /// fixes it), so here it is truncated or zero-padded rather than checked twice.
    pub(crate) fn push(&mut self, record: MemoryRecord, vector: &[f32]) {
        let mut v = vec![0.0; self.dim];
        for (slot, x) in v.iter_mut().zip(vector) {
            *slot = *x;
        }
        let unit = normalised(&v);
        let (codes, scale) = quantise(&unit);
        self.expires
            .push(record.expires_at.map(|t| t.timestamp_micros()));
        self.gone.push(false);
        self.scripts.push(Script::of(&record.content));
        self.record_bytes += record_bytes(&record);
        self.records.push(record);
        self.codes.extend_from_slice(&codes);
        self.scales.push(scale);
        self.fine.extend(unit.iter().map(|x| f16::from_f32(*x)));
    }

    /// Offer every admitted row's approximate similarity to `top`. The CPU check runs once
    /// per scan, so the AVX2 build inlines the dot product into the row loop.
    pub(crate) fn scan(&self, partition: usize, q: &Query, rows: &RowFilter, top: &mut TopN) {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2, checked just above.
                return unsafe { self.scan_avx2(partition, q, rows, top) };
            }
        }
        self.scan_rows(partition, q, rows, top)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn scan_avx2(&self, partition: usize, q: &Query, rows: &RowFilter, top: &mut TopN) {
        self.scan_rows(partition, q, rows, top)
    }

    #[inline(always)]
    fn scan_rows(&self, partition: usize, q: &Query, rows: &RowFilter, top: &mut TopN) {
        let dim = self.dim;
        for (row, code) in self.codes.chunks_exact(dim).enumerate() {
            if self.gone[row]
                || !rows.admits_expiry(self.expires[row])
                || !self.in_window(row, rows)
            {
                continue;
            }
            let dot = dot_i8(&q.codes, code) as f32;
            top.offer(Scored {
                similarity: q.scaled(self.scripts[row], dot * q.scale * self.scales[row]),
                partition,
                row,
            });
        }
    }

    /// The similarity of one row from its f16 copy (error ~1e-4, far below the int8 scan's),
    /// on the query's scale.
    pub(crate) fn exact(&self, q: &Query, row: usize) -> f32 {
        let v = &self.fine[row * self.dim..(row + 1) * self.dim];
        let similarity = v.iter().zip(&q.unit).map(|(a, b)| a.to_f32() * b).sum();
        q.scaled(self.scripts[row], similarity)
    }

    /// Row `row`'s unit vector, from its f16 copy.
    pub(crate) fn unit_vector(&self, row: usize) -> Vec<f32> {
        self.fine[row * self.dim..(row + 1) * self.dim]
            .iter()
            .map(|x| x.to_f32())
            .collect()
    }

    /// Whether row `row` is alive for the filter (still here, not expired at its time, and
    /// created in the filter's window if it has one).
    pub(super) fn alive(&self, row: usize, rows: &RowFilter) -> bool {
        !self.gone.get(row).copied().unwrap_or(true)
            && self
                .expires
                .get(row)
                .is_some_and(|e| rows.admits_expiry(*e))
            && self.in_window(row, rows)
    }

    /// Whether row `row` was created in the filter's time window (every row without one) and
    /// is of the filter's tier (every row without one).
    #[inline(always)]
    fn in_window(&self, row: usize, rows: &RowFilter) -> bool {
        if rows.created.is_none() && rows.tier.is_none() {
            return true;
        }
        let record = self.records.get(row);
        rows.admits_created(
            record
                .and_then(|r| r.created_at)
                .map(|t| t.timestamp_micros()),
        ) && record.is_some_and(|r| rows.admits_type(&r.memory_type))
    }

    /// Take row `row` out of this partition (it moved to another scope): it is skipped from now
    /// on, and its record and vector (from the f16 copy) are returned for the new partition.
    pub(super) fn take(&mut self, row: usize) -> Option<(MemoryRecord, Vec<f32>)> {
        if *self.gone.get(row)? {
            return None;
        }
        self.gone[row] = true;
        let vector = self.fine[row * self.dim..(row + 1) * self.dim]
            .iter()
            .map(|x| x.to_f32())
            .collect();
        Some((self.records[row].clone(), vector))
    }

    /// Remove the rows whose id is in `ids` (a delete, or the old values of updated rows);
    /// how many went.
    pub(super) fn remove(&mut self, ids: &std::collections::HashSet<String>) -> usize {
        let mut removed = 0;
        for (row, record) in self.records.iter().enumerate() {
            if !self.gone[row] && ids.contains(&record.id) {
                self.gone[row] = true;
                removed += 1;
            }
        }
        removed
    }

    pub(crate) fn record(&self, row: usize) -> &MemoryRecord {
        &self.records[row]
    }
}

/// The `n` best offers seen so far (a min-heap on similarity, so a poor row costs one compare).
/// Equal scores are ordered by position (earlier partition and row first), so that ties, which
/// BM25 gives look-alike rows often, come out the same way on every search.
pub struct TopN {
    n: usize,
    heap: std::collections::BinaryHeap<std::cmp::Reverse<ByScore>>,
}

#[derive(Debug, Clone, Copy)]
struct ByScore(Scored);

impl PartialEq for ByScore {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}
impl Eq for ByScore {}
impl PartialOrd for ByScore {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ByScore {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0
            .similarity
            .total_cmp(&other.0.similarity)
            .then_with(|| (other.0.partition, other.0.row).cmp(&(self.0.partition, self.0.row)))
    }
}

impl TopN {
    pub(crate) fn new(n: usize) -> TopN {
        TopN {
            n: n.max(1),
            heap: std::collections::BinaryHeap::with_capacity(n.max(1) + 1),
        }
    }

    pub(super) fn offer(&mut self, s: Scored) {
        if self.heap.len() < self.n {
            self.heap.push(std::cmp::Reverse(ByScore(s)));
        } else if let Some(worst) = self.heap.peek() {
            if ByScore(s) > worst.0 {
                self.heap.pop();
                self.heap.push(std::cmp::Reverse(ByScore(s)));
            }
        }
    }

    /// Best first.
    pub(crate) fn into_sorted(self) -> Vec<Scored> {
        let mut v: Vec<ByScore> = self.heap.into_iter().map(|r| r.0).collect();
        v.sort_by(|a, b| b.cmp(a));
        v.into_iter().map(|b| b.0).collect()
    }
}

fn record_bytes(r: &MemoryRecord) -> usize {
    std::mem::size_of::<MemoryRecord>()
        + r.id.capacity()
        + r.content.capacity()
        + r.reasoning.as_ref().map_or(0, String::capacity)
        + r.tags.iter().map(|t| t.capacity() + 24).sum::<usize>()
        + r.memory_type.capacity()
        + r.conversation_id.as_ref().map_or(0, String::capacity)
        + r.memory_scope.as_ref().map_or(0, String::capacity)
        + r.scope_source.as_ref().map_or(0, String::capacity)
}

fn normalised(v: &[f32]) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        v.iter().map(|x| x / norm).collect()
    } else {
        vec![0.0; v.len()]
    }
}

/// Symmetric per-vector quantisation: the largest component maps to ±127.
fn quantise(unit: &[f32]) -> (Vec<i8>, f32) {
    let max = unit.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    if max == 0.0 {
        return (vec![0; unit.len()], 0.0);
    }
    let codes = unit
        .iter()
        .map(|x| (x / max * 127.0).round().clamp(-127.0, 127.0) as i8)
        .collect();
    (codes, max / 127.0)
}

/// Integer dot product, written so the compiler vectorises it (see [`Partition::scan`]).
#[inline(always)]
fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| i32::from(*x) * i32::from(*y))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> MemoryRecord {
        MemoryRecord {
            id: id.into(),
            content: String::new(),
            reasoning: None,
            tags: vec![],
            memory_type: "fact".into(),
            strength: 5,
            is_active: true,
            conversation_id: None,
            created_at: None,
            memory_scope: Some("s".into()),
            scope_source: None,
            expires_at: None,
            last_recalled_at: None,
            speaker_id: None,
            speaker_name: None,
            source_ids: vec![],
            about_ids: vec![],
            source_conversations: vec![],
        }
    }

    fn all() -> RowFilter {
        RowFilter {
            scopes: None,
            alive_at: None,
            created: None,
            tier: None,
        }
    }

    #[test]
    fn quantised_scores_track_cosine() {
        let mut p = Partition::new(4);
        p.push(record("a"), &[1.0, 0.0, 0.0, 0.0]);
        p.push(record("b"), &[0.0, 2.0, 0.0, 0.0]);
        p.push(record("c"), &[1.0, 1.0, 0.0, 0.0]);
        let q = Query::new(&[3.0, 0.1, 0.0, 0.0], None);
        let mut top = TopN::new(2);
        p.scan(0, &q, &all(), &mut top);
        let best = top.into_sorted();
        assert_eq!(best.len(), 2);
        assert_eq!(p.record(best[0].row).id, "a");
        assert_eq!(p.record(best[1].row).id, "c");
        let exact = 3.0 / (9.01f32).sqrt();
        assert!((p.exact(&q, best[0].row) - exact).abs() < 1e-3);
    }

    #[test]
    fn a_rescaled_script_is_scored_on_the_querys_scale_in_the_scan_and_the_re_rank() {
        let mut p = Partition::new(2);
        let mut chinese = record("zh");
        chinese.content = "妈妈身高160，衣服一般穿M".into();
        let mut english = record("en");
        english.content = "Mom's new glasses: left eye -4.25".into();
        // Raw: the Chinese row is nearer (0.9 against 0.8).
        p.push(chinese, &[0.9, (1.0f32 - 0.81).sqrt()]);
        p.push(english, &[0.8, 0.6]);
        let rank = |q: &Query| {
            let mut top = TopN::new(2);
            p.scan(0, q, &all(), &mut top);
            top.into_sorted()
                .iter()
                .map(|s| (p.record(s.row).id.clone(), p.exact(q, s.row)))
                .collect::<Vec<_>>()
        };
        let raw = rank(&Query::new(&[1.0, 0.0], None));
        assert_eq!(raw[0].0, "zh");
        let lifted = rank(&Query::new(
            &[1.0, 0.0],
            Some(ScriptRescale {
                script: Script::Latin,
                mul: 1.0,
                add: 0.2,
            }),
        ));
        assert_eq!(lifted[0].0, "en");
        assert!((lifted[0].1 - 1.0).abs() < 1e-2, "{lifted:?}");
        assert!(
            (lifted[1].1 - 0.9).abs() < 1e-2,
            "the Chinese row keeps its similarity"
        );
    }

    #[test]
    fn expired_rows_do_not_compete() {
        let mut p = Partition::new(2);
        let mut old = record("expired");
        old.expires_at = Some(chrono::Utc::now() - chrono::Duration::seconds(1));
        p.push(old, &[1.0, 0.0]);
        p.push(record("alive"), &[0.0, 1.0]);
        let rows = RowFilter {
            scopes: None,
            alive_at: Some(chrono::Utc::now()),
            created: None,
            tier: None,
        };
        let mut top = TopN::new(5);
        p.scan(0, &Query::new(&[1.0, 0.0], None), &rows, &mut top);
        let ids: Vec<_> = top
            .into_sorted()
            .iter()
            .map(|s| p.record(s.row).id.clone())
            .collect();
        assert_eq!(ids, vec!["alive"]);
    }

    #[test]
    fn the_avx2_scan_ranks_like_the_portable_one() {
        let mut p = Partition::new(384);
        for i in 0..50 {
            let v: Vec<f32> = (0..384)
                .map(|d| (((i * 37 + d * 91) % 255) as f32) - 127.0)
                .collect();
            p.push(record(&format!("r{i}")), &v);
        }
        let q = Query::new(
            &(0..384)
                .map(|d| ((d * 13 % 97) as f32) - 48.0)
                .collect::<Vec<_>>(),
            None,
        );
        let (mut a, mut b) = (TopN::new(10), TopN::new(10));
        p.scan(0, &q, &all(), &mut a);
        p.scan_rows(0, &q, &all(), &mut b);
        let rows = |t: TopN| t.into_sorted().iter().map(|s| s.row).collect::<Vec<_>>();
        assert_eq!(rows(a), rows(b));
    }

    #[test]
    fn top_n_breaks_ties_by_position_whatever_the_offer_order() {
        let offers = |order: &[usize]| {
            let mut top = TopN::new(3);
            for &row in order {
                let similarity = if row == 9 { 2.0 } else { 1.0 };
                top.offer(Scored {
                    similarity,
                    partition: 0,
                    row,
                });
            }
            top.into_sorted().iter().map(|s| s.row).collect::<Vec<_>>()
        };
        assert_eq!(offers(&[5, 1, 9, 3, 2, 4]), [9, 1, 2]);
        assert_eq!(offers(&[4, 2, 3, 1, 9, 5]), [9, 1, 2]);
    }
}
