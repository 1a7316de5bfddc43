//! `host.db`, the host process's own state, behind three interfaces: [`KvStore`]
//! (plugin-private key/value state), [`StatusStore`] (the running host and its plugins'
//! states) and [`LifecycleStore`] (sleep and schedule ticks). [`SqliteHost`] implements all
//! three over one database with one writer thread, so every write to `host.db` is
//! group-committed by the same owner.

use std::path::Path;

use cairn_vocab::plugin::{HostRun, LlmUsage, PluginKind, PluginState, PluginStatus, StatusReport};
use cairn_vocab::session::SleepState;
use rusqlite::{Connection, OptionalExtension, params};

use crate::database::Database;
use crate::writer::Receipt;
use crate::{Migrations, StorageError, now_ms};

/// The store's file in a data dir.
pub const FILE: &str = "host.db";

/// How long a plugin's LLM calls are kept: the hour its budget counts.
pub const LLM_CALLS_KEPT_MS: i64 = 3_600_000;

/// Migrations of `host.db`.
pub const MIGRATIONS: Migrations = Migrations {
    name: "host",
    scripts: &[
        include_str!("../../../migrations/host/0001_init.sql"),
        include_str!("../../../migrations/host/0002_lifecycle.sql"),
        include_str!("../../../migrations/host/0003_llm_usage.sql"),
        include_str!("../../../migrations/host/0004_stopping.sql"),
        include_str!("../../../migrations/host/0005_llm_calls.sql"),
    ],
};

/// Plugin-private key/value state. The plugin id comes from the host, never from a guest;
/// limits on keys and values are the caller's policy.
pub trait KvStore: Send + Sync {
    /// The value of `key` for `plugin`, if set.
    fn get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>, StorageError>;
    /// Set `key` for `plugin`.
    fn set(&self, plugin: &str, key: &str, value: Vec<u8>) -> Receipt<()>;
    /// Remove `key` for `plugin`; whether it existed.
    fn delete(&self, plugin: &str, key: &str) -> Receipt<bool>;
    /// Keys of `plugin` starting with `prefix` (taken literally), sorted.
    fn list_keys(&self, plugin: &str, prefix: &str) -> Result<Vec<String>, StorageError>;
    /// Bytes of keys and values `plugin` keeps; with `key`, that entry's alone (0 when unset).
    fn usage(&self, plugin: &str, key: Option<&str>) -> Result<u64, StorageError>;
}

/// The host that runs on a data dir and its plugins' last known states, written by the
/// running host and read by `cairn status`.
pub trait StatusStore: Send + Sync {
    /// Forget the plugins of an earlier run and record this process as the running host.
    fn begin_run(&self, pid: u32, plugins_dir: &str) -> Receipt<()>;
    /// Record that this host began stopping.
    fn begin_stop(&self) -> Receipt<()>;
    /// Record a clean stop.
    fn end_run(&self) -> Receipt<()>;
    /// Write one plugin's status.
    fn record(&self, status: &PluginStatus) -> Receipt<()>;
    /// Write one plugin's LLM use since the host started.
    fn record_llm_usage(&self, usage: &LlmUsage) -> Receipt<()>;
    /// Record one `llm.complete` call of `plugin`, started at `started_at` (ms) and using
    /// `tokens`, forgetting the calls older than an hour before it: what a plugin's hourly
    /// budget is seeded with when a host starts.
    fn record_llm_call(&self, plugin: &str, started_at: i64, tokens: u64) -> Receipt<()> {
        let _ = (plugin, started_at, tokens);
        Receipt::ready(Ok(()))
    }
    /// `plugin`'s recorded calls started at or after `since` (ms), oldest first: when each
    /// started and the tokens it used.
    fn llm_calls_since(&self, plugin: &str, since: i64) -> Result<Vec<(i64, u64)>, StorageError> {
        let _ = (plugin, since);
        Ok(Vec::new())
    }
    /// The recorded host run and plugin statuses (by id).
    fn report(&self) -> Result<StatusReport, StorageError>;
    /// The channel plugins of the hosts running now, sorted: the channels whose main
    /// batches some host answers. On a shared database, those of every run without a stop
    /// seen alive within [`STALE_AFTER`](crate::pg::host::STALE_AFTER); in a data dir, the
    /// run's if it recorded no stop (whether its process still holds the data dir is the
    /// caller's to check).
    fn live_channels(&self) -> Result<Vec<String>, StorageError> {
        let report = self.report()?;
        let running = report
            .host
            .as_ref()
            .is_some_and(|run| run.stopped_at.is_none());
        let mut channels: Vec<String> = if running {
            report.channels().into_iter().map(str::to_string).collect()
        } else {
            Vec::new()
        };
        channels.sort();
        Ok(channels)
    }
}

