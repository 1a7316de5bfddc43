//! Recall: full-text and vector candidates, re-checked against the query's filters in SQL,
//! scored by relevance, importance and recency (see [`crate::recall`]).

use super::*;

impl MemoryStore {
    /// Memories relevant to `query`, best first.
    pub fn recall(&self, query: &RecallQuery) -> Result<Vec<RecallHit>, MemoryError> {
        let limit = query.limit.clamp(1, 1000);
        let candidates = (limit * self.config.recall.candidates_per_hit.max(1)).max(50);
        let filters = recall_filters(query);
        let bm25 = self.lexical_candidates(query, &filters, candidates)?;
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
        let entries = self.entries_matching(&seqs, &filters)?;
        let signals = Signals {
            bm25: &bm25,
            cosines: query_vector.as_ref().map(|_| &cosines),
        };
        Ok(self.rank(query, entries, &signals, limit))
    }

    /// BM25 of the entries whose words match the query text (lower is better).
    fn lexical_candidates(
        &self,
        query: &RecallQuery,
        filters: &Filters,
        candidates: usize,
    ) -> Result<HashMap<i64, f64>, MemoryError> {
        let Some(fts) =
            recall::fts_match(&query.text, &query.scope, query.exclude_session.as_deref())
        else {
            return Ok(HashMap::new());
        };
        let statement_sql = format!(
            "SELECT e.seq, bm25(entries_fts, 1.0, 0.5, 0.0) AS rank FROM entries_fts
             JOIN entries e ON e.seq = entries_fts.rowid
             WHERE entries_fts MATCH ? AND {} ORDER BY rank LIMIT {candidates}",
            filters.clause()
        );
        let mut values = vec![Value::Text(fts)];
        values.extend(filters.values.iter().cloned());
        let rows: Vec<(i64, f64)> = self.read(|conn| {
            let mut statement = conn.prepare_cached(&statement_sql)?;
            statement
                .query_map(params_from_iter(values.iter()), |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?
                .collect()
        })?;
        Ok(rows.into_iter().collect())
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

    /// The candidate entries that pass the query's filters (the vector index does not
    /// know them all).
    fn entries_matching(
        &self,
        seqs: &[i64],
        filters: &Filters,
    ) -> Result<Vec<(i64, MemoryEntry)>, MemoryError> {
        let mut entries = Vec::with_capacity(seqs.len());
        for chunk in seqs.chunks(500) {
            let statement_sql = format!(
                "SELECT {ENTRY_COLUMNS} FROM entries e WHERE e.seq IN ({}) AND {}",
                vec!["?"; chunk.len()].join(","),
                filters.clause()
            );
            let mut values: Vec<Value> = chunk.iter().map(|s| Value::Integer(*s)).collect();
            values.extend(filters.values.iter().cloned());
            let rows: Vec<(i64, MemoryEntry)> = self.read(|conn| {
                let mut statement = conn.prepare(&statement_sql)?;
                statement
                    .query_map(params_from_iter(values.iter()), |r| {
                        Ok((r.get(0)?, row_to_entry(r)?))
                    })?
                    .collect()
            })?;
            entries.extend(rows);
        }
        Ok(entries)
    }

    /// Score the entries, drop the irrelevant, collapse near-duplicates, keep the best.
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
        let min_relevance = query.min_relevance.unwrap_or(config.min_relevance);
        let mut hits: Vec<RecallHit> = entries
            .into_iter()
            .map(|(seq, entry)| {
                let cosine = signals.cosines.and_then(|c| c.get(&seq).copied());
                let parts = recall::score(
                    config,
                    signals.bm25.get(&seq).copied(),
                    best_bm25,
                    cosine,
                    entry.importance,
                    at - entry.valid_from,
                );
                RecallHit {
                    score: parts.score,
                    explain: parts,
                    entry,
                }
            })
            .filter(|hit| hit.explain.relevance >= min_relevance)
            .collect();
        hits.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| b.entry.recorded_at.cmp(&a.entry.recorded_at))
        });
        let mut hits = recall::collapse_duplicates(hits, config.duplicate_similarity);
        hits.truncate(limit);
        hits
    }
}

/// The relevance signals of a recall's candidates: BM25 by seq, and cosine by seq when
/// the query has a vector.
struct Signals<'a> {
    bm25: &'a HashMap<i64, f64>,
    cosines: Option<&'a HashMap<i64, f64>>,
}

/// The query's filters as SQL: scope, kinds, categories, session, valid time, liveness.
fn recall_filters(query: &RecallQuery) -> Filters {
    let mut sql = Filters::default();
    sql.scope(&query.scope);
    sql.kinds(&query.kinds);
    if !query.categories.is_empty() {
        sql.any_of(
            "e.category",
            query.categories.iter().cloned().map(Value::Text),
        );
    }
    if let Some(session) = &query.exclude_session {
        sql.push(
            "(e.session_id IS NULL OR e.session_id != ?)",
            Value::Text(session.clone()),
        );
    }
    if let Some(since) = query.since {
        sql.push("e.valid_from >= ?", Value::Integer(since));
    }
    if let Some(until) = query.until {
        sql.push("e.valid_from < ?", Value::Integer(until));
    }
    sql.clauses.push("e.forgotten_at IS NULL".into());
    match query.as_of {
        None => sql.clauses.push("e.valid_to IS NULL".into()),
        Some(as_of) => {
            sql.push("e.valid_from <= ?", Value::Integer(as_of));
            sql.push(
                "(e.valid_to IS NULL OR e.valid_to > ?)",
                Value::Integer(as_of),
            );
        }
    }
    sql
}
