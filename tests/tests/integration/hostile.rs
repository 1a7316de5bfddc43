//! Hostile plugins beyond faults: floods of emits and key/value writes, and two plugins
//! answering each other's events for ever. Each is stopped by a limit its manifest can set,
//! with a typed error the plugin sees, while the host and a steady neighbour keep working.

use std::time::Duration;

use cairn_tests::{Host, PluginDir, cairn, count_lines};

const LONG: Duration = Duration::from_secs(60);

/// The first number after `label` in a log line that contains `marker`.
fn number_after(log: &str, marker: &str, label: &str) -> u64 {
    let line = log
        .lines()
        .find(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("no `{marker}` in the log:\n{log}"));
    let rest = &line[line.find(label).expect("label") + label.len()..];
    rest.trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .expect("a number")
}

fn journal_json(data: &std::path::Path, topic: &str) -> Vec<serde_json::Value> {
    let out = cairn(&[
        "journal",
        "tail",
        "--json",
        "--topic",
        topic,
        "--limit",
        "100000",
        "--data",
        &data.display().to_string(),
    ]);
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect()
}

#[test]
fn an_emit_flood_is_rate_limited_and_an_emit_loop_stops_at_the_chain_limit() {
    let dir = PluginDir::new();
    dir.bundled("cli");
    dir.steady();
    dir.plugin(
        "flood",
        "handler",
        "hostile",
        "limits: {emits_per_sec: 20}\nconfig: {mode: emit-flood, topic: flood.tick, count: 2000}\nevents: {emits: [flood.tick]}\n",
    );
    dir.plugin(
        "ping",
        "handler",
        "hostile",
        "config: {event: echo, echo: ping.ball}\nevents: {subscribes: [message.received, pong.ball], emits: [ping.ball]}\n",
    );
    dir.plugin(
        "pong",
        "handler",
        "hostile",
        "config: {event: echo, echo: pong.ball}\nevents: {subscribes: [ping.ball], emits: [pong.ball]}\n",
    );
    let data = tempfile::tempdir().expect("data");
    let mut host = Host::start(
        dir.path(),
        data.path(),
        &[("CAIRN_ROUTER_BATCH_WINDOW_MS", "100")],
    );
    host.wait_for("cairn is running", LONG);
    host.wait_for("emit-flood:", LONG);
    let ticks_before = count_lines(&host.log(), "steady: tick");
    host.type_line("serve");
    host.wait_until(LONG, "the rally cut at the chain limit", |log| {
        log.contains("the chain stops here")
    });
    host.wait_for("cairn> [offline] I received: user: serve", LONG);
    host.wait_until(LONG, "the steady neighbour ticking on", |log| {
        count_lines(log, "steady: tick") >= ticks_before + 5
    });
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");

    // The flood: a burst of 20 and then 20 a second, the rest refused as unavailable.
    let emitted = number_after(&log, "emit-flood:", "emit-flood:");
    let refused = number_after(&log, "emit-flood:", "emitted,");
    assert_eq!(emitted + refused, 2000, "{log}");
    assert!(
        (20..2000).contains(&emitted) && refused > 0,
        "emitted {emitted}"
    );
    assert!(log.contains(
        "first refusal: Error::Unavailable(\"journal: over this plugin's limits.emits_per_sec"
    ));
    assert_eq!(
        count_lines(&log, "refusing its emits until it slows"),
        1,
        "the host says at once, and once, that it refuses: {log}"
    );
    assert_eq!(
        journal_json(data.path(), "flood.tick").len() as u64,
        emitted
    );
    // Every refusal is counted in the log, those after the plugin's last emit when it
    // stops (until 2026-12-02 a flood ending in refusals was never counted).
    let counted: u64 = log
        .lines()
        .filter_map(|line| {
            line.split("plugin emits over limits.emits_per_sec: ")
                .nth(1)
        })
        .filter_map(|rest| rest.split_once(" refused"))
        .map(|(count, _)| count.parse::<u64>().expect("a count of refused emits"))
        .sum();
    assert_eq!(counted, refused, "{log}");

    // The rally: depths 1 to 8 journaled, the ninth refused (journal.max_chain_depth 8).
    let mut depths: Vec<u64> = ["ping.ball", "pong.ball"]
        .iter()
        .flat_map(|topic| journal_json(data.path(), topic))
        .map(|event| event["depth"].as_u64().expect("depth"))
        .collect();
    depths.sort_unstable();
    assert_eq!(depths, (1..=8).collect::<Vec<_>>(), "{log}");
    assert_eq!(count_lines(&log, "the chain stops here"), 1, "{log}");
    assert!(
        log.contains("denied Error::Denied(\"journal: this event would be the 9th"),
        "{log}"
    );
    eprintln!("emit flood: {emitted} emitted, {refused} refused; rally cut after 8 events");
}

