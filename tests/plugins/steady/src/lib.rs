//! A well-behaved test channel: each `poll` adds one to a kv counter and logs
//! `steady: tick N`, so tests can see it keep working beside hostile plugins.
//! With config `mode: trap-poll` it starts cleanly and then traps on every poll; with
//! `mode: trap-webhook`, on every webhook request instead. With
//! `mode: push-probe` its first poll pushes payloads of every JSON type and asks the host to
//! stop (which it may not, holding no terminal), logging each answer as `steady: probe …`.
//! A webhook request is answered 204, or with the status its `x-answer-status` header asks
//! for and a JSON body (any number, for tests of what the host does with a status HTTP has
//! no room for).

wit_bindgen::generate!({
    path: "../../../wit/v0.1",
    world: "channel",
});

use std::sync::atomic::{AtomicBool, Ordering};

use cairn::plugin::types::LogLevel;
use cairn::plugin::{buffer, kv, lifecycle, log};

static TRAP_ON_POLL: AtomicBool = AtomicBool::new(false);
static PUSH_PROBE: AtomicBool = AtomicBool::new(false);
static TRAP_ON_WEBHOOK: AtomicBool = AtomicBool::new(false);

use exports::cairn::plugin::channel_plugin::Guest;
use cairn::plugin::types::{Error, HttpRequest, HttpResponse, InboundMessage, OutboundMessage};

struct Steady;

impl Guest for Steady {
    fn init(config: String) -> Result<(), Error> {
        let config: serde_json::Value =
            serde_json::from_str(&config).map_err(|e| Error::InvalidInput(format!("config: {e}")))?;
        let mode = config.get("mode").and_then(|m| m.as_str());
        TRAP_ON_POLL.store(mode == Some("trap-poll"), Ordering::Relaxed);
        PUSH_PROBE.store(mode == Some("push-probe"), Ordering::Relaxed);
        TRAP_ON_WEBHOOK.store(mode == Some("trap-webhook"), Ordering::Relaxed);
        log::log(LogLevel::Info, "steady: init");
        Ok(())
    }

    fn poll() -> Result<(), Error> {
        if TRAP_ON_POLL.load(Ordering::Relaxed) {
            panic!("steady: trapping in poll on purpose");
        }
        if PUSH_PROBE.swap(false, Ordering::Relaxed) {
            probe();
        }
        let ticks = match kv::get("ticks")? {
            Some(bytes) => String::from_utf8_lossy(&bytes).parse::<u64>().unwrap_or(0) + 1,
            None => 1,
        };
        kv::set("ticks", ticks.to_string().as_bytes())?;
        log::log(LogLevel::Info, &format!("steady: tick {ticks}"));
        Ok(())
    }

    fn deliver(message: OutboundMessage) -> Result<(), Error> {
        log::log(LogLevel::Info, &format!("steady: deliver to {}", message.conversation));
        Ok(())
    }

    fn handle_webhook(request: HttpRequest) -> HttpResponse {
        if TRAP_ON_WEBHOOK.load(Ordering::Relaxed) {
            panic!("steady: trapping in handle-webhook on purpose");
        }
        let asked = request
            .headers
            .iter()
            .find(|(name, _)| name == "x-answer-status")
            .and_then(|(_, value)| value.parse().ok());
        match asked {
            Some(status) => HttpResponse {
                status,
                headers: vec![("content-type".into(), "application/json".into())],
                body: br#"{"ok":true}"#.to_vec(),
            },
            None => HttpResponse {
                status: 204,
                headers: Vec::new(),
                body: Vec::new(),
            },
        }
    }
}

/// Push one payload of each JSON type and ask for a stop; log every answer.
fn probe() {
    for (label, payload) in [("string", "\"just a string\""), ("array", "[1,2]"), ("number", "42"), ("object", "{\"text\":\"ok\"}")] {
        let message = InboundMessage {
            sender: "probe".into(),
            conversation: "probe".into(),
            payload: payload.into(),
            priority: None,
            dedup_key: None,
        };
        log::log(LogLevel::Info, &format!("steady: probe push {label} -> {:?}", buffer::push(&message)));
    }
    log::log(LogLevel::Info, &format!("steady: probe request-stop -> {:?}", lifecycle::request_stop("probe")));
}

export!(Steady);
