//! Prompt-batch products (AVX-512 VNNI), for batches that need not match
//! single-token decoding bit for bit: the prompt of a prefill, never a
//! speculative verify pass. They sum in their own order, so they stand
//! beside the multi-row kernels of [`super::gemm`] (which keep the one-row
//! dot's bits) rather than replacing them.
//!
//! **Q6_K** (`gemm_q6_k_prompt`): weight rows are the lanes. Sixteen
//! weight rows at a time are unpacked once into their levels (+32, 0..=63)
//! and sub-block scales `d·sᵢ` (f32), then transposed so that one vector
//! holds four levels of each of the 16 rows. One `vpdpbusd` takes that
//! vector against four elements of one token (a broadcast dword): 64
//! products per instruction where the decode-order kernels need three
//! instructions for 64. Tokens come in register blocks of up to eight, so a
//! batch of any size wastes no lanes (a routed expert in a prefill sees a
//! dozen or two tokens). Per 16-element sub-block the i32 sums start at
//! `−32·bsum` (removing the +32 from every level exactly), are converted and
//! scaled by `d·sᵢ`, and per block by each token's `d`. The integer sums are
//! exact; only the f32 summation order differs from `vec_dot`. The output
//! is written token-major (`crate::sig::PromptFn`), as the model wants it.
//!
//! **Q3_K** (`gemm_q3_k_prompt`): the same with levels + 4 (0..=7) and bias 4.
//! **Q4_K** (`gemm_q4_k_prompt`): the same with the nibbles (0..=15, no
//! bias) and, per 16-element half of each 32-element sub-block, the mins'
//! term `dmin·mᵢ·bsum` taken off in f32.
//! **Q5_K** (`gemm_q5_k_prompt`): as Q4_K with the fifth bit from `qh`
//! (levels 0..=31).
//! **IQ4_XS** (`gemm_iq4_xs_prompt`): the grid values + 128 (1..=241) and
//! bias 128, the scale `d·(lsᵢ − 32)` for both halves of sub-block i.
//! **Q8_0** (`gemm_q8_0_prompt`): levels + 128 against Q8_0 activations,
//! the +128 taken off per 32-element block through each token's sum, then
//! `d_w·d_a` per block.

use std::arch::x86_64::*;

use crate::blocks::as_blocks;
use crate::iq4_r8::Group as Iq4Group;
use crate::q3k_r8::Group as Q3Group;
use crate::q4k_r8::Group as Q4Group;
use crate::q5k_r8::Group as Q5Group;
use crate::q6k_r8::Group as Q6Group;
use crate::q80_r8::Group as Q80Group;
use crate::scalar::iq4_xs::BlockIq4Xs;
use crate::scalar::kquant_search::get_scale_min_k4;
use crate::scalar::q3_k::BlockQ3K;
use crate::scalar::q4_k::BlockQ4K;
use crate::scalar::q5_k::BlockQ5K;
use crate::scalar::q6_k::BlockQ6K;
use crate::scalar::q8_0::BlockQ8_0;
use crate::scalar::q8_k::BlockQ8K;
use crate::x86::avx2::kquants::f16_to_f32;
use crate::x86::avx512::kquants::{halves_i16, BIASED_GRID};
use crate::x86::avx512::kquants::{q6_k_levels, q6_k_levels_gfni, Q6Affine};
use crate::x86::avx512::lowbit::{self, gf_bit2, gf_low_pair, q3_k_levels, Q3Unpack};
use crate::GgmlType;

/// This tier's prompt-batch product for weight type `ty`, if it has one.
// Same detection and match as gemm.rs::gemm_fn: each hands out its own kernel family (PromptFn
// here, GemmFn there).
pub fn gemm_fn(ty: GgmlType) -> Option<crate::sig::PromptFn> {
    if !(crate::Isa::Avx512.available() && is_x86_feature_detected!("avx512vnni")) {
        return None;
    }
    match ty {
        GgmlType::Q6_K => Some(gemm_q6_k_prompt),
        GgmlType::Q3_K => Some(gemm_q3_k_prompt),
        GgmlType::Q4_K => Some(gemm_q4_k_prompt),
        GgmlType::Q5_K => Some(gemm_q5_k_prompt),
        GgmlType::IQ4_XS => Some(gemm_iq4_xs_prompt),
        GgmlType::Q8_0 => Some(gemm_q8_0_prompt),
        GgmlType::F32 => Some(gemm_f32_prompt),
        _ => None,
    }
}

/// This tier's prompt-batch product reading weights of type `ty` repacked
/// eight rows at a time ([`crate::repack`]), if it has one: [`gemm_fn`]'s
/// outputs bit for bit (the same levels and scales reach the same tiles),
/// so a prompt need not read the file's rows of a repacked matrix.
pub fn packed_gemm_fn(ty: GgmlType) -> Option<crate::sig::PromptFn> {
    gemm_fn(ty)?;
    if !gfni() {
        return None;
    }
    match ty {
        GgmlType::Q6_K => Some(gemm_q6_k_packed_prompt),
        GgmlType::Q3_K => Some(gemm_q3_k_packed_prompt),
        GgmlType::Q4_K => Some(gemm_q4_k_packed_prompt),
        GgmlType::Q5_K => Some(gemm_q5_k_packed_prompt),
        GgmlType::IQ4_XS if is_x86_feature_detected!("avx512vbmi") => {
            Some(gemm_iq4_xs_packed_prompt)
        }
        GgmlType::Q8_0 => Some(gemm_q8_0_packed_prompt),
        _ => None,
    }
}

/// Weight rows per group: the lanes of every vector.
const ROWS: usize = 16;
/// Tokens per register block of a tile.
const TB: usize = 8;

/// Per token of a call: its blocks' `d` (`[token][block]`) and the integer
/// start of each sub-sum (`[token][block][subs]`: `−bias·Σa` per sub-block,
/// or the sub-block's `Σa` itself where the format has mins).
#[derive(Default)]
struct Acts {
    d: Vec<f32>,
    bias: Vec<i32>,
}

impl Acts {
    /// Q8_K rows against K-quant levels offset by `BIAS`, `SUBS`
    /// sub-blocks per block (16 of 16 elements, or 8 of 32); `BIAS = −1`
    /// stores each sub-block's `Σa` (mins).
    fn k_quant<const BIAS: i32, const SUBS: usize>(&mut self, y: &[&[BlockQ8K]], nb: usize) {
        let per = 16 / SUBS;
        grow(&mut self.d, y.len() * nb);
        grow(&mut self.bias, y.len() * nb * SUBS);
        for (t, row) in y.iter().enumerate() {
            for (b, yb) in row[..nb].iter().enumerate() {
                self.d[t * nb + b] = yb.d;
                for (s, bs) in yb.bsums.chunks_exact(per).enumerate() {
                    let sum: i32 = bs.iter().map(|&v| v as i32).sum();
                    self.bias[(t * nb + b) * SUBS + s] = -BIAS * sum;
                }
            }
        }
    }

    /// Q8_0 rows against levels + 128: `−128·Σa` per 32-element block.
    fn q8_0(&mut self, y: &[&[BlockQ8_0]], nb: usize) {
        grow(&mut self.d, y.len() * nb);
        grow(&mut self.bias, y.len() * nb);
        for (t, row) in y.iter().enumerate() {
            for (b, yb) in row[..nb].iter().enumerate() {
                self.d[t * nb + b] = yb.d.to_f32();
                self.bias[t * nb + b] = -128 * yb.qs.iter().map(|&q| q as i32).sum::<i32>();
            }
        }
    }
}

/// Grows `v` to at least `n` elements (new ones are zero; old ones stay).
fn grow<T: Default + Clone>(v: &mut Vec<T>, n: usize) {
    if v.len() < n {
        v.resize(n, T::default());
    }
}

/// `dst[k·16 + t] = src[t][k]` for a 16 × 16 block of dwords.
///
/// # Safety
/// The caller must have AVX-512F enabled.
#[target_feature(enable = "avx512f")]
unsafe fn transpose16(src: &[&[u32]; ROWS], dst: &mut [u32]) {
    assert!(dst.len() >= 256 && src.iter().all(|r| r.len() >= 16));
    // SAFETY: 16 readable dwords per source row and 256 writable ones in
    // `dst` (asserted); AVX-512F is enabled.
    unsafe {
        let r = std::array::from_fn(|t| _mm512_loadu_si512(src[t].as_ptr().cast()));
        for (k, row) in transpose16_regs(r).iter().enumerate() {
            _mm512_storeu_si512(dst.as_mut_ptr().add(k * ROWS).cast(), *row);
        }
    }
}

