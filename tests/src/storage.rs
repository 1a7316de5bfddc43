//! The end-to-end tests once more on PostgreSQL: with `CAIRN_TEST_STORAGE=postgres`, every
//! host and command a test runs on a data dir gets `CAIRN_STORAGE` naming a database of
//! that data dir's own on the test server, so each test's hosts share what the SQLite run
//! would have kept in the data dir. Tests that read a data dir's SQLite files directly say
//! so with [`reads_sqlite_files`] and are skipped on that run.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use cairn::store::pg::cluster::TestCluster;

/// The PostgreSQL test server, when this run puts the stores on PostgreSQL
/// (`CAIRN_TEST_STORAGE=postgres`) and one can be had.
fn cluster() -> Option<&'static TestCluster> {
    if std::env::var("CAIRN_TEST_STORAGE").ok().as_deref() != Some("postgres") {
        return None;
    }
    TestCluster::shared()
}

/// Whether this run keeps the hosts' stores on PostgreSQL.
pub fn on_postgres() -> bool {
    cluster().is_some()
}

/// The `CAIRN_STORAGE` of hosts and commands on `data` in this run: None on SQLite (the
/// default), else the connection string of the data dir's own database.
pub fn for_data_dir(data: &Path) -> Option<String> {
    let cluster = cluster()?;
    static DATABASES: OnceLock<Mutex<HashMap<PathBuf, String>>> = OnceLock::new();
    let mut databases = DATABASES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    Some(
        databases
            .entry(data.to_path_buf())
            .or_insert_with(|| cluster.fresh_database().redacted().to_string())
            .clone(),
    )
}

/// True (after saying so) when this run is on PostgreSQL: the calling test reads a data
/// dir's SQLite files directly and has nothing to check there.
pub fn reads_sqlite_files(test: &str) -> bool {
    if on_postgres() {
        eprintln!("skipped on PostgreSQL: {test} reads the data dir's SQLite files");
        return true;
    }
    false
}

/// Memory on `data`'s storage in this run — its `memory.db`, or its database on
/// PostgreSQL — as a host and `cairn memory` on that data dir see it.
pub fn open_memory(
    data: &Path,
    config: cairn::memory::MemoryConfig,
) -> std::sync::Arc<cairn::memory::LocalMemory> {
    let Some(url) = for_data_dir(data) else {
        return cairn::memory::LocalMemory::open(data, config).expect("open memory");
    };
    let url = url.parse().expect("the test database's URL");
    let store = std::sync::Arc::new(
        cairn::store::pg::memory::PgMemory::connect(&url).expect("connect memory"),
    );
    cairn::memory::LocalMemory::over(data, config, store).expect("open memory")
}

/// `CAIRN_STORAGE` for a command a test builds itself on `data` (none on SQLite).
pub fn env_for(data: &Path) -> Option<(&'static str, String)> {
    for_data_dir(data).map(|storage| ("CAIRN_STORAGE", storage))
}
