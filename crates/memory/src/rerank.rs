//! Re-ranking of scored recall hits with their vectors: newer memories about the same thing
//! rise above older ones (knowledge updates), and the top k is diversified so that several
//! different memories — from several sessions — make it in (maximal marginal relevance).

use super::embed::cosine;
use super::recall::RecallHit;
use crate::{MemoryEntry, MemoryKind};

/// A scored hit and its vector (none when it has not been embedded yet).
pub struct Candidate {
    /// The hit, scored.
    pub hit: RecallHit,
    /// Its vector of the configured model.
    pub vector: Option<Vec<f32>>,
    /// The same with the memory's common direction taken out (see
    /// [`crate::embed::centre`]), when it was.
    pub centred: Option<Vec<f32>>,
    /// The query names a time and this memory's valid time is outside it: it is never
    /// promoted above a memory inside that time (what the question dates is not outdated
    /// by a later statement).
    pub outside_asked_time: bool,
    /// The memory's words tell of a change (see [`crate::change`]): as an update of an
    /// older candidate it needs less likeness to it (see [`SameSubject`]).
    pub tells_of_change: bool,
    /// The memory is dated after the recall's "now" (a question asked `--at` an earlier
    /// day): it is never promoted as the update of what was said before then.
    pub said_after_now: bool,
    /// How many of the question's literal names (numbers, see [`crate::literal`]) the
    /// memory names: it is never promoted above an older one that names more, which is
    /// about what was asked.
    pub literals_named: usize,
    /// The id of an older candidate this memory was found to update among that one's
    /// nearest memories (see [`crate::RecallConfig::successor_probes`]): it goes above it.
    pub succeeds: Option<String>,
    /// Already ranked above an older candidate as its update (see [`promote_updates`]).
    pub promoted: bool,
}

impl Candidate {
    /// The memory is the assistant's own words: it is never promoted above what someone
    /// else said, as a reply that repeats a statement ("I remember: …") is no update of it.
    fn by_assistant(&self) -> bool {
        said_by_assistant(&self.hit.entry)
    }

    /// The memory is a question: it states nothing, so it is never promoted as the update
    /// of a statement.
    fn asks(&self) -> bool {
        asks(&self.hit.entry)
    }
}

/// Whether `entry` is the assistant's own words: an episode tagged `assistant`.
pub(crate) fn said_by_assistant(entry: &MemoryEntry) -> bool {
    entry.kind == MemoryKind::Episode && entry.tags.iter().any(|tag| tag == "assistant")
}

/// Whether `entry` is a question ("What is my favourite drink?").
pub(crate) fn asks(entry: &MemoryEntry) -> bool {
    entry.content.trim_end().ends_with('?')
}

/// Which of their vectors two candidates are compared by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Likeness {
    /// The model's vectors as they are.
    Plain,
    /// With the memory's common direction taken out, where it was (else as they are):
    /// bland sentences then stop looking like everything.
    Centred,
}

impl Candidate {
    fn vector_for(&self, likeness: Likeness) -> Option<&Vec<f32>> {
        match likeness {
            Likeness::Plain => self.vector.as_ref(),
            Likeness::Centred => self.centred.as_ref().or(self.vector.as_ref()),
        }
    }
}

fn similarity(a: &Candidate, b: &Candidate, likeness: Likeness) -> f32 {
    match (a.vector_for(likeness), b.vector_for(likeness)) {
        (Some(a), Some(b)) => cosine(a, b),
        _ => 0.0,
    }
}

/// When two hits are about the same subject, so that the newer one should win.
#[derive(Debug, Clone, Copy)]
pub struct SameSubject {
    /// Mutual similarity at which two hits are about the same thing, whatever was asked.
    pub similarity: f32,
    /// A lower mutual similarity that is enough when the newer hit answers the query
    /// nearly as well as the older (relevance at least `relevance_ratio` of the older's):
    /// a statement and its update are often worded unlike each other, yet both answer.
    pub similarity_when_both_answer: f32,
    /// See `similarity_when_both_answer`.
    pub relevance_ratio: f64,
    /// A lower mutual similarity still that is enough when the newer hit tells of a change
    /// and answers the query at least `relevance_ratio_when_changed` as well as the older:
    /// an update says what changed, an unrelated newer memory seldom does.
    pub similarity_when_changed: f32,
    /// See `similarity_when_changed`.
    pub relevance_ratio_when_changed: f64,
    /// Which vectors the mutual similarity compares.
    pub likeness: Likeness,
}

