//! The bundled cognitive plugins through the real binary: a conversation ends, is
//! summarised, its facts are saved, a later session's prompt carries them and the reply uses
//! them, a contradiction supersedes a fact, and sleep does its five phases and yields to a
//! message — once with the `offline` model, once with a local OpenAI-compatible server
//! playing the model, and with a model whose answers are unusable.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use cairn_tests::stub_http::{Reply, Seen, StubServer};
use cairn_tests::{Host, PluginDir, cairn, cairn_ok, count_lines, journal_events, status_json};
use serde_json::{Value, json};

const LONG: Duration = Duration::from_secs(90);

/// Sessions end after a second of quiet; turns batch for 20 ms; no sleep unless asked.
const QUICK: &[(&str, &str)] = &[
    ("CAIRN_LIFECYCLE_SESSION_TIMEOUT_SECS", "1"),
    ("CAIRN_LIFECYCLE_CHECK_INTERVAL_MS", "50"),
    ("CAIRN_LIFECYCLE_SLEEP_TIMEOUT_SECS", "3600"),
    ("CAIRN_ROUTER_BATCH_WINDOW_MS", "20"),
];

fn env_with<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut env = QUICK.to_vec();
    env.extend_from_slice(extra);
    env
}

/// Events of `topic`, oldest first.
fn events(data: &Path, topic: &str) -> Vec<Value> {
    journal_events(data)
        .into_iter()
        .filter(|e| e["topic"] == topic)
        .collect()
}

/// The payload of an event, parsed.
fn payload(event: &Value) -> Value {
    match &event["payload"] {
        Value::String(text) => serde_json::from_str(text).expect("a JSON payload"),
        other => other.clone(),
    }
}

/// Wait until an event of `topic` for `session` is in the journal; its payload.
fn wait_for_event(host: &mut Host, data: &Path, topic: &str, session: &str) -> Value {
    let data = data.to_path_buf();
    host.wait_until(LONG, &format!("{topic} for {session}"), |_| {
        events(&data, topic)
            .iter()
            .any(|e| payload(e)["session_id"] == session)
    });
    events(&data, topic)
        .iter()
        .map(payload)
        .find(|p| p["session_id"] == session)
        .expect("the event")
}

fn memory_json(data: &Path, args: &[&str]) -> Vec<Value> {
    let data = data.display().to_string();
    let mut all = vec!["memory", "list", "--json", "--data", &data];
    all.extend_from_slice(args);
    let out = cairn_ok(&all);
    let listed: Value = serde_json::from_slice(&out.stdout).expect("json");
    listed.as_array().expect("a list").clone()
}

/// Every fact of the data dir, live or not.
fn facts(data: &Path) -> Vec<Value> {
    memory_json(data, &["--kind", "fact", "--all"])
}

fn fact_saying<'a>(facts: &'a [Value], text: &str) -> &'a Value {
    facts
        .iter()
        .find(|f| f["content"] == text)
        .unwrap_or_else(|| panic!("no fact {text:?} in {facts:#?}"))
}

/// Type a line and wait for the offline model's reply to it.
fn say(host: &mut Host, line: &str) {
    let echo = format!("I received: user: {line}");
    let before = count_lines(&host.log(), &echo);
    host.type_line(line);
    host.wait_until(LONG, &echo, |log| count_lines(log, &echo) > before);
}

