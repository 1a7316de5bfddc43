//! The host side of `llm`, granted by `capabilities.llm`: the host's configured provider
//! behind the plugin's hourly budget ([`crate::llm_gate`]), its failures as typed WIT errors
//! (`unavailable` while it is down, rate-limiting or the budget is spent, `invalid-input`
//! for a request without a user message). `complete-json` is the same call with the
//! provider's JSON mode asked for.

use super::*;
use crate::bindings::v0_1::convert::{from_wit_completion_request, to_wit_completion};

impl PluginContext {
    /// Complete `request` through the plugin's budget, in JSON mode when `json`.
    fn complete_through_gate(
        &self,
        request: wit::types::CompletionRequest,
        json: bool,
    ) -> Result<wit::types::Completion, WitError> {
        if !self.grants.llm {
            return Err(denied("llm: the manifest does not grant capabilities.llm"));
        }
        let Some(gate) = self.services.llm.clone() else {
            return Err(unavailable("LLM provider"));
        };
        let mut request = from_wit_completion_request(request);
        request.json = json;
        let completion = gate
            .complete(&self.plugin, self.grants.llm_budget, &request)
            .map_err(to_wit_error)?;
        Ok(to_wit_completion(completion))
    }
}

impl wit::llm::Host for PluginContext {
    fn complete(
        &mut self,
        request: wit::types::CompletionRequest,
    ) -> Result<wit::types::Completion, WitError> {
        self.complete_through_gate(request, false)
    }

    fn complete_json(
        &mut self,
        request: wit::types::CompletionRequest,
    ) -> Result<wit::types::Completion, WitError> {
        self.complete_through_gate(request, true)
    }
}
