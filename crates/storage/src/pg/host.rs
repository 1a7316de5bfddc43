//! The host's own state on PostgreSQL, shared by every host on the database: plugin
//! key/value state, the sleep state and schedule ticks are the agent's, one for all hosts;
//! each host records its run, its plugins' states and their LLM use under its own id. A
//! schedule tick is claimed in one statement ([`LifecycleStore::claim_fired`]), so hosts
//! racing for it fire it once.

use cairn_vocab::plugin::{HostRun, LlmUsage, PluginKind, PluginState, PluginStatus, StatusReport};
use cairn_vocab::session::SleepState;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use postgres::{IsolationLevel, Row, Transaction};

use super::{PgPool, PgUrl, millis};
use crate::host::{KvStore, LifecycleStore, StatusStore};
use crate::writer::Receipt;
use crate::{Migrations, StorageError, now_ms};

/// Migrations of the host's tables on PostgreSQL.
pub const MIGRATIONS: Migrations = Migrations {
    name: "host",
    scripts: &[
        include_str!("../../../../migrations/postgres/host/0001_init.sql"),
        include_str!("../../../../migrations/postgres/host/0002_seen_at.sql"),
        include_str!("../../../../migrations/postgres/host/0003_stopping.sql"),
        include_str!("../../../../migrations/postgres/host/0004_llm_calls.sql"),
    ],
};

/// How often a running host says it is alive. A run not seen for [`STALE_AFTER`] has
/// ended without a clean stop.
pub const HEARTBEAT: Duration = Duration::from_secs(2);

/// How long a host may go unseen before its run counts as ended: three missed heartbeats.
pub const STALE_AFTER: Duration = Duration::from_secs(6);

/// Connections the host state keeps.
const CONNECTIONS: usize = 2;

/// The host's tables on a PostgreSQL database, recording this host's run as `host`.
pub struct PgHost {
    pool: PgPool,
    /// This host's id on the database (see [`super::holder_id`]).
    host: String,
    /// Dropped with the store, which stops the thread saying this host is alive.
    _heartbeat: mpsc::Sender<()>,
}

impl PgHost {
    /// Connect to `url` and migrate the host's tables; this host records its run under a
    /// new id of its own, and says it is alive every [`HEARTBEAT`] while the store lives.
    pub fn connect(url: &PgUrl) -> Result<Self, StorageError> {
        let pool = PgPool::connect_migrated(url, CONNECTIONS, "host-pg", &MIGRATIONS)?;
        let host = super::holder_id();
        let (stop, stopped) = mpsc::channel();
        let beating = (pool.clone(), host.clone());
        thread::Builder::new()
            .name("host-pg-heartbeat".into())
            .spawn(move || beat_until_dropped(&beating.0, &beating.1, &stopped))
            .map_err(|e| url.unreachable(&format!("cannot start the heartbeat thread: {e}")))?;
        Ok(Self {
            pool,
            host,
            _heartbeat: stop,
        })
    }
}

/// How long the run of a host that ended (cleanly or not) stays on record: each start of
/// a host is a new run, so without this the table would keep every restart.
const KEEP_ENDED_RUNS: Duration = Duration::from_secs(7 * 24 * 3600);

/// Forget the runs — with their plugins' states and LLM use — last seen before `before`
/// (ms), whether they stopped cleanly or not.
fn forget_runs_before(tx: &mut Transaction<'_>, before: i64) -> Result<(), StorageError> {
    let ended = "SELECT host_id FROM host_runs
                  WHERE coalesce(stopped_at, seen_at, started_at) < $1";
    for table in ["host_plugin_status", "host_llm_usage"] {
        tx.execute(
            &format!("DELETE FROM {table} WHERE host_id IN ({ended})"),
            &[&before],
        )?;
    }
    tx.execute(
        "DELETE FROM host_runs WHERE coalesce(stopped_at, seen_at, started_at) < $1",
        &[&before],
    )?;
    Ok(())
}