/// A 16 × 16 transpose of dwords in registers: lane t of `out[k]` is dword
/// k of `r[t]`.
///
/// # Safety
/// The caller must have AVX-512F enabled.
#[inline(always)]
unsafe fn transpose16_regs(r: [__m512i; 16]) -> [__m512i; 16] {
    // SAFETY: register-only; the caller enables AVX-512F.
    unsafe {
        // 1. Dword pairs: a[2i] lane L = tokens 2i, 2i+1 at k = 4L, 4L+1;
        //    a[2i+1] the same at k = 4L+2, 4L+3.
        let mut a = [_mm512_setzero_si512(); 16];
        for i in 0..8 {
            a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
            a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
        }
        // 2. Qword pairs: v[i][m] lane L = tokens 4i..4i+4 at k = 4L + m.
        let mut v = [[_mm512_setzero_si512(); 4]; 4];
        for (i, vi) in v.iter_mut().enumerate() {
            for j in 0..2 {
                let (x, y) = (a[4 * i + j], a[4 * i + 2 + j]);
                vi[2 * j] = _mm512_unpacklo_epi64(x, y);
                vi[2 * j + 1] = _mm512_unpackhi_epi64(x, y);
            }
        }
        // 3. Per m, a 4 x 4 transpose of 128-bit lanes: row k = 4L + m
        //    takes lane L of v[0..4][m].
        let mut out = [_mm512_setzero_si512(); 16];
        for m in 0..4 {
            let p = _mm512_shuffle_i32x4::<0b01_00_01_00>(v[0][m], v[1][m]);
            let q = _mm512_shuffle_i32x4::<0b11_10_11_10>(v[0][m], v[1][m]);
            let r = _mm512_shuffle_i32x4::<0b01_00_01_00>(v[2][m], v[3][m]);
            let s = _mm512_shuffle_i32x4::<0b11_10_11_10>(v[2][m], v[3][m]);
            out[m] = _mm512_shuffle_i32x4::<0b10_00_10_00>(p, r);
            out[4 + m] = _mm512_shuffle_i32x4::<0b11_01_11_01>(p, r);
            out[8 + m] = _mm512_shuffle_i32x4::<0b10_00_10_00>(q, s);
            out[12 + m] = _mm512_shuffle_i32x4::<0b11_01_11_01>(q, s);
        }
        out
    }
}

/// `dst[k·16 + r] = src[r·len + k]` for 16 rows of `len` dwords.
fn transpose_rows(src: &[u32], len: usize, dst: &mut [u32]) {
    let full = len - len % 16;
    for k0 in (0..full).step_by(16) {
        let rows: [&[u32]; ROWS] = std::array::from_fn(|r| &src[r * len + k0..r * len + k0 + 16]);
        // SAFETY: the prompt kernels run only with AVX-512F (checked by
        // `prompt_gemm`).
        unsafe { transpose16(&rows, &mut dst[k0 * ROWS..]) };
    }
    for k in full..len {
        for r in 0..ROWS {
            dst[k * ROWS + r] = src[r * len + k];
        }
    }
}

#[cfg(test)]
#[test]
fn transpose_rows_transposes() {
    if !crate::Isa::Avx512.available() {
        return;
    }
    for len in [16, 40, 7] {
        let src: Vec<u32> = (0..16 * len).map(|i| i as u32 * 3 + 1).collect();
        let mut dst = vec![0u32; 16 * len];
        transpose_rows(&src, len, &mut dst);
        for r in 0..16 {
            for k in 0..len {
                assert_eq!(dst[k * 16 + r], src[r * len + k], "len {len} r {r} k {k}");
            }
        }
    }
}

/// The sixteen-row Q3_K unpacker leaves the tiles exactly what the per-row
/// unpacker and the transposes leave, for every row of full and short
/// groups, over random bytes (every bit pattern of `hmask`, `qs` and the
/// scales) and finite `d`.
#[cfg(test)]
#[test]
fn the_sixteen_row_q3_k_unpack_is_the_row_unpack_transposed() {
    if !(crate::Isa::Avx512.available() && is_x86_feature_detected!("avx512vnni") && gfni()) {
        return;
    }
    let nb = 3;
    let n = 256 * nb;
    // xorshift as in examples/expert_stream.rs: a library test cannot reach the examples' helpers.
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let rows: Vec<Vec<BlockQ3K>> = (0..ROWS)
        .map(|_| {
            (0..nb)
                .map(|_| {
                    let mut b: BlockQ3K = bytemuck::Zeroable::zeroed();
                    let raw: &mut [u8] = bytemuck::bytes_of_mut(&mut b);
                    raw.iter_mut().for_each(|v| *v = next() as u8);
                    b.d = half::f16::from_f32((next() % 2001) as f32 / 1000.0 - 1.0);
                    b
                })
                .collect()
        })
        .collect();
    for nr in [ROWS, 5, 1] {
        let mut want = RowGroup::default();
        let mut got = RowGroup::default();
        for rg in [&mut want, &mut got] {
            grow(&mut rg.levels, ROWS * n / 4);
            grow(&mut rg.scales, ROWS * n / 16);
            rg.t_levels.grow(ROWS * n / 4);
            rg.t_scales.grow(ROWS * n / 16);
        }
        for (r, row) in rows[..nr].iter().enumerate() {
            // SAFETY: the features were detected above.
            unsafe { unpack_q3_k_gfni(row, &mut want, r, n) };
        }
        transpose_rows(&want.levels, n / 4, &mut want.t_levels);
        transpose_rows(
            bytemuck::cast_slice(&want.scales),
            n / 16,
            &mut want.t_scales,
        );
        let x: [&[BlockQ3K]; ROWS] = std::array::from_fn(|r| &rows[r.min(nr - 1)][..]);
        // SAFETY: the features were detected above.
        unsafe { unpack16_q3_k_gfni(&x, &mut got, nb) };
        for r in 0..nr {
            for k in 0..n / 4 {
                assert_eq!(
                    got.t_levels[k * ROWS + r],
                    want.t_levels[k * ROWS + r],
                    "levels: rows {nr}, row {r}, dword {k}"
                );
            }
            for i in 0..n / 16 {
                assert_eq!(
                    got.t_scales[i * ROWS + r],
                    want.t_scales[i * ROWS + r],
                    "scales: rows {nr}, row {r}, sub-block {i}"
                );
            }
        }
    }
}

/// Sixteen weight rows unpacked: levels `[row][n / 4]` as dwords of four,
/// `[row][n / per_scale]` scales (`Format::per_scale`), and the same
/// transposed for the tiles (`[dword][row]`, `[scale][row]`). Rows past a
/// short group's last hold stale values whose lanes are never read.
#[derive(Default)]
struct RowGroup {
    levels: Vec<u32>,
    scales: Vec<f32>,
    /// Q4_K / Q5_K: `[row][n / 32]` the mins' scales `dmin·mᵢ`.
    mins: Vec<f32>,
    t_levels: Lines,
    t_scales: Lines,
    t_mins: Lines,
}

impl RowGroup {
    /// Where an unpacker of two repacked group rows (`groups`: their
    /// lengths in blocks) writes: the transposed levels, scales and mins,
    /// after checking that both group rows hold `nb` blocks and the
    /// transposed buffers `nb` blocks of 64 dwords and `subs` scales (and,
    /// with `mins`, `subs` mins).
    fn packed_dst(
        &mut self,
        groups: (usize, usize),
        nb: usize,
        subs: usize,
        mins: bool,
    ) -> (*mut u32, *mut f32, *mut f32) {
        assert!(groups.0 >= nb && groups.1 >= nb && self.t_levels.len() >= nb * 64 * ROWS);
        assert!(self.t_scales.len() >= nb * subs * ROWS);
        assert!(!mins || self.t_mins.len() >= nb * subs * ROWS);
        (
            self.t_levels.as_mut_ptr(),
            self.t_scales.as_mut_ptr().cast(),
            self.t_mins.as_mut_ptr().cast(),
        )
    }
}

/// One cache line of dwords: a transposed dword of all sixteen rows.
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
struct Line([u32; ROWS]);

/// Dwords on 64-byte boundaries: every 512-bit load of a tile (and store of
/// an unpacker) touches one cache line, not two.
#[derive(Default)]
struct Lines(Vec<Line>);

impl Lines {
    /// At least `n` dwords.
    fn grow(&mut self, n: usize) {
        grow(&mut self.0, n.div_ceil(ROWS));
    }
}

impl std::ops::Deref for Lines {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        bytemuck::cast_slice(&self.0)
    }
}

impl std::ops::DerefMut for Lines {
    fn deref_mut(&mut self) -> &mut [u32] {
        bytemuck::cast_slice_mut(&mut self.0)
    }
}

/// One tile's results: `[token][row]`.
type Res = [[f32; ROWS]; TB];

/// A tile: the transposed rows of a [`RowGroup`] against up to [`TB`]
/// tokens (their blocks, and their [`Acts`] from token `t0`), `nb` blocks.
type TileFn<A> = unsafe fn(&RowGroup, &[&[A]], &Acts, usize, usize, &mut Res);

/// How one weight format runs through [`prompt_gemm`].
struct Format<W, A> {
    /// Elements per weight (and activation) block.
    qk: usize,
    /// Elements per weight-row scale.
    per_scale: usize,
    /// The per-token values of a call's activation rows.
    acts: fn(&mut Acts, &[&[A]], usize),
    /// Unpacks a weight row into slot `r` of the group (`n` elements).
    unpack: UnpackFn<W>,
    /// Unpacks sixteen rows at once straight into the transposed layout,
    /// where the format has such an unpacker (then `unpack` is not used).
    group: Option<GroupUnpackFn<W>>,
    tile: TileFn<A>,
    /// Whether the rows have mins ([`RowGroup::mins`]).
    mins: bool,
}

impl<W> Format<W, BlockQ8K> {
    /// A 256-element block against Q8_K with a scale per 16 elements: the
    /// levels offset by `BIAS` (`acts = Acts::k_quant::<BIAS, 16>`).
    fn k256(acts: fn(&mut Acts, &[&[BlockQ8K]], usize), unpack: UnpackFn<W>) -> Self {
        Format {
            qk: 256,
            per_scale: 16,
            acts,
            unpack,
            tile: tile_k::<false, 16>,
            mins: false,
            group: None,
        }
    }

    /// A 256-element block against Q8_K with a scale per 32 elements
    /// (`acts = Acts::k_quant::<BIAS, 8>`): the levels offset by `BIAS`, or
    /// (`mins`) unbiased with the mins' term.
    fn k32(acts: fn(&mut Acts, &[&[BlockQ8K]], usize), unpack: UnpackFn<W>, mins: bool) -> Self {
        Format {
            qk: 256,
            per_scale: 32,
            acts,
            unpack,
            tile: if mins {
                tile_k::<true, 8>
            } else {
                tile_k::<false, 8>
            },
            mins,
            group: None,
        }
    }

