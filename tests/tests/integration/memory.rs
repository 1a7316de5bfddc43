//! Agent memory through the real binary and library: recall quality on a generated set,
//! scope isolation (also against crafted query syntax), supersede and as-of, lossless
//! export/import, snapshot hydration, OpenAI-compatible embeddings from a local server,
//! agent turns saving episodes for a real consolidator plugin, and the markdown backend.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn::memory::{
    LocalMemory, MemoryConfig, MemoryKind, NewMemory, RecallQuery, Scope, StoreOutcome,
};
use cairn::store::memory::{SessionStore, SqliteMemory};
use cairn_tests::memory_dataset::{self, Dataset};
use cairn_tests::{Host, PluginDir, cairn};

fn user_scope(user: &str) -> Scope {
    Scope {
        user_id: Some(user.into()),
        ..Scope::default()
    }
}

fn fact(user: &str, predicate: &str, content: &str, valid_from: i64) -> NewMemory {
    let mut memory = NewMemory::new(MemoryKind::Fact, content);
    memory.scope = user_scope(user);
    memory.subject = Some(user.into());
    memory.predicate = Some(predicate.into());
    memory.valid_from = Some(valid_from);
    memory
}

fn stored_id(outcome: StoreOutcome) -> String {
    match outcome {
        StoreOutcome::Stored { id, .. } => id,
        other => panic!("expected a new entry, got {other:?}"),
    }
}

fn data_arg(dir: &Path) -> String {
    dir.display().to_string()
}

/// `cairn memory stats` on `data` reports no live memory.
fn assert_no_live_memories(data: &Path, why: &str) {
    let stats = cli_json(&["memory", "stats", "--json", "--data", &data_arg(data)]);
    assert_eq!(stats["live_by_kind"], serde_json::json!({}), "{why}");
}

