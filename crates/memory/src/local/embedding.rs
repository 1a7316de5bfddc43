//! The background embedder: entries without a vector of the configured model are embedded
//! in batches off the hot path, with an LRU cache keyed by content hash.

use std::time::{Duration, Instant};

use cairn_storage::memory::{Unembedded, VectorRow};

use super::*;

/// Longest the background embedder waits for turns in flight before a batch, so that under
/// non-stop turns it still makes progress.
const MAX_YIELD: Duration = Duration::from_millis(500);

/// How often a yielding background embedder looks whether the turns are done.
const YIELD_POLL: Duration = Duration::from_millis(2);

/// Vectors read per round trip when the index catches up on other hosts' saves.
const CATCH_UP_BATCH: usize = 2_000;

/// A turn in flight ([`LocalMemory::turn_in_flight`]): until it is dropped the background
/// embedder starts no new batch (for up to [`MAX_YIELD`] at a time), so on a small machine
/// the turn's host work and its query's embedding do not share the cores with it.
pub struct TurnInFlight(Arc<AtomicUsize>);

impl Drop for TurnInFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl LocalMemory {
    /// Mark a turn in flight until the returned guard is dropped.
    pub fn turn_in_flight(&self) -> TurnInFlight {
        self.turns.fetch_add(1, Ordering::AcqRel);
        TurnInFlight(self.turns.clone())
    }

