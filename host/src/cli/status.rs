//! `cairn status`: the host on a data dir, its plugins, the buffer and the journal's
//! subscribers, read from the databases whether or not a host runs.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;

use super::{BadInput, lock, storage_unusable};
use crate::buffer;
use crate::config::{HostConfig, Storage};
use crate::journal::{JournalAdmin, SubscriberLag};
use crate::plugin::status;
use crate::store::cache::{CacheStats, SqliteCache};
use crate::store::journal::JournalOperator;

/// How long ago `since_ms` was, in the largest unit that keeps it readable.
pub(super) fn age(since_ms: i64) -> String {
    let seconds = (crate::store::now_ms() - since_ms).max(0) / 1000;
    match seconds {
        s if s < 120 => format!("{s}s ago"),
        s if s < 7200 => format!("{}m ago", s / 60),
        s if s < 172_800 => format!("{}h ago", s / 3600),
        s => format!("{}d ago", s / 86_400),
    }
}

/// What `cairn status` shows, read from the data dir's files or the shared database.
struct Seen {
    buffer: Option<crate::buffer::BufferStats>,
    subscribers: Vec<SubscriberLag>,
    report: status::StatusReport,
    running: bool,
    /// On a shared database, the channels the running hosts run (see
    /// `StatusStore::live_channels`); a data dir's one host runs its report's.
    live_channels: Option<Vec<String>>,
    llm_cache: Option<CacheStats>,
}

/// Read a data dir's SQLite files, whether or not a host has them open. A data dir that
/// does not exist is refused (a mistyped path, not a host that never ran).
fn seen_in_data_dir(data_dir: &Path) -> Result<Seen> {
    if !data_dir.is_dir() {
        return Err(BadInput(format!(
            "data dir (--data, data_dir or CAIRN_DATA_DIR): {} does not exist",
            data_dir.display()
        ))
        .into());
    }
    let subscribers = match JournalAdmin::open_read_only(data_dir).map_err(storage_unusable)? {
        Some(admin) => admin.subscriber_lags()?,
        None => Vec::new(),
    };
    let report =
        status::read(data_dir)
            .map_err(storage_unusable)?
            .unwrap_or(status::StatusReport {
                host: None,
                plugins: Vec::new(),
                llm_usage: Vec::new(),
            });
    let running = runs_on_data_dir(&report, data_dir);
    Ok(Seen {
        buffer: buffer::read_stats(data_dir).map_err(storage_unusable)?,
        subscribers,
        report,
        running,
        live_channels: None,
        llm_cache: SqliteCache::read_stats(data_dir).map_err(storage_unusable)?,
    })
}

/// Read a shared database. The host shown is the latest started of those sharing it; it
/// runs while it has no clean stop and said it was alive in the last few seconds.
fn seen_in_database(storage: &Storage, data_dir: &Path) -> Result<Seen> {
    let status = storage.host(data_dir).map_err(storage_unusable)?.status;
    let report = status.report()?;
    let live_channels = Some(status.live_channels()?);
    let running = runs_on_database(&report);
    let buffer_config = crate::buffer::BufferConfig::default();
    let subscribers = match storage
        .journal_operator(data_dir)
        .map_err(storage_unusable)?
    {
        Some(operator) => operator.subscriber_lags()?,
        None => Vec::new(),
    };
    Ok(Seen {
        buffer: Some(
            storage
                .buffer(data_dir, &buffer_config)
                .map_err(storage_unusable)?
                .stats()?,
        ),
        subscribers,
        report,
        running,
        live_channels,
        llm_cache: Some(storage.cache(data_dir).map_err(storage_unusable)?.stats()?),
    })
}

/// Whether the host a data dir's report names runs: no clean stop, and its lock held.
fn runs_on_data_dir(report: &status::StatusReport, data_dir: &Path) -> bool {
    report.host.as_ref().is_some_and(|r| r.stopped_at.is_none()) && lock::host_holds(data_dir)
}

