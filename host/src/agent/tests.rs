//! A turn's decisions that need a journal failing on purpose: what the binary's tests
//! cannot time (a read failing at the one moment a retried batch asks it).

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::store::journal::{JournalStore, Pending, SqliteJournal};
use crate::store::writer::Receipt;

use super::*;
use crate::buffer::{BufferConfig, NewBatch, NewMessage, Route};
use crate::journal::{Event, JournalConfig, NewEvent};
use crate::llm::{Completion, LlmError};
use crate::store::StorageError;

/// A data dir's journal whose first `failures` lookups of an earlier event fail as a
/// database outage does.
struct OutageOnLookup {
    inner: SqliteJournal,
    failures: AtomicUsize,
}

impl JournalStore for OutageOnLookup {
    fn append(&self, event: NewEvent) -> Receipt<i64> {
        self.inner.append(event)
    }
    fn subscribe(&self, id: &str, patterns: &[String]) -> Receipt<i64> {
        self.inner.subscribe(id, patterns)
    }
    fn cursor(&self, subscriber: &str) -> Result<Option<i64>, StorageError> {
        self.inner.cursor(subscriber)
    }
    fn take_rewind(&self, subscriber: &str) -> Receipt<Option<i64>> {
        self.inner.take_rewind(subscriber)
    }
    fn retries(&self, subscriber: &str) -> Result<Vec<Event>, StorageError> {
        self.inner.retries(subscriber)
    }
    fn settle_retry(
        &self,
        subscriber: &str,
        seq: i64,
        failure: Option<(String, u32)>,
    ) -> Receipt<()> {
        self.inner.settle_retry(subscriber, seq, failure)
    }
    fn last_dead_letter(&self, subscriber: &str) -> Result<Option<i64>, StorageError> {
        self.inner.last_dead_letter(subscriber)
    }
    fn clear_dead_letters(&self, subscriber: &str, seqs: Vec<i64>) -> Receipt<usize> {
        self.inner.clear_dead_letters(subscriber, seqs)
    }
    fn prune(&self, before_ms: i64) -> Receipt<usize> {
        self.inner.prune(before_ms)
    }
    fn pending(
        &self,
        after: i64,
        patterns: &[String],
        limit: usize,
    ) -> Result<Pending, StorageError> {
        self.inner.pending(after, patterns, limit)
    }
    fn find_event(
        &self,
        topic: &str,
        since_ms: i64,
        field: &str,
        value: i64,
    ) -> Result<Option<Event>, StorageError> {
        let left = self.failures.load(Ordering::SeqCst);
        if left > 0 {
            self.failures.store(left - 1, Ordering::SeqCst);
            return Err(StorageError::ConnectionLost(
                "the server closed the connection".into(),
            ));
        }
        self.inner.find_event(topic, since_ms, field, value)
    }
    fn advance(&self, subscriber: &str, seq: i64) -> Receipt<()> {
        self.inner.advance(subscriber, seq)
    }
    fn dead_letter(
        &self,
        subscriber: &str,
        event: &Event,
        error: &str,
        attempts: u32,
    ) -> Receipt<()> {
        self.inner.dead_letter(subscriber, event, error, attempts)
    }
}

/// A model that counts how often it is asked.
#[derive(Default)]
struct CountingModel {
    asked: AtomicUsize,
}

impl LlmProvider for CountingModel {
    fn name(&self) -> &str {
        "counting"
    }
    fn model(&self) -> &str {
        "counting-1"
    }
    fn complete(&self, request: &CompletionRequest) -> Result<Completion, LlmError> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        crate::llm::offline::OfflineProvider.complete(request)
    }
}

/// A model whose every answer is `words` words long.
struct LongModel {
    words: usize,
}

impl LlmProvider for LongModel {
    fn name(&self) -> &str {
        "long"
    }
    fn model(&self) -> &str {
        "long-1"
    }
    fn complete(&self, request: &CompletionRequest) -> Result<Completion, LlmError> {
        let mut answer = crate::llm::offline::OfflineProvider.complete(request)?;
        answer.content = "\"quoted\" word ".repeat(self.words);
        Ok(answer)
    }
}

