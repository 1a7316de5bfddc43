//! Failed work is not lost: `cairn buffer failed` lists the batches a refusal or a failed
//! delivery ended, and `cairn buffer retry` queues them again — on a running host — without
//! receiving their messages twice, and delivering a reply that was kept rather than asking
//! the model again.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cairn_tests::stub_http::{Reply, StubServer};
use cairn_tests::{Host, PluginDir, cairn, cairn_ok, count_lines, journal_events};
use serde_json::Value;

/// A host with `plugins` answered by the OpenAI-compatible `server`.
fn host_answered_by(server: &StubServer, plugins: &Path, data: &Path) -> Host {
    let base_url = format!("{}/v1", server.url());
    let env = [
        ("CAIRN_HTTP_LISTEN", "127.0.0.1:0"),
        ("CAIRN_AGENT_LLM_PROVIDER", "openai"),
        ("CAIRN_AGENT_LLM_BASE_URL", base_url.as_str()),
    ];
    let mut host = Host::start(plugins, data, &env);
    host.wait_for("cairn is running", Duration::from_secs(60));
    host
}

/// [`host_answered_by`] with the webhook channel's secret and a GitHub token set.
fn host_with_webhook_answered_by(server: &StubServer, plugins: &Path, data: &Path) -> Host {
    let base_url = format!("{}/v1", server.url());
    let env = [
        ("CAIRN_HTTP_LISTEN", "127.0.0.1:0"),
        ("CAIRN_AGENT_LLM_PROVIDER", "openai"),
        ("CAIRN_AGENT_LLM_BASE_URL", base_url.as_str()),
        ("CAIRN_WEBHOOK_SECRET", "failed-work-secret"),
        ("GITHUB_TOKEN", "token-for-tests"),
        // On shared storage a killed host's claims lapse only with their lease: the next
        // host takes over in seconds, not the default half-minute.
        ("CAIRN_BUFFER_CLAIM_LEASE_MS", "1500"),
    ];
    let mut host = Host::start(plugins, data, &env);
    host.wait_for("cairn is running", Duration::from_secs(60));
    host
}

/// `cairn buffer failed --json` on `data`.
fn failed(data: &Path) -> Vec<Value> {
    let out = cairn_ok(&[
        "buffer",
        "failed",
        "--json",
        "--data",
        &data.display().to_string(),
    ]);
    serde_json::from_slice(&out.stdout).expect("buffer failed --json is JSON")
}

/// Queue a message on the GitHub thread `octo/repo#7` of data dir `at`: the webhook
/// channel delivers its reply as a comment there.
fn ask_on_a_github_thread(at: &str) {
    cairn_ok(&[
        "send",
        "--channel",
        "webhook",
        "--conversation",
        "octo/repo#7",
        "--sender",
        "ann",
        "--data",
        at,
        "where did I park?",
    ]);
}

/// GitHub's answer to a comment it created.
fn comment_created() -> Reply {
    Reply::status(
        201,
        r#"{"html_url": "https://github.com/octo/repo/issues/7#issuecomment-1"}"#,
    )
}

