//! What becomes of stored memory: lossless export and import, hydration from the snapshot,
//! and hygiene.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cairn::memory::{LocalMemory, MemoryConfig, MemoryKind, NewMemory};
use cairn::store::memory::{SessionStore, SqliteMemory};
use cairn_tests::memory_dataset;
use cairn_tests::{Host, PluginDir, cairn};

use super::{cli_json, data_arg, load_dataset, stored_id, user_scope};
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
    memory_db
        .end_idle(1_000, 2_000, Default::default())
        .wait()
        .expect("end");
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
    assert!(
        !fresh.path().join("memory.db").exists(),
        "nothing was half-imported, not even an empty memory.db"
    );

    // An entry superseded by one neither the file nor memory holds would be hidden from
    // recall as replaced by nothing: refused, into a fresh data dir and into a filled one.
    let mut orphan: serde_json::Value = serde_json::from_str(
        a.lines()
            .find(|line| line.contains(r#""type":"entry""#))
            .expect("an entry"),
    )
    .expect("json");
    orphan["id"] = "mem_orphan".into();
    orphan["superseded_by"] = "mem_nowhere".into();
    orphan["valid_to"] = orphan["valid_from"].clone();
    let orphaned = target.path().join("orphan.jsonl");
    std::fs::write(&orphaned, format!("{orphan}\n")).expect("write");
    for dir in [fresh.path(), target.path()] {
        let output = cairn(&[
            "memory",
            "import",
            &orphaned.display().to_string(),
            "--data",
            &data_arg(dir),
        ]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(
                r#"line 1: superseded_by: "mem_nowhere" is neither in the import nor in memory"#
            ),
            "{stderr}"
        );
    }
    // Nor may successors loop back (A by B, B by A): both would vanish.
    let mut other = orphan.clone();
    other["id"] = "mem_orphan_too".into();
    other["superseded_by"] = "mem_orphan".into();
    orphan["superseded_by"] = "mem_orphan_too".into();
    std::fs::write(&orphaned, format!("{orphan}\n{other}\n")).expect("write");
    let output = cairn(&[
        "memory",
        "import",
        &orphaned.display().to_string(),
        "--data",
        &data_arg(fresh.path()),
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "line 1: superseded_by: the chain mem_orphan → mem_orphan_too → mem_orphan comes back"
        ),
        "{stderr}"
    );
    assert!(!fresh.path().join("memory.db").exists(), "still nothing");
    orphan["superseded_by"] = any_id.as_str().into();
    // A replaced entry without valid_to would be recalled as current and as replaced.
    let mut still_current = orphan.clone();
    still_current["valid_to"] = serde_json::Value::Null;
    std::fs::write(&orphaned, format!("{still_current}\n")).expect("write");
    let output = cairn(&[
        "memory",
        "import",
        &orphaned.display().to_string(),
        "--data",
        &data_arg(target.path()),
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("line 1: superseded_by: ") && stderr.contains("but valid_to is null"),
        "{stderr}"
    );
    std::fs::write(&orphaned, format!("{orphan}\n")).expect("write");
    let imported = cli_json(&[
        "memory",
        "import",
        &orphaned.display().to_string(),
        "--json",
        "--data",
        &data_arg(target.path()),
    ]);
    assert_eq!(imported["entries"], 1, "a successor memory holds is found");
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
fn a_snapshot_record_memory_cannot_keep_is_refused_naming_its_line_not_dropped() {
    if cairn_tests::storage::reads_sqlite_files(
        "a_snapshot_record_memory_cannot_keep_is_refused_naming_its_line_not_dropped",
    ) {
        return;
    }
    let dir = tempfile::tempdir().expect("data dir");
    let data = data_arg(dir.path());
    {
        let memory = cairn_tests::storage::open_memory(dir.path(), MemoryConfig::default());
        for text in ["Ann prefers tea", "Ann works from Porto"] {
            memory
                .store_blocking(NewMemory::new(MemoryKind::Core, text))
                .expect("store");
        }
    }
    let written = cli_json(&["memory", "snapshot", "--json", "--data", &data]);
    assert_eq!(written["core_memories"], 2);
    let snapshot =
        std::fs::read_to_string(dir.path().join("MEMORY_SNAPSHOT.md")).expect("snapshot");
    let record = snapshot
        .lines()
        .find(|line| line.contains("\"importance\":"))
        .expect("a record with its importance");
    let importance = record
        .split("\"importance\":")
        .nth(1)
        .and_then(|rest| rest.split([',', '}']).next())
        .expect("its value")
        .to_string();
    for (edit, expected) in [
        (
            record.replace(&format!("\"importance\":{importance}"), "\"importance\":55"),
            "importance",
        ),
        (
            record.replace("\"valid_to\":null", "\"valid_to\":1"),
            "valid_to: 1 is before valid_from",
        ),
    ] {
        let edited_file = dir.path().join("edited.md");
        std::fs::write(&edited_file, snapshot.replace(record, &edit)).expect("write");
        let fresh = tempfile::tempdir().expect("fresh data dir");
        let hydrated = cairn(&[
            "memory",
            "snapshot",
            "--hydrate",
            &edited_file.display().to_string(),
            "--data",
            &data_arg(fresh.path()),
        ]);
        let stderr = String::from_utf8_lossy(&hydrated.stderr);
        assert_eq!(hydrated.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("edited.md line "),
            "names the file and line: {stderr}"
        );
        assert!(stderr.contains(expected), "says what is wrong: {stderr}");
        assert!(
            !fresh.path().join("memory.db").exists(),
            "nothing half-restored"
        );
    }
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
    ) + "\n## Carol owns the release calendar (user carol)\n\nShe updates it every Monday.\n";
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
        carol[0]["content"], "Carol owns the release calendar\n\nShe updates it every Monday.",
        "the heading is what to remember, the prose its detail: {carol}"
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
