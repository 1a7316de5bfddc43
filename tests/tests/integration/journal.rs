//! The event journal through the real binary: the turn and the supervisor journal their
//! events, subscribers receive them in order, a failing subscriber is dead-lettered without
//! holding up the others, and plugins emit only the topics their manifest lists.

use std::time::Duration;

use cairn_tests::{Host, PluginDir, cairn, journal_events, status_json};

const LONG: Duration = Duration::from_secs(60);

#[test]
fn turn_events_reach_subscribers_and_a_failing_one_is_dead_lettered_alone() {
    let dir = PluginDir::new();
    dir.bundled("cli");
    dir.plugin(
        "counter",
        "handler",
        "counter",
        "events: {subscribes: ['message.*', turn.completed]}\ncapabilities: {kv: true}\n",
    );
    dir.plugin(
        "trapper",
        "handler",
        "hostile",
        "events: {subscribes: [message.received]}\nconfig: {mode: ok}\n",
    );
    let data = tempfile::tempdir().expect("data");
    let env = [
        ("CAIRN_HTTP_LISTEN", "127.0.0.1:0"),
        ("CAIRN_ROUTER_BATCH_WINDOW_MS", "100"),
        ("CAIRN_JOURNAL_MAX_ATTEMPTS", "3"),
        ("CAIRN_JOURNAL_BACKOFF_INITIAL_MS", "20"),
    ];
    let mut host = Host::start(dir.path(), data.path(), &env);
    host.wait_for("cairn is running", LONG);
    let turns_seen = |log: &str| {
        log.lines()
            .filter(|l| l.contains("counter: event #") && l.contains("topic=turn.completed"))
            .count()
    };
    host.type_line("first");
    host.wait_until(LONG, "the first turn reaches the counter", |log| {
        turns_seen(log) == 1
    });
    host.type_line("second");
    host.wait_until(LONG, "the second turn reaches the counter", |log| {
        turns_seen(log) == 2
    });
    host.wait_until(LONG, "both messages dead-lettered for the trapper", |log| {
        log.matches("event dead-lettered").count() == 2
    });
    let (exit, log) = host.stop();
    assert!(exit.success());
    // The counter got every event in journal order, whatever the trapper did.
    let seqs = cairn_tests::delivered_seqs(&log, "counter");
    assert_eq!(
        seqs.len(),
        4,
        "message.received + turn.completed twice: {seqs:?}"
    );
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order: {seqs:?}");

    let data_arg = data.path().display().to_string();
    let tail = cairn(&[
        "journal", "tail", "--json", "--data", &data_arg, "--limit", "100",
    ]);
    assert!(tail.status.success());
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&tail.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON event per line"))
        .collect();
    let topics: Vec<&str> = events.iter().filter_map(|e| e["topic"].as_str()).collect();
    for expected in [
        "message.received",
        "agent.response",
        "turn.completed",
        "plugin.failed",
    ] {
        assert!(
            topics.contains(&expected),
            "{expected} missing from {topics:?}"
        );
    }
    assert!(
        events
            .windows(2)
            .all(|w| w[0]["seq"].as_i64() < w[1]["seq"].as_i64())
    );

    let dead = cairn(&["journal", "dead-letters", "--json", "--data", &data_arg]);
    let dead: Vec<serde_json::Value> = serde_json::from_slice(&dead.stdout).expect("json");
    assert!(!dead.is_empty());
    assert!(
        dead.iter()
            .all(|d| d["subscriber"] == "trapper" && d["attempts"] == 3),
        "{dead:?}"
    );
    // A trap says only `unreachable`: the fault quotes what the plugin said on stderr first
    // (here Rust's panic message).
    assert!(
        dead.iter().all(|d| d["error"].as_str().is_some_and(|e| {
            e.contains("unreachable")
                && e.contains("; stderr: ")
                && e.contains("hostile: trapping on event")
        })),
        "{dead:?}"
    );
    // The list takes the same --subscriber and --id as retry and discard.
    let list = |extra: &[&str]| {
        let mut args = vec!["journal", "dead-letters", "--json", "--data", &data_arg];
        args.extend_from_slice(extra);
        cairn(&args)
    };
    let counter = list(&["--subscriber", "counter"]);
    assert_eq!(String::from_utf8_lossy(&counter.stdout).trim(), "[]");
    let first = dead[0]["id"].as_i64().expect("id").to_string();
    let one: Vec<serde_json::Value> =
        serde_json::from_slice(&list(&["--id", &first]).stdout).expect("json");
    assert_eq!(one.len(), 1, "{one:?}");
    let unknown = list(&["--subscriber", "nobody"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no subscriber `nobody`"));
    let missing = list(&["--id", "999999"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("--id: no dead letter #999999"));
    let not_its = list(&["--id", &first, "--subscriber", "counter"]);
    assert_eq!(not_its.status.code(), Some(2));

    let status = status_json(data.path());
    let subscribers = status["subscribers"].as_array().expect("subscribers");
    for subscriber in subscribers {
        assert_eq!(
            subscriber["lag"], 0,
            "every subscriber consumed everything: {subscriber}"
        );
    }

    let bad = cairn(&[
        "journal",
        "tail",
        "--topic",
        "not a topic",
        "--data",
        &data_arg,
    ]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn plugins_emit_only_the_topics_their_manifest_lists() {
    let dir = PluginDir::new();
    dir.plugin(
        "emitter",
        "handler",
        "hostile",
        "events: {emits: [emitter.done]}\nconfig: {mode: emit, allowed: emitter.done, denied: emitter.secret}\n",
    );
    let data = tempfile::tempdir().expect("data");
    let mut host = Host::start(
        dir.path(),
        data.path(),
        &[("CAIRN_HTTP_LISTEN", "127.0.0.1:0")],
    );
    host.wait_for("hostile: init finished", LONG);
    let (exit, log) = host.stop();
    assert!(exit.success());
    assert!(log.contains("probe emit-allowed: ok"), "{log}");
    assert!(
        log.contains("probe emit-denied: denied")
            && log.contains("`emitter.secret` is not listed in the manifest's events.emits"),
        "{log}"
    );

    let tail = cairn(&[
        "journal",
        "tail",
        "--json",
        "--data",
        &data.path().display().to_string(),
    ]);
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&tail.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["topic"], "emitter.done");
    assert_eq!(events[0]["source"], "emitter");
}

#[test]
fn idle_sessions_end_the_agent_sleeps_and_a_message_interrupts_it() {
    let dir = PluginDir::new();
    dir.bundled("cli");
    let data = tempfile::tempdir().expect("data");
    let env = [
        ("CAIRN_HTTP_LISTEN", "127.0.0.1:0"),
        ("CAIRN_ROUTER_BATCH_WINDOW_MS", "50"),
        ("CAIRN_LIFECYCLE_SESSION_TIMEOUT_SECS", "1"),
        ("CAIRN_LIFECYCLE_SLEEP_TIMEOUT_SECS", "2"),
        ("CAIRN_LIFECYCLE_CHECK_INTERVAL_MS", "50"),
    ];
    let mut host = Host::start(dir.path(), data.path(), &env);
    host.wait_for("cairn is running", LONG);
    host.type_line("remember the milk");
    host.wait_for("cairn> [offline] I received: user: remember the milk", LONG);
    let data_path = data.path().to_path_buf();
    host.wait_until(LONG, "sleep.started", |_| {
        journal_events(&data_path)
            .iter()
            .any(|e| e["topic"] == "sleep.started")
    });
    host.type_line("wake up");
    host.wait_until(LONG, "sleep.interrupted", |_| {
        journal_events(&data_path)
            .iter()
            .any(|e| e["topic"] == "sleep.interrupted")
    });
    let (exit, _) = host.stop();
    assert!(exit.success());

    // A new session of the same user makes the earlier one pending for consolidation.
    let data_arg = data.path().display().to_string();
    let sent = cairn(&[
        "send",
        "--data",
        &data_arg,
        "--channel",
        "cli",
        "--conversation",
        "other",
        "--sender",
        "user",
        "hi",
    ]);
    assert!(sent.status.success());
    let mut host = Host::start(dir.path(), data.path(), &env);
    host.wait_until(LONG, "memory.session_completed", |_| {
        journal_events(&data_path)
            .iter()
            .any(|e| e["topic"] == "memory.session_completed")
    });
    host.stop();

    let events = journal_events(data.path());
    let ended = events
        .iter()
        .find(|e| e["topic"] == "session.ended")
        .expect("session.ended");
    let payload: serde_json::Value =
        serde_json::from_str(ended["payload"].as_str().expect("payload")).expect("json");
    assert_eq!(payload["reason"], "idle");
    assert_eq!(payload["session_id"], "cli:cli");
    assert_eq!(payload["transcript"][0]["text"], "remember the milk");
    assert_eq!(payload["transcript"][1]["role"], "assistant");
    let sleeps = events
        .iter()
        .filter(|e| e["topic"] == "sleep.started")
        .count();
    let wakes = events
        .iter()
        .filter(|e| e["topic"] == "sleep.interrupted")
        .count();
    assert!(sleeps >= 1 && wakes >= 1);
    let order: Vec<&str> = events.iter().filter_map(|e| e["topic"].as_str()).collect();
    let first_sleep = order
        .iter()
        .position(|t| *t == "sleep.started")
        .expect("sleep");
    let first_ended = order
        .iter()
        .position(|t| *t == "session.ended")
        .expect("ended");
    assert!(
        first_ended < first_sleep,
        "the session ends before the agent sleeps: {order:?}"
    );
    let completed = events
        .iter()
        .find(|e| e["topic"] == "memory.session_completed")
        .expect("completed");
    assert_eq!(completed["session_id"], "cli:cli");
}

#[test]
fn a_schedule_tick_missed_while_down_fires_once_at_start_unless_skipped() {
    if cairn_tests::storage::reads_sqlite_files(
        "a_schedule_tick_missed_while_down_fires_once_at_start_unless_skipped",
    ) {
        return;
    }
    let dir = PluginDir::new();
    dir.plugin(
        "counter",
        "handler",
        "counter",
        "events: {subscribes: ['schedule.counter.*']}\nschedule: [{name: minute, cron: '* * * * *'}]\ncapabilities: {kv: true}\n",
    );
    let data = tempfile::tempdir().expect("data");
    let env = [("CAIRN_HTTP_LISTEN", "127.0.0.1:0")];
    // The first run records the schedule without firing it.
    let mut host = Host::start(dir.path(), data.path(), &env);
    host.wait_for("cairn is running", LONG);
    host.stop();
    let rewind = || {
        let conn = rusqlite::Connection::open(data.path().join("host.db")).expect("host.db");
        let changed = conn
            .execute(
                "UPDATE schedule_state SET last_fired_at = last_fired_at - 600000 WHERE plugin_id = 'counter'",
                [],
            )
            .expect("rewind");
        assert_eq!(changed, 1, "the first run recorded the schedule");
    };
    rewind();
    let mut host = Host::start(dir.path(), data.path(), &env);
    host.wait_for("topic=schedule.counter.minute", LONG);
    let (_, log) = host.stop();
    assert_eq!(
        log.matches("topic=schedule.counter.minute").count(),
        1,
        "ten missed ticks fire once"
    );
    let events = journal_events(data.path());
    let tick = events
        .iter()
        .find(|e| e["topic"] == "schedule.counter.minute")
        .expect("tick");
    let payload: serde_json::Value =
        serde_json::from_str(tick["payload"].as_str().unwrap_or_default()).expect("payload");
    assert_eq!(payload["missed"], true, "{tick}");
    // Ten minutes down: the one tick fired is the last missed, and says how many were.
    let count = payload["missed_ticks"].as_u64().unwrap_or(0);
    assert!((10..=11).contains(&count), "{payload}");
    let (first, last) = (
        payload["first_missed_at"].as_i64().unwrap_or(0),
        payload["scheduled_for"].as_i64().unwrap_or(0),
    );
    assert_eq!(last - first, (count as i64 - 1) * 60_000, "{payload}");

    rewind();
    let mut host = Host::start(
        dir.path(),
        data.path(),
        &[
            ("CAIRN_HTTP_LISTEN", "127.0.0.1:0"),
            ("CAIRN_LIFECYCLE_MISSED_SCHEDULES", "skip"),
        ],
    );
    host.wait_for("cairn is running", LONG);
    std::thread::sleep(Duration::from_millis(500));
    host.stop();
    let missed = journal_events(data.path())
        .iter()
        .filter(|e| e["topic"] == "schedule.counter.minute")
        .filter(|e| {
            e["payload"]
                .as_str()
                .unwrap_or_default()
                .contains("\"missed\":true")
        })
        .count();
    assert_eq!(
        missed, 1,
        "with `skip`, the second run's missed ticks fire nothing"
    );

    // A tick recorded a day ahead (a clock that was ahead, then set right) is said and
    // left behind: the schedule goes on from now, where it used to stay silent for the day.
    let conn = rusqlite::Connection::open(data.path().join("host.db")).expect("host.db");
    let day = 86_400_000i64;
    conn.execute(
        "UPDATE schedule_state SET last_fired_at = last_fired_at + ?1 WHERE plugin_id = 'counter'",
        [day],
    )
    .expect("move ahead");
    drop(conn);
    let started = cairn::store::now_ms();
    let mut host = Host::start(dir.path(), data.path(), &env);
    host.wait_for("the clock was ahead, or went back", LONG);
    host.stop();
    let conn = rusqlite::Connection::open(data.path().join("host.db")).expect("host.db");
    let last: i64 = conn
        .query_row(
            "SELECT last_fired_at FROM schedule_state WHERE plugin_id = 'counter'",
            [],
            |r| r.get(0),
        )
        .expect("schedule state");
    assert!(
        last >= started && last < started + day / 2,
        "recorded from now again: {last} (started {started})"
    );
}

#[test]
fn every_schedule_due_at_the_same_minute_fires() {
    let dir = PluginDir::new();
    let every_minute = "schedule: [{name: a, cron: '* * * * *'}, {name: b, cron: '* * * * *'}]\n";
    for id in ["counter", "tally"] {
        dir.plugin(
            id,
            "handler",
            "counter",
            &format!("events: {{subscribes: ['schedule.{id}.*']}}\n{every_minute}capabilities: {{kv: true}}\n"),
        );
    }
    let data = tempfile::tempdir().expect("data");
    let mut host = Host::start(
        dir.path(),
        data.path(),
        &[("CAIRN_HTTP_LISTEN", "127.0.0.1:0")],
    );
    host.wait_for("cairn is running", LONG);
    // The next minute's ticks: four schedules due at one moment (two in each plugin).
    host.wait_for("topic=schedule.", Duration::from_secs(90));
    host.wait_until(LONG, "four ticks", |log| {
        log.matches("topic=schedule.").count() >= 4
    });
    host.stop();
    let ticks: Vec<(String, i64)> = journal_events(data.path())
        .iter()
        .filter(|e| {
            e["topic"]
                .as_str()
                .is_some_and(|t| t.starts_with("schedule."))
        })
        .map(|e| {
            let payload: serde_json::Value =
                serde_json::from_str(e["payload"].as_str().expect("payload")).expect("json");
            let at = payload["scheduled_for"].as_i64().expect("scheduled_for");
            (e["topic"].as_str().expect("topic").to_string(), at)
        })
        .collect();
    let first = ticks.first().expect("a tick").1;
    let mut fired: Vec<&str> = ticks
        .iter()
        .filter(|(_, at)| *at == first)
        .map(|(topic, _)| topic.as_str())
        .collect();
    fired.sort_unstable();
    assert_eq!(
        fired,
        [
            "schedule.counter.a",
            "schedule.counter.b",
            "schedule.tally.a",
            "schedule.tally.b"
        ],
        "{ticks:?}"
    );
}

/// Whether the host on `data` has routed every message, finished every main batch and
/// delivered every event to every subscriber (`cairn status`).
fn settled(data: &std::path::Path) -> bool {
    let status = status_json(data);
    let batches = &status["buffer"]["batches"];
    status["buffer"]["depth"] == 0
        && batches.get("main/queued").is_none()
        && batches.get("main/running").is_none()
        && status["subscribers"]
            .as_array()
            .is_some_and(|s| s.iter().all(|s| s["lag"] == 0))
}

#[test]
fn every_event_reaches_every_subscriber_in_order_across_kill_9() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};

    const SECRET: &str = "journal-crash-secret";
    let dir = PluginDir::new();
    dir.bundled("webhook");
    let subscriptions = [
        ("counter", vec!["message.received"]),
        ("tally", vec!["turn.*", "agent.response"]),
    ];
    for (id, patterns) in &subscriptions {
        let list = patterns
            .iter()
            .map(|p| format!("'{p}'"))
            .collect::<Vec<_>>()
            .join(", ");
        dir.plugin(
            id,
            "handler",
            "counter",
            &format!("events: {{subscribes: [{list}]}}\ncapabilities: {{kv: true}}\n"),
        );
    }
    let data = tempfile::tempdir().expect("data");
    let mut env = webhook_load_env(SECRET);
    // On a shared database a killed host's subscriptions wait for their lease.
    env.push(("CAIRN_JOURNAL_SUBSCRIPTION_LEASE_MS", "1500"));
    let kills = 5;
    let mut logs = Vec::new();
    let mut host = Host::start(dir.path(), data.path(), &env);
    let port = Arc::new(vec![AtomicU16::new(host.webhook_port())]);
    let finished = Arc::new(AtomicBool::new(false));
    let sender = cairn_tests::spawn_webhook_sender(
        port.clone(),
        finished.clone(),
        SECRET,
        Duration::from_millis(5),
    );
    let mut seed: u64 = 0x00dd_ba11;
    for _ in 0..kills {
        std::thread::sleep(cairn_tests::kill_pause(&mut seed));
        logs.push(host.kill9());
        host = Host::start(dir.path(), data.path(), &env);
        port[0].store(host.webhook_port(), Ordering::SeqCst);
    }
    std::thread::sleep(Duration::from_millis(300));
    finished.store(true, Ordering::SeqCst);
    sender.join().expect("sender");
    let data_path = data.path().to_path_buf();
    host.wait_until(LONG, "every subscriber caught up", |_| settled(&data_path));
    let (exit, last) = host.stop();
    assert!(exit.success());
    logs.push(last);

    let events = journal_events(data.path());
    let mut total_duplicates = 0;
    for (id, patterns) in &subscriptions {
        let expected: Vec<i64> = events
            .iter()
            .filter(|e| {
                let topic = e["topic"].as_str().unwrap_or_default();
                patterns
                    .iter()
                    .any(|p| cairn::journal::topic_matches(p, topic))
            })
            .filter_map(|e| e["seq"].as_i64())
            .collect();
        assert!(
            expected.len() > 20,
            "{id}: the stream should be substantial ({} events)",
            expected.len()
        );
        let mut seen = std::collections::BTreeSet::new();
        let mut deliveries = 0;
        for (run, log) in logs.iter().enumerate() {
            let seqs = cairn_tests::delivered_seqs(log, id);
            assert!(
                seqs.windows(2).all(|w| w[0] < w[1]),
                "{id}: out of order in run {run}: {seqs:?}"
            );
            deliveries += seqs.len();
            seen.extend(seqs);
        }
        let missing: Vec<&i64> = expected.iter().filter(|s| !seen.contains(s)).collect();
        assert!(
            missing.is_empty(),
            "{id}: events never delivered: {missing:?}"
        );
        let unexpected: Vec<&i64> = seen.iter().filter(|s| !expected.contains(s)).collect();
        assert!(
            unexpected.is_empty(),
            "{id}: delivered events it does not subscribe to: {unexpected:?}"
        );
        // Cursors are committed every 64 taken events (or 100 ms), each batch's move while
        // the next run is delivered: a kill redelivers at most those two batches and the
        // event in flight.
        let duplicates = deliveries - seen.len();
        assert!(
            duplicates <= kills * 129,
            "{id}: {duplicates} redeliveries after {kills} kills"
        );
        total_duplicates += duplicates;
        println!(
            "journal crash test: {id}: {} events, {deliveries} deliveries, {} duplicates, 0 skipped",
            expected.len(),
            deliveries - seen.len()
        );
    }
    println!("journal crash test: {kills} kill -9, {total_duplicates} duplicate deliveries in all");
}

#[test]
fn a_hanging_subscriber_never_delays_the_others() {
    let dir = PluginDir::new();
    dir.bundled("cli");
    dir.plugin(
        "counter",
        "handler",
        "counter",
        "events: {subscribes: [message.received]}\ncapabilities: {kv: true}\n",
    );
    dir.plugin(
        "hanger",
        "handler",
        "hostile",
        // A deadline far longer than three typed lines take on a loaded machine: the hanger
        // is still stuck on the first event while the counter takes all three.
        "events: {subscribes: [message.received]}\nlimits: {timeout_ms: 10000}\nconfig: {mode: ok, event: hang}\n",
    );
    let data = tempfile::tempdir().expect("data");
    let env = [
        ("CAIRN_HTTP_LISTEN", "127.0.0.1:0"),
        ("CAIRN_ROUTER_BATCH_WINDOW_MS", "50"),
        ("CAIRN_JOURNAL_MAX_ATTEMPTS", "1"),
    ];
    let mut host = Host::start(dir.path(), data.path(), &env);
    host.wait_for("cairn is running", LONG);
    for line in ["one", "two", "three"] {
        host.type_line(line);
        host.wait_for(&format!("cairn> [offline] I received: user: {line}"), LONG);
    }
    host.wait_for("counter: event #3", LONG);
    assert!(
        !host.log().contains("event dead-lettered"),
        "the counter had all three events while the hanger was stuck on its first"
    );
    host.wait_for("event dead-lettered", LONG);
    let (exit, log) = host.stop();
    assert!(exit.success());
    assert!(
        log.contains("timeout (limits.timeout_ms): wasm trap: interrupt"),
        "the hanger was stopped by its deadline"
    );
}

#[test]
fn a_sleep_handler_sees_the_interrupt_flag() {
    let dir = PluginDir::new();
    dir.bundled("cli");
    dir.plugin(
        "dreamer",
        "sleep-handler",
        "hostile",
        "events: {subscribes: ['sleep.*']}\ncapabilities: {lifecycle: true}\nconfig: {mode: ok, event: interrupted}\n",
    );
    let data = tempfile::tempdir().expect("data");
    let env = [
        ("CAIRN_HTTP_LISTEN", "127.0.0.1:0"),
        ("CAIRN_ROUTER_BATCH_WINDOW_MS", "50"),
        ("CAIRN_LIFECYCLE_SESSION_TIMEOUT_SECS", "1"),
        ("CAIRN_LIFECYCLE_SLEEP_TIMEOUT_SECS", "1"),
        ("CAIRN_LIFECYCLE_CHECK_INTERVAL_MS", "50"),
    ];
    let mut host = Host::start(dir.path(), data.path(), &env);
    host.wait_for("probe interrupted: ok false on sleep.started", LONG);
    host.type_line("are you awake?");
    host.wait_for("probe interrupted: ok true on sleep.interrupted", LONG);
    let (exit, _) = host.stop();
    assert!(exit.success());
}

#[test]
fn a_replay_on_a_running_host_under_load_redelivers_from_where_it_was_asked() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU16};

    const SECRET: &str = "journal-replay-secret";
    let dir = PluginDir::new();
    dir.counted_webhook();
    let data = tempfile::tempdir().expect("data");
    let env = webhook_load_env(SECRET);
    let mut host = Host::start(dir.path(), data.path(), &env);
    let port = Arc::new(vec![AtomicU16::new(host.webhook_port())]);
    let finished = Arc::new(AtomicBool::new(false));
    let sender =
        cairn_tests::spawn_webhook_sender(port, finished.clone(), SECRET, Duration::from_millis(5));
    host.wait_until(LONG, "the counter is busy", |log| {
        cairn_tests::delivered_seqs(log, "counter").len() >= 40
    });
    // While deliveries and the counter's cursor commits go on, an operator replays from
    // the counter's first event, from another process.
    let first = cairn_tests::delivered_seqs(&host.log(), "counter")[0];
    let data_arg = data.path().display().to_string();
    let replay = cairn(&[
        "journal",
        "replay",
        "--subscriber",
        "counter",
        "--from",
        &first.to_string(),
        "--data",
        &data_arg,
    ]);
    assert!(replay.status.success(), "{replay:?}");
    std::thread::sleep(Duration::from_secs(2));
    finished.store(true, std::sync::atomic::Ordering::SeqCst);
    sender.join().expect("sender");
    let data_path = data.path().to_path_buf();
    host.wait_until(LONG, "the counter caught up after the replay", |_| {
        settled(&data_path)
    });
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");
    let seqs = cairn_tests::delivered_seqs(&log, "counter");
    let again = seqs
        .iter()
        .rposition(|s| *s == first)
        .filter(|at| *at > 0)
        .unwrap_or_else(|| panic!("the replay from {first} was lost: {seqs:?}"));
    let received: Vec<i64> = journal_events(data.path())
        .iter()
        .filter(|e| e["topic"] == "message.received")
        .filter_map(|e| e["seq"].as_i64())
        .collect();
    assert_eq!(
        seqs[again..],
        received[..],
        "from the replay on, every event once, in order"
    );
}