#[test]
fn a_kv_flood_stops_at_the_quota_and_deleting_makes_room() {
    let dir = PluginDir::new();
    dir.steady();
    dir.plugin(
        "hoarder",
        "handler",
        "hostile",
        "limits: {kv_bytes: 65536}\ncapabilities: {kv: true}\nconfig: {mode: kv-flood}\n",
    );
    let data = tempfile::tempdir().expect("data");
    let mut host = Host::start(dir.path(), data.path(), &[]);
    host.wait_for("probe kv-after-delete", LONG);
    let ticks_before = count_lines(&host.log(), "steady: tick");
    host.wait_until(LONG, "the steady neighbour ticking on", |log| {
        count_lines(log, "steady: tick") >= ticks_before + 5
    });
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");
    // Keys `key-0`…`key-62` with 1 KiB values fill 64 KiB but for a few bytes.
    let set = number_after(&log, "kv-flood:", "kv-flood:");
    assert_eq!(set, 63, "{log}");
    assert!(
        log.contains("then Error::Denied(\"kv: this set would keep"),
        "{log}"
    );
    assert!(log.contains("limits.kv_bytes of 65536"), "{log}");
    assert!(log.contains("probe kv-delete: ok true"), "{log}");
    assert!(log.contains("probe kv-after-delete: ok ()"), "{log}");
}

#[test]
fn a_plugin_failing_with_megabytes_of_error_is_cut_to_4_kib_everywhere() {
    let dir = PluginDir::new();
    dir.bundled("cli");
    dir.steady();
    dir.plugin(
        "shouter",
        "handler",
        "hostile",
        "config: {event: huge-error}\nevents: {subscribes: [message.received]}\n",
    );
    let data = tempfile::tempdir().expect("data");
    let env = [
        ("CAIRN_JOURNAL_MAX_ATTEMPTS", "2"),
        ("CAIRN_JOURNAL_BACKOFF_INITIAL_MS", "20"),
    ];
    let mut host = Host::start(dir.path(), data.path(), &env);
    host.wait_for("cairn is running", LONG);
    host.type_line("say it loud");
    host.wait_for("event dead-lettered", LONG);
    host.wait_for("cairn> [offline] I received: user: say it loud", LONG);
    let (exit, log) = host.stop();
    assert!(exit.success());
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 8192, "a log line of {longest} bytes");
    let out = cairn(&[
        "journal",
        "dead-letters",
        "--json",
        "--data",
        &data.path().display().to_string(),
    ]);
    let dead: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(dead.len(), 1, "{dead:?}");
    let error = dead[0]["error"].as_str().expect("error");
    assert!(error.len() < 4200, "a dead letter of {} bytes", error.len());
    assert!(
        error.ends_with("bytes cut)"),
        "{}",
        &error[error.len().saturating_sub(80)..]
    );
}

