//! `cairn run`: the composition root. Opens the stores, starts the plugins in dependency
//! order, runs the router, the agent, the lifecycle and the webhook server until a signal
//! or the terminal's stop request, then stops everything in reverse.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::sync::{Notify, watch};

use super::plugins::{manifest_errors, refuse_unknown_disabled};
use super::{BadInput, lock, storage_unusable};
use crate::agent::Agent;
use crate::buffer::Buffer;
use crate::config::{HostConfig, Storage};
use crate::console;
use crate::journal::dispatch::Subscriber;
use crate::journal::{Journal, dispatch, plugin_subscriber};
use crate::lifecycle::{Lifecycle, StopRequest};
use crate::llm;
use crate::memory::{LocalMemory, MemoryService};
use crate::plugin::capabilities::HostServices;
use crate::plugin::kv::PluginKv;
use crate::plugin::llm_gate::LlmGate;
use crate::plugin::manifest::{Manifest, PluginKind};
use crate::plugin::status::StatusLog;
use crate::plugin::supervisor::PluginHandle;
use crate::plugin::write_gate::WriteGate;
use crate::plugin::{PluginHost, resolve};
use crate::router::Router;
use crate::webhook;
use cairn_vocab::plugin::PluginState;

/// The durable stores and long-lived services of one run.
struct Stores {
    buffer: Arc<Buffer>,
    journal: Arc<Journal>,
    kv: Arc<PluginKv>,
    status: Arc<StatusLog>,
    local_memory: Arc<LocalMemory>,
    memory: Arc<MemoryService>,
    lifecycle: Arc<Lifecycle>,
    llm: Arc<dyn llm::LlmProvider>,
    llm_gate: Arc<LlmGate>,
}

