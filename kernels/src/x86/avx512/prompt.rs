//! Prompt-batch products (AVX-512 VNNI), for batches that need not match
//! single-token decoding bit for bit: the prompt of a prefill, never a
//! speculative verify pass. They sum in their own order, so they stand
//! beside the multi-row kernels of [`super::gemm`] (which keep the one-row
//! dot's bits) rather than replacing them.
//!
//! **Q6_K** (`gemm_q6_k_prompt`): tokens are the lanes. Per call, the
//! activation rows are transposed in groups of 16 tokens (per block, 64
//! groups of four elements, each 16 tokens × 4 bytes) and eight weight rows
//! at a time are unpacked once into their levels (+32, 0..=63) and their
//! sub-block scales `d·sᵢ` (f32). Then one `vpdpbusd` takes four levels of
//! one row (a broadcast dword) against four elements of 16 tokens: 64
//! products per instruction where the decode-order kernels need three
//! instructions for 64. Per 16-element sub-block the i32 sums start at
//! `−32·bsum` (removing the +32 from every level exactly), are converted and
//! scaled by `d·sᵢ`, and per block by each token's `d`. The integer sums are
//! exact; only the f32 summation order differs from `vec_dot`.
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
use crate::scalar::iq4_xs::BlockIq4Xs;
use crate::scalar::kquant_search::get_scale_min_k4;
use crate::scalar::q3_k::BlockQ3K;
use crate::scalar::q4_k::BlockQ4K;
use crate::scalar::q5_k::BlockQ5K;
use crate::scalar::q6_k::BlockQ6K;
use crate::scalar::q8_0::BlockQ8_0;
use crate::scalar::q8_k::BlockQ8K;
use crate::x86::avx2::kquants::f16_to_f32;
use crate::x86::avx512::gemm::check_shapes;
use crate::x86::avx512::kquants::q6_k_levels;
use crate::x86::avx512::kquants::{halves_i16, BIASED_GRID};
use crate::x86::avx512::lowbit::{self, q3_k_levels, Q3Unpack};
use crate::GgmlType;

/// This tier's prompt-batch product for weight type `ty`, if it has one.
pub fn gemm_fn(ty: GgmlType) -> Option<crate::sig::GemmFn> {
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
        _ => None,
    }
}

/// Tokens per lane group.
const TOK: usize = 16;
/// Weight rows per register group.
const ROWS: usize = 8;

/// One group of up to 16 activation rows, transposed for `vpdpbusd`
/// (padding tokens are zeros).
struct ActGroup {
    /// `[block][groups][16]` dwords: elements 4g..4g+4 of each token.
    qs: Vec<u32>,
    /// `[block][16]` each token's `d`.
    d: Vec<f32>,
    /// `[block][sub-blocks][16]`: `−bias·Σa` per sub-block and token.
    bias: Vec<i32>,
}

impl ActGroup {
    /// Q8_K rows against K-quant levels offset by `BIAS`: per 256-block,
    /// 64 groups of four elements; `−BIAS·bsum` per 16-element sub-block.
    fn k_quant<const BIAS: i32>(y: &[&[BlockQ8K]], nb: usize) -> ActGroup {
        let mut g = ActGroup {
            qs: vec![0; nb * 64 * TOK],
            d: vec![0.0; nb * TOK],
            bias: vec![0; nb * 16 * TOK],
        };
        for (t, row) in y.iter().enumerate() {
            for (b, yb) in row[..nb].iter().enumerate() {
                let q: &[u32] = bytemuck::cast_slice(&yb.qs);
                for (k, &w) in q.iter().enumerate() {
                    g.qs[(b * 64 + k) * TOK + t] = w;
                }
                g.d[b * TOK + t] = yb.d;
                for (s, &bs) in yb.bsums.iter().enumerate() {
                    g.bias[(b * 16 + s) * TOK + t] = -BIAS * bs as i32;
                }
            }
        }
        g
    }

    /// Q8_0 rows against levels + 128: per 32-block, 8 groups of four
    /// elements; `−128·Σa` per block.
    fn q8_0(y: &[&[BlockQ8_0]], nb: usize) -> ActGroup {
        let mut g = ActGroup {
            qs: vec![0; nb * 8 * TOK],
            d: vec![0.0; nb * TOK],
            bias: vec![0; nb * TOK],
        };
        for (t, row) in y.iter().enumerate() {
            for (b, yb) in row[..nb].iter().enumerate() {
                for k in 0..8 {
                    let q = |i: usize| yb.qs[4 * k + i] as u8;
                    g.qs[(b * 8 + k) * TOK + t] = u32::from_le_bytes([q(0), q(1), q(2), q(3)]);
                }
                g.d[b * TOK + t] = yb.d.to_f32();
                g.bias[b * TOK + t] = -128 * yb.qs.iter().map(|&q| q as i32).sum::<i32>();
            }
        }
        g
    }
}