#[test]
fn offline_a_fact_learned_in_one_session_answers_a_later_one_and_a_contradiction_supersedes_it() {
    let plugins = PluginDir::cognitive_host();
    let data = tempfile::tempdir().expect("data dir");
    let data = data.path();
    let mut host = Host::start(plugins.path(), data, QUICK);
    host.wait_for("cairn is running", LONG);

    say(
        &mut host,
        "Hi! My favourite drink is green tea, and I live in Lisbon.",
    );
    let summary = wait_for_event(&mut host, data, "episode.summarized", "cli:cli");
    assert!(
        summary["summary"]
            .as_str()
            .is_some_and(|s| s.contains("green tea")),
        "{summary}"
    );
    assert!(summary["topics"].as_array().is_some_and(|t| !t.is_empty()));
    let extracted = wait_for_event(&mut host, data, "facts.extracted", "cli:cli");
    assert_eq!(
        extracted["facts"].as_array().map(Vec::len),
        Some(2),
        "{extracted}"
    );

    host.type_line("What is my favourite drink?");
    host.wait_for(
        "I received: user: What is my favourite drink? (I remember: The user's favourite drink is green tea.)",
        LONG,
    );
    let tea = fact_saying(&facts(data), "The user's favourite drink is green tea.").clone();
    let turn = events(data, "turn.completed")
        .iter()
        .map(payload)
        .find(|t| t["conversation"] == "cli" && t["batch_id"] == 2)
        .expect("the second turn");
    assert!(
        turn["recalled"]
            .as_array()
            .is_some_and(|r| r.contains(&tea["id"])),
        "the later turn's prompt quoted the fact: {turn}"
    );

    wait_for_event(&mut host, data, "facts.extracted", "cli:cli#2");
    say(&mut host, "Actually my favourite drink is coffee now.");
    wait_for_event(&mut host, data, "facts.extracted", "cli:cli#3");
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");

    let all = facts(data);
    let coffee = fact_saying(&all, "The user's favourite drink is coffee.");
    let tea = fact_saying(&all, "The user's favourite drink is green tea.");
    assert_eq!(tea["superseded_by"], coffee["id"], "{all:#?}");
    assert!(tea["valid_to"].is_i64() && coffee["valid_to"].is_null());
    assert!(
        tea["sources"].as_array().is_some_and(|s| !s.is_empty()),
        "facts keep their source episodes"
    );
    let lisbon = fact_saying(&all, "The user lives in Lisbon.");
    assert!(lisbon["superseded_by"].is_null());

    let summaries = memory_json(data, &["--kind", "reflection", "--category", "summary"]);
    assert_eq!(
        summaries.len(),
        3,
        "one summary per session: {summaries:#?}"
    );
    let sessions = cairn_ok(&["memory", "export", "--data", &data.display().to_string()]);
    let consolidated = String::from_utf8_lossy(&sessions.stdout)
        .lines()
        .filter(|l| l.contains("\"type\":\"session\"") && l.contains("\"consolidated\""))
        .count();
    assert_eq!(consolidated, 3, "every session consolidated once");
}

#[test]
fn a_session_with_a_word_too_long_for_a_tag_is_summarised() {
    let plugins = PluginDir::cognitive_host();
    let data = tempfile::tempdir().expect("data dir");
    let data = data.path();
    let mut host = Host::start(plugins.path(), data, QUICK);
    host.wait_for("cairn is running", LONG);
    let token = "b".repeat(101);
    say(
        &mut host,
        &format!("Please remember the code {token} for the garage door."),
    );
    let summary = wait_for_event(&mut host, data, "episode.summarized", "cli:cli");
    assert!(
        summary["topics"].as_array().is_some_and(|topics| topics
            .iter()
            .all(|t| t.as_str().is_some_and(|t| t.len() <= 100))),
        "{summary}"
    );
    let summaries = memory_json(data, &["--kind", "reflection"]);
    assert_eq!(summaries.len(), 1, "the summary is stored: {summaries:?}");
    host.stop();
    let out = cairn(&[
        "journal",
        "dead-letters",
        "--json",
        "--data",
        &data.display().to_string(),
    ]);
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(!listed.contains("episode-summarizer"), "{listed}");
}