/// Whether the host a shared database's report names runs: no clean stop, and alive in the
/// last few seconds.
fn runs_on_database(report: &status::StatusReport) -> bool {
    let stale_after = crate::store::pg::millis(crate::store::pg::host::STALE_AFTER);
    report.host.as_ref().is_some_and(|r| {
        r.stopped_at.is_none()
            && r.last_seen
                .is_some_and(|seen| crate::store::now_ms() - seen <= stale_after)
    })
}

/// The plugins the host running on this storage holds quarantined or failed to load: they
/// take no event until the host starts again. None when no host runs. Only the status
/// report is read.
pub(super) fn absent_plugins(
    storage: &Storage,
    data_dir: &Path,
) -> Result<Vec<cairn_vocab::plugin::PluginStatus>> {
    let (report, running) = match storage {
        Storage::Sqlite => match status::read(data_dir).map_err(storage_unusable)? {
            Some(report) => {
                let running = runs_on_data_dir(&report, data_dir);
                (report, running)
            }
            None => return Ok(Vec::new()),
        },
        _ => {
            let report = storage
                .host(data_dir)
                .map_err(storage_unusable)?
                .status
                .report()?;
            let running = runs_on_database(&report);
            (report, running)
        }
    };
    if !running {
        return Ok(Vec::new());
    }
    Ok(report
        .plugins
        .into_iter()
        .filter(|plugin| {
            matches!(
                plugin.state,
                cairn_vocab::plugin::PluginState::Quarantined
                    | cairn_vocab::plugin::PluginState::Failed
            )
        })
        .collect())
}

