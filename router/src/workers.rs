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
