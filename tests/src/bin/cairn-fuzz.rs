//! The fuzzing harness behind `cargo xtask fuzz`: runs each target for a time budget on
//! its committed corpus (`tests/fuzz/corpus/<target>/`), corpus mutations, inputs built
//! from the format's own pieces and random bytes; prints a table; saves any failing input
//! to `target/fuzz/crashes/` and exits 1 (3 on a hang).
//!
//! `cairn-fuzz [--seconds N] [--seed N] [--hang-secs N] [TARGET...]` (all targets when none
//! is named; `--list` names them).

#[path = "fuzz/driver.rs"]
mod driver;
#[path = "fuzz/formats.rs"]
mod formats;
#[path = "fuzz/mutate.rs"]
mod mutate;
#[path = "fuzz/stores.rs"]
mod stores;
#[path = "fuzz/webhook.rs"]
mod webhook;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use cairn_tests::workspace_root;
use driver::{Target, Watchdog};

/// The targets, by name, built only when asked for (the webhook one starts a plugin host).
const TARGETS: [&str; 7] = [
    "manifest", "cron", "routing", "webhook", "recall", "import", "payloads",
];

fn build(name: &str) -> Box<dyn Target> {
    match name {
        "manifest" => Box::new(formats::Manifests::new()),
        "cron" => Box::new(formats::Crons),
        "routing" => Box::new(formats::Routing::new()),
        "webhook" => Box::new(webhook::Webhook::new()),
        "recall" => Box::new(stores::Recall::new()),
        "import" => Box::new(stores::Import::new()),
        _ => Box::new(stores::Payloads::new()),
    }
}

struct Options {
    seconds: u64,
    seed: u64,
    hang_secs: u64,
    targets: Vec<String>,
}

fn options() -> Result<Options> {
    let mut options = Options {
        seconds: 60,
        seed: 0x00c0_ffee,
        hang_secs: 20,
        targets: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |flag: &str| -> Result<u64> {
            let value = args
                .next()
                .with_context(|| format!("{flag}: expected a number"))?;
            value
                .parse()
                .with_context(|| format!("{flag}: expected a number, got `{value}`"))
        };
        match arg.as_str() {
            "--seconds" => options.seconds = number("--seconds")?,
            "--seed" => options.seed = number("--seed")?,
            "--hang-secs" => options.hang_secs = number("--hang-secs")?,
            "--list" => {
                println!("{}", TARGETS.join("\n"));
                std::process::exit(0);
            }
            name if TARGETS.contains(&name) => options.targets.push(name.to_string()),
            other => bail!(
                "unknown argument `{other}`; targets: {}",
                TARGETS.join(", ")
            ),
        }
    }
    if options.targets.is_empty() {
        options.targets = TARGETS.iter().map(|t| t.to_string()).collect();
    }
    Ok(options)
}

fn main() -> ExitCode {
    // SAFETY: no other thread runs yet; the webhook channel reads its secret from here.
    unsafe { std::env::set_var("CAIRN_WEBHOOK_SECRET", webhook::SECRET) };
    let options = match options() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    // Panics are findings, reported in the table with their input; not printed as they
    // happen (proptest catches them while it shrinks).
    std::panic::set_hook(Box::new(|_| {}));
    let root = workspace_root();
    let crashes = root.join("target/fuzz/crashes");
    let watchdog = Watchdog::start(Duration::from_secs(options.hang_secs), crashes.clone());
    println!(
        "{:<10} {:>10} {:>10} {:>8} {:>8}  result",
        "target", "inputs", "inputs/s", "seconds", "corpus"
    );
    let mut failed = false;
    for name in &options.targets {
        let target = build(name);
        let corpus_dir = root.join("tests/fuzz/corpus").join(name);
        let seeds = driver::corpus(&corpus_dir).len();
        let outcome = driver::run(
            target.as_ref(),
            &corpus_dir,
            &crashes,
            Duration::from_secs(options.seconds),
            options.seed,
            &watchdog,
        );
        let seconds = outcome.elapsed.as_secs_f64();
        println!(
            "{:<10} {:>10} {:>10.0} {:>8.0} {:>8}  {}",
            name,
            outcome.cases,
            outcome.cases as f64 / seconds.max(1e-9),
            seconds,
            seeds,
            outcome.failure.as_deref().unwrap_or("0 crashes, 0 hangs")
        );
        failed |= outcome.failure.is_some();
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
