//! Recall's reads: full-text candidates with their BM25, and the candidates (from the text
//! or the vector index) that pass a query's filters.

use rusqlite::types::Value;
use rusqlite::{Connection, params_from_iter};

use super::entries::{ENTRY_COLUMNS, Filters, row_to_entry};
use super::*;

/// A full-text search: words any of which may match, within a scope.
///
/// `bm25()` costs FTS5 several microseconds per matching row. A word found in most of the
/// scope's entries (a user's own name, a channel's fixed wording) makes every one of them a
/// match while telling none of them apart, so when a search matches more than
/// [`SCORED_MATCHES`] rows, the words in over half of those matches are left out (the
/// rarest word always stays).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FullTextMatch {
    /// The query's words as FTS5 phrases, each already quoted.
    pub phrases: Vec<String>,
    /// FTS5 conditions every match must meet (the scope's tokens), after the phrases: e.g.
    /// `AND scope_tokens : (u… OR unone)`; empty for none.
    pub scope: String,
}

/// Matches above which a search leaves out its commonest words.
pub const SCORED_MATCHES: usize = 200;

/// Matches counted per word at most when deciding which words are common.
const COUNTED_MATCHES: usize = 2 * SCORED_MATCHES;

impl FullTextMatch {
    /// The FTS5 expression of `phrases` in this match's scope.
    pub fn expression(&self, phrases: &[String]) -> String {
        let mut expression = format!("{{content tags}} : ({})", phrases.join(" OR "));
        if !self.scope.is_empty() {
            expression.push(' ');
            expression.push_str(&self.scope);
        }
        expression
    }
}

impl SqliteMemory {
    pub(super) fn lexical(
        &self,
        fts: &FullTextMatch,
        query: &RecallQuery,
        limit: usize,
    ) -> Result<HashMap<i64, f64>, StorageError> {
        if fts.phrases.is_empty() {
            return Ok(HashMap::new());
        }
        let filters = recall_filters(query);
        let sql = format!(
            "SELECT e.seq, bm25(entries_fts, 1.0, 0.5, 0.0) AS rank FROM entries_fts
             JOIN entries e ON e.seq = entries_fts.rowid
             WHERE entries_fts MATCH ? AND {} ORDER BY rank LIMIT {limit}",
            filters.clause()
        );
        self.read(|conn| {
            let phrases = telling_phrases(conn, fts)?;
            let mut values = vec![Value::Text(fts.expression(&phrases))];
            values.extend(filters.values);
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

/// The phrases of `fts` worth scoring (see [`telling_words`]).
fn telling_phrases(conn: &Connection, fts: &FullTextMatch) -> rusqlite::Result<Vec<String>> {
    telling_words(&fts.phrases, |some, cap| {
        count_matches(conn, &fts.expression(some), cap)
    })
}

/// The words of a search worth ranking by, given `count(words, cap)`: how many entries in
/// scope match any of `words`, counting at most `cap`. All of them when the search matches
/// at most [`SCORED_MATCHES`] entries, else those in under half of its matches (at least
/// the rarest): a word nearly every entry has tells none of them apart, and ranking every
/// match is the search's whole cost. Both engines' full-text searches choose this way.
pub(crate) fn telling_words<E>(
    words: &[String],
    mut count: impl FnMut(&[String], usize) -> Result<usize, E>,
) -> Result<Vec<String>, E> {
    if words.len() < 2 {
        return Ok(words.to_vec());
    }
    let matches = count(words, COUNTED_MATCHES)?;
    if matches <= SCORED_MATCHES {
        return Ok(words.to_vec());
    }
    // A word is common once it is in over half of the matches: counting further is waste.
    let common = matches / 2 + 1;
    let mut counted = Vec::with_capacity(words.len());
    for word in words {
        counted.push((
            count(std::slice::from_ref(word), COUNTED_MATCHES / 2 + 1)?,
            word,
        ));
    }
    let telling: Vec<String> = counted
        .iter()
        .filter(|(count, _)| *count < common)
        .map(|(_, word)| (*word).clone())
        .collect();
    if !telling.is_empty() {
        return Ok(telling);
    }
    Ok(counted
        .into_iter()
        .min_by_key(|(count, _)| *count)
        .map(|(_, word)| vec![word.clone()])
        .unwrap_or_default())
}

/// How many rows match `expression`, counting at most `cap` (part of the statement's text:
/// SQLite re-plans a statement whose bound limit changes).
fn count_matches(conn: &Connection, expression: &str, cap: usize) -> rusqlite::Result<usize> {
    conn.prepare_cached(&format!(
        "SELECT count(*) FROM (SELECT rowid FROM entries_fts WHERE entries_fts MATCH ?1 LIMIT {cap})"
    ))?
    .query_row([expression], |r| r.get::<_, i64>(0))
    .map(|count| count as usize)
}
