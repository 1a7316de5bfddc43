//! Tools for plugin authors: `cairn plugin new` and `cairn plugin build`.
//!
//! A plugin project is a directory holding the plugin's manifest (`<id>.yaml`), its source in
//! one language and a `wit/` folder generated from the host's own WIT (never hand-copied).
//! [`scaffold`] writes such a project for any kind and language; [`build`] turns it into the
//! WASI 0.2 component its manifest names, with the toolchain of its language, and says what
//! is missing and how to install it when a toolchain is absent.

mod build;
mod scaffold;
mod tools;
mod wit;

use std::fmt;
use std::path::PathBuf;

pub use build::{Built, build};
pub use scaffold::{NewProject, default_dir, scaffold};
pub use wit::{API_VERSION, write_wit};

/// A language a plugin can be written in, each with its own toolchain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// cargo with the wasm32-wasip2 target and wit-bindgen.
    Rust,
    /// componentize-py.
    Python,
    /// componentize-js (npm `@bytecodealliance/componentize-js`).
    Js,
    /// clang with wasi-libc; bindings and the component are made by Cairn itself.
    C,
}

impl Language {
    /// Every language, in the order they are listed to users.
    pub const ALL: [Language; 4] = [Language::Rust, Language::Python, Language::Js, Language::C];

    /// The name used on the command line: `rust`, `python`, `js`, `c`.
    pub fn name(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::Python => "python",
            Language::Js => "js",
            Language::C => "c",
        }
    }

    /// The language a name spells, if any.
    pub fn parse(name: &str) -> Option<Self> {
        Language::ALL.into_iter().find(|l| l.name() == name)
    }

    /// The language of a project, told by the file its toolchain starts from: `Cargo.toml`,
    /// `app.py`, `plugin.js` or a `.c` file.
    pub fn detect(dir: &std::path::Path) -> Result<Self, DevError> {
        let has = |name: &str| dir.join(name).is_file();
        if has("Cargo.toml") {
            return Ok(Language::Rust);
        }
        if has("app.py") {
            return Ok(Language::Python);
        }
        if has("plugin.js") {
            return Ok(Language::Js);
        }
        let has_c = std::fs::read_dir(dir)
            .map_err(|source| DevError::Io {
                path: dir.to_path_buf(),
                source,
            })?
            .filter_map(Result::ok)
            .any(|e| e.path().extension().is_some_and(|x| x == "c"));
        if has_c {
            return Ok(Language::C);
        }
        Err(DevError::UnknownLanguage(dir.to_path_buf()))
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What can go wrong scaffolding or building a plugin. Each case names the file, tool or
/// argument at fault; [`DevError::is_bad_input`] tells the user's mistakes from failures.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    /// A toolchain the language needs is not installed.
    #[error("{tool} is not installed; {install}")]
    ToolMissing {
        /// The program looked for.
        tool: String,
        /// How to install it.
        install: String,
    },
    /// The toolchain ran and failed; its output was shown.
    #[error("{tool} failed ({status}) building {dir}; {hint}")]
    ToolFailed {
        /// The program that failed.
        tool: String,
        /// Its exit status.
        status: String,
        /// The project it was building.
        dir: PathBuf,
        /// What usually causes the failure.
        hint: String,
    },
    /// The directory holds no source Cairn knows how to build.
    #[error(
        "cannot tell the language of {0}: expected Cargo.toml (rust), app.py (python), plugin.js (js) or a .c file (c)"
    )]
    UnknownLanguage(PathBuf),
    /// `plugin new` would overwrite something.
    #[error("{0} already exists; choose another name or directory")]
    Exists(PathBuf),
    /// `plugin new --dir` names a place under a file: nothing can be written there.
    #[error("--dir {dir}: {file} is a file, not a directory; expected a path inside a directory")]
    InsideAFile {
        /// The project directory asked for.
        dir: PathBuf,
        /// The file on its path.
        file: PathBuf,
    },
    /// `plugin new --dir` names a place where no directory can be made (a missing or
    /// read-only parent, a pseudo file system).
    #[error("--dir {dir}: cannot create the project directory: {source}")]
    CannotCreate {
        /// The project directory asked for.
        dir: PathBuf,
        /// Why it could not be made.
        source: std::io::Error,
    },
    /// A plugin id that a manifest would refuse.
    #[error(
        "plugin name `{0}`: expected lower-case letters, digits and single dashes, starting with a letter and not ending with a dash, at most 64 characters"
    )]
    BadName(String),
    /// The WIT could not be read or bindings not made from it.
    #[error("WIT in {dir}: {message}")]
    Wit {
        /// The project's `wit/` folder.
        dir: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The core module could not be made into a component.
    #[error("making a component of {module}: {message}")]
    Component {
        /// The core module clang produced.
        module: PathBuf,
        /// What wit-component said.
        message: String,
    },
    /// The toolchain finished but produced no component where expected.
    #[error("{tool} produced no component (looked for {expected})")]
    NoOutput {
        /// The toolchain.
        tool: String,
        /// Where the component was expected.
        expected: PathBuf,
    },
    /// The project's manifest is invalid (every problem listed).
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Manifest(Vec<cairn_plugin::manifest::ManifestError>),
    /// A project must hold exactly one manifest.
    #[error("{dir}: expected one plugin manifest (*.yaml, *.yml), found {}{}", found.len(), listed(found))]
    ManifestCount {
        /// The project directory.
        dir: PathBuf,
        /// The manifests it holds.
        found: Vec<PathBuf>,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl DevError {
    /// Whether the user can fix this by changing their input or installing a tool (exit 2),
    /// rather than a failure of the build itself (exit 1).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            DevError::ToolMissing { .. }
                | DevError::UnknownLanguage(_)
                | DevError::InsideAFile { .. }
                | DevError::CannotCreate { .. }
                | DevError::Exists(_)
                | DevError::BadName(_)
                | DevError::Manifest(_)
                | DevError::ManifestCount { .. }
        )
    }
}

/// `: a.yaml, b.yaml` — the file names of `files`, when there are any.
fn listed(files: &[PathBuf]) -> String {
    let names: Vec<String> = files
        .iter()
        .filter_map(|f| f.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    match names.is_empty() {
        true => String::new(),
        false => format!(": {}", names.join(", ")),
    }
}

/// An I/O error with the path it happened on.
pub(crate) fn io_error(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> DevError + '_ {
    move |source| DevError::Io {
        path: path.to_path_buf(),
        source,
    }
}