fn cli_json(args: &[&str]) -> serde_json::Value {
    let output = cairn(args);
    assert!(
        output.status.success(),
        "cairn {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "cairn {args:?} did not print JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// Store a generated dataset; returns label → id.
fn load_dataset(memory: &LocalMemory, dataset: &Dataset) -> HashMap<String, String> {
    let mut ids: HashMap<String, String> = HashMap::new();
    for planned in &dataset.memories {
        let mut entry = planned.memory.clone();
        entry.sources = entry
            .sources
            .iter()
            .map(|label| ids.get(label).cloned().unwrap_or_else(|| label.clone()))
            .collect();
        let outcome = memory.store_blocking(entry).expect("store");
        ids.insert(planned.label.clone(), outcome.id().to_string());
    }
    ids
}

/// recall@5 of the direct questions (overall and updated facts) and of the paraphrased ones.
struct RecallScore {
    overall: f64,
    updated: f64,
    paraphrased: f64,
    stale_hits: usize,
    questions: usize,
}

fn score_recall(
    memory: &LocalMemory,
    dataset: &Dataset,
    ids: &HashMap<String, String>,
    lexical: bool,
) -> RecallScore {
    let mut tally = [(0usize, 0usize); 3];
    let mut stale_hits = 0;
    for question in &dataset.questions {
        let recalled = memory
            .recall(&RecallQuery {
                text: question.text.clone(),
                scope: Scope {
                    agent_id: Some("main".into()),
                    user_id: Some(question.user.clone()),
                    session_id: None,
                },
                limit: 5,
                lexical_only: lexical,
                ..RecallQuery::default()
            })
            .expect("recall");
        let found: Vec<&str> = recalled.iter().map(|h| h.entry.id.as_str()).collect();
        let hit = usize::from(
            question
                .evidence
                .iter()
                .any(|label| found.contains(&ids[label].as_str())),
        );
        stale_hits += question
            .stale
            .iter()
            .filter(|label| found.contains(&ids[*label].as_str()))
            .count();
        let mut count = |i: usize| {
            tally[i].0 += hit;
            tally[i].1 += 1;
        };
        if question.paraphrase {
            count(2);
        } else {
            count(0);
            if question.updated {
                count(1);
            }
        }
    }
    let rate = |(hits, total): (usize, usize)| hits as f64 / total.max(1) as f64;
    RecallScore {
        overall: rate(tally[0]),
        updated: rate(tally[1]),
        paraphrased: rate(tally[2]),
        stale_hits,
        questions: dataset.questions.len(),
    }
}

#[test]
fn recall_quality_on_generated_conversations() {
    let data = tempfile::tempdir().expect("data dir");
    let memory = cairn_tests::storage::open_memory(data.path(), MemoryConfig::default());
    let dataset = memory_dataset::generate(120, 7, cairn::store::now_ms());
    assert!(
        dataset.sessions >= 100 * 3,
        "at least 100 multi-session conversations"
    );
    let ids = load_dataset(&memory, &dataset);
    let embedded = memory.embed_pending(|_| {}).expect("embed");
    assert_eq!(embedded as usize, dataset.memories.len());

    let hybrid = score_recall(&memory, &dataset, &ids, false);
    let lexical = score_recall(&memory, &dataset, &ids, true);
    println!(
        "recall@5 over {} questions ({} users, {} sessions, {} memories): hybrid: direct {:.3}, updated facts {:.3}, paraphrased {:.3}; BM25 only: direct {:.3}, updated {:.3}, paraphrased {:.3}; stale facts recalled: {}",
        hybrid.questions,
        120,
        dataset.sessions,
        dataset.memories.len(),
        hybrid.overall,
        hybrid.updated,
        hybrid.paraphrased,
        lexical.overall,
        lexical.updated,
        lexical.paraphrased,
        hybrid.stale_hits + lexical.stale_hits,
    );
    assert!(
        hybrid.overall >= 0.85,
        "hybrid recall@5 {:.3} is below the floor 0.85",
        hybrid.overall
    );
    assert!(
        hybrid.updated >= 0.85,
        "recall@5 of updated facts {:.3} is below the floor 0.85",
        hybrid.updated
    );
    assert!(
        hybrid.paraphrased >= 0.3,
        "recall@5 of paraphrased questions {:.3} fell below 0.3",
        hybrid.paraphrased
    );
    assert_eq!(
        hybrid.stale_hits + lexical.stale_hits,
        0,
        "a superseded fact was recalled as current"
    );
}

#[test]
fn scopes_isolate_users_even_against_crafted_query_syntax() {
    let data = tempfile::tempdir().expect("data dir");
    let memory = cairn_tests::storage::open_memory(data.path(), MemoryConfig::default());
    let mut secret = NewMemory::new(
        MemoryKind::Fact,
        "Alice keeps the vault code 4417 under the green tea tin",
    );
    secret.scope = user_scope("alice");
    memory.store_blocking(secret).expect("store");
    memory.embed_pending(|_| {}).expect("embed");
    let data = data_arg(data.path());

    let own = cli_json(&[
        "memory",
        "search",
        "vault code tea",
        "--user",
        "alice",
        "--json",
        "--data",
        &data,
    ]);
    assert_eq!(
        own.as_array().map(Vec::len),
        Some(1),
        "alice recalls her memory: {own}"
    );
    for crafted in [
        "vault code tea",
        "vault OR code OR *",
        "\"vault\" OR user_id:alice",
        "content:vault",
        "tea) OR (1",
        "NEAR(vault code, 5)",
        "*",
        "' OR 1=1 --",
    ] {
        let hits = cli_json(&[
            "memory", "search", crafted, "--user", "bob", "--json", "--data", &data,
        ]);
        assert_eq!(
            hits,
            serde_json::json!([]),
            "bob recalled alice's memory with {crafted:?}"
        );
        let listed = cli_json(&["memory", "list", "--user", "bob", "--json", "--data", &data]);
        assert_eq!(listed, serde_json::json!([]));
    }
    let hits = memory
        .recall(&RecallQuery {
            text: "vault".into(),
            scope: Scope {
                user_id: Some("bob".into()),
                session_id: Some("any".into()),
                ..Scope::default()
            },
            limit: 5,
            ..RecallQuery::default()
        })
        .expect("recall");
    assert!(hits.is_empty());
}

#[test]
fn facts_supersede_and_stay_queryable_as_of_earlier_times() {
    let dir = tempfile::tempdir().expect("data dir");
    let memory = cairn_tests::storage::open_memory(dir.path(), MemoryConfig::default());
    let day = 86_400_000;
    let t0 = cairn::store::now_ms() - 10 * day;
    let paris = stored_id(
        memory
            .store_blocking(fact("alice", "lives_in", "Alice lives in Paris", t0))
            .expect("store"),
    );
    let berlin_outcome = memory
        .store_blocking(fact(
            "alice",
            "lives_in",
            "Alice lives in Berlin",
            t0 + 5 * day,
        ))
        .expect("store");
    let StoreOutcome::Stored {
        id: berlin,
        superseded,
    } = berlin_outcome
    else {
        panic!("the update was not stored")
    };
    assert_eq!(superseded, vec![paris.clone()]);
    let old = memory
        .get(&paris)
        .expect("get")
        .expect("the old fact is kept");
    assert_eq!(old.valid_to, Some(t0 + 5 * day));
    assert_eq!(old.superseded_by.as_deref(), Some(berlin.as_str()));

    let search = |as_of: Option<i64>| -> Vec<String> {
        memory
            .recall(&RecallQuery {
                text: "where does alice live".into(),
                scope: user_scope("alice"),
                as_of,
                limit: 5,
                ..RecallQuery::default()
            })
            .expect("recall")
            .into_iter()
            .map(|h| h.entry.id)
            .collect()
    };
    assert_eq!(
        search(None),
        vec![berlin.clone()],
        "now: only the current fact"
    );
    assert_eq!(
        search(Some(t0 + 2 * day)),
        vec![paris.clone()],
        "as of day 2: Paris"
    );
    assert!(
        search(Some(t0 - day)).is_empty(),
        "before either was true: nothing"
    );

    // The same through the binary.
    let data = data_arg(dir.path());
    let as_of = (t0 + 2 * day).to_string();
    let hits = cli_json(&[
        "memory",
        "search",
        "alice live",
        "--user",
        "alice",
        "--as-of",
        &as_of,
        "--json",
        "--data",
        &data,
    ]);
    assert_eq!(hits[0]["entry"]["id"], paris.as_str());
    let output = cairn(&[
        "memory",
        "search",
        "alice live",
        "--user",
        "alice",
        "--explain",
        "--data",
        &data,
    ]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains(&berlin) && text.contains("bm25") && text.contains("recency"),
        "{text}"
    );

    // Duplicates are skipped and reported; an explicit supersede works by id.
    let again = memory
        .store_blocking(fact(
            "alice",
            "lives_in",
            "Alice lives in Berlin",
            t0 + 6 * day,
        ))
        .expect("store");
    assert_eq!(
        again,
        StoreOutcome::Duplicate {
            existing: berlin.clone(),
            similarity: 1.0
        }
    );
    let mut hobby = NewMemory::new(
        MemoryKind::Fact,
        "Alice plays chess in the park every Sunday morning",
    );
    hobby.scope = user_scope("alice");
    hobby.subject = Some("alice".into());
    let hobby = stored_id(memory.store_blocking(hobby).expect("store"));
    let mut near = NewMemory::new(
        MemoryKind::Fact,
        "Alice plays chess in the park every Sunday morning!",
    );
    near.scope = user_scope("alice");
    near.subject = Some("alice".into());
    near.predicate = Some("hobby".into());
    match memory.store_blocking(near).expect("store") {
        StoreOutcome::Duplicate {
            existing,
            similarity,
        } => {
            assert_eq!(existing, hobby);
            assert!(similarity >= 0.85);
        }
        other => panic!("a near duplicate about the same subject was stored: {other:?}"),
    }
    let mut correction = NewMemory::new(MemoryKind::Fact, "Alice plays go, not chess, on Sundays");
    correction.scope = user_scope("alice");
    correction.supersedes = Some(hobby.clone());
    let correction = stored_id(memory.store_blocking(correction).expect("store"));
    assert_eq!(
        memory
            .get(&hobby)
            .expect("get")
            .expect("kept")
            .superseded_by,
        Some(correction)
    );
    let mut bad = NewMemory::new(MemoryKind::Fact, "x");
    bad.supersedes = Some("mem_missing".into());
    assert!(
        memory.store_blocking(bad).is_err(),
        "superseding an unknown id is an input error"
    );

    // Forget is a soft delete with an audit row; only purge removes.
    let forget = cli_json(&["memory", "forget", &berlin, "--json", "--data", &data]);
    assert_eq!(forget["forgotten"], true);
    assert!(
        !search(None).contains(&berlin),
        "a forgotten fact is not recalled"
    );
    let shown = cli_json(&["memory", "get", &berlin, "--json", "--data", &data]);
    assert!(shown["entry"]["forgotten_at"].is_i64());
    assert_eq!(shown["audit"][0]["action"], "forget");
    assert_eq!(shown["audit"][0]["actor"], "cli");
    let refused = cairn(&["memory", "purge", "--data", &data]);
    assert_eq!(
        refused.status.code(),
        Some(2),
        "purge without a target is refused"
    );
    let purged = cli_json(&["memory", "purge", "--forgotten", "--json", "--data", &data]);
    assert_eq!(purged["removed"], 1);
    assert_eq!(
        cairn(&["memory", "get", &berlin, "--data", &data])
            .status
            .code(),
        Some(2)
    );
    assert!(
        memory.get(&paris).expect("get").is_some(),
        "the superseded fact was not purged"
    );
}

#[test]
fn export_and_import_round_trip_losslessly() {
    if cairn_tests::storage::reads_sqlite_files("export_and_import_round_trip_losslessly") {
        return;
    }
    let source = tempfile::tempdir().expect("source");
    let memory_db = Arc::new(SqliteMemory::open(source.path()).expect("memory.db"));
    let memory = LocalMemory::over(source.path(), MemoryConfig::default(), memory_db.clone())
        .expect("open memory");
    let dataset = memory_dataset::generate(6, 11, cairn::store::now_ms());
    let ids = load_dataset(&memory, &dataset);
    let mut noted = NewMemory::new(
        MemoryKind::Reflection,
        "Merged PR #12 which fixes #7; release is blocked",
    );
    noted.tags = vec!["decision".into()];
    let noted = stored_id(memory.store_blocking(noted).expect("store"));
    let entry = memory.get(&noted).expect("get").expect("stored");
    assert_eq!(
        (entry.issue_refs.clone(), entry.pr_refs.clone()),
        (vec![7], vec![12])
    );
    assert_eq!(
        entry.importance, 10,
        "5 + fix 2 + merge 2 + decision 2 + reflection 1, clamped"
    );
    let any_id = ids.values().next().expect("ids").clone();
    let any_id = &any_id;
    memory.forget_blocking(any_id, "test").expect("forget");
    memory_db
        .session_for("chat:s-a", Some("u"), Some("main"), 1_000, 60_000)
        .expect("session")
        .recorded
        .wait()
        .expect("recorded");
    memory_db.end_idle(1_000, 2_000).wait().expect("end");
    memory_db
        .mark_consolidated("chat:s-a", 3_000)
        .wait()
        .expect("consolidate");

    let first = source.path().join("first.jsonl");
    let exported = cli_json(&[
        "memory",
        "export",
        "--format",
        "jsonl",
        "--output",
        &first.display().to_string(),
        "--json",
        "--data",
        &data_arg(source.path()),
    ]);
    assert!(exported["records"].as_u64().expect("count") > 100);

    let target = tempfile::tempdir().expect("target");
    let imported = cli_json(&[
        "memory",
        "import",
        &first.display().to_string(),
        "--json",
        "--data",
        &data_arg(target.path()),
    ]);
    assert_eq!(imported["skipped"], 0);
    let second = target.path().join("second.jsonl");
    cli_json(&[
        "memory",
        "export",
        "--output",
        &second.display().to_string(),
        "--json",
        "--data",
        &data_arg(target.path()),
    ]);
    let (a, b) = (
        std::fs::read_to_string(&first).expect("first"),
        std::fs::read_to_string(&second).expect("second"),
    );
    assert_eq!(a.lines().count(), b.lines().count());
    assert!(
        a == b,
        "the export of the import differs from the original export"
    );
    // Who forgot or superseded what survives the trip.
    let superseded = a
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|record| record["type"] == "entry" && record["superseded_by"].is_string())
        .expect("the dataset supersedes facts")["id"]
        .as_str()
        .expect("id")
        .to_string();
    for (id, action) in [(any_id, "forget"), (&superseded, "supersede")] {
        let get = |dir: &Path| cli_json(&["memory", "get", id, "--json", "--data", &data_arg(dir)]);
        let (before, after) = (get(source.path()), get(target.path()));
        assert_eq!(before["audit"], after["audit"], "{id}");
        assert!(
            after["audit"]
                .as_array()
                .is_some_and(|rows| rows.iter().any(|row| row["action"] == action)),
            "{action} of {id} is in its audit trail: {after}"
        );
    }
    assert!(imported["audit"].as_u64().expect("audit rows") >= 2);

    // Importing again skips everything; a bad line rejects the whole file.
    let again = cli_json(&[
        "memory",
        "import",
        &first.display().to_string(),
        "--json",
        "--data",
        &data_arg(target.path()),
    ]);
    assert_eq!(again["entries"], 0);
    let broken = target.path().join("broken.jsonl");
    std::fs::write(
        &broken,
        format!(
            "{}\n{{\"type\":\"entry\",\"id\":\"x\"}}\n",
            a.lines().last().unwrap_or_default()
        ),
    )
    .expect("write");
    let fresh = tempfile::tempdir().expect("fresh");
    let output = cairn(&[
        "memory",
        "import",
        &broken.display().to_string(),
        "--data",
        &data_arg(fresh.path()),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("line 2"));
    assert_no_live_memories(fresh.path(), "nothing was half-imported");
}

#[test]
fn a_missing_memory_db_is_hydrated_from_the_snapshot() {
    if cairn_tests::storage::reads_sqlite_files("a_missing_memory_db_is_hydrated_from_the_snapshot")
    {
        return;
    }
    let dir = tempfile::tempdir().expect("data dir");
    let data = data_arg(dir.path());
    {
        let memory = cairn_tests::storage::open_memory(dir.path(), MemoryConfig::default());
        // Several in the same millisecond: hydration must keep their order all the same.
        for (user, text) in [
            ("alice", "Alice prefers short answers -- no emoji"),
            ("bob", "Bob is the on-call engineer\nfor the payments team"),
            ("carol", "Carol reviews every database migration"),
            ("alice", "Alice works from Lisbon"),
            ("dave", "Dave owns the release calendar"),
            ("bob", "Bob is allergic to peanuts"),
        ] {
            let mut core = NewMemory::new(MemoryKind::Core, text);
            core.scope = user_scope(user);
            memory.store_blocking(core).expect("store");
        }
        memory
            .store_blocking(NewMemory::new(MemoryKind::Episode, "small talk"))
            .expect("store");
    }
    let written = cli_json(&["memory", "snapshot", "--json", "--data", &data]);
    assert_eq!(written["core_memories"], 6);
    let before = cli_json(&[
        "memory", "list", "--kind", "core", "--json", "--data", &data,
    ]);
    let snapshot =
        std::fs::read_to_string(dir.path().join("MEMORY_SNAPSHOT.md")).expect("snapshot");
    assert!(snapshot.contains("Bob is the on-call engineer"));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.path().join(format!("memory.db{suffix}")));
    }
    let after = cli_json(&[
        "memory", "list", "--kind", "core", "--json", "--data", &data,
    ]);
    assert_eq!(before, after, "core memories come back exactly");
    let all = cli_json(&["memory", "list", "--json", "--data", &data]);
    assert_eq!(
        all.as_array().map(Vec::len),
        Some(6),
        "only core memories are in the snapshot"
    );
}

