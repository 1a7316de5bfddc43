//! The benchmark harness behind `cargo xtask bench`: measures the plugin runtime on the
//! real components, the durable buffer next to a raw rusqlite loop, the router, and the
//! webhook-to-reply path through the real binary; prints a table and writes
//! `target/bench/bench.json`.
//!
//! Comparisons are ratios measured side by side in one run (a WASM call next to the same
//! function called natively).

#[path = "bench/bare.rs"]
mod bare;
#[path = "bench/buffer.rs"]
mod buffer;
#[path = "bench/cognition.rs"]
mod cognition;
#[path = "bench/emit.rs"]
mod emit;
#[path = "bench/journal.rs"]
mod journal;
#[path = "bench/languages.rs"]
mod languages;
#[path = "bench/memory.rs"]
mod memory;
#[path = "bench/postgres.rs"]
mod on_postgres;
#[path = "bench/time_recall.rs"]
mod time_recall;

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use std::collections::BTreeMap;

use cairn::config::{KvConfig, RuntimeConfig};
use cairn::llm::offline::OfflineProvider;
use cairn::llm::{ChatMessage, CompletionRequest, LlmProvider};
use cairn::plugin::capabilities::HostServices;
use cairn::plugin::kv::PluginKv;
use cairn::plugin::llm_gate::LlmGate;
use cairn::plugin::manifest;
use cairn::plugin::runtime::Runtime;
use cairn::store::host::SqliteHost;
use cairn_tests::{guests_dir, workspace_root};
use cairn_vocab::event::Event;

/// One row of the table.
struct Row {
    name: String,
    value: f64,
    unit: &'static str,
    note: String,
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(|a, b| a.total_cmp(b));
    samples[samples.len() / 2]
}

/// FNV-1a, identical to the bench plugin's.
#[inline(never)]
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The native twin of the plugin's `on-event`: same dispatch on topic, same checksum.
#[inline(never)]
fn native_on_event(event: &Event) -> Result<(), String> {
    match event.topic.as_str() {
        "bench.checksum" => {
            black_box(fnv1a(event.payload.as_bytes()));
            Ok(())
        }
        other => Err(other.to_string()),
    }
}

fn write_manifest(dir: &Path, id: &str, component: &Path) -> Result<Arc<manifest::Manifest>> {
    let file = dir.join(format!("{id}.yaml"));
    std::fs::write(
        &file,
        format!(
            "id: {id}\nversion: 1.0.0\nkind: handler\ncomponent: {}\napi: ^0.2\ncapabilities: {{kv: true, lifecycle: true, llm: true}}\nlimits: {{memory_mb: 256, timeout_ms: 60000, llm_calls_per_hour: 100000}}\n",
            component.display()
        ),
    )?;
    let manifest = manifest::load_file(&file).map_err(|errors| anyhow::anyhow!("{errors:?}"))?;
    Ok(Arc::new(manifest))
}

fn runtime(cache: &Path) -> Result<Runtime> {
    Ok(Runtime::new(&RuntimeConfig::default(), cache, 256)?)
}

