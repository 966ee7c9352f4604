//! Matrix products over quantized weights, split across rayon threads.
//!
//! Shapes (ggml `{n_in, n_out}`): a weight matrix is `n_out` rows of `n_in`
//! elements of type `ty`, row-major, `ty.row_bytes(n_in)` bytes per row.
//! Activations are `rows` rows of `n_in` elements already converted once into
//! `ty.vec_dot_type()` (DESIGN §2.6) by the caller, e.g. with
//! [`quantize_rows`]. Every product is
//!
//! ```text
//! y[t][o] = vec_dot(W[o], x̃[t])        f32 accumulation inside vec_dot
//! ```
//!
//! - [`matvec`]: one activation row; output rows are split across threads in
//!   disjoint `par_chunks_mut` chunks of at least [`MIN_ROWS_PER_TASK`] rows.
//! - [`matmul`]: many activation rows. Each task owns a chunk of weight rows
//!   and, per tile of [`ACT_TILE`] activation rows, reads each of its weight
//!   rows once (from memory on the first tile, from cache after) and dots it
//!   with every activation row of the tile ([`dot_block`]: the tier's
//!   multi-row `GemmFn` when it has one for the type, which equals the
//!   per-pair `vec_dot` bit for bit, else one `vec_dot` per pair). Results
//!   land in a caller-provided `[o][t]` tile that is then transposed into
//!   `y[t][o]`. A row of a batch therefore gets exactly what [`matvec`] gives
//!   it alone (speculative verify == single-token decode).
//! - [`expert_gather`]: row `r` of the activations is multiplied by its own
//!   expert's matrix (`expert_of[r]`), all rows in one parallel region (one
//!   `vec_dot` per pair: the model uses it only when experts are hardly
//!   shared; shared experts go through [`matmul`]).
//!
//! No allocation happens inside the products: scratch comes from the caller.

use std::fmt;

use rayon::prelude::*;

use crate::isa::{GemmFn, VecDotFn};
use crate::{GgmlType, KernelTable};

/// Fewest output rows one rayon task computes: below this, scheduling costs
/// show next to the dots (a 2048-wide Q4_K row dot takes ~100 ns).
pub const MIN_ROWS_PER_TASK: usize = 16;

/// Activation rows dotted against one cached weight row before moving on.
pub const ACT_TILE: usize = 32;

/// Weight rows per transposition block of [`matmul`].
pub const ROW_BLOCK: usize = 1024;

/// A shape that does not fit its bytes or its partner.
#[derive(Clone, Debug, PartialEq, Eq)]
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
    /// The same rows repacked ([`crate::repack`]), when the loader made them.
    packed: Option<&'a [u8]>,
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
            packed: None,
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
            packed: Some(&packed[..need]),
            ..self
        })
    }

    /// The repacked rows, if any.
    pub fn packed(&self) -> Option<&'a [u8]> {
        self.packed
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
            packed: self.packed.map(|p| &p[e * one..(e + 1) * one]),
        }
    }
}

/// Output rows per task for `n_out` rows on the current rayon pool: about
/// four tasks per thread for balance, never fewer than [`MIN_ROWS_PER_TASK`].
pub fn rows_per_task(n_out: usize) -> usize {
    let tasks = rayon::current_num_threads() * 4;
    n_out.div_ceil(tasks).max(MIN_ROWS_PER_TASK)
}

