//! Loading a model: map the GGUF file, bind the weights (zero copy), and build the
//! tokenizer and chat template from the metadata (docs/DESIGN.md §1.1).
//!
//! The mapped file is leaked to `&'static`: the bound [`Model`] borrows its bytes,
//! and a loaded model lives until the process exits (one per `clover run` /
//! `clover chat`). Nothing is copied; the map is released by the OS at exit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use kernels::{GgmlType, KernelTable, Rows};

use crate::chat::{ChatMessage, ChatTemplate, CHATML_TEMPLATE};
use crate::gguf::{GgufError, GgufFile, Value};
use crate::model::Model;
use crate::tokenizer::{Tokenizer, TokenizerSpec};

use super::EngineError;

/// A model ready to run: weights, tokenizer, chat template.
pub struct LoadedModel {
    pub file: &'static GgufFile,
    pub model: Model<'static>,
    pub tokenizer: Tokenizer,
    /// The chat template, or why it does not compile: a raw prompt, a
    /// perplexity or a benchmark never renders it, so only the chat paths
    /// refuse such a file ([`LoadedModel::template`]).
    template: Result<ChatTemplate, String>,
    /// True when the file has no `tokenizer.chat_template` and ChatML is used.
    pub template_fallback: bool,
    /// `general.name`, else the file name.
    pub name: String,
    pub path: PathBuf,
    /// Milliseconds from opening the file to a usable model.
    pub load_ms: f64,
    /// The ids of `<think>` and `</think>`, when the vocabulary has both.
    pub think_tokens: Option<(u32, u32)>,
    /// What loading has to tell (a layout cache not used, or not written),
    /// one line each, for the caller to print.
    pub load_notes: Vec<String>,
    /// Special-token texts inside message text become control tokens, as
    /// llama-server tokenizes a rendered chat (`clover serve
    /// --special-in-content`). Off: only the template writes control tokens.
    pub special_in_content: bool,
}

impl std::fmt::Debug for LoadedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedModel")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("arch", &self.model.config.arch)
            .field("load_ms", &self.load_ms)
            .finish()
    }
}

/// A phase of loading, for progress lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadPhase {
    /// The model file read into memory.
    Reading,
    /// The layout cache read into memory.
    ReadingLayout,
    /// The kernels' copies of the matrices made.
    Repacking,
    /// The layout cache written.
    WritingLayout,
}

impl LoadPhase {
    pub fn label(self) -> &'static str {
        match self {
            LoadPhase::Reading => "reading",
            LoadPhase::ReadingLayout => "reading the layout cache",
            LoadPhase::Repacking => "repacking",
            LoadPhase::WritingLayout => "writing the layout cache",
        }
    }
}

/// Reads `file` in and gives it the kernels' repacked copies: from a valid
/// layout cache when there is one (then the file's tensors it replaces are
/// not read at all), else made in memory and written to the cache. Returns
/// the notes to print.
pub fn load_layout(
    file: &GgufFile,
    path: &Path,
    progress: &mut dyn FnMut(LoadPhase, u64, u64),
) -> Vec<String> {
    use crate::model::load::{packed_plan, reads_copy_only, repack_for_kernels};
    let mut notes = Vec::new();
    let kt = KernelTable::chosen();
    let plan = packed_plan(kt, file);
    let bytes: usize = plan.iter().map(|p| p.bytes).sum();
    let cache = super::packed_cache::dir_for(bytes)
        .filter(|_| !plan.is_empty())
        .map(|dir| super::packed_cache::cache_path(&dir, path));
    let mapped = cache
        .as_ref()
        .and_then(|at| match super::packed_cache::open(at, file, &plan) {
            Ok(m) => Some(m),
            Err(why) => {
                if at.exists() {
                    notes.push(format!(
                        "note: layout cache {} not used: {why}; it is written again",
                        at.display()
                    ));
                }
                None
            }
        });
    let skip = |t: &crate::gguf::TensorInfo| mapped.is_some() && reads_copy_only(&plan, t);
    file.populate(&skip, &mut |d, t| progress(LoadPhase::Reading, d, t));
    // The cache's tensors, read in and checked.
    let mapped = mapped.and_then(|m| {
        match m.populate(&mut |d, t| progress(LoadPhase::ReadingLayout, d, t)) {
            Ok(()) => Some(m),
            Err(why) => {
                notes.push(format!(
                    "note: layout cache {} not used: {why}; it is written again",
                    cache.as_ref().expect("mapped from it").display()
                ));
                // Read in what the cache was to replace.
                file.populate(&|_| false, &mut |d, t| progress(LoadPhase::Reading, d, t));
                None
            }
        }
    });
    match mapped {
        Some(m) => {
            // The file's bytes the cache replaces leave the page cache, where
            // an earlier run may have left them: memory the cache's pages
            // would otherwise be reclaimed for.
            if file.is_mapped() && !crate::gguf::pages::mlock() {
                for t in file.tensors().iter().filter(|t| reads_copy_only(&plan, t)) {
                    file.evict_tensor(&t.name);
                }
            }
            file.derived(|_| m.into_derived());
        }
        None => {
            file.derived(|f| {
                let copies =
                    repack_for_kernels(kt, f, &mut |d, t| progress(LoadPhase::Repacking, d, t));
                if let Some(at) = cache.as_ref().filter(|_| copies.len() == plan.len()) {
                    let write = super::packed_cache::write(at, f, &plan, &copies, &mut |d, t| {
                        progress(LoadPhase::WritingLayout, d, t)
                    });
                    if let Err(e) = write {
                        notes.push(format!(
                            "warning: could not write the layout cache {} ({e}); this run uses copies in memory",
                            at.display()
                        ));
                    }
                }
                crate::gguf::Derived::owned(copies)
            });
        }
    }
    notes
}

