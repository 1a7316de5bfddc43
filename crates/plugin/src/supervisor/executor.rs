//! The thread of one instance of a plugin: it instantiates the plugin from its
//! `InstancePre`, runs `init`, then takes the calls of its lane's queue in order until the
//! queue closes to it or a call faults (the store is then poisoned and the instance ends).

use std::sync::Arc;
use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;

use crossbeam_channel::Sender;

use super::queue::CallQueue;
use super::{Lane, Report};
use crate::capabilities::HostServices;
use crate::runtime::{CallError, Fault, FaultKind, PreparedPlugin};

/// The thread of one instance: what its start came to, and the thread itself, joined
/// when a stop found it idle so the instance (and the host's stores it holds) is dropped
/// before the host goes on.
pub(super) struct Executor {
    /// What instantiation and `init` came to, sent once.
    pub started: std_mpsc::Receiver<Result<(), CallError>>,
    /// The thread.
    pub thread: JoinHandle<()>,
}

/// Spawn the thread of `lane`'s instance of start number `start`: it instantiates the
/// plugin, calls `init` (answering on the returned channel), then runs the calls `calls`
/// gives it until the queue closes to it or a call faults, which it reports on `reports`.
/// An inbound instance's `init` is hushed, as it says what the main one's does, and what it
/// logs later through `log` is marked `inbound` (its stdout and stderr are written from
/// another thread, outside the mark).
pub(super) fn spawn_executor(
    lane: Lane,
    prepared: Arc<PreparedPlugin>,
    services: Arc<HostServices>,
    calls: Arc<CallQueue>,
    start: u64,
    reports: Sender<Report>,
) -> std::io::Result<Executor> {
    let (started, started_rx) = std_mpsc::channel();
    let name = lane.thread_name(&prepared.manifest().id);
    let thread = std::thread::Builder::new().name(name).spawn(move || {
        let _inbound = (lane == Lane::Inbound).then(|| tracing::info_span!("inbound").entered());
        let config = prepared.manifest().config.to_string();
        let instance = prepared
            .instantiate(services)
            .map_err(CallError::Fault)
            .and_then(|mut instance| {
                match lane {
                    Lane::Main => instance.init(&config),
                    Lane::Inbound => instance.init_hushed(&config),
                }
                .map(|()| instance)
            });
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
        while let Some(next) = calls.next(start) {
            if next.unwatched {
                let _ = reports.send(Report::Busy { start });
            }
            // A host function that panics (a bug of ours, never the guest's) must not take
            // the thread down unseen: it ends the instance as a fault, and the caller,
            // whose answer went with the panic, gets the channel's closing.
            let fault = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                (next.call)(Ok(&mut instance))
            }))
            .unwrap_or_else(|panic| Some(host_panicked(panic.as_ref())));
            calls.finished(start);
            if let Some(fault) = fault {
                // The store is poisoned: the instance ends here.
                let _ = reports.send(Report::Faulted { start, fault });
                return;
            }
        }
    })?;
    Ok(Executor {
        started: started_rx,
        thread,
    })
}

/// The fault of a call in which the host panicked, with the panic's message.
fn host_panicked(panic: &(dyn std::any::Any + Send)) -> Fault {
    let said = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into());
    tracing::error!("the host panicked in a plugin call: {said}");
    Fault {
        kind: FaultKind::Trap,
        message: format!("the host panicked during the call: {said}"),
    }
}
