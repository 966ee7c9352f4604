//! The GGUF reader against hostile input: one `rejects_*` test per check,
//! and a deterministic mutation fuzz that asserts no panic.

mod skip;

mod gguf_common;

use clover::gguf::reader::{MAX_ARRAY_DEPTH, MAX_ARRAY_LEN, MAX_KEYS, MAX_TENSORS};
use clover::gguf::{GgufError, GgufFile, Value, ValueType};
use gguf_common::*;
use kernels::GgmlType;

// ------------------------------------------------------------ header checks

#[test]
fn rejects_empty_file() {
    assert!(matches!(reject(vec![]), GgufError::Truncated { .. }));
}

#[test]
fn rejects_bad_magic() {
    let mut b = write(&sample_writer());
    b[0..4].copy_from_slice(b"GGML");
    let e = reject(b);
    assert!(matches!(e, GgufError::BadMagic { found } if &found == b"GGML"));
}

#[test]
fn rejects_unsupported_version() {
    for v in [0, 1, 4, 99] {
        let e = reject(Raw::header(v, 0, 0).done());
        assert!(
            matches!(e, GgufError::UnsupportedVersion { version } if version == v),
            "{e}"
        );
    }
}

#[test]
fn accepts_version_2() {
    let b = Raw::header(2, 0, 1).kv_u32("x", 7).done();
    let f = parse(b);
    assert_eq!(f.version(), 2);
    assert_eq!(f.get_u32("x").unwrap(), 7);
}

#[test]
fn rejects_big_endian_file() {
    let e = reject(Raw::header(3u32.swap_bytes(), 0, 0).done());
    assert!(matches!(e, GgufError::BigEndian { .. }), "{e}");
}

#[test]
fn rejects_truncated_header() {
    let full = Raw::header(3, 0, 0).done();
    for n in 0..full.len() {
        let e = reject(full[..n].to_vec());
        assert!(matches!(e, GgufError::Truncated { .. }), "{n}: {e}");
    }
    parse(full);
}

#[test]
fn rejects_header_claiming_2_pow_63_tensors_without_allocating() {
    let e = reject(Raw::header(3, 1 << 63, 0).done());
    assert!(
        matches!(e, GgufError::TooManyTensors { count, .. } if count == 1 << 63),
        "{e}"
    );
    assert!(e.to_string().contains("9223372036854775808"));
}

#[test]
fn rejects_tensor_count_over_cap() {
    let e = reject(Raw::header(3, MAX_TENSORS + 1, 0).done());
    assert!(matches!(e, GgufError::TooManyTensors { .. }), "{e}");
}

