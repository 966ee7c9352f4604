//! The server's connections: the accept loop with its connection cap, the
//! header and idle keep-alive timeouts, and shutdown (docs/SERVER.md,
//! "Connections").
//!
//! Each connection is in one of three phases, kept in its [`Clock`]:
//! - **head**: a request is being read up to the end of its headers. It
//!   starts at accept, and again when the first byte of a next request
//!   arrives; the head must be complete within the header timeout.
//! - **busy**: a request is being answered (its body read, its reply
//!   generated and written). No timeout applies here: the body has its own
//!   (in the handler) and a reply is as long as the generation.
//! - **idle**: between requests on a kept-alive connection; after the idle
//!   timeout the connection is closed.
//!
//! At the cap, a new connection takes the place of the one that has waited
//! longest without a request being answered (idle, or still sending its
//! head): a crowd that connects and sends nothing cannot lock clients out.
//! When every connection is being answered, the new one is answered 503
//! with `Retry-After` and closed.
//! At shutdown the listener closes, connections that are not busy are closed
//! at once, busy ones finish their reply (hyper's graceful shutdown) until
//! the caller's deadline.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::Router;
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tower_service::Service;

mod socket;

use socket::Watched;

/// The connection limits `clover serve` takes as flags.
#[derive(Clone, Debug)]
pub struct Limits {
    /// A request's head (request line and headers) must arrive within this,
    /// from accept or from its first byte.
    pub header: Duration,
    /// A kept-alive connection may wait this long for its next request.
    pub idle: Duration,
    /// Connections served at once; more get 503.
    pub max_connections: usize,
}

/// Counters `/metrics` shows.
#[derive(Default)]
pub struct ConnStats {
    pub open: AtomicU64,
    pub accepted: AtomicU64,
    /// Answered 503 at accept: the cap was reached.
    pub refused: AtomicU64,
    pub header_timeouts: AtomicU64,
    pub idle_timeouts: AtomicU64,
    /// Closed at the cap to make room for a new connection.
    pub evicted: AtomicU64,
}

/// Each connection's clock and the bell that closes it, by id.
type Conns = std::collections::HashMap<u64, (Arc<Clock>, Arc<Notify>)>;

/// The connections being served, for eviction at the cap.
#[derive(Default)]
struct Registry {
    conns: std::sync::Mutex<Conns>,
    next: AtomicU64,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, Conns> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(&self, clock: Arc<Clock>, evict: Arc<Notify>) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, (clock, evict));
        id
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Tells the connection that has waited longest without being answered
    /// to close; `false` when every one is being answered.
    fn evict_oldest_waiting(&self) -> bool {
        let mut conns = self.lock();
        let oldest = conns
            .iter()
            .filter(|(_, (c, _))| c.phase() != BUSY)
            .min_by_key(|(_, (c, _))| c.phase_start())
            .map(|(&id, _)| id);
        match oldest.and_then(|id| conns.remove(&id)) {
            Some((_, evict)) => {
                evict.notify_one();
                true
            }
            None => false,
        }
    }
}

const HEAD: u8 = 0;
const BUSY: u8 = 1;
const IDLE: u8 = 2;

/// A connection's phase and when it began.
struct Clock {
    start: Instant,
    phase: AtomicU8,
    /// Microseconds from `start` to the phase's beginning.
    since_us: AtomicU64,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            start: Instant::now(),
            phase: AtomicU8::new(HEAD),
            since_us: AtomicU64::new(0),
        }
    }

    fn set(&self, phase: u8) {
        self.since_us
            .store(self.start.elapsed().as_micros() as u64, Ordering::Release);
        self.phase.store(phase, Ordering::Release);
    }

    /// Bytes arrived: an idle connection starts reading a request head.
    fn on_bytes(&self) {
        if self.phase.load(Ordering::Acquire) == IDLE {
            self.set(HEAD);
        }
    }

    fn phase(&self) -> u8 {
        self.phase.load(Ordering::Acquire)
    }

    /// When the current phase began.
    fn phase_start(&self) -> Instant {
        self.start + Duration::from_micros(self.since_us.load(Ordering::Acquire))
    }

    /// When the current phase runs out (`None`: busy, no limit).
    fn deadline(&self, limits: &Limits) -> Option<Instant> {
        let since = self.phase_start();
        match self.phase() {
            HEAD => Some(since + limits.header),
            IDLE => Some(since + limits.idle),
            _ => None,
        }
    }
}

/// A reply's body: when hyper has written it all (or given up on it) and
/// drops it, the connection is idle.
struct Tracked {
    inner: Body,
    clock: Arc<Clock>,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.clock.set(IDLE);
    }
}

/// How often a connection looks at its clock (the timeouts' resolution).
const TICK: Duration = Duration::from_millis(250);

