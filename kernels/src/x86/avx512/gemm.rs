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
//! `legacy::dot_sym`, both in ggml's order): every output keeps its own f32
//! accumulators with the one-row kernel's lane assignment, the same f32 operations in the same
//! order (scale products, FMAs, final horizontal sums), and integer partial
//! sums that are exact. Only integer work and loads are shared, so each
//! output equals the one-row `vec_dot` bit for bit (the speculative verify
//! batch then matches single-token decode exactly).

use std::arch::x86_64::*;

use crate::blocks::as_blocks;
use crate::scalar::iq4_nl::BlockIq4Nl;
use crate::scalar::iq4_xs::BlockIq4Xs;
use crate::scalar::q3_k::BlockQ3K;
use crate::scalar::q4_0::BlockQ4_0;
use crate::scalar::q4_k::BlockQ4K;
use crate::scalar::q5_0::BlockQ5_0;
use crate::scalar::q5_k::BlockQ5K;
use crate::scalar::q6_k::BlockQ6K;
use crate::scalar::q8_0::BlockQ8_0;
use crate::scalar::q8_k::BlockQ8K;
use crate::sig::GemmFn;
use crate::x86::avx2::kquants::{at, hsum_ps, load_i8, load_u8, q4_k_repacked};
use crate::x86::avx2::legacy::SymBlock;
use crate::x86::avx512::gemm_kq::{
    iq4_xs_rows2, iq4_xs_rows2_vbmi, q3_k_cols, q3_k_rows2, q3_k_rows2_gfni, q4_k_repacked_rows2,
    q4_k_rows2, q5_k_cols, q5_k_r8_cols, q5_k_r8_rows2, q5_k_rows2, q6_k_cols, q6_k_r8_cols,
    q6_k_r8_rows2, q6_k_rows2, q6_k_rows2_gfni,
};
use crate::x86::avx512::kquants::{
    hsum128, iq4_xs_cols, iq4_xs_prepare, k4_mins, k4_scale_bytes, k4_unpack, Iq4Acts,
};
use crate::x86::avx512::legacy::{dot_ss, join, split, sym_tail};
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
        // The pair `kquants::vec_dot_fn` hands out: the same bits either way.
        GgmlType::IQ4_XS if is_x86_feature_detected!("avx512vbmi") => Some(gemm_iq4_xs_vbmi),
        GgmlType::IQ4_XS => Some(gemm_iq4_xs),
        _ => None,
    }
}

/// Panics unless `w_rows` weight rows and `act_rows` activation rows of
/// `n` elements (`(bytes, row bytes, rows)` each) fit their buffers and every
/// output `out[i·out_stride + t]` fits `out`; `false` when there is nothing
/// to compute. Shared by every `GemmFn` of this tier.
pub(super) fn check_shapes(
    n: usize,
    (w_len, wr, w_rows): (usize, usize, usize),
    (act_len, ar, act_rows): (usize, usize, usize),
    out_len: usize,
    out_stride: usize,
) -> bool {
    assert!(
        w_len >= w_rows * wr && act_len >= act_rows * ar,
        "gemm: {w_rows} x {act_rows} rows of {n} do not fit the bytes"
    );
    if w_rows == 0 || act_rows == 0 {
        return false;
    }
    assert!(
        out_len >= (w_rows - 1) * out_stride + act_rows && act_rows <= out_stride,
        "gemm: output too short"
    );
    true
}

/// The activation row as it comes: the `$prep` of the two-row kernels that
/// read the activation blocks themselves.
fn as_is<T>(a: &[T], f: &mut dyn FnMut(&[T])) -> bool {
    f(a);
    true
}

