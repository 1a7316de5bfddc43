//! The optional response cache (`agent.llm.cache`): a completion is kept under the SHA-256
//! of the provider, its model and the whole request, and the same request within the TTL is
//! answered from `cache.db` without calling the provider (and without spending tokens: a
//! cached answer reports zero usage). Only answers are cached, never failures.

use std::sync::Arc;
use std::time::Duration;

use cairn_storage::cache::ResponseCacheStore;
use cairn_vocab::time::now_ms;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Completion, CompletionRequest, LlmError, LlmProvider, Usage};

/// Response cache settings (`agent.llm.cache` in `cairn.yaml`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// Answer repeated requests from `<data>/cache.db` (default off).
    pub enabled: bool,
    /// How long a completion stays fresh, in seconds (default 86400).
    pub ttl_secs: u64,
    /// Completions kept; the least recently used go first (default 10000).
    pub max_entries: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            ttl_secs: 86_400,
            max_entries: 10_000,
        }
    }
}

/// A provider answering repeated requests from a cache.
pub struct CachingProvider {
    inner: Box<dyn LlmProvider>,
    store: Arc<dyn ResponseCacheStore>,
    ttl: Duration,
    capacity: usize,
}

impl CachingProvider {
    /// `inner` behind `store` with the TTL and size of `config`.
    pub fn new(
        inner: Box<dyn LlmProvider>,
        store: Arc<dyn ResponseCacheStore>,
        config: &CacheConfig,
    ) -> Self {
        Self {
            inner,
            store,
            ttl: Duration::from_secs(config.ttl_secs),
            capacity: config.max_entries,
        }
    }

    fn key(&self, request: &CompletionRequest) -> String {
        let mut hasher = Sha256::new();
        hasher.update(self.inner.name().as_bytes());
        hasher.update([0]);
        hasher.update(self.inner.model().as_bytes());
        hasher.update([0]);
        hasher.update(serde_json::to_vec(request).unwrap_or_default());
        hex::encode(hasher.finalize())
    }
}

impl LlmProvider for CachingProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn model(&self) -> &str {
        self.inner.model()
    }

    fn complete(&self, request: &CompletionRequest) -> Result<Completion, LlmError> {
        let key = self.key(request);
        let now = now_ms();
        let fresh_after = now - self.ttl.as_millis() as i64;
        match self.store.lookup(&key, fresh_after, now).wait() {
            Ok(Some(text)) => match serde_json::from_str::<Completion>(&text) {
                Ok(mut cached) => {
                    cached.usage = Usage::default();
                    return Ok(cached);
                }
                Err(e) => tracing::warn!("a cached completion is unreadable; asking again: {e}"),
            },
            Ok(None) => {}
            Err(e) => tracing::warn!("the response cache failed; asking the provider: {e}"),
        }
        let completion = self.inner.complete(request)?;
        if let Ok(text) = serde_json::to_string(&completion)
            && let Err(e) = self.store.store(&key, text, now, self.capacity).wait()
        {
            tracing::warn!("cannot keep the completion in the response cache: {e}");
        }
        Ok(completion)
    }
}
