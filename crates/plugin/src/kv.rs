//! Plugin-private key/value state, persisted in `host.db` (table `kv`).
//!
//! Each plugin sees only its own keys: the plugin id is part of every statement's key and
//! comes from the host, never from the guest.

use std::sync::Arc;

use super::config::KvConfig;
use cairn_storage::StorageError;
use cairn_storage::host::KvStore;

/// Why a key/value operation failed.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    /// The key or value broke a limit or rule; the text says which.
    #[error("{0}")]
    InvalidInput(String),
    /// The store failed.
    #[error("kv store: {0}")]
    Storage(#[from] StorageError),
}

/// Plugin-private state shared by all plugins of a host: the limits of `kv:` in
/// `cairn.yaml` over a [`KvStore`].
pub struct PluginKv {
    store: Arc<dyn KvStore>,
    limits: KvConfig,
}

impl PluginKv {
    /// Keys and values within `limits`, kept in `store`.
    pub fn new(store: Arc<dyn KvStore>, limits: KvConfig) -> Self {
        Self { store, limits }
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
        Ok(self.store.get(plugin, key)?)
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
        Ok(self.store.set(plugin, key, value.to_vec()).wait()?)
    }

    /// Remove `key` for `plugin`; whether it existed.
    pub fn delete(&self, plugin: &str, key: &str) -> Result<bool, KvError> {
        self.check_key(key)?;
        Ok(self.store.delete(plugin, key).wait()?)
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
        kv.set("a", "k", b"1234").expect("within the limits");
        assert_eq!(kv.get("a", "k").expect("get"), Some(b"1234".to_vec()));
    }
}
