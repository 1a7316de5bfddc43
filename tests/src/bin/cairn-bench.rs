//! The benchmark harness behind `cargo xtask bench`: measures the plugin runtime on the
//! real components, the durable buffer next to a raw rusqlite loop, the router, and the
//! webhook-to-reply path through the real binary; prints a table and writes
//! `target/bench/bench.json`.
//!
//! Comparisons are ratios measured side by side in one run (a WASM call next to the same
//! function called natively).

#[path = "bench/bare.rs"]
mod bare;
#[path = "bench/cognition.rs"]
mod cognition;
#[path = "bench/emit.rs"]
mod emit;
#[path = "bench/languages.rs"]
mod languages;
#[path = "bench/postgres.rs"]
mod on_postgres;

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use std::collections::BTreeMap;

use cairn::buffer::{Buffer, BufferConfig, NewMessage};
use cairn::config::{KvConfig, RuntimeConfig};
use cairn::journal::{Journal, JournalConfig, NewEvent};
use cairn::llm::offline::OfflineProvider;
use cairn::llm::{ChatMessage, CompletionRequest, LlmProvider};
use cairn::plugin::capabilities::HostServices;
use cairn::plugin::kv::PluginKv;
use cairn::plugin::llm_gate::LlmGate;
use cairn::plugin::manifest;
use cairn::plugin::runtime::Runtime;
use cairn::router::{Router, RouterConfig};
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
    // hosts, claim, cognition, memory; `dispatch` runs the journal's dispatch rows alone.
    let only = std::env::args().nth(1);
    let wanted = |section: &str| only.as_deref().is_none_or(|o| o == section);
    if wanted("plugins") {
        eprintln!("bench: plugins");
        plugin_rows(&mut rows, scratch.path(), &rust_component)?;
    }
    if wanted("buffer") {
        eprintln!("bench: buffer");
        buffer_rows(&mut rows, scratch.path())?;
    }
    if wanted("route") {
        eprintln!("bench: route");
        route_rows(&mut rows, scratch.path())?;
    }
    if wanted("e2e") {
        eprintln!("bench: e2e");
        end_to_end_rows(&mut rows, scratch.path())?;
    }
    if wanted("journal") {
        eprintln!("bench: journal");
        journal_rows(&mut rows, scratch.path(), &rust_component)?;
    }
    if only.as_deref() == Some("dispatch") {
        eprintln!("bench: dispatch (the journal's dispatch rows alone)");
        only_dispatch_rows(&mut rows, scratch.path(), &rust_component)?;
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
        memory_rows(&mut rows, scratch.path(), largest)?;
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

fn bench_message(producer: usize, i: usize) -> NewMessage {
    NewMessage {
        channel: "bench".into(),
        sender: format!("producer-{producer}"),
        conversation: format!("c{}", i % 50),
        payload: format!("{{\"text\":\"message {i} from producer {producer}\"}}"),
        priority: None,
        dedup_key: None,
        said_at: None,
    }
}

/// A new buffer with default settings in `scratch/name`.
fn fresh_buffer(scratch: &Path, name: &str) -> Result<(PathBuf, Arc<Buffer>)> {
    let dir = scratch.join(name);
    std::fs::create_dir_all(&dir)?;
    let buffer = Buffer::open(&dir, BufferConfig::default())?;
    Ok((dir, Arc::new(buffer)))
}

/// Rounds of each ingest measurement, the buffer's and the raw loop's taking turns, so a
/// slow spell of the disk falls on both; the median of each is compared.
const INGEST_ROUNDS: usize = 5;

/// Durable ingest through the group-commit writer with N producers, and the raw ceiling:
/// a plain rusqlite loop committing transactions of N inserts at synchronous=FULL. Then the
/// same producers against the buffer on PostgreSQL (a private server), side by side.
fn buffer_rows(rows: &mut Vec<Row>, scratch: &Path) -> Result<()> {
    let postgres = cairn::store::pg::cluster::TestCluster::shared();
    for (producers, per_producer) in [(1usize, 1500usize), (8, 300), (64, 40)] {
        let total = producers * per_producer;
        let (mut ingests, mut raws, mut latencies) = (Vec::new(), Vec::new(), Vec::new());
        let mut raws_growing = Vec::new();
        for round in 0..INGEST_ROUNDS {
            let (_, buffer) = fresh_buffer(scratch, &format!("ingest-{producers}-{round}"))?;
            let (ingest, acked) = push_all(buffer, producers, per_producer)?;
            ingests.push(ingest);
            latencies.extend(acked);
            let raw_dir = scratch.join(format!("raw-{producers}-{round}"));
            raws.push(raw_insert_rate(&raw_dir, producers, total, None)?);
            let raw_dir = scratch.join(format!("raw-growing-{producers}-{round}"));
            let backstop = Some(cairn::store::BACKSTOP_PAGES);
            raws_growing.push(raw_insert_rate(&raw_dir, producers, total, backstop)?);
        }
        latencies.sort_by(|a, b| a.total_cmp(b));
        let (ingest, raw, raw_growing) = (median(ingests), median(raws), median(raws_growing));
        rows.push(Row {
            name: format!("durable ingest, {producers} producer(s)"),
            value: ingest,
            unit: "msg/s",
            note: format!(
                "{}; raw rusqlite FULL, {producers} per commit: {raw:.0} msg/s (ratio {:.2}); the same loop with its WAL left to grow as the buffer writer's is (checkpointing only at {} pages): {raw_growing:.0} msg/s (ratio {:.2}); medians of {INGEST_ROUNDS} alternating rounds",
                acks(&latencies),
                ingest / raw,
                cairn::store::BACKSTOP_PAGES,
                ingest / raw_growing
            ),
        });
        if let Some(cluster) = postgres {
            let store = cairn::store::pg::buffer::PgBuffer::connect(
                &cluster.fresh_database(),
                cairn::store::pg::buffer::DEFAULT_LEASE,
            )?;
            let buffer = Arc::new(Buffer::over(Box::new(store), BufferConfig::default())?);
            let (on_postgres, latencies) = push_all(buffer, producers, per_producer)?;
            rows.push(Row {
                name: format!("durable ingest on PostgreSQL, {producers} producer(s)"),
                value: on_postgres,
                unit: "msg/s",
                note: format!(
                    "{}; ratio to SQLite in this run {:.2}",
                    acks(&latencies),
                    on_postgres / ingest
                ),
            });
        }
    }
    Ok(())
}

/// `producers` threads pushing `per_producer` messages each: messages per second, and every
/// acknowledgement's latency in ms, sorted.
fn push_all(buffer: Arc<Buffer>, producers: usize, per_producer: usize) -> Result<(f64, Vec<f64>)> {
    let started = Instant::now();
    let threads: Vec<_> = (0..producers)
        .map(|p| {
            let buffer = buffer.clone();
            std::thread::spawn(move || -> Result<Vec<f64>> {
                let mut latencies = Vec::with_capacity(per_producer);
                for i in 0..per_producer {
                    let sent = Instant::now();
                    buffer.push(bench_message(p, i))?;
                    latencies.push(sent.elapsed().as_secs_f64() * 1e3);
                }
                Ok(latencies)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for thread in threads {
        latencies.extend(
            thread
                .join()
                .map_err(|_| anyhow::anyhow!("producer panicked"))??,
        );
    }
    let rate = (producers * per_producer) as f64 / started.elapsed().as_secs_f64();
    latencies.sort_by(|a, b| a.total_cmp(b));
    Ok((rate, latencies))
}

/// Insert `total` rows into a fresh buffer schema, `batch` rows per committed transaction;
/// `autocheckpoint` sets the WAL pages at which a commit checkpoints (SQLite's 1,000 if none).
fn raw_insert_rate(
    dir: &Path,
    batch: usize,
    total: usize,
    autocheckpoint: Option<i64>,
) -> Result<f64> {
    std::fs::create_dir_all(dir)?;
    let mut conn = cairn::store::open(&dir.join("buffer.db"), &cairn::buffer::MIGRATIONS)?;
    if let Some(pages) = autocheckpoint {
        conn.pragma_update(None, "wal_autocheckpoint", pages)?;
    }
    let started = Instant::now();
    let mut written = 0;
    while written < total {
        let tx = conn.transaction()?;
        for i in 0..batch.min(total - written) {
            let message = bench_message(0, written + i);
            tx.execute(
                "INSERT INTO messages (channel, sender, conversation, payload, received_at, priority) VALUES (?1, ?2, ?3, ?4, ?5, 100)",
                rusqlite::params![message.channel, message.sender, message.conversation, message.payload, cairn::store::now_ms()],
            )?;
        }
        tx.commit()?;
        written += batch.min(total - written);
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

/// Batch-and-route throughput: 20k unrouted messages in 500 conversations.
fn route_rows(rows: &mut Vec<Row>, scratch: &Path) -> Result<()> {
    let (dir, buffer) = fresh_buffer(scratch, "route")?;
    let total = 20_000;
    {
        let mut conn = cairn::store::open(&dir.join("buffer.db"), &cairn::buffer::MIGRATIONS)?;
        let tx = conn.transaction()?;
        for i in 0..total {
            tx.execute(
                "INSERT INTO messages (channel, sender, conversation, payload, received_at, priority) VALUES ('bench', 'ada', ?1, '{\"text\":\"hi\"}', 0, 100)",
                rusqlite::params![format!("c{}", i % 500)],
            )?;
        }
        tx.commit()?;
    }
    let (rate, batches) = route_all(buffer)?;
    rows.push(Row {
        name: "batch and route (20k messages, 500 conversations)".into(),
        value: rate,
        unit: "msg/s",
        note: format!(
            "{batches} batches, {:.0} batches/s",
            batches as f64 * rate / total as f64
        ),
    });
    if let Some(cluster) = cairn::store::pg::cluster::TestCluster::shared() {
        let store = cairn::store::pg::buffer::PgBuffer::connect(
            &cluster.fresh_database(),
            cairn::store::pg::buffer::DEFAULT_LEASE,
        )?;
        let buffer = Arc::new(Buffer::over(Box::new(store), BufferConfig::default())?);
        fill_for_routing(&buffer, total)?;
        let (on_postgres, batches) = route_all(buffer)?;
        rows.push(Row {
            name: "batch and route on PostgreSQL (20k messages, 500 conversations)".into(),
            value: on_postgres,
            unit: "msg/s",
            note: format!(
                "{batches} batches; ratio to SQLite in this run {:.2}",
                on_postgres / rate
            ),
        });
    }
    Ok(())
}

/// Store `total` messages in 500 conversations, 64 at a time.
fn fill_for_routing(buffer: &Arc<Buffer>, total: usize) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut pushes = tokio::task::JoinSet::new();
        for i in 0..total {
            let buffer = buffer.clone();
            let mut message = bench_message(0, i);
            message.conversation = format!("c{}", i % 500);
            pushes.spawn(async move { buffer.push_async(message).await });
            if pushes.len() >= 64
                && let Some(done) = pushes.join_next().await
            {
                done??;
            }
        }
        while let Some(done) = pushes.join_next().await {
            done??;
        }
        anyhow::Ok(())
    })
}

/// Route everything `buffer` holds with the default rules, as fast as the router goes:
/// messages per second and batches made.
fn route_all(buffer: Arc<Buffer>) -> Result<(f64, usize)> {
    let total = buffer.stats()?.depth as f64;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let router = Router::new(
        buffer.clone(),
        RouterConfig::default(),
        Arc::new(tokio::sync::Notify::new()),
    )?;
    let started = Instant::now();
    let mut batches = 0;
    runtime.block_on(async {
        loop {
            let routed = router.tick(true).await?.batches;
            if routed == 0 {
                break;
            }
            batches += routed;
        }
        anyhow::Ok(())
    })?;
    let elapsed = started.elapsed().as_secs_f64();
    anyhow::ensure!(buffer.stats()?.depth == 0, "everything routed");
    Ok((total / elapsed, batches))
}

/// Entries at which recall is measured on PostgreSQL too.
const POSTGRES_RECALL_SIZE: usize = 100_000;

/// Each query's recall time on `memory` (ms, sorted), after one warm-up.
fn recall_times(
    memory: &cairn::memory::LocalMemory,
    queries: &[cairn::memory::RecallQuery],
) -> Result<Vec<f64>> {
    if let Some(first) = queries.first() {
        memory.recall(first)?;
    }
    let mut samples = Vec::new();
    for query in queries {
        let started = Instant::now();
        black_box(memory.recall(query)?);
        samples.push(started.elapsed().as_secs_f64() * 1e3);
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    Ok(samples)
}

/// The background embedder's rate on distinct texts (no cache hit): episode-length texts
/// made of the generated users' sentences, stored on a fresh memory with the default settings and embedded
/// as the host's background embedder does (both cores, idle scheduling class, batches of
/// `memory.embeddings.batch_size`).
fn background_embedding_row(rows: &mut Vec<Row>, scratch: &Path) -> Result<()> {
    use cairn::memory::{ExportRecord, LocalMemory, MemoryConfig};
    use cairn_tests::memory_dataset;

    const TEXTS: usize = 2_000;
    let dir = scratch.join("embedding-rate");
    std::fs::create_dir_all(&dir)?;
    let memory = LocalMemory::open(&dir, MemoryConfig::default())?;
    let now = cairn::store::now_ms();
    let dataset = memory_dataset::generate(200, 7, now);
    // Episode-length texts (a few of the generated sentences each), every one distinct, so
    // the embedder's cache never answers.
    let mut seen = std::collections::HashSet::new();
    let sentences: Vec<&cairn::memory::NewMemory> = dataset
        .memories
        .iter()
        .map(|item| &item.memory)
        .filter(|memory| seen.insert(memory.content.clone()))
        .collect();
    let n = sentences.len();
    anyhow::ensure!(n > 100, "the dataset has only {n} distinct sentences");
    let mut texts = std::collections::HashSet::new();
    let mut chunk = String::new();
    let mut words = 0usize;
    for i in 0..TEXTS * 10 {
        if texts.len() == TEXTS {
            break;
        }
        let mut memory = sentences[i % n].clone();
        let round = i / n;
        memory.content = [i % n, (i * 7 + 3 + round) % n, (i * 13 + 5 + 2 * round) % n]
            .map(|j| sentences[j].content.as_str())
            .join(" ");
        if !texts.insert(memory.content.clone()) {
            continue;
        }
        words += memory.content.split_whitespace().count();
        let entry = cairn::memory::record(&memory, format!("mem_rate{i:06}"), now);
        chunk.push_str(&serde_json::to_string(&ExportRecord::Entry(Box::new(
            entry,
        )))?);
        chunk.push('\n');
    }
    let texts = texts.len();
    anyhow::ensure!(texts == TEXTS, "only {texts} distinct texts");
    memory.import(&chunk)?;
    let started = Instant::now();
    let embedded = memory.embed_pending(|_| {})?;
    let elapsed = started.elapsed().as_secs_f64();
    anyhow::ensure!(embedded as usize == texts, "embedded {embedded} of {texts}");
    rows.push(Row {
        name: "background embedding, distinct texts".into(),
        value: texts as f64 / elapsed,
        unit: "/s",
        note: format!(
            "{texts} texts of {:.1} words on average, by {}; {} cores, idle class",
            words as f64 / texts as f64,
            memory.embeddings_in_use().0,
            std::thread::available_parallelism().map_or(1, usize::from)
        ),
    });
    Ok(())
}

/// Which provider the bench's host embeds with (`auto`: the local model when installed).
fn embedding_provider() -> &'static str {
    use cairn::memory::embed::local_model;
    let models_dir = std::env::var_os("CAIRN_MEMORY_EMBEDDINGS_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_default();
    if local_model::is_installed(&local_model::model_dir(&models_dir)) {
        "the local all-MiniLM-L6-v2"
    } else {
        "the lexical hash (the local model is not installed)"
    }
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
            embedding_provider(),
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

fn bench_event(i: usize) -> NewEvent {
    NewEvent {
        topic: "bench.checksum".into(),
        payload: format!("{{\"text\":\"event {i} with a few words of payload\"}}"),
        source: "bench".into(),
        ..NewEvent::default()
    }
}

/// `appenders` tasks appending events (300 for one, 40 each for many): events per second,
/// and every acknowledgement's latency in ms, sorted.
async fn append_all(journal: Arc<Journal>, appenders: usize) -> Result<(f64, Vec<f64>)> {
    let per = if appenders == 1 { 300 } else { 40 };
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for a in 0..appenders {
        let journal = journal.clone();
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            for i in 0..per {
                let sent = Instant::now();
                journal.append(bench_event(a * per + i)).await?;
                latencies.push(sent.elapsed().as_secs_f64() * 1e3);
            }
            anyhow::Ok(latencies)
        });
    }
    let mut latencies = Vec::new();
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done??);
    }
    let rate = (appenders * per) as f64 / started.elapsed().as_secs_f64();
    latencies.sort_by(|a, b| a.total_cmp(b));
    Ok((rate, latencies))
}

/// "lowest–highest" of rates, in thousands.
fn span(rates: &[f64]) -> String {
    let lowest = rates.iter().copied().fold(f64::INFINITY, f64::min);
    let highest = rates.iter().copied().fold(0.0, f64::max);
    format!("{:.0}k–{:.0}k", lowest / 1e3, highest / 1e3)
}

/// The dispatch rows for `subscribers` subscribers: WASM next to native (medians of
/// alternating rounds), WASM beside a churner, and WASM on PostgreSQL when there is one.
async fn dispatch_rows(
    rows: &mut Vec<Row>,
    scratch: &Path,
    component: &Path,
    subscribers: usize,
    postgres: Option<&cairn::store::pg::cluster::TestCluster>,
) -> Result<()> {
    // One journal for every round: each round's subscribers are new ids registered
    // before the events, so each starts from the first.
    let dir = scratch.join(format!("dispatch-{subscribers}"));
    std::fs::create_dir_all(&dir)?;
    let journal = Arc::new(Journal::open(&dir, JournalConfig::default())?);
    let ids: Vec<String> = (0..DISPATCH_ROUNDS)
        .flat_map(|round| {
            [Takers::Native, Takers::Wasm]
                .into_iter()
                .flat_map(move |takers| round_ids(round, subscribers, takers))
        })
        .collect();
    let head = fill_journal(&journal, &ids).await?;
    // Rounds alternate, so a slow spell of the machine falls on both; medians compared.
    let (mut natives, mut wasms) = (Vec::new(), Vec::new());
    for round in 0..DISPATCH_ROUNDS {
        for (takers, rates) in [(Takers::Native, &mut natives), (Takers::Wasm, &mut wasms)] {
            eprintln!("bench: journal dispatch, {subscribers} {takers:?}, round {round}");
            let shape = (round, subscribers, takers);
            rates.push(dispatch_rate(scratch, component, shape, journal.clone(), head).await?);
        }
    }
    let spread = format!("rounds: WASM {}, native {}", span(&wasms), span(&natives));
    let (native, wasm) = (median(natives), median(wasms));
    rows.push(Row {
        name: format!("dispatch to {subscribers} WASM subscriber(s)"),
        value: wasm,
        unit: "ev/s",
        note: format!(
            "{subscribers} native Rust subscriber(s) through the same dispatcher: {native:.0} ev/s (ratio {:.2}; medians of {DISPATCH_ROUNDS} alternating rounds of {DISPATCH_EVENTS} events; {spread})",
            wasm / native
        ),
    });
    // The churner's events are dead-lettered at its first failure.
    let dir = scratch.join(format!("dispatch-{subscribers}-churned"));
    std::fs::create_dir_all(&dir)?;
    let config = JournalConfig {
        max_attempts: 1,
        ..JournalConfig::default()
    };
    let journal = Arc::new(Journal::open(&dir, config)?);
    let mut ids = round_ids(0, subscribers, Takers::WasmBesideChurner);
    ids.push("churner".into());
    let head = fill_journal(&journal, &ids).await?;
    eprintln!("bench: journal dispatch, {subscribers} beside the churner");
    let shape = (0, subscribers, Takers::WasmBesideChurner);
    let churned = dispatch_rate(scratch, component, shape, journal, head).await?;
    rows.push(Row {
        name: format!("dispatch to {subscribers} WASM subscriber(s) beside a plugin trapping on every event"),
        value: churned,
        unit: "ev/s",
        note: format!(
            "the churner restarted after each trap (backoff 1 ms); ratio to the row without it {:.2}",
            churned / wasm
        ),
    });
    if let Some(cluster) = postgres {
        let store = cairn::store::pg::journal::PgJournal::connect(
            &cluster.fresh_database(),
            cairn::store::pg::journal::DEFAULT_SUBSCRIPTION_LEASE,
        )?;
        let journal = Arc::new(Journal::over(Box::new(store), JournalConfig::default()));
        let head = fill_journal(&journal, &round_ids(0, subscribers, Takers::Wasm)).await?;
        eprintln!("bench: journal dispatch, {subscribers} wasm, PostgreSQL");
        let shape = (0, subscribers, Takers::Wasm);
        let on_postgres = dispatch_rate(scratch, component, shape, journal, head).await?;
        rows.push(Row {
            name: format!("dispatch to {subscribers} WASM subscriber(s) on PostgreSQL"),
            value: on_postgres,
            unit: "ev/s",
            note: format!("ratio to SQLite in this run {:.2}", on_postgres / wasm),
        });
    }
    Ok(())
}

/// The journal section's SQLite dispatch rows alone (`cargo xtask bench dispatch`), for
/// working on the dispatcher without the append, PostgreSQL and latency rows.
fn only_dispatch_rows(rows: &mut Vec<Row>, scratch: &Path, component: &Path) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        handle_call_row(rows, scratch, component).await?;
        for subscribers in [1usize, 10] {
            dispatch_rows(rows, scratch, component, subscribers, None).await?;
        }
        Ok(())
    })
}

