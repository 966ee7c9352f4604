//! Per-tensor type recipes: which ggml type each tensor is written in.
//!
//! The `q4_0` and `q4_k_m` mixes follow llama-quantize's rules:
//! - `output.weight` → Q6_K; `token_embd.weight` → Q4_K (the output is not tied);
//! - `attn_v` / `attn_qkv` of layer i → Q6_K when `use_more_bits(i, n_layer)`;
//! - every `ffn_down*` (routed and shared) of layer i → Q6_K when `use_more_bits(i, n_layer)`;
//! - every other quantizable matrix → Q4_K;
//! - with exactly 8 experts (the `tiny` preset) llama-quantize also bumps
//!   `attn_v` / `attn_qkv` / `attn_k` to Q8_0 and, in Q4_K_M, `attn_output` to
//!   Q5_K; these apply to `q4_0` and `q4_k_m` (the real model has 256 experts);
//! - a row length that is not a whole number of blocks falls back
//!   Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0, Q2_K/Q3_K → Q4_0, IQ4_XS → IQ4_NL,
//!   and to F16 when even the 32-block fallback does not fit.
//!
//! Norms, the router, the conv taps, `ssm_a`, `ssm_dt.bias` and the diffusion
//! vectors are F32 in every recipe.

use std::fmt;
use std::str::FromStr;

use kernels::GgmlType;

use super::tensors::{Role, TensorSpec};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recipe {
    F32,
    F16,
    Bf16,
    Q8_0,
    Q4_0,
    Q4KM,
    /// Q4_K_M routed experts, every other matrix Q8_0.
    Q4KMHq,
    /// IQ4_XS routed experts, every other matrix Q8_0.
    Iq4XsExpsHq,
    /// llama-quantize's Q6_K and IQ4_XS mixes.
    Q6K,
    Iq4Xs,
    /// The APEX MiniPlus mix: routed experts Q3_K, shared expert Q5_K, output
    /// Q6_K, token embedding Q4_K, GDN output gate (`attn_gate`) Q8_0, the
    /// remaining attention / GDN projections Q6_K.
    ApexMiniPlus,
}

