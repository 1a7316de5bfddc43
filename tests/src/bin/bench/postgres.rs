//! The PostgreSQL rows that need more than a store swapped in: memory at 100k entries on
//! the shared database (the same entries and vectors as the SQLite rows beside it), and
//! turns answered per second by 1, 2 and 3 hosts sharing one database, next to one host on
//! SQLite, through the real binary; and how long claiming a turn takes behind a backlog.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use cairn::memory::{LocalMemory, MemoryConfig};
use cairn::store::buffer::BufferStore;
use cairn::store::memory::MemoryStore;
use cairn::store::pg::buffer::{DEFAULT_LEASE, PgBuffer};
use cairn::store::pg::cluster::TestCluster;
use cairn::store::pg::memory::PgMemory;
use cairn_tests::Host;
use cairn_vocab::buffer::BatchStatus;

use super::Row;

/// Memory on a fresh PostgreSQL database holding the entries `chunks` (JSONL export
/// records) hold, with the vectors `sqlite` keeps for their texts.
pub fn memory_on_postgres(
    cluster: &TestCluster,
    dir: &Path,
    config: MemoryConfig,
    sqlite: &dyn MemoryStore,
    chunks: &[String],
) -> Result<Arc<LocalMemory>> {
    let store = Arc::new(PgMemory::connect(&cluster.fresh_database())?);
    let memory = LocalMemory::over(dir, config, store.clone())?;
    for chunk in chunks {
        memory.import(chunk)?;
    }
    copy_vectors(&memory, sqlite, store.as_ref())?;
    Ok(memory)
}

/// Give the PostgreSQL store the vectors SQLite's cache holds for the same texts (equal
/// text, equal vector), so both rows search the same vectors without embedding twice.
fn copy_vectors(memory: &LocalMemory, from: &dyn MemoryStore, to: &dyn MemoryStore) -> Result<()> {
    let Some((provider, model)) = memory.model() else {
        return Ok(());
    };
    let mut after = 0;
    loop {
        let pending = to.unembedded(&provider, &model, after, 2_000)?;
        let Some(last) = pending.last() else {
            return Ok(());
        };
        after = last.seq;
        let hashes: Vec<String> = pending.iter().map(|p| p.content_hash.clone()).collect();
        let cached = from.cached_vectors(&provider, &model, &hashes)?;
        anyhow::ensure!(
            cached.len() == hashes.iter().collect::<BTreeSet<_>>().len(),
            "SQLite's vector cache lacks some texts: raise embeddings.cache_entries"
        );
        let rows = pending
            .iter()
            .map(|p| {
                (
                    p.seq,
                    p.content_hash.clone(),
                    cached[&p.content_hash].clone(),
                )
            })
            .collect();
        to.save_vectors(&provider, &model, rows, usize::MAX)
            .wait()?;
    }
}

/// Deliveries sent in each host-count run.
const DELIVERIES: usize = 400;