/// Note that `host` is alive every [`HEARTBEAT`] until `stopped` says stop.
fn beat_until_dropped(pool: &PgPool, host: &str, stopped: &mpsc::Receiver<()>) {
    while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(HEARTBEAT) {
        let host = host.to_string();
        let beat = pool
            .submit(move |tx| {
                tx.execute(
                    "UPDATE host_runs SET seen_at = $2 WHERE host_id = $1 AND stopped_at IS NULL",
                    &[&host, &now_ms()],
                )?;
                Ok(())
            })
            .wait();
        if let Err(e) = beat {
            tracing::warn!("cannot note that this host is alive: {e}");
        }
    }
}

impl KvStore for PgHost {
    fn get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        let (plugin, key) = (plugin.to_string(), key.to_string());
        self.pool.read(move |client| {
            Ok(client
                .query_opt(
                    "SELECT value FROM host_kv WHERE plugin_id = $1 AND key = $2",
                    &[&plugin, &key],
                )?
                .map(|row| row.get(0)))
        })
    }

    fn set(&self, plugin: &str, key: &str, value: Vec<u8>) -> Receipt<()> {
        let (plugin, key) = (plugin.to_string(), key.to_string());
        self.pool.submit(move |tx| {
            tx.execute(
                "INSERT INTO host_kv (plugin_id, key, value, updated_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (plugin_id, key) DO UPDATE SET value = excluded.value,
                     updated_at = excluded.updated_at",
                &[&plugin, &key, &value, &now_ms()],
            )?;
            Ok(())
        })
    }

    fn delete(&self, plugin: &str, key: &str) -> Receipt<bool> {
        let (plugin, key) = (plugin.to_string(), key.to_string());
        self.pool.submit(move |tx| {
            let removed = tx.execute(
                "DELETE FROM host_kv WHERE plugin_id = $1 AND key = $2",
                &[&plugin, &key],
            )?;
            Ok(removed > 0)
        })
    }

    fn list_keys(&self, plugin: &str, prefix: &str) -> Result<Vec<String>, StorageError> {
        let (plugin, prefix) = (plugin.to_string(), prefix.to_string());
        self.pool.read(move |client| {
            // `starts_with`, not LIKE: the prefix is literal. Sorted by byte as in SQLite.
            let rows = client.query(
                "SELECT key FROM host_kv WHERE plugin_id = $1 AND starts_with(key, $2)
                 ORDER BY key COLLATE \"C\"",
                &[&plugin, &prefix],
            )?;
            Ok(rows.iter().map(|row| row.get(0)).collect())
        })
    }

    fn usage(&self, plugin: &str, key: Option<&str>) -> Result<u64, StorageError> {
        let (plugin, key) = (plugin.to_string(), key.map(str::to_string));
        self.pool.read(move |client| {
            let bytes: i64 = client
                .query_one(
                    "SELECT COALESCE(SUM(octet_length(key) + octet_length(value)), 0)::bigint
                       FROM host_kv WHERE plugin_id = $1 AND ($2::text IS NULL OR key = $2)",
                    &[&plugin, &key],
                )?
                .get(0);
            Ok(bytes.max(0) as u64)
        })
    }
}

impl StatusStore for PgHost {
    fn begin_run(&self, pid: u32, plugins_dir: &str) -> Receipt<()> {
        let (host, plugins_dir) = (self.host.clone(), plugins_dir.to_string());
        let pid = i64::from(pid);
        self.pool.submit(move |tx| {
            forget_runs_before(tx, now_ms() - millis(KEEP_ENDED_RUNS))?;
            tx.execute(
                "DELETE FROM host_plugin_status WHERE host_id = $1",
                &[&host],
            )?;
            tx.execute("DELETE FROM host_llm_usage WHERE host_id = $1", &[&host])?;
            tx.execute(
                "INSERT INTO host_runs (host_id, pid, plugins_dir, started_at, stopped_at, seen_at)
                 VALUES ($1, $2, $3, $4, NULL, $4)
                 ON CONFLICT (host_id) DO UPDATE SET pid = excluded.pid,
                     plugins_dir = excluded.plugins_dir, started_at = excluded.started_at,
                     stopped_at = NULL, stopping_at = NULL, seen_at = excluded.seen_at",
                &[&host, &pid, &plugins_dir, &now_ms()],
            )?;
            Ok(())
        })
    }

