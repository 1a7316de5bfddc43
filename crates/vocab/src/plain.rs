//! A parser's messages in an operator's words: serde names Rust types ("expected u32"),
//! which mean nothing to someone editing a config file or a plugin manifest.

/// `message` with serde's Rust type names said as what they mean: "expected u32" becomes
/// "expected a whole number (0 to 4294967295)".
pub fn type_names_in_plain_words(message: &str) -> String {
    const WORDS: [(&str, &str); 10] = [
        (
            "expected usize",
            "expected a whole number (0 to 18446744073709551615)",
        ),
        (
            "expected u64",
            "expected a whole number (0 to 18446744073709551615)",
        ),
        ("expected u32", "expected a whole number (0 to 4294967295)"),
        ("expected u16", "expected a whole number (0 to 65535)"),
        ("expected u8", "expected a whole number (0 to 255)"),
        ("expected i64", "expected a whole number"),
        ("expected f64", "expected a number"),
        ("expected f32", "expected a number"),
        ("unit value", "an empty value"),
        ("expected any YAML value", "expected a number that fits"),
    ];
    WORDS
        .iter()
        .fold(message.to_string(), |text, (rust, plain)| {
            text.replace(rust, plain)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_type_names_become_what_they_mean() {
        assert_eq!(
            type_names_in_plain_words("priority: invalid value: integer `-1`, expected u32"),
            "priority: invalid value: integer `-1`, expected a whole number (0 to 4294967295)"
        );
        assert_eq!(type_names_in_plain_words("no type here"), "no type here");
    }
}