impl SameSubject {
    /// Same subject only when the two are at least `similarity` alike, as they are.
    pub fn alike(similarity: f32) -> Self {
        Self {
            similarity,
            similarity_when_both_answer: similarity,
            relevance_ratio: 1.0,
            similarity_when_changed: similarity,
            relevance_ratio_when_changed: 1.0,
            likeness: Likeness::Plain,
        }
    }

    /// Why `newer` is an update of `older`, if it is.
    fn holds(&self, older: &Candidate, newer: &Candidate) -> Option<UpdateSign> {
        // The strictest sign first, so the explanation names it: the newer may be no
        // candidate of the query but for it.
        if newer.succeeds.as_deref() == Some(older.hit.entry.id.as_str()) {
            return Some(UpdateSign::Succeeds);
        }
        let mutual = similarity(older, newer, self.likeness);
        let answers_as_well =
            |ratio: f64| newer.hit.explain.relevance >= ratio * older.hit.explain.relevance;
        if mutual >= self.similarity
            || (answers_as_well(self.relevance_ratio) && mutual >= self.similarity_when_both_answer)
        {
            Some(UpdateSign::SameSubject)
        } else if newer.tells_of_change
            && answers_as_well(self.relevance_ratio_when_changed)
            && mutual >= self.similarity_when_changed
        {
            Some(UpdateSign::ToldOfChange)
        } else {
            None
        }
    }
}

/// What showed a newer candidate to be an update of an older one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UpdateSign {
    /// The two are alike enough (see [`SameSubject`]).
    SameSubject,
    /// The newer tells of a change and is somewhat like the older.
    ToldOfChange,
    /// The newer tells of a change, is among the older's nearest memories, and the older
    /// is its own nearest (see [`Candidate::succeeds`]).
    Succeeds,
}

impl UpdateSign {
    fn describe(self) -> &'static str {
        match self {
            Self::SameSubject => "newer, on the same subject",
            Self::ToldOfChange => "newer, tells of a change to the same subject",
            Self::Succeeds => "newer, tells of a change, and this is its nearest memory",
        }
    }
}

/// When a newer candidate is about the same thing as an older one ranked above it (see
/// [`SameSubject`]), the newest such takes the older's place and the older moves just
/// below it: the newest statement wins where two disagree, without favouring new memories
/// in general. `candidates` must be sorted best first. Each candidate is promoted at most
/// once, and a promoted one is never the older of another promotion: each older's newest
/// update is picked directly, so a chain — B like A and newer, C like B (not A) and newer
/// still — never carries an unrelated C above B ("the internet provider switched us to
/// fibre" above "I switched to a Google Pixel" above "My phone is an iPhone"). The work is
/// quadratic in the candidates at worst (a user who says much the same thing many times),
/// never cubic.
pub fn promote_updates(candidates: &mut Vec<Candidate>, same_subject: SameSubject) {
    let mut at = 0;
    while at < candidates.len() {
        let older = &candidates[at];
        if older.promoted {
            at += 1;
            continue;
        }
        let newest = (at + 1..candidates.len())
            .filter_map(|j| {
                let newer = &candidates[j];
                let eligible = !newer.promoted
                    && !newer.said_after_now
                    && newer.literals_named >= older.literals_named
                    && (older.by_assistant() || !newer.by_assistant())
                    && (older.asks() || !newer.asks())
                    && newer.hit.entry.valid_from > older.hit.entry.valid_from
                    && (older.outside_asked_time || !newer.outside_asked_time);
                eligible
                    .then(|| same_subject.holds(older, newer))
                    .flatten()
                    .map(|sign| (j, sign))
            })
            .max_by_key(|&(j, _)| (candidates[j].hit.entry.valid_from, std::cmp::Reverse(j)));
        match newest {
            Some((j, sign)) => {
                let mut moved = candidates.remove(j);
                moved.promoted = true;
                let displaced = &candidates[at].hit;
                moved.hit.explain.adjusted = Some(format!(
                    "ranked above {}: {}",
                    displaced.entry.id,
                    sign.describe()
                ));
                // Scores stay in rank order, so diversifying afterwards keeps the promotion.
                moved.hit.score = moved.hit.score.max(displaced.score) + 1e-9;
                candidates.insert(at, moved);
                // The older, now just below, may still have another newer one to go above
                // it; the promoted one is passed over.
            }
            None => at += 1,
        }
    }
}

