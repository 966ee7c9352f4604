//! `clover inspect FILE`: a summary of a GGUF file; `--tsv` the tensor map,
//! `--json` a quant report, `--meta` every metadata key, `--dequant TENSOR -o
//! OUT` one tensor as raw little-endian f32.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{ArgGroup, Args};
use serde::Serialize;

use crate::gguf::{GgufError, GgufFile, Value};

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("mode").args(["tsv", "json", "meta", "dequant"])))]
pub struct InspectArgs {
    /// The GGUF file
    pub file: PathBuf,
    /// Print the tensor map: name, type, shape (ggml ne order), parameters
    #[arg(long)]
    pub tsv: bool,
    /// Print a quant report as JSON: per type tensors, parameters, bytes, bits per weight
    #[arg(long)]
    pub json: bool,
    /// Print every metadata key with its value (long arrays and strings abbreviated)
    #[arg(long)]
    pub meta: bool,
    /// Write this tensor, dequantised, as raw little-endian f32 to -o
    #[arg(long, value_name = "TENSOR", requires = "output")]
    pub dequant: Option<String>,
    /// Output file for --dequant (replaced only when complete; a symlink is
    /// followed to its regular target; a directory, device, FIFO or socket is
    /// refused)
    #[arg(short = 'o', long = "output", value_name = "OUT", requires = "dequant")]
    pub output: Option<PathBuf>,
}

