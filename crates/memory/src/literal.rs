//! The literal names in a question: tokens with a digit in them ("105", "#105" read as
//! "105", "v2", "2024"). A paraphrase changes words, never numbers, so a memory that names
//! the question's number is about what was asked, and a newer memory that does not is about
//! something else, however alike its words ("Pull request 112 changes the login page"
//! against "… 105 changes the export page").

use std::collections::HashSet;

/// The lower-cased tokens of `text` (runs of letters and digits) that hold a digit.
pub fn literals(text: &str) -> HashSet<String> {
    tokens(text)
        .filter(|token| token.chars().any(|c| c.is_ascii_digit()))
        .collect()
}

/// How many of `literals` `text` names.
pub fn named(literals: &HashSet<String>, text: &str) -> usize {
    if literals.is_empty() {
        return 0;
    }
    let own: HashSet<String> = tokens(text).collect();
    literals.intersection(&own).count()
}

/// Runs of letters and digits, lower-cased.
fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|token| !token.is_empty())
        .map(str::to_lowercase)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_identifiers_with_digits_are_literals_and_words_are_not() {
        let asked = literals("What does PR #105 change in v2 of the app?");
        assert_eq!(
            asked,
            HashSet::from(["105".to_string(), "v2".to_string()]),
            "words without a digit are not literals"
        );
        assert_eq!(named(&asked, "Pull request 105 changes the export page"), 1);
        assert_eq!(named(&asked, "Pull request 1050 changes the V2 login"), 1);
        assert_eq!(named(&asked, "Pull request 112 changes the login page"), 0);
        assert_eq!(
            named(&HashSet::new(), "105"),
            0,
            "nothing asked, nothing named"
        );
    }
}
