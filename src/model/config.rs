//! Hyper-parameters of a `qwen35moe` / `clover_moe` model, read from GGUF
//! metadata (docs/DESIGN.md §1.1). Keys are `ARCH.*` with `ARCH = general.architecture`.
//!
//! Head dims are read from `attention.key_length` / `value_length` (never
//! `embedding_length / head_count`). `block_count` includes exported MTP blocks
//! (`nextn_predict_layers`, e.g. 41 = 40 + `blk.40`); those are not executed.
//! Which layers are Gated DeltaNet comes from `attention.recurrent_layers`
//! when the file has it (llama.cpp's converter writes it), else layer `i` is
//! full attention iff `(i + 1) % full_attention_interval == 0`.

use thiserror::Error;

use crate::gguf::{Value, ValueType};

/// The two architectures this engine runs (identical autoregressive math),
/// as `general.architecture` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Clover: qwen35moe plus the block-diffusion tensors and keys.
    CloverMoe,
    /// Plain Qwen3.5/3.6 MoE as llama.cpp loads it.
    Qwen35Moe,
}

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::CloverMoe => "clover_moe",
            Arch::Qwen35Moe => "qwen35moe",
        }
    }

    pub fn is_clover(self) -> bool {
        self == Arch::CloverMoe
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Arch {
    type Err = String;
    fn from_str(s: &str) -> Result<Arch, String> {
        match s {
            "clover_moe" => Ok(Arch::CloverMoe),
            "qwen35moe" => Ok(Arch::Qwen35Moe),
            _ => Err(format!(
                "unknown architecture '{s}' (expected clover_moe or qwen35moe)"
            )),
        }
    }
}

/// What a layer's token mixer is (docs/DESIGN.md §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    /// Gated DeltaNet linear attention.
    DeltaNet,
    /// Gated full attention.
    Attention,
}

#[derive(Debug, Error, PartialEq)]
pub enum ConfigError {
    #[error("missing metadata key {0}")]
    Missing(String),
    #[error("metadata key {key} has the wrong type: expected {expected}, found {found}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: String,
    },
    #[error("metadata key {key}: {reason}")]
    Invalid { key: String, reason: String },
    #[error("general.architecture is {0:?}; clover runs clover_moe and qwen35moe")]
    UnknownArch(String),
}

/// Every hyper-parameter the forward pass needs.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    /// Executed layers (MTP blocks excluded).
    pub n_layer: usize,
    /// `block_count` as stored, MTP blocks included.
    pub n_layer_all: usize,
    pub context_length: usize,
    /// d_model.
    pub n_embd: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    /// Full-attention head dim of q and k.
    pub head_dim: usize,
    /// Full-attention head dim of v (equal to `head_dim`, validated).
    pub head_dim_v: usize,
    /// Epsilon of every RMSNorm and of the GDN q/k L2 norm.
    pub rms_eps: f32,
    pub rope_base: f32,
    /// Rotated dims of each head (NeoX pairs (i, i + n_rot/2)).
    pub n_rot: usize,
    /// `rope.dimension_sections` (docs/DESIGN.md §2.4): which pairs turn with the
    /// text position. `None` when the file has no such key: every pair does.
    pub rope_sections: Option<[u32; 4]>,
    pub n_expert: usize,
    pub n_expert_used: usize,
    pub n_ff_exp: usize,
    pub n_ff_shexp: usize,
    /// Causal conv taps (4).
    pub ssm_conv_kernel: usize,
    /// GDN head dim, for keys and values (128).
    pub ssm_head_dim: usize,
    /// GDN key heads (16).
    pub ssm_n_k_heads: usize,
    /// GDN value heads (32).
    pub ssm_n_v_heads: usize,
    pub full_attention_interval: usize,
    pub layer_kinds: Vec<LayerKind>,
    /// Right (look-ahead) conv taps of the diffusion path (`clover_moe` only;
    /// 0 when absent: the binder then takes it from `ssm_conv1d.weight_right`).
    pub ssm_conv_kernel_right: usize,
    /// Diffusion draft block: 1 anchor + `block_size − 1` masks (16).
    pub diffusion_block_size: usize,
    /// `tokenizer.ggml.mask_token_id`, the `<|mask|>` token of the diffusion path.
    pub mask_token_id: Option<u32>,
}

fn get_value<'v, F>(get: &F, key: &str) -> Result<&'v Value, ConfigError>
where
    F: Fn(&str) -> Option<&'v Value>,
{
    get(key).ok_or_else(|| ConfigError::Missing(key.to_string()))
}