impl crate::constrain::Vocab for LoadedModel {
    fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    fn think_end(&self) -> Option<u32> {
        self.think_tokens.map(|(_, end)| end)
    }
}

impl LoadedModel {
    /// Maps `path` and builds the model. Every failure is an error, never a panic.
    pub fn open(path: &Path) -> Result<LoadedModel, EngineError> {
        LoadedModel::open_with(path, true)
    }

    /// [`LoadedModel::open`], or with `mmap` false the file read into memory
    /// (`--no-mmap`: immune to the file changing while in use).
    pub fn open_with(path: &Path, mmap: bool) -> Result<LoadedModel, EngineError> {
        LoadedModel::open_with_progress(path, mmap, &mut |_, _, _| {})
    }

    /// [`LoadedModel::open_with`], telling `progress(phase, done, total)` as
    /// each phase goes: the file read in (less what a valid layout cache
    /// replaces), then the layout cache read in, or the copies made and the
    /// cache written ([`super::packed_cache`]).
    pub fn open_with_progress(
        path: &Path,
        mmap: bool,
        progress: &mut dyn FnMut(LoadPhase, u64, u64),
    ) -> Result<LoadedModel, EngineError> {
        let t0 = Instant::now();
        let file = if mmap {
            GgufFile::open_lazy(path)?
        } else {
            GgufFile::read(path)?
        };
        // A loaded model lives for the rest of the process (see the module docs).
        let file: &'static GgufFile = Box::leak(Box::new(file));
        let notes = load_layout(file, path, progress);
        let model = Model::load(file)?;
        let mut tokenizer = Tokenizer::new(&tokenizer_spec(file)?)?;
        if let Some(v) = file.get("tokenizer.ggml.mask_token_id") {
            let id = as_u32("tokenizer.ggml.mask_token_id", v)?;
            tokenizer.set_mask_token(id)?;
        }
        if tokenizer.vocab_size() != model.n_vocab() {
            return Err(EngineError::Metadata {
                key: "tokenizer.ggml.tokens".into(),
                reason: format!(
                    "{} tokens, but the output layer has {} rows",
                    tokenizer.vocab_size(),
                    model.n_vocab()
                ),
            });
        }
        let special = |id: Option<u32>| {
            id.and_then(|i| tokenizer.id_to_token(i))
                .unwrap_or("")
                .to_string()
        };
        let (bos, eos) = (special(tokenizer.bos()), special(tokenizer.eos()));
        let (source, template_fallback) = match file.get("tokenizer.chat_template") {
            Some(v) => (
                v.as_str().ok_or_else(|| EngineError::Metadata {
                    key: "tokenizer.chat_template".into(),
                    reason: "not a string".into(),
                })?,
                false,
            ),
            None => (CHATML_TEMPLATE, true),
        };
        let template = ChatTemplate::new(source, &bos, &eos).map_err(|e| e.to_string());
        let think_tokens = tokenizer
            .token_to_id("<think>")
            .zip(tokenizer.token_to_id("</think>"));
        let name = file
            .get("general.name")
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| {
                path.file_name().map_or_else(
                    || path.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                )
            });
        Ok(LoadedModel {
            file,
            model,
            tokenizer,
            template,
            template_fallback,
            name,
            path: path.to_path_buf(),
            load_ms: t0.elapsed().as_secs_f64() * 1000.0,
            load_notes: notes,
            think_tokens,
            special_in_content: false,
        })
    }

    /// Tokenizes a raw prompt the way llama.cpp does: special-token texts are parsed,
    /// BOS is prepended when the file asks for it.
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>, EngineError> {
        Ok(self.tokenizer.encode(text, true)?)
    }

    /// Uses `source` as the chat template instead of the file's
    /// (`--chat-template-file`); an error when it does not compile.
    pub fn use_template(&mut self, source: &str) -> Result<(), EngineError> {
        let special = |id: Option<u32>| {
            id.and_then(|i| self.tokenizer.id_to_token(i))
                .unwrap_or("")
                .to_string()
        };
        let (bos, eos) = (special(self.tokenizer.bos()), special(self.tokenizer.eos()));
        let t = ChatTemplate::new(source, &bos, &eos)?;
        self.template = Ok(t);
        self.template_fallback = false;
        Ok(())
    }

    /// The file's chat template; an error when it does not compile (the
    /// chat paths call this at start, to refuse such a file at once).
    pub fn template(&self) -> Result<&ChatTemplate, EngineError> {
        self.template
            .as_ref()
            .map_err(|e| EngineError::Chat(crate::chat::ChatError::Syntax(e.clone())))
    }

    /// Renders a conversation with the file's chat template.
    pub fn render_chat(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, EngineError> {
        Ok(self
            .template()?
            .render(messages, add_generation_prompt, None)?)
    }

    /// Renders a conversation and tokenizes it: the template's text with its
    /// special-token texts as control tokens, the messages' text as plain
    /// text ([`crate::chat::mark_text`]; all of it parsed with
    /// [`LoadedModel::special_in_content`]). Returns the text and its tokens.
    /// The marks must change nothing else: a template that looks at a
    /// message's text (`startswith`, a cut after an assistant's `</think>`)
    /// and renders differently with them is rendered again with only the
    /// non-assistant messages marked, and where that differs too, the whole
    /// text gets llama-server's tokenization.
    pub fn chat_prompt(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<(String, Vec<u32>), EngineError> {
        let template = self.template()?;
        let text = template.render(messages, add_generation_prompt, None)?;
        for assistant in [true, false] {
            let marked = template.render(
                &crate::chat::mark_messages(messages, assistant),
                add_generation_prompt,
                None,
            )?;
            if let Some(ids) = self.tokenize_marked(&marked, &text)? {
                return Ok((text, ids));
            }
        }
        let ids = self.tokenize(&text)?;
        Ok((text, ids))
    }

    /// [`LoadedModel::chat_prompt`] for messages given as JSON (the server's).
    pub fn chat_prompt_json(
        &self,
        messages: &serde_json::Value,
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<(String, Vec<u32>), EngineError> {
        let template = self.template()?;
        let text = template.render_json(messages, tools, add_generation_prompt)?;
        for assistant in [true, false] {
            let mut marked = messages.clone();
            crate::chat::mark_json_messages(&mut marked, assistant);
            let marked = template.render_json(&marked, tools, add_generation_prompt)?;
            if let Some(ids) = self.tokenize_marked(&marked, &text)? {
                return Ok((text, ids));
            }
        }
        let ids = self.tokenize(&text)?;
        Ok((text, ids))
    }

    /// The tokens of a marked rendering whose text without the marks is
    /// `text`: marked pieces plain, the rest with special tokens parsed (one
    /// BOS at most, at the start). `None` when the marks do not pair up or
    /// changed the rendering.
    fn tokenize_marked(&self, marked: &str, text: &str) -> Result<Option<Vec<u32>>, EngineError> {
        let Some(pieces) = crate::chat::split_marked(marked) else {
            return Ok(None);
        };
        if crate::chat::strip_marks(marked) != text {
            return Ok(None);
        }
        if self.special_in_content {
            return Ok(Some(self.tokenize(text)?));
        }
        let mut ids = Vec::new();
        let mut first = true;
        for (piece, plain) in pieces {
            if piece.is_empty() {
                continue;
            }
            let mut t = self.tokenizer.encode(piece, !plain)?;
            if !first && self.tokenizer.add_bos() && !t.is_empty() {
                t.remove(0);
            }
            first = false;
            ids.extend(t);
        }
        if first {
            ids = self.tokenize("")?;
        }
        Ok(Some(ids))
    }

    /// The tensor types by share of the file's tensor bytes, largest first:
    /// `Q8_0` when one type holds at least 90 %, else up to three `TYPE NN%`.
    pub fn quant_mix(&self) -> String {
        let mut bytes: BTreeMap<GgmlType, u64> = BTreeMap::new();
        for info in self.file.tensors() {
            *bytes.entry(info.ty).or_default() += self.file.view(info).data.len() as u64;
        }
        let total: u64 = bytes.values().sum::<u64>().max(1);
        let mut v: Vec<(GgmlType, u64)> = bytes.into_iter().collect();
        v.sort_by_key(|e| std::cmp::Reverse(e.1));
        match v.first() {
            None => "no tensors".into(),
            Some(&(ty, b)) if b * 10 >= total * 9 => ty.name().to_string(),
            _ => v
                .iter()
                .take(3)
                .map(|&(ty, b)| format!("{} {}%", ty.name(), (b * 100 + total / 2) / total))
                .collect::<Vec<_>>()
                .join(" / "),
        }
    }
}

fn as_u32(key: &str, v: &Value) -> Result<u32, EngineError> {
    v.as_u64()
        .and_then(|x| u32::try_from(x).ok())
        .ok_or_else(|| EngineError::Metadata {
            key: key.into(),
            reason: format!("expected a token id, found {:?}", v.value_type()),
        })
}

fn optional_id(file: &GgufFile, key: &str) -> Result<Option<u32>, EngineError> {
    file.get(key).map(|v| as_u32(key, v)).transpose()
}

/// Whether a file just written (by `clover quantize` or `clover synth`)
/// would load: hyper-parameters, every tensor's shape and type, the
/// tokenizer. Files of architectures clover does not run are not judged.
/// The chat template is not checked: raw prompts run without it.
pub fn check_loadable(path: &Path) -> std::io::Result<()> {
    let fail = |e: String| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("the file written would not load in clover ({e}), so it was not kept"),
        )
    };
    let file = GgufFile::open(path).map_err(|e| fail(e.to_string()))?;
    let arch = file.get("general.architecture").and_then(Value::as_str);
    if !matches!(arch, Some("clover_moe" | "qwen35moe")) {
        return Ok(());
    }
    let config = crate::model::ModelConfig::from_metadata(|k| file.get(k))
        .map_err(|e| fail(e.to_string()))?;
    let lookup = |name: &str| {
        file.tensor(name).map(|t| crate::model::WeightRef {
            name: t.name,
            ty: t.ty,
            dims: t.dims.to_vec(),
            data: t.data,
            rows: Rows::File,
        })
    };
    Model::bind(config, KernelTable::chosen(), &lookup).map_err(|e| fail(e.to_string()))?;
    let spec = tokenizer_spec(&file).map_err(|e| fail(e.to_string()))?;
    Tokenizer::new(&spec).map_err(|e| fail(e.to_string()))?;
    Ok(())
}

