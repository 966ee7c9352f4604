//! Fatal signals never leave a mess: no raw terminal, no temporary file, no
//! silent death when the model file shrinks underneath its mapping.
//!
//! [`install`] (called once by the CLI) sets:
//! * `SIGPIPE` to its default action, so a closed pipe ends a command quietly
//!   like other Unix tools (`clover bench | head -1`), instead of a write error;
//! * `SIGINT`, `SIGTERM`, `SIGHUP`: remove every registered temporary output
//!   file, restore the terminal when the TUI holds it, then die of the same
//!   signal (the exit status stays the conventional one);
//! * `SIGBUS`: when the faulting address lies in a registered model mapping, the
//!   file changed or shrank while in use: the same clean-up, one line on stderr
//!   and exit status 1. Any other `SIGBUS` is cleaned up after and re-raised.
//!   The handler stays installed (no `SA_RESETHAND`): when several threads
//!   fault at once, the first prints and exits, the others wait for that
//!   exit instead of dying of the default action.
//! * `SIGXFSZ` ignored: a write past the file-size limit (`ulimit -f`) then
//!   fails with `EFBIG`, and the writer's error path removes its temporary
//!   file and prints one line, as for a full disk.
//!
//! Handlers run on whatever thread the kernel picks, at any instruction, so
//! everything they touch is a fixed-size table of atomics filled ahead of time,
//! and they call only async-signal-safe functions (`unlink`, `write`,
//! `tcsetattr`, `_exit`, `raise`). Registered temporary paths are leaked C
//! strings: a handler may read a slot while another thread unregisters it, so a
//! path is never freed (a command writes a handful of files at most).

use std::ffi::{c_char, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Most temporary output files alive at once.
const MAX_TEMPS: usize = 32;
/// Most model mappings alive at once.
const MAX_MAPS: usize = 64;

static TEMPS: [AtomicPtr<c_char>; MAX_TEMPS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_TEMPS];
static MAP_START: [AtomicUsize; MAX_MAPS] = [const { AtomicUsize::new(0) }; MAX_MAPS];
static MAP_LEN: [AtomicUsize; MAX_MAPS] = [const { AtomicUsize::new(0) }; MAX_MAPS];

/// The terminal's settings before the TUI made it raw, and the fd they belong to.
static TERM_SAVED: OnceLock<(i32, libc::termios)> = OnceLock::new();
/// Whether the TUI holds the terminal now.
static TERM_ACTIVE: AtomicBool = AtomicBool::new(false);
/// Set by the first thread whose `SIGBUS` lies in a model mapping.
static BUS_EXITING: AtomicBool = AtomicBool::new(false);
/// Set by `install`; registrations before it are still honoured.
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The line printed when the model mapping faults.
const BUS_MESSAGE: &[u8] = b"error: the model file changed or shrank while in use \
(run with --no-mmap to read it into memory instead)\n";
/// What the TUI turned on, turned off: bracketed paste, mouse reports, the
/// alternate screen; then the cursor is shown again.
const TERM_RESET: &[u8] =
    b"\x1b[?2004l\x1b[?1006l\x1b[?1015l\x1b[?1003l\x1b[?1002l\x1b[?1000l\x1b[?1049l\x1b[?25h";

/// Installs the handlers (idempotent).
pub fn install() {
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return;
    }
    // SAFETY: setting dispositions with valid handler functions of the
    // signature the flags promise; `sigaction` structs are zeroed then filled.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_terminate as extern "C" fn(libc::c_int) as usize;
            sa.sa_flags = libc::SA_RESETHAND;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction =
            on_bus as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
    }
}

/// Leaves `SIGINT` and `SIGTERM` to a command that handles them itself
/// (`clover serve` drains its requests and exits 0): their default action is
/// restored, for the command's own handler to replace.
pub fn default_terminate() {
    // SAFETY: restoring the default disposition of two signals.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
    }
}

/// A temporary file to remove if a signal ends the process; undone by
/// [`forget_temp`] with the returned slot.
pub fn register_temp(path: &Path) -> Option<usize> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    let ptr = c.into_raw();
    for (i, slot) in TEMPS.iter().enumerate() {
        if slot
            .compare_exchange(
                std::ptr::null_mut(),
                ptr,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_ok()
        {
            return Some(i);
        }
    }
    // Table full: the file is still removed on errors and drops, only not on
    // signals. Free the string, nobody else saw it.
    // SAFETY: `ptr` came from `CString::into_raw` above and was never shared.
    drop(unsafe { CString::from_raw(ptr) });
    None
}

/// The temporary file of `slot` is gone or renamed: signals leave it alone.
pub fn forget_temp(slot: usize) {
    // The string is leaked on purpose (see the module docs).
    TEMPS[slot].store(std::ptr::null_mut(), Ordering::SeqCst);
}

