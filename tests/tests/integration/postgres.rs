//! Several hosts on one PostgreSQL database, through the real binary: `storage:` selects
//! the shared stores for `cairn run`, `cairn send` and `cairn memory`; a bad or unreachable
//! URL is refused at start (exit 2, password redacted); and three hosts killed with -9 at
//! random lose no acknowledged message, answer no batch twice and skip no event. Each test
//! gets a fresh database on the test server; without PostgreSQL they say so and pass.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::time::{Duration, Instant};

use cairn::store::pg::cluster::{Server, TestCluster};
use cairn_tests::stub_http::{Reply, StubServer};
use cairn_tests::{Host, PluginDir, cairn_bin, kill_pause, spawn_webhook_sender, test_env};

const LONG: Duration = Duration::from_secs(90);
const SECRET: &str = "pg-crash-secret";

/// A fresh database's connection string (it has no password); None without a server.
fn database() -> Option<String> {
    let cluster = TestCluster::shared()?;
    Some(cluster.fresh_database().redacted().to_string())
}

/// Run `cairn ARGS` on `storage` with the test environment.
fn cairn_on(storage: &str, data: &Path, args: &[&str]) -> std::process::Output {
    let mut command = Command::new(cairn_bin());
    command
        .args(args)
        .arg("--data")
        .arg(data)
        .stdin(Stdio::null());
    for (key, value) in test_env() {
        command.env(key, value);
    }
    command.env("CAIRN_STORAGE", storage);
    command.output().expect("run cairn")
}

/// A client of the test database, for the test's own checks.
fn client(storage: &str) -> postgres::Client {
    postgres::Client::connect(storage, postgres::NoTls).expect("connect to the test database")
}

#[test]
fn hosts_on_one_database_share_conversations_and_memory() {
    let Some(storage) = database() else { return };
    let dir = PluginDir::new();
    dir.bundled("cli");
    let (first_data, second_data) = (
        tempfile::tempdir().expect("data"),
        tempfile::tempdir().expect("data"),
    );
    let env = [
        ("CAIRN_STORAGE", storage.as_str()),
        ("CAIRN_ROUTER_BATCH_WINDOW_MS", "50"),
    ];
    let mut first = Host::start(dir.path(), first_data.path(), &env);
    first.wait_for("cairn is running", LONG);
    first.type_line("my boat is moored at pier seven");
    first.wait_for("cairn> [offline] I received: user: my boat is moored", LONG);
    let (exit, _) = first.stop();
    assert!(exit.success());

    // Another host, another data dir, the same database: memory is there.
    let listed = cairn_on(&storage, second_data.path(), &["memory", "list", "--json"]);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let entries: Vec<serde_json::Value> = serde_json::from_slice(&listed.stdout).expect("json");
    assert!(
        entries.iter().any(|e| e["content"]
            .as_str()
            .is_some_and(|c| c.contains("pier seven"))),
        "the first host's episode is in shared memory: {entries:?}"
    );
    let found = cairn_on(
        &storage,
        second_data.path(),
        &["memory", "search", "pier", "--json"],
    );
    assert!(
        found.status.success(),
        "{}",
        String::from_utf8_lossy(&found.stderr)
    );
    assert!(String::from_utf8_lossy(&found.stdout).contains("pier seven"));

    // A message sent while no host runs waits in the shared buffer for any host.
    let sent = cairn_on(
        &storage,
        second_data.path(),
        &[
            "send",
            "--channel",
            "cli",
            "--sender",
            "ada",
            "--conversation",
            "c9",
            "hello from send",
        ],
    );
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let mut second = Host::start(dir.path(), second_data.path(), &env);
    second.wait_until(LONG, "the sent message answered", |_| {
        let row = client(&storage)
            .query_one(
                "SELECT count(*) FROM journal_events WHERE topic = 'agent.response'
                   AND payload::jsonb ->> 'conversation' = 'c9'",
                &[],
            )
            .expect("query");
        row.get::<_, i64>(0) == 1
    });
    let (exit, _) = second.stop();
    assert!(exit.success());

    // `cairn status` and `cairn journal` read the database, from any data dir.
    let elsewhere = tempfile::tempdir().expect("data");
    let status = cairn_on(&storage, elsewhere.path(), &["status", "--json"]);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).expect("json");
    assert_eq!(status["host"]["running"], false, "{status}");
    assert_eq!(status["buffer"]["depth"], 0, "{status}");
    assert_eq!(status["buffer"]["batches"]["main/done"], 2, "{status}");
    assert!(
        status["plugins"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["id"] == "cli")),
        "{status}"
    );
    let tail = cairn_on(
        &storage,
        elsewhere.path(),
        &["journal", "tail", "--topic", "agent.*", "--json"],
    );
    assert!(
        tail.status.success(),
        "{}",
        String::from_utf8_lossy(&tail.stderr)
    );
    let replies: Vec<serde_json::Value> = String::from_utf8_lossy(&tail.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(replies.len(), 2, "both hosts' replies: {replies:?}");
    let letters = cairn_on(&storage, elsewhere.path(), &["journal", "dead-letters"]);
    assert!(String::from_utf8_lossy(&letters.stdout).contains("no dead letters"));
}