/// What the lifecycle keeps across restarts besides sessions: whether the agent sleeps,
/// and when each plugin schedule last fired.
pub trait LifecycleStore: Send + Sync {
    /// The sleep state (all off on a new data dir).
    fn sleep_state(&self) -> Result<SleepState, StorageError>;
    /// Replace the sleep state.
    fn set_sleep_state(&self, state: SleepState) -> Receipt<()>;
    /// When schedule `name` of `plugin` last fired, in ms.
    fn last_fired(&self, plugin: &str, name: &str) -> Result<Option<i64>, StorageError>;
    /// Record that schedule `name` of `plugin` fired at `at_ms`.
    fn record_fired(&self, plugin: &str, name: &str, at_ms: i64) -> Receipt<()>;
    /// Claim the firing of schedule `name` of `plugin` due at `at_ms`: records it and
    /// returns true unless it was already recorded at `at_ms` or later (another host of a
    /// shared database fired it), so each tick fires once across hosts.
    fn claim_fired(&self, plugin: &str, name: &str, at_ms: i64) -> Receipt<bool>;
}

/// `host.db`: one writer thread for writes, a connection for reads.
pub struct SqliteHost {
    db: Database,
}

impl SqliteHost {
    /// Open (creating and migrating) `<data>/host.db` and start its writer thread.
    pub fn open(data_dir: &Path) -> Result<Self, StorageError> {
        Ok(Self {
            db: Database::open(&data_dir.join(FILE), &MIGRATIONS, "host-writer")?,
        })
    }

    /// Read the status of the host that last ran on `data_dir` without opening it for
    /// writing (a host may be running); `None` when no host has run there.
    pub fn read_status(data_dir: &Path) -> Result<Option<StatusReport>, StorageError> {
        let path = data_dir.join(FILE);
        let Some(conn) = crate::open_read_only(&path)? else {
            return Ok(None);
        };
        read_report(&conn)
            .map(Some)
            .map_err(|e| StorageError::open(&path, e))
    }
}

impl KvStore for SqliteHost {
    fn get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        self.db.read(|conn| {
            conn.prepare_cached("SELECT value FROM kv WHERE plugin_id = ?1 AND key = ?2")?
                .query_row(params![plugin, key], |row| row.get(0))
                .optional()
        })
    }

    fn set(&self, plugin: &str, key: &str, value: Vec<u8>) -> Receipt<()> {
        let (plugin, key) = (plugin.to_string(), key.to_string());
        self.db.submit(move |conn| {
            conn.prepare_cached(
                "INSERT INTO kv (plugin_id, key, value, updated_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (plugin_id, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
            )?
            .execute(params![plugin, key, value, now_ms()])?;
            Ok(())
        })
    }

    fn delete(&self, plugin: &str, key: &str) -> Receipt<bool> {
        let (plugin, key) = (plugin.to_string(), key.to_string());
        self.db.submit(move |conn| {
            let removed = conn
                .prepare_cached("DELETE FROM kv WHERE plugin_id = ?1 AND key = ?2")?
                .execute(params![plugin, key])?;
            Ok(removed > 0)
        })
    }

    fn list_keys(&self, plugin: &str, prefix: &str) -> Result<Vec<String>, StorageError> {
        self.db.read(|conn| {
            conn.prepare_cached(
                "SELECT key FROM kv WHERE plugin_id = ?1 AND substr(key, 1, length(?2)) = ?2 ORDER BY key",
            )?
            .query_map(params![plugin, prefix], |row| row.get(0))?
            .collect()
        })
    }

    fn usage(&self, plugin: &str, key: Option<&str>) -> Result<u64, StorageError> {
        self.db.read(|conn| {
            conn.prepare_cached(
                "SELECT COALESCE(SUM(length(CAST(key AS BLOB)) + length(value)), 0) FROM kv
                  WHERE plugin_id = ?1 AND (?2 IS NULL OR key = ?2)",
            )?
            .query_row(params![plugin, key], |row| row.get::<_, i64>(0))
            .map(|bytes| bytes.max(0) as u64)
        })
    }
}

