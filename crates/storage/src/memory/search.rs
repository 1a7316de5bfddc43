//! Recall's reads: full-text candidates with their BM25, and the candidates (from the text
//! or the vector index) that pass a query's filters.

use rusqlite::params_from_iter;
use rusqlite::types::Value;

use super::entries::{ENTRY_COLUMNS, Filters, row_to_entry};
use super::*;

impl SqliteMemory {
    pub(super) fn lexical(
        &self,
        fts: &str,
        query: &RecallQuery,
        limit: usize,
    ) -> Result<HashMap<i64, f64>, StorageError> {
        let filters = recall_filters(query);
        let sql = format!(
            "SELECT e.seq, bm25(entries_fts, 1.0, 0.5, 0.0) AS rank FROM entries_fts
             JOIN entries e ON e.seq = entries_fts.rowid
             WHERE entries_fts MATCH ? AND {} ORDER BY rank LIMIT {limit}",
            filters.clause()
        );
        let mut values = vec![Value::Text(fts.to_string())];
        values.extend(filters.values);
        self.read(|conn| {
            conn.prepare_cached(&sql)?
                .query_map(params_from_iter(values.iter()), |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?
                .collect()
        })
    }

    pub(super) fn matching(
        &self,
        seqs: &[i64],
        query: &RecallQuery,
    ) -> Result<Vec<(i64, MemoryEntry)>, StorageError> {
        let filters = recall_filters(query);
        // The seqs go in as one JSON array, so the statement's text (and its cached plan)
        // depends only on the filters' shape, not on how many candidates there are.
        let sql = format!(
            "SELECT {ENTRY_COLUMNS} FROM entries e
             WHERE e.seq IN (SELECT value FROM json_each(?)) AND {}",
            filters.clause()
        );
        let seqs = serde_json::to_string(seqs).unwrap_or_else(|_| "[]".into());
        let mut values = vec![Value::Text(seqs)];
        values.extend(filters.values);
        self.read(|conn| {
            conn.prepare_cached(&sql)?
                .query_map(params_from_iter(values.iter()), |r| {
                    Ok((r.get(0)?, row_to_entry(r)?))
                })?
                .collect()
        })
    }
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