/// Calls timed through a supervised plugin's handle.
const HANDLE_CALLS: usize = 20_000;

/// The round trip of an empty call through a supervised plugin's handle, from a task of the
/// async runtime as the dispatcher makes it: what a run of events pays on top of the guest's
/// work (the hops to the plugin's thread and back).
async fn handle_call_row(rows: &mut Vec<Row>, scratch: &Path, component: &Path) -> Result<()> {
    let dir = scratch.join("handle-call");
    std::fs::create_dir_all(&dir)?;
    let journal = Arc::new(Journal::open(&dir, JournalConfig::default())?);
    let (host, handles) =
        bench_subscribers(&dir, component, &["called".into()], false, journal).await?;
    let handle = handles
        .first()
        .ok_or_else(|| anyhow::anyhow!("the bench plugin did not start"))?;
    let mut took = Vec::with_capacity(HANDLE_CALLS);
    for _ in 0..HANDLE_CALLS {
        let started = Instant::now();
        handle
            .call(|instance| Ok(black_box(instance.timeout())))
            .await?;
        took.push(started.elapsed().as_secs_f64() * 1e6);
    }
    host.stop().await;
    took.sort_by(f64::total_cmp);
    rows.push(Row {
        name: "call through a supervised plugin's handle (empty)".into(),
        value: percentile(&took, 0.5),
        unit: "µs",
        note: format!(
            "p50 of {HANDLE_CALLS} calls in turn from an async task; p99 {:.1} µs: the hops to the plugin's thread and back that each run of events pays",
            percentile(&took, 0.99)
        ),
    });
    Ok(())
}

