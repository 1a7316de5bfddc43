//! `cairn plugin new`: a project that builds with one command and passes
//! `cairn plugins check` once built.

use std::path::{Path, PathBuf};

use cairn_plugin::manifest::{PluginKind, World, is_valid_id};

use crate::{API_VERSION, DevError, Language, io_error, write_wit};

/// What `cairn plugin new` is asked for.
#[derive(Debug, Clone)]
pub struct NewProject {
    /// The directory to create (it must not exist).
    pub dir: PathBuf,
    /// The plugin id (also its manifest's and component's file name).
    pub id: String,
    /// The plugin kind.
    pub kind: PluginKind,
    /// The language.
    pub language: Language,
}

/// Write the project: its manifest, its source, its build files and `wit/`. Returns the
/// files written, relative to the project.
pub fn scaffold(project: &NewProject) -> Result<Vec<PathBuf>, DevError> {
    if !is_valid_id(&project.id) {
        return Err(DevError::BadName(project.id.clone()));
    }
    if project.dir.exists() {
        return Err(DevError::Exists(project.dir.clone()));
    }
    if let Some(file) = project
        .dir
        .ancestors()
        .find(|ancestor| ancestor.exists())
        .filter(|ancestor| !ancestor.is_dir())
    {
        return Err(DevError::InsideAFile {
            dir: project.dir.clone(),
            file: file.to_path_buf(),
        });
    }
    std::fs::create_dir_all(&project.dir).map_err(|source| DevError::CannotCreate {
        dir: project.dir.clone(),
        source,
    })?;
    // Nothing half-written: a project that could not be written whole is removed again.
    write_project(project).inspect_err(|_| {
        let _ = std::fs::remove_dir_all(&project.dir);
    })
}

/// Write the files of `project` into its directory, made already.
fn write_project(project: &NewProject) -> Result<Vec<PathBuf>, DevError> {
    let mut files = vec![(
        PathBuf::from(format!("{}.yaml", project.id)),
        manifest(project),
    )];
    for (path, template) in sources(project.language, World::of(project.kind)) {
        files.push((PathBuf::from(path), fill(template, project)));
    }
    files.push((".gitignore".into(), gitignore(project)));
    for (path, text) in &files {
        let full = project.dir.join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).map_err(io_error(parent))?;
        }
        std::fs::write(&full, text).map_err(io_error(&full))?;
    }
    write_wit(&project.dir.join("wit"), API_VERSION)?;
    Ok(files.into_iter().map(|(path, _)| path).collect())
}

/// The source files of a language and world: (path in the project, template).
fn sources(language: Language, world: World) -> Vec<(&'static str, &'static str)> {
    macro_rules! by_world {
        ($lang:literal, $ext:literal) => {
            match world {
                World::Channel => include_str!(concat!("../templates/", $lang, "/channel.", $ext)),
                World::Handler => include_str!(concat!("../templates/", $lang, "/handler.", $ext)),
                World::MemoryBackend => {
                    include_str!(concat!("../templates/", $lang, "/memory-backend.", $ext))
                }
            }
        };
    }
    match language {
        Language::Rust => vec![
            ("Cargo.toml", include_str!("../templates/rust/Cargo.toml")),
            ("src/lib.rs", by_world!("rust", "rs")),
        ],
        Language::Python => vec![("app.py", by_world!("python", "py"))],
        Language::Js => vec![
            ("package.json", include_str!("../templates/js/package.json")),
            ("plugin.js", by_world!("js", "js")),
        ],
        Language::C => vec![("plugin.c", by_world!("c", "c"))],
    }
}

/// A template with the project's id, kind and world filled in.
fn fill(template: &str, project: &NewProject) -> String {
    template
        .replace("{{id}}", &project.id)
        .replace("{{kind}}", &project.kind.to_string())
}

/// Build outputs stay out of version control.
fn gitignore(project: &NewProject) -> String {
    let own = match project.language {
        Language::Rust => "/target\n",
        Language::Python => "__pycache__/\n",
        Language::Js => "node_modules/\n",
        Language::C => "/build\n",
    };
    format!("/{}.wasm\n{own}", project.id)
}