#[tokio::test]
async fn a_reply_longer_than_the_journal_takes_is_journaled_cut_so_a_retry_finds_it() {
    let data = tempfile::tempdir().expect("data dir");
    let buffer = Arc::new(Buffer::open(data.path(), BufferConfig::default()).expect("buffer"));
    let config = JournalConfig {
        max_payload_bytes: 4096,
        ..JournalConfig::default()
    };
    let journal = Arc::new(Journal::open(data.path(), config).expect("journal"));
    let id = routed_batch(&buffer).await;
    let batch = buffer
        .claim_main_batch(None)
        .await
        .expect("claim")
        .expect("a batch");
    let agent = Agent::new(
        buffer.clone(),
        Some(journal.clone()),
        None,
        Arc::new(LongModel { words: 1000 }),
        BTreeMap::new(),
        AgentConfig::default(),
    );
    let (_stop, stopped) = watch::channel(false);
    agent.main_turn(batch, stopped).await;

    let answered = journal
        .find_event("agent.response", 0, "batch_id", id)
        .expect("read the journal")
        .expect("the reply is journaled: a retry after a crash would answer again without it");
    let payload: serde_json::Value = serde_json::from_str(&answered.payload).expect("json");
    assert_eq!(payload["reply"]["text_bytes"], 14_000, "{payload}");
    assert!(answered.payload.len() <= 4096, "{}", answered.payload.len());
}

/// A message from `ada` on the `cli` channel, routed to the main agent as one batch: its id.
async fn routed_batch(buffer: &Buffer) -> i64 {
    let said = NewMessage {
        channel: "cli".into(),
        sender: "ada".into(),
        conversation: "cli".into(),
        payload: r#"{"text":"hello"}"#.into(),
        priority: None,
        dedup_key: None,
        said_at: None,
    };
    let message = buffer.push_async(said).await.expect("push");
    let batch = NewBatch {
        channel: "cli".into(),
        conversation: "cli".into(),
        priority: 10,
        route: Route::Main,
        rule: None,
        message_ids: vec![message],
    };
    buffer.route(batch).await.expect("route")
}

/// A routed batch taken by a first attempt (whose host then dies): its id.
async fn begun_batch(buffer: &Buffer) -> i64 {
    let id = routed_batch(buffer).await;
    buffer
        .claim_main_batch(None)
        .await
        .expect("claim")
        .expect("a batch");
    id
}

/// The batch's next attempt after its host died: queued again, taken and answered by a
/// model that counts how often it is asked (returned), without a channel.
async fn next_attempt(
    buffer: &Arc<Buffer>,
    journal: Arc<Journal>,
    memory: Option<Arc<MemoryService>>,
) -> Arc<CountingModel> {
    buffer.requeue_interrupted().await.expect("requeue");
    let retried = buffer
        .claim_main_batch(None)
        .await
        .expect("claim")
        .expect("again");
    assert_eq!(retried.attempt, 2);
    let model = Arc::new(CountingModel::default());
    let agent = Agent::new(
        buffer.clone(),
        Some(journal),
        memory,
        model.clone(),
        BTreeMap::new(),
        AgentConfig::default(),
    );
    let (_stop, stopped) = watch::channel(false);
    agent.main_turn(retried, stopped).await;
    model
}

/// An event about batch `id` in the session `cli:cli` of `ada`, `reply` in its payload
/// when given.
fn batch_event(topic: &str, id: i64, reply: Option<&serde_json::Value>) -> NewEvent {
    let mut payload = serde_json::json!({ "batch_id": id });
    if let Some(reply) = reply {
        payload["reply"] = reply.clone();
    }
    NewEvent {
        topic: topic.into(),
        payload: payload.to_string(),
        source: "host".into(),
        session_id: Some("cli:cli".into()),
        user_id: Some("ada".into()),
        ..NewEvent::default()
    }
}

/// The texts of the assistant's episodes `local` holds.
fn assistant_episodes(local: &crate::memory::LocalMemory) -> Vec<String> {
    let filter = cairn_vocab::memory::ListFilter {
        limit: 10,
        ..Default::default()
    };
    let listed = local.list(&filter).expect("list");
    listed
        .into_iter()
        .filter(|e| e.tags.iter().any(|t| t == "assistant"))
        .map(|e| e.content)
        .collect()
}

