//! Targets for the text formats an operator or a plugin author writes: manifests, cron
//! expressions, routing rules.

use std::path::PathBuf;
use std::sync::Arc;

use chrono::{TimeZone, Utc};
use proptest::prelude::*;

use cairn::buffer::{Buffer, BufferConfig, BufferedMessage};
use cairn::plugin::manifest;
use cairn::router::{Router, RouterConfig, RoutingRule};

use super::driver::Target;

/// Text from `pieces`, joined: the strategies below build formats from their own tokens.
fn joined(pieces: Vec<String>, separator: &'static str) -> Vec<u8> {
    pieces.join(separator).into_bytes()
}

/// `manifest`: a plugin manifest file, loaded and validated as `cairn plugins check` does.
/// Properties: no panic; a refusal has at least one error, each naming this file and saying
/// what is wrong; an accepted manifest's schedules have cron expressions that parse.
pub struct Manifests {
    file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Manifests {
    /// A target writing its inputs to a manifest file in a temp dir.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        Self {
            file: dir.path().join("fuzzed.yaml"),
            _dir: dir,
        }
    }
}

fn manifest_yaml() -> BoxedStrategy<Vec<u8>> {
    let kind = prop_oneof![
        Just("channel"),
        Just("handler"),
        Just("memory-backend"),
        Just("consolidator"),
        Just("sleep-handler"),
        Just("Channel"),
        Just("")
    ];
    let version = prop_oneof![
        Just("0.1.0".to_string()),
        "[0-9]{1,3}\\.[0-9x*]{1,3}\\.[0-9a-z.+-]{0,8}"
    ];
    let requirement = prop_oneof![Just("^0.1".to_string()), "[~^>=<*,. 0-9a-z-]{0,12}"];
    let number = prop_oneof![
        Just("64".to_string()),
        Just("-1".to_string()),
        Just("1e99".to_string()),
        Just("18446744073709551616".to_string()),
        "[0-9]{1,20}"
    ];
    let topic = prop_oneof![Just("message.received".to_string()), "[a-z*.#>-]{0,16}"];
    let cron = prop_oneof![Just("*/5 * * * *".to_string()), "[0-9*/,LW#? -]{0,24}"];
    (kind, version, requirement, number.clone(), number, proptest::collection::vec(topic, 0..4), cron,
     "[a-zA-Z0-9._/ -]{0,20}", any::<bool>())
        .prop_map(|(kind, version, requirement, memory, timeout, topics, cron, path, webhook)| {
            joined(vec![
                "id: fuzzed".into(),
                format!("version: {version}"),
                format!("kind: {kind}"),
                "component: fuzzed.wasm".into(),
                format!("api: \"{requirement}\""),
                format!("depends_on: {{other: \"{requirement}\"}}"),
                format!("events: {{subscribes: [{}], emits: [{}]}}", topics.join(", "), topics.join(", ")),
                format!("channel: {{webhook: {webhook}, priority: {memory}}}"),
                format!("capabilities: {{kv: true, files: [{{path: \"{path}\", mode: rw}}], env: [\"{path}\"], http: [\"{path}\"]}}"),
                format!("limits: {{memory_mb: {memory}, timeout_ms: {timeout}, fuel: {timeout}}}"),
                format!("schedules: [{{name: tick, cron: \"{cron}\"}}]"),
                format!("config: {{a: [{memory}, {{b: \"{path}\"}}]}}"),
            ], "\n")
        })
        .boxed()
}

impl Target for Manifests {
    fn name(&self) -> &'static str {
        "manifest"
    }

    fn generated(&self) -> BoxedStrategy<Vec<u8>> {
        manifest_yaml()
    }

    fn check(&self, input: &[u8]) -> Result<(), String> {
        std::fs::write(&self.file, input).map_err(|e| format!("cannot write the input: {e}"))?;
        match manifest::load_unbuilt(&self.file) {
            Ok(loaded) => {
                for schedule in loaded.schedules() {
                    manifest::check_cron(&schedule.cron).map_err(|e| {
                        format!(
                            "an accepted manifest has a bad cron `{}`: {e}",
                            schedule.cron
                        )
                    })?;
                }
                Ok(())
            }
            Err(errors) if errors.is_empty() => Err("refused without an error".into()),
            Err(errors) => errors.iter().try_for_each(|error| {
                if error.file != self.file {
                    return Err(format!("an error names {} instead", error.file.display()));
                }
                if error.message.trim().is_empty() {
                    return Err(format!("an error says nothing (field `{}`)", error.field));
                }
                Ok(())
            }),
        }
    }
}

/// `cron`: a schedule's expression, checked as the manifest loader does, then asked for
/// its next firing as the scheduler does. Properties: no panic, no hang (an expression
/// that never fires answers so rather than search for ever).
pub struct Crons;

