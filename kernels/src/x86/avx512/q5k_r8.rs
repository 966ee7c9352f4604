//! AVX-512 (VNNI, GFNI) products of repacked Q5_K weights
//! ([`crate::q5k_r8`]) with Q8_K activations: the repacked Q4_K kernel
//! ([`super::q4k_r8`]) with each byte quad's fifth bits joined to its
//! nibbles, one `gf2p8affineqb` (the bit of the sub-block moved to bit 4)
//! and one `vpternlogd` (nibble | fifth bit) per sub-block and quad.

use std::arch::x86_64::*;

use crate::q5k_r8::Group;
use crate::repack::ROWS;
use crate::scalar::q8_k::BlockQ8K;
use crate::sig::GemmFn;
use crate::GgmlType;

use super::q4k_r8::{minned_rows8, Minned};
use super::repack::repacked_product;

/// The repacked Q5_K product, when the host has the AVX-512 tier with VNNI
/// and GFNI.
// gemm_fn as in every x86/avx512/*_r8.rs (iq4, q3k, q4k, q5k, q6k, q80): each states the features
// its product needs; the product itself comes from repacked_product! or its own rows8.
pub fn gemm_fn() -> Option<GemmFn> {
    let ok = crate::Isa::Avx512.available()
        && is_x86_feature_detected!("avx512vnni")
        && is_x86_feature_detected!("gfni");
    ok.then_some(product as GemmFn)
}

repacked_product!(Group, GgmlType::Q5_K, rows8);

/// A `gf2p8affineqb` matrix moving input bit `b` of every byte to bit 4 and
/// clearing the rest.
const fn gf_bit4(b: u32) -> i64 {
    ((1u64 << b) << 24) as i64
}

impl Minned for Group {
    #[inline(always)]
    fn k4(&self) -> &crate::q4k_r8::Group {
        &self.k4
    }

    #[inline(always)]
    unsafe fn levels(&self, k: usize, q: usize, w: __m256i) -> (__m256i, __m256i) {
        // SAFETY: a whole field of the group; the caller enables AVX-512 VL
        // and GFNI.
        unsafe {
            let m4 = _mm256_set1_epi8(0xF);
            let h = _mm256_loadu_si256(self.qh[q].as_ptr().cast());
            let h_lo =
                _mm256_gf2p8affine_epi64_epi8::<0>(h, _mm256_set1_epi64x(gf_bit4(2 * k as u32)));
            let h_hi = _mm256_gf2p8affine_epi64_epi8::<0>(
                h,
                _mm256_set1_epi64x(gf_bit4(2 * k as u32 + 1)),
            );
            // (nibble & 0xF) | fifth bit: vpternlogd 0xEC = (A & C) | B.
            let lo = _mm256_ternarylogic_epi32::<0xEC>(w, h_lo, m4);
            let hi = _mm256_ternarylogic_epi32::<0xEC>(_mm256_srli_epi16::<4>(w), h_hi, m4);
            (lo, hi)
        }
    }
}

/// One group row (`gs`, one group per block) against `C` Q8_K rows.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,gfni,avx2,fma,f16c")]
fn rows8<const C: usize>(gs: &[Group], y: [&[BlockQ8K]; C]) -> [[f32; ROWS]; C] {
    // SAFETY: this function enables every feature `minned_rows8` and the
    // Q5_K levels need.
    unsafe { minned_rows8(gs, y) }
}
