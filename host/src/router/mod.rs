//! The router: groups unrouted messages into batches by (conversation, channel) and routes
//! each batch by the rules of `cairn.yaml` to the main agent, a spawned task, or the floor.
//!
//! A group is collected for `batch_window_ms` from the arrival of its oldest message, so a
//! burst of messages in one conversation becomes one batch. Rules are decided per message:
//! a group whose messages take different routes is recorded as one batch per route. The batch's outcome is recorded
//! in the transaction that marks its messages routed (see [`crate::buffer::Buffer::route`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, watch};

use crate::buffer::{Buffer, BufferedMessage, NewBatch, Route};
use crate::store::{StorageError, now_ms};

/// Router settings (`router:` in `cairn.yaml`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RouterConfig {
    /// How long a conversation's messages are collected into one batch, in ms (default 500).
    pub batch_window_ms: u64,
    /// Rules, tried in order; the first match decides.
    pub rules: Vec<RoutingRule>,
    /// What happens to a batch no rule matches (default `main`).
    pub default_route: Route,
    /// Most unrouted messages read per tick (default 10000).
    pub max_messages_per_tick: usize,
}

impl Default for RouterConfig {
    fn default() -> Self {
        Self {
            batch_window_ms: 500,
            rules: Vec::new(),
            default_route: Route::Main,
            max_messages_per_tick: 10_000,
        }
    }
}

/// One routing rule: a message that matches every given field takes `route`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RoutingRule {
    /// Name recorded with the batches it routes.
    pub name: String,
    /// What to match: at least one field (a rule without any, as a `match:` whose lines
    /// were commented out leaves it, is refused rather than taking every message).
    #[serde(default, rename = "match")]
    pub matches: RuleMatch,
    /// `main`, `spawn` or `drop`.
    pub route: Route,
}

/// Glob patterns (`*`, `?`, `[...]`) over a message's fields. A message matches when it
/// matches every pattern given; a batch whose messages match different rules is split (see
/// [`Router::split`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RuleMatch {
    /// Channel (plugin id).
    pub channel: Option<String>,
    /// Sender.
    pub sender: Option<String>,
    /// Conversation.
    pub conversation: Option<String>,
    /// JSON pointer (`/action`, `/pull_request/user/login`) → pattern over the value there
    /// (strings as they are, other values as JSON text). A missing field does not match.
    #[serde(default)]
    pub payload: BTreeMap<String, String>,
}

/// A routing rule with its patterns compiled.
struct CompiledRule {
    name: String,
    route: Route,
    channel: Option<glob::Pattern>,
    sender: Option<glob::Pattern>,
    conversation: Option<glob::Pattern>,
    payload: Vec<(String, glob::Pattern)>,
}

/// Why routing rules are invalid; names the rule and field.
#[derive(Debug, thiserror::Error)]
#[error("router.rules[{index}] ({name}): {field}: {message}")]
pub struct RuleError {
    /// Position of the rule.
    pub index: usize,
    /// Its name.
    pub name: String,
    /// The field at fault.
    pub field: String,
    /// What was expected.
    pub message: String,
}

