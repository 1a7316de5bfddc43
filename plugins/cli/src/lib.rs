//! The `cli` channel (world `channel`): each line typed on the host's stdin becomes a
//! message, and each reply is printed to stdout as `cairn> <text>`.
//!
//! It needs the `stdio` capability. `poll` reads stdin without blocking (the host calls it on
//! the channel's poll interval), so a quiet terminal never holds up the host. When stdin
//! ends (Ctrl-D, or the end of piped input) it asks the host to stop once what was typed is
//! answered, unless `config.stop_at_end_of_input` is false. A line the buffer cannot take
//! for now (`unavailable`: a full disk, a database outage) is kept and sent again at the next
//! poll, before anything typed after it: nobody else holds what was typed.

wit_bindgen::generate!({
    path: "../../wit/v0.2",
    world: "channel",
});

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::Write;

use cairn::plugin::types::{
    Error, HttpRequest, HttpResponse, InboundMessage, LogLevel, OutboundMessage,
};
use cairn::plugin::{buffer, lifecycle, log};
use exports::cairn::plugin::channel_plugin::Guest;
use wasi::io::streams::{InputStream, StreamError};

/// Longest line accepted; a longer one is not stored (and the user is told), never cut
/// into pieces.
const MAX_LINE: usize = 64 * 1024;

struct State {
    stdin: Option<InputStream>,
    pending: Vec<u8>,
    /// The line being read is over [`MAX_LINE`]: its bytes are dropped up to its end.
    skipping_long_line: bool,
    closed: bool,
    sender: String,
    conversation: String,
    /// Ask the host to stop once stdin ends and what was typed is answered.
    stop_at_end: bool,
    /// Lines typed that the buffer has not taken yet, oldest first.
    unsent: VecDeque<String>,
    /// The buffer refused the first of them as unavailable (said once, until it takes it).
    waiting: bool,
}

thread_local! {
    static STATE: RefCell<State> = const {
        RefCell::new(State {
            stdin: None,
            pending: Vec::new(),
            skipping_long_line: false,
            closed: false,
            sender: String::new(),
            conversation: String::new(),
            stop_at_end: true,
            unsent: VecDeque::new(),
            waiting: false,
        })
    };
}

struct Cli;

/// Take the complete lines read so far (and the last one once stdin is closed). A line over
/// [`MAX_LINE`] is dropped whole, with a word to the user, rather than sent in pieces.
fn complete_lines(state: &mut State) -> Vec<Vec<u8>> {
    let mut lines = Vec::new();
    while let Some(end) = state.pending.iter().position(|b| *b == b'\n') {
        let line: Vec<u8> = state.pending.drain(..=end).collect();
        if std::mem::take(&mut state.skipping_long_line) || line.len() > MAX_LINE + 1 {
            refuse_long_line();
        } else {
            lines.push(line);
        }
    }
    if state.pending.len() > MAX_LINE {
        state.pending.clear();
        state.skipping_long_line = true;
    }
    if state.closed {
        if std::mem::take(&mut state.skipping_long_line) {
            refuse_long_line();
        } else if !state.pending.is_empty() {
            lines.push(std::mem::take(&mut state.pending));
        }
    }
    lines
}

fn refuse_long_line() {
    let note = format!("a line longer than {} KiB was not sent", MAX_LINE / 1024);
    log::log(LogLevel::Warn, &format!("cli: {note}"));
    println!("cairn: {note}; send long text with `cairn send --json FILE`");
}

/// Whether a character prints nothing: white space, a control character, or an invisible
/// format character (zero-width space and joiners, word joiner, byte-order mark, soft
/// hyphen), as the host's buffer judges a blank name.
fn shows_nothing(c: char) -> bool {
    c.is_whitespace()
        || c.is_control()
        || matches!(
            c,
            '\u{200B}'..='\u{200D}' | '\u{2060}' | '\u{FEFF}' | '\u{00AD}'
        )
}

/// Queue a typed line to be sent; a line of only blanks or invisible characters says
/// nothing and is not sent.
fn queue_line(state: &mut State, line: &str) {
    let line = line.trim_matches(shows_nothing);
    if !line.is_empty() {
        state.unsent.push_back(line.to_string());
    }
}