/// Eight weight rows unpacked: levels `[row][n]` as dwords of four, and
/// `[row][n / per_scale]` scales (`Format::per_scale`).
struct RowGroup {
    levels: Vec<u32>,
    scales: Vec<f32>,
    /// Q4_K: `[row][n / 16]` the mins' scales `dmin·mᵢ` (empty otherwise).
    mins: Vec<f32>,
}

/// The eight rows' results of one tile, `[row][token]`.
type Res = [[f32; TOK]; ROWS];

/// How one weight format runs through [`prompt_gemm`].
struct Format<W, A> {
    /// Elements per weight (and activation) block.
    qk: usize,
    /// Elements per weight-row scale.
    per_scale: usize,
    /// Up to 16 activation rows of `nb` blocks, transposed.
    group: fn(&[&[A]], usize) -> ActGroup,
    /// Unpacks a weight row into slot `r` of the group (`n` elements).
    unpack: unsafe fn(&[W], &mut RowGroup, usize, usize),
    /// The unpacked rows against one activation group (`nb`, `n`).
    tile: unsafe fn(&RowGroup, &ActGroup, usize, usize, &mut Res),
    /// Whether the rows have mins ([`RowGroup::mins`]).
    mins: bool,
}

impl<W> Format<W, BlockQ8K> {
    /// A 256-element block against Q8_K with a scale per 16 elements: the
    /// levels offset by `BIAS` and `group = ActGroup::k_quant::<BIAS>`, or
    /// (`mins`) unbiased with the mins' term.
    fn k256(
        group: fn(&[&[BlockQ8K]], usize) -> ActGroup,
        unpack: unsafe fn(&[W], &mut RowGroup, usize, usize),
        mins: bool,
    ) -> Self {
        Format {
            qk: 256,
            per_scale: 16,
            group,
            unpack,
            tile: if mins { tile::<true> } else { tile::<false> },
            mins,
        }
    }
}