#[test]
fn history_replayed_out_of_order_leaves_the_newest_statement_current() {
    let plugins = PluginDir::cognitive_host();
    let data = tempfile::tempdir().expect("data dir");
    let data = data.path();
    let d = data.display().to_string();
    let mut host = Host::start(plugins.path(), data, QUICK);
    host.wait_for("cairn is running", LONG);
    // November's job first, then January's: the order they are replayed in, not said in.
    for (conversation, at, text) in [
        ("nov", "2026-11-30T10:00:00Z", "I work at Globex."),
        ("jan", "2026-01-05T10:00:00Z", "I work at Initech."),
    ] {
        let args = [
            "send",
            "--data",
            &d,
            "--channel",
            "cli",
            "--conversation",
            conversation,
        ];
        cairn_ok(&[&args[..], &["--sender", "user", "--at", at, text]].concat());
        wait_for_event(
            &mut host,
            data,
            "facts.extracted",
            &format!("cli:{conversation}"),
        );
    }
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");

    let all = facts(data);
    let globex = fact_saying(&all, "The user works at Globex.");
    let initech = fact_saying(&all, "The user works at Initech.");
    let ms = |at: &str| {
        chrono::DateTime::parse_from_rfc3339(at)
            .expect("a time")
            .timestamp_millis()
    };
    assert_eq!(globex["valid_from"], ms("2026-11-30T10:00:00Z"), "{all:#?}");
    assert!(
        globex["superseded_by"].is_null(),
        "the newest stays current: {all:#?}"
    );
    assert_eq!(
        initech["valid_from"],
        ms("2026-01-05T10:00:00Z"),
        "{all:#?}"
    );
    assert_eq!(initech["superseded_by"], globex["id"], "{all:#?}");
    assert_eq!(initech["valid_to"], globex["valid_from"], "{all:#?}");
}

#[test]
fn a_fact_saved_without_episodes_still_supersedes_the_one_it_contradicts() {
    let plugins = PluginDir::cognitive_host();
    let data = tempfile::tempdir().expect("data dir");
    let data = data.path();
    let mut host = Host::start(plugins.path(), data, QUICK);
    say(&mut host, "My favourite drink is green tea.");
    wait_for_event(&mut host, data, "facts.extracted", "cli:cli");
    assert!(host.stop().0.success());

    // A host that saves no episodes: the extractor learns the fact from the summary alone
    // and reads no agent from episodes; the fact takes its session's.
    let mut host = Host::start(
        plugins.path(),
        data,
        &env_with(&[("CAIRN_MEMORY_SAVE_EPISODES", "false")]),
    );
    say(&mut host, "Actually my favourite drink is coffee now.");
    wait_for_event(&mut host, data, "facts.extracted", "cli:cli#2");
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");

    let all = facts(data);
    let coffee = fact_saying(&all, "The user's favourite drink is coffee.");
    let tea = fact_saying(&all, "The user's favourite drink is green tea.");
    assert_eq!(tea["superseded_by"], coffee["id"], "{all:#?}");
    assert!(coffee["valid_to"].is_null(), "{all:#?}");
    for level in ["agent_id", "user_id"] {
        assert_eq!(coffee["scope"][level], tea["scope"][level], "{all:#?}");
    }
}

/// A JSONL line of `cairn memory import` for an entry recorded `days_ago`.
fn seeded(
    id: &str,
    kind: &str,
    content: &str,
    importance: u8,
    days_ago: i64,
    tags: &[&str],
) -> String {
    let at = chrono_now_ms() - days_ago * 86_400_000;
    json!({
        "type": "entry", "id": id, "kind": kind, "content": content, "category": "conversation",
        "scope": {"agent_id": "main", "user_id": "user"}, "importance": importance,
        "tags": tags, "issue_refs": [], "pr_refs": [], "sources": [], "subject": null,
        "predicate": null, "valid_from": at, "valid_to": null, "recorded_at": at,
        "superseded_by": null, "forgotten_at": null,
    })
    .to_string()
}

fn chrono_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

fn import(data: &Path, lines: &[String]) {
    let file = data.join("seed.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").expect("seed file");
    cairn_ok(&[
        "memory",
        "import",
        &file.display().to_string(),
        "--data",
        &data.display().to_string(),
    ]);
}

