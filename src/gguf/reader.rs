//! The GGUF reader: a validated file (by mmap, or from bytes) with typed
//! metadata getters and borrowed tensor views. Every file is treated as
//! hostile; the checks themselves and their limits are in `parse.rs` (the
//! limits and `TensorInfo` are re-exported here).

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::OnceLock;

use kernels::GgmlType;
use memmap2::{Mmap, MmapOptions};

use super::error::GgufError;
use super::parse::{int_as_i128, parse_header};
use super::value::Value;

pub use super::parse::{
    kernel_alignment, TensorInfo, MAX_ARRAY_DEPTH, MAX_ARRAY_LEN, MAX_DIMS, MAX_KEYS, MAX_KEY_LEN,
    MAX_STRING_LEN, MAX_TENSORS, MAX_TENSOR_NAME_LEN,
};

/// A tensor's bytes, borrowed from the file.
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    pub name: &'a str,
    pub ty: GgmlType,
    pub dims: &'a [u64],
    pub data: &'a [u8],
}

enum Storage {
    /// The mapping and its slot in [`crate::signals`]' table of model mappings
    /// (a `SIGBUS` inside it means the file shrank underneath), and the
    /// open file (for page-cache advice).
    Mmap(Mmap, Option<usize>, File),
    /// u64 words so that the bytes are 8-byte aligned, like a mapping.
    Owned { words: Vec<u64>, len: usize },
}

impl Drop for Storage {
    fn drop(&mut self) {
        match self {
            Storage::Mmap(_, Some(slot), _) => crate::signals::forget_mapping(*slot),
            // A buffer locked by `lock_in_memory` goes back to the allocator,
            // which may keep its pages: unlock them first (a no-op when they
            // were never locked). A mapping's lock ends with the mapping.
            #[cfg(unix)]
            Storage::Owned { words, len } if *len > 0 => {
                // SAFETY: `words` is live for this call; munlock only unpins.
                unsafe { libc::munlock(words.as_ptr().cast(), *len) };
            }
            _ => {}
        }
    }
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mmap(m, _, _) => m,
            Storage::Owned { words, len } => &bytemuck::cast_slice(words)[..*len],
        }
    }
}