#[test]
fn a_bad_or_unreachable_storage_url_is_refused_at_start_with_the_password_hidden() {
    let dir = PluginDir::new();
    dir.bundled("cli");
    let data = tempfile::tempdir().expect("data");
    let run = |storage: &str| {
        let mut command = Command::new(cairn_bin());
        command
            .args(["run", "--plugins"])
            .arg(dir.path())
            .arg("--data")
            .arg(data.path())
            .env("CAIRN_STORAGE", storage)
            .stdin(Stdio::null());
        command.output().expect("run cairn")
    };
    let bad = run("mysql://root@db/cairn");
    assert_eq!(bad.status.code(), Some(2));
    let message = String::from_utf8_lossy(&bad.stderr);
    assert!(
        message.contains("CAIRN_STORAGE: storage: `mysql://root@db/cairn` is not a PostgreSQL URL")
            && message.contains("expected `sqlite` (the default) or `postgres://"),
        "the variable that set it is named, and what it takes: {message}"
    );

    let away = run("postgres://cairn:hunter2@127.0.0.1:1/cairn");
    assert_eq!(away.status.code(), Some(2));
    let message = String::from_utf8_lossy(&away.stderr);
    assert!(
        message.contains("cannot reach PostgreSQL at postgres://cairn:***@127.0.0.1:1/cairn"),
        "{message}"
    );
    assert!(
        !message.contains("hunter2"),
        "the password leaked: {message}"
    );
}

/// Whether every message is routed, every main batch finished and the subscriber has
/// caught up with the last `message.received`.
fn settled(db: &mut postgres::Client) -> bool {
    let count = |db: &mut postgres::Client, sql: &str| -> i64 {
        db.query_one(sql, &[]).expect("query").get(0)
    };
    count(db, "SELECT count(*) FROM buffer_messages WHERE batch_id IS NULL") == 0
        && count(db, "SELECT count(*) FROM buffer_batches WHERE status IN ('queued', 'running')") == 0
        && count(
            db,
            "SELECT count(*) FROM journal_events e WHERE e.topic = 'message.received'
               AND e.seq > coalesce((SELECT cursor FROM journal_subscribers WHERE id = 'counter'), 0)",
        ) == 0
}

