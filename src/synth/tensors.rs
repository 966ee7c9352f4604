//! The tensor list of docs/DESIGN.md §1.2 for a given architecture and shape.

use super::presets::{Arch, Dims};

/// What a tensor is, independent of its layer: drives both the type recipe
/// and the weight initialisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    TokenEmbd,
    OutputNorm,
    Output,
    AttnNorm,
    PostAttnNorm,
    /// `ffn_gate_inp`: the router.
    Router,
    GateExps,
    UpExps,
    DownExps,
    /// `ffn_gate_inp_shexp`: the shared expert's scalar gate.
    ShexpGate,
    GateShexp,
    UpShexp,
    DownShexp,
    // Gated DeltaNet
    Qkv,
    /// `attn_gate`: the z projection.
    AttnGate,
    SsmBeta,
    SsmAlpha,
    Conv,
    ConvRight,
    DtBias,
    SsmA,
    SsmNorm,
    SsmOut,
    BdLogitScale,
    BdHistoryWeight,
    BdHistoryBias,
    // Full attention
    AttnQ,
    AttnK,
    AttnV,
    AttnOutput,
    AttnQNorm,
    AttnKNorm,
    // A multi-token-prediction block's own tensors (`blk.N.nextn.*`)
    /// `nextn.eh_proj {2·n_embd, n_embd}`: the projection of
    /// [enorm(embedding); hnorm(hidden)].
    NextnEhProj,
    /// `nextn.enorm`, `nextn.hnorm`, `nextn.shared_head_norm`.
    NextnNorm,
    /// `nextn.embed_tokens` and `nextn.shared_head_head`, when a file has its
    /// own (they are optional: the block shares the model's otherwise).
    NextnMatrix,
}

impl Role {
    /// A routed-expert tensor (3-D, one matrix per expert).
    pub fn is_routed_expert(self) -> bool {
        matches!(self, Role::GateExps | Role::UpExps | Role::DownExps)
    }

    /// A weight matrix a quantizer may touch (llama-quantize's rules: 2-D or
    /// 3-D, not a norm, not the router, not the conv taps).
    pub fn is_quantizable(self) -> bool {
        matches!(
            self,
            Role::TokenEmbd
                | Role::Output
                | Role::GateExps
                | Role::UpExps
                | Role::DownExps
                | Role::GateShexp
                | Role::UpShexp
                | Role::DownShexp
                | Role::Qkv
                | Role::AttnGate
                | Role::SsmBeta
                | Role::SsmAlpha
                | Role::SsmOut
                | Role::AttnQ
                | Role::AttnK
                | Role::AttnV
                | Role::AttnOutput
                | Role::NextnEhProj
                | Role::NextnMatrix
        )
    }
}

/// One tensor of the plan.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub role: Role,
    /// The block index, for per-layer tensors.
    pub layer: Option<usize>,
    /// Shape in ggml `ne` order.
    pub ne: Vec<u64>,
}

impl TensorSpec {
    pub fn n_elements(&self) -> u64 {
        self.ne.iter().product()
    }

    /// Elements per row (`ne0`).
    pub fn row_len(&self) -> usize {
        self.ne[0] as usize
    }

    pub fn n_rows(&self) -> u64 {
        self.ne.iter().skip(1).product()
    }
}

/// Every tensor of the model, in file order: globals, then each block.
pub fn tensor_specs(arch: Arch, d: &Dims) -> Vec<TensorSpec> {
    let e = d.d_model;
    let mut out = vec![
        spec(
            "token_embd.weight".into(),
            Role::TokenEmbd,
            None,
            &[e, d.vocab],
        ),
        spec("output_norm.weight".into(), Role::OutputNorm, None, &[e]),
        spec("output.weight".into(), Role::Output, None, &[e, d.vocab]),
    ];
    for il in 0..d.n_layer {
        block_specs(&mut out, arch, d, il, d.is_attention(il));
    }
    out
}

