//! The main path through the real binary: channels push into the durable buffer, the router
//! batches and routes, the agent replies through the originating channel.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::time::Duration;

use cairn_tests::stub_http::{Reply, StubServer};
use cairn_tests::{
    Host, PluginDir, buffer_db, cairn, github_examples, github_signature, http_client, kill_pause,
    post_webhook, post_webhook_to, spawn_webhook_sender, status_json,
};

const LONG: Duration = Duration::from_secs(60);
const SECRET: &str = "it's a secret to everybody";

fn fast_env() -> Vec<(&'static str, &'static str)> {
    vec![
        ("CAIRN_ROUTER_BATCH_WINDOW_MS", "200"),
        ("CAIRN_HTTP_LISTEN", "127.0.0.1:0"),
        ("CAIRN_WEBHOOK_SECRET", SECRET),
    ]
}

/// Wait until no message is unrouted and no main batch is queued or running.
fn wait_until_settled(host: &mut Host, data: &Path) {
    host.wait_until(LONG, "every message routed and answered", |_| {
        let status = status_json(data);
        let buffer = &status["buffer"];
        let batches = &buffer["batches"];
        buffer["depth"] == 0
            && batches.get("main/queued").is_none()
            && batches.get("main/running").is_none()
    });
}

#[test]
fn a_typed_line_gets_a_reply_and_a_burst_is_one_batch() {
    if cairn_tests::storage::reads_sqlite_files(
        "a_typed_line_gets_a_reply_and_a_burst_is_one_batch",
    ) {
        return;
    }
    let dir = PluginDir::new();
    dir.bundled("cli");
    let data = tempfile::tempdir().expect("data");
    // The channel pushes the burst's lines one durable write at a time: on a loaded machine
    // five writes took over 200 ms, so the window is ten times that.
    let mut env = fast_env();
    env.retain(|(key, _)| *key != "CAIRN_ROUTER_BATCH_WINDOW_MS");
    env.push(("CAIRN_ROUTER_BATCH_WINDOW_MS", "2000"));
    let mut host = Host::start(dir.path(), data.path(), &env);
    host.wait_for("cairn is running", LONG);

    host.type_line("hello there");
    host.wait_for("cairn> [offline] I received: user: hello there", LONG);

    // One write, so the burst reaches the channel together however loaded the machine is.
    let burst: Vec<String> = (1..=5).map(|i| format!("burst {i}")).collect();
    host.type_lines(&burst);
    host.wait_for("cairn> [offline] I received: 5 messages in cli:", LONG);
    let (exit, log) = host.stop();
    assert!(exit.success());
    // The reply's lines, in order (the host's own log lines on stderr may land between
    // them: both streams are read into one log).
    let replied: Vec<&str> = log
        .lines()
        .filter(|line| line.starts_with("user: burst"))
        .collect();
    let expected: Vec<String> = burst.iter().map(|line| format!("user: {line}")).collect();
    assert_eq!(replied, expected, "{log}");

    let db = buffer_db(data.path());
    let sizes: Vec<i64> = db
        .prepare("SELECT message_count FROM batches ORDER BY id")
        .expect("query")
        .query_map([], |row| row.get(0))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("sizes");
    assert_eq!(sizes, [1, 5]);
    let priority: i64 = db
        .query_row("SELECT DISTINCT priority FROM messages", [], |r| r.get(0))
        .expect("priority");
    assert_eq!(priority, 10, "the cli manifest's priority (user DMs)");
}

