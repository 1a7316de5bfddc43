//! Rust: cargo for wasm32-wasip2; the crate's `wit_bindgen::generate!` reads `wit/`.

use std::process::{Command, Stdio};

use super::BuildTarget;
use crate::tools::find;
use crate::{DevError, io_error};

const TARGET: &str = "wasm32-wasip2";

pub(super) fn build(target: &BuildTarget) -> Result<(), DevError> {
    let cargo = std::env::var_os("CARGO").map(Into::into).map_or_else(
        || find("cargo", &[], "install Rust from https://rustup.rs"),
        Ok,
    )?;
    ensure_target()?;
    let output = Command::new(cargo)
        .args(["build", "--release", "--target", TARGET])
        .args([
            "--message-format",
            "json-render-diagnostics",
            "--manifest-path",
        ])
        .arg(target.dir.join("Cargo.toml"))
        // Flags meant for a surrounding build's host target are not for the guest.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .stderr(Stdio::inherit())
        .output()
        .map_err(io_error(&target.dir))?;
    if !output.status.success() {
        return Err(DevError::ToolFailed {
            tool: "cargo".into(),
            status: output.status.to_string(),
            dir: target.dir.clone(),
            hint: "see cargo's message above".into(),
        });
    }
    let built = last_wasm_artifact(&String::from_utf8_lossy(&output.stdout)).ok_or_else(|| {
        DevError::NoOutput {
            tool: "cargo".into(),
            expected: target.dir.join("target").join(TARGET).join("release"),
        }
    })?;
    std::fs::copy(&built, &target.output).map_err(io_error(&target.output))?;
    Ok(())
}

/// The wasm32-wasip2 target must be installed; rustup says whether it is.
fn ensure_target() -> Result<(), DevError> {
    let Ok(listed) = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
    else {
        // Without rustup (a distribution's Rust), cargo's own error will tell.
        return Ok(());
    };
    if String::from_utf8_lossy(&listed.stdout)
        .lines()
        .any(|l| l.trim() == TARGET)
    {
        Ok(())
    } else {
        Err(DevError::ToolMissing {
            tool: format!("the {TARGET} Rust target"),
            install: format!("install it with `rustup target add {TARGET}`"),
        })
    }
}

/// The `.wasm` file of the last artifact cargo reports building (the project's cdylib).
fn last_wasm_artifact(messages: &str) -> Option<String> {
    messages
        .lines()
        .rev()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .find_map(|m| {
            m["filenames"]
                .as_array()?
                .iter()
                .filter_map(|f| f.as_str())
                .find(|f| f.ends_with(".wasm"))
                .map(str::to_string)
        })
}
