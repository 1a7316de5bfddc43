//! The agent: the main agent takes the most urgent queued batch, answers it through the
//! LLM provider and delivers the reply through the channel the batch came from; the task
//! worker runs spawned batches as sub-agent turns and records their results (the main agent
//! is not told).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, watch};

use crate::buffer::{Batch, BatchStatus, Buffer, BufferError, BufferedMessage, TaskStatus};
use crate::journal::{Journal, host_event};
use crate::lifecycle::Lifecycle;
use crate::llm::{self, ChatMessage, CompletionRequest, LlmConfig, LlmProvider, Usage};
use crate::memory::local::MAX_CONTENT_BYTES;
use crate::memory::local::TurnInFlight;
use crate::memory::{MemoryError, MemoryKind, MemoryService, NewMemory, Scope};
use crate::plugin::runtime::CallError;
use crate::plugin::supervisor::PluginHandle;
use cairn_vocab::channel::OutboundMessage;

pub mod context;
mod earlier;
mod response_event;

use crate::store::memory::SessionChoice;
use context::{Assembled, ContextChain, QueryEmbedding, TurnInput};
use earlier::EarlierReceipt;

/// How a turn ended: the batch's status, the reply (even when its delivery failed) and
/// the error, if any.
struct TurnOutcome {
    status: BatchStatus,
    reply: Option<String>,
    error: Option<String>,
    /// Tokens the completion used, when the model answered.
    usage: Option<Usage>,
    /// How long the LLM call took (what the turn spent outside the host).
    llm_time: Duration,
    /// How long delivering the reply through the channel plugin took.
    deliver_time: Duration,
}

/// A main turn being recorded: its batch, session, user, and where its time went.
struct Turn<'a> {
    batch: &'a Batch,
    /// None when the turn does not know its session (a kept reply's redelivery whose first
    /// attempt's `agent.response` cannot be read).
    session_id: Option<&'a str>,
    user: Option<String>,
    started: std::time::Instant,
    timings: TurnTimings,
}

/// What the model answered a turn, and how long it took.
struct Answer {
    completion: Result<llm::Completion, llm::LlmError>,
    llm_time: Duration,
}

/// A model's reply to keep: the batch it answers, its session and user, the payload
/// delivered (as JSON, for `agent.response`) and the reply's text.
struct Reply<'a> {
    batch: &'a Batch,
    session_id: &'a str,
    user: Option<&'a str>,
    reply: &'a serde_json::Value,
    text: &'a str,
}

/// How long a reply waits before it asks again a channel that was restarting (a restart
/// spends none of the reply's `deliver_attempts`).
const CHANNEL_RESTART_POLL: Duration = Duration::from_millis(20);
/// How often a reply's delivery is tried again while a store its channel called is away.
const STORE_AWAY_POLL: Duration = Duration::from_millis(250);

/// Where a turn's time went before its outcome was recorded, journaled with
/// `turn.completed` so an operator (and the bench) can see which phase is slow.
#[derive(Debug, Clone, Copy, Default)]
struct TurnTimings {
    /// Finding or opening the session.
    session: Duration,
    /// Assembling the context, the query's embedding included.
    context: Duration,
    /// The query's embedding (model time, not the host's).
    embedding: context::ModelTime,
}

/// Agent settings (`agent:` in `cairn.yaml`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// The LLM provider.
    pub llm: LlmConfig,
    /// The main agent's system prompt.
    pub system_prompt: String,
    /// Attempts to deliver a reply before the batch is marked failed (default 3); a channel
    /// waiting out its restart backoff is waited for and spends none.
    pub deliver_attempts: u32,
    /// Longest text of one message put in a prompt, in bytes (default 4000).
    pub max_message_chars: usize,
    /// Episodes of the current session put in a turn's prompt (default 8; 0 = none).
    pub history_turns: usize,
    /// Core memories of the user put in a turn's prompt (default 5; 0 = none).
    pub core_memories: usize,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            llm: LlmConfig::default(),
            system_prompt: "You are Cairn, a helpful agent. Answer the user's messages.".into(),
            deliver_attempts: 3,
            max_message_chars: 4000,
            history_turns: 8,
            core_memories: 5,
        }
    }
}

