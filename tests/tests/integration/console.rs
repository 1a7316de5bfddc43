//! The status console through the real binary: the page as headless Chromium renders it,
//! `/metrics` as Prometheus reads it, and the token it needs beyond loopback.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cairn_tests::{Host, PluginDir, cairn, http_client};

const LONG: Duration = Duration::from_secs(60);

/// Debian's Chromium (`.ci/run` installs it), or `CAIRN_TEST_CHROMIUM`.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("CAIRN_TEST_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    path.exists().then_some(path)
}

/// The page at `url` as headless Chromium has it after its scripts ran for a few seconds:
/// the DOM a person would see, and a screenshot beside it in `out`.
fn render_in_chromium(chromium: &Path, url: &str, out: &Path) -> String {
    let profile = out.join("profile");
    let screenshot = out.join("console.png");
    let common = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,1000",
        "--virtual-time-budget=4000",
    ];
    let run = |extra: &str| {
        let output = Command::new(chromium)
            .args(common)
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(extra)
            .arg(url)
            .output()
            .expect("run chromium");
        assert!(
            output.status.success(),
            "chromium failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        output
    };
    let dom = String::from_utf8_lossy(&run("--dump-dom").stdout).into_owned();
    run(&format!("--screenshot={}", screenshot.display()));
    let png = std::fs::metadata(&screenshot).expect("a screenshot").len();
    assert!(png > 20_000, "the screenshot is nearly empty ({png} bytes)");
    dom
}

/// The text of the element with `id` in a dumped DOM (its first text run).
fn text_of<'a>(dom: &'a str, id: &str) -> &'a str {
    let marker = format!("id=\"{id}\"");
    let tag = dom
        .find(&marker)
        .unwrap_or_else(|| panic!("no #{id} in the page:\n{dom}"));
    let start = tag + dom[tag..].find('>').expect("the tag ends") + 1;
    let end = dom[start..].find('<').map_or(dom.len(), |i| start + i);
    &dom[start..end]
}

/// A host whose `trapper` plugin fails on every message it is sent, so the console has
/// faults, restarts and dead letters to show beside a healthy channel and a finished turn.
fn host_with_a_failing_subscriber(dir: &PluginDir, data: &Path, env: &[(&str, &str)]) -> Host {
    dir.bundled("cli");
    dir.plugin(
        "trapper",
        "handler",
        "hostile",
        "events: {subscribes: [message.received]}\nconfig: {mode: ok}\n",
    );
    let mut all = vec![
        ("CAIRN_ROUTER_BATCH_WINDOW_MS", "100"),
        ("CAIRN_JOURNAL_MAX_ATTEMPTS", "2"),
        ("CAIRN_JOURNAL_BACKOFF_INITIAL_MS", "20"),
        ("CAIRN_CONSOLE_SAMPLE_MS", "200"),
    ];
    all.extend_from_slice(env);
    let mut host = Host::start(dir.path(), data, &all);
    host.wait_for("cairn is running", LONG);
    host.type_line("hello console");
    host.wait_until(LONG, "the message dead-lettered for the trapper", |log| {
        log.contains("event dead-lettered")
    });
    host.wait_until(LONG, "the turn finished", |log| log.contains("replied"));
    host
}

#[test]
fn the_console_page_shows_a_person_the_host_at_a_glance() {
    let Some(chromium) = chromium() else {
        eprintln!("*** SKIPPED: no Chromium at /usr/bin/chromium (apt-get install chromium) ***");
        return;
    };
    let dir = PluginDir::new();
    let data = tempfile::tempdir().expect("data");
    let env = [("CAIRN_CONSOLE_LISTEN", "127.0.0.1:0")];
    let mut host = host_with_a_failing_subscriber(&dir, data.path(), &env);
    let port = host.console_port();
    // Two samples later the console has read the dead letter and the turn.
    std::thread::sleep(Duration::from_millis(600));
    let out = tempfile::tempdir().expect("browser dir");
    let dom = render_in_chromium(&chromium, &format!("http://127.0.0.1:{port}/"), out.path());
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");

    assert!(text_of(&dom, "host").contains("sqlite") || text_of(&dom, "host").contains("postgres"));
    assert!(text_of(&dom, "updated").starts_with("updated "), "{dom}");
    assert_eq!(
        text_of(&dom, "dead"),
        "1",
        "one dead letter in the overview"
    );
    assert_eq!(text_of(&dom, "depth"), "0", "nothing left waiting");
    assert!(text_of(&dom, "latency").ends_with(" ms"), "{dom}");
    let running = text_of(&dom, "running");
    assert!(running.ends_with("/ 2"), "two plugins: {running}");
    for seen in [
        ">cli 0.1.0<",
        ">trapper 1.0.0<",
        "class=\"state running\">running<",
        ">message.received<",
        ">done<",
        "<polyline class=\"depth\"",
    ] {
        assert!(dom.contains(seen), "the page lacks {seen}:\n{dom}");
    }
    // The trapper's row shows its faults and the last of them.
    let plugins = &dom[dom.find("id=\"plugins\"").expect("plugins table")..];
    let trapper = &plugins[plugins.find(">trapper 1.0.0<").expect("trapper row")..];
    let trapper = &trapper[..trapper.find("</tr>").expect("row end")];
    assert!(trapper.contains("wasm trap"), "{trapper}");
    // The dead letter's row names the subscriber and the topic.
    let dead_rows = &dom[dom.find("id=\"dead-letters\"").expect("dead letters table")..];
    assert!(dead_rows.contains(">trapper<") && dead_rows.contains(">message.received<"));
    assert_eq!(
        text_of(&dom, "banner"),
        "",
        "no read failed and the host was reached"
    );
}

