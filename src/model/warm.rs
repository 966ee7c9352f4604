//! Keeping the pool's other threads awake through one forward pass.
//!
//! A forward pass is a chain of short parallel regions (a few per layer)
//! separated by serial work on the driving thread: norms, routing, the
//! recurrence's bookkeeping. Once an idle rayon worker has searched for work
//! a few dozen times it sleeps on a futex, and waking it for the next region
//! costs a system call and, on a virtual machine whose idle vCPU was halted,
//! tens of microseconds more before the region's half can start: a short
//! parallel region that follows serial work pays a wake-up that one which
//! follows none does not.
//!
//! [`keep_warm`] sends every other thread of the current pool a job that
//! runs the pool's pending work as it appears ([`rayon::yield_now`]) and
//! spins in between, until the returned guard is dropped. The arithmetic is
//! unchanged: which thread runs a task never changes what the task computes.
//!
//! **Never under a task the pass waits for.** A worker that waits inside a
//! task it stole (a `join` whose other half was taken) runs its own queue's
//! jobs meanwhile, so a spinner it picked up there would sit on top of that
//! task until the pass ends, and the pass would wait for that task: a
//! deadlock. So `keep_warm` sends the spinners before the pass has any task
//! and waits (at most [`START_WAIT`], 250 µs) until each has started; a spinner that
//! starts later, when tasks of the pass may exist, leaves at once. A spinner
//! that started in time has no task of the pass beneath it. The driving
//! thread's own copy returns at once, and one pass at a time in the process
//! keeps a pool warm (two drivers' spinners could each sit on the other's
//! task).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long [`keep_warm`] waits for the other threads to start spinning:
/// several times a sleeping worker's wake-up. Past it (the
/// other cores busy with other work), the pass runs without them, as it would
/// have anyway; a longer wait would only burn the driving thread's time.
pub const START_WAIT: Duration = Duration::from_micros(250);

/// Set while some pass keeps a pool warm.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Ends the spinning when dropped.
pub struct Warm {
    shared: Arc<Shared>,
}

struct Shared {
    stop: AtomicBool,
    /// Past the start: a spinner starting now leaves at once.
    late: AtomicBool,
    /// Threads in the spin loop now.
    spinning: AtomicUsize,
}

impl Warm {
    /// How many threads are in the spin loop now.
    pub fn spinning(&self) -> usize {
        self.shared.spinning.load(SeqCst)
    }
}

impl Drop for Warm {
    fn drop(&mut self) {
        self.shared.stop.store(true, SeqCst);
        ACTIVE.store(false, SeqCst);
    }
}

/// Keeps the current pool's other threads running pending work and spinning
/// until the guard drops. `None` outside a pool, in a one-thread pool, while
/// another pass keeps one warm, or with `CLOVER_SPIN=0`.
pub fn keep_warm() -> Option<Warm> {
    let me = rayon::current_thread_index()?;
    let others = rayon::current_num_threads().checked_sub(1)?;
    if others == 0
        || !enabled()
        || ACTIVE
            .compare_exchange(false, true, SeqCst, SeqCst)
            .is_err()
    {
        return None;
    }
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        late: AtomicBool::new(false),
        spinning: AtomicUsize::new(0),
    });
    let s = Arc::clone(&shared);
    rayon::spawn_broadcast(move |ctx| {
        if ctx.index() == me {
            return;
        }
        s.spinning.fetch_add(1, SeqCst);
        // Started after the driver went on: tasks of the pass may be beneath.
        if !s.late.load(SeqCst) {
            while !s.stop.load(SeqCst) {
                if rayon::yield_now() != Some(rayon::Yield::Executed) {
                    std::hint::spin_loop();
                }
            }
        }
        s.spinning.fetch_sub(1, SeqCst);
    });
    let t0 = Instant::now();
    while shared.spinning.load(SeqCst) < others && t0.elapsed() < START_WAIT {
        std::hint::spin_loop();
    }
    shared.late.store(true, SeqCst);
    Some(Warm { shared })
}

/// `CLOVER_SPIN` unset or not `0`.
fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("CLOVER_SPIN").map_or(true, |v| v != "0"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;
    use std::time::{Duration, Instant};

    fn wait_for(what: &str, f: impl Fn() -> bool) {
        let t0 = Instant::now();
        while !f() {
            assert!(t0.elapsed() < Duration::from_secs(20), "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn the_other_threads_spin_run_the_regions_and_stop_with_the_guard() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        pool.install(|| {
            // Both other threads reach the loop when they start in time (a
            // loaded machine may keep them past START_WAIT now and then); the
            // driving thread never.
            let warm = (0..1000)
                .map(|_| keep_warm().expect("a 3-thread pool"))
                .find(|w| w.spinning() == 2)
                .expect("two threads spinning in one of 1000 passes");
            // Regions still run to completion, their work shared.
            for round in 0..200u64 {
                let v: Vec<u64> = (0..10_000u64).collect();
                let s: u64 = v.par_iter().map(|x| x * round).sum();
                assert_eq!(s, round * 10_000 * 9_999 / 2);
            }
            // One warm pass at a time.
            assert!(keep_warm().is_none());
            let shared = Arc::clone(&warm.shared);
            drop(warm);
            wait_for("the spinners leave", || shared.spinning.load(SeqCst) == 0);
        });
        // Back-to-back passes of nested regions (a spinner of one pass still
        // leaving while the next one starts): none may wait forever.
        let t0 = Instant::now();
        let two = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        two.install(|| {
            for round in 0..3000u64 {
                let _warm = keep_warm();
                let v: Vec<u64> = (0..64u64).collect();
                let s: u64 = v
                    .par_chunks(4)
                    .map(|c| c.par_iter().map(|x| x + round).sum::<u64>())
                    .sum();
                assert_eq!(s, 64 * 63 / 2 + 64 * round);
            }
        });
        eprintln!("3000 passes: {:?}", t0.elapsed());
        assert!(t0.elapsed() < Duration::from_secs(60));
        // Outside a pool, or in a pool of one, there is no one to keep warm.
        assert!(keep_warm().is_none());
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        assert!(one.install(keep_warm).is_none());
    }
}
