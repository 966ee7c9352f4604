//! The layout cache: the repacked copies of a model's matrices
//! (`model::load::repack_for_kernels`), written once to a file and mapped
//! read-only by every later run, so that a start does not copy them again
//! and processes running the same model share one copy in the page cache.
//!
//! It lives in `$XDG_CACHE_HOME/clover/layout/` (else
//! `~/.cache/clover/layout/`), one file per model path
//! (`STEM-HASH.clover-layout`, about the size of the repacked tensors);
//! `--layout-cache DIR` or `CLOVER_LAYOUT_CACHE=DIR` puts it elsewhere, and
//! `off` (or `0`) turns it off. The model file is never changed.
//!
//! A cache is used only when everything it records matches: the model's size,
//! modification time and a hash of its header, metadata and tensor table;
//! the list of tensors this machine's kernels repack (names, types, shapes,
//! sizes); a hash of the cache's own index; the file's length; and a hash
//! of the first and last 4 KiB of every tensor in it. Anything else is a
//! stale, torn or foreign cache: it is written again. A cache that cannot be
//! written (a full disk, a read-only directory) leaves the run on copies in
//! memory with one warning.
//!
//! Format: `CLVRLYT1`, the index's length (u64 LE) and hash (u64 LE), the
//! index (JSON), zeros to [`ALIGN`], then each tensor at its offset
//! ([`ALIGN`]-aligned).

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::engine::default_model::{cache_dir, content_hash};
use crate::gguf::{Derived, GgufFile};
use crate::model::load::Packed;

const MAGIC: &[u8; 8] = b"CLVRLYT1";
/// Alignment of the index's end and of every tensor in the file.
pub const ALIGN: usize = 64 << 10;
/// The largest index read (a file claiming more is not a cache).
const MAX_INDEX: u64 = 64 << 20;
/// Bytes hashed at each end of a tensor.
const SAMPLE: usize = 4096;
/// The repacked layout's version: a change of `kernels::repack`'s output
/// must change it, so that no cache of the old layout is used.
const LAYOUT: u32 = 1;

/// Where caches go, or off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Setting {
    Off,
    Dir(PathBuf),
}

static SETTING: std::sync::Mutex<Option<Setting>> = std::sync::Mutex::new(None);

/// Sets where caches go for the rest of the process (`--layout-cache`).
pub fn set(setting: Setting) {
    *SETTING.lock().unwrap_or_else(|e| e.into_inner()) = Some(setting);
}

/// `DIR`, or `off` / `0` (the flag's and the variable's values).
pub fn parse_setting(s: &str) -> Setting {
    match s {
        "off" | "0" => Setting::Off,
        dir => Setting::Dir(PathBuf::from(dir)),
    }
}

/// Repacked bytes below which a model gets no cache in the default place
/// (they take well under a second to make): small files, the tests' among
/// them, leave no files behind. A place given by flag or variable caches
/// any size.
pub const DEFAULT_MIN_BYTES: usize = 1 << 30;

/// Where the cache of a model whose copies take `bytes` goes, if anywhere:
/// the flag's place, else `CLOVER_LAYOUT_CACHE`'s, else the user cache
/// directory's `layout/` for copies of at least [`DEFAULT_MIN_BYTES`].
pub fn dir_for(bytes: usize) -> Option<PathBuf> {
    let given = SETTING.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let given = given.or_else(|| {
        std::env::var_os("CLOVER_LAYOUT_CACHE").map(|v| parse_setting(&v.to_string_lossy()))
    });
    match given {
        Some(Setting::Off) => None,
        Some(Setting::Dir(d)) => Some(d),
        None => (bytes >= DEFAULT_MIN_BYTES)
            .then(cache_dir)
            .flatten()
            .map(|d| d.join("layout")),
    }
}

/// The cache file of the model at `model` in `dir`: named by the model's
/// file name and a hash of its absolute path.
pub fn cache_path(dir: &Path, model: &Path) -> PathBuf {
    let abs = std::fs::canonicalize(model).unwrap_or_else(|_| model.to_path_buf());
    let stem = abs
        .file_stem()
        .map_or("model".into(), |s| s.to_string_lossy().into_owned());
    let tag = content_hash(abs.as_os_str().as_encoded_bytes());
    dir.join(format!("{stem}-{tag:016x}.clover-layout"))
}

