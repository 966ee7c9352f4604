//! The driver the AVX-512 products on repacked weights share
//! ([`crate::repack`]): checks the shapes, then runs a type's group-row
//! kernel over every group row and tiles of up to [`GroupRows::COLS`]
//! activation rows.

use std::arch::x86_64::*;

use bytemuck::Pod;

use crate::blocks::as_blocks;
use crate::repack::{packable, packed_bytes, ROWS};
use crate::scalar::q8_k::BlockQ8K;
use crate::GgmlType;

/// How far ahead of the group in use [`prefetch_ahead`] asks for bytes on
/// AMD cores: 16 KiB, about two group rows of a 2048-wide matrix. Without
/// it a mat-vec on repacked Q6_K rows out of memory runs at a fraction of
/// the speed on a Zen 4 (`prompt_throughput 65536 5 decode`; 8, 32, 64 and
/// 128 KiB were no better, and prefetching into L1 no better than none;
/// docs/PERFORMANCE.md).
const AHEAD: usize = 16 << 10;

/// [`AHEAD`] on Intel cores: 2 KiB, two to three groups. On a Xeon
/// (`packed_stream`, one thread, distances alternating) 2 KiB was the best
/// distance for repacked Q3_K and Q6_K, bringing them to the file layout's
/// speed, and 16 KiB among the worst (docs/PERFORMANCE.md).
const AHEAD_INTEL: usize = 2 << 10;

/// The prefetch distance for this CPU (see [`AHEAD`], [`AHEAD_INTEL`]).
#[inline(always)]
fn ahead() -> usize {
    match crate::cpu::is_intel() {
        true => AHEAD_INTEL,
        false => AHEAD,
    }
}

/// Asks for the group [`ahead`] bytes past the start of `g` into L2: a
/// repacked matrix is one stream of groups, the next group row right after
/// this one, so this also reaches past the end of the kernel's group row.
/// A prefetch of an address outside the mapping is dropped, never faults.
#[inline(always)]
pub(crate) fn prefetch_ahead<G>(g: &G) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
    let p = (g as *const G).cast::<i8>().wrapping_add(ahead());
    for off in (0..size_of::<G>()).step_by(64) {
        // SAFETY: a prefetch is a hint; it never faults, even outside
        // any allocation.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(off)) };
    }
}

/// The one float step per block of the biased K-quant layouts
/// ([`crate::r8::biased_row`]): `acc[c] = fma(cvt(isum[c]), d_w · d_a,
/// acc[c])` for the eight rows' `d` bits and block `b` of each activation
/// row.
///
/// # Safety
/// The caller must have AVX2, FMA and F16C enabled; `y[c]` holds block `b`.
#[inline(always)]
pub(crate) unsafe fn fma_block<const C: usize>(
    acc: &mut [__m256; C],
    isum: &[__m256i; C],
    d: &[u16; 8],
    y: &[&[BlockQ8K]; C],
    b: usize,
) {
    // SAFETY: the caller's contract.
    unsafe {
        let dw = _mm256_cvtph_ps(_mm_loadu_si128(d.as_ptr().cast()));
        for c in 0..C {
            let dd = _mm256_mul_ps(dw, _mm256_set1_ps(y[c][b].d));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), dd, acc[c]);
        }
    }
}

/// The lanes of `acc`, as the group-row kernels return them.
///
/// # Safety
/// The caller must have AVX enabled.
#[inline(always)]
pub(crate) unsafe fn lanes<const C: usize>(acc: &[__m256; C]) -> [[f32; ROWS]; C] {
    std::array::from_fn(|c| {
        let mut o = [0f32; ROWS];
        // SAFETY: eight floats into `o`; the caller enables AVX.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), acc[c]) };
        o
    })
}

/// A repacked group type and its group-row kernel.
pub(crate) trait GroupRows: Pod {
    const TY: GgmlType;
    /// Activation rows one group-row kernel call serves at most (4 or 8):
    /// each unpacked weight vector is used that many times.
    const COLS: usize;
    /// The activation block, and how many of them one group spans.
    type Act: Pod;
    const ACTS: usize;

