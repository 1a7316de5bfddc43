//! What the offline model can do when asked for JSON: the tasks Cairn's bundled cognitive
//! plugins ask for, done by extraction and rules instead of a model, so the pipeline
//! (summaries, facts, reflections, procedures) runs and is testable with no network.
//!
//! A request names its task on a `task: NAME` line of its system message (a real model
//! reads that line as part of its instructions) and gives its input as the last user
//! message, one item per line:
//!
//! - `summarize-episode`: transcript lines `speaker: text` (`assistant: …` for the agent) →
//!   `{title, summary, key_points, outcome, topics}`;
//! - `extract-facts`: lines of what people said → `{facts: [{content, subject, predicate,
//!   confidence}]}` from first-person statements (`my X is Y`, `I live in X`, `I work at X`,
//!   `I like X`, …);
//! - `reflect`: numbered facts `N. text` → `{reflections: [{content, sources}]}`, one per
//!   theme several facts share;
//! - `generalize`: numbered requests `N. text` → `{procedures: [{content, sources}]}`, one
//!   per request repeated at least three times.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Value, json};

/// The JSON answer to `task` for `input`, or none when the offline model does not know it.
pub fn perform(task: &str, input: &str) -> Option<Value> {
    match task {
        "summarize-episode" => Some(summarize(input)),
        "extract-facts" => Some(json!({ "facts": extract_facts(input) })),
        "reflect" => Some(json!({ "reflections": reflect(input) })),
        "generalize" => Some(json!({ "procedures": generalize(input) })),
        _ => None,
    }
}

/// The task a system message names on its `task: NAME` line.
pub fn task_named(system: &str) -> Option<&str> {
    system.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim()
            .eq_ignore_ascii_case("task")
            .then(|| value.trim())
            .filter(|v| !v.is_empty())
    })
}

/// One line of input split into its speaker (when it has one) and what was said.
fn speaker_and_text(line: &str) -> (Option<&str>, &str) {
    match line.split_once(": ") {
        Some((speaker, text)) if !speaker.contains(' ') || speaker.len() <= 24 => {
            (Some(speaker.trim()), text.trim())
        }
        _ => (None, line.trim()),
    }
}

fn is_agent(speaker: Option<&str>) -> bool {
    matches!(speaker, Some("assistant" | "agent"))
}

/// The sentences of a text (split after `.`, `!` or `?`).
fn sentences(text: &str) -> Vec<String> {
    static END: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"[.!?]+(\s+|$)").expect("regex"));
    let mut out = Vec::new();
    let mut start = 0;
    for found in END.find_iter(text) {
        out.push(text[start..found.end()].trim().to_string());
        start = found.end();
    }
    out.push(text[start..].trim().to_string());
    out.retain(|s| !s.is_empty());
    out
}

const STOP_WORDS: &[&str] = &[
    "the",
    "and",
    "for",
    "are",
    "but",
    "not",
    "you",
    "all",
    "any",
    "can",
    "had",
    "her",
    "was",
    "one",
    "our",
    "out",
    "has",
    "have",
    "his",
    "how",
    "its",
    "may",
    "new",
    "now",
    "see",
    "who",
    "did",
    "get",
    "got",
    "him",
    "she",
    "too",
    "use",
    "that",
    "with",
    "this",
    "they",
    "from",
    "what",
    "when",
    "will",
    "your",
    "just",
    "been",
    "were",
    "there",
    "their",
    "about",
    "would",
    "could",
    "should",
    "which",
    "into",
    "than",
    "then",
    "them",
    "these",
    "those",
    "also",
    "very",
    "some",
    "much",
    "like",
    "want",
    "know",
    "think",
    "please",
    "thanks",
    "thank",
    "yes",
    "okay",
    "here",
    "where",
    "why",
    "does",
    "doing",
    "done",
    "really",
    "tell",
    "said",
    "user",
    "user's",
    "i'm",
    "it's",
    "don't",
    "let",
    "let's",
    "hello",
    "anything",
    "something",
];

/// The content words of a text: lower case, three letters or more, no stop words.
fn content_words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .map(|w| w.trim_matches('\'').to_lowercase())
        .filter(|w| w.chars().count() >= 3 && !STOP_WORDS.contains(&w.as_str()))
        .collect()
}

