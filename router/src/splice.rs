//! Zero-copy forwarding between two plain TCP sockets: `splice(2)` from one socket into a kernel pipe and from the
//! pipe into the other socket, so the bytes are never copied through user space (issue 45, goal 1).
//!
//! Written over rustix's `splice` (rustix 1.1, pinned in `Cargo.lock`; the crate is maintained and wraps the
//! system call safely, so this crate keeps `#![forbid(unsafe_code)]`). Not tokio-splice2 (used before): it
//! shuts its writer down when it reaches a target length (an observed HTTP body must leave the connection open) and
//! gives no way to tell a refused splice from a failed connection.
//!
//! [`PipeSplice`] moves bytes one way, up to a length or to the reader's end, and leaves both sockets open (the
//! caller shuts the writer down, or goes on copying after an observed HTTP body). The pipe is filled only while
//! empty, so `EAGAIN` from the reader always means the socket has nothing (never "pipe full"). Bounded: at most
//! [`PIPE_CAPACITY`] bytes (or what the kernel grants, `fs.pipe-max-size`) wait in the pipe, none in user space.

use std::io;
use std::os::fd::OwnedFd;
use std::task::{Context, Poll};

use rustix::io::Errno;
use rustix::pipe::{splice, PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// The pipe's capacity asked for (the kernel may grant less: `fs.pipe-max-size`). The largest a pipe may be by
/// default: fewer calls per byte moved; the kernel holds only the pages the bytes in the pipe already occupied (the
/// reader's socket buffers, passed on by reference).
pub const PIPE_CAPACITY: usize = 1 << 20;

const FLAGS: SpliceFlags = SpliceFlags::NONBLOCK.union(SpliceFlags::MOVE);

/// Whether a splice error means the kernel will not splice these descriptors (the caller copies instead) rather
/// than that the connection failed.
pub fn refused(e: &io::Error) -> bool {
    [Errno::INVAL, Errno::NOSYS, Errno::OPNOTSUPP].iter().any(|x| e.raw_os_error() == Some(x.raw_os_error()))
}

/// One direction of a spliced relay: reader socket -> pipe -> writer socket.
pub struct PipeSplice {
    pipe_out: OwnedFd,
    pipe_in: OwnedFd,
    /// Bytes in the pipe, read and not yet written.
    in_pipe: usize,
    /// Bytes still to read (`u64::MAX`: up to the reader's end).
    left: u64,
    /// Bytes written to the writer.
    moved: u64,
    /// The reader reached its end.
    ended: bool,
    /// Bytes asked of the reader at once: the pipe's capacity.
    chunk: usize,
}

impl PipeSplice {
    /// A direction that moves `len` bytes (`u64::MAX`: up to the reader's end), with a new pipe (fails when out of
    /// file descriptors or memory: the caller copies instead).
    pub fn new(len: u64) -> io::Result<Self> {
        let (pipe_out, pipe_in) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        let chunk = match rustix::pipe::fcntl_setpipe_size(&pipe_in, PIPE_CAPACITY) {
            Ok(n) => n,
            Err(_) => rustix::pipe::fcntl_getpipe_size(&pipe_in)?,
        };
        Ok(PipeSplice { pipe_out, pipe_in, in_pipe: 0, left: len, moved: 0, ended: false, chunk })
    }

    /// Bytes written so far.
    pub fn moved(&self) -> u64 {
        self.moved
    }

    /// Whether the reader reached its end (before the length asked for).
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Whether nothing has gone through the pipe yet (a refusal now loses no byte).
    pub fn untouched(&self) -> bool {
        self.moved == 0 && self.in_pipe == 0
    }

    fn reading(&self) -> bool {
        !self.ended && self.left > 0
    }

    /// Bytes to ask the reader for: the pipe's capacity, or less when less is left. (Asking for all that is left,
    /// as the kernel stops when the pipe's slots are full anyway, measured at half the throughput.)
    fn want(&self) -> usize {
        self.chunk.min(usize::try_from(self.left).unwrap_or(usize::MAX))
    }

    fn read_into_pipe(&mut self, n: usize) {
        if n == 0 {
            self.ended = true;
        } else {
            self.in_pipe += n;
            self.left -= n as u64;
        }
    }

    /// Moves bytes until the length asked for has been written or the reader ended and the pipe is empty.
    pub fn poll(&mut self, cx: &mut Context<'_>, r: &TcpStream, w: &TcpStream) -> Poll<io::Result<()>> {
        loop {
            if self.in_pipe > 0 {
                // A full writer waits with the pipe as it is (filling its free room meanwhile measured slower: more
                // bytes in flight and a read attempt per wait; docs/service-network-router.md, "One plain hop").
                std::task::ready!(w.poll_write_ready(cx))?;
                let (out, len) = (&self.pipe_out, self.in_pipe);
                match w.try_io(Interest::WRITABLE, || Ok(splice(out, None, w, None, len, FLAGS)?)) {
                    Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Ok(n) => {
                        self.in_pipe -= n;
                        self.moved += n as u64;
                    }
                    // readiness cleared: the next poll registers the waker
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Poll::Ready(Err(e)),
                }
                continue;
            }
            if !self.reading() {
                return Poll::Ready(Ok(()));
            }
            // The pipe is empty: EAGAIN can only mean the socket has nothing.
            std::task::ready!(r.poll_read_ready(cx))?;
            let (pipe_in, want) = (&self.pipe_in, self.want());
            match r.try_io(Interest::READABLE, || Ok(splice(r, None, pipe_in, None, want, FLAGS)?)) {
                Ok(n) => self.read_into_pipe(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}