/// The text of a message for a prompt: `payload.text` when it is a string, else the JSON.
pub fn message_text(message: &BufferedMessage, max_chars: usize) -> String {
    let text = serde_json::from_str::<serde_json::Value>(&message.payload)
        .ok()
        .and_then(|payload| {
            payload
                .get("text")
                .and_then(|t| t.as_str())
                .map(str::to_string)
        })
        .unwrap_or_else(|| message.payload.clone());
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// The user turn of a batch: every message with its sender, in order.
fn batch_prompt(batch: &Batch, max_chars: usize) -> String {
    let lines: Vec<String> = batch
        .messages
        .iter()
        .map(|m| format!("{}: {}", m.sender, message_text(m, max_chars)))
        .collect();
    if lines.len() == 1 {
        lines.join("")
    } else {
        format!(
            "{} messages in {}:\n{}",
            lines.len(),
            batch.conversation,
            lines.join("\n")
        )
    }
}

/// Runs turns for the main agent and for spawned tasks.
pub struct Agent {
    buffer: Arc<Buffer>,
    journal: Option<Arc<Journal>>,
    memory: Option<Arc<MemoryService>>,
    context: Arc<ContextChain>,
    lifecycle: Option<Arc<Lifecycle>>,
    llm: Arc<dyn LlmProvider>,
    channels: BTreeMap<String, PluginHandle>,
    config: AgentConfig,
}

impl Agent {
    /// An agent answering from `buffer` through `llm`, delivering through `channels`
    /// (channel plugin id → handle), journaling each turn when a journal is given and
    /// remembering (and recalling from) earlier conversations when memory is given.
    pub fn new(
        buffer: Arc<Buffer>,
        journal: Option<Arc<Journal>>,
        memory: Option<Arc<MemoryService>>,
        llm: Arc<dyn LlmProvider>,
        channels: BTreeMap<String, PluginHandle>,
        config: AgentConfig,
    ) -> Self {
        let context = Arc::new(ContextChain::for_memory(
            memory.clone(),
            config.history_turns,
            config.core_memories,
        ));
        Self {
            buffer,
            journal,
            memory,
            context,
            lifecycle: None,
            llm,
            channels,
            config,
        }
    }

    /// Ask `lifecycle` for each turn's session (without one, every batch of a conversation
    /// shares one session named after it).
    pub fn with_lifecycle(mut self, lifecycle: Arc<Lifecycle>) -> Self {
        self.lifecycle = Some(lifecycle);
        self
    }

    async fn complete(&self, system: &str, user: String) -> Result<llm::Completion, llm::LlmError> {
        let request = CompletionRequest {
            messages: vec![
                ChatMessage::new("system", system),
                ChatMessage::new("user", user),
            ],
            ..CompletionRequest::default()
        };
        let llm = self.llm.clone();
        tokio::task::spawn_blocking(move || llm.complete(&request))
            .await
            .unwrap_or_else(|e| {
                Err(llm::LlmError::Unavailable {
                    provider: self.llm.name().to_string(),
                    message: format!("the provider panicked: {e}"),
                })
            })
    }

    /// Answer one main batch and deliver the reply; records the outcome on the batch and
    /// journals `message.received` (per message), `agent.response` and `turn.completed`.
    /// A batch an earlier attempt received (see [`Batch::received_at`]) is not received again;
    /// one an earlier attempt answered delivers that reply (see [`earlier`]).
    pub async fn main_turn(&self, batch: Batch, mut stop: watch::Receiver<bool>) {
        if let Some(earlier) = self.earlier_reply(&batch).await {
            self.deliver_earlier_reply(&batch, earlier).await;
            return;
        }
        let started = std::time::Instant::now();
        let _in_flight = self.turn_in_flight();
        let user = batch.messages.last().map(|m| m.sender.clone());
        let received_earlier = self.received_earlier(&batch).await;
        let (text, query, session) = self.open_turn(&batch, user.as_deref(), &received_earlier);
        let session_id = session.id.clone();
        let mut timings = TurnTimings {
            session: started.elapsed(),
            ..TurnTimings::default()
        };
        // The batch's journal events and episodes are written (once a new session's row is)
        // while the turn reads its context and asks the model; all are on disk before the
        // reply is kept.
        // The conversation's history ends where this batch's messages begin: now, or when
        // an earlier attempt received them (they are not quoted back as earlier turns).
        let history_before = received_earlier
            .as_ref()
            .map_or_else(crate::store::now_ms, |earlier| earlier.began);
        let received = async {
            Self::await_session(session).await;
            if received_earlier.is_none() {
                self.receive(&batch, &session_id, history_before).await
            }
        };
        let ((), (context, answer)) = tokio::join!(received, async {
            let assembling = std::time::Instant::now();
            let context = self
                .context_for(
                    &batch,
                    &session_id,
                    user.clone(),
                    history_before,
                    text,
                    query,
                )
                .await;
            timings.context = assembling.elapsed();
            timings.embedding = context.model_time;
            let answer = self.ask(&batch, &context, &mut stop).await;
            (context, answer)
        });
        let Some(answer) = answer else {
            tracing::info!(
                batch = batch.id,
                "stopping before the LLM provider answered: the batch is answered after the next start"
            );
            return;
        };
        let outcome = self
            .deliver_and_keep(&batch, &session_id, user.as_deref(), answer)
            .await;
        let turn = Turn {
            batch: &batch,
            session_id: Some(&session_id),
            user,
            started,
            timings,
        };
        self.record(turn, &context.memories, outcome).await;
    }

    /// Record how a main batch ended, waiting out a full disk or a database outage: a batch
    /// left `running` by a host that lives on is renewed, never taken over, so its
    /// conversation would wait behind it until that host stopped.
    async fn record_outcome(
        &self,
        batch: i64,
        status: BatchStatus,
        reply: Option<String>,
        error: Option<String>,
    ) {
        let recorded = crate::retry::while_passing(
            "record a turn's outcome",
            crate::buffer::BufferError::is_passing,
            || {
                self.buffer
                    .finish_batch(batch, status, reply.clone(), error.clone())
            },
        )
        .await;
        if let Err(e) = recorded {
            tracing::error!(batch, "cannot record the turn's outcome: {e}");
        }
    }

    /// Receive a batch: save its messages as episodes in one commit, then journal their
    /// `message.received` in one commit, then mark the batch received in the buffer.
    async fn receive(&self, batch: &Batch, session_id: &str, began: i64) {
        // Episodes first: a `message.received` in the journal then means they are saved,
        // which is how an attempt after a crash before the mark tells (`received_earlier`).
        self.remember(session_id, self.user_episodes(batch, session_id))
            .await;
        self.journal_received(batch, session_id).await;
        self.mark_received(batch.id, began).await;
    }

    /// Mark a batch received by the attempt that began at `began` (a failure is logged: a
    /// later attempt then looks in the journal, or, for a task, remembers its messages
    /// again).
    async fn mark_received(&self, batch: i64, began: i64) {
        if let Err(e) = self.buffer.mark_received(batch, began).await {
            tracing::warn!(batch, "cannot mark the batch received: {e}");
        }
    }

    /// The episodes of a batch's messages, when episodes are saved.
    fn user_episodes(&self, batch: &Batch, session_id: &str) -> Vec<NewMemory> {
        batch
            .messages
            .iter()
            .filter_map(|message| {
                let text = message_text(message, self.config.max_message_chars);
                let id = episode_id(
                    batch,
                    &format!("user {} {}", message.id, message.received_at),
                );
                let mut episode = self.episode(id, session_id, &message.sender, "user", text)?;
                episode.valid_from = Some(message.said_at());
                Some(episode)
            })
            .collect()
    }

    /// Journal `message.received` for each message of a batch, in order, in one commit.
    async fn journal_received(&self, batch: &Batch, session_id: &str) {
        let Some(journal) = &self.journal else {
            return;
        };
        let events = batch
            .messages
            .iter()
            .map(|message| {
                let payload = serde_json::json!({
                    "message_id": message.id,
                    "batch_id": batch.id,
                    "channel": message.channel,
                    "conversation": message.conversation,
                    "sender": message.sender,
                    "text": message_text(message, self.config.max_message_chars),
                    "said_at": message.said_at(),
                });
                host_event(
                    "message.received",
                    payload,
                    Some(session_id.to_string()),
                    Some(message.sender.clone()),
                )
            })
            .collect();
        journal.emit_all(events).await;
    }

    /// Hold the background embedder back while a turn runs (see [`TurnInFlight`]).
    fn turn_in_flight(&self) -> Option<TurnInFlight> {
        self.memory
            .as_ref()
            .map(|memory| memory.local().turn_in_flight())
    }

    /// Begin a turn: the text its context is looked up by (the batch's messages), that
    /// text's embedding started at once so the model works while the host opens the session
    /// and reads the rest of the context, and the session.
    fn open_turn(
        &self,
        batch: &Batch,
        user: Option<&str>,
        received_earlier: &Option<EarlierReceipt>,
    ) -> (String, Option<Arc<QueryEmbedding>>, SessionChoice) {
        let text: Vec<String> = batch
            .messages
            .iter()
            .map(|m| message_text(m, self.config.max_message_chars))
            .collect();
        let text = text.join("\n");
        let query = self.context.start_embedding(&text);
        // A batch received earlier is answered in the session its question went to (the
        // lifecycle keeps that session open meanwhile), not in one begun since.
        let session = match received_earlier.as_ref().and_then(|e| e.session.as_deref()) {
            Some(id) => SessionChoice::recorded(id),
            None => self.session_for(batch, user),
        };
        (text, query, session)
    }

    /// Wait until a new session's row is on disk (its first events name it); a session that
    /// cannot be recorded is logged and the turn goes on.
    async fn await_session(session: SessionChoice) {
        if let Err(e) = session.recorded.await {
            tracing::warn!(session = %session.id, "cannot record the session: {e}");
        }
    }

    /// The context of a turn; the session's episodes recorded from `history_before` on are the
    /// batch's own messages, left out of its history. `query` is the text's embedding on its
    /// way, when the chain started one.
    async fn context_for(
        &self,
        batch: &Batch,
        session_id: &str,
        user: Option<String>,
        history_before: i64,
        text: String,
        query: Option<Arc<QueryEmbedding>>,
    ) -> Assembled {
        let turn = TurnInput {
            session_id: session_id.to_string(),
            user,
            text,
            query,
            own_messages: batch.messages.len(),
            history_before,
            said_at: batch
                .messages
                .last()
                .map_or(history_before, |m| m.said_at()),
        };
        let chain = self.context.clone();
        tokio::task::spawn_blocking(move || chain.assemble(&turn))
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(session = session_id, "context providers panicked: {e}");
                Assembled::default()
            })
    }

    /// Prompt the LLM with the batch and its context (waiting out an outage, see
    /// [`Agent::complete_through_outage`]); none when the host stops meanwhile.
    async fn ask(
        &self,
        batch: &Batch,
        context: &Assembled,
        stop: &mut watch::Receiver<bool>,
    ) -> Option<Answer> {
        let prompt = batch_prompt(batch, self.config.max_message_chars);
        let mut system = self.config.system_prompt.clone();
        for section in &context.sections {
            system.push_str("\n\n");
            system.push_str(section);
        }
        let asked = std::time::Instant::now();
        let work = format!("batch {}", batch.id);
        let completion = self
            .complete_through_outage(&system, &prompt, &work, stop)
            .await?;
        Some(Answer {
            completion,
            llm_time: asked.elapsed(),
        })
    }

    /// Ask the LLM once; when the host begins stopping meanwhile, wait for the answer up to
    /// [`STOP_GRACE`], then leave it (none: the work resumes on the next start).
    async fn complete_unless_stopped(
        &self,
        system: &str,
        prompt: &str,
        stop: &mut watch::Receiver<bool>,
    ) -> Option<Result<llm::Completion, llm::LlmError>> {
        let asking = self.complete(system, prompt.to_string());
        tokio::pin!(asking);
        tokio::select! {
            answer = &mut asking => Some(answer),
            () = until_stopped(stop) => tokio::time::timeout(STOP_GRACE, asking).await.ok(),
        }
    }

    /// Ask the LLM until it answers or fails for good. A provider still unavailable after
    /// its own retries (down, timing out, rate-limiting) is asked again after a wait that
    /// starts at `agent.llm.backoff_max_ms` and doubles up to `outage_wait_max_ms`, so an
    /// outage delays `work` instead of failing it: its messages stay in the buffer. None
    /// when the host stops meanwhile (the work stays claimed and resumes on the next start).
    async fn complete_through_outage(
        &self,
        system: &str,
        prompt: &str,
        work: &str,
        stop: &mut watch::Receiver<bool>,
    ) -> Option<Result<llm::Completion, llm::LlmError>> {
        let llm = &self.config.llm;
        let most = Duration::from_millis(llm.outage_wait_max_ms);
        let mut wait = Duration::from_millis(llm.backoff_max_ms).min(most);
        let mut failed = 0u32;
        loop {
            match self.complete_unless_stopped(system, prompt, stop).await? {
                Err(error) if error.is_transient() => {
                    failed += 1;
                    // Failing again: is the provider down, or does it fail only this? A provider
                    // that answers the probe is asked this once more, as it may have come back
                    // between the two (an outage that ended then failed the batch, found by an
                    // operator's test until 2026-12-02).
                    if failed >= 2 && error.may_be_the_requests_own() && self.answers_others().await
                    {
                        let error = match self.complete_unless_stopped(system, prompt, stop).await?
                        {
                            Err(error) if error.is_transient() => error,
                            answer => return Some(answer),
                        };
                        tracing::warn!(
                            "{work} fails alone: the LLM provider answers other requests but failed this one {} times ({error}); it is failed, not waited for, so later work goes on (`cairn buffer retry` asks again)",
                            failed + 1
                        );
                        return Some(Err(llm::LlmError::FailsAlone {
                            provider: self.llm.name().to_string(),
                            last: error.to_string(),
                        }));
                    }
                    tracing::warn!(
                        "{work} waits for the LLM provider: {error}; its messages stay in the buffer, asking again in {:.1}s",
                        wait.as_secs_f64()
                    );
                    if stopped_during(stop, wait).await {
                        return None;
                    }
                    wait = (wait * 2).min(most);
                }
                answer => return Some(answer),
            }
        }
    }

    /// Whether the LLM provider answers a request other than the one failing: a one-word
    /// question, worded anew each time so no response cache answers it. A provider that is
    /// down fails it too, and the failing work goes on waiting.
    async fn answers_others(&self) -> bool {
        let request = CompletionRequest {
            messages: vec![
                ChatMessage::new("system", "Answer with one word."),
                ChatMessage::new("user", format!("Say ok ({}).", crate::store::now_ms())),
            ],
            // Room for a model that says more than asked, so the answer is not cut short.
            max_tokens: Some(16),
            ..CompletionRequest::default()
        };
        let llm = self.llm.clone();
        tokio::task::spawn_blocking(move || llm.complete(&request).is_ok())
            .await
            .unwrap_or(false)
    }

    /// Deliver the model's reply while keeping it: first on its batch, so a host killed
    /// while the channel delivers it delivers it again rather than ask for another answer;
    /// then its episode and `agent.response` are written as the channel delivers it.
    async fn deliver_and_keep(
        &self,
        batch: &Batch,
        session_id: &str,
        user: Option<&str>,
        answer: Answer,
    ) -> TurnOutcome {
        let Answer {
            completion,
            llm_time,
        } = answer;
        let completion = match completion {
            Ok(completion) => completion,
            Err(e) => {
                return TurnOutcome {
                    status: BatchStatus::Failed,
                    reply: None,
                    error: Some(e.to_string()),
                    usage: None,
                    llm_time,
                    deliver_time: Duration::ZERO,
                };
            }
        };
        let reply_json = serde_json::json!({"text": completion.content, "model": completion.model});
        let payload = reply_json.to_string();
        let delivering = std::time::Instant::now();
        let reply = Reply {
            batch,
            session_id,
            user,
            reply: &reply_json,
            text: &completion.content,
        };
        let delivered = match self.keep_for_redelivery(batch, &payload).await {
            Ok(()) => tokio::join!(self.deliver(batch, &payload), self.keep_reply(reply)).0,
            Err(not_ours) => Err(not_ours),
        };
        let (status, error) = match delivered {
            Ok(()) => (BatchStatus::Done, None),
            Err(e) => (BatchStatus::Failed, Some(e)),
        };
        TurnOutcome {
            status,
            reply: Some(payload),
            error,
            usage: Some(completion.usage),
            llm_time,
            deliver_time: delivering.elapsed(),
        }
    }

    /// Log the outcome, then journal `turn.completed` while recording the outcome on the
    /// batch (both acknowledged before the turn ends).
    async fn record(&self, turn: Turn<'_>, recalled: &[String], outcome: TurnOutcome) {
        let Turn {
            batch,
            session_id,
            user,
            started,
            timings,
        } = turn;
        let TurnOutcome {
            status,
            reply,
            error,
            usage,
            llm_time,
            deliver_time,
        } = outcome;
        if let Some(error) = &error {
            tracing::warn!(batch = batch.id, channel = %batch.channel, "turn failed: {error}");
        } else {
            tracing::info!(batch = batch.id, channel = %batch.channel, conversation = %batch.conversation, messages = batch.messages.len(), "replied");
        }
        let session = session_id.map(str::to_string);
        let completed = async {
            let Some(journal) = &self.journal else {
                return;
            };
            let elapsed = started.elapsed();
            let model = timings.embedding;
            let payload = serde_json::json!({
                "batch_id": batch.id,
                "channel": batch.channel,
                "conversation": batch.conversation,
                "messages": batch.messages.len(),
                "status": status.as_str(),
                "error": error,
                "recalled": recalled,
                "usage": usage,
                "duration_ms": elapsed.as_millis() as u64,
                // The host's time on the turn's path: what the LLM and the query's
                // embedding did not hold up (see `context::ModelTime`).
                "host_us": elapsed.saturating_sub(llm_time + model.on_path).as_micros() as u64,
                // Also counting the host's work done while the encoder ran.
                "host_incl_overlap_us": elapsed.saturating_sub(llm_time + model.waited).as_micros() as u64,
                "llm_us": llm_time.as_micros() as u64,
                "embedding_us": model.on_path.as_micros() as u64,
                "embedding_wait_us": model.waited.as_micros() as u64,
                "phases_us": {
                    "session": timings.session.as_micros() as u64,
                    "context": timings.context.saturating_sub(model.on_path).as_micros() as u64,
                    "deliver": deliver_time.as_micros() as u64,
                },
            });
            journal
                .emit("turn.completed", payload, session.clone(), user.clone())
                .await;
        };
        tokio::join!(
            completed,
            self.record_outcome(batch.id, status, reply, error.clone())
        );
    }

    /// Keep the reply on its batch before it is delivered (see [`Batch::kept_reply`]).
    /// Refused because another host took the batch over (its lease lapsed), the reply is
    /// not delivered: that host answers the batch. A buffer that is away (a full disk, a
    /// database outage) or failing is not waited for: the person gets the answer now, the
    /// batch's outcome records it once the buffer is back, and a host killed before then
    /// could answer twice (logged).
    async fn keep_for_redelivery(&self, batch: &Batch, payload: &str) -> Result<(), String> {
        let Err(e) = self.buffer.keep_reply(batch.id, payload.to_string()).await else {
            return Ok(());
        };
        let unkept = "the reply is delivered before it is kept on its batch, so a host killed before the batch is finished may answer it twice";
        if e.is_taken() {
            return Err(format!("not delivered: {e}"));
        } else if e.is_passing() {
            tracing::warn!(batch = batch.id, "{unkept}: {e}");
        } else {
            tracing::error!(batch = batch.id, "{unkept}: {e}");
        }
        Ok(())
    }

    /// Save a reply as the session's episode while journaling `agent.response` (both
    /// acknowledged before the turn ends; the reply is kept even when its delivery fails).
    async fn keep_reply(&self, reply: Reply<'_>) {
        let Reply {
            batch,
            session_id,
            user,
            reply,
            text,
        } = reply;
        let episode = user.and_then(|user| self.reply_episode(batch, session_id, user, text));
        tokio::join!(
            self.remember(session_id, episode.into_iter().collect()),
            self.journal_response(batch, Some(session_id), user, reply)
        );
    }

    /// The reply's episode, under an id made of its batch and text, so a save repeated by
    /// a later attempt stores it once.
    fn reply_episode(
        &self,
        batch: &Batch,
        session_id: &str,
        user: &str,
        text: &str,
    ) -> Option<NewMemory> {
        let id = episode_id(batch, &format!("assistant {text}"));
        self.episode(id, session_id, user, "assistant", text.to_string())
    }

    /// Journal `agent.response` for `reply` (`{"text", "model"}`), cut to fit the journal.
    async fn journal_response(
        &self,
        batch: &Batch,
        session_id: Option<&str>,
        user: Option<&str>,
        reply: &serde_json::Value,
    ) {
        let Some(journal) = &self.journal else {
            return;
        };
        let fields = response_event::batch_fields(batch.id, &batch.channel, &batch.conversation);
        let payload = response_event::payload(&fields, reply, journal.config().max_payload_bytes);
        journal
            .emit(
                "agent.response",
                payload,
                session_id.map(str::to_string),
                user.map(str::to_string),
            )
            .await;
    }

    /// One side of the conversation as an episode in the session's scope, tagged with the
    /// speaker's role and stored under `id` (see [`episode_id`]); none when episodes are not
    /// saved or the text is empty.
    fn episode(
        &self,
        id: String,
        session_id: &str,
        user: &str,
        role: &str,
        text: String,
    ) -> Option<NewMemory> {
        let config = self.memory.as_ref()?.local().config();
        if !config.save_episodes || text.trim().is_empty() {
            return None;
        }
        let mut episode = NewMemory::new(MemoryKind::Episode, within_episode_limit(text));
        episode.scope = Scope {
            agent_id: Some(config.agent_id.clone()),
            user_id: Some(user.to_string()),
            session_id: Some(session_id.to_string()),
        };
        episode.tags = vec![role.to_string()];
        episode.id = Some(id);
        Some(episode)
    }

    /// Save episodes in one commit (the hot path: no LLM call, no embedding — the
    /// background embedder vectorises them later). Episodes refused for want of disk space,
    /// or while the database server is away, are saved once it passes; other failures are
    /// logged: a turn is never lost because memory could not keep it.
    async fn remember(&self, session_id: &str, episodes: Vec<NewMemory>) {
        let Some(memory) = self.memory.clone() else {
            return;
        };
        if episodes.is_empty() {
            return;
        }
        let saved =
            crate::retry::while_passing("save a turn's episodes", MemoryError::is_passing, || {
                let memory = memory.clone();
                let episodes = episodes.clone();
                async move { save_episodes(memory, episodes).await }
            })
            .await;
        if let Err(error) = saved {
            tracing::warn!(session = session_id, "cannot save an episode: {error}");
        }
    }

    /// The session of a batch: `<channel>:<conversation>`, numbered `#2`, `#3`, … by the
    /// lifecycle when the conversation resumes after its session ended.
    fn session_for(&self, batch: &Batch, user: Option<&str>) -> SessionChoice {
        let conversation = crate::lifecycle::conversation_key(&batch.channel, &batch.conversation);
        let Some(lifecycle) = &self.lifecycle else {
            return SessionChoice::unrecorded(&conversation);
        };
        let agent = self
            .memory
            .as_ref()
            .map(|memory| memory.local().config().agent_id.clone());
        let arrived = batch.first_arrival().unwrap_or_else(crate::store::now_ms);
        lifecycle.session_for(&conversation, user, agent.as_deref(), arrived)
    }

    async fn deliver(&self, batch: &Batch, payload: &str) -> Result<(), String> {
        let Some(channel) = self.channels.get(&batch.channel) else {
            return Err(format!(
                "no channel plugin `{}` to deliver the reply to",
                batch.channel
            ));
        };
        let message = OutboundMessage {
            conversation: batch.conversation.clone(),
            recipient: batch.messages.last().map(|m| m.sender.clone()),
            payload: payload.to_string(),
            in_reply_to: batch.messages.iter().map(|m| m.id as u64).collect(),
        };
        let mut last_error = String::new();
        let mut attempt = 0;
        while attempt < self.config.deliver_attempts.max(1) {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200 << attempt.min(6))).await;
            }
            let outbound = message.clone();
            match channel
                .call(move |instance| instance.deliver(&outbound))
                .await
            {
                Ok(()) => return Ok(()),
                // Not tried: the channel is about to restart. Wait for it, spending no attempt.
                Err(error) if error.is_restarting() => {
                    tokio::time::sleep(CHANNEL_RESTART_POLL).await;
                    continue;
                }
                // Tried, but a store the channel called was away (a full disk, a database
                // outage): the host's outage, so no attempt is spent either.
                Err(error) if error.is_store_away() => {
                    tracing::debug!(batch = batch.id, "delivery waits for a store: {error}");
                    tokio::time::sleep(STORE_AWAY_POLL).await;
                    continue;
                }
                Err(CallError::Plugin(error)) => {
                    last_error = format!("{} refused the delivery: {error}", batch.channel)
                }
                Err(error) => last_error = format!("{}: {error}", batch.channel),
            }
            attempt += 1;
        }
        Err(last_error)
    }

    /// Run one spawned task as a sub-agent turn — in its conversation's session, with the
    /// same context providers as the main agent, its messages and result saved as episodes —
    /// and record its result.
    pub async fn task_turn(&self, task: i64, batch: Batch, mut stop: watch::Receiver<bool>) {
        let _in_flight = self.turn_in_flight();
        let user = batch.messages.last().map(|m| m.sender.clone());
        let (text, query, session) = self.open_turn(&batch, user.as_deref(), &None);
        let session_id = session.id.clone();
        // An earlier attempt (cut short, or failed and retried) remembered its messages.
        let history_before = batch.received_at.unwrap_or_else(crate::store::now_ms);
        let remembered = async {
            Self::await_session(session).await;
            if batch.received_at.is_none() {
                self.remember(&session_id, self.user_episodes(&batch, &session_id))
                    .await;
                self.mark_received(batch.id, history_before).await;
            }
        };
        let (_, context) = tokio::join!(
            remembered,
            self.context_for(
                &batch,
                &session_id,
                user.clone(),
                history_before,
                text,
                query
            )
        );
        let prompt = batch_prompt(&batch, self.config.max_message_chars);
        let mut system =
            String::from("You are a Cairn sub-agent. Handle this task and report the result.");
        for section in &context.sections {
            system.push_str("\n\n");
            system.push_str(section);
        }
        let work = format!("task {task}");
        let Some(answer) = self
            .complete_through_outage(&system, &prompt, &work, &mut stop)
            .await
        else {
            tracing::info!(
                task,
                "stopping before the LLM provider answered: the task runs after the next start"
            );
            return;
        };
        let (status, result, error) = match answer {
            Ok(completion) => (TaskStatus::Done, Some(completion.content), None),
            Err(e) => (TaskStatus::Failed, None, Some(e.to_string())),
        };
        if let (Some(result), Some(user)) = (&result, &user) {
            let id = episode_id(&batch, &format!("task {task} {result}"));
            let episode = self.episode(id, &session_id, user, "assistant", result.clone());
            self.remember(&session_id, episode.into_iter().collect())
                .await;
        }
        match &error {
            Some(error) => tracing::warn!(task, batch = batch.id, "task failed: {error}"),
            None => tracing::info!(task, batch = batch.id, "task done"),
        }
        if let Err(e) = self.buffer.finish_task(task, status, result, error).await {
            tracing::error!(task, "cannot record the task's outcome: {e}");
        }
    }

    /// Serve the main queue until `stop`: take the most urgent batch of a channel this host
    /// runs (it could not deliver the reply of another; a host that runs it will), answer,
    /// repeat.
    pub async fn run_main(self: Arc<Self>, routed: Arc<Notify>, stop: watch::Receiver<bool>) {
        let served: Vec<String> = self.channels.keys().cloned().collect();
        drain_queue(
            routed,
            stop,
            "batch",
            || self.buffer.claim_main_batch(Some(&served)),
            |batch, stop| self.main_turn(batch, stop),
        )
        .await;
    }

    /// Serve spawned tasks until `stop`.
    pub async fn run_tasks(self: Arc<Self>, routed: Arc<Notify>, stop: watch::Receiver<bool>) {
        drain_queue(
            routed,
            stop,
            "task",
            || self.buffer.claim_task(),
            |(task, batch), stop| self.task_turn(task, batch, stop),
        )
        .await;
    }
}

