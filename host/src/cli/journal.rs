//! `cairn journal tail|replay|dead-letters|unsubscribe`: read the event journal, manage dead
//! letters, and forget the subscriber of a plugin that is gone.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;

use super::BadInput;
use super::storage_unusable;
use crate::config::{HostConfig, Storage};
use crate::journal;
use crate::plugin::manifest::is_valid_topic_pattern;
use crate::plugin::status;
use crate::store::journal::{JournalOperator, Unsubscribed};
use cairn_vocab::event::DeadLetterStatus;

/// Subscriber ids the host registers for itself (`host.lifecycle`).
const HOST_SUBSCRIBERS: &str = "host.";

#[derive(Subcommand, Debug)]
pub enum JournalCommand {
    /// Print the newest events, optionally only matching topics, and keep following.
    Tail {
        /// Topic pattern: exact, `prefix.*` or `*`.
        #[arg(long, default_value = "*")]
        topic: String,
        /// How many of the newest events to print first.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
        limit: u32,
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
        /// Only this dead letter (the number after "dead letter" in the list).
        #[arg(long)]
        id: Option<i64>,
        /// How many to list, newest first.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
        limit: u32,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Forget the subscriber of a plugin that was removed, with its dead letters, so the
    /// journal no longer keeps events for it.
    Unsubscribe {
        /// The subscriber (plugin id).
        #[arg(long)]
        subscriber: String,
    },
}

/// What `cairn journal dead-letters` does.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum DeadLetterAction {
    /// Print them.
    List,
    /// Deliver them once more (with the usual retries).
    Retry,
    /// Delete them.
    Discard,
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

/// Where `cairn journal` reads and repairs: the configured storage, and the data dir whose
/// `journal.db` it names when that storage is SQLite.
struct Journals<'a> {
    storage: Storage,
    data_dir: &'a Path,
}

impl Journals<'_> {
    /// The journal to read; None while a data dir has none yet.
    fn read(&self) -> Result<Option<Box<dyn JournalOperator>>> {
        self.storage
            .journal_operator(self.data_dir)
            .map_err(storage_unusable)
    }

    /// The pid of a host running on this data dir with plugin `id`, if one does. (On a
    /// shared database the journal says whether a host holds the subscription.)
    fn running_plugin(&self, id: &str) -> Result<Option<u32>> {
        if !matches!(self.storage, Storage::Sqlite) {
            return Ok(None);
        }
        let Some(report) = status::read(self.data_dir).map_err(storage_unusable)? else {
            return Ok(None);
        };
        let running = report
            .host
            .filter(|host| host.stopped_at.is_none() && super::lock::host_holds(self.data_dir));
        Ok(running
            .filter(|_| report.plugins.iter().any(|plugin| plugin.id == id))
            .map(|host| host.pid))
    }

    /// The journal to repair; a data dir without one is refused (nothing to repair, and
    /// nothing is created), and so is one that does not exist.
    fn write(&self) -> Result<Box<dyn JournalOperator>> {
        if matches!(self.storage, Storage::Sqlite) && !self.data_dir.is_dir() {
            return Err(BadInput(format!(
                "data dir (--data, data_dir or CAIRN_DATA_DIR): {} does not exist",
                self.data_dir.display()
            ))
            .into());
        }
        if self.read()?.is_none() {
            return Err(BadInput(format!(
                "no journal in {}: no host has run on this data dir",
                self.data_dir.display()
            ))
            .into());
        }
        self.storage
            .journal_operator_for(self.data_dir, true)
            .map_err(storage_unusable)?
            .ok_or_else(|| anyhow::anyhow!("no journal in {}", self.data_dir.display()))
    }
}

/// Run a `cairn journal` command on the configured storage's journal.
pub fn journal_command(config: &HostConfig, command: &JournalCommand) -> Result<ExitCode> {
    let journals = Journals {
        storage: config.storage().map_err(storage_unusable)?,
        data_dir: &config.data_dir,
    };
    match command {
        JournalCommand::Tail {
            topic,
            limit,
            follow,
            json,
        } => tail(&journals, topic, *limit as usize, *follow, *json),
        JournalCommand::Replay { subscriber, from } => replay(&journals, subscriber, *from),
        JournalCommand::DeadLetters {
            action: action @ (DeadLetterAction::Retry | DeadLetterAction::Discard),
            subscriber,
            id,
            ..
        } => settle_dead_letters(&journals, *action, subscriber.as_deref(), *id),
        JournalCommand::DeadLetters {
            subscriber,
            id,
            limit,
            json,
            ..
        } => list_dead_letters(
            &journals,
            subscriber.as_deref(),
            *id,
            *limit as usize,
            *json,
        ),
        JournalCommand::Unsubscribe { subscriber } => unsubscribe(&journals, subscriber),
    }
}

