//! Q5_K weights repacked eight rows at a time ([`crate::repack`]): lane r of
//! every vector is row r of a group of eight.
//!
//! The layout of [`crate::q4k_r8`] with the fifth bits beside it: one
//! [`Group`] is one 256-weight block of eight consecutive rows (1440 bytes,
//! against 8 × 176 in the file):
//! * `k4`: a [`crate::q4k_r8::Group`] of the low four bits (its `qs[8k +
//!   q]`, lane r: row r's `qs[32k + 4q .. 32k + 4q + 4]`, elements `64k + 4q
//!   + e` in the low nibbles and `64k + 32 + 4q + e` in the high ones), the
//!   6-bit sub-block scales and mins, the eight `d` and `dmin`;
//! * `qh[q]`, lane r: row r's `qh[4q .. 4q + 4]`, whose bits 2k and 2k + 1
//!   are the fifth bits of those two elements (the file's `qh` as it is).
//!
//! **The sum** is [`crate::q4k_r8`]'s with levels 0..=31 (its plain-Rust
//! definition is shared: `r8::minned_row`): per block the exact integers
//! `isum = Σ_j sc_j · Σ u·a` and `imin = Σ_j m_j · Σ a_j`, then `acc =
//! fma(isum, d_w·d_a, acc)`, `acc_min = fma(imin, dmin_w·d_a, acc_min)`, and
//! `acc − acc_min` at the end. [`gemm_ref`] is that definition; the SIMD
//! kernels give its bits for any number of activation rows, so a verify
//! batch reproduces single-token decoding.

use bytemuck::{Pod, Zeroable};

use crate::q4k_r8::Group as K4;
use crate::scalar::q5_k::BlockQ5K;

/// One block of eight rows (see the module docs).
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct Group {
    /// The nibbles, scales, mins, `d` and `dmin`, as [`crate::q4k_r8`] lays
    /// them out.
    pub k4: K4,
    /// `[q]`: lane r = row r's `qh[4q .. 4q + 4]`.
    pub qh: [[u8; 32]; 8],
}

const _: () = assert!(size_of::<Group>() == 1440);

/// Row r's level (0..=31) of element `i` of group `g`.
#[inline]
pub fn level(g: &Group, r: usize, i: usize) -> u8 {
    let l = i % 32;
    let high = g.qh[l / 4][4 * r + l % 4] >> (i / 32) & 1;
    crate::q4k_r8::level(&g.k4, r, i) | high << 4
}

/// Repacks `n_out` rows of `n_in` Q5_K weights (`src`) into `dst`
/// ([`crate::repack::packed_bytes`] long, 2-byte aligned).
///
/// # Panics
/// When the matrix is not packable or a length is wrong.
pub fn repack(n_in: usize, n_out: usize, src: &[u8], dst: &mut [u8]) {
    crate::r8::each_group(n_in, n_out, src, dst, |g: &mut Group, r, blk: &BlockQ5K| {
        crate::q4k_r8::fill(&mut g.k4, r, (blk.d, blk.dmin, &blk.scales, &blk.qs));
        crate::r8::interleave_quads(&mut g.qh, r, &blk.qh);
    });
}

/// The reference (the module docs' sum), with the signature of
/// [`crate::sig::GemmFn`]: `out[i·stride + t] = W[i] · x[t]` for the `w_rows`
/// rows of the repacked `w` (a multiple of 8) and `act_rows` Q8_K rows.
// Same GemmFn parameter list as gemm_ref in q3k_r8, q4k_r8, q6k_r8, q80_r8 and iq4_r8: an fn
// item cannot take its signature from the type alias; the sum is q4k_r8::minned_gemm_ref's.
pub fn gemm_ref(
    n: usize,
    w: &[u8],
    w_rows: usize,
    act: &[u8],
    act_rows: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let dims = (n, w_rows, act_rows, out_stride);
    crate::q4k_r8::minned_gemm_ref::<Group>(dims, w, act, out, level, |g| &g.k4);
}
