//! The service network's router: listeners, connector targets and links that carry many streams both ways over a
//! few mutual-TLS connections dialed by one side. The Python control plane drives it through one interface, the
//! control socket (`api`); everything else is in `docs/service-network-router.md`.
#![forbid(unsafe_code)]

pub mod api;
pub mod config;
pub mod frame;
pub mod link;
pub mod linkstate;
pub mod metrics;
pub mod mux;
pub mod observe;
pub mod pump;
pub mod report;
pub mod router;
pub mod tls;
pub mod workers;

/// At most `max` bytes of `s` (cut at a character boundary, with "..." when cut): what goes into messages about
/// input never echoes a huge input back.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

#[cfg(test)]
mod tests {
    #[test]
    fn truncate_cuts_at_characters() {
        assert_eq!(super::truncate("abc", 5), "abc");
        assert_eq!(super::truncate("☃☃", 4), "☃...");
    }
}
