//! An operator's mistakes on the command line: each exits 2, names the argument, setting or
//! file at fault and what was expected, and writes nothing.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use cairn_tests::{Host, PluginDir, cairn, cairn_bin, journal_events, storage, test_env};

const LONG: Duration = Duration::from_secs(60);

fn refused(args: &[&str], expected: &str) {
    let output = cairn(args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(expected), "{args:?}: {stderr}");
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn mistaken_arguments_exit_2_naming_them_and_write_nothing() {
    let data = tempfile::tempdir().expect("data");
    let d = data.path().display().to_string();
    refused(&["memory", "list", "--limit", "0", "--data", &d], "--limit");
    refused(
        &[
            "memory",
            "search",
            "tea",
            "--min-relevance",
            "2",
            "--data",
            &d,
        ],
        "--min-relevance",
    );
    refused(
        &[
            "memory", "search", "tea", "--user", "\u{200b}", "--data", &d,
        ],
        "--user",
    );
    refused(
        &[
            "memory",
            "search",
            "tea",
            "--since",
            "2026-05-01",
            "--until",
            "2026-01-01",
            "--data",
            &d,
        ],
        "--since 2026-05-01T00:00:00+00:00 is not before --until 2026-01-01T00:00:00+00:00",
    );
    // Seconds since the epoch given where ms are read: 1970-01-19, refused.
    refused(
        &[
            "send",
            "--channel",
            "cli",
            "--conversation",
            "c",
            "--at",
            "1600000000",
            "--data",
            &d,
            "hi",
        ],
        "`1600000000` as ms since the epoch is 1970-01-19 12:26: seconds, most likely; expected ms (1600000000000)",
    );
    if !storage::on_postgres() {
        refused(
            &[
                "journal",
                "replay",
                "--subscriber",
                "x",
                "--from",
                "5",
                "--data",
                &d,
            ],
            "no journal in",
        );
        // An existing dir no host ran on (a mistyped --data): memory is not created there.
        for command in [
            &["memory", "search", "tea"][..],
            &["memory", "list"],
            &["memory", "stats"],
        ] {
            let args: Vec<&str> = command.iter().copied().chain(["--data", &d]).collect();
            refused(&args, "(no memory.db): no host has run on this data dir");
        }
        // One holding only a snapshot memory.db could not be hydrated from.
        let snapshot_only = tempfile::tempdir().expect("dir");
        std::fs::write(snapshot_only.path().join("MEMORY_SNAPSHOT.md"), "garbage\n")
            .expect("snapshot");
        let s = snapshot_only.path().display().to_string();
        refused(&["memory", "list", "--data", &s], "MEMORY_SNAPSHOT.md");
        assert_eq!(
            entries(snapshot_only.path()),
            ["MEMORY_SNAPSHOT.md"],
            "no memory.db made"
        );
    }
    let a_file = data.path().join("a-file");
    std::fs::write(&a_file, "not a directory").expect("file");
    let f = a_file.display().to_string();
    refused(&["status", "--data", &f], "is not a directory");
    let typo = data.path().join("typo").display().to_string();
    let mut mistakes = vec![
        (&f, "hello", "is not a directory"),
        (&d, "  ", "expected some words"),
    ];
    if !storage::on_postgres() {
        // (On a shared database the buffer is not in the data dir.)
        mistakes.push((
            &typo,
            "hello",
            "typo does not exist: expected the data dir of a host",
        ));
    }
    for (data_dir, text, expected) in mistakes {
        let send = ["send", "--channel", "cli", "--conversation", "c"];
        refused(&[&send[..], &["--data", data_dir, text]].concat(), expected);
    }
    refused(
        &[
            "send",
            "--channel",
            "cli",
            "--conversation",
            " ",
            "--data",
            &d,
            "hello",
        ],
        "message rejected: --conversation: expected a non-empty string",
    );
    refused(
        &[
            "send",
            "--channel",
            "cli",
            "--conversation",
            "\u{200B}",
            "--data",
            &d,
            "hello",
        ],
        "message rejected: --conversation: expected a non-empty string",
    );
    refused(
        &[
            "send",
            "--channel",
            "cli",
            "--conversation",
            "c",
            "--priority",
            "-5",
            "--data",
            &d,
            "hello",
        ],
        "--priority <PRIORITY>': expected a whole number from 0 to 4294967295 (lower is served first)",
    );
    refused(
        &[
            "run",
            "--plugins",
            &d,
            "--data",
            &d,
            "--console",
            "localhost:9999",
        ],
        "expected IP:PORT, such as 127.0.0.1:8790 (an IP address, not a host name",
    );
    refused(
        &[
            "memory",
            "search",
            "tea",
            "--min-relevance",
            "-0.1",
            "--data",
            &d,
        ],
        "`-0.1`: expected a number from 0 to 1",
    );
    refused(
        &["journal", "tail", "--limit", "0", "--data", &d],
        "--limit",
    );
    let long_name = "x".repeat(600);
    refused(
        &[
            "send",
            "--channel",
            "cli",
            "--conversation",
            "c",
            "--sender",
            &long_name,
            "--data",
            &d,
            "hello",
        ],
        "message rejected: --sender: expected a name of at most 512 bytes, got 600",
    );
    refused(
        &["memory", "search", "", "--data", &d],
        "expected some words",
    );
    refused(
        &["send", "--channel", "cli", "--data", &d, "\u{200B}\u{2060}"],
        "expected some words",
    );
    let invisible = data.path().join("invisible.json");
    std::fs::write(&invisible, r#"{"text": "\u200b"}"#).expect("write");
    let invisible = invisible.display().to_string();
    refused(
        &send_json(&d, &invisible),
        "--json: its `text` is only blanks or invisible characters",
    );
    std::fs::write(&invisible, r#"{"text": 5}"#).expect("write");
    refused(
        &send_json(&d, &invisible),
        "--json: its `text` is 5: expected a string",
    );
    // An editor's byte-order mark is not part of the JSON.
    std::fs::write(&invisible, "\u{feff}{\"text\": \"marked by an editor\"}").expect("write");
    let elsewhere = tempfile::tempdir().expect("another data dir");
    let marked = cairn(&send_json(
        &elsewhere.path().display().to_string(),
        &invisible,
    ));
    assert!(
        marked.status.success(),
        "{}",
        String::from_utf8_lossy(&marked.stderr)
    );
    std::fs::remove_file(&invisible).expect("remove");
    if !storage::on_postgres() {
        // (On PostgreSQL memory is not in the data dir.)
        let nowhere = data.path().join("no-such-data-dir").display().to_string();
        refused(&["memory", "list", "--data", &nowhere], "does not exist");
        refused(&["status", "--data", &nowhere], "does not exist");
        refused(
            &[
                "journal",
                "unsubscribe",
                "--subscriber",
                "x",
                "--data",
                &nowhere,
            ],
            "does not exist",
        );
        refused(&["journal", "tail", "--data", &nowhere], "does not exist");
        // A dir where no host ran is most likely the wrong one, for reads as for repairs.
        refused(&["buffer", "failed", "--data", &d], "no buffer in");
        refused(&["journal", "dead-letters", "--data", &d], "no journal in");
        refused(&["journal", "tail", "--data", &d], "no journal in");
    }
    assert_eq!(entries(data.path()), ["a-file"], "nothing written");

    // A console set where the webhook server listens, or an LLM provider without its key,
    // is refused before anything starts.
    let dir = PluginDir::new();
    dir.bundled("webhook");
    for (extra, settings, expected) in [
        (
            &["--console", "127.0.0.1:18795"][..],
            &[("CAIRN_HTTP_LISTEN", "127.0.0.1:18795")][..],
            "console.listen 127.0.0.1:18795 is where the webhook server listens",
        ),
        (
            &[][..],
            &[("CAIRN_AGENT_LLM_PROVIDER", "anthropic")][..],
            "agent.llm.api_key_env: anthropic at https://api.anthropic.com needs an API key",
        ),
        (
            &[][..],
            &[
                ("CAIRN_AGENT_LLM_PROVIDER", "anthropic"),
                ("CAIRN_AGENT_LLM_API_KEY_ENV", "CAIRN_TEST_ANTHROPIC_KY"),
                ("CAIRN_TEST_ANTHROPIC_KEY", "sk-test"),
            ][..],
            "agent.llm.api_key_env (CAIRN_AGENT_LLM_API_KEY_ENV or the config file): \
             the environment variable `CAIRN_TEST_ANTHROPIC_KY` is not set or is empty: \
             expected the anthropic API key in it (did you mean `CAIRN_TEST_ANTHROPIC_KEY`, \
             which is set?)",
        ),
    ] {
        let output = Command::new(cairn_bin())
            .args(["run", "--plugins"])
            .arg(dir.path())
            .args(["--data", &d])
            .args(extra)
            .envs(test_env())
            .envs(settings.iter().copied())
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run cairn");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert_eq!(entries(data.path()), ["a-file"], "nothing written");
    }

    let out_dir = data.path().join("out");
    std::fs::create_dir(&out_dir).expect("out dir");
    let o = out_dir.display().to_string();
    refused(
        &["memory", "snapshot", "--output", &o, "--data", &d],
        "--output",
    );
    refused(
        &["memory", "export", "--output", &o, "--data", &d],
        "--output",
    );
    let missing = data.path().join("no-such-dir/x.md").display().to_string();
    refused(
        &["memory", "snapshot", "--output", &missing, "--data", &d],
        "does not exist",
    );
    assert!(
        entries(data.path())
            .iter()
            .all(|name| !name.ends_with(".tmp")),
        "no temporary file left: {:?}",
        entries(data.path())
    );
}

#[test]
fn a_setting_out_of_range_names_the_variable_that_set_it() {
    for (variable, value, field) in [
        (
            "CAIRN_MEMORY_RECALL_MIN_RELEVANCE",
            "5",
            "memory.recall.min_relevance",
        ),
        (
            "CAIRN_MEMORY_RECALL_HALF_LIFE_HOURS",
            "0",
            "memory.recall.half_life_hours",
        ),
        (
            "CAIRN_MEMORY_RECALL_SUCCESSOR_PROBES",
            "1000000",
            "memory.recall.successor_probes: expected a whole number from 0 to 50",
        ),
        (
            "CAIRN_MEMORY_RECALL_CANDIDATES_PER_HIT",
            "0",
            "memory.recall.candidates_per_hit: expected a whole number from 1 to 100",
        ),
    ] {
        let output = Command::new(cairn_bin())
            .arg("config")
            .envs(test_env())
            .env(variable, value)
            .output()
            .expect("run cairn");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{variable}={value}: {stderr}"
        );
        assert!(
            stderr.contains(&format!("{variable}: {field}")),
            "{variable}={value}: {stderr}"
        );
    }
}

#[test]
fn a_mistyped_setting_variable_is_named_at_start_with_the_one_meant() {
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let data = tempfile::tempdir().expect("data");
    let mut host = Host::start(
        plugins.path(),
        data.path(),
        &[
            ("CAIRN_AGENT_LLM_PROVDER", "openai"),
            ("CAIRN_GREETING", "hi"),
        ],
    );
    host.wait_for("cairn is running", LONG);
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    assert!(
        log.contains("CAIRN_AGENT_LLM_PROVDER is set but no setting or plugin reads it (did you mean CAIRN_AGENT_LLM_PROVIDER?)"),
        "{log}"
    );
    assert!(
        log.contains("LLM provider: offline"),
        "the default stands: {log}"
    );
    assert!(log.contains("CAIRN_GREETING is set"), "{log}");
    // Granted to a plugin, a variable is read.
    let plugins = PluginDir::new();
    plugins.bundled_with("cli", |manifest| {
        manifest.replace(
            "capabilities:\n",
            "capabilities:\n  env: [CAIRN_GREETING]\n",
        )
    });
    let mut host = Host::start(plugins.path(), data.path(), &[("CAIRN_GREETING", "hi")]);
    host.wait_for("cairn is running", LONG);
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    assert!(!log.contains("CAIRN_GREETING is set"), "{log}");
    // Granted only to a plugin the host config disables, it is named as such.
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    plugins.bundled_with("counter", |manifest| {
        manifest.replace(
            "capabilities:\n",
            "capabilities:\n  env: [CAIRN_GREETING]\n",
        )
    });
    let env = [
        ("CAIRN_GREETING", "hi"),
        ("CAIRN_PLUGINS_DISABLED", "[counter]"),
    ];
    let mut host = Host::start(plugins.path(), data.path(), &env);
    host.wait_for("cairn is running", LONG);
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    assert!(
        log.contains(
            "CAIRN_GREETING is granted only to plugin `counter`, which plugins.disabled turns \
             off: nothing reads it while it is"
        ),
        "{log}"
    );
}

#[test]
fn a_replay_past_the_journals_end_and_an_overlong_line_are_refused() {
    let data = tempfile::tempdir().expect("data");
    let dir = PluginDir::new();
    dir.bundled("cli");
    let mut host = Host::start(dir.path(), data.path(), &[]);
    host.type_line(&"é".repeat(40_000));
    host.type_line("\u{200B}\u{FEFF}");
    host.type_line("hello after the long line");
    host.wait_for("cairn: a line longer than 64 KiB was not sent", LONG);
    host.wait_for("I received: user: hello after the long line", LONG);
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");
    let events = journal_events(data.path());
    let received: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["topic"] == "message.received")
        .collect();
    assert_eq!(
        received.len(),
        1,
        "only the short line is a message (not the long one, nor the invisible one): {received:?}"
    );

    // A question nothing answers: --explain says why nothing was recalled.
    let d = data.path().display().to_string();
    let searched = cairn(&[
        "memory",
        "search",
        "quantum chromodynamics lecture",
        "--explain",
        "--data",
        &d,
    ]);
    let said = String::from_utf8_lossy(&searched.stdout);
    assert!(said.contains("nothing recalled"), "{said}");
    assert!(
        said.contains("is under memory.recall.") || said.contains("no memory in this scope"),
        "the reason is given: {said}"
    );

    let last = events
        .iter()
        .filter_map(|e| e["seq"].as_i64())
        .max()
        .expect("events");
    let past = (last + 2).to_string();
    refused(
        &[
            "journal",
            "replay",
            "--subscriber",
            "host.lifecycle",
            "--from",
            &past,
            "--data",
            &d,
        ],
        "--from",
    );
    refused(
        &[
            "journal",
            "dead-letters",
            "retry",
            "--subscriber",
            "nobody",
            "--data",
            &d,
        ],
        "--subscriber: no subscriber `nobody`",
    );
    refused(
        &[
            "journal",
            "dead-letters",
            "discard",
            "--id",
            "999999",
            "--data",
            &d,
        ],
        "--id: no dead letter #999999",
    );
    refused(
        &["memory", "purge", "--id", "no-such-memory", "--data", &d],
        "--id: no memory `no-such-memory`",
    );
    an_import_that_would_drop_a_field_or_double_an_id_writes_nothing(&d);
    if !storage::on_postgres() {
        // (Checked against the data dir's status.db, which shared storage does not have.)
        let typo = [
            "send",
            "--channel",
            "clii",
            "--conversation",
            "c",
            "--data",
            &d,
            "hi",
        ];
        refused(&typo, "ran no channel `clii` (its channels: cli)");
    }
    let next = (last + 1).to_string();
    let replayed = cairn(&[
        "journal",
        "replay",
        "--subscriber",
        "host.lifecycle",
        "--from",
        &next,
        "--data",
        &d,
    ]);
    assert!(
        replayed.status.success(),
        "{}",
        String::from_utf8_lossy(&replayed.stderr)
    );
}

#[test]
fn a_taken_console_port_is_refused_and_a_new_data_dir_is_not_left_behind() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let address = taken.local_addr().expect("address").to_string();
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let parent = tempfile::tempdir().expect("parent");
    let data = parent.path().join("fresh");
    let stderr = refused_run(&plugins, &data, &["--console", &address]);
    assert!(stderr.contains("expected a free port"), "{stderr}");
    assert!(!data.exists(), "{:?}", entries(parent.path()));
}

