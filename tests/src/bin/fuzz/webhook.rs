//! The `webhook` target: deliveries with arbitrary bodies, signed, mis-signed or unsigned,
//! handed across the WIT boundary to the real webhook channel component running in the
//! in-process plugin host, as the host's HTTP server hands them over.

use std::sync::Arc;

use hmac::{Hmac, KeyInit, Mac};
use proptest::prelude::*;
use sha2::Sha256;

use cairn::buffer::{Buffer, BufferConfig};
use cairn::config::HostConfig;
use cairn::plugin::PluginHost;
use cairn::plugin::capabilities::HostServices;
use cairn::plugin::kv::PluginKv;
use cairn::plugin::resolve;
use cairn::plugin::runtime::CallError;
use cairn::plugin::status::StatusLog;
use cairn::plugin::supervisor::PluginHandle;
use cairn::store::host::SqliteHost;
use cairn_tests::{PluginDir, shared_cache_dir};
use cairn_vocab::channel::HttpRequest;

use super::driver::Target;

/// The secret the channel verifies with; `main` puts it in the environment before any
/// thread starts.
pub const SECRET: &str = "fuzzing-secret";

/// Events the channel knows, and one it does not.
const EVENTS: [&str; 5] = ["pull_request", "issues", "push", "ping", "made_up"];

/// The channel in a plugin host of its own, pushing into a buffer in a temp dir.
pub struct Webhook {
    runtime: tokio::runtime::Runtime,
    channel: PluginHandle,
    buffer: Arc<Buffer>,
    _host: PluginHost,
    _plugins: PluginDir,
    _data: tempfile::TempDir,
}

impl Webhook {
    /// Start the bundled webhook channel.
    pub fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let plugins = PluginDir::new();
        plugins.bundled("webhook");
        let data = tempfile::tempdir().expect("data");
        let mut config = HostConfig {
            data_dir: data.path().to_path_buf(),
            ..HostConfig::default()
        };
        config.runtime.cache_dir = shared_cache_dir();
        let set = resolve::load(plugins.path()).expect("the webhook manifest");
        let store = cairn::store::buffer::SqliteBuffer::open(data.path()).expect("buffer.db");
        let buffer =
            Arc::new(Buffer::over(Box::new(store), BufferConfig::default()).expect("buffer"));
        let host_db = Arc::new(SqliteHost::open(data.path()).expect("host.db"));
        let services = Arc::new(HostServices {
            kv: Arc::new(PluginKv::new(host_db.clone(), config.kv.clone())),
            inbox: Some(buffer.clone()),
            events: None,
            interrupt: None,
            stop: None,
            memory: None,
            llm: None,
            memory_writes: Default::default(),
        });
        let status = Arc::new(StatusLog::new(host_db));
        let host = runtime
            .block_on(PluginHost::start(
                &set,
                &config.plugin_host(),
                services,
                status,
            ))
            .expect("the webhook channel starts");
        let channel = host.handle("webhook").expect("webhook handle").clone();
        Self {
            runtime,
            channel,
            buffer,
            _host: host,
            _plugins: plugins,
            _data: data,
        }
    }

    fn stored(&self) -> Result<i64, String> {
        self.buffer
            .stats()
            .map(|stats| stats.stored)
            .map_err(|e| format!("buffer stats: {e}"))
    }
}

fn signature(body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).expect("any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// How a delivery is signed, from its first byte.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Signed {
    Rightly,
    Wrongly,
    Not,
}

impl Target for Webhook {
    fn name(&self) -> &'static str {
        "webhook"
    }

    fn generated(&self) -> BoxedStrategy<Vec<u8>> {
        let text = "\\PC{0,40}";
        (any::<u8>(), text, text, 0u32..100_000, any::<bool>())
            .prop_map(|(mode, title, login, number, nested)| {
                let mut body = serde_json::json!({
                    "action": "opened",
                    "repository": {"full_name": title},
                    "pull_request": {"number": number, "title": title, "body": login},
                    "issue": {"number": number, "title": login},
                    "sender": {"login": login},
                });
                if nested {
                    body["pull_request"]["title"] = serde_json::json!([[{"x": [title]}]]);
                }
                let mut input = vec![mode];
                input.extend(body.to_string().into_bytes());
                input
            })
            .boxed()
    }

    fn check(&self, input: &[u8]) -> Result<(), String> {
        let (mode, body) = input.split_first().map_or((0, &[][..]), |(m, b)| (*m, b));
        let signed = match mode % 8 {
            0..=3 => Signed::Rightly,
            4 | 5 => Signed::Wrongly,
            _ => Signed::Not,
        };
        let mut headers = vec![
            ("content-type".to_string(), "application/json".to_string()),
            (
                "x-github-event".to_string(),
                EVENTS[usize::from(mode / 8) % EVENTS.len()].to_string(),
            ),
            (
                "x-github-delivery".to_string(),
                format!("fuzz-{:016x}", fnv(body)),
            ),
        ];
        match signed {
            Signed::Rightly => headers.push(("x-hub-signature-256".into(), signature(body))),
            Signed::Wrongly => headers.push((
                "x-hub-signature-256".into(),
                signature(&[body, b"x"].concat()),
            )),
            Signed::Not => {}
        }
        let request = HttpRequest {
            method: "POST".into(),
            path: "/github".into(),
            query: String::new(),
            headers,
            body: body.to_vec(),
        };
        let before = self.stored()?;
        let answer = self.runtime.block_on(
            self.channel
                .call(move |instance| instance.handle_webhook(&request)),
        );
        let answer = match answer {
            Ok(answer) => answer,
            Err(CallError::Plugin(error) | CallError::StoreAway { error, .. }) => {
                return Err(format!(
                    "the channel answered with an error instead of a status: {error:?}"
                ));
            }
            Err(fault) => return Err(format!("the channel faulted: {fault}")),
        };
        let after = self.stored()?;
        if signed != Signed::Rightly && (answer.status != 401 || after != before) {
            return Err(format!(
                "an unverified delivery got {} and stored {} messages",
                answer.status,
                after - before
            ));
        }
        if !(200..600).contains(&answer.status) {
            return Err(format!("status {} is no HTTP status", answer.status));
        }
        if answer.status >= 500 {
            return Err(format!(
                "a bad delivery is the sender's fault, not the channel's: {} {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            ));
        }
        Ok(())
    }
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}