/// A `GemmFn` running [`prompt_gemm`] with format `$f` over blocks `$w`
/// (weights) and `$a` (activations).
macro_rules! prompt_entry {
    ($(#[$doc:meta])* $name:ident, $w:ty, $a:ty, $f:expr) => {
        $(#[$doc])*
        fn $name(
            n: usize,
            w: &[u8],
            w_rows: usize,
            act: &[u8],
            act_rows: usize,
            out: &mut [f32],
            out_stride: usize,
        ) {
            prompt_gemm::<$w, $a>(&$f, n, w, act, out, (w_rows, act_rows, out_stride));
        }
    };
}

prompt_entry!(
    /// `out[i·out_stride + t] = W_i · x_t` for Q6_K weights and Q8_K
    /// activations, in this module's order (see the module doc).
    gemm_q6_k_prompt,
    BlockQ6K,
    BlockQ8K,
    Format::k256(ActGroup::k_quant::<32>, unpack_q6_k, false)
);
prompt_entry!(
    /// The same for Q3_K weights (levels + 4, 0..=7; bias 4).
    gemm_q3_k_prompt,
    BlockQ3K,
    BlockQ8K,
    Format::k256(ActGroup::k_quant::<4>, unpack_q3_k, false)
);
prompt_entry!(
    /// The same for Q4_K weights: the nibbles (no bias; the "bias" slot of
    /// the activation group holds each token's `bsum` per 16 elements),
    /// then the mins' term per 16 elements.
    gemm_q4_k_prompt,
    BlockQ4K,
    BlockQ8K,
    Format::k256(ActGroup::k_quant::<-1>, unpack_q4_k, true)
);
prompt_entry!(
    /// The same for Q5_K weights (levels 0..=31, mins as Q4_K's).
    gemm_q5_k_prompt,
    BlockQ5K,
    BlockQ8K,
    Format::k256(ActGroup::k_quant::<-1>, unpack_q5_k, true)
);
prompt_entry!(
    /// The same for IQ4_XS weights (grid values + 128; bias 128).
    gemm_iq4_xs_prompt,
    BlockIq4Xs,
    BlockQ8K,
    Format::k256(ActGroup::k_quant::<128>, unpack_iq4_xs, false)
);
prompt_entry!(
    /// `out[i·out_stride + t] = W_i · x_t` for Q8_0 weights and activations:
    /// levels + 128 against 16 tokens per `vpdpbusd`, the +128 taken off per
    /// block through each token's sum, then `d_w·d_a` per block.
    gemm_q8_0_prompt,
    BlockQ8_0,
    BlockQ8_0,
    Format {
        qk: 32,
        per_scale: 32,
        group: ActGroup::q8_0,
        unpack: unpack_q8_0,
        tile: tile_q8_0,
        mins: false,
    }
);

/// The driver: activation groups of 16 tokens, weight rows eight at a
/// time, each unpacked once and then run against every group.
fn prompt_gemm<W: bytemuck::Pod, A: bytemuck::Pod>(
    f: &Format<W, A>,
    n: usize,
    w: &[u8],
    act: &[u8],
    out: &mut [f32],
    (w_rows, act_rows, out_stride): (usize, usize, usize),
) {
    assert!(n.is_multiple_of(f.qk), "gemm: {n} is not whole blocks");
    let nb = n / f.qk;
    let (wr, ar) = (nb * size_of::<W>(), nb * size_of::<A>());
    if !check_shapes(
        n,
        (w.len(), wr, w_rows),
        (act.len(), ar, act_rows),
        out.len(),
        out_stride,
    ) {
        return;
    }
    assert!(
        crate::Isa::Avx512.available() && is_x86_feature_detected!("avx512vnni"),
        "the prompt kernels need AVX512-VNNI"
    );
    let a_row = |t: usize| -> &[A] { as_blocks(&act[t * ar..(t + 1) * ar]) };
    let groups: Vec<ActGroup> = (0..act_rows)
        .step_by(TOK)
        .map(|t0| {
            let rows: Vec<&[A]> = (t0..(t0 + TOK).min(act_rows)).map(a_row).collect();
            (f.group)(&rows, nb)
        })
        .collect();
    let mut rg = RowGroup {
        levels: vec![0; ROWS * n / 4],
        scales: vec![0.0; ROWS * n / f.per_scale],
        mins: if f.mins {
            vec![0.0; ROWS * n / 16]
        } else {
            Vec::new()
        },
    };
    let mut res = [[0f32; TOK]; ROWS];
    for i0 in (0..w_rows).step_by(ROWS) {
        let nr = ROWS.min(w_rows - i0);
        rg.levels.fill(0);
        rg.scales.fill(0.0);
        rg.mins.fill(0.0);
        for r in 0..nr {
            let x: &[W] = as_blocks(&w[(i0 + r) * wr..(i0 + r + 1) * wr]);
            // SAFETY: the features were checked above.
            unsafe { (f.unpack)(x, &mut rg, r, n) };
        }
        for (gi, g) in groups.iter().enumerate() {
            // SAFETY: the features were checked above; the group and the
            // unpacked rows hold `nb` blocks each.
            unsafe { (f.tile)(&rg, g, nb, n, &mut res) };
            let t0 = gi * TOK;
            let nt = TOK.min(act_rows - t0);
            for (r, lanes) in res[..nr].iter().enumerate() {
                out[(i0 + r) * out_stride + t0..][..nt].copy_from_slice(&lanes[..nt]);
            }
        }
    }
}

/// Unpacks Q3_K row `x` into slot `r` of `rg`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn unpack_q3_k(x: &[BlockQ3K], rg: &mut RowGroup, r: usize, n: usize) {
    let k3 = Q3Unpack::new();
    let lv = &mut rg.levels[r * n / 4..(r + 1) * n / 4];
    let sc = &mut rg.scales[r * n / 16..(r + 1) * n / 16];
    for (b, xb) in x.iter().enumerate() {
        // SAFETY: this function enables every feature the helpers need.
        let q = unsafe { q3_k_levels::<false>(xb, &k3) };
        for (j, qj) in q.iter().enumerate() {
            let dst = &mut lv[b * 64 + 16 * j..b * 64 + 16 * j + 16];
            // SAFETY: `dst` is 16 writable dwords; `storeu` has no alignment requirement.
            unsafe { _mm512_storeu_si512(dst.as_mut_ptr().cast(), *qj) };
        }
        let d = f16_to_f32(xb.d);
        // SAFETY: SSE2 is enabled here.
        let s16: [i8; 16] = unsafe { std::mem::transmute(lowbit::q3_k_scales(&xb.scales)) };
        for (s, &si) in s16.iter().enumerate() {
            sc[b * 16 + s] = d * si as f32;
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
        let sc = &mut rg.scales[r * n / 16..(r + 1) * n / 16];
        let mn = &mut rg.mins[r * n / 16..(r + 1) * n / 16];
        for i in 0..8 {
            let (s_i, m_i) = get_scale_min_k4(i, scales);
            sc[b * 16 + 2 * i..b * 16 + 2 * i + 2].fill(d * s_i as f32);
            mn[b * 16 + 2 * i..b * 16 + 2 * i + 2].fill(dmin * m_i as f32);
        }
    }
}

/// Unpacks IQ4_XS row `x` into slot `r` of `rg`: the grid values + 128 in
/// element order (sub-block i: its 16 `qs` bytes' low nibbles, then their
/// high nibbles), `d·(lsᵢ − 32)` for both 16-element halves.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn unpack_iq4_xs(x: &[BlockIq4Xs], rg: &mut RowGroup, r: usize, n: usize) {
    let m4 = _mm_set1_epi8(0xF);
    // SAFETY: 16 readable bytes; `loadu` has no alignment requirement.
    let values = unsafe { _mm_loadu_si128(BIASED_GRID.as_ptr().cast()) };
    let lv = &mut rg.levels[r * n / 4..(r + 1) * n / 4];
    let sc = &mut rg.scales[r * n / 16..(r + 1) * n / 16];
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
            sc[b * 16 + 2 * i..b * 16 + 2 * i + 2].fill(f16_to_f32(xb.d) * (ls - 32) as f32);
        }
    }
}