impl Recipe {
    pub const ALL: [Recipe; 11] = [
        Recipe::F32,
        Recipe::F16,
        Recipe::Bf16,
        Recipe::Q8_0,
        Recipe::Q4_0,
        Recipe::Q4KM,
        Recipe::Q6K,
        Recipe::Iq4Xs,
        Recipe::Q4KMHq,
        Recipe::Iq4XsExpsHq,
        Recipe::ApexMiniPlus,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Recipe::F32 => "f32",
            Recipe::F16 => "f16",
            Recipe::Bf16 => "bf16",
            Recipe::Q8_0 => "q8_0",
            Recipe::Q4_0 => "q4_0",
            Recipe::Q4KM => "q4_k_m",
            Recipe::Q6K => "q6_k",
            Recipe::Iq4Xs => "iq4_xs",
            Recipe::Q4KMHq => "q4_k_m-hq",
            Recipe::Iq4XsExpsHq => "iq4_xs-exps-hq",
            Recipe::ApexMiniPlus => "apex-miniplus",
        }
    }

    /// `general.file_type` (llama_ftype) of the mix: the ftype llama.cpp
    /// would report for the dominant type.
    pub fn file_type(self) -> u32 {
        match self {
            Recipe::F32 => 0,
            Recipe::F16 => 1,
            Recipe::Q4_0 => 2,
            Recipe::Q8_0 => 7,
            Recipe::Q4KM | Recipe::Q4KMHq => 15,
            Recipe::Q6K => 18,
            Recipe::Iq4Xs | Recipe::Iq4XsExpsHq => 30,
            Recipe::Bf16 => 32,
            // Q3_K experts dominate: LLAMA_FTYPE_MOSTLY_Q3_K_M.
            Recipe::ApexMiniPlus => 12,
        }
    }

    /// The mix's default type: what `clover quantize --pure` gives every
    /// quantizable tensor (llama-quantize's `default_type` of the ftype).
    pub fn default_type(self) -> GgmlType {
        match self {
            Recipe::F32 => GgmlType::F32,
            Recipe::F16 => GgmlType::F16,
            Recipe::Bf16 => GgmlType::BF16,
            Recipe::Q8_0 => GgmlType::Q8_0,
            Recipe::Q4_0 => GgmlType::Q4_0,
            Recipe::Q4KM | Recipe::Q4KMHq => GgmlType::Q4_K,
            Recipe::Q6K => GgmlType::Q6_K,
            Recipe::Iq4Xs | Recipe::Iq4XsExpsHq => GgmlType::IQ4_XS,
            Recipe::ApexMiniPlus => GgmlType::Q3_K,
        }
    }

    /// The type of tensor `t` in a model of `n_layer` blocks, `n_expert`
    /// routed experts and `n_gqa` query heads per KV head (llama-quantize's
    /// rules for these mixes without an importance matrix).
    pub fn type_for(
        self,
        t: &TensorSpec,
        n_layer: usize,
        n_expert: usize,
        n_gqa: usize,
    ) -> GgmlType {
        self.type_for_with(t, n_layer, n_expert, n_gqa, false)
    }

    /// [`Recipe::type_for`], where `has_imatrix` says whether the quantizer
    /// holds an importance matrix (two of llama-quantize's rules for the
    /// first eighth of the layers' `ffn_down` depend on it).
    pub fn type_for_with(
        self,
        t: &TensorSpec,
        n_layer: usize,
        n_expert: usize,
        n_gqa: usize,
        has_imatrix: bool,
    ) -> GgmlType {
        if !t.role.is_quantizable() {
            return GgmlType::F32;
        }
        let layer = t.layer.unwrap_or(0);
        let more_bits = use_more_bits(layer, n_layer);
        let target = match self {
            Recipe::F32 => return GgmlType::F32,
            Recipe::F16 => return GgmlType::F16,
            Recipe::Bf16 => return GgmlType::BF16,
            Recipe::Q8_0 => GgmlType::Q8_0,
            Recipe::Q4_0 => match t.role {
                Role::Output => output_type(t, GgmlType::Q4_0),
                Role::AttnV | Role::Qkv | Role::AttnK if n_expert == 8 => GgmlType::Q8_0,
                // "Guard against craziness" in early ffn_down, with an imatrix only.
                Role::DownExps | Role::DownShexp if has_imatrix && layer < n_layer / 8 => {
                    GgmlType::Q4_1
                }
                _ => GgmlType::Q4_0,
            },
            Recipe::Q4KM => match t.role {
                Role::AttnV | Role::Qkv | Role::AttnK if n_expert == 8 => GgmlType::Q8_0,
                Role::AttnOutput if n_expert == 8 => GgmlType::Q5_K,
                _ => q4_k_m(t, more_bits),
            },
            Recipe::Q6K => match t.role {
                Role::Output => output_type(t, GgmlType::Q6_K),
                Role::AttnV | Role::Qkv | Role::AttnK if n_expert == 8 => GgmlType::Q8_0,
                _ => GgmlType::Q6_K,
            },
            Recipe::Iq4Xs => match t.role {
                Role::Output => output_type(t, GgmlType::IQ4_XS),
                Role::AttnV | Role::Qkv if n_expert == 8 => GgmlType::Q8_0,
                Role::AttnV | Role::Qkv if n_gqa >= 4 => GgmlType::Q5_K,
                Role::AttnK if n_expert == 8 => GgmlType::Q8_0,
                Role::AttnOutput if n_expert == 8 => GgmlType::Q5_K,
                Role::DownExps | Role::DownShexp if layer < n_layer / 8 && !has_imatrix => {
                    GgmlType::Q5_K
                }
                _ => GgmlType::IQ4_XS,
            },
            Recipe::Q4KMHq => match t.role.is_routed_expert() {
                true => q4_k_m(t, more_bits),
                false => GgmlType::Q8_0,
            },
            Recipe::Iq4XsExpsHq => match t.role.is_routed_expert() {
                true => GgmlType::IQ4_XS,
                false => GgmlType::Q8_0,
            },
            Recipe::ApexMiniPlus => match t.role {
                Role::GateExps | Role::UpExps | Role::DownExps => GgmlType::Q3_K,
                Role::GateShexp | Role::UpShexp | Role::DownShexp => GgmlType::Q5_K,
                Role::Output => GgmlType::Q6_K,
                Role::TokenEmbd => GgmlType::Q4_K,
                Role::AttnGate => GgmlType::Q8_0,
                _ => GgmlType::Q6_K,
            },
        };
        fallback(target, t.row_len())
    }
}