/// Turns answered per second by `hosts` hosts on `storage` (`sqlite` for one host on its
/// data dir), each delivery its own conversation, sent as fast as the hosts take them.
fn turns_per_second(scratch: &Path, storage: &str, hosts: usize) -> Result<f64> {
    let plugins = cairn_tests::workspace_root().join("target/plugins");
    let secret = "bench-hosts";
    let env = [
        ("CAIRN_STORAGE", storage),
        ("CAIRN_HTTP_LISTEN", "127.0.0.1:0"),
        ("CAIRN_WEBHOOK_SECRET", secret),
        ("CAIRN_ROUTER_BATCH_WINDOW_MS", "20"),
        ("CAIRN_LOG", "warn,cairn::cli::run=info"),
    ];
    let dirs: Vec<tempfile::TempDir> = (0..hosts)
        .map(|_| tempfile::tempdir_in(scratch))
        .collect::<Result<_, _>>()?;
    let mut running: Vec<Host> = dirs
        .iter()
        .map(|d| Host::start(&plugins, d.path(), &env))
        .collect();
    let ports: Vec<u16> = running.iter_mut().map(Host::webhook_port).collect();
    let client = cairn_tests::http_client();
    let started = Instant::now();
    for i in 0..DELIVERIES {
        let body = serde_json::to_vec(&serde_json::json!({
            "action": "opened",
            "repository": {"full_name": "octo/hosts"},
            "pull_request": {"number": i, "title": "bench"},
            "sender": {"login": "octocat"},
        }))?;
        let signature = cairn_tests::github_signature(secret.as_bytes(), &body);
        let (status, answer) = cairn_tests::post_webhook(
            &client,
            ports[i % ports.len()],
            "pull_request",
            &format!("hosts-{i}"),
            &body,
            Some(&signature),
        )?;
        anyhow::ensure!(status == 202, "delivery refused: {status} {answer}");
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut answered = answered_counter(storage, dirs[0].path())?;
    while answered()? < DELIVERIES {
        anyhow::ensure!(Instant::now() < deadline, "not all answered in 300 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let rate = DELIVERIES as f64 / started.elapsed().as_secs_f64();
    for host in running {
        host.stop();
    }
    Ok(rate)
}

/// Messages in finished main batches, counted on one connection opened once (`sqlite`: the
/// data dir's `buffer.db`).
fn answered_counter(storage: &str, data: &Path) -> Result<Box<dyn FnMut() -> Result<usize>>> {
    if storage == "sqlite" {
        let db = cairn_tests::buffer_db(data);
        return Ok(Box::new(move || {
            let done: i64 = db.query_row(
                "SELECT coalesce(sum(message_count), 0) FROM batches
                  WHERE status IN ('done', 'failed')",
                [],
                |r| r.get(0),
            )?;
            Ok(done as usize)
        }));
    }
    let mut client = postgres::Client::connect(storage, postgres::NoTls)?;
    Ok(Box::new(move || {
        let done: i64 = client
            .query_one(
                "SELECT coalesce(sum(message_count), 0)::BIGINT FROM buffer_batches
                  WHERE status IN ('done', 'failed')",
                &[],
            )?
            .get(0);
        Ok(done as usize)
    }))
}

/// Turns per second with one host on SQLite, then 1, 2 and 3 hosts on one PostgreSQL
/// database (a fresh one each), through the real binary with the offline model.
pub fn hosts_rows(rows: &mut Vec<Row>, scratch: &Path) -> Result<()> {
    let sqlite = turns_per_second(scratch, "sqlite", 1)?;
    rows.push(Row {
        name: "turns answered, 1 host on SQLite".into(),
        value: sqlite,
        unit: "turns/s",
        note: format!("{DELIVERIES} webhook deliveries, each its own conversation, offline model"),
    });
    let Some(cluster) = TestCluster::shared() else {
        return Ok(());
    };
    for hosts in 1..=3 {
        let storage = cluster.fresh_database().redacted().to_string();
        let rate = turns_per_second(scratch, &storage, hosts)?;
        rows.push(Row {
            name: format!("turns answered, {hosts} host(s) on one PostgreSQL database"),
            value: rate,
            unit: "turns/s",
            note: format!(
                "deliveries spread over the hosts; ratio to 1 host on SQLite {:.2}",
                rate / sqlite
            ),
        });
    }
    Ok(())
}

/// Turns claimed (and finished) at each backlog size.
const CLAIMS: usize = 40;

/// Claiming a turn on PostgreSQL behind a backlog of queued main batches (after a burst or
/// an outage), spread over a few conversations (a deep queue in each) or each its own: a
/// claim must find the oldest unfinished batch of a conversation nobody works on.
pub fn claim_rows(rows: &mut Vec<Row>) -> Result<()> {
    let Some(cluster) = TestCluster::shared() else {
        return Ok(());
    };
    for (backlog, conversations) in [(1_000i64, 7i64), (10_000, 7), (10_000, 10_000)] {
        let url = cluster.fresh_database();
        let buffer = PgBuffer::connect(&url, DEFAULT_LEASE)?;
        // The rows a router would write, in bulk: the claim reads only the batches.
        let mut client = url.config().connect(postgres::NoTls)?;
        client.execute(
            "INSERT INTO buffer_batches
                 (channel, conversation, priority, route, message_count, status, created_at)
             SELECT 'bench', 'c' || (i % $1::BIGINT), 100, 'main', 1, 'queued', i
               FROM generate_series(1, $2::BIGINT) AS i",
            &[&conversations, &backlog],
        )?;
        client.execute("ANALYZE buffer_batches", &[])?;
        let mut latencies = Vec::with_capacity(CLAIMS);
        for _ in 0..CLAIMS {
            let started = Instant::now();
            let id = buffer
                .claim_main(None)
                .wait()?
                .ok_or_else(|| anyhow::anyhow!("nothing to claim behind a backlog"))?
                .id;
            latencies.push(started.elapsed().as_secs_f64() * 1e3);
            buffer
                .finish_batch(id, BatchStatus::Done, None, None)
                .wait()?;
        }
        latencies.sort_by(|a, b| a.total_cmp(b));
        rows.push(Row {
            name: format!(
                "claim a turn on PostgreSQL, {backlog} queued in {conversations} conversations"
            ),
            value: latencies[CLAIMS / 2],
            unit: "ms p50",
            note: format!(
                "{CLAIMS} claims, each finished before the next; max {:.1} ms",
                latencies[CLAIMS - 1]
            ),
        });
    }
    Ok(())
}
