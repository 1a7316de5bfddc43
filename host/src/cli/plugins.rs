//! `cairn plugins check|list|new|build`: validate a plugin directory and show what it
//! holds; scaffold and build plugin projects (`cairn plugin` is the same command).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use serde_json::json;

use super::BadInput;
use crate::plugin::bindings::{ApiVersion, bind_api};
use crate::plugin::capabilities::describe_grants;
use crate::plugin::component;
use crate::plugin::manifest::{self, ManifestError};
use crate::plugin::resolve;

#[derive(Subcommand, Debug)]
pub enum PluginsCommand {
    /// Validate every manifest, resolve dependencies, print the start order and grants.
    Check {
        /// Plugin directory.
        dir: PathBuf,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// List the plugins of a directory.
    List {
        /// Plugin directory.
        dir: PathBuf,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Write a new plugin project that `cairn plugin build` builds as generated.
    New(super::plugin_dev::NewArgs),
    /// Build a plugin project into the component its manifest names.
    Build {
        /// The project directory (holding one manifest).
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
}

/// Every manifest problem of a directory, as one bad-input error listing them all.
pub fn manifest_errors(dir: &Path, errors: &[ManifestError]) -> anyhow::Error {
    for error in errors {
        eprintln!("{error}");
    }
    problems_in(dir, errors.len())
}

/// "N problem(s) in plugin directory DIR", as the exit-2 error.
fn problems_in(dir: &Path, count: usize) -> anyhow::Error {
    BadInput(format!(
        "{count} problem{} in plugin directory {}",
        if count == 1 { "" } else { "s" },
        dir.display()
    ))
    .into()
}

/// Refuse a `plugins.disabled` entry that names no plugin of `plugins_dir`: a mistyped id
/// would leave the plugin the operator meant to turn off running.
pub fn refuse_unknown_disabled(
    disabled: &[String],
    set: &resolve::PluginSet,
    plugins_dir: &Path,
) -> Result<()> {
    let known: Vec<&str> = set
        .start_order()
        .iter()
        .chain(set.disabled())
        .map(|manifest| manifest.id.as_str())
        .collect();
    let Some(unknown) = disabled.iter().find(|id| !known.contains(&id.as_str())) else {
        return Ok(());
    };
    let mut ids = known;
    ids.sort_unstable();
    Err(BadInput(format!(
        "plugins.disabled (CAIRN_PLUGINS_DISABLED or the config file): no plugin `{unknown}` in \
         {}: expected one of {}",
        plugins_dir.display(),
        ids.join(", ")
    ))
    .into())
}

/// The API version each plugin's component was built against, in start order, or a problem
/// naming the component that implements no world of its kind under its manifest's `api`.
fn bound_apis(set: &resolve::PluginSet) -> Result<Vec<ApiVersion>, Vec<ManifestError>> {
    let mut apis = Vec::new();
    let mut problems = Vec::new();
    for manifest in set.start_order() {
        match bound_api(manifest) {
            Ok(api) => apis.push(api),
            Err(problem) => problems.push(problem),
        }
    }
    if problems.is_empty() {
        Ok(apis)
    } else {
        Err(problems)
    }
}

/// The API version `manifest`'s component was built against, or the problem naming it.
fn bound_api(manifest: &manifest::Manifest) -> Result<ApiVersion, ManifestError> {
    component::exported_names(&manifest.component)
        .and_then(|exported| bind_api(&exported, manifest))
        .map_err(|message| ManifestError {
            file: manifest.file.clone(),
            field: "component".into(),
            message,
        })
}

/// The component problems of the manifests of `dir` that are valid on their own: reported
/// beside the directory's other problems, so one check names them all.
fn component_problems(dir: &Path) -> Vec<ManifestError> {
    let Ok((manifests, _)) = manifest::load_dir(dir) else {
        return Vec::new();
    };
    manifests
        .iter()
        .filter_map(|manifest| bound_api(manifest).err())
        .collect()
}

/// `cairn plugins check DIR`: validate, resolve, read which world and API each component
/// implements, print the start order and grants.
/// The plugins `disabled` names (`plugins.disabled`) are left out as `cairn run` leaves them
/// out, so the check answers for the run: a plugin depending on one is a problem, and an id
/// the directory does not hold is refused.
pub fn check(
    dir: &Path,
    data_dir: &Path,
    disabled: &[String],
    json_output: bool,
) -> Result<ExitCode> {
    let loaded = resolve::load_enabled(dir, disabled).map_err(|mut errors| {
        errors.extend(component_problems(dir));
        errors
    });
    if let Ok(set) = &loaded {
        refuse_unknown_disabled(disabled, set, dir)?;
    }
    match loaded.and_then(|set| bound_apis(&set).map(|apis| (set, apis))) {
        Ok((set, apis)) => {
            if json_output {
                let plugins: Vec<_> = set
                    .start_order()
                    .iter()
                    .zip(&apis)
                    .map(|(m, api)| {
                        json!({
                            "id": m.id,
                            "version": m.version.to_string(),
                            "kind": m.kind,
                            "api": api.version().to_string(),
                            "component": m.component,
                            "depends_on": m.depends_on.iter().map(|d| json!({"id": d.id, "version": d.version.to_string()})).collect::<Vec<_>>(),
                            "grants": describe_grants(m, data_dir),
                            "schedule": m.schedule.iter().map(|e| json!({"name": e.name, "cron": e.cron, "topic": format!("schedule.{}.{}", m.id, e.name)})).collect::<Vec<_>>(),
                        })
                    })
                    .collect();
                let ids: Vec<&str> = set.start_order().iter().map(|m| m.id.as_str()).collect();
                let report = json!({"ok": true, "start_order": ids, "stop_order": set.stop_order(), "plugins": plugins, "disabled": disabled});
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                if set.start_order().is_empty() {
                    eprintln!(
                        "warning: no plugin manifests (*.yaml, *.yml) in {}: is the path right?",
                        dir.display()
                    );
                }
                println!(
                    "{}: {} plugin(s), all valid",
                    dir.display(),
                    set.start_order().len()
                );
                for (position, (m, api)) in set.start_order().iter().zip(&apis).enumerate() {
                    let deps: Vec<String> = m
                        .depends_on
                        .iter()
                        .map(|d| format!("{} {}", d.id, d.version))
                        .collect();
                    println!(
                        "{}. {} {} ({}, api {}){}",
                        position + 1,
                        m.id,
                        m.version,
                        m.kind,
                        api.version(),
                        if deps.is_empty() {
                            String::new()
                        } else {
                            format!(" after {}", deps.join(", "))
                        }
                    );
                    for grant in describe_grants(m, data_dir) {
                        println!("     {grant}");
                    }
                    for entry in &m.schedule {
                        println!(
                            "     schedule `{}`: `{}` (UTC) emits schedule.{}.{}",
                            entry.name, entry.cron, m.id, entry.name
                        );
                    }
                }
                println!("stop order: {}", set.stop_order().join(", "));
                if !disabled.is_empty() {
                    println!("not run (plugins.disabled): {}", disabled.join(", "));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(errors) if json_output => {
            let report = json!({"ok": false, "errors": errors});
            println!("{}", serde_json::to_string_pretty(&report)?);
            Err(problems_in(dir, errors.len()))
        }
        Err(errors) => Err(manifest_errors(dir, &errors)),
    }
}

/// `cairn plugins list DIR`: each plugin's id, version, kind, API and description.
pub fn list(dir: &Path, json_output: bool) -> Result<ExitCode> {
    let (manifests, errors) = manifest::load_dir(dir).map_err(|e| {
        BadInput(format!(
            "{}: cannot read plugin directory: {e}",
            dir.display()
        ))
    })?;
    if json_output {
        let rows: Vec<_> = manifests
            .iter()
            .map(|m| {
                json!({"id": m.id, "version": m.version.to_string(), "kind": m.kind, "api": m.api.to_string(),
                       "description": m.description, "manifest": m.file})
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"plugins": rows, "errors": errors}))?
        );
    } else {
        println!(
            "{:<24} {:<10} {:<15} {:<8} DESCRIPTION",
            "ID", "VERSION", "KIND", "API"
        );
        for m in &manifests {
            println!(
                "{:<24} {:<10} {:<15} {:<8} {}",
                m.id,
                m.version,
                m.kind,
                m.api.to_string(),
                m.description.as_deref().unwrap_or("")
            );
        }
    }
    if errors.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else if json_output {
        Err(problems_in(dir, errors.len()))
    } else {
        Err(manifest_errors(dir, &errors))
    }
}
