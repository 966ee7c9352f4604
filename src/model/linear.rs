//! Matrix products over quantized weights (docs/DESIGN.md §2.6).
//!
//! `W` is `n_out` rows of `n_in` elements of type `ty` (ggml `{n_in, n_out}`).
//! Activations `x` (`rows x n_in` f32) are converted once into
//! `ty.vec_dot_type()` — Q8_K, Q8_0, Q8_1, F16, BF16 or F32 — and then
//! `y[t][o] = vec_dot(W[o], x̃[t])` with f32 accumulation, as ggml does.
//!
//! The products themselves are `kernels::matmul` (matvec, tiled matmul,
//! expert gather, split across rayon); this file adapts the model's matrices
//! and owns the activation conversion cache.

use kernels::matmul::{self as km, QActs, QMatrix};
use kernels::{scalar, GgmlType, KernelTable, Mode, Rows};

use super::observe;

/// A zero-copy weight matrix: `n_out` rows of `row_bytes` bytes.
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a> {
    pub ty: GgmlType,
    pub n_in: usize,
    pub n_out: usize,
    row_bytes: usize,
    data: &'a [u8],
    /// Where the kernels read the rows: the file's, or the loader's copy
    /// (`kernels::repack`) alone or beside them.
    rows: Rows<'a>,
    /// One routed expert of a stack (ggml's `MUL_MAT_ID`; see
    /// `kernels::QMatrix::expert`).
    expert: bool,
    /// The tensor's name in the file ("" when made outside a file).
    pub name: &'a str,
}

impl<'a> Matrix<'a> {
    /// `data` must hold `n_out` rows of `ty.row_bytes(n_in)` bytes (checked
    /// by the binder; checked again here with an assertion).
    pub fn new_unchecked(ty: GgmlType, n_in: usize, n_out: usize, data: &'a [u8]) -> Matrix<'a> {
        let row_bytes = ty.row_bytes(n_in as u64).expect("row is whole blocks") as usize;
        assert!(data.len() >= row_bytes * n_out, "matrix data too short");
        Matrix {
            ty,
            n_in,
            n_out,
            row_bytes,
            data,
            rows: Rows::File,
            expert: false,
            name: "",
        }
    }

    /// The same matrix under the file's tensor name.
    pub fn named(self, name: &'a str) -> Matrix<'a> {
        Matrix { name, ..self }
    }

    /// The same matrix marked as one routed expert of a stack.
    pub fn as_expert(self) -> Matrix<'a> {
        Matrix {
            expert: true,
            ..self
        }
    }

    /// The same matrix read from `rows` (a copy is checked when the
    /// kernels' view is made, [`Matrix::q`]).
    pub fn with_rows(self, rows: Rows<'a>) -> Matrix<'a> {
        Matrix { rows, ..self }
    }

    #[inline]
    pub fn row(&self, o: usize) -> &'a [u8] {
        &self.data[o * self.row_bytes..(o + 1) * self.row_bytes]
    }

    /// Bytes of the whole matrix (what a product streams).
    pub fn bytes(&self) -> usize {
        self.row_bytes * self.n_out
    }

    /// The kernels' view of the same bytes.
    pub fn q(&self) -> QMatrix<'a> {
        let mut q = QMatrix::new(self.ty, self.n_in, self.n_out, self.data)
            .expect("checked in new_unchecked");
        q.expert = self.expert;
        q.with_rows(self.rows).expect("repacked by the loader")
    }

    /// Dequantises row `o` (an embedding lookup).
    pub fn dequantize_row(&self, o: usize, out: &mut [f32]) {
        scalar::dequantize_row(self.ty, self.row(o), &mut out[..self.n_in]);
    }
}

/// Activation rows converted into one dot type, in 8-byte aligned storage.
#[derive(Debug, Default)]
pub struct Activations {
    storage: Vec<u64>,
    ty: Option<GgmlType>,
    n: usize,
    rows: usize,
    row_bytes: usize,
    /// Address and length of the f32 input last converted (ActCache key).
    src: (usize, usize),
}

impl Activations {
    /// Room for `bytes` bytes without reallocating.
    pub fn with_capacity(bytes: usize) -> Activations {
        Activations {
            storage: vec![0; bytes.div_ceil(8)],
            ..Default::default()
        }
    }

    fn reshape(&mut self, ty: GgmlType, n: usize, rows: usize) {
        let row_bytes = ty
            .row_bytes(n as u64)
            .expect("activation length is whole blocks") as usize;
        let need = (row_bytes * rows).div_ceil(8);
        if self.storage.len() < need {
            self.storage.resize(need, 0);
        }
        self.ty = Some(ty);
        self.n = n;
        self.rows = rows;
        self.row_bytes = row_bytes;
    }