/// The `tokenizer.ggml.*` keys as a [`TokenizerSpec`].
pub fn tokenizer_spec(file: &GgufFile) -> Result<TokenizerSpec, EngineError> {
    let owned = |v: Vec<&str>| v.into_iter().map(str::to_string).collect::<Vec<_>>();
    let optional_strs = |key: &str| -> Result<Vec<String>, GgufError> {
        match file.get(key) {
            None => Ok(Vec::new()),
            Some(_) => file.get_str_array(key).map(owned),
        }
    };
    let add_bos = match file.get("tokenizer.ggml.add_bos_token") {
        None => false,
        Some(v) => v.as_bool().ok_or_else(|| EngineError::Metadata {
            key: "tokenizer.ggml.add_bos_token".into(),
            reason: "not a bool".into(),
        })?,
    };
    Ok(TokenizerSpec {
        model: file.get_str("tokenizer.ggml.model")?.to_string(),
        pre: match file.get("tokenizer.ggml.pre") {
            None => "qwen35".to_string(),
            Some(_) => file.get_str("tokenizer.ggml.pre")?.to_string(),
        },
        tokens: owned(file.get_str_array("tokenizer.ggml.tokens")?),
        token_types: match file.get("tokenizer.ggml.token_type") {
            None => Vec::new(),
            Some(_) => file.get_i32_array("tokenizer.ggml.token_type")?,
        },
        merges: optional_strs("tokenizer.ggml.merges")?,
        bos: optional_id(file, "tokenizer.ggml.bos_token_id")?,
        eos: optional_id(file, "tokenizer.ggml.eos_token_id")?,
        pad: optional_id(file, "tokenizer.ggml.padding_token_id")?,
        add_bos,
    })
}
