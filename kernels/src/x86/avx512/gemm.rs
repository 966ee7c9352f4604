//! AVX-512 VNNI multi-row products (`GemmFn`): one weight row against up to
//! [`COLS`] activation rows at once, for Q3_K, Q4_K, Q5_K and Q6_K (Q8_K
//! activations; the bodies other than Q4_K's are in `gemm_kq`) and the
//! signed-level 32-element types Q8_0, Q4_0, Q5_0 and IQ4_NL (Q8_0
//! activations).
//!
//! Each weight block is loaded and unpacked once (Q4_K: nibbles, the twelve
//! packed scale bytes, the f16 `d`/`dmin`; legacy: levels, their signs and
//! absolute values, the f16 scales) and then dotted with the same block of
//! every activation row of the group.
//!
//! **Bit-exact with the one-row kernels of this tier** (`kquants::q4_k`,
//! `legacy::dot_sym`): every output keeps its own f32 accumulators with the
//! one-row kernel's lane assignment, the same f32 operations in the same
//! order (scale products, FMAs, final horizontal sums), and integer partial
//! sums that are exact. Only integer work and loads are shared, so each
//! output equals the one-row `vec_dot` bit for bit (the speculative verify
//! batch then matches single-token decode exactly).

use std::arch::x86_64::*;

use crate::blocks::as_blocks;
use crate::isa::GemmFn;
use crate::scalar::iq4_nl::BlockIq4Nl;
use crate::scalar::q3_k::BlockQ3K;
use crate::scalar::q4_0::BlockQ4_0;
use crate::scalar::q4_k::BlockQ4K;
use crate::scalar::q5_0::BlockQ5_0;
use crate::scalar::q5_k::BlockQ5K;
use crate::scalar::q6_k::BlockQ6K;
use crate::scalar::q8_0::BlockQ8_0;
use crate::scalar::q8_k::BlockQ8K;
use crate::x86::avx2::kquants::{at, hsum_ps, load_bsums, load_i8, load_u8};
use crate::x86::avx2::legacy::SymBlock;
use crate::x86::avx512::gemm_kq::{q3_k_cols, q5_k_cols, q6_k_cols};
use crate::x86::avx512::kquants::{k4_scale_bytes, k4_unpack};
use crate::x86::avx512::legacy::{join, pair_sym, spread4};
use crate::GgmlType;

/// Activation rows one kernel call serves.
pub const COLS: usize = 4;

/// The same for Q3_K, Q5_K and Q6_K, whose per-block weight unpacking is
/// the larger share (eight rows, then the rest four, three, two or one).
pub const COLS_K: usize = 8;

/// This tier's multi-row product for weight type `ty`, if it has one.
pub fn gemm_fn(ty: GgmlType) -> Option<GemmFn> {
    if !(crate::Isa::Avx512.available() && is_x86_feature_detected!("avx512vnni")) {
        return None;
    }
    match ty {
        GgmlType::Q4_K => Some(gemm_q4_k),
        GgmlType::Q3_K => Some(gemm_q3_k),
        GgmlType::Q5_K => Some(gemm_q5_k),
        GgmlType::Q6_K => Some(gemm_q6_k),
        GgmlType::Q8_0 => Some(gemm_q8_0),
        GgmlType::Q4_0 => Some(gemm_q4_0),
        GgmlType::Q5_0 => Some(gemm_q5_0),
        GgmlType::IQ4_NL => Some(gemm_iq4_nl),
        _ => None,
    }
}