/// Forget a subscriber no running host delivers to: the journal's retention then prunes the
/// events only it was holding back.
fn unsubscribe(journals: &Journals, subscriber: &str) -> Result<ExitCode> {
    if subscriber.starts_with(HOST_SUBSCRIBERS) {
        return Err(BadInput(format!(
            "--subscriber: `{subscriber}` is the host's own (registered again at every start): \
             expected a plugin's subscriber"
        ))
        .into());
    }
    if let Some(pid) = journals.running_plugin(subscriber)? {
        return Err(BadInput(format!(
            "--subscriber: plugin `{subscriber}` runs on the host on this data dir (pid {pid}): \
             stop the host and remove the plugin from its plugins dir first"
        ))
        .into());
    }
    let journal = journals.write()?;
    let known = journal.subscriber_lags()?;
    let Some(lag) = known.iter().find(|s| s.id == subscriber) else {
        let names: Vec<&str> = known.iter().map(|s| s.id.as_str()).collect();
        return Err(BadInput(format!(
            "--subscriber: no subscriber `{subscriber}` in this journal (it has: {})",
            names.join(", ")
        ))
        .into());
    };
    match journal.unsubscribe(subscriber)? {
        Unsubscribed::Forgotten { dead_letters } => {
            println!(
                "forgot subscriber {subscriber} (at #{}, {} events not taken, {dead_letters} dead letters)",
                lag.cursor, lag.lag
            );
            Ok(ExitCode::SUCCESS)
        }
        Unsubscribed::Held => Err(BadInput(format!(
            "--subscriber: a host delivers to `{subscriber}` now: remove the plugin from every \
             host sharing this database and stop or restart them first"
        ))
        .into()),
        Unsubscribed::Unknown => Err(BadInput(format!(
            "--subscriber: no subscriber `{subscriber}` in this journal"
        ))
        .into()),
    }
}

/// Print the newest events matching `topic`, then keep following when asked.
fn tail(
    journals: &Journals,
    topic: &str,
    limit: usize,
    follow: bool,
    json: bool,
) -> Result<ExitCode> {
    if !is_valid_topic_pattern(topic) {
        return Err(BadInput(format!(
            "--topic: `{topic}` is not a topic pattern (exact, `prefix.*` or `*`)"
        ))
        .into());
    }
    if matches!(journals.storage, Storage::Sqlite) && !journals.data_dir.is_dir() && !follow {
        return Err(BadInput(format!(
            "data dir (--data, data_dir or CAIRN_DATA_DIR): {} does not exist",
            journals.data_dir.display()
        ))
        .into());
    }
    let patterns = vec![topic.to_string()];
    let mut admin = journals.read()?;
    if admin.is_none() && !follow {
        // (With --follow it waits for a host to start.)
        return Err(BadInput(format!(
            "no journal in {}: no host has run on this data dir",
            journals.data_dir.display()
        ))
        .into());
    }
    let mut last = 0;
    if let Some(admin) = &admin {
        for event in admin.recent(&patterns, limit)? {
            last = event.seq;
            print_event(&event, json)?;
        }
    }
    if !follow {
        return Ok(ExitCode::SUCCESS);
    }
    // Runs until the user interrupts it.
    loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        if admin.is_none() {
            admin = journals.read()?;
        }
        if let Some(admin) = &admin {
            for event in admin.events_after(last, &patterns, 1000)? {
                last = event.seq;
                print_event(&event, json)?;
            }
        }
    }
}

/// Deliver a subscriber's events again from `from`.
fn replay(journals: &Journals, subscriber: &str, from: i64) -> Result<ExitCode> {
    if from < 1 {
        return Err(BadInput("--from: expected a sequence number of 1 or more".into()).into());
    }
    let journal = journals.write()?;
    let last = journal.last_seq()?;
    if from > last + 1 {
        return Err(BadInput(format!(
            "--from: the journal's last event is #{last}: expected #{} or earlier (#{} is \
             the next event appended); a later start would skip the events appended before it",
            last + 1,
            last + 1
        ))
        .into());
    }
    if !journal.replay_from(subscriber, from)? {
        return Err(BadInput(format!(
            "--subscriber: no subscriber `{subscriber}` in this journal"
        ))
        .into());
    }
    println!("{subscriber} will receive events again from #{from}");
    Ok(ExitCode::SUCCESS)
}

