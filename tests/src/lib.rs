//! Helpers for the integration tests: plugin directories assembled from the built guest
//! components, and the real `cairn` binary run as a child process whose log is captured.

pub mod memory_dataset;
pub mod recall_eval;
pub mod storage;
pub mod stub_http;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The directory of the built Rust guest components (`<name>.wasm`).
pub fn guests_dir() -> PathBuf {
    PathBuf::from(env!("CAIRN_GUESTS_DIR"))
}

/// The built Python test plugin.
pub fn python_plugin() -> PathBuf {
    PathBuf::from(env!("CAIRN_PYTHON_PLUGIN"))
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CAIRN_WORKSPACE_ROOT"))
}

/// The `cairn` binary of the current build profile (built by `cargo xtask test` first).
pub fn cairn_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // A test runs from target/<profile>/deps/, a binary (the bench) from target/<profile>/.
    let mut dir = exe.parent().expect("target/<profile>");
    if dir.ends_with("deps") {
        dir = dir.parent().expect("target/<profile>");
    }
    let bin = dir.join("cairn");
    assert!(
        bin.is_file(),
        "{} is missing: build it first (`cargo build -p cairn`, or run the tests with `cargo xtask test`)",
        bin.display()
    );
    bin
}

/// A compile cache shared by all tests, so each component compiles once per test run.
pub fn shared_cache_dir() -> PathBuf {
    workspace_root().join("target").join("test-cache")
}

/// A plugin directory under construction, in a temporary folder.
pub struct PluginDir {
    dir: tempfile::TempDir,
}

impl Default for PluginDir {
    fn default() -> Self {
        Self::new()
    }
}

impl PluginDir {
    /// An empty plugin directory.
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp plugin dir"),
        }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Copy a built guest component (`hostile`, `steady`, `counter`, ...) into the directory.
    pub fn component(&self, name: &str) -> &Self {
        let source = if name == "python-kv" {
            python_plugin()
        } else {
            guests_dir().join(format!("{name}.wasm"))
        };
        std::fs::copy(&source, self.dir.path().join(format!("{name}.wasm")))
            .unwrap_or_else(|e| panic!("copy {}: {e}", source.display()));
        self
    }

    /// The bundled plugins `ids`, each with its manifest as shipped.
    pub fn bundled_all(&self, ids: &[&str]) -> &Self {
        for id in ids {
            self.bundled(id);
        }
        self
    }

    /// The terminal channel and the four cognitive plugins as shipped: the host a user runs.
    pub fn cognitive_host() -> Self {
        let dir = Self::new();
        dir.bundled_all(&[
            "cli",
            "episode-summarizer",
            "fact-extractor",
            "memory-consolidator",
            "sleeper",
        ]);
        dir
    }

    /// The well-behaved test channel `steady`, polling every 50 ms and writing its kv: the
    /// neighbour hostile plugins must not disturb.
    pub fn steady(&self) -> &Self {
        self.plugin(
            "steady",
            "channel",
            "steady",
            "channel: {poll_interval_ms: 50}\ncapabilities: {kv: true}\n",
        )
    }

    /// The webhook channel as shipped, and the `counter` handler logging each
    /// `message.received` it takes (`counter: event #N seq=S`, see [`delivered_seqs`]): a
    /// load of deliveries whose every event can be counted.
    pub fn counted_webhook(&self) -> &Self {
        self.bundled("webhook");
        self.plugin(
            "counter",
            "handler",
            "counter",
            "events: {subscribes: ['message.received']}\ncapabilities: {kv: true}\n",
        )
    }

    /// Add a bundled plugin as shipped: its manifest from `manifests/` and its component.
    pub fn bundled(&self, id: &str) -> &Self {
        self.bundled_with(id, |manifest| manifest)
    }

    /// Add a bundled plugin with its manifest changed by `edit` (e.g. a config value).
    pub fn bundled_with(&self, id: &str, edit: impl FnOnce(String) -> String) -> &Self {
        let path = workspace_root().join(format!("manifests/{id}.yaml"));
        let manifest = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let component = manifest
            .lines()
            .find_map(|line| line.strip_prefix("component:"))
            .map(|c| c.trim().trim_end_matches(".wasm").to_string())
            .unwrap_or_else(|| panic!("{}: no component line", path.display()));
        self.manifest(id, &edit(manifest));
        self.component(&component)
    }

    /// Add the bundled webhook channel with its GitHub API at `api_base`, granted `http`
    /// only (a host and port, or a name the manifest's `api_base` does not match).
    pub fn webhook_posting_to(&self, api_base: &str, http: &str) -> &Self {
        self.bundled_with("webhook", |manifest| {
            manifest
                .replace(
                    "api_base: https://api.github.com",
                    &format!("api_base: {api_base}"),
                )
                .replace("http: [api.github.com]", &format!("http: ['{http}']"))
        })
    }

    /// Write a manifest file `<id>.yaml` with this YAML body.
    pub fn manifest(&self, id: &str, yaml: &str) -> &Self {
        std::fs::write(self.dir.path().join(format!("{id}.yaml")), yaml).expect("write manifest");
        self
    }

    /// Add a plugin: copy `component` and write a manifest with the standard header plus
    /// `extra`. The bundled plugins are built against API 0.2 (`^0.2`, the counter 0.2.1);
    /// the test plugins of `tests/plugins` against v0.1, which the host keeps loading
    /// unchanged, but for `runs`, a 0.2.1 handler.
    pub fn plugin(&self, id: &str, kind: &str, component: &str, extra: &str) -> &Self {
        self.component(component);
        let bundled = workspace_root()
            .join(format!("manifests/{component}.yaml"))
            .is_file();
        // The test plugins are 0.1 components, but for those built against 0.2.1.
        let api = if bundled || component == "runs" {
            "^0.2"
        } else {
            "^0.1"
        };
        self.manifest(
            id,
            &format!("id: {id}\nversion: 1.0.0\nkind: {kind}\ncomponent: {component}.wasm\napi: {api}\n{extra}"),
        )
    }
}

