//! C: Cairn makes the bindings (wit-bindgen's C generator) and the component (wit-component
//! with the WASI reactor adapter) itself; only clang, wasm-ld and wasi-libc come from the
//! system.

use std::path::{Path, PathBuf};
use std::process::Command;

use wasi_preview1_component_adapter_provider::{
    WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
};
use wit_bindgen_core::Files;
use wit_component::ComponentEncoder;
use wit_parser::Resolve;

use super::BuildTarget;
use crate::tools::{find_any, run};
use crate::{DevError, io_error};

/// Debian's packages for C plugins (clang, wasm-ld, wasi-libc and the wasm32 runtime).
const INSTALL: &str = "install clang, lld and wasi-libc, e.g. `apt-get install clang-19 lld-19 wasi-libc libclang-rt-19-dev-wasm32` on Debian 12";

pub(super) fn build(target: &BuildTarget) -> Result<(), DevError> {
    let clang = find_any(&["clang-19", "clang-20", "clang-18", "clang"], INSTALL)?;
    let work = target.dir.join("build");
    let bindings = work.join("bindings");
    generate_bindings(target, &bindings)?;
    let core = work.join("core.wasm");
    let mut command = Command::new(clang);
    command
        .args([
            "--target=wasm32-wasi",
            "-mexec-model=reactor",
            "-O2",
            "-Wall",
        ])
        .arg("-I")
        .arg(&bindings)
        .args(sources(&target.dir)?)
        .args(sources(&bindings)?)
        .args(files_ending(&bindings, "_component_type.o")?)
        .args(["-Wl,--strip-debug", "-o"])
        .arg(&core);
    let exports = exported_functions(&bindings)?;
    run(
        &mut command,
        &target.dir,
        &format!(
            "see clang's message above; `undefined symbol: exports_…` means the source lacks \
             a function the manifest's world and API export: it must define {} (declared in \
             build/bindings); a missing <stdio.h> or wasm-ld means: {INSTALL}",
            exports.join(", ")
        ),
    )?;
    componentize(&core, &target.output)
}

/// The world's C bindings (`<world>.h`, `<world>.c`, `<world>_component_type.o`), made
/// anew from the project's `wit/` on every build.
fn generate_bindings(target: &BuildTarget, out: &Path) -> Result<(), DevError> {
    let wit_dir = target.dir.join("wit");
    let wit_error = |e: anyhow::Error| DevError::Wit {
        dir: wit_dir.clone(),
        message: format!("{e:#}"),
    };
    let mut resolve = Resolve::default();
    let (package, _) = resolve.push_path(&wit_dir).map_err(wit_error)?;
    let world = resolve
        .select_world(&[package], Some(target.world_name()))
        .map_err(wit_error)?;
    let mut files = Files::default();
    wit_bindgen_c::Opts::default()
        .build()
        .generate(&mut resolve, world, &mut files)
        .map_err(wit_error)?;
    if out.exists() {
        std::fs::remove_dir_all(out).map_err(io_error(out))?;
    }
    std::fs::create_dir_all(out).map_err(io_error(out))?;
    for (name, contents) in files.iter() {
        let path = out.join(name);
        std::fs::write(&path, contents).map_err(io_error(&path))?;
    }
    Ok(())
}

/// The functions the plugin's source must define: those the generated headers in
/// `bindings` list under `// Exported Functions from …` (a 0.2.1 handler's include
/// `…_on_events`, which a source written for 0.2.0 lacks).
fn exported_functions(bindings: &Path) -> Result<Vec<String>, DevError> {
    let mut names = Vec::new();
    for header in files_ending(bindings, ".h")? {
        let text = std::fs::read_to_string(&header).map_err(io_error(&header))?;
        let mut lines = text.lines();
        while lines.any(|line| line.starts_with("// Exported Functions from")) {
            let section = lines.by_ref().take_while(|line| !line.trim().is_empty());
            names.extend(section.filter_map(|declaration| {
                let (head, _) = declaration.split_once('(')?;
                head.split_whitespace().last().map(str::to_string)
            }));
        }
    }
    Ok(names)
}

/// The core module as a component, its WASI imports adapted to WASI 0.2.
fn componentize(core: &Path, output: &Path) -> Result<(), DevError> {
    let component_error = |e: anyhow::Error| DevError::Component {
        module: core.to_path_buf(),
        message: format!("{e:#}"),
    };
    let module = std::fs::read(core).map_err(io_error(core))?;
    let component = ComponentEncoder::default()
        .validate(true)
        .module(&module)
        .and_then(|encoder| {
            encoder.adapter(
                WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
                WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
            )
        })
        .and_then(|mut encoder| encoder.encode())
        .map_err(component_error)?;
    std::fs::write(output, component).map_err(io_error(output))
}

/// The `.c` files directly in `dir`, sorted.
fn sources(dir: &Path) -> Result<Vec<PathBuf>, DevError> {
    files_ending(dir, ".c")
}

fn files_ending(dir: &Path, suffix: &str) -> Result<Vec<PathBuf>, DevError> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io_error(dir))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.to_string_lossy().ends_with(suffix))
        .collect();
    found.sort();
    Ok(found)
}