#[test]
fn offline_sleep_reviews_prunes_compresses_reflects_and_generalizes() {
    let plugins = PluginDir::cognitive_host();
    let data = tempfile::tempdir().expect("data dir");
    let data = data.path();
    import(
        data,
        &[
            seeded("mem_old_trivial", "episode", "ok", 1, 60, &["user"]),
            seeded(
                "mem_old_minor",
                "episode",
                "the weather was grey",
                4,
                60,
                &["user"],
            ),
            seeded(
                "mem_bike_a",
                "fact",
                "The user owns a red bicycle.",
                5,
                2,
                &[],
            ),
            seeded(
                "mem_bike_b",
                "fact",
                "The user owns a red bicycle!",
                4,
                1,
                &[],
            ),
            seeded(
                "mem_sail_a",
                "fact",
                "The user sails on weekends.",
                5,
                1,
                &[],
            ),
            seeded(
                "mem_sail_b",
                "fact",
                "The user sails with Ana from the club.",
                5,
                1,
                &[],
            ),
        ],
    );
    let mut host = Host::start(
        plugins.path(),
        data,
        &env_with(&[
            ("CAIRN_LIFECYCLE_SLEEP_TIMEOUT_SECS", "2"),
            ("CAIRN_MEMORY_AUTONOMY", "full"),
        ]),
    );
    host.wait_for("cairn is running", LONG);
    for _ in 0..3 {
        say(&mut host, "export the weekly sales report");
    }
    let data_path = data.to_path_buf();
    host.wait_until(LONG, "a full sleep", |_| {
        events(&data_path, "sleep.completed")
            .iter()
            .any(|e| payload(e)["interrupted"] == false)
    });
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");

    let sleep = events(data, "sleep.completed")
        .iter()
        .map(payload)
        .find(|p| p["interrupted"] == false)
        .expect("a full sleep");
    assert_eq!(
        sleep["phases_completed"],
        json!(["review", "prune", "compress", "reflect", "generalize"]),
        "{sleep}"
    );
    let changes = &sleep["changes"];
    for phase in ["review", "prune", "compress", "reflect", "generalize"] {
        assert!(
            changes[phase].as_u64().is_some_and(|n| n >= 1),
            "{phase} changed nothing: {sleep}"
        );
    }
    let everything = memory_json(data, &["--all", "--limit", "1000"]);
    let entry = |id: &str| {
        everything
            .iter()
            .find(|e| e["id"] == id)
            .unwrap_or_else(|| panic!("no {id}"))
            .clone()
    };
    assert!(entry("mem_old_trivial")["forgotten_at"].is_i64(), "pruned");
    let minor = entry("mem_old_minor");
    assert!(
        minor["forgotten_at"].is_null() && minor["importance"] == 3,
        "{minor}"
    );
    assert!(
        entry("mem_bike_b")["forgotten_at"].is_i64(),
        "the weaker duplicate goes"
    );
    assert!(entry("mem_bike_a")["forgotten_at"].is_null());
    let reflections = memory_json(data, &["--kind", "reflection", "--category", "insight"]);
    assert!(
        reflections.iter().any(|r| {
            r["content"].as_str().is_some_and(|c| c.contains("sails"))
                && r["sources"] == json!(["mem_sail_a", "mem_sail_b"])
        }),
        "{reflections:#?}"
    );
    let procedures = memory_json(data, &["--kind", "procedure"]);
    assert!(
        procedures.iter().any(|p| {
            p["content"].as_str().is_some_and(|c| {
                c.contains("export the weekly sales report") && c.contains("3 times")
            })
        }),
        "{procedures:#?}"
    );
}