/// The shared driver: for every weight row, groups of up to [`COLS`]
/// activation rows (`eight`: [`COLS_K`]), each group one call of
/// `kernel::<C>`; `rows2`: a two-weight-row kernel for a mat-vec.
macro_rules! gemm_entry {
    (@eight true, $o:ident, $kernel:ident, $x:ident, $a_row:ident, $t:ident) => {
        $o.copy_from_slice(&$kernel::<8>($x, std::array::from_fn(|k| $a_row($t + k))))
    };
    (@eight false, $o:ident, $kernel:ident, $x:ident, $a_row:ident, $t:ident) => {
        unreachable!("eight-row groups only for the eight-row kernels")
    };
    ($name:ident, $wb:ty, $ab:ty, $qk:expr, $kernel:ident) => {
        gemm_entry!($name, $wb, $ab, $qk, $kernel, false, $ab, as_is,
            |_: &[&[$wb]; 2], _: &[$ab]| None);
    };
    ($name:ident, $wb:ty, $ab:ty, $qk:expr, $kernel:ident, eight) => {
        gemm_entry!($name, $wb, $ab, $qk, $kernel, true, $ab, as_is,
            |_: &[&[$wb]; 2], _: &[$ab]| None);
    };
    ($name:ident, $wb:ty, $ab:ty, $qk:expr, $kernel:ident, eight rows2 $rows2:expr) => {
        gemm_entry!($name, $wb, $ab, $qk, $kernel, true, $ab, as_is, $rows2);
    };
    ($name:ident, $wb:ty, $ab:ty, $qk:expr, $kernel:ident, rows2 $rows2:expr) => {
        gemm_entry!($name, $wb, $ab, $qk, $kernel, false, $ab, as_is, $rows2);
    };
    // `$prep` lays the activation row out once per call as `[$pt]` for the
    // two-row kernel (`false`: it cannot, and every row takes `$kernel`).
    ($name:ident, $wb:ty, $ab:ty, $qk:expr, $kernel:ident, rows2 $pt:ty, $prep:expr, $rows2:expr) => {
        gemm_entry!($name, $wb, $ab, $qk, $kernel, false, $pt, $prep, $rows2);
    };
    ($name:ident, $wb:ty, $ab:ty, $qk:expr, $kernel:ident, $eight:tt, $pt:ty, $prep:expr,
     $rows2:expr) => {
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
            if !check_shapes(n, (w.len(), wr, w_rows), (act.len(), ar, act_rows), out.len(), out_stride) {
                return;
            }
            let a_row = |t: usize| -> &[$ab] { as_blocks(&act[t * ar..(t + 1) * ar]) };
            let w_row = |i: usize| -> &[$wb] { as_blocks(&w[i * wr..(i + 1) * wr]) };
            // One activation row (a mat-vec): weight rows two at a time
            // where the type has a two-row kernel, row i of the first half
            // with row i of the second, so that each half is read as one
            // long sequential stream (adjacent pairs restart the hardware
            // prefetcher every other row: three times slower from DRAM).
            let (half, mut i0) = (if act_rows == 1 { w_rows / 2 } else { 0 }, 0);
            if half > 0 {
                let rows2: fn(&[&[$wb]; 2], &[$pt]) -> Option<[f32; 2]> = $rows2;
                let prep: unsafe fn(&[$ab], &mut dyn FnMut(&[$pt])) -> bool = $prep;
                let mut pairs = |p: &[$pt]| {
                    while i0 < half {
                        let Some(r) = rows2(&[w_row(i0), w_row(half + i0)], p) else {
                            break;
                        };
                        out[i0 * out_stride] = r[0];
                        out[(half + i0) * out_stride] = r[1];
                        i0 += 1;
                    }
                };
                // SAFETY: `gemm_fn` hands the entry out only after detecting
                // the AVX-512 tier, which includes the AVX2 a `$prep` enables.
                unsafe { prep(a_row(0), &mut pairs) };
            }
            // The rows no pair covered: all of them without a two-row kernel.
            for i in (i0..half).chain(half + i0..w_rows) {
                let x: &[$wb] = as_blocks(&w[i * wr..(i + 1) * wr]);
                let o = &mut out[i * out_stride..i * out_stride + act_rows];
                let mut t = 0;
                while t < act_rows {
                    let r = act_rows - t;
                    let c = if $eight && r >= 8 { 8 } else { r.min(4) };
                    let o = &mut o[t..t + c];
                    // SAFETY: `gemm_fn` hands this out only after detecting
                    // AVX512-VNNI and `Isa::Avx512.available()` (AVX512
                    // F/BW/VL, AVX2, FMA, F16C): every feature the kernel enables.
                    unsafe {
                        match c {
                            8 => gemm_entry!(@eight $eight, o, $kernel, x, a_row, t),
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

gemm_entry!(
    gemm_q3_k,
    BlockQ3K,
    BlockQ8K,
    256,
    q3_k_cols,
    eight rows2 |x: &[&[BlockQ3K]; 2], y: &[BlockQ8K]| {
        // SAFETY: `gemm_fn` hands the entry out only after detecting AVX512-VNNI
        // and `Isa::Avx512.available()` (AVX512 F/BW/VL, AVX2, FMA, F16C);
        // the GFNI variant only when GFNI is detected too.
        Some(unsafe {
            if is_x86_feature_detected!("gfni") {
                q3_k_rows2_gfni(x[0], x[1], y)
            } else {
                q3_k_rows2(x[0], x[1], y)
            }
        })
    }
);
gemm_entry!(
    gemm_q5_k,
    BlockQ5K,
    BlockQ8K,
    256,
    q5_k_cols,
    eight rows2 |x: &[&[BlockQ5K]; 2], y: &[BlockQ8K]| {
        // SAFETY: `gemm_fn` hands the entry out only after detecting AVX512-VNNI
        // and `Isa::Avx512.available()` (AVX512 F/BW/VL, AVX2, FMA, F16C).
        Some(unsafe { q5_k_rows2(x[0], x[1], y) })
    }
);
gemm_entry!(
    gemm_q6_k,
    BlockQ6K,
    BlockQ8K,
    256,
    q6_k_cols,
    eight rows2 |x: &[&[BlockQ6K]; 2], y: &[BlockQ8K]| {
        // SAFETY: `gemm_fn` hands the entry out only after detecting AVX512-VNNI
        // and `Isa::Avx512.available()` (AVX512 F/BW/VL, AVX2, FMA, F16C);
        // the GFNI variant only when GFNI is detected too.
        Some(unsafe {
            if is_x86_feature_detected!("gfni") {
                q6_k_rows2_gfni(x[0], x[1], y)
            } else {
                q6_k_rows2(x[0], x[1], y)
            }
        })
    }
);
gemm_entry!(
    gemm_q4_k,
    BlockQ4K,
    BlockQ8K,
    256,
    q4_k_cols,
    rows2 |x: &[&[BlockQ4K]; 2], y: &[BlockQ8K]| {
        // SAFETY: as for `q4_k_cols`: `gemm_fn` hands the entry out only after
        // detecting AVX512-VNNI and `Isa::Avx512.available()`.
        Some(unsafe { q4_k_rows2(x[0], x[1], y) })
    }
);
// One gemm_entry! per type, alike but for the block types and kernels: each names its own column
// and rows2 kernels, and the SAFETY argument sits at each unsafe call.
gemm_entry!(
    gemm_q8_0,
    BlockQ8_0,
    BlockQ8_0,
    32,
    q8_0_cols,
    rows2 |x: &[&[BlockQ8_0]; 2], y: &[BlockQ8_0]| {
        // SAFETY: `gemm_fn` hands the entry out only after detecting AVX512-VNNI
        // and `Isa::Avx512.available()` (AVX512 F/BW/VL, AVX2, FMA, F16C).
        Some(unsafe { sym_rows2::<BlockQ8_0, false>(x[0], x[1], y) })
    }
);
gemm_entry!(
    gemm_q4_0,
    BlockQ4_0,
    BlockQ8_0,
    32,
    q4_0_cols,
    rows2 |x: &[&[BlockQ4_0]; 2], y: &[BlockQ8_0]| {
        // SAFETY: `gemm_fn` hands the entry out only after detecting AVX512-VNNI
        // and `Isa::Avx512.available()` (AVX512 F/BW/VL, AVX2, FMA, F16C).
        Some(unsafe { sym_rows2::<BlockQ4_0, false>(x[0], x[1], y) })
    }
);
gemm_entry!(
    gemm_q5_0,
    BlockQ5_0,
    BlockQ8_0,
    32,
    q5_0_cols,
    rows2 |x: &[&[BlockQ5_0]; 2], y: &[BlockQ8_0]| {
        // SAFETY: `gemm_fn` hands the entry out only after detecting AVX512-VNNI
        // and `Isa::Avx512.available()` (AVX512 F/BW/VL, AVX2, FMA, F16C).
        Some(unsafe { sym_rows2::<BlockQ5_0, false>(x[0], x[1], y) })
    }
);
gemm_entry!(
    gemm_iq4_nl,
    BlockIq4Nl,
    BlockQ8_0,
    32,
    iq4_nl_cols,
    rows2 |x: &[&[BlockIq4Nl]; 2], y: &[BlockQ8_0]| {
        // SAFETY: `gemm_fn` hands the entry out only after detecting AVX512-VNNI
        // and `Isa::Avx512.available()` (AVX512 F/BW/VL, AVX2, FMA, F16C).
        Some(unsafe { sym_rows2::<BlockIq4Nl, true>(x[0], x[1], y) })
    }
);

gemm_entry!(
    gemm_iq4_xs,
    BlockIq4Xs,
    BlockQ8K,
    256,
    iq4_xs_cols_plain,
    rows2 Iq4Acts, iq4_xs_prepare, |x: &[&[BlockIq4Xs]; 2], y: &[Iq4Acts]| {
        // SAFETY: `gemm_fn` hands the entry out only after detecting AVX512-VNNI
        // and `Isa::Avx512.available()` (AVX512 F/BW/VL, AVX2, FMA, F16C).
        Some(unsafe { iq4_xs_rows2(x[0], x[1], y) })
    }
);
gemm_entry!(
    gemm_iq4_xs_vbmi,
    BlockIq4Xs,
    BlockQ8K,
    256,
    iq4_xs_cols_vbmi,
    rows2 Iq4Acts, iq4_xs_prepare, |x: &[&[BlockIq4Xs]; 2], y: &[Iq4Acts]| {
        // SAFETY: as for `gemm_iq4_xs`, and `gemm_fn` hands this one out only
        // when AVX512-VBMI is detected too.
        Some(unsafe { iq4_xs_rows2_vbmi(x[0], x[1], y) })
    }
);

/// `kquants::iq4_xs_cols` looking the grid up with `pshufb`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn iq4_xs_cols_plain<const C: usize>(x: &[BlockIq4Xs], y: [&[BlockQ8K]; C]) -> [f32; C] {
    // SAFETY: this function enables every feature the body needs.
    unsafe { iq4_xs_cols::<false, C>(x, y) }
}

/// `kquants::iq4_xs_cols` looking the grid up with `vpermb`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
fn iq4_xs_cols_vbmi<const C: usize>(x: &[BlockIq4Xs], y: [&[BlockQ8K]; C]) -> [f32; C] {
    // SAFETY: this function enables every feature the body needs.
    unsafe { iq4_xs_cols::<true, C>(x, y) }
}

// Q4_K in the order of ggml's repacked gemv (`avx2::kquants::q4_k_repacked`,
// the table's `weight_dot` for Q4_K matrices of `n_out % 8 == 0`): the
// two-row kernel for a mat-vec, that dot itself for the rest.
gemm_entry!(
    gemm_q4_k_repacked,
    BlockQ4K,
    BlockQ8K,
    256,
    q4_k_repacked_cols,
    rows2 |x: &[&[BlockQ4K]; 2], y: &[BlockQ8K]| {
        // SAFETY: `ggml_repack_rows_fn` hands the entry out only after detecting
        // AVX512-VNNI and `Isa::Avx512.available()`.
        Some(unsafe { q4_k_repacked_rows2(x[0], x[1], y) })
    }
);

/// The repacked-order one-row dot per output (no shared column work: this
/// serves the odd rows of a mat-vec).
#[target_feature(enable = "avx2,fma,f16c")]
fn q4_k_repacked_cols<const C: usize>(x: &[BlockQ4K], y: [&[BlockQ8K]; C]) -> [f32; C] {
    y.map(|y| q4_k_repacked(x, y))
}

/// This tier's mat-vec kernel for weights of type `ty` in the order of
/// ggml's repacked kernels (`KernelTable::weight_dot` where it repacks),
/// if it has one.
pub fn ggml_repack_rows_fn(ty: GgmlType) -> Option<GemmFn> {
    if !(crate::Isa::Avx512.available() && is_x86_feature_detected!("avx512vnni")) {
        return None;
    }
    match ty {
        GgmlType::Q4_K => Some(gemm_q4_k_repacked),
        _ => None,
    }
}

// Q6_K in the file's layout with the repacked product's arithmetic
// (`crate::q6k_r8`): the two-row kernel for a mat-vec, the one-row kernel
// per output for the rest.
gemm_entry!(
    gemm_q6_k_r8_order,
    BlockQ6K,
    BlockQ8K,
    256,
    q6_k_r8_cols,
    rows2 |x: &[&[BlockQ6K]; 2], y: &[BlockQ8K]| {
        // SAFETY: `packed_order_gemm_fn` hands the entry out only after
        // detecting AVX512-VNNI, GFNI and `Isa::Avx512.available()`.
        Some(unsafe { q6_k_r8_rows2(x[0], x[1], y) })
    }
);

// Q5_K and Q8_0 in the file's layout with the repacked product's arithmetic
// (`crate::q5k_r8`, `crate::q80_r8`), the same pair of entries.
gemm_entry!(
    gemm_q5_k_r8_order,
    BlockQ5K,
    BlockQ8K,
    256,
    q5_k_r8_cols,
    rows2 |x: &[&[BlockQ5K]; 2], y: &[BlockQ8K]| {
        // SAFETY: `packed_order_gemm_fn` hands the entry out only after
        // detecting AVX512-VNNI and `Isa::Avx512.available()`.
        Some(unsafe { q5_k_r8_rows2(x[0], x[1], y) })
    }
);
gemm_entry!(
    gemm_q8_0_r8_order,
    BlockQ8_0,
    BlockQ8_0,
    32,
    q8_0_r8_cols,
    rows2 Q8Acts, q8_0_prepare, |x: &[&[BlockQ8_0]; 2], y: &[Q8Acts]| {
        // SAFETY: `packed_order_gemm_fn` hands the entry out only after
        // detecting AVX512-VNNI and `Isa::Avx512.available()`.
        Some(unsafe { q8_0_r8_rows2(x[0], x[1], y) })
    }
);

/// A product on the file's rows of `ty` that gives the repacked product's
/// bits ([`crate::repack`]; `KernelTable::packed_order_rows`), where this
/// tier has one: Q5_K, Q6_K and Q8_0, whose file rows a mat-vec streams
/// from memory at least as fast as the repacked ones.
pub fn packed_order_gemm_fn(ty: GgmlType) -> Option<GemmFn> {
    let vnni = crate::Isa::Avx512.available() && is_x86_feature_detected!("avx512vnni");
    match ty {
        GgmlType::Q6_K if vnni && is_x86_feature_detected!("gfni") => Some(gemm_q6_k_r8_order),
        GgmlType::Q5_K if vnni => Some(gemm_q5_k_r8_order),
        GgmlType::Q8_0 if vnni => Some(gemm_q8_0_r8_order),
        _ => None,
    }
}

/// Four consecutive Q8_0 activation blocks as [`q8_0_isums4`] and
/// [`q8_0_chain4`] take them: the levels, `−128·Σa` in eight lanes per
/// block (the start of the sums; `vpdpbusd` by the unsigned 128), and the
/// four `d`. A mat-vec lays its row out once ([`q8_0_prepare`]), not once
/// per pair of weight rows.
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct Q8Acts {
    qs: [__m256i; 4],
    neg: [__m256i; 4],
    d: __m128,
}

/// Most groups of four blocks [`q8_0_prepare`] lays out (a row of 16384
/// weights): its buffer is on the stack, 36 KiB.
const Q8_PREPARED_GROUPS: usize = 128;

/// [`Q8Acts`] of the four blocks `y`.
///
/// # Safety
/// The caller must have AVX-512 VL/VNNI, AVX2 and F16C enabled.
#[inline(always)]
unsafe fn q8_0_acts(y: &[BlockQ8_0]) -> Q8Acts {
    // SAFETY: whole fields of four blocks; the caller enables the features.
    unsafe {
        let (flip, zero) = (_mm256_set1_epi8(-128), _mm256_setzero_si256());
        let mut a = Q8Acts {
            qs: [zero; 4],
            neg: [zero; 4],
            d: scales4([y[0].d_bits(), y[1].d_bits(), y[2].d_bits(), y[3].d_bits()]),
        };
        // Loops, not closures: a closure would not inherit the caller's
        // features, and its intrinsics would become calls.
        for (i, b) in y[..4].iter().enumerate() {
            a.qs[i] = load_i8(&b.qs);
            a.neg[i] = _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, flip, a.qs[i]));
        }
        a
    }
}

/// Lays out the Q8_0 row `y` (whole groups of four blocks, at most
/// [`Q8_PREPARED_GROUPS`]) for [`q8_0_r8_rows2`] and hands it to `f`;
/// `false`, calling nothing, when `y` is longer.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
fn q8_0_prepare(y: &[BlockQ8_0], f: &mut dyn FnMut(&[Q8Acts])) -> bool {
    let groups = q8_0_r8_groups(y.len());
    if groups > Q8_PREPARED_GROUPS {
        return false;
    }
    let mut buf = [std::mem::MaybeUninit::<Q8Acts>::uninit(); Q8_PREPARED_GROUPS];
    for (slot, yq) in buf.iter_mut().zip(y.chunks_exact(4)) {
        // SAFETY: four whole blocks; this function enables the features.
        slot.write(unsafe { q8_0_acts(yq) });
    }
    // SAFETY: the first `groups` slots were written just above, and
    // `MaybeUninit<T>` has `T`'s layout.
    let ready = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<Q8Acts>(), groups) };
    f(ready);
    true
}

/// Four consecutive blocks of one Q8_0 row against the activations `a`: the
/// four exact block sums `Σ w·a` (as `crate::q80_r8` computes them: `Σ (w +
/// 128)·a − 128·Σ a`).
///
/// # Safety
/// The caller must have AVX-512 VL/VNNI and AVX2 enabled.
#[inline(always)]
unsafe fn q8_0_isums4(x: &[BlockQ8_0], a: &Q8Acts) -> __m128i {
    // SAFETY: whole `qs` fields of four blocks (the slice's bounds); the
    // caller enables the features.
    unsafe {
        let flip = _mm256_set1_epi8(-128);
        let mut s = a.neg;
        for i in 0..4 {
            let u = _mm256_xor_si256(load_i8(&x[i].qs), flip);
            s[i] = _mm256_dpbusd_epi32(s[i], u, a.qs[i]);
        }
        let h = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
        _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
    }
}

/// The serial chain of `crate::q80_r8` over four blocks: `acc = fma(isum,
/// d_w·d_a, acc)`, block after block (`da`: the activations' four `d`).
///
/// # Safety
/// The caller must have AVX2, FMA and F16C enabled.
#[inline(always)]
unsafe fn q8_0_chain4(acc: f32, isums: __m128i, x: &[BlockQ8_0], da: __m128) -> f32 {
    // SAFETY: register-only; the caller enables the features.
    unsafe {
        let dw = scales4([x[0].d_bits(), x[1].d_bits(), x[2].d_bits(), x[3].d_bits()]);
        let (f, dd) = (_mm_cvtepi32_ps(isums), _mm_mul_ps(dw, da));
        let mut a = _mm_set_ss(acc);
        a = _mm_fmadd_ss(f, dd, a);
        a = _mm_fmadd_ss(_mm_movehdup_ps(f), _mm_movehdup_ps(dd), a);
        a = _mm_fmadd_ss(_mm_movehl_ps(f, f), _mm_movehl_ps(dd, dd), a);
        let (f3, d3) = (_mm_shuffle_ps::<3>(f, f), _mm_shuffle_ps::<3>(dd, dd));
        _mm_cvtss_f32(_mm_fmadd_ss(f3, d3, a))
    }
}

/// A row's groups of four blocks: the repacked product's rows are whole
/// 256-weight groups (`crate::q80_r8`), so no row of a matrix that has the
/// copy leaves a tail.
fn q8_0_r8_groups(blocks: usize) -> usize {
    assert!(
        blocks.is_multiple_of(8),
        "repacked Q8_0 order: {blocks} blocks is not whole groups"
    );
    blocks / 4
}

/// Two Q8_0 rows in the file's layout against one Q8_0 row (laid out by
/// [`q8_0_prepare`]), each output in the repacked product's arithmetic
/// (`crate::q80_r8`): a mat-vec on the file's rows with the bits of a
/// verify batch on the repacked copy.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn q8_0_r8_rows2(x0: &[BlockQ8_0], x1: &[BlockQ8_0], y: &[Q8Acts]) -> [f32; 2] {
    let mut acc = [0f32; 2];
    for (k, a) in y.iter().enumerate() {
        super::prefetch_rows2(x0, x1, 4 * k);
        let (xa, xb) = (&x0[4 * k..4 * k + 4], &x1[4 * k..4 * k + 4]);
        // SAFETY: four whole blocks each (sliced above); this function
        // enables every feature the helpers need.
        unsafe {
            acc[0] = q8_0_chain4(acc[0], q8_0_isums4(xa, a), xa, a.d);
            acc[1] = q8_0_chain4(acc[1], q8_0_isums4(xb, a), xb, a.d);
        }
    }
    acc
}