    /// The format with a sixteen-row unpacker, when there is one.
    fn with_group(self, group: Option<GroupUnpackFn<W>>) -> Self {
        Format { group, ..self }
    }
}

/// A `GemmFn` running [`prompt_gemm`] with format `$f` over blocks `$w`
/// (weights) and `$a` (activations).
macro_rules! prompt_entry {
    ($(#[$doc:meta])* $name:ident, $w:ty, $a:ty, $f:expr) => {
        // The parameter list below is sig.rs::PromptFn written out: an fn item cannot take its
        // signature from the type alias, and gemm_fn hands these out as PromptFn pointers.
        $(#[$doc])*
        ///
        /// # Safety
        /// As [`crate::sig::PromptFn`].
        unsafe fn $name(
            n: usize,
            w: &[u8],
            w_rows: usize,
            act: &[u8],
            act_rows: usize,
            out: *mut f32,
            out_stride: usize,
        ) {
            // SAFETY: the caller's contract is `prompt_gemm`'s.
            unsafe { prompt_gemm::<$w, $a>(&$f, n, w, act, out, (w_rows, act_rows, out_stride)) }
        }
    };
}

prompt_entry!(
    /// `out[t·out_stride + i] = W_i · x_t` for Q6_K weights and Q8_K
    /// activations, in this module's order (see the module doc).
    gemm_q6_k_prompt,
    BlockQ6K,
    BlockQ8K,
    Format::k256(Acts::k_quant::<32, 16>, q6_k_unpack())
);
prompt_entry!(
    /// The same for Q3_K weights (levels + 4, 0..=7; bias 4).
    gemm_q3_k_prompt,
    BlockQ3K,
    BlockQ8K,
    Format::k256(Acts::k_quant::<4, 16>, q3_k_unpack()).with_group(q3_k_group())
);
prompt_entry!(
    /// The same for Q4_K weights: the nibbles (no bias; each token's `Σa`
    /// per 16 elements instead), then the mins' term per 16 elements.
    gemm_q4_k_prompt,
    BlockQ4K,
    BlockQ8K,
    Format::k32(Acts::k_quant::<-1, 8>, unpack_q4_k, true)
);
prompt_entry!(
    /// The same for Q5_K weights (levels 0..=31, mins as Q4_K's).
    gemm_q5_k_prompt,
    BlockQ5K,
    BlockQ8K,
    Format::k32(Acts::k_quant::<-1, 8>, unpack_q5_k, true)
);
prompt_entry!(
    /// The same for IQ4_XS weights (grid values + 128; bias 128).
    gemm_iq4_xs_prompt,
    BlockIq4Xs,
    BlockQ8K,
    Format::k32(Acts::k_quant::<128, 8>, unpack_iq4_xs, false)
);
prompt_entry!(
    /// `out[t·out_stride + i] = W_i · x_t` for Q8_0 weights and activations:
    /// levels + 128 against Q8_0 activations, the +128 taken off per block
    /// through each token's sum, then `d_w·d_a` per block.
    gemm_q8_0_prompt,
    BlockQ8_0,
    BlockQ8_0,
    Q8_0_FORMAT
);

/// Q8_0 against Q8_0 activations (see [`gemm_q8_0_prompt`]).
const Q8_0_FORMAT: Format<BlockQ8_0, BlockQ8_0> = Format {
    qk: 32,
    per_scale: 32,
    acts: Acts::q8_0,
    unpack: unpack_q8_0,
    tile: tile_q8_0,
    mins: false,
    group: None,
};

/// The driver: the activation rows' per-token values once, then weight
/// rows sixteen at a time, each group unpacked and transposed once and run
/// against every block of [`TB`] tokens; `out[t·out_stride + i]`.
///
/// # Safety
/// As [`crate::sig::PromptFn`].
unsafe fn prompt_gemm<W: bytemuck::Pod, A: bytemuck::Pod>(
    f: &Format<W, A>,
    n: usize,
    w: &[u8],
    act: &[u8],
    out: *mut f32,
    (w_rows, act_rows, out_stride): (usize, usize, usize),
) {
    assert!(n.is_multiple_of(f.qk), "gemm: {n} is not whole blocks");
    let nb = n / f.qk;
    let wr = nb * size_of::<W>();
    assert!(
        w.len() >= w_rows * wr,
        "gemm: {w_rows} rows of {n} do not fit the bytes"
    );
    let (q4, ns) = (n / 4, n / f.per_scale);
    let mut unpack = |i0: usize, nr: usize, rg: &mut RowGroup| {
        let row = |r: usize| -> &[W] { as_blocks(&w[(i0 + r) * wr..(i0 + r + 1) * wr]) };
        if let Some(group) = f.group {
            // A short group repeats its last row in the lanes past it.
            let x: [&[W]; ROWS] = std::array::from_fn(|r| row(r.min(nr - 1)));
            // SAFETY: `tiles` checked the features.
            unsafe { group(&x, rg, nb) };
        } else {
            for r in 0..nr {
                // SAFETY: `tiles` checked the features.
                unsafe { (f.unpack)(row(r), rg, r, n) };
            }
            transpose_rows(&rg.levels, q4, &mut rg.t_levels);
            transpose_rows(bytemuck::cast_slice(&rg.scales), ns, &mut rg.t_scales);
            if f.mins {
                transpose_rows(bytemuck::cast_slice(&rg.mins), ns, &mut rg.t_mins);
            }
        }
        prefetch_l2(&w[(i0 + ROWS).min(w_rows) * wr..(i0 + 2 * ROWS).min(w_rows) * wr]);
    };
    // SAFETY: the caller's contract.
    unsafe { tiles(f, n, act, out, (w_rows, act_rows, out_stride), &mut unpack) }
}

/// The next group's rows, into L2 while this group's tiles run (a group's
/// first touch of its rows otherwise waits on memory).
fn prefetch_l2(next: &[u8]) {
    for line in next.chunks(64) {
        // SAFETY: prefetching is a hint with no architectural effect; SSE
        // is part of x86-64.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(line.as_ptr().cast()) };
    }
}

/// What [`prompt_gemm`] and [`prompt_gemm_packed`] share: the activation
/// rows' per-token values once, then for weight rows sixteen at a time
/// `unpack(i0, nr, rg)` (rows `i0 .. i0 + nr` into `rg`'s transposed
/// levels and scales) and the tiles against every block of [`TB`] tokens;
/// `out[t·out_stride + i]`.
///
/// # Safety
/// As [`crate::sig::PromptFn`].
unsafe fn tiles<W, A: bytemuck::Pod>(
    f: &Format<W, A>,
    n: usize,
    act: &[u8],
    out: *mut f32,
    (w_rows, act_rows, out_stride): (usize, usize, usize),
    unpack: &mut dyn FnMut(usize, usize, &mut RowGroup),
) {
    let nb = n / f.qk;
    let ar = nb * size_of::<A>();
    assert!(
        act.len() >= act_rows * ar && w_rows <= out_stride,
        "gemm: {act_rows} activation rows of {n} do not fit the bytes"
    );
    if w_rows == 0 || act_rows == 0 {
        return;
    }
    assert!(
        crate::Isa::Avx512.available() && is_x86_feature_detected!("avx512vnni"),
        "the prompt kernels need AVX512-VNNI"
    );
    let rows: Vec<&[A]> = (0..act_rows)
        .map(|t| as_blocks(&act[t * ar..(t + 1) * ar]))
        .collect();
    SCRATCH.with_borrow_mut(|sc| {
        let Scratch { acts, rg } = sc;
        (f.acts)(acts, &rows, nb);
        let (q4, ns) = (n / 4, n / f.per_scale);
        grow(&mut rg.levels, ROWS * q4);
        grow(&mut rg.scales, ROWS * ns);
        rg.t_levels.grow(ROWS * q4);
        rg.t_scales.grow(ROWS * ns);
        if f.mins {
            grow(&mut rg.mins, ROWS * ns);
            rg.t_mins.grow(ROWS * ns);
        }
        let mut res = [[0f32; ROWS]; TB];
        for i0 in (0..w_rows).step_by(ROWS) {
            let nr = ROWS.min(w_rows - i0);
            unpack(i0, nr, rg);
            for t0 in (0..act_rows).step_by(TB) {
                let nt = TB.min(act_rows - t0);
                // SAFETY: the features were checked above; the groups hold
                // `nb` blocks of every row and token.
                unsafe { (f.tile)(rg, &rows[t0..t0 + nt], acts, t0, nb, &mut res) };
                for (t, lanes) in res[..nt].iter().enumerate() {
                    // SAFETY: the caller lets us write `nr` outputs from
                    // `i0` of token `t0 + t` (`i0 + nr <= w_rows`).
                    unsafe {
                        let dst = out.add((t0 + t) * out_stride + i0);
                        std::ptr::copy_nonoverlapping(lanes.as_ptr(), dst, nr);
                    }
                }
            }
        }
    });
}

/// [`prompt_gemm`] on weights repacked eight rows at a time (groups `G`,
/// `w_rows` a multiple of 8): `unpack(a, b, rg, nb)` takes the group rows
/// of weight rows 0-7 and 8-15 of a group of sixteen (`b = a` past the
/// last) into `rg`'s transposed levels and scales, as `f`'s own unpacker
/// leaves them from the file's rows.
///
/// # Safety
/// As [`crate::sig::PromptFn`], and `unpack` needs the features `tiles`
/// checks plus GFNI.
unsafe fn prompt_gemm_packed<W, A: bytemuck::Pod, G: bytemuck::Pod>(
    f: &Format<W, A>,
    unpack: unsafe fn(&[G], &[G], &mut RowGroup, usize),
    n: usize,
    w: &[u8],
    act: &[u8],
    out: *mut f32,
    (w_rows, act_rows, out_stride): (usize, usize, usize),
) {
    assert!(
        n.is_multiple_of(256) && w_rows.is_multiple_of(crate::repack::ROWS),
        "packed gemm: {w_rows} x {n} is not whole groups"
    );
    let nb = n / 256;
    let gr = nb * size_of::<G>();
    assert!(
        w.len() >= w_rows / crate::repack::ROWS * gr,
        "packed gemm: {w_rows} rows of {n} do not fit the bytes"
    );
    let group_row = |i: usize| -> &[G] { as_blocks(&w[i * gr..(i + 1) * gr]) };
    let mut unpack = |i0: usize, nr: usize, rg: &mut RowGroup| {
        let a = group_row(i0 / crate::repack::ROWS);
        let b = match nr > crate::repack::ROWS {
            true => group_row(i0 / crate::repack::ROWS + 1),
            false => a,
        };
        // SAFETY: the caller's contract.
        unsafe { unpack(a, b, rg, nb) };
        let next = (i0 + ROWS).min(w_rows) / crate::repack::ROWS;
        let end = (i0 + 2 * ROWS).min(w_rows) / crate::repack::ROWS;
        prefetch_l2(&w[next * gr..end * gr]);
    };
    // SAFETY: the caller's contract.
    unsafe { tiles(f, n, act, out, (w_rows, act_rows, out_stride), &mut unpack) }
}

/// Group rows `a` (weight rows 0-7) and `b` (8-15) of repacked Q3_K into
/// `rg`: levels + 4 and `d·s`, as [`unpack16_q3_k_gfni`] leaves the file's.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,gfni,avx2,fma,f16c")]
fn unpack_q3_k_r8(a: &[Q3Group], b: &[Q3Group], rg: &mut RowGroup, nb: usize) {
    let (lv, sc, _) = rg.packed_dst((a.len(), b.len()), nb, 16, false);
    let low = super::q3k_r8::low_pairs();
    // SAFETY: every store is within the lengths `packed_dst` checked (block blk
    // < nb, quad < 64, sub-block < 16, 16 lanes); the features are enabled.
    unsafe {
        for blk in 0..nb {
            for (half, g) in [&a[blk], &b[blk]].into_iter().enumerate() {
                for j in 0..16 {
                    for m in 0..4 {
                        let u = super::q3k_r8::levels(g, j, m, &low);
                        let k = blk * 64 + 4 * j + m;
                        _mm256_storeu_si256(lv.add(k * ROWS + 8 * half).cast(), u);
                    }
                }
                store_scales8(g.d, &g.scales, sc.add(blk * 16 * ROWS + 8 * half));
            }
        }
    }
}

/// Group rows `a` (weight rows 0-7) and `b` (8-15) of repacked Q6_K into
/// `rg`: levels + 32 and `d·s`, as [`unpack_q6_k`] and the transposes
/// leave the file's.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,gfni,avx2,fma,f16c")]
fn unpack_q6_k_r8(a: &[Q6Group], b: &[Q6Group], rg: &mut RowGroup, nb: usize) {
    let (lv, sc, _) = rg.packed_dst((a.len(), b.len()), nb, 16, false);
    let pair = super::q6k_r8::high_pairs();
    // SAFETY: as in `unpack_q3_k_r8`.
    unsafe {
        for blk in 0..nb {
            for (half, g) in [&a[blk], &b[blk]].into_iter().enumerate() {
                for q in 0..32 {
                    let (u_lo, u_hi) = super::q6k_r8::levels(g, q, &pair);
                    let k = blk * 64 + q;
                    _mm256_storeu_si256(lv.add(k * ROWS + 8 * half).cast(), u_lo);
                    _mm256_storeu_si256(lv.add((k + 32) * ROWS + 8 * half).cast(), u_hi);
                }
                store_scales8(g.d, &g.scales, sc.add(blk * 16 * ROWS + 8 * half));
            }
        }
    }
}

/// Group rows `a` (weight rows 0-7) and `b` (8-15) of repacked Q5_K into
/// `rg`: levels 0..=31, `d·sc` and `dmin·m` per 32 elements, as
/// [`unpack_q5_k`] and the transposes leave the file's.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,gfni,avx2,fma,f16c")]
fn unpack_q5_k_r8(a: &[Q5Group], b: &[Q5Group], rg: &mut RowGroup, nb: usize) {
    use super::q4k_r8::Minned;
    let (lv, sc, mn) = rg.packed_dst((a.len(), b.len()), nb, 8, true);
    // SAFETY: every store is within the lengths `packed_dst` checked (block blk
    // < nb, dword < 64, scale < 8, 16 lanes); the features are enabled.
    unsafe {
        for blk in 0..nb {
            for (half, g) in [&a[blk], &b[blk]].into_iter().enumerate() {
                for k in 0..4 {
                    for q in 0..8 {
                        let w = _mm256_loadu_si256(g.k4().qs[8 * k + q].as_ptr().cast());
                        let (lo, hi) = g.levels(k, q, w);
                        let dw = blk * 64 + 16 * k + q;
                        _mm256_storeu_si256(lv.add(dw * ROWS + 8 * half).cast(), lo);
                        _mm256_storeu_si256(lv.add((dw + 8) * ROWS + 8 * half).cast(), hi);
                    }
                }
                k4_scales_r8(
                    g.k4(),
                    sc.add(blk * 8 * ROWS + 8 * half),
                    mn.add(blk * 8 * ROWS + 8 * half),
                );
            }
        }
    }
}

/// Group rows `a` (weight rows 0-7) and `b` (8-15) of repacked Q4_K into
/// `rg`: the values of [`unpack_q4_k`] and the transposes, a byte quad of both groups (rows 0-15)
/// in one 512-bit vector.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn unpack_q4_k_r8(a: &[Q4Group], b: &[Q4Group], rg: &mut RowGroup, nb: usize) {
    let (lv, sc, mn) = rg.packed_dst((a.len(), b.len()), nb, 8, true);
    // SAFETY: every load reads a whole 32-byte quad of a group in bounds;
    // every store is within the lengths `packed_dst` checked (block blk < nb,
    // dword < 64, scale < 8, 16 lanes); the features are enabled.
    unsafe {
        let m4 = _mm512_set1_epi8(0xF);
        for blk in 0..nb {
            let (ga, gb) = (&a[blk], &b[blk]);
            // Quad 8k + q: sub-block 2k's dword 16k + q in the low
            // nibbles, sub-block 2k + 1's (16k + 8 + q) in the high ones.
            for kq in 0..32 {
                let lo_rows = _mm256_loadu_si256(ga.qs[kq].as_ptr().cast());
                let hi_rows = _mm256_loadu_si256(gb.qs[kq].as_ptr().cast());
                let w = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo_rows), hi_rows);
                let lo = _mm512_and_si512(w, m4);
                let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(w), m4);
                let dw = blk * 64 + 16 * (kq / 8) + kq % 8;
                _mm512_storeu_si512(lv.add(dw * ROWS).cast(), lo);
                _mm512_storeu_si512(lv.add((dw + 8) * ROWS).cast(), hi);
            }
            for (half, g) in [ga, gb].into_iter().enumerate() {
                k4_scales_r8(
                    g,
                    sc.add(blk * 8 * ROWS + 8 * half),
                    mn.add(blk * 8 * ROWS + 8 * half),
                );
            }
        }
    }
}

