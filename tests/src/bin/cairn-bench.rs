//! The benchmark harness behind `cargo xtask bench`: measures the plugin runtime on the
//! real components, prints a table and writes `target/bench/bench.json`.
//!
//! Comparisons are ratios measured side by side in one run (a WASM call next to the same
//! function called natively).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use cairn::config::{KvConfig, RuntimeConfig};
use cairn::plugin::bindings::v0_1::types::Event;
use cairn::plugin::capabilities::HostServices;
use cairn::plugin::kv::KvStore;
use cairn::plugin::manifest;
use cairn::plugin::runtime::{CacheOutcome, Runtime};
use cairn_tests::{guests_dir, python_plugin, workspace_root};

/// One row of the table.
struct Row {
    name: String,
    value: f64,
    unit: &'static str,
    note: String,
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(|a, b| a.total_cmp(b));
    samples[samples.len() / 2]
}

/// FNV-1a, identical to the bench plugin's.
#[inline(never)]
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The native twin of the plugin's `on-event`: same dispatch on topic, same checksum.
#[inline(never)]
fn native_on_event(event: &Event) -> Result<(), String> {
    match event.topic.as_str() {
        "bench.checksum" => {
            black_box(fnv1a(event.payload.as_bytes()));
            Ok(())
        }
        other => Err(other.to_string()),
    }
}

fn write_manifest(dir: &Path, id: &str, component: &Path) -> Result<Arc<manifest::Manifest>> {
    let file = dir.join(format!("{id}.yaml"));
    std::fs::write(
        &file,
        format!(
            "id: {id}\nversion: 1.0.0\nkind: handler\ncomponent: {}\napi: ^0.1\ncapabilities: {{kv: true, lifecycle: true}}\nlimits: {{memory_mb: 256, timeout_ms: 60000}}\n",
            component.display()
        ),
    )?;
    let manifest = manifest::load_file(&file).map_err(|errors| anyhow::anyhow!("{errors:?}"))?;
    Ok(Arc::new(manifest))
}

fn runtime(cache: &Path) -> Result<Runtime> {
    Ok(Runtime::new(&RuntimeConfig::default(), cache, 256)?)
}