    /// Converts `x` (`rows x n`) into `ty`.
    pub fn quantize(&mut self, kt: &KernelTable, ty: GgmlType, x: &[f32], n: usize) {
        let rows = x.len() / n;
        self.reshape(ty, n, rows);
        let q = kt.quantize(ty);
        let rb = self.row_bytes;
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut self.storage);
        for (src, dst) in x.chunks_exact(n).zip(bytes.chunks_exact_mut(rb)) {
            q(src, dst);
        }
    }

    /// Copies rows `idx` of `src` (a gather for one expert's tokens).
    pub fn gather(&mut self, src: &Activations, idx: &[usize]) {
        self.reshape(
            src.ty.expect("gather from filled activations"),
            src.n,
            idx.len(),
        );
        let rb = self.row_bytes;
        let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut self.storage);
        for (d, &i) in dst.chunks_exact_mut(rb).zip(idx) {
            d.copy_from_slice(src.row(i));
        }
    }

    #[inline]
    pub fn row(&self, t: usize) -> &[u8] {
        let bytes: &[u8] = bytemuck::cast_slice(&self.storage);
        &bytes[t * self.row_bytes..(t + 1) * self.row_bytes]
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn ty(&self) -> Option<GgmlType> {
        self.ty
    }

    /// The kernels' view of the converted rows.
    pub fn q(&self) -> QActs<'_> {
        let ty = self.ty.expect("activations are filled");
        let bytes: &[u8] = bytemuck::cast_slice(&self.storage);
        QActs::new(ty, self.n, self.rows, bytes).expect("storage holds rows x row_bytes")
    }
}

/// The f32 input of a stage converted into each dot type at most once.
#[derive(Debug, Default)]
pub struct ActCache {
    slots: Vec<Activations>,
}

impl ActCache {
    pub fn with_capacity(bytes: usize) -> ActCache {
        ActCache {
            slots: (0..3).map(|_| Activations::with_capacity(bytes)).collect(),
        }
    }

    /// Forgets every conversion: call when the f32 input changes.
    pub fn invalidate(&mut self) {
        for s in &mut self.slots {
            s.ty = None;
        }
    }

    /// The conversion of `x` into `ty` made by [`ActCache::get`] since the
    /// last `invalidate`, if any.
    pub fn find(&self, ty: GgmlType, x: &[f32]) -> Option<&Activations> {
        let key = (x.as_ptr() as usize, x.len());
        self.slots.iter().find(|s| s.ty == Some(ty) && s.src == key)
    }

    /// `x` in `ty`, converted now unless this same slice was already
    /// converted since the last `invalidate`.
    pub fn get(&mut self, kt: &KernelTable, ty: GgmlType, x: &[f32], n: usize) -> &Activations {
        let key = (x.as_ptr() as usize, x.len());
        let pos = match self
            .slots
            .iter()
            .position(|s| s.ty == Some(ty) && s.src == key)
        {
            Some(p) => p,
            None => {
                let p = match self
                    .slots
                    .iter()
                    .position(|s| s.ty.is_none() || s.ty == Some(ty))
                {
                    Some(p) => p,
                    None => {
                        self.slots.push(Activations::default());
                        self.slots.len() - 1
                    }
                };
                self.slots[p].quantize(kt, ty, x, n);
                self.slots[p].src = key;
                p
            }
        };
        &self.slots[pos]
    }
}

/// What every product needs besides weights and output: the converted
/// input and the transposition tile.
#[derive(Debug, Default)]
pub struct MatScratch {
    pub cache: ActCache,
    pub tile: Vec<f32>,
}

impl MatScratch {
    /// Room for `rows` activation rows of up to `max_in` elements.
    pub fn new(rows: usize, max_in: usize) -> MatScratch {
        MatScratch {
            cache: ActCache::with_capacity(rows * max_in * 4),
            tile: vec![0.0; km::matmul_tile_len(rows.max(1))],
        }
    }

    /// `out = x · Wᵀ` in numerics `mode`, converting `x` at most once per dot
    /// type until the next `new_input`.
    pub fn project(
        &mut self,
        kt: &KernelTable,
        mode: Mode,
        w: &Matrix,
        x: &[f32],
        out: &mut [f32],
    ) {
        project(kt, mode, w, x, &mut self.cache, out, &mut self.tile);
    }

    /// Call whenever the f32 input of the next products changes.
    pub fn new_input(&mut self) {
        self.cache.invalidate();
    }
}

/// Grows `tile` to what a product of `rows` activation rows needs.
fn grow_tile(tile: &mut Vec<f32>, rows: usize) {
    let need = km::matmul_tile_len(rows);
    if rows > 1 && tile.len() < need {
        tile.resize(need, 0.0);
    }
}

