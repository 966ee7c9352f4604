//! Every file a command writes goes through here, so nothing is destroyed and
//! nothing half-written is left behind.
//!
//! * The path must be a regular file or not exist yet. A directory, device,
//!   FIFO or socket is refused with one line: writing "over" `/dev/null` or a
//!   named pipe would silently replace it (or block) instead of saving anything.
//! * A symlink is resolved to its target, which must itself be a regular file or
//!   missing behind an existing directory; the target is replaced, the link kept.
//! * Bytes go to a temporary file in the target's directory, which is fsynced and
//!   renamed over the target only when complete (then the directory is synced).
//!   An error, a drop before [`OutputFile::commit`], or a terminating signal
//!   ([`crate::signals`]) removes the temporary file.
//! * Replacing an existing file keeps its permission bits.
//! * An output that is the same file as one of the process's inputs (same
//!   device and inode, so through a symlink or a hard link too) is refused
//!   with one line: every file a command reads is opened by [`open_input`],
//!   which remembers it while its guard lives (a model: as long as it is
//!   open), and [`OutputFile::create`] and [`check_not_input`] look the
//!   target up. Commands call `check_not_input` on their outputs
//!   right after opening their inputs, before any work.
//! * An input must be a regular file (or a block device, which holds a
//!   model as a file does): a FIFO would block the open forever, a
//!   directory or character device is no model. Text read with a bound
//!   (prompts, perplexity texts) may also come from a pipe or a device.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::signals;

/// A file being written; it appears at its path only on [`OutputFile::commit`].
pub struct OutputFile {
    dest: PathBuf,
    tmp: PathBuf,
    file: Option<File>,
    slot: Option<usize>,
}

/// Distinguishes the temporary files of one process.
static COUNTER: AtomicU64 = AtomicU64::new(0);

impl OutputFile {
    /// Checks `path` ([`target`]) and creates the temporary file beside it.
    pub fn create(path: &Path) -> io::Result<OutputFile> {
        let dest = target(path)?;
        check_not_input(&dest)?;
        let name = dest
            .file_name()
            .ok_or_else(|| invalid(format!("{} is not a file path", path.display())))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(
            ".{}-{}.tmp",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let tmp = dest.with_file_name(tmp_name);
        let slot = signals::register_temp(&tmp);
        let file = match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => f,
            Err(e) => {
                if let Some(s) = slot {
                    signals::forget_temp(s);
                }
                return Err(e);
            }
        };
        let out = OutputFile {
            dest,
            tmp,
            file: Some(file),
            slot,
        };
        if let Ok(m) = fs::metadata(&out.dest) {
            out.file().set_permissions(m.permissions())?;
        }
        Ok(out)
    }

    /// Where the bytes are until [`OutputFile::commit`] (to check them there).
    pub fn temp_path(&self) -> &Path {
        &self.tmp
    }

    /// The temporary file, to write into.
    pub fn file(&self) -> &File {
        self.file
            .as_ref()
            .expect("an OutputFile holds its file until commit")
    }

    /// Where the file will appear (the symlink's target when the path was one).
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// Flushes the data to disk and renames the file into place.
    pub fn commit(mut self) -> io::Result<()> {
        let file = self.file.take().expect("commit runs once");
        let result = file.sync_all().and_then(|_| {
            drop(file);
            fs::rename(&self.tmp, &self.dest)
        });
        if let Err(e) = result {
            let _ = fs::remove_file(&self.tmp);
            self.forget();
            return Err(e);
        }
        self.forget();
        // The rename is durable once the directory is; best effort.
        if let Some(dir) = self.dest.parent().filter(|d| !d.as_os_str().is_empty()) {
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }

    fn forget(&mut self) {
        if let Some(s) = self.slot.take() {
            signals::forget_temp(s);
        }
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = fs::remove_file(&self.tmp);
        }
        self.forget();
    }
}

/// Writes `bytes` to `path` through an [`OutputFile`].
pub fn write_file_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let out = OutputFile::create(path)?;
    let mut f = out.file();
    f.write_all(bytes)?;
    out.commit()
}

/// The regular file that writing to `path` replaces or creates: `path` itself,
/// or a symlink's target. Anything else is an error naming what is there.
pub fn target(path: &Path) -> io::Result<PathBuf> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(path.to_path_buf()),
        Err(e) => return Err(e),
    };
    if meta.file_type().is_symlink() {
        let real = match fs::canonicalize(path) {
            Ok(p) => p,
            Err(_) => {
                return Err(invalid(format!(
                    "{} is a symlink to nothing: refusing to write through it",
                    path.display()
                )))
            }
        };
        let meta = fs::metadata(&real)?;
        return match what(&meta.file_type()) {
            None => Ok(real),
            Some(kind) => Err(invalid(format!(
                "{} is a symlink to {kind} ({}), not a regular file: refusing to replace it",
                path.display(),
                real.display()
            ))),
        };
    }
    match what(&meta.file_type()) {
        None => Ok(path.to_path_buf()),
        Some(kind) => Err(invalid(format!(
            "{} is {kind}, not a regular file: refusing to replace it",
            path.display()
        ))),
    }
}

/// The files this process holds open as inputs: (device, inode, path, id).
static INPUTS: Mutex<Vec<(u64, u64, PathBuf, u64)>> = Mutex::new(Vec::new());
static INPUT_IDS: AtomicU64 = AtomicU64::new(0);

