//! A minimal reference relay for the router's benchmarks (issue 45): a connection in, a connection out, bytes both
//! ways, on one thread: copied with 256 KiB buffers (`tokio::io::copy_bidirectional_with_sizes`), or spliced when
//! both legs are plain (the router's `splice::PipeSplice`). Each leg is plain TCP or mutual TLS through the router's
//! own TLS code (`tls`, `tlsio`: the same handshake, suite order and record layer as a link), so what it leaves out is
//! everything a router adds between the two: streams multiplexed on a link, frames, per-stream credit, routing. One
//! TLS connection per client connection, with TCP's buffers between the stages, is not how sites link (a link carries
//! every stream); beside the router it shows what the router's building blocks carry on this machine without its
//! design. A reference, not a bound.
//!
//! `relay_floor LISTEN TARGET [--accept CA,CERT,KEY] [--connect CA,CERT,KEY] [--copy]`; prints `ready` once it
//! listens. Loopback only: LISTEN and TARGET must be loopback addresses (127.0.0.0/8 or ::1). Both legs plain are
//! spliced unless `--copy`; a splice the kernel refuses fails the connection (no fallback to copying: loopback TCP
//! sockets always splice).

use std::net::{Shutdown, SocketAddr};
use std::sync::Arc;
use std::task::Poll;

use rustls_pki_types::ServerName;
use snrouter::config::TlsFiles;
use snrouter::splice::PipeSplice;
use snrouter::tls;
use snrouter::tlsio::TlsIo;
use socket2::SockRef;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

const BUFFER: usize = 256 * 1024;

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

fn files(arg: &str) -> Result<tls::Material, String> {
    let parts: Vec<&str> = arg.split(',').collect();
    let [ca, cert, key] = parts[..] else { return Err(format!("{arg}: CA,CERT,KEY")) };
    tls::load(&TlsFiles { ca: Some(ca.into()), cert: Some(cert.into()), key: Some(key.into()) })
}

fn loopback(arg: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = arg.parse().map_err(|e| format!("{arg}: {e}"))?;
    if !addr.ip().is_loopback() {
        return Err(format!("{arg}: only loopback addresses"));
    }
    Ok(addr)
}

struct Relay {
    target: SocketAddr,
    accept: Option<Arc<rustls::ServerConfig>>,
    connect: Option<Arc<rustls::ClientConfig>>,
    /// Copy between plain legs too (by default they are spliced).
    copy: bool,
}

impl Relay {
    async fn carry(&self, inbound: TcpStream) -> std::io::Result<()> {
        inbound.set_nodelay(true)?;
        if self.accept.is_none() && self.connect.is_none() && !self.copy {
            let out = TcpStream::connect(self.target).await?;
            out.set_nodelay(true)?;
            return splice_both(inbound, out).await;
        }
        let mut a: Box<dyn Io> = match &self.accept {
            Some(cfg) => Box::new(TlsIo::accept(cfg.clone(), inbound).await?),
            None => Box::new(inbound),
        };
        let out = TcpStream::connect(self.target).await?;
        out.set_nodelay(true)?;
        let name = ServerName::IpAddress(self.target.ip().into());
        let mut b: Box<dyn Io> = match &self.connect {
            Some(cfg) => Box::new(TlsIo::connect(cfg.clone(), name, out).await?),
            None => Box::new(out),
        };
        tokio::io::copy_bidirectional_with_sizes(&mut a, &mut b, BUFFER, BUFFER).await?;
        Ok(())
    }
}

/// Both legs plain: each direction spliced (socket -> pipe -> socket, the router's `splice::PipeSplice`), its
/// writer shut down when its reader ends.
async fn splice_both(a: TcpStream, b: TcpStream) -> std::io::Result<()> {
    let (mut ab, mut ba) = (PipeSplice::new(u64::MAX)?, PipeSplice::new(u64::MAX)?);
    let (mut ab_done, mut ba_done) = (false, false);
    std::future::poll_fn(|cx| {
        for (dir, done, r, w) in [(&mut ab, &mut ab_done, &a, &b), (&mut ba, &mut ba_done, &b, &a)] {
            if !*done {
                if let Poll::Ready(res) = dir.poll(cx, r, w) {
                    res?;
                    SockRef::from(w).shutdown(Shutdown::Write)?;
                    *done = true;
                }
            }
        }
        if ab_done && ba_done {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    })
    .await
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (listen, target) = match &args[..] {
        [l, t, ..] => (loopback(l)?, loopback(t)?),
        _ => return Err("usage: relay_floor LISTEN TARGET [--accept CA,CERT,KEY] [--connect CA,CERT,KEY]".into()),
    };
    let mut relay = Relay { target, accept: None, connect: None, copy: false };
    let mut rest = args[2..].iter();
    while let Some(flag) = rest.next() {
        if flag == "--copy" {
            relay.copy = true;
            continue;
        }
        if flag != "--accept" && flag != "--connect" {
            return Err(format!("{flag}: --accept, --connect or --copy"));
        }
        let value = rest.next().ok_or(format!("{flag} takes CA,CERT,KEY"))?;
        if flag == "--accept" {
            relay.accept = Some(tls::access_server(&files(value)?, "1.3", &[])?);
        } else {
            relay.connect = Some(tls::link_client(&files(value)?, "1.3", None)?);
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let listener = TcpListener::bind(listen).await.map_err(|e| format!("{listen}: {e}"))?;
        println!("ready");
        let relay = Arc::new(relay);
        loop {
            // a failed accept (a client gone before it was taken, no descriptor left) ends no other connection
            let conn = match listener.accept().await {
                Ok((conn, _)) => conn,
                Err(e) => {
                    eprintln!("relay_floor: accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            };
            let relay = relay.clone();
            tokio::spawn(async move {
                if let Err(e) = relay.carry(conn).await {
                    eprintln!("relay_floor: {e}");
                }
            });
        }
    })
}
