//! AVX-512 (VNNI, VBMI) products of repacked IQ4_XS weights
//! ([`crate::iq4_r8`]) with Q8_K activations: lane r of every vector is
//! weight row r of a group of eight.
//!
//! Per sub-block j and byte quad q: one 32-byte load, a shift and two
//! `vpermb` give the biased grid values (`G + 128`) of the low and high
//! nibbles of eight rows, and each activation row adds two `vpdpbusd` with
//! its four activations broadcast. The grid's bias comes off as
//! `−128 · Σ a` per sub-block, added before the scale `mullo`; the eight
//! sub-blocks' scaled sums stay exact in i32, then one convert and one FMA
//! by `d_w · d_a` per block: [`crate::iq4_r8::gemm_ref`]'s arithmetic, so
//! its bits, for any number of activation rows.

use std::arch::x86_64::*;

use crate::iq4_r8::Group;
use crate::repack::ROWS;
use crate::scalar::q8_k::BlockQ8K;
use crate::sig::GemmFn;
use crate::x86::avx2::kquants::load_u8_128;
use crate::GgmlType;

use super::kquants::BIASED_GRID;
use super::repack::repacked_product;

/// The repacked IQ4_XS product, when the host has the AVX-512 tier with
/// VNNI and VBMI.
// gemm_fn as in every x86/avx512/*_r8.rs (iq4, q3k, q4k, q5k, q6k, q80): each states the features
// its product needs; the product itself comes from repacked_product! or its own rows8.
pub fn gemm_fn() -> Option<GemmFn> {
    let ok = crate::Isa::Avx512.available()
        && is_x86_feature_detected!("avx512vnni")
        && is_x86_feature_detected!("avx512vbmi");
    ok.then_some(product as GemmFn)
}

repacked_product!(Group, GgmlType::IQ4_XS, rows8);

/// One group row (`gs`, one group per block) against `C` Q8_K rows.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
fn rows8<const C: usize>(gs: &[Group], y: [&[BlockQ8K]; C]) -> [[f32; ROWS]; C] {
    for yc in y {
        assert!(
            yc.len() >= gs.len(),
            "repacked IQ4_XS: short activation row"
        );
    }
    // SAFETY: every load reads a whole field of a block in bounds (the
    // activation rows are as long as the group row, checked above); this
    // function enables every feature used.
    unsafe {
        let grid = _mm256_broadcastsi128_si256(load_u8_128(&BIASED_GRID));
        let neg128 = _mm256_set1_epi16(-128);
        let mut acc = [_mm256_setzero_ps(); C];
        for (b, g) in gs.iter().enumerate() {
            // For any width: a verify pass's few rows stream from memory
            // too (`dense_stream q5_k 512`; docs/PERFORMANCE.md).
            super::repack::prefetch_ahead(g);
            // −128 · (sum of sub-block j's activations) in lane j, per row.
            let mut bias = [[0i32; 8]; C];
            for (bc, yc) in bias.iter_mut().zip(&y) {
                let bs = _mm256_loadu_si256(yc[b].bsums.as_ptr().cast());
                _mm256_storeu_si256(bc.as_mut_ptr().cast(), _mm256_madd_epi16(bs, neg128));
            }
            let mut blk = [_mm256_setzero_si256(); C];
            for (j, scales) in g.scales.iter().enumerate() {
                let mut s0: [__m256i; C] = std::array::from_fn(|c| _mm256_set1_epi32(bias[c][j]));
                let mut s1 = [_mm256_setzero_si256(); C];
                for q in 0..4 {
                    let w = _mm256_loadu_si256(g.qs[4 * j + q].as_ptr().cast());
                    let lo = _mm256_permutexvar_epi8(w, grid);
                    let hi = _mm256_permutexvar_epi8(_mm256_srli_epi16::<4>(w), grid);
                    for c in 0..C {
                        let a = y[c][b].qs.as_ptr().add(32 * j + 4 * q);
                        let a_lo = _mm256_set1_epi32(a.cast::<i32>().read_unaligned());
                        let a_hi = _mm256_set1_epi32(a.add(16).cast::<i32>().read_unaligned());
                        s0[c] = _mm256_dpbusd_epi32(s0[c], lo, a_lo);
                        s1[c] = _mm256_dpbusd_epi32(s1[c], hi, a_hi);
                    }
                }
                let sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64(scales.as_ptr().cast()));
                for c in 0..C {
                    let s = _mm256_add_epi32(s0[c], s1[c]);
                    blk[c] = _mm256_add_epi32(blk[c], _mm256_mullo_epi32(s, sc));
                }
            }
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(g.d.as_ptr().cast()));
            for c in 0..C {
                let d = _mm256_mul_ps(dw, _mm256_set1_ps(y[c][b].d));
                acc[c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(blk[c]), acc[c]);
            }
        }
        std::array::from_fn(|c| {
            let mut o = [0f32; ROWS];
            _mm256_storeu_ps(o.as_mut_ptr(), acc[c]);
            o
        })
    }
}