/// A multi-token-prediction block after the trunk, as llama.cpp's converter
/// writes one (`blk.N`, N the trunk's layer count, with
/// `nextn_predict_layers = 1`): the projection of the joined embedding and
/// hidden state, its three norms, then a gated-attention layer and its MoE
/// (docs/DESIGN.md §1.2).
pub fn mtp_block_specs(arch: Arch, d: &Dims) -> Vec<TensorSpec> {
    let (e, il) = (d.d_model, d.n_layer);
    let nextn = |suffix: &str, role: Role, ne: &[usize]| {
        spec(format!("blk.{il}.nextn.{suffix}"), role, Some(il), ne)
    };
    let mut out = vec![nextn("eh_proj.weight", Role::NextnEhProj, &[2 * e, e])];
    block_specs(&mut out, arch, d, il, true);
    for norm in ["shared_head_norm", "enorm", "hnorm"] {
        out.push(nextn(&format!("{norm}.weight"), Role::NextnNorm, &[e]));
    }
    out
}

fn spec(name: String, role: Role, layer: Option<usize>, ne: &[usize]) -> TensorSpec {
    TensorSpec {
        name,
        role,
        layer,
        ne: ne.iter().map(|&x| x as u64).collect(),
    }
}

/// Block `il`'s tensors: its mixer (gated attention when `attention`, else
/// Gated DeltaNet) and its MoE.
fn block_specs(out: &mut Vec<TensorSpec>, arch: Arch, d: &Dims, il: usize, attention: bool) {
    let e = d.d_model;
    let mut p = |suffix: &str, role: Role, ne: &[usize]| {
        out.push(spec(format!("blk.{il}.{suffix}"), role, Some(il), ne));
    };
    p("attn_norm.weight", Role::AttnNorm, &[e]);
    if attention {
        let q_out = 2 * d.n_head * d.head_dim;
        let kv = d.n_head_kv * d.head_dim;
        p("attn_q.weight", Role::AttnQ, &[e, q_out]);
        p("attn_k.weight", Role::AttnK, &[e, kv]);
        p("attn_v.weight", Role::AttnV, &[e, kv]);
        p(
            "attn_output.weight",
            Role::AttnOutput,
            &[d.n_head * d.head_dim, e],
        );
        p("attn_q_norm.weight", Role::AttnQNorm, &[d.head_dim]);
        p("attn_k_norm.weight", Role::AttnKNorm, &[d.head_dim]);
    } else {
        let ch = d.conv_channels();
        let vh = d.ssm_v_heads;
        p("attn_qkv.weight", Role::Qkv, &[e, ch]);
        p("attn_gate.weight", Role::AttnGate, &[e, d.ssm_inner()]);
        p("ssm_beta.weight", Role::SsmBeta, &[e, vh]);
        p("ssm_alpha.weight", Role::SsmAlpha, &[e, vh]);
        p("ssm_conv1d.weight", Role::Conv, &[d.conv_left, ch]);
        p("ssm_dt.bias", Role::DtBias, &[vh]);
        p("ssm_a", Role::SsmA, &[vh]);
        p("ssm_norm.weight", Role::SsmNorm, &[d.ssm_state]);
        p("ssm_out.weight", Role::SsmOut, &[d.ssm_inner(), e]);
        if arch.is_clover() {
            p(
                "ssm_conv1d.weight_right",
                Role::ConvRight,
                &[d.conv_right, ch],
            );
            p("ssm_bd_logit_scale.weight", Role::BdLogitScale, &[vh]);
            p("ssm_bd_history.weight", Role::BdHistoryWeight, &[vh]);
            p("ssm_bd_history.bias", Role::BdHistoryBias, &[vh]);
        }
    }
    p("post_attention_norm.weight", Role::PostAttnNorm, &[e]);
    p("ffn_gate_inp.weight", Role::Router, &[e, d.n_expert]);
    p(
        "ffn_gate_exps.weight",
        Role::GateExps,
        &[e, d.ff_exp, d.n_expert],
    );
    p(
        "ffn_up_exps.weight",
        Role::UpExps,
        &[e, d.ff_exp, d.n_expert],
    );
    p(
        "ffn_down_exps.weight",
        Role::DownExps,
        &[d.ff_exp, e, d.n_expert],
    );
    p("ffn_gate_inp_shexp.weight", Role::ShexpGate, &[e]);
    p("ffn_gate_shexp.weight", Role::GateShexp, &[e, d.ff_shexp]);
    p("ffn_up_shexp.weight", Role::UpShexp, &[e, d.ff_shexp]);
    p("ffn_down_shexp.weight", Role::DownShexp, &[d.ff_shexp, e]);
}
