//! The language model as plugins reach it (`llm.complete`): the host's provider behind a
//! budget per plugin — calls and tokens in any hour, from the manifest's limits — with each
//! plugin's usage and refusals recorded for `cairn status`. A plugin over budget gets an
//! `unavailable` error at once, never a wait. Each call is also recorded in the status store,
//! and a plugin's budget is seeded with its calls of the last hour when the host first meters
//! it, so a restart (or a crash loop) gives no plugin a fresh budget.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_llm::{Completion, CompletionRequest, LlmProvider};
use cairn_storage::host::StatusStore;
use cairn_vocab::plugin::LlmUsage;
use cairn_vocab::{Error, ErrorKind};

/// How long a call counts against a budget.
const WINDOW: Duration = Duration::from_secs(3600);

/// A plugin's hourly LLM budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LlmBudget {
    /// Calls in any hour.
    pub calls_per_hour: u32,
    /// Prompt and answer tokens in any hour.
    pub tokens_per_hour: u64,
}

/// One plugin's calls of the last hour and its totals since the host started.
#[derive(Default)]
struct Meter {
    /// When each call of the last hour started, and the tokens it used (0 while running).
    recent: VecDeque<(Instant, u64)>,
    usage: LlmUsage,
}

impl Meter {
    fn forget_older_than(&mut self, now: Instant) {
        while self
            .recent
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) >= WINDOW)
        {
            self.recent.pop_front();
        }
    }

    /// Why a new call is refused, if it is.
    fn refusal(&self, plugin: &str, budget: LlmBudget, now: Instant) -> Option<String> {
        let frees_in = |at: &Instant| WINDOW.saturating_sub(now.duration_since(*at)).as_secs() + 1;
        if self.recent.len() as u64 >= u64::from(budget.calls_per_hour) {
            let oldest = self.recent.front().map_or(0, |(at, _)| frees_in(at));
            return Some(format!(
                "llm budget of `{plugin}`: {} calls per hour used (limits.llm_calls_per_hour); \
                 the next is allowed in {oldest} s",
                budget.calls_per_hour
            ));
        }
        let tokens: u64 = self.recent.iter().map(|(_, t)| t).sum();
        if tokens >= budget.tokens_per_hour {
            return Some(format!(
                "llm budget of `{plugin}`: {tokens} of {} tokens per hour used \
                 (limits.llm_tokens_per_hour)",
                budget.tokens_per_hour
            ));
        }
        None
    }
}

/// The host's provider behind the plugins' budgets.
pub struct LlmGate {
    provider: Arc<dyn LlmProvider>,
    meters: Mutex<HashMap<String, Meter>>,
    status: Arc<dyn StatusStore>,
}

impl LlmGate {
    /// Plugins reach `provider`; their usage is recorded in `status`.
    pub fn new(provider: Arc<dyn LlmProvider>, status: Arc<dyn StatusStore>) -> Self {
        Self {
            provider,
            meters: Mutex::new(HashMap::new()),
            status,
        }
    }

    /// Complete `request` for `plugin` within `budget`. The call is counted before it is
    /// made (parallel calls cannot overrun the call budget); its tokens once it answers.
    pub fn complete(
        &self,
        plugin: &str,
        budget: LlmBudget,
        request: &CompletionRequest,
    ) -> Result<Completion, Error> {
        let started = Instant::now();
        let started_at = cairn_vocab::time::now_ms();
        self.admit(plugin, budget, started)?;
        let answer = self.provider.complete(request);
        let tokens = answer
            .as_ref()
            .map_or(0, |c| c.usage.input_tokens + c.usage.output_tokens);
        self.settle(plugin, started, tokens);
        // Advisory: committed with the writer's next group.
        let _queued = self.status.record_llm_call(plugin, started_at, tokens);
        answer.map_err(|e| Error::new(e.kind(), e.to_string()))
    }

    fn meters(&self) -> std::sync::MutexGuard<'_, HashMap<String, Meter>> {
        self.meters.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn admit(&self, plugin: &str, budget: LlmBudget, now: Instant) -> Result<(), Error> {
        let mut meters = self.meters();
        let meter = meters
            .entry(plugin.to_string())
            .or_insert_with(|| self.seeded(plugin, now));
        meter.usage.plugin_id = plugin.to_string();
        meter.forget_older_than(now);
        if let Some(refusal) = meter.refusal(plugin, budget, now) {
            meter.usage.refused += 1;
            let usage = meter.usage.clone();
            drop(meters);
            self.record(usage);
            return Err(Error::new(ErrorKind::Unavailable, refusal));
        }
        meter.recent.push_back((now, 0));
        Ok(())
    }

    /// A new meter for `plugin` holding its recorded calls of the last hour (of earlier runs
    /// of this data dir or, on a shared database, of every host), placed as long before
    /// `now` as they were made; its totals start at zero, as `cairn status` shows use since
    /// the host started.
    fn seeded(&self, plugin: &str, now: Instant) -> Meter {
        let wall = cairn_vocab::time::now_ms();
        let window_ms = i64::try_from(WINDOW.as_millis()).unwrap_or(i64::MAX);
        let calls = self
            .status
            .llm_calls_since(plugin, wall.saturating_sub(window_ms))
            .unwrap_or_else(|e| {
                tracing::warn!(plugin, "cannot read the LLM calls of the last hour: {e}");
                Vec::new()
            });
        let recent = calls
            .into_iter()
            .map(|(at, tokens)| {
                let ago = Duration::from_millis(u64::try_from(wall - at).unwrap_or(0));
                // A clock that cannot reach that far back counts the call as made now.
                (now.checked_sub(ago).unwrap_or(now), tokens)
            })
            .collect();
        Meter {
            recent,
            usage: LlmUsage::default(),
        }
    }

    fn settle(&self, plugin: &str, started: Instant, tokens: u64) {
        let mut meters = self.meters();
        let meter = meters.entry(plugin.to_string()).or_default();
        if let Some(slot) = meter.recent.iter_mut().find(|(at, _)| *at == started) {
            slot.1 = tokens;
        }
        meter.usage.calls += 1;
        meter.usage.tokens += tokens;
        let usage = meter.usage.clone();
        drop(meters);
        self.record(usage);
    }

    /// Record a plugin's totals. Advisory, so the call does not wait for the commit: the
    /// writer commits it with its next group.
    fn record(&self, mut usage: LlmUsage) {
        if usage.plugin_id.is_empty() {
            return;
        }
        usage.updated_at = cairn_vocab::time::now_ms();
        let _queued = self.status.record_llm_usage(&usage);
    }
}
