//! Stored vectors on PostgreSQL: one per entry, numbered by save in commit order so every
//! host's in-memory index catches up on the others' saves, and a cache by content hash
//! (least recently used rows go first). Vectors are int8 with one scale, as on SQLite.

use std::collections::HashMap;

use cairn_vocab::memory::Scope;
use postgres::{GenericClient, Row};

use super::PgMemory;
use crate::memory::vectors::{decode, encode_int8};
use crate::memory::{SavedVector, Unembedded, VectorRow};
use crate::writer::Receipt;
use crate::{StorageError, now_ms};

/// Vectors read per round trip when visiting them all.
const VISIT_BATCH: i64 = 5_000;

impl PgMemory {
    pub(super) fn visit(
        &self,
        provider: &str,
        model: &str,
        visit: &mut dyn FnMut(i64, Scope, Vec<f32>),
    ) -> Result<(), StorageError> {
        let mut after = 0;
        loop {
            let (saved, next) = self.saved_after(provider, model, after, VISIT_BATCH)?;
            if saved.is_empty() {
                return Ok(());
            }
            for vector in saved {
                visit(vector.seq, vector.scope, vector.vector);
            }
            after = next;
        }
    }

    pub(super) fn vectors_of(
        &self,
        provider: &str,
        model: &str,
        seqs: &[i64],
    ) -> Result<HashMap<i64, Vec<f32>>, StorageError> {
        let (provider, model, seqs) = (provider.to_string(), model.to_string(), seqs.to_vec());
        self.reads.read(move |client| {
            Ok(client
                .query(
                    "SELECT entry_seq, vector FROM memory_embeddings
                     WHERE entry_seq = ANY($1) AND provider = $2 AND model = $3",
                    &[&seqs, &provider, &model],
                )?
                .iter()
                .map(|row| (row.get(0), decode("i8", row.get(1))))
                .collect())
        })
    }

    pub(super) fn saved_after(
        &self,
        provider: &str,
        model: &str,
        after: i64,
        limit: i64,
    ) -> Result<(Vec<SavedVector>, i64), StorageError> {
        let (provider, model) = (provider.to_string(), model.to_string());
        self.reads.read(move |client| {
            let rows = client.query(
                "SELECT m.saved, e.seq, e.agent_id, e.user_id, e.session_id, m.vector
                 FROM memory_embeddings m JOIN memory_entries e ON e.seq = m.entry_seq
                 WHERE m.saved > $3 AND m.provider = $1 AND m.model = $2
                   AND e.forgotten_at IS NULL
                 ORDER BY m.saved LIMIT $4",
                &[&provider, &model, &after, &limit],
            )?;
            let next = rows.last().map_or(after, |row| row.get(0));
            Ok((rows.iter().map(saved_vector).collect(), next))
        })
    }

    pub(super) fn pending_vectors(
        &self,
        provider: &str,
        model: &str,
        after: i64,
        limit: usize,
    ) -> Result<Vec<Unembedded>, StorageError> {
        let (provider, model) = (provider.to_string(), model.to_string());
        let limit = limit as i64;
        self.reads.read(move |client| {
            Ok(client
                .query(
                    "SELECT e.seq, e.content, e.content_hash, e.agent_id, e.user_id, e.session_id
                     FROM memory_entries e LEFT JOIN memory_embeddings m ON m.entry_seq = e.seq
                     WHERE e.seq > $3 AND e.forgotten_at IS NULL
                       AND (m.entry_seq IS NULL OR m.provider != $1 OR m.model != $2)
                     ORDER BY e.seq LIMIT $4",
                    &[&provider, &model, &after, &limit],
                )?
                .iter()
                .map(|r| Unembedded {
                    seq: r.get(0),
                    content: r.get(1),
                    content_hash: r.get(2),
                    scope: Scope {
                        agent_id: r.get(3),
                        user_id: r.get(4),
                        session_id: r.get(5),
                    },
                })
                .collect())
        })
    }

    pub(super) fn pending_count(&self, provider: &str, model: &str) -> Result<u64, StorageError> {
        let (provider, model) = (provider.to_string(), model.to_string());
        self.reads
            .read(move |client| backlog(client, &provider, &model))
    }