/// Copy a plugin project's source files from `from` into `to` (created), leaving out the
/// component a local build may have left beside them and every folder (`wit/`, `build/`).
pub fn copy_project_sources(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let path = entry?.path();
        let built = path.extension().is_some_and(|e| e == "wasm");
        if path.is_file()
            && !built
            && let Some(name) = path.file_name()
        {
            std::fs::copy(&path, to.join(name))?;
        }
    }
    Ok(())
}

/// Every event of a data dir's journal, oldest first, as `cairn journal tail --json` prints
/// them (it reads beside a running host).
pub fn journal_events(data: &Path) -> Vec<serde_json::Value> {
    let tail = cairn_ok(&[
        "journal",
        "tail",
        "--json",
        "--limit",
        "1000000",
        "--data",
        &data.display().to_string(),
    ]);
    String::from_utf8_lossy(&tail.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect()
}

/// A running `cairn run` process with its log captured and its stdin open.
pub struct Host {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    log: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

/// Environment every test host gets: fast supervision, the shared compile cache, and
/// `hash` embeddings — tests that exercise the local model ask for it (`…_PROVIDER=local`),
/// the others do not load and run it in every host on two cores.
pub fn test_env() -> Vec<(String, String)> {
    vec![
        ("CAIRN_MEMORY_EMBEDDINGS_PROVIDER".into(), "hash".into()),
        (
            "CAIRN_RUNTIME_CACHE_DIR".into(),
            shared_cache_dir().display().to_string(),
        ),
        ("CAIRN_LOG".into(), "info".into()),
        ("CAIRN_SUPERVISOR_BACKOFF_INITIAL_MS".into(), "20".into()),
        ("CAIRN_SUPERVISOR_BACKOFF_MAX_MS".into(), "200".into()),
    ]
}

impl Host {
    /// Start `cairn run --plugins DIR --data DATA` with the test environment plus `env`.
    pub fn start(plugins: &Path, data: &Path, env: &[(&str, &str)]) -> Self {
        Self::start_command(Command::new(cairn_bin()), plugins, data, env)
    }

    /// [`Host::start`] with `--config FILE`.
    pub fn start_with_config(
        plugins: &Path,
        data: &Path,
        config: &Path,
        env: &[(&str, &str)],
    ) -> Self {
        let mut command = Command::new(cairn_bin());
        command.arg("--config").arg(config);
        Self::start_command(command, plugins, data, env)
    }

    fn start_command(
        mut command: Command,
        plugins: &Path,
        data: &Path,
        env: &[(&str, &str)],
    ) -> Self {
        command
            .arg("run")
            .arg("--plugins")
            .arg(plugins)
            .arg("--data")
            .arg(data)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (key, value) in test_env() {
            command.env(key, value);
        }
        command.envs(storage::env_for(data));
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("spawn cairn run");
        let stdin = child.stdin.take();
        let log = Arc::new(Mutex::new(String::new()));
        let mut readers = Vec::new();
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        for stream in [
            Box::new(stdout) as Box<dyn std::io::Read + Send>,
            Box::new(stderr),
        ] {
            let log = log.clone();
            readers.push(std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    let mut log = log.lock().expect("log lock");
                    log.push_str(&line);
                    log.push('\n');
                }
            }));
        }
        Self {
            child,
            stdin,
            log,
            readers,
        }
    }

    /// Type a line on the host's stdin.
    pub fn type_line(&mut self, line: &str) {
        use std::io::Write;
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .expect("write to cairn's stdin");
    }

    /// Type several lines in one write, so they reach the host together (a burst).
    pub fn type_lines(&mut self, lines: &[String]) {
        use std::io::Write;
        let stdin = self.stdin.as_mut().expect("stdin is open");
        let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
        stdin
            .write_all(text.as_bytes())
            .and_then(|()| stdin.flush())
            .expect("write to cairn's stdin");
    }

    /// Close the host's stdin (end of input for a `stdio` channel).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Wait for the host to exit by itself; returns the exit status and the whole log.
    /// Panics with the log when it is still running after `timeout`.
    pub fn wait_exit(mut self, timeout: Duration) -> (ExitStatus, String) {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                break status;
            }
            if Instant::now() > deadline {
                panic!("cairn did not exit by itself; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        let log = self.log();
        (status, log)
    }

    /// The webhook server's port, from the host's log (waits for the line).
    pub fn webhook_port(&mut self) -> u16 {
        self.port_after("webhook server listening on http://127.0.0.1:")
    }

    /// The status console's port, from the host's log (waits for the line).
    pub fn console_port(&mut self) -> u16 {
        self.port_after("status console on http://127.0.0.1:")
    }

    /// The port number the log prints right after `marker` (waits for the line).
    fn port_after(&mut self, marker: &str) -> u16 {
        self.wait_for(marker, Duration::from_secs(60));
        let log = self.log();
        let start = log.find(marker).expect("marker") + marker.len();
        log[start..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .expect("port")
    }

    /// Kill the host with SIGKILL (no clean stop) and wait for it to die.
    pub fn kill9(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        self.log()
    }

    /// Everything the host has logged so far.
    pub fn log(&self) -> String {
        self.log.lock().expect("log lock").clone()
    }

    /// Wait until the log contains `needle`; panics with the log after `timeout`.
    pub fn wait_for(&mut self, needle: &str, timeout: Duration) {
        self.wait_until(timeout, &format!("log line containing {needle:?}"), |log| {
            log.contains(needle)
        });
    }

    /// Wait until `condition` holds for the log; panics with the log after `timeout`.
    pub fn wait_until(&mut self, timeout: Duration, what: &str, condition: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            if condition(&self.log()) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "cairn exited ({status}) while waiting for {what}; log:\n{}",
                    self.log()
                );
            }
            if Instant::now() > deadline {
                panic!("timed out waiting for {what}; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// The host's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the host process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Send SIGTERM and wait for a clean exit; returns the exit status and the whole log.
    pub fn stop(mut self) -> (ExitStatus, String) {
        self.stdin = None;
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "cairn did not stop within 30 s of SIGTERM; log:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        let log = self.log();
        (status, log)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run the `cairn` binary to completion with the test environment.
pub fn cairn(args: &[&str]) -> std::process::Output {
    cairn_command(args).output().expect("run cairn")
}

/// Import one episode of user `ana` ("I live in Lisbon", id `ep_1`) into the data dir
/// `data` through `cairn memory import`, as an export holds it: a data dir with memory.db
/// in it, as a host leaves it.
pub fn import_one_memory(data: &Path) {
    let file = data.with_extension("one-memory.jsonl");
    std::fs::write(
        &file,
        r#"{"type":"entry","id":"ep_1","kind":"episode","content":"I live in Lisbon","category":"conversation","scope":{"agent_id":"main","user_id":"ana","session_id":null},"importance":5,"tags":[],"issue_refs":[],"pr_refs":[],"sources":[],"subject":null,"predicate":null,"valid_from":1796419060254,"valid_to":null,"recorded_at":1796419060759,"superseded_by":null,"forgotten_at":null}
"#,
    )
    .expect("write the export");
    let imported = cairn(&[
        "memory",
        "import",
        &file.display().to_string(),
        "--data",
        &data.display().to_string(),
    ]);
    let _ = std::fs::remove_file(&file);
    assert!(imported.status.success(), "{imported:?}");
}

/// The `cairn` command [`cairn`] runs, for a test that starts several at once: the tests'
/// settings, stdin closed, and on a PostgreSQL run the storage of the data dir `--data`
/// names.
pub fn cairn_command(args: &[&str]) -> Command {
    let mut command = Command::new(cairn_bin());
    command.args(args).stdin(Stdio::null());
    for (key, value) in test_env() {
        command.env(key, value);
    }
    let data = args
        .windows(2)
        .find(|pair| pair[0] == "--data")
        .map(|pair| Path::new(pair[1]));
    if let Some(data) = data {
        command.envs(storage::env_for(data));
    }
    command
}

/// Run the `cairn` binary with `args`, asserting it succeeded (its stderr otherwise).
pub fn cairn_ok(args: &[&str]) -> std::process::Output {
    let out = cairn(args);
    assert!(
        out.status.success(),
        "cairn {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `cairn status --json --data DIR`, parsed.
pub fn status_json(data: &Path) -> serde_json::Value {
    let output = cairn(&["status", "--json", "--data", &data.display().to_string()]);
    assert!(
        output.status.success(),
        "cairn status failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("status --json is JSON")
}

/// The data dir's memories (`cairn memory list --json`), parsed.
pub fn memory_list(data: &Path) -> Vec<serde_json::Value> {
    let output = cairn_ok(&[
        "memory",
        "list",
        "--json",
        "--data",
        &data.display().to_string(),
    ]);
    serde_json::from_slice(&output.stdout).expect("memory list --json is JSON")
}

/// How many of `memories` say exactly `content`.
pub fn saying(memories: &[serde_json::Value], content: &str) -> usize {
    memories.iter().filter(|m| m["content"] == content).count()
}

/// The status row of one plugin from `cairn status --json`.
pub fn plugin_status(data: &Path, id: &str) -> Option<serde_json::Value> {
    status_json(data)["plugins"]
        .as_array()
        .and_then(|plugins| plugins.iter().find(|p| p["id"] == id).cloned())
}

/// Poll `cairn status` until `id` is in `state`; panics after `timeout` with the host log.
pub fn wait_for_state(
    host: &mut Host,
    data: &Path,
    id: &str,
    state: &str,
    timeout: Duration,
) -> serde_json::Value {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(row) = plugin_status(data, id)
            && row["state"] == state
        {
            return row;
        }
        if !host.is_running() || Instant::now() > deadline {
            panic!(
                "{id} never reached state {state}; status: {:?}\nlog:\n{}",
                plugin_status(data, id),
                host.log()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Count log lines containing `needle`.
pub fn count_lines(log: &str, needle: &str) -> usize {
    log.lines().filter(|line| line.contains(needle)).count()
}

/// An HTTP client that reports every status instead of failing on 4xx/5xx.
pub fn http_client() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into()
}

/// `sha256=<hex>`: the GitHub-style HMAC signature of `body` under `secret`.
pub fn github_signature(secret: &[u8], body: &[u8]) -> String {
    use hmac::{KeyInit, Mac};
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret).expect("any key length works");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// POST a signed webhook delivery to `/channels/webhook/github`; returns the status and body.
pub fn post_webhook(
    client: &ureq::Agent,
    port: u16,
    event: &str,
    delivery: &str,
    body: &[u8],
    signature: Option<&str>,
) -> Result<(u16, String), ureq::Error> {
    let url = format!("http://127.0.0.1:{port}/channels/webhook/github");
    post_webhook_to(client, &url, event, delivery, body, signature)
}

/// POST a signed webhook delivery to `url`; returns the status and body.
pub fn post_webhook_to(
    client: &ureq::Agent,
    url: &str,
    event: &str,
    delivery: &str,
    body: &[u8],
    signature: Option<&str>,
) -> Result<(u16, String), ureq::Error> {
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .header("x-github-event", event)
        .header("x-github-delivery", delivery);
    if let Some(signature) = signature {
        request = request.header("x-hub-signature-256", signature);
    }
    let mut response = request.send(body)?;
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    Ok((status, text))
}

/// The real GitHub webhook payloads of `@octokit/webhooks-examples` (installed under
/// `target/npm` by `cargo xtask install-tools`): `(event name, payload)` pairs.
pub fn github_examples() -> Vec<(String, serde_json::Value)> {
    let path = workspace_root()
        .join("target/npm/node_modules/@octokit/webhooks-examples/api.github.com/index.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; install it with `cargo xtask install-tools`",
            path.display()
        )
    });
    let index: serde_json::Value = serde_json::from_str(&text).expect("examples are JSON");
    let mut out = Vec::new();
    for event in index.as_array().expect("an array of events") {
        let name = event["name"].as_str().expect("event name").to_string();
        for example in event["examples"].as_array().into_iter().flatten() {
            out.push((name.clone(), example.clone()));
        }
    }
    out
}

/// Open a data dir's `buffer.db` read-only for assertions.
pub fn buffer_db(data: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(
        data.join("buffer.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open buffer.db")
}

/// A thread that posts signed `pull_request` deliveries (payload `seq` = 0, 1, 2, ...) to
/// the webhook channel of the hosts listening on `ports`, in turn (a port of 0: that host
/// is down), until `finished` turns true. Deliveries that fail (the host is down) are not
/// retried. The thread returns how many it tried and which were acknowledged with 202.
pub fn spawn_webhook_sender(
    ports: std::sync::Arc<Vec<std::sync::atomic::AtomicU16>>,
    finished: std::sync::Arc<std::sync::atomic::AtomicBool>,
    secret: &'static str,
    pause: Duration,
) -> std::thread::JoinHandle<(usize, Vec<usize>)> {
    use std::sync::atomic::Ordering;
    std::thread::spawn(move || {
        let client = http_client();
        let mut attempts = 0;
        let mut acknowledged = Vec::new();
        for i in 0.. {
            if finished.load(Ordering::SeqCst) {
                break;
            }
            let body = serde_json::to_vec(&serde_json::json!({
                "action": "opened",
                "repository": {"full_name": "octo/restart"},
                "pull_request": {"number": i % 7, "title": format!("change {i}")},
                "sender": {"login": "octocat"},
                "seq": i,
            }))
            .expect("serialise");
            let signature = github_signature(secret.as_bytes(), &body);
            attempts += 1;
            let port = ports[i % ports.len()].load(Ordering::SeqCst);
            let delivered = port != 0
                && matches!(
                    post_webhook(
                        &client,
                        port,
                        "pull_request",
                        &format!("d-{i}"),
                        &body,
                        Some(&signature)
                    ),
                    Ok((202, _))
                );
            if delivered {
                acknowledged.push(i);
            } else {
                // The host is down: not acknowledged, so the producer may not count on it.
                std::thread::sleep(Duration::from_millis(20));
            }
            std::thread::sleep(pause);
        }
        (attempts, acknowledged)
    })
}

/// Sequence numbers the `counter` handler plugin `plugin` logged (`counter: event #N
/// seq=S`), in log order.
pub fn delivered_seqs(log: &str, plugin: &str) -> Vec<i64> {
    let tag = format!("plugin=\"{plugin}\"");
    log.lines()
        .filter(|l| l.contains("counter: event #") && l.contains(&tag))
        .filter_map(|l| {
            l.split("seq=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// A pseudo-random pause of 150 to 550 ms from a linear congruential sequence, so kill
/// points vary but a failing run can be repeated.
pub fn kill_pause(seed: &mut u64) -> Duration {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    Duration::from_millis(150 + (*seed >> 33) % 400)
}

/// A `test.poke` event at `seq`, as a subscriber is handed it: for calls made straight to a
/// plugin's instance.
pub fn poke(seq: i64) -> cairn_vocab::event::Event {
    cairn_vocab::event::Event {
        seq,
        topic: "test.poke".into(),
        payload: "{}".into(),
        source: "test".into(),
        session_id: None,
        agent_id: None,
        user_id: None,
        created_at: 0,
        depth: 0,
    }
}