fn compile(rules: &[RoutingRule]) -> Result<Vec<CompiledRule>, RuleError> {
    rules
        .iter()
        .enumerate()
        .map(|(index, rule)| {
            let pattern =
                |field: &str, text: &Option<String>| -> Result<Option<glob::Pattern>, RuleError> {
                    text.as_deref()
                        .map(|t| {
                            glob::Pattern::new(t).map_err(|e| RuleError {
                                index,
                                name: rule.name.clone(),
                                field: format!("match.{field}"),
                                message: format!("`{t}` is not a glob pattern: {e}"),
                            })
                        })
                        .transpose()
                };
            let given = &rule.matches;
            if given.channel.is_none()
                && given.sender.is_none()
                && given.conversation.is_none()
                && given.payload.is_empty()
            {
                return Err(RuleError {
                    index,
                    name: rule.name.clone(),
                    field: "match".into(),
                    message: "expected at least one of channel, sender, conversation, payload \
                              (a rule matching nothing in particular would take every message; \
                              router.default_route sets where the unmatched go)"
                        .into(),
                });
            }
            let mut payload = Vec::new();
            for (pointer, text) in &rule.matches.payload {
                if !pointer.is_empty() && !pointer.starts_with('/') {
                    return Err(RuleError {
                        index,
                        name: rule.name.clone(),
                        field: format!("match.payload.{pointer}"),
                        message: "expected a JSON pointer starting with `/`".into(),
                    });
                }
                let compiled = pattern(&format!("payload.{pointer}"), &Some(text.clone()))?;
                payload.extend(compiled.map(|p| (pointer.clone(), p)));
            }
            Ok(CompiledRule {
                name: rule.name.clone(),
                route: rule.route,
                channel: pattern("channel", &rule.matches.channel)?,
                sender: pattern("sender", &rule.matches.sender)?,
                conversation: pattern("conversation", &rule.matches.conversation)?,
                payload,
            })
        })
        .collect()
}

/// How often a tick that keeps failing (a full disk, a database outage: ten times a
/// second) is logged again.
const TICK_FAILURE_REPORT_EVERY: Duration = Duration::from_secs(30);

/// What the log was told of failing ticks: the first failure, then one line every
/// [`TICK_FAILURE_REPORT_EVERY`] with how many failed meanwhile, and when routing works
/// again — not a line per tick on a full disk, which the log may share.
#[derive(Default)]
struct TickFailures {
    /// When the last failure was reported, while ticks fail.
    reported_at: Option<std::time::Instant>,
    /// Failed ticks since that report.
    unreported: u64,
}

impl TickFailures {
    fn failed(&mut self, error: &crate::buffer::BufferError) {
        match self.reported_at {
            None => tracing::error!("router tick failed: {error}"),
            Some(at) if at.elapsed() >= TICK_FAILURE_REPORT_EVERY => tracing::error!(
                "router tick failed: {error} ({} more failed ticks since the last report)",
                self.unreported
            ),
            Some(_) => {
                self.unreported += 1;
                return;
            }
        }
        self.reported_at = Some(std::time::Instant::now());
        self.unreported = 0;
    }

    fn succeeded(&mut self) {
        if self.reported_at.take().is_some() {
            tracing::info!(
                failed_since_report = self.unreported,
                "router ticks work again"
            );
            self.unreported = 0;
        }
    }
}

/// Check routing rules without running them (config validation).
pub fn validate_rules(rules: &[RoutingRule]) -> Result<(), RuleError> {
    compile(rules).map(|_| ())
}

impl CompiledRule {
    fn matches(&self, message: &BufferedMessage, payload: Option<&serde_json::Value>) -> bool {
        let field = |pattern: &Option<glob::Pattern>, value: &str| {
            pattern.as_ref().is_none_or(|p| p.matches(value))
        };
        if !(field(&self.channel, &message.channel)
            && field(&self.sender, &message.sender)
            && field(&self.conversation, &message.conversation))
        {
            return false;
        }
        if self.payload.is_empty() {
            return true;
        }
        let Some(payload) = payload else { return false };
        self.payload
            .iter()
            .all(|(pointer, pattern)| match payload.pointer(pointer) {
                Some(serde_json::Value::String(text)) => pattern.matches(text),
                Some(other) => pattern.matches(&other.to_string()),
                None => false,
            })
    }
}

/// Unrouted messages grouped by (conversation, channel): the groups to route now, and when
/// the next of the others will be.
#[derive(Debug, Default)]
pub struct Grouped {
    /// Groups whose oldest message has waited the window, each in id order, most urgent
    /// first, then oldest.
    pub ready: Vec<Vec<BufferedMessage>>,
    /// When the earliest group still collecting has waited the window (ms); none when
    /// every group is ready.
    pub next_due: Option<i64>,
}