/// `cairn send` of the payload in `file` to data dir `data`.
fn send_json<'a>(data: &'a str, file: &'a str) -> [&'a str; 9] {
    [
        "send",
        "--channel",
        "cli",
        "--conversation",
        "c",
        "--data",
        data,
        "--json",
        file,
    ]
}

/// `cairn run` on `plugins` and `data` with `extra` arguments, refused as bad input (exit 2):
/// its stderr.
fn refused_run(plugins: &PluginDir, data: &std::path::Path, extra: &[&str]) -> String {
    let (plugins, data) = (
        plugins.path().display().to_string(),
        data.display().to_string(),
    );
    let mut args = vec!["run", "--plugins", &plugins, "--data", &data];
    args.extend_from_slice(extra);
    let out = cairn(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    stderr
}

#[test]
fn a_disabled_plugin_the_directory_does_not_hold_is_refused() {
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    plugins.bundled("counter");
    let parent = tempfile::tempdir().expect("parent");
    let config = parent.path().join("cairn.yaml");
    std::fs::write(&config, "plugins:\n  disabled: [countr]\n").expect("config");
    let data = parent.path().join("fresh");
    let stderr = refused_run(
        &plugins,
        &data,
        &["--config", &config.display().to_string()],
    );
    assert!(
        stderr.contains(
            "plugins.disabled (CAIRN_PLUGINS_DISABLED or the config file): no plugin `countr` in"
        ) && stderr.contains("expected one of cli, counter"),
        "{stderr}"
    );
    assert!(!data.exists(), "{:?}", entries(parent.path()));
}

#[test]
fn plugins_check_answers_for_the_run_plugins_disabled_leaves_out() {
    let plugins = PluginDir::new();
    plugins.bundled_all(&["cli", "counter"]);
    let parent = tempfile::tempdir().expect("parent");
    let config = parent.path().join("cairn.yaml");
    let dir = plugins.path().display().to_string();
    let check = |disabled: &str| {
        std::fs::write(&config, format!("plugins:\n  disabled: [{disabled}]\n")).expect("config");
        cairn(&[
            "plugins",
            "check",
            &dir,
            "--config",
            &config.display().to_string(),
        ])
    };
    let checked = check("counter");
    let stdout = String::from_utf8_lossy(&checked.stdout);
    assert!(checked.status.success(), "{checked:?}");
    assert!(
        stdout.contains("1 plugin(s), all valid")
            && stdout.contains("not run (plugins.disabled): counter")
            && !stdout.contains(". counter "),
        "{stdout}"
    );
    // A mistyped id is refused as `cairn run` refuses it.
    let mistyped = check("countr");
    let stderr = String::from_utf8_lossy(&mistyped.stderr);
    assert_eq!(mistyped.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no plugin `countr` in") && stderr.contains("expected one of cli, counter"),
        "{stderr}"
    );
    // A manifest named in capitals is a manifest too.
    std::fs::rename(
        plugins.path().join("counter.yaml"),
        plugins.path().join("COUNTER.YAML"),
    )
    .expect("rename");
    let checked = cairn(&["plugins", "check", &dir]);
    let stdout = String::from_utf8_lossy(&checked.stdout);
    assert!(stdout.contains("2 plugin(s), all valid"), "{stdout}");
}

#[test]
fn a_refused_import_or_hydration_into_a_new_data_dir_leaves_no_trace() {
    if storage::reads_sqlite_files(
        "a_refused_import_or_hydration_into_a_new_data_dir_leaves_no_trace",
    ) {
        return;
    }
    let parent = tempfile::tempdir().expect("parent");
    let data = parent.path().join("fresh");
    let d = data.display().to_string();
    let file = parent.path().join("memories.jsonl");
    std::fs::write(&file, "{\"type\":\"entry\"}\n").expect("write");
    let path = file.display().to_string();
    refused(
        &["memory", "import", &path, "--data", &d],
        "memories.jsonl: line 1: ",
    );
    // Bytes that are not UTF-8 are named by line and column, as a bad record is.
    let mut bytes = b"{\"type\":\"entry\"}\n\n{\"content\": \"n".to_vec();
    bytes.extend([0xE9, b't', b'e', b'"', b'}', b'\n']);
    let latin1 = parent.path().join("latin1.jsonl");
    std::fs::write(&latin1, bytes).expect("write");
    refused(
        &[
            "memory",
            "import",
            &latin1.display().to_string(),
            "--data",
            &d,
        ],
        "latin1.jsonl: line 3: byte 0xE9 at column 15 is not UTF-8",
    );
    assert!(
        !data.exists(),
        "no data dir, no memory.db: {:?}",
        entries(parent.path())
    );
    // A file that is no snapshot, or a snapshot with a broken section, hydrates nothing.
    refused(
        &["memory", "snapshot", "--hydrate", &path, "--data", &d],
        "holds no `## ` section and no `# ` title: expected a memory snapshot",
    );
    let broken = parent.path().join("snapshot.md");
    std::fs::write(&broken, "# Cairn memory snapshot\n\n## (user ann)\n").expect("write");
    let broken = broken.display().to_string();
    refused(
        &["memory", "snapshot", "--hydrate", &broken, "--data", &d],
        "snapshot.md line 3: `## (user ann)` holds nothing to remember",
    );
    assert!(!data.exists(), "{:?}", entries(parent.path()));
    // A file holding nothing (blank lines, a snapshot's title alone) brings nothing: until
    // 2026-12-04 it made the data dir and an empty memory.db, `imported 0 memories`.
    let blank = parent.path().join("blank.jsonl");
    std::fs::write(&blank, "\n  \n").expect("write");
    let title = parent.path().join("title.md");
    std::fs::write(&title, "# Cairn memory snapshot\n").expect("write");
    let (blank, title) = (blank.display().to_string(), title.display().to_string());
    for args in [
        &["memory", "import", &blank, "--data", &d][..],
        &["memory", "import", "--json", &blank, "--data", &d],
        &["memory", "snapshot", "--hydrate", &title, "--data", &d],
    ] {
        refused(args, "holds no memories");
        refused(args, "which has no memory.db, so none was made");
    }
    assert!(!data.exists(), "{:?}", entries(parent.path()));
    // An empty data dir stays empty too.
    std::fs::create_dir(&data).expect("data dir");
    refused(
        &["memory", "import", &path, "--data", &d],
        "nothing was imported",
    );
    refused(
        &["memory", "import", &blank, "--data", &d],
        "holds no memories",
    );
    assert!(entries(&data).is_empty(), "{:?}", entries(&data));
}

/// `memory import` of an export with a field added, or with a line given twice: exit 2
/// naming the line, and memory as it was.
fn an_import_that_would_drop_a_field_or_double_an_id_writes_nothing(data: &str) {
    let exported = cairn(&["memory", "export", "--data", data]);
    assert!(exported.status.success(), "export");
    let lines: Vec<String> = String::from_utf8_lossy(&exported.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let (at, entry) = lines
        .iter()
        .enumerate()
        .find(|(_, line)| line.starts_with(r#"{"type":"entry""#))
        .expect("an entry in the export");
    let changed = entry.replacen(r#""type":"entry","#, r#""type":"entry","mood":"calm","#, 1);
    for (edited, expected) in [
        (
            changed,
            format!("line {}: entry record: unknown field mood", at + 1),
        ),
        (
            format!("{entry}\n{entry}"),
            format!("line {}: entry id", at + 2),
        ),
    ] {
        let mut file_lines = lines.clone();
        file_lines[at] = edited;
        let file = tempfile::NamedTempFile::new().expect("import file");
        std::fs::write(file.path(), file_lines.join("\n")).expect("write");
        let path = file.path().display().to_string();
        refused(&["memory", "import", &path, "--data", data], &expected);
    }
    let after = cairn(&["memory", "export", "--data", data]);
    assert_eq!(after.stdout, exported.stdout, "memory unchanged");
}

/// An export or snapshot `--output` never replaces what it must not: a store of the data
/// dir (until 2026-12-04 `--output <data>/memory.db` wrote JSONL over every memory), any
/// other SQLite database, a device or a FIFO (each was replaced by a regular file, exit 0).
/// Through a symbolic link it replaces the file the link names and keeps the link.
#[test]
fn an_export_never_replaces_a_database_a_device_or_a_fifo_and_writes_through_a_link() {
    if storage::reads_sqlite_files(
        "an_export_never_replaces_a_database_a_device_or_a_fifo_and_writes_through_a_link",
    ) {
        return;
    }
    let parent = tempfile::tempdir().expect("parent");
    let data = parent.path().join("data");
    let d = data.display().to_string();
    cairn_tests::import_one_memory(&data);
    let memory_db = data.join("memory.db");
    let before = std::fs::read(&memory_db).expect("memory.db");
    let other_db = parent.path().join("other.db");
    std::fs::copy(&memory_db, &other_db).expect("copy");
    let fifo = parent.path().join("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo")
            .success()
    );
    let path = |p: &Path| p.display().to_string();
    for (output, expected) in [
        (path(&memory_db), "is one of the data dir's own files"),
        (
            path(&data.join("memory.db-wal")),
            "is one of the data dir's own files",
        ),
        (path(&other_db), "is an SQLite database"),
        (path(&fifo), "is not a regular file"),
        ("/dev/null".to_string(), "is not a regular file"),
    ] {
        for command in ["export", "snapshot"] {
            refused(
                &["memory", command, "--output", &output, "--data", &d],
                &format!("--output: {output}: {expected}"),
            );
        }
    }
    assert_eq!(std::fs::read(&memory_db).expect("memory.db"), before);
    // A limit past what SQL takes is all of them (until 2026-12-04 `datatype mismatch`).
    let listed = cairn(&[
        "memory",
        "list",
        "--limit",
        "9223372036854775808",
        "--data",
        &d,
    ]);
    assert!(
        listed.status.success()
            && String::from_utf8_lossy(&listed.stdout).contains("I live in Lisbon"),
        "{listed:?}"
    );
    let fifo_type = std::fs::symlink_metadata(&fifo).expect("fifo").file_type();
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&fifo_type));

    let target = parent.path().join("latest.jsonl");
    std::fs::write(&target, "old\n").expect("write");
    let link = parent.path().join("link.jsonl");
    std::os::unix::fs::symlink("latest.jsonl", &link).expect("symlink");
    let exported = cairn(&["memory", "export", "--output", &path(&link), "--data", &d]);
    assert!(exported.status.success(), "{exported:?}");
    assert!(
        std::fs::symlink_metadata(&link)
            .expect("link")
            .file_type()
            .is_symlink()
    );
    let written = std::fs::read_to_string(&target).expect("target");
    assert!(written.contains("I live in Lisbon"), "{written}");
}

/// `cairn send --json` reads no more than `buffer.max_payload_bytes` before it refuses (until
/// 2026-12-04 it read the whole input first: `--json /dev/zero` grew without bound), names
/// where input stops being UTF-8, and a variable that is not UTF-8 is no panic: a `CAIRN_`
/// one is refused by name (exit 2), any other is not Cairn's business (until 2026-12-04
/// `FOO=$'\xff'` made every command panic).
#[test]
fn a_message_past_the_payload_limit_or_not_utf8_and_a_variable_not_utf8_are_named() {
    use std::os::unix::ffi::OsStrExt;

    let parent = tempfile::tempdir().expect("parent");
    let data = parent.path().join("data");
    std::fs::create_dir(&data).expect("data dir");
    let d = data.display().to_string();
    let limited = |args: &[&str]| {
        Command::new(cairn_bin())
            .args(args)
            .envs(test_env())
            .env("CAIRN_BUFFER_MAX_PAYLOAD_BYTES", "1000")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run cairn")
    };
    let latin1 = parent.path().join("latin1.json");
    std::fs::write(&latin1, b"{\"text\": \"caf\xE9\"}").expect("write");
    let latin1 = latin1.display().to_string();
    for (file, expected) in [
        (
            "/dev/zero",
            "message rejected: --json /dev/zero: more than 1000 bytes; expected at most buffer.max_payload_bytes (1000 bytes)",
        ),
        (latin1.as_str(), "byte 14 is not UTF-8: expected JSON text"),
    ] {
        let output = limited(&send_json(&d, file));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    }
    assert_eq!(entries(&data), Vec::<String>::new(), "nothing stored");

    let not_utf8 = std::ffi::OsStr::from_bytes(b"\xFF");
    let with_variable = |name: &str| {
        Command::new(cairn_bin())
            .args(["config", "--data", &d])
            .envs(test_env())
            .env(name, not_utf8)
            .output()
            .expect("run cairn")
    };
    let output = with_variable("SOMEONE_ELSES");
    assert!(output.status.success(), "{output:?}");
    let output = with_variable("CAIRN_BUFFER_MAX_PAYLOAD_BYTES");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("CAIRN_BUFFER_MAX_PAYLOAD_BYTES: its value is not UTF-8 text"),
        "{stderr}"
    );
}

/// A damaged host.db refuses `cairn send` as bad input (exit 2), as `status` does; until
/// 2026-12-04 the same message came with exit 1. An emptied database is damaged to the
/// readers as to a host.
#[test]
fn send_and_the_readers_refuse_a_damaged_or_emptied_database_as_bad_input() {
    if storage::reads_sqlite_files(
        "send_and_the_readers_refuse_a_damaged_or_emptied_database_as_bad_input",
    ) {
        return;
    }
    let data = tempfile::tempdir().expect("data");
    std::fs::write(data.path().join("host.db"), vec![0x5Au8; 8192]).expect("garbage");
    let d = data.path().display().to_string();
    for args in [
        &[
            "send",
            "--channel",
            "cli",
            "--conversation",
            "c",
            "hi",
            "--data",
            &d,
        ][..],
        &["status", "--data", &d][..],
    ] {
        refused(args, "host.db: the database is damaged");
    }
    assert_eq!(entries(data.path()), ["host.db"], "nothing else made");

    // An emptied file (no WAL beside it, not made a moment ago) is refused by the readers
    // too: until 2026-12-04 they took it for no database (`no host has run`, exit 0).
    for (file, args) in [
        ("host.db", &["status", "--data", &d][..]),
        ("buffer.db", &["buffer", "failed", "--data", &d][..]),
        ("journal.db", &["journal", "tail", "--data", &d][..]),
    ] {
        for entry in entries(data.path()) {
            std::fs::remove_file(data.path().join(entry)).expect("clear");
        }
        let emptied = data.path().join(file);
        std::fs::write(&emptied, b"").expect("empty");
        let touched = Command::new("touch")
            .args(["-d", "1 hour ago"])
            .arg(&emptied)
            .status()
            .expect("touch");
        assert!(touched.success());
        refused(
            args,
            &format!("{file}: the database is damaged (the file is empty)"),
        );
    }
}
