//! Plugin-private key/value state, persisted in `host.db` (table `kv`).
//!
//! Each plugin sees only its own keys: the plugin id is part of every statement's key and
//! comes from the host, never from the guest.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::config::KvConfig;
use cairn_storage::StorageError;
use cairn_storage::host::KvStore;

/// Why a key/value operation failed.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    /// The key or value broke a limit or rule; the text says which.
    #[error("{0}")]
    InvalidInput(String),
    /// The write would take the plugin's keys and values past its `limits.kv_bytes`;
    /// nothing was written.
    #[error(
        "kv: this set would keep {would} bytes of keys and values, over this plugin's limits.kv_bytes of {quota}; delete keys first"
    )]
    QuotaExceeded {
        /// What the plugin would keep.
        would: u64,
        /// Its quota.
        quota: u64,
    },
    /// The store failed.
    #[error("kv store: {0}")]
    Storage(#[from] StorageError),
}

/// Plugin-private state shared by all plugins of a host: the limits of `kv:` in
/// `cairn.yaml` over a [`KvStore`].
pub struct PluginKv {
    store: Arc<dyn KvStore>,
    limits: KvConfig,
    /// Each plugin's bytes of keys and values, read from the store on its first write
    /// and kept up to date by its writes; the lock serialises one plugin's writes.
    usage: Mutex<HashMap<String, Arc<Mutex<Option<u64>>>>>,
}

impl PluginKv {
    /// Keys and values within `limits`, kept in `store`.
    pub fn new(store: Arc<dyn KvStore>, limits: KvConfig) -> Self {
        Self {
            store,
            limits,
            usage: Mutex::default(),
        }
    }

    /// The usage slot of `plugin`.
    fn usage_of(&self, plugin: &str) -> Arc<Mutex<Option<u64>>> {
        self.usage
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(plugin.to_string())
            .or_default()
            .clone()
    }

    fn check_key(&self, key: &str) -> Result<(), KvError> {
        if key.is_empty() {
            return Err(KvError::InvalidInput(
                "key: expected a non-empty string".into(),
            ));
        }
        if key.len() > self.limits.max_key_bytes {
            return Err(KvError::InvalidInput(format!(
                "key: {} bytes is over kv.max_key_bytes ({} bytes)",
                key.len(),
                self.limits.max_key_bytes
            )));
        }
        Ok(())
    }

    /// The value of `key` for `plugin`, if set.
    pub fn get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        self.check_key(key)?;
        Ok(self.store.get(plugin, key)?)
    }

    /// Set `key` for `plugin`, keeping its keys and values within `quota` bytes; durable
    /// when this returns.
    pub fn set(&self, plugin: &str, key: &str, value: &[u8], quota: u64) -> Result<(), KvError> {
        self.check_key(key)?;
        if value.len() > self.limits.max_value_bytes {
            return Err(KvError::InvalidInput(format!(
                "value: {} bytes is over kv.max_value_bytes ({} bytes)",
                value.len(),
                self.limits.max_value_bytes
            )));
        }
        let slot = self.usage_of(plugin);
        let mut usage = slot.lock().unwrap_or_else(|p| p.into_inner());
        let kept = match *usage {
            Some(bytes) => bytes,
            None => self.store.usage(plugin, None)?,
        };
        let replaced = self.store.usage(plugin, Some(key))?;
        let would = kept.saturating_sub(replaced) + (key.len() + value.len()) as u64;
        if would > quota && would > kept {
            *usage = Some(kept);
            return Err(KvError::QuotaExceeded { would, quota });
        }
        self.store.set(plugin, key, value.to_vec()).wait()?;
        *usage = Some(would);
        Ok(())
    }

    /// Remove `key` for `plugin`; whether it existed.
    pub fn delete(&self, plugin: &str, key: &str) -> Result<bool, KvError> {
        self.check_key(key)?;
        let slot = self.usage_of(plugin);
        let mut usage = slot.lock().unwrap_or_else(|p| p.into_inner());
        let freed = self.store.usage(plugin, Some(key))?;
        let existed = self.store.delete(plugin, key).wait()?;
        *usage = usage.map(|bytes| bytes.saturating_sub(freed));
        Ok(existed)
    }

    /// Keys of `plugin` starting with `prefix`, sorted.
    pub fn list_keys(&self, plugin: &str, prefix: &str) -> Result<Vec<String>, KvError> {
        Ok(self.store.list_keys(plugin, prefix)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_storage::host::SqliteHost;

    #[test]
    fn limits_are_typed_input_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let limits = KvConfig {
            max_value_bytes: 4,
            max_key_bytes: 3,
        };
        let kv = PluginKv::new(
            Arc::new(SqliteHost::open(dir.path()).expect("open")),
            limits,
        );
        assert!(matches!(
            kv.set("a", "", b"1", 1 << 20),
            Err(KvError::InvalidInput(_))
        ));
        assert!(matches!(
            kv.set("a", "long", b"1", 1 << 20),
            Err(KvError::InvalidInput(_))
        ));
        assert!(matches!(
            kv.set("a", "k", b"12345", 1 << 20),
            Err(KvError::InvalidInput(_))
        ));
        assert_eq!(kv.get("a", "k").expect("nothing written"), None);
        kv.set("a", "k", b"1234", 1 << 20)
            .expect("within the limits");
        assert_eq!(kv.get("a", "k").expect("get"), Some(b"1234".to_vec()));
    }

    #[test]
    fn a_plugin_keeps_no_more_than_its_quota_and_deleting_frees_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kv = PluginKv::new(
            Arc::new(SqliteHost::open(dir.path()).expect("open")),
            KvConfig::default(),
        );
        // Each entry is a 2-byte key and an 8-byte value: 10 bytes of a 35-byte quota.
        for key in ["k1", "k2", "k3"] {
            kv.set("a", key, b"12345678", 35).expect("within the quota");
        }
        let refused = kv.set("a", "k4", b"12345678", 35);
        assert!(
            matches!(
                refused,
                Err(KvError::QuotaExceeded {
                    would: 40,
                    quota: 35
                })
            ),
            "{refused:?}"
        );
        assert_eq!(kv.get("a", "k4").expect("get"), None, "nothing written");
        // Replacing a value counts the new size only; another plugin has its own quota.
        kv.set("a", "k1", b"1234567890123", 35)
            .expect("replaces: 35 bytes");
        kv.set("b", "k1", b"12345678", 35).expect("another plugin");
        assert!(kv.delete("a", "k2").expect("delete"));
        kv.set("a", "k4", b"12345678", 35).expect("room again");
    }
}
