//! Finding and running the toolchains' programs.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::DevError;

/// `program` from the first of `extra_dirs`, then `PATH`, that holds it; otherwise the
/// [`DevError::ToolMissing`] telling how to `install` it.
pub(crate) fn find(
    program: &str,
    extra_dirs: &[PathBuf],
    install: &str,
) -> Result<PathBuf, DevError> {
    let path_dirs = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    extra_dirs
        .iter()
        .chain(path_dirs.iter())
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| DevError::ToolMissing {
            tool: program.to_string(),
            install: install.to_string(),
        })
}

/// The first of `programs` that [`find`] finds.
pub(crate) fn find_any(programs: &[&str], install: &str) -> Result<PathBuf, DevError> {
    programs
        .iter()
        .find_map(|program| find(program, &[], install).ok())
        .ok_or_else(|| DevError::ToolMissing {
            tool: programs.join(" or "),
            install: install.to_string(),
        })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Run `command` for the project in `dir`, its output going to ours; a failure names the
/// tool and says what usually causes it.
pub(crate) fn run(command: &mut Command, dir: &Path, hint: &str) -> Result<(), DevError> {
    let tool = command.get_program().to_string_lossy().into_owned();
    let status = command.status().map_err(|e| DevError::ToolMissing {
        tool: tool.clone(),
        install: format!("it could not be started ({e})"),
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(DevError::ToolFailed {
            tool,
            status: status.to_string(),
            dir: dir.to_path_buf(),
            hint: hint.to_string(),
        })
    }
}