#[test]
fn github_deliveries_are_verified_and_each_becomes_one_message() {
    if cairn_tests::storage::reads_sqlite_files(
        "github_deliveries_are_verified_and_each_becomes_one_message",
    ) {
        return;
    }
    let dir = PluginDir::new();
    dir.bundled("webhook");
    let data = tempfile::tempdir().expect("data");
    let mut host = Host::start(dir.path(), data.path(), &fast_env());
    let port = host.webhook_port();
    let client = http_client();

    let examples = github_examples();
    assert!(
        examples.len() > 200,
        "the examples package ships hundreds of payloads"
    );
    let mut accepted = 0;
    let mut expected_conversations = BTreeSet::new();
    for (i, (event, payload)) in examples.iter().enumerate() {
        let body = serde_json::to_vec(payload).expect("serialise");
        let signature = github_signature(SECRET.as_bytes(), &body);
        let (status, answer) = post_webhook(
            &client,
            port,
            event,
            &format!("delivery-{i}"),
            &body,
            Some(&signature),
        )
        .expect("post");
        // A ping (GitHub's hello when a hook is made) is answered, not a message.
        if event == "ping" {
            assert_eq!(status, 200, "{event} example {i}: {answer}");
            continue;
        }
        assert_eq!(status, 202, "{event} example {i}: {answer}");
        accepted += 1;
        if let (Some(repo), Some(number)) = (
            payload
                .pointer("/repository/full_name")
                .and_then(|v| v.as_str()),
            payload
                .pointer("/pull_request/number")
                .and_then(|v| v.as_u64()),
        ) {
            expected_conversations.insert(format!("{repo}#{number}"));
        }
    }
    assert!(!expected_conversations.is_empty());

    // Forged, missing and stale signatures are refused and write nothing.
    let body = serde_json::to_vec(&examples[0].1).expect("serialise");
    let forged = github_signature(b"not the secret", &body);
    for signature in [
        Some(forged.as_str()),
        None,
        Some("sha256=zz"),
        Some("sha1=abc"),
    ] {
        let (status, _) =
            post_webhook(&client, port, "push", "forged", &body, signature).expect("post");
        assert_eq!(status, 401, "signature {signature:?}");
    }
    let mut tampered = body.clone();
    tampered.push(b' ');
    let (status, _) = post_webhook(
        &client,
        port,
        "push",
        "tampered",
        &tampered,
        Some(&github_signature(SECRET.as_bytes(), &body)),
    )
    .expect("post");
    assert_eq!(status, 401, "a body changed after signing");

    wait_until_settled(&mut host, data.path());
    let (exit, log) = host.stop();
    assert!(exit.success());

    let db = buffer_db(data.path());
    let stored: i64 = db
        .query_row("SELECT count(*) FROM messages", [], |r| r.get(0))
        .expect("count");
    assert_eq!(
        stored, accepted,
        "one message per accepted delivery, none for forged ones"
    );
    let forged_rows: i64 = db
        .query_row(
            "SELECT count(*) FROM messages WHERE json_extract(payload, '$.delivery') IN ('forged', 'tampered')",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(forged_rows, 0);
    let conversations: BTreeSet<String> = db
        .prepare("SELECT DISTINCT conversation FROM messages")
        .expect("query")
        .query_map([], |row| row.get(0))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("conversations");
    for expected in &expected_conversations {
        assert!(
            conversations.contains(expected),
            "missing conversation {expected}"
        );
    }
    let priorities: Vec<i64> = db
        .prepare("SELECT DISTINCT priority FROM messages")
        .expect("query")
        .query_map([], |row| row.get(0))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("priorities");
    assert_eq!(priorities, [50], "the webhook manifest's priority");
    // A delivery is dated by the time GitHub gives what it reports (a comment's creation,
    // the pull request's or issue's last update, a push's head commit).
    let dated: Vec<(String, Option<i64>)> = db
        .prepare("SELECT json_extract(payload, '$.body'), said_at FROM messages")
        .expect("query")
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("dates");
    let mut with_time = 0;
    for (body, said_at) in &dated {
        let body: serde_json::Value = serde_json::from_str(body).expect("body");
        let given = [
            "/comment/created_at",
            "/review/submitted_at",
            "/pull_request/updated_at",
            "/issue/updated_at",
            "/head_commit/timestamp",
        ]
        .iter()
        .find_map(|pointer| {
            let text = body.pointer(pointer)?.as_str()?;
            chrono::DateTime::parse_from_rfc3339(text).ok()
        })
        .map(|time| time.timestamp_millis());
        with_time += usize::from(given.is_some());
        assert_eq!(*said_at, given, "{body}");
    }
    assert!(with_time > 50, "many examples carry a time: {with_time}");
    assert!(
        log.contains("webhook: reply to "),
        "replies go back through the webhook channel"
    );
}

#[test]
fn unrouted_messages_left_from_before_are_picked_up_and_rules_route_them() {
    let data = tempfile::tempdir().expect("data");
    let path = data.path().display().to_string();
    let send = |args: &[&str]| send(data.path(), args).expect("sent");
    // Written with no host running.
    send(&[
        "--channel",
        "cli",
        "--conversation",
        "cli",
        "--sender",
        "ada",
        "left over",
    ]);
    send(&[
        "--channel",
        "cli",
        "--conversation",
        "dm-spammer",
        "--sender",
        "spammer",
        "buy now",
    ]);
    send(&[
        "--channel",
        "cli",
        "--conversation",
        "task-7",
        "--sender",
        "ada",
        "summarise the logs",
    ]);
    let json_file = data.path().join("payload.json");
    std::fs::write(&json_file, r#"{"text":"from a file","kind":"note"}"#).expect("write");
    send(&[
        "--channel",
        "cli",
        "--conversation",
        "notes",
        "--json",
        &json_file.display().to_string(),
    ]);

    // Bad input: exit 2 and nothing written.
    let bad_json = data.path().join("bad.json");
    std::fs::write(&bad_json, "{not json").expect("write");
    for args in [
        vec![
            "send",
            "--data",
            &path,
            "--channel",
            "cli",
            "--conversation",
            "c",
            "--json",
            bad_json.to_str().expect("utf-8"),
        ],
        vec![
            "send",
            "--data",
            &path,
            "--channel",
            "",
            "--conversation",
            "c",
            "text",
        ],
        vec![
            "send",
            "--data",
            &path,
            "--channel",
            "cli",
            "--conversation",
            "c",
        ],
    ] {
        let output = cairn(&args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let status = status_json(data.path());
    assert_eq!(status["buffer"]["depth"], 4, "{status}");

    let config = data.path().join("cairn.yaml");
    std::fs::write(
        &config,
        "router:\n  batch_window_ms: 100\n  rules:\n    - name: no-spam\n      match: {sender: spammer}\n      route: drop\n\
         \x20   - name: tasks\n      match: {conversation: 'task-*'}\n      route: spawn\n",
    )
    .expect("config");
    // The host starts with the rules and picks up what was left unrouted.
    let dir = PluginDir::new();
    dir.bundled("cli");
    let mut host = Host::start_with_config(
        dir.path(),
        data.path(),
        &config,
        &[("CAIRN_HTTP_LISTEN", "127.0.0.1:0")],
    );
    host.wait_for("cairn> [offline] I received: ada: left over", LONG);
    host.wait_for("cairn> [offline] I received: operator: from a file", LONG);
    host.wait_for("task done", LONG);
    wait_until_settled(&mut host, data.path());
    let (exit, log) = host.stop();
    assert!(exit.success());
    assert!(!log.contains("buy now\n"), "a dropped batch gets no reply");
    assert!(
        !log.contains("cairn> [offline] I received: ada: summarise"),
        "the main agent is not told about tasks"
    );

    let status = status_json(data.path());
    let batches: BTreeMap<String, i64> =
        serde_json::from_value(status["buffer"]["batches"].clone()).expect("batch counts");
    assert_eq!(batches.get("main/done"), Some(&2), "{batches:?}");
    assert_eq!(batches.get("drop/dropped"), Some(&1), "{batches:?}");
    assert_eq!(batches.get("spawn/spawned"), Some(&1), "{batches:?}");
    let task = &status["buffer"]["recent_tasks"][0];
    assert_eq!(task["status"], "done");
    assert!(
        task["result"]
            .as_str()
            .unwrap_or_default()
            .contains("summarise the logs"),
        "{task}"
    );
    // The sub-agent's turn is remembered like the main agent's: its message and result.
    let episodes = cairn(&[
        "memory",
        "list",
        "--kind",
        "episode",
        "--json",
        "--data",
        &data.path().display().to_string(),
    ]);
    let episodes: Vec<serde_json::Value> =
        serde_json::from_slice(&episodes.stdout).expect("episodes");
    let task_episodes: Vec<&serde_json::Value> = episodes
        .iter()
        .filter(|e| {
            e["content"]
                .as_str()
                .unwrap_or_default()
                .contains("summarise the logs")
        })
        .collect();
    assert_eq!(
        task_episodes.len(),
        2,
        "the message and the result: {episodes:?}"
    );
    assert!(
        task_episodes.iter().all(|e| e["scope"]["session_id"]
            .as_str()
            .is_some_and(|s| s.contains("task-"))),
        "{task_episodes:?}"
    );
}

#[test]
fn acknowledged_webhook_messages_survive_kill_9_and_are_routed_exactly_once() {
    if cairn_tests::storage::reads_sqlite_files(
        "acknowledged_webhook_messages_survive_kill_9_and_are_routed_exactly_once",
    ) {
        return;
    }
    let dir = PluginDir::new();
    dir.bundled("webhook");
    let data = tempfile::tempdir().expect("data");
    let env = fast_env();
    let kills = 6usize;

    let mut host = Host::start(dir.path(), data.path(), &env);
    let port = Arc::new(vec![AtomicU16::new(host.webhook_port())]);
    let finished = Arc::new(AtomicBool::new(false));
    let sender = spawn_webhook_sender(port.clone(), finished.clone(), SECRET, Duration::ZERO);
    let mut seed: u64 = 0x5eed_cafe;
    for _ in 0..kills {
        std::thread::sleep(kill_pause(&mut seed));
        host.kill9();
        host = Host::start(dir.path(), data.path(), &env);
        port[0].store(host.webhook_port(), Ordering::SeqCst);
    }
    // A last stretch of traffic to the final host, then stop the sender.
    std::thread::sleep(Duration::from_millis(300));
    finished.store(true, Ordering::SeqCst);
    let (attempts, acknowledged) = sender.join().expect("sender");
    wait_until_settled(&mut host, data.path());
    let (exit, _) = host.stop();
    assert!(exit.success());

    let db = buffer_db(data.path());
    let mut rows: BTreeMap<usize, Vec<(i64, Option<i64>)>> = BTreeMap::new();
    let mut statement = db
        .prepare("SELECT json_extract(payload, '$.body.seq'), routed, batch_id FROM messages")
        .expect("query");
    for row in statement
        .query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, Option<i64>>(2)?,
            ))
        })
        .expect("rows")
    {
        let (seq, routed, batch) = row.expect("row");
        rows.entry(seq as usize).or_default().push((routed, batch));
    }
    let lost: Vec<usize> = acknowledged
        .iter()
        .copied()
        .filter(|i| !rows.contains_key(i))
        .collect();
    let doubled: Vec<usize> = rows
        .iter()
        .filter(|(_, r)| r.len() > 1)
        .map(|(i, _)| *i)
        .collect();
    let unrouted: Vec<usize> = rows
        .iter()
        .filter(|(_, r)| {
            r.iter()
                .any(|(routed, batch)| *routed != 1 || batch.is_none())
        })
        .map(|(i, _)| *i)
        .collect();
    let inconsistent: i64 = db
        .query_row(
            "SELECT count(*) FROM batches b WHERE b.message_count <> (SELECT count(*) FROM messages m WHERE m.batch_id = b.id)",
            [],
            |r| r.get(0),
        )
        .expect("consistency");
    let unfinished: i64 = db
        .query_row(
            "SELECT count(*) FROM batches WHERE status IN ('queued', 'running')",
            [],
            |r| r.get(0),
        )
        .expect("unfinished");
    let mut replies: BTreeMap<i64, usize> = BTreeMap::new();
    for event in cairn_tests::journal_events(data.path()) {
        let payload: serde_json::Value =
            serde_json::from_str(event["payload"].as_str().unwrap_or("{}")).expect("payload");
        if event["topic"] == "agent.response"
            && let Some(batch) = payload["batch_id"].as_i64()
        {
            *replies.entry(batch).or_default() += 1;
        }
    }
    let answered_twice: Vec<&i64> = replies
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(batch, _)| batch)
        .collect();
    println!(
        "restart test: {attempts} deliveries attempted, {} acknowledged, {} stored, {kills} kill -9, lost {}, doubled {}, unrouted {}, answered twice {}",
        acknowledged.len(),
        rows.len(),
        lost.len(),
        doubled.len(),
        unrouted.len(),
        answered_twice.len()
    );
    assert!(
        answered_twice.is_empty(),
        "batches answered again after a restart: {answered_twice:?}"
    );
    assert!(
        acknowledged.len() > attempts / 2,
        "most deliveries should get through"
    );
    assert!(
        attempts > acknowledged.len(),
        "some deliveries were cut off by a kill, as intended"
    );
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
    assert!(doubled.is_empty(), "stored twice: {doubled:?}");
    assert!(unrouted.is_empty(), "never routed: {unrouted:?}");
    assert_eq!(
        inconsistent, 0,
        "a batch's recorded size disagrees with its messages"
    );
    assert_eq!(
        unfinished, 0,
        "interrupted turns are resumed after a restart"
    );
}

