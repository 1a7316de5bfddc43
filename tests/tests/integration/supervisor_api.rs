//! The in-process plugin host API other subsystems call plugins through: calls reach the
//! live instance, a faulting call poisons and replaces it, and calls while a plugin is down
//! answer `unavailable` instead of blocking.

use std::sync::Arc;
use std::time::Duration;

use cairn::config::HostConfig;
use cairn::plugin::PluginHost;
use cairn::plugin::capabilities::HostServices;
use cairn::plugin::kv::PluginKv;
use cairn::plugin::resolve;
use cairn::plugin::runtime::{CallError, FaultKind};
use cairn::plugin::status::{PluginState, StatusLog};
use cairn::store::host::SqliteHost;
use cairn_tests::{PluginDir, poke, shared_cache_dir};
use cairn_vocab::channel::OutboundMessage;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_reach_plugins_and_a_fault_replaces_the_instance() {
    let dir = PluginDir::new();
    dir.plugin("steady", "channel", "steady", "capabilities: {kv: true}\n");
    dir.plugin("hostile", "handler", "hostile", "config: {mode: ok}\n");
    let data = tempfile::tempdir().expect("data");
    let mut config = HostConfig {
        data_dir: data.path().to_path_buf(),
        ..HostConfig::default()
    };
    config.runtime.cache_dir = shared_cache_dir();
    config.supervisor.backoff_initial_ms = 300;
    config.supervisor.backoff_max_ms = 300;
    config.supervisor.restart_budget = 1;

    let set = resolve::load(dir.path()).expect("valid plugin dir");
    let host_db = Arc::new(SqliteHost::open(data.path()).expect("host.db"));
    let services = Arc::new(HostServices {
        kv: Arc::new(PluginKv::new(host_db.clone(), config.kv.clone())),
        inbox: None,
        events: None,
        interrupt: None,
        stop: None,
        memory: None,
        llm: None,
        memory_writes: Default::default(),
    });
    let status = Arc::new(StatusLog::new(host_db));
    let host = PluginHost::start(&set, &config.plugin_host(), services, status)
        .await
        .expect("host starts");

    let steady = host.handle("steady").expect("steady handle").clone();
    let message = OutboundMessage {
        conversation: "c1".into(),
        recipient: None,
        payload: r#"{"text":"hi"}"#.into(),
        in_reply_to: vec![1],
    };
    steady
        .call(move |instance| instance.deliver(&message))
        .await
        .expect("deliver reaches a healthy channel");

    // A handler has no `deliver`: the call is refused, the instance stays healthy.
    let hostile = host.handle("hostile").expect("hostile handle").clone();
    let refused = hostile
        .call(|instance| {
            instance.deliver(&OutboundMessage {
                conversation: "c".into(),
                recipient: None,
                payload: "{}".into(),
                in_reply_to: vec![],
            })
        })
        .await;
    assert!(
        matches!(refused, Err(CallError::NotExported(_))),
        "{refused:?}"
    );

    // The hostile handler traps on every event: the call reports the trap...
    let trapped = hostile.call(|instance| instance.on_event(&poke(1))).await;
    match trapped {
        Err(CallError::Fault(fault)) => assert_eq!(fault.kind, FaultKind::Trap),
        other => panic!("expected a trap, got {other:?}"),
    }
    // ...and while it waits out its backoff, calls answer "restarting" at once.
    let during_backoff = hostile.call(|instance| instance.on_event(&poke(2))).await;
    assert!(
        during_backoff.as_ref().is_err_and(CallError::is_restarting),
        "{during_backoff:?}"
    );
    // After the backoff a fresh instance serves calls again (and traps again: budget 1 → quarantine).
    tokio::time::sleep(Duration::from_millis(600)).await;
    let fresh = hostile.call(|instance| instance.on_event(&poke(3))).await;
    assert!(
        matches!(fresh, Err(CallError::Fault(_))),
        "a fresh instance ran the call: {fresh:?}"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let quarantined = hostile.call(|instance| instance.on_event(&poke(4))).await;
    assert!(
        matches!(
            &quarantined,
            Err(CallError::NotRunning {
                state: PluginState::Quarantined,
                ..
            })
        ),
        "{quarantined:?}"
    );

    // The other plugin never noticed.
    steady
        .call(|instance| instance.poll())
        .await
        .expect("the healthy channel still serves calls");

    // A host function that panics mid-call (a bug of ours) ends the instance as a fault,
    // seen by the supervisor, instead of silently killing the plugin's thread; a fresh
    // instance serves the next call.
    let panicked = steady
        .call(|_instance| -> Result<(), CallError> { panic!("a bug in a host function") })
        .await;
    assert!(panicked.is_err(), "{panicked:?}");
    tokio::time::sleep(Duration::from_millis(600)).await;
    steady
        .call(|instance| instance.poll())
        .await
        .expect("a fresh instance after the panic");
    host.stop().await;
}
