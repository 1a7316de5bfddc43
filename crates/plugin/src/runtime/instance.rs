//! A live plugin instance: every export call runs under the plugin's epoch deadline and
//! converts between the vocabulary and the WIT types at the boundary.

use super::*;

/// A live plugin instance. Every call runs under the plugin's epoch deadline; a call that
/// faults leaves the instance poisoned, and the caller must drop it.
pub struct PluginInstance {
    pub(super) store: Store<PluginContext>,
    pub(super) exports: Exports,
    pub(super) deadline: Deadline,
}

/// The error a plugin answered with, as a call's error: the host's outage when a host store
/// it called during the call was away (`store_away`), else the plugin's own.
fn refusal(error: cairn_vocab::Error, store_away: Option<String>) -> CallError {
    match store_away {
        Some(cause) => CallError::StoreAway { error, cause },
        None => CallError::Plugin(error),
    }
}

impl PluginInstance {
    fn run<T>(
        &mut self,
        call: impl FnOnce(&Exports, &mut Store<PluginContext>) -> Option<bindings::Call<T>>,
    ) -> Result<T, CallError> {
        self.store.set_epoch_deadline(self.deadline.ticks);
        self.store.data().log().forget_stderr();
        let world = match &self.exports {
            Exports::Channel(_) => World::Channel,
            Exports::Handler(_) => World::Handler,
            Exports::MemoryBackend(_) => World::MemoryBackend,
        };
        let outcome = call(&self.exports, &mut self.store);
        let store_away = self.store.data().take_store_away();
        match outcome {
            None => Err(CallError::NotExported(world)),
            Some(Ok(Ok(value))) => Ok(value),
            Some(Ok(Err(error))) => Err(refusal(convert::from_wit_error(error), store_away)),
            Some(Err(trap)) => Err(self.fault(&trap)),
        }
    }

    /// A trap as the fault it was.
    fn fault(&self, trap: &wasmtime::Error) -> CallError {
        CallError::Fault(classify(trap, self.store.data()))
    }

    /// Call `init` with the manifest's config as JSON.
    pub fn init(&mut self, config: &str) -> Result<(), CallError> {
        self.run(|exports, store| {
            Some(match exports {
                Exports::Channel(c) => c.init(store, config),
                Exports::Handler(h) => h.init(store, config),
                Exports::MemoryBackend(m) => m.init(store, config),
            })
        })
    }

    /// [`PluginInstance::init`] with the instance's lines held back from the log (see
    /// [`crate::logging::Hush`]): for a second instance whose `init` says what the first's did.
    pub fn init_hushed(&mut self, config: &str) -> Result<(), CallError> {
        let hush = self.store.data().hush().clone();
        hush.set(true);
        let initialised = self.init(config);
        hush.set(false);
        initialised
    }

    /// Call a channel's `poll`.
    pub fn poll(&mut self) -> Result<(), CallError> {
        self.run(|exports, store| match exports {
            Exports::Channel(c) => Some(c.poll(store)),
            _ => None,
        })
    }

    /// Call a channel's `deliver`.
    pub fn deliver(&mut self, message: &OutboundMessage) -> Result<(), CallError> {
        let message = convert::to_wit_outbound(message);
        self.run(|exports, store| match exports {
            Exports::Channel(c) => Some(c.deliver(store, &message)),
            _ => None,
        })
    }

    /// Call a channel's `handle-webhook`.
    pub fn handle_webhook(&mut self, request: &HttpRequest) -> Result<HttpResponse, CallError> {
        let request = convert::to_wit_request(request);
        self.run(|exports, store| match exports {
            Exports::Channel(c) => Some(
                c.handle_webhook(store, &request)
                    .map(|response| Ok(convert::from_wit_response(response))),
            ),
            _ => None,
        })
    }

    /// Call a handler's `on-event`. The event is borrowed: its strings are copied straight
    /// into the guest.
    pub fn on_event(&mut self, event: &Event) -> Result<(), CallError> {
        self.store.data_mut().set_handling_depth(Some(event.depth));
        let view = convert::event_view(event);
        let outcome = self.run(|exports, store| match exports {
            Exports::Handler(h) => Some(h.on_event(store, &view)),
            _ => None,
        });
        self.store.data_mut().set_handling_depth(None);
        outcome
    }

    /// The longest one call may run (the manifest's `limits.timeout_ms`).
    pub fn timeout(&self) -> Duration {
        self.deadline.timeout
    }

    /// Whether the plugin takes a run of events in one call: a handler of API 0.2.1 or later,
    /// which exports `on-events`.
    pub fn takes_runs(&self) -> bool {
        matches!(&self.exports, Exports::Handler(h) if h.takes_runs())
    }