/// The eight rows of `k4`: `sc[i·16 + r] = d_r·sc_i,r` and `mn[i·16 + r] =
/// dmin_r·m_i,r` for the block's eight sub-blocks.
///
/// # Safety
/// `sc` and `mn` must be writable at those places; AVX2 and F16C enabled.
#[inline(always)]
unsafe fn k4_scales_r8(k4: &Q4Group, sc: *mut f32, mn: *mut f32) {
    // SAFETY: the caller's contract; the loads read whole fields of `k4`.
    unsafe {
        let d = _mm256_cvtph_ps(_mm_loadu_si128(k4.d.as_ptr().cast()));
        let dmin = _mm256_cvtph_ps(_mm_loadu_si128(k4.dmin.as_ptr().cast()));
        for (i, (s, m)) in k4.scales.iter().zip(&k4.mins).enumerate() {
            let u8s = |v: &[u8; 8]| {
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(v.as_ptr().cast())))
            };
            let (s, m) = (_mm256_mul_ps(d, u8s(s)), _mm256_mul_ps(dmin, u8s(m)));
            _mm256_storeu_ps(sc.add(i * ROWS), s);
            _mm256_storeu_ps(mn.add(i * ROWS), m);
        }
    }
}

/// Group rows `a` (weight rows 0-7) and `b` (8-15) of repacked Q8_0 into
/// `rg`: levels + 128 (the repacked bytes as they are) and `d` per 32
/// elements, as [`unpack_q8_0`] and the transposes leave the file's.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn unpack_q8_0_r8(a: &[Q80Group], b: &[Q80Group], rg: &mut RowGroup, nb: usize) {
    let (lv, sc, _) = rg.packed_dst((a.len(), b.len()), nb, 8, false);
    // SAFETY: every store is within the lengths `packed_dst` checked (block blk
    // < nb, dword < 64, scale < 8, 16 lanes); the features are enabled.
    unsafe {
        for blk in 0..nb {
            for (half, g) in [&a[blk], &b[blk]].into_iter().enumerate() {
                for (q, quad) in g.qs.iter().enumerate() {
                    let u = _mm256_loadu_si256(quad.as_ptr().cast());
                    _mm256_storeu_si256(lv.add((blk * 64 + q) * ROWS + 8 * half).cast(), u);
                }
                for (k, d) in g.d.iter().enumerate() {
                    let d = _mm256_cvtph_ps(_mm_loadu_si128(d.as_ptr().cast()));
                    _mm256_storeu_ps(sc.add((blk * 8 + k) * ROWS + 8 * half), d);
                }
            }
        }
    }
}

