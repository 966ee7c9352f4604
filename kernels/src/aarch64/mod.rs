//! aarch64 tiers.

pub mod neon;
