//! Plugin output into the host's `tracing` log: the `log` import and guest stdout/stderr,
//! tagged with the plugin id and rate-limited so a flooding plugin cannot drown the host.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;

use crate::rate::{Take, TokenBucket};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

/// Severity of a plugin log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Very detailed.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something odd the plugin handled.
    Warn,
    /// Something failed.
    Error,
}

/// How many of the last unindented stderr lines a fault quotes.
const STDERR_TAIL_LINES: usize = 6;

/// The most of each such line a fault quotes, in bytes.
const STDERR_TAIL_LINE_BYTES: usize = 200;

/// One instance's switch for its lines: while it is on, what the instance writes is not
/// logged (its stderr is still kept for a fault to quote). A webhook channel's inbound
/// instance runs `init` with it on: the same component with the same config and environment
/// says what the main instance's `init` already said, and twice would read as two problems.
#[derive(Debug, Clone, Default)]
pub struct Hush(Arc<AtomicBool>);

impl Hush {
    /// Turn it on or off.
    pub fn set(&self, on: bool) {
        self.0.store(on, Ordering::Relaxed);
    }

    /// Whether it is on.
    pub fn is_on(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// The rate-limited log of one plugin. Shared by its `log` import and its stdout/stderr.
pub struct PluginLog {
    plugin: Arc<str>,
    line_max_bytes: usize,
    bucket: TokenBucket,
    /// The last unindented lines written to stderr since the running call began: what an
    /// interpreter says before it traps (Python's `ValueError: boom`, JavaScript's
    /// `Error: boom`, Rust's panic message), without the indented stack frames.
    stderr_tail: Mutex<VecDeque<String>>,
}

impl PluginLog {
    /// A log for `plugin` allowing `rate_per_sec` lines per second with bursts of `burst`.
    pub fn new(plugin: Arc<str>, rate_per_sec: u32, burst: u32, line_max_bytes: usize) -> Self {
        Self {
            plugin,
            line_max_bytes,
            bucket: TokenBucket::new(rate_per_sec, burst),
            stderr_tail: Mutex::new(VecDeque::new()),
        }
    }

    /// A call begins: what stderr said before it is not about it.
    pub fn forget_stderr(&self) {
        self.tail().clear();
    }

    /// The last few unindented stderr lines since the call began, joined by ` | `: what a
    /// fault quotes so an operator sees why a plugin trapped (kept even when the log's rate
    /// limit dropped them).
    pub fn stderr_tail(&self) -> Option<String> {
        let tail = self.tail();
        (!tail.is_empty()).then(|| {
            tail.iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(" | ")
        })
    }

    fn keep_stderr(&self, line: &str) {
        if line.trim().is_empty() || line.starts_with(char::is_whitespace) {
            return;
        }
        let mut tail = self.tail();
        if tail.len() == STDERR_TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(truncate(line, STDERR_TAIL_LINE_BYTES).to_string());
    }

    fn tail(&self) -> MutexGuard<'_, VecDeque<String>> {
        self.stderr_tail
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Keep one line from `stream` that an instance's [`Hush`] holds back: only stderr's,
    /// for a fault to quote.
    pub fn hold_back(&self, stream: &str, line: &str) {
        if stream == "stderr" {
            self.keep_stderr(line);
        }
    }

    /// Write one line from `stream` (`log`, `stdout` or `stderr`); dropped over the rate,
    /// which is said at the first line a flood drops, and the count at each next line kept
    /// (or when the instance goes).
    pub fn write(&self, level: Level, stream: &str, line: &str) {
        if stream == "stderr" {
            self.keep_stderr(line);
        }
        let plugin = &*self.plugin;
        match self.bucket.take() {
            Take::Refused { first: true } => {
                tracing::warn!(target: "cairn::plugin", plugin, "plugin log rate exceeded (runtime.log_rate_per_sec): dropping lines until it slows");
                return;
            }
            Take::Refused { first: false } => return,
            Take::Taken { refused_before: 0 } => {}
            Take::Taken { refused_before } => report_dropped(plugin, refused_before),
        }
        let line = one_line(truncate(line, self.line_max_bytes));
        match level {
            Level::Trace => tracing::trace!(target: "cairn::plugin", plugin, stream, "{line}"),
            Level::Debug => tracing::debug!(target: "cairn::plugin", plugin, stream, "{line}"),
            Level::Info => tracing::info!(target: "cairn::plugin", plugin, stream, "{line}"),
            Level::Warn => tracing::warn!(target: "cairn::plugin", plugin, stream, "{line}"),
            Level::Error => tracing::error!(target: "cairn::plugin", plugin, stream, "{line}"),
        }
    }
}

impl Drop for PluginLog {
    /// Lines dropped since the last one kept are counted when the instance goes.
    fn drop(&mut self) {
        let dropped = self.bucket.take_refused();
        if dropped > 0 {
            report_dropped(&self.plugin, dropped);
        }
    }
}

/// `line` with its line breaks and other control characters written as escapes (`\n`,
/// `\u{1b}`), so a plugin's line is one line of the host's log: a plugin logging text an
/// outsider wrote (a webhook's comment) could otherwise start a line of its own there, one
/// that reads as the host's (`… ERROR cairn::cli::run: …`; until 2026-12-02, found by an
/// operator's test). Tabs stay.
fn one_line(line: &str) -> std::borrow::Cow<'_, str> {
    if !line.chars().any(|c| c.is_control() && c != '\t') {
        return line.into();
    }
    let mut escaped = String::with_capacity(line.len() + 8);
    for c in line.chars() {
        match c {
            '\n' => escaped.push_str("\\n"),
            '\r' => escaped.push_str("\\r"),
            '\t' => escaped.push('\t'),
            c if c.is_control() => escaped.push_str(&c.escape_unicode().to_string()),
            c => escaped.push(c),
        }
    }
    escaped.into()
}

/// Say how many of a plugin's lines were dropped.
fn report_dropped(plugin: &str, dropped: u64) {
    tracing::warn!(target: "cairn::plugin", plugin, suppressed = dropped, "plugin log rate exceeded: {dropped} lines dropped");
}

fn truncate(line: &str, max: usize) -> &str {
    if line.len() <= max {
        return line;
    }
    let mut end = max;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

/// A guest output stream (stdout or stderr) that turns written bytes into log lines.
#[derive(Clone)]
pub struct LogStream {
    log: Arc<PluginLog>,
    stream: &'static str,
    level: Level,
    hush: Hush,
}

impl LogStream {
    /// Lines written to this stream are logged as `stream` at `level`, unless `hush` (the
    /// instance's) is on.
    pub fn new(log: Arc<PluginLog>, stream: &'static str, level: Level, hush: Hush) -> Self {
        Self {
            log,
            stream,
            level,
            hush,
        }
    }
}

impl IsTerminal for LogStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogStream {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(LineWriter {
            target: self.clone(),
            pending: Vec::new(),
        })
    }
}

struct LineWriter {
    target: LogStream,
    pending: Vec<u8>,
}

impl LineWriter {
    fn emit(&mut self, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let line = text.trim_end_matches(['\n', '\r']);
        let target = &self.target;
        if target.hush.is_on() {
            target.log.hold_back(target.stream, line);
        } else {
            target.log.write(target.level, target.stream, line);
        }
    }
}

impl AsyncWrite for LineWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        this.pending.extend_from_slice(buf);
        while let Some(newline) = this.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = this.pending.drain(..=newline).collect();
            this.emit(&line);
        }
        if this.pending.len() > this.target.log.line_max_bytes {
            let line = std::mem::take(&mut this.pending);
            this.emit(&line);
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            self.emit(&line);
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        if !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            self.emit(&line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_break_in_a_plugins_line_is_written_as_an_escape() {
        let forged = "reply: ok\n2026-12-02T06:30:00Z ERROR cairn::cli::run: buffer.db: damaged";
        let written = one_line(forged);
        assert!(!written.contains('\n'), "{written}");
        assert!(written.contains("ok\\n2026"), "{written}");
        assert_eq!(one_line("bell \u{7} and\ttab"), "bell \\u{7} and\ttab");
        assert!(matches!(
            one_line("plain"),
            std::borrow::Cow::Borrowed("plain")
        ));
    }

    #[test]
    fn the_bucket_drops_lines_over_the_burst() {
        let log = PluginLog::new("p".into(), 1, 3, 100);
        for _ in 0..10 {
            log.write(Level::Info, "log", "x");
        }
        // Three lines went out; the bucket is empty until it refills.
        assert!(matches!(log.bucket.take(), Take::Refused { .. }));
    }

    #[test]
    fn a_fault_quotes_the_last_unindented_stderr_lines_of_the_call() {
        let log = PluginLog::new("p".into(), 1, 1, 100);
        log.write(Level::Warn, "stderr", "said before the call");
        log.forget_stderr();
        assert_eq!(log.stderr_tail(), None);
        for line in [
            "Traceback (most recent call last):",
            "  File \"app.py\", line 7, in on_event",
            "    raise ValueError(\"boom\")",
            "",
            "ValueError: boom",
        ] {
            log.write(Level::Warn, "stderr", line);
        }
        log.write(Level::Info, "stdout", "not stderr");
        assert_eq!(
            log.stderr_tail().as_deref(),
            Some("Traceback (most recent call last): | ValueError: boom"),
            "kept past the rate limit, frames and other streams left out"
        );
        for line in ["1", "2", "3", "4", "5", "6", "7"] {
            log.write(Level::Warn, "stderr", line);
        }
        assert_eq!(log.stderr_tail().as_deref(), Some("2 | 3 | 4 | 5 | 6 | 7"));
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("hello", 10), "hello");
    }
}
