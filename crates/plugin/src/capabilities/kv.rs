//! The host side of `kv`: plugin-private state, granted by `capabilities.kv`.

use super::*;

impl PluginContext {
    /// A kv failure as the plugin gets it: a store away for a moment is `unavailable` (and
    /// noted, see [`PluginContext::store_error`]), not `internal`.
    fn kv_error(&self, error: KvError) -> WitError {
        match error {
            KvError::InvalidInput(message) => WitError::InvalidInput(message),
            KvError::QuotaExceeded { .. } => WitError::Denied(error.to_string()),
            KvError::Storage(e) => {
                self.store_error(cairn_vocab::Error::new(e.kind(), format!("kv store: {e}")))
            }
        }
    }
}

impl wit::kv::Host for PluginContext {
    fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, WitError> {
        self.require_kv()?;
        self.services
            .kv
            .get(&self.plugin, &key)
            .map_err(|e| self.kv_error(e))
    }

    fn set(&mut self, key: String, value: Vec<u8>) -> Result<(), WitError> {
        self.require_kv()?;
        self.services
            .kv
            .set(&self.plugin, &key, &value, self.grants.kv_bytes)
            .map_err(|e| self.kv_error(e))
    }

    fn delete(&mut self, key: String) -> Result<bool, WitError> {
        self.require_kv()?;
        self.services
            .kv
            .delete(&self.plugin, &key)
            .map_err(|e| self.kv_error(e))
    }

    fn list_keys(&mut self, prefix: String) -> Result<Vec<String>, WitError> {
        self.require_kv()?;
        self.services
            .kv
            .list_keys(&self.plugin, &prefix)
            .map_err(|e| self.kv_error(e))
    }
}