/// The first `limit` words of a text, with `…` when it was longer.
fn clip_words(text: &str, limit: usize) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() <= limit {
        return words.join(" ");
    }
    format!("{}…", words[..limit].join(" "))
}

/// An extractive summary: the most representative sentences of what people said.
fn summarize(transcript: &str) -> Value {
    let mut said = Vec::new();
    let mut outcome = None;
    for line in transcript.lines().filter(|l| !l.trim().is_empty()) {
        let (speaker, text) = speaker_and_text(line);
        if is_agent(speaker) {
            outcome = Some(text.to_string());
        } else {
            said.extend(sentences(text));
        }
    }
    let mut frequency: BTreeMap<String, usize> = BTreeMap::new();
    for sentence in &said {
        for word in content_words(sentence) {
            *frequency.entry(word).or_default() += 1;
        }
    }
    let score = |sentence: &str| -> f64 {
        let words = content_words(sentence);
        let total: usize = words.iter().map(|w| frequency[w]).sum();
        total as f64 / (words.len().max(1) as f64).sqrt()
    };
    let mut ranked: Vec<usize> = (0..said.len()).collect();
    ranked.sort_by(|&a, &b| score(&said[b]).total_cmp(&score(&said[a])).then(a.cmp(&b)));
    let in_order = |count: usize| -> Vec<String> {
        let mut chosen: Vec<usize> = ranked.iter().copied().take(count).collect();
        chosen.sort_unstable();
        chosen.into_iter().map(|i| said[i].clone()).collect()
    };
    let mut topics: Vec<(String, usize)> = frequency.into_iter().collect();
    topics.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    json!({
        "title": ranked.first().map(|&i| clip_words(&said[i], 8)).unwrap_or_else(|| "An empty conversation".into()),
        "summary": in_order(3).join(" "),
        "key_points": in_order(5),
        "outcome": outcome.map(|o| clip_words(&o, 40)).unwrap_or_else(|| "no reply was given".into()),
        "topics": topics.into_iter().take(5).map(|(w, _)| w).collect::<Vec<_>>(),
    })
}

/// A first-person statement pattern and the fact it makes.
struct FactRule {
    pattern: Regex,
    /// The predicate, or `None` for many-valued statements (likes) that never supersede.
    predicate: Option<&'static str>,
    /// The fact's wording, `{}` standing for the captured value.
    wording: &'static str,
    confidence: f64,
}

static FACT_RULES: LazyLock<Vec<FactRule>> = LazyLock::new(|| {
    let rule = |pattern: &str, predicate, wording, confidence| FactRule {
        pattern: Regex::new(&format!("(?i){pattern}")).expect("fact rule"),
        predicate,
        wording,
        confidence,
    };
    vec![
        rule(
            r"\b(?:i live|i'm living|i am living|i moved|i've moved|i have moved|i relocated|i'm based|i am based) (?:in|to) (.+)",
            Some("lives_in"),
            "The user lives in {}.",
            0.85,
        ),
        rule(
            r"\bi work (?:at|for) (.+)",
            Some("works_at"),
            "The user works at {}.",
            0.85,
        ),
        rule(
            r"\bi work as (?:an? )?(.+)",
            Some("occupation"),
            "The user works as {}.",
            0.85,
        ),
        rule(
            r"\b(?:i am|i'm) (\d{1,3}) years old",
            Some("age"),
            "The user is {} years old.",
            0.9,
        ),
        rule(
            r"\bcall me (.+)",
            Some("name"),
            "The user's name is {}.",
            0.8,
        ),
        rule(
            r"\b(?:i am|i'm) allergic to (.+)",
            None,
            "The user is allergic to {}.",
            0.85,
        ),
        rule(
            r"\bi (?:don't|do not|never) (?:like|enjoy) (.+)",
            None,
            "The user dislikes {}.",
            0.7,
        ),
        rule(r"\bi hate (.+)", None, "The user dislikes {}.", 0.7),
        rule(r"\bi prefer (.+)", None, "The user prefers {}.", 0.7),
        rule(
            r"\bi (?:really )?(?:like|love|enjoy) (.+)",
            None,
            "The user likes {}.",
            0.65,
        ),
    ]
});

/// `my <thing> is <value>`: the thing (one to three words) and the value.
static MY_THING_IS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\bmy ((?:[a-z'-]+ ){0,2}[a-z'-]+) (?:is|are) (?:now |actually )?(.+)")
        .expect("regex")
});

