//! Weights repacked eight rows at a time for the products (lane r of every
//! vector = row r of a group of eight), built once at load: IQ4_XS
//! ([`crate::iq4_r8`]), Q4_K ([`crate::q4k_r8`]), Q5_K ([`crate::q5k_r8`]), Q3_K ([`crate::q3k_r8`]),
//! Q6_K ([`crate::q6k_r8`]) and Q8_0 ([`crate::q80_r8`]). Each type's module
//! defines the layout and, in plain Rust, the sum its kernels reproduce bit
//! for bit for any number of activation rows.

use crate::sig::GemmFn;
use crate::GgmlType;

pub use crate::r8::ROWS;

/// Bytes of one group (one 256-weight block of eight rows) of `ty`.
fn group_bytes(ty: GgmlType) -> Option<usize> {
    match ty {
        GgmlType::IQ4_XS => Some(size_of::<crate::iq4_r8::Group>()),
        GgmlType::Q4_K => Some(size_of::<crate::q4k_r8::Group>()),
        GgmlType::Q3_K => Some(size_of::<crate::q3k_r8::Group>()),
        GgmlType::Q6_K => Some(size_of::<crate::q6k_r8::Group>()),
        GgmlType::Q5_K => Some(size_of::<crate::q5k_r8::Group>()),
        GgmlType::Q8_0 => Some(size_of::<crate::q80_r8::Group>()),
        _ => None,
    }
}

/// Whether an `n_out × n_in` matrix of `ty` can be repacked.
pub fn packable(ty: GgmlType, n_in: usize, n_out: usize) -> bool {
    group_bytes(ty).is_some()
        && n_in > 0
        && n_in.is_multiple_of(256)
        && n_out > 0
        && n_out.is_multiple_of(ROWS)
}

/// Bytes of the repacked form of a packable matrix (0 for other types).
pub fn packed_bytes(ty: GgmlType, n_in: usize, n_out: usize) -> usize {
    n_out / ROWS * (n_in / 256) * group_bytes(ty).unwrap_or(0)
}

/// Repacks `n_out` rows of `n_in` weights of `ty` (`src`, the file's bytes)
/// into `dst` ([`packed_bytes`] long, 2-byte aligned).
///
/// # Panics
/// When the matrix is not [`packable`] or a length is wrong.
pub fn repack(ty: GgmlType, n_in: usize, n_out: usize, src: &[u8], dst: &mut [u8]) {
    assert!(
        packable(ty, n_in, n_out),
        "{ty} {n_out} x {n_in} is not packable"
    );
    match ty {
        GgmlType::IQ4_XS => crate::iq4_r8::repack(n_in, n_out, src, dst),
        GgmlType::Q3_K => crate::q3k_r8::repack(n_in, n_out, src, dst),
        GgmlType::Q6_K => crate::q6k_r8::repack(n_in, n_out, src, dst),
        GgmlType::Q5_K => crate::q5k_r8::repack(n_in, n_out, src, dst),
        GgmlType::Q8_0 => crate::q80_r8::repack(n_in, n_out, src, dst),
        _ => crate::q4k_r8::repack(n_in, n_out, src, dst),
    }
}

/// The plain-Rust definition of the repacked product of `ty`.
pub fn gemm_ref(ty: GgmlType) -> Option<GemmFn> {
    match ty {
        GgmlType::IQ4_XS => Some(crate::iq4_r8::gemm_ref as GemmFn),
        GgmlType::Q4_K => Some(crate::q4k_r8::gemm_ref as GemmFn),
        GgmlType::Q3_K => Some(crate::q3k_r8::gemm_ref as GemmFn),
        GgmlType::Q6_K => Some(crate::q6k_r8::gemm_ref as GemmFn),
        GgmlType::Q5_K => Some(crate::q5k_r8::gemm_ref as GemmFn),
        GgmlType::Q8_0 => Some(crate::q80_r8::gemm_ref as GemmFn),
        _ => None,
    }
}

#[cfg(test)]
#[path = "repack_tests.rs"]
mod tests;
