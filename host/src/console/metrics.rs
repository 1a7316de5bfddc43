//! `/metrics`: the console's snapshot in Prometheus' text exposition format.

use prometheus::core::Collector;
use prometheus::{Encoder, Gauge, GaugeVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder};

use super::snapshot::Snapshot;

/// The `Content-Type` of the text format.
pub const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// Why the figures could not be written (a metric defined twice or with bad labels: a bug).
pub type MetricsError = prometheus::Error;

/// Write the snapshot's figures as Prometheus text. Gauges only: every figure is read from
/// the stores as it is now, and restarts and faults count since the host started.
pub fn render(snapshot: &Snapshot) -> Result<String, MetricsError> {
    let registry = Registry::new();
    buffer(&registry, snapshot)?;
    journal(&registry, snapshot)?;
    plugins(&registry, snapshot)?;
    memory(&registry, snapshot)?;
    turns(&registry, snapshot)?;
    let errors = int_gauge(
        &registry,
        "cairn_console_read_errors",
        "Store reads that failed in the console's last sample",
    )?;
    errors.set(snapshot.errors.len() as i64);
    let mut text = Vec::new();
    TextEncoder::new().encode(&registry.gather(), &mut text)?;
    Ok(String::from_utf8_lossy(&text).into_owned())
}

fn register<C: Collector + Clone + 'static>(registry: &Registry, c: C) -> Result<C, MetricsError> {
    registry.register(Box::new(c.clone()))?;
    Ok(c)
}

fn int_gauge(registry: &Registry, name: &str, help: &str) -> Result<IntGauge, MetricsError> {
    register(registry, IntGauge::with_opts(Opts::new(name, help))?)
}