/// A host that falls asleep after a second of quiet, its sleeper pausing `pause_ms` between
/// phases, once the first phase (review) is done: its plugins and the host.
fn asleep_after_review(data: &Path, pause_ms: u32) -> (PluginDir, Host) {
    let plugins = PluginDir::new();
    plugins
        .bundled("cli")
        .bundled("episode-summarizer")
        .bundled("fact-extractor");
    plugins.bundled_with("sleeper", |m| {
        m.replace("pause_ms: 0 ", &format!("pause_ms: {pause_ms} "))
    });
    let mut host = Host::start(
        plugins.path(),
        data,
        &env_with(&[("CAIRN_LIFECYCLE_SLEEP_TIMEOUT_SECS", "1")]),
    );
    host.wait_for("cairn is running", LONG);
    let data_path = data.to_path_buf();
    host.wait_until(LONG, "the review phase", |_| {
        !events(&data_path, "sleep.phase_completed").is_empty()
    });
    (plugins, host)
}

#[test]
fn a_message_interrupts_the_sleeper_and_the_next_sleep_resumes_where_it_stopped() {
    let data = tempfile::tempdir().expect("data dir");
    let data = data.path();
    let (_plugins, mut host) = asleep_after_review(data, 3000);
    let data_path = data.to_path_buf();
    say(&mut host, "wake up, please");
    host.wait_until(LONG, "an interrupted sleep", |_| {
        !events(&data_path, "sleep.completed").is_empty()
    });
    let first = payload(&events(data, "sleep.completed")[0]);
    assert_eq!(first["interrupted"], true, "{first}");
    assert_eq!(first["resumed_from"], "review");
    let done = first["phases_completed"].as_array().expect("phases").len();
    assert!((1..5).contains(&done), "{first}");
    let next = first["next_phase"]
        .as_str()
        .expect("where it stopped")
        .to_string();

    host.wait_until(LONG, "the resumed sleep", |_| {
        events(&data_path, "sleep.completed").len() >= 2
    });
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    let second = payload(&events(data, "sleep.completed")[1]);
    assert_eq!(second["resumed_from"], next.as_str(), "{second}");
    assert_eq!(second["interrupted"], false, "{second}");
    assert_eq!(
        second["phases_completed"].as_array().map(Vec::len),
        Some(5 - done),
        "{second}"
    );
    assert!(
        !events(data, "sleep.interrupted").is_empty(),
        "the host announced the interruption"
    );
}

#[test]
fn a_stop_interrupts_a_sleep_which_keeps_its_place() {
    let data = tempfile::tempdir().expect("data dir");
    let data = data.path();
    // A minute between phases: without the stop's interrupt the sleeper would still be
    // pausing when its deadline ends the call, and record nothing.
    let (_plugins, host) = asleep_after_review(data, 60_000);
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    let completed = events(data, "sleep.completed");
    assert_eq!(completed.len(), 1, "{log}");
    let sleep = payload(&completed[0]);
    assert_eq!(sleep["interrupted"], true, "{sleep}");
    assert!(sleep["next_phase"].is_string(), "where it stopped: {sleep}");
}

