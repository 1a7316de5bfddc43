//! A harder recall benchmark in the style of LongMemEval: generated users talk to the agent
//! over eight sessions spread across months; what they say is stored as raw episodes (as a
//! turn stores it), and questions in five categories ask about it in other words.
//!
//! - single-session: one message answers;
//! - multi-session: two messages from different sessions answer together;
//! - knowledge-update: a later message changes an earlier one; the newer must come first;
//! - temporal: two dated events, asked which came first or how far apart;
//! - abstention: nothing the user said answers; recall should return nothing.
//!
//! Deterministic for a seed: tune on one seed, report on another.

mod bank;

use std::collections::BTreeSet;

use crate::memory_dataset::{PlannedMemory, Rng, episode};
pub use bank::{Aspect, Bank, Event, FIRST, Pair, SECOND};

/// The five kinds of question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Category {
    /// One message answers.
    SingleSession,
    /// Two messages from different sessions answer together.
    MultiSession,
    /// A later message changes an earlier one.
    KnowledgeUpdate,
    /// Two dated events.
    Temporal,
    /// Nothing answers.
    Abstention,
}

impl Category {
    /// Every category, in report order.
    pub const ALL: [Category; 5] = [
        Category::SingleSession,
        Category::MultiSession,
        Category::KnowledgeUpdate,
        Category::Temporal,
        Category::Abstention,
    ];

    /// The category's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Category::SingleSession => "single-session",
            Category::MultiSession => "multi-session",
            Category::KnowledgeUpdate => "knowledge-update",
            Category::Temporal => "temporal",
            Category::Abstention => "abstention",
        }
    }
}

/// A question, who asks it, and the labels of the memories that answer it.
pub struct EvalQuestion {
    /// The user asking (the recall's scope).
    pub user: String,
    /// The question.
    pub text: String,
    /// Its category.
    pub category: Category,
    /// Labels of every memory needed to answer (empty for abstention).
    pub evidence: Vec<String>,
    /// Labels of outdated statements the evidence replaced.
    pub stale: Vec<String>,
}

/// The generated set.
pub struct EvalSet {
    /// Memories in the order to store them.
    pub memories: Vec<PlannedMemory>,
    /// Questions with their evidence.
    pub questions: Vec<EvalQuestion>,
    /// Sessions across all users.
    pub sessions: usize,
}

impl EvalSet {
    /// The text of the memory labelled `label`.
    pub fn text(&self, label: &str) -> Option<&str> {
        self.memories
            .iter()
            .find(|m| m.label == label)
            .map(|m| m.memory.content.as_str())
    }

    /// Mean share of a question's content words that also occur in its evidence (stop words
    /// and the user-visible fillers excluded): how lexical the set is.
    pub fn mean_word_overlap(&self) -> f64 {
        let by_label: std::collections::HashMap<&str, &str> = self
            .memories
            .iter()
            .map(|m| (m.label.as_str(), m.memory.content.as_str()))
            .collect();
        let overlaps: Vec<f64> = self
            .questions
            .iter()
            .filter(|q| !q.evidence.is_empty())
            .map(|q| {
                let asked = content_words(&q.text);
                let evidence: BTreeSet<String> = q
                    .evidence
                    .iter()
                    .flat_map(|l| content_words(by_label[l.as_str()]))
                    .collect();
                asked.intersection(&evidence).count() as f64 / asked.len().max(1) as f64
            })
            .collect();
        overlaps.iter().sum::<f64>() / overlaps.len().max(1) as f64
    }
}

fn content_words(text: &str) -> BTreeSet<String> {
    cairn::memory::recall::terms(text).into_iter().collect()
}

const DAY_MS: i64 = 86_400_000;
/// Sessions per user, a few weeks apart.
const SESSIONS: usize = 8;

/// One message a user says in a session, with its label.
struct Said {
    session: usize,
    text: String,
    label: String,
}