    /// Wait while turns are in flight, for up to [`MAX_YIELD`].
    fn yield_to_turns(&self) {
        let waiting = Instant::now();
        while self.turns.load(Ordering::Acquire) > 0
            && waiting.elapsed() < MAX_YIELD
            && !self.signal.stopped()
        {
            std::thread::sleep(YIELD_POLL);
        }
    }

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
                    let mut progress = PassProgress::new();
                    let pass = memory.embed_pending(|done| progress.after_batch(&memory, done));
                    match pass {
                        Ok(done) => {
                            progress.finished(done);
                            backoff = Duration::from_secs(1);
                        }
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
        // Another host's entry may commit after this host embedded past its row number:
        // on a shared store every pass looks from the start.
        let mut after = if self.store.shared() {
            0
        } else {
            self.embedded_through.load(Ordering::Acquire)
        };
        loop {
            if self.signal.stopped() {
                break;
            }
            let pending = self.store.unembedded(&provider, &model, after, batch)?;
            let Some(last) = pending.last() else { break };
            after = last.seq;
            let hashes: Vec<String> = pending.iter().map(|p| p.content_hash.clone()).collect();
            let cached = self.store.cached_vectors(&provider, &model, &hashes)?;
            let mut unique = std::collections::HashSet::new();
            let missing: Vec<&Unembedded> = pending
                .iter()
                .filter(|p| !cached.contains_key(&p.content_hash))
                .filter(|p| unique.insert(p.content_hash.as_str()))
                .collect();
            let texts: Vec<String> = missing.iter().map(|p| p.content.clone()).collect();
            if !texts.is_empty() {
                self.yield_to_turns();
            }
            let fresh = embedder
                .embed_in_background(&texts)
                .map_err(|e| MemoryError::Unavailable(e.to_string()))?;
            let mut vectors: HashMap<String, Vec<f32>> = cached;
            for (item, vector) in missing.iter().zip(fresh) {
                vectors.insert(item.content_hash.clone(), vector);
            }
            let rows: Vec<VectorRow> = pending
                .iter()
                .filter_map(|p| {
                    vectors
                        .get(&p.content_hash)
                        .map(|v| (p.seq, p.content_hash.clone(), v.clone()))
                })
                .collect();
            let capacity = self.config.embeddings.cache_entries;
            self.store
                .save_vectors(&provider, &model, rows, capacity)
                .wait()?;
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

    /// Whether the embeddings provider answers, asked to embed one short text: a forced
    /// reindex asks before it drops the vectors, so a provider that is down or failing costs
    /// none of them (until 2026-12-02 it cost all of them; found by an operator's test).
    pub fn check_embedder(&self) -> Result<(), MemoryError> {
        let Some(embedder) = &self.embedder else {
            return Ok(());
        };
        embedder
            .embed(&["Is the embeddings provider there?".to_string()])
            .map(|_| ())
            .map_err(|e| MemoryError::Unavailable(e.to_string()))
    }

    /// Drop every stored vector so that the next embedding pass recomputes them all.
    pub fn clear_vectors(&self) -> Result<(), MemoryError> {
        self.store.clear_vectors().wait()?;
        self.embedded_through.store(0, Ordering::Release);
        Ok(())
    }

    /// Live entries without a vector from the configured model.
    pub fn embedding_backlog(&self) -> Result<u64, MemoryError> {
        match self.model() {
            None => Ok(0),
            Some((provider, model)) => Ok(self.store.embedding_backlog(&provider, &model)?),
        }
    }

    /// The vector index, loaded from the store on first use (commands that never recall
    /// never pay for it).
    pub(super) fn index(&self) -> &VectorIndex {
        self.index_loaded.get_or_init(|| {
            if let Err(e) = self.load_index() {
                tracing::warn!(
                    "cannot load stored vectors; they are rebuilt as entries are embedded: {e}"
                );
            }
        });
        &self.index
    }

    /// The vectors of the configured model of entries `seqs`: from the index, and from the
    /// store for those it no longer holds in memory (older than a user's window). Entries
    /// without one are left out; a failed store read is logged and leaves its entries out.
    pub(super) fn vectors_of(&self, seqs: &[i64]) -> HashMap<i64, Vec<f32>> {
        let index = self.index();
        let mut found = HashMap::with_capacity(seqs.len());
        let mut older = Vec::new();
        for &seq in seqs {
            match index.vector(seq) {
                Some(vector) => {
                    found.insert(seq, vector);
                }
                None => older.push(seq),
            }
        }
        if let (false, Some((provider, model))) = (older.is_empty(), self.model()) {
            match self.store.stored_vectors(&provider, &model, &older) {
                Ok(stored) => found.extend(stored),
                Err(e) => tracing::warn!("cannot read stored vectors: {e}"),
            }
        }
        found
    }

    /// The vector index with the vectors other hosts saved since it last looked (a shared
    /// store; on a store only this process writes, the index is already whole).
    pub(super) fn current_index(&self) -> &VectorIndex {
        let index = self.index();
        if self.store.shared()
            && let Err(e) = self.catch_up_index()
        {
            tracing::warn!("cannot read the vectors other hosts saved: {e}");
        }
        index
    }

    /// Add the vectors saved to a shared store since the index's mark.
    fn catch_up_index(&self) -> Result<(), MemoryError> {
        let Some((provider, model)) = self.model() else {
            return Ok(());
        };
        loop {
            let mark = self.index_mark.load(Ordering::Acquire);
            let (saved, next) =
                self.store
                    .vectors_saved_after(&provider, &model, mark, CATCH_UP_BATCH)?;
            for vector in &saved {
                self.index.upsert(vector.seq, &vector.scope, &vector.vector);
            }
            self.index_mark.fetch_max(next, Ordering::AcqRel);
            if saved.len() < CATCH_UP_BATCH {
                return Ok(());
            }
        }
    }

    fn load_index(&self) -> Result<(), MemoryError> {
        let Some((provider, model)) = self.model() else {
            return Ok(());
        };
        // The mark before the visit: a save committing during it is read again later.
        self.index_mark
            .store(self.store.vector_mark()?, Ordering::Release);
        let index = &self.index;
        self.store
            .visit_vectors(&provider, &model, &mut |seq, scope, vector| {
                index.upsert(seq, &scope, &vector)
            })?;
        Ok(())
    }
}

/// How often a long background pass says how far it got.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// What a background embedding pass says of itself. A pass that ends within
/// [`PROGRESS_EVERY`] (a turn's episodes) says nothing; a long one (a model change
/// re-embeds all of memory) logs how many it embedded of how many, and at what rate, every
/// ten seconds, then when it is done (until 2026-12-02 only `cairn memory stats` showed it;
/// found by an operator's test).
struct PassProgress {
    started: Instant,
    reported: Option<Instant>,
    /// The pass's whole work, counted at its first report.
    total: Option<u64>,
}

impl PassProgress {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            reported: None,
            total: None,
        }
    }

