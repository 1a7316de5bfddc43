//! Consolidation throughput: sessions a user left, consolidated by the bundled
//! `memory-consolidator` through the real binary — summary, facts, marked consolidated —
//! with the `offline` model, so the figure is the host's and the plugin's cost with a
//! provider that answers at once.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;

use super::Row;
use cairn_tests::{Host, workspace_root};

/// Sessions seeded; each is six episodes (three said by the user, three replies).
const SESSIONS: usize = 200;

const COLOURS: [&str; 5] = ["teal", "amber", "violet", "ochre", "indigo"];
const CITIES: [&str; 4] = ["Lisbon", "Porto", "Ghent", "Turin"];
const PLACES: [&str; 3] = ["a bakery", "the harbour office", "a bookshop"];

/// The JSONL `cairn memory import` reads: the sessions, ended a day ago, and their episodes.
fn seed(now: i64) -> String {
    let mut lines = Vec::new();
    let ended = now - 86_400_000;
    for s in 0..SESSIONS {
        let id = format!("bench:s{s}");
        lines.push(json!({
            "type": "session", "id": id, "user_id": "user", "agent_id": "main",
            "started_at": ended - 60_000, "ended_at": ended, "state": "ended",
            "conversation": format!("bench:s{s}"), "last_activity": ended, "end_reason": "idle",
        }));
        let said = [
            format!("My favourite colour is {}.", COLOURS[s % COLOURS.len()]),
            format!(
                "I live in {} these days, near the river.",
                CITIES[s % CITIES.len()]
            ),
            format!(
                "I work at {} and I like early mornings.",
                PLACES[s % PLACES.len()]
            ),
        ];
        for (i, text) in said.iter().enumerate() {
            for (role, content) in [("user", text.as_str()), ("assistant", "Noted, thank you.")] {
                let at = ended - 50_000 + (i as i64) * 1000;
                lines.push(json!({
                    "type": "entry", "id": format!("mem_bench_{s}_{i}_{role}"), "kind": "episode",
                    "content": content, "category": "conversation",
                    "scope": {"agent_id": "main", "user_id": "user", "session_id": id},
                    "importance": 5, "tags": [role], "issue_refs": [], "pr_refs": [], "sources": [],
                    "subject": null, "predicate": null, "valid_from": at, "valid_to": null,
                    "recorded_at": at, "superseded_by": null, "forgotten_at": null,
                }));
            }
        }
    }
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// A plugin directory with the terminal channel and the consolidator, as built.
fn plugin_dir(scratch: &Path) -> Result<std::path::PathBuf> {
    let built = workspace_root().join("target/plugins");
    let dir = scratch.join("cognition-plugins");
    std::fs::create_dir_all(&dir)?;
    for (manifest, component) in [
        ("cli.yaml", "cli.wasm"),
        ("memory-consolidator.yaml", "memory_consolidator.wasm"),
    ] {
        for file in [manifest, component] {
            std::fs::copy(built.join(file), dir.join(file))
                .with_context(|| format!("copy {file} from {}", built.display()))?;
        }
    }
    Ok(dir)
}

/// Seed the sessions, start the host, come back as the user (which leaves every seeded
/// session pending) and time the consolidator from the first `memory.session_completed`
/// to the `memory.consolidated` that finished the last session.
pub fn consolidation_rows(rows: &mut Vec<Row>, scratch: &Path) -> Result<()> {
    let data = scratch.join("cognition");
    std::fs::create_dir_all(&data)?;
    let seed_file = scratch.join("cognition-seed.jsonl");
    std::fs::write(&seed_file, seed(cairn::store::now_ms()))?;
    let imported = cairn_tests::cairn(&[
        "memory",
        "import",
        &seed_file.display().to_string(),
        "--data",
        &data.display().to_string(),
    ]);
    anyhow::ensure!(
        imported.status.success(),
        "seeding failed: {}",
        String::from_utf8_lossy(&imported.stderr)
    );
    let plugins = plugin_dir(scratch)?;
    let mut host = Host::start(
        &plugins,
        &data,
        &[
            ("CAIRN_ROUTER_BATCH_WINDOW_MS", "20"),
            ("CAIRN_LOG", "info,cairn::plugin=warn,cairn_plugin=warn"),
            // The write gate's default (120 writes a minute per plugin) would measure the
            // gate, not the pipeline.
            ("CAIRN_MEMORY_PLUGIN_WRITES_PER_MINUTE", "1000000"),
        ],
    );
    host.wait_for("cairn is running", Duration::from_secs(120));
    host.type_line("hello, I am back");
    let memory = rusqlite::Connection::open(data.join("memory.db"))?;
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let done: i64 = memory.query_row(
            "SELECT count(*) FROM sessions WHERE state = 'consolidated' AND id LIKE 'bench:%'",
            [],
            |r| r.get(0),
        )?;
        if done as usize == SESSIONS {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {done} of {SESSIONS} sessions consolidated after 900 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    host.stop();
    let journal = rusqlite::Connection::open(data.join("journal.db"))?;
    let first_event: i64 = journal.query_row(
        "SELECT min(created_at) FROM events WHERE topic = 'memory.session_completed'",
        [],
        |r| r.get(0),
    )?;
    let (last_run, facts): (i64, i64) = journal.query_row(
        "SELECT max(created_at), sum(json_extract(payload, '$.facts')) FROM events
         WHERE topic = 'memory.consolidated' AND json_array_length(payload, '$.sessions') > 0",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let minutes = ((last_run - first_event).max(1) as f64) / 60_000.0;
    rows.push(Row {
        name: "consolidation throughput (memory-consolidator, offline)".into(),
        value: SESSIONS as f64 / minutes,
        unit: "/min",
        note: format!(
            "sessions per minute; {SESSIONS} sessions of 6 episodes in {:.1} s: summary stored, {facts} facts saved, marked consolidated (write gate opened)",
            minutes * 60.0
        ),
    });
    Ok(())
}
