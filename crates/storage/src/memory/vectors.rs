//! Stored vectors: one per entry from the model that made it, and a cache by content hash
//! so equal text is embedded once (least recently used rows go first).

use rusqlite::{OptionalExtension, params};

use super::*;
use crate::now_ms;

impl SqliteMemory {
    pub(super) fn visit(
        &self,
        provider: &str,
        model: &str,
        visit: &mut dyn FnMut(i64, Scope, Vec<f32>),
    ) -> Result<(), StorageError> {
        self.read(|conn| {
            let mut statement = conn.prepare_cached(
                "SELECT e.seq, e.agent_id, e.user_id, e.session_id, m.vector
                 FROM embeddings m JOIN entries e ON e.seq = m.entry_seq
                 WHERE m.provider = ?1 AND m.model = ?2 AND e.forgotten_at IS NULL",
            )?;
            let mut rows = statement.query(params![provider, model])?;
            while let Some(row) = rows.next()? {
                let scope = Scope {
                    agent_id: row.get(1)?,
                    user_id: row.get(2)?,
                    session_id: row.get(3)?,
                };
                let bytes: Vec<u8> = row.get(4)?;
                visit(row.get(0)?, scope, from_bytes(&bytes));
            }
            Ok(())
        })
    }

    pub(super) fn pending_vectors(
        &self,
        provider: &str,
        model: &str,
        after: i64,
        limit: usize,
    ) -> Result<Vec<Unembedded>, StorageError> {
        self.read(|conn| {
            conn.prepare_cached(
                "SELECT e.seq, e.content, e.content_hash, e.agent_id, e.user_id, e.session_id
                 FROM entries e LEFT JOIN embeddings m ON m.entry_seq = e.seq
                 WHERE e.seq > ?3 AND e.forgotten_at IS NULL
                   AND (m.entry_seq IS NULL OR m.provider != ?1 OR m.model != ?2)
                 ORDER BY e.seq LIMIT ?4",
            )?
            .query_map(params![provider, model, after, limit as i64], |r| {
                Ok(Unembedded {
                    seq: r.get(0)?,
                    content: r.get(1)?,
                    content_hash: r.get(2)?,
                    scope: Scope {
                        agent_id: r.get(3)?,
                        user_id: r.get(4)?,
                        session_id: r.get(5)?,
                    },
                })
            })?
            .collect()
        })
    }

    pub(super) fn backlog(&self, provider: &str, model: &str) -> Result<u64, StorageError> {
        self.read(|conn| {
            conn.query_row(
                "SELECT count(*) FROM entries e LEFT JOIN embeddings m ON m.entry_seq = e.seq
                 WHERE e.forgotten_at IS NULL AND (m.entry_seq IS NULL OR m.provider != ?1 OR m.model != ?2)",
                params![provider, model],
                |r| r.get::<_, i64>(0),
            )
        })
        .map(|n| n as u64)
    }

    pub(super) fn cached(
        &self,
        provider: &str,
        model: &str,
        hashes: &[String],
    ) -> Result<HashMap<String, Vec<f32>>, StorageError> {
        self.read(|conn| {
            let mut statement = conn.prepare_cached(
                "SELECT vector FROM embedding_cache WHERE content_hash = ?1 AND provider = ?2 AND model = ?3",
            )?;
            let mut found = HashMap::new();
            for hash in hashes {
                let bytes: Option<Vec<u8>> = statement
                    .query_row(params![hash, provider, model], |r| r.get(0))
                    .optional()?;
                if let Some(bytes) = bytes {
                    found.insert(hash.clone(), from_bytes(&bytes));
                }
            }
            Ok(found)
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
        self.submit(move |conn| {
            let now = now_ms();
            for (seq, hash, vector) in &rows {
                let bytes = to_bytes(vector);
                conn.prepare_cached(
                    "INSERT INTO embeddings (entry_seq, provider, model, dims, vector) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (entry_seq) DO UPDATE SET provider = excluded.provider, model = excluded.model,
                         dims = excluded.dims, vector = excluded.vector",
                )?
                .execute(params![seq, provider, model, vector.len() as i64, bytes])?;
                conn.prepare_cached(
                    "INSERT INTO embedding_cache (content_hash, provider, model, vector, last_used) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT DO UPDATE SET last_used = excluded.last_used",
                )?
                .execute(params![hash, provider, model, bytes, now])?;
            }
            let cached: i64 =
                conn.prepare_cached("SELECT count(*) FROM embedding_cache")?.query_row([], |r| r.get(0))?;
            let capacity = cache_capacity as i64;
            if cached > capacity {
                conn.prepare_cached("DELETE FROM embedding_cache WHERE rowid IN
                         (SELECT rowid FROM embedding_cache ORDER BY last_used LIMIT ?1)")?.execute(params![cached - capacity])?;
            }
            Ok(())
        })
    }

    pub(super) fn clear(&self) -> Receipt<()> {
        self.submit(|conn| {
            conn.prepare_cached("DELETE FROM embeddings")?.execute([])?;
            conn.prepare_cached("DELETE FROM embedding_cache")?
                .execute([])?;
            Ok(())
        })
    }
}

/// A vector as stored: little-endian f32s.
fn to_bytes(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A stored vector back as f32s.
fn from_bytes(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_round_trip_through_bytes() {
        let vector = vec![0.5, -1.25, 3.0];
        assert_eq!(from_bytes(&to_bytes(&vector)), vector);
    }
}
