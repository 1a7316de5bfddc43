//! The host side of `llm`, granted by `capabilities.llm`: the host's configured provider
//! behind the plugin's hourly budget ([`crate::llm_gate`]), its failures as typed WIT errors
//! (`unavailable` while it is down, rate-limiting or the budget is spent, `invalid-input`
//! for a request without a user message). The request's `format` asks for the provider's
//! JSON mode.

use super::*;
use crate::bindings::v0_2::convert::{from_wit_completion_request, to_wit_completion};

impl wit::llm::Host for PluginContext {
    fn complete(
        &mut self,
        request: wit::types::CompletionRequest,
    ) -> Result<wit::types::Completion, WitError> {
        if !self.grants.llm {
            return Err(denied("llm: the manifest does not grant capabilities.llm"));
        }
        let Some(gate) = self.services.llm.clone() else {
            return Err(unavailable("LLM provider"));
        };
        let request = from_wit_completion_request(request);
        let completion = gate
            .complete(&self.plugin, self.grants.llm_budget, &request)
            .map_err(to_wit_error)?;
        Ok(to_wit_completion(completion))
    }
}
