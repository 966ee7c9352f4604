//! Matrix products over quantized weights, split across rayon threads.
//!
//! Shapes (ggml `{n_in, n_out}`): a weight matrix is `n_out` rows of `n_in`
//! elements of type `ty`, row-major, `ty.row_bytes(n_in)` bytes per row.
//! Activations are `rows` rows of `n_in` elements already converted once into
//! `ty.vec_dot_type()` (docs/DESIGN.md §2.6) by the caller, e.g. with
//! [`quantize_rows`]. Every product is
//!
//! ```text
//! y[t][o] = vec_dot(W[o], x̃[t])        f32 accumulation inside vec_dot
//! ```
//!
//! Every driver runs the kernel [`KernelTable::plan`] picks for the product
//! and its numerics [`Mode`] (see [`crate::plan`]).
//!
//! - [`matmul`] on one activation row (a mat-vec): output rows are split
//!   across threads in disjoint `par_chunks_mut` chunks of at least
//!   [`MIN_ROWS_PER_TASK`] rows; [`matvec_serial`] is the same on one thread.
//! - [`matmul`] on many activation rows. Each task owns a chunk of weight rows
//!   and, per tile of [`ACT_TILE`] activation rows, reads each of its weight
//!   rows once (from memory on the first tile, from cache after) and dots it
//!   with every activation row of the tile (in [`Mode::Decode`] the tier's
//!   multi-row `GemmFn` when it has one for the type, which equals the
//!   per-pair `vec_dot` bit for bit, else one `vec_dot` per pair). Results
//!   land in a caller-provided `[o][t]` tile that is then transposed into
//!   `y[t][o]`. In [`Mode::Decode`] a row of a batch therefore gets exactly
//!   what it gets alone (speculative verify == single-token decode).
//! - [`expert_gather`]: row `r` of the activations is multiplied by its own
//!   expert's matrix (`expert_of[r]`), all rows in one parallel region (one
//!   `vec_dot` per pair: the model uses it only when experts are hardly
//!   shared; shared experts go through [`matmul`]).
//!
//! No allocation happens inside the products: scratch comes from the caller.

use std::fmt;

use rayon::prelude::*;

use crate::plan::{Kernel, Layout, Mode};
use crate::sig::{QuantizeFn, VecDotFn};
use crate::{GgmlType, KernelTable};

/// Fewest output rows one rayon task computes: below this, scheduling costs
/// show next to the dots (one 2048-wide row dot is a fraction of a
/// microsecond).
pub const MIN_ROWS_PER_TASK: usize = 16;

/// Activation rows dotted against one cached weight row before moving on.
pub const ACT_TILE: usize = 32;

/// Floats of the tile one block of [`matmul`] fills (512 KiB: a block's
/// outputs stay in L2 for their transposition).
const TILE_FLOATS: usize = 1 << 17;

/// Weight rows per block of [`matmul`] for `rows` activation rows: as many
/// as [`TILE_FLOATS`] holds, in whole steps of the transposition (16 rows,
/// whole repacked groups). Each block is one parallel region, and a region
/// costs its wake-ups: with fixed blocks of 1024 rows a 4-row product of a
/// Q6_K `attn_qkv` gained little from a second thread (`dense_stream`;
/// docs/PERFORMANCE.md, "Batched passes").
pub fn row_block(rows: usize) -> usize {
    (TILE_FLOATS / rows.max(1)).max(16) / 16 * 16
}

/// A shape that does not fit its bytes or its partner.
#[derive(Clone, Debug, PartialEq, Eq)]
// Same newtype error as cpu.rs::IsaError: each module's failure is its own type.
pub struct ShapeError(pub String);

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ShapeError {}

fn row_bytes(ty: GgmlType, n: usize) -> Result<usize, ShapeError> {
    ty.row_bytes(n as u64)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| {
            ShapeError(format!(
                "{n} elements are not whole {ty} blocks of {}",
                ty.block_size()
            ))
        })
}

/// A zero-copy weight matrix: `n_out` rows of `n_in` elements of `ty`.
#[derive(Clone, Copy, Debug)]
pub struct QMatrix<'a> {
    pub ty: GgmlType,
    pub n_in: usize,
    pub n_out: usize,
    row_bytes: usize,
    data: &'a [u8],
    /// Where the kernels read the rows: the file's, or clover's copy.
    rows: Rows<'a>,
    /// One routed expert of a stack ([`QExperts::expert`]): ggml's
    /// `MUL_MAT_ID`, which in llama.cpp's batch order never takes tinyBLAS.
    pub expert: bool,
}

