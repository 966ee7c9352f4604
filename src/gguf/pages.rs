//! How a mapped model file sits in memory, and how to make it sit better.
//!
//! Decoding streams the weights at memory speed only when the kernel maps
//! the file's pages 2 MiB at a time (`FilePmdMapped` in `/proc/self/smaps`):
//! mapped 4 KiB at a time, every 4 KiB page of a randomly chosen expert is a
//! TLB miss and a page walk. Which one a file gets depends on how its pages
//! entered the page cache: read in by readahead, a filesystem with large
//! folios (ext4 and xfs on recent kernels) caches them in large pieces; just
//! written (a download, `clover synth`), in 4 KiB pieces, and they stay so
//! until they leave the cache. At full size the routed experts stream far
//! slower from 4 KiB mappings than from 2 MiB ones, and decoding with them
//! (docs/PERFORMANCE.md, "Page size of the mapping").
//!
//! [`drop_cached`] evicts a file's clean pages from the page cache, so that
//! the next populated open reads them back through readahead (`--recache`);
//! [`mapping_pages`] tells what a mapping got.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

static RECACHE: AtomicBool = AtomicBool::new(false);
static MLOCK: AtomicBool = AtomicBool::new(false);

/// Makes every later populated open ([`super::GgufFile::open_populated_with`])
/// first drop the file's pages from the page cache (`--recache`).
pub fn set_recache(on: bool) {
    RECACHE.store(on, Ordering::Relaxed);
}

/// Whether populated opens drop the file's cached pages first.
pub fn recache() -> bool {
    RECACHE.load(Ordering::Relaxed)
}

/// Makes the commands that run a model lock its file in memory after
/// loading it (`--mlock`, [`super::GgufFile::lock_in_memory`]).
pub fn set_mlock(on: bool) {
    MLOCK.store(on, Ordering::Relaxed);
}

/// Whether loaded models are locked in memory.
pub fn mlock() -> bool {
    MLOCK.load(Ordering::Relaxed)
}

/// Writes back `path`'s dirty pages and evicts all of its pages from the page
/// cache (`posix_fadvise(POSIX_FADV_DONTNEED)`); pages mapped by a running
/// process stay. The next read comes from the disk, through readahead. A
/// no-op where the call does not exist.
pub fn drop_cached(path: &Path) -> std::io::Result<()> {
    let file = std::fs::File::open(path)?;
    file.sync_all()?;
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid open descriptor; the advice reads no memory.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
    }
    Ok(())
}

/// Resident bytes of one mapping, and how many of them are mapped 2 MiB at
/// a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MappingPages {
    pub resident: u64,
    pub huge: u64,
}

impl MappingPages {
    /// A one-line note when a large mapping is mostly in 4 KiB pages, else
    /// `None`.
    pub fn note(&self, path: &Path) -> Option<String> {
        const GIB: f64 = (1u64 << 30) as f64;
        if self.resident < 1 << 30 || self.huge * 2 >= self.resident {
            return None;
        }
        Some(format!(
            "note: {:.1} of {:.1} GiB of {} are mapped in 4 KiB pages (the file was written \
             recently, or its cache filled page by page); decoding streams such pages \
             markedly slower. --recache reads the file back in large pages.",
            (self.resident - self.huge) as f64 / GIB,
            self.resident as f64 / GIB,
            path.display()
        ))
    }
}

/// The page sizes of the mapping that starts at `start`, from
/// `/proc/self/smaps` (`None` where there is no such file or entry).
pub fn mapping_pages(start: *const u8) -> Option<MappingPages> {
    let text = std::fs::read_to_string("/proc/self/smaps").ok()?;
    smaps_entry(&text, start as usize)
}

/// The `Rss` and `FilePmdMapped` of the smaps entry whose range starts at
/// `start`.
pub fn smaps_entry(text: &str, start: usize) -> Option<MappingPages> {
    let mut lines = text.lines();
    // An entry's header: `7f12a0000000-7f12b0000000 r--s 00000000 fd:01 123 /path`.
    lines.find(|l| {
        l.split(['-', ' '])
            .next()
            .and_then(|a| usize::from_str_radix(a, 16).ok())
            == Some(start)
            && l.contains('-')
    })?;
    let kib = |l: &str, key: &str| -> Option<u64> {
        let v = l.strip_prefix(key)?.trim().strip_suffix("kB")?.trim();
        v.parse::<u64>().ok().map(|k| k << 10)
    };
    let (mut resident, mut huge) = (None, None);
    for l in lines {
        // The next entry's header ends this one.
        if l.split_whitespace()
            .next()
            .is_some_and(|f| f.contains('-') && !f.ends_with(':'))
        {
            break;
        }
        resident = resident.or_else(|| kib(l, "Rss:"));
        huge = huge.or_else(|| kib(l, "FilePmdMapped:"));
    }
    Some(MappingPages {
        resident: resident?,
        huge: huge.unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55d0c0000000-55d0c0200000 r-xp 00000000 fd:01 42 /usr/bin/clover
Size:               2048 kB
Rss:                1024 kB
FilePmdMapped:         0 kB
7f0000000000-7f03c0000000 r--s 00000000 fd:01 77 /work/full.gguf
Size:           15728640 kB
KernelPageSize:        4 kB
Rss:            15471432 kB
Pss:            15471432 kB
FilePmdMapped:   1404928 kB
VmFlags: rd sh mr mw me ms
7f03c0000000-7f03c0021000 rw-p 00000000 00:00 0
Size:                132 kB
Rss:                   8 kB
FilePmdMapped:   9999999 kB
";

    #[test]
    fn the_entry_is_the_one_starting_at_the_mapping() {
        let p = smaps_entry(SMAPS, 0x7f00_0000_0000).unwrap();
        assert_eq!(p.resident, 15_471_432 << 10);
        assert_eq!(p.huge, 1_404_928 << 10);
        let exe = smaps_entry(SMAPS, 0x55d0_c000_0000).unwrap();
        assert_eq!((exe.resident, exe.huge), (1024 << 10, 0));
        // An address inside a range, or no entry at all: nothing.
        assert_eq!(smaps_entry(SMAPS, 0x7f00_0000_1000), None);
        assert_eq!(smaps_entry("", 0x7f00_0000_0000), None);
    }

    #[test]
    fn the_note_is_for_large_mappings_mostly_in_small_pages() {
        let path = Path::new("m.gguf");
        let gib = 1u64 << 30;
        let small = MappingPages {
            resident: 15 * gib,
            huge: gib,
        };
        let note = small.note(path).unwrap();
        assert!(note.contains("14.0 of 15.0 GiB of m.gguf"), "{note}");
        assert!(note.contains("--recache"), "{note}");
        let huge = MappingPages {
            resident: 15 * gib,
            huge: 14 * gib,
        };
        assert_eq!(huge.note(path), None);
        let tiny = MappingPages {
            resident: gib / 2,
            huge: 0,
        };
        assert_eq!(tiny.note(path), None);
    }

    #[test]
    fn this_process_can_read_its_own_mappings() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.bin");
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
        drop_cached(&path).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: a private read-only mapping of a file nobody else writes.
        let map = unsafe { memmap2::MmapOptions::new().populate().map(&file) }.unwrap();
        let p = mapping_pages(map.as_ptr()).expect("the mapping's smaps entry");
        assert!(p.resident > 0 && p.resident <= 1 << 20, "{p:?}");
        assert!(
            map.iter().all(|&b| b == 7),
            "the bytes survive the eviction"
        );
    }
}