/// The shared driver: for every weight row, groups of up to [`COLS`]
/// activation rows, each group one call of `kernel::<C>`.
macro_rules! gemm_entry {
    ($name:ident, $wb:ty, $ab:ty, $qk:expr, $kernel:ident) => {
        gemm_entry!($name, $wb, $ab, $qk, $kernel, COLS);
    };
    ($name:ident, $wb:ty, $ab:ty, $qk:expr, $kernel:ident, $cols:expr) => {
        fn $name(
            n: usize,
            w: &[u8],
            w_rows: usize,
            act: &[u8],
            act_rows: usize,
            out: &mut [f32],
            out_stride: usize,
        ) {
            assert!(n.is_multiple_of($qk), "gemm: {n} is not whole blocks");
            let nb = n / $qk;
            let (wr, ar) = (nb * size_of::<$wb>(), nb * size_of::<$ab>());
            assert!(
                w.len() >= w_rows * wr && act.len() >= act_rows * ar,
                "gemm: {w_rows} x {act_rows} rows of {n} do not fit the bytes"
            );
            if w_rows == 0 || act_rows == 0 {
                return;
            }
            assert!(
                out.len() >= (w_rows - 1) * out_stride + act_rows && act_rows <= out_stride,
                "gemm: output too short"
            );
            let a_row = |t: usize| -> &[$ab] { as_blocks(&act[t * ar..(t + 1) * ar]) };
            for i in 0..w_rows {
                let x: &[$wb] = as_blocks(&w[i * wr..(i + 1) * wr]);
                let o = &mut out[i * out_stride..i * out_stride + act_rows];
                let mut t = 0;
                while t < act_rows {
                    let r = act_rows - t;
                    let c = if $cols >= 8 && r >= 8 { 8 } else { r.min(4) };
                    let o = &mut o[t..t + c];
                    // SAFETY: `gemm_fn` hands this out only after detecting
                    // AVX512-VNNI and `Isa::Avx512.available()` (AVX512
                    // F/BW/VL, AVX2, FMA, F16C): every feature the kernel enables.
                    unsafe {
                        match c {
                            8 => o.copy_from_slice(&$kernel::<8>(
                                x,
                                std::array::from_fn(|k| a_row(t + k)),
                            )),
                            4 => o.copy_from_slice(&$kernel::<4>(
                                x,
                                [a_row(t), a_row(t + 1), a_row(t + 2), a_row(t + 3)],
                            )),
                            3 => o.copy_from_slice(&$kernel::<3>(
                                x,
                                [a_row(t), a_row(t + 1), a_row(t + 2)],
                            )),
                            2 => o.copy_from_slice(&$kernel::<2>(x, [a_row(t), a_row(t + 1)])),
                            _ => o.copy_from_slice(&$kernel::<1>(x, [a_row(t)])),
                        }
                    }
                    t += c;
                }
            }
        }
    };
}

gemm_entry!(gemm_q4_k, BlockQ4K, BlockQ8K, 256, q4_k_cols);
gemm_entry!(gemm_q3_k, BlockQ3K, BlockQ8K, 256, q3_k_cols, COLS_K);
gemm_entry!(gemm_q5_k, BlockQ5K, BlockQ8K, 256, q5_k_cols, COLS_K);
gemm_entry!(gemm_q6_k, BlockQ6K, BlockQ8K, 256, q6_k_cols, COLS_K);
gemm_entry!(gemm_q8_0, BlockQ8_0, BlockQ8_0, 32, q8_0_cols);
gemm_entry!(gemm_q4_0, BlockQ4_0, BlockQ8_0, 32, q4_0_cols);
gemm_entry!(gemm_q5_0, BlockQ5_0, BlockQ8_0, 32, q5_0_cols);
gemm_entry!(gemm_iq4_nl, BlockIq4Nl, BlockQ8_0, 32, iq4_nl_cols);

// ---------------------------------------------------------------- Q4_K

/// One Q4_K row against `C` Q8_K rows: `kquants::q4_k`'s arithmetic per
/// output, the nibbles, scales, mins and `d`/`dmin` unpacked once per block.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn q4_k_cols<const C: usize>(x: &[BlockQ4K], y: [&[BlockQ8K]; C]) -> [f32; C] {
    let m4 = _mm256_set1_epi8(0xF);
    let lo16 = _mm256_set1_epi32(0xFFFF);
    let idx = _mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    let mut acc = [_mm256_setzero_ps(); C];
    let mut acc_m = [_mm256_setzero_ps(); C];
    let mut pairs = [0i32; 8];
    for (b, xb) in x.iter().enumerate() {
        let head: &[u8; 4] = bytemuck::bytes_of(xb)[..4].try_into().unwrap();
        let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from_le_bytes(*head)));
        let v16 = _mm256_cvtepu8_epi16(k4_unpack(k4_scale_bytes(xb)));
        let mins = _mm256_permutexvar_epi16(idx, v16);
        let mut d = [_mm256_setzero_ps(); C];
        for c in 0..C {
            let yb = &y[c][b];
            let dd = _mm_mul_ps(dm, _mm_set1_ps(yb.d));
            d[c] = _mm256_broadcastss_ps(dd);
            let dmin = _mm256_broadcastss_ps(_mm_movehdup_ps(dd));
            let prod = _mm256_madd_epi16(mins, load_bsums(&yb.bsums));
            acc_m[c] = _mm256_fnmadd_ps(dmin, _mm256_cvtepi32_ps(prod), acc_m[c]);
        }
        // SAFETY: `pairs` is 32 writable bytes; `storeu` has no alignment requirement.
        unsafe { _mm256_storeu_si256(pairs.as_mut_ptr().cast(), v16) };
        let pairs = std::hint::black_box(&pairs);
        let mut sumi = [_mm256_setzero_si256(); C];
        for (j, &pair) in pairs[..4].iter().enumerate() {
            let q = load_u8(at(&xb.qs, 32 * j));
            let lo = _mm256_and_si256(q, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
            let pair = _mm256_set1_epi32(pair);
            for c in 0..C {
                let yb = &y[c][b];
                let z = _mm256_setzero_si256();
                let dl = _mm256_dpbusd_epi32(z, lo, load_i8(at(&yb.qs, 64 * j)));
                let dh = _mm256_dpbusd_epi32(z, hi, load_i8(at(&yb.qs, 64 * j + 32)));
                let m = _mm256_ternarylogic_epi32::<0xEC>(dl, _mm256_slli_epi32::<16>(dh), lo16);
                sumi[c] = _mm256_dpwssd_epi32(sumi[c], m, pair);
            }
        }
        for c in 0..C {
            acc[c] = _mm256_fmadd_ps(d[c], _mm256_cvtepi32_ps(sumi[c]), acc[c]);
        }
    }
    std::array::from_fn(|c| hsum_ps(acc[c]) + hsum_ps(acc_m[c]))
}