/// Run the host on `plugins_dir` until Ctrl-C, SIGTERM or the terminal's stop request.
pub async fn run_host(config: HostConfig, plugins_dir: &Path) -> Result<()> {
    let mut signals = StopSignals::listen();
    let set = resolve::load_enabled(plugins_dir, &config.plugins.disabled)
        .map_err(|errors| manifest_errors(plugins_dir, &errors))?;
    refuse_unknown_disabled(&config.plugins.disabled, &set, plugins_dir)?;
    if let Some(problem) = config.agent.llm.key_problem() {
        let unset = &config.agent.llm.api_key_env;
        let hint = crate::unread_env::set_variable_like(unset)
            .map(|set| format!(" (did you mean `{set}`, which is set?)"))
            .unwrap_or_default();
        return Err(BadInput(format!("{problem}{hint}")).into());
    }
    let serves_webhooks = channels(&set).find(|m| serves_webhooks(m));
    if let (Some(channel), Some(console)) = (serves_webhooks, config.console.listen) {
        refuse_shared_port(console, config.http.listen, &channel.id)?;
    }
    for id in &config.plugins.disabled {
        tracing::info!(plugin = %id, "disabled by plugins.disabled");
    }
    warn_unread_variables(&config, &set);
    warn_of_short_llm_deadlines(&config, &set);
    // A new data dir is made only once the ports are bound, so a refused start leaves none
    // behind. (One made and then removed could be another host's by then: until 2026-12-02
    // two hosts starting at once on a new data dir, the one refused a taken port removed the
    // dir the other had begun to run on; found by an operator's test.) On a data dir that
    // exists the lock is taken first, so a second host is told another runs there rather
    // than that a port is taken.
    let (_lock, (listener, console)) = if config.data_dir.exists() {
        let lock = take_data_dir(&config.data_dir)?;
        (
            lock,
            prepare_to_serve(&config, &set, serves_webhooks).await?,
        )
    } else {
        let bound = prepare_to_serve(&config, &set, serves_webhooks).await?;
        (take_data_dir(&config.data_dir)?, bound)
    };
    let stores = open_stores(&config, &set, plugins_dir)?;
    let (stop, stopping) = watch::channel(false);
    let registered = register_subscribers(&set, &stores, &stopping).await;
    warn_of_unserved_subscribers(&config, registered);
    let stop_request = Arc::new(StopRequest::default());
    let host = start_plugins(&config, &set, &stores, stop_request.clone()).await?;
    let mut workers = spawn_workers(&config, &set, &stores, &host, &stopping).await?;
    if let Some(listener) = listener {
        let address = listener.local_addr()?;
        tracing::info!("webhook server listening on http://{address}/channels/<id>");
        let http = config.http.clone();
        let handles = channel_handles(&host, &set, true);
        let stopping = stopping.clone();
        workers.spawn(async move { webhook::serve(listener, &http, handles, stopping).await });
    }
    if let Some(listener) = console {
        serve_console(&config, &stores, listener, &mut workers, &stopping)?;
    }
    if set.start_order().is_empty() {
        tracing::warn!(
            "no plugin manifests (*.yaml, *.yml) in {}: no channel brings messages in; is --plugins right?",
            plugins_dir.display()
        );
    }
    tracing::info!(
        data_dir = %config.data_dir.display(),
        plugins = set.start_order().len(),
        "cairn is running; press Ctrl-C to stop"
    );
    let started_at = crate::store::now_ms();
    let piped_reader = piped_input_reader(set.start_order());
    let shutdown = wait_for_shutdown(
        &mut signals,
        &stop_request,
        &stores,
        piped_reader.as_deref(),
    )
    .await;
    tracing::info!("stopping");
    // A plugin in the middle of long background work (the sleeper's phases) asks
    // `lifecycle.interrupted()` as it goes: a stop interrupts it as a message does, so it
    // keeps its place for the next time and the stop need not wait out its deadline.
    stores.lifecycle.interrupt().set(true);
    if let Err(e) = stores.status.begin_stop() {
        tracing::warn!("cannot record that the host is stopping: {e}");
    }
    let _ = stop.send(true);
    let stopping = async {
        drain(workers).await;
        stop_plugins(host).await;
    };
    tokio::select! {
        () = stopping => {}
        () = signals.received() => tracing::warn!(
            "a second stop signal: stopping now (work in flight resumes on the next start)"
        ),
    }
    release_claims(&stores.buffer).await;
    stores.local_memory.stop_embedder();
    record_clean_stop(&stores.status).await?;
    tracing::info!("stopped");
    match shutdown {
        Shutdown::Asked(channel) => unanswered_since(&stores.buffer, &channel, started_at),
        Shutdown::Signalled => Ok(()),
        Shutdown::InputLost(why) => Err(anyhow::anyhow!(
            "{why}, so what was piped into cairn's standard input was not read"
        )),
    }
}