/// What a request asks: its system prompt's task (none for a chat turn), its system
/// prompt and its last user message.
fn read_request(seen: &Seen) -> (Option<String>, String, String) {
    let body = seen.json();
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let text = |role: &str| {
        messages
            .iter()
            .filter(|m| m["role"] == role)
            .filter_map(|m| m["content"].as_str())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let system = text("system");
    let task = system
        .lines()
        .find_map(|l| l.strip_prefix("task: "))
        .map(str::to_string);
    let last_user = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    (task, system, last_user)
}

/// A stand-in for a model behind an OpenAI-compatible API: it answers each task the way a
/// model would (reading the transcript and the quoted memory it is given), and its first
/// summary is prose instead of JSON, as models sometimes do.
fn playing_a_model() -> StubServer {
    let summaries = AtomicUsize::new(0);
    StubServer::answering(move |seen| {
        let (task, system, input) = read_request(seen);
        let answer = match task.as_deref() {
            Some("summarize-episode") if summaries.fetch_add(1, Ordering::SeqCst) == 0 => {
                "Here is a summary: the user talked about drinks.".to_string()
            }
            Some("summarize-episode") => {
                let first = input.lines().next().unwrap_or_default();
                json!({"title": "Drinks and home", "summary": format!("The user said: {first}"),
                       "key_points": input.lines().take(3).collect::<Vec<_>>(),
                       "outcome": "The agent acknowledged it.", "topics": ["drinks", "home"]})
                .to_string()
            }
            Some("extract-facts") => {
                let mut facts = Vec::new();
                // Spelled unlike the first fact's subject and predicate, as models do.
                if input.contains("coffee") {
                    facts.push(json!({"content": "The user now prefers coffee as their favourite drink.", "subject": "The User", "predicate": "Favourite drink", "confidence": 0.95}));
                } else if input.contains("green tea") {
                    facts.push(json!({"content": "The user's favourite drink is green tea.", "subject": "user", "predicate": "favourite_drink", "confidence": 0.9}));
                    facts.push(json!({"content": "The user may enjoy hiking.", "subject": "user", "predicate": null, "confidence": 0.3}));
                    facts.push(json!({"content": "The user lives by the sea.", "subject": "user", "predicate": "lives_in", "confidence": 0.8}));
                }
                json!({ "facts": facts }).to_string()
            }
            Some("reflect") if input.lines().count() >= 2 => json!({"reflections": [
                {"content": "The user's days revolve around coffee and the sea.", "sources": [1, 2]}
            ]})
            .to_string(),
            Some("reflect") => json!({"reflections": []}).to_string(),
            Some("generalize") => json!({"procedures": []}).to_string(),
            Some(other) => format!("I do not know the task {other}"),
            None => {
                let remembered = system
                    .lines()
                    .filter_map(|l| l.trim().strip_prefix("> "))
                    .find(|l| l.starts_with("The user") && l.contains("favourite drink"));
                match remembered {
                    Some(fact) => format!("From what you told me: {fact}"),
                    None => "Noted.".to_string(),
                }
            }
        };
        Reply::openai_chat(&answer)
    })
}

fn host_on_model(
    server: &StubServer,
    plugins: &PluginDir,
    data: &Path,
    extra: &[(&str, &str)],
) -> Host {
    let base_url = format!("{}/v1", server.url());
    let mut env = env_with(&[
        ("CAIRN_AGENT_LLM_PROVIDER", "openai"),
        ("CAIRN_AGENT_LLM_BASE_URL", base_url.as_str()),
        ("CAIRN_AGENT_LLM_BACKOFF_INITIAL_MS", "10"),
    ]);
    env.extend_from_slice(extra);
    let mut host = Host::start(plugins.path(), data, &env);
    host.wait_for("cairn is running", LONG);
    host
}

#[test]
fn a_model_behind_an_openai_compatible_api_drives_the_same_pipeline() {
    let server = playing_a_model();
    let plugins = PluginDir::cognitive_host();
    let data = tempfile::tempdir().expect("data dir");
    let data = data.path();
    let mut host = host_on_model(
        &server,
        &plugins,
        data,
        &[("CAIRN_LIFECYCLE_SLEEP_TIMEOUT_SECS", "6")],
    );

    host.type_line("My favourite drink is green tea.");
    host.wait_for("cairn> Noted.", LONG);
    let extracted = wait_for_event(&mut host, data, "facts.extracted", "cli:cli");
    assert_eq!(
        extracted["facts"].as_array().map(Vec::len),
        Some(2),
        "{extracted}"
    );
    assert_eq!(
        extracted["unsure"], 1,
        "the 0.3-confidence guess is left out"
    );

    host.type_line("What should I drink?");
    host.wait_for(
        "cairn> From what you told me: The user's favourite drink is green tea.",
        LONG,
    );
    wait_for_event(&mut host, data, "facts.extracted", "cli:cli#2");
    host.type_line("These days I drink coffee; it is my favourite drink.");
    wait_for_event(&mut host, data, "facts.extracted", "cli:cli#3");
    let data_path = data.to_path_buf();
    host.wait_until(LONG, "a full sleep after the last session", |_| {
        events(&data_path, "sleep.completed")
            .iter()
            .map(payload)
            .any(|p| p["interrupted"] == false && p["changes"]["reflect"] == 1)
    });
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");

    let all = facts(data);
    let coffee = fact_saying(
        &all,
        "The user now prefers coffee as their favourite drink.",
    );
    let tea = fact_saying(&all, "The user's favourite drink is green tea.");
    assert_eq!(tea["superseded_by"], coffee["id"]);
    let sea = fact_saying(&all, "The user lives by the sea.");
    let insights = memory_json(data, &["--kind", "reflection", "--category", "insight"]);
    assert_eq!(insights.len(), 1, "{insights:#?}");
    let cited = insights[0]["sources"].as_array().expect("sources");
    assert!(
        cited.contains(&coffee["id"]) && cited.contains(&sea["id"]),
        "the model's reflection cites the facts it was given: {insights:#?}"
    );

    let seen = server.seen();
    let summaries: Vec<&Seen> = seen
        .iter()
        .filter(|s| read_request(s).0.as_deref() == Some("summarize-episode"))
        .collect();
    assert!(
        summaries.len() >= 4,
        "three sessions, the first asked twice"
    );
    assert!(
        summaries
            .iter()
            .all(|s| s.json()["response_format"] == json!({"type": "json_object"})),
        "plugins ask for JSON mode"
    );
    let retry = summaries[1].json();
    let messages = retry["messages"].as_array().expect("messages");
    assert!(
        messages
            .last()
            .and_then(|m| m["content"].as_str())
            .is_some_and(|c| c.contains("cannot be used")),
        "the retry names the problem: {retry}"
    );
    let summarizer = status_json(data)["plugins"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["id"] == "episode-summarizer").cloned())
        .expect("the summarizer's status");
    assert!(
        summarizer["llm"]["calls"].as_u64().is_some_and(|n| n >= 4),
        "usage per plugin in status: {summarizer}"
    );
}

