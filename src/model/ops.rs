//! Small f32 ops, evaluated in the same order as ggml's CPU backend.
//!
//! - rmsnorm: `y = x · (1/√(mean(x²) + eps)) · w`, Σx² in f64 (norm weights
//!   already include the +1 of the zero-centred form: multiply only).
//! - l2norm (the GDN form): `x / √(Σx² + eps)`, computed as ggml does:
//!   `rms_norm(x, eps/n) · (1/√n)`.
//! - silu `x/(1+e^−x)`, sigmoid `1/(1+e^−x)`, softplus `x > 20 ? x : ln(1+eˣ)`.
//!   ggml's row ops (`ggml_vec_silu_f32`, `ggml_vec_swiglu_f32`,
//!   `ggml_vec_soft_max_f32`) take e^x from a polynomial ([`v_expf`]) on
//!   whole blocks of 16 (its AVX-512 width, which llama.cpp's x86 builds use
//!   on AVX-512 hosts) and libm `expf` on the rest: [`silu_row`],
//!   [`swiglu_row`] and [`softmax_inplace`] do the same, element for element.
//! - softmax: `e^(x−max) / Σ`, Σ in f64 (per 16-block as
//!   `_mm512_reduce_add_ps`), multiplied by `1/Σ`.
//! - rope (NeoX, partial): for pair i < n_rot/2, `θ_i = q_i · base^(−2i/n_rot)`
//!   with the angle built in f32 as ggml does (`θ ← θ · base^(−2/n_rot)` per
//!   pair), rotating `(x_i, x_{i+n_rot/2})` with ggml's fused
//!   multiply-adds; dims ≥ n_rot are untouched. `q_i` is the position p for
//!   the pairs `rope.dimension_sections` gives to the text position, else 0
//!   (docs/DESIGN.md §2.4, [`rope_pairs_rotated`]): such a pair gets cos 1, sin 0,
//!   exactly what ggml computes for it.

use kernels::KernelTable;
use rayon::prelude::*;

/// `out = rmsnorm(x) ⊙ w`.
pub fn rmsnorm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let scale = rms_scale(x, eps);
    for ((o, &xi), &wi) in out.iter_mut().zip(x).zip(w) {
        *o = xi * scale * wi;
    }
}

/// In place `x = rmsnorm(x) ⊙ w`.
pub fn rmsnorm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    let scale = rms_scale(x, eps);
    for (xi, &wi) in x.iter_mut().zip(w) {
        *xi = *xi * scale * wi;
    }
}

fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / x.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// In place L2 normalisation, llama.cpp's GDN form (see the module doc).
pub fn l2norm_inplace(x: &mut [f32], eps: f32) {
    let n = x.len() as f32;
    let scale = rms_scale(x, eps / n);
    let post = 1.0 / n.sqrt();
    for v in x.iter_mut() {
        *v = (*v * scale) * post;
    }
}

#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// ggml's vector width on AVX-512: rows are split into whole blocks of 16
/// (polynomial exp) and a libm tail.
pub const GGML_LANES: usize = 16;

/// `ggml_v_expf` (AVX-512 form; ARM optimized-routines polynomial, max error
/// 1.45 ulp + 0.5), lane by lane with the same fused multiply-adds.
#[inline(always)]
pub fn v_expf(x: f32) -> f32 {
    let f = f32::from_bits;
    let r = f(0x4b40_0000); // 0x1.8p23
    let z = x.mul_add(f(0x3fb8_aa3b), r); // log2(e)
    let n = z - r;
    // x − n·ln2, ln2 in two parts (fnmadd twice).
    let b = (-n).mul_add(f(0x35bf_be8e), (-n).mul_add(f(0x3f31_7200), x));
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    let u = b * b;
    let hi = f(0x3c07_2010).mul_add(b, f(0x3d2b_9f17));
    let mid = hi.mul_add(u, f(0x3e2a_af33).mul_add(b, f(0x3eff_fedb)));
    let j = mid.mul_add(u, f(0x3f7f_fff6).mul_add(b, 1.0));
    // vscalefps: j·2ⁿ rounded once (the f64 product is exact).
    (j as f64 * pow2(n as i32)) as f32
}

