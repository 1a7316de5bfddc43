//! Recall scoring: how a query's text becomes a safe full-text query, and how the signals of
//! a candidate (BM25, cosine, importance, recency) become one score that can be explained.
//!
//! Relevance is the weighted mean of the signals present: BM25 normalised per query (the
//! best lexical match scores 1) and cosine similarity when the entry and query have vectors.
//! The final score blends relevance with importance (1–10 → 0.1–1) and recency (halving
//! every `half_life_hours` of age), as in Generative Agents.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::Scope;
use crate::timeframe::TimeFrame;
use cairn_storage::memory::FullTextMatch;
pub use cairn_vocab::memory::{RecallHit, RecallQuery, ScoreParts};

/// Ranking settings (`memory.recall:` in `cairn.yaml`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RecallConfig {
    /// Weight of the BM25 signal inside relevance (default 1).
    pub bm25_weight: f64,
    /// Weight of the cosine signal inside relevance (default 1).
    pub vector_weight: f64,
    /// Weight of relevance in the final score (default 0.7).
    pub relevance_weight: f64,
    /// Weight of importance in the final score (default 0.15).
    pub importance_weight: f64,
    /// Weight of recency in the final score (default 0.15).
    pub recency_weight: f64,
    /// Age at which recency halves, in hours (default 168, a week).
    pub half_life_hours: f64,
    /// Hits whose relevance is below this are dropped (default 0.1).
    pub min_relevance: f64,
    /// Hits this similar (word overlap) to a better hit are collapsed into it (default 0.9).
    pub duplicate_similarity: f64,
    /// Candidates taken from each signal before ranking, per hit ranked (default 5; at
    /// least 50, so a recall ranks its first ten from the same 50 whatever its limit).
    pub candidates_per_hit: usize,
    /// Vectors a recall scores at most, the newest first, of the user's own memories (and
    /// as many of those shared by all users), so that a recall's time stops growing with a
    /// user's memories (default 50,000: about 10 ms of a 256-dim scan here). Older memories are still
    /// found by their words, and through the facts consolidation draws from them.
    pub scan_limit: usize,
    /// With a semantic model, relevance is the cosine plus this much of the normalised
    /// BM25: words that match help, but never outweigh meaning (default 0.1).
    pub lexical_boost: f64,
    /// With a semantic model, hits whose relevance is below this are dropped, so a query
    /// nothing answers recalls little (default 0.15, set on the dev set).
    pub min_similarity: f64,
    /// Two hits at least this similar (cosine) are about the same thing: the newer ranks
    /// above the older (default 0.4, set on the dev set).
    pub same_subject_similarity: f64,
    /// Among the hits kept, a lower mutual cosine that is enough when the newer hit is
    /// relevant to the query too (at least `update_relevance_ratio` of the older's
    /// relevance): both answer it, so the newer is the update and goes first (default
    /// 0.25, set on the dev set). It compares the plain vectors, as does
    /// `same_subject_similarity` at this step, and only reorders the kept hits.
    pub same_subject_when_both_answer: f64,
    /// See `same_subject_when_both_answer` (default 0.5).
    pub update_relevance_ratio: f64,
    /// Among the hits kept, a mutual cosine lower still that is enough when the newer hit
    /// tells of a change ("these days", "switched to", "no longer"; see [`crate::change`])
    /// and is at least `update_relevance_ratio_when_changed` as relevant as the older: an
    /// update says that something changed, an unrelated newer memory seldom does (default
    /// 0.1, set on the dev set). Plain vectors, and only the kept hits are reordered.
    pub same_subject_when_changed: f64,
    /// See `same_subject_when_changed` (default 0.4).
    pub update_relevance_ratio_when_changed: f64,
    /// With a semantic model, the candidates most like the query (this many, default 5,
    /// set on the dev set) are each compared with their own nearest memories: the most
    /// alike newer one that tells of a change, is at least `successor_similarity` alike,
    /// and has that candidate as its own nearest memory, is its update. It joins the
    /// candidates and ranks above the one it updates even when it shares little with the
    /// query ("these days my free time goes into climbing" for "how do I stay fit?", after
    /// "joined a running club"). Not for a question comparing two events. 0 turns it off.
    pub successor_probes: usize,
    /// See `successor_probes` (default 0.2, set on the dev set).
    pub successor_similarity: f64,
    /// With a semantic model, a recall whose best hit is less relevant than this answers
    /// nothing: nothing the user said is about the question (default 0.22, set on the dev
    /// set: balanced accuracy against recall).
    pub abstain_below: f64,
    /// Weight of a hit's own score against its likeness (centred cosine) to better hits
    /// when the top k is picked (maximal marginal relevance; 1 turns diversification off;
    /// default 0.8, set on the dev set).
    pub diversity_lambda: f64,
    /// Added to the score of a memory valid inside the span the query names ("last
    /// month", "in March"; default 0.3): enough to lift it above equally relevant ones
    /// from other times, not enough to lift what is unrelated.
    pub time_boost: f64,
    /// With a semantic model, a memory inside the span is lifted only when it answers at
    /// least this share as well as the best candidate (default 0.6, set on the dev set):
    /// the time words favour what is about the question among the span, not whatever was
    /// said then.
    pub time_boost_share: f64,
    /// With a semantic model, when fewer than the hits asked for are above `min_similarity`,
    /// the best below it (down to half of it) fill the rest, marked in `adjusted` (default
    /// true): the floor keeps weak hits from competing for the top k, not from filling room
    /// left in it. A query with its own `min_relevance` is never filled, and abstention
    /// still answers nothing.
    pub fill_below_floor: bool,
    /// With a semantic model, relevance compares vectors with the common direction of the
    /// memory's vectors taken out (their mean, see [`crate::embed::centre`]), weighted by
    /// how many there are: `n / (n + centring_count)`, so a few memories are compared
    /// nearly as they are and many almost fully centred (default 500, set on the dev set).
    /// The floor and abstention still compare the plain cosine.
    pub centring_count: f64,
    /// With a semantic model, each candidate's score loses this much (times
    /// `relevance_weight`) of its mean centred likeness to the `crowding_neighbours`
    /// candidates most like it. A sentence that resembles everything ("I tried a new coffee
    /// shop") sits close to many candidates of any question, a specific answer close to few:
    /// a local correction for such hubs (default 0.3, set on the dev set; 0 turns it off).
    pub crowding_penalty: f64,
    /// See `crowding_penalty` (default 5).
    pub crowding_neighbours: usize,
}