/// Group rows `a` (weight rows 0-7) and `b` (8-15) of repacked IQ4_XS into
/// `rg`: the grid values + 128 and `d·(lsᵢ − 32)` per 32-element sub-block
/// i, as [`unpack_iq4_xs`] and the transposes leave the file's. One
/// 512-bit vector holds a byte quad of both groups (rows 0-15), and a
/// `vpermb` on the grid repeated four times takes each nibble to its value
/// without masking (the index's bits 4-5 pick among equal copies).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
fn unpack_iq4_xs_r8(a: &[Iq4Group], b: &[Iq4Group], rg: &mut RowGroup, nb: usize) {
    let (lv, sc, _) = rg.packed_dst((a.len(), b.len()), nb, 8, false);
    // SAFETY: every load reads a whole 32-byte quad of a group in bounds;
    // every store is within the lengths `packed_dst` checked (block blk < nb,
    // dword < 64, scale < 8, 16 lanes); the features are enabled.
    unsafe {
        let grid = _mm512_broadcast_i32x4(_mm_loadu_si128(BIASED_GRID.as_ptr().cast()));
        for blk in 0..nb {
            let (ga, gb) = (&a[blk], &b[blk]);
            // Byte quad 4j + q: elements 32j + 4q.. (low nibbles) and
            // 32j + 16 + 4q.. (high), that is dwords 8j + q and 8j + 4 + q.
            for jq in 0..32 {
                let (j, q) = (jq / 4, jq % 4);
                let lo_rows = _mm256_loadu_si256(ga.qs[jq].as_ptr().cast());
                let hi_rows = _mm256_loadu_si256(gb.qs[jq].as_ptr().cast());
                let w = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo_rows), hi_rows);
                let lo = _mm512_permutexvar_epi8(w, grid);
                let hi = _mm512_permutexvar_epi8(_mm512_srli_epi16::<4>(w), grid);
                let dw = blk * 64 + 8 * j + q;
                _mm512_storeu_si512(lv.add(dw * ROWS).cast(), lo);
                _mm512_storeu_si512(lv.add((dw + 4) * ROWS).cast(), hi);
            }
            for (half, g) in [ga, gb].into_iter().enumerate() {
                store_scales8(g.d, &g.scales, sc.add(blk * 8 * ROWS + 8 * half));
            }
        }
    }
}

/// `dst[j·16 + r] = d_r · s[j][r]` for the `N` sub-blocks of eight rows.
///
/// # Safety
/// `dst` must be writable at those N × 8 places; AVX2 and F16C enabled.
#[inline(always)]
unsafe fn store_scales8<const N: usize>(d: [u16; 8], s: &[[i8; 8]; N], dst: *mut f32) {
    // SAFETY: the caller's contract.
    unsafe {
        let d = _mm256_cvtph_ps(_mm_loadu_si128(d.as_ptr().cast()));
        for (j, sj) in s.iter().enumerate() {
            let s = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(sj.as_ptr().cast())));
            _mm256_storeu_ps(dst.add(j * ROWS), _mm256_mul_ps(d, s));
        }
    }
}