#[test]
fn three_hosts_on_one_database_lose_double_and_skip_nothing_across_kill_9() {
    let Some(storage) = database() else { return };
    let dir = PluginDir::new();
    dir.counted_webhook();
    let env = [
        ("CAIRN_STORAGE", storage.as_str()),
        ("CAIRN_HTTP_LISTEN", "127.0.0.1:0"),
        ("CAIRN_WEBHOOK_SECRET", SECRET),
        ("CAIRN_ROUTER_BATCH_WINDOW_MS", "20"),
        ("CAIRN_BUFFER_CLAIM_LEASE_MS", "1500"),
        ("CAIRN_JOURNAL_SUBSCRIPTION_LEASE_MS", "1500"),
        // Deliveries are counted from the subscriber's log lines: none may be dropped by
        // the log rate limit when a backlog is delivered after a hand-over.
        ("CAIRN_RUNTIME_LOG_RATE_PER_SEC", "100000"),
    ];
    let data: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().expect("data")).collect();
    let mut hosts: Vec<Option<Host>> = data
        .iter()
        .map(|d| Some(Host::start(dir.path(), d.path(), &env)))
        .collect();
    let ports: Arc<Vec<AtomicU16>> = Arc::new(
        hosts
            .iter_mut()
            .map(|h| AtomicU16::new(h.as_mut().expect("host").webhook_port()))
            .collect(),
    );
    let finished = Arc::new(AtomicBool::new(false));
    let sender = spawn_webhook_sender(
        ports.clone(),
        finished.clone(),
        SECRET,
        Duration::from_millis(4),
    );
    let mut logs = Vec::new();
    let (rounds, mut seed) = (20, 0x0c1a_57e5_u64);
    for _ in 0..rounds {
        std::thread::sleep(kill_pause(&mut seed) * 3);
        let victim = (seed >> 40) as usize % hosts.len();
        ports[victim].store(0, Ordering::SeqCst);
        logs.push(hosts[victim].take().expect("host").kill9());
        let mut host = Host::start(dir.path(), data[victim].path(), &env);
        ports[victim].store(host.webhook_port(), Ordering::SeqCst);
        hosts[victim] = Some(host);
    }
    std::thread::sleep(Duration::from_millis(300));
    finished.store(true, Ordering::SeqCst);
    let (_, acknowledged) = sender.join().expect("sender");
    let mut db = client(&storage);
    let deadline = std::time::Instant::now() + LONG;
    while !settled(&mut db) {
        if std::time::Instant::now() > deadline {
            logs.extend(hosts.iter().flatten().map(Host::log));
            panic!(
                "timed out waiting for every message answered and every event delivered; \
                 the hosts' logs are in {}",
                keep_logs(&logs).display()
            );
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    for host in hosts.into_iter().flatten() {
        let (exit, log) = host.stop();
        assert!(exit.success(), "{log}");
        logs.push(log);
    }

    let mut stored: BTreeMap<i64, usize> = BTreeMap::new();
    for row in db
        .query(
            "SELECT (payload::jsonb #>> '{body,seq}')::BIGINT FROM buffer_messages",
            &[],
        )
        .expect("messages")
    {
        *stored.entry(row.get(0)).or_default() += 1;
    }
    let lost: Vec<&usize> = acknowledged
        .iter()
        .filter(|i| !stored.contains_key(&(**i as i64)))
        .collect();
    let doubled_messages = stored.values().filter(|n| **n > 1).count();
    let doubled_replies: i64 = db
        .query_one(
            "SELECT count(*) FROM (SELECT payload::jsonb ->> 'batch_id' FROM journal_events
               WHERE topic = 'agent.response' GROUP BY 1 HAVING count(*) > 1) AS twice",
            &[],
        )
        .expect("replies")
        .get(0);
    let unanswered: i64 = db
        .query_one(
            "SELECT count(*) FROM buffer_batches b WHERE b.route = 'main' AND NOT EXISTS
               (SELECT 1 FROM journal_events e WHERE e.topic = 'agent.response'
                  AND (e.payload::jsonb ->> 'batch_id')::BIGINT = b.id)",
            &[],
        )
        .expect("unanswered")
        .get(0);
    let expected: BTreeSet<i64> = db
        .query(
            "SELECT seq FROM journal_events WHERE topic = 'message.received'",
            &[],
        )
        .expect("events")
        .iter()
        .map(|row| row.get(0))
        .collect();
    let mut seen = BTreeSet::new();
    let mut deliveries = 0;
    for log in &logs {
        let seqs = cairn_tests::delivered_seqs(log, "counter");
        deliveries += seqs.len();
        seen.extend(seqs);
    }
    let skipped: Vec<&i64> = expected.iter().filter(|s| !seen.contains(s)).collect();
    let finished_from_earlier_replies: usize = logs
        .iter()
        .map(|log| cairn_tests::count_lines(log, "an earlier attempt answered this batch"))
        .sum();
    println!(
        "cluster crash test: 3 hosts, {rounds} kill -9, {} acknowledged, {} stored, lost {}, \
         doubled messages {doubled_messages}, doubled replies {doubled_replies}, unanswered \
         batches {unanswered} ({finished_from_earlier_replies} taken over after their reply), \
         {} events, {deliveries} deliveries, skipped {}",
        acknowledged.len(),
        stored.len(),
        lost.len(),
        expected.len(),
        skipped.len()
    );
    assert!(acknowledged.len() > 100, "the load should be substantial");
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
    assert_eq!(doubled_messages, 0, "a delivery stored twice");
    assert_eq!(doubled_replies, 0, "a batch answered twice");
    assert_eq!(unanswered, 0, "a batch never answered");
    assert!(
        skipped.is_empty(),
        "events the subscriber never got: {skipped:?}; the hosts' logs are in {}",
        keep_logs(&logs).display()
    );
}