/// A matrix's [`Layout`] with the bytes of its copy: which rows the kernels
/// read, and so which family of kernels [`KernelTable::plan`] picks from
/// (each layout plans with its own method).
#[derive(Clone, Copy, Debug)]
pub enum Rows<'a> {
    /// The file's rows: the tier's per-type dots, multi-row and prompt
    /// kernels, and llama.cpp's orders.
    File,
    /// clover's eight-row copy ([`crate::repack`]): the packed product for
    /// every batch size, the packed prompt kernel for long batches.
    Packed(&'a [u8]),
    /// The copy for batches, and the file's rows beside it for mat-vecs,
    /// which read them in the copy's arithmetic (the same bits).
    PackedAndFile(&'a [u8]),
}

impl<'a> Rows<'a> {
    /// The layout `layout` with the copy `copy` (the copy is ignored for
    /// [`Layout::FileRows`]; without one every layout is the file's rows).
    pub fn of(layout: Layout, copy: Option<&'a [u8]>) -> Rows<'a> {
        match (layout, copy) {
            (Layout::FileRows, _) | (_, None) => Rows::File,
            (Layout::Packed, Some(p)) => Rows::Packed(p),
            (Layout::PackedAndFileRows, Some(p)) => Rows::PackedAndFile(p),
        }
    }

    pub fn layout(&self) -> Layout {
        match self {
            Rows::File => Layout::FileRows,
            Rows::Packed(_) => Layout::Packed,
            Rows::PackedAndFile(_) => Layout::PackedAndFileRows,
        }
    }

    /// The copy's bytes, if the rows have one.
    pub fn copy(&self) -> Option<&'a [u8]> {
        match *self {
            Rows::File => None,
            Rows::Packed(p) | Rows::PackedAndFile(p) => Some(p),
        }
    }
}

impl<'a> QMatrix<'a> {
    /// Views `data` (at least `n_out` rows of `ty.row_bytes(n_in)` bytes;
    /// extra bytes are ignored) as a matrix.
    pub fn new(
        ty: GgmlType,
        n_in: usize,
        n_out: usize,
        data: &'a [u8],
    ) -> Result<Self, ShapeError> {
        let rb = row_bytes(ty, n_in)?;
        let need = rb
            .checked_mul(n_out)
            .ok_or_else(|| ShapeError(format!("{n_out} rows of {rb} bytes overflow")))?;
        if data.len() < need {
            return Err(ShapeError(format!(
                "{n_out} x {n_in} {ty} needs {need} bytes, got {}",
                data.len()
            )));
        }
        Ok(QMatrix {
            ty,
            n_in,
            n_out,
            row_bytes: rb,
            data: &data[..need],
            rows: Rows::File,
            expert: false,
        })
    }

    /// The same matrix with its rows also in the repacked layout of
    /// [`crate::repack`] (`packed`, built by [`crate::repack::repack`] from
    /// these bytes). Products take it wherever the kernel table has
    /// [`KernelTable::packed_gemm`] for the type, for every batch size, so
    /// decoding and verify batches keep the same bits.
    pub fn with_packed(self, packed: &'a [u8]) -> Result<Self, ShapeError> {
        if !crate::repack::packable(self.ty, self.n_in, self.n_out) {
            return Err(ShapeError(format!(
                "{} x {} {} cannot be repacked",
                self.n_out, self.n_in, self.ty
            )));
        }
        let need = crate::repack::packed_bytes(self.ty, self.n_in, self.n_out);
        if packed.len() < need || !(packed.as_ptr() as usize).is_multiple_of(2) {
            return Err(ShapeError(format!(
                "repacked {} x {} {} needs {need} aligned bytes, got {}",
                self.n_out,
                self.n_in,
                self.ty,
                packed.len()
            )));
        }
        Ok(QMatrix {
            rows: Rows::Packed(&packed[..need]),
            ..self
        })
    }

    /// The same matrix with its rows in `rows` (the copy checked as
    /// [`QMatrix::with_packed`] checks it).
    pub fn with_rows(self, rows: Rows<'a>) -> Result<Self, ShapeError> {
        match rows {
            Rows::File => Ok(QMatrix {
                rows: Rows::File,
                ..self
            }),
            Rows::Packed(p) => self.with_packed(p),
            Rows::PackedAndFile(p) => Ok(self.with_packed(p)?.with_file_matvec()),
        }
    }

    /// The repacked rows, if any.
    pub fn packed(&self) -> Option<&'a [u8]> {
        self.rows.copy()
    }

    /// Where the kernels read the rows.
    pub fn rows_layout(&self) -> Rows<'a> {
        self.rows
    }

    /// The same matrix, telling the planner that its file rows stay in
    /// memory beside the repacked copy: a mat-vec (one activation row) then
    /// reads the file's rows through [`KernelTable::packed_order_rows`],
    /// with the repacked product's bits, where the tier has that kernel (on
    /// AVX-512 Q6_K: its file rows stream faster from memory). Batches keep
    /// the repacked product.
    pub fn with_file_matvec(self) -> Self {
        let rows = match self.rows {
            Rows::Packed(p) => Rows::PackedAndFile(p),
            r => r,
        };
        QMatrix { rows, ..self }
    }

    /// Repacked bytes of the `count` rows from row `o` (both multiples of 8).
    fn packed_rows(&self, p: &'a [u8], o: usize, count: usize) -> &'a [u8] {
        let per_row = crate::repack::packed_bytes(self.ty, self.n_in, crate::repack::ROWS)
            / crate::repack::ROWS;
        &p[o * per_row..(o + count) * per_row]
    }

    /// Bytes of weight row `o`.
    #[inline]
    pub fn row(&self, o: usize) -> &'a [u8] {
        &self.data[o * self.row_bytes..(o + 1) * self.row_bytes]
    }

    /// Bytes of the `count` weight rows starting at row `o`.
    #[inline]
    pub fn rows(&self, o: usize, count: usize) -> &'a [u8] {
        &self.data[o * self.row_bytes..(o + count) * self.row_bytes]
    }

    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Bytes of the whole matrix: what one product streams.
    pub fn bytes(&self) -> usize {
        self.data.len()
    }
}