/// Unpacks Q6_K row `x` into slot `r` of `rg`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn unpack_q6_k(x: &[BlockQ6K], rg: &mut RowGroup, r: usize, n: usize) {
    let m4 = _mm512_set1_epi8(0xF);
    let m3 = _mm512_set1_epi8(3);
    let (sh02, sh46) = (halves_i16(0, 2), halves_i16(4, 6));
    let lv = &mut rg.levels[r * n / 4..(r + 1) * n / 4];
    let sc = &mut rg.scales[r * n / 16..(r + 1) * n / 16];
    for (b, xb) in x.iter().enumerate() {
        // SAFETY: this function enables every feature `q6_k_levels` needs.
        let q = unsafe { q6_k_levels(xb, m4, m3, sh02, sh46) };
        for (j, qj) in q.iter().enumerate() {
            let dst = &mut lv[b * 64 + 16 * j..b * 64 + 16 * j + 16];
            // SAFETY: `dst` is 16 writable dwords; `storeu` has no alignment requirement.
            unsafe { _mm512_storeu_si512(dst.as_mut_ptr().cast(), *qj) };
        }
        let d = f16_to_f32(xb.d);
        for (s, &si) in xb.scales.iter().enumerate() {
            sc[b * 16 + s] = d * si as f32;
        }
    }
}

