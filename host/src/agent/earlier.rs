//! A batch an earlier attempt got to. A host can die or stop anywhere in a turn; the next
//! attempt at the batch (see [`Batch::attempt`]) reads what the earlier one left, so its
//! messages are never received twice and a reply, once made, is the one delivered: never
//! lost, and never a second answer from the model. The reply is kept on the batch before
//! its delivery is tried, so a host killed while a channel delivered it delivers the same
//! reply again (to the same `in-reply-to`): at least once, and always the same answer.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Agent, Turn, TurnOutcome, TurnTimings};
use crate::buffer::{Batch, BatchStatus};
use crate::journal::{Event, JournalError};

/// What an earlier attempt that received a batch left: when it began (the batch's history
/// ends there) and the session its messages went to, when the journal says.
pub(super) struct EarlierReceipt {
    pub(super) began: i64,
    pub(super) session: Option<String>,
}

/// A reply an earlier attempt made: the JSON its channel is given, and the `agent.response`
/// that attempt journaled, if it lived to.
pub(super) struct EarlierReply {
    payload: String,
    response: Option<Event>,
}

impl Agent {
    /// The reply an earlier attempt at `batch` made, if one did: kept on the batch before
    /// that attempt's delivery, or else as it journaled it (cut to fit, the text says so)
    /// — the case of a host whose buffer could not keep the reply.
    pub(super) async fn earlier_reply(&self, batch: &Batch) -> Option<EarlierReply> {
        let response = self.earlier_event(batch, "agent.response").await;
        let journaled = response.as_ref().and_then(journaled_reply);
        let payload = batch.kept_reply.clone().or(journaled)?;
        Some(EarlierReply { payload, response })
    }

    /// Deliver the reply an earlier attempt made, without asking the model again, and do
    /// what that attempt may not have lived to do: journal `agent.response` and save the
    /// reply's episode (under the id it had, so it is stored once); then record the outcome
    /// and `turn.completed` (no usage, no LLM time) in the session the reply was made in.
    pub(super) async fn deliver_earlier_reply(&self, batch: &Batch, earlier: EarlierReply) {
        let started = Instant::now();
        tracing::info!(
            batch = batch.id,
            attempt = batch.attempt,
            "an earlier attempt answered this batch; delivering that reply, not asking again"
        );
        let EarlierReply { payload, response } = earlier;
        let reply: Value = serde_json::from_str(&payload).unwrap_or_default();
        let session = match &response {
            Some(event) => event.session_id.clone(),
            None => self.received_earlier(batch).await.and_then(|r| r.session),
        };
        let user = response
            .as_ref()
            .and_then(|event| event.user_id.clone())
            .or_else(|| batch.messages.last().map(|m| m.sender.clone()));
        let kept = async {
            let journaled = async {
                if response.is_none() {
                    self.journal_response(batch, session.as_deref(), user.as_deref(), &reply)
                        .await;
                }
            };
            let remembered = async {
                if let (Some(session), Some(user), Some(text)) =
                    (&session, &user, whole_text(&reply))
                {
                    let episode = self.reply_episode(batch, session, user, text);
                    self.remember(session, episode.into_iter().collect()).await;
                }
            };
            tokio::join!(journaled, remembered);
        };
        let (delivered, ()) = tokio::join!(self.deliver(batch, &payload), kept);
        if delivered.is_ok() {
            tracing::info!(batch = batch.id, channel = %batch.channel, conversation = %batch.conversation, "delivered the reply an earlier attempt made");
        }
        let (status, error) = match delivered {
            Ok(()) => (BatchStatus::Done, None),
            Err(error) => (BatchStatus::Failed, Some(error)),
        };
        let outcome = TurnOutcome {
            status,
            reply: Some(payload),
            error,
            usage: None,
            llm_time: Duration::ZERO,
            deliver_time: started.elapsed(),
        };
        let turn = Turn {
            batch,
            session_id: session.as_deref(),
            user,
            started,
            timings: TurnTimings::default(),
        };
        self.record(turn, &[], outcome).await;
    }

    /// The earlier attempt that received this batch, if one did: it is marked so, or its
    /// host ended after journaling `message.received` (which follows the episodes) and
    /// before marking — then the batch's first arrival stands in for when it began.
    pub(super) async fn received_earlier(&self, batch: &Batch) -> Option<EarlierReceipt> {
        let event = self.earlier_event(batch, "message.received").await;
        let began = match (batch.received_at, &event) {
            (Some(at), _) => at,
            (None, Some(_)) => batch.first_arrival()?,
            (None, None) => return None,
        };
        Some(EarlierReceipt {
            began,
            session: event.and_then(|event| event.session_id),
        })
    }

    /// The first `topic` event an earlier attempt at `batch` journaled about it; none for a
    /// first attempt. A journal that cannot be read for a while (a full disk, a database
    /// outage) is waited out: taking "cannot tell" for "no" would ask the model again and
    /// answer twice, or save the batch's episodes twice. Any other failure is logged and
    /// taken for none.
    async fn earlier_event(&self, batch: &Batch, topic: &str) -> Option<Event> {
        let (Some(journal), true) = (&self.journal, batch.attempt > 1) else {
            return None;
        };
        let since = batch.first_arrival().unwrap_or(0);
        let what = format!("look for an earlier {topic} of batch {}", batch.id);
        crate::retry::while_passing(&what, JournalError::is_passing, || async {
            journal.find_event(topic, since, "batch_id", batch.id)
        })
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(batch = batch.id, "cannot look for an earlier {topic}: {e}");
            None
        })
    }
}

/// The reply an `agent.response` holds, as the JSON its channel is given.
fn journaled_reply(event: &Event) -> Option<String> {
    let payload: Value = serde_json::from_str(&event.payload).ok()?;
    payload.get("reply").map(Value::to_string)
}

/// A reply's text when it is whole: one the journal holds cut to fit is not, and saved as
/// an episode it would be stored a second time under another id.
fn whole_text(reply: &Value) -> Option<&str> {
    if reply.get("text_bytes").is_some() {
        return None;
    }
    reply.get("text").and_then(Value::as_str)
}