    fn begin_stop(&self) -> Receipt<()> {
        let host = self.host.clone();
        self.pool.submit(move |tx| {
            tx.execute(
                "UPDATE host_runs SET stopping_at = $2 WHERE host_id = $1",
                &[&host, &now_ms()],
            )?;
            Ok(())
        })
    }

    fn end_run(&self) -> Receipt<()> {
        let host = self.host.clone();
        self.pool.submit(move |tx| {
            tx.execute(
                "UPDATE host_runs SET stopped_at = $2, stopping_at = NULL WHERE host_id = $1",
                &[&host, &now_ms()],
            )?;
            Ok(())
        })
    }

    fn record(&self, status: &PluginStatus) -> Receipt<()> {
        let (host, status) = (self.host.clone(), status.clone());
        self.pool.submit(move |tx| {
            tx.execute(
                "INSERT INTO host_plugin_status (host_id, plugin_id, version, kind, state,
                     restarts, faults, last_error, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                 ON CONFLICT (host_id, plugin_id) DO UPDATE SET version = excluded.version,
                     kind = excluded.kind, state = excluded.state, restarts = excluded.restarts,
                     faults = excluded.faults, last_error = excluded.last_error,
                     updated_at = excluded.updated_at",
                &[
                    &host,
                    &status.id,
                    &status.version,
                    &status.kind.as_str(),
                    &status.state.as_str(),
                    &i64::from(status.restarts),
                    &i64::from(status.faults),
                    &status.last_error,
                    &status.updated_at,
                ],
            )?;
            Ok(())
        })
    }

    fn record_llm_usage(&self, usage: &LlmUsage) -> Receipt<()> {
        let (host, usage) = (self.host.clone(), usage.clone());
        self.pool.submit(move |tx| {
            tx.execute(
                "INSERT INTO host_llm_usage (host_id, plugin_id, calls, tokens, refused, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (host_id, plugin_id) DO UPDATE SET calls = excluded.calls,
                     tokens = excluded.tokens, refused = excluded.refused,
                     updated_at = excluded.updated_at",
                &[
                    &host,
                    &usage.plugin_id,
                    &count_to_sql(usage.calls),
                    &count_to_sql(usage.tokens),
                    &count_to_sql(usage.refused),
                    &usage.updated_at,
                ],
            )?;
            Ok(())
        })
    }

    fn record_llm_call(&self, plugin: &str, started_at: i64, tokens: u64) -> Receipt<()> {
        let plugin = plugin.to_string();
        self.pool.submit(move |tx| {
            tx.execute(
                "INSERT INTO host_llm_calls (plugin_id, started_at, tokens) VALUES ($1, $2, $3)",
                &[&plugin, &started_at, &count_to_sql(tokens)],
            )?;
            tx.execute(
                "DELETE FROM host_llm_calls WHERE started_at < $1",
                &[&(started_at - crate::host::LLM_CALLS_KEPT_MS)],
            )?;
            Ok(())
        })
    }

    fn llm_calls_since(&self, plugin: &str, since: i64) -> Result<Vec<(i64, u64)>, StorageError> {
        let plugin = plugin.to_string();
        self.pool.read(move |client| {
            let rows = client.query(
                "SELECT started_at, tokens FROM host_llm_calls
                 WHERE plugin_id = $1 AND started_at >= $2 ORDER BY started_at",
                &[&plugin, &since],
            )?;
            Ok(rows
                .iter()
                .map(|row| (row.get::<_, i64>(0), row.get::<_, i64>(1).max(0) as u64))
                .collect())
        })
    }