/// 2ⁿ exactly, for |n| ≤ 1022 (a normal f64 built from its exponent bits;
/// `powi` gives the same value through a libm call).
#[inline(always)]
fn pow2(n: i32) -> f64 {
    f64::from_bits(((n + 1023) as u64) << 52)
}

/// Whether the host has FMA (`kernels::cpu`, where every CPU feature is
/// detected): the row functions below then run a copy compiled with it, so
/// `mul_add` is one instruction instead of a libm `fmaf` call (the same fused
/// result either way).
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn has_fma() -> bool {
    kernels::cpu::has_fma()
}

/// Fewest elements a row-wise op over a batch splits across the pool: below
/// it, scheduling costs more than the second thread saves (a small model's
/// verify rows, a 2-row batch of the full shape).
pub(crate) const PAR_MIN_ELEMS: usize = 1 << 15;

/// Defines `$name($args)` that runs `$body` (an `#[inline(always)]` fn)
/// compiled with FMA when the host has it, plain otherwise.
macro_rules! fma_dispatch {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($a:ident: $t:ty),*) => $body:ident) => {
        $(#[$m])*
        $vis fn $name($($a: $t),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "fma")]
                unsafe fn with_fma($($a: $t),*) {
                    $body($($a),*)
                }
                if $crate::model::ops::has_fma() {
                    // SAFETY: FMA was detected on this host (`has_fma`).
                    unsafe { with_fma($($a),*) };
                    return;
                }
            }
            $body($($a),*)
        }
    };
}
pub(crate) use fma_dispatch;

/// `ggml_v_silu`: `x / (1 + v_expf(0 − x))`.
#[inline(always)]
pub fn v_silu(x: f32) -> f32 {
    x / (1.0 + v_expf(0.0 - x))
}

fma_dispatch!(
    /// In place silu of one ggml row (`ggml_vec_silu_f32`).
    pub fn silu_row(x: &mut [f32]) => silu_row_body
);

#[inline(always)]
fn silu_row_body(x: &mut [f32]) {
    let bulk = x.len() - x.len() % GGML_LANES;
    let (head, tail) = x.split_at_mut(bulk);
    head.iter_mut().for_each(|v| *v = v_silu(*v));
    tail.iter_mut().for_each(|v| *v = silu(*v));
}

fma_dispatch!(
    /// `h = silu(g) ⊙ up` of one ggml row (`ggml_vec_swiglu_f32`).
    pub fn swiglu_row(g: &[f32], up: &[f32], h: &mut [f32]) => swiglu_row_body
);

#[inline(always)]
fn swiglu_row_body(g: &[f32], up: &[f32], h: &mut [f32]) {
    let bulk = h.len() - h.len() % GGML_LANES;
    for (i, ((hi, &gi), &ui)) in h.iter_mut().zip(g).zip(up).enumerate() {
        *hi = if i < bulk { v_silu(gi) } else { silu(gi) } * ui;
    }
}

/// `Σ a·b` in ggml's `ggml_vec_dot_f32` order: the tier's F32 dot (the AVX2
/// tier sums as llama.cpp's AVX-512 build does).
#[inline]
pub fn dot_f32(kt: &KernelTable, a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    (kt.f32_dot())(
        n,
        bytemuck::cast_slice(&a[..n]),
        bytemuck::cast_slice(&b[..n]),
    )
}

/// `y += x · v`, fused per element as ggml's `ggml_vec_mad_f32` (vector FMA
/// lanes; GCC contracts the scalar leftovers too).
#[inline]
pub fn mad_f32(y: &mut [f32], x: &[f32], v: f32) {
    #[cfg(target_arch = "x86_64")]
    if has_fma() {
        // SAFETY: FMA was detected on this host (`has_fma`).
        unsafe { mad_f32_fma(y, x, v) };
        return;
    }
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi = xi.mul_add(v, *yi);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn mad_f32_fma(y: &mut [f32], x: &[f32], v: f32) {
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi = xi.mul_add(v, *yi);
    }
}

