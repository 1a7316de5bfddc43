//! `cairn memory …`: inspect, search and maintain agent memory (whether or not a host is
//! running: SQLite's WAL lets both work at once). `list`, `get`, `search`, `forget` and
//! `stats` go through the memory interface the host uses, so they see a backend plugin's
//! memories when `memory.backend` names one; the maintenance commands work on memory.db.

mod backend;
mod commands;
mod format;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use serde_json::json;

use super::BadInput;
use crate::config::HostConfig;
use crate::memory::ListFilter;
use crate::memory::{
    CheckedImport, CheckedSnapshot, LocalMemory, MemoryEntry, MemoryError, MemoryKind,
    MemoryService, RecallHit, RecallQuery, SNAPSHOT_FILE, Scope,
};
use backend::CommandMemory;

use commands::*;
use format::*;

/// The scope and kind filters shared by `list` and `search`.
#[derive(clap::Args, Debug, Clone)]
pub struct ScopeArgs {
    /// Only this agent's memories (plus agent-wide shared ones).
    #[arg(long, value_parser = crate::cli::parse_id)]
    agent: Option<String>,
    /// Only this user's memories (plus memories shared by all users).
    #[arg(long, value_parser = crate::cli::parse_id)]
    user: Option<String>,
    /// Only this session's memories.
    #[arg(long, value_parser = crate::cli::parse_id)]
    session: Option<String>,
    /// Only these kinds (repeatable): episode, fact, core, reflection, procedure.
    #[arg(long = "kind", value_parser = parse_kind)]
    kinds: Vec<MemoryKind>,
    /// Only this category.
    #[arg(long, value_parser = crate::cli::parse_id)]
    category: Option<String>,
}

impl ScopeArgs {
    fn scope(&self) -> Scope {
        Scope {
            agent_id: self.agent.clone(),
            user_id: self.user.clone(),
            session_id: self.session.clone(),
        }
    }
}