/// The id of `which` episode of `batch` (`user <message id> <arrival>`, `assistant <text>`,
/// …), the same at every attempt, so a save repeated after a crash (between the episodes'
/// commit and the journal's, or the task's finish) stores it once. The batch's first arrival
/// is in it too, so a buffer begun afresh (its ids from 1 again) never names an old episode.
fn episode_id(batch: &Batch, which: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(batch.id.to_le_bytes());
    hasher.update(batch.first_arrival().unwrap_or(0).to_le_bytes());
    hasher.update(which.as_bytes());
    format!("ep_{}", &hex::encode(hasher.finalize())[..16])
}

/// Take items with `claim` and handle them with `work` until `stop` turns true; when the
/// queue is empty, wait for the router's notification (or a second, as a safety net).
async fn drain_queue<T, Claimed, Worked>(
    routed: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
    what: &str,
    claim: impl Fn() -> Claimed,
    work: impl Fn(T, watch::Receiver<bool>) -> Worked,
) where
    Claimed: Future<Output = Result<Option<T>, BufferError>>,
    Worked: Future<Output = ()>,
{
    loop {
        if *stop.borrow() {
            return;
        }
        let woken = routed.notified();
        match claim().await {
            Ok(Some(item)) => {
                work(item, stop.clone()).await;
                continue;
            }
            Ok(None) => {}
            Err(e) => tracing::error!("cannot take the next {what}: {e}"),
        }
        tokio::select! {
            _ = woken => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.changed() => {}
        }
    }
}