// ---------------------------------------------------------------- Q8_0 & co

/// Signed × signed byte dot in 16 i32 lanes, the weight's sign and absolute
/// value given: `legacy::dot_ss` with those two shared across columns.
#[inline(always)]
fn dot_ss_split(abs_x: __m512i, neg: __mmask64, y: __m512i) -> __m512 {
    // SAFETY: register-only intrinsics; the (inlined-into) caller enables
    // AVX512 F/BW/VNNI.
    unsafe {
        let sy = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
        _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), abs_x, sy))
    }
}

/// One signed-level row against `C` Q8_0 rows: `legacy::dot_sym::<B, true>`
/// per output (four blocks per step, the same two accumulators, the same
/// remainder pairs), the weight levels and scales unpacked once per step.
#[inline(always)]
fn sym_cols<B: SymBlock, const C: usize>(x: &[B], y: [&[BlockQ8_0]; C]) -> [f32; C] {
    // SAFETY: block accesses are through slices; the intrinsics need AVX512
    // F/BW/VL/VNNI, AVX2, FMA and F16C, which every caller enables.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 2]; C];
        let q = x.len() / 4;
        for k in 0..q {
            let xq = &x[4 * k..4 * k + 4];
            let xd = _mm_cvtph_ps(_mm_setr_epi16(
                xq[0].d_bits() as i16,
                xq[1].d_bits() as i16,
                xq[2].d_bits() as i16,
                xq[3].d_bits() as i16,
                0,
                0,
                0,
                0,
            ));
            let l01 = join(xq[0].levels(), xq[1].levels());
            let l23 = join(xq[2].levels(), xq[3].levels());
            let (n01, n23) = (_mm512_movepi8_mask(l01), _mm512_movepi8_mask(l23));
            let (a01, a23) = (_mm512_abs_epi8(l01), _mm512_abs_epi8(l23));
            for c in 0..C {
                let yq = &y[c][4 * k..4 * k + 4];
                let yd = _mm_cvtph_ps(_mm_setr_epi16(
                    yq[0].d_bits() as i16,
                    yq[1].d_bits() as i16,
                    yq[2].d_bits() as i16,
                    yq[3].d_bits() as i16,
                    0,
                    0,
                    0,
                    0,
                ));
                let (d01, d23) = spread4(_mm_mul_ps(xd, yd));
                let p01 = dot_ss_split(a01, n01, join(yq[0].levels(), yq[1].levels()));
                let p23 = dot_ss_split(a23, n23, join(yq[2].levels(), yq[3].levels()));
                acc[c][0] = _mm512_fmadd_ps(d01, p01, acc[c][0]);
                acc[c][1] = _mm512_fmadd_ps(d23, p23, acc[c][1]);
            }
        }
        let xr = &x[4 * q..];
        for c in 0..C {
            let yr = &y[c][4 * q..x.len()];
            if xr.len() >= 2 {
                acc[c][0] = pair_sym::<B, true>([&xr[0], &xr[1]], [&yr[0], &yr[1]], 1.0, acc[c][0]);
            }
            if xr.len() % 2 == 1 {
                let (bx, by) = (&xr[xr.len() - 1], &yr[xr.len() - 1]);
                acc[c][1] = pair_sym::<B, true>([bx, bx], [by, by], 0.0, acc[c][1]);
            }
        }
        std::array::from_fn(|c| _mm512_reduce_add_ps(_mm512_add_ps(acc[c][0], acc[c][1])))
    }
}

macro_rules! sym_kernel {
    ($name:ident, $wb:ty) => {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        fn $name<const C: usize>(x: &[$wb], y: [&[BlockQ8_0]; C]) -> [f32; C] {
            sym_cols::<$wb, C>(x, y)
        }
    };
}

sym_kernel!(q8_0_cols, BlockQ8_0);
sym_kernel!(q4_0_cols, BlockQ4_0);
sym_kernel!(q5_0_cols, BlockQ5_0);
sym_kernel!(iq4_nl_cols, BlockIq4Nl);