/// `cairn status`: print the host, plugins, buffer and subscribers of the configured
/// storage (a data dir's files, or the database several hosts share).
pub fn show_status(config: &HostConfig, json_output: bool) -> Result<ExitCode> {
    let data_dir = config.data_dir.as_path();
    let storage = config.storage().map_err(storage_unusable)?;
    let seen = match storage {
        Storage::Sqlite => seen_in_data_dir(data_dir)?,
        _ => seen_in_database(&storage, data_dir)?,
    };
    let Seen {
        buffer: buffer_stats,
        subscribers,
        report,
        running,
        live_channels,
        llm_cache,
    } = seen;
    let run = report.host.clone();
    // A queued batch of a channel no running host runs waits for one that does; with no
    // host running, one of a channel the last host did not run would wait again.
    let channels_run: Vec<String> = match live_channels {
        Some(live) if running => live,
        _ => report.channels().into_iter().map(str::to_string).collect(),
    };
    let not_run: Vec<String> = match &buffer_stats {
        Some(stats) if run.is_some() => stats
            .queued
            .iter()
            .filter(|queue| !channels_run.contains(&queue.channel))
            .map(|queue| queue.channel.clone())
            .collect(),
        _ => Vec::new(),
    };
    let plugins = status::as_seen_now(report, running);
    if json_output {
        let host = run.as_ref().map(|r| {
            json!({"pid": r.pid, "plugins_dir": r.plugins_dir, "started_at": r.started_at,
                   "stopped_at": r.stopped_at, "running": running,
                   "stopping_since": r.stopping_since.filter(|_| running)})
        });
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"data_dir": data_dir, "host": host, "plugins": plugins, "buffer": buffer_stats,
                        "queued_for_channels_not_run": not_run,
                        "subscribers": subscribers, "llm_cache": llm_cache})
            )?
        );
        return Ok(ExitCode::SUCCESS);
    }
    print_host(data_dir, run.as_ref(), running);
    if run.is_some() {
        print_plugins(&plugins);
    }
    if let Some(stats) = &buffer_stats {
        print_buffer(stats, running, &not_run);
    }
    print_subscribers(&subscribers);
    if let Some(cache) = llm_cache {
        let lookups = cache.hits + cache.misses;
        let rate = if lookups == 0 {
            0.0
        } else {
            100.0 * cache.hits as f64 / lookups as f64
        };
        println!(
            "\nllm response cache: {} completions, {} hits / {} lookups ({rate:.0}%)",
            cache.entries, cache.hits, lookups
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether a host runs here, and how the last run ended.
fn print_host(data_dir: &Path, run: Option<&status::HostRun>, running: bool) {
    match run {
        Some(r) if running && r.stopping_since.is_some() => println!(
            "host: stopping since {} (pid {}, started {}, plugins {}); a stop waits up to 30 s for the work in flight and 10 s for the plugins",
            age(r.stopping_since.unwrap_or(r.started_at)),
            r.pid,
            age(r.started_at),
            r.plugins_dir
        ),
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
        None => println!("no host has run on data dir {}", data_dir.display()),
    }
}

/// One line per plugin: state now and last recorded, restarts, faults, last error.
fn print_plugins(plugins: &[status::PluginReport]) {
    println!(
        "{:<24} {:<10} {:<15} {:<12} {:<12} {:>8} {:>6}  LAST ERROR",
        "PLUGIN", "VERSION", "KIND", "STATE", "LAST STATE", "RESTARTS", "FAULTS"
    );
    for report in plugins {
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
    let calling: Vec<_> = plugins
        .iter()
        .filter_map(|r| r.llm.as_ref().map(|u| (&r.status.id, u)))
        .collect();
    if !calling.is_empty() {
        println!("\nllm.complete since the host started:");
        for (id, usage) in calling {
            println!(
                "  {id:<24} calls {:<6} tokens {:<9} refused (over budget) {}",
                usage.calls, usage.tokens, usage.refused
            );
        }
    }
}

/// Each journal subscriber's cursor, lag and dead letters.
fn print_subscribers(subscribers: &[SubscriberLag]) {
    if subscribers.is_empty() {
        return;
    }
    println!("\nsubscribers:");
    for s in subscribers {
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

/// The buffer's depth, batches and tasks; `host_running` says whether a batch marked
/// running is being worked on here or was left so by a host that ended; `not_run` names
/// the channels with queued batches that no running host runs (with none running, that
/// the last host did not run).
fn print_buffer(stats: &buffer::BufferStats, host_running: bool, not_run: &[String]) {
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
    for queue in &stats.queued {
        let waiting = match (not_run.contains(&queue.channel), host_running) {
            (false, _) => String::new(),
            (true, true) => format!(
                "; no running host runs channel `{}`: a host that runs it answers them",
                queue.channel
            ),
            (true, false) => format!(
                "; the last host ran no channel `{}`: only a host that runs it answers them",
                queue.channel
            ),
        };
        println!(
            "  queued for {}: {}, the oldest made {}{waiting}",
            queue.channel,
            plural(queue.batches, "batch", "batches"),
            age(queue.oldest_created_at)
        );
    }
    for batch in &stats.running {
        let since = batch.started_at.map(age).unwrap_or_else(|| "now".into());
        let kept = match batch.received_at {
            Some(_) => "; its session stays open until it is answered",
            None => "",
        };
        let (id, channel, conversation) = (batch.id, &batch.channel, &batch.conversation);
        if host_running {
            println!(
                "  batch {id} ({channel}:{conversation}) running since {since}, attempt {}{kept}",
                batch.attempts
            );
        } else {
            println!(
                "  batch {id} ({channel}:{conversation}) was running (started {since}, attempt \
                 {}) when the last host ended: the next host to start takes it up again{kept}",
                batch.attempts
            );
        }
    }
    let failed = stats.batches.get("main/failed").copied().unwrap_or(0)
        + stats.tasks.get("failed").copied().unwrap_or(0);
    if failed > 0 {
        println!(
            "  {failed} failed: `cairn buffer failed` lists them, `cairn buffer retry` queues them again"
        );
    }
    println!("tasks: {}", counts(&stats.tasks));
    for task in &stats.recent_tasks {
        let outcome = task
            .result
            .as_deref()
            .or(task.error.as_deref())
            .map(|outcome| format!(": {outcome}"))
            .unwrap_or_default();
        println!(
            "  task {} (batch {}) {}{outcome}",
            task.id, task.batch_id, task.status
        );
    }
}

/// `count` and the noun that goes with it ("1 batch", "2 batches").
fn plural(count: i64, one: &str, many: &str) -> String {
    format!("{count} {}", if count == 1 { one } else { many })
}
