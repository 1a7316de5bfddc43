//! `cairn buffer failed|retry`: list the main batches and spawned tasks that ended `failed`
//! (the model refused, or the reply could not be delivered), and queue them again once the
//! cause is fixed — on a running host too.

use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;

use super::status::age;
use super::{BadInput, storage_unusable};
use crate::buffer::{Buffer, FailedKind, FailedWork, RetryOutcome, RetrySelection, read_stats};
use crate::config::{HostConfig, Storage};

/// What `cairn buffer` does.
#[derive(Subcommand, Debug)]
pub enum BufferCommand {
    /// List the main batches and spawned tasks that failed, the latest first.
    Failed {
        /// How many to list.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
        limit: u32,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Queue failed batches and tasks again (a running host takes them within a second,
    /// else the next host to start): a batch whose reply was made but not delivered delivers
    /// that reply; any other asks the model again. Its messages are not received twice.
    #[command(group(clap::ArgGroup::new("which").required(true).multiple(true).args(["batch", "task", "all"])))]
    Retry {
        /// A failed main batch (repeatable; the number `cairn buffer failed` lists).
        #[arg(long, value_name = "ID")]
        batch: Vec<i64>,
        /// A failed task (repeatable).
        #[arg(long, value_name = "ID")]
        task: Vec<i64>,
        /// Every failed batch and task.
        #[arg(long, conflicts_with_all = ["batch", "task"])]
        all: bool,
    },
}

/// Run a `cairn buffer` command on the configured storage's buffer.
pub fn run(config: &HostConfig, command: &BufferCommand) -> Result<ExitCode> {
    // A data dir with no buffer is most likely the wrong one: said as such, as `cairn
    // memory` and `cairn journal` do, rather than answered with an empty list.
    let Some(buffer) = open(config)? else {
        return Err(BadInput(format!(
            "no buffer in {} (no buffer.db): nothing was sent on this data dir",
            config.data_dir.display()
        ))
        .into());
    };
    match command {
        BufferCommand::Failed { limit, json } => list(&buffer, *limit as usize, *json),
        BufferCommand::Retry { batch, task, all } => {
            let which = if *all {
                RetrySelection::All
            } else {
                RetrySelection::Named {
                    batches: distinct(batch),
                    tasks: distinct(task),
                }
            };
            retry(&buffer, which)
        }
    }
}

/// The configured buffer; None for a data dir where no buffer was ever written (nothing is
/// created). A data dir that does not exist is refused.
fn open(config: &HostConfig) -> Result<Option<Buffer>> {
    let storage = config.storage().map_err(storage_unusable)?;
    let data_dir = &config.data_dir;
    if let Storage::Sqlite = storage {
        if !data_dir.is_dir() {
            return Err(BadInput(format!(
                "data dir (--data, data_dir or CAIRN_DATA_DIR): {} does not exist",
                data_dir.display()
            ))
            .into());
        }
        if read_stats(data_dir).map_err(storage_unusable)?.is_none() {
            return Ok(None);
        }
    }
    let store = storage
        .buffer(data_dir, &config.buffer)
        .map_err(storage_unusable)?;
    Ok(Some(Buffer::over(store, config.buffer.clone())?))
}

/// Print the failed work, one line each, and say when `limit` cut the list.
fn list(buffer: &Buffer, limit: usize, json: bool) -> Result<ExitCode> {
    let mut failed = buffer.failed(limit.saturating_add(1))?;
    let cut = failed.len() > limit;
    failed.truncate(limit);
    let more = format!(
        "more has failed: the latest {limit} are listed (--limit N lists more; `cairn status` counts them)"
    );
    if json {
        if cut {
            eprintln!("{more}");
        }
        println!("{}", serde_json::to_string_pretty(&failed)?);
        return Ok(ExitCode::SUCCESS);
    }
    if failed.is_empty() {
        println!("nothing has failed");
        return Ok(ExitCode::SUCCESS);
    }
    for work in &failed {
        println!("{}", describe(work));
    }
    if cut {
        println!("{more}");
    }
    println!(
        "\n`cairn buffer retry --batch ID` / `--task ID` (repeatable) or `--all` queues them again"
    );
    Ok(ExitCode::SUCCESS)
}

/// One failed batch or task in words.
fn describe(work: &FailedWork) -> String {
    let what = match work.kind {
        FailedKind::Batch => format!("batch {}", work.id),
        FailedKind::Task => format!("task {} (batch {})", work.id, work.batch_id),
    };
    let when = work
        .finished_at
        .map(|at| format!(" {}", age(at)))
        .unwrap_or_default();
    let kept = if work.reply_kept {
        "; its reply is kept and a retry delivers it"
    } else {
        ""
    };
    let retried = match work.retried {
        0 => String::new(),
        n => format!("; retried {n} time(s) before"),
    };
    format!(
        "{what}: channel {} conversation {} ({} message(s)) failed{when}: {}{kept}{retried}",
        work.channel,
        work.conversation,
        work.messages,
        work.error.as_deref().unwrap_or("no error recorded"),
    )
}

/// Queue the selected work again, or refuse (exit 2, nothing changed) naming each id that
/// is not failed.
fn retry(buffer: &Buffer, which: RetrySelection) -> Result<ExitCode> {
    match buffer.retry_failed(which)? {
        RetryOutcome::Queued { batches, tasks } if batches.is_empty() && tasks.is_empty() => {
            println!("nothing has failed");
        }
        RetryOutcome::Queued { batches, tasks } => {
            let mut queued = Vec::new();
            if !batches.is_empty() {
                queued.push(format!("batch {}", join(&batches)));
            }
            if !tasks.is_empty() {
                queued.push(format!("task {}", join(&tasks)));
            }
            println!(
                "queued again: {} (a running host takes them within a second, else the next host to start)",
                queued.join("; ")
            );
        }
        RetryOutcome::NotFailed { batches, tasks } => {
            let named: Vec<String> = batches
                .iter()
                .map(|b| format!("--batch {}: not a failed main batch ({})", b.id, b.state))
                .chain(
                    tasks
                        .iter()
                        .map(|t| format!("--task {}: not a failed task ({})", t.id, t.state)),
                )
                .collect();
            return Err(BadInput(format!(
                "{}; expected ids `cairn buffer failed` lists; nothing was queued",
                named.join("; ")
            ))
            .into());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `ids` in order, each once (an id named twice is retried once).
fn distinct(ids: &[i64]) -> Vec<i64> {
    let mut seen = std::collections::BTreeSet::new();
    ids.iter().copied().filter(|id| seen.insert(*id)).collect()
}

/// Ids as `1, 2, 3`.
fn join(ids: &[i64]) -> String {
    ids.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
