//! `cairn memory …`: inspect, search and maintain `<data>/memory.db` (whether or not a host
//! is running: SQLite's WAL lets both work at once).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Subcommand;
use serde_json::json;

use super::BadInput;
use crate::config::HostConfig;
use crate::memory::store::ListFilter;
use crate::memory::{
    MemoryEntry, MemoryError, MemoryKind, MemoryStore, RecallHit, RecallQuery, SNAPSHOT_FILE, Scope,
};

/// The scope and kind filters shared by `list` and `search`.
#[derive(clap::Args, Debug, Clone)]
pub struct ScopeArgs {
    /// Only this agent's memories (plus agent-wide shared ones).
    #[arg(long)]
    agent: Option<String>,
    /// Only this user's memories (plus memories shared by all users).
    #[arg(long)]
    user: Option<String>,
    /// Only this session's memories.
    #[arg(long)]
    session: Option<String>,
    /// Only these kinds (repeatable): episode, fact, core, reflection, procedure.
    #[arg(long = "kind", value_parser = parse_kind)]
    kinds: Vec<MemoryKind>,
    /// Only this category.
    #[arg(long)]
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
        #[arg(long, default_value_t = 50)]
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
    Search {
        /// What to look for (plain words; no query syntax).
        query: String,
        #[command(flatten)]
        filter: ScopeArgs,
        /// Answer as memory stood at this time (RFC 3339, YYYY-MM-DD, or ms since the epoch).
        #[arg(long, value_parser = parse_time)]
        as_of: Option<i64>,
        /// Only memories valid from this time on.
        #[arg(long, value_parser = parse_time)]
        since: Option<i64>,
        /// Only memories valid from before this time.
        #[arg(long, value_parser = parse_time)]
        until: Option<i64>,
        /// How many hits.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// Drop hits less relevant than this (0–1; default from the config).
        #[arg(long)]
        min_relevance: Option<f64>,
        /// BM25 only, even when embeddings are on.
        #[arg(long)]
        lexical: bool,
        /// Print each hit's score components.
        #[arg(long)]
        explain: bool,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
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
    /// Read a JSONL export; a bad line rejects the whole file; existing ids are skipped.
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

/// A time argument: ms since the epoch, RFC 3339, or a date (midnight UTC).
fn parse_time(text: &str) -> Result<i64, String> {
    if let Ok(ms) = text.parse::<i64>() {
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

fn memory_failure(error: MemoryError) -> anyhow::Error {
    match error {
        MemoryError::InvalidInput(text) | MemoryError::NotFound(text) => BadInput(text).into(),
        other => anyhow::Error::new(other),
    }
}

fn open(config: &HostConfig) -> Result<Arc<MemoryStore>> {
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("cannot create data dir {}", config.data_dir.display()))?;
    MemoryStore::open(&config.data_dir, config.memory.clone()).with_context(|| {
        format!(
            "cannot open {}",
            config.data_dir.join("memory.db").display()
        )
    })
}

fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M").to_string())
        .unwrap_or_else(|| ms.to_string())
}

fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}

fn entry_line(entry: &MemoryEntry) -> String {
    let mut state = String::new();
    if entry.forgotten_at.is_some() {
        state.push_str(" [forgotten]");
    }
    if let Some(by) = &entry.superseded_by {
        state.push_str(&format!(" [superseded by {by}]"));
    }
    format!(
        "{}  {:<10} {}  imp {:>2}  {}{}",
        entry.id,
        entry.kind.as_str(),
        time(entry.valid_from),
        entry.importance,
        one_line(&entry.content, 80),
        state
    )
}

fn print_json(value: &impl serde::Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Run a `cairn memory` command.
pub fn run(config: &HostConfig, command: &MemoryCommand) -> Result<ExitCode> {
    let memory = open(config)?;
    match command {
        MemoryCommand::List {
            filter,
            all,
            limit,
            json,
        } => {
            let entries = memory
                .list(&ListFilter {
                    scope: filter.scope(),
                    kinds: filter.kinds.clone(),
                    category: filter.category.clone(),
                    include_superseded: *all,
                    include_forgotten: *all,
                    limit: *limit,
                })
                .map_err(memory_failure)?;
            if *json {
                print_json(&entries)?;
            } else if entries.is_empty() {
                println!("no memories");
            } else {
                for entry in &entries {
                    println!("{}", entry_line(entry));
                }
            }
        }
        MemoryCommand::Get { id, json } => {
            let entry = memory
                .get(id)
                .map_err(memory_failure)?
                .ok_or_else(|| BadInput(format!("no memory `{id}`")))?;
            let trail = memory.audit_trail(id).map_err(memory_failure)?;
            if *json {
                print_json(&json!({"entry": entry, "audit": trail}))?;
            } else {
                print_entry(&entry);
                for row in trail {
                    let detail = row.detail.map(|d| format!(" ({d})")).unwrap_or_default();
                    println!(
                        "audit:       {} {} by {}{detail}",
                        time(row.at),
                        row.action,
                        row.actor
                    );
                }
            }
        }
        MemoryCommand::Search {
            query,
            filter,
            as_of,
            since,
            until,
            limit,
            min_relevance,
            lexical,
            explain,
            json,
        } => {
            if *limit == 0 {
                return Err(BadInput("--limit: expected at least 1".into()).into());
            }
            let hits = memory
                .recall(&RecallQuery {
                    text: query.clone(),
                    scope: filter.scope(),
                    kinds: filter.kinds.clone(),
                    categories: filter.category.iter().cloned().collect(),
                    exclude_session: None,
                    since: *since,
                    until: *until,
                    as_of: *as_of,
                    limit: *limit,
                    min_relevance: *min_relevance,
                    lexical_only: *lexical,
                })
                .map_err(memory_failure)?;
            if *json {
                print_json(&hits)?;
            } else {
                print_hits(&hits, *explain);
            }
        }
        MemoryCommand::Stats { json } => {
            let stats = memory.stats().map_err(memory_failure)?;
            if *json {
                print_json(&stats)?;
            } else {
                println!("live entries by kind:     {:?}", stats.live_by_kind);
                println!("live entries by category: {:?}", stats.live_by_category);
                println!("superseded (kept):        {}", stats.superseded);
                println!("forgotten (until purge):  {}", stats.forgotten);
                println!(
                    "embedded / backlog:       {} / {}",
                    stats.embedded, stats.embedding_backlog
                );
                println!("embedding cache rows:     {}", stats.embedding_cache);
                println!("sessions:                 {:?}", stats.sessions);
                println!(
                    "memory.db size:           {:.1} MiB",
                    stats.database_bytes as f64 / 1_048_576.0
                );
                println!(
                    "hygiene last run:         {}",
                    stats
                        .hygiene_last_run
                        .map(time)
                        .unwrap_or_else(|| "never".into())
                );
            }
        }
        MemoryCommand::Forget { id, json } => {
            let forgotten = memory.forget_blocking(id, "cli").map_err(memory_failure)?;
            if !forgotten && memory.get(id).map_err(memory_failure)?.is_none() {
                return Err(BadInput(format!("no memory `{id}`")).into());
            }
            if *json {
                print_json(&json!({"id": id, "forgotten": forgotten}))?;
            } else if forgotten {
                println!("forgot {id} (kept until `cairn memory purge`)");
            } else {
                println!("{id} was already forgotten");
            }
        }
        MemoryCommand::Purge {
            ids,
            forgotten,
            json,
        } => {
            if ids.is_empty() && !forgotten {
                return Err(BadInput(
                    "purge removes data for good: name the memories with --id, or pass --forgotten to remove every forgotten memory".into(),
                )
                .into());
            }
            let removed = memory.purge(ids, "cli").map_err(memory_failure)?;
            if *json {
                print_json(&json!({"removed": removed}))?;
            } else {
                println!("removed {removed} memories for good");
            }
        }
        MemoryCommand::Export { output, json, .. } => {
            let records = match output {
                Some(path) => {
                    let file = std::fs::File::create(path)
                        .with_context(|| format!("cannot create {}", path.display()))?;
                    let mut writer = std::io::BufWriter::new(file);
                    let records = memory.export(&mut writer).map_err(memory_failure)?;
                    writer
                        .flush()
                        .with_context(|| format!("cannot write {}", path.display()))?;
                    records
                }
                None => {
                    let stdout = std::io::stdout();
                    let mut lock = stdout.lock();
                    memory.export(&mut lock).map_err(memory_failure)?
                }
            };
            if let Some(path) = output {
                if *json {
                    print_json(&json!({"records": records, "path": path}))?;
                } else {
                    println!("exported {records} records to {}", path.display());
                }
            }
        }
        MemoryCommand::Import { file, json } => {
            let text = if file.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).context("cannot read stdin")?
            } else {
                std::fs::read_to_string(file)
                    .map_err(|e| BadInput(format!("{}: {e}", file.display())))?
            };
            let report = memory.import(&text).map_err(|e| match e {
                MemoryError::InvalidInput(text) => {
                    BadInput(format!("{}: {text} (nothing was imported)", file.display())).into()
                }
                other => memory_failure(other),
            })?;
            if *json {
                print_json(&report)?;
            } else {
                println!(
                    "imported {} memories, {} sessions and {} audit rows ({} already present)",
                    report.entries, report.sessions, report.audit, report.skipped
                );
            }
        }
        MemoryCommand::Snapshot {
            output,
            hydrate,
            json,
        } => {
            if let Some(source) = hydrate {
                if !source.is_file() {
                    return Err(
                        BadInput(format!("--hydrate: {} is not a file", source.display())).into(),
                    );
                }
                let restored = memory.hydrate(source).map_err(memory_failure)?;
                if *json {
                    print_json(&json!({"restored": restored}))?;
                } else {
                    println!(
                        "restored {restored} core memories from {}",
                        source.display()
                    );
                }
            } else {
                let path = output
                    .clone()
                    .unwrap_or_else(|| config.data_dir.join(SNAPSHOT_FILE));
                let written = memory.export_snapshot(&path).map_err(memory_failure)?;
                if *json {
                    print_json(&json!({"core_memories": written, "path": path}))?;
                } else {
                    println!("wrote {written} core memories to {}", path.display());
                }
            }
        }
        MemoryCommand::Reindex { force, json } => {
            if config.memory.embeddings.provider == crate::memory::embed::ProviderKind::None {
                return Err(BadInput(
                    "memory.embeddings.provider is `none`: there is nothing to index with".into(),
                )
                .into());
            }
            if *force {
                memory.clear_vectors().map_err(memory_failure)?;
            }
            let total = memory.embedding_backlog().map_err(memory_failure)?;
            let bar = if *json {
                indicatif::ProgressBar::hidden()
            } else {
                indicatif::ProgressBar::new(total).with_style(
                    indicatif::ProgressStyle::with_template(
                        "embedding {bar:40} {pos}/{len} ({per_sec}, eta {eta})",
                    )
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
                )
            };
            let embedded = memory
                .embed_pending(|done| {
                    bar.set_length(total.max(done));
                    bar.set_position(done);
                })
                .map_err(memory_failure)?;
            bar.finish_and_clear();
            if *json {
                print_json(&json!({"embedded": embedded}))?;
            } else {
                println!("embedded {embedded} memories");
            }
        }
        MemoryCommand::Hygiene { json } => {
            let report = memory.hygiene(true).map_err(memory_failure)?;
            if *json {
                print_json(&report)?;
            } else {
                println!("forgotten by retention: {:?}", report.forgotten);
                if let Some(n) = report.snapshot_entries {
                    println!("snapshot: {n} core memories");
                }
            }
        }
    }
    memory.stop_embedder();
    Ok(ExitCode::SUCCESS)
}