/// A `PromptFn` running [`prompt_gemm_packed`] with format `$f`, groups `$g`
/// and their unpacker `$unpack`.
macro_rules! packed_prompt_entry {
    ($(#[$doc:meta])* $name:ident, $w:ty, $a:ty, $g:ty, $f:expr, $unpack:expr) => {
        // Same doc and PromptFn parameter list as prompt_entry! above: an fn item cannot
        // take its signature from the type alias; the body differs (prompt_gemm_packed
        // with groups and an unpacker).
        $(#[$doc])*
        ///
        /// # Safety
        /// As [`crate::sig::PromptFn`].
        unsafe fn $name(
            n: usize,
            w: &[u8],
            w_rows: usize,
            act: &[u8],
            act_rows: usize,
            out: *mut f32,
            out_stride: usize,
        ) {
            // SAFETY: the caller's contract is `prompt_gemm_packed`'s;
            // `packed_gemm_fn` hands this out only with GFNI (and IQ4_XS's
            // only with VBMI).
            unsafe {
                prompt_gemm_packed::<$w, $a, $g>(
                    &$f,
                    $unpack,
                    n,
                    w,
                    act,
                    out,
                    (w_rows, act_rows, out_stride),
                )
            }
        }
    };
}

packed_prompt_entry!(
    /// [`gemm_q6_k_prompt`] on repacked rows ([`crate::q6k_r8`]).
    gemm_q6_k_packed_prompt,
    BlockQ6K,
    BlockQ8K,
    Q6Group,
    Format::k256(Acts::k_quant::<32, 16>, q6_k_unpack()),
    unpack_q6_k_r8
);
packed_prompt_entry!(
    /// [`gemm_q3_k_prompt`] on repacked rows ([`crate::q3k_r8`]).
    gemm_q3_k_packed_prompt,
    BlockQ3K,
    BlockQ8K,
    Q3Group,
    Format::k256(Acts::k_quant::<4, 16>, q3_k_unpack()),
    unpack_q3_k_r8
);
packed_prompt_entry!(
    /// [`gemm_q5_k_prompt`] on repacked rows ([`crate::q5k_r8`]).
    gemm_q5_k_packed_prompt,
    BlockQ5K,
    BlockQ8K,
    Q5Group,
    Format::k32(Acts::k_quant::<-1, 8>, unpack_q5_k, true),
    unpack_q5_k_r8
);
packed_prompt_entry!(
    /// [`gemm_q4_k_prompt`] on repacked rows ([`crate::q4k_r8`]).
    gemm_q4_k_packed_prompt,
    BlockQ4K,
    BlockQ8K,
    Q4Group,
    Format::k32(Acts::k_quant::<-1, 8>, unpack_q4_k, true),
    unpack_q4_k_r8
);
packed_prompt_entry!(
    /// [`gemm_iq4_xs_prompt`] on repacked rows ([`crate::iq4_r8`]).
    gemm_iq4_xs_packed_prompt,
    BlockIq4Xs,
    BlockQ8K,
    Iq4Group,
    Format::k32(Acts::k_quant::<128, 8>, unpack_iq4_xs, false),
    unpack_iq4_xs_r8
);
packed_prompt_entry!(
    /// [`gemm_q8_0_prompt`] on repacked rows ([`crate::q80_r8`]).
    gemm_q8_0_packed_prompt,
    BlockQ8_0,
    BlockQ8_0,
    Q80Group,
    Q8_0_FORMAT,
    unpack_q8_0_r8
);

/// Per-thread buffers of [`prompt_gemm`], reused from call to call.
#[derive(Default)]
struct Scratch {
    acts: Acts,
    rg: RowGroup,
}

/// `out[t·out_stride + i] = W_i · x_t` for F32 weights and activations (a
/// router, a gate): sixteen weight rows at a time transposed once into
/// `[k][row]`, then for up to [`TB`] tokens at a time one FMA per element
/// and token, the token's element broadcast against the sixteen rows' — the
/// sum in element order per output.
///
/// # Safety
/// As [`crate::sig::PromptFn`].
unsafe fn gemm_f32_prompt(
    n: usize,
    w: &[u8],
    w_rows: usize,
    act: &[u8],
    act_rows: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let rb = 4 * n;
    assert!(
        w.len() >= w_rows * rb && act.len() >= act_rows * rb && w_rows <= out_stride,
        "gemm: {w_rows} x {act_rows} rows of {n} do not fit the bytes"
    );
    if w_rows == 0 || act_rows == 0 || n == 0 {
        return;
    }
    assert!(
        crate::Isa::Avx512.available(),
        "the F32 prompt kernel needs AVX-512"
    );
    SCRATCH.with_borrow_mut(|sc| {
        let tw = &mut sc.rg.t_scales;
        tw.grow(n * ROWS);
        for i0 in (0..w_rows).step_by(ROWS) {
            let nr = ROWS.min(w_rows - i0);
            // A short group repeats its last row in the lanes past it.
            let rows: [&[u8]; ROWS] = std::array::from_fn(|r| {
                let i = i0 + r.min(nr - 1);
                &w[i * rb..(i + 1) * rb]
            });
            // SAFETY: the features were checked above; `tw` holds n·16.
            unsafe { transpose_f32_rows(&rows, n, tw) };
            for t0 in (0..act_rows).step_by(TB) {
                let nt = TB.min(act_rows - t0);
                let x = &act[t0 * rb..(t0 + nt) * rb];
                let mut res = [[0f32; ROWS]; TB];
                // SAFETY: the features were checked above; `x` holds `nt`
                // rows of `n` floats and `tw` n·16.
                unsafe { tile_f32(tw, x, n, nt, &mut res) };
                for (t, lanes) in res[..nt].iter().enumerate() {
                    // SAFETY: the caller lets us write `nr` outputs from
                    // `i0` of token `t0 + t` (`i0 + nr <= w_rows`).
                    unsafe {
                        let dst = out.add((t0 + t) * out_stride + i0);
                        std::ptr::copy_nonoverlapping(lanes.as_ptr(), dst, nr);
                    }
                }
            }
        }
    });
}

/// `tw[k·16 + r]` = element k of row r (`n` f32 each, any alignment).
///
/// # Safety
/// The caller must have AVX-512F enabled; `tw` must hold `n·16` elements
/// and each row `4n` bytes.
#[target_feature(enable = "avx512f")]
unsafe fn transpose_f32_rows(rows: &[&[u8]; ROWS], n: usize, tw: &mut [u32]) {
    assert!(tw.len() >= n * ROWS && rows.iter().all(|r| r.len() >= 4 * n));
    let full = n - n % 16;
    let d = tw.as_mut_ptr();
    for k0 in (0..full).step_by(16) {
        // SAFETY: 64 readable bytes at 4·k0 of every row and 256 writable
        // dwords at k0·16 (asserted); AVX-512F is enabled.
        unsafe {
            let r = std::array::from_fn(|t| _mm512_loadu_si512(rows[t][4 * k0..].as_ptr().cast()));
            for (k, v) in transpose16_regs(r).iter().enumerate() {
                _mm512_storeu_si512(d.add((k0 + k) * ROWS).cast(), *v);
            }
        }
    }
    for k in full..n {
        for (r, row) in rows.iter().enumerate() {
            tw[k * ROWS + r] = u32::from_le_bytes(row[4 * k..4 * k + 4].try_into().unwrap());
        }
    }
}

/// The transposed rows `tw` against `nt` F32 tokens `x`: `res[t][r]`.
#[target_feature(enable = "avx512f")]
fn tile_f32(tw: &[u32], x: &[u8], n: usize, nt: usize, res: &mut [[f32; ROWS]; TB]) {
    // SAFETY: the features are enabled on this function.
    unsafe {
        match nt {
            1 => tile_f32_n::<1>(tw, x, n, res),
            2 => tile_f32_n::<2>(tw, x, n, res),
            3 => tile_f32_n::<3>(tw, x, n, res),
            4 => tile_f32_n::<4>(tw, x, n, res),
            5 => tile_f32_n::<5>(tw, x, n, res),
            6 => tile_f32_n::<6>(tw, x, n, res),
            7 => tile_f32_n::<7>(tw, x, n, res),
            8 => tile_f32_n::<8>(tw, x, n, res),
            n => unreachable!("a tile takes 1..={TB} tokens, not {n}"),
        }
    }
}

/// [`tile_f32`] for `NT` tokens: per row and token, `acc = fma(x_k, w_k,
/// acc)` for k = 0, 1, … n − 1.
///
/// # Safety
/// The caller must have AVX-512F enabled.
#[inline(always)]
unsafe fn tile_f32_n<const NT: usize>(tw: &[u32], x: &[u8], n: usize, res: &mut [[f32; ROWS]; TB]) {
    assert!(
        tw.len() >= n * ROWS && x.len() >= NT * 4 * n,
        "tile_f32: shapes"
    );
    let (w, x) = (tw.as_ptr().cast::<f32>(), x.as_ptr().cast::<f32>());
    // SAFETY: k < n and t < NT are within the lengths asserted above;
    // unaligned reads; the caller enables AVX-512F.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); NT];
        for k in 0..n {
            let wk = _mm512_loadu_ps(w.add(k * ROWS));
            for (t, a) in acc.iter_mut().enumerate() {
                let xk = _mm512_set1_ps(x.add(t * n + k).read_unaligned());
                *a = _mm512_fmadd_ps(xk, wk, *a);
            }
        }
        for (t, a) in acc.iter().enumerate() {
            _mm512_storeu_ps(res[t].as_mut_ptr(), *a);
        }
    }
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// How a format unpacks a weight row into a [`RowGroup`] slot.
type UnpackFn<W> = unsafe fn(&[W], &mut RowGroup, usize, usize);

/// How a format unpacks sixteen weight rows of `nb` blocks straight into
/// [`RowGroup::t_levels`] and [`RowGroup::t_scales`].
type GroupUnpackFn<W> = unsafe fn(&[&[W]; ROWS], &mut RowGroup, usize);

fn gfni() -> bool {
    is_x86_feature_detected!("gfni")
}

/// The Q3_K unpacker: with GFNI where the CPU has it (the same levels).
fn q3_k_unpack() -> UnpackFn<BlockQ3K> {
    match gfni() {
        true => unpack_q3_k_gfni,
        false => unpack_q3_k,
    }
}

/// The sixteen-row Q3_K unpacker, where the CPU has GFNI.
fn q3_k_group() -> Option<GroupUnpackFn<BlockQ3K>> {
    gfni().then_some(unpack16_q3_k_gfni as GroupUnpackFn<BlockQ3K>)
}

/// The Q6_K unpacker: with GFNI where the CPU has it (the same levels).
fn q6_k_unpack() -> UnpackFn<BlockQ6K> {
    match gfni() {
        true => unpack_q6_k_gfni,
        false => unpack_q6_k,
    }
}

/// Stores `d · s` for 16 i8 scales `s` (one per 16 elements) at `dst`.
///
/// # Safety
/// The caller must have AVX-512F enabled.
#[inline(always)]
unsafe fn store_scales(dst: &mut [f32], d: f32, s: __m128i) {
    assert!(dst.len() >= 16);
    // SAFETY: 16 writable floats (asserted); AVX-512F is enabled by the caller.
    unsafe {
        let v = _mm512_mul_ps(
            _mm512_set1_ps(d),
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(s)),
        );
        _mm512_storeu_ps(dst.as_mut_ptr(), v);
    }
}

/// An unpacker `$plain` and its GFNI twin `$gfni` (the same levels) over
/// the body `$body::<GFNI>` for blocks `$w`.
macro_rules! unpack_pair {
    ($(#[$doc:meta])* $plain:ident, $gfni:ident, $body:ident, $w:ty) => {
        $(#[$doc])*
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        fn $plain(x: &[$w], rg: &mut RowGroup, r: usize, n: usize) {
            // SAFETY: this function enables every feature the body needs.
            unsafe { $body::<false>(x, rg, r, n) }
        }

        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,gfni")]
        fn $gfni(x: &[$w], rg: &mut RowGroup, r: usize, n: usize) {
            // SAFETY: this function enables every feature the body needs.
            unsafe { $body::<true>(x, rg, r, n) }
        }
    };
}

/// Block `b`'s four pieces of 16 dwords of levels into a row's slot `lv`.
///
/// # Safety
/// The caller must have AVX-512F enabled.
#[inline(always)]
unsafe fn store_levels(lv: &mut [u32], b: usize, q: &[__m512i; 4]) {
    for (j, qj) in q.iter().enumerate() {
        let dst = &mut lv[b * 64 + 16 * j..b * 64 + 16 * j + 16];
        // SAFETY: `dst` is 16 writable dwords (`storeu`: no alignment
        // requirement); the caller enables AVX-512F.
        unsafe { _mm512_storeu_si512(dst.as_mut_ptr().cast(), *qj) };
    }
}

unpack_pair!(
    /// Unpacks Q3_K row `x` into slot `r` of `rg`.
    unpack_q3_k,
    unpack_q3_k_gfni,
    unpack_q3_k_body,
    BlockQ3K
);

/// # Safety
/// The caller must have AVX-512 F/BW/VL, AVX2 enabled, and GFNI when `GFNI`.
#[inline(always)]
unsafe fn unpack_q3_k_body<const GFNI: bool>(
    x: &[BlockQ3K],
    rg: &mut RowGroup,
    r: usize,
    n: usize,
) {
    // SAFETY: the caller enables every feature the helpers need.
    unsafe {
        let k3 = Q3Unpack::new();
        let lv = &mut rg.levels[r * n / 4..(r + 1) * n / 4];
        let sc = &mut rg.scales[r * n / 16..(r + 1) * n / 16];
        for (b, xb) in x.iter().enumerate() {
            let q = q3_k_levels::<GFNI>(xb, &k3);
            store_levels(lv, b, &q);
            let d = f16_to_f32(xb.d);
            store_scales(&mut sc[b * 16..], d, lowbit::q3_k_scales(&xb.scales));
        }
    }
}

/// Unpacks Q4_K row `x` into slot `r` of `rg`: the nibbles in element
/// order, `d·scᵢ` and `dmin·mᵢ` for both 16-element halves of sub-block i.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn unpack_q4_k(x: &[BlockQ4K], rg: &mut RowGroup, r: usize, n: usize) {
    for (b, xb) in x.iter().enumerate() {
        // SAFETY: this function enables AVX2.
        unsafe { unpack_k4_block(rg, r, n, b, (xb.d, xb.dmin, &xb.scales, &xb.qs), None) };
    }
}

/// Unpacks Q5_K row `x` into slot `r` of `rg`: as [`unpack_q4_k`], bit 4
/// of each level from `qh`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn unpack_q5_k(x: &[BlockQ5K], rg: &mut RowGroup, r: usize, n: usize) {
    for (b, xb) in x.iter().enumerate() {
        // SAFETY: this function enables AVX2.
        unsafe {
            unpack_k4_block(
                rg,
                r,
                n,
                b,
                (xb.d, xb.dmin, &xb.scales, &xb.qs),
                Some(&xb.qh),
            )
        };
    }
}

/// Block `b` of a Q4_K / Q5_K row (`d`, `dmin`, the twelve scale bytes, the
/// nibbles; Q5_K's `qh`) into slot `r` of `rg`. Piece j (32 `qs` bytes)
/// holds elements 64j..64j+32 in its low nibbles and 64j+32..64j+64 in its
/// high ones; their bit 4 is bit 2j, resp. 2j+1, of `qh[l]`.
///
/// # Safety
/// The caller must have AVX2 enabled.
#[inline(always)]
unsafe fn unpack_k4_block(
    rg: &mut RowGroup,
    r: usize,
    n: usize,
    b: usize,
    (d, dmin, scales, qs): (half::f16, half::f16, &[u8; 12], &[u8; 128]),
    qh: Option<&[u8; 32]>,
) {
    // SAFETY: loads and stores of whole 32-byte pieces of these arrays; the
    // caller enables AVX2.
    unsafe {
        let m4 = _mm256_set1_epi8(0xF);
        let one = _mm256_set1_epi8(1);
        let lv = &mut rg.levels[r * n / 4..(r + 1) * n / 4];
        let h = qh.map(|h| _mm256_loadu_si256(h.as_ptr().cast()));
        for j in 0..4 {
            let q = _mm256_loadu_si256(qs[32 * j..].as_ptr().cast());
            let mut lo = _mm256_and_si256(q, m4);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
            if let Some(h) = h {
                let bit = |s: i32| {
                    let v = _mm256_srl_epi16(h, _mm_cvtsi32_si128(s));
                    _mm256_slli_epi16::<4>(_mm256_and_si256(v, one))
                };
                lo = _mm256_or_si256(lo, bit(2 * j as i32));
                hi = _mm256_or_si256(hi, bit(2 * j as i32 + 1));
            }
            let dst = &mut lv[b * 64 + 16 * j..b * 64 + 16 * j + 16];
            _mm256_storeu_si256(dst.as_mut_ptr().cast(), lo);
            _mm256_storeu_si256(dst[8..].as_mut_ptr().cast(), hi);
        }
        let (d, dmin) = (f16_to_f32(d), f16_to_f32(dmin));
        let sc = &mut rg.scales[r * n / 32..(r + 1) * n / 32];
        let mn = &mut rg.mins[r * n / 32..(r + 1) * n / 32];
        for i in 0..8 {
            let (s_i, m_i) = get_scale_min_k4(i, scales);
            sc[b * 8 + i] = d * s_i as f32;
            mn[b * 8 + i] = dmin * m_i as f32;
        }
    }
}

/// Unpacks IQ4_XS row `x` into slot `r` of `rg`: the grid values + 128 in
/// element order (sub-block i: its 16 `qs` bytes' low nibbles, then their
/// high nibbles), `d·(lsᵢ − 32)` per 32-element sub-block i.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn unpack_iq4_xs(x: &[BlockIq4Xs], rg: &mut RowGroup, r: usize, n: usize) {
    let m4 = _mm_set1_epi8(0xF);
    // SAFETY: 16 readable bytes; `loadu` has no alignment requirement.
    let values = unsafe { _mm_loadu_si128(BIASED_GRID.as_ptr().cast()) };
    let lv = &mut rg.levels[r * n / 4..(r + 1) * n / 4];
    let sc = &mut rg.scales[r * n / 32..(r + 1) * n / 32];
    for (b, xb) in x.iter().enumerate() {
        for i in 0..8 {
            // SAFETY: 16 readable bytes; `loadu` has no alignment requirement.
            let q = unsafe { _mm_loadu_si128(xb.qs[16 * i..].as_ptr().cast()) };
            let lo = _mm_shuffle_epi8(values, _mm_and_si128(q, m4));
            let hi = _mm_shuffle_epi8(values, _mm_and_si128(_mm_srli_epi16::<4>(q), m4));
            let dst = &mut lv[b * 64 + 8 * i..b * 64 + 8 * i + 8];
            // SAFETY: `dst` is 8 writable dwords; `storeu` has no alignment requirement.
            unsafe {
                _mm_storeu_si128(dst.as_mut_ptr().cast(), lo);
                _mm_storeu_si128(dst[4..].as_mut_ptr().cast(), hi);
            }
            let ls = ((xb.scales_l[i / 2] >> (4 * (i % 2))) & 0xF) as i32
                | (((xb.scales_h >> (2 * i)) & 3) << 4) as i32;
            sc[b * 8 + i] = f16_to_f32(xb.d) * (ls - 32) as f32;
        }
    }
}

