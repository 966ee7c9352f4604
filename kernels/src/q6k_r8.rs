//! Q6_K weights repacked eight rows at a time ([`crate::repack`]): lane r of
//! every vector is row r of a group of eight.
//!
//! One [`Group`] is one 256-weight block of eight consecutive rows (1680
//! bytes, as 8 × 210 in the file). Element quad q (elements 4q..4q+4) of row
//! r is:
//! * its low four bits: the low nibbles (q < 32) or the high nibbles (q ≥
//!   32) of bytes `lo[q % 32][4r .. 4r + 4]`, one byte per element;
//! * its high two bits: bits 2m, 2m + 1 (m = q / 16) of bytes `hi[q % 16][4r
//!   .. 4r + 4]`.
//!
//! Then the sixteen signed sub-block scales as bytes `[j][r]`, and the eight
//! `d`. One load of `lo` serves quads q and q + 32 (sub-blocks j and j + 8),
//! one load of `hi` four quads.
//!
//! **The sum**, per weight row and activation row: for each block in order,
//! the exact integer `isum = Σ_j s_j · (Σ_{e ∈ j} u_e·a_e − 32·Σ_{e ∈ j}
//! a_e)` with the unsigned level `u` (0..=63, the signed level + 32),
//! converted to f32 once, then `acc = fma(isum, d_w · d_a, acc)`.
//! [`gemm_ref`] is that definition in plain Rust; the SIMD kernels give its
//! bits for any number of activation rows, so a verify batch reproduces
//! single-token decoding.

use bytemuck::{Pod, Zeroable};

use crate::scalar::q6_k::BlockQ6K;
use crate::scalar::q8_k::BlockQ8K;

/// One block of eight rows (see the module docs).
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct Group {
    /// `[p]`: lane r byte e = the low bits of row r's elements `4p + e`
    /// (low nibble) and `4(p + 32) + e` (high nibble).
    pub lo: [[u8; 32]; 32],
    /// `[v]`: lane r byte e, bits 2m..2m+2 = the high bits of row r's
    /// element `4(v + 16m) + e`.
    pub hi: [[u8; 32]; 16],
    /// `[j][r]`: row r's sub-block j scale.
    pub scales: [[i8; 8]; 16],
    /// Row r's `d` (f16 bits).
    pub d: [u16; 8],
}

const _: () = assert!(size_of::<Group>() == 1680);

/// Row r's unsigned level `u` (0..=63) of element `i` of group `g`.
#[inline]
pub fn level(g: &Group, r: usize, i: usize) -> u8 {
    let (q, e) = (i / 4, i % 4);
    let low = (g.lo[q % 32][4 * r + e] >> (4 * (q / 32))) & 0xF;
    let high = (g.hi[q % 16][4 * r + e] >> (2 * (q / 16))) & 3;
    low | high << 4
}

/// Repacks `n_out` rows of `n_in` Q6_K weights (`src`) into `dst`
/// ([`crate::repack::packed_bytes`] long, 2-byte aligned).
///
/// # Panics
/// When the matrix is not packable or a length is wrong.
pub fn repack(n_in: usize, n_out: usize, src: &[u8], dst: &mut [u8]) {
    const NIB: u32 = 0x0F0F_0F0F;
    let word = |b: &[u8], k: usize| u32::from_le_bytes(b[4 * k..4 * k + 4].try_into().unwrap());
    crate::r8::each_group(n_in, n_out, src, dst, |g: &mut Group, r, blk: &BlockQ6K| {
        // The file keeps element l's low bits in ql[64h + l % 64] (h = l /
        // 128), the low nibble for l % 128 < 64: for quads p < 16 and p + 32
        // those are the low nibbles of dwords p and 16 + p, for 16 ≤ p < 32
        // the high nibbles of dwords p − 16 and p.
        for (p, lo) in g.lo.iter_mut().enumerate() {
            let out = match p < 16 {
                true => word(&blk.ql, p) & NIB | (word(&blk.ql, 16 + p) & NIB) << 4,
                false => word(&blk.ql, p - 16) >> 4 & NIB | word(&blk.ql, p) & !NIB,
            };
            lo[4 * r..4 * r + 4].copy_from_slice(&out.to_le_bytes());
        }
        // Its high bits are bits 2k of qh[32h + l % 32], k = l % 128 / 32:
        // for l = 4(v + 16m) + e, h = m / 2, l % 32 = 4(v % 8) + e and k =
        // 2(m % 2) + v / 8.
        for (v, hi) in g.hi.iter_mut().enumerate() {
            let mut out = 0u32;
            for m in 0..4 {
                let k = 2 * (m % 2) + v / 8;
                out |= (word(&blk.qh, 8 * (m / 2) + v % 8) >> (2 * k) & 0x0303_0303) << (2 * m);
            }
            hi[4 * r..4 * r + 4].copy_from_slice(&out.to_le_bytes());
        }
        // From here to the end of gemm_ref this matches q3k_r8.rs: the shared work is
        // already in r8::each_group / biased_row / each_output; what stays is this
        // module's Group, level and bias (32 here, 4 there).
        for (j, &s) in blk.scales.iter().enumerate() {
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
        crate::r8::biased_row(gs, y, 32, level, |g, j| g.scales[j][r], |g| g.d[r])
    };
    crate::r8::each_output(n, w, w_rows, act, act_rows, out, out_stride, row);
}