/// GitHub's answer to a request for what is not there.
fn not_found() -> Reply {
    Reply::status(404, r#"{"message": "Not Found"}"#)
}

/// How many of `data`'s journal events have `topic`.
fn events(data: &Path, topic: &str) -> usize {
    journal_events(data)
        .iter()
        .filter(|event| event["topic"] == topic)
        .count()
}

#[test]
fn a_refused_turn_is_retried_on_the_running_host_without_receiving_its_message_twice() {
    let server = StubServer::start(vec![
        Reply::status(401, "invalid api key"),
        Reply::openai_chat("Locker 42, by the stairs."),
    ]);
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let dir = tempfile::tempdir().expect("data");
    let data = dir.path();
    let at = data.display().to_string();
    let mut host = host_answered_by(&server, plugins.path(), data);
    host.type_line("what is my locker number?");
    host.wait_for("turn failed", Duration::from_secs(30));

    let listed = failed(data);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["kind"], "batch");
    assert_eq!(
        listed[0]["reply_kept"], false,
        "the model refused: no reply"
    );
    assert!(
        listed[0]["error"].as_str().unwrap_or("").contains("401"),
        "{listed:?}"
    );
    let status = cairn_ok(&["status", "--data", &at]);
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("1 failed: `cairn buffer failed`"),
        "status points at the command"
    );
    // An id that is not failed is refused, and nothing is queued.
    let id = listed[0]["id"].as_i64().expect("id");
    let wrong = cairn(&[
        "buffer",
        "retry",
        "--batch",
        &id.to_string(),
        "--batch",
        "999",
        "--data",
        &at,
    ]);
    assert_eq!(wrong.status.code(), Some(2));
    let said = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        said.contains("--batch 999: not a failed main batch"),
        "{said}"
    );
    assert_eq!(failed(data).len(), 1, "nothing was queued");

    // The key is fixed: the retry is answered by the host that runs.
    let retried = cairn_ok(&["buffer", "retry", "--batch", &id.to_string(), "--data", &at]);
    assert!(
        String::from_utf8_lossy(&retried.stdout).contains(&format!("queued again: batch {id}"))
    );
    host.wait_for("cairn> Locker 42, by the stairs.", Duration::from_secs(30));
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    assert_eq!(server.seen().len(), 2, "asked once more: {log}");
    let prompt = server.seen()[1].json()["messages"].to_string();
    assert_eq!(
        prompt.matches("what is my locker number?").count(),
        1,
        "asked, not also quoted back as an earlier turn: {prompt}"
    );
    assert!(failed(data).is_empty());
    assert_eq!(
        events(data, "message.received"),
        1,
        "the message was received once"
    );
    let memories = cairn_tests::memory_list(data);
    let asked = cairn_tests::saying(&memories, "what is my locker number?");
    assert_eq!(asked, 1, "remembered once: {memories:?}");
    assert_eq!(
        cairn_tests::saying(&memories, "Locker 42, by the stairs."),
        1,
        "the answer is remembered: {memories:?}"
    );
}

#[test]
fn a_reply_that_could_not_be_delivered_is_delivered_by_the_retry_without_asking_again() {
    let dir = tempfile::tempdir().expect("data");
    let data = dir.path();
    let at = data.display().to_string();
    ask_on_a_github_thread(&at);
    let api = StubServer::answering(|request| {
        if request.line == "POST /repos/octo/repo/issues/7/comments" {
            comment_created()
        } else {
            not_found()
        }
    });
    let host_port = api.url().trim_start_matches("http://").to_string();
    // The first host may not reach the comments API (not in its capabilities): the reply
    // has nowhere to go.
    let first = StubServer::start(vec![Reply::openai_chat("Level 3, row F.")]);
    let denied = PluginDir::new();
    denied.webhook_posting_to(&api.url(), "api.github.com");
    let mut host = host_with_webhook_answered_by(&first, denied.path(), data);
    host.wait_for("turn failed", Duration::from_secs(30));
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    assert!(log.contains("webhook refused the delivery"), "{log}");
    let listed = failed(data);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["reply_kept"], true, "{listed:?}");

    // Retried before any host runs; the next host may post to it.
    let retried = cairn_ok(&["buffer", "retry", "--all", "--data", &at]);
    assert!(String::from_utf8_lossy(&retried.stdout).contains("queued again: batch"));
    let batch = listed[0]["id"].to_string();
    let twice = cairn_tests::cairn(&["buffer", "retry", "--batch", &batch, "--data", &at]);
    assert_eq!(twice.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&twice.stderr).contains(&format!(
            "--batch {batch}: not a failed main batch (queued)"
        )),
        "the operator is told it is queued already: {twice:?}"
    );
    let granted = PluginDir::new();
    granted.webhook_posting_to(&api.url(), &format!("http://{host_port}"));
    let second = StubServer::start(vec![Reply::openai_chat("Asked again.")]);
    let mut host = host_with_webhook_answered_by(&second, granted.path(), data);
    host.wait_for(
        "webhook: reply posted to octo/repo#7",
        Duration::from_secs(30),
    );
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    assert!(
        second.seen().is_empty(),
        "the kept reply was delivered: {log}"
    );
    let posted: Vec<_> = api
        .seen()
        .into_iter()
        .filter(|r| r.line.starts_with("POST"))
        .collect();
    assert_eq!(posted.len(), 1, "{posted:?}");
    assert!(
        posted[0].json()["body"]
            .as_str()
            .is_some_and(|text| text.contains("Level 3, row F.")),
        "{posted:?}"
    );
    assert_eq!(
        count_lines(&log, "delivered the reply an earlier attempt made"),
        1,
        "{log}"
    );
    assert!(failed(data).is_empty());
    assert_eq!(events(data, "message.received"), 1);
    assert_eq!(events(data, "agent.response"), 1, "answered once");
    let completed: Vec<Value> = journal_events(data)
        .iter()
        .filter(|event| event["topic"] == "turn.completed")
        .map(|event| serde_json::from_str(event["payload"].as_str().expect("payload")))
        .collect::<Result<_, _>>()
        .expect("json");
    let statuses: Vec<&Value> = completed.iter().map(|p| &p["status"]).collect();
    assert_eq!(statuses, ["failed", "done"], "{completed:?}");
    assert_eq!(
        completed[1]["usage"],
        Value::Null,
        "the model was not asked"
    );
    // Nothing failed: `--all` says so.
    let again = cairn_ok(&["buffer", "retry", "--all", "--data", &at]);
    assert_eq!(
        String::from_utf8_lossy(&again.stdout).trim(),
        "nothing has failed"
    );
}

