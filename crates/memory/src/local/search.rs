//! Recall: full-text and vector candidates, re-checked against the query's filters by the store,
//! scored by relevance, importance and recency (see [`crate::recall`]).

use super::*;

impl LocalMemory {
    /// Memories relevant to `query`, best first.
    pub fn recall(&self, query: &RecallQuery) -> Result<Vec<RecallHit>, MemoryError> {
        let limit = query.limit.clamp(1, 1000);
        let candidates = (limit * self.config.recall.candidates_per_hit.max(1)).max(50);
        let bm25 = self.lexical_candidates(query, candidates)?;
        let query_vector = self.query_vector(query);
        let cosines = match &query_vector {
            Some(vector) => self.semantic_candidates(query, vector, &bm25, candidates),
            None => HashMap::new(),
        };
        let mut seqs: Vec<i64> = bm25.keys().chain(cosines.keys()).copied().collect();
        seqs.sort_unstable();
        seqs.dedup();
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let entries = self.store.entries_matching(&seqs, query)?;
        let signals = Signals {
            bm25: &bm25,
            cosines: query_vector.as_ref().map(|_| &cosines),
            semantic: self.embedder.as_ref().is_some_and(|e| e.semantic()),
        };
        Ok(self.rank(query, entries, &signals, limit))
    }

    /// BM25 of the entries whose words match the query text (lower is better).
    fn lexical_candidates(
        &self,
        query: &RecallQuery,
        candidates: usize,
    ) -> Result<HashMap<i64, f64>, MemoryError> {
        let Some(fts) =
            recall::fts_match(&query.text, &query.scope, query.exclude_session.as_deref())
        else {
            return Ok(HashMap::new());
        };
        Ok(self.store.lexical_candidates(&fts, query, candidates)?)
    }

    /// The query text's vector, when embeddings are on (BM25 alone when the provider fails).
    fn query_vector(&self, query: &RecallQuery) -> Option<Vec<f32>> {
        let embedder = self.embedder.as_ref()?;
        if query.lexical_only || query.text.trim().is_empty() {
            return None;
        }
        match embedder.embed(std::slice::from_ref(&query.text)) {
            Ok(mut vectors) => vectors.pop(),
            Err(e) => {
                tracing::warn!("recall falls back to BM25 only: {e}");
                None
            }
        }
    }

    /// Cosine similarity of the nearest vectors in scope, and of every lexical candidate.
    fn semantic_candidates(
        &self,
        query: &RecallQuery,
        vector: &[f32],
        bm25: &HashMap<i64, f64>,
        candidates: usize,
    ) -> HashMap<i64, f64> {
        let filter = ScanFilter {
            scope: &query.scope,
            exclude_session: query.exclude_session.as_deref(),
        };
        let mut cosines: HashMap<i64, f64> = self
            .index()
            .nearest(vector, &filter, candidates)
            .into_iter()
            .map(|(seq, similarity)| (seq, f64::from(similarity)))
            .collect();
        for seq in bm25.keys() {
            if !cosines.contains_key(seq)
                && let Some(stored) = self.index().vector(*seq)
            {
                cosines.insert(*seq, f64::from(embed::cosine(vector, &stored)));
            }
        }
        cosines
    }

    /// Score the entries, drop the irrelevant, collapse near-duplicates, keep the best —
    /// with a semantic model, newer memories on the same subject first and the top k
    /// diversified (see [`crate::rerank`]).
    fn rank(
        &self,
        query: &RecallQuery,
        entries: Vec<(i64, MemoryEntry)>,
        signals: &Signals<'_>,
        limit: usize,
    ) -> Vec<RecallHit> {
        let config = &self.config.recall;
        let at = query.as_of.unwrap_or_else(now_ms);
        let best_bm25 = signals.bm25.values().map(|b| -b).fold(0.0, f64::max);
        let semantic = signals.semantic && signals.cosines.is_some();
        let default_floor = if semantic {
            config.min_similarity
        } else {
            config.min_relevance
        };
        let min_relevance = query.min_relevance.unwrap_or(default_floor);
        let mut hits: Vec<(i64, RecallHit)> = entries
            .into_iter()
            .map(|(seq, entry)| {
                let cosine = signals.cosines.and_then(|c| c.get(&seq).copied());
                let scored = recall::Signals {
                    bm25_raw: signals.bm25.get(&seq).copied(),
                    best_bm25,
                    cosine,
                    semantic: signals.semantic,
                };
                let parts = recall::score(config, scored, entry.importance, at - entry.valid_from);
                let hit = RecallHit {
                    score: parts.score,
                    explain: parts,
                    entry,
                };
                (seq, hit)
            })
            .filter(|(_, hit)| hit.explain.relevance >= min_relevance)
            .collect();
        hits.sort_by(|(_, a), (_, b)| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| b.entry.recorded_at.cmp(&a.entry.recorded_at))
        });
        if !semantic {
            let hits = hits.into_iter().map(|(_, hit)| hit).collect();
            return recall::collapse_duplicates(hits, config.duplicate_similarity, limit);
        }
        let mut candidates: Vec<rerank::Candidate> = hits
            .into_iter()
            .map(|(seq, hit)| rerank::Candidate {
                vector: self.index().vector(seq),
                hit,
            })
            .collect();
        rerank::promote_updates(&mut candidates, config.same_subject_similarity as f32);
        let hits = rerank::diversify(candidates, config.diversity_lambda, candidates_len(limit))
            .into_iter()
            .map(|c| c.hit)
            .collect();
        recall::collapse_duplicates(hits, config.duplicate_similarity, limit)
    }
}

/// Hits picked before near-verbatim repeats are collapsed, for `limit` kept.
fn candidates_len(limit: usize) -> usize {
    limit * 2
}

/// The relevance signals of a recall's candidates: BM25 by seq, cosine by seq when the
/// query has a vector, and whether those vectors carry meaning.
struct Signals<'a> {
    bm25: &'a HashMap<i64, f64>,
    cosines: Option<&'a HashMap<i64, f64>>,
    semantic: bool,
}
