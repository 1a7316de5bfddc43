//! The `cairn` command line: argument parsing, output formatting and exit codes.
//!
//! Exit codes: 0 success, 1 failure at run time, 2 bad input (arguments, config, manifests).

mod buffer;
mod journal;
mod lock;
mod memory;
mod plugin_dev;
mod plugins;
mod run;
mod send;
mod status;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use cairn_vocab::text::is_blank;
use clap::{Parser, Subcommand};
use serde_json::json;

use crate::config::HostConfig;
use crate::store::StorageError;
use journal::{JournalCommand, journal_command};
use plugins::{PluginsCommand, check, list};
use run::run_host;
use status::show_status;

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
        /// Serve the status console and `/metrics` on this address, e.g. 127.0.0.1:8790
        /// (overrides `console.listen`; an address beyond loopback needs `console.token`).
        #[arg(long, value_name = "ADDR", value_parser = parse_listen)]
        console: Option<std::net::SocketAddr>,
    },
    /// Inspect a plugin directory without running it; write and build plugin projects.
    #[command(visible_alias = "plugin")]
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
    Send(send::SendArgs),
    /// Failed batches and tasks: list them, queue them again.
    Buffer {
        #[command(subcommand)]
        command: buffer::BufferCommand,
    },
    /// Read the event journal.
    Journal {
        #[command(subcommand)]
        command: JournalCommand,
    },
    /// Inspect, search and maintain agent memory (`<data>/memory.db`, or the backend plugin
    /// `memory.backend` names).
    Memory {
        /// Where the backend plugin `memory.backend` names is found (default: the plugin
        /// directory the last host on the data dir ran).
        #[arg(long, global = true)]
        plugins: Option<PathBuf>,
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

/// Bad input from the user: reported, then the process exits with status 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(String);

/// Text that says something: not empty, not only blanks or invisible characters (a message
/// or a question).
pub(crate) fn parse_words(text: &str) -> Result<String, String> {
    if is_blank(text) {
        return Err("expected some words, not an empty text".into());
    }
    Ok(text.to_string())
}

/// An id or name argument (`--user`, `--agent`, …): text that shows, since an empty one
/// would quietly match nothing, or everything.
pub(crate) fn parse_id(text: &str) -> Result<String, String> {
    if is_blank(text) {
        return Err("expected an id, not an empty text".into());
    }
    Ok(text.to_string())
}

/// A listening address argument (`--console`): an IP and a port, as `http.listen` is.
pub(crate) fn parse_listen(text: &str) -> Result<std::net::SocketAddr, String> {
    text.parse().map_err(|_| {
        "expected IP:PORT, such as 127.0.0.1:8790 (an IP address, not a host name such as \
         localhost)"
            .to_string()
    })
}

/// A priority argument (`--priority`): a whole number, lower served first.
pub(crate) fn parse_priority(text: &str) -> Result<u32, String> {
    text.parse().map_err(|_| {
        format!(
            "expected a whole number from 0 to {} (lower is served first)",
            u32::MAX
        )
    })
}

/// A time argument in messages: RFC 3339, as the operator may have typed it.
pub(crate) fn shown_time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map_or_else(|| format!("{ms} ms"), |t| t.to_rfc3339())
}

/// `error` and its causes, each cause said once: most of our errors already hold their
/// cause's words (`buffer: the disk is full …`), which anyhow's `{:#}` would repeat.
fn in_full(error: &anyhow::Error) -> String {
    error
        .chain()
        .skip(1)
        .fold(error.to_string(), |said, cause| {
            let cause = cause.to_string();
            if said.contains(&cause) {
                said
            } else {
                format!("{said}: {cause}")
            }
        })
}

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
            eprintln!("error: {}", in_full(&error));
            if error.downcast_ref::<BadInput>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// A store that cannot be opened for a reason the user must fix — a bad or unreachable
