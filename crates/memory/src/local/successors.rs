//! Updates found among the nearest memories of the best candidates. A statement and its
//! later update are often worded unlike each other and unlike the question ("how do I stay
//! fit?" — "joined a running club", months later "these days my free time goes into
//! climbing"), so the update may not be a candidate of the query at all. It is still the
//! nearest memory of what it replaced, and it says that something changed: each of the few
//! candidates most like the query is compared with its own nearest memories, and a newer one
//! that tells of a change, and whose own nearest memory is that candidate, is its update (see
//! [`crate::RecallConfig::successor_probes`]).

use super::*;

/// Nearest memories looked at per probed candidate.
const NEIGHBOURS: usize = 20;

/// A probed candidate and its nearest memories, most alike first.
pub(super) struct Probed {
    seq: i64,
    alike: Vec<(i64, f32)>,
}

impl LocalMemory {
    /// The nearest memories of the `successor_probes` candidates most like the query, in
    /// one pass over the vectors in scope. Those that are not candidates yet join them
    /// (their cosine to `query_vector` in `cosines`, their vectors in `vectors`).
    pub(super) fn neighbours_of_best(
        &self,
        query: &RecallQuery,
        query_vector: &[f32],
        cosines: &mut HashMap<i64, f64>,
        vectors: &mut HashMap<i64, Vec<f32>>,
    ) -> Vec<Probed> {
        let mut best: Vec<(i64, f64)> = cosines
            .iter()
            .filter(|(seq, _)| vectors.contains_key(seq))
            .map(|(seq, cosine)| (*seq, *cosine))
            .collect();
        best.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        best.truncate(self.config.recall.successor_probes);
        if best.is_empty() {
            return Vec::new();
        }
        let probes: Vec<&[f32]> = best
            .iter()
            .map(|(seq, _)| vectors[seq].as_slice())
            .collect();
        let found = self
            .index()
            .nearest_each(&probes, &scan_filter(query), NEIGHBOURS + 1);
        let probed: Vec<Probed> = best
            .iter()
            .zip(found)
            .map(|((seq, _), alike)| Probed {
                seq: *seq,
                alike: alike
                    .into_iter()
                    .filter(|(other, _)| other != seq)
                    .collect(),
            })
            .collect();
        let new: Vec<i64> = probed
            .iter()
            .flat_map(|p| &p.alike)
            .map(|(seq, _)| *seq)
            .filter(|seq| !vectors.contains_key(seq))
            .collect();
        for (seq, vector) in self.vectors_of(&new) {
            cosines.insert(seq, f64::from(embed::cosine(query_vector, &vector)));
            vectors.insert(seq, vector);
        }
        probed
    }

    /// The updates of the probed candidates (`neighbours`, with every candidate's vector in
    /// `vectors`): by the update's seq, the id of the candidate it updates. Of a candidate's
    /// nearest memories (`successor_similarity` alike at least), the most alike that
    /// [`may_update`] it, when its own nearest memory is that candidate (checked in one pass
    /// for all of them).
    pub(super) fn successors(
        &self,
        query: &RecallQuery,
        hits: &[(i64, RecallHit)],
        neighbours: &[Probed],
        vectors: &HashMap<i64, Vec<f32>>,
        now: i64,
    ) -> HashMap<i64, String> {
        let entries: HashMap<i64, &MemoryEntry> =
            hits.iter().map(|(seq, hit)| (*seq, &hit.entry)).collect();
        let floor = self.config.recall.successor_similarity;
        let proposed: Vec<(i64, i64)> = neighbours
            .iter()
            .filter_map(|probed| {
                let older = entries.get(&probed.seq)?;
                let (newer, _) = probed.alike.iter().find(|(seq, similarity)| {
                    f64::from(*similarity) >= floor
                        && vectors.contains_key(seq)
                        && entries
                            .get(seq)
                            .is_some_and(|newer| may_update(older, newer, now))
                })?;
                Some((*newer, probed.seq))
            })
            .collect();
        if proposed.is_empty() {
            return HashMap::new();
        }
        let updates: Vec<&[f32]> = proposed
            .iter()
            .map(|(newer, _)| vectors[newer].as_slice())
            .collect();
        let nearest = self.index().nearest_each(&updates, &scan_filter(query), 2);
        let mut found = HashMap::new();
        for ((newer, older), alike) in proposed.into_iter().zip(nearest) {
            let nearest_other = alike.iter().map(|(seq, _)| *seq).find(|seq| *seq != newer);
            if nearest_other == Some(older) {
                found
                    .entry(newer)
                    .or_insert_with(|| entries[&older].id.clone());
            }
        }
        found
    }
}

/// Whether `newer` may be the update of `older`: said after it (and not after the recall's
/// `now`), telling of a change (see [`crate::change`]), and neither a question nor the
/// assistant's words.
fn may_update(older: &MemoryEntry, newer: &MemoryEntry, now: i64) -> bool {
    newer.valid_from > older.valid_from
        && newer.valid_from <= now.saturating_add(recall::CLOCK_SLACK_MS)
        && crate::change::tells_of_change(&newer.content)
        && !rerank::asks(newer)
        && !rerank::said_by_assistant(newer)
}

/// The vectors a recall for `query` may scan.
fn scan_filter(query: &RecallQuery) -> ScanFilter<'_> {
    ScanFilter {
        scope: &query.scope,
        exclude_session: query.exclude_session.as_deref(),
    }
}
