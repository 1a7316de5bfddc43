//! Memory-stream rules: the importance a memory gets when none is given, and the issue and
//! pull-request numbers it mentions (kept apart: `PR #12` is a pull request, never an issue).

use std::collections::BTreeSet;
use std::sync::LazyLock;

use regex::Regex;

use super::MemoryKind;

static CRITICAL: LazyLock<Regex> =
    LazyLock::new(|| word_regex(&["critical", "blocker", "breaking"]));
static FIX: LazyLock<Regex> = LazyLock::new(|| word_regex(&["fix", "resolve", "close"]));
static SHIP: LazyLock<Regex> =
    LazyLock::new(|| word_regex(&["merge", "ship", "launch", "release"]));
static REVIEW: LazyLock<Regex> = LazyLock::new(|| word_regex(&["review", "approve", "lgtm"]));

/// A case-insensitive match of any of `stems` at the start of a word (`fix` matches `fixed`,
/// `fixes`; `prefix` does not match `fix`).
fn word_regex(stems: &[&str]) -> Regex {
    Regex::new(&format!(r"(?i)\b(?:{})", stems.join("|"))).expect("static pattern")
}

/// `PR #12`, `PR-12`, `PR12`, `pull #12`, `pull request #3`, `pull/12`.
static PR_REF: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:pr|pull(?:\s*request)?)(?:\s*[#/-]\s*|\s*#?)(\d+)\b").expect("static")
});
/// `#123`, `issue 123`, `issue-123`, `issues #4`, `fixes #12`, `closed #9`.
static ISSUE_REF: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)(?:\bissues?\s*[-#]?\s*(\d+)\b|#(\d+)\b)").expect("static"));

/// The importance of a memory whose author did not give one (1–10): base 5; +3 for
/// critical/blocker/breaking, +2 for fix/resolve/close, +2 for merge/ship/launch/release,
/// +1 for review/approve/lgtm; +2 for decisions (tagged `decision`), +1 for reflections.
pub fn default_importance(content: &str, kind: MemoryKind, tags: &[String]) -> u8 {
    let mut importance: i32 = 5;
    if CRITICAL.is_match(content) {
        importance += 3;
    }
    if FIX.is_match(content) {
        importance += 2;
    }
    if SHIP.is_match(content) {
        importance += 2;
    }
    if REVIEW.is_match(content) {
        importance += 1;
    }
    if tags.iter().any(|t| t.eq_ignore_ascii_case("decision")) {
        importance += 2;
    }
    if kind == MemoryKind::Reflection {
        importance += 1;
    }
    importance.clamp(1, 10) as u8
}

/// Issue and pull-request numbers mentioned in `text`, each sorted and without repeats.
/// A number written as a pull request is not also counted as an issue.
pub fn extract_refs(text: &str) -> (Vec<u32>, Vec<u32>) {
    let mut pr_spans = Vec::new();
    let mut prs = BTreeSet::new();
    for captures in PR_REF.captures_iter(text) {
        if let (Some(whole), Some(number)) = (captures.get(0), captures.get(1))
            && let Ok(n) = number.as_str().parse()
        {
            pr_spans.push(whole.range());
            prs.insert(n);
        }
    }
    let mut issues = BTreeSet::new();
    for captures in ISSUE_REF.captures_iter(text) {
        let Some(whole) = captures.get(0) else {
            continue;
        };
        if pr_spans
            .iter()
            .any(|span| span.start <= whole.start() && whole.end() <= span.end)
        {
            continue;
        }
        if let Some(n) = captures
            .get(1)
            .or_else(|| captures.get(2))
            .and_then(|m| m.as_str().parse().ok())
        {
            issues.insert(n);
        }
    }
    (issues.into_iter().collect(), prs.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn importance_follows_the_stream_rules() {
        let none: Vec<String> = Vec::new();
        assert_eq!(
            default_importance("Updated the docs", MemoryKind::Episode, &none),
            5
        );
        assert_eq!(
            default_importance("Fixed flaky test in CI", MemoryKind::Episode, &none),
            7
        );
        assert_eq!(
            default_importance(
                "CRITICAL: fix the breaking release",
                MemoryKind::Episode,
                &none
            ),
            10,
            "5 + 3 + 2 + 2 = 12, clamped"
        );
        assert_eq!(default_importance("lgtm", MemoryKind::Reflection, &none), 7);
        assert_eq!(
            default_importance("Chose JSONL", MemoryKind::Fact, &["decision".to_string()]),
            7
        );
        assert_eq!(
            default_importance("the prefix is odd", MemoryKind::Episode, &none),
            5,
            "`prefix` is not `fix`"
        );
    }

    #[test]
    fn issue_and_pr_refs_are_kept_apart() {
        assert_eq!(
            extract_refs("Merged PR #103, fixes #12 and issue-7; see #12 again"),
            (vec![7, 12], vec![103])
        );
        assert_eq!(
            extract_refs("pull request #3 and PR 4 close issues #5"),
            (vec![5], vec![3, 4])
        );
        assert_eq!(extract_refs("nothing here, not even 42"), (vec![], vec![]));
    }
}