#[tokio::test]
async fn a_retried_batch_answered_before_is_not_asked_again_while_the_journal_is_away() {
    let data = tempfile::tempdir().expect("data dir");
    let buffer = Arc::new(Buffer::open(data.path(), BufferConfig::default()).expect("buffer"));
    let store = OutageOnLookup {
        inner: SqliteJournal::open(data.path()).expect("journal"),
        failures: AtomicUsize::new(3),
    };
    let journal = Arc::new(Journal::over(Box::new(store), JournalConfig::default()));
    // The first attempt answered and its host died before finishing the batch.
    let id = begun_batch(&buffer).await;
    let reply = serde_json::json!({"text": "said before", "model": "m"});
    let answered = batch_event("agent.response", id, Some(&reply));
    journal.append(answered).await.expect("journal the reply");

    let model = next_attempt(&buffer, journal, None).await;
    assert_eq!(
        model.asked.load(Ordering::SeqCst),
        0,
        "the model was asked a second time"
    );
    // No channel runs here: the earlier reply is the one kept for the next delivery.
    let kept = buffer
        .batch(id)
        .expect("read")
        .expect("the batch")
        .kept_reply;
    assert_eq!(kept, Some(reply.to_string()));
}

#[tokio::test]
async fn a_reply_kept_before_its_delivery_is_journaled_and_remembered_by_the_next_attempt() {
    let data = tempfile::tempdir().expect("data dir");
    let buffer = Arc::new(Buffer::open(data.path(), BufferConfig::default()).expect("buffer"));
    let journal = Arc::new(Journal::open(data.path(), JournalConfig::default()).expect("journal"));
    let (memory, local) = hash_memory(data.path());
    // The first attempt received the batch, kept its reply on it and died before
    // journaling the reply.
    let id = begun_batch(&buffer).await;
    let received = batch_event("message.received", id, None);
    journal.append(received).await.expect("journal the receipt");
    let reply = serde_json::json!({"text": "The boat is at pier seven.", "model": "m"});
    buffer
        .keep_reply(id, reply.to_string())
        .await
        .expect("keep the reply");

    let model = next_attempt(&buffer, journal.clone(), Some(memory)).await;
    assert_eq!(model.asked.load(Ordering::SeqCst), 0, "asked again");
    let answered = journal
        .find_event("agent.response", 0, "batch_id", id)
        .expect("read the journal")
        .expect("the kept reply is journaled");
    let payload: serde_json::Value = serde_json::from_str(&answered.payload).expect("json");
    assert_eq!(payload["reply"], reply);
    let episodes = assistant_episodes(&local);
    assert!(
        episodes.iter().any(|e| e == "The boat is at pier seven."),
        "the reply's episode is saved: {episodes:?}"
    );
}

/// Memory over `data` with the lexical `hash` embedder: the service and its local store.
fn hash_memory(data: &std::path::Path) -> (Arc<MemoryService>, Arc<crate::memory::LocalMemory>) {
    let stores = crate::config::Storage::Sqlite
        .memory(data)
        .expect("memory.db");
    let mut config = crate::memory::MemoryConfig::default();
    config.embeddings.provider = crate::memory::embed::ProviderKind::Hash;
    let local = crate::memory::LocalMemory::over(data, config, stores.entries).expect("memory");
    let memory = Arc::new(MemoryService::new(local.clone(), stores.sessions));
    (memory, local)
}

#[tokio::test]
async fn a_batch_finished_with_an_earlier_reply_saves_its_episode_and_journals_the_turn() {
    let data = tempfile::tempdir().expect("data dir");
    let buffer = Arc::new(Buffer::open(data.path(), BufferConfig::default()).expect("buffer"));
    let journal = Arc::new(Journal::open(data.path(), JournalConfig::default()).expect("journal"));
    let (memory, local) = hash_memory(data.path());
    // The first attempt answered, journaled its reply and died before saving the reply's
    // episode or finishing the batch.
    let id = begun_batch(&buffer).await;
    let reply = serde_json::json!({"text": "The boat is at pier seven.", "model": "m"});
    let answered = batch_event("agent.response", id, Some(&reply));
    journal.append(answered).await.expect("journal the reply");

    let model = next_attempt(&buffer, journal.clone(), Some(memory)).await;
    assert_eq!(model.asked.load(Ordering::SeqCst), 0, "asked again");
    let completed = journal
        .find_event("turn.completed", 0, "batch_id", id)
        .expect("read the journal");
    assert!(completed.is_some(), "the turn is journaled");
    let episodes = assistant_episodes(&local);
    assert!(
        episodes.iter().any(|e| e == "The boat is at pier seven."),
        "the reply's episode is saved: {episodes:?}"
    );
}
