//! Accept workers: one single-threaded tokio runtime per thread, each accepting on its own `SO_REUSEPORT` socket of
//! every Listener, so that a client connection is accepted, dialed and carried on one thread from its first byte
//! to its last (no wake-ups handed between threads; the kernel spreads new connections over the sockets).
//! Connections that arrive over links, the links themselves and the control plane stay on the main runtime.
//!
//! A client whose connection goes over a link is handed to the main runtime right after the routing choice (where
//! the link's tasks run: its stream's frames then never cross threads); one served here is a local target's.
//!
//! Without workers (a router embedded in a test's runtime) Listeners accept on the runtime they run on.

use std::cell::Cell;
use std::sync::OnceLock;

use tokio::runtime::Handle;

static WORKERS: OnceLock<Vec<Handle>> = OnceLock::new();
static MAIN: OnceLock<Handle> = OnceLock::new();

thread_local! {
    static ON_WORKER: Cell<bool> = const { Cell::new(false) };
}

/// Records the main runtime (where links run), once.
pub fn set_main(handle: Handle) {
    let _ = MAIN.set(handle);
}

/// The main runtime, when this thread is an accept worker (a connection here may be moved there).
pub fn main_from_worker() -> Option<&'static Handle> {
    if ON_WORKER.with(Cell::get) {
        MAIN.get()
    } else {
        None
    }
}

/// The main runtime's worker threads and the accept threads for a process that may use `cpus` CPUs, given the
/// worker threads and accept threads asked for (each 1-64).
///
/// Workers asked for: accept threads are half as many, rounded up (as before). Nothing asked for: accept threads
/// are half the CPUs, rounded up, and the workers the CPUs they leave, at least one, so that the threads that carry
/// bytes are one per CPU in all (two CPUs: one accept thread and one worker). One worker more than that on two CPUs
/// cost a fifth of a two-hop stream's throughput (every relayed frame handed between the workers, and an idle worker
/// woken to steal; docs/service-network-router.md, "Threads").
pub fn split(cpus: usize, workers: Option<usize>, accept: Option<usize>) -> (usize, usize) {
    let cpus = cpus.max(1);
    let accept_default = workers.unwrap_or(cpus).div_ceil(2);
    let accept = accept.unwrap_or(accept_default).clamp(1, 64);
    let workers = workers.unwrap_or_else(|| cpus.saturating_sub(accept_default)).clamp(1, 64);
    (workers, accept)
}

/// Starts `n` worker threads (once per process; later calls keep the first set) and returns their handles.
pub fn start(n: usize) -> &'static [Handle] {
    WORKERS.get_or_init(|| {
        (0..n)
            .filter_map(|i| {
                let (tx, rx) = std::sync::mpsc::channel();
                let spawned = std::thread::Builder::new().name(format!("accept-{i}")).spawn(move || {
                    ON_WORKER.with(|w| w.set(true));
                    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                        Ok(rt) => {
                            let _ = tx.send(Some(rt.handle().clone()));
                            rt.block_on(std::future::pending::<()>());
                        }
                        Err(e) => {
                            tracing::warn!("accept worker {i}: {e}");
                            let _ = tx.send(None);
                        }
                    }
                });
                spawned.ok().and_then(|_| rx.recv().ok().flatten())
            })
            .collect()
    })
}

/// The accept workers' runtimes (empty when none were started).
pub fn handles() -> &'static [Handle] {
    WORKERS.get().map(Vec::as_slice).unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn threads_are_one_per_cpu_in_all_unless_asked_for() {
        // (cpus, workers asked, accept asked) -> (workers, accept threads)
        for (cpus, workers, accept, want) in [
            (1, None, None, (1, 1)),
            (2, None, None, (1, 1)),
            (3, None, None, (1, 2)),
            (4, None, None, (2, 2)),
            (8, None, None, (4, 4)),
            (200, None, None, (64, 64)),
            (0, None, None, (1, 1)),
            (2, Some(2), None, (2, 1)),
            (8, Some(1), None, (1, 1)),
            (8, Some(5), None, (5, 3)),
            (2, None, Some(2), (1, 2)),
            (4, Some(3), Some(1), (3, 1)),
            (4, Some(0), Some(0), (1, 1)),
            (4, Some(500), Some(500), (64, 64)),
        ] {
            assert_eq!(split(cpus, workers, accept), want, "cpus {cpus}, workers {workers:?}, accept {accept:?}");
        }
    }
}
