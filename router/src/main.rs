//! `service-network-router`: the data plane of a service-network site. It is started and driven by the Python
//! adaptor (`service-network router` / `run router`) through its control socket, or runs alone from a document.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use snrouter::api::{self, Slot};
use snrouter::config::Document;

/// How glibc's malloc holds memory: this module is the binary's only `unsafe` (two calls into glibc that take no
/// pointers).
///
/// Freed memory is given back to the system: glibc's malloc keeps what a burst of short connections used (its arenas
/// fragment and are trimmed only at their top: RSS grew with every round of 1,000 connections, 19 -> 71 MiB in 20
/// rounds at the end of a two-hop chain), so a thread calls `malloc_trim(0)` every [`malloc::TRIM_INTERVAL`], which
/// also returns the free pages inside each arena (`madvise`). mimalloc instead gave memory back too but cost 10 % of
/// two-hop throughput (4.11 vs 4.55 Gbit/s, same run); glibc with `malloc_trim` costs none measurable.
/// docs/service-network-router.md, "Memory given back"; `bench/memory_bench.py`.
///
/// Between those trims, buffers are reused rather than handed back at every free: a link reader's buffer (256 KiB and
/// more while a bulk stream crosses it) was above glibc's sliding mmap threshold often enough that it was mapped and
/// unmapped (or the heap's top trimmed and grown again) every few MB, and its pages faulted in and zeroed afresh: up to
/// 50 page faults per MB carried in the middle router of two hops. [`malloc::hold`] sets both thresholds once at start
/// ([`malloc::MMAP_THRESHOLD`], [`malloc::TRIM_THRESHOLD`]); the trim thread still gives everything free back within a
/// second (docs/service-network-router.md, "Quiet, one thread per CPU and malloc's thresholds held").
mod malloc {
    use std::time::Duration;

    /// How often freed memory is given back.
    pub const TRIM_INTERVAL: Duration = Duration::from_secs(1);
    /// Allocations at least this large are mapped of their own (glibc's default slides from 128 KiB up to 32 MiB).
    pub const MMAP_THRESHOLD: libc::c_int = 8 << 20;
    /// Free memory at the heap's top kept on `free` before it is trimmed (the trim thread trims every second anyway).
    pub const TRIM_THRESHOLD: libc::c_int = 64 << 20;

    /// Fixes malloc's thresholds (before any thread starts); warns when glibc refuses one.
    pub fn hold() {
        for (param, value, name) in [
            (libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD, "M_MMAP_THRESHOLD"),
            (libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD, "M_TRIM_THRESHOLD"),
        ] {
            // SAFETY: mallopt takes two integers and no pointers; it is called at start, before any other thread
            // exists (glibc's documented interface; it returns 0 for a value it refuses).
            if unsafe { libc::mallopt(param, value) } != 1 {
                tracing::warn!("malloc refused {name} = {value}");
            }
        }
    }

    /// Starts the thread that gives freed memory back (it runs for the life of the process).
    pub fn start_trimming() {
        let _ = std::thread::Builder::new().name("malloc-trim".into()).spawn(|| loop {
            std::thread::sleep(TRIM_INTERVAL);
            // SAFETY: malloc_trim takes no pointers; it locks each arena itself, so it is safe to call from any thread
            // at any time (glibc's documented interface).
            unsafe {
                libc::malloc_trim(0);
            }
        });
    }
}

#[derive(Parser, Debug)]
#[command(version, about = "The service network's router: listeners, connectors and multiplexed mutual-TLS links")]
struct Args {
    /// A router document (JSON) to apply at start and again on SIGHUP.
    #[arg(long, env = "ROUTER_CONFIG")]
    config: Option<PathBuf>,
    /// Unix socket for the control plane (JSON lines: apply, network, status, addresses); mode 0600.
    #[arg(long, env = "ROUTER_CONTROL_SOCKET")]
    control_socket: Option<PathBuf>,
    /// host:port for /metrics, /healthz, /readyz and /network (port 0: any free port, printed at start).
    #[arg(long, env = "ROUTER_METRICS_ADDRESS")]
    metrics_address: Option<String>,
    /// Worker threads (default: the --config document's router.threads, else the CPUs the accept threads leave,
    /// at least one).
    #[arg(long, env = "ROUTER_THREADS")]
    threads: Option<usize>,
    /// Threads on which Listeners accept and carry their clients (default: half the worker threads given, rounded
    /// up; else half the CPUs, rounded up).
    #[arg(long, env = "ROUTER_ACCEPT_THREADS")]
    accept_threads: Option<usize>,
    /// Exit (as on SIGTERM) once the process that started this router is gone (the adaptor passes it).
    #[arg(long)]
    exit_with_parent: bool,
    /// Log filter (error, warn, info, debug, trace or a tracing directive).
    #[arg(long, env = "ROUTER_LOG", default_value = "info")]
    log_level: String,
}

