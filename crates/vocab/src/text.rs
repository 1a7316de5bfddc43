//! What counts as text at all: the rule every edge (buffer, memory, command line) applies
//! before it takes a name or a message.

/// Whether `text` prints nothing: only white space, control characters and invisible format
/// characters (zero-width space and joiners, word joiner, byte-order mark, soft hyphen). A
/// name or a message made only of these looks empty wherever it is shown.
pub fn is_blank(text: &str) -> bool {
    text.chars().all(|c| {
        c.is_whitespace()
            || c.is_control()
            || matches!(
                c,
                '\u{200B}'..='\u{200D}' | '\u{2060}' | '\u{FEFF}' | '\u{00AD}'
            )
    })
}

#[cfg(test)]
mod tests {
    use super::is_blank;

    #[test]
    fn invisible_characters_are_blank_and_any_visible_one_is_not() {
        assert!(is_blank(""));
        assert!(is_blank(" \t\n"));
        assert!(is_blank("\u{200B}\u{FEFF}\u{2060}"));
        assert!(!is_blank("\u{200B}a"));
        assert!(!is_blank("·"));
    }
}