    /// What each of the activation row `y`'s blocks starts its integer sum
    /// at, into `out` (one per block), for a layout whose bias needs the
    /// activations' sums; `false` (nothing written) for the others.
    fn starts(_y: &[Self::Act], _out: &mut Vec<i32>) -> bool {
        false
    }

    /// One group row (`gs`, one group per block) against `C` activation
    /// rows, with their [`GroupRows::starts`] (empty where the type has
    /// none).
    ///
    /// # Safety
    /// The host must have the features the type's kernel enables.
    unsafe fn rows8<const C: usize>(
        gs: &[Self],
        y: [&[Self::Act]; C],
        st: [&[i32]; C],
    ) -> [[f32; ROWS]; C];

    /// Whether the type has [`GroupRows::rows16`]: two group rows per call,
    /// lane r of a 512-bit vector weight row r of the sixteen.
    const PAIRED: bool = false;

    /// Two consecutive group rows (`g0`, `g1`) against `C` activation rows:
    /// `[c][r]` is [`GroupRows::rows8`]'s output for `g0`'s row r (r < 8) or
    /// `g1`'s row r − 8, bit for bit.
    ///
    /// # Safety
    /// As [`GroupRows::rows8`]; only called where [`GroupRows::PAIRED`].
    unsafe fn rows16<const C: usize>(
        _g0: &[Self],
        _g1: &[Self],
        _y: [&[Self::Act]; C],
        _st: [&[i32]; C],
    ) -> [[f32; 2 * ROWS]; C] {
        unreachable!("{}: no paired group-row kernel", Self::TY)
    }
}

/// Evaluates `$call` with the const `$k` set to the tile width `$c` (1 ..=
/// 8).
// One arm per column count, alike but for the constant: each arm makes `$k` a const so the kernel
// is monomorphised for that width; a const generic cannot take the runtime count.
macro_rules! by_cols {
    ($c:expr, |$k:ident| $call:expr) => {
        match $c {
            8 => {
                const $k: usize = 8;
                $call
            }
            7 => {
                const $k: usize = 7;
                $call
            }
            6 => {
                const $k: usize = 6;
                $call
            }
            5 => {
                const $k: usize = 5;
                $call
            }
            4 => {
                const $k: usize = 4;
                $call
            }
            3 => {
                const $k: usize = 3;
                $call
            }
            2 => {
                const $k: usize = 2;
                $call
            }
            _ => {
                const $k: usize = 1;
                $call
            }
        }
    };
}

/// A [`crate::sig::GemmFn`] over groups of `G`: `out[i·stride + t] = W[i] ·
/// x[t]`.
///
/// # Safety
/// The host must have the features `G::rows8` needs.
pub(crate) unsafe fn gemm<G: GroupRows>(
    n: usize,
    w: &[u8],
    w_rows: usize,
    act: &[u8],
    act_rows: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let ty = G::TY;
    assert!(
        packable(ty, n, w_rows),
        "repacked {ty}: {w_rows} x {n} is not whole groups"
    );
    let nb = n / 256;
    let ab = nb * G::ACTS * size_of::<G::Act>();
    assert!(
        act.len() >= ab * act_rows,
        "repacked {ty}: short activations"
    );
    if act_rows == 0 {
        return;
    }
    assert!(
        out.len() >= (w_rows - 1) * out_stride + act_rows,
        "repacked {ty}: short output"
    );
    let groups: &[G] = as_blocks(&w[..packed_bytes(ty, n, w_rows)]);
    let y = |t: usize| -> &[G::Act] { as_blocks(&act[t * ab..(t + 1) * ab]) };
    // Each activation row's block starts, once per call for every group row.
    let mut starts = Vec::new();
    let has_starts = (0..act_rows).all(|t| G::starts(y(t), &mut starts));
    let per = if has_starts { nb * G::ACTS } else { 0 };
    let st = |t: usize| -> &[i32] { &starts[t * per..(t + 1) * per] };
    let n_groups = w_rows / ROWS;
    let mut gr = 0;
    while gr < n_groups {
        // Two group rows per call where the type pairs them.
        let paired = G::PAIRED && gr + 1 < n_groups;
        let gs = &groups[gr * nb..(gr + 1) * nb];
        let mut t = 0;
        while t < act_rows {
            let c = (act_rows - t).min(G::COLS);
            let o = &mut *out;
            // SAFETY: the caller guarantees the features the kernels need.
            unsafe {
                if paired {
                    let g1 = &groups[(gr + 1) * nb..(gr + 2) * nb];
                    by_cols!(c, |K| put_sums(
                        o,
                        out_stride,
                        gr,
                        t,
                        &G::rows16::<K>(gs, g1, cols(y, t, c), cols(st, t, c))
                    ));
                } else {
                    by_cols!(c, |K| put_sums(
                        o,
                        out_stride,
                        gr,
                        t,
                        &G::rows8::<K>(gs, cols(y, t, c), cols(st, t, c))
                    ));
                }
            }
            t += c;
        }
        gr += if paired { 2 } else { 1 };
    }
}

