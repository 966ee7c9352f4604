//! The ggml tensor types: ids as stored in GGUF, block geometry, names.
//!
//! A tensor row of `n` elements of type `t` holds `n / t.block_size()` blocks of
//! `t.type_size()` bytes each; `n` must be a multiple of the block size.

use std::fmt;

/// Every tensor type clover can read, compute with, or use as an activation type.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ4_NL = 20,
    IQ4_XS = 23,
    BF16 = 30,
}

/// A type id that is valid in ggml but that clover does not implement, or an id
/// ggml does not know at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnsupportedType {
    pub id: u32,
    /// ggml's name for the id, when it has one.
    pub name: Option<&'static str>,
}

impl fmt::Display for UnsupportedType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name {
            Some(name) => write!(f, "unsupported tensor type {name} (id {})", self.id),
            None => write!(f, "unknown tensor type id {}", self.id),
        }
    }
}

impl std::error::Error for UnsupportedType {}

/// ggml's names for the type ids clover does not implement.
const OTHER_GGML_TYPES: &[(u32, &str)] = &[
    (4, "Q4_2"),
    (5, "Q4_3"),
    (16, "IQ2_XXS"),
    (17, "IQ2_XS"),
    (18, "IQ3_XXS"),
    (19, "IQ1_S"),
    (21, "IQ3_S"),
    (22, "IQ2_S"),
    (24, "I8"),
    (25, "I16"),
    (26, "I32"),
    (27, "I64"),
    (28, "F64"),
    (29, "IQ1_M"),
    (31, "Q4_0_4_4"),
    (32, "Q4_0_4_8"),
    (33, "Q4_0_8_8"),
    (34, "TQ1_0"),
    (35, "TQ2_0"),
    (36, "IQ4_NL_4_4"),
    (37, "IQ4_NL_4_8"),
    (38, "IQ4_NL_8_8"),
    (39, "MXFP4"),
];

impl GgmlType {
    /// All supported types, in id order.
    pub const ALL: [GgmlType; 17] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q8_K,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
        GgmlType::BF16,
    ];

    /// The type with GGUF id `id`, or why it cannot be used.
    pub fn from_id(id: u32) -> Result<GgmlType, UnsupportedType> {
        if let Some(t) = GgmlType::ALL.iter().find(|t| **t as u32 == id) {
            return Ok(*t);
        }
        let name = OTHER_GGML_TYPES
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, n)| *n);
        Err(UnsupportedType { id, name })
    }

    /// The GGUF id.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// ggml's name ("Q4_K", "F32", ...).
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q5_0 => "Q5_0",
            GgmlType::Q5_1 => "Q5_1",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Q8_1 => "Q8_1",
            GgmlType::Q2_K => "Q2_K",
            GgmlType::Q3_K => "Q3_K",
            GgmlType::Q4_K => "Q4_K",
            GgmlType::Q5_K => "Q5_K",
            GgmlType::Q6_K => "Q6_K",
            GgmlType::Q8_K => "Q8_K",
            GgmlType::IQ4_NL => "IQ4_NL",
            GgmlType::IQ4_XS => "IQ4_XS",
            GgmlType::BF16 => "BF16",
        }
    }

    /// Parses a name as written by `name()`, case-insensitively.
    pub fn from_name(s: &str) -> Option<GgmlType> {
        GgmlType::ALL
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(s))
    }

    /// Elements per block.
    pub fn block_size(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q8_1
            | GgmlType::IQ4_NL => 32,
            GgmlType::Q2_K
            | GgmlType::Q3_K
            | GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
            | GgmlType::Q8_K
            | GgmlType::IQ4_XS => 256,
        }
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q4_0 => 18,
            GgmlType::Q4_1 => 20,
            GgmlType::Q5_0 => 22,
            GgmlType::Q5_1 => 24,
            GgmlType::Q8_0 => 34,
            GgmlType::Q8_1 => 36,
            GgmlType::Q2_K => 84,
            GgmlType::Q3_K => 110,
            GgmlType::Q4_K => 144,
            GgmlType::Q5_K => 176,
            GgmlType::Q6_K => 210,
            GgmlType::Q8_K => 292,
            GgmlType::IQ4_NL => 18,
            GgmlType::IQ4_XS => 136,
        }
    }

    /// Bytes taken by `n` elements, or `None` when `n` is not a whole number of
    /// blocks or the size overflows.
    pub fn row_bytes(self, n: u64) -> Option<u64> {
        let bs = self.block_size() as u64;
        if !n.is_multiple_of(bs) {
            return None;
        }
        (n / bs).checked_mul(self.type_size() as u64)
    }

    /// Bits per weight, including scales.
    pub fn bits_per_weight(self) -> f64 {
        self.type_size() as f64 * 8.0 / self.block_size() as f64
    }

    /// The activation type this weight type's dot product consumes (docs/DESIGN.md §2.6):
    /// Q8_K for K-quants and IQ4_XS, Q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL, Q8_1 for
    /// Q4_1/Q5_1, and the weight's own type for F32/F16/BF16.
    pub fn vec_dot_type(self) -> GgmlType {
        match self {
            GgmlType::F32 => GgmlType::F32,
            GgmlType::F16 => GgmlType::F16,
            GgmlType::BF16 => GgmlType::BF16,
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL => GgmlType::Q8_0,
            GgmlType::Q4_1 | GgmlType::Q5_1 => GgmlType::Q8_1,
            GgmlType::Q8_1 => GgmlType::Q8_1,
            // The K-quant arm as in block_size above: each match maps the same variants to a
            // different property.
            GgmlType::Q2_K
            | GgmlType::Q3_K
            | GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
            | GgmlType::Q8_K
            | GgmlType::IQ4_XS => GgmlType::Q8_K,
        }
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_from_id() {
        for t in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(t.id()), Ok(t));
            assert_eq!(GgmlType::from_name(t.name()), Some(t));
        }
    }

    #[test]
    fn unsupported_ids_are_named_when_ggml_knows_them() {
        let e = GgmlType::from_id(16).unwrap_err();
        assert_eq!(e.name, Some("IQ2_XXS"));
        assert_eq!(GgmlType::from_id(9999).unwrap_err().name, None);
    }

    #[test]
    fn row_bytes_rejects_partial_blocks() {
        assert_eq!(GgmlType::Q4_K.row_bytes(512), Some(288));
        assert_eq!(GgmlType::Q4_K.row_bytes(100), None);
        assert_eq!(GgmlType::F32.row_bytes(u64::MAX), None);
    }
}