/// Rounds of each dispatch measurement, native and WASM taking turns.
const DISPATCH_ROUNDS: usize = 9;

/// Journal rows: durable append, dispatch to WASM subscribers next to a native one, and
/// emit → on-event latency at 1k events/s.
fn journal_rows(rows: &mut Vec<Row>, scratch: &Path, component: &Path) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let postgres = cairn::store::pg::cluster::TestCluster::shared();
        for appenders in [1usize, 64] {
            let dir = scratch.join(format!("journal-append-{appenders}"));
            std::fs::create_dir_all(&dir)?;
            let journal = Arc::new(Journal::open(&dir, JournalConfig::default())?);
            let (rate, latencies) = append_all(journal, appenders).await?;
            rows.push(Row {
                name: format!("journal durable append, {appenders} appender(s)"),
                value: rate,
                unit: "ev/s",
                note: acks(&latencies),
            });
            if let Some(cluster) = postgres {
                let store = cairn::store::pg::journal::PgJournal::connect(
                    &cluster.fresh_database(),
                    cairn::store::pg::journal::DEFAULT_SUBSCRIPTION_LEASE,
                )?;
                let journal = Arc::new(Journal::over(Box::new(store), JournalConfig::default()));
                let (on_postgres, latencies) = append_all(journal, appenders).await?;
                rows.push(Row {
                    name: format!("journal durable append on PostgreSQL, {appenders} appender(s)"),
                    value: on_postgres,
                    unit: "ev/s",
                    note: format!(
                        "{}; ratio to SQLite in this run {:.2}",
                        acks(&latencies),
                        on_postgres / rate
                    ),
                });
            }
        }

        handle_call_row(rows, scratch, component).await?;
        for subscribers in [1usize, 10] {
            dispatch_rows(rows, scratch, component, subscribers, postgres).await?;
        }
        eprintln!("bench: journal emit latency");
        let emitted = emit::measure(scratch, component).await?;
        let latencies = &emitted.emit_to_taken;
        rows.push(Row {
            name: "emit → on-event at 1k events/s".into(),
            value: percentile(latencies, 0.5),
            unit: "ms",
            note: format!(
                "p50; p99 {:.2} ms, max {:.1} ms, from the append's call until on-event returned; \
                 the append alone p50 {:.2}, p99 {:.2}, max {:.1} ms",
                percentile(latencies, 0.99),
                percentile(latencies, 1.0),
                percentile(&emitted.append, 0.5),
                percentile(&emitted.append, 0.99),
                percentile(&emitted.append, 1.0)
            ),
        });
        anyhow::Ok(())
    })
}

