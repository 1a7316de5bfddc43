//! Time in memory, through the real binary: history sent with `cairn send --at` is
//! remembered as said then, and `cairn memory search --at` reads the time a question names
//! ("last month", "before I went kayaking") from that day; a question comparing two events
//! gets both.

use std::path::Path;
use std::time::Duration;

use cairn_tests::{Host, PluginDir, cairn, status_json};

const LONG: Duration = Duration::from_secs(60);

/// What ana told the agent, and when she really said it.
const TRIPS: [(&str, &str); 3] = [
    (
        "2026-03-14T10:00:00Z",
        "A ski trip in the Alps with my brother.",
    ),
    (
        "2026-09-20T10:00:00Z",
        "A hiking trip in the Dolomites with my sister.",
    ),
    (
        "2026-10-18T10:00:00Z",
        "A kayaking trip along the coast with my cousin.",
    ),
];

fn send(data: &Path, extra: &[&str]) -> std::process::Output {
    let data = data.display().to_string();
    let mut args = vec![
        "send",
        "--data",
        data.as_str(),
        "--channel",
        "cli",
        "--conversation",
        "trips",
        "--sender",
        "ana",
    ];
    args.extend_from_slice(extra);
    cairn(&args)
}

/// `cairn memory search QUESTION --user ana --at AT --json` (plus `extra`): the hits.
fn search(data: &Path, question: &str, at: &str, extra: &[&str]) -> Vec<serde_json::Value> {
    let data = data.display().to_string();
    let mut args = vec![
        "memory", "search", question, "--user", "ana", "--at", at, "--json", "--data",
    ];
    args.push(data.as_str());
    args.extend_from_slice(extra);
    let output = cairn(&args);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let hits: serde_json::Value = serde_json::from_slice(&output.stdout).expect("hits as JSON");
    hits.as_array().expect("a list of hits").clone()
}

fn content(hit: &serde_json::Value) -> &str {
    hit["entry"]["content"].as_str().unwrap_or_default()
}

fn ms(rfc3339: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .expect("a time")
        .timestamp_millis()
}