fn as_usize(key: &str, v: &Value) -> Result<usize, ConfigError> {
    let n = v.as_u64().ok_or_else(|| ConfigError::WrongType {
        key: key.to_string(),
        expected: "unsigned integer",
        found: v.value_type().name().to_string(),
    })?;
    usize::try_from(n).map_err(|_| ConfigError::Invalid {
        key: key.to_string(),
        reason: format!("{n} does not fit in usize"),
    })
}

fn as_f32(key: &str, v: &Value) -> Result<f32, ConfigError> {
    match v {
        Value::F32(x) => Ok(*x),
        Value::F64(x) => Ok(*x as f32),
        _ => Err(ConfigError::WrongType {
            key: key.to_string(),
            expected: "float",
            found: v.value_type().name().to_string(),
        }),
    }
}

fn invalid(key: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        reason: reason.into(),
    }
}

/// `rope.dimension_sections` as llama.cpp reads it: an array of exactly four
/// int32 or uint32. Refused where ggml would abort or misread: negative
/// sections, none of the first three positive, or a sum beyond the head dim.
fn rope_sections(key: &str, v: &Value, head_dim: usize) -> Result<[u32; 4], ConfigError> {
    let wrong_type = |found: String| ConfigError::WrongType {
        key: key.to_string(),
        expected: "array of 4 int32 or uint32",
        found,
    };
    let Value::Array(ty, items) = v else {
        return Err(wrong_type(v.value_type().name().to_string()));
    };
    if !matches!(ty, ValueType::I32 | ValueType::U32) {
        return Err(wrong_type(format!("array of {}", ty.name())));
    }
    if items.len() != 4 {
        return Err(invalid(
            key,
            format!("has {} entries; expected 4", items.len()),
        ));
    }
    let mut s = [0u32; 4];
    for (slot, item) in s.iter_mut().zip(items) {
        *slot = item
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| invalid(key, format!("{v} has an entry outside 0..=2^31-1")))?;
    }
    let sum: u64 = s.iter().map(|&x| x as u64).sum();
    if s[0] == 0 && s[1] == 0 && s[2] == 0 {
        return Err(invalid(
            key,
            format!("{s:?}: none of the first three sections is positive"),
        ));
    }
    if sum > head_dim as u64 {
        return Err(invalid(
            key,
            format!("{s:?} sums to {sum}, more than the head dim {head_dim}"),
        ));
    }
    Ok(s)
}

/// The mixer of each of the `n_layer` trunk layers. With
/// `attention.recurrent_layers` (`recurrent`: its key and value), as
/// llama.cpp reads it: one flag per block, MTP blocks included (an array of
/// bool, uint32 or int32 of `block_count` entries, or one scalar for every
/// block), a set flag meaning Gated DeltaNet. Without it, layer `i` is full
/// attention iff `(i + 1) % interval == 0`.
pub fn trunk_layer_kinds(
    recurrent: Option<(&str, &Value)>,
    interval: usize,
    n_layer: usize,
    n_layer_all: usize,
) -> Result<Vec<LayerKind>, ConfigError> {
    let kind = |gdn: bool| match gdn {
        true => LayerKind::DeltaNet,
        false => LayerKind::Attention,
    };
    let Some((k, v)) = recurrent else {
        return Ok((0..n_layer)
            .map(|i| kind(!(i + 1).is_multiple_of(interval)))
            .collect());
    };
    let flag = |v: &Value| match v {
        Value::Bool(b) => Some(*b),
        Value::U32(_) | Value::I32(_) => v.as_i64().map(|n| n != 0),
        _ => None,
    };
    let wrong_type = || ConfigError::WrongType {
        key: k.to_string(),
        expected: "bool, uint32 or int32, or an array of them",
        found: match v {
            Value::Array(ty, _) => format!("array of {}", ty.name()),
            _ => v.value_type().name().to_string(),
        },
    };
    let flags: Vec<bool> = match v {
        Value::Array(_, items) => {
            if items.len() != n_layer_all {
                return Err(invalid(
                    k,
                    format!(
                        "has {} entries; expected block_count {n_layer_all}",
                        items.len()
                    ),
                ));
            }
            items
                .iter()
                .map(flag)
                .collect::<Option<_>>()
                .ok_or_else(wrong_type)?
        }
        _ => vec![flag(v).ok_or_else(wrong_type)?; n_layer_all],
    };
    Ok(flags[..n_layer].iter().map(|&f| kind(f)).collect())
}

