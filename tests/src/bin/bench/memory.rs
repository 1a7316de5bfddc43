//! Memory rows: background embedding, recall latency at 10k/100k/1M entries (BM25 only and
//! hybrid, SQLite and PostgreSQL; hybrid with and without the update probes), the vector
//! scan of one user's full window, episode saves beside recall, and memory.db's size.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::{Row, on_postgres, percentile};

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
pub fn embedding_provider() -> &'static str {
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

/// Memory rows: recall latency (BM25 only and hybrid) at 10k, 100k and 1M entries, episode
/// save latency alone and while recall runs, and the size of memory.db at 1M.
pub fn memory_rows(rows: &mut Vec<Row>, scratch: &Path, largest: usize) -> Result<()> {
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
            if !lexical && size <= POSTGRES_RECALL_SIZE {
                let without = without_update_probes(&dir, &config, &sqlite, &queries)?;
                rows.push(Row {
                    name: format!(
                        "recall top-5 at {}k entries, hybrid, no update probes",
                        size / 1000
                    ),
                    value: percentile(&without, 0.5),
                    unit: "ms",
                    note: format!(
                        "p50; p99 {:.1} ms; the row above (`successor_probes` 5) takes {:.2}x this at p50",
                        percentile(&without, 0.99),
                        percentile(&samples, 0.5) / percentile(&without, 0.5)
                    ),
                });
            }
        }
    }
    index_scan_rows(rows);

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

/// `queries`' recall times on the same store with `memory.recall.successor_probes` 0, beside
/// the shipped setting: what looking for updates among the best candidates' nearest memories
/// costs.
fn without_update_probes(
    dir: &Path,
    config: &cairn::memory::MemoryConfig,
    store: &Arc<cairn::store::memory::SqliteMemory>,
    queries: &[cairn::memory::RecallQuery],
) -> Result<Vec<f64>> {
    let mut plain = config.clone();
    plain.recall.successor_probes = 0;
    let without = cairn::memory::LocalMemory::over(dir, plain, store.clone())?;
    let samples = recall_times(&without, queries);
    without.stop_embedder();
    samples
}

/// The cost of looking for updates among the best candidates' nearest memories for a user
/// with a full window of their own (the recall scan limit, 50,000 vectors of 384
/// dimensions, random): the query's own scan, the five probes in one pass, and the five as
/// five passes, side by side.
fn index_scan_rows(rows: &mut Vec<Row>) {
    use cairn::memory::Scope;
    use cairn::memory::embed::{ScanFilter, VectorIndex};
    use cairn_tests::memory_dataset::Rng;

    const VECTORS: usize = 50_000;
    const DIMS: usize = 384;
    const ROUNDS: usize = 30;
    let mut rng = Rng::new(11);
    let mut random_vector = || -> Vec<f32> {
        let raw: Vec<f32> = (0..DIMS)
            .map(|_| (rng.next_u64() % 2_000) as f32 / 1_000.0 - 1.0)
            .collect();
        let norm = raw
            .iter()
            .map(|x| x * x)
            .sum::<f32>()
            .sqrt()
            .max(f32::EPSILON);
        raw.into_iter().map(|x| x / norm).collect()
    };
    let scope = Scope {
        user_id: Some("heavy-user".into()),
        ..Scope::default()
    };
    let resident_before = resident_mib();
    let index = VectorIndex::new(VECTORS);
    for seq in 0..VECTORS as i64 {
        index.upsert(seq, &scope, &random_vector());
    }
    let held_mib = resident_mib() - resident_before;
    let filter = ScanFilter {
        scope: &scope,
        exclude_session: None,
    };
    let probes: Vec<Vec<f32>> = (0..5).map(|_| random_vector()).collect();
    let probe_refs: Vec<&[f32]> = probes.iter().map(Vec::as_slice).collect();
    let (mut one, mut together, mut apart) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let started = Instant::now();
        black_box(index.nearest(&probes[0], &filter, 50));
        one.push(started.elapsed().as_secs_f64() * 1e3);
        let started = Instant::now();
        black_box(index.nearest_each(&probe_refs, &filter, 21));
        together.push(started.elapsed().as_secs_f64() * 1e3);
        let started = Instant::now();
        for probe in &probe_refs {
            black_box(index.nearest(probe, &filter, 21));
        }
        apart.push(started.elapsed().as_secs_f64() * 1e3);
    }
    for samples in [&mut one, &mut together, &mut apart] {
        samples.sort_by(|a, b| a.total_cmp(b));
    }
    let base = percentile(&one, 0.5);
    rows.push(Row {
        name: "one user's 50k vectors in the index, in RAM".into(),
        value: held_mib,
        unit: "MiB",
        note: format!(
            "the bench's resident memory grew so while they went in (int8; as f32 they are {:.0} MiB of numbers)",
            (VECTORS * DIMS * 4) as f64 / (1 << 20) as f64
        ),
    });
    rows.push(Row {
        name: "vector scan of one user's 50k vectors, the query's".into(),
        value: base,
        unit: "ms",
        note: format!("p50 of {ROUNDS}; 384 dims, random"),
    });
    rows.push(Row {
        name: "the same, 5 update probes in one pass".into(),
        value: percentile(&together, 0.5),
        unit: "ms",
        note: format!(
            "p50; {:.2}x the query's scan; as 5 passes {:.1} ms ({:.2}x)",
            percentile(&together, 0.5) / base,
            percentile(&apart, 0.5),
            percentile(&apart, 0.5) / base
        ),
    });
}

/// This process's resident memory (`VmRSS`), in MiB.
fn resident_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}