/// What a cache records of its model.
#[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
struct Source {
    bytes: u64,
    modified_ns: String,
    header_hash: u64,
}

#[derive(Serialize, Deserialize, Debug)]
struct Entry {
    name: String,
    ty: String,
    n_in: usize,
    rows: usize,
    offset: usize,
    bytes: usize,
    sample_hash: u64,
}

#[derive(Serialize, Deserialize, Debug)]
struct Index {
    layout: u32,
    source: Source,
    file_bytes: u64,
    tensors: Vec<Entry>,
}

fn source_of(file: &GgufFile) -> Option<Source> {
    Some(Source {
        bytes: file.file_size(),
        modified_ns: file.modified_ns()?.to_string(),
        header_hash: content_hash(file.header_bytes()),
    })
}

/// The hash of a tensor's first and last [`SAMPLE`] bytes.
fn sample_hash(b: &[u8]) -> u64 {
    let head = &b[..b.len().min(SAMPLE)];
    let tail = &b[b.len().saturating_sub(SAMPLE)..];
    content_hash(head) ^ content_hash(tail).rotate_left(1)
}

/// The cache at `path` for `file` and its `plan`, mapped, when it is valid
/// (module doc); otherwise why not. Its pages are not read here.
pub fn open(path: &Path, file: &GgufFile, plan: &[Packed]) -> Result<CacheMap, String> {
    let mut f = File::open(path).map_err(|e| e.to_string())?;
    let len = f.metadata().map_err(|e| e.to_string())?.len();
    let mut head = [0u8; 24];
    f.read_exact(&mut head)
        .map_err(|_| "shorter than its header".to_string())?;
    if &head[..8] != MAGIC {
        return Err("not a clover layout cache of this version".into());
    }
    let n = u64::from_le_bytes(head[8..16].try_into().unwrap());
    let hash = u64::from_le_bytes(head[16..24].try_into().unwrap());
    if n > MAX_INDEX || 24 + n > len {
        return Err("its index is cut off".into());
    }
    let mut json = vec![0u8; n as usize];
    f.read_exact(&mut json)
        .map_err(|_| "its index is cut off".to_string())?;
    if content_hash(&json) != hash {
        return Err("its index was changed".into());
    }
    let index: Index =
        serde_json::from_slice(&json).map_err(|e| format!("its index does not parse ({e})"))?;
    if index.layout != LAYOUT {
        return Err("it holds another version of the layout".into());
    }
    if index.file_bytes != len {
        return Err(format!(
            "{len} bytes where it should have {}",
            index.file_bytes
        ));
    }
    if Some(&index.source) != source_of(file).as_ref() {
        return Err(
            "the model file changed since it was written (or it is another model's)".into(),
        );
    }
    let same_plan = index.tensors.len() == plan.len()
        && index.tensors.iter().zip(plan).all(|(e, p)| {
            e.name == p.name
                && e.ty == p.ty.name()
                && (e.n_in, e.rows, e.bytes) == (p.n_in, p.rows, p.bytes)
                && e.offset % ALIGN == 0
                && e.offset
                    .checked_add(e.bytes)
                    .is_some_and(|end| end as u64 <= len)
        });
    if !same_plan {
        return Err("this machine's kernels repack other tensors".into());
    }
    // SAFETY: a read-only mapping of a file clover wrote and renames into
    // place only whole; like the model's own mapping, it relies on no other
    // process truncating it while mapped.
    let map = unsafe { memmap2::MmapOptions::new().map(&f) }.map_err(|e| e.to_string())?;
    // A SIGBUS inside it (the file cut short underneath) is one error line.
    crate::signals::register_mapping(map.as_ptr(), map.len());
    let ranges = index
        .tensors
        .iter()
        .map(|e| (e.name.clone(), e.offset..e.offset + e.bytes))
        .collect();
    let samples = index
        .tensors
        .iter()
        .map(|e| (e.name.clone(), e.sample_hash))
        .collect();
    Ok(CacheMap {
        map,
        ranges,
        samples,
    })
}

/// A cache whose index matches its model, mapped; its tensors' bytes are
/// checked by [`CacheMap::populate`].
pub struct CacheMap {
    map: memmap2::Mmap,
    ranges: HashMap<String, std::ops::Range<usize>>,
    samples: Vec<(String, u64)>,
}

