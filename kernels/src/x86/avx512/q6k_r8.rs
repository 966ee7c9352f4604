//! AVX-512 (VNNI, GFNI) products of repacked Q6_K weights
//! ([`crate::q6k_r8`]) with Q8_K activations: lane r of every vector is
//! weight row r of a group of eight.
//!
//! Sub-blocks j and j + 8 go together: per element quad, one 32-byte load
//! of the low bits serves both (low and high nibbles), one
//! `gf2p8affineqb` moves a quad's two high bits (from a load shared by four
//! quads) to bits 4-5, and one `vpternlogd` joins `(low & 0xF) | high` into
//! the unsigned levels (0..=63) of eight rows; each activation row adds one
//! `vpdpbusd` with its four activations broadcast. The sums start at
//! `−32·Σa` of the sub-block (the levels' bias), take the scale with one
//! `mullo`, and stay exact in i32 over the block; then one convert and one
//! FMA by `d_w · d_a` per block: [`crate::q6k_r8::gemm_ref`]'s arithmetic,
//! so its bits, for any number of activation rows.
//!
//! [`rows16`] takes two group rows at once in 512-bit vectors (the second
//! group's lanes above the first's): on a Xeon whose 512-bit VNNI issues on
//! two ports, twice the multiply-adds per instruction for the same sums.

use std::arch::x86_64::*;

use crate::q6k_r8::Group;
use crate::repack::ROWS;
use crate::scalar::q8_k::BlockQ8K;
use crate::sig::GemmFn;
use crate::GgmlType;

use super::repack::{fma_block, lanes, repacked_product};

/// The repacked Q6_K product, when the host has the AVX-512 tier with VNNI
/// and GFNI.
// gemm_fn as in every x86/avx512/*_r8.rs (iq4, q3k, q4k, q5k, q6k, q80): each states the features
// its product needs; the product itself comes from repacked_product! or its own rows8.
pub fn gemm_fn() -> Option<GemmFn> {
    let ok = crate::Isa::Avx512.available()
        && is_x86_feature_detected!("avx512vnni")
        && is_x86_feature_detected!("gfni");
    ok.then_some(product as GemmFn)
}

repacked_product!(Group, GgmlType::Q6_K, rows8, 8, rows16);

/// A `gf2p8affineqb` matrix moving input bits `2m`, `2m + 1` of every byte to
/// bits 4, 5 and clearing the rest (output bit i is the parity of matrix
/// byte 7 − i AND the input byte).
const fn gf_pair_to_4(m: u32) -> i64 {
    ((1u64 << (2 * m)) << 24 | (1u64 << (2 * m + 1)) << 16) as i64
}

/// `(a & 0xF) | b` for `vpternlogd` with `c` = 0x0F in every byte: the
/// truth table of `(a & c) | b`, whose bit `4a + 2b + c` is the result for
/// those input bits (set for 2, 3, 5, 6, 7).
const LOW_OR: i32 = 0xEC;

/// The affine matrices [`levels`] takes: `[m]` moves bits 2m, 2m + 1 of a
/// `hi` byte to bits 4-5.
#[inline(always)]
pub(crate) fn high_pairs() -> [__m256i; 4] {
    // SAFETY: register-only; the callers enable AVX.
    std::array::from_fn(|m| unsafe { _mm256_set1_epi64x(gf_pair_to_4(m as u32)) })
}

/// The unsigned levels (0..=63) of element quads q and q + 32 (q < 32) of
/// the eight rows of `g`: lane r byte e = row r's element `4q + e`, and
/// the same for quad q + 32.
///
/// # Safety
/// The caller must have AVX-512 F/VL, AVX2 and GFNI enabled.
#[inline(always)]
pub(crate) unsafe fn levels(g: &Group, q: usize, pair: &[__m256i; 4]) -> (__m256i, __m256i) {
    // SAFETY: whole fields of `g`; the caller enables the features.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0F);
        let lo = _mm256_loadu_si256(g.lo[q].as_ptr().cast());
        let hi = _mm256_loadu_si256(g.hi[q % 16].as_ptr().cast());
        let (m_lo, m_hi) = (pair[q / 16], pair[q / 16 + 2]);
        let u_lo = _mm256_ternarylogic_epi32::<LOW_OR>(
            lo,
            _mm256_gf2p8affine_epi64_epi8::<0>(hi, m_lo),
            m4,
        );
        let u_hi = _mm256_ternarylogic_epi32::<LOW_OR>(
            _mm256_srli_epi16::<4>(lo),
            _mm256_gf2p8affine_epi64_epi8::<0>(hi, m_hi),
            m4,
        );
        (u_lo, u_hi)
    }
}

