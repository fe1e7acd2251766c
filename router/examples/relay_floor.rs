//! The least a TLS relay does, as a reference for the router's two-hop stream (issue 45, goal 2): a connection in,
//! a connection out, bytes copied both ways with 256 KiB buffers (`tokio::io::copy_bidirectional_with_sizes`), on
//! one thread. Each leg is plain TCP or mutual TLS through the router's own TLS code (`tls`, `tlsio`: the same
//! handshake, suite order and record layer as a link), so what it leaves out is everything a router adds between
//! the two: streams multiplexed on a link, frames, per-stream credit, routing. One TLS connection per client
//! connection, with TCP's buffers between the stages, is not how sites link (a link carries every stream); it is the
//! measure of how much of the stream's rate the router's own design costs on this machine.
//!
//! `relay_floor LISTEN TARGET [--accept CA,CERT,KEY] [--connect CA,CERT,KEY]`; prints `ready` once it listens.
//! Loopback only: LISTEN and TARGET must be 127.0.0.0/8 addresses.

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
        let value = rest.next().ok_or(format!("{flag} takes CA,CERT,KEY"))?;
        match flag.as_str() {
            "--accept" => relay.accept = Some(tls::access_server(&files(value)?, "1.3", &[])?),
            "--connect" => relay.connect = Some(tls::link_client(&files(value)?, "1.3", None)?),
            _ => return Err(format!("{flag}: --accept or --connect")),
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let listener = TcpListener::bind(listen).await.map_err(|e| format!("{listen}: {e}"))?;
        println!("ready");
        let relay = Arc::new(relay);
        loop {
            let (conn, _) = listener.accept().await.map_err(|e| e.to_string())?;
            let relay = relay.clone();
            tokio::spawn(async move {
                if let Err(e) = relay.carry(conn).await {
                    eprintln!("relay_floor: {e}");
                }
            });
        }
    })
}