/// `cairn memory` subcommands.
#[derive(Subcommand, Debug)]
pub enum MemoryCommand {
    /// List memories, newest first.
    List {
        #[command(flatten)]
        filter: ScopeArgs,
        /// Include superseded and forgotten entries.
        #[arg(long)]
        all: bool,
        /// How many to list.
        #[arg(long, default_value_t = 50, value_parser = parse_limit)]
        limit: usize,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Show one memory with its audit trail.
    Get {
        /// The memory id.
        id: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Recall memories relevant to a query, best first.
    Search(SearchArgs),
    /// Counts by kind, category and state; embedding backlog; database size.
    Stats {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Forget a memory (soft delete with an audit row; `purge` removes it for good).
    Forget {
        /// The memory id.
        id: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Remove memories for good: the given ids, or every forgotten memory.
    Purge {
        /// Memories to remove (repeatable).
        #[arg(long = "id")]
        ids: Vec<String>,
        /// Remove every forgotten memory.
        #[arg(long, conflicts_with = "ids")]
        forgotten: bool,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Write every memory and session as JSONL (lossless; `import` reads it back).
    Export {
        /// Output format (only `jsonl`).
        #[arg(long, default_value = "jsonl", value_parser = ["jsonl"])]
        format: String,
        /// File to write (default: stdout).
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// Print a JSON summary (with --output).
        #[arg(long)]
        json: bool,
    },
    /// Read a JSONL export; a bad line (an unknown field, an id given twice, inconsistent
    /// times) rejects the whole file; ids already in memory are skipped.
    Import {
        /// The JSONL file (`-` for stdin).
        file: PathBuf,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Write core memories to MEMORY_SNAPSHOT.md, or restore them from one.
    Snapshot {
        /// Where to write (default: <data>/MEMORY_SNAPSHOT.md).
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// Restore core memories from this snapshot instead of writing one.
        #[arg(long, conflicts_with = "output")]
        hydrate: Option<PathBuf>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Embed every memory lacking a vector from the configured model (after a model change).
    Reindex {
        /// Drop every stored vector first and embed everything again.
        #[arg(long)]
        force: bool,
        /// Machine-readable output (no progress bar).
        #[arg(long)]
        json: bool,
    },
    /// Run hygiene now (retention per category), even if it ran recently.
    Hygiene {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

fn parse_kind(text: &str) -> Result<MemoryKind, String> {
    MemoryKind::parse(text).ok_or_else(|| {
        format!("`{text}` is not a kind; expected episode, fact, core, reflection or procedure")
    })
}

/// Numbers of ms that are seconds since the epoch of 2001–5138 read as ms (a date in
/// 1970–1973): refused as the mistake they almost surely are.
const LOOKS_LIKE_SECONDS: std::ops::Range<i64> = 1_000_000_000..100_000_000_000;

/// A time argument: ms since the epoch, RFC 3339, or a date (midnight UTC).
pub(crate) fn parse_time(text: &str) -> Result<i64, String> {
    if let Ok(ms) = text.parse::<i64>() {
        if LOOKS_LIKE_SECONDS.contains(&ms) {
            let read_as = chrono::DateTime::from_timestamp_millis(ms)
                .map(|t| t.format("%Y-%m-%d %H:%M").to_string())
                .unwrap_or_default();
            return Err(format!(
                "`{text}` as ms since the epoch is {read_as}: seconds, most likely; expected ms ({text}000), RFC 3339 (2026-11-22T10:00:00Z) or a date (2026-11-22)"
            ));
        }
        return Ok(ms);
    }
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(time.timestamp_millis());
    }
    if let Ok(date) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
        && let Some(time) = date.and_hms_opt(0, 0, 0)
    {
        return Ok(time.and_utc().timestamp_millis());
    }
    Err(format!(
        "`{text}` is not a time; expected RFC 3339 (2026-11-22T10:00:00Z), a date (2026-11-22) or ms since the epoch"
    ))
}

/// A count of results: 1 or more.
fn parse_limit(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        // More than any memory.db can hold is all of them (SQL takes at most i64::MAX:
        // until 2026-12-04 a larger `--limit` failed `datatype mismatch`).
        Ok(n) if n >= 1 => Ok(n.min(i64::MAX as usize)),
        _ => Err(format!("`{text}`: expected a whole number of 1 or more")),
    }
}

/// A relevance: a number from 0 to 1.
fn parse_relevance(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(format!("`{text}`: expected a number from 0 to 1")),
    }
}

fn memory_failure(error: MemoryError) -> anyhow::Error {
    match error {
        MemoryError::InvalidInput(text) | MemoryError::NotFound(text) => BadInput(text).into(),
        other => anyhow::Error::new(other),
    }
}

/// The arguments of `cairn memory search`.
#[derive(clap::Args, Debug)]
pub struct SearchArgs {
    /// What to look for (plain words; no query syntax).
    #[arg(value_parser = crate::cli::parse_words)]
    pub query: String,
    #[command(flatten)]
    pub filter: ScopeArgs,
    /// Answer as memory stood at this time (RFC 3339, YYYY-MM-DD, or ms since the epoch).
    #[arg(long, value_parser = parse_time)]
    pub as_of: Option<i64>,
    /// Ask as if now were this time: recency and time words in the query ("last month",
    /// "two weeks ago") are measured from it (RFC 3339, YYYY-MM-DD, or ms since the epoch).
    #[arg(long, value_parser = parse_time)]
    pub at: Option<i64>,
    /// Only memories valid from this time on.
    #[arg(long, value_parser = parse_time)]
    pub since: Option<i64>,
    /// Only memories valid from before this time.
    #[arg(long, value_parser = parse_time)]
    pub until: Option<i64>,
    /// How many hits.
    #[arg(long, default_value_t = 10, value_parser = parse_limit)]
    pub limit: usize,
    /// Drop hits less relevant than this (0–1; default from the config).
    #[arg(long, allow_hyphen_values = true, value_parser = parse_relevance)]
    pub min_relevance: Option<f64>,
    /// BM25 only, even when embeddings are on.
    #[arg(long)]
    pub lexical: bool,
    /// Print each hit's score components.
    #[arg(long)]
    pub explain: bool,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

impl SearchArgs {
    /// Refuse a `--since` that is not before `--until`: the span holds no time, and a search
    /// in it could only answer nothing.
    fn check_span(&self) -> Result<()> {
        if let (Some(since), Some(until)) = (self.since, self.until)
            && since >= until
        {
            return Err(BadInput(format!(
                "--since {} is not before --until {}: expected a span that holds some time",
                crate::cli::shown_time(since),
                crate::cli::shown_time(until)
            ))
            .into());
        }
        Ok(())
    }
}

impl MemoryCommand {
    /// Whether the command brings memories into a data dir (an import, a snapshot's
    /// hydration), so it may be the data dir's first use; any other needs one that exists.
    fn fills_memory(&self) -> bool {
        matches!(
            self,
            MemoryCommand::Import { .. }
                | MemoryCommand::Snapshot {
                    hydrate: Some(_),
                    ..
                }
        )
    }

    /// The name of a command only memory.db can serve (maintenance and transfer), none for
    /// one any backend serves.
    fn memory_db_only(&self) -> Option<&'static str> {
        match self {
            MemoryCommand::Purge { .. } => Some("purge"),
            MemoryCommand::Export { .. } => Some("export"),
            MemoryCommand::Import { .. } => Some("import"),
            MemoryCommand::Snapshot { .. } => Some("snapshot"),
            MemoryCommand::Reindex { .. } => Some("reindex"),
            MemoryCommand::Hygiene { .. } => Some("hygiene"),
            _ => None,
        }
    }
}

/// Run a `cairn memory` command; `plugins` is where a backend plugin is found.
pub fn run(
    config: &HostConfig,
    plugins: Option<&Path>,
    command: &MemoryCommand,
) -> Result<ExitCode> {
    if let Some(name) = command.memory_db_only()
        && config.memory.backend != "sqlite"
    {
        return Err(BadInput(format!(
            "memory.backend is the plugin `{}`: `cairn memory {name}` works on memory.db \
             (backend `sqlite`) only",
            config.memory.backend
        ))
        .into());
    }
    if let MemoryCommand::Search(args) = command {
        args.check_span()?;
    }
    let on_sqlite = matches!(config.storage(), Ok(crate::config::Storage::Sqlite));
    let no_memory_yet = on_sqlite && !config.data_dir.join(cairn_storage::memory::FILE).exists();
    let prepared = prepare(command, &config.data_dir, no_memory_yet)?;
    if no_memory_yet && !command.fills_memory() {
        refuse_without_memory_db(&config.data_dir)?;
    }
    if no_memory_yet {
        refuse_filling_with_nothing(&config.data_dir, command, prepared.as_ref())?;
    }
    let memory = CommandMemory::open(config, plugins)?;
    let outcome = dispatch(config, &memory, command, prepared);
    memory.close();
    outcome.map(|()| ExitCode::SUCCESS)
}

/// Refuse an import or hydration that holds nothing into a data dir without memory.db:
/// it would only make the data dir and an empty memory.db (at a mistyped `--data`, say;
/// until 2026-12-04 it did, reporting `imported 0 memories`).
fn refuse_filling_with_nothing(
    data_dir: &Path,
    command: &MemoryCommand,
    prepared: Option<&Prepared>,
) -> Result<()> {
    let (file, expected) = match (command, prepared) {
        (MemoryCommand::Import { file, .. }, Some(Prepared::Import(checked)))
            if checked.is_empty() =>
        {
            (file, "a JSONL file as `cairn memory export` writes it")
        }
        (
            MemoryCommand::Snapshot {
                hydrate: Some(file),
                ..
            },
            Some(Prepared::Hydration(checked)),
        ) if checked.is_empty() => (file, "a snapshot with core memories"),
        _ => return Ok(()),
    };
    let file = if file.as_os_str() == "-" {
        "standard input".to_string()
    } else {
        file.display().to_string()
    };
    Err(BadInput(format!(
        "{file} holds no memories (expected {expected}): nothing to bring into {}, \
         which has no memory.db, so none was made",
        data_dir.display()
    ))
    .into())
}

/// Refuse a command that needs memory on a data dir without memory.db (the caller saw
/// none): no host has run there
/// (a mistyped `--data`, most likely), and opening it would leave an empty memory.db behind.
/// A data dir whose memory.db was lost but whose snapshot of core memories is there is
/// served: opening memory hydrates it from the snapshot, which must read.
fn refuse_without_memory_db(data_dir: &Path) -> Result<()> {
    if !data_dir.exists() {
        return Err(BadInput(format!(
            "--data: {} does not exist: no host has run there (expected the data dir a host ran on)",
            data_dir.display()
        ))
        .into());
    }
    let snapshot = data_dir.join(SNAPSHOT_FILE);
    if !snapshot.exists() {
        return Err(BadInput(format!(
            "no memory in {} (no {}): no host has run on this data dir",
            data_dir.display(),
            cairn_storage::memory::FILE
        ))
        .into());
    }
    // Checked before memory.db is made: one it cannot be hydrated from is refused with
    // nothing left behind.
    CheckedSnapshot::read(&snapshot).map_err(memory_failure)?;
    Ok(())
}

/// What a command that fills memory read and checked before memory.db is opened, so a
/// refusal leaves nothing behind, not even an empty memory.db.
enum Prepared {
    /// `cairn memory import`'s file.
    Import(CheckedImport),
    /// `cairn memory snapshot --hydrate`'s file.
    Hydration(CheckedSnapshot),
}

/// Check the file `command` writes, if any (see [`commands::check_output`]), and read and check what it brings into memory,
/// if it brings anything (`no_memory_yet`: into a data dir without memory.db, so every
/// entry an import refers to must be in it).
fn prepare(
    command: &MemoryCommand,
    data_dir: &Path,
    no_memory_yet: bool,
) -> Result<Option<Prepared>> {
    if let MemoryCommand::Export {
        output: Some(path), ..
    }
    | MemoryCommand::Snapshot {
        output: Some(path), ..
    } = command
    {
        commands::check_output(path, data_dir)?;
    }
    Ok(match command {
        MemoryCommand::Import { file, .. } => Some(Prepared::Import(commands::read_import(
            file,
            no_memory_yet,
        )?)),
        MemoryCommand::Snapshot {
            hydrate: Some(source),
            ..
        } => Some(Prepared::Hydration(commands::read_snapshot(source)?)),
        _ => None,
    })
}

/// Run `command` on the opened `memory`, with what [`prepare`] read for it.
fn dispatch(
    config: &HostConfig,
    memory: &CommandMemory,
    command: &MemoryCommand,
    prepared: Option<Prepared>,
) -> Result<()> {
    let service = &memory.service;
    let local = &memory.local;
    match command {
        MemoryCommand::List {
            filter,
            all,
            limit,
            json,
        } => list(service, filter, all, limit, json),
        MemoryCommand::Get { id, json } => get(memory, id, json),
        MemoryCommand::Search(args) => search(service, args, &config.memory.recall),
        MemoryCommand::Stats { json } => stats(memory, json),
        MemoryCommand::Forget { id, json } => forget(service, id, json),
        MemoryCommand::Purge {
            ids,
            forgotten,
            json,
        } => purge(local, ids, forgotten, json),
        MemoryCommand::Export { output, json, .. } => export(local, output.as_deref(), json),
        MemoryCommand::Import { file, json } => {
            let checked = match prepared {
                Some(Prepared::Import(checked)) => checked,
                _ => commands::read_import(file, false)?,
            };
            commands::import(local, file, checked, json)
        }
        MemoryCommand::Snapshot {
            output,
            hydrate,
            json,
        } => {
            let hydration = match (hydrate, prepared) {
                (Some(_), Some(Prepared::Hydration(checked))) => Some(checked),
                (Some(source), _) => Some(commands::read_snapshot(source)?),
                (None, _) => None,
            };
            let hydrate = hydrate.as_deref().zip(hydration);
            snapshot(local, config, output.as_deref(), hydrate, json)
        }
        MemoryCommand::Reindex { force, json } => reindex(local, config, force, json),
        MemoryCommand::Hygiene { json } => hygiene(local, json),
    }
}
