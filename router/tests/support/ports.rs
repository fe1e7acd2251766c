//! Ports for listeners another process binds a moment later (skrouterd, a router under test): from below the
//! kernel's ephemeral range, where no outgoing connection's local port can take one between the choice and the
//! bind (the Python side's `devenv.ports` says why: a port from `bind(0)` is in the range every connection's local
//! port comes from). A random free one, never twice from one test binary; the kernel's choice where the range
//! leaves no room.
#![allow(dead_code)]

use std::collections::hash_map::RandomState;
use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;

const LOW: u16 = 20000;
const HIGH: u16 = 30000;

static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse().ok()))
        .unwrap_or(32768)
}

/// A free port on 127.0.0.1 outside the ephemeral range.
pub fn listen_port() -> u16 {
    let high = HIGH.min(ephemeral_low().max(LOW));
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let given = given.get_or_insert_with(HashSet::new);
    let seed = RandomState::new();
    for attempt in 0u32..(if high > LOW { 200 } else { 0 }) {
        let mut h = seed.build_hasher();
        h.write_u32(attempt);
        let port = LOW + (h.finish() % u64::from(high - LOW)) as u16;
        if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    given.insert(port);
    port
}