#[test]
fn a_start_that_died_before_hydrating_hydrates_on_the_next_and_hygiene_keeps_the_snapshot() {
    if cairn_tests::storage::reads_sqlite_files(
        "a_start_that_died_before_hydrating_hydrates_on_the_next_and_hygiene_keeps_the_snapshot",
    ) {
        return;
    }
    let dir = tempfile::tempdir().expect("data dir");
    let data = data_arg(dir.path());
    {
        let memory = cairn_tests::storage::open_memory(dir.path(), MemoryConfig::default());
        for i in 0..5 {
            let mut core = NewMemory::new(MemoryKind::Core, format!("Core rule number {i}"));
            core.scope = user_scope("alice");
            memory.store_blocking(core).expect("store");
        }
    }
    cli_json(&["memory", "snapshot", "--json", "--data", &data]);
    // By id: entries recorded in the same millisecond may come back in another order.
    let list_core = || {
        let mut entries = cli_json(&[
            "memory", "list", "--kind", "core", "--json", "--data", &data,
        ])
        .as_array()
        .expect("a list")
        .clone();
        entries.sort_by_key(|e| e["id"].as_str().unwrap_or_default().to_string());
        entries
    };
    let before = list_core();
    let path = dir.path().join("MEMORY_SNAPSHOT.md");
    let snapshot = std::fs::read_to_string(&path).expect("snapshot");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.path().join(format!("memory.db{suffix}")));
    }
    // What a start killed after creating memory.db and before hydrating leaves: the
    // database, migrated and empty.
    drop(SqliteMemory::open(dir.path()).expect("memory.db"));

    let hygiene = cli_json(&["memory", "hygiene", "--json", "--data", &data]);
    assert_eq!(hygiene["snapshot_entries"], 5, "{hygiene}");
    assert_eq!(list_core(), before, "the next start hydrated them");
    // Line by line, in any order: memories of the same millisecond may swap places.
    let lines = |text: &str| {
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        lines.sort();
        lines
    };
    assert_eq!(
        lines(&std::fs::read_to_string(&path).expect("snapshot")),
        lines(&snapshot),
        "hygiene wrote the same snapshot back"
    );
    // Hydrated once: a later open does not hydrate again.
    let restored = cli_json(&["memory", "stats", "--json", "--data", &data]);
    assert_eq!(restored["live_by_kind"]["core"], 5, "{restored}");
}

