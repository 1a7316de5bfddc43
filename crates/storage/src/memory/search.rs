//! Recall's reads: full-text candidates with their BM25, and the candidates (from the text
//! or the vector index) that pass a query's filters.

use rusqlite::types::Value;
use rusqlite::{Connection, params_from_iter};

use super::entries::{ENTRY_COLUMNS, Filters, row_to_entry};
use super::*;

/// A full-text search: words any of which may match, within a scope.
///
/// A search's cost must not grow with the memories it searches: `bm25()` costs FTS5 a
/// walk of every phrase's whole posting list (to count its documents) and several
/// microseconds per matching row. So the words it ranks by are the rarest ones, together in
/// at most [`SCORED_MATCHES_MAX`] of the scope's entries (see [`telling_words`]), and the
/// ranked search names the scope's tokens only when its words match many entries in all
/// and the scope is small enough to walk (see [`ranked_expression`]); the store's SQL
/// checks the scope either way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FullTextMatch {
    /// The query's words as FTS5 phrases, each already quoted.
    pub phrases: Vec<String>,
    /// FTS5 conditions every match must meet (the scope's tokens), after the phrases: e.g.
    /// `AND scope_tokens : (u… OR unone)`; empty for none.
    pub scope: String,
}

/// Matches up to which a search ranks by every word of the query.
pub const SCORED_MATCHES: usize = 200;

/// Matches in scope a ranked search may score at most, summed over the words it keeps;
/// a word more common than that is only searched for its newest matches.
pub const SCORED_MATCHES_MAX: usize = 1_000;

/// The words a full-text search goes by (see [`telling_words`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TellingWords {
    /// Ranked by relevance on these words.
    Ranked(Vec<String>),
    /// Every word of the query is common in the scope: its newest matches of this word
    /// (the rarest), unranked.
    Newest(String),
}

/// The lexical rank given to a match of a search for [`TellingWords::Newest`]: every one
/// holds the word searched, and recency and meaning order them.
pub(crate) const UNRANKED_MATCH: f64 = -1.0;

impl FullTextMatch {
    /// The FTS5 expression of `phrases` in this match's scope.
    pub fn expression(&self, phrases: &[String]) -> String {
        let mut expression = Self::words_only(phrases);
        if !self.scope.is_empty() {
            expression.push(' ');
            expression.push_str(&self.scope);
        }
        expression
    }

    /// The FTS5 expression of `phrases` in any scope (the store's SQL checks the scope).
    pub fn words_only(phrases: &[String]) -> String {
        format!("{{content tags}} : ({})", phrases.join(" OR "))
    }

    /// The scope's tokens alone as an FTS5 expression, when the scope names a user or a
    /// session to match (not when it only leaves one out).
    pub fn scope_only(&self) -> Option<&str> {
        self.scope.strip_prefix("AND ")
    }
}

/// Entries in any scope a ranked search's words may match before it searches within the
/// scope instead (see [`ranked_expression`]).
pub(super) const UNSCOPED_MATCHES_MAX: usize = 2 * SCORED_MATCHES_MAX;

/// Entries a scope may hold for a ranked search to match within it (see
/// [`ranked_expression`]).
const SCOPED_ENTRIES_MAX: usize = 10_000;