/// Group messages into batches by (conversation, channel), each in id order, and keep
/// only the groups whose oldest message has waited at least `window_ms` (or all, when
/// `flush` is set).
pub fn group_ready(
    messages: Vec<BufferedMessage>,
    now: i64,
    window_ms: u64,
    flush: bool,
) -> Grouped {
    let mut groups: BTreeMap<(String, String), Vec<BufferedMessage>> = BTreeMap::new();
    for message in messages {
        groups
            .entry((message.conversation.clone(), message.channel.clone()))
            .or_default()
            .push(message);
    }
    let mut grouped = Grouped::default();
    for mut group in groups.into_values() {
        group.sort_by_key(|m| m.id);
        let oldest = group.iter().map(|m| m.received_at).min().unwrap_or(now);
        let due = oldest.saturating_add(window_ms as i64);
        if flush || now >= due {
            grouped.ready.push(group);
        } else {
            grouped.next_due = Some(grouped.next_due.map_or(due, |next| next.min(due)));
        }
    }
    grouped
        .ready
        .sort_by_key(|group| (group.iter().map(|m| m.priority).min(), group[0].id));
    grouped
}

/// Messages of one group that take the same route by the same rule: one batch.
#[derive(Debug, Clone, PartialEq)]
pub struct RoutedPart {
    /// Where the part goes.
    pub route: Route,
    /// The rule that decided, or none for the default.
    pub rule: Option<String>,
    /// Its messages in id order; never empty.
    pub messages: Vec<BufferedMessage>,
}

/// The router of a host.
pub struct Router {
    buffer: Arc<Buffer>,
    config: RouterConfig,
    rules: Vec<CompiledRule>,
    routed: Arc<Notify>,
}

impl Router {
    /// A router over `buffer`. `routed` is notified whenever batches were queued.
    pub fn new(
        buffer: Arc<Buffer>,
        config: RouterConfig,
        routed: Arc<Notify>,
    ) -> Result<Self, RuleError> {
        let rules = compile(&config.rules)?;
        Ok(Self {
            buffer,
            config,
            rules,
            routed,
        })
    }

    /// Decide the route of one message: the first rule it matches, or the default.
    pub fn decide(&self, message: &BufferedMessage) -> (Route, Option<String>) {
        let payload = if self.rules.iter().any(|r| !r.payload.is_empty()) {
            serde_json::from_str(&message.payload).ok()
        } else {
            None
        };
        self.rules
            .iter()
            .find(|rule| rule.matches(message, payload.as_ref()))
            .map(|rule| (rule.route, Some(rule.name.clone())))
            .unwrap_or((self.config.default_route, None))
    }

    /// Split a ready group into the batches to record: messages that take the same route
    /// by the same rule stay together (in id order), so a rule never drops or spawns a
    /// message it was not written for because it shares a conversation with one it was.
    /// Parts come in the order of their first message.
    pub fn split(&self, group: Vec<BufferedMessage>) -> Vec<RoutedPart> {
        let mut parts: Vec<RoutedPart> = Vec::new();
        for message in group {
            let (route, rule) = self.decide(&message);
            match parts
                .iter_mut()
                .find(|part| part.route == route && part.rule == rule)
            {
                Some(part) => part.messages.push(message),
                None => parts.push(RoutedPart {
                    route,
                    rule,
                    messages: vec![message],
                }),
            }
        }
        parts
    }

