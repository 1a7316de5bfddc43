//! The background embedder: entries without a vector of the configured model are embedded
//! in batches off the hot path, with an LRU cache keyed by content hash.

use super::*;

impl MemoryStore {
    /// Start the background embedder thread (no-op without a provider or if running).
    pub fn start_embedder(self: &Arc<Self>) {
        if self.embedder.is_none() {
            return;
        }
        let mut worker = self.worker.lock().unwrap_or_else(|p| p.into_inner());
        if worker.is_some() {
            return;
        }
        let memory = Arc::downgrade(self);
        let signal = self.signal.clone();
        let spawned = std::thread::Builder::new()
            .name("cairn-embedder".into())
            .spawn(move || {
                let mut backoff = Duration::from_secs(1);
                loop {
                    let Some(memory) = memory.upgrade() else {
                        return;
                    };
                    match memory.embed_pending(|_| {}) {
                        Ok(_) => backoff = Duration::from_secs(1),
                        Err(e) => {
                            tracing::warn!("background embedding failed (will retry): {e}");
                            backoff = (backoff * 2).min(Duration::from_secs(60));
                        }
                    }
                    drop(memory);
                    if !signal.wait(backoff) {
                        return;
                    }
                }
            });
        match spawned {
            Ok(handle) => *worker = Some(handle),
            Err(e) => tracing::error!("cannot start the embedder thread: {e}"),
        }
    }

    /// Stop the background embedder and wait for it.
    pub fn stop_embedder(&self) {
        self.signal.stop();
        let handle = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }

    /// Embed every live entry lacking a vector from the configured model, in batches, from
    /// where the last pass got to (so a wake-up after one new episode reads only new rows);
    /// `progress(done)` is called after each batch. Returns how many were embedded.
    pub fn embed_pending(&self, mut progress: impl FnMut(u64)) -> Result<u64, MemoryError> {
        let Some(embedder) = self.embedder.clone() else {
            return Ok(0);
        };
        let (provider, model) = (
            embedder.provider().to_string(),
            embedder.model().to_string(),
        );
        let batch = self.config.embeddings.batch_size.clamp(1, 2048);
        let mut done = 0u64;
        let mut after = self.embedded_through.load(Ordering::Acquire);
        loop {
            if self.signal.stopped() {
                break;
            }
            let pending = self.unembedded(&provider, &model, after, batch)?;
            let Some(last) = pending.last() else { break };
            after = last.seq;
            let hashes: Vec<String> = pending.iter().map(|p| p.content_hash.clone()).collect();
            let cached = self.cached_vectors(&provider, &model, &hashes)?;
            let mut unique = std::collections::HashSet::new();
            let missing: Vec<&Unembedded> = pending
                .iter()
                .filter(|p| !cached.contains_key(&p.content_hash))
                .filter(|p| unique.insert(p.content_hash.as_str()))
                .collect();
            let texts: Vec<String> = missing.iter().map(|p| p.content.clone()).collect();
            let fresh = embedder
                .embed(&texts)
                .map_err(|e| MemoryError::Unavailable(e.to_string()))?;
            let mut vectors: HashMap<String, Vec<f32>> = cached;
            for (item, vector) in missing.iter().zip(fresh) {
                vectors.insert(item.content_hash.clone(), vector);
            }
            let rows: Vec<(i64, String, Vec<f32>)> = pending
                .iter()
                .filter_map(|p| {
                    vectors
                        .get(&p.content_hash)
                        .map(|v| (p.seq, p.content_hash.clone(), v.clone()))
                })
                .collect();
            self.save_vectors(&provider, &model, rows.clone())?;
            for item in &pending {
                if let Some(vector) = vectors.get(&item.content_hash) {
                    self.index().upsert(item.seq, &item.scope, vector);
                }
            }
            self.embedded_through.fetch_max(after, Ordering::AcqRel);
            done += pending.len() as u64;
            progress(done);
        }
        Ok(done)
    }