/// A plugin host with the bench plugin as each of `ids` on `journal` (and, with `churner`,
/// the hostile plugin trapping on every event beside them).
async fn bench_subscribers(
    dir: &Path,
    component: &Path,
    ids: &[String],
    churner: bool,
    journal: Arc<Journal>,
) -> Result<(
    cairn::plugin::PluginHost,
    Vec<cairn::plugin::supervisor::PluginHandle>,
)> {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins)?;
    for id in ids {
        std::fs::write(
            plugins.join(format!("{id}.yaml")),
            format!(
                "id: {id}\nversion: 1.0.0\nkind: handler\ncomponent: {}\napi: ^0.2\nevents: {{subscribes: ['bench.*']}}\n",
                component.display()
            ),
        )?;
    }
    if churner {
        std::fs::write(
            plugins.join("churner.yaml"),
            format!(
                "id: churner\nversion: 1.0.0\nkind: handler\ncomponent: {}\napi: ^0.1\nevents: {{subscribes: ['bench.*']}}\n",
                guests_dir().join("hostile.wasm").display()
            ),
        )?;
    }
    let set = cairn::plugin::resolve::load(&plugins).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let mut config = cairn::config::HostConfig {
        data_dir: dir.to_path_buf(),
        ..Default::default()
    };
    // A churner is restarted after every trap, however many.
    config.supervisor.restart_budget = 1_000_000;
    config.supervisor.backoff_initial_ms = 1;
    config.supervisor.backoff_max_ms = 1;
    config.runtime.cache_dir = workspace_root().join("target/test-cache");
    let host_db = Arc::new(SqliteHost::open(dir)?);
    let services = Arc::new(HostServices {
        kv: Arc::new(PluginKv::new(host_db.clone(), KvConfig::default())),
        inbox: None,
        events: Some(journal),
        interrupt: None,
        stop: None,
        memory: None,
        llm: None,
        memory_writes: Default::default(),
    });
    let status = Arc::new(cairn::plugin::status::StatusLog::new(host_db));
    let host =
        cairn::plugin::PluginHost::start(&set, &config.plugin_host(), services, status).await?;
    let handles = ids
        .iter()
        .cloned()
        .chain(churner.then(|| "churner".to_string()))
        .filter_map(|id| host.handle(&id).cloned())
        .collect();
    Ok((host, handles))
}

