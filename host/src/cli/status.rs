//! `cairn status`: the host on a data dir, its plugins, the buffer and the journal's
//! subscribers, read from the databases whether or not a host runs.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;

use super::lock;
use crate::buffer;
use crate::journal::{JournalAdmin, SubscriberLag};
use crate::plugin::status;
use crate::store::cache::SqliteCache;

fn age(since_ms: i64) -> String {
    let seconds = (crate::store::now_ms() - since_ms).max(0) / 1000;
    match seconds {
        s if s < 120 => format!("{s}s ago"),
        s if s < 7200 => format!("{}m ago", s / 60),
        s if s < 172_800 => format!("{}h ago", s / 3600),
        s => format!("{}d ago", s / 86_400),
    }
}

/// `cairn status`: print the data dir's host, plugins, buffer and subscribers.
pub fn show_status(data_dir: &Path, json_output: bool) -> Result<ExitCode> {
    let buffer_stats = buffer::read_stats(data_dir)?;
    let subscribers = match JournalAdmin::open_read_only(data_dir)? {
        Some(admin) => admin.subscriber_lags()?,
        None => Vec::new(),
    };
    let report = status::read(data_dir)?.unwrap_or(status::StatusReport {
        host: None,
        plugins: Vec::new(),
        llm_usage: Vec::new(),
    });
    let run = report.host.clone();
    let running =
        run.as_ref().is_some_and(|r| r.stopped_at.is_none()) && lock::host_holds(data_dir);
    let plugins = status::as_seen_now(report, running);
    let llm_cache = SqliteCache::read_stats(data_dir)?;
    if json_output {
        let host = run.as_ref().map(|r| {
            json!({"pid": r.pid, "plugins_dir": r.plugins_dir, "started_at": r.started_at,
                   "stopped_at": r.stopped_at, "running": running})
        });
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"data_dir": data_dir, "host": host, "plugins": plugins, "buffer": buffer_stats,
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
        print_buffer(stats);
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