/// Hard caps against hostile metadata (sizes far beyond any real model).
const MAX_DIM: usize = 1 << 20;
const MAX_LAYERS: usize = 1024;

impl ModelConfig {
    /// Reads and validates every hyper-parameter. `get` looks a metadata key up.
    pub fn from_metadata<'v, F>(get: F) -> Result<ModelConfig, ConfigError>
    where
        F: Fn(&str) -> Option<&'v Value>,
    {
        let arch_key = "general.architecture";
        let arch_v = get_value(&get, arch_key)?;
        let arch_s = arch_v.as_str().ok_or_else(|| ConfigError::WrongType {
            key: arch_key.to_string(),
            expected: "string",
            found: arch_v.value_type().name().to_string(),
        })?;
        let arch = match arch_s {
            "clover_moe" => Arch::CloverMoe,
            "qwen35moe" => Arch::Qwen35Moe,
            other => return Err(ConfigError::UnknownArch(other.to_string())),
        };
        let a = arch.name();
        let key = |k: &str| format!("{a}.{k}");
        let req_usize = |k: &str| -> Result<usize, ConfigError> {
            let k = key(k);
            let n = as_usize(&k, get_value(&get, &k)?)?;
            if n == 0 || n > MAX_DIM {
                return Err(invalid(&k, format!("{n} is outside 1..={MAX_DIM}")));
            }
            Ok(n)
        };
        let opt_usize = |k: &str, default: usize| -> Result<usize, ConfigError> {
            let k = key(k);
            match get(&k) {
                None => Ok(default),
                Some(v) => as_usize(&k, v),
            }
        };
        let req_f32 = |k: &str| -> Result<f32, ConfigError> {
            let k = key(k);
            as_f32(&k, get_value(&get, &k)?)
        };

        let n_layer_all = req_usize("block_count")?;
        if n_layer_all > MAX_LAYERS {
            return Err(invalid(&key("block_count"), "more than 1024 layers"));
        }
        let nextn = opt_usize("nextn_predict_layers", 0)?;
        if nextn >= n_layer_all {
            return Err(invalid(
                &key("nextn_predict_layers"),
                format!("{nextn} MTP layers leave no trunk of {n_layer_all} blocks"),
            ));
        }
        let n_layer = n_layer_all - nextn;
        let context_length = req_usize("context_length")?;
        let n_embd = req_usize("embedding_length")?;
        let n_head = req_usize("attention.head_count")?;
        let n_head_kv = req_usize("attention.head_count_kv")?;
        if !n_head.is_multiple_of(n_head_kv) {
            return Err(invalid(
                &key("attention.head_count_kv"),
                format!("{n_head} query heads are not a multiple of {n_head_kv} KV heads"),
            ));
        }
        let head_dim = req_usize("attention.key_length")?;
        let head_dim_v = req_usize("attention.value_length")?;
        if head_dim != head_dim_v {
            return Err(invalid(
                &key("attention.value_length"),
                format!("{head_dim_v} differs from key_length {head_dim}"),
            ));
        }
        let rms_eps = req_f32("attention.layer_norm_rms_epsilon")?;
        if !(rms_eps.is_finite() && rms_eps >= 0.0) {
            return Err(invalid(
                &key("attention.layer_norm_rms_epsilon"),
                format!("{rms_eps} is not a finite non-negative number"),
            ));
        }
        let rope_base = req_f32("rope.freq_base")?;
        if !(rope_base.is_finite() && rope_base > 0.0) {
            return Err(invalid(
                &key("rope.freq_base"),
                format!("{rope_base} is not positive"),
            ));
        }
        let n_rot = req_usize("rope.dimension_count")?;
        if n_rot > head_dim || !n_rot.is_multiple_of(2) {
            return Err(invalid(
                &key("rope.dimension_count"),
                format!("{n_rot} must be even and at most the head dim {head_dim}"),
            ));
        }
        let sections_key = key("rope.dimension_sections");
        let rope_sections = match get(&sections_key) {
            None => None,
            Some(v) => Some(rope_sections(&sections_key, v, head_dim)?),
        };
        let n_expert = req_usize("expert_count")?;
        let n_expert_used = req_usize("expert_used_count")?;
        if n_expert_used > n_expert {
            return Err(invalid(
                &key("expert_used_count"),
                format!("{n_expert_used} exceeds expert_count {n_expert}"),
            ));
        }
        let n_ff_exp = req_usize("expert_feed_forward_length")?;
        let n_ff_shexp = req_usize("expert_shared_feed_forward_length")?;
        let ssm_conv_kernel = req_usize("ssm.conv_kernel")?;
        let ssm_head_dim = req_usize("ssm.state_size")?;
        let ssm_n_k_heads = req_usize("ssm.group_count")?;
        let ssm_n_v_heads = req_usize("ssm.time_step_rank")?;
        let ssm_inner = req_usize("ssm.inner_size")?;
        if ssm_inner != ssm_n_v_heads * ssm_head_dim {
            return Err(invalid(
                &key("ssm.inner_size"),
                format!(
                    "{ssm_inner} != time_step_rank {ssm_n_v_heads} x state_size {ssm_head_dim}"
                ),
            ));
        }
        if !ssm_n_v_heads.is_multiple_of(ssm_n_k_heads) {
            return Err(invalid(
                &key("ssm.time_step_rank"),
                format!(
                    "{ssm_n_v_heads} value heads are not a multiple of {ssm_n_k_heads} key heads"
                ),
            ));
        }
        let full_attention_interval = opt_usize("full_attention_interval", 4)?;
        if full_attention_interval == 0 {
            return Err(invalid(
                &key("full_attention_interval"),
                "must be at least 1",
            ));
        }
        let recurrent_key = key("attention.recurrent_layers");
        let layer_kinds = trunk_layer_kinds(
            get(&recurrent_key).map(|v| (recurrent_key.as_str(), v)),
            full_attention_interval,
            n_layer,
            n_layer_all,
        )?;
        let ssm_conv_kernel_right = opt_usize("ssm.conv_kernel_right", 0)?;
        if ssm_conv_kernel_right > MAX_DIM {
            return Err(invalid(&key("ssm.conv_kernel_right"), "too large"));
        }
        let diffusion_block_size = opt_usize("diffusion.block_size", 16)?;
        if !(2..=MAX_DIM).contains(&diffusion_block_size) {
            return Err(invalid(
                &key("diffusion.block_size"),
                format!("{diffusion_block_size} is outside 2..={MAX_DIM}"),
            ));
        }
        let mask_key = "tokenizer.ggml.mask_token_id";
        let mask_token_id = match get(mask_key) {
            None => None,
            Some(v) => Some(
                u32::try_from(as_usize(mask_key, v)?)
                    .map_err(|_| invalid(mask_key, "does not fit in 32 bits"))?,
            ),
        };
        Ok(ModelConfig {
            arch,
            n_layer,
            n_layer_all,
            context_length,
            n_embd,
            n_head,
            n_head_kv,
            head_dim,
            head_dim_v,
            rms_eps,
            rope_base,
            n_rot,
            rope_sections,
            n_expert,
            n_expert_used,
            n_ff_exp,
            n_ff_shexp,
            ssm_conv_kernel,
            ssm_head_dim,
            ssm_n_k_heads,
            ssm_n_v_heads,
            full_attention_interval,
            layer_kinds,
            ssm_conv_kernel_right,
            diffusion_block_size,
            mask_token_id,
        })
    }

