//! A connection's socket as hyper sees it: it tells the connection's clock
//! when bytes arrive, and puts the error object into the answers hyper
//! writes on its own.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::Clock;

/// The socket, telling the clock when bytes arrive. hyper answers a head it
/// refuses (431: headers too large; 414: a target too long) itself, with an
/// empty body: that answer is replaced, as it is written, by the same status
/// with the error object as its body ([`crate::server::error::raw_answer`]).
pub(super) struct Watched {
    pub(super) io: TcpStream,
    pub(super) clock: Arc<Clock>,
    /// A replacement answer still being written, and how far.
    pub(super) replaced: Option<(Vec<u8>, usize)>,
}

/// The answer to write instead of `head`, when hyper's automatic answer to a
/// refused head starts there.
fn replacement(head: &[u8]) -> Option<Vec<u8>> {
    let (status, reason, message) = if head.starts_with(b"HTTP/1.1 431 ") {
        (
            431,
            "Request Header Fields Too Large",
            "the request's headers are too large",
        )
    } else if head.starts_with(b"HTTP/1.1 414 ") {
        (414, "URI Too Long", "the request's target is too long")
    } else {
        return None;
    };
    Some(crate::server::error::raw_answer(status, reason, message))
}

impl Watched {
    /// Writes what is left of a replacement answer.
    fn poll_replaced(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while let Some((bytes, at)) = &mut self.replaced {
            if *at == bytes.len() {
                self.replaced = None;
                break;
            }
            match Pin::new(&mut self.io).poll_write(cx, &bytes[*at..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()))
                }
                Poll::Ready(Ok(n)) => *at += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Takes `len` bytes of hyper's automatic answer as written, and starts
    /// writing `answer` instead.
    fn replace(
        &mut self,
        cx: &mut Context<'_>,
        answer: Vec<u8>,
        len: usize,
    ) -> Poll<std::io::Result<usize>> {
        self.replaced = Some((answer, 0));
        match self.poll_replaced(cx) {
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            // The rest goes out at the next write, flush or shutdown.
            _ => Poll::Ready(Ok(len)),
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.clock.on_bytes();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_replaced(cx))?;
        if let Some(answer) = replacement(buf) {
            return this.replace(cx, answer, buf.len());
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_replaced(cx))?;
        let first = bufs.iter().find(|b| !b.is_empty());
        if let Some(answer) = first.and_then(|b| replacement(b)) {
            let len = bufs.iter().map(|b| b.len()).sum();
            return this.replace(cx, answer, len);
        }
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_replaced(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_replaced(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}