/// Keep the logs of a failed cluster run (each host's, in the order they ended) where a
/// person can read them: `target/test-logs/three-hosts-<pid>/`.
fn keep_logs(logs: &[String]) -> std::path::PathBuf {
    let dir = cairn_tests::workspace_root()
        .join("target/test-logs")
        .join(format!("three-hosts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory for the logs");
    for (i, log) in logs.iter().enumerate() {
        std::fs::write(dir.join(format!("host-{i}.log")), log).expect("a log written");
    }
    dir
}

#[test]
fn a_turn_across_a_database_outage_is_recorded_and_its_conversation_goes_on() {
    let Some((server, cluster)) = Server::own() else {
        return;
    };
    let storage = cluster.fresh_database().redacted().to_string();
    // The model answers the first question only once the test has stopped the server.
    let released = Arc::new(AtomicBool::new(false));
    let gate = released.clone();
    let arrived = Arc::new(AtomicU16::new(0));
    let asked = arrived.clone();
    let model = StubServer::answering(move |_| {
        let n = asked.fetch_add(1, Ordering::SeqCst) + 1;
        let deadline = Instant::now() + LONG;
        while !gate.load(Ordering::SeqCst) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        Reply::openai_chat(&format!("answer {n} across the outage"))
    });
    let base_url = format!("{}/v1", model.url());
    let dir = PluginDir::new();
    dir.bundled("cli");
    let data = tempfile::tempdir().expect("data");
    let mut host = Host::start(
        dir.path(),
        data.path(),
        &[
            ("CAIRN_STORAGE", storage.as_str()),
            ("CAIRN_ROUTER_BATCH_WINDOW_MS", "50"),
            ("CAIRN_AGENT_LLM_PROVIDER", "openai"),
            ("CAIRN_AGENT_LLM_BASE_URL", base_url.as_str()),
        ],
    );
    host.wait_for("cairn is running", LONG);
    host.type_line("What did I ask before the outage?");
    host.wait_until(LONG, "the model is asked", |_| {
        arrived.load(Ordering::SeqCst) == 1
    });
    // The batch's episodes and events are written beside the model's call (milliseconds);
    // an outage before they are waits the whole turn, which is not what this test is about.
    std::thread::sleep(Duration::from_secs(1));

    server.stop().expect("stop the server");
    released.store(true, Ordering::SeqCst);
    host.wait_for("cairn> answer 1 across the outage", LONG);
    // The turn's bookkeeping waits for the server instead of being given up.
    host.wait_for("trying again until it goes through", LONG);
    // Long enough for every retry with backoff of a delivery to run out, were it counted.
    std::thread::sleep(Duration::from_secs(3));
    server.start().expect("start the server again");

    // The conversation is not held behind a batch left running.
    host.type_line("And after it?");
    host.wait_for("cairn> answer 2 across the outage", LONG);
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    assert!(!log.contains("cannot record the turn's outcome"), "{log}");
    let mut db = client(&storage);
    let batches: Vec<(String, i64)> = db
        .query(
            "SELECT status, count(*) FROM buffer_batches GROUP BY status",
            &[],
        )
        .expect("batches")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(batches, [("done".to_string(), 2)], "{log}");
    let answers: i64 = db
        .query_one(
            "SELECT count(*) FROM journal_events WHERE topic = 'agent.response'",
            &[],
        )
        .expect("answers")
        .get(0);
    assert_eq!(answers, 2, "one agent.response per batch: {log}");
    let dead_letters: i64 = db
        .query_one("SELECT count(*) FROM journal_dead_letters", &[])
        .expect("dead letters")
        .get(0);
    assert_eq!(dead_letters, 0, "an outage dead-letters nothing: {log}");
    assert!(!log.contains("cannot move the cursor"), "{log}");
    let replies: i64 = db
        .query_one(
            "SELECT count(*) FROM memory_entries WHERE content LIKE 'answer % across the outage'",
            &[],
        )
        .expect("episodes")
        .get(0);
    assert_eq!(replies, 2, "both replies remembered: {log}");
}
