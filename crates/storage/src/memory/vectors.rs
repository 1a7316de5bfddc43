//! Stored vectors: one per entry from the model that made it, and a cache by content hash
//! so equal text is embedded once (least recently used rows go first). Vectors are kept as
//! int8 with one scale each (`encoding` 'i8'); rows of older versions stay f32.

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
                "SELECT e.seq, e.agent_id, e.user_id, e.session_id, m.vector, m.encoding
                 FROM embeddings m JOIN entries e ON e.seq = m.entry_seq
                 WHERE m.provider = ?1 AND m.model = ?2 AND e.forgotten_at IS NULL
                 ORDER BY e.seq",
            )?;
            let mut rows = statement.query(params![provider, model])?;
            while let Some(row) = rows.next()? {
                let scope = Scope {
                    agent_id: row.get(1)?,
                    user_id: row.get(2)?,
                    session_id: row.get(3)?,
                };
                let bytes: Vec<u8> = row.get(4)?;
                let encoding: String = row.get(5)?;
                visit(row.get(0)?, scope, decode(&encoding, &bytes));
            }
            Ok(())
        })
    }

    pub(super) fn vectors_of(
        &self,
        provider: &str,
        model: &str,
        seqs: &[i64],
    ) -> Result<HashMap<i64, Vec<f32>>, StorageError> {
        let seqs = serde_json::to_string(seqs).unwrap_or_else(|_| "[]".into());
        self.read(|conn| {
            conn.prepare_cached(
                "SELECT m.entry_seq, m.vector, m.encoding
                 FROM json_each(?1) wanted CROSS JOIN embeddings m ON m.entry_seq = wanted.value
                 WHERE m.provider = ?2 AND m.model = ?3",
            )?
            .query_map(params![seqs, provider, model], |r| {
                let bytes: Vec<u8> = r.get(1)?;
                let encoding: String = r.get(2)?;
                Ok((r.get(0)?, decode(&encoding, &bytes)))
            })?
            .collect()
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
                "SELECT vector, encoding FROM embedding_cache
                 WHERE content_hash = ?1 AND provider = ?2 AND model = ?3",
            )?;
            let mut found = HashMap::new();
            for hash in hashes {
                let stored: Option<(Vec<u8>, String)> = statement
                    .query_row(params![hash, provider, model], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })
                    .optional()?;
                if let Some((bytes, encoding)) = stored {
                    found.insert(hash.clone(), decode(&encoding, &bytes));
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
                let bytes = encode_int8(vector);
                conn.prepare_cached(
                    "INSERT INTO embeddings (entry_seq, provider, model, dims, vector, encoding)
                     VALUES (?1, ?2, ?3, ?4, ?5, 'i8')
                     ON CONFLICT (entry_seq) DO UPDATE SET provider = excluded.provider, model = excluded.model,
                         dims = excluded.dims, vector = excluded.vector, encoding = excluded.encoding",
                )?
                .execute(params![seq, provider, model, vector.len() as i64, bytes])?;
                conn.prepare_cached(
                    "INSERT INTO embedding_cache (content_hash, provider, model, vector, last_used, encoding)
                     VALUES (?1, ?2, ?3, ?4, ?5, 'i8')
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

/// A vector as int8: one signed byte per component and one scale (the largest magnitude /
/// 127), a quarter of the f32 size. Memory stores vectors so, and the in-memory index of
/// the memory crate holds them so, so a recall ranks the same before and after a restart.
pub fn quantize_int8(vector: &[f32]) -> (f32, Vec<i8>) {
    let largest = vector.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let scale = if largest > 0.0 { largest / 127.0 } else { 1.0 };
    let codes = vector
        .iter()
        .map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8)
        .collect();
    (scale, codes)
}

/// A vector as stored: the scale of [`quantize_int8`] as a little-endian f32, then one
/// signed byte per component.
pub(crate) fn encode_int8(vector: &[f32]) -> Vec<u8> {
    let (scale, codes) = quantize_int8(vector);
    let mut bytes = Vec::with_capacity(4 + codes.len());
    bytes.extend_from_slice(&scale.to_le_bytes());
    bytes.extend(codes.into_iter().map(|code| code as u8));
    bytes
}

/// A stored vector back as f32s: `i8` as [`encode_int8`] wrote it, else little-endian f32s
/// (rows written before int8 storage).
pub(crate) fn decode(encoding: &str, bytes: &[u8]) -> Vec<f32> {
    if encoding == "i8" && bytes.len() >= 4 {
        let scale = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        return bytes[4..]
            .iter()
            .map(|&b| f32::from(b as i8) * scale)
            .collect();
    }
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int8_vectors_keep_their_direction() {
        let vector: Vec<f32> = (0..384)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 70.0)
            .collect();
        let bytes = encode_int8(&vector);
        assert_eq!(
            bytes.len(),
            4 + 384,
            "a quarter of the f32 size, plus the scale"
        );
        let back = decode("i8", &bytes);
        let dot: f32 = vector.iter().zip(&back).map(|(a, b)| a * b).sum();
        let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
        let cosine = dot / (norm(&vector) * norm(&back));
        assert!(cosine > 0.9999, "{cosine}");
        assert_eq!(decode("i8", &encode_int8(&[0.0, 0.0])), vec![0.0, 0.0]);
    }

    #[test]
    fn older_f32_rows_read_as_they_were() {
        let vector = [0.5f32, -1.25, 3.0];
        let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(decode("f32", &bytes), vector.to_vec());
    }
}