/// Two plugins beside the one under test: `source` emits `count` events on `<prefix>.tick`
/// for every message typed, and `neighbour` echoes each on `<prefix>.echo`.
fn source_and_neighbour(dir: &PluginDir, prefix: &str, count: u64) {
    dir.plugin(
        "source",
        "handler",
        "hostile",
        &format!("limits: {{emits_per_sec: 100000, timeout_ms: 600000}}\nconfig: {{event: flood, topic: {prefix}.tick, count: {count}}}\nevents: {{subscribes: [message.received], emits: [{prefix}.tick]}}\n"),
    );
    dir.plugin(
        "neighbour",
        "handler",
        "hostile",
        &format!("limits: {{emits_per_sec: 100000}}\nconfig: {{event: echo, echo: {prefix}.echo}}\nevents: {{subscribes: [{prefix}.tick], emits: [{prefix}.echo]}}\n"),
    );
}

/// The host's resident memory in MiB, open file descriptors and threads, from `/proc`.
fn footprint(pid: u32) -> (u64, usize, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fds")
        .count();
    (field("VmRSS:") / 1024, fds, field("Threads:"))
}

/// The names of a process's threads, sorted.
fn thread_names(pid: u32) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("tasks")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_string())
        .collect();
    names.sort();
    names
}

/// How many dead letters `subscriber` has.
fn dead_letters_of(data: &std::path::Path, subscriber: &str) -> usize {
    dead_letters(data, subscriber).len()
}

/// `subscriber`'s dead letters, as `cairn journal dead-letters --json` lists them.
fn dead_letters(data: &std::path::Path, subscriber: &str) -> Vec<serde_json::Value> {
    let out = cairn(&[
        "journal",
        "dead-letters",
        "--json",
        "--limit",
        "1000000",
        "--data",
        &data.display().to_string(),
    ]);
    assert!(out.status.success());
    let letters: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("json");
    letters
        .into_iter()
        .filter(|l| l["subscriber"] == subscriber)
        .collect()
}

/// The number `key` of a journal event's JSON payload.
fn payload_number(event: &serde_json::Value, key: &str) -> i64 {
    let payload: serde_json::Value =
        serde_json::from_str(event["payload"].as_str().expect("payload")).expect("json");
    payload[key]
        .as_i64()
        .unwrap_or_else(|| panic!("no {key} in {payload}"))
}

/// Milliseconds from each `tick_topic` event to the `echo_topic` event echoing it, sorted.
fn echo_lags(data: &std::path::Path, tick_topic: &str, echo_topic: &str) -> Vec<i64> {
    let ticks: std::collections::HashMap<i64, i64> = journal_json(data, tick_topic)
        .iter()
        .map(|e| {
            (
                e["seq"].as_i64().expect("seq"),
                e["created_at"].as_i64().expect("at"),
            )
        })
        .collect();
    let mut lags: Vec<i64> = journal_json(data, echo_topic)
        .iter()
        .map(|echo| {
            echo["created_at"].as_i64().expect("at") - ticks[&payload_number(echo, "after")]
        })
        .collect();
    lags.sort_unstable();
    lags
}