    /// Drops the last executed layer: used when `blk.{n_layer-1}` turns out to
    /// be an MTP block that `nextn_predict_layers` did not announce.
    pub fn drop_last_layer_as_mtp(&mut self) {
        if self.n_layer > 1 {
            self.n_layer -= 1;
            self.layer_kinds.truncate(self.n_layer);
        }
    }

    /// Channels of the GDN conv / `attn_qkv` output: q, k (key heads) and v.
    pub fn ssm_conv_channels(&self) -> usize {
        2 * self.ssm_n_k_heads * self.ssm_head_dim + self.ssm_inner()
    }

    /// GDN value width: value heads x head dim.
    pub fn ssm_inner(&self) -> usize {
        self.ssm_n_v_heads * self.ssm_head_dim
    }

    pub fn n_attention_layers(&self) -> usize {
        self.layer_kinds
            .iter()
            .filter(|k| **k == LayerKind::Attention)
            .count()
    }

    pub fn n_deltanet_layers(&self) -> usize {
        self.n_layer - self.n_attention_layers()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    pub(crate) fn a3b_metadata(arch: &str) -> HashMap<String, Value> {
        let mut m = HashMap::new();
        m.insert("general.architecture".into(), Value::str(arch));
        let u = |v: u32| Value::U32(v);
        for (k, v) in [
            ("block_count", 41),
            ("context_length", 262144),
            ("embedding_length", 2048),
            ("attention.head_count", 16),
            ("attention.head_count_kv", 2),
            ("attention.key_length", 256),
            ("attention.value_length", 256),
            ("rope.dimension_count", 64),
            ("expert_count", 256),
            ("expert_used_count", 8),
            ("expert_feed_forward_length", 512),
            ("expert_shared_feed_forward_length", 512),
            ("ssm.conv_kernel", 4),
            ("ssm.state_size", 128),
            ("ssm.group_count", 16),
            ("ssm.time_step_rank", 32),
            ("ssm.inner_size", 4096),
            ("full_attention_interval", 4),
            ("nextn_predict_layers", 1),
        ] {
            m.insert(format!("{arch}.{k}"), u(v));
        }
        m.insert(
            format!("{arch}.attention.layer_norm_rms_epsilon"),
            Value::F32(1e-6),
        );
        m.insert(format!("{arch}.rope.freq_base"), Value::F32(1e7));
        m
    }

    fn load(m: &HashMap<String, Value>) -> Result<ModelConfig, ConfigError> {
        ModelConfig::from_metadata(|k| m.get(k))
    }

    #[test]
    fn reads_the_a3b_hyper_parameters_and_skips_the_mtp_block() {
        for arch in ["clover_moe", "qwen35moe"] {
            let c = load(&a3b_metadata(arch)).unwrap();
            assert_eq!(c.n_layer, 40);
            assert_eq!(c.n_layer_all, 41);
            assert_eq!(c.head_dim, 256);
            assert_eq!(c.ssm_conv_channels(), 8192);
            assert_eq!(c.n_attention_layers(), 10);
            assert_eq!(c.n_deltanet_layers(), 30);
            assert_eq!(c.layer_kinds[3], LayerKind::Attention);
            assert_eq!(c.layer_kinds[0], LayerKind::DeltaNet);
            assert_eq!(c.layer_kinds[39], LayerKind::Attention);
        }
    }

    #[test]
    fn missing_key_error_names_the_key() {
        let mut m = a3b_metadata("qwen35moe");
        m.remove("qwen35moe.attention.key_length");
        let e = load(&m).unwrap_err();
        assert_eq!(
            e,
            ConfigError::Missing("qwen35moe.attention.key_length".into())
        );
    }

    #[test]
    fn rejects_inner_size_that_disagrees_with_heads() {
        let mut m = a3b_metadata("clover_moe");
        m.insert("clover_moe.ssm.inner_size".into(), Value::U32(4000));
        let e = load(&m).unwrap_err().to_string();
        assert!(e.contains("clover_moe.ssm.inner_size"), "{e}");
    }

    #[test]
    fn rejects_wrong_value_type_naming_the_key() {
        let mut m = a3b_metadata("clover_moe");
        m.insert("clover_moe.expert_count".into(), Value::str("many"));
        let e = load(&m).unwrap_err().to_string();
        assert!(e.contains("clover_moe.expert_count"), "{e}");
    }

    #[test]
    fn absent_rope_sections_read_as_none() {
        let c = load(&a3b_metadata("qwen35moe")).unwrap();
        assert_eq!(c.rope_sections, None);
    }

    #[test]
    fn reads_rope_sections_from_int32_and_uint32_arrays() {
        let key = "qwen35moe.rope.dimension_sections";
        let mut m = a3b_metadata("qwen35moe");
        m.insert(key.into(), Value::i32s([11, 11, 10, 0]));
        assert_eq!(load(&m).unwrap().rope_sections, Some([11, 11, 10, 0]));
        m.insert(key.into(), Value::u32s([4, 2, 2, 0]));
        assert_eq!(load(&m).unwrap().rope_sections, Some([4, 2, 2, 0]));
    }

    fn sections_error(v: Value) -> String {
        let key = "clover_moe.rope.dimension_sections";
        let mut m = a3b_metadata("clover_moe");
        m.insert(key.into(), v);
        let e = load(&m).unwrap_err().to_string();
        assert!(e.contains(key), "{e}");
        e
    }

    #[test]
    fn rejects_rope_sections_of_the_wrong_length() {
        let e = sections_error(Value::i32s([11, 11, 10]));
        assert!(e.contains("has 3 entries; expected 4"), "{e}");
        let e = sections_error(Value::i32s([8, 8, 8, 8, 0]));
        assert!(e.contains("has 5 entries"), "{e}");
    }

    #[test]
    fn rejects_rope_sections_that_are_not_an_integer_array() {
        let e = sections_error(Value::U32(11));
        assert!(
            e.contains("expected array of 4 int32 or uint32, found u32"),
            "{e}"
        );
        let e = sections_error(Value::f32s([11.0, 11.0, 10.0, 0.0]));
        assert!(e.contains("found array of f32"), "{e}");
        let e = sections_error(Value::strings(["a", "b", "c", "d"]));
        assert!(e.contains("found array of string"), "{e}");
    }

    #[test]
    fn rejects_negative_or_huge_rope_sections() {
        let e = sections_error(Value::i32s([11, -1, 10, 0]));
        assert!(e.contains("outside 0..=2^31-1"), "{e}");
        // A uint32 past i32::MAX is negative to llama.cpp.
        let e = sections_error(Value::u32s([u32::MAX, 1, 1, 0]));
        assert!(e.contains("outside 0..=2^31-1"), "{e}");
        let e = sections_error(Value::i32s([i32::MAX, i32::MAX, i32::MAX, i32::MAX]));
        assert!(e.contains("more than the head dim 256"), "{e}");
    }

    #[test]
    fn rejects_rope_sections_wider_than_the_head_or_with_no_text_section() {
        let e = sections_error(Value::i32s([100, 100, 57, 0]));
        assert!(e.contains("sums to 257, more than the head dim 256"), "{e}");
        let e = sections_error(Value::i32s([0, 0, 0, 4]));
        assert!(
            e.contains("none of the first three sections is positive"),
            "{e}"
        );
        let e = sections_error(Value::i32s([0, 0, 0, 0]));
        assert!(e.contains("none of the first three"), "{e}");
    }

    #[test]
    fn rejects_unknown_architecture() {
        let mut m = a3b_metadata("qwen35moe");
        m.insert("general.architecture".into(), Value::str("llama"));
        assert_eq!(
            load(&m).unwrap_err(),
            ConfigError::UnknownArch("llama".into())
        );
    }

    #[test]
    fn recurrent_layers_decide_the_pattern_over_the_interval() {
        // The converter's array: one flag per block, the MTP block's false.
        let mut m = a3b_metadata("qwen35moe");
        let mut flags = vec![Value::Bool(true); 41];
        for i in [5, 20, 40] {
            flags[i] = Value::Bool(false);
        }
        m.insert(
            "qwen35moe.attention.recurrent_layers".into(),
            Value::Array(ValueType::Bool, flags),
        );
        let c = load(&m).unwrap();
        let attention: Vec<usize> = (0..c.n_layer)
            .filter(|&i| c.layer_kinds[i] == LayerKind::Attention)
            .collect();
        assert_eq!(attention, [5, 20]);
        assert_eq!(c.n_layer, 40);

        // uint32 flags as llama.cpp accepts them; a scalar for every block.
        m.insert(
            "qwen35moe.attention.recurrent_layers".into(),
            Value::Array(ValueType::U32, (0..41).map(|i| Value::U32(i % 2)).collect()),
        );
        assert_eq!(load(&m).unwrap().layer_kinds[0], LayerKind::Attention);
        assert_eq!(load(&m).unwrap().layer_kinds[1], LayerKind::DeltaNet);
        m.insert(
            "qwen35moe.attention.recurrent_layers".into(),
            Value::Bool(true),
        );
        assert_eq!(load(&m).unwrap().n_attention_layers(), 0);
    }

    #[test]
    fn recurrent_layers_of_the_wrong_length_or_type_are_refused() {
        let mut m = a3b_metadata("qwen35moe");
        m.insert(
            "qwen35moe.attention.recurrent_layers".into(),
            Value::Array(ValueType::Bool, vec![Value::Bool(true); 40]),
        );
        let e = load(&m).unwrap_err().to_string();
        assert!(e.contains("has 40 entries; expected block_count 41"), "{e}");
        m.insert(
            "qwen35moe.attention.recurrent_layers".into(),
            Value::Array(ValueType::F32, vec![Value::F32(1.0); 41]),
        );
        let e = load(&m).unwrap_err().to_string();
        assert!(e.contains("array of f32"), "{e}");
    }
}
