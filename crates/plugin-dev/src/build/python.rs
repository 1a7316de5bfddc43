//! Python: componentize-py bundles CPython, the project's `app.py` and its bindings.

use std::path::PathBuf;
use std::process::Command;

use super::BuildTarget;
use crate::DevError;
use crate::tools::{find, run};

/// The componentize-py release Cairn's Python plugins are tested with.
pub(crate) const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";

pub(super) fn build(target: &BuildTarget) -> Result<(), DevError> {
    let tool = find(
        "componentize-py",
        &python_scripts_dir(),
        &format!("install it with `python3 -m pip install {COMPONENTIZE_PY}`"),
    )?;
    run(
        Command::new(tool)
            .args([
                "-d",
                "wit",
                "-w",
                target.world_name(),
                "componentize",
                "app",
                "-o",
            ])
            .arg(&target.output)
            .current_dir(&target.dir)
            .env("PYTHONDONTWRITEBYTECODE", "1"),
        &target.dir,
        "see componentize-py's message above (a Python error in app.py, or an export of the world left out)",
    )
}

/// Where pip puts scripts for `python3`, which is not always on PATH (e.g. under pyenv
/// before a rehash).
fn python_scripts_dir() -> Vec<PathBuf> {
    Command::new("python3")
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_path('scripts'))",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .into_iter()
        .collect()
}