fn percentile(sorted: &[i64], p: usize) -> i64 {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

/// One restart a second for an hour: a plugin that traps on every event is restarted 3,600
/// times (backoff and budget set so nothing stops it), each time a fresh store from its
/// `InstancePre`. Its neighbour takes every event once meanwhile, and the host's memory,
/// descriptors and threads stay flat from the first sixth of the churn to the end.
#[test]
fn a_plugin_trapping_on_every_event_for_an_hour_of_restarts_leaks_nothing_and_stalls_no_neighbour()
{
    const RESTARTS: u64 = 3_600;
    const PER_MESSAGE: u64 = 1_000;
    let dir = PluginDir::new();
    dir.bundled("cli");
    source_and_neighbour(&dir, "churn", PER_MESSAGE);
    dir.plugin(
        "churner",
        "handler",
        "hostile",
        "events: {subscribes: [churn.tick]}\n",
    );
    let data = tempfile::tempdir().expect("data");
    let mut host = Host::start(
        dir.path(),
        data.path(),
        &[
            ("CAIRN_SUPERVISOR_RESTART_BUDGET", "1000000"),
            ("CAIRN_SUPERVISOR_BACKOFF_INITIAL_MS", "1"),
            ("CAIRN_SUPERVISOR_BACKOFF_MAX_MS", "1"),
            ("CAIRN_JOURNAL_MAX_ATTEMPTS", "1"),
            ("CAIRN_ROUTER_BATCH_WINDOW_MS", "50"),
        ],
    );
    host.wait_for("cairn is running", LONG);
    let restarts = |data: &std::path::Path| {
        cairn_tests::plugin_status(data, "churner")
            .and_then(|row| row["restarts"].as_u64())
            .unwrap_or(0)
    };
    let started = std::time::Instant::now();
    let (mut messages, mut early) = (0u64, None);
    while restarts(data.path()) < RESTARTS {
        assert!(
            started.elapsed() < Duration::from_secs(1200),
            "{}",
            host.log()
        );
        assert!(host.is_running(), "{}", host.log());
        // A message makes the source emit the next thousand ticks, once the churner has
        // dealt with the last thousand (each is one trap and one restart: no backlog).
        let sent = messages * PER_MESSAGE;
        if journal_json(data.path(), "churn.tick").len() as u64 == sent
            && dead_letters_of(data.path(), "churner") as u64 == sent
        {
            messages += 1;
            host.type_line(&format!("tick {messages}"));
        }
        if early.is_none() && restarts(data.path()) >= RESTARTS / 6 {
            early = Some(footprint(host.pid()));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let ticks = messages * PER_MESSAGE;
    host.wait_until(LONG, "every tick taken by both", |_| {
        journal_json(data.path(), "churn.tick").len() as u64 == ticks
            && journal_json(data.path(), "churn.echo").len() as u64 == ticks
            && dead_letters_of(data.path(), "churner") as u64 == ticks
    });
    let churned = started.elapsed();
    let (rss_early, fds_early, threads_early) = early.expect("sampled a sixth of the way");
    let (rss, fds, threads) = footprint(host.pid());
    let names = thread_names(host.pid());
    let final_restarts = restarts(data.path());
    let lags = echo_lags(data.path(), "churn.tick", "churn.echo");
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");

    assert_eq!(
        lags.len() as u64,
        ticks,
        "the neighbour took each tick once"
    );
    assert!(fds <= fds_early + 4, "fds {fds_early} -> {fds}");
    // One instance thread at a time (a trapped one may still be ending), however many
    // restarts; the host's other threads are its own and its runtime's pools.
    let churners = names.iter().filter(|name| *name == "wasm-churner").count();
    assert!(churners <= 2, "{churners} churner threads: {names:?}");
    assert!(rss <= rss_early + 64, "RSS {rss_early} -> {rss} MiB");
    eprintln!(
        "churn: {final_restarts} restarts over {ticks} ticks in {:.1} s ({:.0}/s); RSS {rss_early} -> {rss} MiB, fds {fds_early} -> {fds}, threads {threads_early} -> {threads}; neighbour's tick -> echo p50 {} ms, p99 {} ms",
        churned.as_secs_f64(),
        final_restarts as f64 / churned.as_secs_f64(),
        percentile(&lags, 50),
        percentile(&lags, 99)
    );
}

/// A plugin that traps on a few events of a burst, each part-way through a run of the events
/// queued for it: after each trap its instance is replaced, the event that faulted is tried
/// alone until dead-lettered, and every other event is taken exactly once, in order.
#[test]
fn a_plugin_faulting_part_way_through_a_run_loses_and_doubles_no_other_event() {
    const TICKS: u64 = 300;
    const TRAPS: [u64; 5] = [0, 100, 101, 170, 299];
    let dir = PluginDir::new();
    dir.bundled("cli");
    source_and_neighbour(&dir, "burst", TICKS);
    dir.plugin(
        "faulty",
        "handler",
        "hostile",
        &format!(
            "limits: {{emits_per_sec: 100000}}\nconfig: {{event: echo-or-trap, echo: faulty.took, trap: {TRAPS:?}}}\nevents: {{subscribes: [burst.tick], emits: [faulty.took]}}\n"
        ),
    );
    let data = tempfile::tempdir().expect("data");
    // The first trap's restart waits 200 ms, so the rest of the burst is queued by then and
    // later traps fall inside runs (of up to 64 events) rather than at their start.
    let mut host = Host::start(
        dir.path(),
        data.path(),
        &[
            ("CAIRN_SUPERVISOR_RESTART_BUDGET", "1000"),
            ("CAIRN_SUPERVISOR_BACKOFF_INITIAL_MS", "200"),
            ("CAIRN_SUPERVISOR_BACKOFF_MAX_MS", "200"),
            ("CAIRN_JOURNAL_MAX_ATTEMPTS", "2"),
            ("CAIRN_JOURNAL_BACKOFF_INITIAL_MS", "1"),
        ],
    );
    host.wait_for("cairn is running", LONG);
    host.type_line("burst");
    let expected_taken = TICKS as usize - TRAPS.len();
    host.wait_until(LONG, "every tick taken or dead-lettered", |_| {
        journal_json(data.path(), "faulty.took").len() == expected_taken
            && dead_letters_of(data.path(), "faulty") == TRAPS.len()
    });
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");

    let ticks = journal_json(data.path(), "burst.tick");
    let seq_of = |e: &serde_json::Value| e["seq"].as_i64().expect("seq");
    let (trapped, kept): (Vec<_>, Vec<_>) = ticks
        .iter()
        .partition(|t| TRAPS.contains(&(payload_number(t, "i") as u64)));
    let took: Vec<i64> = journal_json(data.path(), "faulty.took")
        .iter()
        .map(|e| payload_number(e, "after"))
        .collect();
    assert_eq!(
        took,
        kept.iter().map(|t| seq_of(t)).collect::<Vec<_>>(),
        "every tick but the trapping ones taken once, in order"
    );
    let mut dead: Vec<(i64, i64)> = dead_letters(data.path(), "faulty")
        .iter()
        .map(|l| (seq_of(l), l["attempts"].as_i64().expect("attempts")))
        .collect();
    dead.sort_unstable();
    assert_eq!(
        dead,
        trapped.iter().map(|t| (seq_of(t), 2)).collect::<Vec<_>>(),
        "each trapping tick dead-lettered after its two attempts"
    );
    assert_eq!(
        journal_json(data.path(), "burst.echo").len() as u64,
        TICKS,
        "the neighbour took the whole burst"
    );
}

/// A plugin whose `on-event` blocks in a host call for an hour: each call is answered with a
/// timeout fault once `limits.timeout_ms` and the grace have passed, the plugin is restarted
/// and then quarantined by its budget, the neighbour takes every event meanwhile, and the
/// host still stops cleanly with those calls blocked.
#[test]
fn a_plugin_holding_a_host_call_forever_is_abandoned_and_its_neighbour_keeps_going() {
    const TICKS: u64 = 10;
    let dir = PluginDir::new();
    dir.bundled("cli");
    source_and_neighbour(&dir, "hold", TICKS);
    dir.plugin(
        "holder",
        "handler",
        "hostile",
        "limits: {timeout_ms: 200}\nconfig: {event: hold}\nevents: {subscribes: [hold.tick]}\n",
    );
    let data = tempfile::tempdir().expect("data");
    let mut host = Host::start(
        dir.path(),
        data.path(),
        &[
            ("CAIRN_SUPERVISOR_RESTART_BUDGET", "3"),
            ("CAIRN_SUPERVISOR_BACKOFF_INITIAL_MS", "10"),
            ("CAIRN_JOURNAL_MAX_ATTEMPTS", "1"),
            ("CAIRN_ROUTER_BATCH_WINDOW_MS", "50"),
        ],
    );
    host.wait_for("cairn is running", LONG);
    let (_, _, threads_before) = footprint(host.pid());
    let names_before = thread_names(host.pid());
    let holder = |data: &std::path::Path| {
        cairn_tests::plugin_status(data, "holder").expect("the holder's status")
    };
    // Each message makes the source emit ten ticks; the holder blocks on the first it gets
    // after each start, until the budget quarantines it.
    let mut messages = 0u64;
    let row = loop {
        let row = holder(data.path());
        if row["state"] == "quarantined" {
            break row;
        }
        assert!(messages < 10, "never quarantined: {row}\n{}", host.log());
        messages += 1;
        host.type_line(&format!("hold on {messages}"));
        let faults = row["faults"].as_u64().unwrap_or(0);
        host.wait_until(LONG, "the holder's next fault", |_| {
            holder(data.path())["faults"].as_u64().unwrap_or(0) > faults
        });
    };
    let ticks = messages * TICKS;
    host.wait_until(LONG, "every tick echoed and given up by the holder", |_| {
        journal_json(data.path(), "hold.echo").len() as u64 == ticks
            && dead_letters_of(data.path(), "holder") as u64 == ticks
    });
    // The events given up once it was quarantined say what put it there, not only that.
    let errors: Vec<String> = dead_letters(data.path(), "holder")
        .iter()
        .map(|letter| letter["error"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("plugin holder is quarantined after: timeout (limits.timeout_ms)")),
        "{errors:?}"
    );
    // A retry asked while it is quarantined says so and waits, each letter's error kept (it
    // used to be tried at once, every letter failing again as `quarantined`).
    let retry = cairn(&[
        "journal",
        "dead-letters",
        "retry",
        "--subscriber",
        "holder",
        "--data",
        &data.path().display().to_string(),
    ]);
    let stderr = String::from_utf8_lossy(&retry.stderr);
    assert!(retry.status.success(), "{stderr}");
    assert!(
        stderr.contains("note: the running host holds plugin `holder` quarantined after: timeout"),
        "{stderr}"
    );
    std::thread::sleep(Duration::from_millis(2500));
    let kept = |letters: Vec<serde_json::Value>| {
        let mut errors: Vec<String> = letters
            .iter()
            .map(|letter| letter["error"].as_str().unwrap_or_default().to_string())
            .collect();
        errors.sort();
        errors
    };
    let waiting = dead_letters(data.path(), "holder");
    assert!(
        waiting.iter().all(|letter| letter["status"] == "retry"),
        "{waiting:?}"
    );
    let mut before = errors.clone();
    before.sort();
    assert_eq!(kept(waiting), before);
    // The plain listing says so too (it looked unchanged).
    let listed = cairn(&[
        "journal",
        "dead-letters",
        "--subscriber",
        "holder",
        "--data",
        &data.path().display().to_string(),
    ]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        !listed.is_empty()
            && listed
                .lines()
                .all(|l| l.contains("(queued for retry): holder #")),
        "{listed}"
    );
    let (_, _, threads_held) = footprint(host.pid());
    let names_held = thread_names(host.pid());
    let lags = echo_lags(data.path(), "hold.tick", "hold.echo");
    let stopping = std::time::Instant::now();
    let (exit, log) = host.stop();
    let stop_took = stopping.elapsed();
    assert!(exit.success(), "{log}");
    assert!(
        log.contains("blocked in a host call") && log.contains("instance abandoned"),
        "{log}"
    );
    assert_eq!(
        (row["restarts"].as_u64(), row["faults"].as_u64()),
        (Some(3), Some(4)),
        "{row}"
    );
    // Each abandoned call keeps its instance's thread (blocked in the sleep) until the host
    // exits: one per start the budget allowed (the first and three restarts), no more.
    let holders = names_held
        .iter()
        .filter(|name| *name == "wasm-holder")
        .count();
    assert!(
        holders <= 4,
        "{holders} holder threads: {names_before:?} -> {names_held:?}"
    );
    eprintln!(
        "held host call: holder quarantined after {} restarts; threads {threads_before} -> {threads_held} ({holders} held by the holder); neighbour's tick -> echo p50 {} ms, p99 {} ms; stop took {} ms",
        row["restarts"],
        percentile(&lags, 50),
        percentile(&lags, 99),
        stop_took.as_millis()
    );
}
