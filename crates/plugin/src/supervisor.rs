//! Supervision of running plugins: one supervisor thread per plugin serves calls in order,
//! polls channels on their interval, and restarts the plugin after a fault with capped
//! exponential backoff until its restart budget is spent, then quarantines it.
//!
//! The instance itself lives on an executor thread of its own. A call that runs past its
//! deadline inside wasm traps on the epoch deadline; a call stuck in a blocking host call
//! (a long WASI sleep, say) cannot be interrupted, so once `limits.timeout_ms` plus a grace
//! period has passed the supervisor answers the caller, abandons that executor (whose next
//! wasm instruction traps, ending it) and counts a timeout fault.
//!
//! A fault (trap, timeout, memory-limit hit, failed instantiation or `init`) always drops the
//! instance: wasmtime poisons a trapped store, so the next start builds a fresh store from the
//! plugin's `InstancePre`.

use std::collections::VecDeque;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::capabilities::HostServices;
use super::config::SupervisorConfig;
use super::runtime::{CallError, Fault, FaultKind, PluginInstance, PreparedPlugin};
use super::status::{PluginState, PluginStatus, StatusLog};
use cairn_storage::now_ms;

/// How long past `limits.timeout_ms` a call may stay blocked in a host call before its
/// instance is abandoned.
const HANG_GRACE: Duration = Duration::from_secs(1);

/// Work on a live instance; returns the fault the work hit, if any.
type InstanceWork = Box<dyn FnOnce(&mut PluginInstance) -> Option<Fault> + Send>;

/// A caller's call run on the instance, or given the plugin's state while it is not
/// running; returns the fault it hit, if any.
type CallWork = Box<dyn FnOnce(Result<&mut PluginInstance, PluginState>) -> Option<Fault> + Send>;

/// A caller's call: `run` on the instance (or given the state while it is not running),
/// and `abandon` to answer the caller if the instance hangs.
struct Job {
    run: CallWork,
    abandon: Box<dyn FnOnce(Fault) + Send>,
}

enum Command {
    Start(oneshot::Sender<PluginState>),
    Call(Job),
    Stop(oneshot::Sender<()>),
}

/// A handle to a supervised plugin; cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct PluginHandle {
    id: Arc<str>,
    commands: Sender<Command>,
}

impl PluginHandle {
    /// The plugin id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Run `call` on the plugin's instance and wait for its result. While the plugin is
    /// restarting, quarantined or stopped the answer is [`CallError::NotRunning`] at once;
    /// a call that hangs is answered with a timeout fault.
    pub async fn call<T: Send + 'static>(
        &self,
        call: impl FnOnce(&mut PluginInstance) -> Result<T, CallError> + Send + 'static,
    ) -> Result<T, CallError> {
        match self.send(call) {
            Ok(answer) => answer.await.unwrap_or_else(|_| Err(self.stopped())),
            Err(stopped) => Err(stopped),
        }
    }

    /// [`PluginHandle::call`] for threads outside the async runtime (e.g. another plugin's
    /// host import reaching a memory-backend plugin).
    pub fn call_blocking<T: Send + 'static>(
        &self,
        call: impl FnOnce(&mut PluginInstance) -> Result<T, CallError> + Send + 'static,
    ) -> Result<T, CallError> {
        match self.send(call) {
            Ok(answer) => answer
                .blocking_recv()
                .unwrap_or_else(|_| Err(self.stopped())),
            Err(stopped) => Err(stopped),
        }
    }

    /// Queue `call` on the plugin's executor; the receiver yields its result.
    fn send<T: Send + 'static>(
        &self,
        call: impl FnOnce(&mut PluginInstance) -> Result<T, CallError> + Send + 'static,
    ) -> Result<oneshot::Receiver<Result<T, CallError>>, CallError> {
        let (reply, answer) = oneshot::channel();
        // Either the run or the abandonment answers, whichever comes first.
        let reply = Arc::new(Mutex::new(Some(reply)));
        let answer_with = {
            let reply = reply.clone();
            move |result: Result<T, CallError>| {
                if let Some(reply) = reply.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    let _ = reply.send(result);
                }
            }
        };
        let plugin = self.id.clone();
        let run_answer = answer_with.clone();
        let job = Job {
            run: Box::new(move |instance| {
                let result = match instance {
                    Err(state) => Err(CallError::NotRunning {
                        plugin: plugin.to_string(),
                        state,
                    }),
                    Ok(instance) => call(instance),
                };
                let fault = match &result {
                    Err(CallError::Fault(fault)) => Some(fault.clone()),
                    _ => None,
                };
                run_answer(result);
                fault
            }),
            abandon: Box::new(move |fault| answer_with(Err(CallError::Fault(fault)))),
        };
        if self.commands.send(Command::Call(job)).is_err() {
            return Err(self.stopped());
        }
        Ok(answer)
    }

    fn stopped(&self) -> CallError {
        CallError::NotRunning {
            plugin: self.id.to_string(),
            state: PluginState::Stopped,
        }
    }
}