/// Sixteen Q3_K rows (`x`, `nb` blocks each) straight into the tile layout:
/// the values [`unpack_q3_k`] and [`transpose_rows`] give, in about half the
/// work. Per block, the rows' raw bytes are transposed in registers, twice
/// 64 bytes (bytes 0..64: `hmask` and the first half of `qs`; bytes 44..108:
/// the second half of `qs` and the scales), so that lane r of every vector
/// is row r; then each dword of levels (elements 4k..4k+4, k = 32h + 8p + j)
/// is two affine transforms and an OR of `qs` dword 8h + j (its bits 2p,
/// 2p + 1) and `hmask` dword j (its bit 4h + p), and each sub-block scale
/// `d·sᵢ` is a few shifts of the scale dwords.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,gfni")]
#[allow(clippy::needless_range_loop)] // `b` indexes every row's blocks
fn unpack16_q3_k_gfni(x: &[&[BlockQ3K]; ROWS], rg: &mut RowGroup, nb: usize) {
    assert!(
        x.iter().all(|r| r.len() >= nb)
            && rg.t_levels.len() >= nb * 64 * ROWS
            && rg.t_scales.len() >= nb * 16 * ROWS,
        "unpack16_q3_k: shapes"
    );
    let low: [__m512i; 4] = std::array::from_fn(|p| _mm512_set1_epi64(gf_low_pair(2 * p as u32)));
    let high: [__m512i; 8] = std::array::from_fn(|b| _mm512_set1_epi64(gf_bit2(b as u32)));
    let (m4, m3, k32) = (
        _mm512_set1_epi32(0xF),
        _mm512_set1_epi32(3),
        _mm512_set1_epi32(32),
    );
    let shift = |v: __m512i, by: usize| _mm512_srl_epi32(v, _mm_cvtsi32_si128(by as i32));
    let (lv, sc) = (
        rg.t_levels.as_mut_ptr(),
        rg.t_scales.as_mut_ptr().cast::<f32>(),
    );
    for b in 0..nb {
        let blk: [*const u8; ROWS] = std::array::from_fn(|r| (&x[r][b] as *const BlockQ3K).cast());
        // The rows are sixteen interleaved streams, more than the hardware
        // prefetchers follow: ask for the block after next of each.
        for p in blk {
            let ahead = p.wrapping_add(2 * size_of::<BlockQ3K>());
            _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64).cast());
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(109).cast());
        }
        // SAFETY: a block is 110 readable bytes, and both windows (0..64,
        // 44..108) lie inside it; every store is within the lengths asserted
        // above (block b < nb, dword k < 64, scale i < 16); this function
        // enables every feature used.
        unsafe {
            let t0 = transpose16_regs(std::array::from_fn(|r| _mm512_loadu_si512(blk[r].cast())));
            let t1 = transpose16_regs(std::array::from_fn(|r| {
                _mm512_loadu_si512(blk[r].add(44).cast())
            }));
            for h in 0..2 {
                for p in 0..4 {
                    for j in 0..8 {
                        let qs = if h == 0 { t0[8 + j] } else { t1[5 + j] };
                        let v = _mm512_or_si512(
                            _mm512_gf2p8affine_epi64_epi8::<0>(qs, low[p]),
                            _mm512_gf2p8affine_epi64_epi8::<0>(t0[j], high[4 * h + p]),
                        );
                        let k = 32 * h + 8 * p + j;
                        _mm512_storeu_si512(lv.add((b * 64 + k) * ROWS).cast(), v);
                    }
                }
            }
            let d: [u16; ROWS] = std::array::from_fn(|r| x[r][b].d.to_bits());
            let d = _mm512_cvtph_ps(_mm256_loadu_si256(d.as_ptr().cast()));
            let s = [t1[13], t1[14], t1[15]];
            for i in 0..16 {
                // Low four bits: nibble i / 8 of byte i % 8; high two: bits
                // 2·(i / 4) of byte 8 + i % 4 (`scalar::q3_k::unpack_scales`).
                let lb = i % 8;
                let lo = _mm512_and_si512(shift(s[lb / 4], 8 * (lb % 4) + 4 * (i / 8)), m4);
                let hi = _mm512_and_si512(shift(s[2], 8 * (i % 4) + 2 * (i / 4)), m3);
                let v = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32::<4>(hi)), k32);
                let f = _mm512_mul_ps(d, _mm512_cvtepi32_ps(v));
                _mm512_storeu_ps(sc.add((b * 16 + i) * ROWS), f);
            }
        }
    }
}

unpack_pair!(
    /// Unpacks Q6_K row `x` into slot `r` of `rg`.
    unpack_q6_k,
    unpack_q6_k_gfni,
    unpack_q6_k_body,
    BlockQ6K
);

/// # Safety
/// The caller must have AVX-512 F/BW/VL, AVX2 enabled, and GFNI when `GFNI`.
#[inline(always)]
unsafe fn unpack_q6_k_body<const GFNI: bool>(
    x: &[BlockQ6K],
    rg: &mut RowGroup,
    r: usize,
    n: usize,
) {
    // SAFETY: the caller enables every feature the helpers need.
    unsafe {
        let m4 = _mm512_set1_epi8(0xF);
        let m3 = _mm512_set1_epi8(3);
        let (sh02, sh46) = (halves_i16(0, 2), halves_i16(4, 6));
        let g6 = Q6Affine::new();
        let lv = &mut rg.levels[r * n / 4..(r + 1) * n / 4];
        let sc = &mut rg.scales[r * n / 16..(r + 1) * n / 16];
        for (b, xb) in x.iter().enumerate() {
            let q = if GFNI {
                q6_k_levels_gfni(xb, &g6)
            } else {
                q6_k_levels(xb, m4, m3, sh02, sh46)
            };
            store_levels(lv, b, &q);
            let d = f16_to_f32(xb.d);
            let s = _mm_loadu_si128(xb.scales.as_ptr().cast());
            store_scales(&mut sc[b * 16..], d, s);
        }
    }
}