/// `out[t][o] = W[o] · x[t]` for every activation row `t` in numerics
/// `mode` (the kernel is `KernelTable::plan`'s); `out` is
/// `x.rows() x w.n_out`. `tile` is scratch, grown once when too small.
pub fn matmul(
    kt: &KernelTable,
    w: &Matrix,
    x: &Activations,
    out: &mut [f32],
    tile: &mut Vec<f32>,
    mode: Mode,
) {
    grow_tile(tile, x.rows);
    if !w.expert {
        // A routed expert's bytes are counted once per pass by the MoE.
        observe::bytes(w.bytes());
    }
    km::matmul(kt, &w.q(), &x.q(), out, tile, mode);
}

/// Converts `x` (`rows x w.n_in`) through `cache` and multiplies.
pub fn project(
    kt: &KernelTable,
    mode: Mode,
    w: &Matrix,
    x: &[f32],
    cache: &mut ActCache,
    out: &mut [f32],
    tile: &mut Vec<f32>,
) {
    if observe::on() {
        let rows = out.len() / w.n_out.max(1);
        observe::product(w.name, &x[..(rows * w.n_in).min(x.len())], w.n_in);
    }
    let acts = cache.get(kt, w.ty.vec_dot_type(), x, w.n_in);
    matmul(kt, w, acts, out, tile, mode);
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    fn rng(seed: u64) -> impl FnMut() -> f32 {
        let mut s = seed;
        move || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        }
    }

    #[test]
    fn f32_matmul_equals_plain_loops_for_one_and_many_rows() {
        let kt = kernels::KernelTable::chosen();
        let (n_in, n_out) = (13, 2100);
        let mut r = rng(1);
        let w: Vec<f32> = (0..n_in * n_out).map(|_| r()).collect();
        let m = Matrix::new_unchecked(GgmlType::F32, n_in, n_out, bytemuck::cast_slice(&w));
        for rows in [1usize, 3] {
            let x: Vec<f32> = (0..rows * n_in).map(|_| r()).collect();
            let mut acts = Activations::default();
            acts.quantize(kt, GgmlType::F32, &x, n_in);
            let mut out = vec![0.0; rows * n_out];
            matmul(kt, &m, &acts, &mut out, &mut Vec::new(), Mode::Decode);
            for t in 0..rows {
                for o in 0..n_out {
                    let want: f32 = (0..n_in).map(|i| w[o * n_in + i] * x[t * n_in + i]).sum();
                    assert!((out[t * n_out + o] - want).abs() < 1e-5, "t={t} o={o}");
                }
            }
        }
    }

    #[test]
    fn f16_weights_see_activations_rounded_to_f16() {
        let kt = kernels::KernelTable::chosen();
        let n_in = 4;
        let w: Vec<f16> = [1.0f32, 1.0, 1.0, 1.0]
            .iter()
            .map(|x| f16::from_f32(*x))
            .collect();
        let m = Matrix::new_unchecked(GgmlType::F16, n_in, 1, bytemuck::cast_slice(&w));
        // 1 + 2^-12 is not representable in f16: it rounds to 1.
        let x = [1.0 + 1.0 / 4096.0, 0.0, 0.0, 0.0];
        let mut cache = ActCache::default();
        let mut out = [0.0f32];
        project(
            kt,
            Mode::Decode,
            &m,
            &x,
            &mut cache,
            &mut out,
            &mut Vec::new(),
        );
        assert_eq!(out[0], 1.0);
    }

    #[test]
    fn act_cache_converts_once_per_slice_until_invalidated() {
        let kt = kernels::KernelTable::chosen();
        let mut cache = ActCache::default();
        let mut x = [1.0f32, 2.0];
        assert_eq!(cache.get(kt, GgmlType::F32, &x, 2).row(0).len(), 8);
        // New content in the same slice is not seen until invalidation.
        x[0] = 5.0;
        let r: &[f32] = bytemuck::cast_slice(cache.get(kt, GgmlType::F32, &x, 2).row(0));
        assert_eq!(r, &[1.0, 2.0]);
        cache.invalidate();
        let r: &[f32] = bytemuck::cast_slice(cache.get(kt, GgmlType::F32, &x, 2).row(0));
        assert_eq!(r, &[5.0, 2.0]);
        // A different slice is always converted.
        let y = [7.0f32, 8.0];
        let r: &[f32] = bytemuck::cast_slice(cache.get(kt, GgmlType::F32, &y, 2).row(0));
        assert_eq!(r, &[7.0, 8.0]);
    }
}