impl Target for Crons {
    fn name(&self) -> &'static str {
        "cron"
    }

    fn generated(&self) -> BoxedStrategy<Vec<u8>> {
        let field = prop_oneof![
            Just("*".to_string()),
            "[0-9]{1,2}",
            "\\*/[0-9]{1,3}",
            "[0-9]{1,2}-[0-9]{1,2}(/[0-9]{1,2})?",
            "[0-9]{1,2}(,[0-9]{1,2}){1,4}",
            prop_oneof![
                Just("MON-FRI"),
                Just("JAN"),
                Just("L"),
                Just("5L"),
                Just("15W"),
                Just("1#3"),
                Just("?"),
                Just("SUN#5")
            ]
            .prop_map(str::to_string),
            "[0-9A-Z*/,#?LW-]{0,6}",
        ];
        proptest::collection::vec(field, 5..=5)
            .prop_map(|fields| joined(fields, " "))
            .boxed()
    }

    fn check(&self, input: &[u8]) -> Result<(), String> {
        let text = String::from_utf8_lossy(input);
        if manifest::check_cron(&text).is_err() {
            return Ok(());
        }
        let cron: croner::Cron = text
            .parse()
            .map_err(|e| format!("check_cron accepted `{text}` but it does not parse: {e}"))?;
        let from = [
            Utc.with_ymd_and_hms(2024, 2, 29, 23, 59, 59).single(),
            Utc.with_ymd_and_hms(2099, 12, 31, 23, 59, 0).single(),
            Some(Utc::now()),
        ];
        for start in from.into_iter().flatten() {
            // Ok or "no next time": both are answers.
            let _ = cron.find_next_occurrence(&start, false);
        }
        Ok(())
    }
}

/// `routing`: routing rules as `router.rules` YAML, validated as config loading does, then
/// applied to messages. Properties: no panic; rules that validate build a router; the
/// router decides every message.
pub struct Routing {
    buffer: Arc<Buffer>,
    messages: Vec<BufferedMessage>,
    _dir: tempfile::TempDir,
}

impl Routing {
    /// A target over a buffer in a temp dir (the router needs one to exist).
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = cairn::store::buffer::SqliteBuffer::open(dir.path()).expect("buffer.db");
        let buffer =
            Arc::new(Buffer::over(Box::new(store), BufferConfig::default()).expect("buffer"));
        let message =
            |channel: &str, sender: &str, conversation: &str, payload: &str| BufferedMessage {
                id: 1,
                channel: channel.into(),
                sender: sender.into(),
                conversation: conversation.into(),
                payload: payload.into(),
                priority: 10,
                received_at: 0,
                said_at: None,
            };
        Self {
            buffer,
            messages: vec![
                message(
                    "webhook",
                    "octocat",
                    "octo/app#1",
                    r#"{"event":"pull_request","action":"opened","body":{"a":[1,{"b":"c"}]}}"#,
                ),
                message("cli", "dependabot[bot]", "cli", r#"{"text":"bump"}"#),
                message("", "", "", "{}"),
                message("w[eb]*", "?", "/~1", r#"{"":{"":{"~":null}}}"#),
            ],
            _dir: dir,
        }
    }
}

impl Target for Routing {
    fn name(&self) -> &'static str {
        "routing"
    }

    fn generated(&self) -> BoxedStrategy<Vec<u8>> {
        let glob = "[a-z*?\\[\\]!{},/#^\\\\-]{0,12}";
        let pointer = prop_oneof![
            Just("/event".to_string()),
            "(/[a-z0-9~]{0,4}){0,4}",
            "[a-z~]{0,6}"
        ];
        let route = prop_oneof![Just("main"), Just("spawn"), Just("drop"), Just("elsewhere")];
        let rule = (glob, glob, glob, pointer, glob, route).prop_map(
            |(channel, sender, conversation, pointer, value, route)| {
                format!(
                    "- name: r\n  match: {{channel: \"{channel}\", sender: \"{sender}\", conversation: \"{conversation}\", payload: {{\"{pointer}\": \"{value}\"}}}}\n  route: {route}"
                )
            },
        );
        proptest::collection::vec(rule, 0..4)
            .prop_map(|rules| joined(rules, "\n"))
            .boxed()
    }

    fn check(&self, input: &[u8]) -> Result<(), String> {
        let Ok(rules) = serde_yaml::from_slice::<Vec<RoutingRule>>(input) else {
            return Ok(());
        };
        if cairn::router::validate_rules(&rules).is_err() {
            return Ok(());
        }
        let config = RouterConfig {
            rules,
            ..RouterConfig::default()
        };
        let router = Router::new(self.buffer.clone(), config, Arc::default())
            .map_err(|e| format!("rules that validate do not build a router: {e}"))?;
        let mut messages = self.messages.clone();
        if let Some(last) = messages.last_mut() {
            last.payload = String::from_utf8_lossy(input).into_owned();
        }
        for message in &messages {
            router.decide(message);
        }
        router.split(messages);
        Ok(())
    }
}
