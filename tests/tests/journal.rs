//! The event journal through the real binary: the turn and the supervisor journal their
//! events, subscribers receive them in order, a failing subscriber is dead-lettered without
//! holding up the others, and plugins emit only the topics their manifest lists.

use std::time::Duration;

use cairn_tests::{Host, PluginDir, cairn, status_json};

const LONG: Duration = Duration::from_secs(60);

#[test]
fn turn_events_reach_subscribers_and_a_failing_one_is_dead_lettered_alone() {
    let dir = PluginDir::new();
    let root = cairn_tests::workspace_root();
    std::fs::copy(root.join("manifests/cli.yaml"), dir.path().join("cli.yaml")).expect("manifest");
    dir.component("cli");
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
    let seqs: Vec<u64> = log
        .lines()
        .filter(|l| l.contains("counter: event #"))
        .filter_map(|l| {
            l.split("seq=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
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
