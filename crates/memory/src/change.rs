//! Whether a memory's words tell of a change ("these days", "switched to", "no longer",
//! "instead"). A statement and its later update are often worded unlike each other — "I run
//! every morning", then "these days my free time goes into climbing" — so likeness alone
//! cannot tell an update from an unrelated newer memory; the words of change can. English
//! only: in other languages no memory tells of a change, and updates are recognised by
//! likeness alone, as before.

/// Words that, alone, say that something is no longer as it was: time words that set now
/// against before, verbs of replacing and leaving, and "old"/"new"/"former".
const CHANGE_WORDS: &[&str] = &[
    "now",
    "nowadays",
    "currently",
    "lately",
    "anymore",
    "instead",
    "change",
    "changed",
    "switch",
    "switched",
    "moved",
    "replaced",
    "swapped",
    "traded",
    "upgraded",
    "quit",
    "stopped",
    "dropped",
    "became",
    "new",
    "newly",
    "old",
    "former",
    "formerly",
    "previous",
    "previously",
];

/// Two-word phrases that say the same where each word alone does not.
const CHANGE_PHRASES: &[[&str; 2]] = &[
    ["these", "days"],
    ["no", "longer"],
    ["any", "more"],
    ["gave", "up"],
    ["given", "up"],
    ["used", "to"],
    ["turns", "out"],
    ["turned", "out"],
];

/// Whether `text` tells of a change: it holds one of the change words or phrases, matched
/// as whole words, case-insensitively.
pub fn tells_of_change(text: &str) -> bool {
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    words.iter().any(|w| CHANGE_WORDS.contains(w))
        || words
            .windows(2)
            .any(|pair| CHANGE_PHRASES.iter().any(|phrase| phrase[..] == *pair))
}

#[cfg(test)]
mod tests {
    use super::tells_of_change;

    #[test]
    fn words_of_change_are_found_as_whole_words_in_any_case() {
        assert!(tells_of_change(
            "These days my free time goes into climbing."
        ));
        assert!(tells_of_change("I SWITCHED to the night bus"));
        assert!(tells_of_change("She no longer eats meat"));
        assert!(tells_of_change("it's all oat milk now"));
        assert!(!tells_of_change("I run every morning before work."));
        assert!(
            !tells_of_change("Known for years, they showed up at noon"),
            "no 'now' inside 'known'"
        );
        assert!(!tells_of_change(""));
    }
}