/// A native Rust subscriber doing the bench plugin's work (a checksum of the payload),
/// served by the same dispatcher as a plugin: the ratio is the WASM call's cost alone.
struct NativeSubscriber(String);

impl cairn::journal::dispatch::Subscriber for NativeSubscriber {
    fn id(&self) -> &str {
        &self.0
    }

    async fn take(
        &self,
        event: &cairn::journal::Event,
    ) -> Result<(), cairn::journal::dispatch::Undelivered> {
        black_box(fnv1a(event.payload.as_bytes()));
        Ok(())
    }
}

/// Who takes the dispatch rows' events.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Takers {
    /// Native Rust subscribers doing the bench plugin's work.
    Native,
    /// The bench plugin.
    Wasm,
    /// The bench plugin, beside a hostile plugin subscribed to the same events that traps on
    /// every one and is restarted each time.
    WasmBesideChurner,
}

/// Events each dispatch round delivers to every subscriber.
const DISPATCH_EVENTS: usize = 50_000;

/// The journal ids of one round's subscribers: `r{round}-native{i}` or `r{round}-sub{i}`
/// (the bench plugins' ids).
fn round_ids(round: usize, subscribers: usize, takers: Takers) -> Vec<String> {
    let kind = if takers == Takers::Native {
        "native"
    } else {
        "sub"
    };
    (0..subscribers)
        .map(|i| format!("r{round}-{kind}{i}"))
        .collect()
}

