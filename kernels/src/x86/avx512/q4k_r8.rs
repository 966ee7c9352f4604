//! AVX-512 (VNNI) products of repacked Q4_K weights ([`crate::q4k_r8`]) with
//! Q8_K activations: lane r of every vector is weight row r of a group of
//! eight.
//!
//! Per 64-element chunk and byte quad: one 32-byte load, an AND and a
//! shift + AND give the levels of the low and the high sub-block of eight
//! rows, and each activation row adds two `vpdpbusd` with its four
//! activations broadcast. Per sub-block one `mullo` by the scales; the mins
//! times the activation sums per sub-block; both exact in i32, then one FMA
//! each by `d·d_a` and `dmin·d_a` per block: [`crate::q4k_r8::gemm_ref`]'s
//! arithmetic, so its bits, for any number of activation rows.

use std::arch::x86_64::*;

use crate::q4k_r8::Group;
use crate::repack::ROWS;
use crate::scalar::q8_k::BlockQ8K;
use crate::sig::GemmFn;
use crate::GgmlType;

use super::repack::repacked_product;

/// The repacked Q4_K product, when the host has the AVX-512 tier with VNNI.
// gemm_fn as in every x86/avx512/*_r8.rs (iq4, q3k, q4k, q5k, q6k, q80): each states the features
// its product needs; the product itself comes from repacked_product! or its own rows8.
pub fn gemm_fn() -> Option<GemmFn> {
    let ok = crate::Isa::Avx512.available() && is_x86_feature_detected!("avx512vnni");
    ok.then_some(product as GemmFn)
}

repacked_product!(Group, GgmlType::Q4_K, rows8);

/// One group row (`gs`, one group per block) against `C` Q8_K rows.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn rows8<const C: usize>(gs: &[Group], y: [&[BlockQ8K]; C]) -> [[f32; ROWS]; C] {
    // SAFETY: this function enables every feature `minned_rows8` needs.
    unsafe { minned_rows8(gs, y) }
}

/// The layouts with Q4_K's nibble quads, scales and mins ([`crate::q4k_r8`],
/// [`crate::q5k_r8`]): what [`minned_rows8`] reads of a group.
pub(crate) trait Minned: bytemuck::Pod {
    /// The nibble quads, scales, mins, `d` and `dmin`.
    fn k4(&self) -> &Group;

    /// The levels of the low and the high sub-block (2k, 2k + 1) of chunk
    /// k's byte quad q, given that quad's bytes `w`.
    ///
    /// # Safety
    /// The caller must have AVX2 (and whatever the layout's form needs)
    /// enabled.
    unsafe fn levels(&self, k: usize, q: usize, w: __m256i) -> (__m256i, __m256i);
}

impl Minned for Group {
    #[inline(always)]
    fn k4(&self) -> &Group {
        self
    }

    #[inline(always)]
    unsafe fn levels(&self, _k: usize, _q: usize, w: __m256i) -> (__m256i, __m256i) {
        // SAFETY: register-only; the caller enables AVX2.
        unsafe {
            let m4 = _mm256_set1_epi8(0xF);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(w), m4);
            (_mm256_and_si256(w, m4), hi)
        }
    }
}

/// One group row (`gs`) of a layout with mins against `C` Q8_K rows.
///
/// # Safety
/// The caller must have AVX-512 F/BW/VL, VNNI, AVX2, FMA, F16C and what
/// `G::levels` needs enabled.
#[inline(always)]
pub(crate) unsafe fn minned_rows8<G: Minned, const C: usize>(
    gs: &[G],
    y: [&[BlockQ8K]; C],
) -> [[f32; ROWS]; C] {
    for yc in y {
        assert!(
            yc.len() >= gs.len(),
            "repacked K-quant: short activation row"
        );
    }
    // SAFETY: every load reads a whole field of a block in bounds (the
    // activation rows are as long as the group row, checked above); the
    // caller enables every feature used.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); C];
        let mut acc_min = [_mm256_setzero_ps(); C];
        for (b, g) in gs.iter().enumerate() {
            // For any width: a verify pass's few rows stream from memory
            // too (`dense_stream q5_k 512`; docs/PERFORMANCE.md).
            super::repack::prefetch_ahead(g);
            let Group {
                qs,
                scales,
                mins,
                d,
                dmin,
            } = g.k4();
            // The mins first: Σ_j m_j · (sum of sub-block j's activations).
            let dmw = _mm256_cvtph_ps(_mm_loadu_si128(dmin.as_ptr().cast()));
            for c in 0..C {
                let yb = &y[c][b];
                let mut bsum = [0i32; 8];
                let bs = _mm256_loadu_si256(yb.bsums.as_ptr().cast());
                _mm256_storeu_si256(bsum.as_mut_ptr().cast(), _mm256_madd_epi16(bs, ones));
                let mut imin = _mm256_setzero_si256();
                for (mins, &s) in mins.iter().zip(&bsum) {
                    let m = _mm256_cvtepu8_epi32(_mm_loadl_epi64(mins.as_ptr().cast()));
                    imin = _mm256_add_epi32(imin, _mm256_mullo_epi32(m, _mm256_set1_epi32(s)));
                }
                let dm = _mm256_mul_ps(dmw, _mm256_set1_ps(yb.d));
                acc_min[c] = _mm256_fmadd_ps(dm, _mm256_cvtepi32_ps(imin), acc_min[c]);
            }
            let mut isum = [_mm256_setzero_si256(); C];
            for k in 0..4 {
                let mut s_lo = [_mm256_setzero_si256(); C];
                let mut s_hi = [_mm256_setzero_si256(); C];
                for q in 0..8 {
                    let w = _mm256_loadu_si256(qs[8 * k + q].as_ptr().cast());
                    let (lo, hi) = g.levels(k, q, w);
                    // The activation broadcast and dpbusd pair as in iq4_r8.rs::rows8: the
                    // levels come from each format's own unpacking (Q4_K nibbles here, the IQ4 grid
                    // there) and the activation offsets differ (32 vs 16).
                    for c in 0..C {
                        let a = y[c][b].qs.as_ptr().add(64 * k + 4 * q);
                        let a_lo = _mm256_set1_epi32(a.cast::<i32>().read_unaligned());
                        let a_hi = _mm256_set1_epi32(a.add(32).cast::<i32>().read_unaligned());
                        s_lo[c] = _mm256_dpbusd_epi32(s_lo[c], lo, a_lo);
                        s_hi[c] = _mm256_dpbusd_epi32(s_hi[c], hi, a_hi);
                    }
                }
                let sc_lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(scales[2 * k].as_ptr().cast()));
                let sc_hi =
                    _mm256_cvtepu8_epi32(_mm_loadl_epi64(scales[2 * k + 1].as_ptr().cast()));
                for c in 0..C {
                    let s = _mm256_add_epi32(
                        _mm256_mullo_epi32(s_lo[c], sc_lo),
                        _mm256_mullo_epi32(s_hi[c], sc_hi),
                    );
                    isum[c] = _mm256_add_epi32(isum[c], s);
                }
            }
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(d.as_ptr().cast()));
            for c in 0..C {
                let dd = _mm256_mul_ps(dw, _mm256_set1_ps(y[c][b].d));
                acc[c] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(isum[c]), acc[c]);
            }
        }
        std::array::from_fn(|c| {
            let mut o = [0f32; ROWS];
            _mm256_storeu_ps(o.as_mut_ptr(), _mm256_sub_ps(acc[c], acc_min[c]));
            o
        })
    }
}