/// Activation rows already in a dot type: `rows` rows of `n` elements of `ty`.
#[derive(Clone, Copy, Debug)]
pub struct QActs<'a> {
    pub ty: GgmlType,
    pub n: usize,
    pub rows: usize,
    row_bytes: usize,
    data: &'a [u8],
}

impl<'a> QActs<'a> {
    /// Views `data` (at least `rows` rows of `ty.row_bytes(n)` bytes) as
    /// activation rows.
    pub fn new(ty: GgmlType, n: usize, rows: usize, data: &'a [u8]) -> Result<Self, ShapeError> {
        // The same size check as QMatrix::new above, worded for activation rows: each error names
        // its own operand.
        let rb = row_bytes(ty, n)?;
        let need = rb
            .checked_mul(rows)
            .ok_or_else(|| ShapeError(format!("{rows} rows of {rb} bytes overflow")))?;
        if data.len() < need {
            return Err(ShapeError(format!(
                "{rows} activation rows of {n} {ty} need {need} bytes, got {}",
                data.len()
            )));
        }
        Ok(QActs {
            ty,
            n,
            rows,
            row_bytes: rb,
            data: &data[..need],
        })
    }

    #[inline]
    pub fn row(&self, t: usize) -> &'a [u8] {
        &self.data[t * self.row_bytes..(t + 1) * self.row_bytes]
    }

    /// Bytes of the `count` activation rows starting at row `t`.
    #[inline]
    pub fn rows(&self, t: usize, count: usize) -> &'a [u8] {
        &self.data[t * self.row_bytes..(t + count) * self.row_bytes]
    }
}

/// A stack of `n_expert` matrices of identical shape, stored one after the
/// other (ggml `{n_in, n_out, n_expert}`).
#[derive(Clone, Copy, Debug)]
pub struct QExperts<'a> {
    pub ty: GgmlType,
    pub n_in: usize,
    pub n_out: usize,
    pub n_expert: usize,
    row_bytes: usize,
    data: &'a [u8],
    /// Every expert repacked ([`crate::repack`]), one after the other.
    packed: Option<&'a [u8]>,
}

impl<'a> QExperts<'a> {
    pub fn new(
        ty: GgmlType,
        n_in: usize,
        n_out: usize,
        n_expert: usize,
        data: &'a [u8],
    ) -> Result<Self, ShapeError> {
        let rows = n_out
            .checked_mul(n_expert)
            .ok_or_else(|| ShapeError(format!("{n_out} x {n_expert} rows overflow")))?;
        let all = QMatrix::new(ty, n_in, rows, data)?;
        Ok(QExperts {
            ty,
            n_in,
            n_out,
            n_expert,
            row_bytes: all.row_bytes,
            data: all.data,
            packed: None,
        })
    }

