//! `cairn-bench plugins`, per language: the same benchmark handler written in Rust
//! (`tests/plugins/bench`), C, JavaScript and Python (`tests/plugins/bench-<lang>`, built
//! here with `cairn plugin build`), measured side by side: component size, cold compile,
//! load from the compile cache, instantiation, a host→guest call and a guest→host call.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use cairn::plugin::capabilities::HostServices;
use cairn::plugin::runtime::{CacheOutcome, PluginInstance};
use cairn_tests::{copy_project_sources, guests_dir, workspace_root};
use cairn_vocab::event::Event;

use crate::bare::{BareHandler, wit_event};
use crate::{Row, median, native_on_event, runtime, write_manifest};

/// One language's build of the benchmark handler.
pub struct Subject {
    /// `Rust`, `C`, `JavaScript` or `Python`.
    pub language: &'static str,
    /// The component.
    pub component: PathBuf,
    /// Cold compiles to take the median of (interpreters compile for many seconds).
    pub compiles: usize,
    /// Compiled to WebAssembly (Rust, C) rather than an interpreter in a component.
    pub compiled: bool,
}

/// The four builds: Rust from the guest workspace, the others built into `scratch` from
/// copies of their projects.
pub fn subjects(scratch: &Path) -> Result<Vec<Subject>> {
    let mut subjects = vec![Subject {
        language: "Rust",
        component: guests_dir().join("bench.wasm"),
        compiles: 5,
        compiled: true,
    }];
    for (language, project, compiles, compiled) in [
        ("C", "bench-c", 5, true),
        ("JavaScript", "bench-js", 2, false),
        ("Python", "bench-python", 2, false),
    ] {
        let dir = scratch.join("projects").join(project);
        copy_project_sources(&workspace_root().join("tests/plugins").join(project), &dir)?;
        eprintln!("bench: building the {language} bench plugin");
        let built = cairn_plugin_dev::build(&dir).with_context(|| format!("building {project}"))?;
        subjects.push(Subject {
            language,
            component: built.component,
            compiles,
            compiled,
        });
    }
    Ok(subjects)
}

/// A measure's name, unit, and how to read it from [`Measured`].
type Measure = (&'static str, &'static str, fn(&Measured) -> f64);

/// What was measured of one language.
struct Measured {
    language: &'static str,
    size_kib: f64,
    cold_ms: f64,
    warm_ms: f64,
    instantiate_us: f64,
    call_ns: f64,
    /// The same call through wasmtime alone, for the compiled languages (the interpreters'
    /// components import WASI versions the plain linker lacks).
    bare_call_ns: Option<f64>,
    /// The same, compiled with epoch interruption as Cairn's calls must be.
    bare_epoch_call_ns: Option<f64>,
    /// Per event of a run given to `on-events` in one call, for a plugin of API 0.2.1.
    run_call_ns: Option<f64>,
    import_ns: f64,
}