#[test]
fn a_host_killed_while_its_reply_is_delivered_delivers_that_reply_again_not_another() {
    let dir = tempfile::tempdir().expect("data");
    let data = dir.path();
    let at = data.display().to_string();
    ask_on_a_github_thread(&at);
    let posts = Arc::new(AtomicUsize::new(0));
    let counted = posts.clone();
    let api = StubServer::answering(move |request| {
        if request.line != "POST /repos/octo/repo/issues/7/comments" {
            return not_found();
        }
        let created = comment_created();
        if counted.fetch_add(1, Ordering::SeqCst) == 0 {
            // The first host is killed while this post is on its way.
            Reply::Slow(Duration::from_secs(60), Box::new(created))
        } else {
            created
        }
    });
    let plugins = PluginDir::new();
    let host_port = api.url().trim_start_matches("http://").to_string();
    plugins.webhook_posting_to(&api.url(), &format!("http://{host_port}"));
    let first = StubServer::start(vec![Reply::openai_chat("Level 3, row F.")]);
    let host = host_with_webhook_answered_by(&first, plugins.path(), data);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while posts.load(Ordering::SeqCst) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the reply was never posted"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    host.kill9();

    let second = StubServer::start(vec![Reply::openai_chat("Asked again.")]);
    let mut host = host_with_webhook_answered_by(&second, plugins.path(), data);
    host.wait_for(
        "webhook: reply posted to octo/repo#7",
        Duration::from_secs(30),
    );
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    assert!(second.seen().is_empty(), "the model was asked again: {log}");
    let bodies: Vec<Value> = api
        .seen()
        .iter()
        .filter(|r| r.line.starts_with("POST"))
        .map(|r| r.json()["body"].clone())
        .collect();
    assert_eq!(bodies.len(), 2, "posted, then posted again: {bodies:?}");
    assert_eq!(bodies[0], bodies[1], "the same reply both times");
    assert!(
        bodies[0]
            .as_str()
            .is_some_and(|text| text.contains("Level 3, row F.")),
        "{bodies:?}"
    );
    assert_eq!(
        count_lines(&log, "delivered the reply an earlier attempt made"),
        1,
        "{log}"
    );
    assert_eq!(events(data, "message.received"), 1);
    assert_eq!(events(data, "agent.response"), 1, "answered once");
    let batches = &cairn_tests::status_json(data)["buffer"]["batches"];
    assert_eq!(batches["main/done"], 1, "{batches}");
}

