//! Lists of things tied to live AMQP connections ([`Live`]): the connections offered to the vanflow source and
//! collector, the border's joined connections, its carriers and its edge peers. An entry whose connection ended
//! is dropped whenever the list is pushed to or read, so a list only holds what may still be used, and it never
//! grows with connections that came and went; a push wakes a task waiting for one ([`Live::pushed`]).

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use super::driver::Sender;

/// Something that lives as long as an AMQP connection.
pub trait OnConnection {
    /// Whether its connection has ended.
    fn connection_ended(&self) -> bool;
}

impl OnConnection for Sender {
    fn connection_ended(&self) -> bool {
        self.ended().is_some()
    }
}

/// A connection with something about it (e.g. whether this router made it as an edge).
impl<C: OnConnection, T> OnConnection for (C, T) {
    fn connection_ended(&self) -> bool {
        self.0.connection_ended()
    }
}

impl<T: OnConnection> OnConnection for Arc<T> {
    fn connection_ended(&self) -> bool {
        (**self).connection_ended()
    }
}

/// Entries tied to live connections, those whose connection ended dropped as they are met.
pub struct Live<T> {
    entries: Mutex<Vec<T>>,
    pushed: Notify,
}

impl<T> Default for Live<T> {
    fn default() -> Self {
        Live { entries: Mutex::default(), pushed: Notify::new() }
    }
}

impl<T: OnConnection> Live<T> {
    /// The entries whose connection has not ended (the others dropped first), locked.
    pub fn lock(&self) -> MutexGuard<'_, Vec<T>> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|e| !e.connection_ended());
        entries
    }

    /// Adds `entry` after the others and wakes one task waiting on [`Live::pushed`] (or the next that waits).
    pub fn push(&self, entry: T) {
        self.lock().push(entry);
        self.pushed.notify_one();
    }

    /// The first entry whose connection has not ended.
    pub fn first(&self) -> Option<T>
    where
        T: Clone,
    {
        self.lock().first().cloned()
    }

    /// Every entry, the list left empty (ended ones included: the caller may close them all).
    pub fn take(&self) -> Vec<T> {
        std::mem::take(&mut *self.entries.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Notified at each push.
    pub fn pushed(&self) -> &Notify {
        &self.pushed
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;

    /// A stand-in for a connection: ended when its flag is set.
    #[derive(Clone)]
    struct Fake(&'static str, Arc<AtomicBool>);

    impl OnConnection for Fake {
        fn connection_ended(&self) -> bool {
            self.1.load(Ordering::Relaxed)
        }
    }

    fn fake(name: &'static str) -> (Fake, Arc<AtomicBool>) {
        let ended = Arc::new(AtomicBool::new(false));
        (Fake(name, ended.clone()), ended)
    }

    fn names(live: &Live<Fake>) -> Vec<&'static str> {
        live.lock().iter().map(|f| f.0).collect()
    }

    #[test]
    fn entries_of_ended_connections_are_dropped_when_met() {
        let live = Live::default();
        let (a, a_ended) = fake("a");
        let (b, _) = fake("b");
        live.push(a);
        live.push(b);
        assert_eq!(names(&live), ["a", "b"]);
        assert_eq!(live.first().map(|f| f.0), Some("a"));
        a_ended.store(true, Ordering::Relaxed);
        assert_eq!(live.first().map(|f| f.0), Some("b"), "the ended one is skipped");
        assert_eq!(live.entries.lock().unwrap().len(), 1, "and gone from the list");
    }

    #[test]
    fn the_list_does_not_grow_with_connections_that_came_and_went() {
        let live = Live::default();
        for _ in 0..1000 {
            let (f, ended) = fake("x");
            live.push(f);
            ended.store(true, Ordering::Relaxed);
        }
        assert!(live.entries.lock().unwrap().len() <= 1);
        assert!(live.first().is_none());
    }

    #[test]
    fn take_empties_the_list() {
        let live = Live::default();
        let (a, a_ended) = fake("a");
        live.push(a);
        a_ended.store(true, Ordering::Relaxed);
        assert_eq!(live.take().len(), 1, "ended ones too: closing them is harmless");
        assert!(live.take().is_empty());
    }

    #[test]
    fn pairs_end_with_their_connection() {
        let live = Live::default();
        let (a, ended) = fake("a");
        live.push((a, true));
        assert_eq!(live.first().map(|(f, edge)| (f.0, edge)), Some(("a", true)));
        ended.store(true, Ordering::Relaxed);
        assert!(live.first().is_none());
    }

    #[test]
    fn arcs_end_with_their_connection() {
        struct Carrier(Fake);
        impl OnConnection for Carrier {
            fn connection_ended(&self) -> bool {
                self.0.connection_ended()
            }
        }
        let live: Live<Arc<Carrier>> = Live::default();
        let (a, ended) = fake("a");
        live.push(Arc::new(Carrier(a)));
        assert_eq!(live.lock().len(), 1);
        ended.store(true, Ordering::Relaxed);
        assert!(live.lock().is_empty());
    }

    #[tokio::test]
    async fn a_push_wakes_the_waiter() {
        let live = Arc::new(Live::default());
        let waiting = {
            let live = live.clone();
            tokio::spawn(async move { live.pushed().notified().await })
        };
        tokio::task::yield_now().await;
        live.push(fake("a").0);
        tokio::time::timeout(Duration::from_secs(30), waiting).await.unwrap().unwrap();
        // a push with nobody waiting is kept for the next waiter
        live.push(fake("b").0);
        tokio::time::timeout(Duration::from_secs(30), live.pushed().notified()).await.unwrap();
    }
}