/// A supervised plugin: its handle and its supervisor thread.
pub struct Supervised {
    handle: PluginHandle,
    thread: Option<JoinHandle<()>>,
}

impl Supervised {
    /// Spawn the supervisor thread of a prepared plugin. It does nothing until started.
    pub fn spawn(
        prepared: PreparedPlugin,
        services: Arc<HostServices>,
        status: Arc<StatusLog>,
        config: SupervisorConfig,
    ) -> std::io::Result<Self> {
        let (commands, inbox) = mpsc::channel();
        let manifest = prepared.manifest().clone();
        let id: Arc<str> = manifest.id.as_str().into();
        let supervisor = Supervisor {
            call_limit: Duration::from_millis(manifest.limits.timeout_ms) + HANG_GRACE,
            poll_interval: manifest
                .channel
                .as_ref()
                .and_then(|c| c.poll_interval_ms)
                .map(Duration::from_millis),
            prepared: Arc::new(prepared),
            services,
            status,
            config,
            executor: None,
            state: PluginState::Starting,
            next_poll: None,
            retry_at: None,
            fault_times: VecDeque::new(),
            restarts: 0,
            faults: 0,
            last_error: None,
        };
        let thread = std::thread::Builder::new()
            .name(format!("plugin-{id}"))
            .spawn(move || supervisor.run(inbox))?;
        Ok(Self {
            handle: PluginHandle { id, commands },
            thread: Some(thread),
        })
    }

    /// A handle for calls into the plugin.
    pub fn handle(&self) -> &PluginHandle {
        &self.handle
    }

    /// Instantiate and `init` the plugin; returns the state after this first attempt
    /// (`running`, or `restarting` when it faulted and will be retried).
    pub async fn start(&self) -> PluginState {
        let (reply, answer) = oneshot::channel();
        if self.handle.commands.send(Command::Start(reply)).is_err() {
            return PluginState::Stopped;
        }
        answer.await.unwrap_or(PluginState::Stopped)
    }

