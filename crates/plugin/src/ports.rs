//! What the plugin runtime needs from the rest of the host, as traits and signals the host
//! provides: the runtime never reaches into the buffer, the journal or the lifecycle, so it
//! sits below them.

use std::sync::atomic::{AtomicBool, Ordering};

use cairn_vocab::Error;
use cairn_vocab::buffer::NewMessage;
use cairn_vocab::event::NewEvent;

/// Where channels' inbound messages go (`buffer.push`).
pub trait Inbox: Send + Sync {
    /// Store a message from a channel; its id once it is on disk (the first message's id
    /// when its dedup key was stored before).
    fn push(&self, message: NewMessage) -> Result<i64, Error>;
}

/// Where plugins' events and the supervisor's fault events go (`journal.emit`).
pub trait EventLog: Send + Sync {
    /// Append an event; its sequence number once it is on disk.
    fn append(&self, event: NewEvent) -> Result<i64, Error>;
}

/// The interrupt flag plugins read through `lifecycle.interrupted()`.
#[derive(Debug, Default)]
pub struct Interrupt(AtomicBool);

impl Interrupt {
    /// Whether new activity arrived while the agent slept.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Raise or clear the flag (the lifecycle does, as sleep starts and activity arrives).
    pub fn set(&self, value: bool) {
        self.0.store(value, Ordering::Relaxed);
    }
}

/// A request to stop the host once a channel's buffered messages are answered, made
/// through `lifecycle.request-stop` by the plugin holding the host's terminal.
#[derive(Debug)]
pub struct StopRequest(tokio::sync::watch::Sender<Option<(String, String)>>);

impl Default for StopRequest {
    fn default() -> Self {
        Self(tokio::sync::watch::Sender::new(None))
    }
}

impl StopRequest {
    /// Ask for a stop on behalf of `channel` for `reason`; the first request stands.
    pub fn request(&self, channel: &str, reason: &str) {
        self.0.send_if_modified(|request| {
            if request.is_some() {
                return false;
            }
            *request = Some((channel.to_string(), reason.to_string()));
            true
        });
    }

    /// Wait for a request; returns the channel and the reason.
    pub async fn requested(&self) -> (String, String) {
        let mut requests = self.0.subscribe();
        match requests.wait_for(Option::is_some).await {
            Ok(request) => request.clone().unwrap_or_default(),
            // The sender lives in `self`, so this cannot close while awaited.
            Err(_) => std::future::pending().await,
        }
    }
}
