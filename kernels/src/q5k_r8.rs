//! Q5_K weights repacked eight rows at a time ([`crate::repack`]): lane r of
//! every vector is row r of a group of eight.
//!
//! The layout of [`crate::q4k_r8`] with the fifth bits beside it: one
//! [`Group`] is one 256-weight block of eight consecutive rows (1440 bytes,
//! against 8 × 176 in the file):
//! * `qs[8k + q]`, lane r: row r's `qs[32k + 4q .. 32k + 4q + 4]`, the low
//!   four bits of elements `64k + 4q + e` (low nibbles) and `64k + 32 + 4q +
//!   e` (high nibbles);
//! * `qh[q]`, lane r: row r's `qh[4q .. 4q + 4]`, whose bits 2k and 2k + 1
//!   are the fifth bits of those two elements (the file's `qh` as it is);
//! * the 6-bit sub-block scales and mins as bytes `[j][r]`, the eight `d` and
//!   `dmin`.
//!
//! **The sum** is [`crate::q4k_r8`]'s with levels 0..=31 (its plain-Rust
//! definition is shared: `r8::minned_row`): per block the exact integers
//! `isum = Σ_j sc_j · Σ u·a` and `imin = Σ_j m_j · Σ a_j`, then `acc =
//! fma(isum, d_w·d_a, acc)`, `acc_min = fma(imin, dmin_w·d_a, acc_min)`, and
//! `acc − acc_min` at the end. [`gemm_ref`] is that definition; the SIMD
//! kernels give its bits for any number of activation rows, so a verify
//! batch reproduces single-token decoding.

use bytemuck::{Pod, Zeroable};

use crate::scalar::kquant_search::get_scale_min_k4;
use crate::scalar::q5_k::BlockQ5K;
use crate::scalar::q8_k::BlockQ8K;

/// One block of eight rows (see the module docs).
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct Group {
    /// `[8k + q]`: lane r = row r's `qs[32k + 4q .. 32k + 4q + 4]`.
    pub qs: [[u8; 32]; 32],
    /// `[q]`: lane r = row r's `qh[4q .. 4q + 4]`.
    pub qh: [[u8; 32]; 8],
    /// `[j][r]`: row r's sub-block j scale (0..64).
    pub scales: [[u8; 8]; 8],
    /// `[j][r]`: row r's sub-block j min (0..64).
    pub mins: [[u8; 8]; 8],
    /// Row r's `d` and `dmin` (f16 bits).
    pub d: [u16; 8],
    pub dmin: [u16; 8],
}

const _: () = assert!(size_of::<Group>() == 1440);

/// Row r's level (0..=31) of element `i` of group `g`.
#[inline]
pub fn level(g: &Group, r: usize, i: usize) -> u8 {
    let l = i % 32;
    let high = g.qh[l / 4][4 * r + l % 4] >> (i / 32) & 1;
    let byte = g.qs[8 * (i / 64) + l / 4][4 * r + l % 4];
    let low = if i % 64 < 32 { byte & 0xF } else { byte >> 4 };
    low | high << 4
}

/// Repacks `n_out` rows of `n_in` Q5_K weights (`src`) into `dst`
/// ([`crate::repack::packed_bytes`] long, 2-byte aligned).
///
/// # Panics
/// When the matrix is not packable or a length is wrong.
pub fn repack(n_in: usize, n_out: usize, src: &[u8], dst: &mut [u8]) {
    crate::r8::each_group(n_in, n_out, src, dst, |g: &mut Group, r, blk: &BlockQ5K| {
        crate::r8::interleave_quads(&mut g.qs, r, &blk.qs);
        crate::r8::interleave_quads(&mut g.qh, r, &blk.qh);
        for j in 0..8 {
            let (sc, m) = get_scale_min_k4(j, &blk.scales);
            g.scales[j][r] = sc;
            g.mins[j][r] = m;
        }
        g.d[r] = blk.d.to_bits();
        g.dmin[r] = blk.dmin.to_bits();
    });
}

/// The reference (the module docs' sum), with the signature of
/// [`crate::sig::GemmFn`]: `out[i·stride + t] = W[i] · x[t]` for the `w_rows`
/// rows of the repacked `w` (a multiple of 8) and `act_rows` Q8_K rows.
pub fn gemm_ref(
    n: usize,
    w: &[u8],
    w_rows: usize,
    act: &[u8],
    act_rows: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let row = |gs: &[Group], y: &[BlockQ8K], r: usize| {
        crate::r8::minned_row(
            gs,
            y,
            |g, i| level(g, r, i),
            |g, j| (g.scales[j][r], g.mins[j][r]),
            |g| (g.d[r], g.dmin[r]),
        )
    };
    crate::r8::each_output(n, w, w_rows, act, act_rows, out, out_stride, row);
}