#[test]
fn a_message_for_a_channel_no_host_runs_waits_for_one_that_does_instead_of_failing() {
    let dir = tempfile::tempdir().expect("data");
    let data = dir.path();
    let at = data.display().to_string();
    for (channel, text) in [("pager", "where did I park?"), ("cli", "hello")] {
        cairn_ok(&[
            "send",
            "--channel",
            channel,
            "--conversation",
            channel,
            "--sender",
            "user",
            "--data",
            &at,
            text,
        ]);
    }
    // A host without `pager` answers the typed line and leaves the page queued.
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let mut host = Host::start(
        plugins.path(),
        data,
        &[("CAIRN_HTTP_LISTEN", "127.0.0.1:0")],
    );
    host.wait_for(
        "cairn> [offline] I received: user: hello",
        Duration::from_secs(60),
    );
    // Meanwhile `cairn status` says what the page waits for.
    let status_json = || -> Value {
        let output = cairn_ok(&["status", "--json", "--data", &at]);
        serde_json::from_slice(&output.stdout).expect("status json")
    };
    host.wait_until(Duration::from_secs(60), "the page routed", |_| {
        status_json()["queued_for_channels_not_run"] == serde_json::json!(["pager"])
    });
    let shown = cairn_ok(&["status", "--data", &at]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    let line = shown
        .lines()
        .find(|line| line.contains("queued for pager: 1 batch, the oldest made "))
        .unwrap_or_else(|| panic!("no queued line for pager: {shown}"));
    assert!(
        line.ends_with(
            " ago; no running host runs channel `pager`: a host that runs it answers them"
        ),
        "{line}"
    );
    assert!(
        shown.lines().all(|line| !line.contains("queued for cli")),
        "the typed line was answered: {shown}"
    );
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    assert!(!log.contains("where did I park"), "{log}");
    assert!(
        failed(data).is_empty(),
        "nothing failed: {:?}\n{log}",
        failed(data)
    );
    let stats = status_json();
    assert_eq!(stats["buffer"]["batches"]["main/queued"], 1, "{stats}");
    // With no host running, the mark names the last host's channels.
    assert_eq!(
        stats["queued_for_channels_not_run"],
        serde_json::json!(["pager"]),
        "{stats}"
    );
    let shown = cairn_ok(&["status", "--data", &at]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains(
            "; the last host ran no channel `pager`: only a host that runs it answers them"
        ),
        "{shown}"
    );

    // A host that runs `pager` (the terminal channel under that name) answers it.
    let with_pager = PluginDir::new();
    let manifest =
        std::fs::read_to_string(cairn_tests::workspace_root().join("manifests/cli.yaml"))
            .expect("cli manifest");
    with_pager
        .manifest("pager", &manifest.replace("id: cli", "id: pager"))
        .component("cli");
    let mut host = Host::start(
        with_pager.path(),
        data,
        &[("CAIRN_HTTP_LISTEN", "127.0.0.1:0")],
    );
    host.wait_for(
        "I received: user: where did I park?",
        Duration::from_secs(60),
    );
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    assert!(failed(data).is_empty(), "nothing failed");
}

#[test]
fn a_retried_turn_reads_the_history_its_first_attempt_read_past_turns_answered_since() {
    let server = StubServer::start(vec![
        Reply::openai_chat("Answer A."),
        Reply::openai_chat("Answer B."),
        Reply::status(401, "invalid api key"),
        Reply::openai_chat("Answer D."),
        Reply::openai_chat("Answer C."),
    ]);
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let dir = tempfile::tempdir().expect("data");
    let data = dir.path();
    let base_url = format!("{}/v1", server.url());
    let env = [
        ("CAIRN_HTTP_LISTEN", "127.0.0.1:0"),
        ("CAIRN_AGENT_LLM_PROVIDER", "openai"),
        ("CAIRN_AGENT_LLM_BASE_URL", base_url.as_str()),
        // Room for two earlier turns: the two answered before the first attempt.
        ("CAIRN_AGENT_HISTORY_TURNS", "4"),
    ];
    let mut host = Host::start(plugins.path(), data, &env);
    host.wait_for("cairn is running", Duration::from_secs(60));
    host.type_line("turn A");
    host.wait_for("cairn> Answer A.", Duration::from_secs(30));
    host.type_line("turn B");
    host.wait_for("cairn> Answer B.", Duration::from_secs(30));
    host.type_line("turn C");
    host.wait_for("turn failed", Duration::from_secs(30));
    host.type_line("turn D");
    host.wait_for("cairn> Answer D.", Duration::from_secs(30));
    let id = failed(data)[0]["id"].to_string();
    cairn_ok(&[
        "buffer",
        "retry",
        "--batch",
        &id,
        "--data",
        &data.display().to_string(),
    ]);
    host.wait_for("cairn> Answer C.", Duration::from_secs(30));
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");

    let prompt = |n: usize| server.seen()[n].json()["messages"].to_string();
    let (first, retried) = (prompt(2), prompt(4));
    for earlier in ["turn A", "Answer A.", "turn B", "Answer B."] {
        assert!(first.contains(earlier), "{first}");
        assert!(retried.contains(earlier), "as its first attempt: {retried}");
    }
    assert!(!retried.contains("turn D"), "a later turn: {retried}");
    assert_eq!(retried.matches("turn C").count(), 1, "{retried}");
}