/// Push the lines not sent yet, in order, until the buffer is unavailable (they wait for
/// the next poll); a line it refuses for another reason is dropped, with a warning.
fn send_unsent(state: &mut State) {
    while let Some(line) = state.unsent.front() {
        let message = InboundMessage {
            sender: state.sender.clone(),
            conversation: state.conversation.clone(),
            payload: serde_json::json!({ "text": line }).to_string(),
            priority: None,
            dedup_key: None,
            said_at: None,
        };
        match buffer::push(&message) {
            Ok(_) => {
                state.unsent.pop_front();
                if std::mem::take(&mut state.waiting) {
                    log::log(LogLevel::Info, "cli: the buffer takes lines again");
                }
            }
            Err(Error::Unavailable(reason)) => {
                if !state.waiting {
                    state.waiting = true;
                    log::log(
                        LogLevel::Warn,
                        &format!(
                            "cli: the buffer cannot take lines now ({reason}); what was typed is kept and sent again"
                        ),
                    );
                }
                return;
            }
            Err(error) => {
                state.unsent.pop_front();
                log::log(
                    LogLevel::Warn,
                    &format!("cli: message not stored: {error:?}"),
                );
            }
        }
    }
}

impl Guest for Cli {
    fn init(config: String) -> Result<(), Error> {
        let config: serde_json::Value = serde_json::from_str(&config)
            .map_err(|e| Error::InvalidInput(format!("config: {e}")))?;
        let text = |key: &str, default: &str| {
            config
                .get(key)
                .and_then(|v| v.as_str())
                .unwrap_or(default)
                .to_string()
        };
        STATE.with_borrow_mut(|state| {
            state.sender = text("sender", "user");
            state.conversation = text("conversation", "cli");
            state.stop_at_end = config
                .get("stop_at_end_of_input")
                .and_then(|b| b.as_bool())
                .unwrap_or(true);
        });
        if config
            .get("banner")
            .and_then(|b| b.as_bool())
            .unwrap_or(true)
        {
            println!("cairn: type a message and press Enter; Ctrl-C stops the host.");
        }
        Ok(())
    }

    fn poll() -> Result<(), Error> {
        STATE.with_borrow_mut(|state| {
            if state.closed {
                return Ok(());
            }
            let stdin = state.stdin.get_or_insert_with(wasi::cli::stdin::get_stdin);
            loop {
                match stdin.read(MAX_LINE as u64) {
                    Ok(bytes) if bytes.is_empty() => break,
                    Ok(bytes) => state.pending.extend_from_slice(&bytes),
                    Err(StreamError::Closed) => {
                        state.closed = true;
                        break;
                    }
                    Err(StreamError::LastOperationFailed(e)) => {
                        return Err(Error::Internal(format!("stdin: {}", e.to_debug_string())));
                    }
                }
            }
            for line in complete_lines(state) {
                queue_line(state, &String::from_utf8_lossy(&line));
            }
            send_unsent(state);
            if state.closed && state.stop_at_end && state.unsent.is_empty() {
                // Once: a closed stdin stays closed and is not read again.
                state.stop_at_end = false;
                if let Err(error) = lifecycle::request_stop("stdin closed") {
                    log::log(
                        LogLevel::Warn,
                        &format!("cli: cannot ask the host to stop at end of input: {error:?}"),
                    );
                }
            }
            Ok(())
        })
    }

    fn deliver(message: OutboundMessage) -> Result<(), Error> {
        let text = serde_json::from_str::<serde_json::Value>(&message.payload)
            .ok()
            .and_then(|p| p.get("text").and_then(|t| t.as_str()).map(str::to_string))
            .unwrap_or(message.payload);
        let mut out = std::io::stdout();
        writeln!(out, "cairn> {text}")
            .and_then(|()| out.flush())
            .map_err(|e| Error::Internal(format!("stdout: {e}")))
    }

    fn handle_webhook(_request: HttpRequest) -> HttpResponse {
        HttpResponse {
            status: 404,
            headers: Vec::new(),
            body: b"the cli channel has no webhook\n".to_vec(),
        }
    }
}

export!(Cli);