#[test]
fn a_host_starting_without_memory_db_hydrates_the_snapshot_with_its_edits() {
    if cairn_tests::storage::reads_sqlite_files(
        "a_host_starting_without_memory_db_hydrates_the_snapshot_with_its_edits",
    ) {
        return;
    }
    let dir = tempfile::tempdir().expect("data dir");
    let data = data_arg(dir.path());
    let (alice, bob) = {
        let memory = cairn_tests::storage::open_memory(dir.path(), MemoryConfig::default());
        let core = |user: &str, text: &str| {
            let mut core = NewMemory::new(MemoryKind::Core, text);
            core.scope = user_scope(user);
            stored_id(memory.store_blocking(core).expect("store"))
        };
        (
            core("alice", "Alice prefers short answers"),
            core("bob", "Bob is the on-call engineer"),
        )
    };
    cli_json(&["memory", "snapshot", "--json", "--data", &data]);
    let path = dir.path().join("MEMORY_SNAPSHOT.md");
    let snapshot = std::fs::read_to_string(&path).expect("snapshot");
    assert!(snapshot.contains("Edit a memory's prose to change it"));
    let edited = snapshot.replace(
        "Alice prefers short answers",
        "Alice prefers short answers\nand replies in French",
    ) + "\n## Carol owns the release calendar (user carol)\n";
    std::fs::write(&path, edited).expect("edit the snapshot");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.path().join(format!("memory.db{suffix}")));
    }

    // The host cold-boots: it hydrates inside its runtime, then runs and stops cleanly.
    let plugins = PluginDir::new();
    plugins.bundled("counter");
    let mut host = Host::start(plugins.path(), dir.path(), &[]);
    host.wait_for(
        "core memories hydrated from the snapshot",
        Duration::from_secs(60),
    );
    host.wait_for("cairn is running", Duration::from_secs(60));
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");
    assert!(!log.contains("panicked"), "{log}");

    let get = |id: &str| cli_json(&["memory", "get", id, "--json", "--data", &data]);
    let alice_now = get(&alice);
    assert_eq!(
        alice_now["entry"]["content"],
        "Alice prefers short answers\nand replies in French"
    );
    assert_eq!(alice_now["entry"]["scope"]["user_id"], "alice");
    assert!(
        alice_now["audit"].as_array().is_some_and(|rows| rows
            .iter()
            .any(|r| r["action"] == "edit" && r["actor"] == "snapshot")),
        "{alice_now}"
    );
    assert_eq!(get(&bob)["entry"]["content"], "Bob is the on-call engineer");
    let carol = cli_json(&[
        "memory", "list", "--kind", "core", "--user", "carol", "--json", "--data", &data,
    ]);
    assert_eq!(
        carol[0]["content"], "Carol owns the release calendar",
        "{carol}"
    );

    // With memory.db present, an edit hydrated on purpose supersedes the entry it changes.
    let snapshot = std::fs::read_to_string(&path).expect("snapshot");
    std::fs::write(
        &path,
        snapshot.replace("Bob is the on-call engineer", "Bob left the on-call rota"),
    )
    .expect("edit again");
    let restored = cli_json(&[
        "memory",
        "snapshot",
        "--hydrate",
        &path.display().to_string(),
        "--json",
        "--data",
        &data,
    ]);
    assert_eq!(
        restored["restored"], 1,
        "only Bob's edit is new: {restored}"
    );
    let bob_now = get(&bob);
    let successor = bob_now["entry"]["superseded_by"]
        .as_str()
        .expect("superseded");
    assert_eq!(
        get(successor)["entry"]["content"],
        "Bob left the on-call rota"
    );
}

