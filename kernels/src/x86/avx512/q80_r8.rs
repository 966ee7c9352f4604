//! AVX-512 (VNNI) products of repacked Q8_0 weights ([`crate::q80_r8`])
//! with Q8_0 activations: lane r of every vector is weight row r of a group
//! of eight.
//!
//! Per 32-weight block: eight 32-byte loads of the weights (already the
//! unsigned `w + 128`), and per activation row eight `vpdpbusd` with four
//! activations broadcast each, from `−128·Σa` of the block (computed once
//! per call for every group row); then one convert and one FMA by `d_w ·
//! d_a` per block: [`crate::q80_r8`]'s arithmetic, so its bits, for any
//! number of activation rows.

use std::arch::x86_64::*;

use crate::q80_r8::{Group, BLOCKS};
use crate::repack::ROWS;
use crate::scalar::q8_0::BlockQ8_0;
use crate::sig::GemmFn;
use crate::GgmlType;

use super::repack::{lanes, prefetch_ahead, GroupRows};

/// The repacked Q8_0 product, when the host has the AVX-512 tier with VNNI.
// gemm_fn as in every x86/avx512/*_r8.rs (iq4, q3k, q4k, q5k, q6k, q80): each states the features
// its product needs; the product itself comes from repacked_product! or its own rows8.
pub fn gemm_fn() -> Option<GemmFn> {
    let ok = crate::Isa::Avx512.available() && is_x86_feature_detected!("avx512vnni");
    ok.then_some(product as GemmFn)
}

// Same product as repack.rs::repacked_product!: that macro's GroupRows impl assumes Q8_K
// activations (ACTS = 1), Q8_0 takes Q8_0 blocks with per-block starts, so both are written here.
fn product(
    n: usize,
    w: &[u8],
    w_rows: usize,
    act: &[u8],
    act_rows: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    // SAFETY: `gemm_fn` hands this out only when the host has every feature
    // the kernel enables.
    unsafe { super::repack::gemm::<Group>(n, w, w_rows, act, act_rows, out, out_stride) }
}

impl GroupRows for Group {
    const TY: GgmlType = GgmlType::Q8_0;
    const COLS: usize = 8;
    type Act = BlockQ8_0;
    const ACTS: usize = BLOCKS;

    fn starts(y: &[BlockQ8_0], out: &mut Vec<i32>) -> bool {
        out.extend(
            y.iter()
                .map(|b| -128 * b.qs.iter().map(|&a| a as i32).sum::<i32>()),
        );
        true
    }

    #[inline(always)]
    unsafe fn rows8<const C: usize>(
        gs: &[Group],
        y: [&[BlockQ8_0]; C],
        st: [&[i32]; C],
    ) -> [[f32; ROWS]; C] {
        // SAFETY: the caller guarantees the features the kernel enables.
        unsafe { rows8::<C>(gs, y, st) }
    }
}

/// One group row (`gs`) against `C` Q8_0 rows and their block starts.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn rows8<const C: usize>(gs: &[Group], y: [&[BlockQ8_0]; C], st: [&[i32]; C]) -> [[f32; ROWS]; C] {
    let nblk = gs.len() * BLOCKS;
    for c in 0..C {
        assert!(
            y[c].len() >= nblk && st[c].len() >= nblk,
            "repacked Q8_0: short activation row"
        );
    }
    // SAFETY: every load reads a whole field of a group or of an activation
    // block in bounds (checked above); this function enables every feature
    // used.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); C];
        for (b, g) in gs.iter().enumerate() {
            prefetch_ahead(g);
            for k in 0..BLOCKS {
                let blk = BLOCKS * b + k;
                let yb: [&BlockQ8_0; C] = std::array::from_fn(|c| &y[c][blk]);
                let mut s: [__m256i; C] = std::array::from_fn(|c| _mm256_set1_epi32(st[c][blk]));
                for m in 0..8 {
                    let u = _mm256_loadu_si256(g.qs[8 * k + m].as_ptr().cast());
                    for c in 0..C {
                        let a = yb[c].qs.as_ptr().add(4 * m).cast::<i32>().read_unaligned();
                        s[c] = _mm256_dpbusd_epi32(s[c], u, _mm256_set1_epi32(a));
                    }
                }
                let dw = _mm256_cvtph_ps(_mm_loadu_si128(g.d[k].as_ptr().cast()));
                for c in 0..C {
                    let da = _mm256_cvtph_ps(_mm_set1_epi16(yb[c].d.to_bits() as i16));
                    let dd = _mm256_mul_ps(dw, da);
                    acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[c]), dd, acc[c]);
                }
            }
        }
        lanes(&acc)
    }
}