/// Retry or discard the dead letters named by subscriber and/or id.
fn settle_dead_letters(
    journals: &Journals,
    action: DeadLetterAction,
    subscriber: Option<&str>,
    id: Option<i64>,
) -> Result<ExitCode> {
    if subscriber.is_none() && id.is_none() {
        return Err(BadInput("name the dead letters: --subscriber ID and/or --id N".into()).into());
    }
    let admin = journals.write()?;
    if let Some(subscriber) = subscriber
        && !admin.subscriber_lags()?.iter().any(|s| s.id == subscriber)
    {
        return Err(BadInput(format!(
            "--subscriber: no subscriber `{subscriber}` in this journal"
        ))
        .into());
    }
    let (changed, done) = match action {
        DeadLetterAction::Retry => (
            admin.retry_dead_letters(subscriber, id)?,
            "queued for retry",
        ),
        _ => (admin.discard_dead_letters(subscriber, id)?, "discarded"),
    };
    if let Some(id) = id
        && changed == 0
    {
        return Err(no_dead_letter(id, subscriber));
    }
    println!("{changed} dead letter(s) {done}");
    if matches!(action, DeadLetterAction::Retry) && changed > 0 {
        note_absent_subscribers(journals, admin.as_ref())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Say which subscribers with letters waiting for a retry the running host holds quarantined
/// or failed: their letters wait, errors kept, until the host starts again.
fn note_absent_subscribers(journals: &Journals, admin: &dyn JournalOperator) -> Result<()> {
    let waiting: std::collections::BTreeSet<String> = admin
        .dead_letters(DEAD_LETTERS_SEARCHED)?
        .into_iter()
        .filter(|letter| letter.status == cairn_vocab::event::DeadLetterStatus::Retry)
        .map(|letter| letter.subscriber)
        .collect();
    for plugin in super::status::absent_plugins(&journals.storage, journals.data_dir)? {
        if waiting.contains(&plugin.id) {
            eprintln!(
                "note: the running host holds plugin `{}` {}{}: its letters are retried when it \
                 runs again (restart the host once it is fixed)",
                plugin.id,
                plugin.state.as_str(),
                plugin
                    .last_error
                    .as_deref()
                    .map_or(String::new(), |error| format!(" after: {error}"))
            );
        }
    }
    Ok(())
}

/// The refusal of an `--id` no dead letter (of `subscriber`, when given) has.
fn no_dead_letter(id: i64, subscriber: Option<&str>) -> anyhow::Error {
    let whose = subscriber.map_or(String::new(), |s| format!(" of `{s}`"));
    BadInput(format!(
        "--id: no dead letter #{id}{whose}: expected a number `cairn journal dead-letters` lists"
    ))
    .into()
}

/// Most dead letters a filtered list looks through, newest first.
const DEAD_LETTERS_SEARCHED: usize = 100_000;

/// List the newest `limit` dead letters, only `subscriber`'s or the one numbered `id` when
/// given. A data dir that does not exist, a subscriber the journal does not have, or an id no
/// dead letter has, is refused (a mistyped name would otherwise list nothing as if all were
/// well).
fn list_dead_letters(
    journals: &Journals,
    subscriber: Option<&str>,
    id: Option<i64>,
    limit: usize,
    json: bool,
) -> Result<ExitCode> {
    if matches!(journals.storage, Storage::Sqlite) && !journals.data_dir.is_dir() {
        return Err(BadInput(format!(
            "data dir (--data, data_dir or CAIRN_DATA_DIR): {} does not exist",
            journals.data_dir.display()
        ))
        .into());
    }
    let letters: Vec<_> = match journals.read()? {
        Some(admin) => {
            if let Some(subscriber) = subscriber
                && !admin.subscriber_lags()?.iter().any(|s| s.id == subscriber)
            {
                return Err(BadInput(format!(
                    "--subscriber: no subscriber `{subscriber}` in this journal"
                ))
                .into());
            }
            let filtered = subscriber.is_some() || id.is_some();
            let searched = if filtered {
                DEAD_LETTERS_SEARCHED
            } else {
                limit
            };
            admin
                .dead_letters(searched)?
                .into_iter()
                .filter(|letter| subscriber.is_none_or(|s| letter.subscriber == s))
                .filter(|letter| id.is_none_or(|id| letter.id == id))
                .take(limit)
                .collect()
        }
        None => {
            return Err(BadInput(format!(
                "no journal in {}: no host has run on this data dir",
                journals.data_dir.display()
            ))
            .into());
        }
    };
    if let Some(id) = id
        && letters.is_empty()
    {
        return Err(no_dead_letter(id, subscriber));
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&letters)?);
    } else if letters.is_empty() {
        println!("no dead letters");
    } else {
        for letter in letters {
            // A letter an operator asked to retry says so: it looked unchanged until
            // the host delivered it.
            let queued = match letter.status {
                DeadLetterStatus::Retry => " (queued for retry)",
                DeadLetterStatus::Dead => "",
            };
            println!(
                "dead letter {}{queued}: {} #{} {} after {} attempt(s): {}",
                letter.id,
                letter.subscriber,
                letter.seq,
                letter.topic,
                letter.attempts,
                letter.error
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