    /// Call a handler's `on-events` with a run of events, in one call under one epoch
    /// deadline (the caller keeps a run well inside it). Events emitted meanwhile count as
    /// emitted while handling the deepest of the run's events, so an emit loop is cut no
    /// later than one event at a time would cut it.
    pub fn on_events(&mut self, events: &[Event]) -> Result<(), RunStopped> {
        let Some(depth) = events.iter().map(|event| event.depth).max() else {
            return Ok(());
        };
        let views: Vec<_> = events.iter().map(convert::event_view).collect();
        self.store.data_mut().set_handling_depth(Some(depth));
        self.store.set_epoch_deadline(self.deadline.ticks);
        self.store.data().log().forget_stderr();
        let outcome = match &self.exports {
            Exports::Handler(h) => h.on_events(&mut self.store, &views),
            _ => None,
        };
        self.store.data_mut().set_handling_depth(None);
        let store_away = self.store.data().take_store_away();
        let stopped = |handled: usize, error: CallError| Err(RunStopped { handled, error });
        match outcome {
            None => stopped(0, CallError::NotExported(World::Handler)),
            Some(Ok(Ok(()))) => Ok(()),
            // A plugin claiming to have handled the whole run while failing has the last
            // event retried alone: delivery stays at least once.
            Some(Ok(Err(failure))) => stopped(
                (failure.handled as usize).min(events.len() - 1),
                refusal(convert::from_wit_error(failure.error), store_away),
            ),
            Some(Err(trap)) => stopped(0, self.fault(&trap)),
        }
    }

    /// Call a memory backend's `store-entry`.
    pub fn memory_store(&mut self, entry: &NewMemory) -> Result<String, CallError> {
        let entry = convert::to_wit_new(entry);
        self.run(|exports, store| match exports {
            Exports::MemoryBackend(m) => Some(m.store_entry(store, &entry)),
            _ => None,
        })
    }

    /// Call a memory backend's `recall`.
    pub fn memory_recall(&mut self, query: &RecallQuery) -> Result<Vec<RecallHit>, CallError> {
        let query = convert::to_wit_query(query);
        self.run(|exports, store| match exports {
            Exports::MemoryBackend(m) => Some(
                m.recall(store, &query)
                    .map(|hits| hits.map(|h| h.into_iter().map(convert::from_wit_hit).collect())),
            ),
            _ => None,
        })
    }

    /// Call a memory backend's `get`.
    pub fn memory_get(&mut self, id: &str) -> Result<MemoryEntry, CallError> {
        self.run(|exports, store| match exports {
            Exports::MemoryBackend(m) => Some(
                m.get(store, id)
                    .map(|entry| entry.map(convert::from_wit_entry)),
            ),
            _ => None,
        })
    }

    /// Call a memory backend's `list-entries`.
    pub fn memory_list(
        &mut self,
        scope: &Scope,
        kinds: &[MemoryKind],
        limit: u32,
    ) -> Result<Vec<MemoryEntry>, CallError> {
        let scope = convert::to_wit_scope(scope);
        let kinds: Vec<_> = kinds.iter().map(|k| convert::to_wit_kind(*k)).collect();
        self.run(|exports, store| match exports {
            Exports::MemoryBackend(m) => {
                Some(m.list_entries(store, &scope, &kinds, limit).map(|entries| {
                    entries.map(|e| e.into_iter().map(convert::from_wit_entry).collect())
                }))
            }
            _ => None,
        })
    }

    /// Call a memory backend's `forget`.
    pub fn memory_forget(&mut self, id: &str) -> Result<bool, CallError> {
        self.run(|exports, store| match exports {
            Exports::MemoryBackend(m) => Some(m.forget(store, id)),
            _ => None,
        })
    }

    /// Call a memory backend's `count`.
    pub fn memory_count(&mut self, scope: &Scope) -> Result<u64, CallError> {
        let scope = convert::to_wit_scope(scope);
        self.run(|exports, store| match exports {
            Exports::MemoryBackend(m) => Some(m.count(store, &scope)),
            _ => None,
        })
    }

    /// Call a memory backend's `health`.
    pub fn memory_health(&mut self) -> Result<String, CallError> {
        self.run(|exports, store| match exports {
            Exports::MemoryBackend(m) => Some(m.health(store)),
            _ => None,
        })
    }
}

/// Why a run of events given to `on-events` stopped short.
#[derive(Debug)]
pub struct RunStopped {
    /// How many events, from the first, the plugin handled; 0 after a fault, since which
    /// event faulted is not known.
    pub handled: usize,
    /// Why the next one was not handled.
    pub error: CallError,
}