/// How long a stop waits for a database that is away to record it (the last write of a
/// run: what `cairn status` shows as a clean stop).
const CLEAN_STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Record the clean stop, waiting up to [`CLEAN_STOP_WAIT`] for a store that is away for
/// a moment (a database coming back from an outage, its connection not yet made anew).
/// Still away then, the stop is only logged as not recorded: nothing of the run is lost,
/// and the next `cairn status` says the run ended without a clean stop. Until 2026-12-02
/// the stop failed (exit 1) when the connection was not back yet.
async fn record_clean_stop(status: &StatusLog) -> Result<()> {
    let given_up_at = std::time::Instant::now() + CLEAN_STOP_WAIT;
    loop {
        match status.end_run() {
            Ok(()) => return Ok(()),
            Err(e) if e.is_passing() && std::time::Instant::now() < given_up_at => {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Err(e) if e.is_passing() => {
                tracing::warn!("cannot record the clean stop: {e}; the run's work is kept");
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Why the host stops.
enum Shutdown {
    /// Ctrl-C or SIGTERM.
    Signalled,
    /// A channel asked, its input over (the end of piped input).
    Asked(String),
    /// The channel reading piped input is quarantined or failed, so nothing will read the
    /// rest of it, nor ask for the stop at its end: it says why.
    InputLost(String),
}

/// The channel that reads the host's standard input when it is piped (no terminal): the
/// one granted `stdio` (there is at most one), unless its config keeps the host running at
/// the end of input (`stop_at_end_of_input: false`, a host run as a service), where losing
/// it stops nothing either.
fn piped_input_reader(manifests: &[Manifest]) -> Option<String> {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() {
        return None;
    }
    manifests
        .iter()
        .find(|m| m.capabilities.stdio)
        .filter(|m| m.config.get("stop_at_end_of_input") != Some(&serde_json::Value::Bool(false)))
        .map(|m| m.id.clone())
}

/// Return once `reader`'s status says it is quarantined or failed, saying so.
async fn input_lost(status: &StatusLog, reader: &str) -> String {
    loop {
        let lost = status.report().ok().and_then(|report| {
            report.plugins.into_iter().find(|p| {
                p.id == reader && matches!(p.state, PluginState::Quarantined | PluginState::Failed)
            })
        });
        if let Some(plugin) = lost {
            return format!(
                "the `{reader}` channel, which reads standard input, is {} ({})",
                plugin.state.as_str(),
                plugin.last_error.as_deref().unwrap_or("no fault recorded")
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// A run that ended because `channel` said its input was over (a script piping lines into
/// the terminal) fails when some of what it sent was not answered, naming why: the script
/// and the person at the terminal learn it, not only the log.
fn unanswered_since(buffer: &Buffer, channel: &str, started_at: i64) -> Result<()> {
    let failed: Vec<_> = buffer
        .failed(10_000)?
        .into_iter()
        .filter(|work| {
            work.channel == channel && work.finished_at.is_some_and(|at| at >= started_at)
        })
        .collect();
    let Some(first) = failed.first() else {
        return Ok(());
    };
    let messages: i64 = failed.iter().map(|work| work.messages).sum();
    Err(anyhow::anyhow!(
        "{messages} message(s) sent on {channel} were not answered: {}; see `cairn buffer failed`, \
         and `cairn buffer retry` once it is fixed",
        first.error.as_deref().unwrap_or("no reason recorded")
    ))
}

/// Sample the stores for the status console and serve it on `listener` until `stopping`.
fn serve_console(
    config: &HostConfig,
    stores: &Stores,
    listener: tokio::net::TcpListener,
    workers: &mut tokio::task::JoinSet<()>,
    stopping: &watch::Receiver<bool>,
) -> Result<()> {
    let storage = config.storage().map_err(storage_unusable)?;
    let sources = console::Sources {
        buffer: stores.buffer.clone(),
        journal: storage
            .journal_operator(&config.data_dir)
            .map_err(storage_unusable)?,
        status: stores.status.clone(),
        memory: stores.local_memory.clone(),
        data_dir: config.data_dir.clone(),
        storage: match storage {
            Storage::Sqlite => "sqlite",
            Storage::Postgres(_) => "postgres",
        },
    };
    let sampler = console::Sampler::new(sources, config.console.history);
    let (latest, snapshots) = watch::channel(Arc::new(console::Snapshot::default()));
    let address = listener.local_addr()?;
    tracing::info!("status console on http://{address}/ (metrics at /metrics)");
    workers.spawn(sampler.run(config.console.sample_period(), latest, stopping.clone()));
    workers.spawn(console::serve(
        listener,
        config.console.token.clone(),
        snapshots,
        stopping.clone(),
    ));
    Ok(())
}

/// The channel manifests of a plugin set, in start order.
fn channels(set: &resolve::PluginSet) -> impl Iterator<Item = &Manifest> {
    set.start_order()
        .iter()
        .filter(|m| m.kind == PluginKind::Channel)
}

/// Refuse a console set to listen where the webhook server does (for `channel`), which
/// would otherwise fail at bind time as a port "already in use" by the host itself.
fn refuse_shared_port(console: SocketAddr, http: SocketAddr, channel: &str) -> Result<()> {
    let overlap =
        console.ip() == http.ip() || console.ip().is_unspecified() || http.ip().is_unspecified();
    if console.port() != 0 && console.port() == http.port() && overlap {
        return Err(BadInput(format!(
            "console.listen {console} is where the webhook server listens (http.listen {http}, for channel `{channel}`): expected another port"
        ))
        .into());
    }
    Ok(())
}

/// Whether a channel asked for a webhook path.
fn serves_webhooks(manifest: &Manifest) -> bool {
    manifest.channel.as_ref().is_some_and(|c| c.webhook)
}

/// Open every store of the data dir and record this run in host.db.
fn open_stores(
    config: &HostConfig,
    set: &resolve::PluginSet,
    plugins_dir: &Path,
) -> Result<Stores> {
    let storage = config.storage().map_err(storage_unusable)?;
    let data_dir = &config.data_dir;
    storage.verify(data_dir).map_err(storage_unusable)?;
    let buffer = open_buffer(config, &storage, set)?;
    let memory_db = storage.memory(data_dir).map_err(storage_unusable)?;
    let host_db = storage.host(data_dir).map_err(storage_unusable)?;
    let kv = Arc::new(PluginKv::new(host_db.kv, config.kv.clone()));
    let status = Arc::new(StatusLog::new(host_db.status.clone()));
    let journal_store = storage
        .journal(data_dir, &config.journal)
        .map_err(storage_unusable)?;
    let journal = Arc::new(Journal::over(journal_store, config.journal.clone()));
    let local_memory = LocalMemory::over(data_dir, config.memory.clone(), memory_db.entries)?;
    let memory = Arc::new(MemoryService::new(
        local_memory.clone(),
        memory_db.sessions.clone(),
    ));
    let lifecycle = Arc::new(Lifecycle::new(
        config.lifecycle.clone(),
        memory_db.sessions,
        host_db.lifecycle,
        buffer.clone(),
        journal.clone(),
    ));
    let llm = llm_provider(config, &storage)?;
    let llm_gate = Arc::new(LlmGate::new(llm.clone(), host_db.status));
    // The run is recorded once every store opened: a start refused by one (a schema too
    // new on a shared database) leaves the last run's record as it was. Recorded absolute:
    // `cairn status` and the memory commands read it from anywhere.
    let plugins_dir =
        std::path::absolute(plugins_dir).unwrap_or_else(|_| plugins_dir.to_path_buf());
    status.begin_run(&plugins_dir)?;
    Ok(Stores {
        buffer,
        journal,
        kv,
        status,
        local_memory,
        memory,
        lifecycle,
        llm,
        llm_gate,
    })
}

/// The configured LLM provider, behind the response cache (`<data>/cache.db`, or the
/// shared database's) when `agent.llm.cache.enabled`.
fn llm_provider(config: &HostConfig, storage: &Storage) -> Result<Arc<dyn llm::LlmProvider>> {
    let provider = llm::provider(&config.agent.llm);
    let key = match config.agent.llm.api_key_env.as_str() {
        "" => "none".to_string(),
        variable => format!("from ${variable}"),
    };
    tracing::info!(model = provider.model(), key = %key, "LLM provider: {}", provider.name());
    let cache = &config.agent.llm.cache;
    if !cache.enabled {
        return Ok(Arc::from(provider));
    }
    let store = storage.cache(&config.data_dir).map_err(storage_unusable)?;
    Ok(Arc::new(llm::cache::CachingProvider::new(
        provider, store, cache,
    )))
}

/// Open the buffer and adopt the channels' manifest priorities.
fn open_buffer(
    config: &HostConfig,
    storage: &Storage,
    set: &resolve::PluginSet,
) -> Result<Arc<Buffer>> {
    let store = storage
        .buffer(&config.data_dir, &config.buffer)
        .map_err(storage_unusable)?;
    let buffer = Arc::new(Buffer::over(store, config.buffer.clone())?);
    let run: Vec<&str> = channels(set).map(|m| m.id.as_str()).collect();
    for named in config.buffer.channel_priority.keys() {
        if !run.contains(&named.as_str()) {
            tracing::warn!(
                "buffer.channel_priority names `{named}`, which is no channel this host runs \
                 (its channels: {}): a typo?",
                run.join(", ")
            );
        }
    }
    // Each channel run: its `buffer.channel_priority`, else its manifest's, else none.
    let priorities = channels(set)
        .map(|m| {
            let declared = m.channel.as_ref().and_then(|c| c.priority);
            let configured = config.buffer.channel_priority.get(&m.id).copied();
            (m.id.clone(), configured.or(declared))
        })
        .collect();
    let reprioritised = buffer.set_channel_priorities(priorities)?;
    if reprioritised > 0 {
        tracing::info!(
            messages = reprioritised,
            "unrouted messages took their channel's priority (buffer.channel_priority, else \
             the manifest's, else buffer.default_priority)"
        );
    }
    Ok(buffer)
}

/// Start the plugins in dependency order with the host's services behind their imports.
async fn start_plugins(
    config: &HostConfig,
    set: &resolve::PluginSet,
    stores: &Stores,
    stop_request: Arc<StopRequest>,
) -> Result<PluginHost> {
    let services = Arc::new(HostServices {
        kv: stores.kv.clone(),
        inbox: Some(stores.buffer.clone()),
        events: Some(stores.journal.clone()),
        interrupt: Some(stores.lifecycle.interrupt()),
        stop: Some(stop_request),
        memory: Some(stores.memory.clone()),
        llm: Some(stores.llm_gate.clone()),
        memory_writes: Arc::new(WriteGate::new(
            config.memory.autonomy,
            config.memory.plugin_writes_per_minute,
        )),
    });
    let host =
        PluginHost::start(set, &config.plugin_host(), services, stores.status.clone()).await?;
    if let Some(backend) = stores.memory.backend_plugin() {
        tracing::info!(plugin = backend, "memory is served by a backend plugin");
    }
    let (embeddings, warning) = stores.local_memory.embeddings_in_use();
    tracing::info!("memory embeddings: {embeddings}");
    if let Some(warning) = warning {
        tracing::warn!("memory embeddings: {warning}");
    }
    stores.local_memory.start_embedder();
    Ok(host)
}

/// Handles of the running channels (only those serving webhooks, when asked), by id.
fn channel_handles(
    host: &PluginHost,
    set: &resolve::PluginSet,
    webhooks_only: bool,
) -> BTreeMap<String, PluginHandle> {
    channels(set)
        .filter(|m| !webhooks_only || serves_webhooks(m))
        .filter_map(|m| host.handle(&m.id).map(|h| (m.id.clone(), h.clone())))
        .collect()
}

/// Register the journal's subscribers — the lifecycle and every plugin that subscribes —
/// before the plugins start and before any work that journals. A subscriber's first cursor
/// is the journal's end when it registers, so an event journaled before (by a plugin's
/// `init`, a first turn, or another host on a shared journal while this one's registration
/// waited) would otherwise never reach it.
/// The ids registered.
async fn register_subscribers(
    set: &resolve::PluginSet,
    stores: &Stores,
    stopping: &watch::Receiver<bool>,
) -> Vec<String> {
    let plugins = set
        .start_order()
        .iter()
        .filter(|m| !m.events.subscribes.is_empty())
        .map(|m| (m.id.clone(), m.events.subscribes.clone()));
    let lifecycle = (
        stores.lifecycle.id().to_string(),
        Lifecycle::subscriptions(),
    );
    let mut stop = stopping.clone();
    let mut registered = Vec::new();
    for (id, patterns) in std::iter::once(lifecycle).chain(plugins) {
        dispatch::subscribe(&stores.journal, &id, &patterns, &mut stop).await;
        registered.push(id);
    }
    registered
}

/// Warn of the journal's subscribers this host did not register: a plugin removed from the
/// plugins dir or disabled. Events wait for them, and retention keeps the journal from
/// their cursor on. Read off the start's path (counting what waits reads the journal).
fn warn_of_unserved_subscribers(config: &HostConfig, registered: Vec<String>) {
    let (storage, data_dir) = (config.storage(), config.data_dir.clone());
    tokio::task::spawn_blocking(move || {
        let lags = storage
            .map_err(|e| e.to_string())
            .and_then(|storage| {
                storage
                    .journal_operator(&data_dir)
                    .map_err(|e| e.to_string())
            })
            .and_then(|operator| match operator {
                Some(operator) => operator.subscriber_lags().map_err(|e| e.to_string()),
                None => Ok(Vec::new()),
            });
        let lags = match lags {
            Ok(lags) => lags,
            Err(e) => return tracing::warn!("cannot list the journal's subscribers: {e}"),
        };
        for lag in lags.iter().filter(|lag| !registered.contains(&lag.id)) {
            let dead_letters = match lag.dead_letters {
                0 => String::new(),
                n => format!(" (and the events of its {n} dead letters)"),
            };
            tracing::warn!(
                subscriber = %lag.id,
                waiting = lag.lag,
                "journal subscriber `{}` belongs to no plugin this host runs: its events wait \
                 for it, and the journal is kept from #{} on{dead_letters}; if the plugin is \
                 gone for good, `cairn journal unsubscribe --subscriber {}` forgets it",
                lag.id,
                lag.cursor + 1,
                lag.id
            );
        }
    });
}

/// Resume interrupted work and start the router, the agent, the lifecycle, retention,
/// hygiene, the scheduler and one journal dispatcher per subscribing plugin.
async fn spawn_workers(
    config: &HostConfig,
    set: &resolve::PluginSet,
    stores: &Stores,
    host: &PluginHost,
    stopping: &watch::Receiver<bool>,
) -> Result<tokio::task::JoinSet<()>> {
    let (requeued_batches, requeued_tasks) = stores.buffer.requeue_interrupted().await?;
    if requeued_batches + requeued_tasks > 0 {
        tracing::info!(
            batches = requeued_batches,
            tasks = requeued_tasks,
            "resuming work a host left running when it ended without a clean stop"
        );
    }
    let routed = Arc::new(Notify::new());
    let router = Router::new(stores.buffer.clone(), config.router.clone(), routed.clone())?;
    let agent = Arc::new(
        Agent::new(
            stores.buffer.clone(),
            Some(stores.journal.clone()),
            Some(stores.memory.clone()),
            stores.llm.clone(),
            channel_handles(host, set, false),
            config.agent.clone(),
        )
        .with_lifecycle(stores.lifecycle.clone()),
    );
    let mut workers = tokio::task::JoinSet::new();
    workers.spawn(router.run(stopping.clone()));
    workers.spawn(agent.clone().run_main(routed.clone(), stopping.clone()));
    workers.spawn(agent.run_tasks(routed, stopping.clone()));
    workers.spawn(stores.buffer.clone().run_retention(stopping.clone()));
    workers.spawn(stores.journal.clone().run_retention(stopping.clone()));
    workers.spawn(dispatch::serve(
        stores.journal.clone(),
        stores.lifecycle.clone(),
        Lifecycle::subscriptions(),
        stopping.clone(),
    ));
    workers.spawn(stores.lifecycle.clone().run(stopping.clone()));
    workers.spawn(run_memory_hygiene(
        stores.local_memory.clone(),
        stopping.clone(),
    ));
    let schedules = set
        .start_order()
        .iter()
        .flat_map(|m| m.schedules())
        .collect();
    workers.spawn(
        stores
            .lifecycle
            .clone()
            .run_scheduler(schedules, stopping.clone()),
    );
    for manifest in set.start_order() {
        if let Some(handle) = host.handle(&manifest.id)
            && !manifest.events.subscribes.is_empty()
        {
            workers.spawn(dispatch::serve(
                stores.journal.clone(),
                Arc::new(plugin_subscriber::PluginSubscriber::new(handle.clone())),
                manifest.events.subscribes.clone(),
                stopping.clone(),
            ));
        }
    }
    Ok(workers)
}

/// Wait for the workers to finish what they are doing, up to the shutdown deadline.
async fn drain(mut workers: tokio::task::JoinSet<()>) {
    let drained = tokio::time::timeout(SHUTDOWN_DEADLINE, async {
        while workers.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            "work still running after {}s; stopping anyway (it resumes on the next start)",
            SHUTDOWN_DEADLINE.as_secs()
        );
    }
}

/// Make the data dir if it is missing and take its lock for the host's life.
fn take_data_dir(data_dir: &Path) -> Result<lock::DataDirLock> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create data dir {}", data_dir.display()))?;
    lock::DataDirLock::acquire(data_dir)
}

/// Check the memory backend and bind the webhook's and the console's ports (the webhook's
/// only when `webhooks` names a channel that serves them). A taken port is the operator's
/// to change: said once, exit 2.
async fn prepare_to_serve(
    config: &HostConfig,
    set: &resolve::PluginSet,
    webhooks: Option<&Manifest>,
) -> Result<(
    Option<tokio::net::TcpListener>,
    Option<tokio::net::TcpListener>,
)> {
    check_memory_backend(config, set)?;
    let listener = match webhooks {
        Some(_) => Some(
            webhook::bind(&config.http)
                .await
                .map_err(|e| BadInput(format!("{e}: expected a free port")))?,
        ),
        None => None,
    };
    let console = match config.console.listen {
        Some(address) => Some(
            console::bind(address)
                .await
                .map_err(|e| BadInput(format!("{e}: expected a free port")))?,
        ),
        None => None,
    };
    Ok((listener, console))
}

/// Warn about each plugin granted the model whose call deadline (`limits.timeout_ms`) is
/// shorter than one completion may take with `agent.llm`'s timeout and retries: a slow
/// provider would fault it mid-call and dead-letter its event.
fn warn_of_short_llm_deadlines(config: &HostConfig, set: &resolve::PluginSet) {
    let longest = config.agent.llm.longest_call_ms();
    for manifest in set.start_order() {
        if manifest.capabilities.llm && manifest.limits.timeout_ms < longest {
            tracing::warn!(
                plugin = %manifest.id,
                "one completion may take {} s (agent.llm.timeout_ms × {} attempts, and the \
                 backoffs between), longer than the plugin's limits.timeout_ms of {} s: a slow \
                 provider faults its call; raise its limits.timeout_ms or lower agent.llm's",
                longest / 1000,
                config.agent.llm.max_retries + 1,
                manifest.limits.timeout_ms / 1000
            );
        }
    }
}

/// Warn about each `CAIRN_…` variable nothing reads (a mistyped setting, most likely).
fn warn_unread_variables(config: &HostConfig, set: &resolve::PluginSet) {
    let granted: Vec<String> = set
        .start_order()
        .iter()
        .flat_map(|manifest| manifest.capabilities.env.iter().cloned())
        .collect();
    let disabled_grants: Vec<(String, String)> = set
        .disabled()
        .iter()
        .flat_map(|manifest| {
            let plugin = &manifest.id;
            let variables = manifest.capabilities.env.iter();
            variables.map(move |variable| (variable.clone(), plugin.clone()))
        })
        .collect();
    let set_names = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
    let unread = crate::unread_env::unread_variables(config, set_names, &granted, &disabled_grants);
    for unread in unread {
        tracing::warn!("{unread}");
    }
}

/// Queue again the batches and tasks the stop left unfinished (a turn waiting out a
/// provider outage, say), so that another host on the same database takes them at once
/// rather than when this host's claim lapses; on SQLite the next start finds them queued.
async fn release_claims(buffer: &Buffer) {
    match tokio::time::timeout(CLAIM_RELEASE_DEADLINE, buffer.requeue_interrupted()).await {
        Ok(Ok((0, 0))) => {}
        Ok(Ok((batches, tasks))) => tracing::info!(
            batches,
            tasks,
            "work the stop left unfinished is queued for the next host"
        ),
        Ok(Err(e)) => tracing::warn!(
            "cannot queue the unfinished work again (it is taken over when its claim lapses): {e}"
        ),
        Err(_) => tracing::warn!(
            "the buffer did not answer in {}s; the unfinished work is taken over when its claim lapses",
            CLAIM_RELEASE_DEADLINE.as_secs()
        ),
    }
}

/// Stop the plugins, up to [`PLUGIN_STOP_DEADLINE`]: a plugin busy in a long host call (an
/// LLM request the provider does not answer) is left behind, and what it was doing is
/// delivered again on the next start.
async fn stop_plugins(host: PluginHost) {
    if tokio::time::timeout(PLUGIN_STOP_DEADLINE, host.stop())
        .await
        .is_err()
    {
        tracing::warn!(
            "plugins still busy after {}s; stopping without them (what they were doing is delivered again on the next start)",
            PLUGIN_STOP_DEADLINE.as_secs()
        );
    }
}

/// `memory.backend` must be `sqlite` or the id of a memory-backend plugin of the directory.
fn check_memory_backend(config: &HostConfig, set: &resolve::PluginSet) -> Result<()> {
    let backend = &config.memory.backend;
    if backend == "sqlite" {
        return Ok(());
    }
    match set.start_order().iter().find(|m| &m.id == backend) {
        Some(m) if m.kind == PluginKind::MemoryBackend => Ok(()),
        Some(m) => Err(BadInput(format!(
            "memory.backend: plugin `{backend}` is a {}, not a memory-backend",
            m.kind
        ))
        .into()),
        None => Err(BadInput(format!(
            "memory.backend: no plugin `{backend}` in the plugin directory (expected `sqlite` or a memory-backend plugin id)"
        ))
        .into()),
    }
}

/// Run memory hygiene when due (it throttles itself to `hygiene_interval_hours`, with its
/// state in memory.db), checking every ten minutes until `stop`.
async fn run_memory_hygiene(memory: Arc<LocalMemory>, stop: watch::Receiver<bool>) {
    crate::periodic::every(std::time::Duration::from_secs(600), stop, || async {
        let store = memory.clone();
        match tokio::task::spawn_blocking(move || store.hygiene(false)).await {
            Ok(Ok(report)) if report.ran => tracing::info!(
                forgotten = %report.forgotten_in_words(),
                snapshot_entries = report.snapshot_entries.unwrap_or(0),
                "memory hygiene ran"
            ),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!("memory hygiene failed: {e}"),
            Err(e) => tracing::warn!("memory hygiene panicked: {e}"),
        }
    })
    .await
}

/// How long a stop waits for the router, the agent and the webhook server to finish.
const SHUTDOWN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a stop then waits for the plugins to stop.
const PLUGIN_STOP_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a stop waits for the buffer to take back its unfinished work.
const CLAIM_RELEASE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

/// Wait for Ctrl-C or SIGTERM, or for the terminal's channel to ask to stop (then let
/// what it sent be answered first): the channel that asked, when one did and what it sent was settled.
async fn wait_for_shutdown(
    signals: &mut StopSignals,
    stop_request: &StopRequest,
    stores: &Stores,
    piped_reader: Option<&str>,
) -> Shutdown {
    let lost = async {
        match piped_reader {
            Some(reader) => input_lost(&stores.status, reader).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = signals.received() => Shutdown::Signalled,
        why = lost => {
            tracing::error!("{why}: stopping, as nothing will read the rest of the piped input");
            Shutdown::InputLost(why)
        }
        (channel, reason) = stop_request.requested() => {
            tracing::info!(%channel, %reason, "stop requested; answering what the channel sent first");
            tokio::select! {
                _ = signals.received() => Shutdown::Signalled,
                _ = channel_settled(&stores.buffer, &channel) => Shutdown::Asked(channel),
            }
        }
    }
}

/// Return once `channel` has no unrouted message and no queued or running work.
async fn channel_settled(buffer: &Buffer, channel: &str) {
    loop {
        match buffer.has_pending_work(channel) {
            Ok(false) => return,
            Ok(true) => {}
            Err(e) => {
                tracing::warn!("cannot tell whether {channel}'s messages are answered: {e}");
                return;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Ctrl-C and SIGTERM, listened for from the start of a run: one that arrives while the
/// stores open or the plugins start is kept, and stops the host as soon as it is up,
/// cleanly, instead of killing it half-way.
struct StopSignals {
    terminate: Option<tokio::signal::unix::Signal>,
    interrupt: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    fn listen() -> Self {
        let listen = |kind, name| match tokio::signal::unix::signal(kind) {
            Ok(signal) => Some(signal),
            Err(e) => {
                tracing::warn!("cannot listen for {name}: {e}");
                None
            }
        };
        Self {
            terminate: listen(tokio::signal::unix::SignalKind::terminate(), "SIGTERM"),
            interrupt: listen(tokio::signal::unix::SignalKind::interrupt(), "SIGINT"),
        }
    }

    /// Return when either signal arrives (never, if neither could be listened for).
    async fn received(&mut self) {
        async fn next(signal: &mut Option<tokio::signal::unix::Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            _ = next(&mut self.terminate) => {}
            _ = next(&mut self.interrupt) => {}
        }
    }
}
