//! The soak harness behind `cargo xtask soak`: runs the real `cairn` binary with the
//! bundled plugins (`target/plugins`) and memory on, sends webhook deliveries at a steady
//! rate over 10 conversations (batched per second: a firehose one agent can answer) for a
//! while, and samples the host as it goes: resident memory, open file descriptors, the WAL
//! files, buffer depth, batches waiting for the agent and turn latency (from the status
//! console). Prints a table at 1, 10 and 30 minutes (and at the end), then checks that
//! every acknowledged delivery was stored and answered.
//!
//! `cairn-soak [--seconds N] [--rate PER_SEC]` (defaults: 60 s at 1000/s).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use cairn_tests::{Host, github_signature, http_client, post_webhook, status_json, workspace_root};

const SECRET: &str = "soak-secret";
const SENDERS: u64 = 4;
/// Conversations the deliveries are spread over.
const CONVERSATIONS: u64 = 10;

/// One sample of the host.
struct Sample {
    at: Duration,
    sent: u64,
    acknowledged: u64,
    rss_mib: f64,
    fds: usize,
    wal_kib: Vec<u64>,
    depth: i64,
    queued: i64,
    turn_p50_ms: u64,
    turn_p99_ms: u64,
}

/// How the harness is called.
const USAGE: &str = "usage: cairn-soak [--seconds N] [--rate PER_SEC] (defaults: 60 s at 1000/s)";

/// The run's length in seconds and the deliveries per second, from the command line; `None`
/// when `--help` asked for the usage.
fn options() -> Result<Option<(u64, u64)>> {
    let (mut seconds, mut rate) = (60, 1000);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let slot = match flag.as_str() {
            "--help" | "-h" => return Ok(None),
            "--seconds" => &mut seconds,
            "--rate" => &mut rate,
            other => bail!("unknown argument `{other}`; expected --seconds N or --rate PER_SEC"),
        };
        let value = args
            .next()
            .with_context(|| format!("{flag}: expected a number"))?;
        *slot = value
            .parse()
            .with_context(|| format!("{flag}: expected a number, got `{value}`"))?;
    }
    Ok(Some((seconds, rate.max(1))))
}

/// Resident memory (MiB) and open file descriptors of process `pid`.
fn process(pid: u32) -> (f64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    (rss_kib / 1024.0, fds)
}

/// The databases whose WAL sizes the table shows, in its column order.
const DATABASES: [&str; 4] = ["buffer", "journal", "memory", "host"];

/// The WAL size (KiB) of each of [`DATABASES`], in that order.
fn wal_sizes(data: &Path) -> Vec<u64> {
    DATABASES
        .iter()
        .map(|db| {
            let wal = data.join(format!("{db}.db-wal"));
            std::fs::metadata(wal).map_or(0, |m| m.len() / 1024)
        })
        .collect()
}

/// The console's snapshot, if it answers.
fn snapshot(client: &ureq::Agent, port: u16) -> Option<serde_json::Value> {
    let mut answer = client
        .get(format!("http://127.0.0.1:{port}/api/snapshot"))
        .call()
        .ok()?;
    serde_json::from_str(&answer.body_mut().read_to_string().ok()?).ok()
}

/// Deliveries the host did not acknowledge, by answer ("HTTP 503", "no answer"): how many,
/// and the first answer's text.
#[derive(Default)]
struct Refusals(Mutex<BTreeMap<String, (u64, String)>>);

impl Refusals {
    fn note(&self, kind: String, answer: String) {
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        seen.entry(kind).or_insert((0, answer)).0 += 1;
    }

    /// One line per kind of refusal, or none.
    fn report(&self) -> Vec<String> {
        let seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        seen.iter()
            .map(|(kind, (count, first))| format!("{count} × {kind}, the first: {}", first.trim()))
            .collect()
    }
}

/// What the senders count.
#[derive(Default)]
struct Tally {
    sent: AtomicU64,
    acknowledged: AtomicU64,
    refusals: Refusals,
}

/// Send deliveries at `rate` per second (over [`SENDERS`] threads) until `stop`.
fn spawn_senders(
    port: u16,
    rate: u64,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..SENDERS)
        .map(|sender| {
            let (stop, tally) = (stop.clone(), tally.clone());
            std::thread::spawn(move || {
                let client = http_client();
                let spacing = Duration::from_secs_f64(SENDERS as f64 / rate as f64);
                let started = Instant::now();
                for n in 0u64.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let due = started + spacing.mul_f64(n as f64);
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    let i = n * SENDERS + sender;
                    let body = serde_json::to_vec(&serde_json::json!({
                        "action": "opened",
                        "repository": {"full_name": format!("octo/soak-{}", i % CONVERSATIONS)},
                        "pull_request": {"number": i % CONVERSATIONS, "title": format!("change {i}: keep the cache warm")},
                        "sender": {"login": "octocat"},
                    }))
                    .expect("serialise");
                    let signature = github_signature(SECRET.as_bytes(), &body);
                    tally.sent.fetch_add(1, Ordering::Relaxed);
                    let delivery = format!("soak-{i}");
                    match post_webhook(&client, port, "pull_request", &delivery, &body, Some(&signature)) {
                        Ok((202, _)) => {
                            tally.acknowledged.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok((status, answer)) => tally.refusals.note(format!("HTTP {status}"), answer),
                        Err(error) => tally.refusals.note("no answer".into(), error.to_string()),
                    }
                }
            })
        })
        .collect()
}