    /// Route every group that is ready.
    pub async fn tick(&self, flush: bool) -> Result<Tick, crate::buffer::BufferError> {
        let messages = self.buffer.unrouted(self.config.max_messages_per_tick)?;
        let unrouted = messages.len();
        let mut recorded = 0;
        let grouped = group_ready(messages, now_ms(), self.config.batch_window_ms, flush);
        for RoutedPart {
            route,
            rule,
            messages: group,
        } in grouped
            .ready
            .into_iter()
            .flat_map(|group| self.split(group))
        {
            let first = &group[0];
            let batch = NewBatch {
                channel: first.channel.clone(),
                conversation: first.conversation.clone(),
                priority: group
                    .iter()
                    .map(|m| m.priority)
                    .min()
                    .unwrap_or(first.priority),
                route,
                rule: rule.clone(),
                message_ids: group.iter().map(|m| m.id).collect(),
            };
            let id = match self.buffer.route(batch).await {
                Ok(id) => id,
                // Another host's router routed these messages first (a shared buffer).
                Err(crate::buffer::BufferError::Storage(StorageError::Taken(why))) => {
                    tracing::debug!(conversation = %first.conversation, "not routed here: {why}");
                    continue;
                }
                Err(e) => return Err(e),
            };
            recorded += 1;
            match route {
                Route::Drop => tracing::info!(
                    batch = id,
                    channel = %first.channel,
                    conversation = %first.conversation,
                    messages = group.len(),
                    rule = rule.as_deref().unwrap_or("default"),
                    "batch dropped"
                ),
                _ => tracing::debug!(
                    batch = id,
                    route = route.as_str(),
                    messages = group.len(),
                    "batch routed"
                ),
            }
        }
        if recorded > 0 {
            self.routed.notify_waiters();
        }
        Ok(Tick {
            batches: recorded,
            unrouted,
            next_due: grouped.next_due,
        })
    }

    /// Route until `stop` turns true. The router sleeps until a
    /// message arrives in this process or the next group is due; messages other processes
    /// store (`cairn send` beside a running host) are seen within one window (at least
    /// [`MIN_LOOK_AGAIN`]).
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let look_again = Duration::from_millis(self.config.batch_window_ms).max(MIN_LOOK_AGAIN);
        let mut warned_depth = false;
        let mut failures = TickFailures::default();
        loop {
            let next_due = match self.tick(false).await {
                Ok(tick) => {
                    failures.succeeded();
                    warned_depth = self.warn_depth(&tick, warned_depth);
                    tick.next_due
                }
                Err(e) => {
                    failures.failed(&e);
                    None
                }
            };
            let wait = next_due.map_or(look_again, |due| {
                Duration::from_millis(due.saturating_sub(now_ms()).max(1) as u64).min(look_again)
            });
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.buffer.arrival() => {}
                _ = stop.changed() => break,
            }
        }
    }

    /// Warn once when the unrouted messages pass `buffer.warn_depth`; whether they are
    /// above it.
    fn warn_depth(&self, tick: &Tick, warned: bool) -> bool {
        let depth = if tick.unrouted < self.config.max_messages_per_tick {
            tick.unrouted as i64
        } else {
            self.buffer.stats().map(|s| s.depth).unwrap_or(0)
        };
        let above = depth > self.buffer.config().warn_depth;
        if above && !warned {
            tracing::warn!(depth, "unrouted messages above buffer.warn_depth");
        }
        above
    }
}

/// How often, at most, the router looks for messages another process stored (they are
/// never signalled), when the batch window is shorter than this.
const MIN_LOOK_AGAIN: Duration = Duration::from_millis(100);

