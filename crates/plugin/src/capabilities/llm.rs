//! The host side of `llm`, granted by `capabilities.llm`.

use super::*;

impl wit::llm::Host for PluginContext {
    fn complete(
        &mut self,
        _request: wit::types::CompletionRequest,
    ) -> Result<wit::types::Completion, WitError> {
        if !self.grants.llm {
            return Err(denied("llm: the manifest does not grant capabilities.llm"));
        }
        Err(unavailable("LLM provider"))
    }
}