fn compile_rows(
    rows: &mut Vec<Row>,
    scratch: &Path,
    label: &str,
    component: &Path,
    runs: usize,
) -> Result<()> {
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    for run in 0..runs {
        let cache = scratch.join(format!("cache-{label}-{run}"));
        let started = Instant::now();
        let (_, outcome) = runtime(&cache)?.load_component(component)?;
        cold.push(started.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(outcome == CacheOutcome::Compiled, "cold load must compile");
        for _ in 0..3 {
            let fresh = runtime(&cache)?;
            let started = Instant::now();
            let (_, outcome) = fresh.load_component(component)?;
            warm.push(started.elapsed().as_secs_f64() * 1e3);
            anyhow::ensure!(outcome == CacheOutcome::Hit, "warm load must hit the cache");
        }
    }
    let size = std::fs::metadata(component)?.len() as f64 / (1 << 20) as f64;
    let cold_ms = median(cold);
    let warm_ms = median(warm);
    rows.push(Row {
        name: format!("cold compile, {label} plugin"),
        value: cold_ms,
        unit: "ms",
        note: format!("{size:.2} MiB component, median of {runs}"),
    });
    rows.push(Row {
        name: format!("load from warm cache, {label} plugin"),
        value: warm_ms,
        unit: "ms",
        note: format!("{:.0}x faster than compiling", cold_ms / warm_ms),
    });
    Ok(())
}

fn main() -> Result<()> {
    let scratch = tempfile::tempdir()?;
    let mut rows = Vec::new();
    let rust_component = guests_dir().join("bench.wasm");
    let python_component = python_plugin();
    anyhow::ensure!(
        rust_component.is_file(),
        "{} missing: run via `cargo xtask bench`",
        rust_component.display()
    );

    compile_rows(&mut rows, scratch.path(), "Rust", &rust_component, 5)?;
    compile_rows(&mut rows, scratch.path(), "Python", &python_component, 2)?;

    // Instantiate from the InstancePre, and calls, on the Rust bench plugin.
    let cache = scratch.path().join("cache-calls");
    let runtime = runtime(&cache)?;
    let manifest = write_manifest(scratch.path(), "bench", &rust_component)?;
    let prepared = runtime.prepare(manifest, scratch.path())?;
    let services = Arc::new(HostServices {
        kv: Arc::new(KvStore::open(scratch.path(), KvConfig::default())?),
        buffer: None,
    });

    let instantiations = 2_000;
    let started = Instant::now();
    for _ in 0..instantiations {
        black_box(
            prepared
                .instantiate(services.clone())
                .map_err(|f| anyhow::anyhow!("{f}"))?,
        );
    }
    let per_instantiate = started.elapsed().as_secs_f64() * 1e6 / f64::from(instantiations);
    rows.push(Row {
        name: "instantiate from InstancePre (new Store + WASI ctx)".into(),
        value: per_instantiate,
        unit: "µs",
        note: format!("pooling allocator: {}", runtime.pooling()),
    });

    let mut instance = prepared
        .instantiate(services.clone())
        .map_err(|f| anyhow::anyhow!("{f}"))?;
    instance.init("{}").context("init")?;
    let event = |topic: &str, payload: String| Event {
        seq: 1,
        topic: topic.into(),
        payload,
        source: "bench".into(),
        session_id: None,
        agent_id: None,
        user_id: None,
        created_at: 0,
    };
    let checksum = event(
        "bench.checksum",
        format!("{{\"text\":\"{}\"}}", "x".repeat(54)),
    );
    let calls = 200_000u32;
    for _ in 0..1_000 {
        instance.on_event(&checksum).context("warm-up")?;
    }
    let started = Instant::now();
    for _ in 0..calls {
        instance.on_event(black_box(&checksum)).context("call")?;
    }
    let wasm_ns = started.elapsed().as_secs_f64() * 1e9 / f64::from(calls);
    let started = Instant::now();
    for _ in 0..calls {
        native_on_event(black_box(&checksum)).map_err(anyhow::Error::msg)?;
    }
    let native_ns = started.elapsed().as_secs_f64() * 1e9 / f64::from(calls);
    rows.push(Row {
        name: "host→guest call round trip (on-event, 64 B payload)".into(),
        value: wasm_ns,
        unit: "ns",
        note: format!(
            "native same function {native_ns:.1} ns, ratio {:.0}x",
            wasm_ns / native_ns
        ),
    });

    let imports = 1_000_000u64;
    let empty = event("bench.imports", "0".into());
    let many = event("bench.imports", imports.to_string());
    let mut base = Duration::MAX;
    let mut full = Duration::MAX;
    for _ in 0..5 {
        let started = Instant::now();
        instance.on_event(&empty).context("imports 0")?;
        base = base.min(started.elapsed());
        let started = Instant::now();
        instance.on_event(&many).context("imports")?;
        full = full.min(started.elapsed());
    }
    let per_import = (full.saturating_sub(base)).as_secs_f64() * 1e9 / imports as f64;
    rows.push(Row {
        name: "guest→host import call (lifecycle.interrupted)".into(),
        value: per_import,
        unit: "ns",
        note: format!("{imports} calls inside one on-event"),
    });

    print_and_save(&rows)
}

fn print_and_save(rows: &[Row]) -> Result<()> {
    println!("{:<58} {:>12}  {:<4} NOTE", "BENCHMARK", "VALUE", "UNIT");
    for row in rows {
        println!(
            "{:<58} {:>12.1}  {:<4} {}",
            row.name, row.value, row.unit, row.note
        );
    }
    let out_dir: PathBuf = workspace_root().join("target").join("bench");
    std::fs::create_dir_all(&out_dir)?;
    let json: Vec<_> = rows
        .iter()
        .map(|r| serde_json::json!({"name": r.name, "value": r.value, "unit": r.unit, "note": r.note}))
        .collect();
    let report = serde_json::json!({
        "generated_at_ms": cairn::store::now_ms(),
        "rows": json,
    });
    let path = out_dir.join("bench.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("\nwritten to {}", path.display());
    Ok(())
}