    /// Drop every stored vector so that the next embedding pass recomputes them all.
    pub fn clear_vectors(&self) -> Result<(), MemoryError> {
        self.writer.write_blocking(|conn| {
            conn.execute("DELETE FROM embeddings", [])?;
            conn.execute("DELETE FROM embedding_cache", [])
        })?;
        self.embedded_through.store(0, Ordering::Release);
        Ok(())
    }

    /// Live entries without a vector from the configured model.
    pub fn embedding_backlog(&self) -> Result<u64, MemoryError> {
        let Some(embedder) = &self.embedder else {
            return Ok(0);
        };
        let (provider, model) = (
            embedder.provider().to_string(),
            embedder.model().to_string(),
        );
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

    pub(super) fn unembedded(
        &self,
        provider: &str,
        model: &str,
        after: i64,
        limit: usize,
    ) -> Result<Vec<Unembedded>, MemoryError> {
        self.read(|conn| {
            let mut statement = conn.prepare_cached(
                "SELECT e.seq, e.content, e.content_hash, e.agent_id, e.user_id, e.session_id
                 FROM entries e LEFT JOIN embeddings m ON m.entry_seq = e.seq
                 WHERE e.seq > ?3 AND e.forgotten_at IS NULL
                   AND (m.entry_seq IS NULL OR m.provider != ?1 OR m.model != ?2)
                 ORDER BY e.seq LIMIT ?4",
            )?;
            statement
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

    pub(super) fn cached_vectors(
        &self,
        provider: &str,
        model: &str,
        hashes: &[String],
    ) -> Result<HashMap<String, Vec<f32>>, MemoryError> {
        self.read(|conn| {
            let mut statement = conn.prepare_cached(
                "SELECT vector FROM embedding_cache WHERE content_hash = ?1 AND provider = ?2 AND model = ?3",
            )?;
            let mut found = HashMap::new();
            for hash in hashes {
                if let Some(bytes) = statement
                    .query_row(params![hash, provider, model], |r| r.get::<_, Vec<u8>>(0))
                    .optional()?
                {
                    found.insert(hash.clone(), embed::from_bytes(&bytes));
                }
            }
            Ok(found)
        })
    }

    pub(super) fn save_vectors(
        &self,
        provider: &str,
        model: &str,
        rows: Vec<(i64, String, Vec<f32>)>,
    ) -> Result<(), MemoryError> {
        let (provider, model) = (provider.to_string(), model.to_string());
        let capacity = self.config.embeddings.cache_entries as i64;
        self.writer.write_blocking(move |conn| {
            let now = now_ms();
            for (seq, hash, vector) in &rows {
                let bytes = embed::to_bytes(vector);
                conn.execute(
                    "INSERT INTO embeddings (entry_seq, provider, model, dims, vector) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (entry_seq) DO UPDATE SET provider = excluded.provider, model = excluded.model,
                         dims = excluded.dims, vector = excluded.vector",
                    params![seq, provider, model, vector.len() as i64, bytes],
                )?;
                conn.execute(
                    "INSERT INTO embedding_cache (content_hash, provider, model, vector, last_used) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT DO UPDATE SET last_used = excluded.last_used",
                    params![hash, provider, model, bytes, now],
                )?;
            }
            let cached: i64 = conn.query_row("SELECT count(*) FROM embedding_cache", [], |r| r.get(0))?;
            if cached > capacity {
                conn.execute(
                    "DELETE FROM embedding_cache WHERE rowid IN
                         (SELECT rowid FROM embedding_cache ORDER BY last_used LIMIT ?1)",
                    params![cached - capacity],
                )?;
            }
            Ok(())
        })?;
        Ok(())
    }
}

/// One entry waiting for a vector.
pub(super) struct Unembedded {
    seq: i64,
    content: String,
    content_hash: String,
    scope: Scope,
}