#[test]
fn rejects_tensor_count_the_file_cannot_hold() {
    // 1000 tensors need at least 32 000 bytes of infos.
    let e = reject(Raw::header(3, 1000, 0).zeros(1000).done());
    assert!(
        matches!(
            e,
            GgufError::CountExceedsFile {
                what: "tensors",
                count: 1000,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn rejects_key_count_over_cap() {
    let e = reject(Raw::header(3, 0, MAX_KEYS + 1).done());
    assert!(matches!(e, GgufError::TooManyKeys { .. }), "{e}");
    let e = reject(Raw::header(3, 0, u64::MAX).done());
    assert!(matches!(e, GgufError::TooManyKeys { .. }), "{e}");
}

#[test]
fn rejects_key_count_the_file_cannot_hold() {
    let e = reject(Raw::header(3, 0, 100).kv_u32("a", 1).done());
    assert!(
        matches!(
            e,
            GgufError::CountExceedsFile {
                what: "metadata keys",
                ..
            }
        ),
        "{e}"
    );
}

// ---------------------------------------------------------- metadata checks

#[test]
fn rejects_string_longer_than_cap() {
    // Key length u64::MAX.
    let e = reject(Raw::header(3, 0, 1).u64(u64::MAX).zeros(20).done());
    assert!(matches!(e, GgufError::StringTooLong { .. }), "{e}");
    assert!(e.to_string().contains("metadata key 0"), "{e}");
    // A string value claiming 2^40 bytes.
    let mut v = Raw::default();
    v.u64(1 << 40).zeros(16);
    let e = reject(one_key(ValueType::String as u32, &v.0));
    assert!(matches!(e, GgufError::StringTooLong { .. }), "{e}");
    assert!(e.to_string().contains("\"k\""), "{e}");
}

#[test]
fn rejects_string_running_past_eof() {
    let mut v = Raw::default();
    v.u64(100).bytes(b"short");
    let e = reject(one_key(ValueType::String as u32, &v.0));
    assert!(matches!(e, GgufError::Truncated { need: 100, .. }), "{e}");
}

#[test]
fn rejects_invalid_utf8_key() {
    let b = Raw::header(3, 0, 1)
        .u64(2)
        .bytes(&[0xc3, 0x28])
        .u32(ValueType::U8 as u32)
        .u8(0)
        .done();
    let e = reject(b);
    assert!(
        matches!(e, GgufError::InvalidUtf8 { offset: 32, .. }),
        "{e}"
    );
}

#[test]
fn rejects_invalid_utf8_value() {
    let mut v = Raw::default();
    v.u64(3).bytes(&[b'a', 0xff, b'b']);
    let e = reject(one_key(ValueType::String as u32, &v.0));
    assert!(matches!(e, GgufError::InvalidUtf8 { .. }), "{e}");
    assert!(e.to_string().contains("\"k\""), "{e}");
}

#[test]
fn rejects_empty_key() {
    let b = Raw::header(3, 0, 1).str("").u32(0).u8(1).zeros(4).done();
    assert!(matches!(reject(b), GgufError::EmptyKey { index: 0, .. }));
}

#[test]
fn rejects_duplicate_key() {
    let b = Raw::header(3, 0, 2)
        .kv_u32("a.b", 1)
        .kv_u32("a.b", 2)
        .done();
    let e = reject(b);
    assert!(
        matches!(e, GgufError::DuplicateKey { ref key } if key == "a.b"),
        "{e}"
    );
}

#[test]
fn rejects_unknown_value_type() {
    let e = reject(one_key(13, &[0; 8]));
    assert!(
        matches!(e, GgufError::UnknownValueType { type_id: 13, ref key, .. } if key == "k"),
        "{e}"
    );
}

#[test]
fn rejects_unknown_array_element_type() {
    let mut v = Raw::default();
    v.u32(77).u64(1).zeros(8);
    let e = reject(one_key(ValueType::Array as u32, &v.0));
    assert!(
        matches!(e, GgufError::UnknownValueType { type_id: 77, .. }),
        "{e}"
    );
}

#[test]
fn rejects_bool_that_is_not_0_or_1() {
    let e = reject(one_key(ValueType::Bool as u32, &[2]));
    assert!(matches!(e, GgufError::InvalidBool { byte: 2, .. }), "{e}");
}

#[test]
fn rejects_array_longer_than_the_file_allows() {
    // 10 u32 claimed, 8 bytes present.
    let mut v = Raw::default();
    v.u32(ValueType::U32 as u32).u64(10).zeros(8);
    let e = reject(one_key(ValueType::Array as u32, &v.0));
    assert!(
        matches!(
            e,
            GgufError::ArrayTooLong {
                len: 10,
                max: 2,
                ..
            }
        ),
        "{e}"
    );
    // 2^62 strings: refused before any allocation.
    let mut v = Raw::default();
    v.u32(ValueType::String as u32).u64(1 << 62);
    let e = reject(one_key(ValueType::Array as u32, &v.0));
    assert!(matches!(e, GgufError::ArrayTooLong { .. }), "{e}");
}

#[test]
fn rejects_array_longer_than_cap() {
    let n = MAX_ARRAY_LEN + 1;
    let mut v = Raw::default();
    v.u32(ValueType::U8 as u32).u64(n).zeros(n as usize);
    let e = reject(one_key(ValueType::Array as u32, &v.0));
    assert!(
        matches!(e, GgufError::ArrayTooLong { len, max, .. } if len == n && max == MAX_ARRAY_LEN),
        "{e}"
    );
}

#[test]
fn rejects_arrays_nested_too_deep() {
    let nest = |levels: usize| {
        let mut v = Raw::default();
        for _ in 0..levels - 1 {
            v.u32(ValueType::Array as u32).u64(1);
        }
        v.u32(ValueType::U8 as u32).u64(0);
        one_key(ValueType::Array as u32, &v.0)
    };
    let f = parse(nest(MAX_ARRAY_DEPTH));
    assert!(f.get("k").is_some());
    let e = reject(nest(MAX_ARRAY_DEPTH + 1));
    assert!(matches!(e, GgufError::ArrayTooDeep { .. }), "{e}");
}

#[test]
fn rejects_alignment_of_non_integer_type() {
    let b = Raw::header(3, 0, 1)
        .str("general.alignment")
        .u32(ValueType::F32 as u32)
        .bytes(&32f32.to_le_bytes())
        .done();
    let e = reject(b);
    assert!(
        matches!(e, GgufError::AlignmentType { found: "f32" }),
        "{e}"
    );
}

#[test]
fn rejects_alignment_that_is_zero_or_not_a_power_of_two() {
    for a in [0u32, 3, 48, 100] {
        let e = reject(Raw::header(3, 0, 1).kv_u32("general.alignment", a).done());
        assert!(
            matches!(e, GgufError::AlignmentNotPowerOfTwo { value } if value == a as i128),
            "{a}: {e}"
        );
    }
    let b = Raw::header(3, 0, 1)
        .str("general.alignment")
        .u32(ValueType::I64 as u32)
        .u64((-32i64) as u64)
        .done();
    assert!(matches!(
        reject(b),
        GgufError::AlignmentNotPowerOfTwo { value: -32 }
    ));
}

#[test]
fn accepts_alignment_of_any_integer_width() {
    let b = Raw::header(3, 0, 1)
        .str("general.alignment")
        .u32(ValueType::U16 as u32)
        .bytes(&64u16.to_le_bytes())
        .done();
    assert_eq!(parse(b).alignment(), 64);
}

// ------------------------------------------------------------ tensor checks

#[test]
fn rejects_tensor_name_longer_than_ggml_allows() {
    let name = "x".repeat(64);
    let b = Raw::header(3, 1, 0)
        .tensor(&name, &[4], 0, 0)
        .pad_to(32)
        .zeros(16)
        .done();
    let e = reject(b);
    assert!(
        matches!(e, GgufError::TensorNameTooLong { len: 64, .. }),
        "{e}"
    );
}

#[test]
fn rejects_duplicate_tensor_name() {
    let b = Raw::header(3, 2, 0)
        .tensor("w", &[4], 0, 0)
        .tensor("w", &[4], 0, 32)
        .pad_to(32)
        .zeros(48)
        .done();
    let e = reject(b);
    assert!(
        matches!(e, GgufError::DuplicateTensor { ref tensor } if tensor == "w"),
        "{e}"
    );
}

#[test]
fn rejects_zero_or_more_than_four_dimensions() {
    for n in [0usize, 5, 1000] {
        let dims = vec![1u64; n.min(5)];
        let mut r = Raw::header(3, 1, 0);
        r.str("t").u32(n as u32);
        for d in &dims {
            r.u64(*d);
        }
        r.u32(0).u64(0).pad_to(32).zeros(64);
        let e = reject(r.done());
        assert!(
            matches!(e, GgufError::BadDimCount { n_dims, .. } if n_dims as usize == n),
            "{n}: {e}"
        );
    }
}

#[test]
fn rejects_zero_dimension() {
    let e = reject(one_tensor(&[4, 0], 0, 0, 16));
    assert!(matches!(e, GgufError::ZeroDim { index: 1, .. }), "{e}");
}

#[test]
fn rejects_element_count_overflow() {
    let e = reject(one_tensor(&[1 << 32, 1 << 32], 0, 0, 16));
    assert!(matches!(e, GgufError::ElementCountOverflow { .. }), "{e}");
    // Fits in u64 but not in ggml's int64.
    let e = reject(one_tensor(&[1 << 32, 1 << 31], 0, 0, 16));
    assert!(matches!(e, GgufError::ElementCountOverflow { .. }), "{e}");
}

#[test]
fn rejects_byte_size_overflow() {
    // 2^62 F32 elements fit in an int64, their 2^64 bytes do not fit in a u64.
    let e = reject(one_tensor(&[1 << 62], 0, 0, 16));
    assert!(matches!(e, GgufError::SizeOverflow { .. }), "{e}");
}

#[test]
fn rejects_unsupported_tensor_type_naming_tensor_and_ggml_type() {
    // 16 is ggml's IQ2_XXS, which clover does not implement.
    let e = reject(one_tensor(&[256], 16, 0, 256));
    assert!(matches!(e, GgufError::UnsupportedTensorType { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("\"t\"") && msg.contains("IQ2_XXS"), "{msg}");
    // An id ggml does not know either.
    let e = reject(one_tensor(&[256], 9999, 0, 256));
    assert!(e.to_string().contains("9999"), "{e}");
}

#[test]
fn rejects_row_that_is_not_a_whole_number_of_blocks() {
    let e = reject(one_tensor(&[100, 2], GgmlType::Q4_K.id(), 0, 1000));
    assert!(
        matches!(
            e,
            GgufError::PartialBlock {
                ne0: 100,
                block: 256,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn rejects_misaligned_tensor_offset() {
    let e = reject(one_tensor(&[4], 0, 4, 64));
    assert!(
        matches!(
            e,
            GgufError::MisalignedTensor {
                offset: 4,
                alignment: 32,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn rejects_tensor_offset_past_eof() {
    let e = reject(one_tensor(&[4], 0, 1 << 20, 64));
    assert!(matches!(e, GgufError::TensorPastEof { .. }), "{e}");
}

#[test]
fn rejects_tensor_data_running_past_eof() {
    // 16 bytes of data needed, 15 present.
    let e = reject(one_tensor(&[4], 0, 0, 15));
    assert!(matches!(e, GgufError::TensorPastEof { .. }), "{e}");
    parse(one_tensor(&[4], 0, 0, 16));
}

#[test]
fn rejects_tensor_offset_that_overflows() {
    let off = u64::MAX - 31; // aligned to 32
    let e = reject(one_tensor(&[4], 0, off, 64));
    assert!(matches!(e, GgufError::TensorPastEof { .. }), "{e}");
    assert!(e.to_string().contains("overflow"), "{e}");
}

#[test]
fn rejects_overlapping_tensors() {
    let b = Raw::header(3, 2, 0)
        .tensor("a", &[16], 0, 0) // 64 bytes at 0..64
        .tensor("b", &[8], 0, 32) // 32 bytes at 32..64
        .pad_to(32)
        .zeros(64)
        .done();
    let e = reject(b);
    assert!(matches!(e, GgufError::TensorsOverlap { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("\"a\"") && msg.contains("\"b\""), "{msg}");
}

#[test]
fn rejects_f32_tensor_the_kernels_cannot_read_in_place() {
    // Alignment 1 lets the data start at an odd offset.
    let mut r = Raw::header(3, 1, 1);
    r.kv_u32("general.alignment", 1).tensor("t", &[4], 0, 1);
    r.zeros(20);
    let e = reject(r.done());
    assert!(
        matches!(e, GgufError::UnalignedForType { needed: 4, .. }),
        "{e}"
    );
}

#[test]
fn rejects_every_truncation_of_a_valid_file() {
    let full = write(&sample_writer());
    parse(full.clone());
    for n in 0..full.len() {
        let r = GgufFile::from_bytes(full[..n].to_vec());
        assert!(r.is_err(), "prefix of {n} of {} bytes accepted", full.len());
    }
}

// ------------------------------------------------------- mutation fuzzing

/// xorshift64*: a fixed, dependency-free generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn mutate(rng: &mut Rng, base: &[u8]) -> Vec<u8> {
    let mut b = base.to_vec();
    let interesting: [u64; 9] = [
        0,
        1,
        4,
        63,
        64,
        1 << 32,
        1 << 63,
        u64::MAX,
        base.len() as u64,
    ];
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 => {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(b.len());
                b[i] = rng.next() as u8;
            }
            2 => {
                let n = rng.below(b.len() + 1);
                b.truncate(n);
            }
            3 => {
                // An interesting u64 or u32 at any position (counts, lengths,
                // offsets, dims and type ids all live there).
                let v = interesting[rng.below(interesting.len())];
                let width = if rng.below(2) == 0 { 8 } else { 4 };
                if b.len() >= width {
                    let i = rng.below(b.len() - width + 1);
                    b[i..i + width].copy_from_slice(&v.to_le_bytes()[..width]);
                }
            }
            4 => {
                let i = rng.below(b.len() + 1);
                let n = rng.below(16);
                let junk: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                b.splice(i..i, junk);
            }
            _ => {
                if b.len() > 1 {
                    let i = rng.below(b.len());
                    let n = rng.below(b.len() - i).min(32);
                    b.drain(i..i + n);
                }
            }
        }
        if b.is_empty() {
            break;
        }
    }
    b
}

/// What any accepted file must satisfy.
fn check_consistent(f: &GgufFile) {
    assert!(f.alignment().is_power_of_two());
    for (k, _) in f.metadata() {
        assert!(f.get(k).is_some());
        let _ = (f.get_u32(k), f.get_i64(k), f.get_f32(k), f.get_str(k));
        let _ = (f.get_u32_array(k), f.get_i32_array(k), f.get_str_array(k));
    }
    for t in f.tensors() {
        let v = f.view(t);
        assert_eq!(v.data.len() as u64, t.n_bytes);
        assert!(t.offset + t.n_bytes <= f.file_size());
        assert_eq!(t.offset % f.alignment(), 0);
        assert!(t.dims.len() <= 4 && t.dims.iter().all(|&d| d > 0));
    }
}

#[test]
fn survives_20000_mutated_files_without_panicking() {
    let mut w = sample_writer();
    w.set("test.nested", every_value().pop().unwrap().1);
    w.set("test.f32s", Value::f32s([1.0, 2.0]));
    w.set("general.alignment", Value::U32(32));
    let mut w64 = sample_writer();
    w64.set("general.alignment", Value::U32(64));
    let bases = [write(&w), write(&w64)];
    let mut rng = Rng(0xc10e_5eed_9e37_79b9);
    let mut accepted = 0;
    for iter in 0..20_000 {
        let base = &bases[iter % bases.len()];
        let bytes = mutate(&mut rng, base);
        let result = std::panic::catch_unwind(|| {
            if let Ok(f) = GgufFile::from_bytes(bytes.clone()) {
                check_consistent(&f);
                true
            } else {
                false
            }
        });
        match result {
            Ok(ok) => accepted += ok as usize,
            Err(_) => panic!(
                "iteration {iter} panicked on {} bytes: {bytes:02x?}",
                bytes.len()
            ),
        }
    }
    eprintln!("{accepted} of 20000 mutated files accepted");
    // The mutations must exercise both outcomes to mean anything.
    assert!(accepted > 100, "only {accepted} variants accepted");
    assert!(accepted < 19_000, "{accepted} variants accepted");
}

#[test]
fn populating_with_progress_reports_every_byte_and_gives_the_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.gguf");
    let mut raw = Raw::header(3, 0, 1);
    raw.kv_u32("x", 7);
    // More than one populate chunk, so progress is told more than once.
    raw.zeros(clover::gguf::reader::POPULATE_CHUNK + 4096);
    std::fs::write(&path, raw.done()).unwrap();
    let mut seen = Vec::new();
    let f =
        GgufFile::open_populated_with(&path, &mut |done, total| seen.push((done, total))).unwrap();
    let total = std::fs::metadata(&path).unwrap().len();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0].0 < w[1].0));
    assert_eq!(seen.last(), Some(&(total, total)));
    assert_eq!(f.get_u32("x").unwrap(), 7);
    // A file that is not GGUF fails before anything is read in.
    std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
    let mut calls = 0;
    assert!(GgufFile::open_populated_with(&path, &mut |_, _| calls += 1).is_err());
    assert_eq!(calls, 0);
}

/// This process's locked memory (`VmLck` in /proc/self/status), in KiB.
fn locked_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmLck:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The locked-memory limit (`RLIMIT_MEMLOCK`), in bytes.
fn memlock_limit() -> libc::rlim_t {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid rlimit to write into.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) }, 0);
    r.rlim_cur
}

/// `--mlock`: a mapped file and a file read into memory are both locked
/// whole (the process's locked memory grows by at least their size), and
/// unlocked when dropped. The files are a few hundred KiB, inside today's
/// default locked-memory limit (8 MiB); where the limit is smaller and the
/// process may not exceed it, the lock must fail with an error and leave
/// nothing locked.
#[test]
fn a_locked_file_counts_whole_in_the_locked_memory_until_dropped() {
    let Some(before) = locked_kib() else {
        skip::skipped(
            "mlock check",
            "no /proc/self/status VmLck on this system",
            "run on Linux",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.gguf");
    let mut raw = Raw::header(3, 0, 1);
    raw.kv_u32("x", 7);
    raw.zeros(300 << 10);
    std::fs::write(&path, raw.done()).unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    for (how, f) in [
        ("mapped", GgufFile::open(&path).unwrap()),
        ("read", GgufFile::read(&path).unwrap()),
    ] {
        match f.lock_in_memory() {
            Ok(n) => assert_eq!(n, size, "{how}"),
            Err(e) => {
                assert!(
                    memlock_limit() < size,
                    "{how}: {e} under a limit of {}",
                    memlock_limit()
                );
                assert!(
                    locked_kib().unwrap() < before + size / 1024,
                    "{how}: locked anyway"
                );
                continue;
            }
        }
        let locked = locked_kib().unwrap();
        assert!(
            locked >= before + size / 1024,
            "{how}: {locked} KiB locked, was {before}"
        );
        drop(f);
        assert!(
            locked_kib().unwrap() < before + size / 1024,
            "{how}: still locked after drop"
        );
    }
}

/// Whether any 4 KiB page of `bytes` (in a file mapping) is in the page
/// cache.
#[cfg(target_os = "linux")]
fn any_page_resident(bytes: &[u8]) -> bool {
    const PAGE: usize = 4096;
    let start = (bytes.as_ptr() as usize).next_multiple_of(PAGE);
    let end = (bytes.as_ptr() as usize + bytes.len()) / PAGE * PAGE;
    let mut vec = vec![0u8; (end - start) / PAGE];
    // SAFETY: the range lies inside the live mapping `bytes` points into;
    // mincore writes one byte per page into `vec`, which has that many.
    let rc = unsafe { libc::mincore(start as *mut libc::c_void, end - start, vec.as_mut_ptr()) };
    assert_eq!(rc, 0, "mincore");
    vec.iter().any(|v| v & 1 == 1)
}

/// `evict_tensor` (what the loader does to a tensor it has repacked) takes
/// the tensor's pages out of the page cache, leaves its neighbours, and a
/// later read still gives the file's bytes.
#[cfg(target_os = "linux")]
#[test]
fn an_evicted_tensor_leaves_the_page_cache_and_reads_back_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.gguf");
    let mut w = clover::gguf::GgufWriter::new();
    w.set("general.architecture", Value::str("test"));
    // 16 MiB each: past the 2 MiB folios a page cache may hold a file in,
    // so the middle of the first shares no folio with the second.
    w.add_tensor("a", GgmlType::F32, &[1 << 22]);
    w.add_tensor("b", GgmlType::F32, &[1 << 22]);
    w.write_to_path(&path, |i, _, out| {
        let bytes: Vec<u8> = (0..16usize << 20).map(|k| (k * 7 + i) as u8).collect();
        out.write_all(&bytes)
    })
    .unwrap();
    // The page cache lets go of written-back (clean) pages only.
    std::fs::File::open(&path).unwrap().sync_all().unwrap();
    let f = GgufFile::open(&path).unwrap();
    let sum = |name: &str| -> u64 { f.tensor(name).unwrap().data.iter().map(|&b| b as u64).sum() };
    let (a, b) = (sum("a"), sum("b"));
    let middle = |name: &str| {
        let d = f.tensor(name).unwrap().data;
        &d[2 << 20..d.len() - (2 << 20)]
    };
    assert!(any_page_resident(middle("a")) && any_page_resident(middle("b")));
    f.evict_tensor("a");
    assert!(any_page_resident(middle("b")), "b left with a");
    assert!(
        !any_page_resident(middle("a")),
        "a stayed in the page cache"
    );
    assert_eq!((sum("a"), sum("b")), (a, b), "the bytes read back");
}