/// A minimal OpenAI-compatible embeddings server: vectors count letters, so texts sharing
/// letters are similar. Records (model, authorization, inputs) of each request.
/// What the embeddings server saw: (model, Authorization header, number of inputs) per request.
type SeenRequests = Arc<Mutex<Vec<(String, String, usize)>>>;

fn embeddings_server() -> (u16, SeenRequests) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let log = log.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut length = 0usize;
                let mut authorization = String::new();
                let mut line = String::new();
                reader.read_line(&mut line).expect("request line");
                loop {
                    line.clear();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    let lower = line.to_ascii_lowercase();
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    if lower.starts_with("authorization:") {
                        authorization = line[14..].trim().to_string();
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).expect("body");
                let request: serde_json::Value = serde_json::from_slice(&body).expect("json body");
                let inputs: Vec<String> = request["input"]
                    .as_array()
                    .expect("input list")
                    .iter()
                    .map(|v| v.as_str().unwrap_or_default().to_string())
                    .collect();
                let model = request["model"].as_str().unwrap_or_default().to_string();
                log.lock()
                    .expect("log")
                    .push((model.clone(), authorization, inputs.len()));
                let data: Vec<serde_json::Value> = inputs
                    .iter()
                    .enumerate()
                    .map(|(index, text)| {
                        let mut vector = vec![0f32; 26];
                        for c in text.to_ascii_lowercase().bytes().filter(u8::is_ascii_lowercase) {
                            vector[(c - b'a') as usize] += 1.0;
                        }
                        serde_json::json!({"object": "embedding", "index": index, "embedding": vector})
                    })
                    .collect();
                let answer =
                    serde_json::json!({"object": "list", "data": data, "model": model}).to_string();
                let mut stream = stream;
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                    answer.len()
                );
            });
        }
    });
    (port, seen)
}

fn openai_config(dir: &Path, port: u16, model: &str) -> std::path::PathBuf {
    let path = dir.join(format!("cairn-{model}.yaml"));
    std::fs::write(
        &path,
        format!("memory:\n  embeddings:\n    provider: openai\n    url: http://127.0.0.1:{port}/v1\n    model: {model}\n    api_key_env: CAIRN_TEST_EMBED_KEY\n    batch_size: 4\n"),
    )
    .expect("write config");
    path
}

