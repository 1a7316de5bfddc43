//! Supervision of running plugins: one supervisor thread per plugin starts its instance,
//! polls channels on their interval, and restarts the plugin after a fault with capped
//! exponential backoff until its restart budget is spent, then quarantines it.
//!
//! The instance itself lives on an executor thread of its own, which takes calls in order
//! straight from the plugin's [`queue::CallQueue`]: a call is one hop to that thread and one
//! back, and the supervisor is woken only by what it must act on (a start, a fault, a stop, a
//! poll, a look at the running call). A call that runs past its deadline inside wasm traps on
//! the epoch deadline; a call stuck in a blocking host call (a long WASI sleep, say) cannot be
//! interrupted, so once `limits.timeout_ms` plus a grace period has passed the supervisor
//! answers the caller, abandons that executor (whose next wasm instruction traps, ending it)
//! and counts a timeout fault.
//!
//! A fault (trap, timeout, memory-limit hit, failed instantiation or `init`) always drops the
//! instance: wasmtime poisons a trapped store, so the next start builds a fresh store from the
//! plugin's `InstancePre`.
//!
//! A channel that serves webhooks runs two instances of the same `InstancePre`, one per
//! [`Lane`]: inbound requests (`handle-webhook`) go to their own, so a sender is answered while
//! the other instance posts a slow reply. The plugin is supervised as one: a fault of either
//! instance counts once against its restart budget and restarts both.

mod executor;
mod poll_log;
mod queue;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self as std_mpsc, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use tokio::sync::oneshot;

use executor::{Executor, spawn_executor};
use poll_log::PollFailures;
use queue::{CallQueue, Watched};

use super::capabilities::HostServices;
use super::config::SupervisorConfig;
use super::runtime::{CallError, Fault, FaultKind, PluginInstance, PreparedPlugin};
use super::status::{PluginState, PluginStatus, StatusLog};
use cairn_storage::now_ms;

/// How long past `limits.timeout_ms` a call may stay blocked in a host call before its
/// instance is abandoned.
const HANG_GRACE: Duration = Duration::from_secs(1);

/// How often the supervisor looks at how long the running call has taken while calls are
/// being made: a call stuck in a host call is abandoned at most this long after its limit. A
/// look that finds no call running stops looking until the instance's thread reports that it
/// took a call again, so an idle plugin wakes no thread.
const HANG_WATCH: Duration = Duration::from_millis(200);

/// A caller's call run on the instance, or told why there is none; returns the fault it
/// hit, if any.
type CallWork = Box<dyn FnOnce(Result<&mut PluginInstance, Unavailable>) -> Option<Fault> + Send>;

/// Why a call found no instance taking calls: the plugin's state and, once it is
/// quarantined or failed, the fault that put it there.
struct Unavailable {
    state: PluginState,
    cause: Option<String>,
}

impl Unavailable {
    /// Stopped with the host: no fault to name.
    fn stopped() -> Self {
        Self {
            state: PluginState::Stopped,
            cause: None,
        }
    }
}

/// A caller's call: `run` on the instance (or given the state while it is not running),
/// and `abandon` to answer the caller if the instance hangs.
struct Job {
    run: CallWork,
    abandon: Abandon,
}

/// Answers a call's caller with the fault of an instance that hung in it.
type Abandon = Box<dyn FnOnce(Fault) + Send>;

/// What an instance's executor thread tells the supervisor, with the number of the start
/// that made the instance (a late report of an abandoned one is ignored).
enum Report {
    /// It took a call while the supervisor was not looking at its calls: look again.
    Busy { start: u64 },
    /// A call faulted; the instance has ended.
    Faulted { start: u64, fault: Fault },
}

enum Command {
    Start(oneshot::Sender<PluginState>),
    /// A call for the lane of this index that found its queue closed.
    Call(usize, Job),
    Stop(oneshot::Sender<()>),
}

/// Which of a plugin's instances a call goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// The instance that takes every call but inbound requests (`init`, `poll`, `deliver`,
    /// events, memory operations), in the order they were made.
    Main,
    /// A webhook channel's second instance, for inbound requests only: a sender is answered
    /// without waiting behind a `deliver` that may take the plugin's whole `timeout_ms`.
    /// A plugin without a webhook has no such instance, and this lane is its main one.
    Inbound,
}