#[test]
fn unusable_model_answers_are_recorded_and_save_nothing_and_a_broken_provider_leaves_the_session_pending()
 {
    let healthy = Arc::new(AtomicBool::new(false));
    let provider_up = healthy.clone();
    let server = StubServer::answering(move |seen| {
        let (task, _, _) = read_request(seen);
        match task.as_deref() {
            Some("summarize-episode") if seen.body.contains("bees") => {
                Reply::openai_chat("I would rather not answer in JSON today.")
            }
            Some("summarize-episode") => Reply::openai_chat(
                &json!({"title": "Plans", "summary": "The user plans a garden.", "key_points": [], "outcome": "", "topics": ["garden"]}).to_string(),
            ),
            Some("extract-facts") if !provider_up.load(Ordering::SeqCst) => {
                Reply::status(200, "{\"choices\": \"not what the API promises\"")
            }
            Some("extract-facts") => Reply::openai_chat(
                &json!({"facts": [{"content": "The user plans a vegetable garden.", "subject": "user", "predicate": "plans", "confidence": 0.9}]}).to_string(),
            ),
            _ => Reply::openai_chat("Noted."),
        }
    });
    let plugins = PluginDir::cognitive_host();
    let data = tempfile::tempdir().expect("data dir");
    let data = data.path();
    let mut host = host_on_model(
        &server,
        &plugins,
        data,
        &[
            ("CAIRN_JOURNAL_MAX_ATTEMPTS", "2"),
            ("CAIRN_JOURNAL_BACKOFF_INITIAL_MS", "20"),
            ("CAIRN_JOURNAL_BACKOFF_MAX_MS", "50"),
        ],
    );
    host.type_line("I keep bees on the roof of my building in town.");
    let failed = wait_for_event(&mut host, data, "episode.summary_failed", "cli:cli");
    assert_eq!(failed["attempts"], 2, "{failed}");
    assert!(
        failed["problem"]
            .as_str()
            .is_some_and(|p| p.contains("no JSON")),
        "{failed}"
    );
    assert!(
        memory_json(data, &["--kind", "reflection", "--session", "cli:cli"]).is_empty(),
        "no summary was stored"
    );

    // The next session is summarised, but the provider answers fact extraction with a
    // body that is not the API's: the event fails until dead-lettered and the session
    // stays pending, with no fact saved.
    host.type_line("Next spring I want to plant a vegetable garden.");
    wait_for_event(&mut host, data, "episode.summarized", "cli:cli#2");
    let data_path = data.to_path_buf();
    let data_arg = data.display().to_string();
    host.wait_until(LONG, "the fact extractor's dead letter", |_| {
        let out = cairn(&["journal", "dead-letters", "--json", "--data", &data_arg]);
        String::from_utf8_lossy(&out.stdout).contains("fact-extractor")
    });
    assert!(facts(data).is_empty(), "never half-saved facts");
    assert!(events(&data_path, "facts.extracted").is_empty());

    healthy.store(true, Ordering::SeqCst);
    cairn_ok(&[
        "journal",
        "dead-letters",
        "retry",
        "--subscriber",
        "fact-extractor",
        "--data",
        &data_arg,
    ]);
    let extracted = wait_for_event(&mut host, data, "facts.extracted", "cli:cli#2");
    assert_eq!(extracted["facts"].as_array().map(Vec::len), Some(1));
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    fact_saying(&facts(data), "The user plans a vegetable garden.");
    // The unusable summary is in the host's log too, not only in the journal, naming the
    // session.
    assert!(
        log.lines().any(|line| line.contains("WARN")
            && line.contains("episode-summarizer")
            && line.contains(
                "summarising session cli:cli: the model's answer was unusable twice (the answer holds no JSON object)"
            )),
        "{log}"
    );
}