fn main() {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&args.log_level).unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
    malloc::hold();
    // a router holds two sockets per connection it carries: take every file descriptor the hard limit allows
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        tracing::warn!("could not raise the open-file limit: {e}");
    }
    // the document's router.threads, unless --threads says otherwise (read before the runtime exists)
    let first = args.config.as_ref().map(read_document);
    let threads = args.threads.or_else(|| match &first {
        Some(Ok(doc)) => doc.router.threads.map(|n| n as usize),
        _ => None,
    });
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let (workers, accept) = snrouter::workers::split(cpus, threads, args.accept_threads);
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.worker_threads(workers);
    // Listeners accept and carry their clients on accept workers (snrouter::workers); links, the control plane and
    // connections that arrive over links run on the runtime's workers (docs/service-network-router.md, "Threads")
    snrouter::workers::start(accept);
    malloc::start_trimming();
    let rt = rt.enable_all().build().expect("tokio runtime");
    let code = rt.block_on(run(args, first));
    rt.shutdown_timeout(Duration::from_secs(2));
    std::process::exit(code);
}

fn read_document(path: &PathBuf) -> Result<Document, Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| vec![format!("{}: {e}", path.display())])?;
    Document::parse(&text)
}

async fn run(args: Args, first: Option<Result<Document, Vec<String>>>) -> i32 {
    use tokio::signal::unix::{signal, SignalKind};
    snrouter::workers::set_main(tokio::runtime::Handle::current());
    let slot: Slot = Arc::new(Mutex::new(None));
    if args.config.is_none() && args.control_socket.is_none() {
        eprintln!("service-network-router: give --config, --control-socket or both");
        return 2;
    }
    if let Some(first) = first {
        match first {
            Ok(doc) => {
                let r = api::apply(&slot, doc);
                for p in r["problems"].as_array().into_iter().flatten() {
                    eprintln!("problem: {}", p.as_str().unwrap_or(""));
                }
            }
            Err(problems) => {
                for p in problems {
                    eprintln!("invalid document: {p}");
                }
                return 2;
            }
        }
    }
    if let Some(addr) = &args.metrics_address {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => {
                if let Ok(a) = l.local_addr() {
                    println!("metrics {a}");
                }
                tokio::spawn(api::serve_http(slot.clone(), l));
            }
            Err(e) => {
                eprintln!("cannot listen on {addr}: {e}");
                return 2;
            }
        }
    }
    if let Some(path) = args.control_socket.clone() {
        let slot = slot.clone();
        let bound = tokio::sync::oneshot::channel::<std::io::Result<()>>();
        let (tx, rx) = bound;
        tokio::spawn(async move {
            let _ = std::fs::remove_file(&path);
            let r = api::serve_control(slot, &path).await;
            let _ = tx.send(r);
        });
        // serve_control only returns on error; a short wait catches a socket that cannot be bound
        if let Ok(Ok(Err(e))) = tokio::time::timeout(Duration::from_millis(50), rx).await {
            eprintln!("cannot listen on the control socket: {e}");
            return 2;
        }
        println!("control ready");
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    let mut hup = signal(SignalKind::hangup()).expect("SIGHUP handler");
    let parent = std::os::unix::process::parent_id();
    let mut orphan_check = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = orphan_check.tick(), if args.exit_with_parent => {
                if std::os::unix::process::parent_id() != parent {
                    tracing::warn!("the process that started this router is gone: stopping");
                    break;
                }
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => {
                if let Some(path) = &args.config {
                    match read_document(path) {
                        Ok(doc) => { api::apply(&slot, doc); }
                        Err(problems) => for p in problems { tracing::warn!("document not applied: {p}") },
                    }
                }
            }
        }
    }
    if let Some(r) = slot.lock().unwrap().clone() {
        r.stop();
    }
    if let Some(path) = &args.control_socket {
        let _ = std::fs::remove_file(path);
    }
    0
}