/// One Q8_0 row in the file's layout against `C` Q8_0 rows in the repacked
/// product's arithmetic ([`q8_0_r8_rows2`] per output; the rows a mat-vec's
/// pairs leave).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn q8_0_r8_cols<const C: usize>(x: &[BlockQ8_0], y: [&[BlockQ8_0]; C]) -> [f32; C] {
    std::array::from_fn(|c| {
        let y = &y[c][..x.len()];
        let q = q8_0_r8_groups(y.len());
        let mut acc = 0f32;
        for k in 0..q {
            let (xq, yq) = (&x[4 * k..4 * k + 4], &y[4 * k..4 * k + 4]);
            // SAFETY: four whole blocks each; this function enables every
            // feature the helpers need.
            unsafe {
                let a = q8_0_acts(yq);
                acc = q8_0_chain4(acc, q8_0_isums4(xq, &a), xq, a.d);
            }
        }
        acc
    })
}

// ---------------------------------------------------------------- Q4_K

/// One Q4_K row against `C` Q8_K rows: `kquants::q4_k`'s arithmetic per
/// output, the nibbles, scales, mins and `d`/`dmin` unpacked once per block.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn q4_k_cols<const C: usize>(x: &[BlockQ4K], y: [&[BlockQ8K]; C]) -> [f32; C] {
    let m4 = _mm256_set1_epi8(0xF);
    let lo16 = _mm256_set1_epi32(0xFFFF);
    let mut acc = [_mm256_setzero_ps(); C];
    let mut acc_m = [_mm_setzero_ps(); C];
    let mut pairs = [0i32; 8];
    for (b, xb) in x.iter().enumerate() {
        let head: &[u8; 4] = bytemuck::bytes_of(xb)[..4].try_into().unwrap();
        let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from_le_bytes(*head)));
        let v16 = _mm256_cvtepu8_epi16(k4_unpack(k4_scale_bytes(xb)));
        let mut d = [_mm256_setzero_ps(); C];
        for c in 0..C {
            let yb = &y[c][b];
            let dd = _mm_mul_ps(dm, _mm_set1_ps(yb.d));
            d[c] = _mm256_broadcastss_ps(dd);
            let dmin = _mm_broadcastss_ps(_mm_movehdup_ps(dd));
            acc_m[c] = k4_mins(acc_m[c], dmin, v16, &yb.bsums);
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
                sumi[c] = _mm256_dpwssds_epi32(sumi[c], m, pair);
            }
        }
        for c in 0..C {
            acc[c] = _mm256_fmadd_ps(d[c], _mm256_cvtepi32_ps(sumi[c]), acc[c]);
        }
    }
    std::array::from_fn(|c| hsum_ps(acc[c]) + hsum128(acc_m[c]))
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