#[test]
fn the_consolidator_finishes_a_session_the_user_left_exactly_once_with_the_others_disabled() {
    let plugins = PluginDir::cognitive_host();
    let data = tempfile::tempdir().expect("data dir");
    let data = data.path();
    let mut host = Host::start(
        plugins.path(),
        data,
        &env_with(&[(
            "CAIRN_PLUGINS_DISABLED",
            "[episode-summarizer, fact-extractor, sleeper]",
        )]),
    );
    host.wait_for("cairn is running", LONG);
    for id in ["episode-summarizer", "fact-extractor", "sleeper"] {
        assert!(
            host.log()
                .lines()
                .any(|l| l.contains("disabled by plugins.disabled") && l.contains(id)),
            "{id} is announced as disabled"
        );
    }
    say(
        &mut host,
        "My favourite drink is green tea, and I live in Lisbon.",
    );
    wait_for_event(&mut host, data, "session.ended", "cli:cli");
    say(&mut host, "hello again");
    let data_path = data.to_path_buf();
    host.wait_until(LONG, "the consolidation", |_| {
        !events(&data_path, "memory.consolidated").is_empty()
    });
    let first = payload(&events(data, "memory.consolidated")[0]);
    assert_eq!(first["sessions"], json!(["cli:cli"]), "{first}");
    assert_eq!(
        (first["facts"].as_u64(), first["summaries"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(first["trigger"], "memory.session_completed");

    cairn_ok(&[
        "journal",
        "replay",
        "--subscriber",
        "memory-consolidator",
        "--from",
        "1",
        "--data",
        &data.display().to_string(),
    ]);
    host.wait_until(LONG, "the replayed run", |_| {
        events(&data_path, "memory.consolidated").len() >= 2
    });
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    let second = payload(&events(data, "memory.consolidated")[1]);
    assert_eq!(second["sessions"], json!([]), "nothing twice: {second}");
    assert_eq!(facts(data).len(), 2);
    assert!(events(data, "episode.summarized").is_empty());
    assert_eq!(
        memory_json(data, &["--kind", "reflection", "--category", "summary"]).len(),
        1
    );
}