/// What one routing round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    /// Batches recorded.
    pub batches: usize,
    /// Unrouted messages read (at most `max_messages_per_tick`).
    pub unrouted: usize,
    /// When the next group still collecting is due (ms).
    pub next_due: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(
        id: i64,
        channel: &str,
        conversation: &str,
        received_at: i64,
        payload: &str,
    ) -> BufferedMessage {
        BufferedMessage {
            id,
            channel: channel.into(),
            sender: "octocat".into(),
            conversation: conversation.into(),
            payload: payload.into(),
            received_at,
            priority: if channel == "cli" { 10 } else { 50 },
            said_at: None,
        }
    }

    #[test]
    fn a_burst_in_one_conversation_is_one_batch_once_the_window_passed() {
        let messages: Vec<_> = (1..=5)
            .map(|i| message(i, "cli", "c", 1000 + i, "{}"))
            .collect();
        let collecting = group_ready(messages.clone(), 1100, 500, false);
        assert!(collecting.ready.is_empty(), "still collecting");
        assert_eq!(
            collecting.next_due,
            Some(1501),
            "due a window after the oldest"
        );
        let ready = group_ready(messages, 1600, 500, false).ready;
        assert_eq!(ready.len(), 1);
        assert_eq!(
            ready[0].iter().map(|m| m.id).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5]
        );
    }

    #[test]
    fn groups_split_by_conversation_and_channel_most_urgent_first() {
        let messages = vec![
            message(1, "hooks", "repo#1", 0, "{}"),
            message(2, "cli", "c", 0, "{}"),
            message(3, "hooks", "repo#1", 0, "{}"),
            message(4, "cli", "repo#1", 0, "{}"),
        ];
        let ready = group_ready(messages, 1000, 500, false).ready;
        let ids: Vec<Vec<i64>> = ready
            .iter()
            .map(|g| g.iter().map(|m| m.id).collect())
            .collect();
        assert_eq!(ids, [vec![2], vec![4], vec![1, 3]]);
    }

    fn router(rules: &str) -> Router {
        let dir = tempfile::tempdir().expect("tempdir");
        let buffer = Arc::new(Buffer::open(dir.path(), Default::default()).expect("buffer"));
        let config = RouterConfig {
            rules: serde_yaml::from_str(rules).expect("rules parse"),
            ..RouterConfig::default()
        };
        Router::new(buffer, config, Arc::new(Notify::new())).expect("rules compile")
    }

    #[test]
    fn rules_match_fields_and_payload_pointers_with_globs() {
        let router = router(
            "- name: prs\n  match: {channel: webhook, conversation: 'octo/*#*', payload: {/action: opened, /pull_request/draft: 'false'}}\n  route: spawn\n\
             - name: bots\n  match: {sender: '*[[]bot]'}\n  route: drop\n",
        );
        let pr = message(
            1,
            "webhook",
            "octo/hello#12",
            0,
            r#"{"action":"opened","pull_request":{"draft":false}}"#,
        );
        assert_eq!(router.decide(&pr), (Route::Spawn, Some("prs".into())));
        let draft = message(
            2,
            "webhook",
            "octo/hello#12",
            0,
            r#"{"action":"opened","pull_request":{"draft":true}}"#,
        );
        assert_eq!(router.decide(&draft), (Route::Main, None));
        let mut bot = message(3, "cli", "c", 0, "{}");
        bot.sender = "dependabot[bot]".into();
        assert_eq!(router.decide(&bot), (Route::Drop, Some("bots".into())));
        let missing = message(4, "webhook", "octo/hello#12", 0, "{}");
        assert_eq!(
            router.decide(&missing).0,
            Route::Main,
            "a missing field does not match"
        );
    }

    #[test]
    fn a_mixed_batch_is_split_by_rule_and_nothing_of_the_person_is_dropped() {
        let router = router("- name: bots\n  match: {sender: '*[[]bot]'}\n  route: drop\n");
        let mut group: Vec<_> = (1..=4).map(|id| message(id, "cli", "c", 0, "{}")).collect();
        group[1].sender = "dependabot[bot]".into();
        let parts = router.split(group);
        let summary: Vec<(Route, Option<String>, Vec<i64>)> = parts
            .into_iter()
            .map(|p| (p.route, p.rule, p.messages.iter().map(|m| m.id).collect()))
            .collect();
        assert_eq!(
            summary,
            [
                (Route::Main, None, vec![1, 3, 4]),
                (Route::Drop, Some("bots".into()), vec![2]),
            ]
        );
    }

    #[test]
    fn a_tick_failing_again_and_again_is_counted_not_logged_each_time() {
        let mut failures = TickFailures::default();
        let full = crate::buffer::BufferError::InvalidInput("the disk is full".into());
        failures.failed(&full);
        for _ in 0..100 {
            failures.failed(&full);
        }
        assert_eq!(failures.unreported, 100, "counted, not logged");
        failures.succeeded();
        assert!(failures.reported_at.is_none() && failures.unreported == 0);
    }

    #[test]
    fn bad_rules_name_the_rule_and_field() {
        let rules: Vec<RoutingRule> = serde_yaml::from_str(
            "- name: x\n  match: {payload: {action: opened}}\n  route: drop\n",
        )
        .expect("parse");
        let error = validate_rules(&rules).expect_err("pointer without slash");
        assert_eq!(
            error.to_string(),
            "router.rules[0] (x): match.payload.action: expected a JSON pointer starting with `/`"
        );
        let rules: Vec<RoutingRule> =
            serde_yaml::from_str("- name: y\n  match: {sender: '[oops'}\n  route: drop\n")
                .expect("parse");
        assert!(
            validate_rules(&rules)
                .expect_err("bad glob")
                .to_string()
                .contains("match.sender")
        );
        // A `match:` left empty (its lines commented out) would drop every message.
        for empty in [
            "  match:\n",
            "  match: {}\n",
            "  match: {payload: {}}\n",
            "",
        ] {
            let yaml = format!("- name: bots\n{empty}  route: drop\n");
            let rules: Vec<RoutingRule> = serde_yaml::from_str(&yaml).expect("parse");
            let error = validate_rules(&rules).expect_err(&yaml).to_string();
            assert!(
                error.starts_with("router.rules[0] (bots): match: expected at least one of channel, sender, conversation, payload"),
                "{yaml}: {error}"
            );
        }
    }
}