    fn report(&self) -> Result<StatusReport, StorageError> {
        let host = self.host.clone();
        self.pool.read(move |client| {
            // One snapshot for the run and its plugins.
            let mut tx = client
                .build_transaction()
                .isolation_level(IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()?;
            let report = read_report(&mut tx, &host)?;
            tx.commit()?;
            Ok(report)
        })
    }

    fn live_channels(&self) -> Result<Vec<String>, StorageError> {
        let seen_since = now_ms() - millis(STALE_AFTER);
        self.pool.read(move |client| {
            Ok(client
                .query(
                    "SELECT p.plugin_id FROM host_plugin_status p
                       JOIN host_runs r ON r.host_id = p.host_id
                      WHERE p.kind = 'channel' AND r.stopped_at IS NULL AND r.seen_at >= $1
                      GROUP BY p.plugin_id ORDER BY p.plugin_id COLLATE \"C\"",
                    &[&seen_since],
                )?
                .iter()
                .map(|row| row.get(0))
                .collect())
        })
    }
}

/// The run of host `own` if it has one, else the most recently started run of any host;
/// with that host's plugins and their LLM use.
fn read_report(tx: &mut Transaction<'_>, own: &str) -> Result<StatusReport, StorageError> {
    let run = tx.query_opt(
        "SELECT host_id, pid, plugins_dir, started_at, stopped_at, seen_at, stopping_at
           FROM host_runs
         ORDER BY (host_id = $1) DESC, started_at DESC, host_id LIMIT 1",
        &[&own],
    )?;
    let host_id: String = run
        .as_ref()
        .map_or_else(|| own.to_string(), |row| row.get(0));
    let plugins = tx
        .query(
            "SELECT plugin_id, version, kind, state, restarts, faults, last_error, updated_at
             FROM host_plugin_status WHERE host_id = $1 ORDER BY plugin_id COLLATE \"C\"",
            &[&host_id],
        )?
        .iter()
        .map(status_from)
        .collect::<Result<Vec<_>, _>>()?;
    let llm_usage = tx
        .query(
            "SELECT plugin_id, calls, tokens, refused, updated_at FROM host_llm_usage
             WHERE host_id = $1 ORDER BY plugin_id COLLATE \"C\"",
            &[&host_id],
        )?
        .iter()
        .map(usage_from)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(StatusReport {
        host: run.as_ref().map(run_from).transpose()?,
        plugins,
        llm_usage,
    })
}

/// A `host_runs` row (host_id, pid, plugins_dir, started_at, stopped_at, seen_at,
/// stopping_at).
fn run_from(row: &Row) -> Result<HostRun, StorageError> {
    Ok(HostRun {
        pid: count_from_sql(row.get(1), "pid")?,
        plugins_dir: row.get(2),
        started_at: row.get(3),
        stopped_at: row.get(4),
        last_seen: row.get(5),
        stopping_since: row.get(6),
    })
}

/// A `host_plugin_status` row, from plugin_id on.
fn status_from(row: &Row) -> Result<PluginStatus, StorageError> {
    Ok(PluginStatus {
        id: row.get(0),
        version: row.get(1),
        kind: named(row.get(2), PluginKind::parse, "plugin kind")?,
        state: named(row.get(3), PluginState::parse, "plugin state")?,
        restarts: count_from_sql(row.get(4), "restarts")?,
        faults: count_from_sql(row.get(5), "faults")?,
        last_error: row.get(6),
        updated_at: row.get(7),
    })
}

/// A `host_llm_usage` row, from plugin_id on.
fn usage_from(row: &Row) -> Result<LlmUsage, StorageError> {
    Ok(LlmUsage {
        plugin_id: row.get(0),
        calls: count_from_sql(row.get(1), "calls")?,
        tokens: count_from_sql(row.get(2), "tokens")?,
        refused: count_from_sql(row.get(3), "refused")?,
        updated_at: row.get(4),
    })
}

/// The value `name` stands for, or an error naming it as an unknown `what`.
fn named<T>(name: &str, parse: fn(&str) -> Option<T>, what: &str) -> Result<T, StorageError> {
    parse(name).ok_or_else(|| StorageError::Postgres(format!("unknown {what} `{name}`")))
}

/// A count as a BIGINT column keeps it (saturating: no count gets that high).
fn count_to_sql(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// A BIGINT column as the unsigned count `what`; an error when it does not fit.
fn count_from_sql<T: TryFrom<i64>>(value: i64, what: &str) -> Result<T, StorageError> {
    T::try_from(value).map_err(|_| StorageError::Postgres(format!("{what} out of range: {value}")))
}

impl LifecycleStore for PgHost {
    fn sleep_state(&self) -> Result<SleepState, StorageError> {
        self.pool.read(|client| {
            let rows = client.query("SELECT key, value FROM host_lifecycle_state", &[])?;
            Ok(SleepState {
                asleep: state_value(&rows, "asleep") == Some("true"),
                interrupted: state_value(&rows, "interrupted") == Some("true"),
                last_activity: state_value(&rows, "last_activity").and_then(|v| v.parse().ok()),
            })
        })
    }

    fn set_sleep_state(&self, state: SleepState) -> Receipt<()> {
        self.pool.submit(move |tx| {
            let mut values = vec![
                ("asleep", state.asleep.to_string()),
                ("interrupted", state.interrupted.to_string()),
            ];
            if let Some(at) = state.last_activity {
                values.push(("last_activity", at.to_string()));
            }
            for (key, value) in &values {
                tx.execute(
                    "INSERT INTO host_lifecycle_state (key, value) VALUES ($1, $2)
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    &[key, value],
                )?;
            }
            Ok(())
        })
    }

    fn last_fired(&self, plugin: &str, name: &str) -> Result<Option<i64>, StorageError> {
        let (plugin, name) = (plugin.to_string(), name.to_string());
        self.pool.read(move |client| {
            Ok(client
                .query_opt(
                    "SELECT last_fired_at FROM host_schedule_state
                     WHERE plugin_id = $1 AND name = $2",
                    &[&plugin, &name],
                )?
                .map(|row| row.get(0)))
        })
    }

    fn record_fired(&self, plugin: &str, name: &str, at_ms: i64) -> Receipt<()> {
        let (plugin, name) = (plugin.to_string(), name.to_string());
        self.pool.submit(move |tx| {
            tx.execute(
                "INSERT INTO host_schedule_state (plugin_id, name, last_fired_at)
                 VALUES ($1, $2, $3)
                 ON CONFLICT (plugin_id, name) DO UPDATE SET last_fired_at = excluded.last_fired_at",
                &[&plugin, &name, &at_ms],
            )?;
            Ok(())
        })
    }

    fn claim_fired(&self, plugin: &str, name: &str, at_ms: i64) -> Receipt<bool> {
        let (plugin, name) = (plugin.to_string(), name.to_string());
        self.pool.submit(move |tx| {
            // One statement: a host racing for the same tick waits on the row's lock, then
            // sees it claimed (the WHERE is false) and changes nothing.
            let changed = tx.execute(
                "INSERT INTO host_schedule_state (plugin_id, name, last_fired_at)
                 VALUES ($1, $2, $3)
                 ON CONFLICT (plugin_id, name) DO UPDATE SET last_fired_at = excluded.last_fired_at
                 WHERE host_schedule_state.last_fired_at < excluded.last_fired_at",
                &[&plugin, &name, &at_ms],
            )?;
            Ok(changed > 0)
        })
    }
}

/// The value of `key` among `host_lifecycle_state` rows, if set.
fn state_value<'a>(rows: &'a [Row], key: &str) -> Option<&'a str> {
    rows.iter()
        .find(|row| row.get::<_, &str>(0) == key)
        .map(|row| row.get(1))
}

