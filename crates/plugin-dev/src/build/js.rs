//! JavaScript: componentize-js bundles StarlingMonkey and the project's `plugin.js`.

use std::process::Command;

use super::BuildTarget;
use crate::DevError;
use crate::tools::{find, run};

/// The componentize-js release Cairn's JavaScript plugins are tested with.
pub(crate) const COMPONENTIZE_JS: &str = "@bytecodealliance/componentize-js@0.23.0";

pub(super) fn build(target: &BuildTarget) -> Result<(), DevError> {
    let tool = find(
        "componentize-js",
        &[target.dir.join("node_modules/.bin")],
        &format!(
            "run `npm install` in {} (its package.json names it), or `npm install -g {COMPONENTIZE_JS}`",
            target.dir.display()
        ),
    )?;
    run(
        Command::new(tool)
            .args(["--wit", "wit", "--world-name", target.world_name()])
            // `fetch` goes out through wasi:http/outgoing-handler (checked against
            // capabilities.http); a plugin serves no HTTP itself, so no incoming handler.
            .args(["--disable", "fetch-event", "--out"])
            .arg(&target.output)
            .arg("plugin.js")
            .current_dir(&target.dir),
        &target.dir,
        "see componentize-js's message above (a syntax error in plugin.js, or an export of the world left out)",
    )
}
