//! AVX-512 (VNNI, GFNI) products of repacked Q3_K weights
//! ([`crate::q3k_r8`]) with Q8_K activations: lane r of every vector is
//! weight row r of a group of eight.
//!
//! Per sub-block: one 32-byte load of the low bits serves its four element
//! quads; per quad, one `gf2p8affineqb` moves the quad's two low bits to
//! bits 0-1, another moves its high bit (from one of eight 32-byte loads)
//! to bit 2, an OR joins them into the unsigned levels (0..=7) of eight
//! rows, and each activation row adds one `vpdpbusd` with its four
//! activations broadcast. The sums start at `−4·Σa` of the sub-block (the
//! levels' bias), take the scale with one `mullo`, and stay exact in i32
//! over the block; then one convert and one FMA by `d_w · d_a` per block:
//! [`crate::q3k_r8::gemm_ref`]'s arithmetic, so its bits, for any number of
//! activation rows.

use std::arch::x86_64::*;

use crate::q3k_r8::Group;
use crate::repack::ROWS;
use crate::scalar::q8_k::BlockQ8K;
use crate::sig::GemmFn;
use crate::GgmlType;

use super::lowbit::{gf_bit2, gf_low_pair};
use super::repack::{fma_block, lanes, repacked_product};

/// The repacked Q3_K product, when the host has the AVX-512 tier with VNNI
/// and GFNI.
// gemm_fn as in every x86/avx512/*_r8.rs (iq4, q3k, q4k, q5k, q6k, q80): each states the features
// its product needs; the product itself comes from repacked_product! or its own rows8.
pub fn gemm_fn() -> Option<GemmFn> {
    let ok = crate::Isa::Avx512.available()
        && is_x86_feature_detected!("avx512vnni")
        && is_x86_feature_detected!("gfni");
    ok.then_some(product as GemmFn)
}

repacked_product!(Group, GgmlType::Q3_K, rows8, 8);

/// The affine matrices [`levels`] takes: `[m]` moves the low bits of quad
/// m of a `lo` byte to bits 0-1.
#[inline(always)]
pub(crate) fn low_pairs() -> [__m256i; 4] {
    // SAFETY: register-only; the callers enable AVX.
    std::array::from_fn(|m| unsafe { _mm256_set1_epi64x(gf_low_pair(2 * m as u32)) })
}

/// The unsigned levels (0..=7) of element quad `4j + m` of the eight rows
/// of `g`: lane r byte e = row r's element `4(4j + m) + e`.
///
/// # Safety
/// The caller must have AVX2 and GFNI enabled.
#[inline(always)]
pub(crate) unsafe fn levels(g: &Group, j: usize, m: usize, low: &[__m256i; 4]) -> __m256i {
    // SAFETY: whole fields of `g`; the caller enables the features.
    unsafe {
        let lo = _mm256_loadu_si256(g.lo[j].as_ptr().cast());
        let hi = _mm256_loadu_si256(g.hi[4 * (j % 2) + m].as_ptr().cast());
        let high = _mm256_set1_epi64x(gf_bit2(j as u32 / 2));
        _mm256_or_si256(
            _mm256_gf2p8affine_epi64_epi8::<0>(lo, low[m]),
            _mm256_gf2p8affine_epi64_epi8::<0>(hi, high),
        )
    }
}

/// One group row (`gs`, one group per block) against `C` Q8_K rows.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,gfni,avx2,fma,f16c")]
fn rows8<const C: usize>(gs: &[Group], y: [&[BlockQ8K]; C]) -> [[f32; ROWS]; C] {
    for yc in y {
        assert!(yc.len() >= gs.len(), "repacked Q3_K: short activation row");
    }
    // SAFETY: every load reads a whole field of a block in bounds (the
    // activation rows are as long as the group row, checked above); this
    // function enables every feature used.
    unsafe {
        let low = low_pairs();
        let mut acc = [_mm256_setzero_ps(); C];
        for (b, g) in gs.iter().enumerate() {
            super::repack::prefetch_ahead(g);
            let mut isum = [_mm256_setzero_si256(); C];
            if C == 1 {
                isum[0] = one_row_block(g, &y[0][b], &low);
                fma_block(&mut acc, &isum, &g.d, &y, b);
                continue;
            }
            for j in 0..16 {
                let mut s: [__m256i; C] =
                    std::array::from_fn(|c| _mm256_set1_epi32(-4 * y[c][b].bsums[j] as i32));
                for m in 0..4 {
                    let u = levels(g, j, m, &low);
                    for c in 0..C {
                        let a = y[c][b].qs.as_ptr().add(16 * j + 4 * m);
                        let a = _mm256_set1_epi32(a.cast::<i32>().read_unaligned());
                        s[c] = _mm256_dpbusd_epi32(s[c], u, a);
                    }
                }
                let sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64(g.scales[j].as_ptr().cast()));
                for c in 0..C {
                    isum[c] = _mm256_add_epi32(isum[c], _mm256_mullo_epi32(s[c], sc));
                }
            }
            fma_block(&mut acc, &isum, &g.d, &y, b);
        }
        lanes(&acc)
    }
}

/// [`rows8`]'s integer sums of one block against one activation row `yb`,
/// two sub-blocks at a time: two independent chains of `vpdpbusd`, where
/// one activation row alone would make one chain of 64 (the latency of a
/// mat-vec; docs/PERFORMANCE.md).
///
/// # Safety
/// As [`rows8`].
#[inline(always)]
unsafe fn one_row_block(g: &Group, yb: &BlockQ8K, low: &[__m256i; 4]) -> __m256i {
    // SAFETY: whole fields of `g` and `yb`; the caller enables the features.
    unsafe {
        let mut isum = _mm256_setzero_si256();
        for j0 in (0..16).step_by(2) {
            let mut s = [
                _mm256_set1_epi32(-4 * yb.bsums[j0] as i32),
                _mm256_set1_epi32(-4 * yb.bsums[j0 + 1] as i32),
            ];
            for m in 0..4 {
                for (h, s) in s.iter_mut().enumerate() {
                    let j = j0 + h;
                    let u = levels(g, j, m, low);
                    let a = yb.qs.as_ptr().add(16 * j + 4 * m);
                    let a = _mm256_set1_epi32(a.cast::<i32>().read_unaligned());
                    *s = _mm256_dpbusd_epi32(*s, u, a);
                }
            }
            for (h, s) in s.into_iter().enumerate() {
                let sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64(g.scales[j0 + h].as_ptr().cast()));
                isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(s, sc));
            }
        }
        isum
    }
}
