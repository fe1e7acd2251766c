//! A connection's idle sending streaming links (pure: the caller keeps time and detaches what it is told to).
//!
//! skrouterd keeps a pool of free streaming links per connection and sends the next streaming message on one of
//! them (`forwarder.c`, `get_outgoing_streaming_link`) rather than attaching a link per flow; its scrubber
//! (`modules/streaming_link_scrubber`) looks at each connection every 30 s and detaches at most 10 idle links
//! beyond 128. Ours follows those numbers with two differences: the bound is hard (a link given back to a full
//! pool sends the longest idle one away at once, so a burst of flows leaves at most [`MAX_IDLE`] links behind, not
//! a pool trimmed 10 per scan), and a link idle for a whole scan interval is detached even below the bound (an idle
//! connection does not keep links on both routers for nothing). The pool hands out the link given back last: under
//! a steady load the same few links carry every flow, and the ones beyond what the load needs go idle and leave.

use std::time::{Duration, Instant};

/// Idle links kept per connection (upstream's `max_free_pool_size`).
pub const MAX_IDLE: usize = 128;
/// How often the pool is scrubbed, and how long a link may stay idle (upstream's `PROD_TIMER_INTERVAL`).
pub const SCRUB_INTERVAL: Duration = Duration::from_secs(30);
/// Links detached per scrub at most (upstream's `MAX_FREE_BATCH`: the detaches are rate-limited).
pub const MAX_FREE_BATCH: usize = 10;

/// Idle links, oldest first, each with when it went idle.
#[derive(Debug)]
pub struct LinkPool<T> {
    idle: Vec<(T, Instant)>,
    max: usize,
}

impl<T: Copy + PartialEq> Default for LinkPool<T> {
    fn default() -> Self {
        LinkPool::new(MAX_IDLE)
    }
}

impl<T: Copy + PartialEq> LinkPool<T> {
    pub fn new(max: usize) -> LinkPool<T> {
        LinkPool { idle: Vec::new(), max }
    }

    pub fn len(&self) -> usize {
        self.idle.len()
    }

    pub fn is_empty(&self) -> bool {
        self.idle.is_empty()
    }

    /// `link`'s delivery is over: it waits for the next one. Returns the link to detach when the pool was full
    /// (the one idle longest; `link` itself when the pool holds none).
    pub fn put(&mut self, link: T, now: Instant) -> Option<T> {
        if self.idle.iter().any(|(l, _)| *l == link) {
            return None;
        }
        self.idle.push((link, now));
        (self.idle.len() > self.max).then(|| self.idle.remove(0).0)
    }

    /// A link for the next delivery: the one given back last.
    pub fn take(&mut self) -> Option<T> {
        self.idle.pop().map(|(l, _)| l)
    }

    /// `link` is gone (the peer detached it): whether it was idle here.
    pub fn remove(&mut self, link: T) -> bool {
        let before = self.idle.len();
        self.idle.retain(|(l, _)| *l != link);
        self.idle.len() != before
    }

    /// The links idle for `idle_for` or longer at `now`, oldest first, at most [`MAX_FREE_BATCH`]: out of the pool,
    /// to detach.
    pub fn scrub(&mut self, now: Instant, idle_for: Duration) -> Vec<T> {
        let n = self
            .idle
            .iter()
            .take(MAX_FREE_BATCH)
            .take_while(|(_, since)| now.saturating_duration_since(*since) >= idle_for)
            .count();
        self.idle.drain(..n).map(|(l, _)| l).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_link_given_back_last_goes_first_and_an_empty_pool_gives_none() {
        let now = Instant::now();
        let mut p = LinkPool::new(4);
        assert_eq!(p.take(), None);
        assert_eq!(p.put(1, now), None);
        assert_eq!(p.put(2, now), None);
        assert_eq!(p.put(2, now), None, "a link is in the pool once");
        assert_eq!(p.len(), 2);
        assert_eq!(p.take(), Some(2));
        assert_eq!(p.take(), Some(1));
        assert_eq!(p.take(), None);
        assert!(p.is_empty());
    }

    #[test]
    fn a_full_pool_sends_the_longest_idle_away() {
        let t0 = Instant::now();
        let mut p = LinkPool::new(2);
        assert_eq!(p.put(1, t0), None);
        assert_eq!(p.put(2, t0 + Duration::from_secs(1)), None);
        assert_eq!(p.put(3, t0 + Duration::from_secs(2)), Some(1));
        assert_eq!(p.len(), 2);
        let mut none = LinkPool::new(0);
        assert_eq!(none.put(7, t0), Some(7), "a pool of none keeps nothing");
        assert_eq!(LinkPool::<u32>::default().max, MAX_IDLE);
    }

    #[test]
    fn a_link_the_peer_detached_is_not_handed_out() {
        let now = Instant::now();
        let mut p = LinkPool::new(4);
        p.put(1, now);
        p.put(2, now);
        assert!(p.remove(2));
        assert!(!p.remove(2));
        assert_eq!(p.take(), Some(1));
        assert_eq!(p.take(), None);
    }

    #[test]
    fn the_scrub_takes_links_idle_a_whole_interval_oldest_first_and_a_batch_at_most() {
        let t0 = Instant::now();
        let mut p = LinkPool::new(MAX_IDLE);
        for i in 0..15u32 {
            p.put(i, t0 + Duration::from_millis(u64::from(i)));
        }
        let later = t0 + SCRUB_INTERVAL;
        assert_eq!(
            p.scrub(later - Duration::from_millis(1), SCRUB_INTERVAL),
            Vec::<u32>::new(),
            "none idle long enough"
        );
        assert_eq!(p.scrub(later, SCRUB_INTERVAL), vec![0], "only the one idle the whole interval");
        assert_eq!(p.scrub(later + SCRUB_INTERVAL, SCRUB_INTERVAL), (1..11).collect::<Vec<_>>(), "a batch at most");
        assert_eq!(p.scrub(later + SCRUB_INTERVAL, SCRUB_INTERVAL), (11..15).collect::<Vec<_>>());
        assert!(p.is_empty());
        // a link given back again is young again
        p.put(3, later);
        assert_eq!(p.scrub(later + Duration::from_secs(1), SCRUB_INTERVAL), Vec::<u32>::new());
    }
}
