//! A plugin whose host call fails because a host store is away for a moment (a full disk,
//! a database outage) fails its call through no fault of its own: the call says so, and
//! its events wait for the store instead of being dead-lettered.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cairn::config::HostConfig;
use cairn::journal::{Journal, JournalConfig, NewEvent};
use cairn::plugin::PluginHost;
use cairn::plugin::capabilities::HostServices;
use cairn::plugin::kv::PluginKv;
use cairn::plugin::resolve;
use cairn::plugin::runtime::CallError;
use cairn::plugin::status::StatusLog;
use cairn::store::StorageError;
use cairn::store::host::{KvStore, SqliteHost};
use cairn::store::writer::Receipt;
use cairn_tests::{PluginDir, poke, shared_cache_dir};

/// host.db's kv whose writes fail as on a full disk while `full` is set.
struct FillingKv {
    inner: Arc<SqliteHost>,
    full: AtomicBool,
}

impl FillingKv {
    fn refused<T: Send + 'static>() -> Receipt<T> {
        Receipt::ready(Err(StorageError::DiskFull(
            "no space left on device".into(),
        )))
    }
}

impl KvStore for FillingKv {
    fn get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        self.inner.get(plugin, key)
    }
    fn set(&self, plugin: &str, key: &str, value: Vec<u8>) -> Receipt<()> {
        if self.full.load(Ordering::SeqCst) {
            return Self::refused();
        }
        self.inner.set(plugin, key, value)
    }
    fn delete(&self, plugin: &str, key: &str) -> Receipt<bool> {
        if self.full.load(Ordering::SeqCst) {
            return Self::refused();
        }
        self.inner.delete(plugin, key)
    }
    fn list_keys(&self, plugin: &str, prefix: &str) -> Result<Vec<String>, StorageError> {
        self.inner.list_keys(plugin, prefix)
    }
    fn usage(&self, plugin: &str, key: Option<&str>) -> Result<u64, StorageError> {
        self.inner.usage(plugin, key)
    }
}

/// The `counter` plugin (`extra` added to its manifest) started over host.db's kv, which
/// fails writes as on a full disk while its `full` is set (from the start when `full`).
struct CounterOverFillingKv {
    /// The plugin host running the counter.
    host: PluginHost,
    /// The counter's handle.
    counter: cairn::plugin::supervisor::PluginHandle,
    /// Its kv.
    kv: Arc<FillingKv>,
    /// host.db, where the kv is kept.
    host_db: Arc<SqliteHost>,
    _dir: PluginDir,
    data: tempfile::TempDir,
}