/// The FTS5 expression a ranked search for `phrases` matches. The words alone while they
/// match few entries in all: each match is looked up in `entries` for the SQL to check the
/// scope, so with many users sharing words that lookup (a page read each) is the search's
/// cost, growing with other users' data. Past [`UNSCOPED_MATCHES_MAX`] the words within the
/// scope, whose tokens `bm25()` then walks (every entry of the scope, to count them; their
/// weight in the rank is 0, so the rank is the same) — while the scope holds at most
/// [`SCOPED_ENTRIES_MAX`] entries; a larger scope goes by the words alone.
pub(super) fn ranked_expression(
    conn: &Connection,
    fts: &FullTextMatch,
    phrases: &[String],
) -> rusqlite::Result<String> {
    let words = FullTextMatch::words_only(phrases);
    let Some(scope) = fts.scope_only() else {
        return Ok(words);
    };
    if count_matches(conn, &words, UNSCOPED_MATCHES_MAX + 1)? <= UNSCOPED_MATCHES_MAX
        || count_matches(conn, scope, SCOPED_ENTRIES_MAX + 1)? > SCOPED_ENTRIES_MAX
    {
        return Ok(words);
    }
    Ok(fts.expression(phrases))
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
        self.read(|conn| match telling_phrases(conn, fts)? {
            TellingWords::Ranked(phrases) => {
                let sql = format!(
                    "SELECT e.seq, bm25(entries_fts, 1.0, 0.5, 0.0) AS rank FROM entries_fts
                     JOIN entries e ON e.seq = entries_fts.rowid
                     WHERE entries_fts MATCH ? AND {} ORDER BY rank LIMIT {limit}",
                    filters.clause()
                );
                let expression = ranked_expression(conn, fts, &phrases)?;
                matches(conn, &sql, expression, &filters.values, |r| r.get(1))
            }
            TellingWords::Newest(phrase) => {
                let sql = format!(
                    "SELECT e.seq FROM entries_fts JOIN entries e ON e.seq = entries_fts.rowid
                     WHERE entries_fts MATCH ? AND {} ORDER BY entries_fts.rowid DESC LIMIT {limit}",
                    filters.clause()
                );
                let expression = fts.expression(&[phrase]);
                matches(conn, &sql, expression, &filters.values, |_| {
                    Ok(UNRANKED_MATCH)
                })
            }
        })
    }

    /// With a user in scope, the user's own entries and the shared ones (no user) are read as
    /// two walks of the `(user_id, valid_from)` index, newest first, each stopping at
    /// `limit`, and merged: one read of `user_id = ? OR user_id IS NULL` gathers all of the
    /// user's entries in the span and sorts them, which at 200,000 of them took 100 ms.
    pub(super) fn newest(
        &self,
        query: &RecallQuery,
        limit: usize,
    ) -> Result<Vec<MemoryEntry>, StorageError> {
        let (sql, values) = newest_sql(query, limit);
        self.read(|conn| {
            conn.prepare_cached(&sql)?
                .query_map(params_from_iter(values.iter()), row_to_entry)?
                .collect()
        })
    }

    pub(super) fn matching(
        &self,
        seqs: &[i64],
        query: &RecallQuery,
    ) -> Result<Vec<(i64, MemoryEntry)>, StorageError> {
        let filters = recall_filters(query);
        let sql = candidates_sql(&filters);
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

/// The statement reading the `limit` entries passing `query`'s filters said last, with its
/// parameters.
///
/// With a user in scope, the user's own entries and the shared ones (no user) are read as
/// two walks of the `(user_id, valid_from)` index, newest first, each stopping at `limit`,
/// and merged: one read of `user_id = ? OR user_id IS NULL` gathers all of the user's
/// entries in the span and sorts them, which at 200,000 of them took 100 ms.
fn newest_sql(query: &RecallQuery, limit: usize) -> (String, Vec<Value>) {
    let order = format!("ORDER BY valid_from DESC, seq DESC LIMIT {}", limit.max(1));
    let Some(user) = &query.scope.user_id else {
        let filters = recall_filters(query);
        let sql = format!(
            "SELECT {ENTRY_COLUMNS} FROM entries e WHERE {} {order}",
            filters.clause()
        );
        return (sql, filters.values);
    };
    let filters = recall_filters(&without_user(query));
    let walk = |user_clause: &str| {
        format!(
            "SELECT * FROM (SELECT {ENTRY_COLUMNS} FROM entries e
              WHERE {user_clause} AND {} {order})",
            filters.clause()
        )
    };
    let sql = format!(
        "{} UNION ALL {} {order}",
        walk("e.user_id = ?"),
        walk("e.user_id IS NULL")
    );
    let mut values = vec![Value::Text(user.clone())];
    values.extend(filters.values.iter().cloned());
    values.extend(filters.values);
    (sql, values)
}