/// How long a turn still waits for the LLM's answer once the host begins stopping.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Return once the host begins stopping (never, if no one can stop it).
async fn until_stopped(stop: &mut watch::Receiver<bool>) {
    while !*stop.borrow() {
        if stop.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Wait `wait`; whether the host began stopping first.
async fn stopped_during(stop: &mut watch::Receiver<bool>, wait: Duration) -> bool {
    tokio::time::timeout(wait, until_stopped(stop))
        .await
        .is_ok()
}

/// Save episodes in one commit off the async threads: a disk-full refusal is returned to be
/// waited out; any other failure of an episode is logged and the rest stay saved.
async fn save_episodes(
    memory: Arc<MemoryService>,
    episodes: Vec<NewMemory>,
) -> Result<(), MemoryError> {
    let outcomes = match tokio::task::spawn_blocking(move || memory.save_all(episodes)).await {
        Ok(outcomes) => outcomes,
        Err(e) => {
            tracing::warn!("saving episodes panicked: {e}");
            return Ok(());
        }
    };
    for error in outcomes.into_iter().filter_map(Result::err) {
        if error.is_passing() {
            return Err(error);
        }
        tracing::warn!("cannot save an episode: {error}");
    }
    Ok(())
}

/// Room kept at the end of a cut episode for the note saying so.
const CUT_NOTE_BYTES: usize = 64;

/// `text` cut to what one memory holds ([`MAX_CONTENT_BYTES`], at a character boundary),
/// saying how much was left out: a long reply is remembered by its start rather than not at
/// all.
fn within_episode_limit(text: String) -> String {
    if text.len() <= MAX_CONTENT_BYTES {
        return text;
    }
    let mut end = MAX_CONTENT_BYTES - CUT_NOTE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{} … [{} bytes more not kept]",
        &text[..end],
        text.len() - end
    )
}

#[cfg(test)]
mod episode_limit_tests {
    use super::*;

    #[test]
    fn a_text_over_what_a_memory_holds_is_cut_at_a_character_and_says_so() {
        let short = "fits".to_string();
        assert_eq!(within_episode_limit(short.clone()), short);
        let long = "é".repeat(MAX_CONTENT_BYTES);
        let cut = within_episode_limit(long.clone());
        assert!(cut.len() <= MAX_CONTENT_BYTES, "{}", cut.len());
        let kept = cut.split(" … [").next().expect("the start");
        assert!(long.starts_with(kept));
        assert!(cut.ends_with(&format!(
            "[{} bytes more not kept]",
            long.len() - kept.len()
        )));
    }
}

#[cfg(test)]
mod tests;
