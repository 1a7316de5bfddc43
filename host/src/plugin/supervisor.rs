//! Supervision of running plugins: one thread per plugin owns its instance, serves calls in
//! order, polls channels on their interval, and restarts the plugin after a fault with
//! capped exponential backoff until its restart budget is spent, then quarantines it.
//!
//! A fault (trap, timeout, memory-limit hit, failed instantiation or `init`) always drops the
//! instance: wasmtime poisons a trapped store, so the next start builds a fresh store from the
//! plugin's `InstancePre`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::bindings::v0_1::types::Error as WitError;
use super::capabilities::HostServices;
use super::runtime::{CallError, Fault, PluginInstance, PreparedPlugin};
use super::status::{PluginState, PluginStatus, StatusStore};
use crate::config::SupervisorConfig;
use crate::store::now_ms;

type Job = Box<dyn FnOnce(Option<&mut PluginInstance>) -> Option<Fault> + Send>;

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
    /// restarting or quarantined the answer is an `unavailable` plugin error.
    pub async fn call<T: Send + 'static>(
        &self,
        call: impl FnOnce(&mut PluginInstance) -> Result<T, CallError> + Send + 'static,
    ) -> Result<T, CallError> {
        let (reply, answer) = oneshot::channel();
        let plugin = self.id.clone();
        let job: Job = Box::new(move |instance| {
            let (result, fault) = match instance {
                None => (
                    Err(CallError::Plugin(WitError::Unavailable(format!(
                        "plugin {plugin} is not running"
                    )))),
                    None,
                ),
                Some(instance) => {
                    let result = call(instance);
                    let fault = match &result {
                        Err(CallError::Fault(fault)) => Some(fault.clone()),
                        _ => None,
                    };
                    (result, fault)
                }
            };
            let _ = reply.send(result);
            fault
        });
        if self.commands.send(Command::Call(job)).is_err() {
            return Err(self.stopped());
        }
        answer.await.unwrap_or_else(|_| Err(self.stopped()))
    }

    fn stopped(&self) -> CallError {
        CallError::Plugin(WitError::Unavailable(format!(
            "plugin {} has stopped",
            self.id
        )))
    }
}

/// A supervised plugin: its handle and its thread.
pub struct Supervised {
    handle: PluginHandle,
    thread: Option<JoinHandle<()>>,
}

impl Supervised {
    /// Spawn the supervisor thread of a prepared plugin. It does nothing until started.
    pub fn spawn(
        prepared: PreparedPlugin,
        services: Arc<HostServices>,
        status: Arc<StatusStore>,
        config: SupervisorConfig,
    ) -> std::io::Result<Self> {
        let (commands, inbox) = mpsc::channel();
        let id: Arc<str> = prepared.manifest().id.as_str().into();
        let poll_interval = prepared
            .manifest()
            .channel
            .as_ref()
            .and_then(|c| c.poll_interval_ms)
            .map(Duration::from_millis);
        let supervisor = Supervisor {
            prepared,
            services,
            status,
            config,
            poll_interval,
            instance: None,
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

    /// Stop the plugin after its current call, and wait for its thread.
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

struct Supervisor {
    prepared: PreparedPlugin,
    services: Arc<HostServices>,
    status: Arc<StatusStore>,
    config: SupervisorConfig,
    poll_interval: Option<Duration>,
    instance: Option<PluginInstance>,
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
                Ok(Command::Call(job)) => {
                    if let Some(fault) = job(self.instance.as_mut()) {
                        self.on_fault(fault);
                    }
                }
                Ok(Command::Stop(reply)) => {
                    self.instance = None;
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
        let result = self
            .prepared
            .instantiate(self.services.clone())
            .map_err(CallError::Fault)
            .and_then(|mut instance| {
                let config = self.prepared.manifest().config.to_string();
                instance.init(&config).map(|()| instance)
            });
        match result {
            Ok(instance) => {
                self.instance = Some(instance);
                self.next_poll = self.poll_interval.map(|interval| Instant::now() + interval);
                tracing::info!(plugin = self.id(), "plugin started");
                self.publish(PluginState::Running);
            }
            Err(CallError::Fault(fault)) => self.on_fault(fault),
            Err(CallError::Plugin(error)) => self.on_fault(Fault {
                kind: super::runtime::FaultKind::InitFailed,
                message: format!("init returned {error:?}"),
            }),
            Err(CallError::NotExported(world)) => self.on_fault(Fault {
                kind: super::runtime::FaultKind::InitFailed,
                message: format!("a {world:?} plugin has no init export"),
            }),
        }
    }

    fn poll(&mut self) {
        let Some(instance) = self.instance.as_mut() else {
            self.next_poll = None;
            return;
        };
        match instance.poll() {
            Ok(()) => {}
            Err(CallError::Fault(fault)) => {
                self.on_fault(fault);
                return;
            }
            Err(error) => tracing::warn!(plugin = self.id(), "poll failed: {error}"),
        }
        self.next_poll = self.poll_interval.map(|interval| Instant::now() + interval);
    }

    fn on_fault(&mut self, fault: Fault) {
        self.instance = None;
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
        if recent > self.config.restart_budget {
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

    fn publish(&mut self, state: PluginState) {
        self.state = state;
        let manifest = self.prepared.manifest();
        self.status.record(&PluginStatus {
            id: manifest.id.clone(),
            version: manifest.version.to_string(),
            kind: manifest.kind.to_string(),
            state: state.as_str().to_string(),
            restarts: self.restarts,
            faults: self.faults,
            last_error: self.last_error.clone(),
            updated_at: now_ms(),
        });
    }
}