/// `y += f32(x) · v` over an f16 row `x` (the bits, little-endian): the
/// same fused products as converting `x` and then [`mad_f32`], without the
/// converted copy.
#[inline]
pub fn mad_f16(y: &mut [f32], x: &[u16], v: f32) {
    assert!(x.len() >= y.len(), "mad_f16: row shorter than y");
    #[cfg(target_arch = "x86_64")]
    if kernels::cpu::has_fma_f16c() {
        // SAFETY: FMA, AVX and F16C were detected on this host.
        unsafe { mad_f16_f16c(y, x, v) };
        return;
    }
    mad_f16_scalar(y, x, v);
}

/// [`mad_f16`] element by element (hosts without F16C, and vector tails).
fn mad_f16_scalar(y: &mut [f32], x: &[u16], v: f32) {
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi = half::f16::from_bits(xi).to_f32().mul_add(v, *yi);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,fma,f16c")]
unsafe fn mad_f16_f16c(y: &mut [f32], x: &[u16], v: f32) {
    use std::arch::x86_64::*;
    let n = y.len();
    let vv = _mm256_set1_ps(v);
    let mut j = 0;
    while j + 8 <= n {
        // SAFETY: j + 8 ≤ n ≤ x.len(): eight u16 and eight f32 in bounds.
        unsafe {
            let xs = _mm256_cvtph_ps(_mm_loadu_si128(x.as_ptr().add(j).cast()));
            let yp = y.as_mut_ptr().add(j);
            _mm256_storeu_ps(yp, _mm256_fmadd_ps(xs, vv, _mm256_loadu_ps(yp)));
        }
        j += 8;
    }
    mad_f16_scalar(&mut y[j..], &x[j..], v);
}

/// `y += Σ_i f32(rows[i]) · w[i]`, the rows' fused products added in order
/// of i per element: the bits of [`mad_f16`] row after row, with `y` held in
/// registers across the rows (64 elements at a time) instead of loaded and
/// stored per row.
pub fn mad_f16_rows(y: &mut [f32], rows: &[&[u16]], w: &[f32]) {
    assert!(
        rows.len() == w.len() && rows.iter().all(|r| r.len() >= y.len()),
        "mad_f16_rows: shapes"
    );
    #[cfg(target_arch = "x86_64")]
    if kernels::cpu::has_fma_f16c() {
        // SAFETY: FMA, AVX and F16C were detected on this host; shapes checked.
        unsafe { mad_f16_rows_f16c(y, rows, w) };
        return;
    }
    for (r, &wi) in rows.iter().zip(w) {
        mad_f16(y, r, wi);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,fma,f16c")]
unsafe fn mad_f16_rows_f16c(y: &mut [f32], rows: &[&[u16]], w: &[f32]) {
    use std::arch::x86_64::*;
    const V: usize = 8;
    const CHUNK: usize = 8 * V;
    let n = y.len();
    let mut j = 0;
    while j + CHUNK <= n {
        // SAFETY: j + CHUNK ≤ n ≤ every row's length (checked by the caller).
        unsafe {
            let yp = y.as_mut_ptr().add(j);
            let mut acc: [__m256; 8] = std::array::from_fn(|k| _mm256_loadu_ps(yp.add(k * V)));
            for (r, &wi) in rows.iter().zip(w) {
                let wv = _mm256_set1_ps(wi);
                let rp = r.as_ptr().add(j);
                for (k, a) in acc.iter_mut().enumerate() {
                    let x = _mm256_cvtph_ps(_mm_loadu_si128(rp.add(k * V).cast()));
                    *a = _mm256_fmadd_ps(x, wv, *a);
                }
            }
            for (k, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(yp.add(k * V), *a);
            }
        }
        j += CHUNK;
    }
    if j < n {
        for (r, &wi) in rows.iter().zip(w) {
            // SAFETY: the same features; `mad_f16_f16c` bounds its own reads.
            unsafe { mad_f16_f16c(&mut y[j..], &r[j..], wi) };
        }
    }
}

/// Rounds every value to f16 and back (round to nearest even, as
/// `half::f16::from_f32`), eight at a time with F16C where the host has it.
pub fn round_to_f16(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if kernels::cpu::has_fma_f16c() {
        // SAFETY: AVX and F16C were detected on this host.
        unsafe { round_to_f16_f16c(x) };
        return;
    }
    for v in x {
        *v = half::f16::from_f32(*v).to_f32();
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn round_to_f16_f16c(x: &mut [f32]) {
    use std::arch::x86_64::*;
    let mut chunks = x.chunks_exact_mut(8);
    for c in &mut chunks {
        // SAFETY: `c` is eight f32.
        unsafe {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(c.as_ptr()));
            _mm256_storeu_ps(c.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
    }
    for v in chunks.into_remainder() {
        *v = half::f16::from_f32(*v).to_f32();
    }
}

/// GCC's `_mm512_reduce_add_ps`: halves folded 256, 128, then pairs.
pub fn reduce_add_16(a: &[f32; GGML_LANES]) -> f32 {
    let t8: [f32; 8] = std::array::from_fn(|i| a[i + 8] + a[i]);
    let t4: [f32; 4] = std::array::from_fn(|i| t8[i + 4] + t8[i]);
    (t4[0] + t4[2]) + (t4[1] + t4[3])
}

#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

#[inline]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        (1.0 + x.exp()).ln()
    }
}

/// In place softmax of a whole row, as `ggml_vec_soft_max_f32` (see the
/// module doc) then the scale by `1/Σ`.
pub fn softmax_inplace(x: &mut [f32]) {
    let bulk = x.len() - x.len() % GGML_LANES;
    softmax_split(x, bulk);
}

/// Softmax of the visible prefix of a row that ggml pads with masked cells
/// (attention: the K/V view is padded to 256 cells, so every visible score
/// is in the vector part and the masked ones add exact zeros).
pub fn softmax_padded_inplace(x: &mut [f32]) {
    softmax_split(x, x.len());
}

fma_dispatch!(fn softmax_split(x: &mut [f32], bulk: usize) => softmax_split_body);

#[inline(always)]
fn softmax_split_body(x: &mut [f32], bulk: usize) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f64;
    let (head, tail) = x.split_at_mut(bulk);
    for c in head.chunks_mut(GGML_LANES) {
        let mut lanes = [0f32; GGML_LANES];
        for (l, v) in lanes.iter_mut().zip(c.iter_mut()) {
            *v = v_expf(*v - max);
            *l = *v;
        }
        sum += reduce_add_16(&lanes) as f64;
    }
    for v in tail.iter_mut() {
        *v = (*v - max).exp();
        sum += *v as f64;
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// Which rope pairs turn with the text position, for `n_pairs` = n_rot/2
/// pairs (docs/DESIGN.md §2.4; ggml's interleaved multi-section rope, "imrope").
///
/// A text token's position has the four components (p, p, p, 0). Pair i
/// falls in sector `i mod (s0+s1+s2+s3)`; sector c takes component `c mod 3`
/// while that component's section has room (`c < 3·s[c mod 3]`), and the
/// fourth (0: no rotation) otherwise. `None` (no sections in the file): every
/// pair rotates. Sections summing to 0, which the config rejects (ggml
/// aborts on them), rotate nothing.
pub fn rope_pairs_rotated(n_pairs: usize, sections: Option<[u32; 4]>) -> Vec<bool> {
    let Some(s) = sections else {
        return vec![true; n_pairs];
    };
    let total: usize = s.iter().map(|&x| x as usize).sum();
    if total == 0 {
        return vec![false; n_pairs];
    }
    (0..n_pairs)
        .map(|i| {
            let sector = i % total;
            sector < 3 * s[sector % 3] as usize
        })
        .collect()
}

/// cos/sin of every rope pair at one position. Pairs the sections leave to
/// the fourth (zero) position component hold cos 1, sin 0, so
/// [`RopeCache::apply`] runs the same code for every pair.
#[derive(Clone, Debug)]
pub struct RopeCache {
    pub cos: Vec<f32>,
    pub sin: Vec<f32>,
    theta_scale: f32,
    /// Per pair: turns with the text position ([`rope_pairs_rotated`]).
    rotated: Vec<bool>,
}

impl RopeCache {
    /// `sections`: the file's `rope.dimension_sections` (`None`: every pair
    /// rotates).
    pub fn new(n_rot: usize, base: f32, sections: Option<[u32; 4]>) -> RopeCache {
        RopeCache {
            cos: vec![0.0; n_rot / 2],
            sin: vec![0.0; n_rot / 2],
            theta_scale: base.powf(-2.0 / n_rot as f32),
            rotated: rope_pairs_rotated(n_rot / 2, sections),
        }
    }

    /// Fills the table for position `p`.
    pub fn set_position(&mut self, p: usize) {
        let mut theta = p as f32;
        let pairs = self.cos.iter_mut().zip(self.sin.iter_mut());
        for ((c, s), &rotated) in pairs.zip(&self.rotated) {
            // ggml's angle for the zero component: 0 · base^(−2i/n_rot) = 0.
            let th = if rotated { theta } else { 0.0 };
            *c = th.cos();
            *s = th.sin();
            theta *= self.theta_scale;
        }
    }

    /// Rotates one head in place.
    pub fn apply(&self, x: &mut [f32]) {
        let half = self.cos.len();
        let (lo, hi) = x.split_at_mut(half);
        for i in 0..half {
            let (x0, x1) = (lo[i], hi[i]);
            // ggml's rotate_pairs as GCC contracts it: x0·c − x1·s as
            // fma(x0, c, −(x1·s)), x0·s + x1·c as fma(x0, s, x1·c).
            lo[i] = x0.mul_add(self.cos[i], -(x1 * self.sin[i]));
            hi[i] = x0.mul_add(self.sin[i], x1 * self.cos[i]);
        }
    }
}

/// Taps `w[c][j]` (`k` per channel, `ch` channels) as `[j][c]`.
pub(crate) fn by_tap(w: &[f32], k: usize, ch: usize) -> Vec<f32> {
    if k == 0 {
        return Vec::new();
    }
    let mut t = vec![0f32; k * ch];
    for (c, wc) in w.chunks_exact(k).take(ch).enumerate() {
        for (j, &x) in wc.iter().enumerate() {
            t[j * ch + c] = x;
        }
    }
    t
}

/// Runs `f(t0, rows)` over `out` (`t_n` rows of `ch`, `rows` starting at row
/// `t0`): split across the pool when there is enough work, else in one call.
/// Each row must be computed as alone, so the split changes no bits.
pub(crate) fn split_rows(
    out: &mut [f32],
    t_n: usize,
    ch: usize,
    f: impl Fn(usize, &mut [f32]) + Sync + Send,
) {
    if t_n > 1 && out.len() >= PAR_MIN_ELEMS {
        let per = t_n.div_ceil(2 * rayon::current_num_threads()).max(1);
        out.par_chunks_mut(per * ch)
            .enumerate()
            .for_each(|(c, o)| f(c * per, o));
    } else {
        f(0, out);
    }
}

/// `rmsnorm` of every row of `x` (rows of `w.len()`); a batch's rows in
/// parallel (each as alone).
pub(crate) fn norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let e = w.len();
    if x.len() >= NORM_PAR_ROWS * e && x.len() >= PAR_MIN_ELEMS {
        x.par_chunks_exact(e)
            .zip(out.par_chunks_exact_mut(e))
            .for_each(|(xr, or)| rmsnorm(xr, w, eps, or));
    } else {
        for (xr, or) in x.chunks_exact(e).zip(out.chunks_exact_mut(e)) {
            rmsnorm(xr, w, eps, or);
        }
    }
}

/// Fewest rows [`norm_rows`] splits across the pool.
const NORM_PAR_ROWS: usize = 8;

pub(crate) fn add_into(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += *b;
    }
}

/// No NaN and no infinity in `x` (`v·0` is 0 for every finite `v`, NaN
/// otherwise; the sum has no early exit, so it vectorises).
pub(crate) fn all_finite(x: &[f32]) -> bool {
    x.chunks(64)
        .map(|c| c.iter().map(|&v| v * 0.0).sum::<f32>())
        .sum::<f32>()
        == 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16c_row_helpers_equal_the_scalar_conversions_bit_for_bit() {
        // Values that round both ways, ties, f16 subnormals, overflow to
        // infinity, and every length around the eight-lane step.
        let mut x: Vec<f32> = (0..400)
            .map(|i| ((i as f32) * 0.37 - 70.0) * f32::powi(2.0, (i % 40) - 30))
            .collect();
        x.extend([
            1.0 + f32::EPSILON * 4096.0,
            2049.0,
            65520.0,
            1e6,
            -3e-7,
            6e-8,
        ]);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for n in [0, 1, 7, 8, 9, 15, 16, 17, x.len()] {
            let mut got = x[..n].to_vec();
            round_to_f16(&mut got);
            let want: Vec<f32> = x[..n]
                .iter()
                .map(|&v| half::f16::from_f32(v).to_f32())
                .collect();
            assert_eq!(bits(&got), bits(&want), "round_to_f16, {n} values");

            let h: Vec<u16> = x[..n]
                .iter()
                .map(|&v| half::f16::from_f32(v).to_bits())
                .collect();
            let y0: Vec<f32> = x[..n].iter().rev().map(|v| v * 0.5).collect();
            let mut got = y0.clone();
            mad_f16(&mut got, &h, 0.297_153_1);
            let mut want = y0;
            let conv: Vec<f32> = h
                .iter()
                .map(|&b| half::f16::from_bits(b).to_f32())
                .collect();
            mad_f32(&mut want, &conv, 0.297_153_1);
            assert_eq!(bits(&got), bits(&want), "mad_f16, {n} values");
        }
        // Several rows into one accumulator row, at lengths around the
        // 64-element register block.
        for n in [0, 7, 8, 63, 64, 65, 130, 256, 300] {
            let rows: Vec<Vec<u16>> = (0..5)
                .map(|r| {
                    x.iter()
                        .cycle()
                        .skip(r * 37)
                        .take(n)
                        .map(|&v| half::f16::from_f32(v).to_bits())
                        .collect()
                })
                .collect();
            let w = [0.297_153_1, -1.3, 7e-3, 0.61, -0.052];
            let y0: Vec<f32> = x
                .iter()
                .cycle()
                .skip(11)
                .take(n)
                .map(|v| v * 0.25)
                .collect();
            let mut got = y0.clone();
            let refs: Vec<&[u16]> = rows.iter().map(|r| &r[..]).collect();
            mad_f16_rows(&mut got, &refs, &w);
            let mut want = y0;
            for (r, &wi) in rows.iter().zip(&w) {
                let conv: Vec<f32> = r
                    .iter()
                    .map(|&b| half::f16::from_bits(b).to_f32())
                    .collect();
                mad_f32(&mut want, &conv, wi);
            }
            assert_eq!(bits(&got), bits(&want), "mad_f16_rows, {n} values");
        }
    }

    fn close(a: f32, b: f32, tol: f32) -> bool {
        (a - b).abs() <= tol * (1.0 + b.abs())
    }

    #[test]
    fn fma_compiled_row_ops_equal_the_plain_build_bit_for_bit() {
        // The dispatched row ops (the FMA copy on FMA hosts) against their
        // bodies compiled without FMA (libm fmaf): the same fused results.
        let mut s = 7u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 4001) as f32 / 100.0 - 20.0
        };
        let n = 16 * 9 + 5;
        let g: Vec<f32> = (0..n).map(|_| next()).collect();
        let up: Vec<f32> = (0..n).map(|_| next()).collect();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();

        let (mut a, mut b) = (g.clone(), g.clone());
        silu_row(&mut a);
        silu_row_body(&mut b);
        assert_eq!(bits(&a), bits(&b), "silu_row");

        let (mut a, mut b) = (vec![0.0; n], vec![0.0; n]);
        swiglu_row(&g, &up, &mut a);
        swiglu_row_body(&g, &up, &mut b);
        assert_eq!(bits(&a), bits(&b), "swiglu_row");

        let (mut a, mut b) = (g.clone(), g.clone());
        softmax_inplace(&mut a);
        softmax_split_body(&mut b, n - n % GGML_LANES);
        assert_eq!(bits(&a), bits(&b), "softmax");
    }

    #[test]
    fn rmsnorm_matches_the_textbook_formula() {
        let x = [0.5f32, -1.25, 3.0, 0.0, 2.0];
        let w = [1.0f32, 2.0, 0.5, 3.0, -1.0];
        let eps = 1e-6;
        let mut out = [0.0; 5];
        rmsnorm(&x, &w, eps, &mut out);
        let ms = x.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / 5.0;
        for i in 0..5 {
            let want = x[i] as f64 / (ms + eps as f64).sqrt() * w[i] as f64;
            assert!(close(out[i], want as f32, 1e-6), "{i}");
        }
    }

    #[test]
    fn l2norm_matches_x_over_root_sum_of_squares_plus_eps() {
        let mut x = [3.0f32, 4.0, 0.0, -12.0];
        let eps = 1e-6;
        let norm = (9.0f64 + 16.0 + 144.0 + eps as f64).sqrt();
        let want: Vec<f32> = [3.0, 4.0, 0.0, -12.0]
            .iter()
            .map(|v| (v / norm) as f32)
            .collect();
        l2norm_inplace(&mut x, eps);
        for i in 0..4 {
            assert!(close(x[i], want[i], 1e-6), "{i}");
        }
        // eps dominates a zero vector instead of dividing by zero.
        let mut z = [0.0f32; 4];
        l2norm_inplace(&mut z, eps);
        assert_eq!(z, [0.0; 4]);
    }

    #[test]
    fn pointwise_functions_match_their_definitions() {
        for x in [-30.0f32, -3.0, -0.5, 0.0, 0.7, 5.0, 19.9, 20.5, 40.0] {
            let xd = x as f64;
            let sig = 1.0 / (1.0 + (-xd).exp());
            assert!(close(sigmoid(x), sig as f32, 1e-6));
            assert!(close(silu(x), (xd * sig) as f32, 1e-6));
            let sp = if x > 20.0 { xd } else { (1.0 + xd.exp()).ln() };
            assert!(close(softplus(x), sp as f32, 1e-6));
        }
        assert_eq!(softplus(20.5), 20.5);
    }

    #[test]
    fn softmax_sums_to_one_and_matches_exp_ratio() {
        let mut x = [1.0f32, 2.0, -1.0, 1000.0, 999.0];
        softmax_inplace(&mut x);
        let d = 1.0 + (-1.0f64).exp() + (-999.0f64).exp() * 3.0;
        assert!(close(x[3], (1.0 / d) as f32, 1e-6));
        assert!(close(x[4], ((-1.0f64).exp() / d) as f32, 1e-6));
        assert!(x[0] < 1e-30);
        assert!(close(x.iter().sum::<f32>(), 1.0, 1e-6));
    }

    #[test]
    fn rope_rotates_neox_pairs_by_explicit_angles_and_leaves_the_tail() {
        let (n_rot, base, head) = (8usize, 10000.0f32, 12usize);
        let mut rc = RopeCache::new(n_rot, base, None);
        let p = 7;
        rc.set_position(p);
        let x: Vec<f32> = (0..head).map(|i| (i as f32 * 0.37).sin() + 0.1).collect();
        let mut y = x.clone();
        rc.apply(&mut y[..n_rot]);
        for i in 0..n_rot / 2 {
            let th = p as f64 * (base as f64).powf(-2.0 * i as f64 / n_rot as f64);
            let (c, s) = (th.cos(), th.sin());
            let (a, b) = (x[i] as f64, x[i + n_rot / 2] as f64);
            assert!(close(y[i], (a * c - b * s) as f32, 1e-5), "pair {i}");
            assert!(
                close(y[i + n_rot / 2], (a * s + b * c) as f32, 1e-5),
                "pair {i}"
            );
        }
        assert_eq!(&y[n_rot..], &x[n_rot..]);
        // Position 0 is the identity.
        rc.set_position(0);
        let mut z = x.clone();
        rc.apply(&mut z[..n_rot]);
        assert_eq!(z, x);
    }

    /// docs/DESIGN.md §2.4's rule, transcribed clause by clause.
    fn design_rule(i: usize, s: [u32; 4]) -> bool {
        let (s0, s1, s2) = (s[0] as usize, s[1] as usize, s[2] as usize);
        let sector = i % s.iter().map(|&x| x as usize).sum::<usize>();
        (sector.is_multiple_of(3) && sector < 3 * s0)
            || (sector % 3 == 1 && sector < 3 * s1)
            || (sector % 3 == 2 && sector < 3 * s2)
    }

    #[test]
    fn qwen35_sections_rotate_all_32_pairs() {
        assert_eq!(
            rope_pairs_rotated(32, Some([11, 11, 10, 0])),
            vec![true; 32]
        );
    }

    #[test]
    fn sections_4_2_2_0_leave_only_pair_7_of_8_unrotated() {
        let mut want = vec![true; 8];
        want[7] = false;
        assert_eq!(rope_pairs_rotated(8, Some([4, 2, 2, 0])), want);
    }

    #[test]
    fn absent_sections_rotate_every_pair() {
        assert_eq!(rope_pairs_rotated(5, None), vec![true; 5]);
    }

    #[test]
    fn sections_the_writers_use_rotate_every_pair() {
        // synth's presets (16 and 4 rotated dims), the exporter's rule for 16,
        // tests/llama_parity.rs' tiny file (8 dims).
        for (pairs, s) in [(8, [3, 3, 2, 0]), (2, [1, 1, 0, 0]), (4, [2, 1, 1, 0])] {
            assert_eq!(
                rope_pairs_rotated(pairs, Some(s)),
                vec![true; pairs],
                "{s:?}"
            );
        }
    }

    #[test]
    fn hand_worked_sections_leave_the_pairs_the_rule_names() {
        // [1,0,0,1]: sector 1 belongs to the empty second section.
        assert_eq!(rope_pairs_rotated(2, Some([1, 0, 0, 1])), [true, false]);
        // [24,20,20,0] over 32 pairs: sector c ≡ 1, 2 (mod 3) stop below 60,
        // so everything rotates here; over 64 pairs 61 and 62 do not.
        assert_eq!(
            rope_pairs_rotated(32, Some([24, 20, 20, 0])),
            vec![true; 32]
        );
        let m = rope_pairs_rotated(64, Some([24, 20, 20, 0]));
        let off: Vec<usize> = (0..64).filter(|&i| !m[i]).collect();
        assert_eq!(off, [61, 62]);
        // Sections shorter than the pairs repeat: [1,1,0,0] over 6 pairs is
        // sectors 0,1,0,1,0,1.
        assert_eq!(rope_pairs_rotated(6, Some([1, 1, 0, 0])), vec![true; 6]);
        // [0,1,1,1]: sector 0 has no first section, sector 1 and 2 do.
        assert_eq!(
            rope_pairs_rotated(6, Some([0, 1, 1, 1])),
            [false, true, true, false, true, true]
        );
    }

    #[test]
    fn pair_mask_follows_design_rule_for_every_small_section_choice() {
        for s0 in 0..5u32 {
            for s1 in 0..4u32 {
                for s2 in 0..4u32 {
                    for s3 in 0..3u32 {
                        let s = [s0, s1, s2, s3];
                        if s0 + s1 + s2 == 0 {
                            continue;
                        }
                        for pairs in [1, 2, 3, 7, 8, 16, 32] {
                            let want: Vec<bool> = (0..pairs).map(|i| design_rule(i, s)).collect();
                            assert_eq!(rope_pairs_rotated(pairs, Some(s)), want, "{s:?} {pairs}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn rope_leaves_a_pair_the_sections_skip_bit_for_bit_and_turns_the_rest() {
        let (n_rot, base, p) = (16usize, 10000.0f32, 37);
        let x: Vec<f32> = (0..n_rot).map(|i| (i as f32 * 0.61).cos() - 0.2).collect();
        let mut all = RopeCache::new(n_rot, base, None);
        let mut some = RopeCache::new(n_rot, base, Some([4, 2, 2, 0]));
        all.set_position(p);
        some.set_position(p);
        let (mut a, mut b) = (x.clone(), x.clone());
        all.apply(&mut a);
        some.apply(&mut b);
        let h = n_rot / 2;
        for i in 0..h - 1 {
            assert_eq!(a[i].to_bits(), b[i].to_bits(), "pair {i}");
            assert_eq!(a[i + h].to_bits(), b[i + h].to_bits(), "pair {i}");
        }
        assert_eq!((b[h - 1], b[n_rot - 1]), (x[h - 1], x[n_rot - 1]));
        assert_ne!(a[h - 1], x[h - 1]);
    }

    #[test]
    fn pow2_equals_powi_over_the_exponents_v_expf_uses() {
        for n in -192..=192 {
            assert_eq!(pow2(n).to_bits(), 2f64.powi(n).to_bits(), "2^{n}");
        }
    }
}
