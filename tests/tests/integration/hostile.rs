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
        journal_json(data.path(), "flood.tick").len() as u64,
        emitted
    );

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