impl StatusStore for SqliteHost {
    fn begin_run(&self, pid: u32, plugins_dir: &str) -> Receipt<()> {
        let plugins_dir = plugins_dir.to_string();
        self.db.submit(move |conn| {
            conn.prepare_cached("DELETE FROM plugin_status")?.execute([])?;
            conn.prepare_cached("DELETE FROM plugin_llm_usage")?.execute([])?;
            conn.prepare_cached("INSERT INTO host_run (id, pid, plugins_dir, started_at, stopped_at) VALUES (1, ?1, ?2, ?3, NULL)
                 ON CONFLICT (id) DO UPDATE SET pid = excluded.pid, plugins_dir = excluded.plugins_dir,
                     started_at = excluded.started_at, stopped_at = NULL, stopping_at = NULL")?.execute(params![pid, plugins_dir, now_ms()])?;
            Ok(())
        })
    }

    fn begin_stop(&self) -> Receipt<()> {
        self.db.submit(|conn| {
            conn.prepare_cached("UPDATE host_run SET stopping_at = ?1 WHERE id = 1")?
                .execute(params![now_ms()])?;
            Ok(())
        })
    }

    fn end_run(&self) -> Receipt<()> {
        self.db.submit(|conn| {
            conn.prepare_cached(
                "UPDATE host_run SET stopped_at = ?1, stopping_at = NULL WHERE id = 1",
            )?
            .execute(params![now_ms()])?;
            Ok(())
        })
    }

    fn record(&self, status: &PluginStatus) -> Receipt<()> {
        let status = status.clone();
        self.db.submit(move |conn| {
            conn.prepare_cached(
                "INSERT INTO plugin_status (plugin_id, version, kind, state, restarts, faults, last_error, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (plugin_id) DO UPDATE SET version = excluded.version, kind = excluded.kind,
                     state = excluded.state, restarts = excluded.restarts, faults = excluded.faults,
                     last_error = excluded.last_error, updated_at = excluded.updated_at",
            )?
            .execute(params![
                status.id,
                status.version,
                status.kind.as_str(),
                status.state.as_str(),
                status.restarts,
                status.faults,
                status.last_error,
                status.updated_at
            ])?;
            Ok(())
        })
    }

    fn record_llm_usage(&self, usage: &LlmUsage) -> Receipt<()> {
        let usage = usage.clone();
        self.db.submit(move |conn| {
            conn.prepare_cached(
                "INSERT INTO plugin_llm_usage (plugin_id, calls, tokens, refused, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (plugin_id) DO UPDATE SET calls = excluded.calls, tokens = excluded.tokens,
                     refused = excluded.refused, updated_at = excluded.updated_at",
            )?
            .execute(params![
                usage.plugin_id,
                usage.calls as i64,
                usage.tokens as i64,
                usage.refused as i64,
                usage.updated_at
            ])?;
            Ok(())
        })
    }

    fn record_llm_call(&self, plugin: &str, started_at: i64, tokens: u64) -> Receipt<()> {
        let plugin = plugin.to_string();
        self.db.submit(move |conn| {
            conn.prepare_cached(
                "INSERT INTO plugin_llm_calls (plugin_id, started_at, tokens) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![plugin, started_at, tokens as i64])?;
            conn.prepare_cached("DELETE FROM plugin_llm_calls WHERE started_at < ?1")?
                .execute([started_at - LLM_CALLS_KEPT_MS])?;
            Ok(())
        })
    }

    fn llm_calls_since(&self, plugin: &str, since: i64) -> Result<Vec<(i64, u64)>, StorageError> {
        let plugin = plugin.to_string();
        self.db.read(move |conn| {
            let mut statement = conn.prepare_cached(
                "SELECT started_at, tokens FROM plugin_llm_calls
                 WHERE plugin_id = ?1 AND started_at >= ?2 ORDER BY started_at",
            )?;
            let calls = statement
                .query_map(params![plugin, since], |row| {
                    Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?.max(0) as u64))
                })?
                .collect::<Result<_, _>>()?;
            Ok(calls)
        })
    }