fn print_table(samples: &[Sample], rate: u64) {
    println!(
        "\nsoak at {rate} deliveries/s: the host (`cairn run`, bundled plugins, memory on) over time\n"
    );
    println!(
        "| elapsed | sent | acknowledged | RSS MiB | open fds | WAL KiB ({}) | depth | batches waiting | turn p50 / p99 ms |",
        DATABASES.join("/")
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for s in samples {
        let wal: Vec<String> = s.wal_kib.iter().map(u64::to_string).collect();
        println!(
            "| {:.0} s | {} | {} | {:.1} | {} | {} | {} | {} | {} / {} |",
            s.at.as_secs_f64(),
            s.sent,
            s.acknowledged,
            s.rss_mib,
            s.fds,
            wal.join(" / "),
            s.depth,
            s.queued,
            s.turn_p50_ms,
            s.turn_p99_ms
        );
    }
}

fn main() -> std::process::ExitCode {
    let (seconds, rate) = match options() {
        Ok(Some(options)) => options,
        Ok(None) => {
            println!("{USAGE}");
            return std::process::ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("cairn-soak: {e:#}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    match soak(seconds, rate) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cairn-soak: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Run the soak for `seconds` at `rate` deliveries a second, print its table and check that
/// every acknowledged delivery was stored and answered.
fn soak(seconds: u64, rate: u64) -> Result<()> {
    let scratch = tempfile::tempdir()?;
    let data = scratch.path().join("data");
    let plugins = workspace_root().join("target/plugins");
    if !plugins.join("webhook.yaml").is_file() {
        bail!(
            "{} has no bundled plugins: run `cargo xtask build-plugins`",
            plugins.display()
        );
    }
    let mut host = Host::start(
        &plugins,
        &data,
        &[
            ("CAIRN_HTTP_LISTEN", "127.0.0.1:0"),
            ("CAIRN_CONSOLE_LISTEN", "127.0.0.1:0"),
            ("CAIRN_WEBHOOK_SECRET", SECRET),
            ("CAIRN_ROUTER_BATCH_WINDOW_MS", "1000"),
            ("CAIRN_LOG", "warn,cairn::cli::run=info"),
        ],
    );
    let port = host.webhook_port();
    let console = host.console_port();
    let pid = host.pid();
    let client = http_client();
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let senders = spawn_senders(port, rate, stop.clone(), tally.clone());
    let started = Instant::now();
    let checkpoints: Vec<u64> = [60, 600, 1800]
        .into_iter()
        .filter(|c| *c < seconds)
        .chain([seconds])
        .collect();
    let mut samples = Vec::new();
    for checkpoint in checkpoints {
        let due = started + Duration::from_secs(checkpoint);
        while let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait.min(Duration::from_secs(1)));
            if !host.is_running() {
                bail!("the host died:\n{}", host.log());
            }
        }
        let (rss_mib, fds) = process(pid);
        let seen = snapshot(&client, console).unwrap_or_default();
        samples.push(Sample {
            at: started.elapsed(),
            sent: tally.sent.load(Ordering::Relaxed),
            acknowledged: tally.acknowledged.load(Ordering::Relaxed),
            rss_mib,
            fds,
            wal_kib: wal_sizes(&data),
            depth: seen["buffer"]["depth"].as_i64().unwrap_or(0),
            queued: seen["buffer"]["batches"]["main/queued"]
                .as_i64()
                .unwrap_or(0),
            turn_p50_ms: seen["turn_latency"]["p50_ms"].as_u64().unwrap_or(0),
            turn_p99_ms: seen["turn_latency"]["p99_ms"].as_u64().unwrap_or(0),
        });
    }
    stop.store(true, Ordering::Relaxed);
    for sender in senders {
        let _ = sender.join();
    }
    print_table(&samples, rate);
    for refusal in tally.refusals.report() {
        println!("not acknowledged: {refusal}");
    }
    settle(&mut host, &data)?;
    let (exit, log) = host.stop();
    if !exit.success() {
        bail!("the host did not stop cleanly:\n{log}");
    }
    check(&samples, &data, tally.acknowledged.load(Ordering::Relaxed))
}

/// Wait until every message is routed and every main batch finished.
fn settle(host: &mut Host, data: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let status = status_json(data);
        let buffer = &status["buffer"];
        let batches = &buffer["batches"];
        if buffer["depth"] == 0
            && batches.get("main/queued").is_none()
            && batches.get("main/running").is_none()
        {
            return Ok(());
        }
        if Instant::now() > deadline || !host.is_running() {
            let log = host.log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            bail!(
                "the host did not settle: {status}\nthe end of its log:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Every acknowledged delivery stored once, and no file descriptors leaking between the
/// first and the last sample.
fn check(samples: &[Sample], data: &Path, acknowledged: u64) -> Result<()> {
    let stored = status_json(data)["buffer"]["stored"].as_u64().unwrap_or(0);
    println!("\n{acknowledged} acknowledged, {stored} stored");
    if stored != acknowledged {
        bail!("{acknowledged} deliveries were acknowledged but {stored} stored");
    }
    if let (Some(first), Some(last)) = (samples.first(), samples.last())
        && last.fds > first.fds + 16
    {
        bail!(
            "open file descriptors grew from {} to {}",
            first.fds,
            last.fds
        );
    }
    Ok(())
}
