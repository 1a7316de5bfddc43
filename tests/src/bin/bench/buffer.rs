//! Buffer and router rows: durable ingest next to a raw rusqlite insert loop, and routing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use cairn::buffer::{Buffer, BufferConfig, NewMessage};
use cairn::router::{Router, RouterConfig};

use super::{Row, acks, median};

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
pub fn buffer_rows(rows: &mut Vec<Row>, scratch: &Path) -> Result<()> {
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
pub fn route_rows(rows: &mut Vec<Row>, scratch: &Path) -> Result<()> {
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