#[cfg(test)]
mod tests {
    use std::sync::Barrier;
    use std::time::Duration;

    use super::super::cluster::TestCluster;
    use super::*;

    fn database() -> Option<PgUrl> {
        TestCluster::shared().map(TestCluster::fresh_database)
    }

    fn status(id: &str, state: PluginState) -> PluginStatus {
        PluginStatus {
            id: id.into(),
            version: "1.0.0".into(),
            kind: PluginKind::Handler,
            state,
            restarts: 2,
            faults: 3,
            last_error: Some("trap".into()),
            updated_at: 42,
        }
    }

    fn usage(plugin: &str, calls: u64) -> LlmUsage {
        LlmUsage {
            plugin_id: plugin.into(),
            calls,
            tokens: calls * 100,
            refused: 1,
            updated_at: 43,
        }
    }

    #[test]
    fn plugins_see_only_their_own_keys_and_values_persist() {
        let Some(url) = database() else { return };
        let host = PgHost::connect(&url).expect("connect");
        host.set("a", "count", b"1".to_vec()).wait().expect("set");
        host.set("a", "count", b"2".to_vec())
            .wait()
            .expect("overwrite");
        host.set("a", "other", b"x".to_vec()).wait().expect("set");
        host.set("b", "count", b"9".to_vec()).wait().expect("set");
        drop(host);
        let host = PgHost::connect(&url).expect("another host");
        assert_eq!(host.get("a", "count").expect("get"), Some(b"2".to_vec()));
        assert_eq!(host.get("b", "count").expect("get"), Some(b"9".to_vec()));
        assert_eq!(host.list_keys("a", "").expect("list"), ["count", "other"]);
        assert_eq!(host.list_keys("a", "co").expect("list"), ["count"]);
        assert!(host.delete("a", "count").wait().expect("delete"));
        assert!(!host.delete("a", "count").wait().expect("delete again"));
        assert_eq!(host.get("a", "count").expect("get"), None);
    }