/// Where a captured value ends: a clause boundary.
static VALUE_END: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)[,;:()!?]| and | but | because | so | though | although |\.(\s|$)")
        .expect("regex")
});

/// Words that say when, not what (`… is coffee now`).
static TRAILING_TIME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\s+(now|anymore|these days|nowadays|actually|today)$").expect("regex")
});

/// The value a pattern captured, cut at the first clause boundary, without trailing time
/// words, up to six words.
fn clean_value(raw: &str) -> Option<String> {
    let cut = VALUE_END.find(raw).map_or(raw, |m| &raw[..m.start()]);
    let value = cut.trim().trim_end_matches('.').trim();
    let value = TRAILING_TIME.replace(value, "");
    let words = value.split_whitespace().count();
    (1..=6).contains(&words).then(|| value.to_string())
}

/// Facts stated in the first person, best first, at most five.
fn extract_facts(input: &str) -> Vec<Value> {
    let mut facts: Vec<(f64, Value)> = Vec::new();
    let mut seen = BTreeSet::new();
    for line in input.lines() {
        let (speaker, text) = speaker_and_text(line);
        if is_agent(speaker) {
            continue;
        }
        for sentence in sentences(text) {
            if sentence.ends_with('?') {
                continue;
            }
            for (content, predicate, confidence) in facts_in(&sentence) {
                if seen.insert(content.to_lowercase()) {
                    facts.push((
                        confidence,
                        json!({"content": content, "subject": "user", "predicate": predicate, "confidence": confidence}),
                    ));
                }
            }
        }
    }
    facts.sort_by(|a, b| b.0.total_cmp(&a.0));
    facts.into_iter().take(5).map(|(_, fact)| fact).collect()
}

/// The facts one sentence states: wording, predicate and confidence.
fn facts_in(sentence: &str) -> Vec<(String, Option<String>, f64)> {
    let mut found = Vec::new();
    if let Some(caps) = MY_THING_IS.captures(sentence) {
        let thing = caps[1].to_lowercase();
        if let Some(value) = clean_value(&caps[2]) {
            let predicate = thing.replace([' ', '-'], "_");
            found.push((
                format!("The user's {thing} is {value}."),
                Some(predicate),
                0.9,
            ));
        }
    }
    for rule in FACT_RULES.iter() {
        let Some(caps) = rule.pattern.captures(sentence) else {
            continue;
        };
        if let Some(value) = clean_value(&caps[1]) {
            found.push((
                rule.wording.replace("{}", &value),
                rule.predicate.map(str::to_string),
                rule.confidence,
            ));
            break;
        }
    }
    found
}

/// Numbered input lines (`N. text`): each number with its text.
fn numbered(input: &str) -> Vec<(u64, String)> {
    input
        .lines()
        .filter_map(|line| {
            let (number, text) = line.trim().split_once(". ")?;
            Some((number.trim().parse().ok()?, text.trim().to_string()))
        })
        .collect()
}

/// One reflection per theme (a content word) that two or more facts share, the most
/// shared first, at most three.
fn reflect(input: &str) -> Vec<Value> {
    let facts = numbered(input);
    let mut by_word: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, (_, text)) in facts.iter().enumerate() {
        let words: BTreeSet<String> = content_words(text).into_iter().collect();
        for word in words {
            by_word.entry(word).or_default().push(i);
        }
    }
    let mut themes: Vec<(String, Vec<usize>)> = by_word
        .into_iter()
        .filter(|(_, at)| at.len() >= 2)
        .collect();
    themes.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
    let mut covered: Vec<Vec<usize>> = Vec::new();
    let mut reflections = Vec::new();
    for (word, at) in themes {
        if covered.contains(&at) || reflections.len() == 3 {
            continue;
        }
        let said: Vec<&str> = at
            .iter()
            .map(|&i| facts[i].1.trim_end_matches('.'))
            .collect();
        reflections.push(json!({
            "content": format!("{} memories concern {word}: {}.", at.len(), said.join("; ")),
            "sources": at.iter().map(|&i| facts[i].0).collect::<Vec<_>>(),
        }));
        covered.push(at);
    }
    reflections
}