impl Default for RecallConfig {
    fn default() -> Self {
        Self {
            bm25_weight: 1.0,
            vector_weight: 1.0,
            relevance_weight: 0.7,
            importance_weight: 0.15,
            recency_weight: 0.15,
            half_life_hours: 168.0,
            min_relevance: 0.1,
            duplicate_similarity: 0.9,
            candidates_per_hit: 5,
            scan_limit: 50_000,
            lexical_boost: 0.1,
            min_similarity: 0.15,
            same_subject_similarity: 0.4,
            same_subject_when_both_answer: 0.25,
            update_relevance_ratio: 0.5,
            same_subject_when_changed: 0.1,
            update_relevance_ratio_when_changed: 0.4,
            successor_probes: 5,
            successor_similarity: 0.2,
            abstain_below: 0.22,
            diversity_lambda: 0.8,
            time_boost: 0.3,
            time_boost_share: 0.6,
            fill_below_floor: true,
            centring_count: 500.0,
            crowding_penalty: 0.3,
            crowding_neighbours: 5,
        }
    }
}

/// Words too common to say anything about relevance: English function words (the usual
/// stop-word list of search engines), and the pieces an apostrophe leaves (`don't` is `don`
/// and `t`). A query matching memories only by such a word ("Tell me *about* quantum
/// physics" against "my sister talked *about* a job interview") found them, ranked as
/// relevant as an answer: FTS5 gives a word in over half the rows a near-zero weight, and
/// the best match of a search scores 1 however weak (until 2026-12-02, found by an
/// operator's test).
const STOPWORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "d",
    "did",
    "do",
    "does",
    "doing",
    "don",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "ll",
    "m",
    "me",
    "more",
    "most",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "re",
    "s",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "t",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "ve",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

