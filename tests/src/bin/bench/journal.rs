//! Journal rows: durable append, dispatch to WASM subscribers next to native ones (alternating
//! rounds), beside a churner, the empty call through a plugin's handle, and emit → on-event.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use cairn::config::KvConfig;
use cairn::journal::{Journal, JournalConfig, NewEvent};
use cairn::plugin::capabilities::HostServices;
use cairn::plugin::kv::PluginKv;
use cairn::store::host::SqliteHost;
use cairn_tests::{guests_dir, workspace_root};

use super::{Row, acks, emit, fnv1a, median, percentile};

pub fn bench_event(i: usize) -> NewEvent {
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
    let wasm = side_by_side_row(rows, scratch, component, subscribers).await?;
    churned_row(rows, scratch, component, subscribers, wasm).await?;
    if let Some(cluster) = postgres {
        postgres_row(rows, scratch, component, subscribers, cluster, wasm).await?;
    }
    Ok(())
}

/// WASM subscribers next to native ones through the same dispatcher; returns the WASM rate.
async fn side_by_side_row(
    rows: &mut Vec<Row>,
    scratch: &Path,
    component: &Path,
    subscribers: usize,
) -> Result<f64> {
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
    Ok(wasm)
}

/// WASM subscribers beside a plugin that traps on every event; compared with `wasm`, the
/// rate without it.
async fn churned_row(
    rows: &mut Vec<Row>,
    scratch: &Path,
    component: &Path,
    subscribers: usize,
    wasm: f64,
) -> Result<()> {
    // The churner's events are dead-lettered at its first failure.
    let dir = scratch.join(format!("dispatch-{subscribers}-churned"));
    std::fs::create_dir_all(&dir)?;
    let config = JournalConfig {
        max_attempts: 1,
        ..JournalConfig::default()
    };
    let journal = Arc::new(Journal::open(&dir, config)?);
    let takers = Takers::WasmBesideChurner;
    let churned = one_round(
        scratch,
        component,
        journal,
        (subscribers, takers),
        Some("churner"),
    )
    .await?;
    rows.push(Row {
        name: format!("dispatch to {subscribers} WASM subscriber(s) beside a plugin trapping on every event"),
        value: churned,
        unit: "ev/s",
        note: format!(
            "the churner restarted after each trap (backoff 1 ms); ratio to the row without it {:.2}",
            churned / wasm
        ),
    });
    Ok(())
}

/// WASM subscribers with the journal on PostgreSQL; compared with `wasm`, the rate on SQLite.
async fn postgres_row(
    rows: &mut Vec<Row>,
    scratch: &Path,
    component: &Path,
    subscribers: usize,
    cluster: &cairn::store::pg::cluster::TestCluster,
    wasm: f64,
) -> Result<()> {
    let store = cairn::store::pg::journal::PgJournal::connect(
        &cluster.fresh_database(),
        cairn::store::pg::journal::DEFAULT_SUBSCRIPTION_LEASE,
    )?;
    let journal = Arc::new(Journal::over(Box::new(store), JournalConfig::default()));
    let on_postgres = one_round(
        scratch,
        component,
        journal,
        (subscribers, Takers::Wasm),
        None,
    )
    .await?;
    rows.push(Row {
        name: format!("dispatch to {subscribers} WASM subscriber(s) on PostgreSQL"),
        value: on_postgres,
        unit: "ev/s",
        note: format!("ratio to SQLite in this run {:.2}", on_postgres / wasm),
    });
    Ok(())
}

/// One round of `takers` on `journal`, filled for them and for the `extra` subscriber; its
/// rate.
async fn one_round(
    scratch: &Path,
    component: &Path,
    journal: Arc<Journal>,
    (subscribers, takers): (usize, Takers),
    extra: Option<&str>,
) -> Result<f64> {
    let mut ids = round_ids(0, subscribers, takers);
    ids.extend(extra.map(str::to_string));
    let head = fill_journal(&journal, &ids).await?;
    eprintln!("bench: journal dispatch, {subscribers} {takers:?}, one round");
    dispatch_rate(scratch, component, (0, subscribers, takers), journal, head).await
}

/// The journal section's SQLite dispatch rows alone (`cargo xtask bench dispatch`), for
/// working on the dispatcher without the append, PostgreSQL and latency rows.
pub fn only_dispatch_rows(rows: &mut Vec<Row>, scratch: &Path, component: &Path) -> Result<()> {
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
pub fn journal_rows(rows: &mut Vec<Row>, scratch: &Path, component: &Path) -> Result<()> {
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
pub async fn bench_subscribers(
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