    pub(super) fn cached(
        &self,
        provider: &str,
        model: &str,
        hashes: &[String],
    ) -> Result<HashMap<String, Vec<f32>>, StorageError> {
        let (provider, model, hashes) = (provider.to_string(), model.to_string(), hashes.to_vec());
        self.reads.read(move |client| {
            Ok(client
                .query(
                    "SELECT content_hash, vector FROM memory_embedding_cache
                     WHERE content_hash = ANY($1) AND provider = $2 AND model = $3",
                    &[&hashes, &provider, &model],
                )?
                .iter()
                .map(|row| (row.get(0), decode("i8", row.get(1))))
                .collect())
        })
    }

    pub(super) fn save(
        &self,
        provider: &str,
        model: &str,
        rows: Vec<VectorRow>,
        cache_capacity: usize,
    ) -> Receipt<()> {
        let (provider, model) = (provider.to_string(), model.to_string());
        let rows: Vec<(i64, String, i32, Vec<u8>)> = rows
            .into_iter()
            .map(|(seq, hash, vector)| (seq, hash, vector.len() as i32, encode_int8(&vector)))
            .collect();
        let capacity = i64::try_from(cache_capacity).unwrap_or(i64::MAX);
        self.writes.submit(move |tx| {
            if rows.is_empty() {
                return Ok(());
            }
            // The head row stays locked until this commits, so saves commit in the order
            // of their numbers and a host catching up never skips one.
            let last: i64 = tx
                .query_one(
                    "UPDATE memory_vector_head SET last = last + $1 WHERE id = 1 RETURNING last",
                    &[&(rows.len() as i64)],
                )?
                .get(0);
            let first = last - rows.len() as i64 + 1;
            let now = now_ms();
            for (n, (seq, hash, dims, bytes)) in rows.iter().enumerate() {
                // An entry purged meanwhile has no row to hang its vector on: skip it.
                tx.execute(
                    "INSERT INTO memory_embeddings (entry_seq, provider, model, dims, vector, saved)
                     SELECT $1, $2, $3, $4, $5, $6 WHERE EXISTS
                       (SELECT 1 FROM memory_entries WHERE seq = $1)
                     ON CONFLICT (entry_seq) DO UPDATE SET provider = excluded.provider,
                         model = excluded.model, dims = excluded.dims, vector = excluded.vector,
                         saved = excluded.saved",
                    &[seq, &provider, &model, dims, bytes, &(first + n as i64)],
                )?;
                tx.execute(
                    "INSERT INTO memory_embedding_cache (content_hash, provider, model, vector, last_used)
                     VALUES ($1, $2, $3, $4, $5)
                     ON CONFLICT (content_hash, provider, model) DO UPDATE SET last_used = excluded.last_used",
                    &[hash, &provider, &model, bytes, &now],
                )?;
            }
            tx.execute(
                "DELETE FROM memory_embedding_cache WHERE (content_hash, provider, model) IN
                   (SELECT content_hash, provider, model FROM memory_embedding_cache
                    ORDER BY last_used DESC OFFSET $1)",
                &[&capacity],
            )?;
            Ok(())
        })
    }

    pub(super) fn clear(&self) -> Receipt<()> {
        self.writes.submit(|tx| {
            tx.execute("DELETE FROM memory_embeddings", &[])?;
            tx.execute("DELETE FROM memory_embedding_cache", &[])?;
            Ok(())
        })
    }
}

/// How many live entries lack a vector of `provider`/`model`.
pub(super) fn backlog(
    client: &mut impl GenericClient,
    provider: &str,
    model: &str,
) -> Result<u64, StorageError> {
    let count: i64 = client
        .query_one(
            "SELECT count(*) FROM memory_entries e
             LEFT JOIN memory_embeddings m ON m.entry_seq = e.seq
             WHERE e.forgotten_at IS NULL
               AND (m.entry_seq IS NULL OR m.provider != $1 OR m.model != $2)",
            &[&provider, &model],
        )?
        .get(0);
    Ok(count as u64)
}

/// A row of [`PgMemory::saved_after`]'s query as a saved vector.
fn saved_vector(row: &Row) -> SavedVector {
    SavedVector {
        seq: row.get(1),
        scope: Scope {
            agent_id: row.get(2),
            user_id: row.get(3),
            session_id: row.get(4),
        },
        vector: decode("i8", row.get(5)),
    }
}
