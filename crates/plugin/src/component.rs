//! What a component file exports, read from its bytes without compiling it, so
//! `cairn plugins check` can tell which world and API version a plugin was built against
//! in milliseconds (compiling a Python component takes seconds).

use std::path::Path;

use wasmparser::{Chunk, Parser, Payload};

/// The names a component exports at its top level, e.g.
/// `cairn:plugin/handler-plugin@0.2.0`; an error naming the file when it cannot be read or
/// is not a well-formed component.
pub fn exported_names(path: &Path) -> Result<Vec<String>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    top_level_exports(&bytes)
        .map_err(|e| format!("{} is not a valid component: {e}", path.display()))
}

/// The top-level export names of a component's bytes; nested modules and components are
/// skipped, not parsed.
fn top_level_exports(mut wasm: &[u8]) -> Result<Vec<String>, String> {
    let mut parser = Parser::new(0);
    let mut names = Vec::new();
    loop {
        let payload = match parser.parse(wasm, true).map_err(|e| e.to_string())? {
            Chunk::Parsed { consumed, payload } => {
                wasm = &wasm[consumed..];
                payload
            }
            Chunk::NeedMoreData(_) => return Err("the file ends early".into()),
        };
        match payload {
            Payload::ComponentExportSection(exports) => {
                for export in exports {
                    names.push(export.map_err(|e| e.to_string())?.name.name.to_string());
                }
            }
            Payload::ModuleSection {
                unchecked_range, ..
            }
            | Payload::ComponentSection {
                unchecked_range, ..
            } => {
                let nested = unchecked_range.end - unchecked_range.start;
                wasm = wasm
                    .get(nested..)
                    .ok_or("a nested section runs past the end")?;
            }
            Payload::End(_) => return Ok(names),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_a_component_is_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("broken.wasm");
        std::fs::write(&path, b"\0asm\x0d\x00\x01\x00\x07\xff").expect("write");
        let error = exported_names(&path).expect_err("a truncated component");
        assert!(error.contains("broken.wasm"), "{error}");
        let missing = exported_names(&dir.path().join("missing.wasm")).expect_err("missing");
        assert!(missing.contains("missing.wasm"), "{missing}");
    }
}
