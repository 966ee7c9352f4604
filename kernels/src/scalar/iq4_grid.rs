//! The 16-entry non-linear grid shared by IQ4_NL and IQ4_XS (ggml's
//! `kvalues_iq4nl`), and the nearest-entry search over it.

/// The grid, ascending.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Index of the grid entry nearest to `x` (ties to the lower entry), by
/// bisection: ggml's `best_index_int8`.
#[inline]
pub fn best_index(values: &[i8; 16], x: f32) -> u8 {
    if x <= values[0] as f32 {
        return 0;
    }
    if x >= values[15] as f32 {
        return 15;
    }
    let (mut ml, mut mu) = (0usize, 15usize);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < values[mav] as f32 {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - (values[mu - 1] as f32) < values[mu] as f32 - x {
        (mu - 1) as u8
    } else {
        mu as u8
    }
}