/// A model mapping: a `SIGBUS` inside it means the file changed underneath.
pub fn register_mapping(start: *const u8, len: usize) -> Option<usize> {
    for i in 0..MAX_MAPS {
        if MAP_LEN[i]
            .compare_exchange(0, usize::MAX, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            MAP_START[i].store(start as usize, Ordering::SeqCst);
            MAP_LEN[i].store(len.max(1), Ordering::SeqCst);
            return Some(i);
        }
    }
    None
}

/// The mapping of `slot` is unmapped.
pub fn forget_mapping(slot: usize) {
    MAP_START[slot].store(0, Ordering::SeqCst);
    MAP_LEN[slot].store(0, Ordering::SeqCst);
}

/// Call just before the TUI makes the terminal raw: saves its settings so a
/// signal can put them back. `false` when there is no terminal to save.
pub fn terminal_entering() -> bool {
    if TERM_SAVED.get().is_none() {
        // SAFETY: isatty / open / tcgetattr on a valid fd and a zeroed termios
        // that tcgetattr fills; the /dev/tty fd stays open for the handlers.
        let saved = unsafe {
            let fd = if libc::isatty(libc::STDIN_FILENO) == 1 {
                libc::STDIN_FILENO
            } else {
                libc::open(c"/dev/tty".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC)
            };
            let mut t: libc::termios = std::mem::zeroed();
            (fd >= 0 && libc::tcgetattr(fd, &mut t) == 0).then_some((fd, t))
        };
        let Some(saved) = saved else { return false };
        let _ = TERM_SAVED.set(saved);
    }
    TERM_ACTIVE.store(true, Ordering::SeqCst);
    true
}

/// The TUI gave the terminal back.
pub fn terminal_left() {
    TERM_ACTIVE.store(false, Ordering::SeqCst);
}

/// Removes temporary files and restores the terminal: async-signal-safe.
fn clean_up() {
    for slot in &TEMPS {
        let p = slot.load(Ordering::SeqCst);
        if !p.is_null() {
            // SAFETY: a registered pointer is a leaked, never-freed C string.
            unsafe { libc::unlink(p) };
        }
    }
    if TERM_ACTIVE.swap(false, Ordering::SeqCst) {
        if let Some((fd, t)) = TERM_SAVED.get() {
            // SAFETY: writing a static buffer to stdout and restoring saved
            // settings on the fd they were read from; both async-signal-safe.
            unsafe {
                libc::write(
                    libc::STDOUT_FILENO,
                    TERM_RESET.as_ptr().cast(),
                    TERM_RESET.len(),
                );
                libc::tcsetattr(*fd, libc::TCSANOW, t);
            }
        }
    }
}

/// Whether `addr` lies in a registered model mapping (async-signal-safe).
fn in_mapping(addr: usize) -> bool {
    (0..MAX_MAPS).any(|i| {
        let (s, n) = (
            MAP_START[i].load(Ordering::SeqCst),
            MAP_LEN[i].load(Ordering::SeqCst),
        );
        n != 0 && n != usize::MAX && addr >= s && addr - s < n
    })
}

extern "C" fn on_terminate(sig: libc::c_int) {
    clean_up();
    // SA_RESETHAND put the default action back; the signal is blocked while
    // this handler runs, so it is delivered (and ends the process) on return.
    // SAFETY: raise is async-signal-safe.
    unsafe { libc::raise(sig) };
}

extern "C" fn on_bus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    if !in_mapping(addr) {
        // Not ours: clean up, put the default action back, and return: the
        // faulting access runs again and ends the process as before.
        clean_up();
        // SAFETY: signal is async-signal-safe.
        unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
        return;
    }
    if BUS_EXITING.swap(true, Ordering::SeqCst) {
        // Another thread faulted first and is exiting: wait for it.
        loop {
            // SAFETY: pause is async-signal-safe.
            unsafe { libc::pause() };
        }
    }
    clean_up();
    // SAFETY: write and _exit are async-signal-safe.
    unsafe {
        libc::write(
            libc::STDERR_FILENO,
            BUS_MESSAGE.as_ptr().cast(),
            BUS_MESSAGE.len(),
        );
        libc::_exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forgotten_temp_slot_is_empty_again() {
        let a = register_temp(Path::new("/nonexistent/a")).unwrap();
        assert!(!TEMPS[a].load(Ordering::SeqCst).is_null());
        forget_temp(a);
        assert!(TEMPS[a].load(Ordering::SeqCst).is_null());
    }

    #[test]
    fn an_address_is_in_a_mapping_only_while_it_is_registered() {
        let buf = [0u8; 64];
        let base = buf.as_ptr() as usize;
        // Other tests of this binary leak loaded models (and their slots).
        let Some(s) = register_mapping(buf.as_ptr(), buf.len()) else {
            assert!((0..MAX_MAPS).all(|i| MAP_LEN[i].load(Ordering::SeqCst) != 0));
            return;
        };
        assert!(in_mapping(base) && in_mapping(base + 63));
        assert!(!in_mapping(base + 64));
        forget_mapping(s);
        assert!(!in_mapping(base + 10));
    }
}