pub fn run(args: InspectArgs) -> anyhow::Result<()> {
    let file = open(&args.file)?;
    let text = if args.tsv {
        tensor_map(&file)
    } else if args.json {
        quant_report(&file)?
    } else if args.meta {
        metadata_listing(&file)
    } else if let (Some(name), Some(out)) = (&args.dequant, &args.output) {
        dequant(&file, name, out)?
    } else {
        summary(&file)?
    };
    let mut stdout = std::io::stdout().lock();
    // A closed pipe (`| head`) is not an error worth a message.
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Opens the file; errors other than "cannot read" get the path in front.
fn open(path: &Path) -> anyhow::Result<GgufFile> {
    match GgufFile::open(path) {
        Ok(f) => Ok(f),
        Err(e @ GgufError::Io { .. }) => Err(e.into()),
        Err(e) => Err(anyhow::Error::new(e).context(path.display().to_string())),
    }
}

/// Key names and tensor names come from the file: escape control characters
/// so that they cannot drive the terminal or break a TSV row.
fn clean(s: &str) -> String {
    if s.chars().any(|c| c.is_control()) {
        s.escape_debug().to_string()
    } else {
        s.to_string()
    }
}

fn total_parameters(file: &GgufFile) -> u128 {
    file.tensors().iter().map(|t| t.n_elements() as u128).sum()
}

/// How the layers of a hybrid model divide into kinds.
#[derive(Debug, PartialEq, Eq)]
pub struct LayerKinds {
    /// Layers the forward pass runs (without the MTP blocks).
    pub layers: u32,
    pub full_attention: u32,
    pub gated_deltanet: u32,
    /// Index of the first trailing MTP block, which the forward pass skips.
    pub mtp_block: Option<u32>,
    /// How many MTP blocks trail the stack.
    pub mtp_blocks: u32,
}

/// For clover_moe / qwen35moe: the last `nextn` of `block_count` blocks are
/// MTP blocks; the others divide into kinds as the loader divides them
/// (`attention.recurrent_layers` when given, else every `interval`th layer
/// is full attention).
pub fn layer_kinds(
    block_count: u32,
    interval: u32,
    nextn: u32,
    recurrent: Option<(&str, &Value)>,
) -> anyhow::Result<LayerKinds> {
    if interval == 0 {
        bail!("full_attention_interval is 0");
    }
    if nextn >= block_count {
        bail!("nextn_predict_layers {nextn} leaves no trunk of {block_count} blocks");
    }
    let layers = block_count - nextn;
    let kinds = crate::model::config::trunk_layer_kinds(
        recurrent,
        interval as usize,
        layers as usize,
        block_count as usize,
    )?;
    let full_attention = kinds
        .iter()
        .filter(|k| **k == crate::model::LayerKind::Attention)
        .count() as u32;
    Ok(LayerKinds {
        layers,
        full_attention,
        gated_deltanet: layers - full_attention,
        mtp_block: (nextn > 0).then_some(layers),
        mtp_blocks: nextn,
    })
}

fn is_hybrid(arch: &str) -> bool {
    arch == "clover_moe" || arch == "qwen35moe"
}

/// The default view: what the model is, in a dozen lines.
pub fn summary(file: &GgufFile) -> anyhow::Result<String> {
    let mut s = String::new();
    let arch = match file.get("general.architecture") {
        Some(_) => Some(file.get_str("general.architecture")?),
        None => None,
    };
    writeln!(s, "architecture: {}", clean(arch.unwrap_or("(none)")))?;
    if file.get("general.name").is_some() {
        writeln!(s, "name: {}", clean(file.get_str("general.name")?))?;
    }
    let arch = arch.unwrap_or("");
    let key = |k: &str| format!("{arch}.{k}");
    let opt_u32 = |k: &str| -> anyhow::Result<Option<u32>> {
        let k = key(k);
        Ok(match file.get(&k) {
            Some(_) => Some(file.get_u32(&k)?),
            None => None,
        })
    };

    if let Some(blocks) = opt_u32("block_count")? {
        if !is_hybrid(arch) {
            writeln!(s, "layers: {blocks}")?;
        } else {
            // The MTP blocks: `nextn_predict_layers`, or (as the loader
            // reads a file without the key) a last block holding `nextn.*`.
            let nextn = match opt_u32("nextn_predict_layers")? {
                Some(n) => n,
                None => {
                    let last = blocks.saturating_sub(1);
                    let eh = format!("blk.{last}.nextn.eh_proj.weight");
                    u32::from(blocks > 1 && file.tensor(&eh).is_some())
                }
            };
            let recurrent_key = key("attention.recurrent_layers");
            let recurrent = file
                .get(&recurrent_key)
                .map(|v| (recurrent_key.as_str(), v));
            // Without either pattern key the kinds are unknown.
            let interval = opt_u32("full_attention_interval")?;
            let k = layer_kinds(blocks, interval.unwrap_or(1), nextn, recurrent)
                .with_context(|| key("block_count"))?;
            match (recurrent.is_some(), interval) {
                (true, _) => writeln!(
                    s,
                    "layers: {} ({} gated deltanet, {} full attention, from recurrent_layers)",
                    k.layers, k.gated_deltanet, k.full_attention
                )?,
                (false, Some(i)) => writeln!(
                    s,
                    "layers: {} ({} gated deltanet, {} full attention, every {i}th)",
                    k.layers, k.gated_deltanet, k.full_attention
                )?,
                (false, None) => writeln!(s, "layers: {}", k.layers)?,
            }
            match (k.mtp_block, k.mtp_blocks) {
                (Some(b), 1) => writeln!(s, "mtp: blk.{b} is an MTP block, skipped")?,
                (Some(b), n) => {
                    writeln!(s, "mtp: blk.{b}..blk.{} are MTP blocks, skipped", b + n - 1)?
                }
                _ => {}
            }
        }
    }
    if let Some(n) = opt_u32("expert_count")? {
        match opt_u32("expert_used_count")? {
            Some(used) => writeln!(s, "experts: {n} ({used} used)")?,
            None => writeln!(s, "experts: {n}")?,
        }
    }
    if let Some(n) = opt_u32("embedding_length")? {
        writeln!(s, "embedding length: {n}")?;
    }
    if file.get("tokenizer.ggml.tokens").is_some() {
        let n = file.get_array("tokenizer.ggml.tokens")?.len();
        writeln!(s, "vocab: {n}")?;
    }
    if let Some(n) = opt_u32("context_length")? {
        writeln!(s, "context length: {n}")?;
    }
    let size = file.file_size();
    writeln!(
        s,
        "file size: {size} bytes ({:.2} GiB)",
        size as f64 / (1u64 << 30) as f64
    )?;
    writeln!(s, "tensors: {}", file.tensors().len())?;
    writeln!(s, "parameters: {}", total_parameters(file))?;
    Ok(s)
}

/// `name\ttype\tshape\tparams`, one row per tensor in file order.
pub fn tensor_map(file: &GgufFile) -> String {
    let mut s = String::from("name\ttype\tshape\tparams\n");
    for t in file.tensors() {
        let shape: Vec<String> = t.dims.iter().map(u64::to_string).collect();
        let _ = writeln!(
            s,
            "{}\t{}\t{}\t{}",
            clean(&t.name),
            t.ty,
            shape.join("x"),
            t.n_elements()
        );
    }
    s
}

#[derive(Serialize, Default)]
struct TypeStats {
    tensors: u64,
    parameters: u128,
    bytes: u128,
    bits_per_weight: f64,
}

impl TypeStats {
    fn add(&mut self, params: u64, bytes: u64) {
        self.tensors += 1;
        self.parameters += params as u128;
        self.bytes += bytes as u128;
    }
    fn finish(&mut self) {
        self.bits_per_weight = if self.parameters == 0 {
            0.0
        } else {
            self.bytes as f64 * 8.0 / self.parameters as f64
        };
    }
}

#[derive(Serialize)]
struct QuantReport<'a> {
    architecture: Option<&'a str>,
    file_size: u64,
    /// Bytes of the data section that are not tensor data (header and padding).
    overhead_bytes: u128,
    #[serde(flatten)]
    total: TypeStats,
    types: BTreeMap<&'static str, TypeStats>,
}