impl Lane {
    /// The lanes of a plugin: a channel that serves webhooks has both.
    fn of(manifest: &crate::manifest::Manifest) -> &'static [Lane] {
        if manifest.channel.as_ref().is_some_and(|c| c.webhook) {
            &[Lane::Main, Lane::Inbound]
        } else {
            &[Lane::Main]
        }
    }

    /// The name of its instance's thread, for a plugin `id`.
    fn thread_name(self, id: &str) -> String {
        match self {
            Lane::Main => format!("wasm-{id}"),
            Lane::Inbound => format!("wasm-{id}-inbound"),
        }
    }
}

/// A handle to a supervised plugin; cheap to clone, usable from any thread. Its calls go
/// to the main instance; [`PluginHandle::inbound`] gives one for inbound requests.
#[derive(Clone)]
pub struct PluginHandle {
    id: Arc<str>,
    commands: Sender<Command>,
    /// Each lane's queue, in the order of [`Lane::of`].
    queues: Arc<[Arc<CallQueue>]>,
    /// The index of the lane this handle's calls go to.
    lane: usize,
}

impl PluginHandle {
    /// The plugin id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// A handle whose calls go to the plugin's instance for inbound requests: its own
    /// for a channel that serves webhooks, the main one otherwise.
    pub fn inbound(&self) -> PluginHandle {
        Self {
            lane: (self.queues.len() - 1).min(1),
            ..self.clone()
        }
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

    /// Queue `call` for the plugin's instance (through the supervisor while none is taking
    /// calls); the receiver yields its result.
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
                    Err(Unavailable { state, cause }) => Err(CallError::NotRunning {
                        plugin: plugin.to_string(),
                        state,
                        cause,
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
        let Err(job) = self.queues[self.lane].push(job) else {
            return Ok(answer);
        };
        if self.commands.send(Command::Call(self.lane, job)).is_err() {
            return Err(self.stopped());
        }
        Ok(answer)
    }

    fn stopped(&self) -> CallError {
        CallError::NotRunning {
            plugin: self.id.to_string(),
            state: PluginState::Stopped,
            cause: None,
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
        let (commands, inbox) = crossbeam_channel::unbounded();
        let (reports, reported) = crossbeam_channel::unbounded();
        let manifest = prepared.manifest().clone();
        let lanes = Lane::of(&manifest);
        let queues: Arc<[Arc<CallQueue>]> = lanes.iter().map(|_| Arc::default()).collect();
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
            lanes,
            queues: queues.clone(),
            reports,
            starts: 0,
            live: None,
            executors: lanes.iter().map(|_| None).collect(),
            polling: Arc::new(AtomicBool::new(false)),
            poll_failures: Arc::default(),
            next_watch: None,
            state: PluginState::Starting,
            next_poll: None,
            retry_at: None,
            fault_times: VecDeque::new(),
            restarts: 0,
            faults: 0,
            last_error: None,
            store_waits: 0,
        };
        let thread = std::thread::Builder::new()
            .name(format!("plugin-{id}"))
            .spawn(move || supervisor.run(inbox, reported))?;
        Ok(Self {
            handle: PluginHandle {
                id,
                commands,
                queues,
                lane: 0,
            },
            thread: Some(thread),
        })
    }

    /// A handle for calls into the plugin.
    pub fn handle(&self) -> &PluginHandle {
        &self.handle
    }

    /// Instantiate and `init` the plugin on its thread; the receiver yields the state
    /// after this first attempt (`running`, or `restarting` when it faulted and will be
    /// retried; an error when the supervisor is gone), so several plugins can start at once.
    pub fn begin_start(&self) -> oneshot::Receiver<PluginState> {
        let (reply, answer) = oneshot::channel();
        // A supervisor gone drops `reply` with the command: the receiver then errs.
        let _ = self.handle.commands.send(Command::Start(reply));
        answer
    }

    /// Stop the plugin once the calls made so far are done (waiting for them up to its call
    /// limit), and wait for its supervisor thread.
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
    prepared: Arc<PreparedPlugin>,
    services: Arc<HostServices>,
    status: Arc<StatusLog>,
    config: SupervisorConfig,
    call_limit: Duration,
    poll_interval: Option<Duration>,
    /// The plugin's lanes, an instance each.
    lanes: &'static [Lane],
    /// The calls for each lane's live instance.
    queues: Arc<[Arc<CallQueue>]>,
    /// Where executor threads report faults and calls taken while nobody looked.
    reports: Sender<Report>,
    /// Starts so far: each instance is known by the number of the start that made it.
    starts: u64,
    /// The live instances' start number, if they are running (one start makes all).
    live: Option<u64>,
    /// Each lane's live instance's thread, joined by a stop that found it idle. Until
    /// 2026-12-03 a stop did not wait for it, and under load the process could end before it
    /// dropped the instance: every SQLite database was then left with its -wal and -shm files.
    executors: Vec<Option<JoinHandle<()>>>,
    /// A poll is queued and not yet run (a slow poll is not stacked).
    polling: Arc<AtomicBool>,
    /// What the log was told of failing polls (reported on the instance's thread).
    poll_failures: Arc<Mutex<PollFailures>>,
    /// When to look next at how long the running call has taken.
    next_watch: Option<Instant>,
    state: PluginState,
    next_poll: Option<Instant>,
    retry_at: Option<Instant>,
    fault_times: VecDeque<Instant>,
    restarts: u32,
    faults: u32,
    last_error: Option<String>,
    /// Starts in a row whose `init` failed because a host store was away: not faults, so
    /// they spend no restart budget, but the wait before the next start grows with them.
    store_waits: u32,
}

impl Supervisor {
    fn id(&self) -> &str {
        &self.prepared.manifest().id
    }

    fn run(mut self, inbox: Receiver<Command>, reported: Receiver<Report>) {
        self.publish(PluginState::Starting);
        loop {
            let wakeup = [self.next_poll, self.retry_at, self.next_watch]
                .into_iter()
                .flatten()
                .min();
            // With nothing to wake for, wait for a command or a fault as long as it takes.
            let timeout = wakeup.map_or(Duration::from_secs(3600), |at| {
                at.saturating_duration_since(Instant::now())
            });
            crossbeam_channel::select! {
                recv(inbox) -> command => match command {
                    Ok(Command::Start(reply)) => {
                        self.start();
                        let _ = reply.send(self.state);
                    }
                    Ok(Command::Call(lane, job)) => self.call(lane, job),
                    Ok(Command::Stop(reply)) => {
                        self.stop();
                        let _ = reply.send(());
                        return;
                    }
                    Err(_) => {
                        self.stop();
                        return;
                    }
                },
                recv(reported) -> report => match report {
                    Ok(Report::Faulted { start, fault }) if self.live == Some(start) => {
                        self.lose_instance(fault);
                    }
                    Ok(Report::Busy { start }) if self.live == Some(start) => {
                        self.next_watch.get_or_insert_with(|| Instant::now() + HANG_WATCH);
                    }
                    _ => {}
                },
                default(timeout) => self.on_timer(),
            }
        }
    }

    /// Stop after the calls made so far (waiting up to the call limit for them), answering
    /// any made meanwhile with `stopped`.
    fn stop(&mut self) {
        let drained = self.drain_lanes();
        let mut left = Vec::new();
        for (lane, drained) in drained.into_iter().enumerate() {
            let closed = self.queues[lane].close();
            if !drained && let Some(abandon) = closed.running {
                abandon(self.hang_fault());
            }
            // Past the marker and with its queue closed, an idle instance's thread only drops
            // the instance and ends; a hung one is left behind.
            if let Some(thread) = self.executors[lane].take()
                && drained
            {
                let _ = thread.join();
            }
            left.extend(closed.left);
        }
        self.live = None;
        // A quarantined plugin stays visibly quarantined after the host stops.
        if self.state != PluginState::Quarantined {
            self.publish(PluginState::Stopped);
        }
        for job in left {
            (job.run)(Err(Unavailable::stopped()));
        }
    }

    /// Wait, up to the call limit in all, until each live instance has run the calls made
    /// so far: whether each lane's did (a lane with no live instance did).
    fn drain_lanes(&self) -> Vec<bool> {
        if self.live.is_none() {
            return vec![true; self.lanes.len()];
        }
        let markers: Vec<_> = self
            .queues
            .iter()
            .map(|calls| {
                let (reached, wait) = std_mpsc::channel();
                let marker = Job {
                    run: Box::new(move |_| {
                        let _ = reached.send(());
                        None
                    }),
                    abandon: Box::new(|_| {}),
                };
                calls.push(marker).is_ok().then_some(wait)
            })
            .collect();
        let deadline = Instant::now() + self.call_limit;
        markers
            .into_iter()
            .map(|wait| {
                wait.is_some_and(|wait| {
                    wait.recv_timeout(deadline.saturating_duration_since(Instant::now()))
                        .is_ok()
                })
            })
            .collect()
    }

    /// Close every lane's queue, its instance's thread not waited for (it ends on its own
    /// or, hung, never), and hand back the calls never begun.
    fn close_lanes(&mut self) -> Vec<Job> {
        self.live = None;
        self.next_watch = None;
        self.executors.iter_mut().for_each(|thread| *thread = None);
        self.queues
            .iter()
            .flat_map(|calls| calls.close().left)
            .collect()
    }

    /// Why calls find no instance now: the state, and the last fault once it is final.
    fn unavailable(&self) -> Unavailable {
        let settled = matches!(self.state, PluginState::Quarantined | PluginState::Failed);
        Unavailable {
            state: self.state,
            cause: settled.then(|| self.last_error.clone()).flatten(),
        }
    }

    /// A call that found no instance taking calls: one may have started since; otherwise it
    /// is answered with the plugin's state.
    fn call(&self, lane: usize, job: Job) {
        if let Err(job) = self.queues[lane].push(job) {
            (job.run)(Err(self.unavailable()));
        }
    }

    /// A live instance faulted or hung: close every lane's queue, count the fault (restart
    /// or quarantine), and answer the calls left with the plugin's new state.
    fn lose_instance(&mut self, fault: Fault) {
        let left = self.close_lanes();
        self.on_fault(fault);
        for job in left {
            (job.run)(Err(self.unavailable()));
        }
    }

    /// `init` failed because a host store was away (a database outage, a full disk): not
    /// the plugin's fault, so it is started again after a wait (doubling, capped like a
    /// restart's backoff) that spends none of its restart budget, however long the outage.
    fn wait_for_store(&mut self, cause: &str) {
        let left = self.close_lanes();
        self.next_poll = None;
        self.store_waits = self.store_waits.saturating_add(1);
        let wait = self.backoff(self.store_waits);
        tracing::warn!(
            plugin = self.id(),
            wait_ms = wait,
            "init failed while a host store was away ({cause}); starting again after the wait, which spends none of the restart budget"
        );
        self.retry_at = Some(Instant::now() + Duration::from_millis(wait));
        self.publish(PluginState::Restarting);
        for job in left {
            (job.run)(Err(self.unavailable()));
        }
    }

    /// The wait before start number `attempt` (from 1) of a run of failed ones: the initial
    /// backoff, doubled for each attempt after the first, capped.
    fn backoff(&self, attempt: u32) -> u64 {
        let exponent = attempt.saturating_sub(1).min(20);
        self.config
            .backoff_initial_ms
            .saturating_mul(1 << exponent)
            .min(self.config.backoff_max_ms)
    }

    /// Abandon the live instances if a running call is past the call limit; look again in
    /// a while unless no call is running (an instance's thread reports the next it takes).
    fn watch(&mut self) {
        self.next_watch = None;
        let mut running = false;
        for calls in self.queues.clone().iter() {
            match calls.watch(self.call_limit) {
                Watched::Hung(abandon) => {
                    let fault = self.hang_fault();
                    abandon(fault.clone());
                    self.lose_instance(fault);
                    return;
                }
                Watched::Running => running = true,
                Watched::Idle => {}
            }
        }
        if running {
            self.next_watch = Some(Instant::now() + HANG_WATCH);
        }
    }

    fn hang_fault(&self) -> Fault {
        Fault {
            kind: FaultKind::Timeout,
            message: format!(
                "call did not return within {} ms, the deadline's grace included (blocked in a host call, or never reached by the deadline); instance abandoned",
                self.call_limit.as_millis()
            ),
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
        if self.next_watch.is_some_and(|at| at <= now) {
            self.watch();
        }
    }

    fn start(&mut self) {
        self.publish(PluginState::Starting);
        self.starts += 1;
        let start = self.starts;
        // Calls made while the instances run `init` wait for them.
        for calls in self.queues.iter() {
            calls.open(start);
        }
        self.polling.store(false, Ordering::Relaxed);
        let mut starting = Vec::new();
        let lanes = self.lanes;
        for (index, lane) in lanes.iter().enumerate() {
            let spawned = spawn_executor(
                *lane,
                self.prepared.clone(),
                self.services.clone(),
                self.queues[index].clone(),
                start,
                self.reports.clone(),
            );
            match spawned {
                Ok(Executor { started, thread }) => {
                    self.executors[index] = Some(thread);
                    starting.push(started);
                }
                Err(e) => {
                    self.lose_instance(Fault {
                        kind: FaultKind::Instantiate,
                        message: format!("cannot spawn the instance thread: {e}"),
                    });
                    return;
                }
            }
        }
        let fault = match self.started(&starting) {
            Ok(()) => {
                self.live = Some(start);
                self.store_waits = 0;
                let now = Instant::now();
                self.next_poll = self.poll_interval.map(|interval| now + interval);
                self.next_watch = Some(now + HANG_WATCH);
                tracing::info!(plugin = self.id(), "plugin started");
                self.publish(PluginState::Running);
                return;
            }
            Err(CallError::Fault(fault)) => fault,
            Err(CallError::Plugin(error)) => Fault {
                kind: FaultKind::InitFailed,
                message: format!("init returned {error}"),
            },
            Err(CallError::StoreAway { cause, .. }) => {
                self.wait_for_store(&cause);
                return;
            }
            Err(CallError::NotExported(world)) => Fault {
                kind: FaultKind::InitFailed,
                message: format!("a {world:?} plugin has no init export"),
            },
            // Start runs on the executor's own instance: it is running by definition.
            Err(not_running @ CallError::NotRunning { .. }) => Fault {
                kind: FaultKind::InitFailed,
                message: not_running.to_string(),
            },
        };
        self.lose_instance(fault);
    }

    /// What the starts of the instances came to: the first failure, or all running. They
    /// start side by side, so all of them have the one call limit from now.
    fn started(
        &self,
        starting: &[std_mpsc::Receiver<Result<(), CallError>>],
    ) -> Result<(), CallError> {
        let deadline = Instant::now() + self.call_limit;
        for started in starting {
            match started.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Ok(())) => {}
                Ok(failed) => return failed,
                Err(RecvTimeoutError::Timeout) => return Err(CallError::Fault(self.hang_fault())),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(CallError::Fault(Fault {
                        kind: FaultKind::Instantiate,
                        message: "the instance's thread ended during start".into(),
                    }));
                }
            }
        }
        Ok(())
    }