/// Pick `limit` candidates by maximal marginal relevance: each next pick maximises
/// `lambda · score − (1 − lambda) · (highest similarity to a pick so far)`, similarity by
/// `likeness`. Each candidate's highest similarity is kept up to date pick by pick (linear
/// work per pick).
pub fn diversify(
    candidates: Vec<Candidate>,
    lambda: f64,
    limit: usize,
    likeness: Likeness,
) -> Vec<Candidate> {
    let mut left: Vec<(Candidate, f64)> = candidates.into_iter().map(|c| (c, 0.0)).collect();
    let mut picked: Vec<Candidate> = Vec::with_capacity(limit);
    while picked.len() < limit && !left.is_empty() {
        let value =
            |(c, redundancy): &(Candidate, f64)| lambda * c.hit.score - (1.0 - lambda) * redundancy;
        let best = (0..left.len())
            .max_by(|&a, &b| value(&left[a]).total_cmp(&value(&left[b])).then(b.cmp(&a)))
            .unwrap_or(0);
        let (mut next, _) = left.remove(best);
        if best > 0 && next.hit.explain.adjusted.is_none() {
            next.hit.explain.adjusted = Some("moved up: unlike the hits above it".into());
        }
        for (candidate, redundancy) in &mut left {
            *redundancy = redundancy.max(f64::from(similarity(&next, candidate, likeness)));
        }
        picked.push(next);
    }
    picked
}

/// Candidates a hit's crowding is measured against at most: the best by score, so the work
/// stays linear in the candidates.
const CROWDING_POOL: usize = 100;