fn int_gauges(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntGaugeVec, MetricsError> {
    register(registry, IntGaugeVec::new(Opts::new(name, help), labels)?)
}

fn buffer(registry: &Registry, snapshot: &Snapshot) -> Result<(), MetricsError> {
    let Some(stats) = &snapshot.buffer else {
        return Ok(());
    };
    int_gauge(
        registry,
        "cairn_buffer_depth",
        "Messages waiting to be routed",
    )?
    .set(stats.depth);
    let oldest = register(
        registry,
        Gauge::with_opts(Opts::new(
            "cairn_buffer_oldest_unrouted_age_seconds",
            "Age of the oldest message waiting to be routed (0 when none waits)",
        ))?,
    )?;
    oldest.set(stats.oldest_unrouted_age_ms.unwrap_or(0) as f64 / 1000.0);
    int_gauge(
        registry,
        "cairn_buffer_messages_kept",
        "Messages stored and still kept, routed or not",
    )?
    .set(stats.stored);
    let per_channel = int_gauges(
        registry,
        "cairn_buffer_channel_depth",
        "Messages waiting to be routed, per channel",
        &["channel"],
    )?;
    for channel in &stats.channels {
        per_channel
            .with_label_values(&[channel.channel.as_str()])
            .set(channel.unrouted);
    }
    let batches = int_gauges(
        registry,
        "cairn_buffer_batches",
        "Batches kept, per route and status",
        &["route", "status"],
    )?;
    for (key, count) in &stats.batches {
        let (route, status) = key.split_once('/').unwrap_or((key.as_str(), ""));
        batches.with_label_values(&[route, status]).set(*count);
    }
    let tasks = int_gauges(
        registry,
        "cairn_buffer_tasks",
        "Tasks kept, per status",
        &["status"],
    )?;
    for (status, count) in &stats.tasks {
        tasks.with_label_values(&[status.as_str()]).set(*count);
    }
    Ok(())
}

fn journal(registry: &Registry, snapshot: &Snapshot) -> Result<(), MetricsError> {
    let lag = int_gauges(
        registry,
        "cairn_journal_subscriber_lag",
        "Matching events a subscriber has not consumed yet",
        &["subscriber"],
    )?;
    let cursor = int_gauges(
        registry,
        "cairn_journal_subscriber_cursor",
        "The last event a subscriber consumed",
        &["subscriber"],
    )?;
    let dead = int_gauges(
        registry,
        "cairn_journal_dead_letters",
        "Events a subscriber could not take",
        &["subscriber"],
    )?;
    for subscriber in &snapshot.subscribers {
        let id = [subscriber.id.as_str()];
        lag.with_label_values(&id).set(subscriber.lag);
        cursor.with_label_values(&id).set(subscriber.cursor);
        dead.with_label_values(&id).set(subscriber.dead_letters);
    }
    Ok(())
}

fn plugins(registry: &Registry, snapshot: &Snapshot) -> Result<(), MetricsError> {
    let state = int_gauges(
        registry,
        "cairn_plugin_state",
        "1 for each plugin's current state (starting, running, restarting, quarantined, failed, stopped)",
        &["plugin", "state"],
    )?;
    let restarts = int_gauges(
        registry,
        "cairn_plugin_restarts",
        "Restarts of a plugin since the host started",
        &["plugin"],
    )?;
    let faults = int_gauges(
        registry,
        "cairn_plugin_faults",
        "Faults of a plugin (traps, timeouts, memory-limit hits, failed inits) since the host started",
        &["plugin"],
    )?;
    for plugin in &snapshot.plugins {
        let id = plugin.status.id.as_str();
        state
            .with_label_values(&[id, plugin.status.state.as_str()])
            .set(1);
        restarts
            .with_label_values(&[id])
            .set(plugin.status.restarts.into());
        faults
            .with_label_values(&[id])
            .set(plugin.status.faults.into());
    }
    Ok(())
}

fn memory(registry: &Registry, snapshot: &Snapshot) -> Result<(), MetricsError> {
    let Some(stats) = &snapshot.memory else {
        return Ok(());
    };
    let live = int_gauges(
        registry,
        "cairn_memory_live_entries",
        "Live memories (not forgotten, not superseded), per kind",
        &["kind"],
    )?;
    for (kind, count) in &stats.live_by_kind {
        live.with_label_values(&[kind.as_str()]).set(*count as i64);
    }
    let figures = [
        (
            "cairn_memory_superseded_entries",
            "Memories superseded by newer ones",
            stats.superseded,
        ),
        (
            "cairn_memory_forgotten_entries",
            "Forgotten memories awaiting purge",
            stats.forgotten,
        ),
        (
            "cairn_memory_embedded_entries",
            "Memories with a vector from the configured model",
            stats.embedded,
        ),
        (
            "cairn_memory_embedding_backlog",
            "Memories waiting to be embedded",
            stats.embedding_backlog,
        ),
        (
            "cairn_memory_database_bytes",
            "Size of the memory database and its WAL",
            stats.database_bytes,
        ),
    ];
    for (name, help, value) in figures {
        int_gauge(registry, name, help)?.set(value as i64);
    }
    Ok(())
}

fn turns(registry: &Registry, snapshot: &Snapshot) -> Result<(), MetricsError> {
    let Some(latency) = &snapshot.turn_latency else {
        return Ok(());
    };
    let wall = register(
        registry,
        GaugeVec::new(
            Opts::new(
                "cairn_recent_turn_duration_seconds",
                "Agent turn wall time over the newest turns, by quantile",
            ),
            &["quantile"],
        )?,
    )?;
    wall.with_label_values(&["0.5"])
        .set(latency.p50_ms as f64 / 1000.0);
    wall.with_label_values(&["0.99"])
        .set(latency.p99_ms as f64 / 1000.0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_vocab::event::SubscriberLag;

    #[test]
    fn subscribers_become_labelled_series() {
        let snapshot = Snapshot {
            subscribers: vec![SubscriberLag {
                id: "audit-log".into(),
                patterns: vec!["*".into()],
                cursor: 41,
                lag: 3,
                dead_letters: 1,
            }],
            ..Snapshot::default()
        };
        let text = render(&snapshot).unwrap();
        assert!(
            text.contains("# TYPE cairn_journal_subscriber_lag gauge"),
            "{text}"
        );
        assert!(
            text.contains("cairn_journal_subscriber_lag{subscriber=\"audit-log\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("cairn_journal_dead_letters{subscriber=\"audit-log\"} 1"),
            "{text}"
        );
        assert!(text.contains("cairn_console_read_errors 0"), "{text}");
    }
}