    /// The repacked experts, if any.
    pub fn packed(&self) -> Option<&'a [u8]> {
        self.packed
    }

    /// The same stack with every expert also repacked, one after the other
    /// (see [`QMatrix::with_packed`]).
    pub fn with_packed(self, packed: &'a [u8]) -> Result<Self, ShapeError> {
        let one = crate::repack::packed_bytes(self.ty, self.n_in, self.n_out);
        let need = one.saturating_mul(self.n_expert);
        // The shape and alignment checks of one expert, then the length.
        self.expert(0)
            .with_packed(&packed[..one.min(packed.len())])?;
        if packed.len() < need {
            return Err(ShapeError(format!(
                "repacked experts need {need} bytes, got {}",
                packed.len()
            )));
        }
        Ok(QExperts {
            packed: Some(&packed[..need]),
            ..self
        })
    }

    /// Expert `e`'s matrix.
    pub fn expert(&self, e: usize) -> QMatrix<'a> {
        assert!(e < self.n_expert, "expert {e} of {}", self.n_expert);
        let size = self.row_bytes * self.n_out;
        let one = crate::repack::packed_bytes(self.ty, self.n_in, self.n_out);
        QMatrix {
            ty: self.ty,
            n_in: self.n_in,
            n_out: self.n_out,
            row_bytes: self.row_bytes,
            data: &self.data[e * size..(e + 1) * size],
            rows: match self.packed {
                Some(p) => Rows::Packed(&p[e * one..(e + 1) * one]),
                None => Rows::File,
            },
            expert: true,
        }
    }
}

/// Output rows per task for `n_out` rows on the current rayon pool: about
/// four tasks per thread for balance, never fewer than [`MIN_ROWS_PER_TASK`].
pub fn rows_per_task(n_out: usize) -> usize {
    let tasks = rayon::current_num_threads() * 4;
    n_out.div_ceil(tasks).max(MIN_ROWS_PER_TASK)
}

/// [`rows_per_task`] rounded up to whole groups of repacked rows.
fn packed_rows_per_task(n_out: usize) -> usize {
    rows_per_task(n_out).next_multiple_of(crate::repack::ROWS)
}

/// Converts `rows = x.len() / n` f32 rows into `ty` (a `vec_dot_type()`),
/// writing `rows * ty.row_bytes(n)` bytes of `dst`.
pub fn quantize_rows(kt: &KernelTable, ty: GgmlType, x: &[f32], n: usize, dst: &mut [u8]) {
    let rb = row_bytes(ty, n).expect("activation length is whole blocks");
    let q = kt.quantize(ty);
    for (src, d) in x.chunks_exact(n).zip(dst.chunks_exact_mut(rb)) {
        q(src, d);
    }
}

fn check_pair(w: &QMatrix, x_ty: GgmlType, x_n: usize) {
    assert_eq!(
        x_ty,
        w.ty.vec_dot_type(),
        "{} weights need {} activations",
        w.ty,
        w.ty.vec_dot_type()
    );
    assert_eq!(x_n, w.n_in, "activation length mismatch");
}

/// The weight rows a task hands to a multi-row kernel: the repacked rows for
/// [`Kernel::Packed`], else the file's.
fn kernel_rows<'a>(k: &Kernel, w: &QMatrix<'a>, first: usize, count: usize) -> &'a [u8] {
    match (k, w.rows.copy()) {
        (Kernel::Packed(_) | Kernel::PackedPrompt(_), Some(p)) => w.packed_rows(p, first, count),
        _ => w.rows(first, count),
    }
}

/// Rows per task for a plan: whole groups of repacked rows for
/// [`Kernel::Packed`].
fn task_rows(k: &Kernel, n_out: usize) -> usize {
    match k {
        Kernel::Packed(_) => packed_rows_per_task(n_out),
        _ => rows_per_task(n_out),
    }
}

/// `ys[i] = W[first + i] · x` for one activation row, with kernel `k`.
fn matvec_rows(k: &Kernel, w: &QMatrix, first: usize, x: &[u8], ys: &mut [f32]) {
    let n = w.n_in;
    match *k {
        Kernel::Packed(g) | Kernel::Rows(g) => {
            g(n, kernel_rows(k, w, first, ys.len()), ys.len(), x, 1, ys, 1)
        }
        Kernel::Prompt(_) | Kernel::PackedPrompt(_) => {
            unreachable!("prompt kernels are planned for batches only")
        }
        Kernel::Dots { dot, .. } => {
            for (i, y) in ys.iter_mut().enumerate() {
                *y = dot(n, w.row(first + i), x);
            }
        }
    }
}

fn check_row(w: &QMatrix, x: &[u8]) {
    let rb = row_bytes(w.ty.vec_dot_type(), w.n_in).expect("weights are whole blocks");
    assert_eq!(x.len(), rb, "activation row has the wrong byte length");
}

/// [`matmul`] of one activation row in [`Mode::Decode`] (the tests' mat-vec).
#[cfg(test)]
pub(crate) fn matvec(kt: &KernelTable, w: &QMatrix, x: &[u8], out: &mut [f32]) {
    let x = QActs::new(w.ty.vec_dot_type(), w.n_in, 1, x).expect("one activation row");
    matmul(kt, w, &x, out, &mut [], Mode::Decode);
}