#[cfg(test)]
mod shared_buffer_tests {
    use cairn_storage::pg::buffer::{DEFAULT_LEASE, PgBuffer};
    use cairn_storage::pg::cluster::TestCluster;

    use super::*;
    use crate::buffer::{BufferConfig, NewMessage};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_hosts_routing_one_shared_buffer_route_each_message_once() {
        let Some(cluster) = TestCluster::shared() else {
            return;
        };
        let url = cluster.fresh_database();
        let open = || {
            let store = PgBuffer::connect(&url, DEFAULT_LEASE).expect("connect");
            Arc::new(Buffer::over(Box::new(store), BufferConfig::default()).expect("buffer"))
        };
        let hosts = [open(), open()];
        for i in 0..300 {
            hosts[i % 2]
                .push(NewMessage {
                    channel: "cli".into(),
                    sender: "ada".into(),
                    conversation: format!("c{}", i % 60),
                    payload: "{}".into(),
                    priority: None,
                    dedup_key: None,
                    said_at: None,
                })
                .expect("push");
        }
        let routers = hosts.each_ref().map(|buffer| {
            Router::new(
                buffer.clone(),
                RouterConfig::default(),
                Arc::new(Notify::new()),
            )
            .expect("router")
        });
        let (first, second) = tokio::join!(routers[0].tick(true), routers[1].tick(true));
        let routed = first.expect("first router").batches + second.expect("second router").batches;
        assert!(hosts[0].unrouted(1000).expect("unrouted").is_empty());
        let stats = hosts[1].stats().expect("stats");
        assert_eq!(stats.batches.get("main/queued"), Some(&(routed as i64)));
        let mut in_batches = 0;
        for id in 1..=routed as i64 * 4 {
            if let Some(batch) = hosts[0].batch(id).expect("batch") {
                in_batches += batch.messages.len();
            }
        }
        assert_eq!(in_batches, 300, "every message in exactly one batch");
    }
}
