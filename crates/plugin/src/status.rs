//! The persisted state of a host's plugins (`host.db` tables `plugin_status` and
//! `host_run`), written by the running host and read by `cairn status`.

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use cairn_storage::{self as store, StoreError};
pub use cairn_vocab::plugin::{HostRun, PluginState, PluginStatus};

/// Writer of plugin and host status, shared by the supervisors of a host.
pub struct StatusStore {
    conn: Mutex<Connection>,
}

impl StatusStore {
    /// Open `host.db` under the data dir.
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        let conn = store::open(&data_dir.join("host.db"), &store::HOST_MIGRATIONS)?;
        Ok(Self {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forget the plugins of an earlier run and record this host as running.
    pub fn begin_run(&self, plugins_dir: &Path) -> Result<(), rusqlite::Error> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute("DELETE FROM plugin_status", [])?;
        tx.execute(
            "INSERT INTO host_run (id, pid, plugins_dir, started_at, stopped_at) VALUES (1, ?1, ?2, ?3, NULL)
             ON CONFLICT (id) DO UPDATE SET pid = excluded.pid, plugins_dir = excluded.plugins_dir,
                 started_at = excluded.started_at, stopped_at = NULL",
            params![std::process::id(), plugins_dir.display().to_string(), store::now_ms()],
        )?;
        tx.commit()
    }

    /// Record a clean stop.
    pub fn end_run(&self) -> Result<(), rusqlite::Error> {
        self.conn().execute(
            "UPDATE host_run SET stopped_at = ?1 WHERE id = 1",
            params![store::now_ms()],
        )?;
        Ok(())
    }

    /// Write one plugin's status. Failures are logged, never fatal: status is advisory.
    pub fn record(&self, status: &PluginStatus) {
        let result = self.conn().execute(
            "INSERT INTO plugin_status (plugin_id, version, kind, state, restarts, faults, last_error, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (plugin_id) DO UPDATE SET version = excluded.version, kind = excluded.kind,
                 state = excluded.state, restarts = excluded.restarts, faults = excluded.faults,
                 last_error = excluded.last_error, updated_at = excluded.updated_at",
            params![
                status.id,
                status.version,
                status.kind,
                status.state,
                status.restarts,
                status.faults,
                status.last_error,
                status.updated_at
            ],
        );
        if let Err(e) = result {
            tracing::warn!(plugin = %status.id, "cannot record plugin status: {e}");
        }
    }
}

/// What `cairn status` reads from a data dir.
#[derive(Debug, Clone, Serialize)]
pub struct StatusReport {
    /// The host that last ran here, if any.
    pub host: Option<HostRun>,
    /// Its plugins, by id.
    pub plugins: Vec<PluginStatus>,
}

/// Read the recorded host run and plugin statuses; `None` when no host has run here.
pub fn read(data_dir: &Path) -> Result<Option<StatusReport>, StoreError> {
    let path = data_dir.join("host.db");
    let Some(conn) = store::open_read_only(&path)? else {
        return Ok(None);
    };
    let query = || -> Result<StatusReport, rusqlite::Error> {
        let run = conn
            .query_row(
                "SELECT pid, plugins_dir, started_at, stopped_at FROM host_run WHERE id = 1",
                [],
                |row| {
                    Ok(HostRun {
                        pid: row.get(0)?,
                        plugins_dir: row.get(1)?,
                        started_at: row.get(2)?,
                        stopped_at: row.get(3)?,
                    })
                },
            )
            .optional()?;
        let mut statement = conn.prepare(
            "SELECT plugin_id, version, kind, state, restarts, faults, last_error, updated_at
             FROM plugin_status ORDER BY plugin_id",
        )?;
        let plugins = statement
            .query_map([], |row| {
                Ok(PluginStatus {
                    id: row.get(0)?,
                    version: row.get(1)?,
                    kind: row.get(2)?,
                    state: row.get(3)?,
                    restarts: row.get(4)?,
                    faults: row.get(5)?,
                    last_error: row.get(6)?,
                    updated_at: row.get(7)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(StatusReport { host: run, plugins })
    };
    query()
        .map(Some)
        .map_err(|source| StoreError::Open { path, source })
}

/// A plugin's row in `cairn status`: its state now, and the state its host last recorded.
/// Field names are the `--json` keys.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PluginReport {
    /// The recorded row, with `state` as it is now: while no host runs, a plugin its host
    /// last saw `starting`, `running` or `restarting` is `down` (the host ended without a
    /// clean stop); `stopped`, `quarantined` and `failed` stay as recorded.
    #[serde(flatten)]
    pub status: PluginStatus,
    /// The state the host last recorded.
    pub last_state: String,
}

/// The plugins' states as they are now, given whether their host is running.
pub fn as_seen_now(plugins: Vec<PluginStatus>, host_running: bool) -> Vec<PluginReport> {
    plugins
        .into_iter()
        .map(|mut status| {
            let last_state = status.state.clone();
            let live = [
                PluginState::Starting,
                PluginState::Running,
                PluginState::Restarting,
            ]
            .iter()
            .any(|s| s.as_str() == status.state);
            if !host_running && live {
                status.state = "down".into();
            }
            PluginReport { status, last_state }
        })
        .collect()
}
