//! The `cairn` command line: argument parsing, output formatting and exit codes.
//!
//! Exit codes: 0 success, 1 failure at run time, 2 bad input (arguments, config, manifests).

mod lock;
mod memory;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use serde_json::json;

use std::collections::BTreeMap;

use tokio::sync::{Notify, watch};

use crate::agent::{Agent, llm};
use crate::buffer::{self, Buffer, BufferError, NewMessage};
use crate::config::HostConfig;
use crate::journal::{self, Journal, dispatch};
use crate::lifecycle::{Lifecycle, StopRequest};
use crate::memory::{MemoryService, MemoryStore};
use crate::plugin::capabilities::{HostServices, describe_grants};
use crate::plugin::kv::KvStore;
use crate::plugin::manifest::PluginKind;
use crate::plugin::manifest::is_valid_topic_pattern;
use crate::plugin::manifest::{self, ManifestError};
use crate::plugin::status::{self, StatusStore};
use crate::plugin::supervisor::PluginHandle;
use crate::plugin::{PluginHost, resolve};
use crate::router::Router;
use crate::webhook;

/// Cairn: a host process for AI agents with sandboxed WebAssembly plugins.
#[derive(Parser, Debug)]
#[command(name = "cairn", version, about)]
pub struct Cli {
    /// Host config file (default: ./cairn.yaml when present).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Data directory (overrides `data_dir` in the config and CAIRN_DATA_DIR).
    #[arg(long, global = true, value_name = "DIR")]
    data: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Load the plugins of a directory and run until Ctrl-C or SIGTERM.
    Run {
        /// Directory of plugin manifests (*.yaml) and their components.
        #[arg(long, value_name = "DIR")]
        plugins: PathBuf,
    },
    /// Inspect a plugin directory without running it.
    Plugins {
        #[command(subcommand)]
        command: PluginsCommand,
    },
    /// Show the plugins of the host on this data dir: state, restarts, quarantine.
    Status {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Put a message into the buffer (whether or not a host is running) and print its id.
    #[command(group(clap::ArgGroup::new("body").required(true).args(["text", "json"])))]
    Send {
        /// Channel the message is from (a channel plugin id to get the reply delivered).
        #[arg(long)]
        channel: String,
        /// Conversation it belongs to.
        #[arg(long)]
        conversation: String,
        /// Who sent it.
        #[arg(long, default_value = "operator")]
        sender: String,
        /// Priority (lower is served first); default: the channel's configured priority
        /// (`buffer.channel_priority`, else its manifest's, as the last host on this data
        /// dir read it, else `buffer.default_priority`).
        #[arg(long)]
        priority: Option<u32>,
        /// An id for the message: sending the same key on the same channel again stores
        /// nothing and prints the first message's id.
        #[arg(long, value_name = "KEY")]
        dedup_key: Option<String>,
        /// The message text (sent as `{"text": TEXT}`).
        text: Option<String>,
        /// A file holding the JSON payload (`-` for stdin).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// Read the event journal.
    Journal {
        #[command(subcommand)]
        command: JournalCommand,
    },
    /// Inspect, search and maintain agent memory (`<data>/memory.db`).
    Memory {
        #[command(subcommand)]
        command: memory::MemoryCommand,
    },
    /// List every setting with its environment variable and current value.
    Config {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum JournalCommand {
    /// Print the newest events, optionally only matching topics, and keep following.
    Tail {
        /// Topic pattern: exact, `prefix.*` or `*`.
        #[arg(long, default_value = "*")]
        topic: String,
        /// How many of the newest events to print first.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Keep printing new events until interrupted.
        #[arg(long)]
        follow: bool,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Deliver a subscriber's events again from a sequence number (on a running host too).
    Replay {
        /// The subscriber (plugin id).
        #[arg(long)]
        subscriber: String,
        /// The first event to deliver again.
        #[arg(long)]
        from: i64,
    },
    /// Events that subscribers gave up on: list them, retry them, or discard them.
    DeadLetters {
        /// What to do (default: list).
        #[arg(value_enum, default_value = "list")]
        action: DeadLetterAction,
        /// Only this subscriber's dead letters.
        #[arg(long)]
        subscriber: Option<String>,
        /// Only this dead letter.
        #[arg(long)]
        id: Option<i64>,
        /// How many to list, newest first.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

/// What `cairn journal dead-letters` does.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum DeadLetterAction {
    /// Print them.
    List,
    /// Deliver them once more (with the usual retries).
    Retry,
    /// Delete them.
    Discard,
}

#[derive(Subcommand, Debug)]
enum PluginsCommand {
    /// Validate every manifest, resolve dependencies, print the start order and grants.
    Check {
        /// Plugin directory.
        dir: PathBuf,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// List the plugins of a directory.
    List {
        /// Plugin directory.
        dir: PathBuf,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

/// Bad input from the user: reported, then the process exits with status 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(String);

/// Parse arguments, run the command and map the outcome to an exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            if error.downcast_ref::<BadInput>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

fn load_config(cli: &Cli) -> Result<HostConfig> {
    HostConfig::load(cli.config.as_deref(), cli.data.as_deref())
        .map_err(|e| BadInput(e.to_string()).into())
}

fn run(cli: Cli) -> Result<ExitCode> {
    match &cli.command {
        Command::Run { plugins } => {
            let config = load_config(&cli)?;
            init_tracing(&config.log);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?;
            runtime.block_on(run_host(config, plugins))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Plugins {
            command: PluginsCommand::Check { dir, json },
        } => {
            let config = load_config(&cli)?;
            check(dir, &config.data_dir, *json)
        }
        Command::Plugins {
            command: PluginsCommand::List { dir, json },
        } => list(dir, *json),
        Command::Memory { command } => {
            let config = load_config(&cli)?;
            memory::run(&config, command)
        }
        Command::Status { json } => {
            let config = load_config(&cli)?;
            show_status(&config.data_dir, *json)
        }
        Command::Send {
            channel,
            conversation,
            sender,
            priority,
            dedup_key,
            text,
            json,
        } => {
            let config = load_config(&cli)?;
            let payload = match (text, json) {
                (Some(text), _) => serde_json::json!({ "text": text }).to_string(),
                (None, Some(path)) if path.as_os_str() == "-" => {
                    let mut body = String::new();
                    std::io::Read::read_to_string(&mut std::io::stdin(), &mut body)
                        .map_err(|e| BadInput(format!("--json -: cannot read stdin: {e}")))?;
                    body
                }
                (None, Some(path)) => std::fs::read_to_string(path).map_err(|e| {
                    BadInput(format!("--json {}: cannot read: {e}", path.display()))
                })?,
                (None, None) => {
                    return Err(BadInput("give the message TEXT or --json FILE".into()).into());
                }
            };
            std::fs::create_dir_all(&config.data_dir)
                .with_context(|| format!("cannot create data dir {}", config.data_dir.display()))?;
            let buffer = Buffer::open(&config.data_dir, config.buffer.clone())?;
            let message = NewMessage {
                channel: channel.clone(),
                sender: sender.clone(),
                conversation: conversation.clone(),
                payload,
                priority: *priority,
                dedup_key: dedup_key.clone(),
            };
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
        Command::Journal { command } => {
            let config = load_config(&cli)?;
            journal_command(&config.data_dir, command)
        }
        Command::Config { json } => {
            let config = load_config(&cli)?;
            let settings = config.settings();
            if *json {
                let rows: Vec<_> = settings
                    .iter()
                    .map(|(env, path, value)| json!({"setting": path, "env": env, "value": value}))
                    .collect();
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                for (env, path, value) in settings {
                    println!("{path:<32} {env:<36} {value}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn init_tracing(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|e| {
        eprintln!("warning: log filter `{filter}` is invalid ({e}); using `info`");
        tracing_subscriber::EnvFilter::new("info")
    });
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}

fn manifest_errors(dir: &Path, errors: &[ManifestError]) -> anyhow::Error {
    for error in errors {
        eprintln!("{error}");
    }
    BadInput(format!(
        "{} problem{} in plugin directory {}",
        errors.len(),
        if errors.len() == 1 { "" } else { "s" },
        dir.display()
    ))
    .into()
}

fn check(dir: &Path, data_dir: &Path, json_output: bool) -> Result<ExitCode> {
    match resolve::load(dir) {
        Ok(set) => {
            if json_output {
                let plugins: Vec<_> = set
                    .start_order()
                    .iter()
                    .map(|m| {
                        json!({
                            "id": m.id,
                            "version": m.version.to_string(),
                            "kind": m.kind,
                            "api": m.api_version.version().to_string(),
                            "component": m.component,
                            "depends_on": m.depends_on.iter().map(|d| json!({"id": d.id, "version": d.version.to_string()})).collect::<Vec<_>>(),
                            "grants": describe_grants(m, data_dir),
                        })
                    })
                    .collect();
                let ids: Vec<&str> = set.start_order().iter().map(|m| m.id.as_str()).collect();
                let report = json!({"ok": true, "start_order": ids, "stop_order": set.stop_order(), "plugins": plugins});
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!(
                    "{}: {} plugin(s), all valid",
                    dir.display(),
                    set.start_order().len()
                );
                for (position, m) in set.start_order().iter().enumerate() {
                    let deps: Vec<String> = m
                        .depends_on
                        .iter()
                        .map(|d| format!("{} {}", d.id, d.version))
                        .collect();
                    println!(
                        "{}. {} {} ({}, api {}){}",
                        position + 1,
                        m.id,
                        m.version,
                        m.kind,
                        m.api_version.version(),
                        if deps.is_empty() {
                            String::new()
                        } else {
                            format!(" after {}", deps.join(", "))
                        }
                    );
                    for grant in describe_grants(m, data_dir) {
                        println!("     {grant}");
                    }
                }
                println!("stop order: {}", set.stop_order().join(", "));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(errors) if json_output => {
            let report = json!({"ok": false, "errors": errors});
            println!("{}", serde_json::to_string_pretty(&report)?);
            Err(BadInput(format!(
                "{} problem(s) in plugin directory {}",
                errors.len(),
                dir.display()
            ))
            .into())
        }
        Err(errors) => Err(manifest_errors(dir, &errors)),
    }
}

fn list(dir: &Path, json_output: bool) -> Result<ExitCode> {
    let (manifests, errors) = manifest::load_dir(dir).map_err(|e| {
        BadInput(format!(
            "{}: cannot read plugin directory: {e}",
            dir.display()
        ))
    })?;
    if json_output {
        let rows: Vec<_> = manifests
            .iter()
            .map(|m| {
                json!({"id": m.id, "version": m.version.to_string(), "kind": m.kind, "api": m.api.to_string(),
                       "description": m.description, "manifest": m.file})
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"plugins": rows, "errors": errors}))?
        );
    } else {
        println!(
            "{:<24} {:<10} {:<15} {:<8} DESCRIPTION",
            "ID", "VERSION", "KIND", "API"
        );
        for m in &manifests {
            println!(
                "{:<24} {:<10} {:<15} {:<8} {}",
                m.id,
                m.version,
                m.kind,
                m.api.to_string(),
                m.description.as_deref().unwrap_or("")
            );
        }
    }
    if errors.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else if json_output {
        Err(BadInput(format!(
            "{} problem(s) in plugin directory {}",
            errors.len(),
            dir.display()
        ))
        .into())
    } else {
        Err(manifest_errors(dir, &errors))
    }
}

fn print_event(event: &journal::Event, json_output: bool) -> Result<()> {
    if json_output {
        println!("{}", serde_json::to_string(event)?);
    } else {
        println!(
            "#{:<6} {:<28} {:<12} {}",
            event.seq, event.topic, event.source, event.payload
        );
    }
    Ok(())
}

fn journal_command(data_dir: &Path, command: &JournalCommand) -> Result<ExitCode> {
    let conn = journal::open_read_only(data_dir)?;
    match command {
        JournalCommand::Tail {
            topic,
            limit,
            follow,
            json,
        } => {
            if !is_valid_topic_pattern(topic) {
                return Err(BadInput(format!(
                    "--topic: `{topic}` is not a topic pattern (exact, `prefix.*` or `*`)"
                ))
                .into());
            }
            let patterns = vec![topic.clone()];
            let mut conn = conn;
            let mut last = 0;
            if let Some(conn) = &conn {
                for event in journal::recent(conn, &patterns, *limit)? {
                    last = event.seq;
                    print_event(&event, *json)?;
                }
            }
            if !*follow {
                return Ok(ExitCode::SUCCESS);
            }
            // Runs until the user interrupts it.
            loop {
                std::thread::sleep(std::time::Duration::from_millis(200));
                if conn.is_none() {
                    conn = journal::open_read_only(data_dir)?;
                }
                if let Some(conn) = &conn {
                    for event in journal::events_after(conn, last, &patterns, 1000)? {
                        last = event.seq;
                        print_event(&event, *json)?;
                    }
                }
            }
        }
        JournalCommand::Replay { subscriber, from } => {
            if *from < 1 {
                return Err(
                    BadInput("--from: expected a sequence number of 1 or more".into()).into(),
                );
            }
            let conn = journal::open_for_admin(data_dir)?;
            if !journal::replay_from(&conn, subscriber, *from)? {
                return Err(BadInput(format!(
                    "--subscriber: no subscriber `{subscriber}` in this journal"
                ))
                .into());
            }
            println!("{subscriber} will receive events again from #{from}");
            Ok(ExitCode::SUCCESS)
        }
        JournalCommand::DeadLetters {
            action: action @ (DeadLetterAction::Retry | DeadLetterAction::Discard),
            subscriber,
            id,
            ..
        } => {
            if subscriber.is_none() && id.is_none() {
                return Err(BadInput(
                    "name the dead letters: --subscriber ID and/or --id N".into(),
                )
                .into());
            }
            let conn = journal::open_for_admin(data_dir)?;
            let changed = match action {
                DeadLetterAction::Retry => {
                    journal::retry_dead_letters(&conn, subscriber.as_deref(), *id)?
                }
                _ => journal::discard_dead_letters(&conn, subscriber.as_deref(), *id)?,
            };
            println!(
                "{changed} dead letter(s) {}",
                if matches!(action, DeadLetterAction::Retry) {
                    "queued for retry"
                } else {
                    "discarded"
                }
            );
            Ok(ExitCode::SUCCESS)
        }
        JournalCommand::DeadLetters { limit, json, .. } => {
            let letters = match &conn {
                Some(conn) => journal::dead_letters(conn, *limit)?,
                None => Vec::new(),
            };
            if *json {
                println!("{}", serde_json::to_string_pretty(&letters)?);
            } else if letters.is_empty() {
                println!("no dead letters");
            } else {
                for letter in letters {
                    println!(
                        "{} #{} {} after {} attempt(s): {}",
                        letter.subscriber, letter.seq, letter.topic, letter.attempts, letter.error
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn age(since_ms: i64) -> String {
    let seconds = (crate::store::now_ms() - since_ms).max(0) / 1000;
    match seconds {
        s if s < 120 => format!("{s}s ago"),
        s if s < 7200 => format!("{}m ago", s / 60),
        s if s < 172_800 => format!("{}h ago", s / 3600),
        s => format!("{}d ago", s / 86_400),
    }
}

fn show_status(data_dir: &Path, json_output: bool) -> Result<ExitCode> {
    let buffer_stats = buffer::read_stats(data_dir)?;
    let subscribers = match journal::open_read_only(data_dir)? {
        Some(conn) => journal::subscriber_lags(&conn)?,
        None => Vec::new(),
    };
    let Some(status::StatusReport { host: run, plugins }) = status::read(data_dir)? else {
        if json_output {
            let report = json!({"data_dir": data_dir, "host": null, "plugins": [], "buffer": buffer_stats, "subscribers": subscribers});
            println!("{report}");
        } else {
            println!("no host has run on data dir {}", data_dir.display());
            if let Some(stats) = &buffer_stats {
                print_buffer(stats);
            }
        }
        return Ok(ExitCode::SUCCESS);
    };
    let running =
        run.as_ref().is_some_and(|r| r.stopped_at.is_none()) && lock::host_holds(data_dir);
    let plugins = status::as_seen_now(plugins, running);
    if json_output {
        let host = run.as_ref().map(|r| {
            json!({"pid": r.pid, "plugins_dir": r.plugins_dir, "started_at": r.started_at,
                   "stopped_at": r.stopped_at, "running": running})
        });
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"data_dir": data_dir, "host": host, "plugins": plugins, "buffer": buffer_stats, "subscribers": subscribers})
            )?
        );
        return Ok(ExitCode::SUCCESS);
    }
    match &run {
        Some(r) if running => println!(
            "host: running (pid {}, started {}, plugins {})",
            r.pid,
            age(r.started_at),
            r.plugins_dir
        ),
        Some(r) => match r.stopped_at {
            Some(stopped) => println!("host: stopped {} (plugins {})", age(stopped), r.plugins_dir),
            None => println!(
                "host: not running; the last run (pid {}, started {}) ended without a clean stop \
                 (LAST STATE is what it recorded before it ended)",
                r.pid,
                age(r.started_at)
            ),
        },
        None => println!("host: never ran on {}", data_dir.display()),
    }
    println!(
        "{:<24} {:<10} {:<15} {:<12} {:<12} {:>8} {:>6}  LAST ERROR",
        "PLUGIN", "VERSION", "KIND", "STATE", "LAST STATE", "RESTARTS", "FAULTS"
    );
    for report in &plugins {
        let p = &report.status;
        println!(
            "{:<24} {:<10} {:<15} {:<12} {:<12} {:>8} {:>6}  {}",
            p.id,
            p.version,
            p.kind,
            p.state,
            report.last_state,
            p.restarts,
            p.faults,
            p.last_error.as_deref().unwrap_or("-")
        );
    }
    if let Some(stats) = &buffer_stats {
        print_buffer(stats);
    }
    if !subscribers.is_empty() {
        println!("\nsubscribers:");
        for s in &subscribers {
            println!(
                "  {:<24} cursor {:<8} lag {:<6} dead letters {:<4} {}",
                s.id,
                s.cursor,
                s.lag,
                s.dead_letters,
                s.patterns.join(", ")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_buffer(stats: &buffer::BufferStats) {
    let oldest = stats
        .oldest_unrouted_age_ms
        .map(|age| format!(", oldest waiting {:.1}s", age as f64 / 1000.0))
        .unwrap_or_default();
    println!(
        "\nbuffer: {} unrouted{oldest}; {} stored",
        stats.depth, stats.stored
    );
    for channel in &stats.channels {
        println!("  {:<24} {} unrouted", channel.channel, channel.unrouted);
    }
    let counts = |map: &buffer::StatusCounts| {
        if map.is_empty() {
            "none".to_string()
        } else {
            map.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    println!("batches: {}", counts(&stats.batches));
    println!("tasks: {}", counts(&stats.tasks));
    for task in &stats.recent_tasks {
        let outcome = task
            .result
            .as_deref()
            .or(task.error.as_deref())
            .unwrap_or("");
        println!(
            "  task {} (batch {}) {}: {}",
            task.id, task.batch_id, task.status, outcome
        );
    }
}

async fn run_host(config: HostConfig, plugins_dir: &Path) -> Result<()> {
    let set = resolve::load(plugins_dir).map_err(|errors| manifest_errors(plugins_dir, &errors))?;
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("cannot create data dir {}", config.data_dir.display()))?;
    let _lock = lock::DataDirLock::acquire(&config.data_dir)?;
    let channel_manifests: Vec<_> = set
        .start_order()
        .iter()
        .filter(|m| m.kind == PluginKind::Channel)
        .collect();
    let listener = if channel_manifests
        .iter()
        .any(|m| m.channel.as_ref().is_some_and(|c| c.webhook))
    {
        Some(webhook::bind(&config.http).await?)
    } else {
        None
    };
    let channel_defaults = channel_manifests
        .iter()
        .filter_map(|m| m.channel.as_ref()?.priority.map(|p| (m.id.clone(), p)))
        .collect();
    let buffer = Arc::new(Buffer::open(&config.data_dir, config.buffer.clone())?);
    let reprioritised = buffer.set_channel_priorities(channel_defaults)?;
    if reprioritised > 0 {
        tracing::info!(
            messages = reprioritised,
            "unrouted messages took their channel's manifest priority"
        );
    }
    let kv = Arc::new(KvStore::open(&config.data_dir, config.kv.clone())?);
    let status = Arc::new(StatusStore::open(&config.data_dir)?);
    status.begin_run(plugins_dir)?;
    let journal = Arc::new(Journal::open(&config.data_dir, config.journal.clone())?);
    check_memory_backend(&config, &set)?;
    let memory_store = MemoryStore::open(&config.data_dir, config.memory.clone())?;
    let memory = Arc::new(MemoryService::new(memory_store.clone()));
    let lifecycle = Arc::new(
        Lifecycle::open(&config.data_dir, config.lifecycle.clone(), journal.clone())?
            .with_memory(memory_store.clone()),
    );
    let stop_request = Arc::new(StopRequest::default());
    let services = Arc::new(HostServices {
        kv,
        inbox: Some(buffer.clone()),
        events: Some(journal.clone()),
        interrupt: Some(lifecycle.interrupt()),
        stop: Some(stop_request.clone()),
        memory: Some(memory.clone()),
    });
    let host = PluginHost::start(&set, &config.plugin_host(), services, status.clone()).await?;
    if let Some(backend) = memory.backend_plugin() {
        tracing::info!(plugin = backend, "memory is served by a backend plugin");
    }
    memory_store.start_embedder();

    let (requeued_batches, requeued_tasks) = buffer.requeue_interrupted().await?;
    if requeued_batches + requeued_tasks > 0 {
        tracing::info!(
            batches = requeued_batches,
            tasks = requeued_tasks,
            "resuming work interrupted by the last stop"
        );
    }
    let handle_of = |id: &str| host.handle(id).map(|h| (id.to_string(), h.clone()));
    let channels: BTreeMap<String, PluginHandle> = channel_manifests
        .iter()
        .filter_map(|m| handle_of(&m.id))
        .collect();
    let webhook_channels: BTreeMap<String, PluginHandle> = channel_manifests
        .iter()
        .filter(|m| m.channel.as_ref().is_some_and(|c| c.webhook))
        .filter_map(|m| handle_of(&m.id))
        .collect();

    let (stop, stopping) = watch::channel(false);
    let routed = Arc::new(Notify::new());
    let router = Router::new(buffer.clone(), config.router.clone(), routed.clone())?;
    let llm: Arc<dyn llm::LlmProvider> = Arc::from(llm::provider(&config.agent.llm));
    let agent = Arc::new(
        Agent::new(
            buffer.clone(),
            Some(journal.clone()),
            Some(memory.clone()),
            llm,
            channels,
            config.agent.clone(),
        )
        .with_session_timeout(config.lifecycle.session_timeout_secs),
    );
    let mut workers = tokio::task::JoinSet::new();
    workers.spawn(router.run(stopping.clone()));
    workers.spawn(agent.clone().run_main(routed.clone(), stopping.clone()));
    workers.spawn(agent.run_tasks(routed, stopping.clone()));
    workers.spawn(buffer.clone().run_retention(stopping.clone()));
    workers.spawn(journal.clone().run_retention(stopping.clone()));
    workers.spawn(lifecycle.clone().run(stopping.clone()));
    workers.spawn(run_memory_hygiene(memory_store.clone(), stopping.clone()));
    let scheduled = set
        .start_order()
        .iter()
        .flat_map(|m| m.schedules())
        .collect();
    workers.spawn(lifecycle.run_scheduler(scheduled, stopping.clone()));
    for manifest in set
        .start_order()
        .iter()
        .filter(|m| !m.events.subscribes.is_empty())
    {
        if let Some(handle) = host.handle(&manifest.id) {
            let patterns = manifest.events.subscribes.clone();
            workers.spawn(dispatch::serve(
                journal.clone(),
                handle.clone(),
                patterns,
                stopping.clone(),
            ));
        }
    }
    if let Some(listener) = listener {
        let address = listener.local_addr()?;
        tracing::info!("webhook server listening on http://{address}/channels/<id>");
        let http = config.http.clone();
        workers.spawn(
            async move { webhook::serve(listener, &http, webhook_channels, stopping).await },
        );
    }
    tracing::info!(
        data_dir = %config.data_dir.display(),
        plugins = set.start_order().len(),
        "cairn is running; press Ctrl-C to stop"
    );
    wait_for_shutdown(&stop_request, &buffer).await;
    tracing::info!("stopping");
    let _ = stop.send(true);
    let drained = tokio::time::timeout(SHUTDOWN_DEADLINE, async {
        while workers.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            "work still running after {}s; stopping anyway (it resumes on the next start)",
            SHUTDOWN_DEADLINE.as_secs()
        );
    }
    host.stop().await;
    memory_store.stop_embedder();
    status.end_run()?;
    tracing::info!("stopped");
    Ok(())
}

/// `memory.backend` must be `sqlite` or the id of a memory-backend plugin of the directory.
fn check_memory_backend(config: &HostConfig, set: &resolve::PluginSet) -> Result<()> {
    let backend = &config.memory.backend;
    if backend == "sqlite" {
        return Ok(());
    }
    match set.start_order().iter().find(|m| &m.id == backend) {
        Some(m) if m.kind == PluginKind::MemoryBackend => Ok(()),
        Some(m) => Err(BadInput(format!(
            "memory.backend: plugin `{backend}` is a {}, not a memory-backend",
            m.kind
        ))
        .into()),
        None => Err(BadInput(format!(
            "memory.backend: no plugin `{backend}` in the plugin directory (expected `sqlite` or a memory-backend plugin id)"
        ))
        .into()),
    }
}

/// Run memory hygiene when due (it throttles itself to `hygiene_interval_hours`, with its
/// state in memory.db), checking every ten minutes until `stop`.
async fn run_memory_hygiene(memory: Arc<MemoryStore>, mut stop: watch::Receiver<bool>) {
    loop {
        let store = memory.clone();
        match tokio::task::spawn_blocking(move || store.hygiene(false)).await {
            Ok(Ok(report)) if report.ran => tracing::info!(
                forgotten = ?report.forgotten,
                snapshot_entries = ?report.snapshot_entries,
                "memory hygiene ran"
            ),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!("memory hygiene failed: {e}"),
            Err(e) => tracing::warn!("memory hygiene panicked: {e}"),
        }
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_secs(600)) => {}
            _ = stop.changed() => return,
        }
    }
}

/// How long a stop waits for the router, the agent and the webhook server to finish.
const SHUTDOWN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// Wait for Ctrl-C or SIGTERM, or for the terminal's channel to ask for a stop; then
/// first until that channel's buffered messages are answered (a signal cuts that short).
async fn wait_for_shutdown(stop_request: &StopRequest, buffer: &Buffer) {
    let signal = wait_for_signal();
    tokio::pin!(signal);
    tokio::select! {
        _ = &mut signal => {}
        (channel, reason) = stop_request.requested() => {
            tracing::info!(%channel, %reason, "stop requested; answering what the channel sent first");
            tokio::select! {
                _ = &mut signal => {}
                _ = channel_settled(buffer, &channel) => {}
            }
        }
    }
}

/// Return once `channel` has no unrouted message and no queued or running work.
async fn channel_settled(buffer: &Buffer, channel: &str) {
    loop {
        match buffer.has_pending_work(channel) {
            Ok(false) => return,
            Ok(true) => {}
            Err(e) => {
                tracing::warn!("cannot tell whether {channel}'s messages are answered: {e}");
                return;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

async fn wait_for_signal() {
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(e) => {
                tracing::warn!("cannot listen for SIGTERM: {e}");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}
