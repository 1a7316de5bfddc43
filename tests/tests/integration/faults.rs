//! The fault matrix through the real binary: damaged database files at start.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cairn_tests::{Host, PluginDir, cairn, status_json};

const LONG: Duration = Duration::from_secs(60);

/// Every file of a data dir (recursively) with its bytes, but SQLite's shared-memory
/// index (`-shm`, rebuilt by whoever opens the file) and empty WAL files (the same as none).
fn contents(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = all_files(dir);
    files.retain(|path, bytes| {
        let name = path.to_string_lossy();
        let index = name.ends_with("-shm");
        let empty_wal = name.ends_with("-wal") && bytes.is_empty();
        !(index || empty_wal)
    });
    files
}

/// Every file of a directory (recursively) with its bytes.
fn all_files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("read file");
                files.insert(path.strip_prefix(dir).expect("inside").to_path_buf(), bytes);
            }
        }
    }
    files
}

fn copy_dir(from: &Path, to: &Path) {
    for (relative, bytes) in all_files(from) {
        let target = to.join(relative);
        std::fs::create_dir_all(target.parent().expect("parent")).expect("mkdir");
        std::fs::write(target, bytes).expect("write");
    }
}

/// Fold the WAL into the file so damage to the file is damage to the data.
fn checkpoint(db: &Path) {
    let conn = rusqlite::Connection::open(db).expect("open");
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoint");
}

