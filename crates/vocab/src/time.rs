//! Time as Cairn stores it.

/// Milliseconds since the Unix epoch, the timestamp unit of every Cairn table.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