#[test]
fn openai_compatible_embeddings_from_a_local_server_and_reindex_on_model_change() {
    let (port, seen) = embeddings_server();
    let dir = tempfile::tempdir().expect("data dir");
    // SAFETY: set before any thread of this test reads the environment; the key is this test's own.
    unsafe { std::env::set_var("CAIRN_TEST_EMBED_KEY", "sk-local-test") };
    let config_a = openai_config(dir.path(), port, "letters-a");
    let config =
        cairn::config::HostConfig::load(Some(&config_a), Some(dir.path())).expect("config");
    {
        let memory = cairn_tests::storage::open_memory(dir.path(), config.memory.clone());
        for text in ["zebra zoo", "apple banana", "apple banana", "quartz jazz"] {
            let mut episode = NewMemory::new(MemoryKind::Episode, text);
            episode.scope = user_scope("alice");
            memory.store_blocking(episode).expect("store");
        }
        assert_eq!(memory.embed_pending(|_| {}).expect("embed"), 4);
        let hits = memory
            .recall(&RecallQuery {
                text: "jazz zebra".into(),
                scope: user_scope("alice"),
                limit: 5,
                ..RecallQuery::default()
            })
            .expect("recall");
        assert!(
            hits.iter().all(|h| h.explain.cosine.is_some()),
            "every hit has a cosine from the provider"
        );
        let stats = memory.stats().expect("stats");
        assert_eq!((stats.embedded, stats.embedding_backlog), (4, 0));
    }
    {
        let requests = seen.lock().expect("log");
        assert!(
            requests
                .iter()
                .all(|(model, auth, _)| model == "letters-a" && auth == "Bearer sk-local-test"),
            "{requests:?}"
        );
        let texts: usize = requests.iter().map(|r| r.2).sum();
        assert_eq!(
            texts, 4,
            "three distinct texts embedded once each, plus the query"
        );
    }

    // A model change: every vector is stale; reindex re-embeds them all through the binary.
    let config_b = openai_config(dir.path(), port, "letters-b");
    let data = data_arg(dir.path());
    let config_b = config_b.display().to_string();
    // The test environment's `hash` override gives way to the file's provider.
    let stats_b = || {
        let output = std::process::Command::new(cairn_tests::cairn_bin())
            .args([
                "--config", &config_b, "memory", "stats", "--json", "--data", &data,
            ])
            .env("CAIRN_MEMORY_EMBEDDINGS_PROVIDER", "openai")
            .envs(cairn_tests::storage::env_for(dir.path()))
            .output()
            .expect("stats");
        serde_json::from_slice::<serde_json::Value>(&output.stdout).expect("json")
    };
    let stats = stats_b();
    assert_eq!(stats["embedding_backlog"], 4);
    let output = std::process::Command::new(cairn_tests::cairn_bin())
        .args([
            "--config", &config_b, "memory", "reindex", "--json", "--data", &data,
        ])
        .env("CAIRN_TEST_EMBED_KEY", "sk-local-test")
        .envs(cairn_tests::storage::env_for(dir.path()))
        .output()
        .expect("reindex");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let reindexed: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(reindexed["embedded"], 4);
    assert!(
        seen.lock()
            .expect("log")
            .iter()
            .any(|(model, _, _)| model == "letters-b")
    );
    let stats = stats_b();
    assert_eq!(
        (
            stats["embedded"].clone(),
            stats["embedding_backlog"].clone()
        ),
        (4.into(), 0.into())
    );

    // An unreachable provider: recall still answers from BM25.
    let dead = dir.path().join("dead.yaml");
    std::fs::write(&dead, "memory:\n  embeddings:\n    provider: openai\n    url: http://127.0.0.1:9/v1\n    timeout_ms: 500\n").expect("write");
    let hits = cli_json(&[
        "--config",
        &dead.display().to_string(),
        "memory",
        "search",
        "apple",
        "--user",
        "alice",
        "--json",
        "--data",
        &data,
    ]);
    assert_eq!(
        hits.as_array().map(Vec::len),
        Some(1),
        "two equal episodes collapse into one hit: {hits}"
    );
    assert!(
        hits[0]["explain"]["cosine"].is_null(),
        "no vector signal without the provider"
    );
}

fn cli_channel(plugins: &PluginDir, sender: &str, conversation: &str) {
    plugins.plugin(
        "cli",
        "channel",
        "cli",
        &format!("channel:\n  poll_interval_ms: 50\ncapabilities:\n  stdio: true\nconfig:\n  sender: {sender}\n  conversation: {conversation}\n"),
    );
}

fn probe(plugins: &PluginDir, id: &str, kind: &str, scopes: &str, extra: &str) {
    plugins.plugin(
        id,
        kind,
        "memory_probe",
        &format!("capabilities:\n  memory:\n    access: read-write\n    scopes: {scopes}\n{extra}"),
    );
}

#[test]
fn turns_save_episodes_that_a_consolidator_turns_into_facts_and_scopes_bind_plugins() {
    let plugins = PluginDir::new();
    cli_channel(&plugins, "alice", "c1");
    probe(
        &plugins,
        "consolidator",
        "consolidator",
        "[\"user:*\"]",
        "events:\n  subscribes: [\"session.ended\"]\n",
    );
    probe(
        &plugins,
        "scoped",
        "handler",
        "[\"user:alice\"]",
        "config:\n  user: alice\n  other: bob\n",
    );
    let data = tempfile::tempdir().expect("data dir");
    let mut host = Host::start(
        plugins.path(),
        data.path(),
        &[
            ("CAIRN_LIFECYCLE_SESSION_TIMEOUT_SECS", "1"),
            ("CAIRN_LIFECYCLE_CHECK_INTERVAL_MS", "100"),
            ("CAIRN_ROUTER_BATCH_WINDOW_MS", "20"),
        ],
    );
    host.wait_for("probe pending:", Duration::from_secs(60));
    let log = host.log();
    let line = |name: &str| {
        log.lines()
            .find(|l| l.contains(&format!("probe {name}:")))
            .unwrap_or_else(|| panic!("no probe {name} line in\n{log}"))
            .to_string()
    };
    assert!(line("store-own").contains(": ok"), "{}", line("store-own"));
    assert!(
        line("store-other").contains("denied") && line("store-other").contains("bob"),
        "{}",
        line("store-other")
    );
    assert!(
        line("recall-unscoped").contains("denied"),
        "{}",
        line("recall-unscoped")
    );
    assert!(
        line("recall-own").contains("green tea"),
        "{}",
        line("recall-own")
    );
    assert!(
        line("pending").contains("denied") && line("pending").contains("consolidator"),
        "{}",
        line("pending")
    );

    host.type_line("My cat Miso only eats salmon flakes");
    host.wait_for(
        "probe consolidated: cli:c1 episodes=2 facts=1 consolidated=true",
        Duration::from_secs(60),
    );
    host.type_line("what does Miso eat?");
    host.wait_until(Duration::from_secs(30), "the second reply", |log| {
        log.matches("[offline] I received").count() >= 2
    });
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");

    let data = data_arg(data.path());
    let episodes = cli_json(&[
        "memory",
        "list",
        "--kind",
        "episode",
        "--session",
        "cli:c1",
        "--json",
        "--data",
        &data,
    ]);
    let contents: Vec<&str> = episodes
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|e| e["content"].as_str())
        .collect();
    assert!(
        contents.contains(&"My cat Miso only eats salmon flakes"),
        "{contents:?}"
    );
    assert!(
        contents
            .iter()
            .any(|c| c.starts_with("[offline] I received: alice: My cat Miso")),
        "the reply is an episode: {contents:?}"
    );
    assert!(
        !contents.contains(&"what does Miso eat?"),
        "the conversation resumed after its session ended: a new session"
    );
    let resumed = cli_json(&[
        "memory",
        "list",
        "--session",
        "cli:c1#2",
        "--json",
        "--data",
        &data,
    ]);
    assert!(
        resumed
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e["content"] == "what does Miso eat?")),
        "{resumed}"
    );
    let first_episode = episodes
        .as_array()
        .and_then(|e| {
            e.iter()
                .find(|e| e["content"] == "My cat Miso only eats salmon flakes")
        })
        .map(|e| e["id"].clone())
        .expect("first episode");
    assert!(
        !contents.iter().any(|c| c.contains("Relevant memory")),
        "recalled memory is never saved back"
    );
    let facts = cli_json(&[
        "memory",
        "search",
        "Miso salmon",
        "--user",
        "alice",
        "--kind",
        "fact",
        "--json",
        "--data",
        &data,
    ]);
    let summary = &facts[0]["entry"];
    assert!(
        summary["content"]
            .as_str()
            .unwrap_or_default()
            .contains("salmon flakes"),
        "{facts}"
    );
    assert_eq!(
        summary["sources"].as_array().map(Vec::len),
        Some(2),
        "provenance: the session's two episodes"
    );
    let stats = cli_json(&["memory", "stats", "--json", "--data", &data]);
    assert!(
        stats["sessions"]["consolidated"].as_u64().is_some(),
        "{stats}"
    );
    let turns = cairn(&[
        "journal",
        "tail",
        "--topic",
        "turn.completed",
        "--json",
        "--data",
        &data,
    ]);
    let last_turn: serde_json::Value = String::from_utf8_lossy(&turns.stdout)
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .expect("a turn.completed event");
    let payload: serde_json::Value = match &last_turn["payload"] {
        serde_json::Value::String(text) => serde_json::from_str(text).expect("payload json"),
        other => other.clone(),
    };
    assert!(
        payload["recalled"]
            .as_array()
            .is_some_and(|ids| ids.iter().any(|id| id == &summary["id"])),
        "the second turn was given the consolidated fact as context: {payload}"
    );
    assert!(
        payload["recalled"]
            .as_array()
            .is_some_and(|ids| ids.contains(&first_episode)),
        "and the episode of the earlier session of the same conversation: {payload}"
    );
}