/// Generate `users` users ending at `now` from `bank`'s phrases: per user, three
/// single-session, three updated, three multi-session, three temporal and three unanswerable
/// questions.
pub fn generate(bank: &Bank, users: usize, seed: u64, now: i64) -> EvalSet {
    let mut rng = Rng::new(seed);
    let mut set = EvalSet {
        memories: Vec::new(),
        questions: Vec::new(),
        sessions: users * SESSIONS,
    };
    for u in 0..users {
        let user = format!("user-{u:04}");
        let start = now - 240 * DAY_MS + rng.below(20) as i64 * DAY_MS;
        let mut said: Vec<Said> = Vec::new();
        let say = |session: usize, text: String, said: &mut Vec<Said>| {
            let label = format!("{user}-m{}", said.len());
            said.push(Said {
                session,
                text,
                label: label.clone(),
            });
            label
        };
        let aspects = pick(&mut rng, bank.aspects.len(), 6);
        for (i, &a) in aspects.iter().enumerate() {
            let aspect = &bank.aspects[a];
            let values = pick(&mut rng, aspect.values.len(), 2);
            let first = fill(one(&mut rng, aspect.statements), aspect.values[values[0]]);
            let session = rng.below(SESSIONS / 2);
            let first_label = say(session, first, &mut said);
            let question = one(&mut rng, aspect.questions).to_string();
            if i < 3 {
                set.questions.push(EvalQuestion {
                    user: user.clone(),
                    text: question,
                    category: Category::SingleSession,
                    evidence: vec![first_label],
                    stale: Vec::new(),
                });
            } else {
                let update = fill(one(&mut rng, aspect.updates), aspect.values[values[1]]);
                let later = SESSIONS / 2 + rng.below(SESSIONS / 2);
                let update_label = say(later, update, &mut said);
                set.questions.push(EvalQuestion {
                    user: user.clone(),
                    text: question,
                    category: Category::KnowledgeUpdate,
                    evidence: vec![update_label],
                    stale: vec![first_label],
                });
            }
        }
        for p in pick(&mut rng, bank.pairs.len(), 3) {
            let early = rng.below(SESSIONS / 2);
            let late = early + 2 + rng.below(SESSIONS - early - 2);
            let first = say(early, bank.pairs[p].first.to_string(), &mut said);
            let second = say(late, bank.pairs[p].second.to_string(), &mut said);
            set.questions.push(EvalQuestion {
                user: user.clone(),
                text: bank.pairs[p].question.to_string(),
                category: Category::MultiSession,
                evidence: vec![first, second],
                stale: Vec::new(),
            });
        }
        let events = pick(&mut rng, bank.events.len(), 4);
        let event_labels: Vec<String> = events
            .iter()
            .map(|&e| {
                let session = rng.below(SESSIONS);
                say(session, bank.events[e].told.to_string(), &mut said)
            })
            .collect();
        for (a, b) in [(0, 1), (2, 3), (0, 3)] {
            let template = one(&mut rng, bank.order_questions);
            let text = template
                .replace("{a}", bank.events[events[a]].named)
                .replace("{b}", bank.events[events[b]].named);
            set.questions.push(EvalQuestion {
                user: user.clone(),
                text: capitalise(&text),
                category: Category::Temporal,
                evidence: vec![event_labels[a].clone(), event_labels[b].clone()],
                stale: Vec::new(),
            });
        }
        for q in pick(&mut rng, bank.unanswerable.len(), 3) {
            set.questions.push(EvalQuestion {
                user: user.clone(),
                text: bank.unanswerable[q].to_string(),
                category: Category::Abstention,
                evidence: Vec::new(),
                stale: Vec::new(),
            });
        }
        store_sessions(bank, &mut set, &mut rng, &user, start, said);
    }
    set
}

