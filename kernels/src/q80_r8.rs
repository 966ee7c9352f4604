//! Q8_0 weights repacked eight rows at a time ([`crate::repack`]): lane r of
//! every vector is row r of a group of eight.
//!
//! In the file a row's 32-weight blocks each carry their own `d`, so a
//! product over several activation rows either reloads every weight row
//! once per activation row or sums each output in a different order than a
//! mat-vec does. Repacked, one 32-byte load holds four consecutive weights
//! of each of eight rows, the activation side is one broadcast dword, and a
//! block's sum stays in its lane, so one kernel serves one activation row
//! and many with the same bits.
//!
//! One [`Group`] is eight 32-weight blocks (256 weights) of eight
//! consecutive rows (2176 bytes, as 8 × 8 × 34 in the file):
//! * `qs[q][4r .. 4r + 4]`: row r's weights `4q .. 4q + 4` of the 256, each
//!   stored as the unsigned byte `w + 128` (so `vpdpbusd` takes them as is);
//! * `d[k][r]`: row r's `d` of its 32-weight block k (f16 bits).
//!
//! **The sum**, per weight row and Q8_0 activation row: for each 32-weight
//! block in order, the exact integer `isum = Σ w_e·a_e` (computed as `Σ
//! (w_e + 128)·a_e − 128·Σ a_e`), converted to f32 once, then `acc =
//! fma(isum, d_w · d_a, acc)`. [`gemm_ref`] is that definition in plain
//! Rust; the SIMD kernels give its bits for any number of activation rows,
//! so a verify batch reproduces single-token decoding.

use bytemuck::{Pod, Zeroable};

use crate::scalar::q8_0::BlockQ8_0;

/// Q8_0 blocks per group row and group (a group spans 256 weights).
pub const BLOCKS: usize = 8;

/// One group: eight 32-weight blocks of eight rows (see the module docs).
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct Group {
    /// `[q]`: lane r byte e = row r's weight `4q + e`, plus 128.
    pub qs: [[u8; 32]; 64],
    /// `[k][r]`: row r's `d` of block k (f16 bits).
    pub d: [[u16; 8]; BLOCKS],
}

// Same repack entry as iq4_r8.rs::repack: each format is a thin call into r8::each_group with
// its own Group and per-row closure (eight Q8_0 blocks per row here).
const _: () = assert!(size_of::<Group>() == 2176);

/// Repacks `n_out` rows of `n_in` Q8_0 weights (`src`) into `dst`
/// ([`crate::repack::packed_bytes`] long, 2-byte aligned).
///
/// # Panics
/// When the matrix is not packable or a length is wrong.
pub fn repack(n_in: usize, n_out: usize, src: &[u8], dst: &mut [u8]) {
    // Eight file blocks of a row make one group's share of that row.
    crate::r8::each_group(
        n_in,
        n_out,
        src,
        dst,
        |g: &mut Group, r, blks: &[BlockQ8_0; BLOCKS]| {
            for (k, b) in blks.iter().enumerate() {
                for (i, &w) in b.qs.iter().enumerate() {
                    let e = 32 * k + i;
                    g.qs[e / 4][4 * r + e % 4] = (w as u8) ^ 0x80;
                }
                g.d[k][r] = b.d.to_bits();
            }
        },
    );
}

/// Row r's sum against one Q8_0 activation row `y` (the module docs).
fn row_sum(gs: &[Group], y: &[BlockQ8_0], r: usize) -> f32 {
    let mut acc = 0f32;
    for (g, yb) in gs.iter().zip(y.chunks_exact(BLOCKS)) {
        for (k, a) in yb.iter().enumerate() {
            let mut isum = 0i32;
            for (i, &ai) in a.qs.iter().enumerate() {
                let e = 32 * k + i;
                let w = (g.qs[e / 4][4 * r + e % 4] ^ 0x80) as i8;
                isum += w as i32 * ai as i32;
            }
            let dd = half::f16::from_bits(g.d[k][r]).to_f32() * a.d.to_f32();
            acc = (isum as f32).mul_add(dd, acc);
        }
    }
    acc
}

/// The reference (the module docs' sum), with the signature of
/// [`crate::sig::GemmFn`]: `out[i·stride + t] = W[i] · x[t]` for the `w_rows`
/// rows of the repacked `w` (a multiple of 8) and `act_rows` Q8_0 rows.
// Same GemmFn parameter list as gemm_ref in q3k_r8, q4k_r8 and q6k_r8: an fn item cannot
// take its signature from the type alias; the body (Q8_0 activations, row_sum) is this format's.
pub fn gemm_ref(
    n: usize,
    w: &[u8],
    w_rows: usize,
    act: &[u8],
    act_rows: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    crate::r8::each_output(n, w, w_rows, act, act_rows, out, out_stride, row_sum);
}