#[test]
fn metrics_are_prometheus_text_and_a_console_beyond_loopback_needs_its_token() {
    let dir = PluginDir::new();
    let data = tempfile::tempdir().expect("data");
    let data_arg = data.path().display().to_string();
    let plugins_arg = dir.path().display().to_string();
    dir.bundled("cli");
    let refused = cairn(&[
        "run",
        "--plugins",
        &plugins_arg,
        "--data",
        &data_arg,
        "--console",
        "0.0.0.0:0",
    ]);
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("--console") && stderr.contains("console.token"),
        "{stderr}"
    );
    assert!(
        !data.path().join("buffer.db").exists(),
        "refused before opening anything"
    );

    let env = [
        ("CAIRN_CONSOLE_LISTEN", "0.0.0.0:0"),
        ("CAIRN_CONSOLE_TOKEN", "open-sesame"),
    ];
    let mut host = host_with_a_failing_subscriber(&dir, data.path(), &env);
    let marker = "status console on http://0.0.0.0:";
    host.wait_for(marker, LONG);
    let log = host.log();
    let port: u16 = log[log.find(marker).expect("marker") + marker.len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .expect("port");
    let url = format!("http://127.0.0.1:{port}/metrics");
    let client = http_client();
    let anonymous = client.get(&url).call().expect("answer");
    assert_eq!(anonymous.status(), 401);
    let wrong = client
        .get(&url)
        .header("Authorization", "Bearer open-sesamE")
        .call()
        .expect("answer");
    assert_eq!(wrong.status(), 401);
    let elsewhere = format!("http://127.0.0.1:{port}/admin");
    let anonymous = client.get(&elsewhere).call().expect("answer");
    assert_eq!(anonymous.status(), 401, "a path it does not serve");
    let known = client
        .get(&elsewhere)
        .header("Authorization", "Bearer open-sesame")
        .call()
        .expect("answer");
    assert_eq!(known.status(), 404);
    // The sampler reads the journal and the plugins' status at different moments: poll until
    // one scrape shows the fault and the dead letter.
    let expected = [
        "# TYPE cairn_buffer_depth gauge",
        "cairn_buffer_depth 0",
        "cairn_journal_dead_letters{subscriber=\"trapper\"} 1",
        "cairn_journal_subscriber_lag{subscriber=\"trapper\"} 0",
        "cairn_plugin_state{plugin=\"cli\",state=\"running\"} 1",
        "cairn_console_read_errors 0",
    ];
    let trapper_faults = |text: &str| -> u32 {
        text.lines()
            .find_map(|l| l.strip_prefix("cairn_plugin_faults{plugin=\"trapper\"} "))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let deadline = Instant::now() + LONG;
    let text = loop {
        let mut answer = client
            .get(&url)
            .header("Authorization", "Bearer open-sesame")
            .call()
            .expect("answer");
        assert_eq!(answer.status(), 200);
        let content_type = answer.headers()["content-type"]
            .to_str()
            .unwrap_or("")
            .to_string();
        assert!(
            content_type.starts_with("text/plain; version=0.0.4"),
            "{content_type}"
        );
        let text = answer.body_mut().read_to_string().expect("text");
        let settled = trapper_faults(&text) >= 2
            && expected.iter().all(|line| text.lines().any(|l| l == *line));
        if settled || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    for line in expected {
        assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
    }
    let faults = trapper_faults(&text);
    // The retry (20 ms) comes while the plugin waits out its restart backoff (100 ms): it
    // waits for the restart rather than failing, so both attempts reach the plugin.
    assert_eq!(faults, 2, "each attempt trapped in the plugin, in:\n{text}");
    let snapshot: serde_json::Value = serde_json::from_str(
        &client
            .get(format!(
                "http://127.0.0.1:{port}/api/snapshot?token=open-sesame"
            ))
            .call()
            .expect("answer")
            .body_mut()
            .read_to_string()
            .expect("text"),
    )
    .expect("json");
    assert_eq!(snapshot["turns"][0]["status"], "done", "{snapshot}");
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");
}
