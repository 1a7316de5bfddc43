//! Re-ranking of scored recall hits with their vectors: newer memories about the same thing
//! rise above older ones (knowledge updates), and the top k is diversified so that several
//! different memories — from several sessions — make it in (maximal marginal relevance).

use super::embed::cosine;
use super::recall::RecallHit;

/// A scored hit and its vector (none when it has not been embedded yet).
pub struct Candidate {
    /// The hit, scored.
    pub hit: RecallHit,
    /// Its vector of the configured model.
    pub vector: Option<Vec<f32>>,
}

fn similarity(a: &Candidate, b: &Candidate) -> f32 {
    match (&a.vector, &b.vector) {
        (Some(a), Some(b)) => cosine(a, b),
        _ => 0.0,
    }
}

/// When a newer candidate is about the same thing as an older one ranked above it (mutual
/// similarity ≥ `same_subject`), the newer takes the older's place and the older moves
/// just below it: the newest statement wins where two disagree, without favouring new
/// memories in general. `candidates` must be sorted best first.
pub fn promote_updates(candidates: &mut Vec<Candidate>, same_subject: f32) {
    let mut at = 0;
    while at < candidates.len() {
        let older = &candidates[at];
        let newer = (at + 1..candidates.len()).find(|&j| {
            candidates[j].hit.entry.valid_from > older.hit.entry.valid_from
                && similarity(older, &candidates[j]) >= same_subject
        });
        match newer {
            Some(j) => {
                let mut moved = candidates.remove(j);
                let displaced = &candidates[at].hit;
                moved.hit.explain.adjusted = Some(format!(
                    "ranked above {}: newer, on the same subject",
                    displaced.entry.id
                ));
                // Scores stay in rank order, so diversifying afterwards keeps the promotion.
                moved.hit.score = moved.hit.score.max(displaced.score) + 1e-9;
                candidates.insert(at, moved);
                // The promoted one may itself have a newer successor further down.
            }
            None => at += 1,
        }
    }
}

/// Pick `limit` candidates by maximal marginal relevance: each next pick maximises
/// `lambda · score − (1 − lambda) · (highest similarity to a pick so far)`.
pub fn diversify(candidates: Vec<Candidate>, lambda: f64, limit: usize) -> Vec<Candidate> {
    let mut left = candidates;
    let mut picked: Vec<Candidate> = Vec::with_capacity(limit);
    while picked.len() < limit && !left.is_empty() {
        let value = |c: &Candidate| {
            let redundancy = picked
                .iter()
                .map(|p| f64::from(similarity(p, c)))
                .fold(0.0, f64::max);
            lambda * c.hit.score - (1.0 - lambda) * redundancy
        };
        let best = (0..left.len())
            .max_by(|&a, &b| value(&left[a]).total_cmp(&value(&left[b])).then(b.cmp(&a)))
            .unwrap_or(0);
        let mut next = left.remove(best);
        if best > 0 && next.hit.explain.adjusted.is_none() {
            next.hit.explain.adjusted = Some("moved up: unlike the hits above it".into());
        }
        picked.push(next);
    }
    picked
}