/// [`matmul`] of one activation row on the calling thread only (no rayon):
/// for callers that already split the work, and for timing one core. The
/// plan is [`Mode::Decode`]'s, so the bits are a decode step's.
pub fn matvec_serial(kt: &KernelTable, w: &QMatrix, x: &[u8], out: &mut [f32]) {
    check_row(w, x);
    let k = kt.plan(w, 1, Mode::Decode);
    matvec_rows(&k, w, 0, x, &mut out[..w.n_out]);
}

/// [`dot_block`] of weight rows `o..o + rows_w` against activation rows
/// `t0..t0 + cols` into a NaN-filled buffer three columns wider, checked:
/// nothing written past the columns, every cell the bits of `dot` on its
/// pair. `label` starts the failure messages.
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_dot_block(
    kt: &KernelTable,
    m: &QMatrix,
    x: &QActs,
    dot: crate::sig::VecDotFn,
    (o, rows_w): (usize, usize),
    (t0, cols): (usize, usize),
    label: &str,
) {
    let n = m.n_in;
    let stride = cols + 3;
    let mut out = vec![f32::NAN; rows_w * stride];
    dot_block(kt, m, o, rows_w, x, t0, cols, &mut out, stride);
    for i in 0..rows_w {
        for t in 0..stride {
            let got = out[i * stride + t];
            if t >= cols {
                assert!(got.is_nan(), "{label} n={n}: wrote past its columns");
                continue;
            }
            let want = dot(n, m.row(o + i), x.row(t0 + t));
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{label} n={n} {rows_w}x{cols} at ({o},{t0}): out ({i},{t}) {got} vs vec_dot {want}"
            );
        }
    }
}

/// `out[i * out_stride + t] = W[o + i] · x[t0 + t]` for `i < w_rows`,
/// `t < act_rows`, straight through the tier's multi-row kernel for `w.ty`
/// (or its repacked product), else one `vec_dot` per pair: the raw kernels
/// the tests compare with `vec_dot`, bypassing the plan.
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn dot_block(
    kt: &KernelTable,
    w: &QMatrix,
    o: usize,
    w_rows: usize,
    x: &QActs,
    t0: usize,
    act_rows: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let n = w.n_in;
    if let (Some(g), Some(p)) = (kt.packed_gemm(w.ty, Mode::Decode), w.rows.copy()) {
        assert!(
            o.is_multiple_of(crate::repack::ROWS) && w_rows.is_multiple_of(crate::repack::ROWS),
            "repacked rows come in groups of 8"
        );
        let (wr, xr) = (w.packed_rows(p, o, w_rows), x.rows(t0, act_rows));
        g(n, wr, w_rows, xr, act_rows, out, out_stride);
        return;
    }
    match kt.gemm(w.ty) {
        Some(g) => g(
            n,
            w.rows(o, w_rows),
            w_rows,
            x.rows(t0, act_rows),
            act_rows,
            out,
            out_stride,
        ),
        None => {
            let dot = kt.vec_dot(w.ty);
            for i in 0..w_rows {
                let wr = w.row(o + i);
                let yo = &mut out[i * out_stride..i * out_stride + act_rows];
                for (t, y) in yo.iter_mut().enumerate() {
                    *y = dot(n, wr, x.row(t0 + t));
                }
            }
        }
    }
}

/// Floats of scratch [`matmul`] needs for `rows` activation rows.
pub fn matmul_tile_len(rows: usize) -> usize {
    row_block(rows) * rows
}

/// Fewest activation rows the prompt kernels are planned for.
pub const PROMPT_MIN_ROWS: usize = 8;

/// Fewest activation rows the prompt kernel on repacked rows of type `ty`
/// is planned for: below it the repacked multi-row product is as fast or
/// faster (`examples/prompt_throughput.rs`, one core: at 8 rows Q6_K,
/// IQ4_XS and Q8_0 were slower through the prompt kernel, Q4_K and Q5_K
/// even; at 12 every type was as fast or faster; Q3_K's prompt kernel leads
/// from 8; docs/PERFORMANCE.md).
pub fn packed_prompt_min_rows(ty: GgmlType) -> usize {
    match ty {
        GgmlType::Q3_K => PROMPT_MIN_ROWS,
        _ => 12,
    }
}

/// Activation rows per prompt-kernel call (its weight unpacking is shared
/// by all of them). A whole 512-token batch in one call: against 128 it
/// unpacks the file's Q8_0 rows (sixteen rows transposed at a time) a
/// quarter as often, and prefill is faster (docs/PERFORMANCE.md).
const PROMPT_ACT_TILE: usize = 512;