#[test]
fn history_sent_with_at_is_recalled_by_the_time_a_question_names() {
    let data = tempfile::tempdir().expect("data");
    let (last, earlier) = TRIPS.split_last().expect("trips");
    for (at, text) in earlier {
        let sent = send(data.path(), &["--at", at, text]);
        assert!(
            sent.status.success(),
            "{}",
            String::from_utf8_lossy(&sent.stderr)
        );
    }
    // The last as a webhook would send it: who and when in the JSON payload, no flags.
    let payload = |sender: serde_json::Value, said_at: &str| {
        let file = data.path().join("payload.json");
        let body = serde_json::json!({"text": last.1, "sender": sender, "said_at": said_at});
        std::fs::write(&file, body.to_string()).expect("payload");
        file.display().to_string()
    };
    let data_arg = data.path().display().to_string();
    let send_json = |file: &str| {
        cairn(&[
            "send",
            "--data",
            &data_arg,
            "--channel",
            "cli",
            "--conversation",
            "trips",
            "--json",
            file,
        ])
    };
    for (sender, said_at, expected) in [
        (
            serde_json::json!("ana"),
            "2999-01-01",
            "--json: its `said_at`: 2999-01-01T00:00:00+00:00 is not when a message was said",
        ),
        (
            serde_json::json!("ana"),
            "last tuesday",
            "--json: its `said_at`: `last tuesday` is not a time",
        ),
        (
            serde_json::json!(5),
            last.0,
            "--json: its `sender` is 5: expected a string (or give --sender)",
        ),
        (
            serde_json::json!(""),
            last.0,
            "message rejected: --json: its `sender`: expected a non-empty string",
        ),
    ] {
        let refused = send_json(&payload(sender, said_at));
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    }
    let sent = send_json(&payload(serde_json::json!("ana"), last.0));
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    for (at, expected) in [
        (
            "2999-01-01",
            "--at: 2999-01-01T00:00:00+00:00 is not when a message was said; expected a time from 1970 up to now",
        ),
        (
            "1969-07-20",
            "--at: 1969-07-20T00:00:00+00:00 is not when a message was said",
        ),
        ("last tuesday", "--at"),
    ] {
        let refused = send(data.path(), &["--at", at, "from the future"]);
        assert_eq!(refused.status.code(), Some(2), "--at {at}");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains(expected), "--at {at}: {stderr}");
    }
    let dir = PluginDir::new();
    dir.bundled("cli");
    let env = [("CAIRN_ROUTER_BATCH_WINDOW_MS", "100")];
    let mut host = Host::start(dir.path(), data.path(), &env);
    host.wait_for("cairn> [offline] I received: 3 messages in trips", LONG);
    host.wait_until(LONG, "the batch answered", |_| {
        status_json(data.path())["buffer"]["depth"] == 0
    });
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");

    // Each message is an episode valid from when it was said; nothing from the future.
    let trips: Vec<(i64, String)> = TRIPS
        .iter()
        .map(|(at, t)| (ms(at), t.to_string()))
        .collect();
    let listed = cairn(&[
        "memory", "list", "--user", "ana", "--json", "--data", &data_arg,
    ]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("list JSON");
    let mut said: Vec<(i64, String)> = listed
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["tags"][0] == "user")
        .map(|e| {
            let valid_from = e["valid_from"].as_i64().expect("valid_from");
            (
                valid_from,
                e["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    said.sort();
    assert_eq!(
        said, trips,
        "the payload's sender and said_at are the message's"
    );

    // "last month", asked in late November, is October; asked in early April, March.
    let november = search(data.path(), "Which trip was last month?", "2026-11-20", &[]);
    assert_eq!(content(&november[0]), TRIPS[2].1, "{november:#?}");
    let time = november[0]["explain"]["time"].as_str().unwrap_or_default();
    assert!(
        time.starts_with("inside \"last month\": 2026-10-01"),
        "{time}"
    );
    let april = search(data.path(), "Which trip was last month?", "2026-04-02", &[]);
    assert_eq!(content(&april[0]), TRIPS[0].1, "{april:#?}");
    let september = search(
        data.path(),
        "Which trip did I take in September?",
        "2026-11-20",
        &[],
    );
    assert_eq!(content(&september[0]), TRIPS[1].1, "{september:#?}");

    // A question naming a time and nothing else is answered with what was said then,
    // newest first (until 2026-12-04 recall abstained: there was nothing to be relevant to).
    for (question, trip) in [
        ("What happened last month?", &TRIPS[2]),
        ("What did we talk about in September?", &TRIPS[1]),
        ("Anything new in March?", &TRIPS[0]),
    ] {
        let hits = search(data.path(), question, "2026-11-20", &[]);
        let said: Vec<&str> = hits.iter().map(content).collect();
        assert_eq!(said, [trip.1], "{question}: {hits:#?}");
        let adjusted = hits[0]["explain"]["adjusted"].as_str().unwrap_or_default();
        assert!(
            adjusted.starts_with("the question names a time and nothing else"),
            "{question}: {adjusted}"
        );
    }

    // "before I went kayaking": the kayaking trip is found, and what came before it leads.
    let before = search(
        data.path(),
        "Which trip was before I went kayaking?",
        "2026-11-20",
        &[],
    );
    assert_ne!(content(&before[0]), TRIPS[2].1, "{before:#?}");

    // Two events compared: both are among two hits, though "Dolomites" and "sister" make
    // the hiking trip the best match of the question as a whole. (`--as-of` hides
    // the agent's reply, which quotes all three and was said after that day.)
    let compared = search(
        data.path(),
        "Thinking of the Dolomites with my sister, which came first: the Alps or the coast?",
        "2026-11-20",
        &["--limit", "2", "--as-of", "2026-11-20"],
    );
    let mut found: Vec<&str> = compared.iter().map(content).collect();
    found.sort();
    let mut expected = vec![TRIPS[0].1, TRIPS[2].1];
    expected.sort();
    assert_eq!(found, expected, "{compared:#?}");
    assert!(
        compared.iter().all(|hit| hit["explain"]["adjusted"]
            .as_str()
            .is_some_and(|a| a.starts_with("leads: the best match for"))),
        "{compared:#?}"
    );
    // One hit shows the first of the same two.
    let first = search(
        data.path(),
        "Thinking of the Dolomites with my sister, which came first: the Alps or the coast?",
        "2026-11-20",
        &["--limit", "1", "--as-of", "2026-11-20"],
    );
    assert_eq!(content(&first[0]), content(&compared[0]), "{first:#?}");
}

#[test]
fn a_message_waiting_for_a_host_is_remembered_as_said_when_it_arrived() {
    let data = tempfile::tempdir().expect("data");
    let sent = send(data.path(), &["Written while no host ran."]);
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let sent_by = chrono::Utc::now().timestamp_millis();
    // The host starts a while later: the episode must not take the answer's time.
    std::thread::sleep(Duration::from_millis(1_500));
    let dir = PluginDir::new();
    dir.bundled("cli");
    let mut host = Host::start(dir.path(), data.path(), &[]);
    host.wait_for("cairn> [offline] I received", LONG);
    host.wait_until(LONG, "the batch answered", |_| {
        status_json(data.path())["buffer"]["depth"] == 0
    });
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");
    let data_arg = data.path().display().to_string();
    let listed = cairn(&[
        "memory", "list", "--user", "ana", "--json", "--data", &data_arg,
    ]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("list JSON");
    let episode = listed
        .as_array()
        .expect("entries")
        .iter()
        .find(|e| e["tags"][0] == "user")
        .unwrap_or_else(|| panic!("the user's episode: {listed}"));
    let valid_from = episode["valid_from"].as_i64().expect("valid_from");
    assert!(
        valid_from <= sent_by,
        "valid from its arrival ({valid_from}), not the turn's time (sent by {sent_by})"
    );
}