/// `storage:` URL, a schema newer than this build, a damaged database file — is bad input (exit 2); anything else
/// is an internal failure.
pub(crate) fn storage_unusable(error: StorageError) -> anyhow::Error {
    match error {
        StorageError::BadUrl { .. }
        | StorageError::Unreachable { .. }
        | StorageError::SchemaTooNew { .. }
        | StorageError::TooNew { .. }
        | StorageError::Damaged { .. }
        | StorageError::NotAFile { .. } => BadInput(error.to_string()).into(),
        other => other.into(),
    }
}

fn load_config(cli: &Cli) -> Result<HostConfig> {
    let config = HostConfig::load(cli.config.as_deref(), cli.data.as_deref())
        .map_err(|e| BadInput(e.to_string()))?;
    let data_dir = &config.data_dir;
    if data_dir.exists() && !data_dir.is_dir() {
        return Err(BadInput(format!(
            "data dir (--data, data_dir or CAIRN_DATA_DIR): {} is not a directory",
            data_dir.display()
        ))
        .into());
    }
    Ok(config)
}

/// How long an exiting host waits for its last SQLite database to close once the runtime
/// is down (work a stop left behind may still hold one).
const DATABASE_CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Wait up to [`DATABASE_CLOSE_WAIT`] for every database to close whole, and name each one
/// still open: it keeps its `-wal` and `-shm` beside it, folded in on the next start.
fn warn_of_databases_left_open() {
    for path in crate::store::still_open_after(DATABASE_CLOSE_WAIT) {
        tracing::warn!(
            "{} is still open as the host exits (held by work the stop left behind): its \
             -wal and -shm stay beside it and are folded in on the next start; copy them \
             with it",
            path.display()
        );
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match &cli.command {
        Command::Run { plugins, console } => {
            let mut config = load_config(&cli)?;
            if let Some(address) = console {
                config.console.listen = Some(*address);
                config
                    .console
                    .validate()
                    .map_err(|e| BadInput(format!("--console: {e}")))?;
            }
            init_tracing(&config.log);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?;
            let ran = runtime.block_on(run_host(config, plugins));
            // Blocking work a stop left behind (an LLM request not answered yet) is not
            // waited for: what it was doing resumes on the next start.
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
            warn_of_databases_left_open();
            ran?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Plugins {
            command: PluginsCommand::Check { dir, json },
        } => {
            let config = load_config(&cli)?;
            check(dir, &config.data_dir, &config.plugins.disabled, *json)
        }
        Command::Plugins {
            command: PluginsCommand::List { dir, json },
        } => list(dir, *json),
        Command::Plugins {
            command: PluginsCommand::New(args),
        } => plugin_dev::new_project(args),
        Command::Plugins {
            command: PluginsCommand::Build { dir },
        } => plugin_dev::build_project(dir),
        Command::Memory { plugins, command } => {
            let config = load_config(&cli)?;
            memory::run(&config, plugins.as_deref(), command)
        }
        Command::Status { json } => {
            let config = load_config(&cli)?;
            show_status(&config, *json)
        }
        Command::Send(args) => {
            let config = load_config(&cli)?;
            send::run(&config, args)
        }
        Command::Journal { command } => {
            let config = load_config(&cli)?;
            journal_command(&config, command)
        }
        Command::Buffer { command } => {
            let config = load_config(&cli)?;
            buffer::run(&config, command)
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
                    let env = env.as_deref().unwrap_or("— (config file only)");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_says_each_cause_once() {
        let full = crate::buffer::BufferError::Storage(StorageError::DiskFull(
            "commit failed: database or disk is full".into(),
        ));
        let said = in_full(&anyhow::Error::new(full));
        assert_eq!(said.matches("commit failed").count(), 1, "{said}");
        assert!(said.starts_with("buffer: the disk is full"), "{said}");
        let wrapped = anyhow::Error::new(std::io::Error::other("no such file"))
            .context("--json f.json: cannot read");
        assert_eq!(
            in_full(&wrapped),
            "--json f.json: cannot read: no such file"
        );
    }
}
