//! The host's side of the plugin runtime's ports: the buffer takes channels' messages and
//! the journal takes plugins' events, with their failures in the shared error vocabulary.

use cairn_vocab::buffer::NewMessage;
use cairn_vocab::event::NewEvent;
use cairn_vocab::{Error, ErrorKind};

use crate::buffer::{Buffer, BufferError};
use crate::journal::{Journal, JournalError};
use crate::plugin::ports::{EventLog, Inbox};

impl Inbox for Buffer {
    fn push(&self, message: NewMessage) -> Result<i64, Error> {
        Buffer::push(self, message).map_err(|error| match error {
            BufferError::InvalidInput(text) => Error::new(ErrorKind::InvalidInput, text),
            BufferError::Storage(_) => Error::new(error.kind(), error.to_string()),
        })
    }
}

impl EventLog for Journal {
    fn append(&self, event: NewEvent) -> Result<i64, Error> {
        self.append_blocking(event).map_err(|error| match error {
            JournalError::InvalidInput(text) => Error::new(ErrorKind::InvalidInput, text),
            JournalError::ChainTooDeep { .. } | JournalError::Storage(_) => {
                Error::new(error.kind(), error.to_string())
            }
        })
    }
}
