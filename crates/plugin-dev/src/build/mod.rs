//! `cairn plugin build`: a project's source into the component its manifest names, with the
//! toolchain of the project's language.

mod c;
mod js;
mod python;
mod rust;

use std::path::{Path, PathBuf};

use cairn_plugin::bindings::ApiVersion;
use cairn_plugin::manifest::{self, Manifest, World};

use crate::{DevError, Language, io_error, write_wit};

/// What a toolchain builds: the project, the world its manifest's kind implements, and
/// where the component goes (the manifest's `component`).
#[derive(Debug, Clone)]
pub(crate) struct BuildTarget {
    /// The project directory.
    pub(crate) dir: PathBuf,
    /// The world the plugin implements.
    pub(crate) world: World,
    /// Where to write the component.
    pub(crate) output: PathBuf,
}

impl BuildTarget {
    /// The world's name in the WIT package.
    pub(crate) fn world_name(&self) -> &'static str {
        cairn_plugin::runtime::world_name(self.world)
    }
}

/// A finished build.
#[derive(Debug, Clone)]
pub struct Built {
    /// The plugin's id.
    pub id: String,
    /// The project's language.
    pub language: Language,
    /// The component written.
    pub component: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
}

/// Build the project in `dir`: check its manifest, refresh its `wit/` from the host's, run
/// its language's toolchain and check the component landed where the manifest says.
pub fn build(dir: &Path) -> Result<Built, DevError> {
    // Toolchains run inside the project: a relative path would mean another place to them.
    let dir = &std::path::absolute(dir).map_err(io_error(dir))?;
    let manifest = project_manifest(dir)?;
    check_replaceable(&manifest)?;
    let language = Language::detect(dir)?;
    // The toolchain writes beside the component, which is replaced only by a whole new one:
    // a build that fails (or cannot start) leaves the last working component in place, and
    // a stale one never passes for a fresh one.
    let target = &BuildTarget {
        dir: dir.clone(),
        world: World::of(manifest.kind),
        output: building_path(&manifest.component),
    };
    // The oldest version the manifest allows: every host it allows can load the plugin, and
    // a project keeps its contract until its manifest asks for a newer one (`^0.2.1`).
    let api = ApiVersion::oldest_matching(&manifest.api).unwrap_or(manifest.api_version);
    write_wit(&target.dir.join("wit"), api)?;
    if let Some(parent) = target.output.parent() {
        std::fs::create_dir_all(parent).map_err(io_error(parent))?;
    }
    remove_if_there(&target.output)?;
    let built = match language {
        Language::Rust => rust::build(target),
        Language::Python => python::build(target),
        Language::Js => js::build(target),
        Language::C => c::build(target),
    };
    if let Err(error) = built {
        let _ = std::fs::remove_file(&target.output);
        return Err(error);
    }
    let bytes = std::fs::metadata(&target.output)
        .map_err(|_| DevError::NoOutput {
            tool: language.name().to_string(),
            expected: manifest.component.clone(),
        })?
        .len();
    std::fs::rename(&target.output, &manifest.component).map_err(io_error(&manifest.component))?;
    Ok(Built {
        id: manifest.id,
        language,
        component: manifest.component,
        bytes,
    })
}

/// Refuse a manifest whose `component` names something a build must not replace: a
/// directory, or a file that is no WebAssembly binary — the project's source or its
/// manifest, say (until 2026-12-04 the build wrote the component over `plugin.c`).
fn check_replaceable(manifest: &Manifest) -> Result<(), DevError> {
    let component = &manifest.component;
    let problem = match std::fs::metadata(component) {
        Err(_) => return Ok(()),
        Ok(m) if m.is_dir() => "is a directory".to_string(),
        Ok(m) if !m.is_file() => "is not a regular file".to_string(),
        Ok(m) if m.len() == 0 => return Ok(()),
        Ok(_) if is_wasm(component) => return Ok(()),
        Ok(_) => "is a file that is no WebAssembly binary".to_string(),
    };
    Err(DevError::Manifest(vec![manifest::ManifestError {
        file: manifest.file.clone(),
        field: "component".into(),
        message: format!(
            "{} {problem}, which the build would replace; expected the path of the \
             component (.wasm) to write",
            component.display()
        ),
    }]))
}

/// Whether the file at `path` begins as a WebAssembly binary does (`\0asm`).
fn is_wasm(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut magic))
        .is_ok_and(|()| &magic == b"\0asm")
}

/// Where the toolchain writes the component before it replaces `component`:
/// `<name>.building.wasm` beside it.
fn building_path(component: &Path) -> PathBuf {
    let stem = component.file_stem().unwrap_or_default().to_string_lossy();
    component.with_file_name(format!("{stem}.building.wasm"))
}

/// Remove `path` (a leftover of a build that was killed), if it is there.
fn remove_if_there(path: &Path) -> Result<(), DevError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_error(path)(e)),
        _ => Ok(()),
    }
}

/// The one manifest of a project, validated but for the component it is about to build.
fn project_manifest(dir: &Path) -> Result<Manifest, DevError> {
    let yaml = manifest::manifest_files(dir).map_err(io_error(dir))?;
    match yaml.as_slice() {
        [file] => manifest::load_unbuilt(file).map_err(DevError::Manifest),
        _ => Err(DevError::ManifestCount {
            dir: dir.to_path_buf(),
            found: yaml,
        }),
    }
}