/// The words of `text`: lower-case runs of letters and digits, without stop words.
pub fn terms(text: &str) -> Vec<String> {
    words_without(text, STOPWORDS)
}

/// The lower-case runs of letters and digits of `text` that are not in `stopwords`.
pub(crate) fn words_without(text: &str, stopwords: &[&str]) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !stopwords.contains(&w.as_str()))
        .collect()
}

/// The words of `text` as FTS5 phrases, each quoted so that nothing the user typed (`"`,
/// `*`, `NEAR`, `OR`, column filters) is read as FTS5 syntax; at most 32, in order.
pub fn fts_phrases(text: &str) -> Vec<String> {
    let unique: BTreeSet<String> = terms(text).into_iter().take(32).collect();
    unique
        .iter()
        .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
        .collect()
}

/// The full-text match for a query: its words in the content and tags, with the user's and
/// session's scope tokens (see migration 0003) for the store to count each word's matches
/// in that scope. None when the text has no words.
///
/// The ranked search itself names the words alone (the store's SQL checks the scope):
/// `bm25()` walks every phrase's whole posting list to count its documents, so a scope
/// token, whose postings are the user's every memory, would make each recall's cost grow
/// with the user's memories. The agent's token is never used: nearly every entry has it.
pub fn fts_match(
    text: &str,
    scope: &Scope,
    exclude_session: Option<&str>,
) -> Option<FullTextMatch> {
    let phrases = fts_phrases(text);
    if phrases.is_empty() {
        return None;
    }
    let mut conditions = Vec::new();
    if let Some(user) = &scope.user_id {
        let token = scope_token('u', user);
        conditions.push(format!("AND scope_tokens : ({token} OR unone)"));
    }
    if let Some(session) = &scope.session_id {
        conditions.push(format!("AND scope_tokens : {}", scope_token('s', session)));
    }
    if let Some(session) = exclude_session {
        conditions.push(format!("NOT scope_tokens : {}", scope_token('s', session)));
    }
    Some(FullTextMatch {
        phrases,
        scope: conditions.join(" "),
    })
}

/// The index token of one scope level: its letter and the id's UTF-8 bytes in lower-case hex
/// (as SQLite's `lower(hex(id))` writes it in the generated `scope_tokens` column).
fn scope_token(level: char, id: &str) -> String {
    format!("{level}{}", hex::encode(id.as_bytes()))
}

/// How far after "now" a memory may be dated and still count as new, not as from the future:
/// hosts sharing a database differ in their clocks by this much at most.
pub const CLOCK_SLACK_MS: i64 = 60_000;

/// Recency of something `age_ms` old: 1 now, halving every `half_life_hours`; none for a
/// memory dated after "now" (a question asked `--at` an earlier time must not favour what
/// was said later), beyond [`CLOCK_SLACK_MS`].
pub fn recency(age_ms: i64, half_life_hours: f64) -> f64 {
    if age_ms < -CLOCK_SLACK_MS {
        return 0.0;
    }
    let hours = age_ms.max(0) as f64 / 3_600_000.0;
    if half_life_hours <= 0.0 {
        return 1.0;
    }
    0.5f64.powf(hours / half_life_hours)
}

/// The signals of one candidate.
#[derive(Debug, Clone, Copy)]
pub struct Signals {
    /// SQLite's BM25 (lower is better), when the text matched.
    pub bm25_raw: Option<f64>,
    /// The best (most negative) BM25 of the query's candidates, negated.
    pub best_bm25: f64,
    /// Cosine similarity to the query, when both have vectors.
    pub cosine: Option<f64>,
    /// The same with the vectors' common direction taken out, when it was.
    pub centred_cosine: Option<f64>,
    /// Whether the vectors come from a semantic model (not lexical hashing).
    pub semantic: bool,
}