/// The f16 scales of four blocks as f32.
///
/// # Safety
/// The caller must have F16C enabled.
#[inline(always)]
unsafe fn scales4(d: [u16; 4]) -> __m128 {
    // SAFETY: register-only intrinsics; F16C is enabled by the caller.
    unsafe {
        _mm_cvtph_ps(_mm_setr_epi16(
            d[0] as i16,
            d[1] as i16,
            d[2] as i16,
            d[3] as i16,
            0,
            0,
            0,
            0,
        ))
    }
}

/// One signed-level row against `C` Q8_0 rows: `legacy::dot_sym::<B, true,
/// PAIRS>` per output. Two outputs share each 512-bit register: the weight
/// block is broadcast to both halves, the halves take the two activation
/// rows' blocks, so each half is one output's 8-lane accumulator fed block
/// after block exactly as the one-row kernel feeds its own (`fuse4`), with
/// no lane shuffles; the tail is `legacy::sym_tail` per output. An odd last
/// output is paired with itself.
#[inline(always)]
fn sym_cols<B: SymBlock, const PAIRS: bool, const C: usize>(
    x: &[B],
    y: [&[BlockQ8_0]; C],
) -> [f32; C] {
    // SAFETY: block accesses are through slices; the intrinsics need AVX512
    // F/BW/VL/VNNI, AVX2, FMA and F16C, which every caller enables.
    unsafe {
        let np = C.div_ceil(2);
        let mut acc = [[_mm512_setzero_ps(); 2]; COLS.div_ceil(2)];
        let q = x.len() / 4;
        for k in 0..q {
            let xq = &x[4 * k..4 * k + 4];
            let xd = scales4([
                xq[0].d_bits(),
                xq[1].d_bits(),
                xq[2].d_bits(),
                xq[3].d_bits(),
            ]);
            let mut neg = [0 as __mmask64; 4];
            let mut abs = [_mm512_setzero_si512(); 4];
            for i in 0..4 {
                let l = xq[i].levels();
                let l = join(l, l);
                neg[i] = _mm512_movepi8_mask(l);
                abs[i] = _mm512_abs_epi8(l);
            }
            for (j, accj) in acc.iter_mut().enumerate().take(np) {
                // Output pair j: columns 2j and 2j+1 (or 2j again).
                let (ca, cb) = (2 * j, (2 * j + 1).min(C - 1));
                let (ya, yb) = (&y[ca][4 * k..4 * k + 4], &y[cb][4 * k..4 * k + 4]);
                let sa = scales4([
                    ya[0].d_bits(),
                    ya[1].d_bits(),
                    ya[2].d_bits(),
                    ya[3].d_bits(),
                ]);
                let sb = scales4([
                    yb[0].d_bits(),
                    yb[1].d_bits(),
                    yb[2].d_bits(),
                    yb[3].d_bits(),
                ]);
                // Lanes 0..4: the scale products of column a, 4..8: of b.
                let dab =
                    _mm512_castps256_ps512(_mm256_set_m128(_mm_mul_ps(xd, sb), _mm_mul_ps(xd, sa)));
                for i in 0..4 {
                    let idx = _mm512_add_epi32(
                        _mm512_set1_epi32(i as i32),
                        _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4),
                    );
                    let d = _mm512_permutexvar_ps(idx, dab);
                    let p = dot_ss_split(abs[i], neg[i], join(ya[i].levels(), yb[i].levels()));
                    let h = if PAIRS { i & 1 } else { 0 };
                    accj[h] = _mm512_fmadd_ps(d, p, accj[h]);
                }
            }
        }
        let xr = &x[4 * q..];
        let mut out = [0f32; C];
        for (c, o) in out.iter_mut().enumerate() {
            let (j, h) = (c / 2, c % 2);
            let a = [split(acc[j][0])[h], split(acc[j][1])[h]];
            *o = sym_tail::<B, true, PAIRS>(xr, &y[c][4 * q..x.len()], a);
        }
        out
    }
}

