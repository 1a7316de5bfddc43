//! The gate on plugins' memory writes: `memory.autonomy` decides which kinds of write a
//! plugin may make at all, and `memory.plugin_writes_per_minute` how many in any minute.
//! A refused write gets a typed error at once (`denied` for autonomy, `unavailable` for the
//! rate), naming the setting.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cairn_memory::Autonomy;
use cairn_vocab::{Error, ErrorKind};

/// How long a write counts against the rate.
const WINDOW: Duration = Duration::from_secs(60);

/// Which kind of change a write makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// Adds to or changes memory (store, save-facts, mark-consolidated, set-importance).
    Add,
    /// Takes from memory (forget).
    Remove,
}

/// The autonomy and rate every plugin's memory writes pass.
pub struct WriteGate {
    autonomy: Autonomy,
    per_minute: u32,
    recent: Mutex<HashMap<String, VecDeque<Instant>>>,
}

impl Default for WriteGate {
    /// The defaults of `memory:` (supervised, 120 writes a minute).
    fn default() -> Self {
        let config = cairn_memory::MemoryConfig::default();
        Self::new(config.autonomy, config.plugin_writes_per_minute)
    }
}

impl WriteGate {
    /// A gate allowing `autonomy`'s writes, `per_minute` per plugin.
    pub fn new(autonomy: Autonomy, per_minute: u32) -> Self {
        Self {
            autonomy,
            per_minute,
            recent: Mutex::new(HashMap::new()),
        }
    }

    /// Let `plugin` make `writes` writes of `kind` now, or say why not.
    pub fn admit(&self, plugin: &str, kind: WriteKind, writes: usize) -> Result<(), Error> {
        let allowed = match (self.autonomy, kind) {
            (Autonomy::Full, _) | (Autonomy::Supervised, WriteKind::Add) => true,
            (Autonomy::ReadOnly, _) | (Autonomy::Supervised, WriteKind::Remove) => false,
        };
        if !allowed {
            let what = match kind {
                WriteKind::Add => "writes",
                WriteKind::Remove => "forgets",
            };
            return Err(Error::new(
                ErrorKind::Denied,
                format!(
                    "memory: plugins' {what} are not allowed under memory.autonomy: {}",
                    self.autonomy.as_str()
                ),
            ));
        }
        let now = Instant::now();
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        let times = recent.entry(plugin.to_string()).or_default();
        while times
            .front()
            .is_some_and(|at| now.duration_since(*at) >= WINDOW)
        {
            times.pop_front();
        }
        if times.len() + writes > self.per_minute as usize {
            return Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "memory: `{plugin}` made {} writes in the last minute; \
                     memory.plugin_writes_per_minute is {}",
                    times.len(),
                    self.per_minute
                ),
            ));
        }
        times.extend(std::iter::repeat_n(now, writes));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn autonomy_decides_the_kinds_and_the_rate_the_count() {
        let read_only = WriteGate::new(Autonomy::ReadOnly, 10);
        assert_eq!(
            read_only.admit("p", WriteKind::Add, 1).map_err(|e| e.kind),
            Err(ErrorKind::Denied)
        );
        let supervised = WriteGate::new(Autonomy::Supervised, 3);
        assert!(supervised.admit("p", WriteKind::Add, 2).is_ok());
        assert_eq!(
            supervised
                .admit("p", WriteKind::Remove, 1)
                .map_err(|e| e.kind),
            Err(ErrorKind::Denied)
        );
        assert_eq!(
            supervised.admit("p", WriteKind::Add, 2).map_err(|e| e.kind),
            Err(ErrorKind::Unavailable),
            "2 + 2 is over 3 a minute"
        );
        assert!(supervised.admit("p", WriteKind::Add, 1).is_ok());
        assert!(
            supervised.admit("q", WriteKind::Add, 3).is_ok(),
            "per plugin"
        );
        let full = WriteGate::new(Autonomy::Full, 5);
        assert!(full.admit("p", WriteKind::Remove, 1).is_ok());
    }
}