/// Score a candidate from its signals. With a semantic model the cosine leads and BM25
/// adds a little ([`RecallConfig::lexical_boost`]); otherwise relevance is the weighted
/// mean of the signals present.
pub fn score(config: &RecallConfig, signals: Signals, importance: u8, age_ms: i64) -> ScoreParts {
    let Signals {
        bm25_raw,
        best_bm25,
        cosine,
        centred_cosine,
        semantic,
    } = signals;
    let bm25 = match bm25_raw {
        Some(raw) if best_bm25 > 0.0 => (-raw / best_bm25).clamp(0.0, 1.0),
        _ => 0.0,
    };
    let relevance = match cosine {
        Some(cosine) if semantic => {
            (centred_cosine.unwrap_or(cosine) + config.lexical_boost * bm25).clamp(0.0, 1.0)
        }
        _ => {
            let (mut weighted, mut weights) = (config.bm25_weight * bm25, config.bm25_weight);
            if let Some(cosine) = cosine {
                weighted += config.vector_weight * cosine.clamp(0.0, 1.0);
                weights += config.vector_weight;
            }
            if weights > 0.0 {
                weighted / weights
            } else {
                0.0
            }
        }
    };
    let importance = f64::from(importance.clamp(1, 10)) / 10.0;
    let recency = recency(age_ms, config.half_life_hours);
    let score = config.relevance_weight * relevance
        + config.importance_weight * importance
        + config.recency_weight * recency;
    ScoreParts {
        bm25_raw,
        bm25,
        cosine,
        centred_cosine,
        relevance,
        importance,
        recency,
        age_hours: age_ms as f64 / 3_600_000.0,
        crowding: None,
        score,
        adjusted: None,
        time: None,
        scored_by: None,
    }
}

/// How plainly a hit answers: for a relevance made of the centred cosine, the plain
/// cosine plus the same share of BM25; otherwise the relevance itself. The floor and
/// abstention compare this, on the scale they were set on (a centred cosine says which
/// memory is closest, not how close).
pub fn plain_relevance(config: &RecallConfig, parts: &ScoreParts) -> f64 {
    match (parts.cosine, parts.centred_cosine) {
        (Some(cosine), Some(_)) => (cosine + config.lexical_boost * parts.bm25).clamp(0.0, 1.0),
        _ => parts.relevance,
    }
}

/// Favour the hits valid inside the span `frame` the query names, and say in each
/// explanation where it was. With a `semantic` model, only those that answer at least
/// [`RecallConfig::time_boost_share`] as well as the best of `hits`; lexical relevance
/// mostly counts the words a hit shares with the question, and the event that anchors
/// "before I went kayaking" shares the most, so there every hit of the span is lifted.
pub fn favour_span(
    config: &RecallConfig,
    hits: &mut [&mut RecallHit],
    frame: &TimeFrame,
    semantic: bool,
) {
    let share = if semantic {
        config.time_boost_share
    } else {
        0.0
    };
    let best = hits
        .iter()
        .map(|hit| plain_relevance(config, &hit.explain))
        .fold(0.0, f64::max);
    for hit in hits {
        let answers = plain_relevance(config, &hit.explain) >= share * best;
        weigh_time(
            config,
            &mut hit.explain,
            frame,
            hit.entry.valid_from,
            answers,
        );
        hit.score = hit.explain.score;
    }
}

/// Lift a memory valid at `valid_from` inside `frame` when it `answers` the question well
/// enough, and say in the explanation where it was.
fn weigh_time(
    config: &RecallConfig,
    parts: &mut ScoreParts,
    frame: &TimeFrame,
    valid_from: i64,
    answers: bool,
) {
    let inside = frame.contains(valid_from);
    let lifted = inside && answers;
    if lifted {
        parts.score += config.time_boost;
    }
    let place = if inside { "inside" } else { "outside" };
    let note = if inside && !lifted {
        format!(
            " (not lifted: it answers less than {} of the best candidate)",
            config.time_boost_share
        )
    } else {
        String::new()
    };
    parts.time = Some(format!("{place} {}{note}", frame.describe()));
}