/// The manifest: what the kind needs to start, with a comment per section.
fn manifest(project: &NewProject) -> String {
    let id = &project.id;
    let kind = project.kind;
    // Interpreted languages carry their runtime inside the component.
    let memory_mb = match project.language {
        Language::Python | Language::Js => 128,
        Language::Rust | Language::C => 32,
    };
    let (subscribes, capabilities) = match kind {
        PluginKind::Channel => (None, ""),
        PluginKind::Handler => (Some("message.received"), "  kv: true\n"),
        PluginKind::Consolidator => (
            Some("memory.session_completed"),
            "  kv: true\n  memory:\n    access: read-write\n    scopes: [all]\n",
        ),
        PluginKind::SleepHandler => (Some("sleep.started"), "  kv: true\n  lifecycle: true\n"),
        PluginKind::MemoryBackend => (None, ""),
    };
    let mut text = format!(
        "# The {id} plugin; `cairn plugin build .` writes {id}.wasm beside this file and\n\
         # `cairn plugins check .` validates both.\n\
         id: {id}\n\
         version: 0.1.0\n\
         kind: {kind}\n\
         description: A {kind} plugin written in {lang}.\n\
         component: {id}.wasm\n\
         api: ^{api}\n",
        lang = project.language,
        api = {
            let version = API_VERSION.version();
            format!("{}.{}", version.major, version.minor)
        },
    );
    if kind == PluginKind::Channel {
        text.push_str("channel:\n  webhook: true        # served on /channels/");
        text.push_str(id);
        text.push_str("/...\n");
    }
    if let Some(topic) = subscribes {
        text.push_str(&format!("events:\n  subscribes: [\"{topic}\"]\n"));
    }
    if !capabilities.is_empty() {
        text.push_str("capabilities:\n");
        text.push_str(capabilities);
    }
    text.push_str(&format!(
        "limits:\n  memory_mb: {memory_mb}\n  timeout_ms: 5000\nconfig: {{}}\n"
    ));
    text
}

/// Where `cairn plugin new NAME` puts the project when no directory is given.
pub fn default_dir(id: &str) -> PathBuf {
    Path::new(".").join(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(dir: &Path, id: &str, kind: PluginKind, language: Language) -> NewProject {
        NewProject {
            dir: dir.join(id),
            id: id.into(),
            kind,
            language,
        }
    }

    #[test]
    fn every_kind_and_language_gets_a_valid_manifest_and_its_sources() {
        let temp = tempfile::tempdir().expect("temp dir");
        for language in Language::ALL {
            for kind in [
                PluginKind::Channel,
                PluginKind::Handler,
                PluginKind::Consolidator,
                PluginKind::SleepHandler,
                PluginKind::MemoryBackend,
            ] {
                let id = format!("p-{language}-{kind}");
                let new = project(temp.path(), &id, kind, language);
                let files = scaffold(&new).expect("scaffold");
                assert_eq!(Language::detect(&new.dir).expect("detect"), language);
                for file in &files {
                    let text = std::fs::read_to_string(new.dir.join(file)).expect("read");
                    for placeholder in ["{{id}}", "{{kind}}"] {
                        assert!(
                            !text.contains(placeholder),
                            "{id}/{}: {placeholder} left in",
                            file.display()
                        );
                    }
                }
                let manifest =
                    cairn_plugin::manifest::load_unbuilt(&new.dir.join(format!("{id}.yaml")))
                        .unwrap_or_else(|e| panic!("{id}: {e:?}"));
                assert_eq!(manifest.kind, kind);
                assert!(manifest.component.ends_with(format!("{id}.wasm")));
            }
        }
    }

    #[test]
    fn the_written_wit_of_every_api_parses_and_names_every_world() {
        for &api in cairn_plugin::bindings::SUPPORTED_APIS {
            let temp = tempfile::tempdir().expect("temp dir");
            write_wit(temp.path(), api).expect("write wit");
            let mut resolve = wit_parser::Resolve::default();
            let (package, _) = resolve.push_path(temp.path()).expect("the WIT parses");
            assert_eq!(
                resolve.packages[package].name.version,
                Some(api.version()),
                "the package of {api:?}"
            );
            for world in ["channel", "handler", "memory-backend"] {
                resolve
                    .select_world(&[package], Some(world))
                    .unwrap_or_else(|e| panic!("{api:?} world {world}: {e}"));
            }
        }
    }

    #[test]
    fn an_existing_directory_or_a_bad_name_is_refused_and_nothing_is_written() {
        let temp = tempfile::tempdir().expect("temp dir");
        let taken = project(temp.path(), "taken", PluginKind::Handler, Language::C);
        std::fs::create_dir(&taken.dir).expect("mkdir");
        assert!(matches!(scaffold(&taken), Err(DevError::Exists(_))));
        let a_file = temp.path().join("notes.txt");
        std::fs::write(&a_file, "not a folder").expect("file");
        let inside = NewProject {
            dir: a_file.join("sub"),
            ..taken.clone()
        };
        let refused = scaffold(&inside).expect_err("refused");
        assert!(refused.is_bad_input(), "{refused}");
        assert!(
            refused.to_string().contains("notes.txt is a file"),
            "{refused}"
        );
        assert_eq!(std::fs::read_dir(&taken.dir).expect("read").count(), 0);
        let bad = project(temp.path(), "Bad_Name", PluginKind::Handler, Language::C);
        assert!(matches!(scaffold(&bad), Err(DevError::BadName(_))));
        assert!(!bad.dir.exists());
        // Where no directory can be made (here a pseudo file system), the error says so.
        let nowhere = NewProject {
            dir: std::path::PathBuf::from("/proc/cairn-plugin-project"),
            ..taken.clone()
        };
        let refused = scaffold(&nowhere).expect_err("refused");
        assert!(refused.is_bad_input(), "{refused}");
        assert!(
            refused.to_string().starts_with(
                "--dir /proc/cairn-plugin-project: cannot create the project directory"
            ),
            "{refused}"
        );
    }
}