impl CacheMap {
    /// Reads the cache's tensors into memory (or finds them in the page
    /// cache), telling `progress(done, total)`, then checks the ends of
    /// every tensor against the index; an error says which differs. The
    /// ends are checked only after the whole is read in: a first touch of a
    /// cold page through the mapping brings it in a small piece, which the
    /// kernel cannot map 2 MiB at a time (`gguf::pages`), where populating
    /// reads it in the large pieces of readahead.
    pub fn populate(&self, progress: &mut dyn FnMut(u64, u64)) -> Result<(), String> {
        crate::gguf::reader::populate_ranges(&self.map, &[(0, self.map.len())], progress);
        for (name, want) in &self.samples {
            if sample_hash(&self.map[self.ranges[name].clone()]) != *want {
                return Err(format!("the bytes of {name} were changed"));
            }
        }
        Ok(())
    }

    pub fn bytes(&self) -> u64 {
        self.map.len() as u64
    }

    pub fn into_derived(self) -> Derived {
        Derived::mapped(self.map, self.ranges).expect("ranges checked at open")
    }
}

/// Writes the cache of `file` at `path` from the copies in `tensors` (in
/// `plan` order), telling `progress(done, total)`: to a temporary file in
/// the same directory, flushed, then renamed into place, so that a cache
/// is whole or absent. Its pages then leave the page cache, so that the
/// next run reads them back in large pieces (`gguf::pages`). Returns the
/// bytes written.
pub fn write(
    path: &Path,
    file: &GgufFile,
    plan: &[Packed],
    tensors: &HashMap<String, Vec<u64>>,
    progress: &mut dyn FnMut(u64, u64),
) -> std::io::Result<u64> {
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, m.to_string());
    let source = source_of(file).ok_or_else(|| bad("the model has no modification time"))?;
    let bytes_of = |name: &str| -> std::io::Result<&[u8]> {
        tensors
            .get(name)
            .map(|w| bytemuck::cast_slice(w.as_slice()))
            .ok_or_else(|| bad("a planned tensor was not repacked"))
    };
    // Lay the tensors out after an index of a size fixed first: the
    // offsets' digits change the JSON's length, so reserve room for them.
    let mut entries = Vec::with_capacity(plan.len());
    for p in plan {
        let b = bytes_of(&p.name)?;
        entries.push(Entry {
            name: p.name.clone(),
            ty: p.ty.name().to_string(),
            n_in: p.n_in,
            rows: p.rows,
            offset: 0,
            bytes: b.len(),
            sample_hash: sample_hash(b),
        });
    }
    let mut index = Index {
        layout: LAYOUT,
        source,
        file_bytes: 0,
        tensors: entries,
    };
    let room = serde_json::to_vec(&index)
        .map_err(std::io::Error::other)?
        .len()
        + 24 * (index.tensors.len() + 1);
    let mut at = (24 + room).next_multiple_of(ALIGN);
    for e in &mut index.tensors {
        e.offset = at;
        at = (at + e.bytes).next_multiple_of(ALIGN);
    }
    index.file_bytes = at as u64;
    let json = serde_json::to_vec(&index).map_err(std::io::Error::other)?;
    if 24 + json.len() > index.tensors.first().map_or(at, |e| e.offset) {
        return Err(bad("the index outgrew its room"));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut out = File::create(&tmp)?;
        out.write_all(MAGIC)?;
        out.write_all(&(json.len() as u64).to_le_bytes())?;
        out.write_all(&content_hash(&json).to_le_bytes())?;
        out.write_all(&json)?;
        let mut done = 0u64;
        for e in &index.tensors {
            out.seek(SeekFrom::Start(e.offset as u64))?;
            for chunk in bytes_of(&e.name)?.chunks(64 << 20) {
                out.write_all(chunk)?;
                done += chunk.len() as u64;
                progress(done, index.file_bytes);
            }
        }
        out.set_len(index.file_bytes)?;
        out.sync_all()?;
        drop(out);
        std::fs::rename(&tmp, path)?;
        let _ = crate::gguf::pages::drop_cached(path);
        Ok(index.file_bytes)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