/// Writes a tile's sums: `sums[k][r]` is weight row `8·gr + r` against
/// activation row `t + k`.
fn put_sums<const R: usize>(
    out: &mut [f32],
    stride: usize,
    gr: usize,
    t: usize,
    sums: &[[f32; R]],
) {
    for (k, s) in sums.iter().enumerate() {
        for (r, v) in s.iter().enumerate() {
            out[(gr * ROWS + r) * stride + t + k] = *v;
        }
    }
}

/// Columns `t ..` of a tile of `c` (the last one repeated past `c`).
fn cols<'a, T: ?Sized, const C: usize>(
    f: impl Fn(usize) -> &'a T,
    t: usize,
    c: usize,
) -> [&'a T; C] {
    std::array::from_fn(|i| f(t + i.min(c - 1)))
}

/// The GemmFn `product` over groups of `$group` (the caller's
/// `gemm_fn` hands it out only when the host has every feature `$rows8`
/// enables) and the [`GroupRows`] impl that runs `$rows8`.
macro_rules! repacked_product {
    ($group:ty, $ty:expr, $rows8:ident) => {
        repacked_product!($group, $ty, $rows8, 4);
    };
    ($group:ty, $ty:expr, $rows8:ident, $cols:expr, $rows16:ident) => {
        repacked_product!($group, $ty, $rows8, $cols; {
            const PAIRED: bool = true;

            #[inline(always)]
            unsafe fn rows16<const C: usize>(
                g0: &[$group],
                g1: &[$group],
                y: [&[crate::scalar::q8_k::BlockQ8K]; C],
                _st: [&[i32]; C],
            ) -> [[f32; 2 * crate::repack::ROWS]; C] {
                // SAFETY: the caller guarantees the features the kernel enables.
                unsafe { $rows16::<C>(g0, g1, y) }
            }
        });
    };
    ($group:ty, $ty:expr, $rows8:ident, $cols:expr) => {
        repacked_product!($group, $ty, $rows8, $cols; {});
    };
    ($group:ty, $ty:expr, $rows8:ident, $cols:expr; { $($paired:tt)* }) => {
        fn product(
            n: usize,
            w: &[u8],
            w_rows: usize,
            act: &[u8],
            act_rows: usize,
            out: &mut [f32],
            out_stride: usize,
        ) {
            // SAFETY: `gemm_fn` hands this out only when the host has every
            // feature the kernel enables.
            unsafe { super::repack::gemm::<$group>(n, w, w_rows, act, act_rows, out, out_stride) }
        }

        impl super::repack::GroupRows for $group {
            const TY: crate::GgmlType = $ty;
            const COLS: usize = $cols;
            type Act = crate::scalar::q8_k::BlockQ8K;
            const ACTS: usize = 1;

            #[inline(always)]
            unsafe fn rows8<const C: usize>(
                gs: &[$group],
                y: [&[crate::scalar::q8_k::BlockQ8K]; C],
                _st: [&[i32]; C],
            ) -> [[f32; crate::repack::ROWS]; C] {
                // SAFETY: the caller guarantees the features the kernel enables.
                unsafe { $rows8::<C>(gs, y) }
            }

            $($paired)*
        }
    };
}
pub(crate) use repacked_product;