/// What every connection task shares.
#[derive(Clone)]
struct Shared {
    router: Router,
    limits: Arc<Limits>,
    stats: Arc<ConnStats>,
    registry: Arc<Registry>,
    stop: watch::Receiver<bool>,
}

/// Serves one connection, holding its place under the cap.
async fn serve_counted(stream: TcpStream, sh: Shared, permit: OwnedSemaphorePermit) {
    sh.stats.open.fetch_add(1, Ordering::Relaxed);
    let clock = Arc::new(Clock::new());
    let evict = Arc::new(Notify::new());
    let id = sh.registry.add(Arc::clone(&clock), Arc::clone(&evict));
    let stats = Arc::clone(&sh.stats);
    let registry = Arc::clone(&sh.registry);
    serve_conn(stream, sh, clock, evict).await;
    registry.remove(id);
    stats.open.fetch_sub(1, Ordering::Relaxed);
    drop(permit);
}

/// Serves one connection until it ends, times out, is evicted, or shutdown
/// closes it.
async fn serve_conn(stream: TcpStream, sh: Shared, clock: Arc<Clock>, evict: Arc<Notify>) {
    let Shared {
        router,
        limits,
        stats,
        mut stop,
        ..
    } = sh;
    let io = TokioIo::new(Watched {
        io: stream,
        clock: Arc::clone(&clock),
        replaced: None,
    });
    let on_request = Arc::clone(&clock);
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        on_request.set(BUSY);
        let mut router = router.clone();
        let clock = Arc::clone(&on_request);
        async move {
            let resp = router.call(req.map(Body::new)).await?;
            Ok::<_, Infallible>(resp.map(|inner| Body::new(Tracked { inner, clock })))
        }
    });
    let conn = hyper::server::conn::http1::Builder::new().serve_connection(io, svc);
    tokio::pin!(conn);
    let mut stopping = *stop.borrow();
    loop {
        if stopping && clock.phase() != BUSY {
            // Nothing being answered: close now.
            return;
        }
        let wake = tokio::time::Instant::now() + TICK;
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = tokio::time::sleep_until(wake) => {
                if clock.deadline(&limits).is_some_and(|d| Instant::now() >= d) {
                    let counter = match clock.phase() {
                        IDLE => &stats.idle_timeouts,
                        _ => &stats.header_timeouts,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
            _ = stop.changed(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = evict.notified() => {
                stats.evicted.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }
}

/// What a connection past the cap reads before it is closed.
fn refusal() -> Vec<u8> {
    let body = super::error::ApiError::status(503, "too many connections; retry later").to_json();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Refusals being written at once; past this, a connection over the cap is
/// closed without a word.
const MAX_REFUSING: usize = 64;

/// Accepts and serves connections until `shutdown` resolves, then closes
/// the listener, closes idle connections, lets busy ones finish, and waits
/// for them for up to `drain`.
pub async fn run(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    stats: Arc<ConnStats>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    let cap = limits.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(cap));
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    let (stop_tx, stop_rx) = watch::channel(false);
    let shared = Shared {
        router,
        limits: Arc::new(limits),
        stats: Arc::clone(&stats),
        registry: Arc::new(Registry::default()),
        stop: stop_rx,
    };
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(_) => {
                    // Out of descriptors or memory for a moment: the
                    // timeouts free some; try again shortly.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let sh = shared.clone();
        match Arc::clone(&slots).try_acquire_owned() {
            Ok(permit) => {
                stats.accepted.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(serve_counted(stream, sh, permit));
            }
            Err(_) if shared.registry.evict_oldest_waiting() => {
                // The evicted connection gives its place back as soon as its
                // task runs (each such waiter has one eviction of its own).
                stats.accepted.fetch_add(1, Ordering::Relaxed);
                let slots = Arc::clone(&slots);
                tokio::spawn(async move {
                    if let Ok(permit) = slots.acquire_owned().await {
                        serve_counted(stream, sh, permit).await;
                    }
                });
            }
            Err(_) => {
                stats.refused.fetch_add(1, Ordering::Relaxed);
                if let Ok(p) = Arc::clone(&refusing).try_acquire_owned() {
                    tokio::spawn(async move {
                        let mut stream = stream;
                        let write = async {
                            stream.write_all(&refusal()).await?;
                            stream.shutdown().await
                        };
                        let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
                        drop(p);
                    });
                }
            }
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let all = u32::try_from(cap).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(drain, slots.acquire_many(all)).await;
}

/// Raises the soft limit on open files to the hard one, so that the
/// connection cap (not the descriptor limit) is what refuses clients.
/// Returns the soft limit now in force.
pub fn raise_fd_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit write and read a plain struct we own.
    unsafe {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 0;
        }
        if r.rlim_cur < r.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: r.rlim_max,
                rlim_max: r.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return raised.rlim_cur;
            }
        }
        r.rlim_cur
    }
}