/// `out[t][o] = W[o] · x[t]` for every activation row, with the kernel
/// [`KernelTable::plan`] gives for `mode`; `out` is `x.rows x w.n_out`
/// row-major. `tile` is scratch of at least `matmul_tile_len(x.rows)` floats
/// when `x.rows > 1` (unused otherwise). One row is a mat-vec split over
/// output rows; more are tiled (see the module docs).
pub fn matmul(
    kt: &KernelTable,
    w: &QMatrix,
    x: &QActs,
    out: &mut [f32],
    tile: &mut [f32],
    mode: Mode,
) {
    check_pair(w, x.ty, x.n);
    let rows = x.rows;
    if rows == 0 {
        return;
    }
    let out = &mut out[..rows * w.n_out];
    let k = kt.plan(w, rows, mode);
    if rows == 1 {
        let xr = x.row(0);
        let per = task_rows(&k, w.n_out);
        if out.len() <= per {
            matvec_rows(&k, w, 0, xr, out);
        } else {
            out.par_chunks_mut(per)
                .enumerate()
                .for_each(|(c, ys)| matvec_rows(&k, w, c * per, xr, ys));
        }
        return;
    }
    // The prompt kernels write `out[t][o]` themselves: no tile.
    if let Kernel::Prompt(g) | Kernel::PackedPrompt(g) = k {
        prompt_matmul(&k, g, w, x, out);
        return;
    }
    assert!(
        tile.len() >= matmul_tile_len(rows),
        "matmul tile needs {} floats, got {}",
        matmul_tile_len(rows),
        tile.len()
    );
    let n = w.n_in;
    let mut o0 = 0;
    while o0 < w.n_out {
        let nb = row_block(rows).min(w.n_out - o0);
        let tile = &mut tile[..nb * rows];
        // Split each block, not the whole matrix, across the pool: a block
        // is one parallel region.
        let per = task_rows(&k, nb).min(nb);
        // One task: weight rows o0+c·per … (per of them) × all activation rows,
        // written [o][t] into its disjoint slice of the tile.
        let run = |c: usize, ys: &mut [f32]| {
            let first = o0 + c * per;
            let n_rows = ys.len() / rows;
            for t0 in (0..rows).step_by(ACT_TILE) {
                let t1 = (t0 + ACT_TILE).min(rows);
                match k {
                    Kernel::Prompt(_) | Kernel::PackedPrompt(_) => {
                        unreachable!("prompt products return above")
                    }
                    Kernel::Packed(g) | Kernel::Rows(g) => {
                        let wr = kernel_rows(&k, w, first, n_rows);
                        let xr = x.rows(t0, t1 - t0);
                        g(n, wr, n_rows, xr, t1 - t0, &mut ys[t0..], rows);
                    }
                    Kernel::Dots { dot, split, tail } => {
                        for i in 0..n_rows {
                            let wr = w.row(first + i);
                            let yo = &mut ys[i * rows + t0..i * rows + t1];
                            for (y, t) in yo.iter_mut().zip(t0..t1) {
                                let f = if t < split { dot } else { tail };
                                *y = f(n, wr, x.row(t));
                            }
                        }
                    }
                }
            }
        };
        if nb <= per {
            run(0, tile);
        } else {
            tile.par_chunks_mut(per * rows)
                .enumerate()
                .for_each(|(c, ys)| run(c, ys));
        }
        // Transposed 16 weight rows at a time: each output row gets 64
        // contiguous bytes per step (one store per element, row by row, was
        // a strided store per element and stalled on it); 16 activation rows
        // per task.
        let tile: &[f32] = tile;
        let n_out = w.n_out;
        let transpose = |c: usize, dst_rows: &mut [f32]| {
            for i0 in (0..nb).step_by(16) {
                let i1 = (i0 + 16).min(nb);
                for (j, dst_row) in dst_rows.chunks_exact_mut(n_out).enumerate() {
                    let t = c * 16 + j;
                    let dst = &mut dst_row[o0 + i0..o0 + i1];
                    for (k, y) in dst.iter_mut().enumerate() {
                        *y = tile[(i0 + k) * rows + t];
                    }
                }
            }
        };
        if rows <= 16 {
            transpose(0, out);
        } else {
            out.par_chunks_mut(16 * n_out)
                .enumerate()
                .for_each(|(c, d)| transpose(c, d));
        }
        o0 += nb;
    }
}

/// The output pointer of [`prompt_matmul`], shared by its tasks.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);

