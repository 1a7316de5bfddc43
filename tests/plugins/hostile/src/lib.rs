//! A test handler that misbehaves on purpose, chosen by its config's `mode`:
//!
//! - `trap-init`: panics (traps) in `init`;
//! - `error-init`: `init` returns an error;
//! - `loop-init`: spins forever in `init`;
//! - `sleep-init`: blocks in a WASI sleep (a host call) for an hour in `init`;
//! - `memory-bomb`: allocates until it hits its memory limit;
//! - `fs-escape`: tries to read and write outside its preopened directory;
//! - `env-snoop`: reads environment variables it was not granted;
//! - `net-connect`: opens a TCP connection to `config.target`;
//! - `http-get`: sends `GET http://<config.target>/probe` through wasi:http;
//! - `log-flood`: writes tens of thousands of log and stdout lines;
//! - `emit`: emits `config.allowed` and `config.denied` through `journal.emit`;
//! - `emit-flood`: emits `config.topic` `config.count` times as fast as it can;
//! - `kv-flood`: sets 1 KiB values under new keys until the host refuses one, then deletes
//!   one key and sets again.
//!
//! On events it does what `config.event` says: `trap` (the default) traps, `hang` spins
//! until its deadline, `interrupted` logs `lifecycle.interrupted()` and succeeds, `echo`
//! emits `config.echo` (two echoing plugins answer each other's events), `huge-error` fails
//! with an 8 MiB error message, `flood` emits `config.count` events on `config.topic` (as
//! `emit-flood` does), `hold` blocks in a WASI sleep (a host call) for an hour,
//! `echo-or-trap` traps on the events whose payload's `i` is in `config.trap` and echoes the
//! others (a fault part-way through a run of events).
//!
//! Every probe logs `probe <name>: ok <detail>` or `probe <name>: denied <error>`, which the
//! integration tests read from the host's log.

wit_bindgen::generate!({
    path: "../../../wit/v0.1",
    world: "handler",
});

use std::hint::black_box;
use std::io::Write;

use std::sync::atomic::{AtomicU8, Ordering};

use cairn::plugin::{journal, kv, lifecycle, log};

/// What `on-event` does: 0 trap, 1 hang, 2 report the interrupt flag, 3 echo, 4 fail
/// hugely, 5 flood, 6 hold a host call, 7 echo or trap.
static ON_EVENT: AtomicU8 = AtomicU8::new(0);

/// The payload `i`s `echo-or-trap` traps on.
static TRAP: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

/// What `flood` emits on each event: the topic and how many.
static FLOOD: std::sync::Mutex<(String, u64)> = std::sync::Mutex::new((String::new(), 0));

/// The topic `echo` emits.
static ECHO: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());
use cairn::plugin::types::LogLevel;

use exports::cairn::plugin::handler_plugin::Guest;
use cairn::plugin::types::{Error, Event};

struct Hostile;

fn say(message: &str) {
    log::log(LogLevel::Info, message);
}

fn probe<T: std::fmt::Debug, E: std::fmt::Display>(name: &str, result: Result<T, E>) {
    match result {
        Ok(value) => say(&format!("probe {name}: ok {value:?}")),
        Err(error) => say(&format!("probe {name}: denied {error}")),
    }
}

fn fs_escape() {
    probe("granted-read", std::fs::read_to_string("/data/hello.txt"));
    probe("etc-passwd", std::fs::read_to_string("/etc/passwd"));
    probe("dotdot", std::fs::read_to_string("/data/../../../../etc/passwd"));
    probe("dotdot-secret", std::fs::read_to_string("/data/../secret.txt"));
    probe("symlink-absolute", std::fs::read_to_string("/data/link-absolute"));
    probe("symlink-relative", std::fs::read_to_string("/data/link-relative"));
    probe("root-listing", std::fs::read_dir("/").map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>()));
    probe(
        "write-read-only",
        std::fs::File::create("/data/written.txt").and_then(|mut f| f.write_all(b"x")),
    );
}

fn env_snoop() {
    probe("env-granted", std::env::var("CAIRN_TEST_GRANTED"));
    probe("env-secret", std::env::var("CAIRN_TEST_SECRET"));
    probe("env-home", std::env::var("HOME"));
    let all: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
    say(&format!("probe env-all: ok {all:?}"));
}

fn net_connect(target: &str) {
    probe("net-connect", std::net::TcpStream::connect(target).map(|s| s.peer_addr().ok()));
}

/// `GET http://<target>/probe` through wasi:http; the status, or the error code.
fn http_get(target: &str) {
    use wasi::http::types::{Fields, Method, OutgoingRequest, Scheme};
    let request = OutgoingRequest::new(Fields::new());
    let _ = request.set_method(&Method::Get);
    let _ = request.set_scheme(Some(&Scheme::Http));
    let _ = request.set_authority(Some(target));
    let _ = request.set_path_with_query(Some("/probe"));
    let outcome = wasi::http::outgoing_handler::handle(request, None).and_then(|pending| {
        pending.subscribe().block();
        match pending.get() {
            Some(Ok(result)) => result.map(|response| response.status()),
            _ => Err(wasi::http::types::ErrorCode::InternalError(Some("no response".into()))),
        }
    });
    probe("http-get", outcome.map_err(|code| format!("{code:?}")));
}

fn memory_bomb() {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        let chunk = vec![0xa5u8; 1 << 20];
        hoard.push(black_box(chunk));
        if hoard.len() % 16 == 0 {
            say(&format!("memory-bomb: holding {} MiB", hoard.len()));
        }
    }
}