/// Measure every subject and add the rows, grouped by measure so languages sit together;
/// each note gives the ratio to Rust.
pub fn language_rows(
    rows: &mut Vec<Row>,
    scratch: &Path,
    services: &Arc<HostServices>,
) -> Result<()> {
    let mut measured = Vec::new();
    for subject in subjects(scratch)? {
        eprintln!("bench: measuring the {} bench plugin", subject.language);
        measured.push(measure(scratch, &subject, services)?);
    }
    let rust = measured.first().context("the Rust subject")?;
    let native_ns = native_call_ns();
    let measures: [Measure; 6] = [
        ("component size", "KiB", |m| m.size_kib),
        ("cold compile", "ms", |m| m.cold_ms),
        ("load from compile cache", "ms", |m| m.warm_ms),
        ("instantiate (new Store, WASI ctx, init)", "µs", |m| {
            m.instantiate_us
        }),
        ("host→guest call (on-event, 64 B checksum)", "ns", |m| {
            m.call_ns
        }),
        ("guest→host call (lifecycle.interrupted)", "ns", |m| {
            m.import_ns
        }),
    ];
    for (name, unit, value) in measures {
        for m in &measured {
            let mut note = format!("{:.1}x Rust", value(m) / value(rust));
            if name.starts_with("host→guest") {
                note.push_str(&format!(
                    "; {:.0}x the same function called natively ({native_ns:.1} ns)",
                    value(m) / native_ns
                ));
                let floors = [
                    ("the same call through wasmtime alone", m.bare_call_ns),
                    (
                        "through wasmtime alone with epoch interruption on",
                        m.bare_epoch_call_ns,
                    ),
                ];
                for (floor, bare) in floors {
                    if let Some(bare) = bare {
                        note.push_str(&format!(
                            "; {:.2}x {floor} ({bare:.0} ns)",
                            m.call_ns / bare
                        ));
                    }
                }
            }
            rows.push(Row {
                name: format!("plugin in {}: {name}", m.language),
                value: value(m),
                unit,
                note,
            });
        }
    }
    for m in &measured {
        if let Some(per_event) = m.run_call_ns {
            rows.push(Row {
                name: format!(
                    "plugin in {}: host→guest per event of a {RUN}-event on-events call",
                    m.language
                ),
                value: per_event,
                unit: "ns",
                note: format!("{:.2}x one on-event call", per_event / m.call_ns),
            });
        }
    }
    Ok(())
}

/// Events in the run the `on-events` row gives a plugin per call.
const RUN: usize = 64;

/// Rounds in which a plugin's call and the same call through wasmtime alone take turns.
const CALL_ROUNDS: usize = 7;

/// How long each side calls in one round.
const CALL_ROUND: Duration = Duration::from_millis(300);

fn measure(scratch: &Path, subject: &Subject, services: &Arc<HostServices>) -> Result<Measured> {
    let (cold_ms, warm_ms) = compile_times(scratch, subject)?;
    let cache = scratch.join(format!("cache-calls-{}", subject.language));
    let runtime = runtime(&cache)?;
    let dir = scratch.join(format!("manifest-{}", subject.language));
    std::fs::create_dir_all(&dir)?;
    let manifest = write_manifest(&dir, "bench", &subject.component)?;
    let prepared = runtime.prepare(manifest, scratch)?;
    let fresh = || -> Result<PluginInstance> {
        let mut instance = prepared
            .instantiate(services.clone())
            .map_err(|f| anyhow::anyhow!("{f}"))?;
        instance.init("{}").context("init")?;
        Ok(instance)
    };
    let instantiate_us = per_iteration(Duration::from_secs(2), || {
        black_box(fresh()?);
        Ok(())
    })? * 1e6;

    let mut instance = fresh()?;
    let checksum = event(
        "bench.checksum",
        format!("{{\"text\":\"{}\"}}", "x".repeat(54)),
    );
    // Cairn's call and the same call through wasmtime alone (without and with epoch
    // interruption) take turns in short rounds, so a slow spell of the machine falls on all
    // three; medians compared.
    let bare_checksum = wit_event(&checksum);
    let mut bares = if subject.compiled {
        Some((
            BareHandler::new(&subject.component, false)?,
            BareHandler::new(&subject.component, true)?,
        ))
    } else {
        None
    };
    let (mut calls, mut plain, mut with_epoch) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..CALL_ROUNDS {
        calls.push(
            per_iteration(CALL_ROUND, || {
                instance
                    .on_event(black_box(&checksum))
                    .context("checksum call")
            })? * 1e9,
        );
        if let Some((bare, bare_epoch)) = &mut bares {
            plain.push(
                per_iteration(CALL_ROUND, || bare.on_event(black_box(&bare_checksum)))? * 1e9,
            );
            with_epoch.push(
                per_iteration(CALL_ROUND, || {
                    bare_epoch.on_event(black_box(&bare_checksum))
                })? * 1e9,
            );
        }
    }
    let call_ns = median(calls);
    let bare_call_ns = bares.is_some().then(|| median(plain));
    let bare_epoch_call_ns = bares.is_some().then(|| median(with_epoch));
    let run_call_ns = if instance.takes_runs() {
        let run = vec![checksum.clone(); RUN];
        let per_run = per_iteration(Duration::from_secs(2), || {
            instance
                .on_events(black_box(&run))
                .map_err(|stopped| anyhow::anyhow!("checksum run: {:?}", stopped.error))
        })?;
        Some(per_run * 1e9 / RUN as f64)
    } else {
        None
    };
    let import_ns = import_call_ns(&mut instance)?;
    Ok(Measured {
        language: subject.language,
        size_kib: std::fs::metadata(&subject.component)?.len() as f64 / 1024.0,
        cold_ms,
        warm_ms,
        instantiate_us,
        call_ns,
        bare_call_ns,
        bare_epoch_call_ns,
        run_call_ns,
        import_ns,
    })
}