/// The eight unpacked rows of `rg` against the 16 tokens of `g`: `res[r][t]`.
/// `MINS` (Q4_K): the sums start at zero and `g.bias` holds each token's
/// `bsum` per 16 elements, taken off in f32 times `rg.mins`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn tile<const MINS: bool>(rg: &RowGroup, g: &ActGroup, nb: usize, n: usize, res: &mut Res) {
    let (q4, q16) = (n / 4, n / 16);
    assert!(
        rg.levels.len() >= ROWS * q4
            && rg.scales.len() >= ROWS * q16
            && g.qs.len() >= nb * 64 * TOK
            && g.bias.len() >= nb * 16 * TOK
            && g.d.len() >= nb * TOK
            && n >= nb * 256
            && (!MINS || rg.mins.len() >= ROWS * q16),
        "tile: shapes"
    );
    let (lv, sc) = (rg.levels.as_ptr(), rg.scales.as_ptr());
    let (qs, bias, dp) = (g.qs.as_ptr(), g.bias.as_ptr(), g.d.as_ptr());
    // SAFETY: every offset below is within the lengths asserted above
    // (row r < ROWS, block b < nb, sub-block s < 16, group k < 4); the
    // features are enabled on this function.
    unsafe {
        let mut acc_f = [_mm512_setzero_ps(); ROWS];
        for b in 0..nb {
            let mut blk = [_mm512_setzero_ps(); ROWS];
            for s in 0..16 {
                let bias_s = _mm512_loadu_si512(bias.add((b * 16 + s) * TOK).cast());
                let init = if MINS { _mm512_setzero_si512() } else { bias_s };
                let mut acc = [init; ROWS];
                let kk0 = b * 64 + 4 * s;
                for k in 0..4 {
                    let a = _mm512_loadu_si512(qs.add((kk0 + k) * TOK).cast());
                    for (r, ac) in acc.iter_mut().enumerate() {
                        let wq = _mm512_set1_epi32(*lv.add(r * q4 + kk0 + k) as i32);
                        *ac = _mm512_dpbusd_epi32(*ac, wq, a);
                    }
                }
                for (r, bl) in blk.iter_mut().enumerate() {
                    let scale = _mm512_set1_ps(*sc.add(r * q16 + b * 16 + s));
                    *bl = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r]), scale, *bl);
                }
                if MINS {
                    let bsum = _mm512_cvtepi32_ps(bias_s);
                    let mn = rg.mins.as_ptr();
                    for (r, bl) in blk.iter_mut().enumerate() {
                        let m = _mm512_set1_ps(*mn.add(r * q16 + b * 16 + s));
                        *bl = _mm512_fnmadd_ps(bsum, m, *bl);
                    }
                }
            }
            let d = _mm512_loadu_ps(dp.add(b * TOK));
            for (r, af) in acc_f.iter_mut().enumerate() {
                *af = _mm512_fmadd_ps(blk[r], d, *af);
            }
        }
        for (r, af) in acc_f.iter().enumerate() {
            _mm512_storeu_ps(res[r].as_mut_ptr(), *af);
        }
    }
}

/// Unpacks Q8_0 row `x` into slot `r` of `rg`: levels + 128 and `d`.
fn unpack_q8_0(x: &[BlockQ8_0], rg: &mut RowGroup, r: usize, n: usize) {
    let nb = n / 32;
    for (b, xb) in x.iter().enumerate() {
        for k in 0..8 {
            let u = |i: usize| (xb.qs[4 * k + i] as i32 + 128) as u8;
            rg.levels[r * n / 4 + b * 8 + k] = u32::from_le_bytes([u(0), u(1), u(2), u(3)]);
        }
        rg.scales[r * nb + b] = xb.d.to_f32();
    }
}

/// The eight unpacked Q8_0 rows of `rg` against the 16 tokens of `g`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn tile_q8_0(rg: &RowGroup, g: &ActGroup, nb: usize, _n: usize, res: &mut Res) {
    let q4 = nb * 8;
    assert!(
        rg.levels.len() >= ROWS * q4
            && rg.scales.len() >= ROWS * nb
            && g.qs.len() >= nb * 8 * TOK
            && g.bias.len() >= nb * TOK
            && g.d.len() >= nb * TOK,
        "tile_q8_0: shapes"
    );
    let (lv, sc) = (rg.levels.as_ptr(), rg.scales.as_ptr());
    let (qs, bias, dp) = (g.qs.as_ptr(), g.bias.as_ptr(), g.d.as_ptr());
    // SAFETY: every offset below is within the lengths asserted above
    // (row r < ROWS, block b < nb, group k < 8); the features are enabled
    // on this function.
    unsafe {
        let mut acc_f = [_mm512_setzero_ps(); ROWS];
        for b in 0..nb {
            let init = _mm512_loadu_si512(bias.add(b * TOK).cast());
            let mut acc = [init; ROWS];
            for k in 0..8 {
                let a = _mm512_loadu_si512(qs.add((b * 8 + k) * TOK).cast());
                for (r, ac) in acc.iter_mut().enumerate() {
                    let wq = _mm512_set1_epi32(*lv.add(r * q4 + b * 8 + k) as i32);
                    *ac = _mm512_dpbusd_epi32(*ac, wq, a);
                }
            }
            let da = _mm512_loadu_ps(dp.add(b * TOK));
            for (r, af) in acc_f.iter_mut().enumerate() {
                let d = _mm512_mul_ps(_mm512_set1_ps(*sc.add(r * nb + b)), da);
                *af = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r]), d, *af);
            }
        }
        for (r, af) in acc_f.iter().enumerate() {
            _mm512_storeu_ps(res[r].as_mut_ptr(), *af);
        }
    }
}
