//! Recall's reads on PostgreSQL: full-text candidates ranked on the `tsvector` column, and
//! the candidates (from the text or a host's vector index) that pass a query's filters.

use std::collections::HashMap;

use cairn_vocab::memory::{MemoryEntry, RecallQuery};
use postgres::Client;

use super::PgMemory;
use super::entries::{ENTRY_COLUMNS, Filters, row_to_entry};
use crate::StorageError;
use crate::memory::FullTextMatch;
use crate::memory::search::{TellingWords, UNRANKED_MATCH, telling_words, without_user};

/// `ts_rank_cd`'s normalisation: the rank divided by the document's length in words, so a
/// long entry that repeats a word does not outrank a short one about it (BM25 normalises
/// by length as well).
const NORMALIZATION: i32 = 2;

/// Weights of the `tsvector`'s classes D, C, B (tags) and A (content), as SQLite's
/// `bm25(entries_fts, 1.0, 0.5)` weighs them.
const WEIGHTS: &str = "{0, 0, 0.5, 1}";

impl PgMemory {
    pub(super) fn lexical(
        &self,
        fts: &FullTextMatch,
        query: &RecallQuery,
        limit: usize,
    ) -> Result<HashMap<i64, f64>, StorageError> {
        let words = words(fts);
        if words.is_empty() {
            return Ok(HashMap::new());
        }
        let mut filters = Filters::after(1);
        recall_filters(&mut filters, query);
        // The rank is negated so that, like BM25, lower is better.
        let ranked = format!(
            "SELECT e.seq, -ts_rank_cd('{WEIGHTS}', e.fts, q, {NORMALIZATION})::FLOAT8 AS rank
             FROM memory_entries e, to_tsquery('english', $1) q
             WHERE e.fts @@ q AND {} ORDER BY rank, e.seq DESC LIMIT {limit}",
            filters.clause()
        );
        let newest = format!(
            "SELECT e.seq, {UNRANKED_MATCH}::FLOAT8 FROM memory_entries e
             WHERE e.fts @@ to_tsquery('english', $1) AND {} ORDER BY e.seq DESC LIMIT {limit}",
            filters.clause()
        );
        self.reads.read(move |client| {
            let telling = telling_words(&words, |some, cap| {
                count_matches(client, &some.join(" | "), &filters, cap)
            })?;
            let (sql, expression) = match telling {
                TellingWords::Ranked(words) => (&ranked, words.join(" | ")),
                TellingWords::Newest(word) => (&newest, word),
            };
            Ok(client
                .query(sql, &filters.params_after(&[&expression]))?
                .iter()
                .map(|row| (row.get(0), row.get(1)))
                .collect())
        })
    }

    /// With a user in scope, the user's own entries and the shared ones are two walks of the
    /// `(user_id, valid_from)` index, each stopping at `limit`, merged (see the SQLite
    /// store's `newest`).
    pub(super) fn newest(
        &self,
        query: &RecallQuery,
        limit: usize,
    ) -> Result<Vec<MemoryEntry>, StorageError> {
        let limit = limit.max(1);
        let order = format!("ORDER BY valid_from DESC, seq DESC LIMIT {limit}");
        let user = query.scope.user_id.clone();
        let mut filters = Filters::after(usize::from(user.is_some()));
        let sql = match &user {
            None => {
                recall_filters(&mut filters, query);
                format!(
                    "SELECT {ENTRY_COLUMNS} FROM memory_entries e WHERE {} {order}",
                    filters.clause()
                )
            }
            Some(_) => {
                recall_filters(&mut filters, &without_user(query));
                let walk = |user_clause: &str| {
                    format!(
                        "(SELECT {ENTRY_COLUMNS} FROM memory_entries e
                           WHERE {user_clause} AND {} {order})",
                        filters.clause()
                    )
                };
                format!(
                    "{} UNION ALL {} {order}",
                    walk("e.user_id = $1"),
                    walk("e.user_id IS NULL")
                )
            }
        };
        self.reads.read(move |client| {
            let leading: Vec<&(dyn postgres::types::ToSql + Sync)> = match &user {
                Some(user) => vec![user],
                None => vec![],
            };
            client
                .query(&sql, &filters.params_after(&leading))?
                .iter()
                .map(row_to_entry)
                .collect()
        })
    }

    pub(super) fn matching(
        &self,
        seqs: &[i64],
        query: &RecallQuery,
    ) -> Result<Vec<(i64, MemoryEntry)>, StorageError> {
        let mut filters = Filters::after(1);
        recall_filters(&mut filters, query);
        let sql = format!(
            "SELECT {ENTRY_COLUMNS} FROM memory_entries e WHERE e.seq = ANY($1) AND {}",
            filters.clause()
        );
        let seqs = seqs.to_vec();
        self.reads.read(move |client| {
            client
                .query(&sql, &filters.params_after(&[&seqs]))?
                .iter()
                .map(|row| Ok((row.try_get(0)?, row_to_entry(row)?)))
                .collect()
        })
    }
}

/// The query's words, as `to_tsquery` operands: the match's phrases without their quotes,
/// keeping letters and digits only, so nothing the user typed is read as query syntax.
fn words(fts: &FullTextMatch) -> Vec<String> {
    fts.phrases
        .iter()
        .map(|phrase| phrase.chars().filter(|c| c.is_alphanumeric()).collect())
        .filter(|word: &String| !word.is_empty())
        .collect()
}

/// The query's filters as SQL: scope, kinds, categories, session, valid time, liveness.
fn recall_filters(sql: &mut Filters, query: &RecallQuery) {
    sql.scope(&query.scope);
    sql.kinds(&query.kinds);
    if !query.categories.is_empty() {
        sql.push("e.category = ANY($)", query.categories.clone());
    }
    if let Some(session) = &query.exclude_session {
        sql.push(
            "(e.session_id IS NULL OR e.session_id != $)",
            session.clone(),
        );
    }
    if let Some(since) = query.since {
        sql.push("e.valid_from >= $", since);
    }
    if let Some(until) = query.until {
        sql.push("e.valid_from < $", until);
    }
    sql.clauses.push("e.forgotten_at IS NULL".into());
    match query.as_of {
        None => sql.clauses.push("e.valid_to IS NULL".into()),
        Some(as_of) => {
            sql.push("e.valid_from <= $", as_of);
            sql.push("(e.valid_to IS NULL OR e.valid_to > $)", as_of);
        }
    }
}

/// How many entries in the filters' scope match `expression`, counting at most `cap`.
fn count_matches(
    client: &mut Client,
    expression: &str,
    filters: &Filters,
    cap: usize,
) -> Result<usize, StorageError> {
    let sql = format!(
        "SELECT count(*) FROM (SELECT 1 FROM memory_entries e
           WHERE e.fts @@ to_tsquery('english', $1) AND {} LIMIT {cap}) AS found",
        filters.clause()
    );
    let count: i64 = client
        .query_one(&sql, &filters.params_after(&[&expression]))?
        .get(0);
    Ok(count as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_keep_letters_and_digits_only() {
        let fts = FullTextMatch {
            phrases: vec!["\"ann's\"".into(), "\"a|b\"".into(), "\"\"\"\"".into()],
            scope: String::new(),
        };
        assert_eq!(words(&fts), ["anns", "ab"]);
    }
}