    /// Queue a poll of a channel plugin, unless the last one has not run yet.
    fn poll(&mut self) {
        self.next_poll = None;
        if self.live.is_none() {
            return;
        }
        self.next_poll = self.poll_interval.map(|interval| Instant::now() + interval);
        // A poll still queued or running is not stacked behind itself.
        if self.polling.swap(true, Ordering::Relaxed) {
            return;
        }
        let plugin = self.prepared.manifest().id.clone();
        let polling = self.polling.clone();
        let failures = self.poll_failures.clone();
        let poll = Job {
            run: Box::new(move |instance| {
                let mut failures = failures.lock().unwrap_or_else(|p| p.into_inner());
                let fault = match instance.map(|instance| instance.poll()) {
                    Ok(Err(CallError::Fault(fault))) => Some(fault),
                    Ok(Err(error)) => {
                        failures.failed(&plugin, error.to_string());
                        None
                    }
                    Ok(Ok(())) => {
                        failures.succeeded(&plugin);
                        None
                    }
                    Err(_) => None,
                };
                polling.store(false, Ordering::Relaxed);
                fault
            }),
            abandon: Box::new(|_| {}),
        };
        if self.queues[0].push(poll).is_err() {
            self.polling.store(false, Ordering::Relaxed);
        }
    }

    fn on_fault(&mut self, fault: Fault) {
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
        let backoff = self.backoff(recent);
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