/// One group row (`gs`, one group per block) against `C` Q8_K rows.
// Head as in q3k_r8.rs::rows8 (features, length check, accumulators): the level unpacking per block
// below is this format's (high pairs and 6-bit levels here, low pairs and a high-bit mask there),
// and each rows8 is its own #[target_feature] fn for repacked_product!.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,gfni,avx2,fma,f16c")]
fn rows8<const C: usize>(gs: &[Group], y: [&[BlockQ8K]; C]) -> [[f32; ROWS]; C] {
    for yc in y {
        assert!(yc.len() >= gs.len(), "repacked Q6_K: short activation row");
    }
    // SAFETY: every load reads a whole field of a block in bounds (the
    // activation rows are as long as the group row, checked above); this
    // function enables every feature used.
    unsafe {
        let pair = high_pairs();
        let mut acc = [_mm256_setzero_ps(); C];
        for (b, g) in gs.iter().enumerate() {
            super::repack::prefetch_ahead(g);
            let mut isum = [_mm256_setzero_si256(); C];
            for j in 0..8 {
                let bias = |c: usize, s: usize| _mm256_set1_epi32(-32 * y[c][b].bsums[s] as i32);
                let mut s_lo: [__m256i; C] = std::array::from_fn(|c| bias(c, j));
                let mut s_hi: [__m256i; C] = std::array::from_fn(|c| bias(c, j + 8));
                for i in 0..4 {
                    let q = 4 * j + i;
                    let (u_lo, u_hi) = levels(g, q, &pair);
                    for c in 0..C {
                        let a = y[c][b].qs.as_ptr();
                        let a_lo = a.add(4 * q).cast::<i32>().read_unaligned();
                        let a_hi = a.add(4 * q + 128).cast::<i32>().read_unaligned();
                        s_lo[c] = _mm256_dpbusd_epi32(s_lo[c], u_lo, _mm256_set1_epi32(a_lo));
                        s_hi[c] = _mm256_dpbusd_epi32(s_hi[c], u_hi, _mm256_set1_epi32(a_hi));
                    }
                }
                let scale =
                    |s: usize| _mm256_cvtepi8_epi32(_mm_loadl_epi64(g.scales[s].as_ptr().cast()));
                let (sc_lo, sc_hi) = (scale(j), scale(j + 8));
                for c in 0..C {
                    let t = _mm256_add_epi32(
                        _mm256_mullo_epi32(s_lo[c], sc_lo),
                        _mm256_mullo_epi32(s_hi[c], sc_hi),
                    );
                    isum[c] = _mm256_add_epi32(isum[c], t);
                }
            }
            fma_block(&mut acc, &isum, &g.d, &y, b);
        }
        lanes(&acc)
    }
}

/// The two groups' 32-byte fields `a` (lanes 0-7) and `b` (lanes 8-15) in
/// one vector.
///
/// # Safety
/// The caller must have AVX-512 F enabled.
#[inline(always)]
unsafe fn both(a: &[u8; 32], b: &[u8; 32]) -> __m512i {
    // SAFETY: two whole 32-byte fields; the caller enables AVX-512 F.
    unsafe {
        let lo = _mm256_loadu_si256(a.as_ptr().cast());
        _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(lo),
            _mm256_loadu_si256(b.as_ptr().cast()),
        )
    }
}