/// Register `ids` on `journal` (a new subscriber starts at the end), then append
/// [`DISPATCH_EVENTS`] bench events for them all; the last event's seq.
async fn fill_journal(journal: &Arc<Journal>, ids: &[String]) -> Result<i64> {
    let patterns = vec!["bench.*".to_string()];
    for id in ids {
        journal.subscribe(id, &patterns).await?;
    }
    let mut appends = tokio::task::JoinSet::new();
    for i in 0..DISPATCH_EVENTS {
        let journal = journal.clone();
        appends.spawn(async move { journal.append(bench_event(i)).await });
        if appends.len() >= 256
            && let Some(done) = appends.join_next().await
        {
            done??;
        }
    }
    while let Some(done) = appends.join_next().await {
        done??;
    }
    Ok(journal
        .pending(0, &patterns, usize::MAX)?
        .events
        .last()
        .map(|e| e.seq)
        .unwrap_or(0))
}

/// Events per second delivered in all to round `round`'s subscribers of `journal` (filled
/// by [`fill_journal`] up to `head`), WASM plugins or native Rust subscribers doing the
/// same work, all through the journal's dispatcher.
async fn dispatch_rate(
    scratch: &Path,
    component: &Path,
    (round, subscribers, takers): (usize, usize, Takers),
    journal: Arc<Journal>,
    head: i64,
) -> Result<f64> {
    let dir = scratch.join(format!("dispatch-{subscribers}-{takers:?}-{round}-plugins"));
    std::fs::create_dir_all(&dir)?;
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let patterns = vec!["bench.*".to_string()];
    let ids = round_ids(round, subscribers, takers);
    let plugins: &[String] = if takers == Takers::Native { &[] } else { &ids };
    let churner = takers == Takers::WasmBesideChurner;
    let (host, handles) =
        bench_subscribers(&dir, component, plugins, churner, journal.clone()).await?;
    eprintln!(
        "bench: dispatching {DISPATCH_EVENTS} events to {subscribers} {takers:?} subscriber(s)"
    );
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    if takers == Takers::Native {
        for id in ids.clone() {
            workers.spawn(cairn::journal::dispatch::serve(
                journal.clone(),
                Arc::new(NativeSubscriber(id)),
                patterns.clone(),
                stopping.clone(),
            ));
        }
    } else {
        for handle in handles {
            workers.spawn(cairn::journal::dispatch::serve(
                journal.clone(),
                Arc::new(cairn::journal::plugin_subscriber::PluginSubscriber::new(
                    handle,
                )),
                patterns.clone(),
                stopping.clone(),
            ));
        }
    }
    loop {
        let done = ids
            .iter()
            .all(|id| journal.cursor(id).ok().flatten().unwrap_or(0) >= head);
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let _ = stop.send(true);
    while workers.join_next().await.is_some() {}
    host.stop().await;
    Ok((DISPATCH_EVENTS * ids.len()) as f64 / elapsed)
}

/// Memory rows: recall latency (BM25 only and hybrid) at 10k, 100k and 1M entries, episode
/// save latency alone and while recall runs, and the size of memory.db at 1M.
fn memory_rows(rows: &mut Vec<Row>, scratch: &Path, largest: usize) -> Result<()> {
    use cairn::memory::ExportRecord;
    use cairn::memory::{LocalMemory, MemoryConfig, MemoryKind, NewMemory, RecallQuery, Scope};
    use cairn_tests::memory_dataset;

    background_embedding_row(rows, scratch)?;
    let dir = scratch.join("memory");
    std::fs::create_dir_all(&dir)?;
    let mut config = MemoryConfig::default();
    config.embeddings.batch_size = 1024;
    // Every text's vector stays cached, for the PostgreSQL rows to reuse.
    config.embeddings.cache_entries = config
        .embeddings
        .cache_entries
        .max(2 * POSTGRES_RECALL_SIZE);
    let sqlite = Arc::new(cairn::store::memory::SqliteMemory::open(&dir)?);
    let memory = LocalMemory::over(&dir, config.clone(), sqlite.clone())?;
    let postgres = cairn::store::pg::cluster::TestCluster::shared();
    let mut chunks = Vec::new();
    let now = cairn::store::now_ms();
    // About 52 memories per generated user (episodes, replies, facts).
    let dataset = memory_dataset::generate(largest / 50 + 1, 99, now);
    let mut planned = dataset.memories.iter();
    let mut loaded = 0usize;
    let mut users = Vec::new();
    for size in [10_000usize, 100_000, 1_000_000]
        .into_iter()
        .filter(|s| *s <= largest)
    {
        let started = Instant::now();
        while loaded < size {
            let mut chunk = String::new();
            for item in planned.by_ref().take((size - loaded).min(50_000)) {
                let entry =
                    cairn::memory::record(&item.memory, format!("mem_bench{loaded:010}"), now);
                if let Some(user) = &entry.scope.user_id
                    && users.len() < 200
                    && !users.contains(user)
                {
                    users.push(user.clone());
                }
                chunk.push_str(&serde_json::to_string(&ExportRecord::Entry(Box::new(
                    entry,
                )))?);
                chunk.push('\n');
                loaded += 1;
            }
            anyhow::ensure!(
                !chunk.is_empty(),
                "the dataset ran out at {loaded} memories"
            );
            memory.import(&chunk)?;
            if size <= POSTGRES_RECALL_SIZE {
                chunks.push(chunk);
            }
        }
        let load_s = started.elapsed().as_secs_f64();
        let started = Instant::now();
        memory.embed_pending(|_| {})?;
        let embed_s = started.elapsed().as_secs_f64();
        eprintln!("bench: memory at {size}: loaded in {load_s:.1} s, embedded in {embed_s:.1} s");
        let questions: Vec<&memory_dataset::Question> = dataset
            .questions
            .iter()
            .filter(|q| users.contains(&q.user) && !q.paraphrase)
            .take(if size >= 1_000_000 { 100 } else { 200 })
            .collect();
        let on_postgres = match postgres {
            Some(cluster) if size == POSTGRES_RECALL_SIZE => Some(on_postgres::memory_on_postgres(
                cluster,
                &scratch.join("memory-pg"),
                config.clone(),
                sqlite.as_ref(),
                &chunks,
            )?),
            _ => None,
        };
        for (label, lexical) in [("BM25 only", true), ("hybrid", false)] {
            let query = |q: &memory_dataset::Question| RecallQuery {
                text: q.text.clone(),
                scope: Scope {
                    agent_id: Some("main".into()),
                    user_id: Some(q.user.clone()),
                    session_id: None,
                },
                limit: 5,
                lexical_only: lexical,
                ..RecallQuery::default()
            };
            let queries: Vec<RecallQuery> = questions.iter().map(|q| query(q)).collect();
            let samples = recall_times(&memory, &queries)?;
            if let Some(on_postgres) = &on_postgres {
                let shared = recall_times(on_postgres, &queries)?;
                rows.push(Row {
                    name: format!(
                        "recall top-5 at {}k entries on PostgreSQL, {label}",
                        size / 1000
                    ),
                    value: percentile(&shared, 0.5),
                    unit: "ms",
                    note: format!(
                        "p50; p99 {:.1} ms; the same entries, vectors and questions; p50 ratio to SQLite in this run {:.2}",
                        percentile(&shared, 0.99),
                        percentile(&shared, 0.5) / percentile(&samples, 0.5)
                    ),
                });
            }
            rows.push(Row {
                name: format!("recall top-5 at {}k entries, {label}", size / 1000),
                value: percentile(&samples, 0.5),
                unit: "ms",
                note: format!(
                    "p50; p99 {:.1} ms; {} scoped questions{}",
                    percentile(&samples, 0.99),
                    samples.len(),
                    if lexical {
                        String::new()
                    } else {
                        format!(", each embedded by {}", memory.embeddings_in_use().0)
                    }
                ),
            });
        }
    }

    // Episode saves on the hot path, alone and while another thread recalls non-stop.
    let save = |n: usize| -> Result<Vec<f64>> {
        let mut samples = Vec::new();
        for i in 0..n {
            let mut episode = NewMemory::new(
                MemoryKind::Episode,
                format!("bench episode {i}: the build finished and the tests passed"),
            );
            episode.scope = Scope {
                agent_id: Some("main".into()),
                user_id: Some("bench-user".into()),
                session_id: Some("bench:s".into()),
            };
            let started = Instant::now();
            memory.store_blocking(episode)?;
            samples.push(started.elapsed().as_secs_f64() * 1e3);
            // A steady trickle (about 200 saves/s), as turns produce them.
            std::thread::sleep(Duration::from_millis(5));
        }
        samples.sort_by(|a, b| a.total_cmp(b));
        Ok(samples)
    };
    let alone = save(500)?;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let recalls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let busy = std::thread::scope(|scope| -> Result<Vec<f64>> {
        let (reader_stop, recalls, memory, users) =
            (stop.clone(), recalls.clone(), &memory, &users);
        scope.spawn(move || {
            let mut i = 0;
            while !reader_stop.load(std::sync::atomic::Ordering::Relaxed) {
                let query = RecallQuery {
                    text: "which city do I live in and what car do I drive".into(),
                    scope: Scope {
                        user_id: Some(users[i % users.len()].clone()),
                        ..Scope::default()
                    },
                    limit: 5,
                    ..RecallQuery::default()
                };
                let _ = black_box(memory.recall(&query));
                recalls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                i += 1;
            }
        });
        let samples = save(500);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        samples
    })?;
    rows.push(Row {
        name: "episode save (hot path), alone".into(),
        value: percentile(&alone, 0.99),
        unit: "ms",
        note: format!(
            "p99; p50 {:.2} ms; durable (group commit), one save per 5 ms",
            percentile(&alone, 0.5)
        ),
    });
    rows.push(Row {
        name: "episode save while recall runs".into(),
        value: percentile(&busy, 0.99),
        unit: "ms",
        note: format!(
            "p99; p50 {:.2} ms; {} recalls ran meanwhile at {}k entries",
            percentile(&busy, 0.5),
            recalls.load(std::sync::atomic::Ordering::Relaxed),
            loaded / 1000
        ),
    });
    let stats = memory.stats()?;
    rows.push(Row {
        name: format!("memory.db size at {}k entries", loaded / 1000),
        value: stats.database_bytes as f64 / 1_048_576.0,
        unit: "MiB",
        note: format!(
            "with FTS5 and {} vectors of {} (db + WAL)",
            stats.embedded,
            memory.embeddings_in_use().0
        ),
    });
    memory.stop_embedder();
    Ok(())
}