fn main() -> Result<()> {
    // SAFETY: no other thread exists yet.
    unsafe {
        cairn::memory::embed::local_model::settle_process_threads();
    }
    // On the project's disk (not a RAM-backed /tmp), so fsync costs what it costs.
    let scratch_root = workspace_root().join("target").join("bench");
    std::fs::create_dir_all(&scratch_root)?;
    let scratch = tempfile::tempdir_in(&scratch_root)?;
    let mut rows = Vec::new();
    let rust_component = guests_dir().join("bench.wasm");
    anyhow::ensure!(
        rust_component.is_file(),
        "{} missing: run via `cargo xtask bench`",
        rust_component.display()
    );

    // `cargo xtask bench SECTION` runs one section: plugins, buffer, route, e2e, journal,
    // hosts, claim, cognition, memory; `dispatch` runs the journal's dispatch rows alone,
    // `time-recall` memory's time-only recall row alone.
    let only = std::env::args().nth(1);
    let wanted = |section: &str| only.as_deref().is_none_or(|o| o == section);
    if wanted("plugins") {
        eprintln!("bench: plugins");
        plugin_rows(&mut rows, scratch.path(), &rust_component)?;
    }
    if wanted("buffer") {
        eprintln!("bench: buffer");
        buffer::buffer_rows(&mut rows, scratch.path())?;
    }
    if wanted("route") {
        eprintln!("bench: route");
        buffer::route_rows(&mut rows, scratch.path())?;
    }
    if wanted("e2e") {
        eprintln!("bench: e2e");
        end_to_end_rows(&mut rows, scratch.path())?;
    }
    if wanted("journal") {
        eprintln!("bench: journal");
        journal::journal_rows(&mut rows, scratch.path(), &rust_component)?;
    }
    if only.as_deref() == Some("dispatch") {
        eprintln!("bench: dispatch (the journal's dispatch rows alone)");
        journal::only_dispatch_rows(&mut rows, scratch.path(), &rust_component)?;
    }
    if wanted("hosts") {
        eprintln!("bench: hosts");
        on_postgres::hosts_rows(&mut rows, scratch.path())?;
    }
    if wanted("claim") {
        eprintln!("bench: claim");
        on_postgres::claim_rows(&mut rows)?;
    }
    if wanted("cognition") {
        eprintln!("bench: cognition");
        cognition::consolidation_rows(&mut rows, scratch.path())?;
    }
    if wanted("memory") {
        eprintln!("bench: memory");
        // CAIRN_BENCH_MEMORY_MAX lowers the largest size (default 1M) for quick runs.
        let largest = std::env::var("CAIRN_BENCH_MEMORY_MAX")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000);
        memory::memory_rows(&mut rows, scratch.path(), largest)?;
    }
    if wanted("memory") || only.as_deref() == Some("time-recall") {
        eprintln!("bench: time-only recall");
        time_recall::time_recall_rows(&mut rows, scratch.path())?;
    }
    print_and_save(&rows)
}

