//! x86-64 tiers. Entry points are safe functions that call `#[target_feature]`
//! bodies; the table in `isa` only hands them out when the CPU has the feature.

pub mod avx2;
pub mod avx512;
