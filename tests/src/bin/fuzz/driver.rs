//! Runs one target for a time budget: its corpus first, then inputs from three sources —
//! corpus entries mutated, inputs built from the format's own pieces, random bytes — in
//! batches of proptest cases. A failing case (a property that does not hold, or a panic) is
//! shrunk by proptest and saved; a case running past the hang limit is saved and ends the
//! process, since a hung call cannot be stopped from outside.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestError, TestRng, TestRunner};

use super::mutate::mutate;

/// Something to fuzz.
pub trait Target: Sync {
    /// Its name on the command line and in the table.
    fn name(&self) -> &'static str;
    /// Inputs built from the format's own pieces.
    fn generated(&self) -> BoxedStrategy<Vec<u8>>;
    /// Run one input; `Err` says which property did not hold.
    fn check(&self, input: &[u8]) -> Result<(), String>;
}

/// What one target's run found.
pub struct Outcome {
    /// Inputs run.
    pub cases: u64,
    /// The first failure, with where its input was saved.
    pub failure: Option<String>,
    /// Time spent.
    pub elapsed: Duration,
}

/// The case running now, for the hang watchdog.
struct Running {
    target: &'static str,
    since: Instant,
    input: Vec<u8>,
}

/// Ends the process when one case runs longer than `limit`, saving its input first.
#[derive(Clone)]
pub struct Watchdog {
    running: Arc<Mutex<Option<Running>>>,
}

impl Watchdog {
    /// Start watching; hung inputs are written to `crashes`.
    pub fn start(limit: Duration, crashes: PathBuf) -> Self {
        let running: Arc<Mutex<Option<Running>>> = Arc::default();
        let watched = running.clone();
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_millis(100));
                let guard = watched.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(case) = guard.as_ref().filter(|case| case.since.elapsed() > limit) {
                    let file = save(&crashes, case.target, "hang", &case.input);
                    eprintln!(
                        "HANG: {} ran one input for over {}s; saved to {}",
                        case.target,
                        limit.as_secs(),
                        file.display()
                    );
                    std::process::exit(3);
                }
            }
        });
        Self { running }
    }

    fn enter(&self, target: &'static str, input: &[u8]) {
        *self.running.lock().unwrap_or_else(|p| p.into_inner()) = Some(Running {
            target,
            since: Instant::now(),
            input: input.to_vec(),
        });
    }

    fn leave(&self) {
        *self.running.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// The files of a target's corpus directory, in name order.
pub fn corpus(dir: &Path) -> Vec<Vec<u8>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files
        .iter()
        .filter(|path| path.is_file())
        .filter_map(|path| std::fs::read(path).ok())
        .collect()
}

/// Save a failing input as `<target>-<kind>-<hash>`; the file's path.
fn save(dir: &Path, target: &str, kind: &str, input: &[u8]) -> PathBuf {
    let hash = input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    let file = dir.join(format!("{target}-{kind}-{hash:016x}"));
    let _ = std::fs::create_dir_all(dir);
    if let Err(e) = std::fs::write(&file, input) {
        eprintln!("cannot save {}: {e}", file.display());
    }
    file
}

/// Run `target` for `budget`, starting from `seed`.
pub fn run(
    target: &dyn Target,
    corpus_dir: &Path,
    crashes: &Path,
    budget: Duration,
    seed: u64,
    watchdog: &Watchdog,
) -> Outcome {
    let started = Instant::now();
    let seeds = corpus(corpus_dir);
    let checked = |input: &[u8]| {
        watchdog.enter(target.name(), input);
        let outcome = target.check(input);
        watchdog.leave();
        outcome
    };
    for (i, input) in seeds.iter().enumerate() {
        if let Err(e) = checked(input) {
            return Outcome {
                cases: i as u64 + 1,
                failure: Some(format!("corpus entry {i} of {}: {e}", corpus_dir.display())),
                elapsed: started.elapsed(),
            };
        }
    }
    let strategy = inputs(target, seeds.clone());
    let mut cases = seeds.len() as u64;
    let mut batch = 0u64;
    while started.elapsed() < budget {
        const BATCH: u32 = 64;
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        key[8..16].copy_from_slice(&batch.to_le_bytes());
        let config = Config {
            cases: BATCH,
            failure_persistence: None,
            max_shrink_iters: 500,
            ..Config::default()
        };
        let mut runner =
            TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &key));
        let result = runner.run(&strategy, |input| {
            checked(&input).map_err(TestCaseError::fail)
        });
        batch += 1;
        match result {
            Ok(()) => cases += u64::from(BATCH),
            Err(TestError::Fail(reason, input)) => {
                let file = save(crashes, target.name(), "crash", &input);
                return Outcome {
                    cases,
                    failure: Some(format!("{reason}; input saved to {}", file.display())),
                    elapsed: started.elapsed(),
                };
            }
            Err(TestError::Abort(reason)) => {
                return Outcome {
                    cases,
                    failure: Some(format!("aborted: {reason}")),
                    elapsed: started.elapsed(),
                };
            }
        }
    }
    Outcome {
        cases,
        failure: None,
        elapsed: started.elapsed(),
    }
}

/// Corpus entries mutated, the target's own generated inputs, and random bytes.
fn inputs(target: &dyn Target, seeds: Vec<Vec<u8>>) -> BoxedStrategy<Vec<u8>> {
    let random = proptest::collection::vec(any::<u8>(), 0..2048).boxed();
    if seeds.is_empty() {
        return prop_oneof![2 => target.generated(), 1 => random].boxed();
    }
    let corpus = Arc::new(seeds);
    let mutated = (0..corpus.len(), any::<u64>())
        .prop_map(move |(i, seed)| mutate(&corpus[i], &corpus, seed))
        .boxed();
    prop_oneof![3 => mutated, 2 => target.generated(), 1 => random].boxed()
}
