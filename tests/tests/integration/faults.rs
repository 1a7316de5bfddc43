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
            // `cairn status` reads without the full check; it still tells a file that is
            // no database at all.
            if db != "memory.db" && matches!(damage, "emptied" | "header overwritten") {
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