fn print_entry(entry: &MemoryEntry) {
    println!("id:          {}", entry.id);
    println!("kind:        {} ({})", entry.kind, entry.category);
    println!("content:     {}", entry.content);
    let scope = &entry.scope;
    println!(
        "scope:       agent {} / user {} / session {}",
        scope.agent_id.as_deref().unwrap_or("-"),
        scope.user_id.as_deref().unwrap_or("-"),
        scope.session_id.as_deref().unwrap_or("-")
    );
    println!("importance:  {}", entry.importance);
    if !entry.tags.is_empty() {
        println!("tags:        {}", entry.tags.join(", "));
    }
    if !entry.issue_refs.is_empty() || !entry.pr_refs.is_empty() {
        println!(
            "refs:        issues {:?}, pull requests {:?}",
            entry.issue_refs, entry.pr_refs
        );
    }
    if let Some(subject) = &entry.subject {
        println!(
            "states:      {subject} / {}",
            entry.predicate.as_deref().unwrap_or("-")
        );
    }
    if !entry.sources.is_empty() {
        println!("sources:     {}", entry.sources.join(", "));
    }
    println!(
        "valid:       {} → {}",
        time(entry.valid_from),
        entry.valid_to.map(time).unwrap_or_else(|| "now".into())
    );
    println!("recorded:    {}", time(entry.recorded_at));
    if let Some(by) = &entry.superseded_by {
        println!("superseded:  by {by}");
    }
    if let Some(at) = entry.forgotten_at {
        println!("forgotten:   {}", time(at));
    }
}

fn print_hits(hits: &[RecallHit], explain: bool) {
    if hits.is_empty() {
        println!("nothing recalled");
        return;
    }
    for (rank, hit) in hits.iter().enumerate() {
        println!(
            "{:>2}. {:.3}  {}",
            rank + 1,
            hit.score,
            entry_line(&hit.entry)
        );
        if explain {
            let e = &hit.explain;
            let bm25 = e
                .bm25_raw
                .map(|raw| format!("{:.3} (raw {raw:.3e})", e.bm25))
                .unwrap_or_else(|| "no match".into());
            let cosine = e
                .cosine
                .map(|c| format!("{c:.3}"))
                .unwrap_or_else(|| "n/a".into());
            println!(
                "      bm25 {bm25} · cosine {cosine} · relevance {:.3} · importance {:.2} · recency {:.3} (age {:.1} h)",
                e.relevance, e.importance, e.recency, e.age_hours
            );
        }
    }
}
