//! Plugin-private key/value state, persisted in `host.db` (table `kv`).
//!
//! Each plugin sees only its own keys: the plugin id is part of every statement's key and
//! comes from the host, never from the guest.

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};

use super::config::KvConfig;
use cairn_storage::{self as store, StoreError};

/// Why a key/value operation failed.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    /// The key or value broke a limit or rule; the text says which.
    #[error("{0}")]
    InvalidInput(String),
    /// SQLite failed.
    #[error("kv store: {0}")]
    Storage(#[from] rusqlite::Error),
}

/// The key/value store shared by all plugins of a host.
pub struct KvStore {
    conn: Mutex<Connection>,
    limits: KvConfig,
}

impl KvStore {
    /// Open the store in `host.db` under the data dir.
    pub fn open(data_dir: &Path, limits: KvConfig) -> Result<Self, StoreError> {
        let conn = store::open(&data_dir.join("host.db"), &store::HOST_MIGRATIONS)?;
        Ok(Self {
            conn: Mutex::new(conn),
            limits,
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite half-written (statements are
        // atomic), so a poisoned lock is safe to keep using.
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn check_key(&self, key: &str) -> Result<(), KvError> {
        if key.is_empty() {
            return Err(KvError::InvalidInput(
                "key: expected a non-empty string".into(),
            ));
        }
        if key.len() > self.limits.max_key_bytes {
            return Err(KvError::InvalidInput(format!(
                "key: {} bytes is over the limit of {} bytes",
                key.len(),
                self.limits.max_key_bytes
            )));
        }
        Ok(())
    }

    /// The value of `key` for `plugin`, if set.
    pub fn get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        self.check_key(key)?;
        Ok(self
            .conn()
            .query_row(
                "SELECT value FROM kv WHERE plugin_id = ?1 AND key = ?2",
                params![plugin, key],
                |row| row.get(0),
            )
            .optional()?)
    }

    /// Set `key` for `plugin`; durable when this returns.
    pub fn set(&self, plugin: &str, key: &str, value: &[u8]) -> Result<(), KvError> {
        self.check_key(key)?;
        if value.len() > self.limits.max_value_bytes {
            return Err(KvError::InvalidInput(format!(
                "value: {} bytes is over the limit of {} bytes",
                value.len(),
                self.limits.max_value_bytes
            )));
        }
        self.conn().execute(
            "INSERT INTO kv (plugin_id, key, value, updated_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (plugin_id, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
            params![plugin, key, value, store::now_ms()],
        )?;
        Ok(())
    }

    /// Remove `key` for `plugin`; whether it existed.
    pub fn delete(&self, plugin: &str, key: &str) -> Result<bool, KvError> {
        self.check_key(key)?;
        let removed = self.conn().execute(
            "DELETE FROM kv WHERE plugin_id = ?1 AND key = ?2",
            params![plugin, key],
        )?;
        Ok(removed > 0)
    }

    /// Keys of `plugin` starting with `prefix`, sorted.
    pub fn list_keys(&self, plugin: &str, prefix: &str) -> Result<Vec<String>, KvError> {
        let conn = self.conn();
        let mut statement = conn.prepare_cached(
            "SELECT key FROM kv WHERE plugin_id = ?1 AND substr(key, 1, length(?2)) = ?2 ORDER BY key",
        )?;
        let keys = statement
            .query_map(params![plugin, prefix], |row| row.get(0))?
            .collect::<Result<Vec<String>, _>>()?;
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugins_see_only_their_own_keys_and_values_persist() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kv = KvStore::open(dir.path(), KvConfig::default()).expect("open");
        kv.set("a", "count", b"1").expect("set");
        kv.set("a", "count", b"2").expect("overwrite");
        kv.set("a", "other", b"x").expect("set");
        kv.set("b", "count", b"9").expect("set");
        drop(kv);
        let kv = KvStore::open(dir.path(), KvConfig::default()).expect("reopen");
        assert_eq!(kv.get("a", "count").expect("get"), Some(b"2".to_vec()));
        assert_eq!(kv.get("b", "count").expect("get"), Some(b"9".to_vec()));
        assert_eq!(kv.list_keys("a", "").expect("list"), ["count", "other"]);
        assert_eq!(kv.list_keys("a", "co").expect("list"), ["count"]);
        assert!(kv.delete("a", "count").expect("delete"));
        assert!(!kv.delete("a", "count").expect("delete again"));
        assert_eq!(kv.get("a", "count").expect("get"), None);
    }

    #[test]
    fn limits_are_typed_input_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let limits = KvConfig {
            max_value_bytes: 4,
            max_key_bytes: 3,
        };
        let kv = KvStore::open(dir.path(), limits).expect("open");
        assert!(matches!(
            kv.set("a", "", b"1"),
            Err(KvError::InvalidInput(_))
        ));
        assert!(matches!(
            kv.set("a", "long", b"1"),
            Err(KvError::InvalidInput(_))
        ));
        assert!(matches!(
            kv.set("a", "k", b"12345"),
            Err(KvError::InvalidInput(_))
        ));
        assert_eq!(kv.get("a", "k").expect("nothing written"), None);
    }

    #[test]
    fn like_wildcards_in_prefixes_are_literal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kv = KvStore::open(dir.path(), KvConfig::default()).expect("open");
        kv.set("a", "100%", b"1").expect("set");
        kv.set("a", "1000", b"1").expect("set");
        assert_eq!(kv.list_keys("a", "100%").expect("list"), ["100%"]);
    }
}