/// How alike two word sets are (Jaccard).
fn overlap(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    let union = a.union(b).count();
    if union == 0 {
        return 0.0;
    }
    a.intersection(b).count() as f64 / union as f64
}

/// One procedure per request made three or more times (requests sharing half their
/// words count as the same), at most three.
fn generalize(input: &str) -> Vec<Value> {
    let requests: Vec<(u64, String, BTreeSet<String>)> = numbered(input)
        .into_iter()
        .map(|(n, text)| {
            let words = content_words(&text).into_iter().collect();
            (n, text, words)
        })
        .collect();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, (_, _, words)) in requests.iter().enumerate() {
        match groups
            .iter_mut()
            .find(|g| overlap(&requests[g[0]].2, words) >= 0.5)
        {
            Some(group) => group.push(i),
            None => groups.push(vec![i]),
        }
    }
    groups.sort_by_key(|g| std::cmp::Reverse(g.len()));
    groups
        .into_iter()
        .filter(|g| g.len() >= 3)
        .take(3)
        .map(|group| {
            let first = &requests[group[0]].1;
            json!({
                "content": format!(
                    "The user repeatedly asks \"{}\" ({} times): answer it the same way each time and offer to automate it.",
                    clip_words(first, 20),
                    group.len()
                ),
                "sources": group.iter().map(|&i| requests[i].0).collect::<Vec<_>>(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_is_read_from_its_line() {
        assert_eq!(
            task_named("You summarise.\nTask: summarize-episode\nAnswer JSON."),
            Some("summarize-episode")
        );
        assert_eq!(task_named("no task here"), None);
        assert!(perform("write-a-poem", "x").is_none());
    }

    #[test]
    fn a_summary_keeps_what_people_said_and_the_outcome() {
        let transcript = "ada: I moved to Lisbon last month. The flat in Lisbon has a tiny kitchen.\n\
                          assistant: Congratulations on the move.\n\
                          ada: Lisbon is sunny. I need a kitchen table.\n\
                          assistant: A folding table fits small kitchens.";
        let summary = summarize(transcript);
        assert_eq!(summary["title"], "The flat in Lisbon has a tiny kitchen.");
        assert_eq!(summary["outcome"], "A folding table fits small kitchens.");
        let topics: Vec<&str> = summary["topics"]
            .as_array()
            .expect("topics")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(topics[..2], ["lisbon", "kitchen"]);
        assert!(
            summary["summary"]
                .as_str()
                .expect("summary")
                .contains("Lisbon")
        );
        assert!(
            !summary["summary"]
                .as_str()
                .expect("summary")
                .contains("folding")
        );
        assert_eq!(summary["key_points"].as_array().expect("points").len(), 4);
    }

    #[test]
    fn first_person_statements_become_facts_with_predicates() {
        let facts = extract_facts(
            "ada: Hi! My favourite drink is green tea, and I live in Lisbon.\n\
             assistant: My name is Cairn.\n\
             ada: I really like sailing. Do I like cheese? My car is a red Fiat now.",
        );
        let contents: Vec<&str> = facts.iter().filter_map(|f| f["content"].as_str()).collect();
        assert_eq!(
            contents,
            [
                "The user's favourite drink is green tea.",
                "The user's car is a red Fiat.",
                "The user lives in Lisbon.",
                "The user likes sailing."
            ]
        );
        assert_eq!(facts[0]["predicate"], "favourite_drink");
        assert_eq!(facts[2]["predicate"], "lives_in");
        assert!(facts[3]["predicate"].is_null());
        assert!(extract_facts("ada: What a day.").is_empty());
    }

    #[test]
    fn shared_themes_become_reflections_and_repeats_procedures() {
        let reflections = reflect(
            "1. The user sails on weekends.\n2. The user's boat is moored in Lisbon.\n3. The user sails with a friend from Lisbon.",
        );
        assert_eq!(reflections[0]["sources"], json!([2, 3]));
        assert!(
            reflections[0]["content"]
                .as_str()
                .expect("content")
                .contains("lisbon")
        );
        let procedures = generalize(
            "1. export the weekly sales report\n2. what is the weather\n3. export the sales report weekly please\n4. export weekly sales report now",
        );
        assert_eq!(procedures.len(), 1);
        assert_eq!(procedures[0]["sources"], json!([1, 3, 4]));
        assert!(generalize("1. a b c\n2. hello there").is_empty());
    }
}