/// A parsed GGUF file: metadata, tensor infos, and the bytes they point into.
pub struct GgufFile {
    storage: Storage,
    version: u32,
    alignment: u64,
    metadata: Vec<(String, Value)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    /// Tensors derived from this file's (repacked for a kernel), built once
    /// by the first [`GgufFile::derived`] call and kept with the mapping.
    derived: OnceLock<super::Derived>,
    /// The path it was opened from (none for bytes handed in).
    path: Option<std::path::PathBuf>,
    /// While the file is open, no output of this process may replace it
    /// ([`crate::output::open_input`]).
    input: Option<crate::output::InputGuard>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("file_size", &self.file_size())
            .field("keys", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// Bytes populated between two progress reports of
/// [`GgufFile::open_populated_with`].
pub const POPULATE_CHUNK: usize = 256 << 20;

/// Reads the byte ranges `ranges` of `map` into memory,
/// [`POPULATE_CHUNK`] bytes at a time, telling `progress(done, total)`
/// (bytes of the ranges) after each chunk.
pub(crate) fn populate_ranges(
    map: &Mmap,
    ranges: &[(usize, usize)],
    progress: &mut dyn FnMut(u64, u64),
) {
    let total: usize = ranges.iter().map(|(a, b)| b - a).sum();
    let mut done = 0;
    for &(a, b) in ranges {
        let mut at = a;
        while at < b {
            let len = POPULATE_CHUNK.min(b - at);
            populate_range(map, at, len);
            at += len;
            done += len;
            progress(done as u64, total as u64);
        }
    }
}

/// Reads `len` bytes of `map` from `at` into memory (`MADV_POPULATE_READ`;
/// where the kernel lacks it, one byte of every page is read).
fn populate_range(map: &Mmap, at: usize, len: usize) {
    if map
        .advise_range(memmap2::Advice::PopulateRead, at, len)
        .is_err()
    {
        let mut sum = 0u8;
        for b in map[at..at + len].iter().step_by(4096) {
            sum ^= *b;
        }
        std::hint::black_box(sum);
    }
}

impl GgufFile {
    /// Maps `path` into memory (no copy) and validates it. Pages are mapped
    /// on first touch, so this is the open for reading a few tensors.
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        GgufFile::open_with(path, false)
    }

    /// [`GgufFile::open`] for running the model: the whole mapping is
    /// populated at open (`MAP_POPULATE`, as llama.cpp maps by default), so
    /// the file is read in and its page-table entries made here, not by a
    /// page fault at the first touch of each expert during decoding. Still
    /// no copy: the pages are the page cache's.
    pub fn open_populated(path: &Path) -> Result<GgufFile, GgufError> {
        GgufFile::recache_first(path)?;
        GgufFile::open_with(path, true)
    }

    /// With `--recache` set ([`super::pages::set_recache`]), drops `path`'s
    /// cached pages so that populating reads them back through readahead.
    fn recache_first(path: &Path) -> Result<(), GgufError> {
        if !super::pages::recache() {
            return Ok(());
        }
        super::pages::drop_cached(path).map_err(|cause| GgufError::Io {
            path: path.to_path_buf(),
            cause,
        })
    }

    /// [`GgufFile::open_populated`] with progress: the file is validated, then
    /// the mapping populated [`POPULATE_CHUNK`] bytes at a time
    /// (`MADV_POPULATE_READ`; where the kernel lacks it, one byte of every page
    /// is read), and `progress(done, total)` is told after each chunk. The same
    /// pages and page-table entries as `MAP_POPULATE` in the end, but a 16 GB
    /// file need not look like a hang.
    pub fn open_populated_with(
        path: &Path,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<GgufFile, GgufError> {
        GgufFile::recache_first(path)?;
        let file = GgufFile::open_with(path, false)?;
        if let Storage::Mmap(map, _, _) = &file.storage {
            populate_ranges(map, &[(0, map.len())], progress);
        }
        Ok(file)
    }

    /// How the mapping's resident bytes are mapped (4 KiB or 2 MiB pages),
    /// where the system tells (`None` for a file read into memory).
    pub fn mapping_pages(&self) -> Option<super::pages::MappingPages> {
        match &self.storage {
            Storage::Mmap(map, _, _) => super::pages::mapping_pages(map.as_ptr()),
            Storage::Owned { .. } => None,
        }
    }

    /// Locks the file's bytes in memory (`mlock`, `--mlock`): from here on
    /// its pages are never evicted — by memory pressure or by a proactive
    /// reclaimer that pages out what was idle for a minute — and read back
    /// from the disk in the middle of a reply. The lock ends with the
    /// mapping. Returns the bytes locked.
    pub fn lock_in_memory(&self) -> std::io::Result<u64> {
        match &self.storage {
            Storage::Mmap(map, _, _) => map.lock().map(|()| map.len() as u64),
            Storage::Owned { words, len } => {
                #[cfg(unix)]
                {
                    // SAFETY: `words` is this file's live buffer of at least
                    // `len` bytes; mlock only pins its pages.
                    let rc = unsafe { libc::mlock(words.as_ptr().cast(), *len) };
                    if rc != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(*len as u64)
                }
                #[cfg(not(unix))]
                {
                    let _ = (words, len);
                    Err(std::io::Error::new(
                        std::io::ErrorKind::Unsupported,
                        "this system has no mlock",
                    ))
                }
            }
        }
    }

    /// Tells the kernel that `name`'s data will not be read again soon: its
    /// pages leave this process's resident set (they stay in the page cache
    /// and come back on the next read). For streaming tools (`clover
    /// quantize`) whose memory should stay near one tensor, not the file.
    /// Nothing happens for a file read into memory.
    pub fn release_tensor(&self, name: &str) {
        let (Storage::Mmap(map, _, _), Some((start, end))) = (&self.storage, self.pages_of(name))
        else {
            return;
        };
        if end > start {
            // SAFETY: the mapping is a read-only, never-written file mapping,
            // so MADV_DONTNEED only drops page-table entries: a later read
            // faults the same bytes back in from the file (page cache). No reference into the range is
            // invalidated (the contents do not change).
            let _ = unsafe {
                map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    start as usize,
                    (end - start) as usize,
                )
            };
        }
    }

    /// The whole 4 KiB pages inside `name`'s data, as a byte range of the file.
    fn pages_of(&self, name: &str) -> Option<(u64, u64)> {
        const PAGE: u64 = 4096;
        let t = self.tensor_info(name)?;
        Some((
            t.offset.div_ceil(PAGE) * PAGE,
            (t.offset + t.n_bytes) / PAGE * PAGE,
        ))
    }

    /// Whether the bytes are a mapping of the file (not read into memory).
    pub fn is_mapped(&self) -> bool {
        matches!(self.storage, Storage::Mmap(..))
    }

    /// [`GgufFile::release_tensor`], and then `name`'s pages leave the page
    /// cache too (`POSIX_FADV_DONTNEED`; pages another process maps stay):
    /// for a tensor the model reads from a copy made at load (repacked), so
    /// that the file's bytes and the copy need not fit in memory together.
    /// A later read of the tensor still works; it comes from the disk.
    pub fn evict_tensor(&self, name: &str) {
        self.release_tensor(name);
        #[cfg(target_os = "linux")]
        if let (Storage::Mmap(_, _, file), Some((start, end))) =
            (&self.storage, self.pages_of(name))
        {
            use std::os::fd::AsRawFd;
            if end > start {
                // SAFETY: a valid open descriptor; the advice reads no memory.
                unsafe {
                    libc::posix_fadvise(
                        file.as_raw_fd(),
                        start as libc::off_t,
                        (end - start) as libc::off_t,
                        libc::POSIX_FADV_DONTNEED,
                    )
                };
            }
        }
    }

    /// Maps `path` read-only (populated at once with `populate`), registered
    /// with [`crate::signals`] so that a `SIGBUS` inside it is one error line.
    fn map(path: &Path, populate: bool) -> Result<(Storage, crate::output::InputGuard), GgufError> {
        let io = |cause| GgufError::Io {
            path: path.to_path_buf(),
            cause,
        };
        let (file, guard) = crate::output::open_input(path).map_err(io)?;
        let mut options = MmapOptions::new();
        if populate {
            options.populate();
        }
        // SAFETY: the mapping is read-only and private to this process. Like
        // every mmap-based model loader, we rely on the file not being
        // truncated or rewritten by another process while it is mapped; all
        // parsing below is bounds-checked against the mapping's length.
        let map = unsafe { options.map(&file) }.map_err(io)?;
        let slot = crate::signals::register_mapping(map.as_ptr(), map.len());
        Ok((Storage::Mmap(map, slot, file), guard))
    }

    fn open_with(path: &Path, populate: bool) -> Result<GgufFile, GgufError> {
        let (storage, guard) = GgufFile::map(path, populate)?;
        let mut f = GgufFile::parse(storage)?;
        f.input = Some(guard);
        f.path = Some(path.to_path_buf());
        Ok(f)
    }

    /// Maps `path` without reading it in: the header is parsed and checked,
    /// the data's pages come on first touch or by [`GgufFile::populate`].
    pub fn open_lazy(path: &Path) -> Result<GgufFile, GgufError> {
        GgufFile::recache_first(path)?;
        GgufFile::open_with(path, false)
    }

    /// Reads the whole file into memory (`--no-mmap`, like llama.cpp's): no
    /// mapping, so the file may change or vanish afterwards without harm.
    pub fn read(path: &Path) -> Result<GgufFile, GgufError> {
        use std::io::Read;
        let io = |cause| GgufError::Io {
            path: path.to_path_buf(),
            cause,
        };
        let (mut file, guard) = crate::output::open_input(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file",
            )));
        }
        let len = usize::try_from(meta.len()).map_err(|_| {
            io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "too large for this machine's address space",
            ))
        })?;
        let mut words: Vec<u64> = Vec::new();
        words.try_reserve_exact(len.div_ceil(8)).map_err(|_| {
            io(std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                format!("cannot allocate {len} bytes to read it (--no-mmap)"),
            ))
        })?;
        words.resize(len.div_ceil(8), 0);
        let bytes = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..len];
        file.read_exact(bytes).map_err(io)?;
        let mut f = GgufFile::parse(Storage::Owned { words, len })?;
        f.input = Some(guard);
        f.path = Some(path.to_path_buf());
        Ok(f)
    }

    /// Validates a file held in memory (tests, fuzzing).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        let len = bytes.len();
        let mut words = vec![0u64; len.div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..len].copy_from_slice(&bytes);
        GgufFile::parse(Storage::Owned { words, len })
    }

    fn parse(storage: Storage) -> Result<GgufFile, GgufError> {
        let header = parse_header(storage.bytes())?;
        let key_index = header
            .metadata
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        let tensor_index = header
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(GgufFile {
            storage,
            version: header.version,
            alignment: header.alignment,
            metadata: header.metadata,
            key_index,
            tensors: header.tensors,
            tensor_index,
            derived: OnceLock::new(),
            path: None,
            input: None,
        })
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    pub fn file_size(&self) -> u64 {
        self.bytes().len() as u64
    }

    /// All metadata, in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.key_index.get(key).map(|&i| &self.metadata[i].1)
    }

    fn require(&self, key: &str) -> Result<&Value, GgufError> {
        self.get(key).ok_or_else(|| GgufError::MissingKey {
            key: key.to_string(),
        })
    }

    /// An integer of any width whose value fits in a u32.
    pub fn get_u32(&self, key: &str) -> Result<u32, GgufError> {
        let v = self.require(key)?;
        let wide = int_as_i128(v).ok_or_else(|| wrong_type(key, "an integer", v))?;
        u32::try_from(wide).map_err(|_| out_of_range(key, v, "u32"))
    }

    /// An integer of any width whose value fits in a u64.
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        let v = self.require(key)?;
        let wide = int_as_i128(v).ok_or_else(|| wrong_type(key, "an integer", v))?;
        u64::try_from(wide).map_err(|_| out_of_range(key, v, "u64"))
    }

    /// An integer of any width whose value fits in an i64.
    pub fn get_i64(&self, key: &str) -> Result<i64, GgufError> {
        let v = self.require(key)?;
        let wide = int_as_i128(v).ok_or_else(|| wrong_type(key, "an integer", v))?;
        i64::try_from(wide).map_err(|_| out_of_range(key, v, "i64"))
    }

    /// An f32, or an f64 rounded to f32.
    pub fn get_f32(&self, key: &str) -> Result<f32, GgufError> {
        match *self.require(key)? {
            Value::F32(x) => Ok(x),
            Value::F64(x) => Ok(x as f32),
            ref v => Err(wrong_type(key, "a float", v)),
        }
    }

    pub fn get_bool(&self, key: &str) -> Result<bool, GgufError> {
        let v = self.require(key)?;
        v.as_bool().ok_or_else(|| wrong_type(key, "a bool", v))
    }

    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        let v = self.require(key)?;
        v.as_str().ok_or_else(|| wrong_type(key, "a string", v))
    }

    pub fn get_array(&self, key: &str) -> Result<&[Value], GgufError> {
        let v = self.require(key)?;
        v.as_array().ok_or_else(|| wrong_type(key, "an array", v))
    }

    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>, GgufError> {
        self.get_array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str()
                    .ok_or_else(|| wrong_element(key, i, "a string", v))
            })
            .collect()
    }

    /// Elements of any integer type, each of which must fit in a u32.
    pub fn get_u32_array(&self, key: &str) -> Result<Vec<u32>, GgufError> {
        self.int_array(key, "an integer that fits in u32")
    }

    /// Elements of any integer type, each of which must fit in an i32.
    pub fn get_i32_array(&self, key: &str) -> Result<Vec<i32>, GgufError> {
        self.int_array(key, "an integer that fits in i32")
    }

    fn int_array<T: TryFrom<i128>>(
        &self,
        key: &str,
        expected: &'static str,
    ) -> Result<Vec<T>, GgufError> {
        self.get_array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                int_as_i128(v)
                    .and_then(|x| T::try_from(x).ok())
                    .ok_or_else(|| wrong_element(key, i, expected, v))
            })
            .collect()
    }

    /// The derived tensors by name, built by `build` on the first call
    /// (later calls return what the first built), as long-lived as the file.
    pub fn derived(&self, build: impl FnOnce(&GgufFile) -> super::Derived) -> &super::Derived {
        self.derived.get_or_init(|| build(self))
    }

    /// The derived tensors, if [`GgufFile::derived`] has built them.
    pub fn derived_tensors(&self) -> Option<&super::Derived> {
        self.derived.get()
    }

    /// The path the file was opened from (`None` for bytes handed in).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The bytes before the first tensor's data: header, metadata and
    /// tensor table, all of which the open has read.
    pub fn header_bytes(&self) -> &[u8] {
        let end = self
            .tensors
            .iter()
            .map(|t| t.offset)
            .min()
            .unwrap_or(self.file_size())
            .min(self.file_size());
        &self.bytes()[..end as usize]
    }

    /// The file's modification time in nanoseconds since the epoch, as its
    /// open descriptor reports it now (`None` for bytes handed in).
    pub fn modified_ns(&self) -> Option<u128> {
        let meta = match &self.storage {
            Storage::Mmap(_, _, file) => file.metadata().ok()?,
            Storage::Owned { .. } => std::fs::metadata(self.path.as_ref()?).ok()?,
        };
        let t = meta.modified().ok()?;
        Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos())
    }

    /// Reads into memory the pages of the mapping that hold the header and
    /// the data of every tensor `skip` does not name, [`POPULATE_CHUNK`]
    /// bytes at a time, telling `progress(done, total)` (bytes of those
    /// ranges) after each. For a file read into memory, nothing to do.
    pub fn populate(&self, skip: &dyn Fn(&TensorInfo) -> bool, progress: &mut dyn FnMut(u64, u64)) {
        let Storage::Mmap(map, _, _) = &self.storage else {
            return;
        };
        const PAGE: usize = 4096;
        let mut ranges: Vec<(usize, usize)> = vec![(0, self.header_bytes().len())];
        ranges.extend(
            self.tensors
                .iter()
                .filter(|t| !skip(t))
                .map(|t| (t.offset as usize, (t.offset + t.n_bytes) as usize)),
        );
        // Whole pages, sorted and merged.
        let mut pages: Vec<(usize, usize)> = ranges
            .into_iter()
            .map(|(a, b)| (a / PAGE * PAGE, b.next_multiple_of(PAGE).min(map.len())))
            .filter(|(a, b)| a < b)
            .collect();
        pages.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::new();
        for (a, b) in pages {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        populate_ranges(map, &merged, progress);
    }

    /// All tensors, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    pub fn tensor(&self, name: &str) -> Option<TensorView<'_>> {
        self.tensor_info(name).map(|t| self.view(t))
    }

    /// The bytes of a tensor. Panics if `info` did not come from this file's
    /// `tensors()` (its range was checked against this file only).
    pub fn view<'a>(&'a self, info: &'a TensorInfo) -> TensorView<'a> {
        let start = info.offset as usize;
        let end = start + info.n_bytes as usize;
        TensorView {
            name: &info.name,
            ty: info.ty,
            dims: &info.dims,
            data: &self.bytes()[start..end],
        }
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        self.storage.bytes()
    }
}

/// How a value is described in errors: its type, and the value itself when short.
fn describe(v: &Value) -> String {
    match v {
        Value::String(s) if s.len() > 40 => format!("a string of {} bytes", s.len()),
        Value::Array(t, items) => format!("an array of {} {}", items.len(), t.name()),
        _ => format!("{} {}", v.value_type().name(), v),
    }
}

fn wrong_type(key: &str, expected: &'static str, v: &Value) -> GgufError {
    GgufError::WrongType {
        key: key.to_string(),
        expected,
        found: describe(v),
    }
}

fn wrong_element(key: &str, index: usize, expected: &'static str, v: &Value) -> GgufError {
    GgufError::WrongElement {
        key: key.to_string(),
        index,
        expected,
        found: describe(v),
    }
}

fn out_of_range(key: &str, v: &Value, target: &'static str) -> GgufError {
    GgufError::OutOfRange {
        key: key.to_string(),
        value: v.to_string(),
        target,
    }
}