impl CounterOverFillingKv {
    async fn start(extra: &str, full: bool, edit: impl FnOnce(&mut HostConfig)) -> Self {
        let dir = PluginDir::new();
        dir.plugin("counter", "handler", "counter", extra);
        let data = tempfile::tempdir().expect("data");
        let mut config = HostConfig {
            data_dir: data.path().to_path_buf(),
            ..HostConfig::default()
        };
        config.runtime.cache_dir = shared_cache_dir();
        edit(&mut config);
        let host_db = Arc::new(SqliteHost::open(data.path()).expect("host.db"));
        let kv = Arc::new(FillingKv {
            inner: host_db.clone(),
            full: AtomicBool::new(full),
        });
        let services = Arc::new(HostServices {
            kv: Arc::new(PluginKv::new(kv.clone(), config.kv.clone())),
            inbox: None,
            events: None,
            interrupt: None,
            stop: None,
            memory: None,
            llm: None,
            memory_writes: Default::default(),
        });
        let status = Arc::new(StatusLog::new(host_db.clone()));
        let set = resolve::load(dir.path()).expect("valid plugin dir");
        let host = PluginHost::start(&set, &config.plugin_host(), services, status)
            .await
            .expect("host starts");
        let counter = host.handle("counter").expect("counter").clone();
        Self {
            host,
            counter,
            kv,
            host_db,
            _dir: dir,
            data,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_failing_on_a_full_disk_waits_for_space_and_nothing_is_dead_lettered() {
    let subscribes = "events: {subscribes: ['test.*']}\ncapabilities: {kv: true}\n";
    let CounterOverFillingKv {
        host,
        counter,
        kv,
        host_db,
        data,
        _dir,
    } = CounterOverFillingKv::start(subscribes, false, |_| {}).await;

    // The call says whose failure it was.
    kv.full.store(true, Ordering::SeqCst);
    let refused = counter.call(|instance| instance.on_event(&poke(1))).await;
    match &refused {
        Err(error @ CallError::StoreAway { cause, .. }) => {
            assert!(error.is_store_away());
            assert!(cause.contains("the disk is full"), "{cause}");
        }
        other => panic!("expected the store's outage, got {other:?}"),
    }

    // Deliveries wait for the store, however few attempts they may spend.
    let journal_config = JournalConfig {
        max_attempts: 2,
        backoff_initial_ms: 10,
        backoff_max_ms: 20,
        ..JournalConfig::default()
    };
    let journal = Arc::new(Journal::open(data.path(), journal_config).expect("journal"));
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let serving = tokio::spawn(cairn::journal::dispatch::serve(
        journal.clone(),
        Arc::new(cairn::journal::plugin_subscriber::PluginSubscriber::new(
            counter.clone(),
        )),
        vec!["test.*".to_string()],
        stopping,
    ));
    let deadline = Instant::now() + Duration::from_secs(60);
    while journal.cursor("counter").expect("cursor").is_none() {
        assert!(Instant::now() < deadline, "the counter never subscribed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut head = 0;
    for _ in 0..5 {
        let event = NewEvent {
            topic: "test.poke".into(),
            payload: "{}".into(),
            source: "test".into(),
            ..NewEvent::default()
        };
        head = journal.append(event).await.expect("append");
    }
    // Twenty times what two attempts at 10–20 ms take.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let cursor = journal.cursor("counter").expect("cursor").unwrap_or(0);
    assert!(cursor < head, "the counter took events it could not count");
    kv.full.store(false, Ordering::SeqCst);
    while journal.cursor("counter").expect("cursor").unwrap_or(0) < head {
        assert!(Instant::now() < deadline, "the counter never caught up");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = stop.send(true);
    let _ = serving.await;
    host.stop().await;

    let counted = host_db
        .get("counter", "events")
        .expect("kv")
        .expect("a count");
    assert_eq!(
        String::from_utf8_lossy(&counted),
        "5",
        "each event counted once"
    );
    let journal_db = rusqlite::Connection::open(data.path().join("journal.db")).expect("open");
    let dead: i64 = journal_db
        .query_row("SELECT count(*) FROM dead_letters", [], |r| r.get(0))
        .expect("count");
    assert_eq!(dead, 0, "a full disk dead-lettered the plugin's events");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_init_failing_on_a_full_disk_waits_for_space_without_spending_the_restart_budget() {
    // The disk is full before the plugin starts: its `init` counts the start in kv. One
    // restart is allowed a minute: a second failed start counted as a fault quarantines.
    let CounterOverFillingKv {
        host,
        counter,
        kv,
        host_db,
        data: _data,
        _dir,
    } = CounterOverFillingKv::start("capabilities: {kv: true}\n", true, |config| {
        config.supervisor.restart_budget = 1;
        config.supervisor.backoff_initial_ms = 10;
        config.supervisor.backoff_max_ms = 40;
    })
    .await;

    // Many times what the budget allows at 10–40 ms a wait.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let waiting = counter.call(|instance| instance.on_event(&poke(1))).await;
    assert!(
        matches!(&waiting, Err(error) if error.is_restarting()),
        "while the disk is full the plugin waits to start again, not quarantined: {waiting:?}"
    );

    kv.full.store(false, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match counter.call(|instance| instance.on_event(&poke(2))).await {
            Ok(()) => break,
            Err(error) if error.is_restarting() => {
                assert!(Instant::now() < deadline, "the counter never started");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(other) => panic!("once there is space the counter starts: {other}"),
        }
    }
    host.stop().await;
    let starts = host_db
        .get("counter", "starts")
        .expect("kv")
        .expect("a count");
    assert_eq!(String::from_utf8_lossy(&starts), "1", "one start counted");
}