/// Two signed-level rows against one Q8_0 row: `legacy::dot_sym::<B, true,
/// PAIRS>` per output, the two rows' blocks in the two halves of a 512-bit
/// register and the activation block in both, so each half is one output's
/// 8-lane accumulator fed block after block as the one-row kernel feeds its
/// own: two independent FMA chains where a one-row dot has one (ggml's order
/// makes each chain serial).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn sym_rows2<B: SymBlock, const PAIRS: bool>(x0: &[B], x1: &[B], y: &[BlockQ8_0]) -> [f32; 2] {
    // SAFETY: block accesses are through slices; the intrinsics need the
    // features enabled on this function.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); 2];
        let q = y.len() / 4;
        let hi8 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4);
        for k in 0..q {
            super::prefetch_rows2(x0, x1, 4 * k);
            let (xa, xb, yq) = (
                &x0[4 * k..4 * k + 4],
                &x1[4 * k..4 * k + 4],
                &y[4 * k..4 * k + 4],
            );
            let sy = scales4([
                yq[0].d_bits(),
                yq[1].d_bits(),
                yq[2].d_bits(),
                yq[3].d_bits(),
            ]);
            let sa = scales4([
                xa[0].d_bits(),
                xa[1].d_bits(),
                xa[2].d_bits(),
                xa[3].d_bits(),
            ]);
            let sb = scales4([
                xb[0].d_bits(),
                xb[1].d_bits(),
                xb[2].d_bits(),
                xb[3].d_bits(),
            ]);
            // Lanes 0..4: row a's scale products, 4..8: row b's.
            let dab =
                _mm512_castps256_ps512(_mm256_set_m128(_mm_mul_ps(sb, sy), _mm_mul_ps(sa, sy)));
            for i in 0..4 {
                let d =
                    _mm512_permutexvar_ps(_mm512_add_epi32(_mm512_set1_epi32(i as i32), hi8), dab);
                let l = yq[i].levels();
                let p = dot_ss::<true>(join(xa[i].levels(), xb[i].levels()), join(l, l));
                let h = if PAIRS { i & 1 } else { 0 };
                acc[h] = _mm512_fmadd_ps(d, p, acc[h]);
            }
        }
        let yr = &y[4 * q..];
        let a = [split(acc[0])[0], split(acc[1])[0]];
        let b = [split(acc[0])[1], split(acc[1])[1]];
        [
            sym_tail::<B, true, PAIRS>(&x0[4 * q..y.len()], yr, a),
            sym_tail::<B, true, PAIRS>(&x1[4 * q..y.len()], yr, b),
        ]
    }
}

macro_rules! sym_kernel {
    ($name:ident, $wb:ty, $pairs:literal) => {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        fn $name<const C: usize>(x: &[$wb], y: [&[BlockQ8_0]; C]) -> [f32; C] {
            sym_cols::<$wb, $pairs, C>(x, y)
        }
    };
}

sym_kernel!(q8_0_cols, BlockQ8_0, false);
sym_kernel!(q4_0_cols, BlockQ4_0, false);
sym_kernel!(q5_0_cols, BlockQ5_0, false);
sym_kernel!(iq4_nl_cols, BlockIq4Nl, true);
