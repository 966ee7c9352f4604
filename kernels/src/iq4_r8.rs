//! IQ4_XS weights repacked eight rows at a time, for the mat-vec.
//!
//! In the file's layout a `vpdpbusd` lane holds four weights of one
//! sub-block of one row, so every block of every row needs its 32 lanes
//! folded into eight sub-block sums before the scales apply. Repacked, lane
//! r holds row r: the four bytes a lane needs come from one row, the
//! activation side is one broadcast dword shared by eight rows, and the sum
//! of a sub-block stays in its lane (no fold). The cost is a second copy of
//! the weights in this layout, built once at load (llama.cpp's CPU_REPACK
//! buffers do the same for the types it repacks).
//!
//! One [`Group`] is one 256-weight block of eight consecutive rows (1104
//! bytes, against 8 × 136 in the file): for sub-block j and byte quad q, 32
//! bytes whose lane r is row r's `qs[16j + 4q .. 16j + 4q + 4]`; the signed
//! sub-block scales `ls − 32` as bytes `[j][r]`; the eight `d`. A matrix of
//! `n_out` rows is `n_out / 8` group rows of `n_in / 256` groups each.
//!
//! **The sum**, per weight row and activation row: for each block in order,
//! the exact integer `Σ_j ls_j · Σ_k grid[q_k]·a_k`, converted to f32 once,
//! then `acc = fma(d_w · d_a, sum, acc)`. [`gemm_ref`] is that definition
//! in plain Rust; the SIMD kernels give its bits exactly, for any number of
//! activation rows, so a verify batch reproduces single-token decoding.

use bytemuck::{Pod, Zeroable};
use half::f16;

use crate::scalar::iq4_grid::KVALUES_IQ4NL;
use crate::scalar::iq4_xs::BlockIq4Xs;
use crate::scalar::q8_k::BlockQ8K;

/// One block of eight rows (see the module docs).
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct Group {
    /// `[4j + q]`: lane r = row r's `qs[16j + 4q .. 16j + 4q + 4]`.
    pub qs: [[u8; 32]; 32],
    /// `[j][r]`: row r's sub-block j scale, `ls − 32`.
    pub scales: [[i8; 8]; 8],
    /// Row r's `d` (f16 bits).
    pub d: [u16; 8],
}

const _: () = assert!(size_of::<Group>() == 1104);

/// Repacks `n_out` rows of `n_in` IQ4_XS weights (`src`, the file's bytes)
/// into `dst` ([`crate::repack::packed_bytes`] long, 2-byte aligned).
///
/// # Panics
/// When the matrix is not packable or a length is wrong.
pub fn repack(n_in: usize, n_out: usize, src: &[u8], dst: &mut [u8]) {
    crate::r8::each_group(
        n_in,
        n_out,
        src,
        dst,
        |g: &mut Group, r, blk: &BlockIq4Xs| {
            // Byte quad 4j + q of a row is sub-block j's qs[4q .. 4q + 4].
            crate::r8::interleave_quads(&mut g.qs, r, &blk.qs);
            for j in 0..8 {
                g.scales[j][r] = blk.scale(j) as i8;
            }
            // From here through gemm_ref's signature this matches q3k_r8.rs and q6k_r8.rs:
            // the end of an r8::each_group closure and the GemmFn parameter list; the
            // reference sums below differ per format.
            g.d[r] = blk.d.to_bits();
        },
    );
}

/// The reference: `out[i·stride + t] = W[i] · x[t]` for the `w_rows` rows of
/// the repacked `w` (a multiple of 8) and `act_rows` Q8_K rows, in the sum
/// the module docs define. The signature of [`crate::sig::GemmFn`].
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
        let mut acc = 0f32;
        for (g, yb) in gs.iter().zip(y) {
            let mut sum = 0i32;
            for j in 0..8 {
                let mut s = 0i32;
                for q in 0..4 {
                    for k in 0..4 {
                        let byte = g.qs[4 * j + q][4 * r + k];
                        let i = 32 * j + 4 * q + k;
                        s += KVALUES_IQ4NL[(byte & 0xF) as usize] as i32 * yb.qs[i] as i32;
                        s += KVALUES_IQ4NL[(byte >> 4) as usize] as i32 * yb.qs[i + 16] as i32;
                    }
                }
                sum += g.scales[j][r] as i32 * s;
            }
            let d = f16::from_bits(g.d[r]).to_f32() * yb.d;
            acc = d.mul_add(sum as f32, acc);
        }
        acc
    };
    crate::r8::each_output(n, w, w_rows, act, act_rows, out, out_stride, row);
}