/// Dword `k` of an activation block's quants, broadcast to every lane.
///
/// # Safety
/// `qs` must hold at least `4k + 4` bytes; AVX-512F enabled by the caller.
#[inline(always)]
unsafe fn bcast_dword(qs: &[i8], k: usize) -> __m512i {
    debug_assert!(qs.len() >= 4 * k + 4);
    // SAFETY: in bounds by the caller's contract; unaligned read.
    unsafe {
        _mm512_set1_epi32(std::ptr::read_unaligned(
            qs.as_ptr().add(4 * k).cast::<i32>(),
        ))
    }
}

/// The transposed rows of `rg` against the K-quant tokens `y` (their
/// [`Acts`] from token `t0`): `res[t][r]`, for up to [`TB`] tokens, with
/// `SUBS` scales per block (16 of 16 elements, or 8 of 32).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn tile_k<const MINS: bool, const SUBS: usize>(
    rg: &RowGroup,
    y: &[&[BlockQ8K]],
    acts: &Acts,
    t0: usize,
    nb: usize,
    res: &mut Res,
) {
    // SAFETY: the features are enabled on this function.
    unsafe {
        match y.len() {
            1 => tile_k_n::<MINS, SUBS, 1>(rg, y, acts, t0, nb, res),
            2 => tile_k_n::<MINS, SUBS, 2>(rg, y, acts, t0, nb, res),
            3 => tile_k_n::<MINS, SUBS, 3>(rg, y, acts, t0, nb, res),
            4 => tile_k_n::<MINS, SUBS, 4>(rg, y, acts, t0, nb, res),
            5 => tile_k_n::<MINS, SUBS, 5>(rg, y, acts, t0, nb, res),
            6 => tile_k_n::<MINS, SUBS, 6>(rg, y, acts, t0, nb, res),
            7 => tile_k_n::<MINS, SUBS, 7>(rg, y, acts, t0, nb, res),
            8 => tile_k_n::<MINS, SUBS, 8>(rg, y, acts, t0, nb, res),
            n => unreachable!("a tile takes 1..={TB} tokens, not {n}"),
        }
    }
}

/// [`tile_k`] for `NT` tokens. Per row and token the order is: per block,
/// `blk = Σ_s fma(cvt(isum_s), scale_s, blk)` from zero over the `SUBS`
/// sub-blocks (`MINS`: then `blk −= Σa_s·m_s`), then `acc = fma(blk, d_a,
/// acc)`; the integer sums start at `−bias·Σa_s` (zero with `MINS`).
///
/// # Safety
/// The caller must have AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C enabled.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // `b` indexes every token's blocks
unsafe fn tile_k_n<const MINS: bool, const SUBS: usize, const NT: usize>(
    rg: &RowGroup,
    y: &[&[BlockQ8K]],
    acts: &Acts,
    t0: usize,
    nb: usize,
    res: &mut Res,
) {
    // Dwords of four levels per sub-block.
    let per = 64 / SUBS;
    assert!(
        y.len() == NT
            && y.iter().all(|r| r.len() >= nb)
            && rg.t_levels.len() >= nb * 64 * ROWS
            && rg.t_scales.len() >= nb * SUBS * ROWS
            && (!MINS || rg.t_mins.len() >= nb * SUBS * ROWS)
            && acts.d.len() >= (t0 + NT) * nb
            && acts.bias.len() >= (t0 + NT) * nb * SUBS,
        "tile_k: shapes"
    );
    let (lv, sc, mn) = (
        rg.t_levels.as_ptr(),
        rg.t_scales.as_ptr().cast::<f32>(),
        rg.t_mins.as_ptr().cast::<f32>(),
    );
    let (ad, ab) = (acts.d.as_ptr(), acts.bias.as_ptr());
    // SAFETY: every offset is within the lengths asserted above (block
    // b < nb, sub-block s < SUBS, dword k < per, token t < NT); the caller
    // enables the features.
    unsafe {
        let mut acc_f = [_mm512_setzero_ps(); NT];
        for b in 0..nb {
            let qs: [&[i8]; NT] = std::array::from_fn(|t| &y[t][b].qs[..]);
            let mut blk = [_mm512_setzero_ps(); NT];
            for s in 0..SUBS {
                let start = |t: usize| *ab.add(((t0 + t) * nb + b) * SUBS + s);
                let mut acc: [__m512i; NT] = std::array::from_fn(|t| match MINS {
                    true => _mm512_setzero_si512(),
                    false => _mm512_set1_epi32(start(t)),
                });
                for k in 0..per {
                    let kk = per * s + k;
                    let wq = _mm512_loadu_si512(lv.add((b * 64 + kk) * ROWS).cast());
                    for (ac, q) in acc.iter_mut().zip(&qs) {
                        *ac = _mm512_dpbusd_epi32(*ac, wq, bcast_dword(q, kk));
                    }
                }
                let scale = _mm512_loadu_ps(sc.add((b * SUBS + s) * ROWS));
                for (bl, ac) in blk.iter_mut().zip(&acc) {
                    *bl = _mm512_fmadd_ps(_mm512_cvtepi32_ps(*ac), scale, *bl);
                }
                if MINS {
                    let m = _mm512_loadu_ps(mn.add((b * SUBS + s) * ROWS));
                    for (t, bl) in blk.iter_mut().enumerate() {
                        let bsum = _mm512_set1_ps(start(t) as f32);
                        *bl = _mm512_fnmadd_ps(bsum, m, *bl);
                    }
                }
            }
            for (t, af) in acc_f.iter_mut().enumerate() {
                let d = _mm512_set1_ps(*ad.add((t0 + t) * nb + b));
                *af = _mm512_fmadd_ps(blk[t], d, *af);
            }
        }
        for (t, af) in acc_f.iter().enumerate() {
            _mm512_storeu_ps(res[t].as_mut_ptr(), *af);
        }
    }
}

/// Unpacks Q8_0 row `x` into slot `r` of `rg`: levels + 128 and `d`.
fn unpack_q8_0(x: &[BlockQ8_0], rg: &mut RowGroup, r: usize, n: usize) {
    let nb = n / 32;
    let lv: &mut [u8] = bytemuck::cast_slice_mut(&mut rg.levels[r * n / 4..(r + 1) * n / 4]);
    for (b, xb) in x.iter().enumerate() {
        for (l, &q) in lv[32 * b..32 * b + 32].iter_mut().zip(&xb.qs) {
            *l = (q as u8) ^ 0x80;
        }
        rg.scales[r * nb + b] = xb.d.to_f32();
    }
}

/// The transposed Q8_0 rows of `rg` against the tokens `y`: `res[t][r]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn tile_q8_0(rg: &RowGroup, y: &[&[BlockQ8_0]], acts: &Acts, t0: usize, nb: usize, res: &mut Res) {
    // SAFETY: the features are enabled on this function.
    unsafe {
        match y.len() {
            1 => tile_q8_0_n::<1>(rg, y, acts, t0, nb, res),
            2 => tile_q8_0_n::<2>(rg, y, acts, t0, nb, res),
            3 => tile_q8_0_n::<3>(rg, y, acts, t0, nb, res),
            4 => tile_q8_0_n::<4>(rg, y, acts, t0, nb, res),
            5 => tile_q8_0_n::<5>(rg, y, acts, t0, nb, res),
            6 => tile_q8_0_n::<6>(rg, y, acts, t0, nb, res),
            7 => tile_q8_0_n::<7>(rg, y, acts, t0, nb, res),
            8 => tile_q8_0_n::<8>(rg, y, acts, t0, nb, res),
            n => unreachable!("a tile takes 1..={TB} tokens, not {n}"),
        }
    }
}

/// [`tile_q8_0`] for `NT` tokens. Per row and token and block: the integer
/// sum from `−128·Σa`, then `acc = fma(cvt(isum), d_w·d_a, acc)`.
///
/// # Safety
/// The caller must have AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C enabled.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // `b` indexes every token's blocks
unsafe fn tile_q8_0_n<const NT: usize>(
    rg: &RowGroup,
    y: &[&[BlockQ8_0]],
    acts: &Acts,
    t0: usize,
    nb: usize,
    res: &mut Res,
) {
    assert!(
        y.len() == NT
            && y.iter().all(|r| r.len() >= nb)
            && rg.t_levels.len() >= nb * 8 * ROWS
            && rg.t_scales.len() >= nb * ROWS
            && acts.d.len() >= (t0 + NT) * nb
            && acts.bias.len() >= (t0 + NT) * nb,
        "tile_q8_0: shapes"
    );
    let (lv, sc) = (rg.t_levels.as_ptr(), rg.t_scales.as_ptr().cast::<f32>());
    let (ad, ab) = (acts.d.as_ptr(), acts.bias.as_ptr());
    // SAFETY: every offset is within the lengths asserted above (block
    // b < nb, dword k < 8, token t < NT); the caller enables the features.
    unsafe {
        let mut acc_f = [_mm512_setzero_ps(); NT];
        for b in 0..nb {
            let qs: [&[i8]; NT] = std::array::from_fn(|t| &y[t][b].qs[..]);
            let mut acc: [__m512i; NT] =
                std::array::from_fn(|t| _mm512_set1_epi32(*ab.add((t0 + t) * nb + b)));
            for k in 0..8 {
                let wq = _mm512_loadu_si512(lv.add((b * 8 + k) * ROWS).cast());
                for (ac, q) in acc.iter_mut().zip(&qs) {
                    *ac = _mm512_dpbusd_epi32(*ac, wq, bcast_dword(q, k));
                }
            }
            let dw = _mm512_loadu_ps(sc.add(b * ROWS));
            for (t, af) in acc_f.iter_mut().enumerate() {
                let d = _mm512_mul_ps(dw, _mm512_set1_ps(*ad.add((t0 + t) * nb + b)));
                *af = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t]), d, *af);
            }
        }
        for (t, af) in acc_f.iter().enumerate() {
            _mm512_storeu_ps(res[t].as_mut_ptr(), *af);
        }
    }
}