/// The environment of a host taking webhook deliveries signed with `secret` under load:
/// deliveries are counted from the subscribers' log lines, so none may be dropped by the
/// log rate limit when a backlog is delivered at once.
fn webhook_load_env(secret: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("CAIRN_HTTP_LISTEN", "127.0.0.1:0"),
        ("CAIRN_WEBHOOK_SECRET", secret),
        ("CAIRN_ROUTER_BATCH_WINDOW_MS", "20"),
        ("CAIRN_RUNTIME_LOG_RATE_PER_SEC", "100000"),
    ]
}

/// The operator's way out of a dead letter, through the binary: a plugin fails an event
/// until it is dead-lettered, the operator fixes the plugin, restarts the host and replays
/// from the event, and once the replay has delivered it the dead letter is gone — listed
/// neither by `cairn journal dead-letters` nor in the status.
#[test]
fn a_replay_that_delivers_a_dead_lettered_event_clears_its_dead_letter() {
    let dir = PluginDir::new();
    dir.bundled("cli");
    let subscribes = "events: {subscribes: [message.received]}\n";
    dir.plugin("mender", "handler", "hostile", subscribes);
    let data = tempfile::tempdir().expect("data");
    let data_arg = data.path().display().to_string();
    let env = [
        ("CAIRN_HTTP_LISTEN", "127.0.0.1:0"),
        ("CAIRN_ROUTER_BATCH_WINDOW_MS", "100"),
        ("CAIRN_JOURNAL_MAX_ATTEMPTS", "2"),
        ("CAIRN_JOURNAL_BACKOFF_INITIAL_MS", "20"),
    ];
    let mut host = Host::start(dir.path(), data.path(), &env);
    host.wait_for("cairn is running", LONG);
    host.type_line("hello");
    host.wait_until(LONG, "the message dead-lettered for the mender", |log| {
        log.contains("event dead-lettered")
    });
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");
    let dead_letters = || -> Vec<serde_json::Value> {
        let out = cairn(&["journal", "dead-letters", "--json", "--data", &data_arg]);
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).expect("json")
    };
    let letters = dead_letters();
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0]["subscriber"], "mender");
    let seq = letters[0]["seq"].as_i64().expect("seq");

    // The fix: the same plugin, now answering every event.
    dir.plugin(
        "mender",
        "handler",
        "hostile",
        &format!("{subscribes}config: {{event: interrupted}}\n"),
    );
    let mut host = Host::start(dir.path(), data.path(), &env);
    host.wait_for("cairn is running", LONG);
    let replay = cairn(&[
        "journal",
        "replay",
        "--subscriber",
        "mender",
        "--from",
        &seq.to_string(),
        "--data",
        &data_arg,
    ]);
    assert!(replay.status.success(), "{replay:?}");
    host.wait_until(
        LONG,
        "the replay delivers the event to the mended plugin",
        |log| log.contains("probe interrupted: ok false on message.received"),
    );
    host.wait_until(LONG, "the delivered event's dead letter cleared", |_| {
        dead_letters().is_empty()
    });
    // The cursor move is committed after the clear (with the next run, or when the
    // subscriber goes idle), so the status catches up with it shortly after.
    let mender = || {
        let status = status_json(data.path());
        status["subscribers"]
            .as_array()
            .and_then(|rows| rows.iter().find(|row| row["id"] == "mender"))
            .cloned()
            .unwrap_or_else(|| panic!("no mender in {status}"))
    };
    host.wait_until(LONG, "the status showing the mender caught up", |_| {
        mender()["lag"] == 0
    });
    let caught_up = mender();
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");
    assert_eq!(caught_up["dead_letters"], 0, "{caught_up}");
}

