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
//! The products show their inputs through the pass's hook (`observe.rs`);
//! off (the normal case) each pays one relaxed atomic load.

use std::collections::BTreeMap;

use super::observe::{self, Observer, Seen};

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

/// Smallest batch whose dense products are collected (llama-imatrix's rule).
pub const MIN_DENSE_ROWS: usize = 16;

const KIND: &str = "capture";

/// The capture's watcher of the pass's hook (`observe.rs`).
struct Capture(Entries);

impl Observer for Capture {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn see(&mut self, name: &str, _il: isize, rows: usize, seen: &Seen) {
        if !collected(name) {
            return;
        }
        match *seen {
            Seen::Product { x, n_in } if rows >= MIN_DENSE_ROWS => {
                let e = self
                    .0
                    .entry(name.to_string())
                    .or_insert_with(|| Entry::sized(n_in, 1));
                if e.sums.len() != n_in {
                    return;
                }
                for r in x.chunks_exact(n_in) {
                    e.add(0, r);
                }
            }
            Seen::Routed {
                n_expert,
                n_in,
                rows,
            } => {
                let e = self
                    .0
                    .entry(name.to_string())
                    .or_insert_with(|| Entry::sized(n_in, n_expert));
                if e.counts.len() != n_expert || e.sums.len() != n_in * n_expert {
                    return;
                }
                for &(x, r) in rows {
                    e.add(x, &r[..n_in]);
                }
            }
            _ => {}
        }
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// Whether a capture runs.
#[inline]
pub fn on() -> bool {
    observe::on() && observe::with(KIND, |_| ()).is_some()
}

/// Starts collecting (discarding anything collected before).
pub fn start() {
    observe::install(Box::new(Capture(Entries::new())));
}

fn entries(o: &mut dyn Observer, take: bool) -> Entries {
    match o.as_any_mut().downcast_mut::<Capture>() {
        Some(c) if take => std::mem::take(&mut c.0),
        Some(c) => c.0.clone(),
        None => Entries::new(),
    }
}

/// Stops collecting and returns what was collected.
pub fn finish() -> Entries {
    observe::remove(KIND)
        .map(|mut o| entries(o.as_mut(), true))
        .unwrap_or_default()
}

/// A copy of what has been collected so far (for intermediate saves).
pub fn snapshot() -> Entries {
    observe::with(KIND, |o| entries(o, false)).unwrap_or_default()
}

fn collected(name: &str) -> bool {
    name.starts_with("blk.")
}

pub use super::observe::{product as dense, routed};

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