    fn report(&self) -> Result<StatusReport, StorageError> {
        self.db.read(read_report)
    }
}

fn read_report(conn: &Connection) -> rusqlite::Result<StatusReport> {
    let run = conn
        .prepare_cached(
            // Every column: a host.db of an older build, read without migrating it, has
            // no `stopping_at` yet.
            "SELECT * FROM host_run WHERE id = 1",
        )?
        .query_row([], |row| {
            Ok(HostRun {
                pid: row.get("pid")?,
                plugins_dir: row.get("plugins_dir")?,
                started_at: row.get("started_at")?,
                stopped_at: row.get("stopped_at")?,
                stopping_since: row.get("stopping_at").unwrap_or(None),
                last_seen: None,
            })
        })
        .optional()?;
    let plugins = conn
        .prepare(
            "SELECT plugin_id, version, kind, state, restarts, faults, last_error, updated_at
             FROM plugin_status ORDER BY plugin_id",
        )?
        .query_map([], |row| {
            Ok(PluginStatus {
                id: row.get(0)?,
                version: row.get(1)?,
                kind: crate::parsed(row, 2, PluginKind::parse, "plugin kind")?,
                state: crate::parsed(row, 3, PluginState::parse, "plugin state")?,
                restarts: row.get(4)?,
                faults: row.get(5)?,
                last_error: row.get(6)?,
                updated_at: row.get(7)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let llm_usage = conn
        .prepare(
            "SELECT plugin_id, calls, tokens, refused, updated_at FROM plugin_llm_usage
             ORDER BY plugin_id",
        )?
        .query_map([], |row| {
            Ok(LlmUsage {
                plugin_id: row.get(0)?,
                calls: row.get::<_, i64>(1)? as u64,
                tokens: row.get::<_, i64>(2)? as u64,
                refused: row.get::<_, i64>(3)? as u64,
                updated_at: row.get(4)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(StatusReport {
        host: run,
        plugins,
        llm_usage,
    })
}

impl LifecycleStore for SqliteHost {
    fn sleep_state(&self) -> Result<SleepState, StorageError> {
        self.db.read(|conn| {
            let value = |key: &str| -> rusqlite::Result<Option<String>> {
                conn.prepare_cached("SELECT value FROM lifecycle_state WHERE key = ?1")?
                    .query_row(params![key], |r| r.get(0))
                    .optional()
            };
            Ok(SleepState {
                asleep: value("asleep")?.as_deref() == Some("true"),
                interrupted: value("interrupted")?.as_deref() == Some("true"),
                last_activity: value("last_activity")?.and_then(|v| v.parse().ok()),
            })
        })
    }

    fn set_sleep_state(&self, state: SleepState) -> Receipt<()> {
        self.db.submit(move |conn| {
            let mut upsert = conn.prepare_cached(
                "INSERT INTO lifecycle_state (key, value) VALUES (?1, ?2)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            )?;
            upsert.execute(params!["asleep", state.asleep.to_string()])?;
            upsert.execute(params!["interrupted", state.interrupted.to_string()])?;
            if let Some(at) = state.last_activity {
                upsert.execute(params!["last_activity", at.to_string()])?;
            }
            Ok(())
        })
    }

    fn last_fired(&self, plugin: &str, name: &str) -> Result<Option<i64>, StorageError> {
        self.db.read(|conn| {
            conn.prepare_cached(
                "SELECT last_fired_at FROM schedule_state WHERE plugin_id = ?1 AND name = ?2",
            )?
            .query_row(params![plugin, name], |r| r.get(0))
            .optional()
        })
    }

    fn record_fired(&self, plugin: &str, name: &str, at_ms: i64) -> Receipt<()> {
        let (plugin, name) = (plugin.to_string(), name.to_string());
        self.db.submit(move |conn| {
            conn.prepare_cached("INSERT INTO schedule_state (plugin_id, name, last_fired_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (plugin_id, name) DO UPDATE SET last_fired_at = excluded.last_fired_at")?.execute(params![plugin, name, at_ms])?;
            Ok(())
        })
    }

    fn claim_fired(&self, plugin: &str, name: &str, at_ms: i64) -> Receipt<bool> {
        let (plugin, name) = (plugin.to_string(), name.to_string());
        self.db.submit(move |conn| {
            // An upsert whose WHERE is false changes no row: the tick was claimed already.
            let changed = conn
                .prepare_cached(
                    "INSERT INTO schedule_state (plugin_id, name, last_fired_at) VALUES (?1, ?2, ?3)
                     ON CONFLICT (plugin_id, name) DO UPDATE SET last_fired_at = excluded.last_fired_at
                     WHERE schedule_state.last_fired_at < excluded.last_fired_at",
                )?
                .execute(params![plugin, name, at_ms])?;
            Ok(changed > 0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugins_see_only_their_own_keys_and_values_persist() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = SqliteHost::open(dir.path()).expect("open");
        host.set("a", "count", b"1".to_vec()).wait().expect("set");
        host.set("a", "count", b"2".to_vec())
            .wait()
            .expect("overwrite");
        host.set("a", "other", b"x".to_vec()).wait().expect("set");
        host.set("b", "count", b"9".to_vec()).wait().expect("set");
        drop(host);
        let host = SqliteHost::open(dir.path()).expect("reopen");
        assert_eq!(host.get("a", "count").expect("get"), Some(b"2".to_vec()));
        assert_eq!(host.get("b", "count").expect("get"), Some(b"9".to_vec()));
        assert_eq!(host.list_keys("a", "").expect("list"), ["count", "other"]);
        assert_eq!(host.list_keys("a", "co").expect("list"), ["count"]);
        assert!(host.delete("a", "count").wait().expect("delete"));
        assert!(!host.delete("a", "count").wait().expect("delete again"));
        assert_eq!(host.get("a", "count").expect("get"), None);
    }

    #[test]
    fn like_wildcards_in_prefixes_are_literal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = SqliteHost::open(dir.path()).expect("open");
        host.set("a", "100%", b"1".to_vec()).wait().expect("set");
        host.set("a", "1000", b"1".to_vec()).wait().expect("set");
        assert_eq!(host.list_keys("a", "100%").expect("list"), ["100%"]);
    }

    #[test]
    fn sleep_state_and_schedule_ticks_survive_a_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = SqliteHost::open(dir.path()).expect("open");
        assert_eq!(host.sleep_state().expect("read"), SleepState::default());
        let asleep = SleepState {
            asleep: true,
            interrupted: false,
            last_activity: Some(42),
        };
        host.set_sleep_state(asleep).wait().expect("write");
        host.record_fired("p", "tick", 7).wait().expect("fired");
        drop(host);
        let host = SqliteHost::open(dir.path()).expect("reopen");
        assert_eq!(host.sleep_state().expect("read"), asleep);
        assert_eq!(host.last_fired("p", "tick").expect("read"), Some(7));
        assert_eq!(host.last_fired("p", "other").expect("read"), None);
    }

    #[test]
    fn a_schedule_tick_is_claimed_once_and_never_backwards() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = SqliteHost::open(dir.path()).expect("open");
        let claim = |at: i64| host.claim_fired("p", "tick", at).wait().expect("claim");
        assert!(claim(10), "a first tick is claimed");
        assert!(!claim(10), "the same tick again is not");
        assert!(!claim(5), "nor an earlier one");
        assert!(claim(20), "a later tick is");
        assert_eq!(host.last_fired("p", "tick").expect("read"), Some(20));
    }
}