    #[test]
    fn like_wildcards_in_prefixes_are_literal_and_keys_sort_by_byte() {
        let Some(url) = database() else { return };
        let host = PgHost::connect(&url).expect("connect");
        for key in ["100%", "1000", "a_b", "aXb", "A"] {
            host.set("a", key, b"1".to_vec()).wait().expect("set");
        }
        assert_eq!(host.list_keys("a", "100%").expect("list"), ["100%"]);
        assert_eq!(host.list_keys("a", "a_").expect("list"), ["a_b"]);
        assert_eq!(
            host.list_keys("a", "").expect("list"),
            ["100%", "1000", "A", "aXb", "a_b"]
        );
    }

    #[test]
    fn runs_that_ended_a_week_ago_are_forgotten_at_a_start() {
        let Some(url) = database() else { return };
        let old = PgHost::connect(&url).expect("old host");
        old.begin_run(1, "/old").wait().expect("begin");
        old.record(&status("p", PluginState::Running))
            .wait()
            .expect("record");
        let host = old.host.clone();
        // The old host dies (its heartbeat stops with it) ...
        drop(old);
        std::thread::sleep(Duration::from_millis(100));
        let new = PgHost::connect(&url).expect("new host");
        // ... eight days ago.
        let eight_days_ago = now_ms() - 8 * 24 * 3600 * 1000;
        new.pool
            .submit(move |tx| {
                tx.execute(
                    "UPDATE host_runs SET started_at = $2, seen_at = $2 WHERE host_id = $1",
                    &[&host, &eight_days_ago],
                )?;
                Ok(())
            })
            .wait()
            .expect("age the run");

        new.begin_run(2, "/new").wait().expect("begin");
        let counts = new
            .pool
            .read(|client| {
                let count =
                    |client: &mut postgres::Client, table: &str| -> Result<i64, StorageError> {
                        Ok(client
                            .query_one(&format!("SELECT count(*) FROM {table}"), &[])?
                            .get(0))
                    };
                Ok((
                    count(client, "host_runs")?,
                    count(client, "host_plugin_status")?,
                ))
            })
            .expect("count");
        assert_eq!(counts, (1, 0), "only the new run is left");
    }