#[test]
fn the_markdown_backend_plugin_serves_memory_from_its_sandbox() {
    let plugins = PluginDir::new();
    plugins.bundled("markdown");
    cli_channel(&plugins, "alice", "c1");
    probe(
        &plugins,
        "scoped",
        "handler",
        "[\"user:alice\"]",
        "config:\n  user: alice\n  other: bob\n",
    );
    let data = tempfile::tempdir().expect("data dir");
    probe(
        &plugins,
        "consolidator",
        "consolidator",
        "[\"user:*\"]",
        "events:\n  subscribes: [\"session.ended\"]\n",
    );
    let config = data.path().join("cairn.yaml");
    std::fs::write(&config, "memory:\n  backend: markdown\n").expect("write config");
    let mut host = Host::start_with_config(
        plugins.path(),
        data.path(),
        &config,
        &[
            ("CAIRN_ROUTER_BATCH_WINDOW_MS", "20"),
            ("CAIRN_LIFECYCLE_SESSION_TIMEOUT_SECS", "1"),
            ("CAIRN_LIFECYCLE_CHECK_INTERVAL_MS", "100"),
        ],
    );
    host.wait_for("probe pending:", Duration::from_secs(60));
    host.type_line("Remember that the boat is moored at pier seven");
    host.wait_for("[offline] I received", Duration::from_secs(30));
    // The consolidator reads the session's episodes from the backend and saves its fact
    // there: consolidation goes through the same memory interface as everything else.
    host.wait_for(
        "probe consolidated: cli:c1 episodes=2 facts=1 consolidated=true",
        Duration::from_secs(60),
    );
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    assert!(
        log.contains("memory is served by a backend plugin"),
        "{log}"
    );
    let recall_own = log
        .lines()
        .find(|l| l.contains("probe recall-own:"))
        .expect("recall line");
    assert!(
        recall_own.contains("green tea"),
        "keyword recall through the backend: {recall_own}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("probe store-other:") && l.contains("denied"))
    );

    let workspace = data.path().join("plugins/markdown/workspace");
    let daily: Vec<_> = std::fs::read_dir(workspace.join("memory"))
        .expect("daily dir")
        .filter_map(Result::ok)
        .collect();
    assert_eq!(daily.len(), 1, "one file for today");
    let text = std::fs::read_to_string(daily[0].path()).expect("daily file");
    assert!(text.contains("the boat is moored at pier seven"), "{text}");
    assert!(text.contains("alice drinks green tea"), "{text}");
    assert!(
        text.contains("In cli:c1 the user said: Remember that the boat is moored at pier seven"),
        "the consolidator's fact is in the backend: {text}"
    );
    assert_no_live_memories(
        data.path(),
        "memory.db holds no entries: the plugin is the memory",
    );

    // `cairn memory` goes through the same interface: with the backend configured it starts
    // the plugin (from the directory the host last ran) and reads the plugin's memories.
    let config_arg = config.display().to_string();
    let data_text = data_arg(data.path());
    let with_backend = |args: &[&str]| {
        let mut all = vec!["--config", config_arg.as_str()];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--json", "--data", data_text.as_str()]);
        cli_json(&all)
    };
    let mentions = |value: &serde_json::Value, pointer: &str, text: &str| {
        value.as_array().expect("a list").iter().any(|item| {
            item.pointer(pointer)
                .and_then(|v| v.as_str())
                .is_some_and(|c| c.contains(text))
        })
    };
    let found = with_backend(&["memory", "search", "boat moored pier"]);
    assert!(mentions(&found, "/entry/content", "pier seven"), "{found}");
    let listed = with_backend(&["memory", "list", "--user", "alice"]);
    assert!(mentions(&listed, "/content", "green tea"), "{listed}");
    let stats = with_backend(&["memory", "stats"]);
    assert_eq!(stats["backend"], "markdown", "{stats}");
    assert!(
        stats["sessions"]["consolidated"].as_u64() >= Some(1),
        "{stats}"
    );
    let export = cairn(&[
        "--config",
        &config_arg,
        "memory",
        "export",
        "--data",
        &data_text,
    ]);
    assert_eq!(
        export.status.code(),
        Some(2),
        "memory.db-only commands refuse"
    );
    assert!(String::from_utf8_lossy(&export.stderr).contains("memory.backend"));

    let bad = data.path().join("bad.yaml");
    std::fs::write(&bad, "memory:\n  backend: cli\n").expect("write config");
    let output = std::process::Command::new(cairn_tests::cairn_bin())
        .args([
            "--config",
            &bad.display().to_string(),
            "run",
            "--plugins",
            &plugins.path().display().to_string(),
            "--data",
            &data_arg(data.path()),
        ])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("memory.backend"));
}

