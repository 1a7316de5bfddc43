//! `cairn plugin new` and `cairn plugin build`: the plugin author's two commands, on top of
//! `cairn-plugin-dev`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use cairn_plugin_dev::{DevError, Language, NewProject, build, default_dir, scaffold};
use cairn_vocab::plugin::PluginKind;
use clap::Args;

use super::BadInput;

/// `cairn plugin new NAME --kind KIND --lang LANG [--dir DIR]`.
#[derive(Args, Debug)]
pub struct NewArgs {
    /// The plugin id: lower-case letters, digits and single dashes, starting with a letter.
    name: String,
    /// channel, handler, consolidator, sleep-handler or memory-backend.
    #[arg(long, value_parser = parse_kind)]
    kind: PluginKind,
    /// rust, python, js or c.
    #[arg(long = "lang", value_parser = parse_language)]
    language: Language,
    /// Where to create the project (default: ./NAME); it must not exist.
    #[arg(long)]
    dir: Option<PathBuf>,
}

fn parse_kind(name: &str) -> Result<PluginKind, String> {
    PluginKind::parse(name).ok_or_else(|| {
        "expected channel, handler, consolidator, sleep-handler or memory-backend".into()
    })
}

fn parse_language(name: &str) -> Result<Language, String> {
    Language::parse(name).ok_or_else(|| "expected rust, python, js or c".into())
}

/// Write the project and say how to build it.
pub fn new_project(args: &NewArgs) -> Result<ExitCode> {
    let dir = args.dir.clone().unwrap_or_else(|| default_dir(&args.name));
    let project = NewProject {
        dir: dir.clone(),
        id: args.name.clone(),
        kind: args.kind,
        language: args.language,
    };
    let files = scaffold(&project).map_err(dev_error)?;
    println!(
        "created {} plugin `{}` ({}) in {}:",
        args.kind,
        args.name,
        args.language,
        dir.display()
    );
    for file in files {
        println!("  {}", file.display());
    }
    println!("  wit/ (the host's WIT, rewritten by every build)");
    let first = if args.language == Language::Js {
        format!("cd {} && npm install && ", dir.display())
    } else {
        String::new()
    };
    println!(
        "build it: {first}cairn plugin build {}\ncheck it:  cairn plugins check {}",
        shown(&dir, args.language),
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The directory as the build command after a `cd` into it names it.
fn shown(dir: &Path, language: Language) -> String {
    if language == Language::Js {
        ".".into()
    } else {
        dir.display().to_string()
    }
}

/// Build the project and report the component.
pub fn build_project(dir: &Path) -> Result<ExitCode> {
    if !dir.is_dir() {
        return Err(BadInput(format!(
            "{}: expected a plugin project directory (one `cairn plugins new` makes)",
            dir.display()
        ))
        .into());
    }
    let built = build(dir).map_err(dev_error)?;
    println!(
        "built {} ({}): {} ({} KiB)",
        built.id,
        built.language,
        built.component.display(),
        built.bytes.div_ceil(1024)
    );
    Ok(ExitCode::SUCCESS)
}

/// A missing toolchain or a bad argument exits 2; a failed build exits 1.
fn dev_error(error: DevError) -> anyhow::Error {
    if error.is_bad_input() {
        BadInput(error.to_string()).into()
    } else {
        // Its message already ends with the cause: printed as a chain it would repeat it.
        anyhow::anyhow!("{error}")
    }
}