/// Interleave each session's messages with small talk and the assistant's replies, and
/// store them as episodes at their time.
fn store_sessions(
    bank: &Bank,
    set: &mut EvalSet,
    rng: &mut Rng,
    user: &str,
    start: i64,
    said: Vec<Said>,
) {
    for session in 0..SESSIONS {
        let mut lines: Vec<(String, Option<String>)> = said
            .iter()
            .filter(|s| s.session == session)
            .map(|s| (s.text.clone(), Some(s.label.clone())))
            .collect();
        for _ in 0..3 {
            let at = rng.below(lines.len() + 1);
            lines.insert(at, (one(rng, bank.small_talk).to_string(), None));
        }
        let session_id = format!("chat:{user}-s{session}");
        let day = start + session as i64 * 28 * DAY_MS + rng.below(7) as i64 * DAY_MS;
        for (i, (text, label)) in lines.into_iter().enumerate() {
            let at = day + i as i64 * 120_000;
            let label = label.unwrap_or_else(|| format!("{session_id}-talk{i}"));
            set.memories.push(PlannedMemory {
                label: label.clone(),
                memory: episode(user, &session_id, &text, "user", at),
            });
            set.memories.push(PlannedMemory {
                label: format!("{label}-reply"),
                memory: episode(
                    user,
                    &session_id,
                    one(rng, bank.acks),
                    "assistant",
                    at + 5_000,
                ),
            });
        }
    }
}

/// `count` distinct indices below `n`, in random order.
fn pick(rng: &mut Rng, n: usize, count: usize) -> Vec<usize> {
    let mut all: Vec<usize> = (0..n).collect();
    for i in (1..all.len()).rev() {
        all.swap(i, rng.below(i + 1));
    }
    all.truncate(count);
    all
}

fn one<'a>(rng: &mut Rng, choices: &[&'a str]) -> &'a str {
    choices[rng.below(choices.len())]
}

fn fill(template: &str, value: &str) -> String {
    template.replace("{}", value)
}

fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Recall quality of one category.
#[derive(Debug, Clone, Copy, Default)]
pub struct CategoryScore {
    /// Questions asked.
    pub questions: usize,
    /// Mean share of a question's evidence found in the top 5.
    pub recall_at_5: f64,
    /// Share of questions with at least one piece of evidence in the top 5.
    pub any_at_5: f64,
    /// Mean NDCG@5 (every piece of evidence equally relevant).
    pub ndcg_at_5: f64,
    /// Share of questions whose first hit is evidence (for a knowledge update, the newest
    /// statement): what a caller asking for one memory gets right.
    pub hit_at_1: f64,
}

/// What a recall run scored on a set.
#[derive(Debug, Clone, Default)]
pub struct EvalReport {
    /// Per category, in [`Category::ALL`] order (abstention has no evidence: zeros).
    pub categories: Vec<(Category, CategoryScore)>,
    /// recall@5 over every answerable question.
    pub recall_at_5: f64,
    /// Of knowledge-update questions, the share where an outdated statement ranks above
    /// the newest (or is recalled while the newest is not).
    pub stale_above_newest: f64,
    /// Share of answerable questions that got at least one hit.
    pub answered: f64,
    /// Share of unanswerable questions that got none.
    pub abstained: f64,
}

impl EvalReport {
    /// Balanced accuracy of answering (≥ 1 hit) versus abstaining (no hit).
    pub fn abstention_balanced_accuracy(&self) -> f64 {
        (self.answered + self.abstained) / 2.0
    }

    /// The score of `category`.
    pub fn category(&self, category: Category) -> CategoryScore {
        self.categories
            .iter()
            .find(|(c, _)| *c == category)
            .map(|(_, s)| *s)
            .unwrap_or_default()
    }

