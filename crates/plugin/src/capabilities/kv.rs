//! The host side of `kv`: plugin-private state, granted by `capabilities.kv`.

use super::*;

impl From<KvError> for WitError {
    fn from(error: KvError) -> Self {
        match error {
            KvError::InvalidInput(message) => WitError::InvalidInput(message),
            KvError::QuotaExceeded { .. } => WitError::Denied(error.to_string()),
            KvError::Storage(e) => WitError::Internal(format!("kv store: {e}")),
        }
    }
}

impl wit::kv::Host for PluginContext {
    fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, WitError> {
        self.require_kv()?;
        Ok(self.services.kv.get(&self.plugin, &key)?)
    }

    fn set(&mut self, key: String, value: Vec<u8>) -> Result<(), WitError> {
        self.require_kv()?;
        Ok(self
            .services
            .kv
            .set(&self.plugin, &key, &value, self.grants.kv_bytes)?)
    }

    fn delete(&mut self, key: String) -> Result<bool, WitError> {
        self.require_kv()?;
        Ok(self.services.kv.delete(&self.plugin, &key)?)
    }

    fn list_keys(&mut self, prefix: String) -> Result<Vec<String>, WitError> {
        self.require_kv()?;
        Ok(self.services.kv.list_keys(&self.plugin, &prefix)?)
    }
}