#[test]
fn hygiene_forgets_by_retention_at_most_every_interval_and_never_facts() {
    let dir = tempfile::tempdir().expect("data dir");
    let memory = cairn_tests::storage::open_memory(dir.path(), MemoryConfig::default());
    let day = 86_400_000;
    let old = cairn::store::now_ms() - 200 * day;
    let record = |id: &str, kind: &str, category: &str, session: Option<&str>| {
        serde_json::json!({
            "type": "entry", "id": id, "kind": kind, "content": format!("{id} content"),
            "category": category, "scope": {"user_id": "alice", "session_id": session},
            "importance": 5, "tags": [], "issue_refs": [], "pr_refs": [], "sources": [],
            "subject": null, "predicate": null, "valid_from": old, "valid_to": null,
            "recorded_at": old, "superseded_by": null, "forgotten_at": null
        })
        .to_string()
    };
    let session = |id: &str, state: &str| {
        serde_json::json!({"type": "session", "id": id, "user_id": "alice", "agent_id": "main",
            "started_at": old, "ended_at": old + 1000, "state": state})
        .to_string()
    };
    let lines = [
        session("chat:done", "consolidated"),
        session("chat:waiting", "pending"),
        record("mem_old_done", "episode", "conversation", Some("chat:done")),
        record(
            "mem_old_waiting",
            "episode",
            "conversation",
            Some("chat:waiting"),
        ),
        record("mem_old_fact", "fact", "conversation", None),
        record("mem_old_note", "reflection", "daily", None),
        record("mem_old_custom", "reflection", "custom", None),
    ];
    memory.import(&lines.join("\n")).expect("import");
    memory
        .store_blocking(NewMemory::new(
            MemoryKind::Core,
            "Alice is the project lead",
        ))
        .expect("store");

    let report = memory.hygiene(false).expect("hygiene");
    assert!(report.ran);
    assert_eq!(
        report.forgotten.get("conversation"),
        Some(&1),
        "{:?}",
        report.forgotten
    );
    assert_eq!(report.forgotten.get("daily"), Some(&1));
    assert_eq!(
        report.snapshot_entries,
        Some(1),
        "the snapshot of core memories was written"
    );
    assert!(dir.path().join("MEMORY_SNAPSHOT.md").is_file());
    let forgotten = |id: &str| {
        memory
            .get(id)
            .expect("get")
            .expect("kept")
            .forgotten_at
            .is_some()
    };
    assert!(forgotten("mem_old_done") && forgotten("mem_old_note"));
    assert!(
        !forgotten("mem_old_waiting"),
        "episodes wait for their consolidation"
    );
    assert!(!forgotten("mem_old_fact") && !forgotten("mem_old_custom"));
    assert_eq!(
        memory.audit_trail("mem_old_done").expect("audit")[0].actor,
        "hygiene"
    );
    assert!(
        !memory.hygiene(false).expect("hygiene").ran,
        "throttled to once per interval"
    );
    let stats = cli_json(&["memory", "stats", "--json", "--data", &data_arg(dir.path())]);
    assert!(stats["hygiene_last_run"].is_i64(), "{stats}");
}

#[test]
fn plugins_memory_writes_pass_the_autonomy_and_a_rate_per_plugin() {
    let plugins = PluginDir::new();
    probe(
        &plugins,
        "writer",
        "handler",
        "[\"user:alice\"]",
        "config:\n  user: alice\n  other: alice\n  forget: true\n",
    );
    let run = |autonomy: &str, per_minute: &str| {
        let data = tempfile::tempdir().expect("data dir");
        let mut host = Host::start(
            plugins.path(),
            data.path(),
            &[
                ("CAIRN_HTTP_LISTEN", "127.0.0.1:0"),
                ("CAIRN_MEMORY_AUTONOMY", autonomy),
                ("CAIRN_MEMORY_PLUGIN_WRITES_PER_MINUTE", per_minute),
            ],
        );
        host.wait_for("probe pending:", Duration::from_secs(60));
        let (status, log) = host.stop();
        assert!(status.success(), "{log}");
        let line = |name: &str| {
            log.lines()
                .find(|l| l.contains(&format!("probe {name}:")))
                .unwrap_or_default()
                .to_string()
        };
        (line("store-own"), line("forget"), line("store-other"))
    };

    let (own, forget, other) = run("supervised", "1");
    assert!(own.contains("probe store-own: ok"), "{own}");
    assert!(
        forget.contains("denied") && forget.contains("memory.autonomy: supervised"),
        "supervised plugins add, never take: {forget}"
    );
    assert!(
        other.contains("unavailable") && other.contains("memory.plugin_writes_per_minute"),
        "one write a minute: {other}"
    );

    let (own, forget, _) = run("read-only", "1");
    assert!(
        own.contains("denied") && own.contains("memory.autonomy: read-only"),
        "{own}"
    );
    assert!(forget.is_empty(), "nothing stored, nothing to forget");

    let (own, forget, _) = run("full", "5");
    assert!(own.contains("probe store-own: ok"), "{own}");
    assert!(forget.contains("probe forget: ok true"), "{forget}");
}