/// An input's entry in the table [`check_not_input`] reads: removed when
/// dropped, or kept for the rest of the process by [`InputGuard::keep`].
#[derive(Debug)]
pub struct InputGuard(u64);

impl InputGuard {
    /// The input stays protected until the process ends (a text file read
    /// whole by a command).
    pub fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for InputGuard {
    fn drop(&mut self) {
        let mut inputs = INPUTS.lock().unwrap_or_else(|e| e.into_inner());
        inputs.retain(|e| e.3 != self.0);
    }
}

/// Opens `path` for reading as an input: a regular file or a block device,
/// anything else one error naming what it is, without blocking on a FIFO
/// (`O_NONBLOCK` at the open, cleared after). While the guard lives, no
/// output of this process replaces the file.
pub fn open_input(path: &Path) -> io::Result<(File, InputGuard)> {
    open_input_with(path, false)
}

/// [`open_input`] for text read with a bound (a prompt or a text file):
/// pipes and character devices are taken too (`-f <(cmd)`, `-f /dev/stdin`),
/// since the read stops at its limit.
pub fn open_text_input(path: &Path) -> io::Result<(File, InputGuard)> {
    open_input_with(path, true)
}

fn open_input_with(path: &Path, streams: bool) -> io::Result<(File, InputGuard)> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    let t = meta.file_type();
    let stream = t.is_fifo() || t.is_char_device() || t.is_socket();
    if !(t.is_file() || t.is_block_device() || streams && stream) {
        return Err(invalid(format!(
            "{} is {}, not a regular file",
            path.display(),
            what(&t).unwrap_or("not a regular file")
        )));
    }
    // Reads block again from here on (a regular file never blocks anyway).
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl on a descriptor this function owns, with valid flags.
    unsafe {
        let fd = file.as_raw_fd();
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    let id = INPUT_IDS.fetch_add(1, Ordering::Relaxed);
    let mut inputs = INPUTS.lock().unwrap_or_else(|e| e.into_inner());
    inputs.push((meta.dev(), meta.ino(), path.to_path_buf(), id));
    Ok((file, InputGuard(id)))
}

/// An error when `out` (followed through symlinks) is a file this process
/// holds as an input ([`open_input`]): writing it would destroy what is
/// being read. A path that does not exist yet is no input.
pub fn check_not_input(out: &Path) -> io::Result<()> {
    let Ok(meta) = fs::metadata(out) else {
        return Ok(());
    };
    let inputs = INPUTS.lock().unwrap_or_else(|e| e.into_inner());
    match inputs
        .iter()
        .find(|(d, i, ..)| *d == meta.dev() && *i == meta.ino())
    {
        Some((_, _, input, _)) => Err(invalid(format!(
            "{} is the same file as the input {}: the output would replace the input it is read from (choose another output)",
            out.display(),
            input.display()
        ))),
        None => Ok(()),
    }
}

/// What a non-regular file is, in words (`None` for a regular file).
fn what(t: &fs::FileType) -> Option<&'static str> {
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leftovers(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    #[test]
    fn an_input_is_protected_while_its_guard_lives_through_any_name() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("in.gguf");
        fs::write(&p, b"model").unwrap();
        std::os::unix::fs::symlink(&p, dir.path().join("link")).unwrap();
        fs::hard_link(&p, dir.path().join("hard")).unwrap();
        let (_f, guard) = open_input(&p).unwrap();
        for name in ["in.gguf", "link", "hard"] {
            let e = write_file_atomic(&dir.path().join(name), b"x").unwrap_err();
            assert!(e.to_string().contains("same file as the input"), "{e}");
        }
        assert_eq!(fs::read(&p).unwrap(), b"model");
        drop(guard);
        write_file_atomic(&p, b"new").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
    }

    #[test]
    fn an_input_that_is_a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = open_input(&p).unwrap_err();
        assert!(
            e.to_string().contains("is a FIFO, not a regular file"),
            "{e}"
        );
        // Text may come from a pipe: the open does not block either.
        assert!(open_text_input(&p).is_ok());
    }

    #[test]
    fn an_existing_regular_file_is_replaced_whole_and_keeps_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.bin");
        fs::write(&p, b"old contents that are longer").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o640)).unwrap();
        write_file_atomic(&p, b"new").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o640
        );
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn a_dropped_output_leaves_neither_file_nor_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.bin");
        {
            let out = OutputFile::create(&p).unwrap();
            let mut f = out.file();
            f.write_all(b"half").unwrap();
        }
        assert!(!p.exists());
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn a_directory_fifo_or_device_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let e = write_file_atomic(dir.path(), b"x").unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = write_file_atomic(&fifo, b"x").unwrap_err();
        assert!(e.to_string().contains("is a FIFO"), "{e}");
        let e = write_file_atomic(Path::new("/dev/null"), b"x").unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn a_symlink_to_a_regular_file_replaces_the_target_and_keeps_the_link() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.bin");
        let link = dir.path().join("link.bin");
        fs::write(&real, b"old").unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        write_file_atomic(&link, b"new").unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(&real).unwrap(), b"new");
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("missing"), &dangling).unwrap();
        assert!(write_file_atomic(&dangling, b"x").is_err());
        let to_dev = dir.path().join("to-null");
        std::os::unix::fs::symlink("/dev/null", &to_dev).unwrap();
        let e = write_file_atomic(&to_dev, b"x").unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
    }
}
