//! Builds the guest components the integration tests and the benchmark harness load:
//! the test plugins (`tests/plugins`), the bundled plugins (`plugins`) and the Python test
//! plugin (componentize-py), as wasmtime's test-programs are built. Guest builds use their
//! own target dir (`target/guests`) so they never wait on the outer build's lock.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let tests_dir =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = tests_dir
        .parent()
        .expect("tests/ is inside the workspace")
        .to_path_buf();
    let target_dir = root.join("target").join("guests");
    for watched in ["wit", "plugins/Cargo.toml", "plugins", "tests/plugins"] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }

    build_workspace(&root.join("tests/plugins/Cargo.toml"), &target_dir);
    build_workspace(&root.join("plugins/Cargo.toml"), &target_dir);
    let wasm_dir = target_dir.join("wasm32-wasip2").join("release");
    let python = target_dir.join("python-kv.wasm");
    componentize_python(&root, &root.join("tests/plugins/python-kv"), &python);

    println!("cargo:rustc-env=CAIRN_GUESTS_DIR={}", wasm_dir.display());
    println!("cargo:rustc-env=CAIRN_PYTHON_PLUGIN={}", python.display());
    println!("cargo:rustc-env=CAIRN_WORKSPACE_ROOT={}", root.display());
}

fn build_workspace(manifest: &Path, target_dir: &Path) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--manifest-path",
        ])
        .arg(manifest)
        .arg("--target-dir")
        .arg(target_dir)
        // The outer build's flags are for the host target, not for wasm guests.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo for {}: {e}", manifest.display()));
    assert!(
        status.success(),
        "building guest plugins of {} failed ({status}); is the wasm32-wasip2 target installed? \
         (`cargo xtask install-tools` adds it)",
        manifest.display()
    );
}

/// componentize-py from PATH, or from the scripts dir of `python3` when PATH lacks it
/// (pip's script dir is not always on PATH, e.g. under pyenv before a rehash).
fn componentize_py() -> PathBuf {
    let on_path = Command::new("componentize-py")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if on_path {
        return PathBuf::from("componentize-py");
    }
    Command::new("python3")
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_path('scripts'))",
        ])
        .output()
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()).join("componentize-py"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("componentize-py"))
}

fn componentize_python(root: &Path, app_dir: &Path, output: &Path) {
    let status = Command::new(componentize_py())
        .arg("-d")
        .arg(root.join("wit/v0.1"))
        .args(["-w", "handler", "componentize", "app", "-o"])
        .arg(output)
        .current_dir(app_dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .status()
        .unwrap_or_else(|e| {
            panic!("cannot run componentize-py ({e}); install it with `cargo xtask install-tools` (pip install componentize-py==0.25.1)")
        });
    assert!(
        status.success(),
        "componentize-py failed for {} ({status})",
        app_dir.display()
    );
}
