//! Text about input (pure): what goes into messages never echoes a huge input back.

/// At most `max` bytes of `s` (cut at a character boundary, with "..." when cut).
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