/// The entries among a JSON array of seqs that pass `filters`. The seqs go in as one array,
/// so the statement's text (and its cached plan) depends only on the filters' shape, not on
/// how many candidates there are. The CROSS JOIN makes SQLite look each candidate up by its
/// seq: left to itself it walked the user's index (`user_id = ? OR user_id IS NULL`) through
/// every entry of the user, testing each against the list — 50 ms a recall at 57,000
/// entries in the soak, and growing with them.
fn candidates_sql(filters: &Filters) -> String {
    format!(
        "SELECT {ENTRY_COLUMNS} FROM json_each(?) candidate
         CROSS JOIN entries e ON e.seq = candidate.value
         WHERE {}",
        filters.clause()
    )
}

/// `query` with no user in its scope: its other filters, for a read that names the user
/// itself.
pub(crate) fn without_user(query: &RecallQuery) -> RecallQuery {
    let mut others = query.clone();
    others.scope.user_id = None;
    others
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

/// The rows of a full-text `sql` whose first parameter is `expression` and the rest
/// `filters`: each entry's seq and its lexical rank, as `rank` reads it.
fn matches(
    conn: &Connection,
    sql: &str,
    expression: String,
    filters: &[Value],
    rank: impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<f64>,
) -> rusqlite::Result<HashMap<i64, f64>> {
    let mut values = vec![Value::Text(expression)];
    values.extend(filters.iter().cloned());
    conn.prepare_cached(sql)?
        .query_map(params_from_iter(values.iter()), |r| {
            Ok((r.get(0)?, rank(r)?))
        })?
        .collect()
}

/// The phrases of `fts` worth searching by, counted in its scope (see [`telling_words`]).
fn telling_phrases(conn: &Connection, fts: &FullTextMatch) -> rusqlite::Result<TellingWords> {
    telling_words(&fts.phrases, |some, cap| {
        count_matches(conn, &fts.expression(some), cap)
    })
}

/// The words of a search worth ranking by, given `count(words, cap)`: how many entries in
/// scope match any of `words`, counting at most `cap`.
///
/// Every word when the search matches at most [`SCORED_MATCHES`] entries. Otherwise the
/// rarest words, each in under half of the search's matches (a word nearly every entry has
/// tells none of them apart) and together in at most [`SCORED_MATCHES_MAX`]: ranking every
/// match is the search's whole cost, so it must not grow with the scope. When no word
/// qualifies, the rarest alone: ranked if it is that rare, else searched for its newest
/// matches. Both engines' full-text searches choose this way; every count stops at its cap.
pub(crate) fn telling_words<E>(
    words: &[String],
    mut count: impl FnMut(&[String], usize) -> Result<usize, E>,
) -> Result<TellingWords, E> {
    let matches = count(words, SCORED_MATCHES_MAX + 1)?;
    if matches <= SCORED_MATCHES || (words.len() < 2 && matches <= SCORED_MATCHES_MAX) {
        return Ok(TellingWords::Ranked(words.to_vec()));
    }
    // A word is common once it is in over half of the matches: counting further is waste.
    let common = matches / 2 + 1;
    let mut counted = Vec::with_capacity(words.len());
    for word in words {
        counted.push((count(std::slice::from_ref(word), common)?, word));
    }
    counted.sort_by_key(|(found, _)| *found);
    let mut telling = Vec::new();
    let mut scored = 0;
    for (found, word) in &counted {
        if *found >= common || scored + found > SCORED_MATCHES_MAX {
            break;
        }
        scored += found;
        telling.push((*word).clone());
    }
    if !telling.is_empty() {
        return Ok(TellingWords::Ranked(telling));
    }
    let Some((_, rarest)) = counted.first() else {
        return Ok(TellingWords::Ranked(Vec::new()));
    };
    let rarest = (*rarest).clone();
    let found = count(std::slice::from_ref(&rarest), SCORED_MATCHES_MAX + 1)?;
    Ok(if found <= SCORED_MATCHES_MAX {
        TellingWords::Ranked(vec![rarest])
    } else {
        TellingWords::Newest(rarest)
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The steps of SQLite's plan for `sql` with `values`, on a fresh memory.db.
    fn plan_of(sql: &str, values: Vec<Value>) -> Vec<String> {
        let dir = tempfile::tempdir().expect("dir");
        let conn =
            crate::open(&dir.path().join("memory.db"), &super::super::MIGRATIONS).expect("open");
        conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .expect("prepare")
            .query_map(params_from_iter(values), |r| r.get(3))
            .expect("plan")
            .collect::<Result<_, _>>()
            .expect("rows")
    }

    #[test]
    fn candidates_are_looked_up_by_seq_whatever_the_filters() {
        let query = RecallQuery {
            scope: Scope {
                agent_id: Some("main".into()),
                user_id: Some("octocat".into()),
                session_id: None,
            },
            kinds: vec![
                cairn_vocab::memory::MemoryKind::Episode,
                cairn_vocab::memory::MemoryKind::Fact,
            ],
            exclude_session: Some("cli:c".into()),
            ..RecallQuery::default()
        };
        let filters = recall_filters(&query);
        let mut values = vec![Value::Text("[1,2]".into())];
        values.extend(filters.values.iter().cloned());
        let plan = plan_of(&candidates_sql(&filters), values);
        assert!(
            plan.iter().any(|step| step.contains("INTEGER PRIMARY KEY"))
                && !plan.iter().any(|step| step.contains("entries_user")),
            "{plan:?}"
        );
    }

    #[test]
    fn what_was_said_in_a_span_is_two_walks_of_the_users_index_by_valid_time() {
        let query = RecallQuery {
            scope: Scope {
                agent_id: Some("main".into()),
                user_id: Some("octocat".into()),
                session_id: None,
            },
            since: Some(10),
            until: Some(90),
            ..RecallQuery::default()
        };
        let (sql, values) = newest_sql(&query, 5);
        let plan = plan_of(&sql, values);
        let walks = plan
            .iter()
            .filter(|step| {
                step.contains(
                    "USING INDEX entries_user (user_id=? AND valid_from>? AND valid_from<?)",
                )
            })
            .count();
        assert_eq!(walks, 2, "{plan:?}");
    }

    /// `telling_words` over a scope where each word matches `frequency(word)` entries and
    /// no entry holds two of them; every count's cap is checked to stay bounded.
    fn choose(words: &[&str], frequency: impl Fn(&str) -> usize) -> TellingWords {
        let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        telling_words(&words, |some: &[String], cap| {
            assert!(cap <= SCORED_MATCHES_MAX + 1, "a count capped at {cap}");
            let found: usize = some.iter().map(|w| frequency(w)).sum();
            Ok::<_, ()>(found.min(cap))
        })
        .expect("chosen")
    }

    fn ranked(words: &[&str]) -> TellingWords {
        TellingWords::Ranked(words.iter().map(|w| w.to_string()).collect())
    }

    #[test]
    fn a_search_with_few_matches_ranks_by_every_word() {
        assert_eq!(choose(&["tea", "kayak"], |_| 50), ranked(&["tea", "kayak"]));
    }

    #[test]
    fn a_busy_search_ranks_by_its_rarest_words_within_the_budget() {
        let frequency = |w: &str| match w {
            "kayak" => 3,
            "lake" => 400,
            "trip" => 700,
            _ => 1_000_000,
        };
        // "octocat" is in most matches; "trip" would take the scored rows past the budget.
        assert_eq!(
            choose(&["octocat", "trip", "kayak", "lake"], frequency),
            ranked(&["kayak", "lake"])
        );
    }

    #[test]
    fn when_every_word_is_common_the_rarest_is_ranked_if_rare_enough() {
        assert_eq!(
            choose(&["bench", "octocat"], |w| if w == "bench" {
                240
            } else {
                250
            }),
            ranked(&["bench"])
        );
    }

    #[test]
    fn a_word_in_more_entries_than_the_budget_is_searched_for_its_newest_matches() {
        assert_eq!(
            choose(&["cache", "warm"], |w| if w == "cache" {
                50_000
            } else {
                90_000
            }),
            TellingWords::Newest("cache".into())
        );
        assert_eq!(
            choose(&["cache"], |_| 50_000),
            TellingWords::Newest("cache".into())
        );
        assert_eq!(choose(&["cache"], |_| 900), ranked(&["cache"]));
    }
}
