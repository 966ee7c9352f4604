//! The 16-entry non-linear grid shared by IQ4_NL and IQ4_XS (ggml's
//! `kvalues_iq4nl`), and the nearest-entry search over it.

/// The grid, ascending.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Index of the grid entry nearest to `x` (the upper one on a tie), by
/// bisection: ggml's `best_index_int8` over the 16 entries.
#[inline]
pub fn best_index(values: &[i8; 16], x: f32) -> u8 {
    super::legacy_search::best_index_int8(values, x) as u8
}
