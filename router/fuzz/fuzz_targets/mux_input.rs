//! Bytes from a linked router into a link connection (after the handshake): the connection reads, dispatches and
//! closes on bad input; never a panic, never more than the bounded frame buffer.
#![no_main]
use libfuzzer_sys::fuzz_target;
use snrouter::native::mux::{Conn, OnOpen};
use snrouter::stream::types::Role;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (mut peer, ours) = tokio::io::duplex(1 << 20);
        let (ctl, _ctl_rx) = tokio::sync::mpsc::unbounded_channel();
        let on_open: OnOpen = Arc::new(|_, _, _| {});
        let conn = Conn::start(ours, Role::Acceptor, on_open, ctl);
        let _ = peer.write_all(data).await;
        drop(peer);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), conn.closed()).await;
    });
});