impl fmt::Display for Recipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Recipe {
    type Err = String;
    fn from_str(s: &str) -> Result<Recipe, String> {
        Recipe::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Recipe::ALL.iter().map(|r| r.name()).collect();
                format!(
                    "unknown recipe '{s}' (expected one of {})",
                    names.join(", ")
                )
            })
    }
}

/// llama-quantize's "more bits" layers: the first and last eighth, and every
/// third layer in between.
pub fn use_more_bits(i_layer: usize, n_layers: usize) -> bool {
    let (i, n) = (i_layer as i64, n_layers as i64);
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

fn q4_k_m(t: &TensorSpec, more_bits: bool) -> GgmlType {
    match t.role {
        Role::Output => output_type(t, GgmlType::Q4_K),
        Role::AttnV | Role::Qkv | Role::DownExps | Role::DownShexp if more_bits => GgmlType::Q6_K,
        _ => GgmlType::Q4_K,
    }
}

/// llama-quantize's output-tensor rule for the non-Q8_0 mixes: Q6_K, or Q8_0
/// when the row is not a whole number of the mix's blocks.
fn output_type(t: &TensorSpec, mix_default: GgmlType) -> GgmlType {
    if !(t.row_len() as u64).is_multiple_of(mix_default.block_size() as u64) {
        GgmlType::Q8_0
    } else {
        GgmlType::Q6_K
    }
}

/// The type llama-quantize falls back to when a row of `ne0` elements is not
/// a whole number of `target` blocks.
pub fn fallback(target: GgmlType, ne0: usize) -> GgmlType {
    if ne0.is_multiple_of(target.block_size()) {
        return target;
    }
    let second = match target {
        GgmlType::IQ4_XS => GgmlType::IQ4_NL,
        GgmlType::Q2_K | GgmlType::Q3_K => GgmlType::Q4_0,
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        other => other,
    };
    if ne0.is_multiple_of(second.block_size()) {
        second
    } else {
        GgmlType::F16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_more_bits_matches_llama_quantize_for_forty_layers() {
        let picked: Vec<usize> = (0..40).filter(|&i| use_more_bits(i, 40)).collect();
        // n/8 = 5, 7n/8 = 35: layers 0..5, 35..40 and 5 + 3k + 2.
        assert_eq!(
            picked,
            vec![0, 1, 2, 3, 4, 7, 10, 13, 16, 19, 22, 25, 28, 31, 34, 35, 36, 37, 38, 39]
        );
    }

    #[test]
    fn fallback_follows_the_llama_quantize_chain() {
        assert_eq!(fallback(GgmlType::Q4_K, 512), GgmlType::Q4_K);
        assert_eq!(fallback(GgmlType::Q4_K, 64), GgmlType::Q5_0);
        assert_eq!(fallback(GgmlType::Q6_K, 96), GgmlType::Q8_0);
        assert_eq!(fallback(GgmlType::IQ4_XS, 128), GgmlType::IQ4_NL);
        assert_eq!(fallback(GgmlType::Q3_K, 32), GgmlType::Q4_0);
        assert_eq!(fallback(GgmlType::Q4_K, 16), GgmlType::F16);
        assert_eq!(fallback(GgmlType::Q8_0, 16), GgmlType::F16);
    }
}