/// The seqs a `runs` plugin logged taking, in order, with the export each came through.
fn runs_taken(log: &str) -> Vec<(i64, String)> {
    log.lines()
        .filter_map(|line| {
            let rest = line.split("runs: took seq=").nth(1)?;
            let mut words = rest.split_whitespace();
            let seq = words.next()?.parse().ok()?;
            let via = words.nth(1)?.trim_end_matches('"').to_string();
            Some((seq, via))
        })
        .collect()
}

#[test]
fn a_0_2_1_handler_takes_a_run_in_one_call_and_a_failing_or_trapping_event_goes_alone() {
    let dir = PluginDir::new();
    dir.bundled("cli");
    dir.plugin(
        "runs",
        "handler",
        "runs",
        "events: {subscribes: [message.received]}\n",
    );
    let data = tempfile::tempdir().expect("data");
    let env = [
        ("CAIRN_HTTP_LISTEN", "127.0.0.1:0"),
        ("CAIRN_ROUTER_BATCH_WINDOW_MS", "50"),
        ("CAIRN_JOURNAL_MAX_ATTEMPTS", "2"),
        ("CAIRN_JOURNAL_BACKOFF_INITIAL_MS", "20"),
        ("CAIRN_SUPERVISOR_RESTART_BUDGET", "100"),
        ("CAIRN_SUPERVISOR_BACKOFF_INITIAL_MS", "10"),
        ("CAIRN_RUNTIME_LOG_RATE_PER_SEC", "100000"),
    ];
    let mut host = Host::start(dir.path(), data.path(), &env);
    host.wait_for("cairn is running", LONG);
    for line in [
        "one",
        "two",
        "please-fail three",
        "four",
        "please-trap five",
        "six",
    ] {
        host.type_line(line);
        host.wait_for(&format!("cairn> [offline] I received: user: {line}"), LONG);
    }
    host.wait_until(
        LONG,
        "the first round: four taken, two dead-lettered",
        |log| runs_taken(log).len() >= 4 && log.matches("event dead-lettered").count() == 2,
    );
    let first_round = runs_taken(&host.log());
    let ok: Vec<i64> = first_round.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(ok.len(), 4, "each good event once: {first_round:?}");

    // Replayed, the six events are there at once: the plugin gets them as runs.
    let data_arg = data.path().display().to_string();
    let replay = cairn(&[
        "journal",
        "replay",
        "--subscriber",
        "runs",
        "--from",
        &ok[0].to_string(),
        "--data",
        &data_arg,
    ]);
    assert!(replay.status.success(), "{replay:?}");
    host.wait_until(LONG, "the replay: the last event taken again", |log| {
        runs_taken(log)
            .iter()
            .filter(|(seq, _)| *seq == ok[3])
            .count()
            == 2
            && log.matches("event dead-lettered").count() == 4
    });
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");

    let replayed = &runs_taken(&log)[first_round.len()..];
    let runs: Vec<usize> = log
        .lines()
        .filter_map(|l| l.split("runs: on-events call with ").nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect();
    assert!(
        runs.iter().any(|&events| events >= 3),
        "the replayed backlog came as a run in one call: {runs:?}\n{log}"
    );
    // Every good event again, in journal order (one before the trap may come twice: a
    // trapped run does not say how far it got, so its events are given again one by one).
    let mut seen: Vec<i64> = replayed.iter().map(|(seq, _)| *seq).collect();
    assert!(
        seen.windows(2).all(|w| w[0] <= w[1]),
        "in order: {replayed:?}"
    );
    seen.dedup();
    assert_eq!(seen, ok, "every good event after the replay: {replayed:?}");
    // The event after the trap went alone, through `on-event`.
    assert!(
        replayed.contains(&(ok[3], "on-event".to_string())),
        "after a trapped run its events go one by one: {replayed:?}"
    );
    assert!(log.contains("runs: trapping on seq"), "the trap happened");
    // Dead-lettered: the failing and the trapping event, and nothing else.
    let asked: Vec<i64> = journal_events(data.path())
        .iter()
        .filter(|e| e["topic"] == "message.received")
        .filter(|e| e["payload"].to_string().contains("please-"))
        .filter_map(|e| e["seq"].as_i64())
        .collect();
    assert_eq!(asked.len(), 2, "two messages asked to fail or trap");
    let letters = cairn(&["journal", "dead-letters", "--json", "--data", &data_arg]);
    assert!(letters.status.success(), "{letters:?}");
    let letters: Vec<serde_json::Value> = serde_json::from_slice(&letters.stdout).expect("json");
    let mut dead: Vec<i64> = letters
        .iter()
        .filter(|l| l["subscriber"] == "runs")
        .filter_map(|l| l["seq"].as_i64())
        .collect();
    dead.sort();
    dead.dedup();
    assert_eq!(dead, asked, "only what asked to fail or trap: {letters:?}");
}

#[test]
fn a_removed_plugins_subscriber_is_named_at_start_and_forgotten_on_request() {
    let dir = PluginDir::new();
    dir.bundled_all(&["cli", "counter"]);
    let data = tempfile::tempdir().expect("data");
    let d = data.path().display().to_string();
    let env = [("CAIRN_HTTP_LISTEN", "127.0.0.1:0")];
    let unsubscribe = || {
        cairn(&[
            "journal",
            "unsubscribe",
            "--subscriber",
            "counter",
            "--data",
            &d,
        ])
    };
    let mut host = Host::start(dir.path(), data.path(), &env);
    host.wait_for("cairn is running", LONG);
    let refused = unsubscribe();
    assert_eq!(refused.status.code(), Some(2), "a host serves it");
    let said = String::from_utf8_lossy(&refused.stderr);
    let expected = if cairn_tests::storage::on_postgres() {
        "a host delivers to `counter` now"
    } else {
        "plugin `counter` runs on the host on this data dir"
    };
    assert!(said.contains(expected), "{said}");
    host.stop();

    std::fs::remove_file(dir.path().join("counter.yaml")).expect("remove the manifest");
    let mut host = Host::start(dir.path(), data.path(), &env);
    host.wait_for(
        "journal subscriber `counter` belongs to no plugin this host runs",
        LONG,
    );
    let forgot = unsubscribe();
    assert!(
        forgot.status.success(),
        "{}",
        String::from_utf8_lossy(&forgot.stderr)
    );
    assert!(String::from_utf8_lossy(&forgot.stdout).starts_with("forgot subscriber counter"));
    let subscribers = status_json(data.path())["subscribers"].clone();
    let ids: Vec<&str> = subscribers
        .as_array()
        .expect("subscribers")
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(ids, ["host.lifecycle"], "{subscribers}");
    let again = unsubscribe();
    assert_eq!(again.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&again.stderr)
            .contains("no subscriber `counter` in this journal (it has: host.lifecycle)")
    );
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
}