/// For each of `vectors` (in rank order, best first; none when not embedded), its mean
/// cosine to the `neighbours` most alike among the first [`CROWDING_POOL`] others: how
/// crowded its neighbourhood among the candidates is. None without a vector or others.
pub fn crowding(vectors: &[Option<&[f32]>], neighbours: usize) -> Vec<Option<f64>> {
    let pool = &vectors[..vectors.len().min(CROWDING_POOL)];
    vectors
        .iter()
        .enumerate()
        .map(|(i, vector)| {
            let vector = (*vector)?;
            let mut likeness: Vec<f32> = pool
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .filter_map(|(_, other)| other.map(|other| cosine(vector, other)))
                .collect();
            likeness.sort_unstable_by(|a, b| b.total_cmp(a));
            likeness.truncate(neighbours);
            (!likeness.is_empty()).then(|| {
                likeness.iter().map(|&l| f64::from(l)).sum::<f64>() / likeness.len() as f64
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemoryKind, NewMemory, ScoreParts, record};

    fn candidate(id: &str, score: f64, plain: [f32; 2], centred: Option<[f32; 2]>) -> Candidate {
        let entry = record(&NewMemory::new(MemoryKind::Episode, id), id.into(), 0);
        Candidate {
            hit: RecallHit {
                entry,
                score,
                explain: ScoreParts::default(),
            },
            vector: Some(plain.to_vec()),
            centred: centred.map(|v| v.to_vec()),
            outside_asked_time: false,
            tells_of_change: false,
            said_after_now: false,
            literals_named: 0,
            succeeds: None,
            promoted: false,
        }
    }

    fn picked(candidates: Vec<Candidate>, likeness: Likeness) -> Vec<String> {
        diversify(candidates, 0.5, 2, likeness)
            .into_iter()
            .map(|c| c.hit.entry.id)
            .collect()
    }

    #[test]
    fn a_vector_like_many_others_is_more_crowded_than_one_like_none() {
        let hub = [1.0, 1.0];
        let (a, b, c) = ([1.0, 0.9], [0.9, 1.0], [1.0, -1.0]);
        let vectors: Vec<Option<&[f32]>> = vec![Some(&hub), Some(&a), Some(&b), Some(&c), None];
        let crowding = crowding(&vectors, 2);
        let (crowded, lone) = (crowding[0].expect("hub"), crowding[3].expect("lone"));
        assert!(crowded > 0.9, "the hub is alike its two nearest: {crowded}");
        assert!(lone < 0.2, "the lone one is alike none: {lone}");
        assert_eq!(crowding[4], None, "no vector, no crowding");
        assert_eq!(super::crowding(&[Some(&hub)], 2), vec![None], "alone");
    }

    #[test]
    fn a_newer_memory_outside_the_asked_time_is_not_promoted_over_one_inside() {
        let order = |older_outside: bool, newer_outside: bool| {
            let mut older = candidate("older", 1.0, [1.0, 0.0], None);
            older.hit.entry.valid_from = 10;
            older.outside_asked_time = older_outside;
            let mut newer = candidate("newer", 0.9, [1.0, 0.0], None);
            newer.hit.entry.valid_from = 20;
            newer.outside_asked_time = newer_outside;
            let mut candidates = vec![older, newer];
            promote_updates(&mut candidates, SameSubject::alike(0.5));
            candidates
                .into_iter()
                .map(|c| c.hit.entry.id)
                .collect::<Vec<_>>()
        };
        assert_eq!(order(false, false), ["newer", "older"], "no time asked");
        assert_eq!(
            order(false, true),
            ["older", "newer"],
            "only the older is inside"
        );
        assert_eq!(order(true, true), ["newer", "older"], "both outside");
        assert_eq!(
            order(true, false),
            ["newer", "older"],
            "only the newer is inside"
        );
    }

    #[test]
    fn a_newer_memory_naming_fewer_of_the_questions_numbers_is_not_promoted() {
        let order = |older_names: usize, newer_names: usize| {
            let mut older = candidate("older", 1.0, [1.0, 0.0], None);
            older.hit.entry.valid_from = 10;
            older.literals_named = older_names;
            let mut newer = candidate("newer", 0.9, [1.0, 0.0], None);
            newer.hit.entry.valid_from = 20;
            newer.literals_named = newer_names;
            let mut candidates = vec![older, newer];
            promote_updates(&mut candidates, SameSubject::alike(0.5));
            candidates[0].hit.entry.id.clone()
        };
        assert_eq!(
            order(1, 0),
            "older",
            "PR 105 asked: PR 112 is no update of it"
        );
        assert_eq!(
            order(1, 1),
            "newer",
            "both name it: the newer is the update"
        );
        assert_eq!(order(0, 0), "newer", "no number asked");
    }

    #[test]
    fn the_assistants_words_are_never_promoted_above_what_a_user_said() {
        let order = |older_by_assistant: bool, newer_by_assistant: bool| {
            let mut older = candidate("older", 1.0, [1.0, 0.0], None);
            older.hit.entry.valid_from = 10;
            if older_by_assistant {
                older.hit.entry.tags = vec!["assistant".into()];
            }
            let mut newer = candidate("newer", 0.9, [1.0, 0.0], None);
            newer.hit.entry.valid_from = 20;
            if newer_by_assistant {
                newer.hit.entry.tags = vec!["assistant".into()];
            }
            let mut candidates = vec![older, newer];
            promote_updates(&mut candidates, SameSubject::alike(0.5));
            candidates[0].hit.entry.id.clone()
        };
        assert_eq!(
            order(false, true),
            "older",
            "a reply repeating it is no update"
        );
        assert_eq!(order(false, false), "newer");
        assert_eq!(order(true, true), "newer");
        assert_eq!(order(true, false), "newer", "the user's later word wins");
    }

    #[test]
    fn a_question_is_never_promoted_as_the_update_of_a_statement() {
        let mut older = candidate("statement", 1.0, [1.0, 0.0], None);
        older.hit.entry.valid_from = 10;
        let mut newer = candidate("question", 0.9, [1.0, 0.0], None);
        newer.hit.entry.valid_from = 20;
        newer.hit.entry.content = "question?".into();
        let mut candidates = vec![older, newer];
        promote_updates(&mut candidates, SameSubject::alike(0.5));
        assert_eq!(candidates[0].hit.entry.id, "statement");
    }

    #[test]
    fn a_memory_said_after_the_recalls_now_is_not_promoted_as_an_update() {
        let mut older = candidate("older", 1.0, [1.0, 0.0], None);
        older.hit.entry.valid_from = 10;
        let mut later = candidate("later", 0.9, [1.0, 0.0], None);
        later.hit.entry.valid_from = 20;
        later.said_after_now = true;
        let mut asked_before = vec![older, later];
        promote_updates(&mut asked_before, SameSubject::alike(0.5));
        assert_eq!(
            asked_before[0].hit.entry.id, "older",
            "said after the question's now: no update of it yet"
        );
    }

    #[test]
    fn a_newer_memory_telling_of_a_change_needs_less_likeness_to_be_the_update() {
        let order = |tells_of_change: bool, newer_relevance: f64| {
            let mut older = candidate("older", 1.0, [1.0, 0.0], None);
            older.hit.entry.valid_from = 10;
            older.hit.explain.relevance = 1.0;
            // Mutual cosine 0.2: below 0.4 and 0.25, above 0.1.
            let mut newer = candidate("newer", 0.9, [0.2, 0.98], None);
            newer.hit.entry.valid_from = 20;
            newer.hit.explain.relevance = newer_relevance;
            newer.tells_of_change = tells_of_change;
            let mut candidates = vec![older, newer];
            let same_subject = SameSubject {
                similarity: 0.4,
                similarity_when_both_answer: 0.25,
                relevance_ratio: 0.5,
                similarity_when_changed: 0.1,
                relevance_ratio_when_changed: 0.4,
                likeness: Likeness::Plain,
            };
            promote_updates(&mut candidates, same_subject);
            let adjusted = candidates[0].hit.explain.adjusted.clone();
            let ids: Vec<String> = candidates.into_iter().map(|c| c.hit.entry.id).collect();
            (ids, adjusted)
        };
        let (ids, adjusted) = order(true, 0.5);
        assert_eq!(ids, ["newer", "older"], "it tells of a change and answers");
        assert_eq!(
            adjusted.as_deref(),
            Some("ranked above older: newer, tells of a change to the same subject")
        );
        assert_eq!(order(false, 0.5).0, ["older", "newer"], "no word of change");
        assert_eq!(
            order(true, 0.3).0,
            ["older", "newer"],
            "it tells of a change but hardly answers"
        );
    }

    #[test]
    fn the_update_found_among_an_older_ones_nearest_goes_above_it_however_unlike() {
        let order = |succeeds: Option<&str>| {
            let mut older = candidate("older", 1.0, [1.0, 0.0], None);
            older.hit.entry.valid_from = 10;
            // Unlike the older (cosine 0) and far less relevant.
            let mut newer = candidate("newer", 0.1, [0.0, 1.0], None);
            newer.hit.entry.valid_from = 20;
            newer.succeeds = succeeds.map(str::to_string);
            let mut candidates = vec![older, newer];
            promote_updates(&mut candidates, SameSubject::alike(0.4));
            candidates
                .into_iter()
                .map(|c| (c.hit.entry.id, c.hit.explain.adjusted))
                .collect::<Vec<_>>()
        };
        let promoted = order(Some("older"));
        assert_eq!(promoted[0].0, "newer");
        assert_eq!(
            promoted[0].1.as_deref(),
            Some("ranked above older: newer, tells of a change, and this is its nearest memory")
        );
        assert_eq!(order(None)[0].0, "older");
        assert_eq!(order(Some("another"))[0].0, "older", "it updates another");
    }

    #[test]
    fn an_update_is_never_itself_updated_by_something_like_it_alone() {
        let mut a = candidate("a", 1.0, [1.0, 0.0], None);
        a.hit.entry.valid_from = 10;
        // b is like a (0.71) and newer; c is like b (0.71), unlike a (0), and newer still.
        let mut b = candidate("b", 0.9, [0.71, 0.71], None);
        b.hit.entry.valid_from = 20;
        let mut c = candidate("c", 0.8, [0.0, 1.0], None);
        c.hit.entry.valid_from = 30;
        let mut candidates = vec![a, b, c];
        promote_updates(&mut candidates, SameSubject::alike(0.5));
        let ids: Vec<&str> = candidates.iter().map(|c| c.hit.entry.id.as_str()).collect();
        assert_eq!(ids, ["b", "a", "c"], "c updates b at most, not a");
        assert!(candidates[0].promoted);
    }

    #[test]
    fn diversifying_compares_the_vectors_asked_for() {
        // As they are, a and b are alike; centred, a and c are, and b is unlike a.
        let three = || {
            vec![
                candidate("a", 1.0, [1.0, 0.0], Some([1.0, 0.0])),
                candidate("b", 0.9, [1.0, 0.0], Some([0.0, 1.0])),
                candidate("c", 0.8, [0.0, 1.0], Some([1.0, 0.0])),
            ]
        };
        assert_eq!(picked(three(), Likeness::Plain), ["a", "c"]);
        assert_eq!(picked(three(), Likeness::Centred), ["a", "b"]);
        // Without centred vectors, centred likeness is plain likeness.
        let uncentred = three()
            .into_iter()
            .map(|c| Candidate { centred: None, ..c })
            .collect();
        assert_eq!(picked(uncentred, Likeness::Centred), ["a", "c"]);
    }
}