/// A way a file gets damaged, applied to a checkpointed database.
type Damage = (&'static str, fn(&Path));

/// The ways a file gets damaged.
const DAMAGE: [Damage; 4] = [
    ("truncated", |db| {
        let len = std::fs::metadata(db).expect("meta").len();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(db)
            .expect("open");
        file.set_len(len * 6 / 10).expect("truncate");
    }),
    ("emptied", |db| std::fs::write(db, b"").expect("empty")),
    ("header overwritten", |db| overwrite(db, 0, 100)),
    ("a page overwritten", |db| overwrite(db, 4096, 4096)),
];

fn overwrite(db: &Path, at: usize, len: usize) {
    let mut bytes = std::fs::read(db).expect("read");
    for (i, byte) in bytes.iter_mut().skip(at).take(len).enumerate() {
        *byte = (i * 31 + 7) as u8;
    }
    std::fs::write(db, bytes).expect("write");
}

#[test]
fn a_damaged_database_is_refused_at_start_naming_it_and_left_as_it_was() {
    if cairn_tests::storage::reads_sqlite_files(
        "a_damaged_database_is_refused_at_start_naming_it_and_left_as_it_was",
    ) {
        return;
    }
    let dir = PluginDir::new();
    dir.bundled("cli");
    let plugins = dir.path().display().to_string();
    let sound = tempfile::tempdir().expect("data");
    let mut host = Host::start(dir.path(), sound.path(), &[]);
    host.wait_for("cairn is running", LONG);
    host.type_line("remember the lighthouse");
    host.wait_until(LONG, "the reply", |log| log.contains("replied"));
    let (exit, _) = host.stop();
    assert!(exit.success());
    let stored = status_json(sound.path())["buffer"]["stored"].clone();
    assert_eq!(stored, 1);

    for db in ["buffer.db", "journal.db", "memory.db", "host.db"] {
        for (damage, apply) in DAMAGE {
            let data = tempfile::tempdir().expect("data");
            copy_dir(sound.path(), data.path());
            checkpoint(&data.path().join(db));
            apply(&data.path().join(db));
            let before = contents(data.path());
            let data_arg = data.path().display().to_string();
            let run = cairn(&["run", "--plugins", &plugins, "--data", &data_arg]);
            let stderr = String::from_utf8_lossy(&run.stderr);
            let case = format!("{db} {damage}");
            assert_eq!(run.status.code(), Some(2), "{case}: {stderr}");
            assert!(
                stderr.contains(&format!(
                    "{}: the database is damaged",
                    data.path().join(db).display()
                )),
                "{case}: the refusal names the file: {stderr}"
            );
            assert!(
                stderr.contains("move it aside"),
                "{case}: and says what to do"
            );
            let after = contents(data.path());
            let changed: Vec<_> = before
                .keys()
                .chain(after.keys())
                .filter(|file| before.get(*file) != after.get(*file))
                .collect();
            assert!(
                changed.is_empty(),
                "{case}: the refusal changed {changed:?}"
            );
            // `cairn status` reads without the full check (and takes an empty file for one
            // a host is creating); it still tells a file that is no database at all.
            if db != "memory.db" && damage == "header overwritten" {
                let status = cairn(&["status", "--data", &data_arg]);
                assert_eq!(status.status.code(), Some(2), "{case}: cairn status");
            }
        }
    }
    // The sound copy still starts and holds what it was given.
    let mut host = Host::start(dir.path(), sound.path(), &[]);
    host.wait_for("cairn is running", LONG);
    let (exit, _) = host.stop();
    assert!(exit.success());
    assert_eq!(status_json(sound.path())["buffer"]["stored"], 1);
}

/// A small tmpfs mounted on a temp dir for one test, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// Mount `megabytes` of tmpfs; `None` where this process may not mount (not root).
    fn mount(megabytes: u32) -> Option<Self> {
        let dir = tempfile::tempdir().expect("mount point");
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={megabytes}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        mounted.then_some(Self { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Bytes still free.
    fn free(&self) -> u64 {
        let out = std::process::Command::new("df")
            .args(["-B1", "--output=avail"])
            .arg(self.path())
            .output()
            .expect("df");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .expect("df prints the free bytes")
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

const SECRET: &str = "full-disk-secret";

/// Post delivery `i` (a body of about 2 KB); whether the host acknowledged it (202), else
/// the answer.
fn post(client: &ureq::Agent, port: u16, i: usize) -> Result<(), String> {
    let body = serde_json::to_vec(&serde_json::json!({
        "action": "opened",
        "repository": {"full_name": "octo/full-disk"},
        "pull_request": {"number": i % 5, "title": format!("change {i}")},
        "sender": {"login": "octocat"},
        "seq": i,
        "padding": "p".repeat(2000),
    }))
    .expect("serialise");
    let signature = cairn_tests::github_signature(SECRET.as_bytes(), &body);
    match cairn_tests::post_webhook(
        client,
        port,
        "pull_request",
        &format!("d-{i}"),
        &body,
        Some(&signature),
    ) {
        Ok((202, _)) => Ok(()),
        Ok((status, answer)) => Err(format!("{status} {answer}")),
        Err(e) => Err(e.to_string()),
    }
}

#[test]
fn a_full_disk_refuses_new_messages_keeps_the_acknowledged_ones_and_recovers() {
    if cairn_tests::storage::reads_sqlite_files(
        "a_full_disk_refuses_new_messages_keeps_the_acknowledged_ones_and_recovers",
    ) {
        return;
    }
    let Some(disk) = SmallDisk::mount(48) else {
        eprintln!("*** SKIPPED: cannot mount a tmpfs here (needs root) ***");
        return;
    };
    let dir = PluginDir::new();
    dir.bundled("webhook");
    let data = disk.path().join("data");
    let env = [
        ("CAIRN_ROUTER_BATCH_WINDOW_MS", "100"),
        ("CAIRN_HTTP_LISTEN", "127.0.0.1:0"),
        ("CAIRN_WEBHOOK_SECRET", SECRET),
    ];
    let mut host = Host::start(dir.path(), &data, &env);
    let port = host.webhook_port();
    let client = cairn_tests::http_client();
    let mut acknowledged = Vec::new();
    let mut next = 0;
    for _ in 0..20 {
        if post(&client, port, next).is_ok() {
            acknowledged.push(next);
        }
        next += 1;
    }
    assert_eq!(
        acknowledged.len(),
        20,
        "the host takes messages before the disk fills"
    );

    // Leave about 300 KB free, then send until the host refuses.
    let filler = disk.path().join("filler");
    let fill = disk.free().saturating_sub(300 << 10) as usize;
    std::fs::write(&filler, vec![0u8; fill]).expect("fill the disk");
    let mut refused = 0;
    while refused < 20 {
        assert!(
            next < 5_000,
            "the disk never filled: {} acknowledged",
            acknowledged.len()
        );
        match post(&client, port, next) {
            Ok(()) => acknowledged.push(next),
            Err(answer) => {
                assert!(
                    answer.starts_with("503"),
                    "a full disk is unavailability: {answer}"
                );
                assert!(answer.contains("the disk is full"), "and says so: {answer}");
                refused += 1;
            }
        }
        next += 1;
    }
    let acknowledged_while_filling = acknowledged.len();
    host.wait_until(LONG, "a clear error about the full disk", |log| {
        log.contains("the disk is full")
    });

    // Space returns: the host takes messages again and finishes what it held.
    std::fs::remove_file(&filler).expect("free the disk");
    let mut resumed = 0;
    let deadline = std::time::Instant::now() + LONG;
    while resumed < 20 {
        assert!(
            std::time::Instant::now() < deadline,
            "the host never took messages again"
        );
        if post(&client, port, next).is_ok() {
            acknowledged.push(next);
            resumed += 1;
        } else {
            std::thread::sleep(Duration::from_millis(50));
        }
        next += 1;
    }
    host.wait_until(LONG, "every message routed and answered", |_| {
        let status = status_json(&data);
        let buffer = &status["buffer"];
        let batches = &buffer["batches"];
        buffer["depth"] == 0
            && batches.get("main/queued").is_none()
            && batches.get("main/running").is_none()
    });
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");
    assert!(!log.contains("panicked"), "{log}");

    let db = cairn_tests::buffer_db(&data);
    let mut stored: BTreeMap<i64, usize> = BTreeMap::new();
    let mut rows = db
        .prepare("SELECT json_extract(payload, '$.body.seq') FROM messages")
        .expect("query");
    for seq in rows.query_map([], |r| r.get::<_, i64>(0)).expect("rows") {
        *stored.entry(seq.expect("seq")).or_default() += 1;
    }
    let lost: Vec<_> = acknowledged
        .iter()
        .filter(|i| !stored.contains_key(&(**i as i64)))
        .collect();
    let doubled: Vec<_> = stored.iter().filter(|(_, n)| **n > 1).collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
    assert!(doubled.is_empty(), "stored twice: {doubled:?}");
    let unfinished: i64 = db
        .query_row(
            "SELECT count(*) FROM batches WHERE status NOT IN ('done', 'failed', 'dropped', 'spawned')",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(unfinished, 0, "every batch finished");

    // Every stored message was journaled once and every main batch answered once.
    let events = cairn_tests::journal_events(&data);
    let received = events
        .iter()
        .filter(|e| e["topic"] == "message.received")
        .count();
    assert_eq!(
        received,
        stored.len(),
        "one message.received per stored message"
    );
    let mut answered: BTreeMap<i64, usize> = BTreeMap::new();
    for event in events.iter().filter(|e| e["topic"] == "agent.response") {
        let payload: serde_json::Value =
            serde_json::from_str(event["payload"].as_str().expect("payload")).expect("json");
        *answered
            .entry(payload["batch_id"].as_i64().expect("batch"))
            .or_default() += 1;
    }
    assert!(
        answered.values().all(|n| *n == 1),
        "a batch answered twice: {answered:?}"
    );
    let waited_out = log.matches("written now that there is space").count();
    eprintln!(
        "full disk: {} acknowledged ({acknowledged_while_filling} before and while filling), {refused} refused, {resumed} after space returned, {} batches answered, {waited_out} host writes waited for space",
        acknowledged.len(),
        answered.len()
    );
    for line in log.lines().filter(|l| l.contains("disk is full")).take(8) {
        eprintln!("  {line}");
    }
}