/// The kernel and bytes for `w`'s repacked rows, when it has them and the
/// table has the kernel.
fn packed_kernel<'a>(kt: &KernelTable, w: &QMatrix<'a>) -> Option<(GemmFn, &'a [u8])> {
    kt.packed_gemm(w.ty).zip(w.packed)
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

/// `out[o] = W[o] · x` for one activation row `x` (`w.ty.vec_dot_type()`
/// bytes of `w.n_in` elements); `out` holds at least `w.n_out` floats.
pub fn matvec(kt: &KernelTable, w: &QMatrix, x: &[u8], out: &mut [f32]) {
    let rb = row_bytes(w.ty.vec_dot_type(), w.n_in).expect("weights are whole blocks");
    assert_eq!(x.len(), rb, "activation row has the wrong byte length");
    let dot = kt.weight_dot(w.ty, w.n_out);
    // The multi-row kernel where it gives `dot`'s bits (see `gemm_for_batch`):
    // it may take weight rows in pairs.
    let rows_kernel = kt.gemm_for_batch(w.ty, w.n_out, 1);
    let packed = packed_kernel(kt, w);
    let n = w.n_in;
    let out = &mut out[..w.n_out];
    let per = match packed {
        Some(_) => packed_rows_per_task(w.n_out),
        None => rows_per_task(w.n_out),
    };
    let run = |c: usize, ys: &mut [f32]| match (packed, rows_kernel) {
        (Some((g, p)), _) => g(
            n,
            w.packed_rows(p, c * per, ys.len()),
            ys.len(),
            x,
            1,
            ys,
            1,
        ),
        (None, Some(g)) => g(n, w.rows(c * per, ys.len()), ys.len(), x, 1, ys, 1),
        (None, None) => {
            for (i, y) in ys.iter_mut().enumerate() {
                *y = dot(n, w.row(c * per + i), x);
            }
        }
    };
    if out.len() <= per {
        run(0, out);
    } else {
        out.par_chunks_mut(per)
            .enumerate()
            .for_each(|(c, ys)| run(c, ys));
    }
}

/// [`matvec`] on the calling thread only (no rayon): for callers that
/// already split the work, and for timing one core.
pub fn matvec_serial(kt: &KernelTable, w: &QMatrix, x: &[u8], out: &mut [f32]) {
    let rb = row_bytes(w.ty.vec_dot_type(), w.n_in).expect("weights are whole blocks");
    assert_eq!(x.len(), rb, "activation row has the wrong byte length");
    let out = &mut out[..w.n_out];
    if let Some((g, p)) = packed_kernel(kt, w) {
        g(w.n_in, p, w.n_out, x, 1, out, 1);
        return;
    }
    // The multi-row kernel gives `vec_dot`'s bits.
    if let Some(g) = kt.gemm(w.ty) {
        g(w.n_in, w.rows(0, w.n_out), w.n_out, x, 1, out, 1);
        return;
    }
    let dot = kt.vec_dot(w.ty);
    for (o, y) in out.iter_mut().enumerate() {
        *y = dot(w.n_in, w.row(o), x);
    }
}

/// `out[i * out_stride + t] = W[o + i] · x[t0 + t]` for `i < w_rows`,
/// `t < act_rows`: the tier's multi-row kernel when it has one for `w.ty`,
/// else one `vec_dot` per pair. Both give the same bits.
#[allow(clippy::too_many_arguments)]
pub fn dot_block(
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
    if let Some((g, p)) = packed_kernel(kt, w) {
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
    ROW_BLOCK * rows
}

/// `out[t][o] = W[o] · x[t]` for every activation row; `out` is
/// `x.rows x w.n_out` row-major. `tile` is scratch of at least
/// `matmul_tile_len(x.rows)` floats when `x.rows > 1` (unused otherwise).
pub fn matmul(kt: &KernelTable, w: &QMatrix, x: &QActs, out: &mut [f32], tile: &mut [f32]) {
    // ggml hands a batch of F32 / F16 weights to llamafile's tinyBLAS when
    // its shape allows, else to the vec_dot loop.
    let tinyblas = kt.ggml_batch() && w.n_in.is_multiple_of(16) && w.n_out.is_multiple_of(4);
    let dot = match w.ty {
        GgmlType::F32 if tinyblas => kt.gemm_f32(),
        GgmlType::F16 if tinyblas => kt.gemm_f16(),
        _ => kt.batch_dot(w.ty, w.n_out, x.rows),
    };
    // Repacked weights: ggml's gemm kernel takes the rows four at a time,
    // its gemv the last `rows % 4`.
    let split = x.rows - x.rows % 4;
    match kt.repacked_gemm_dot(w.ty, w.n_out) {
        Some(gemm) if split > 0 => matmul_with(kt, w, x, out, tile, (gemm, split, dot), None),
        _ => matmul_with(kt, w, x, out, tile, (dot, x.rows, dot), None),
    }
}

/// Fewest activation rows [`matmul_prompt`] takes its prompt kernel for.
pub const PROMPT_MIN_ROWS: usize = 8;

/// Activation rows per prompt-kernel call (its weight unpacking is shared
/// by all of them).
const PROMPT_ACT_TILE: usize = 128;

/// [`matmul`] for a prompt batch, which need not reproduce single-token
/// decoding bit for bit: the tier's prompt kernel where it has one
/// ([`KernelTable::prompt_gemm`]) and the batch has at least
/// [`PROMPT_MIN_ROWS`] rows, else exactly [`matmul`].
pub fn matmul_prompt(kt: &KernelTable, w: &QMatrix, x: &QActs, out: &mut [f32], tile: &mut [f32]) {
    match kt.prompt_gemm(w.ty) {
        // Repacked weights have their own product for every batch.
        Some(g) if x.rows >= PROMPT_MIN_ROWS && packed_kernel(kt, w).is_none() => {
            let dot = kt.vec_dot(w.ty);
            matmul_with(kt, w, x, out, tile, (dot, x.rows, dot), Some(g));
        }
        _ => matmul(kt, w, x, out, tile),
    }
}

/// [`matmul`] with every output from `vec_dot` (ggml's `MUL_MAT_ID`, which
/// never takes the tinyBLAS path): one expert's rows on the tokens routed
/// to it.
pub fn matmul_vec_dot(kt: &KernelTable, w: &QMatrix, x: &QActs, out: &mut [f32], tile: &mut [f32]) {
    let dot = kt.batch_dot(w.ty, w.n_out, x.rows);
    matmul_with(kt, w, x, out, tile, (dot, x.rows, dot), None);
}

fn matmul_with(
    kt: &KernelTable,
    w: &QMatrix,
    x: &QActs,
    out: &mut [f32],
    tile: &mut [f32],
    (dot, split, dot_tail): (VecDotFn, usize, VecDotFn),
    prompt: Option<GemmFn>,
) {
    check_pair(w, x.ty, x.n);
    let rows = x.rows;
    if rows == 0 {
        return;
    }
    let out = &mut out[..rows * w.n_out];
    if rows == 1 {
        matvec(kt, w, x.row(0), out);
        return;
    }
    assert!(
        tile.len() >= matmul_tile_len(rows),
        "matmul tile needs {} floats, got {}",
        matmul_tile_len(rows),
        tile.len()
    );
    let n = w.n_in;
    let packed = packed_kernel(kt, w);
    let rows_kernel = if let Some((g, _)) = packed {
        Some(g)
    } else if prompt.is_some() {
        prompt
    } else if split == rows {
        kt.gemm_for_batch(w.ty, w.n_out, rows)
    } else {
        None
    };
    let act_tile = if prompt.is_some() {
        PROMPT_ACT_TILE
    } else {
        ACT_TILE
    };
    let mut o0 = 0;
    while o0 < w.n_out {
        let nb = ROW_BLOCK.min(w.n_out - o0);
        let tile = &mut tile[..nb * rows];
        // Split each block, not the whole matrix, across the pool: a block
        // is one parallel region.
        let per = if packed.is_some() {
            packed_rows_per_task(nb).min(nb)
        } else {
            rows_per_task(nb).min(nb)
        };
        // One task: weight rows o0+c·per … (per of them) × all activation rows,
        // written [o][t] into its disjoint slice of the tile.
        let run = |c: usize, ys: &mut [f32]| {
            let first = o0 + c * per;
            let n_rows = ys.len() / rows;
            for t0 in (0..rows).step_by(act_tile) {
                let t1 = (t0 + act_tile).min(rows);
                match rows_kernel {
                    // Same per-output arithmetic as `dot` (see `gemm_for_batch`).
                    Some(g) => {
                        let wr = match packed {
                            Some((_, p)) => w.packed_rows(p, first, n_rows),
                            None => w.rows(first, n_rows),
                        };
                        let xr = x.rows(t0, t1 - t0);
                        g(n, wr, n_rows, xr, t1 - t0, &mut ys[t0..], rows);
                    }
                    None => {
                        for i in 0..n_rows {
                            let wr = w.row(first + i);
                            let yo = &mut ys[i * rows + t0..i * rows + t1];
                            for (y, t) in yo.iter_mut().zip(t0..t1) {
                                let f = if t < split { dot } else { dot_tail };
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

/// `out[r] = E_{expert_of[r]} · x[r]` for every activation row `r`; `out` is
/// `expert_of.len() x e.n_out` row-major. One parallel region over
/// (row, chunk of output rows) pairs.
pub fn expert_gather(
    kt: &KernelTable,
    e: &QExperts,
    expert_of: &[usize],
    x: &QActs,
    out: &mut [f32],
) {
    assert_eq!(x.rows, expert_of.len(), "one expert per activation row");
    if expert_of.is_empty() || e.n_out == 0 {
        return;
    }
    check_pair(&e.expert(expert_of[0]), x.ty, x.n);
    let (n, n_out) = (e.n_in, e.n_out);
    let packed = kt.packed_gemm(e.ty).filter(|_| e.packed.is_some());
    let per = if packed.is_some() {
        packed_rows_per_task(n_out * expert_of.len()).min(n_out)
    } else {
        rows_per_task(n_out * expert_of.len()).min(n_out)
    };
    let chunks_per_row = n_out.div_ceil(per);
    let out = &mut out[..expert_of.len() * n_out];
    let run = |r: usize, c: usize, ys: &mut [f32]| {
        let m = e.expert(expert_of[r]);
        let a = x.row(r);
        if let (Some(g), Some(p)) = (packed, m.packed) {
            let wr = m.packed_rows(p, c * per, ys.len());
            g(n, wr, ys.len(), a, 1, ys, 1);
            return;
        }
        // ggml picks the kernel per expert from the rows routed to it (a
        // count, not a map: no allocation on the decode path). Where the
        // tier's multi-row kernel gives `dot`'s bits it takes the chunk
        // (weight rows in pairs: see `gemm_for_batch`).
        let rows = expert_of.iter().filter(|&&y| y == expert_of[r]).count();
        match (
            kt.batch_dot(e.ty, n_out, rows),
            kt.gemm_for_batch(e.ty, n_out, rows),
        ) {
            (_, Some(g)) => g(n, m.rows(c * per, ys.len()), ys.len(), a, 1, ys, 1),
            (dot, None) => {
                for (i, y) in ys.iter_mut().enumerate() {
                    *y = dot(n, m.row(c * per + i), a);
                }
            }
        }
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

#[cfg(test)]
#[path = "matmul_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "gemm_tests.rs"]
mod gemm_tests;
