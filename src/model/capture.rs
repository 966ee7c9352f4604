//! Activation statistics for importance matrices (`clover imatrix`).
//!
//! While a capture runs ([`start`] … [`finish`]), every product of the
//! forward pass adds, per weight tensor and per input column `j`, the sum of
//! `x[j]²` over the activation rows it multiplied, and counts the rows — what
//! llama-imatrix's collector adds for ggml's `MUL_MAT` and `MUL_MAT_ID`:
//!
//! - a dense matrix (`blk.*` only: the output head is left out, as
//!   llama-imatrix does by default) in a batch of at least 16 rows — smaller
//!   batches are skipped, as there — one sum and one count;
//! - an expert stack: one sum and one count per expert, over the rows routed
//!   to that expert (every batch size).
//!
//! Off (the normal case) each product pays one relaxed atomic load.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The sums of one tensor: `n_mat` blocks of `n_in` column sums, and one
/// row count per block (`n_mat` = 1 for a dense matrix, the expert count for
/// a stack).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Entry {
    pub sums: Vec<f32>,
    pub counts: Vec<u64>,
}

impl Entry {
    fn sized(n_in: usize, n_mat: usize) -> Entry {
        Entry {
            sums: vec![0.0; n_in * n_mat],
            counts: vec![0; n_mat],
        }
    }

    /// Adds `x²` to block `m`'s sums (f32, row after row, as ggml's
    /// collector adds).
    fn add(&mut self, m: usize, x: &[f32]) {
        let n = x.len();
        for (a, &v) in self.sums[m * n..(m + 1) * n].iter_mut().zip(x) {
            *a += v * v;
        }
        self.counts[m] += 1;
    }
}

/// Everything collected, by tensor name.
pub type Entries = BTreeMap<String, Entry>;

static ON: AtomicBool = AtomicBool::new(false);
static ENTRIES: Mutex<Option<Entries>> = Mutex::new(None);

/// Smallest batch whose dense products are collected (llama-imatrix's rule).
pub const MIN_DENSE_ROWS: usize = 16;

/// Whether a capture runs.
#[inline]
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Starts collecting (discarding anything collected before).
pub fn start() {
    *lock() = Some(Entries::new());
    ON.store(true, Ordering::Relaxed);
}

/// Stops collecting and returns what was collected.
pub fn finish() -> Entries {
    ON.store(false, Ordering::Relaxed);
    lock().take().unwrap_or_default()
}

/// A copy of what has been collected so far (for intermediate saves).
pub fn snapshot() -> Entries {
    lock().clone().unwrap_or_default()
}

fn lock() -> std::sync::MutexGuard<'static, Option<Entries>> {
    // A panic elsewhere while holding the lock leaves the sums as they were.
    ENTRIES.lock().unwrap_or_else(|e| e.into_inner())
}

fn collected(name: &str) -> bool {
    name.starts_with("blk.")
}

/// A dense product of `x` (rows of `n_in`) through tensor `name`.
pub fn dense(name: &str, x: &[f32], n_in: usize) {
    let rows = x.len() / n_in.max(1);
    if !on() || !collected(name) || rows < MIN_DENSE_ROWS {
        return;
    }
    let mut g = lock();
    let Some(entries) = g.as_mut() else { return };
    let e = entries
        .entry(name.to_string())
        .or_insert_with(|| Entry::sized(n_in, 1));
    if e.sums.len() != n_in {
        return;
    }
    for r in x.chunks_exact(n_in) {
        e.add(0, r);
    }
}

/// Routed products through expert stack `name` of `n_expert` experts: each
/// `(expert, row)` is one input row `x` (of `n_in`) sent to that expert.
pub fn routed<'x>(
    name: &str,
    n_expert: usize,
    n_in: usize,
    rows: impl Iterator<Item = (usize, &'x [f32])>,
) {
    if !on() || !collected(name) {
        return;
    }
    let mut g = lock();
    let Some(entries) = g.as_mut() else { return };
    let e = entries
        .entry(name.to_string())
        .or_insert_with(|| Entry::sized(n_in, n_expert));
    if e.counts.len() != n_expert || e.sums.len() != n_in * n_expert {
        return;
    }
    for (x, r) in rows {
        e.add(x, &r[..n_in]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The only test that starts the process-wide capture; other tests'
    /// forward passes may add their own tensors meanwhile, so only these
    /// made-up names are checked.
    #[test]
    fn sums_squares_per_column_and_counts_rows_by_the_rules() {
        start();
        let x: Vec<f32> = (0..16 * 3).map(|i| (i % 5) as f32 - 2.0).collect();
        dense("blk.9999.capture_dense.weight", &x, 3);
        // Too few rows, and not a block tensor: not collected.
        dense("blk.9999.capture_short.weight", &x[..15 * 3], 3);
        dense("output.weight", &x, 3);
        let a = [1.0f32, 2.0];
        let b = [3.0f32, -1.0];
        routed(
            "blk.9999.capture_exps.weight",
            4,
            2,
            [(2, &a[..]), (0, &b[..]), (2, &b[..])].into_iter(),
        );
        let got = finish();
        assert!(!on());
        assert!(!got.contains_key("blk.9999.capture_short.weight"));
        assert!(!got.contains_key("output.weight"));
        let d = &got["blk.9999.capture_dense.weight"];
        assert_eq!(d.counts, vec![16]);
        for j in 0..3 {
            let want: f32 = x.chunks_exact(3).map(|r| r[j] * r[j]).sum();
            assert_eq!(d.sums[j], want);
        }
        let r = &got["blk.9999.capture_exps.weight"];
        assert_eq!(r.counts, vec![1, 0, 2, 0]);
        assert_eq!(r.sums, vec![9.0, 1.0, 0.0, 0.0, 10.0, 5.0, 0.0, 0.0]);
        // Stopped: nothing more is collected.
        dense("blk.9999.capture_dense.weight", &x, 3);
        assert!(finish().is_empty());
        assert!(snapshot().is_empty());
    }
}