    /// Stop the plugin after its current call, and wait for its supervisor thread.
    pub async fn stop(mut self) {
        let (reply, answer) = oneshot::channel();
        if self.handle.commands.send(Command::Stop(reply)).is_ok() {
            let _ = answer.await;
        }
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

/// How a piece of work on the executor ended.
enum Outcome {
    /// It completed; the instance is healthy.
    Done,
    /// It faulted; the executor has dropped the instance.
    Faulted(Fault),
    /// It did not return within the call limit; the executor is abandoned.
    Hung,
}

/// The thread owning a live instance.
struct Executor {
    work: Sender<(InstanceWork, Sender<Option<Fault>>)>,
}

impl Executor {
    /// Spawn a thread that instantiates the plugin, calls `init`, then runs work until a
    /// fault or until dropped. Returns the executor and the outcome of `init`.
    fn spawn(
        prepared: Arc<PreparedPlugin>,
        services: Arc<HostServices>,
    ) -> std::io::Result<(Self, Receiver<Result<(), CallError>>)> {
        let (work, inbox) = mpsc::channel::<(InstanceWork, Sender<Option<Fault>>)>();
        let (started, started_rx) = mpsc::channel();
        std::thread::Builder::new()
            .name(format!("wasm-{}", prepared.manifest().id))
            .spawn(move || {
                let config = prepared.manifest().config.to_string();
                let instance = prepared
                    .instantiate(services)
                    .map_err(CallError::Fault)
                    .and_then(|mut instance| instance.init(&config).map(|()| instance));
                let mut instance = match instance {
                    Ok(instance) => {
                        let _ = started.send(Ok(()));
                        instance
                    }
                    Err(error) => {
                        let _ = started.send(Err(error));
                        return;
                    }
                };
                while let Ok((work, done)) = inbox.recv() {
                    let fault = work(&mut instance);
                    let poisoned = fault.is_some();
                    let _ = done.send(fault);
                    if poisoned {
                        return;
                    }
                }
            })?;
        Ok((Self { work }, started_rx))
    }
}

struct Supervisor {
    prepared: Arc<PreparedPlugin>,
    services: Arc<HostServices>,
    status: Arc<StatusLog>,
    config: SupervisorConfig,
    call_limit: Duration,
    poll_interval: Option<Duration>,
    executor: Option<Executor>,
    state: PluginState,
    next_poll: Option<Instant>,
    retry_at: Option<Instant>,
    fault_times: VecDeque<Instant>,
    restarts: u32,
    faults: u32,
    last_error: Option<String>,
}

impl Supervisor {
    fn id(&self) -> &str {
        &self.prepared.manifest().id
    }

    fn run(mut self, inbox: Receiver<Command>) {
        self.publish(PluginState::Starting);
        loop {
            let wakeup = [self.next_poll, self.retry_at].into_iter().flatten().min();
            let command = match wakeup {
                Some(at) => inbox.recv_timeout(at.saturating_duration_since(Instant::now())),
                None => inbox.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match command {
                Ok(Command::Start(reply)) => {
                    self.start();
                    let _ = reply.send(self.state);
                }
                Ok(Command::Call(job)) => self.call(job),
                Ok(Command::Stop(reply)) => {
                    self.executor = None;
                    // A quarantined plugin stays visibly quarantined after the host stops.
                    if self.state != PluginState::Quarantined {
                        self.publish(PluginState::Stopped);
                    }
                    let _ = reply.send(());
                    return;
                }
                Err(RecvTimeoutError::Timeout) => self.on_timer(),
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    fn hang_fault(&self) -> Fault {
        Fault {
            kind: FaultKind::Timeout,
            message: format!(
                "call did not return within {} ms (blocked in a host call); instance abandoned",
                self.call_limit.as_millis()
            ),
        }
    }

    /// Run work on the executor and wait for it, up to the call limit.
    fn execute(&mut self, work: InstanceWork) -> Outcome {
        let Some(executor) = &self.executor else {
            return Outcome::Done;
        };
        let ended = || {
            Outcome::Faulted(Fault {
                kind: FaultKind::Trap,
                message: "the instance's thread ended unexpectedly".into(),
            })
        };
        let (done, finished) = mpsc::channel();
        if executor.work.send((work, done)).is_err() {
            return ended();
        }
        match finished.recv_timeout(self.call_limit) {
            Ok(None) => Outcome::Done,
            Ok(Some(fault)) => Outcome::Faulted(fault),
            Err(RecvTimeoutError::Timeout) => Outcome::Hung,
            Err(RecvTimeoutError::Disconnected) => ended(),
        }
    }

    fn call(&mut self, job: Job) {
        if self.executor.is_none() {
            (job.run)(Err(self.state));
            return;
        }
        let Job { run, abandon } = job;
        let work: InstanceWork = Box::new(move |instance| run(Ok(instance)));
        match self.execute(work) {
            Outcome::Done => {}
            // The run has answered its caller already.
            Outcome::Faulted(fault) => self.on_fault(fault),
            Outcome::Hung => {
                let fault = self.hang_fault();
                abandon(fault.clone());
                self.on_fault(fault);
            }
        }
    }

    fn on_timer(&mut self) {
        let now = Instant::now();
        if self.retry_at.is_some_and(|at| at <= now) {
            self.retry_at = None;
            self.restarts += 1;
            tracing::info!(
                plugin = self.id(),
                restarts = self.restarts,
                "restarting plugin"
            );
            self.start();
        }
        if self.next_poll.is_some_and(|at| at <= now) {
            self.poll();
        }
    }

    fn start(&mut self) {
        self.publish(PluginState::Starting);
        let spawned = Executor::spawn(self.prepared.clone(), self.services.clone());
        let (executor, started) = match spawned {
            Ok(spawned) => spawned,
            Err(e) => {
                self.on_fault(Fault {
                    kind: FaultKind::Instantiate,
                    message: format!("cannot spawn the instance thread: {e}"),
                });
                return;
            }
        };
        let outcome = match started.recv_timeout(self.call_limit) {
            Ok(outcome) => outcome,
            Err(RecvTimeoutError::Timeout) => Err(CallError::Fault(self.hang_fault())),
            Err(RecvTimeoutError::Disconnected) => Err(CallError::Fault(Fault {
                kind: FaultKind::Instantiate,
                message: "the instance's thread ended during start".into(),
            })),
        };
        match outcome {
            Ok(()) => {
                self.executor = Some(executor);
                self.next_poll = self.poll_interval.map(|interval| Instant::now() + interval);
                tracing::info!(plugin = self.id(), "plugin started");
                self.publish(PluginState::Running);
            }
            Err(CallError::Fault(fault)) => self.on_fault(fault),
            Err(CallError::Plugin(error)) => self.on_fault(Fault {
                kind: FaultKind::InitFailed,
                message: format!("init returned {error}"),
            }),
            Err(CallError::NotExported(world)) => self.on_fault(Fault {
                kind: FaultKind::InitFailed,
                message: format!("a {world:?} plugin has no init export"),
            }),
            // Start runs on the executor's own instance: it is running by definition.
            Err(not_running @ CallError::NotRunning { .. }) => self.on_fault(Fault {
                kind: FaultKind::InitFailed,
                message: not_running.to_string(),
            }),
        }
    }

    fn poll(&mut self) {
        if self.executor.is_none() {
            self.next_poll = None;
            return;
        }
        let plugin = self.prepared.manifest().id.clone();
        let work: InstanceWork = Box::new(move |instance| match instance.poll() {
            Ok(()) => None,
            Err(CallError::Fault(fault)) => Some(fault),
            Err(error) => {
                tracing::warn!(plugin, "poll failed: {error}");
                None
            }
        });
        match self.execute(work) {
            Outcome::Done => {}
            Outcome::Faulted(fault) => return self.on_fault(fault),
            Outcome::Hung => return self.on_fault(self.hang_fault()),
        }
        self.next_poll = self.poll_interval.map(|interval| Instant::now() + interval);
    }

    fn on_fault(&mut self, fault: Fault) {
        self.executor = None;
        self.next_poll = None;
        self.faults += 1;
        self.last_error = Some(fault.to_string());
        let now = Instant::now();
        let window = Duration::from_secs(self.config.restart_window_secs);
        self.fault_times.push_back(now);
        while self
            .fault_times
            .front()
            .is_some_and(|t| now.duration_since(*t) > window)
        {
            self.fault_times.pop_front();
        }
        let recent = self.fault_times.len() as u32;
        let quarantined = recent > self.config.restart_budget;
        self.journal_fault(&fault, quarantined);
        if quarantined {
            tracing::error!(
                plugin = self.id(),
                faults = recent,
                window_secs = self.config.restart_window_secs,
                "plugin quarantined after exceeding its restart budget; last fault: {fault}"
            );
            self.retry_at = None;
            self.publish(PluginState::Quarantined);
            return;
        }
        let exponent = recent.saturating_sub(1).min(20);
        let backoff = self
            .config
            .backoff_initial_ms
            .saturating_mul(1 << exponent)
            .min(self.config.backoff_max_ms);
        tracing::warn!(
            plugin = self.id(),
            backoff_ms = backoff,
            "plugin faulted ({fault}); restarting after backoff"
        );
        self.retry_at = Some(now + Duration::from_millis(backoff));
        self.publish(PluginState::Restarting);
    }

    /// Journal `plugin.failed` (and `plugin.quarantined`) for a fault.
    fn journal_fault(&self, fault: &Fault, quarantined: bool) {
        let Some(events) = &self.services.events else {
            return;
        };
        let payload = serde_json::json!({
            "plugin": self.id(),
            "fault": fault.kind,
            "error": fault.message,
            "faults": self.faults,
            "restarts": self.restarts,
        });
        let topics: &[&str] = if quarantined {
            &["plugin.failed", "plugin.quarantined"]
        } else {
            &["plugin.failed"]
        };
        for topic in topics {
            let event = cairn_vocab::event::NewEvent {
                topic: topic.to_string(),
                payload: payload.to_string(),
                source: "host".into(),
                ..Default::default()
            };
            if let Err(e) = events.append(event) {
                tracing::error!(plugin = self.id(), "cannot journal {topic}: {e}");
            }
        }
    }

    fn publish(&mut self, state: PluginState) {
        self.state = state;
        let manifest = self.prepared.manifest();
        self.status.record(&PluginStatus {
            id: manifest.id.clone(),
            version: manifest.version.to_string(),
            kind: manifest.kind,
            state,
            restarts: self.restarts,
            faults: self.faults,
            last_error: self.last_error.clone(),
            updated_at: now_ms(),
        });
    }
}
