//! `cairn send`: put a message into the buffer, whether or not a host runs, and print its id.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;

use super::{BadInput, storage_unusable};
use crate::buffer::{
    Buffer, BufferConfig, BufferError, NewMessage, SAID_AT_LEEWAY_MS, check_message,
};
use crate::config::{HostConfig, Storage};
use crate::store::host::SqliteHost;

/// The arguments of `cairn send`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("body").required(true).args(["text", "json"])))]
pub struct SendArgs {
    /// Channel the message is from (a channel plugin id to get the reply delivered).
    #[arg(long)]
    pub channel: String,
    /// Conversation it belongs to.
    #[arg(long)]
    pub conversation: String,
    /// Who sent it (default: the `--json` payload's `sender`, else `operator`).
    #[arg(long)]
    pub sender: Option<String>,
    /// Priority (lower is served first), winning over `buffer.channel_priority` for this
    /// message; default: the channel's configured priority (`buffer.channel_priority`, else
    /// its manifest's, as the last host on this data dir read it, else
    /// `buffer.default_priority`).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::cli::parse_priority)]
    pub priority: Option<u32>,
    /// An id for the message: sending the same key on the same channel again stores
    /// nothing and prints the first message's id.
    #[arg(long, value_name = "KEY")]
    pub dedup_key: Option<String>,
    /// When the message was really said (RFC 3339, YYYY-MM-DD, or ms since the epoch), for
    /// history sent after the fact: memory dates its episode by it. Not in the future.
    /// Default: the `--json` payload's `said_at`, else now.
    #[arg(long, value_parser = crate::cli::memory::parse_time)]
    pub at: Option<i64>,
    /// The message text (sent as `{"text": TEXT}`).
    #[arg(value_parser = crate::cli::parse_words)]
    pub text: Option<String>,
    /// A file holding the JSON payload (`-` for stdin).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// The buffer's reason for refusing a message, its field named as what set it: the flag
/// (`conversation: …` → `--conversation: …`), or for a sender taken from the payload
/// (`sender_in_payload`), the payload's field; the payload's reasons stay as they are.
fn as_flag(reason: &str, sender_in_payload: bool) -> String {
    if sender_in_payload && let Some(rest) = reason.strip_prefix("sender: ") {
        return format!("--json: its `sender`: {rest}");
    }
    const FLAGS: [(&str, &str); 4] = [
        ("channel: ", "--channel: "),
        ("sender: ", "--sender: "),
        ("conversation: ", "--conversation: "),
        ("dedup-key: ", "--dedup-key: "),
    ];
    FLAGS
        .iter()
        .find_map(|(field, flag)| {
            reason
                .strip_prefix(field)
                .map(|rest| format!("{flag}{rest}"))
        })
        .unwrap_or_else(|| reason.to_string())
}

/// Who sent a message and when it was said, as the flags give them or else as the `--json`
/// payload does (`{"text", "sender", "said_at"}`, the fields a webhook takes): a flag
/// wins over the payload, as a webhook's header wins over its body.
fn sender_and_time(args: &SendArgs, payload: &serde_json::Value) -> Result<(String, Option<i64>)> {
    let sender = match (&args.sender, payload.get("sender")) {
        (Some(sender), _) => sender.clone(),
        (None, None | Some(serde_json::Value::Null)) => "operator".to_string(),
        (None, Some(serde_json::Value::String(sender))) => sender.clone(),
        (None, Some(other)) => {
            return Err(BadInput(format!(
                "--json: its `sender` is {other}: expected a string (or give --sender)"
            ))
            .into());
        }
    };
    let (said_at, named) = match (args.at, payload.get("said_at")) {
        (Some(at), _) => (Some(at), "--at"),
        (None, None | Some(serde_json::Value::Null)) => (None, "--at"),
        (None, Some(said_at)) => {
            let text = match said_at {
                serde_json::Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            let at = crate::cli::memory::parse_time(&text)
                .map_err(|e| BadInput(format!("--json: its `said_at`: {e}")))?;
            (Some(at), "--json: its `said_at`")
        }
    };
    if let Some(at) = said_at
        && !(0..=crate::store::now_ms() + SAID_AT_LEEWAY_MS).contains(&at)
    {
        return Err(BadInput(format!(
            "{named}: {} is not when a message was said; expected a time from 1970 up to now",
            crate::cli::shown_time(at)
        ))
        .into());
    }
    Ok((sender, said_at))
}

/// Read a `--json` message from `source`, `named` so in errors: at most `limit` bytes
/// (`buffer.max_payload_bytes`) and a byte-order mark, as UTF-8 text. A longer input is
/// refused as soon as the limit is passed (until 2026-12-04 it was read whole first, so
/// `--json /dev/zero` grew without bound).
fn read_bounded(source: impl std::io::Read, limit: usize, named: &str) -> Result<String> {
    const BOM: usize = 3;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut source.take((limit + BOM + 1) as u64), &mut bytes)
        .map_err(|e| BadInput(format!("{named}: cannot read: {e}")))?;
    let bom = if bytes.starts_with(b"\xEF\xBB\xBF") {
        BOM
    } else {
        0
    };
    if bytes.len() - bom > limit {
        return Err(BadInput(format!(
            "message rejected: {named}: more than {limit} bytes; expected at most \
             buffer.max_payload_bytes ({limit} bytes)"
        ))
        .into());
    }
    String::from_utf8(bytes).map_err(|e| {
        BadInput(format!(
            "{named}: byte {} is not UTF-8: expected JSON text",
            e.utf8_error().valid_up_to() + 1
        ))
        .into()
    })
}

/// Store the message and print its id; bad input is reported as such (exit 2).
pub fn run(config: &HostConfig, args: &SendArgs) -> Result<ExitCode> {
    let limit = config.buffer.max_payload_bytes;
    let payload = match (&args.text, &args.json) {
        (Some(text), _) => serde_json::json!({ "text": text }).to_string(),
        (None, Some(path)) if path.as_os_str() == "-" => {
            read_bounded(std::io::stdin(), limit, "--json -: stdin")?
        }
        (None, Some(path)) => {
            let named = format!("--json {}", path.display());
            let file = std::fs::File::open(path)
                .map_err(|e| BadInput(format!("{named}: cannot read: {e}")))?;
            read_bounded(file, limit, &named)?
        }
        (None, None) => {
            return Err(BadInput("give the message TEXT or --json FILE".into()).into());
        }
    };
    // An editor's byte-order mark is not part of the JSON (as for manifests and config).
    let payload = match payload.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_string(),
        None => payload,
    };
    let fields = match serde_json::from_str::<serde_json::Value>(&payload) {
        Ok(fields) => fields,
        // The file's own syntax, named with the file: not the buffer's "expected a JSON
        // object" for what may be a cut-short object.
        Err(e) => {
            let from = args.json.as_ref().map_or_else(
                || "TEXT".to_string(),
                |path| format!("--json {}", path.display()),
            );
            return Err(BadInput(format!("{from}: not JSON: {e}")).into());
        }
    };
    let text = match fields.get("text") {
        None => None,
        Some(serde_json::Value::String(text)) => Some(text.as_str()),
        Some(other) => {
            return Err(
                BadInput(format!("--json: its `text` is {other}: expected a string")).into(),
            );
        }
    };
    if text.is_some_and(cairn_vocab::text::is_blank) {
        return Err(BadInput(
            "--json: its `text` is only blanks or invisible characters: expected some words".into(),
        )
        .into());
    }
    let (sender, said_at) = sender_and_time(args, &fields)?;
    let message = NewMessage {
        channel: args.channel.clone(),
        sender,
        conversation: args.conversation.clone(),
        payload,
        priority: args.priority,
        dedup_key: args.dedup_key.clone(),
        said_at,
    };
    if let Err(BufferError::InvalidInput(reason)) = check_message(&message, &config.buffer) {
        let sender_in_payload = args.sender.is_none() && fields.get("sender").is_some();
        let reason = as_flag(&reason, sender_in_payload);
        return Err(BadInput(format!("message rejected: {reason}")).into());
    }
    let storage = config.storage().map_err(storage_unusable)?;
    if let Storage::Sqlite = storage {
        let dir = &config.data_dir;
        let wrong = if dir.is_file() {
            Some("is not a directory")
        } else if !dir.exists() {
            Some(
                "does not exist: expected the data dir of a host (a mistyped path starts no \
                 new buffer; create the dir to fill one before any host runs)",
            )
        } else {
            None
        };
        if let Some(wrong) = wrong {
            return Err(BadInput(format!(
                "data dir (--data, data_dir or CAIRN_DATA_DIR): {} {wrong}",
                dir.display()
            ))
            .into());
        }
        check_channel(&config.data_dir, &args.channel)?;
    }
    let store = storage
        .buffer(&config.data_dir, &config.buffer)
        .map_err(storage_unusable)?;
    let buffer = Buffer::over(store, buffer_config(&config.buffer, args))?;
    match buffer.push(message) {
        Ok(id) => {
            println!("{id}");
            Ok(ExitCode::SUCCESS)
        }
        Err(BufferError::InvalidInput(reason)) => {
            Err(BadInput(format!("message rejected: {reason}")).into())
        }
        Err(error) => Err(error.into()),
    }
}

/// Refuse a channel the last host on `data_dir` did not run (a typo, say): the message
/// would be answered and the reply would have nowhere to go. With no host run yet, any
/// channel is taken.
fn check_channel(data_dir: &Path, channel: &str) -> Result<()> {
    let Some(report) = SqliteHost::read_status(data_dir).map_err(crate::cli::storage_unusable)?
    else {
        return Ok(());
    };
    let channels = report.channels();
    if report.host.is_none() || channels.is_empty() || channels.contains(&channel) {
        return Ok(());
    }
    Err(BadInput(format!(
        "--channel: the last host on {} ran no channel `{channel}` (its channels: {}): expected one of them, or start a host with that channel first",
        data_dir.display(),
        channels.join(", ")
    ))
    .into())
}

/// The buffer settings this message is checked with: an explicit `--priority` is the
/// operator's word for this one message, so the channel's configured override (which is
/// there to override what a channel plugin passes) gives way to it.
fn buffer_config(config: &BufferConfig, args: &SendArgs) -> BufferConfig {
    let mut config = config.clone();
    if args.priority.is_some() {
        config.channel_priority.remove(&args.channel);
    }
    config
}
