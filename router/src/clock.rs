//! This router's clock as the network reads it: sequence numbers of advertisements and traffic reports are
//! microseconds since the epoch of their sender's clock, and how far ahead of this router's clock one may be.

use std::time::{SystemTime, UNIX_EPOCH};

/// Advertisements and traffic reports whose sequence number is further than this ahead of this router's clock are
/// refused (sequence numbers are microseconds of the sender's clock, so this bounds clock skew, not the sender's
/// restarts).
pub const MAX_SEQ_AHEAD_US: u64 = 60 * 1_000_000;

/// Microseconds since the epoch (0 before it).
pub fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

/// Seconds since the epoch (0 before it).
pub fn now_s() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}