// SAFETY: the tasks of `prompt_matmul` write disjoint elements through it.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// [`matmul`] with a prompt kernel, which writes `out[t][o]` itself: tasks
/// over blocks of [`PROMPT_ACT_TILE`] tokens × chunks of weight rows.
fn prompt_matmul(k: &Kernel, g: crate::sig::PromptFn, w: &QMatrix, x: &QActs, out: &mut [f32]) {
    let (rows, n_out, n) = (x.rows, w.n_out, w.n_in);
    assert!(out.len() >= rows * n_out, "matmul: output too short");
    // Whole groups of the AVX-512 prompt kernels' 16 lanes of rows.
    let per = rows_per_task(n_out).next_multiple_of(16).min(n_out);
    let row_chunks = n_out.div_ceil(per);
    let tasks = row_chunks * rows.div_ceil(PROMPT_ACT_TILE);
    let base = OutPtr(out.as_mut_ptr());
    let run = |c: usize| {
        let (first, t0) = ((c % row_chunks) * per, (c / row_chunks) * PROMPT_ACT_TILE);
        let (nr, nt) = (per.min(n_out - first), PROMPT_ACT_TILE.min(rows - t0));
        // SAFETY: `out` holds `rows × n_out` floats (asserted); this task
        // writes only tokens t0..t0+nt × outputs first..first+nr, which no
        // other task touches, and `out` is borrowed mutably for the call.
        unsafe {
            g(
                n,
                kernel_rows(k, w, first, nr),
                nr,
                x.rows(t0, nt),
                nt,
                base.get().add(t0 * n_out + first),
                n_out,
            )
        };
    };
    if tasks == 1 {
        run(0);
    } else {
        (0..tasks).into_par_iter().for_each(run);
    }
}

/// `out[r] = E_{expert_of[r]} · x[r]` for every activation row `r`; `out` is
/// `expert_of.len() x e.n_out` row-major. One parallel region over
/// (row, chunk of output rows) pairs. Each row takes the plan of its expert
/// for the number of rows routed to it, as ggml picks the kernel per expert
/// ([`Mode::Prompt`] plans as [`Mode::Decode`]: a prompt kernel needs an
/// expert's rows side by side, which a gather does not have).
pub fn expert_gather(
    kt: &KernelTable,
    e: &QExperts,
    expert_of: &[usize],
    x: &QActs,
    out: &mut [f32],
    mode: Mode,
) {
    assert_eq!(x.rows, expert_of.len(), "one expert per activation row");
    if expert_of.is_empty() || e.n_out == 0 {
        return;
    }
    check_pair(&e.expert(expert_of[0]), x.ty, x.n);
    let mode = mode.without_prompt();
    let (n_out, total) = (e.n_out, e.n_out * expert_of.len());
    let packed = kt.packed_gemm(e.ty, mode).is_some() && e.packed.is_some();
    let per = if packed {
        packed_rows_per_task(total).min(n_out)
    } else {
        rows_per_task(total).min(n_out)
    };
    let chunks_per_row = n_out.div_ceil(per);
    let out = &mut out[..expert_of.len() * n_out];
    let run = |r: usize, c: usize, ys: &mut [f32]| {
        let m = e.expert(expert_of[r]);
        // A count, not a map: no allocation on the decode path.
        let rows = expert_of.iter().filter(|&&y| y == expert_of[r]).count();
        let k = kt.plan(&m, rows, mode);
        matvec_rows(&k, &m, c * per, x.row(r), ys);
    };
    if expert_of.len() * chunks_per_row == 1 {
        run(0, 0, out);
        return;
    }
    out.par_chunks_mut(n_out)
        .enumerate()
        .flat_map(|(r, row)| {
            row.par_chunks_mut(per)
                .enumerate()
                .map(move |(c, ys)| (r, c, ys))
        })
        .for_each(|(r, c, ys)| run(r, c, ys));
}

/// The kernels of attention's scores over a KV cache: each query head is
/// converted to `q_ty` by `quantize`, and `dot` takes it with a cached K head.
#[derive(Clone, Copy, Debug)]
pub struct KvDot {
    pub q_ty: GgmlType,
    pub quantize: QuantizeFn,
    pub dot: VecDotFn,
}

impl KernelTable {
    /// The plan of `K·q` over cached K heads of type `ty_k`, `head_dim`
    /// wide, for a batch of `rows` queries in `mode`: in llama.cpp's batch
    /// order ggml hands a batch over an f16 cache to llamafile's tinyBLAS
    /// (q converted to f16 for it; f32 q stays a strided view, which tinyBLAS
    /// does not take); everything else takes the tier's dot of the type.
    pub fn plan_kv(&self, ty_k: GgmlType, head_dim: usize, rows: usize, mode: Mode) -> KvDot {
        let q_ty = ty_k.vec_dot_type();
        let tinyblas = rows > 1 && mode == Mode::Ggml && head_dim.is_multiple_of(16);
        let dot = match ty_k {
            GgmlType::F16 if tinyblas => self.gemm_f16(),
            ty => self.vec_dot(ty),
        };
        KvDot {
            q_ty,
            quantize: self.quantize(q_ty),
            dot,
        }
    }