/// Compile, cache, instantiate and call rows on the Rust bench plugin (and the Python one).
fn plugin_rows(rows: &mut Vec<Row>, scratch: &Path, rust_component: &Path) -> Result<()> {
    let host_db = Arc::new(SqliteHost::open(scratch)?);
    let services = Arc::new(HostServices {
        kv: Arc::new(PluginKv::new(host_db.clone(), KvConfig::default())),
        inbox: None,
        events: None,
        interrupt: None,
        stop: None,
        memory: None,
        llm: Some(Arc::new(LlmGate::new(Arc::new(OfflineProvider), host_db))),
        memory_writes: Default::default(),
    });
    languages::language_rows(rows, scratch, &services)?;

    // llm.complete through the Rust bench plugin, next to the same call made directly.
    let cache = scratch.join("cache-llm");
    let runtime = runtime(&cache)?;
    let manifest = write_manifest(scratch, "bench", rust_component)?;
    let prepared = runtime.prepare(manifest, scratch)?;
    let mut instance = prepared
        .instantiate(services.clone())
        .map_err(|f| anyhow::anyhow!("{f}"))?;
    instance.init("{}").context("init")?;
    let asks = 5_000u64;
    let empty = languages::event("bench.llm", "0".into());
    let many = languages::event("bench.llm", asks.to_string());
    let (mut base, mut full) = (Duration::MAX, Duration::MAX);
    for _ in 0..3 {
        let started = Instant::now();
        instance.on_event(&empty).context("llm 0")?;
        base = base.min(started.elapsed());
        let started = Instant::now();
        instance.on_event(&many).context("llm")?;
        full = full.min(started.elapsed());
    }
    let per_plugin_call = (full.saturating_sub(base)).as_secs_f64() * 1e6 / asks as f64;
    let request = CompletionRequest {
        messages: vec![ChatMessage::new("user", "ping")],
        max_tokens: Some(8),
        ..CompletionRequest::default()
    };
    let started = Instant::now();
    for _ in 0..asks {
        black_box(OfflineProvider.complete(black_box(&request))?);
    }
    let direct = started.elapsed().as_secs_f64() * 1e6 / asks as f64;
    rows.push(Row {
        name: "plugin llm.complete (offline provider)".into(),
        value: per_plugin_call,
        unit: "µs",
        note: format!(
            "the same call made directly: {direct:.2} µs, so the plugin path adds {:.2} µs (budget, conversions, usage record)",
            per_plugin_call - direct
        ),
    });

    Ok(())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// "ack p50 … ms, p99 … ms" of sorted acknowledgement latencies in ms.
fn acks(latencies: &[f64]) -> String {
    format!(
        "ack p50 {:.1} ms, p99 {:.1} ms",
        percentile(latencies, 0.5),
        percentile(latencies, 0.99)
    )
}

/// Webhook POST → reply delivered, through the real binary and the real webhook channel.
fn end_to_end_rows(rows: &mut Vec<Row>, scratch: &Path) -> Result<()> {
    let plugins = workspace_root().join("target/plugins");
    let data = scratch.join("e2e");
    let window = "50";
    let secret = "bench-secret";
    let mut host = cairn_tests::Host::start(
        &plugins,
        &data,
        &[
            ("CAIRN_HTTP_LISTEN", "127.0.0.1:0"),
            ("CAIRN_WEBHOOK_SECRET", secret),
            ("CAIRN_ROUTER_BATCH_WINDOW_MS", window),
            // The default: the local model when installed (a query embedding per turn).
            ("CAIRN_MEMORY_EMBEDDINGS_PROVIDER", "auto"),
            (
                "CAIRN_LOG",
                "info,cairn::agent=warn,cairn::plugin=warn,cairn_plugin=warn",
            ),
        ],
    );
    let port = host.webhook_port();
    let client = cairn_tests::http_client();
    let deliveries = 200;
    // 10 a second: a load one agent answers as it comes (a turn with the local model takes
    // ~30 ms on 2 cores), so the figures are a turn's cost, not a queue's growth.
    let spacing = Duration::from_millis(100);
    let mut sent_at = BTreeMap::new();
    for i in 0..deliveries {
        let body = serde_json::to_vec(&serde_json::json!({
            "action": "opened",
            "repository": {"full_name": "octo/bench"},
            "pull_request": {"number": i, "title": "bench"},
            "sender": {"login": "octocat"},
        }))?;
        let signature = cairn_tests::github_signature(secret.as_bytes(), &body);
        sent_at.insert(format!("e2e-{i}"), cairn::store::now_ms());
        let (status, answer) = cairn_tests::post_webhook(
            &client,
            port,
            "pull_request",
            &format!("e2e-{i}"),
            &body,
            Some(&signature),
        )?;
        anyhow::ensure!(status == 202, "delivery refused: {status} {answer}");
        std::thread::sleep(spacing);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let latencies = loop {
        let db = cairn_tests::buffer_db(&data);
        let mut statement = db.prepare(
            "SELECT json_extract(m.payload, '$.delivery'), b.finished_at FROM messages m JOIN batches b ON b.id = m.batch_id
             WHERE b.status = 'done'",
        )?;
        let done: Vec<(String, i64)> = statement
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        if done.len() == deliveries {
            let mut latencies: Vec<f64> = done
                .iter()
                .map(|(d, finished)| (finished - sent_at[d]) as f64)
                .collect();
            latencies.sort_by(|a, b| a.total_cmp(b));
            break latencies;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {} of {deliveries} replies after 60 s",
            done.len()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    host.stop();
    let journal = rusqlite::Connection::open(data.join("journal.db"))?;
    let turn_figure = |path: &str| -> Result<Vec<f64>> {
        let mut values: Vec<f64> = journal
            .prepare("SELECT json_extract(payload, ?1) FROM events WHERE topic = 'turn.completed'")?
            .query_map([path], |r| r.get::<_, f64>(0))?
            .collect::<Result<_, _>>()?;
        anyhow::ensure!(!values.is_empty(), "no turn.completed events with {path}");
        values.sort_by(|a, b| a.total_cmp(b));
        Ok(values)
    };
    let host_us = turn_figure("$.host_us")?;
    let phases = ["session", "context", "deliver"]
        .iter()
        .map(|phase| {
            let values = turn_figure(&format!("$.phases_us.{phase}"))?;
            Ok(format!(
                "{phase} {:.2}/{:.2}",
                percentile(&values, 0.5) / 1000.0,
                percentile(&values, 0.99) / 1000.0
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    rows.push(turn_time_row(
        "host overhead per turn, LLM and embedding model excluded",
        &host_us,
        format!(
            "the host's time on the turn's path; {} turns, a new session each; phases p50/p99 ms: {} (session, events and episodes durable, context providers, delivery through the channel plugin with a kv write while the reply's episode and agent.response are written)",
            host_us.len(),
            phases.join(", ")
        ),
    ));
    rows.push(turn_time_row(
        "host time per turn, counting work beside the encoder",
        &turn_figure("$.host_incl_overlap_us")?,
        "also the reads done while the query's embedding ran (they share 2 cores with it, but the turn waited for the model anyway)".into(),
    ));
    let waited_us = turn_figure("$.embedding_wait_us")?;
    rows.push(turn_time_row(
        "the query's embedding per turn, on the turn's path",
        &turn_figure("$.embedding_us")?,
        format!(
            "{} embedder, started with the turn; recall waited for it p50 {:.2} ms, p99 {:.2} ms (the session, recent turns, core memories and the full-text search run meanwhile)",
            memory::embedding_provider(),
            percentile(&waited_us, 0.5) / 1000.0,
            percentile(&waited_us, 0.99) / 1000.0,
        ),
    ));
    let mut without_llm: Vec<f64> = journal
        .prepare(
            "SELECT json_extract(payload, '$.host_us') + json_extract(payload, '$.embedding_us')
             FROM events WHERE topic = 'turn.completed'",
        )?
        .query_map([], |r| r.get::<_, f64>(0))?
        .collect::<Result<_, _>>()?;
    without_llm.sort_by(|a, b| a.total_cmp(b));
    rows.push(turn_time_row(
        "turn time with the LLM excluded (host and embedding model)",
        &without_llm,
        "what a user waits for beyond the LLM".into(),
    ));
    rows.push(Row {
        name: "webhook → reply delivered, end to end".into(),
        value: percentile(&latencies, 0.5),
        unit: "ms",
        note: format!(
            "p50; p99 {:.0} ms; includes batch_window_ms={window}; {deliveries} deliveries, one every {} ms",
            percentile(&latencies, 0.99),
            spacing.as_millis()
        ),
    });
    Ok(())
}

/// A row of per-turn times (µs, sorted): the p50 in ms as its value, the p99 first in its note.
fn turn_time_row(name: &str, sorted_us: &[f64], note: String) -> Row {
    Row {
        name: name.into(),
        value: percentile(sorted_us, 0.5) / 1000.0,
        unit: "ms",
        note: format!(
            "p50; p99 {:.2} ms; {note}",
            percentile(sorted_us, 0.99) / 1000.0
        ),
    }
}

fn print_and_save(rows: &[Row]) -> Result<()> {
    println!("{:<58} {:>12}  {:<4} NOTE", "BENCHMARK", "VALUE", "UNIT");
    for row in rows {
        println!(
            "{:<58} {:>12.1}  {:<4} {}",
            row.name, row.value, row.unit, row.note
        );
    }
    let out_dir: PathBuf = workspace_root().join("target").join("bench");
    std::fs::create_dir_all(&out_dir)?;
    let json: Vec<_> = rows
        .iter()
        .map(|r| serde_json::json!({"name": r.name, "value": r.value, "unit": r.unit, "note": r.note}))
        .collect();
    let report = serde_json::json!({
        "generated_at_ms": cairn::store::now_ms(),
        "rows": json,
    });
    let path = out_dir.join("bench.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("\nwritten to {}", path.display());
    Ok(())
}
