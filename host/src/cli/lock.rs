//! The data dir's lock file, `cairn.lock`: a host holds it for its whole life, so a second
//! host on the same data dir is refused and `cairn status` can tell whether one runs (a
//! lock dies with its process, a crash included; a recorded pid can be reused).

use std::path::Path;

use anyhow::{Context, Result};

const LOCK_FILE: &str = "cairn.lock";

/// Holds the data dir's lock file for the life of a host.
pub struct DataDirLock {
    _file: std::fs::File,
}

impl DataDirLock {
    /// Take the lock, or fail naming the data dir when another host holds it.
    pub fn acquire(data_dir: &Path) -> Result<Self> {
        let path = data_dir.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        // A `cairn status` probe holds a shared lock for an instant: try a few times.
        let mut attempt = 0;
        let outcome = loop {
            match file.try_lock() {
                Err(std::fs::TryLockError::WouldBlock) if attempt < 5 => {
                    attempt += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                outcome => break outcome,
            }
        };
        match outcome {
            Ok(()) => Ok(Self { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
                "another cairn host is running on data dir {} (lock {})",
                data_dir.display(),
                path.display()
            ),
            Err(std::fs::TryLockError::Error(e)) => {
                Err(e).with_context(|| format!("cannot lock {}", path.display()))
            }
        }
    }
}

/// Whether a host holds the data dir's lock right now. The probe takes a shared lock for
/// an instant and never creates the file.
pub fn host_holds(data_dir: &Path) -> bool {
    let Ok(file) = std::fs::File::open(data_dir.join(LOCK_FILE)) else {
        return false;
    };
    matches!(
        file.try_lock_shared(),
        Err(std::fs::TryLockError::WouldBlock)
    )
}