    /// `Σ a·b` of two f32 vectors (as bytes) in ggml's `ggml_vec_dot_f32`
    /// order: the attention's f32 scores and the delta rule's readouts.
    pub fn f32_dot(&self) -> VecDotFn {
        self.vec_dot(GgmlType::F32)
    }

    /// How this tier keeps a weight of type `ty`: a plain matrix, or an
    /// expert stack (`stack`, read a few experts at a time, never kept twice).
    pub fn layout(&self, ty: GgmlType, stack: bool) -> Layout {
        let decode = Mode::Decode;
        match (
            self.packed_gemm(ty, decode),
            self.packed_order_rows(ty, decode),
        ) {
            (None, _) => Layout::FileRows,
            (Some(_), Some(_)) if !stack => Layout::PackedAndFileRows,
            (Some(_), _) => Layout::Packed,
        }
    }

    /// The kernel for `w` times `rows` activation rows in `mode`: its
    /// layout's plan, the copy's where the tier has a packed product in this
    /// mode (llama.cpp's order has none), else the file rows'.
    pub fn plan(&self, w: &QMatrix, rows: usize, mode: Mode) -> Kernel {
        let packed = match w.rows {
            Rows::File => None,
            Rows::Packed(_) => self.plan_packed(w.ty, rows, mode, false),
            Rows::PackedAndFile(_) => self.plan_packed(w.ty, rows, mode, true),
        };
        packed.unwrap_or_else(|| self.plan_file_rows(w, rows, mode))
    }

    /// The plan of rows kept in clover's copy (`file_rows`: the file's rows
    /// beside it); `None` when the tier has no packed product in `mode`.
    fn plan_packed(
        &self,
        ty: GgmlType,
        rows: usize,
        mode: Mode,
        file_rows: bool,
    ) -> Option<Kernel> {
        let g = self.packed_gemm(ty, mode)?;
        // A mat-vec on rows kept in the file's layout too: those, in the
        // repacked product's arithmetic (the same bits).
        if let Some(f) = self
            .packed_order_rows(ty, mode)
            .filter(|_| rows <= 1 && file_rows)
        {
            return Some(Kernel::Rows(f));
        }
        // A prompt batch takes the prompt kernel on the same repacked
        // rows where the tier has one (faster for many tokens).
        if let Some(p) = self
            .packed_prompt_gemm(ty, mode)
            .filter(|_| rows >= packed_prompt_min_rows(ty))
        {
            return Some(Kernel::PackedPrompt(p));
        }
        Some(Kernel::Packed(g))
    }

    /// The plan of the file's rows.
    fn plan_file_rows(&self, w: &QMatrix, rows: usize, mode: Mode) -> Kernel {
        let (ty, n_out) = (w.ty, w.n_out);
        if rows <= 1 {
            // A mat-vec: the dot ggml uses for one token (its repacked gemv
            // where it repacks), through a multi-row kernel where one gives
            // those bits.
            return match self.gemm_for_batch(ty, n_out, 1, mode) {
                Some(g) => Kernel::Rows(g),
                None => {
                    let dot = self.weight_dot(ty, n_out);
                    Kernel::Dots {
                        dot,
                        split: 1,
                        tail: dot,
                    }
                }
            };
        }
        if rows >= PROMPT_MIN_ROWS {
            if let Some(g) = self.prompt_gemm(ty, mode) {
                return Kernel::Prompt(g);
            }
        }
        let (dot, split, tail) = if mode == Mode::Ggml && !w.expert {
            // ggml hands a batch of F32 / F16 weights to llamafile's tinyBLAS
            // when its shape allows; a routed expert (MUL_MAT_ID) never.
            let tinyblas = w.n_in.is_multiple_of(16) && n_out.is_multiple_of(4);
            let dot = match ty {
                GgmlType::F32 if tinyblas => self.gemm_f32(),
                GgmlType::F16 if tinyblas => self.gemm_f16(),
                _ => self.batch_dot(ty, n_out, rows, mode),
            };
            let split = rows - rows % 4;
            match self.ggml_repack_gemm_dot(ty, n_out, mode) {
                Some(gemm) if split > 0 => (gemm, split, dot),
                _ => (dot, rows, dot),
            }
        } else {
            let dot = self.batch_dot(ty, n_out, rows, mode);
            (dot, rows, dot)
        };
        if split == rows {
            if let Some(g) = self.gemm_for_batch(ty, n_out, rows, mode) {
                return Kernel::Rows(g);
            }
        }
        Kernel::Dots { dot, split, tail }
    }
}

#[cfg(test)]
#[path = "matmul_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "gemm_tests.rs"]
mod gemm_tests;
