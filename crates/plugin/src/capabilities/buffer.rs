//! The host side of `buffer`: channels push inbound messages through the host's inbox.

use super::*;

impl wit::buffer::Host for PluginContext {
    fn push(&mut self, message: wit::types::InboundMessage) -> Result<u64, WitError> {
        if self.grants.kind != PluginKind::Channel {
            return Err(denied("buffer: only channels may push messages"));
        }
        let Some(inbox) = &self.services.inbox else {
            return Err(unavailable("message buffer"));
        };
        let id = inbox
            .push(NewMessage {
                channel: self.plugin.to_string(),
                sender: message.sender,
                conversation: message.conversation,
                payload: message.payload,
                priority: message.priority,
                dedup_key: message.dedup_key,
                said_at: message.said_at,
            })
            .map_err(|e| self.store_error(e))?;
        Ok(id as u64)
    }
}
