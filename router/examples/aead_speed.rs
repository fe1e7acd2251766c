//! The cipher-bound limit of a mutual-TLS hop on this machine: how many bytes per second of CPU time one core seals
//! and opens with the AEADs rustls may negotiate between two routers, through the same library the router uses
//! (aws-lc-rs), at full TLS records (16 KiB of plaintext each). CPU time, not wall time: the figure stays a per-core
//! figure on a machine busy with other work (`/proc/thread-self/schedstat`, nanoseconds on a CPU).
//!
//! `cargo run --release --example aead_speed [seconds per figure, default 2]`; one JSON line per AEAD and
//! direction, then the two-hop bound (every byte sealed twice and opened twice).

use aws_lc_rs::aead::{Aad, Algorithm, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM, CHACHA20_POLY1305};

const RECORD: usize = 16 * 1024;

/// Nanoseconds this thread has run on a CPU.
fn thread_cpu_ns() -> u64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat");
    text.split_whitespace().next().and_then(|v| v.parse().ok()).expect("schedstat's first field")
}

fn nonce(seq: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&seq.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

/// (seal GB/s, open GB/s) per core of CPU time, records of [`RECORD`] bytes.
fn measure(alg: &'static Algorithm, seconds: f64) -> (f64, f64) {
    let key = LessSafeKey::new(UnboundKey::new(alg, &vec![7u8; alg.key_len()]).expect("key"));
    let aad = [23u8, 3, 3, 0x40, 0x11];
    let mut record = vec![0x5au8; RECORD];
    // seal: the same buffer sealed again and again (a record's bytes are in the cache, as in a router)
    let (mut seq, mut sealed) = (0u64, 0u64);
    let (t0, w0) = (thread_cpu_ns(), std::time::Instant::now());
    while w0.elapsed().as_secs_f64() < seconds {
        for _ in 0..64 {
            let tag = key.seal_in_place_separate_tag(nonce(seq), Aad::from(aad), &mut record).expect("seal");
            let _ = std::hint::black_box(tag);
            seq += 1;
            sealed += RECORD as u64;
        }
    }
    let seal = sealed as f64 / (thread_cpu_ns() - t0) as f64;
    // open: one sealed record, opened from a fresh copy each time (the copy is timed apart and taken off)
    let mut fresh = vec![0x5au8; RECORD];
    let tag = key.seal_in_place_separate_tag(nonce(u64::MAX), Aad::from(aad), &mut fresh).expect("seal");
    fresh.extend_from_slice(tag.as_ref());
    let mut work = fresh.clone();
    let copy_ns = {
        let (t, mut n) = (thread_cpu_ns(), 0u32);
        while n < 20_000 {
            work.copy_from_slice(&fresh);
            std::hint::black_box(&work);
            n += 1;
        }
        (thread_cpu_ns() - t) as f64 / 20_000.0
    };
    let (mut opened, mut n) = (0u64, 0u64);
    let (t0, w0) = (thread_cpu_ns(), std::time::Instant::now());
    while w0.elapsed().as_secs_f64() < seconds {
        for _ in 0..64 {
            work.copy_from_slice(&fresh);
            key.open_in_place(nonce(u64::MAX), Aad::from(aad), &mut work).expect("open");
            opened += RECORD as u64;
            n += 1;
        }
    }
    let open = opened as f64 / ((thread_cpu_ns() - t0) as f64 - copy_ns * n as f64);
    (seal, open)
}

fn main() {
    let seconds: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    for (name, alg) in
        [("AES-128-GCM", &AES_128_GCM), ("AES-256-GCM", &AES_256_GCM), ("ChaCha20-Poly1305", &CHACHA20_POLY1305)]
    {
        let (seal, open) = measure(alg, seconds);
        // two hops: each byte sealed twice and opened twice; GB/s of CPU -> Gbit/s of stream per core spent on it
        let per_byte_ns = 2.0 / seal + 2.0 / open;
        let bound_gbit = 8.0 / per_byte_ns;
        println!(
            "{{\"aead\": \"{name}\", \"record_bytes\": {RECORD}, \"seal_gb_per_cpu_s\": {seal:.2}, \
             \"open_gb_per_cpu_s\": {open:.2}, \"two_hops_gbit_per_s_per_core_of_crypto\": {bound_gbit:.2}}}"
        );
    }
}