    /// One line per category and the totals, for test output and the bench.
    pub fn table(&self) -> String {
        let mut out =
            String::from("category           questions  recall@5  any@5  ndcg@5  hit@1\n");
        for (category, s) in &self.categories {
            out.push_str(&format!(
                "{:<18} {:>9}  {:>8.3}  {:>5.3}  {:>6.3}  {:>5.3}\n",
                category.name(),
                s.questions,
                s.recall_at_5,
                s.any_at_5,
                s.ndcg_at_5,
                s.hit_at_1
            ));
        }
        out.push_str(&format!(
            "overall recall@5 {:.3}; stale above newest {:.1}%; abstention balanced accuracy {:.3} \
             (answered {:.1}% of the answerable, none for {:.1}% of the rest)",
            self.recall_at_5,
            self.stale_above_newest * 100.0,
            self.abstention_balanced_accuracy(),
            self.answered * 100.0,
            self.abstained * 100.0
        ));
        out
    }
}

/// Score `set`: `recall(question)` returns the labels of the memories recalled for it,
/// best first (at most 5 are looked at).
pub fn evaluate(set: &EvalSet, mut recall: impl FnMut(&EvalQuestion) -> Vec<String>) -> EvalReport {
    let mut sums: Vec<(Category, CategoryScore)> = Category::ALL
        .iter()
        .map(|c| (*c, CategoryScore::default()))
        .collect();
    let (mut stale, mut updates) = (0usize, 0usize);
    let (mut answered, mut answerable, mut abstained, mut unanswerable) = (0, 0, 0, 0);
    let (mut found_total, mut evidence_total) = (0.0, 0usize);
    for question in &set.questions {
        let mut recalled = recall(question);
        recalled.truncate(5);
        let score = &mut sums
            .iter_mut()
            .find(|(c, _)| *c == question.category)
            .expect("every category is listed")
            .1;
        score.questions += 1;
        if question.category == Category::Abstention {
            unanswerable += 1;
            abstained += usize::from(recalled.is_empty());
            continue;
        }
        answerable += 1;
        answered += usize::from(!recalled.is_empty());
        let rank_of = |label: &str| recalled.iter().position(|r| r == label);
        let found = question
            .evidence
            .iter()
            .filter(|l| rank_of(l).is_some())
            .count();
        let share = found as f64 / question.evidence.len() as f64;
        score.recall_at_5 += share;
        score.any_at_5 += f64::from(u8::from(found > 0));
        score.ndcg_at_5 += ndcg(&question.evidence, &recalled);
        score.hit_at_1 += f64::from(u8::from(
            recalled
                .first()
                .is_some_and(|first| question.evidence.contains(first)),
        ));
        found_total += share;
        evidence_total += 1;
        if question.category == Category::KnowledgeUpdate {
            updates += 1;
            let newest = rank_of(&question.evidence[0]).unwrap_or(usize::MAX);
            if question
                .stale
                .iter()
                .any(|s| rank_of(s).is_some_and(|r| r < newest))
            {
                stale += 1;
            }
        }
    }
    for (_, score) in &mut sums {
        let n = score.questions.max(1) as f64;
        score.recall_at_5 /= n;
        score.any_at_5 /= n;
        score.ndcg_at_5 /= n;
        score.hit_at_1 /= n;
    }
    let rate = |a: usize, b: usize| a as f64 / b.max(1) as f64;
    EvalReport {
        categories: sums,
        recall_at_5: found_total / evidence_total.max(1) as f64,
        stale_above_newest: rate(stale, updates),
        answered: rate(answered, answerable),
        abstained: rate(abstained, unanswerable),
    }
}

/// NDCG@5 with binary relevance.
fn ndcg(evidence: &[String], recalled: &[String]) -> f64 {
    let gain = |rank: usize| 1.0 / ((rank + 2) as f64).log2();
    let dcg: f64 = recalled
        .iter()
        .enumerate()
        .filter(|(_, label)| evidence.contains(label))
        .map(|(rank, _)| gain(rank))
        .sum();
    let ideal: f64 = (0..evidence.len().min(5)).map(gain).sum();
    dcg / ideal
}
