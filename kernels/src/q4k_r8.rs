//! Q4_K weights repacked eight rows at a time ([`crate::repack`]): lane r of
//! every vector is row r of a group of eight.
//!
//! One [`Group`] is one 256-weight block of eight consecutive rows (1184
//! bytes, against 8 × 144 in the file): for 64-element chunk k and byte quad
//! q, 32 bytes whose lane r is row r's `qs[32k + 4q .. 32k + 4q + 4]` (low
//! nibbles: sub-block 2k, high: 2k + 1); the 6-bit sub-block scales and mins
//! as bytes `[j][r]`; the eight `d` and `dmin`.
//!
//! **The sum** is the order of ggml's repacked Q4_K mat-vec, which clover's
//! decoding already reproduces for these matrices
//! (`x86::avx2::kquants::q4_k_repacked`): per block the exact integers
//! `isum = Σ_j sc_j · Σ q·a` and `imin = Σ_j m_j · Σ a_j`, then
//! `acc = fma(isum, d_w·d_a, acc)`, `acc_min = fma(imin, dmin_w·d_a,
//! acc_min)`, and `acc − acc_min` at the end. [`gemm_ref`] is that
//! definition in plain Rust; the SIMD kernels give its bits for any number
//! of activation rows.

use bytemuck::{Pod, Zeroable};
use half::f16;

use crate::scalar::kquant_search::get_scale_min_k4;
use crate::scalar::q4_k::BlockQ4K;
use crate::scalar::q8_k::BlockQ8K;

/// One block of eight rows (see the module docs).
// Each format declares its own Group (q3k_r8.rs, q6k_r8.rs::Group); only the derives,
// repr(C) and the d field are alike, the field layouts differ.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct Group {
    /// `[8k + q]`: lane r = row r's `qs[32k + 4q .. 32k + 4q + 4]`.
    pub qs: [[u8; 32]; 32],
    /// `[j][r]`: row r's sub-block j scale (0..64).
    pub scales: [[u8; 8]; 8],
    /// `[j][r]`: row r's sub-block j min (0..64).
    pub mins: [[u8; 8]; 8],
    /// Row r's `d` and `dmin` (f16 bits).
    pub d: [u16; 8],
    pub dmin: [u16; 8],
}

const _: () = assert!(size_of::<Group>() == 1184);

/// Row r's level (0..=15) of element `i` of group `g`: byte quad `4q + e`
/// of chunk k holds elements `64k + 4q + e` (low nibble) and `64k + 32 + 4q
/// + e` (high nibble).
#[inline]
pub fn level(g: &Group, r: usize, i: usize) -> u8 {
    let (k, l) = (i / 64, i % 64);
    let byte = g.qs[8 * k + l % 32 / 4][4 * r + l % 4];
    if l < 32 {
        byte & 0xF
    } else {
        byte >> 4
    }
}

/// Repacks `n_out` rows of `n_in` Q4_K weights (`src`) into `dst`
/// ([`crate::repack::packed_bytes`] long, 2-byte aligned).
///
/// # Panics
/// When the matrix is not packable or a length is wrong.
pub fn repack(n_in: usize, n_out: usize, src: &[u8], dst: &mut [u8]) {
    crate::r8::each_group(n_in, n_out, src, dst, |g: &mut Group, r, blk: &BlockQ4K| {
        fill(g, r, (blk.d, blk.dmin, &blk.scales, &blk.qs));
    });
}

/// Row r of `g` from a block's `d`, `dmin`, twelve scale bytes and nibbles
/// (Q4_K's, and Q5_K's low four bits).
pub(crate) fn fill(
    g: &mut Group,
    r: usize,
    (d, dmin, scales, qs): (f16, f16, &[u8; 12], &[u8; 128]),
) {
    // Byte quad 8k + q of a row is chunk k's qs[4q .. 4q + 4].
    crate::r8::interleave_quads(&mut g.qs, r, qs);
    for j in 0..8 {
        let (sc, m) = get_scale_min_k4(j, scales);
        g.scales[j][r] = sc;
        g.mins[j][r] = m;
    }
    g.d[r] = d.to_bits();
    g.dmin[r] = dmin.to_bits();
}

/// The reference (the module docs' sum), with the signature of
/// [`crate::sig::GemmFn`]: `out[i·stride + t] = W[i] · x[t]` for the `w_rows`
/// rows of the repacked `w` (a multiple of 8) and `act_rows` Q8_K rows.
// Same GemmFn parameter list as iq4_r8.rs::gemm_ref: an fn item cannot take its signature
// from the type alias; the sums differ per format.
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
    minned_gemm_ref::<Group>(dims, w, act, out, level, |g| g);
}

/// [`gemm_ref`] of a layout built on [`Group`] (`k4(g)`), with its own
/// levels (`level(g, r, i)`).
pub(crate) fn minned_gemm_ref<G: bytemuck::Pod>(
    (n, w_rows, act_rows, out_stride): (usize, usize, usize, usize),
    w: &[u8],
    act: &[u8],
    out: &mut [f32],
    level: fn(&G, usize, usize) -> u8,
    k4: fn(&G) -> &Group,
) {
    let row = |gs: &[G], y: &[BlockQ8K], r: usize| {
        crate::r8::minned_row(
            gs,
            y,
            |g, i| level(g, r, i),
            |g, j| (k4(g).scales[j][r], k4(g).mins[j][r]),
            |g| (k4(g).d[r], k4(g).dmin[r]),
        )
    };
    crate::r8::each_output(n, w, w_rows, act, act_rows, out, out_stride, row);
}