    #[test]
    fn each_host_reports_its_own_run_and_plugins() {
        let Some(url) = database() else { return };
        let a = PgHost::connect(&url).expect("host a");
        let b = PgHost::connect(&url).expect("host b");
        a.begin_run(1, "/a").wait().expect("begin a");
        b.begin_run(2, "/b").wait().expect("begin b");
        a.record(&status("pa", PluginState::Running))
            .wait()
            .expect("record a");
        b.record(&status("pb", PluginState::Failed))
            .wait()
            .expect("record b");
        a.record_llm_usage(&usage("pa", 3)).wait().expect("usage a");
        let report = a.report().expect("report a");
        let run = report.host.expect("a's run");
        assert_eq!((run.pid, run.plugins_dir.as_str()), (1, "/a"));
        assert_eq!(report.plugins, [status("pa", PluginState::Running)]);
        assert_eq!(report.llm_usage, [usage("pa", 3)]);
        let report = b.report().expect("report b");
        assert_eq!(report.host.map(|run| run.pid), Some(2));
        assert_eq!(report.plugins, [status("pb", PluginState::Failed)]);
        assert!(report.llm_usage.is_empty());

        // A new run of b forgets b's plugins only; a's clean stop is a's only.
        std::thread::sleep(Duration::from_millis(5));
        b.begin_run(3, "/b").wait().expect("b again");
        a.end_run().wait().expect("end a");
        assert!(b.report().expect("report b").plugins.is_empty());
        let report = a.report().expect("report a");
        assert_eq!(report.plugins.len(), 1);
        assert!(report.host.expect("a's run").stopped_at.is_some());
        assert_eq!(
            b.report().expect("b").host.expect("b's run").stopped_at,
            None
        );

        // A host without a run of its own (`cairn status`) sees the latest started one.
        let reader = PgHost::connect(&url).expect("reader");
        assert_eq!(
            reader.report().expect("report").host.map(|run| run.pid),
            Some(3)
        );
    }

    #[test]
    fn an_unknown_plugin_state_is_an_error_not_a_panic() {
        let Some(url) = database() else { return };
        let host = PgHost::connect(&url).expect("connect");
        host.begin_run(1, "/p").wait().expect("begin");
        host.record(&status("p", PluginState::Running))
            .wait()
            .expect("record");
        host.pool
            .submit(|tx| {
                tx.execute("UPDATE host_plugin_status SET state = 'bogus'", &[])?;
                Ok(())
            })
            .wait()
            .expect("corrupt");
        let refused = host.report().expect_err("an unknown state");
        assert!(
            refused.to_string().contains("unknown plugin state `bogus`"),
            "{refused}"
        );
    }

    #[test]
    fn sleep_state_and_schedule_ticks_are_shared_by_hosts() {
        let Some(url) = database() else { return };
        let a = PgHost::connect(&url).expect("host a");
        let b = PgHost::connect(&url).expect("host b");
        assert_eq!(a.sleep_state().expect("read"), SleepState::default());
        let asleep = SleepState {
            asleep: true,
            interrupted: false,
            last_activity: Some(42),
        };
        a.set_sleep_state(asleep).wait().expect("write");
        a.record_fired("p", "tick", 7).wait().expect("fired");
        assert_eq!(b.sleep_state().expect("read"), asleep);
        assert_eq!(b.last_fired("p", "tick").expect("read"), Some(7));
        assert_eq!(b.last_fired("p", "other").expect("read"), None);
    }

    #[test]
    fn a_tick_raced_by_two_hosts_is_claimed_once() {
        let Some(url) = database() else { return };
        let hosts = [
            PgHost::connect(&url).expect("host a"),
            PgHost::connect(&url).expect("host b"),
        ];
        let barrier = &Barrier::new(hosts.len());
        let claims: Vec<Vec<bool>> = std::thread::scope(|scope| {
            let racers: Vec<_> = hosts
                .iter()
                .map(|host| {
                    scope.spawn(move || {
                        (1..=50)
                            .map(|tick| {
                                // Both hosts go for the same tick at once.
                                barrier.wait();
                                host.claim_fired("p", "tick", tick).wait().expect("claim")
                            })
                            .collect::<Vec<bool>>()
                    })
                })
                .collect();
            racers
                .into_iter()
                .map(|racer| racer.join().expect("racer"))
                .collect()
        });
        for tick in 0..50 {
            let winners = claims.iter().filter(|host| host[tick]).count();
            assert_eq!(winners, 1, "tick {}", tick + 1);
        }
        assert_eq!(hosts[0].last_fired("p", "tick").expect("read"), Some(50));
    }
}