/// Two consecutive group rows (`g0`, `g1`, one group per block) against `C`
/// Q8_K rows: lane r of each output is `g0`'s row r (r < 8) or `g1`'s row r
/// − 8, with [`rows8`]'s integers and float steps, so its bits.
///
/// Per block and sub-block pair (j, j + 8): the four element quads' low
/// bits and high bits of both groups in eight vectors; sub-block j's levels
/// (low nibbles) into one sum per activation row, scaled, then sub-block
/// j + 8's (high nibbles) the same way.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,gfni,avx2,fma,f16c")]
fn rows16<const C: usize>(
    g0s: &[Group],
    g1s: &[Group],
    y: [&[BlockQ8K]; C],
) -> [[f32; 2 * ROWS]; C] {
    assert!(g1s.len() >= g0s.len(), "repacked Q6_K: short group row");
    for yc in y {
        assert!(yc.len() >= g0s.len(), "repacked Q6_K: short activation row");
    }
    // SAFETY: every load reads a whole field of a block in bounds (the
    // second group row and the activation rows are as long as the first,
    // checked above); this function enables every feature used.
    unsafe {
        let pair: [__m512i; 4] = std::array::from_fn(|m| _mm512_set1_epi64(gf_pair_to_4(m as u32)));
        let m4 = _mm512_set1_epi8(0x0F);
        let mut acc = [_mm512_setzero_ps(); C];
        // Per activation row, each sub-block's `−32·Σa` (the levels' bias).
        let mut bias = [[0i32; 16]; C];
        for (b, (g0, g1)) in g0s.iter().zip(g1s).enumerate() {
            super::repack::prefetch_ahead(g0);
            super::repack::prefetch_ahead(g1);
            for c in 0..C {
                let bs = _mm256_loadu_si256(y[c][b].bsums.as_ptr().cast());
                let v = _mm512_slli_epi32::<5>(_mm512_cvtepi16_epi32(bs));
                let v = _mm512_sub_epi32(_mm512_setzero_si512(), v);
                _mm512_storeu_si512(bias[c].as_mut_ptr().cast(), v);
            }
            let mut isum = [_mm512_setzero_si512(); C];
            for j in 0..8 {
                let lo: [__m512i; 4] =
                    std::array::from_fn(|i| both(&g0.lo[4 * j + i], &g1.lo[4 * j + i]));
                let hi: [__m512i; 4] = std::array::from_fn(|i| {
                    both(&g0.hi[(4 * j + i) % 16], &g1.hi[(4 * j + i) % 16])
                });
                for half in 0..2 {
                    let sb = j + 8 * half;
                    let mut s: [__m512i; C] =
                        std::array::from_fn(|c| _mm512_set1_epi32(bias[c][sb]));
                    for i in 0..4 {
                        let q = 4 * j + i;
                        let low = match half {
                            0 => lo[i],
                            _ => _mm512_srli_epi16::<4>(lo[i]),
                        };
                        let high =
                            _mm512_gf2p8affine_epi64_epi8::<0>(hi[i], pair[q / 16 + 2 * half]);
                        let u = _mm512_ternarylogic_epi32::<LOW_OR>(low, high, m4);
                        for c in 0..C {
                            let a = y[c][b].qs.as_ptr().add(4 * q + 128 * half);
                            let a = _mm512_set1_epi32(a.cast::<i32>().read_unaligned());
                            s[c] = _mm512_dpbusd_epi32(s[c], u, a);
                        }
                    }
                    let sc = _mm_unpacklo_epi64(
                        _mm_loadl_epi64(g0.scales[sb].as_ptr().cast()),
                        _mm_loadl_epi64(g1.scales[sb].as_ptr().cast()),
                    );
                    let sc = _mm512_cvtepi8_epi32(sc);
                    for c in 0..C {
                        isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(s[c], sc));
                    }
                }
            }
            let d = _mm256_inserti128_si256::<1>(
                _mm256_castsi128_si256(_mm_loadu_si128(g0.d.as_ptr().cast())),
                _mm_loadu_si128(g1.d.as_ptr().cast()),
            );
            let dw = _mm512_cvtph_ps(d);
            for c in 0..C {
                let dd = _mm512_mul_ps(dw, _mm512_set1_ps(y[c][b].d));
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), dd, acc[c]);
            }
        }
        std::array::from_fn(|c| {
            let mut o = [0f32; 2 * ROWS];
            _mm512_storeu_ps(o.as_mut_ptr(), acc[c]);
            o
        })
    }
}