fn emit_flood(topic: &str, count: u64) {
    let (mut emitted, mut refused) = (0u64, 0u64);
    let mut first_refusal = String::new();
    for i in 0..count {
        match journal::emit(topic, &format!("{{\"i\":{i}}}")) {
            Ok(_) => emitted += 1,
            Err(error) => {
                if refused == 0 {
                    first_refusal = format!("{error:?}");
                }
                refused += 1;
            }
        }
    }
    say(&format!("emit-flood: {emitted} emitted, {refused} refused; first refusal: {first_refusal}"));
}

fn kv_flood() {
    let value = vec![0x5au8; 1024];
    let mut set = 0u64;
    let refusal = loop {
        match kv::set(&format!("key-{set}"), &value) {
            Ok(()) => set += 1,
            Err(error) => break format!("{error:?}"),
        }
        if set == 1_000_000 {
            break "never refused".to_string();
        }
    };
    say(&format!("kv-flood: {set} set, then {refusal}"));
    probe("kv-delete", kv::delete("key-0"));
    probe("kv-after-delete", kv::set("key-again", &value));
}

fn log_flood() {
    for i in 0..50_000 {
        log::log(LogLevel::Info, &format!("flood line {i}"));
    }
    for i in 0..10_000 {
        println!("flood stdout {i}");
    }
}

/// Whether `echo-or-trap` traps on `event`: its payload's `i` is in [`TRAP`].
fn trap_on(event: &Event) -> bool {
    let i = serde_json::from_str::<serde_json::Value>(&event.payload)
        .ok()
        .and_then(|payload| payload.get("i")?.as_u64());
    i.is_some_and(|i| TRAP.lock().unwrap_or_else(|p| p.into_inner()).contains(&i))
}

impl Guest for Hostile {
    fn init(config: String) -> Result<(), Error> {
        let config: serde_json::Value =
            serde_json::from_str(&config).map_err(|e| Error::InvalidInput(format!("config: {e}")))?;
        let mode = config.get("mode").and_then(|m| m.as_str()).unwrap_or("ok");
        let on_event = match config.get("event").and_then(|m| m.as_str()) {
            Some("hang") => 1,
            Some("interrupted") => 2,
            Some("echo") => 3,
            Some("huge-error") => 4,
            Some("flood") => 5,
            Some("hold") => 6,
            Some("echo-or-trap") => 7,
            _ => 0,
        };
        let topic = config.get("topic").and_then(|t| t.as_str()).unwrap_or("flood.tick");
        let count = config.get("count").and_then(|c| c.as_u64()).unwrap_or(2000);
        *FLOOD.lock().unwrap_or_else(|p| p.into_inner()) = (topic.to_string(), count);
        if let Some(topic) = config.get("echo").and_then(|t| t.as_str()) {
            *ECHO.lock().unwrap_or_else(|p| p.into_inner()) = topic.to_string();
        }
        if let Some(trap) = config.get("trap").and_then(|t| t.as_array()) {
            *TRAP.lock().unwrap_or_else(|p| p.into_inner()) = trap.iter().filter_map(|i| i.as_u64()).collect();
        }
        ON_EVENT.store(on_event, Ordering::Relaxed);
        say(&format!("hostile: init in mode {mode}"));
        match mode {
            "trap-init" => panic!("hostile: trapping in init on purpose"),
            "error-init" => return Err(Error::Internal("hostile: refusing to start".into())),
            "loop-init" => {
                let mut spins: u64 = 0;
                loop {
                    spins = black_box(spins.wrapping_add(1));
                }
            }
            "sleep-init" => std::thread::sleep(std::time::Duration::from_secs(3600)),
            "memory-bomb" => memory_bomb(),
            "fs-escape" => fs_escape(),
            "env-snoop" => env_snoop(),
            "net-connect" => net_connect(config.get("target").and_then(|t| t.as_str()).unwrap_or("127.0.0.1:9")),
            "http-get" => http_get(config.get("target").and_then(|t| t.as_str()).unwrap_or("127.0.0.1:9")),
            "log-flood" => log_flood(),
            "emit-flood" => emit_flood(topic, count),
            "kv-flood" => kv_flood(),
            "emit" => {
                for key in ["allowed", "denied"] {
                    let topic = config.get(key).and_then(|t| t.as_str()).unwrap_or("none");
                    probe(&format!("emit-{key}"), journal::emit(topic, r#"{"from":"hostile"}"#).map_err(|e| format!("{e:?}")));
                }
            }
            _ => {}
        }
        say("hostile: init finished");
        Ok(())
    }

    fn on_event(event: Event) -> Result<(), Error> {
        match ON_EVENT.load(Ordering::Relaxed) {
            1 => {
                let mut spins: u64 = 0;
                loop {
                    spins = black_box(spins.wrapping_add(1));
                }
            }
            2 => {
                say(&format!("probe interrupted: ok {} on {}", lifecycle::interrupted(), event.topic));
                Ok(())
            }
            4 => Err(Error::Internal(format!("{} on {}", "x".repeat(8 << 20), event.seq))),
            5 => {
                let (topic, count) = FLOOD.lock().unwrap_or_else(|p| p.into_inner()).clone();
                emit_flood(&topic, count);
                Ok(())
            }
            6 => {
                std::thread::sleep(std::time::Duration::from_secs(3600));
                Ok(())
            }
            7 if trap_on(&event) => panic!("hostile: trapping on event {} as configured", event.seq),
            3 | 7 => {
                let topic = ECHO.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let payload = format!("{{\"after\":{}}}", event.seq);
                probe(&format!("echo {topic} after {}", event.topic), journal::emit(&topic, &payload).map_err(|e| format!("{e:?}")));
                Ok(())
            }
            _ => panic!("hostile: trapping on event {}", event.seq),
        }
    }
}

export!(Hostile);
