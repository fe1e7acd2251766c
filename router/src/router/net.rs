//! Sockets the router listens on, and how a failed dial is worded: the pieces the Listeners, the router access and
//! the links share.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;

/// How long a socket that cannot be bound, or a link that cannot be dialed, waits before the next try.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(1);

/// `host:port` of a document (`host` "": all IPv4 interfaces; an IPv6 address with or without brackets).
pub fn address(host: &str, port: u16) -> Option<SocketAddr> {
    let host = if host.is_empty() { "0.0.0.0" } else { host };
    format!("{host}:{port}").parse().or_else(|_| format!("[{host}]:{port}").parse()).ok()
}

/// One listening socket on `addr`.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    bind_socket(addr, false)?.listen(1024)
}

fn bind_socket(addr: SocketAddr, reuse_port: bool) -> std::io::Result<tokio::net::TcpSocket> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    if reuse_port {
        socket.set_reuseport(true)?;
    }
    // Accepted sockets inherit TCP_NODELAY from the listening socket on Linux (one system call less per
    // connection).
    socket.set_nodelay(true)?;
    socket.bind(addr)?;
    Ok(socket)
}

/// `n` listening sockets on `addr` (`SO_REUSEPORT` when more than one; port 0: the first one's port for all),
/// detached from any runtime so that each accept worker takes one.
pub fn bind_group(addr: SocketAddr, n: usize) -> std::io::Result<Vec<std::net::TcpListener>> {
    let first = bind_socket(addr, n > 1)?.listen(1024)?;
    let actual = first.local_addr()?;
    let mut group = vec![first.into_std()?];
    for _ in 1..n {
        group.push(bind_socket(actual, true)?.listen(1024)?.into_std()?);
    }
    Ok(group)
}

/// A failed dial in a few words (for a link's state).
pub fn describe_io(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        std::io::ErrorKind::TimedOut => "timed out while connecting".into(),
        _ => crate::text::truncate(&e.to_string(), 200),
    }
}