/// `cairn send` on `data` with `args`; returns the printed id, or the exit code and stderr.
fn send(data: &Path, args: &[&str]) -> Result<i64, (Option<i32>, String)> {
    let path = data.display().to_string();
    let mut full = vec!["send", "--data", path.as_str()];
    full.extend_from_slice(args);
    let output = cairn(&full);
    if !output.status.success() {
        return Err((
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .expect("the id is printed"))
}

/// (route, rule, message ids) of every batch, in id order.
fn batches(data: &Path) -> Vec<(String, Option<String>, Vec<i64>)> {
    let db = buffer_db(data);
    let mut statement = db
        .prepare(
            "SELECT b.route, b.rule, group_concat(m.id) FROM batches b JOIN messages m ON m.batch_id = b.id
             GROUP BY b.id ORDER BY b.id",
        )
        .expect("query");
    statement
        .query_map([], |row| {
            let ids: String = row.get(2)?;
            Ok((
                row.get(0)?,
                row.get(1)?,
                ids.split(',').map(|id| id.parse().expect("id")).collect(),
            ))
        })
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("batches")
}

#[test]
fn a_bot_sharing_a_batch_with_a_person_is_dropped_alone() {
    if cairn_tests::storage::reads_sqlite_files(
        "a_bot_sharing_a_batch_with_a_person_is_dropped_alone",
    ) {
        return;
    }
    let data = tempfile::tempdir().expect("data");
    let message = |sender: &str, text: &str| {
        send(
            data.path(),
            &[
                "--channel",
                "cli",
                "--conversation",
                "octo/app#9",
                "--sender",
                sender,
                text,
            ],
        )
        .expect("sent")
    };
    let person = message("ada", "please review the retry change");
    let bot = message("dependabot[bot]", "bump serde to 1.0.300");
    let person_again = message("ada", "and the docs");
    let config = data.path().join("cairn.yaml");
    std::fs::write(
        &config,
        "router:\n  batch_window_ms: 100\n  rules:\n    - name: bots\n      match: {sender: \"*[[]bot]\"}\n      route: drop\n",
    )
    .expect("config");
    let dir = PluginDir::new();
    dir.bundled("cli");
    let mut host = Host::start_with_config(dir.path(), data.path(), &config, &fast_env());
    host.wait_for(
        "cairn> [offline] I received: 2 messages in octo/app#9",
        LONG,
    );
    wait_until_settled(&mut host, data.path());
    let (exit, log) = host.stop();
    assert!(exit.success());
    // The reply's lines in order (the host's stderr may interleave with its stdout).
    let first = log.find("\nada: please review the retry change\n");
    let second = log.find("\nada: and the docs\n");
    assert!(first.zip(second).is_some_and(|(a, b)| a < b), "{log}");
    assert!(
        !log.contains("bump serde"),
        "the bot's message is not answered"
    );
    assert_eq!(
        batches(data.path()),
        [
            ("main".to_string(), None, vec![person, person_again]),
            ("drop".to_string(), Some("bots".to_string()), vec![bot]),
        ]
    );
}

#[test]
fn every_webhook_url_form_reaches_the_channel_and_a_redelivery_is_one_message() {
    if cairn_tests::storage::reads_sqlite_files(
        "every_webhook_url_form_reaches_the_channel_and_a_redelivery_is_one_message",
    ) {
        return;
    }
    let dir = PluginDir::new();
    dir.bundled("webhook");
    let data = tempfile::tempdir().expect("data");
    let mut env = fast_env();
    env.push(("CAIRN_HTTP_MAX_BODY_BYTES", "2048"));
    // Long enough that a body waited for would outlast the read below.
    env.push(("CAIRN_HTTP_REQUEST_TIMEOUT_MS", "600000"));
    let mut host = Host::start(dir.path(), data.path(), &env);
    let port = host.webhook_port();
    let client = http_client();
    let body = |n: u64| {
        serde_json::to_vec(&serde_json::json!({
            "action": "opened",
            "repository": {"full_name": "octo/forms"},
            "issue": {"number": n, "title": format!("form {n}")},
            "sender": {"login": "octocat"},
        }))
        .expect("serialise")
    };
    let forms = [
        "/channels/webhook",
        "/channels/webhook/",
        "/channels/webhook/github",
        "/channels/webhook/github/",
        "/channels/webhook/?source=github",
    ];
    let mut ids = Vec::new();
    for (n, form) in forms.iter().enumerate() {
        let body = body(n as u64);
        let signature = github_signature(SECRET.as_bytes(), &body);
        let (status, answer) = post_webhook_to(
            &client,
            &format!("http://127.0.0.1:{port}{form}"),
            "issues",
            &format!("form-{n}"),
            &body,
            Some(&signature),
        )
        .expect("post");
        assert_eq!(status, 202, "{form}: {answer}");
        let answer: serde_json::Value = serde_json::from_str(&answer).expect("JSON answer");
        ids.push(answer["id"].as_i64().expect("id"));
    }
    // The host's own refusals are JSON too: a channel that serves no webhooks, a body over
    // `http.max_body_bytes`.
    let refusals = [
        (
            "/channels/nowhere",
            body(9),
            404,
            "no channel `nowhere` serves webhooks here",
        ),
        (
            "/channels/webhook",
            vec![b' '; 4096],
            413,
            "body: over http.max_body_bytes",
        ),
        (
            "/hooks",
            body(9),
            404,
            "no such path: webhooks go to /channels/<channel id>",
        ),
    ];
    for (path, body, expected, error) in refusals {
        let url = format!("http://127.0.0.1:{port}{path}");
        let (status, answer) =
            post_webhook_to(&client, &url, "issues", "refused", &body, None).expect("post");
        assert_eq!(status, expected, "{path}: {answer}");
        let answer: serde_json::Value = serde_json::from_str(&answer).expect("JSON answer");
        assert_eq!(answer["error"], error, "{path}");
    }
    // A body declared over the limit and never sent is refused at once, not waited for.
    {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        stream
            .write_all(
                b"POST /channels/webhook HTTP/1.1\r\nHost: localhost\r\n\
                  Content-Type: application/json\r\nContent-Length: 99999999\r\n\r\n",
            )
            .expect("send the head");
        let mut answer = [0u8; 64];
        let read = stream.read(&mut answer).expect("an answer before any body");
        let answer = String::from_utf8_lossy(&answer[..read]);
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    }
    // GitHub's "Redeliver" sends the same delivery id again: the first id, nothing stored.
    let first = body(0);
    let signature = github_signature(SECRET.as_bytes(), &first);
    for _ in 0..3 {
        let (status, answer) =
            post_webhook(&client, port, "issues", "form-0", &first, Some(&signature))
                .expect("post");
        assert_eq!(status, 202, "{answer}");
        let answer: serde_json::Value = serde_json::from_str(&answer).expect("JSON answer");
        assert_eq!(
            answer["id"].as_i64(),
            Some(ids[0]),
            "the first delivery's id"
        );
    }
    let (exit, _) = host.stop();
    assert!(exit.success());
    let stored: i64 = buffer_db(data.path())
        .query_row("SELECT count(*) FROM messages", [], |r| r.get(0))
        .expect("count");
    assert_eq!(stored, forms.len() as i64, "one message per delivery id");
}

#[test]
fn the_channel_priority_holds_whether_or_not_a_host_runs() {
    if cairn_tests::storage::reads_sqlite_files(
        "the_channel_priority_holds_whether_or_not_a_host_runs",
    ) {
        return;
    }
    let data = tempfile::tempdir().expect("data");
    let priority = |id: i64| -> i64 {
        buffer_db(data.path())
            .query_row("SELECT priority FROM messages WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .expect("priority")
    };
    let cli = |text: &str, extra: &[&str]| {
        let mut args = vec!["--channel", "cli", "--conversation", "cli", text];
        args.extend_from_slice(extra);
        send(data.path(), &args).expect("sent")
    };
    // No host has ever read the cli manifest: the default for now ...
    let before_any_host = cli("sent before any host", &[]);
    let chosen = cli("sent with a priority", &["--priority", "3"]);
    assert_eq!(priority(before_any_host), 100);

    let dir = PluginDir::new();
    dir.bundled("cli");
    let mut host = Host::start(dir.path(), data.path(), &fast_env());
    host.wait_for("cairn> [offline] I received: 2 messages in cli", LONG);
    let (exit, _) = host.stop();
    assert!(exit.success());
    // ... and the manifest's 10 once a host read it; a priority given stays.
    assert_eq!(priority(before_any_host), 10);
    assert_eq!(priority(chosen), 3);

    // With the host down, `cairn send` applies the manifest priority it remembered.
    let while_down = cli("sent while the host is down", &[]);
    assert_eq!(priority(while_down), 10, "cli is a user DM channel");
    // A channel the host did not run is refused: its reply would have nowhere to go.
    let (code, stderr) = send(
        data.path(),
        &["--channel", "elsewhere", "--conversation", "c", "hello"],
    )
    .expect_err("refused");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("ran no channel `elsewhere` (its channels: cli)"),
        "{stderr}"
    );
    let stored: i64 = buffer_db(data.path())
        .query_row("SELECT count(*) FROM messages", [], |r| r.get(0))
        .expect("count");
    assert_eq!(stored, 3, "nothing stored for it");

    // The configured override applies to what is sent without a priority; an explicit
    // `--priority` is the operator's word for that message and wins over it.
    let config = data.path().join("override.yaml");
    std::fs::write(&config, "buffer:\n  channel_priority: {cli: 7}\n").expect("config");
    let config = config.display().to_string();
    let overridden = cli("sent under an override", &["--config", &config]);
    assert_eq!(priority(overridden), 7);
    let explicit = cli(
        "sent with a priority under an override",
        &["--config", &config, "--priority", "3"],
    );
    assert_eq!(priority(explicit), 3, "the flag wins over the override");
}

/// A data dir where a host ran `cli` and `webhook` once (so `cairn send` knows both), and
/// that plugin dir.
fn where_cli_and_the_webhook_ran() -> (tempfile::TempDir, PluginDir) {
    let data = tempfile::tempdir().expect("data");
    let dir = PluginDir::new();
    dir.bundled_all(&["cli", "webhook"]);
    let mut host = Host::start(dir.path(), data.path(), &fast_env());
    host.wait_for("cairn is running", LONG);
    assert!(host.stop().0.success());
    (data, dir)
}

#[test]
fn a_channel_disabled_for_a_run_keeps_its_priority_and_the_configured_one_is_remembered() {
    if cairn_tests::storage::reads_sqlite_files(
        "a_channel_disabled_for_a_run_keeps_its_priority_and_the_configured_one_is_remembered",
    ) {
        return;
    }
    let (data, dir) = where_cli_and_the_webhook_ran();
    let waiting = send(
        data.path(),
        &["--channel", "webhook", "--conversation", "o/r#1", "queued"],
    )
    .expect("sent");
    let priority = |id: i64| -> i64 {
        buffer_db(data.path())
            .query_row("SELECT priority FROM messages WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .expect("priority")
    };
    assert_eq!(priority(waiting), 50, "the webhook manifest's");

    // A run with the webhook disabled and cli's priority configured.
    let config = data.path().join("cairn.yaml");
    std::fs::write(&config, "buffer:\n  channel_priority: {cli: 30, clii: 5}\n").expect("config");
    let mut env = fast_env();
    env.push(("CAIRN_PLUGINS_DISABLED", "[webhook]"));
    let mut host = Host::start_with_config(dir.path(), data.path(), &config, &env);
    host.wait_for("cairn is running", LONG);
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");
    assert!(
        log.contains("buffer.channel_priority names `clii`, which is no channel this host runs (its channels: cli): a typo?"),
        "{log}"
    );
    assert_eq!(
        priority(waiting),
        50,
        "not demoted to the default while disabled"
    );

    // With no host running and no config given, `cairn send` uses what the last host
    // gave each channel.
    let typed = send(
        data.path(),
        &["--channel", "cli", "--conversation", "cli", "typed"],
    )
    .expect("sent");
    assert_eq!(priority(typed), 30, "the configured priority, remembered");
}

#[test]
fn a_message_cairn_send_stores_beside_a_running_host_is_answered() {
    // The router is woken by messages this process stores; one another process stores is
    // found when it looks again (within a window).
    let data = tempfile::tempdir().expect("data");
    let dir = PluginDir::new();
    dir.bundled("cli");
    let mut host = Host::start(dir.path(), data.path(), &fast_env());
    host.wait_for("cairn is running", LONG);
    send(
        data.path(),
        &[
            "--channel",
            "cli",
            "--conversation",
            "cli",
            "sent from another process",
        ],
    )
    .expect("sent");
    host.wait_until(LONG, "the reply to the message sent", |log| {
        log.lines().any(|line| {
            line.contains("[offline] I received") && line.contains("sent from another process")
        })
    });
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");
}

#[test]
fn a_channel_flooding_the_queue_holds_back_no_other_channel() {
    if cairn_tests::storage::reads_sqlite_files(
        "a_channel_flooding_the_queue_holds_back_no_other_channel",
    ) {
        return;
    }
    let (data, dir) = where_cli_and_the_webhook_ran();
    // A backlog of 40 conversations on the webhook, then one typed line, all at one priority.
    for i in 0..40 {
        let conversation = format!("octo/app#{i}");
        let args = ["--channel", "webhook", "--conversation", &conversation];
        send(
            data.path(),
            &[&args[..], &["--priority", "50", "flooded"]].concat(),
        )
        .expect("sent");
    }
    let args = [
        "--channel",
        "cli",
        "--conversation",
        "cli",
        "--priority",
        "50",
    ];
    send(
        data.path(),
        &[&args[..], &["typed after the flood"]].concat(),
    )
    .expect("sent");

    let mut host = Host::start(dir.path(), data.path(), &fast_env());
    wait_until_settled(&mut host, data.path());
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");
    // (channel, routed at, started at) of every main batch, in claim order.
    let db = buffer_db(data.path());
    let mut statement = db
        .prepare(
            "SELECT channel, created_at, started_at FROM batches WHERE route = 'main'
              ORDER BY started_at, id",
        )
        .expect("query");
    let claims: Vec<(String, i64, i64)> = statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("batches");
    assert_eq!(claims.len(), 41, "one batch per conversation: {claims:?}");
    let typed = claims
        .iter()
        .position(|(channel, ..)| channel == "cli")
        .expect("the typed line's batch");
    let (_, routed_at, started_at) = claims[typed];
    // The router routes the backlog in arrival order while the agent answers: the typed
    // line's batch is routed last, and is the next one claimed (no webhook batch starts
    // between its routing and its start).
    let overtaking: Vec<_> = claims
        .iter()
        .filter(|(channel, _, started)| {
            channel == "webhook" && *started > routed_at && *started < started_at
        })
        .collect();
    assert!(
        overtaking.is_empty(),
        "claim {} of 41, after webhook batches routed before it: {overtaking:?}",
        typed + 1
    );
    eprintln!("the typed line was claim {} of 41", typed + 1);
}

#[test]
fn a_stalled_upload_gets_408_and_its_connection_is_closed() {
    use std::io::{Read, Write};
    let data = tempfile::tempdir().expect("data");
    let dir = PluginDir::new();
    dir.bundled("webhook");
    let mut env = fast_env();
    env.push(("CAIRN_HTTP_REQUEST_TIMEOUT_MS", "300"));
    let mut host = Host::start(dir.path(), data.path(), &env);
    let port = host.webhook_port();
    let mut stalled = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stalled
        .write_all(
            b"POST /channels/webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc",
        )
        .expect("send the start");
    stalled.set_read_timeout(Some(LONG)).expect("read timeout");
    let mut answer = String::new();
    // Read until the server closes the connection (or the long timeout says it never did).
    let closed = stalled.read_to_string(&mut answer).is_ok();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("http.request_timeout_ms"), "{answer}");
    assert!(closed, "the connection is closed after the 408: {answer}");
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");
}

#[test]
fn payloads_that_are_not_json_objects_are_refused_at_the_edge() {
    if cairn_tests::storage::reads_sqlite_files(
        "payloads_that_are_not_json_objects_are_refused_at_the_edge",
    ) {
        return;
    }
    let data = tempfile::tempdir().expect("data");
    let file = data.path().join("payload.json");
    let refusal = |payload: &str| {
        std::fs::write(&file, payload).expect("write");
        let (code, stderr) = send(
            data.path(),
            &[
                "--channel",
                "cli",
                "--conversation",
                "c",
                "--json",
                &file.display().to_string(),
            ],
        )
        .expect_err("refused");
        assert_eq!(code, Some(2), "{payload}: {stderr}");
        stderr
    };
    for (payload, kind) in [
        ("\"just a string\"", "a string"),
        ("[1,2]", "an array"),
        ("42", "a number"),
        ("null", "null"),
    ] {
        let stderr = refusal(payload);
        assert!(
            stderr.contains("payload: expected a JSON object") && stderr.contains(kind),
            "{payload}: {stderr}"
        );
    }
    // A file cut short is named, with where its JSON breaks off.
    let stderr = refusal("{\"text\": \"hel");
    let named = format!("--json {}: not JSON: EOF while parsing", file.display());
    assert!(stderr.contains(&named), "{stderr}");
    assert!(
        !data.path().join("buffer.db").exists() || {
            let stored: i64 = buffer_db(data.path())
                .query_row("SELECT count(*) FROM messages", [], |r| r.get(0))
                .expect("count");
            stored == 0
        },
        "nothing was written"
    );

    // A channel pushing them through `buffer.push` gets `invalid-input` naming the field.
    let dir = PluginDir::new();
    dir.plugin(
        "prober",
        "channel",
        "steady",
        "channel: {poll_interval_ms: 20}\nconfig: {mode: push-probe}\n",
    );
    let mut host = Host::start(dir.path(), data.path(), &fast_env());
    host.wait_for("steady: probe request-stop", LONG);
    let (exit, log) = host.stop();
    assert!(exit.success());
    for kind in ["string", "array", "number"] {
        assert!(
            log.contains(&format!("steady: probe push {kind} -> Err(Error::InvalidInput(\"payload: expected a JSON object")),
            "{kind}: {log}"
        );
    }
    assert!(log.contains("steady: probe push object -> Ok("), "{log}");
    assert!(
        log.contains("steady: probe request-stop -> Err(Error::Denied("),
        "only the terminal's channel may stop the host: {log}"
    );
    let stored: i64 = buffer_db(data.path())
        .query_row("SELECT count(*) FROM messages", [], |r| r.get(0))
        .expect("count");
    assert_eq!(stored, 1, "only the object was stored");
}

#[test]
fn closing_stdin_gets_the_answer_then_a_clean_stop_and_the_default_start_logs_no_error() {
    let dir = PluginDir::new();
    for id in ["cli", "webhook", "counter", "markdown"] {
        dir.bundled(id);
    }
    let data = tempfile::tempdir().expect("data");
    // As a newcomer starts it: no webhook secret.
    let mut host = Host::start(
        dir.path(),
        data.path(),
        &[("CAIRN_HTTP_LISTEN", "127.0.0.1:0")],
    );
    host.wait_for("cairn is running", LONG);
    host.type_line("hello from a pipe");
    host.close_stdin();
    let (exit, log) = host.wait_exit(LONG);
    assert!(exit.success(), "{exit}: {log}");
    assert!(
        log.contains("cairn> [offline] I received: user: hello from a pipe"),
        "answered before stopping: {log}"
    );
    assert!(log.contains("stopped"), "{log}");
    assert!(
        !log.lines().any(|line| line.contains(" ERROR ")),
        "the default start logs no error: {log}"
    );
    assert!(
        log.contains("CAIRN_WEBHOOK_SECRET is not set")
            && log.contains("export CAIRN_WEBHOOK_SECRET"),
        "a warning says how to set the secret: {log}"
    );
    let status = status_json(data.path());
    assert_eq!(status["host"]["running"], false);
    assert!(
        status["host"]["stopped_at"].is_i64(),
        "a clean stop: {status}"
    );
}

/// Sign and post one `issues` delivery about `octo/repo#7`.
fn post_issue(port: u16, delivery: &str) {
    let (status, answer) = try_post_issue(port, delivery).expect("post");
    assert_eq!(status, 202, "{answer}");
}

/// Sign and post one `issues` delivery about `octo/repo#7`; the status and body, or why
/// none came.
fn try_post_issue(port: u16, delivery: &str) -> Result<(u16, String), ureq::Error> {
    let body = serde_json::to_vec(&serde_json::json!({
        "action": "opened",
        "issue": {"number": 7, "title": "The build is red", "body": "CI fails on main since the last merge"},
        "repository": {"full_name": "octo/repo"},
        "sender": {"login": "ann"},
    }))
    .expect("json");
    let signature = github_signature(SECRET.as_bytes(), &body);
    post_webhook(
        &http_client(),
        port,
        "issues",
        delivery,
        &body,
        Some(&signature),
    )
}

/// Whether GitHub's stand-in has a reply's post in hand, and whether the test let go of it.
#[derive(Default)]
struct Held {
    holding: bool,
    released: bool,
}

#[test]
fn a_delivery_is_answered_while_the_channel_posts_a_slow_reply() {
    // GitHub's stand-in holds each reply's post until the test lets go, and the channel is
    // allowed to wait for it far longer than the client's 20 s: a delivery queued behind
    // the posting `deliver` would get no answer in time.
    let held = Arc::new((
        std::sync::Mutex::new(Held::default()),
        std::sync::Condvar::new(),
    ));
    let api = {
        let held = held.clone();
        StubServer::answering(move |request| {
            if !request.line.starts_with("POST /repos/") {
                return Reply::status(404, r#"{"message": "Not Found"}"#);
            }
            let (state, changed) = &*held;
            let mut state = state.lock().expect("hold");
            state.holding = true;
            changed.notify_all();
            let _let_go = changed
                .wait_timeout_while(state, Duration::from_secs(150), |s| !s.released)
                .expect("hold");
            Reply::status(
                201,
                r#"{"html_url": "https://github.com/octo/repo/issues/7#c"}"#,
            )
        })
    };
    let mut env = fast_env();
    env.push(("GITHUB_TOKEN", "token-for-tests"));
    let dir = PluginDir::new();
    dir.bundled_with("webhook", |manifest| {
        manifest
            .replace(
                "api_base: https://api.github.com",
                &format!("api_base: {}", api.url()),
            )
            .replace(
                "http: [api.github.com]",
                &format!("http: ['{}']", api.url()),
            )
            .replace("http_timeout_ms: 10000", "http_timeout_ms: 120000")
            .replace("timeout_ms: 30000", "timeout_ms: 150000")
    });
    let data = tempfile::tempdir().expect("data");
    let mut host = Host::start(dir.path(), data.path(), &env);
    post_issue(host.webhook_port(), "held-1");
    {
        let (state, changed) = &*held;
        let state = state.lock().expect("hold");
        let (state, _) = changed
            .wait_timeout_while(state, LONG, |s| !s.holding)
            .expect("hold");
        assert!(
            state.holding,
            "the first reply was never posted: {}",
            host.log()
        );
    }
    let second = try_post_issue(host.webhook_port(), "held-2");
    {
        let (state, changed) = &*held;
        state.lock().expect("hold").released = true;
        changed.notify_all();
    }
    host.wait_until(LONG, "both replies posted", |log| {
        log.matches("webhook: reply posted to octo/repo#7").count() == 2
    });
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");
    match second {
        Ok((status, answer)) => assert_eq!(status, 202, "{answer}\n{log}"),
        Err(error) => {
            panic!("the delivery made while a reply was posted got no answer: {error}\n{log}")
        }
    }
}

#[test]
fn a_slow_github_api_gets_each_reply_once() {
    // GitHub answering after 6 s: past the 5 s the channel's calls were once allowed.
    let api = StubServer::answering(|request| {
        if request.line.starts_with("POST /repos/") {
            std::thread::sleep(Duration::from_secs(6));
            Reply::status(
                201,
                r#"{"html_url": "https://github.com/octo/repo/issues/7#c"}"#,
            )
        } else {
            Reply::status(404, r#"{"message": "Not Found"}"#)
        }
    });
    let mut env = fast_env();
    env.push(("GITHUB_TOKEN", "token-for-tests"));
    let dir = PluginDir::new();
    let host_port = api.url().trim_start_matches("http://").to_string();
    dir.webhook_posting_to(&api.url(), &format!("http://{host_port}"));
    let data = tempfile::tempdir().expect("data");
    let mut host = Host::start(dir.path(), data.path(), &env);
    post_issue(host.webhook_port(), "slow-1");
    host.wait_for("webhook: reply posted to octo/repo#7", LONG);
    let (_, log) = host.stop();
    let posted = api
        .seen()
        .iter()
        .filter(|r| r.line == "POST /repos/octo/repo/issues/7/comments")
        .count();
    assert_eq!(posted, 1, "{log}");
}

#[test]
fn a_conversation_too_long_for_a_kv_key_does_not_fail_the_webhooks_replies() {
    let dir = PluginDir::new();
    dir.bundled("webhook");
    let data = tempfile::tempdir().expect("data");
    let mut host = Host::start(dir.path(), data.path(), &fast_env());
    // 509 bytes: a conversation the buffer takes, whose `reply:` key is over 512.
    let conversation = format!("o/{}#1", "r".repeat(505));
    let d = data.path().display().to_string();
    let sent = cairn_tests::cairn(&[
        "send",
        "--channel",
        "webhook",
        "--conversation",
        &conversation,
        "--data",
        &d,
        "hi",
    ]);
    assert!(sent.status.success(), "{sent:?}");
    wait_until_settled(&mut host, data.path());
    let (_, log) = host.stop();
    // Until 2026-12-02 the reply failed, and every retry alike (found by an operator's test).
    assert!(log.contains("is not kept: key:"), "{log}");
    let batches = &status_json(data.path())["buffer"]["batches"];
    assert_eq!(batches["main/done"], 1, "{batches}");
}

#[test]
fn a_full_kv_quota_does_not_fail_the_webhooks_replies() {
    let dir = PluginDir::new();
    dir.bundled_with("webhook", |manifest| {
        manifest.replace("  memory_mb: 64\n", "  memory_mb: 64\n  kv_bytes: 400\n")
    });
    let data = tempfile::tempdir().expect("data");
    let mut host = Host::start(dir.path(), data.path(), &fast_env());
    let port = host.webhook_port();
    for i in 0..6 {
        let body = serde_json::to_vec(&serde_json::json!({
            "action": "opened",
            "issue": {"number": i, "title": "Another one", "body": "it broke again"},
            "repository": {"full_name": "octo/repo"},
            "sender": {"login": "ann"},
        }))
        .expect("json");
        let signature = github_signature(SECRET.as_bytes(), &body);
        let (status, answer) = post_webhook(
            &http_client(),
            port,
            "issues",
            &format!("kv-{i}"),
            &body,
            Some(&signature),
        )
        .expect("post");
        assert_eq!(status, 202, "{answer}");
    }
    wait_until_settled(&mut host, data.path());
    let (_, log) = host.stop();
    assert!(
        log.contains("is not kept: kv: this set would keep"),
        "{log}"
    );
    let batches = &status_json(data.path())["buffer"]["batches"];
    assert_eq!(batches["main/done"], 6, "{batches}");
    assert!(batches.get("main/failed").is_none(), "{batches}");
}

#[test]
fn replies_to_github_threads_are_posted_as_comments_to_the_granted_api_only() {
    let api = StubServer::answering(|request| {
        if request.line.starts_with("POST /repos/") {
            Reply::status(
                201,
                r#"{"html_url": "https://github.com/octo/repo/issues/7#issuecomment-1"}"#,
            )
        } else {
            Reply::status(404, r#"{"message": "Not Found"}"#)
        }
    });
    let mut env = fast_env();
    env.push(("GITHUB_TOKEN", "token-for-tests"));

    // Granted: the reply becomes a comment on the issue.
    let dir = PluginDir::new();
    let host_port = api.url().trim_start_matches("http://").to_string();
    dir.webhook_posting_to(&api.url(), &format!("http://{host_port}"));
    let data = tempfile::tempdir().expect("data");
    let mut host = Host::start(dir.path(), data.path(), &env);
    let port = host.webhook_port();
    post_issue(port, "issue-1");
    host.wait_for("webhook: reply posted to octo/repo#7", LONG);
    // A comment on the thread: what the commenter wrote is the message, not only the title.
    let body = serde_json::to_vec(&serde_json::json!({
        "action": "created",
        "issue": {"number": 7, "title": "The build is red", "body": "CI fails on main"},
        "comment": {"body": "please review the fix in #8"},
        "repository": {"full_name": "octo/repo"},
        "sender": {"login": "bob"},
    }))
    .expect("json");
    let signature = github_signature(SECRET.as_bytes(), &body);
    let (status, answer) = post_webhook(
        &http_client(),
        port,
        "issue_comment",
        "comment-1",
        &body,
        Some(&signature),
    )
    .expect("post");
    assert_eq!(status, 202, "{answer}");
    host.wait_until(LONG, "the reply to the comment", |log| {
        log.matches("webhook: reply posted to octo/repo#7").count() >= 2
    });
    // GitHub reports the channel's own comments too, and a ping when a hook is made:
    // neither is a message (answering its own comment would loop with GitHub).
    let own = api
        .seen()
        .into_iter()
        .find(|r| r.line == "POST /repos/octo/repo/issues/7/comments")
        .expect("a posted comment");
    let own_body = own.json()["body"].as_str().unwrap_or_default().to_string();
    assert!(own_body.ends_with("<!-- posted by cairn -->"), "{own_body}");
    for (event, delivery, body) in [
        (
            "issue_comment",
            "own-1",
            serde_json::json!({
                "action": "created",
                "issue": {"number": 7, "title": "The build is red"},
                "comment": {"body": own_body},
                "repository": {"full_name": "octo/repo"},
                "sender": {"login": "cairn-bot"},
            }),
        ),
        (
            "ping",
            "ping-1",
            serde_json::json!({"zen": "Keep it logically awesome."}),
        ),
    ] {
        let body = serde_json::to_vec(&body).expect("json");
        let signature = github_signature(SECRET.as_bytes(), &body);
        let client = http_client();
        let (status, answer) =
            post_webhook(&client, port, event, delivery, &body, Some(&signature)).expect("post");
        assert_eq!(
            (status, answer.contains("ignored")),
            (200, true),
            "{event}: {answer}"
        );
    }
    let body = b"[1, 2]".to_vec();
    let signature = github_signature(SECRET.as_bytes(), &body);
    let (status, answer) = post_webhook(
        &http_client(),
        port,
        "issues",
        "array-1",
        &body,
        Some(&signature),
    )
    .expect("post");
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("expected a JSON object"), "{answer}");
    host.stop();
    let posted: Vec<_> = api
        .seen()
        .into_iter()
        .filter(|r| r.line == "POST /repos/octo/repo/issues/7/comments")
        .collect();
    assert_eq!(posted.len(), 2, "{posted:?}");
    let replied = |i: usize| {
        posted[i].json()["body"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        replied(0).contains("CI fails on main since the last merge"),
        "{}",
        replied(0)
    );
    assert!(
        replied(1).contains("please review the fix in #8"),
        "{}",
        replied(1)
    );
    let comment = &posted[0];
    assert_eq!(
        comment.header("authorization"),
        Some("Bearer token-for-tests")
    );
    assert_eq!(comment.header("host"), Some(host_port.as_str()));
    assert!(
        comment.json()["body"]
            .as_str()
            .is_some_and(|text| text.contains("[offline] I received")),
        "{comment:?}"
    );

    // Not granted (the manifest still names api.github.com): denied before it leaves.
    let dir = PluginDir::new();
    dir.webhook_posting_to(&api.url(), "api.github.com");
    let data = tempfile::tempdir().expect("data");
    let mut host = Host::start(dir.path(), data.path(), &env);
    let port = host.webhook_port();
    post_issue(port, "issue-2");
    host.wait_for("the host denied the request", LONG);
    let (_, log) = host.stop();
    assert!(
        log.contains(&format!(
            "outgoing HTTP request denied: http://{host_port} is not in capabilities.http"
        )),
        "{log}"
    );
    assert_eq!(
        api.seen()
            .iter()
            .filter(|r| r.line.starts_with("POST"))
            .count(),
        2,
        "the denied request never reached the API (the two posts are the granted host's)"
    );
}

#[test]
fn a_piped_run_whose_input_reader_cannot_run_stops_saying_so() {
    // Too little memory for its component: the cli channel fails to load, so nothing reads
    // the piped input, nor asks to stop at its end.
    let dir = PluginDir::new();
    dir.bundled_with("cli", |m| m.replace("memory_mb: 32", "memory_mb: 1"));
    let data = tempfile::tempdir().expect("data");
    let mut host = Host::start(dir.path(), data.path(), &fast_env());
    host.type_line("is anyone reading?");
    let (exit, log) = host.wait_exit(LONG);
    assert_eq!(exit.code(), Some(1), "{log}");
    assert!(
        log.contains("the `cli` channel, which reads standard input, is failed (")
            && log.contains("so what was piped into cairn's standard input was not read"),
        "{log}"
    );

    // A host told to keep running at the end of its input (a service) keeps running.
    let dir = PluginDir::new();
    dir.bundled_with("cli", |m| {
        m.replace("memory_mb: 32", "memory_mb: 1").replace(
            "  conversation: cli",
            "  conversation: cli\n  stop_at_end_of_input: false",
        )
    });
    let mut host = Host::start(dir.path(), data.path(), &fast_env());
    host.wait_for("cairn is running", LONG);
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");
    assert!(!log.contains("was not read"), "{log}");
}
