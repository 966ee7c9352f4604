//! Q3_K weights repacked eight rows at a time ([`crate::repack`]): lane r of
//! every vector is row r of a group of eight.
//!
//! In the file's layout one element's two low bits and its high bit lie in
//! different bytes, four and eight elements to a byte, so a row's levels
//! come out of shuffles and masks before one `vpdpbusd` can take them, and a
//! block's sixteen sub-block sums are folded out of the lanes. Repacked, the
//! bits a lane needs for four consecutive elements are in one byte quad of
//! one row, so one load serves eight rows, the activation side is a
//! broadcast dword, and each sub-block's sum stays in its lane.
//!
//! One [`Group`] is one 256-weight block of eight consecutive rows (912
//! bytes, against 8 × 110 in the file). Element quad q (elements 4q..4q+4)
//! of row r is:
//! * its two low bits: bits 2m, 2m + 1 (m = q % 4) of bytes `lo[q / 4][4r ..
//!   4r + 4]`, one byte per element;
//! * its high bits: bit q / 8 of bytes `hi[q % 8][4r .. 4r + 4]`.
//!
//! Then the sixteen sub-block scales `s − 32` as bytes `[j][r]`, and the
//! eight `d`.
//!
//! **The sum**, per weight row and activation row: for each block in order,
//! the exact integer `isum = Σ_j s_j · (Σ_{e ∈ j} u_e·a_e − 4·Σ_{e ∈ j}
//! a_e)` with the unsigned level `u = low + 4·high` (0..=7, the signed
//! level + 4), converted to f32 once, then `acc = fma(isum, d_w · d_a,
//! acc)`. [`gemm_ref`] is that definition in plain Rust; the SIMD kernels
//! give its bits for any number of activation rows, so a verify batch
//! reproduces single-token decoding.

use bytemuck::{Pod, Zeroable};

use crate::scalar::q3_k::{unpack_scales, BlockQ3K};
use crate::scalar::q8_k::BlockQ8K;

/// One block of eight rows (see the module docs).
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct Group {
    /// `[p]`: lane r byte e, bits 2m..2m+2 = the low bits of row r's
    /// element `4·(4p + m) + e`.
    pub lo: [[u8; 32]; 16],
    /// `[v]`: lane r byte e, bit b = the high bit of row r's element
    /// `4·(8b + v) + e`.
    pub hi: [[u8; 32]; 8],
    /// `[j][r]`: row r's sub-block j scale, `s − 32`.
    pub scales: [[i8; 8]; 16],
    /// Row r's `d` (f16 bits).
    pub d: [u16; 8],
}

const _: () = assert!(size_of::<Group>() == 912);

/// Row r's unsigned level `u` (0..=7) of element `i` of group `g`.
#[inline]
pub fn level(g: &Group, r: usize, i: usize) -> u8 {
    let (q, e) = (i / 4, i % 4);
    let low = (g.lo[q / 4][4 * r + e] >> (2 * (q % 4))) & 3;
    let high = (g.hi[q % 8][4 * r + e] >> (q / 8)) & 1;
    low | high << 2
}

/// Repacks `n_out` rows of `n_in` Q3_K weights (`src`) into `dst`
/// ([`crate::repack::packed_bytes`] long, 2-byte aligned).
///
/// # Panics
/// When the matrix is not packable or a length is wrong.
pub fn repack(n_in: usize, n_out: usize, src: &[u8], dst: &mut [u8]) {
    let word = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    crate::r8::each_group(n_in, n_out, src, dst, |g: &mut Group, r, blk: &BlockQ3K| {
        // The file keeps element l's high bit as bit l / 32 of hmask[l % 32]:
        // for l = 4(8b + v) + e that is bit b of hmask[4v + e], the layout
        // of `hi` itself.
        for (v, hi) in g.hi.iter_mut().enumerate() {
            hi[4 * r..4 * r + 4].copy_from_slice(&blk.hmask[4 * v..4 * v + 4]);
        }
        // Element l's low bits are bits 2k of qs[32h + l % 32], h = l / 128,
        // k = l % 128 / 32; for l = 16p + 4m + e, h = p / 8, k = p % 8 / 2
        // and l % 32 = 16(p % 2) + 4m + e: four dwords of qs, one field each.
        for (p, lo) in g.lo.iter_mut().enumerate() {
            let (base, k) = (32 * (p / 8) + 16 * (p % 2), 2 * (p % 8 / 2));
            let mut out = 0u32;
            for m in 0..4 {
                out |= (word(&blk.qs, base + 4 * m) >> k & 0x0303_0303) << (2 * m);
            }
            lo[4 * r..4 * r + 4].copy_from_slice(&out.to_le_bytes());
        }
        for (j, s) in unpack_scales(&blk.scales).into_iter().enumerate() {
            g.scales[j][r] = s;
        }
        g.d[r] = blk.d.to_bits();
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
        let level = |g: &Group, i| level(g, r, i);
        crate::r8::biased_row(gs, y, 4, level, |g, j| g.scales[j][r], |g| g.d[r])
    };
    crate::r8::each_output(n, w, w_rows, act, act_rows, out, out_stride, row);
}
