//! The benchmark plugin (world `handler`).
//!
//! `on-event` with topic `bench.checksum` computes the FNV-1a checksum of the payload (the
//! same function the harness calls natively for the ratio); topic `bench.imports` calls the
//! cheapest host import (`lifecycle.interrupted`) as many times as the payload says, and
//! `bench.llm` calls `llm.complete` with a one-line request as many times.
//!
//! Built against API 0.2.1, it also takes a run of events in one `on-events` call, each
//! event handled as `on-event` handles it.

wit_bindgen::generate!({
    path: "../../../wit/v0.2.1",
    world: "handler",
});

use std::hint::black_box;

use cairn::plugin::types::{ChatMessage, CompletionRequest, Error, Event, ResponseFormat};
use cairn::plugin::{lifecycle, llm};
use exports::cairn::plugin::handler_plugin::{Guest, RunFailure};

struct Bench;

/// FNV-1a over the bytes; kept identical to the harness's native copy.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

impl Guest for Bench {
    fn init(_config: String) -> Result<(), Error> {
        Ok(())
    }

    fn on_event(event: Event) -> Result<(), Error> {
        match event.topic.as_str() {
            "bench.checksum" => {
                black_box(fnv1a(event.payload.as_bytes()));
                Ok(())
            }
            "bench.imports" => {
                let count: u64 = event.payload.trim().parse().map_err(|_| Error::InvalidInput("payload: a count".into()))?;
                for _ in 0..count {
                    black_box(lifecycle::interrupted());
                }
                Ok(())
            }
            "bench.llm" => {
                let count: u64 = event.payload.trim().parse().map_err(|_| Error::InvalidInput("payload: a count".into()))?;
                let request = CompletionRequest {
                    messages: vec![ChatMessage { role: "user".into(), content: "ping".into() }],
                    max_tokens: Some(8),
                    temperature: None,
                    format: ResponseFormat::Text,
                };
                for _ in 0..count {
                    black_box(llm::complete(&request)?);
                }
                Ok(())
            }
            other => Err(Error::InvalidInput(format!("unknown bench topic {other}"))),
        }
    }

    fn on_events(events: Vec<Event>) -> Result<(), RunFailure> {
        for (handled, event) in events.into_iter().enumerate() {
            Self::on_event(event).map_err(|error| RunFailure { handled: handled as u32, error })?;
        }
        Ok(())
    }
}

export!(Bench);