    /// A batch was stored: `done` embedded so far in this pass.
    fn after_batch(&mut self, memory: &LocalMemory, done: u64) {
        if self.reported.unwrap_or(self.started).elapsed() < PROGRESS_EVERY {
            return;
        }
        let total = *self
            .total
            .get_or_insert_with(|| done + memory.embedding_backlog().unwrap_or(0));
        let rate = done as f64 / self.started.elapsed().as_secs_f64().max(1e-3);
        tracing::info!("embedding memories in the background: {done} of {total} ({rate:.0}/s)");
        self.reported = Some(Instant::now());
    }

    /// The pass ended having embedded `done`.
    fn finished(&self, done: u64) {
        if self.reported.is_some() {
            tracing::info!(
                "embedded {done} memories in the background in {:.0} s",
                self.started.elapsed().as_secs_f64()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::ProviderKind;
    use crate::{MemoryConfig, MemoryKind, NewMemory};

    fn hashed_memory(dir: &std::path::Path) -> Arc<LocalMemory> {
        let mut config = MemoryConfig::default();
        config.embeddings.provider = ProviderKind::Hash;
        LocalMemory::open(dir, config).expect("open memory")
    }

    #[test]
    fn a_long_pass_counts_its_whole_work_at_its_first_report_and_a_short_one_says_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let memory = hashed_memory(dir.path());
        for text in ["one thing", "another thing", "a third thing"] {
            memory
                .store_blocking(NewMemory::new(MemoryKind::Episode, text))
                .expect("store");
        }
        let mut short = PassProgress::new();
        short.after_batch(&memory, 1);
        assert!(short.reported.is_none() && short.total.is_none());
        let mut long = PassProgress::new();
        long.started -= PROGRESS_EVERY;
        long.after_batch(&memory, 2);
        assert!(long.reported.is_some());
        assert_eq!(long.total, Some(5), "the 2 done and the 3 still to embed");
    }

    #[test]
    fn memory_holds_a_window_of_vectors_and_older_candidates_are_scored_from_the_store() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = MemoryConfig::default();
        config.embeddings.provider = ProviderKind::Hash;
        config.recall.scan_limit = 3;
        let memory = LocalMemory::open(dir.path(), config).expect("open memory");
        let alice = crate::Scope {
            user_id: Some("alice".into()),
            ..crate::Scope::default()
        };
        let texts = [
            "Alice keeps bees on the roof",
            "Alice reads before sleeping",
            "Alice cycles to work",
            "Alice plays the cello",
            "Alice speaks Portuguese",
        ];
        for text in texts {
            let mut fact = NewMemory::new(MemoryKind::Fact, text);
            fact.scope = alice.clone();
            memory.store_blocking(fact).expect("store");
        }
        assert_eq!(memory.embed_pending(|_| {}).expect("embed"), 5);
        assert_eq!(
            memory.index().len(),
            3,
            "only the newest three stay in memory"
        );
        let hits = memory
            .recall(&crate::RecallQuery {
                text: "who keeps bees".into(),
                scope: alice,
                limit: 5,
                ..crate::RecallQuery::default()
            })
            .expect("recall");
        let bees = hits
            .iter()
            .find(|hit| hit.entry.content.contains("bees"))
            .expect("the oldest memory is found by its words");
        assert!(
            bees.explain.cosine.is_some_and(|c| c > 0.0),
            "its vector was read from the store: {:?}",
            bees.explain
        );
    }

    #[test]
    fn the_background_embedder_yields_to_a_turn_in_flight_but_not_for_ever() {
        let dir = tempfile::tempdir().expect("temp dir");
        let memory = hashed_memory(dir.path());
        memory
            .store_blocking(NewMemory::new(MemoryKind::Fact, "Ann grows tomatoes"))
            .expect("store");
        let turn = memory.turn_in_flight();
        let started = Instant::now();
        assert_eq!(memory.embed_pending(|_| {}).expect("embed"), 1);
        assert!(
            started.elapsed() >= MAX_YIELD,
            "it waited for the turn before embedding"
        );
        drop(turn);
        assert_eq!(memory.turns.load(Ordering::Acquire), 0);
        memory
            .store_blocking(NewMemory::new(MemoryKind::Fact, "Ann plants basil"))
            .expect("store");
        assert_eq!(memory.embed_pending(|_| {}).expect("embed"), 1);
    }
}