/// Keep hits in order, dropping each one that nearly repeats a better one, until `limit`
/// are kept. Each hit's words are read once, and only the kept hits are compared against,
/// so the cost is bounded by `limit` × the candidates, not their square.
pub fn collapse_duplicates(hits: Vec<RecallHit>, threshold: f64, limit: usize) -> Vec<RecallHit> {
    let mut kept: Vec<(RecallHit, BTreeSet<String>)> = Vec::with_capacity(limit);
    for hit in hits {
        if kept.len() >= limit {
            break;
        }
        let words = word_set(&hit.entry.content);
        let repeats = kept.iter().any(|(k, k_words)| {
            k.entry.content == hit.entry.content || overlap(k_words, &words) >= threshold
        });
        if !repeats {
            kept.push((hit, words));
        }
    }
    kept.into_iter().map(|(hit, _)| hit).collect()
}

/// |A ∩ B| / |A ∪ B| over the words of two texts.
pub fn jaccard(a: &str, b: &str) -> f64 {
    overlap(&word_set(a), &word_set(b))
}

fn word_set(text: &str) -> BTreeSet<String> {
    terms(text).into_iter().collect()
}

/// |A ∩ B| / |A ∪ B| of two word sets (1 for two empty sets).
fn overlap(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    let union = a.union(b).count();
    if union == 0 {
        return 1.0;
    }
    a.intersection(b).count() as f64 / union as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_syntax_is_quoted_away() {
        assert_eq!(
            fts_phrases("tea* OR \"x\" NEAR(a b) content:secret").join(" OR "),
            "\"b\" OR \"content\" OR \"near\" OR \"secret\" OR \"tea\" OR \"x\""
        );
        assert!(fts_phrases("the of ?!").is_empty());
    }

    #[test]
    fn function_words_and_the_pieces_of_contractions_are_not_search_terms() {
        assert_eq!(
            terms("Tell me about quantum physics"),
            ["tell", "quantum", "physics"]
        );
        assert_eq!(terms("I don't have it, do you?"), Vec::<String>::new());
    }

    #[test]
    fn scoped_matches_name_the_scope_tokens() {
        let scope = Scope {
            agent_id: Some("main".into()),
            user_id: Some("bob".into()),
            session_id: None,
        };
        assert_eq!(
            fts_match("tea OR *", &scope, Some("cli:c1")).map(|m| m.expression(&m.phrases)),
            Some(
                "{content tags} : (\"tea\") AND scope_tokens : (u626f62 OR unone) \
                 NOT scope_tokens : s636c693a6331"
                    .to_string()
            )
        );
    }

    #[test]
    fn scores_blend_relevance_importance_and_recency() {
        let config = RecallConfig::default();
        let signals = |cosine, semantic| Signals {
            bm25_raw: Some(-4.0),
            best_bm25: 4.0,
            cosine,
            centred_cosine: None,
            semantic,
        };
        let fresh = score(&config, signals(Some(0.5), false), 10, 0);
        assert!((fresh.bm25 - 1.0).abs() < 1e-9);
        assert!((fresh.relevance - 0.75).abs() < 1e-9);
        assert!((fresh.score - (0.7 * 0.75 + 0.15 + 0.15)).abs() < 1e-9);
        let week_old = score(&config, signals(None, false), 10, 168 * 3_600_000);
        assert!((week_old.recency - 0.5).abs() < 1e-9);
        let later = score(&config, signals(None, false), 5, -86_400_000);
        assert_eq!(later.recency, 0.0, "said after now: no recency");
        assert_eq!(later.age_hours, -24.0, "a day after now, said as such");
        let skewed = score(&config, signals(None, false), 5, -1_000);
        assert_eq!(skewed.recency, 1.0, "a second ahead is a clock's skew");
        assert!(
            (week_old.relevance - 1.0).abs() < 1e-9,
            "only the signals present count"
        );
        let semantic = score(&config, signals(Some(0.5), true), 10, 0);
        assert!(
            (semantic.relevance - 0.6).abs() < 1e-9,
            "meaning leads, matching words add a little"
        );
    }
}
