//! What the eight-row repacked types ([`crate::iq4_r8`], [`crate::q4k_r8`], ...)
//! share: the group height, the repacking loop, the nibble interleave and the
//! loops of their plain-Rust definitions. [`crate::repack`] dispatches on the
//! type.

use crate::blocks::{as_blocks, as_blocks_mut};
use crate::scalar::q8_k::BlockQ8K;

/// Weight rows per group.
pub const ROWS: usize = 8;

/// The loop of the repackers: for every group `g` of the `n_out` rows of
/// `n_in` weights (blocks `B` in `src`, groups `G` in `dst`), `fill(g, r,
/// block)` for each of its eight rows r and that row's block.
pub(crate) fn each_group<B: bytemuck::Pod, G: bytemuck::Pod>(
    n_in: usize,
    n_out: usize,
    src: &[u8],
    dst: &mut [u8],
    fill: impl Fn(&mut G, usize, &B),
) {
    assert!(
        n_in.is_multiple_of(256) && n_out.is_multiple_of(ROWS),
        "{n_out} x {n_in} is not packable"
    );
    let nb = n_in / 256;
    let rows: &[B] = as_blocks(&src[..n_out * nb * size_of::<B>()]);
    let groups: &mut [G] = as_blocks_mut(&mut dst[..n_out / ROWS * nb * size_of::<G>()]);
    for (gi, g) in groups.iter_mut().enumerate() {
        let (row0, b) = (gi / nb * ROWS, gi % nb);
        for r in 0..ROWS {
            fill(g, r, &rows[(row0 + r) * nb + b]);
        }
    }
}

/// Row r's bytes `qs` (four per quad of `dst`) into lane r of the 32-byte
/// quads: quad i's lane r is `qs[4i .. 4i + 4]` (the layout of the packed
/// nibbles, and of Q5_K's fifth bits).
pub(crate) fn interleave_quads(dst: &mut [[u8; 32]], r: usize, qs: &[u8]) {
    assert_eq!(qs.len(), 4 * dst.len());
    for (i, quad) in dst.iter_mut().enumerate() {
        quad[4 * r..4 * r + 4].copy_from_slice(&qs[4 * i..4 * i + 4]);
    }
}

/// The per-row sum of the biased K-quant layouts ([`crate::q3k_r8`],
/// [`crate::q6k_r8`]): row r of the group row `gs` against the Q8_K row `y`,
/// per block the exact integer `Σ_j s_j · (Σ_{e ∈ j} u_e·a_e − bias·Σ_{e ∈ j}
/// a_e)` over sixteen sub-blocks of sixteen (`level(g, i)`: row r's unsigned
/// level of element i; `scale(g, j)`: its sub-block scale; `d(g)`: its `d`
/// bits), then `acc = fma(isum, d_w · d_a, acc)`.
pub(crate) fn biased_row<G>(
    gs: &[G],
    y: &[BlockQ8K],
    bias: i32,
    level: impl Fn(&G, usize) -> u8,
    scale: impl Fn(&G, usize) -> i8,
    d: impl Fn(&G) -> u16,
) -> f32 {
    let mut acc = 0f32;
    for (g, yb) in gs.iter().zip(y) {
        let mut isum = 0i32;
        for j in 0..16 {
            let mut s = -bias * yb.bsums[j] as i32;
            for i in 16 * j..16 * j + 16 {
                s += level(g, i) as i32 * yb.qs[i] as i32;
            }
            isum += scale(g, j) as i32 * s;
        }
        let dd = half::f16::from_bits(d(g)).to_f32() * yb.d;
        acc = (isum as f32).mul_add(dd, acc);
    }
    acc
}

/// The per-row sum of the layouts with mins ([`crate::q4k_r8`],
/// [`crate::q5k_r8`]): row r of the group row `gs` against the Q8_K row `y`,
/// per block the exact integers `isum = Σ_j sc_j · Σ_{e ∈ j} u_e·a_e` and
/// `imin = Σ_j m_j · Σ_{e ∈ j} a_e` over eight sub-blocks of 32 (`level(g,
/// i)`: row r's level of element i; `scale_min(g, j)`: its sub-block scale
/// and min; `d(g)`: its `d` and `dmin` bits), then `acc = fma(isum, d_w ·
/// d_a, acc)`, `acc_min = fma(imin, dmin_w · d_a, acc_min)`, and `acc −
/// acc_min` at the end.
pub(crate) fn minned_row<G>(
    gs: &[G],
    y: &[BlockQ8K],
    level: impl Fn(&G, usize) -> u8,
    scale_min: impl Fn(&G, usize) -> (u8, u8),
    d: impl Fn(&G) -> (u16, u16),
) -> f32 {
    let (mut acc, mut acc_min) = (0f32, 0f32);
    for (g, yb) in gs.iter().zip(y) {
        let (mut isum, mut imin) = (0i32, 0i32);
        for j in 0..8 {
            let s: i32 = (32 * j..32 * j + 32)
                .map(|i| level(g, i) as i32 * yb.qs[i] as i32)
                .sum();
            let (sc, m) = scale_min(g, j);
            isum += sc as i32 * s;
            let bsum = yb.bsums[2 * j] as i32 + yb.bsums[2 * j + 1] as i32;
            imin += m as i32 * bsum;
        }
        let (dw, dmw) = d(g);
        let dd = half::f16::from_bits(dw).to_f32() * yb.d;
        let dm = half::f16::from_bits(dmw).to_f32() * yb.d;
        acc = (isum as f32).mul_add(dd, acc);
        acc_min = (imin as f32).mul_add(dm, acc_min);
    }
    acc - acc_min
}

/// An activation block of the plain-Rust definitions, with its element count.
pub(crate) trait ActBlock: bytemuck::Pod {
    const QK: usize;
}

impl ActBlock for BlockQ8K {
    const QK: usize = 256;
}

impl ActBlock for crate::scalar::q8_0::BlockQ8_0 {
    const QK: usize = 32;
}

/// The loops of the plain-Rust definitions: `out[(8·gr + r)·stride + t] =
/// row(group row gr, activation row t, r)` for every group row of the
/// `w_rows` rows of `w` (groups of `G`) and every one of the `act_rows`
/// activation rows of `act` (Q8_K, or Q8_0 for the repacked Q8_0).
#[allow(clippy::too_many_arguments)]
pub(crate) fn each_output<G: bytemuck::Pod, A: ActBlock>(
    n: usize,
    w: &[u8],
    w_rows: usize,
    act: &[u8],
    act_rows: usize,
    out: &mut [f32],
    out_stride: usize,
    row: impl Fn(&[G], &[A], usize) -> f32,
) {
    let nb = n / 256;
    let ab = n / A::QK * size_of::<A>();
    let groups: &[G] = as_blocks(&w[..w_rows / ROWS * nb * size_of::<G>()]);
    for t in 0..act_rows {
        let y: &[A] = as_blocks(&act[t * ab..(t + 1) * ab]);
        for (gr, gs) in groups.chunks_exact(nb).enumerate() {
            for r in 0..ROWS {
                out[(gr * ROWS + r) * out_stride + t] = row(gs, y, r);
            }
        }
    }
}