/// Per tensor type: tensors, parameters, bytes and bits per weight; and overall.
pub fn quant_report(file: &GgufFile) -> anyhow::Result<String> {
    let mut types: BTreeMap<&'static str, TypeStats> = BTreeMap::new();
    let mut total = TypeStats::default();
    for t in file.tensors() {
        types
            .entry(t.ty.name())
            .or_default()
            .add(t.n_elements(), t.n_bytes);
        total.add(t.n_elements(), t.n_bytes);
    }
    types.values_mut().for_each(TypeStats::finish);
    total.finish();
    let report = QuantReport {
        architecture: file.get("general.architecture").and_then(Value::as_str),
        file_size: file.file_size(),
        overhead_bytes: (file.file_size() as u128).saturating_sub(total.bytes),
        total,
        types,
    };
    let mut s = serde_json::to_string_pretty(&report)?;
    s.push('\n');
    Ok(s)
}

/// Longest string shown whole by `--meta`.
const META_STRING_MAX: usize = 200;

fn abbreviate(v: &Value) -> String {
    match v {
        Value::String(s) if s.len() > META_STRING_MAX => {
            let cut = (0..=META_STRING_MAX)
                .rev()
                .find(|&i| s.is_char_boundary(i))
                .unwrap_or(0);
            format!("{:?}... ({} bytes)", &s[..cut], s.len())
        }
        _ => v.to_string(),
    }
}

/// `key: type = value` for every key, in file order.
pub fn metadata_listing(file: &GgufFile) -> String {
    let mut s = String::new();
    for (k, v) in file.metadata() {
        let _ = writeln!(
            s,
            "{}: {} = {}",
            clean(k),
            v.value_type().name(),
            abbreviate(v)
        );
    }
    s
}

/// Writes tensor `name` as little-endian f32, row by row through the scalar
/// reference. Returns the line to print.
fn dequant(file: &GgufFile, name: &str, out: &Path) -> anyhow::Result<String> {
    let t = file
        .tensor(name)
        .with_context(|| format!("no tensor named {:?}", clean(name)))?;
    let ne0 = t.dims[0];
    // The reader checked that rows are whole blocks and lie inside the file.
    let row_bytes = t.ty.row_bytes(ne0).context("row size overflows")? as usize;
    let mut row = vec![0f32; ne0 as usize];
    let mut write = || -> std::io::Result<()> {
        let file = crate::output::OutputFile::create(out)?;
        let mut w = BufWriter::with_capacity(1 << 20, file.file());
        for src in t.data.chunks_exact(row_bytes) {
            kernels::scalar::dequantize_row(t.ty, src, &mut row);
            for x in &row {
                w.write_all(&x.to_le_bytes())?;
            }
        }
        w.flush()?;
        drop(w);
        file.commit()
    };
    write().with_context(|| format!("cannot write {}", out.display()))?;
    let n: u64 = t.dims.iter().product();
    Ok(format!(
        "{}: {n} {} elements written to {} as f32\n",
        clean(name),
        t.ty,
        out.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fourth_layer_is_full_attention_in_the_35b_stack() {
        let k = layer_kinds(40, 4, 0, None).unwrap();
        assert_eq!((k.layers, k.gated_deltanet, k.full_attention), (40, 30, 10));
        assert_eq!(k.mtp_block, None);
    }

    #[test]
    fn a_41st_block_is_the_mtp_block_and_is_skipped() {
        // With one MTP block announced: any layer count, not only 41.
        let k = layer_kinds(9, 4, 1, None).unwrap();
        assert_eq!((k.layers, k.gated_deltanet, k.full_attention), (8, 6, 2));
        assert_eq!(k.mtp_block, Some(8));
        let k = layer_kinds(41, 4, 1, None).unwrap();
        assert_eq!((k.layers, k.gated_deltanet, k.full_attention), (40, 30, 10));
        assert_eq!(k.mtp_block, Some(40));
    }

    #[test]
    fn layer_counts_that_are_not_a_multiple_of_the_interval_round_down() {
        // Layers 0..6: full attention at i = 3 only ((i + 1) % 4 == 0).
        let k = layer_kinds(6, 4, 0, None).unwrap();
        assert_eq!((k.gated_deltanet, k.full_attention), (5, 1));
        let k = layer_kinds(3, 1, 0, None).unwrap();
        assert_eq!((k.gated_deltanet, k.full_attention), (0, 3));
    }

    #[test]
    fn an_interval_of_zero_is_an_error() {
        assert!(layer_kinds(40, 0, 0, None).is_err());
    }

    #[test]
    fn long_strings_are_abbreviated_on_a_char_boundary() {
        let s = "é".repeat(150); // 300 bytes
        let a = abbreviate(&Value::String(s));
        assert!(a.ends_with("... (300 bytes)"), "{a}");
        assert_eq!(a.matches('é').count(), 100);
    }
}