/// Median cold compile and median load from the warm compile cache, in ms.
fn compile_times(scratch: &Path, subject: &Subject) -> Result<(f64, f64)> {
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    for run in 0..subject.compiles {
        let cache = scratch.join(format!("cache-{}-{run}", subject.language));
        let started = Instant::now();
        let (_, outcome) = runtime(&cache)?.load_component(&subject.component)?;
        cold.push(started.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(outcome == CacheOutcome::Compiled, "cold load must compile");
        for _ in 0..3 {
            let fresh = runtime(&cache)?;
            let started = Instant::now();
            let (_, outcome) = fresh.load_component(&subject.component)?;
            warm.push(started.elapsed().as_secs_f64() * 1e3);
            anyhow::ensure!(outcome == CacheOutcome::Hit, "warm load must hit the cache");
        }
    }
    Ok((median(cold), median(warm)))
}

/// Seconds per call of `work`, repeated (after a warm-up) until `budget` has passed; the
/// clock is read once per 16 calls, so reading it costs the calls almost nothing.
fn per_iteration(budget: Duration, mut work: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..10 {
        work()?;
    }
    let started = Instant::now();
    let mut iterations = 0u64;
    while started.elapsed() < budget || iterations < 32 {
        for _ in 0..16 {
            work()?;
        }
        iterations += 16;
    }
    Ok(started.elapsed().as_secs_f64() / iterations as f64)
}

/// The cost of one import call: an on-event making N calls less one making none, with N
/// grown until the difference is measurable (best of three).
fn import_call_ns(instance: &mut PluginInstance) -> Result<f64> {
    let mut calls = 1_000u64;
    loop {
        let (mut base, mut full) = (Duration::MAX, Duration::MAX);
        for _ in 0..3 {
            let started = Instant::now();
            instance.on_event(&event("bench.imports", "0".into()))?;
            base = base.min(started.elapsed());
            let started = Instant::now();
            instance.on_event(&event("bench.imports", calls.to_string()))?;
            full = full.min(started.elapsed());
        }
        if full >= Duration::from_millis(200) || calls >= 10_000_000 {
            return Ok(full.saturating_sub(base).as_secs_f64() * 1e9 / calls as f64);
        }
        calls *= 10;
    }
}

/// The checksum function called natively, for the host→guest ratio.
fn native_call_ns() -> f64 {
    let checksum = event(
        "bench.checksum",
        format!("{{\"text\":\"{}\"}}", "x".repeat(54)),
    );
    let calls = 1_000_000u32;
    let started = Instant::now();
    for _ in 0..calls {
        black_box(native_on_event(black_box(&checksum))).ok();
    }
    started.elapsed().as_secs_f64() * 1e9 / f64::from(calls)
}

/// An event on `topic` as the bench plugins take it.
pub fn event(topic: &str, payload: String) -> Event {
    Event {
        seq: 1,
        topic: topic.into(),
        payload,
        source: "bench".into(),
        session_id: None,
        agent_id: None,
        user_id: None,
        created_at: 0,
        depth: 0,
    }
}
