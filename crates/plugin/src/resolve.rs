//! Dependency resolution: from a directory's manifests to a start order.
//!
//! Duplicate ids, missing dependencies, unsatisfied version requirements and cycles are
//! all reported together; otherwise plugins start dependencies first (ties broken by id,
//! so the order is stable; a memory backend that depends on nothing first of all) and stop
//! in reverse.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::manifest::{self, Manifest, ManifestError};

/// A resolved plugin directory: manifests in start order.
#[derive(Debug, Clone)]
pub struct PluginSet {
    start_order: Vec<Manifest>,
    disabled: Vec<Manifest>,
}

impl PluginSet {
    /// The manifests of the plugins the host config disables (`plugins.disabled`): read and
    /// valid, not started.
    pub fn disabled(&self) -> &[Manifest] {
        &self.disabled
    }

    /// Manifests in the order their plugins start (every dependency before its dependents).
    pub fn start_order(&self) -> &[Manifest] {
        &self.start_order
    }

    /// Plugin ids in the order they stop: the reverse of the start order.
    pub fn stop_order(&self) -> Vec<&str> {
        self.start_order
            .iter()
            .rev()
            .map(|m| m.id.as_str())
            .collect()
    }
}

/// Load and resolve a plugin directory, reporting every problem at once.
pub fn load(dir: &Path) -> Result<PluginSet, Vec<ManifestError>> {
    load_enabled(dir, &[])
}

/// Load and resolve a plugin directory leaving out the plugins `disabled` names (the
/// host config's `plugins.disabled`): they are not started, and a plugin that depends on
/// one is an error naming the setting.
pub fn load_enabled(dir: &Path, disabled: &[String]) -> Result<PluginSet, Vec<ManifestError>> {
    let (manifests, mut errors) = manifest::load_dir(dir).map_err(|e| {
        vec![ManifestError {
            file: dir.to_path_buf(),
            field: String::new(),
            message: format!("cannot read plugin directory: {e}"),
        }]
    })?;
    let (switched_off, mut manifests): (Vec<Manifest>, Vec<Manifest>) = manifests
        .into_iter()
        .partition(|m| disabled.contains(&m.id));
    leave_out_dependents_of_disabled(&mut manifests, disabled, &mut errors);
    leave_out_dependents_of_invalid(&mut manifests, &mut errors);
    match resolve(manifests) {
        Ok(set) if errors.is_empty() => Ok(PluginSet {
            disabled: switched_off,
            ..set
        }),
        Ok(_) => Err(errors),
        Err(mut more) => {
            errors.append(&mut more);
            Err(errors)
        }
    }
}

/// A plugin that needs a disabled one, directly or through others, is reported with the
/// way it needs it, and left out of resolution so the dependency is not reported a second
/// time as missing or invalid. Until 2026-12-04 a plugin whose dependency needed a disabled
/// one was told that dependency's manifest was invalid.
fn leave_out_dependents_of_disabled(
    manifests: &mut Vec<Manifest>,
    disabled: &[String],
    errors: &mut Vec<ManifestError>,
) {
    // For each plugin that cannot start, the way from it to the disabled plugin it needs.
    let mut needs: BTreeMap<String, Vec<String>> = disabled
        .iter()
        .map(|id| (id.clone(), vec![id.clone()]))
        .collect();
    loop {
        let mut left_out = Vec::new();
        manifests.retain(|manifest| {
            let mut kept = true;
            for (i, dep) in manifest.depends_on.iter().enumerate() {
                let Some(way) = needs.get(&dep.id) else {
                    continue;
                };
                errors.push(ManifestError {
                    file: manifest.file.clone(),
                    field: format!("depends_on[{i}].id"),
                    message: needs_disabled_message(&manifest.id, way),
                });
                if kept {
                    let mut own_way = vec![manifest.id.clone()];
                    own_way.extend(way.iter().cloned());
                    left_out.push(own_way);
                }
                kept = false;
            }
            kept
        });
        if left_out.is_empty() {
            return;
        }
        for way in left_out {
            needs.insert(way[0].clone(), way);
        }
    }
}

/// What to tell plugin `id` that depends on `way[0]`, which is or needs the disabled
/// plugin `way.last()`.
fn needs_disabled_message(id: &str, way: &[String]) -> String {
    let (dep, off) = (&way[0], &way[way.len() - 1]);
    let why = if way.len() == 1 {
        "which the host config disables (plugins.disabled)".to_string()
    } else {
        format!(
            "which cannot start: it needs `{off}` ({}), which the host config disables (plugins.disabled)",
            way.join(" → ")
        )
    };
    format!("`{id}` depends on `{dep}`, {why}; disable `{id}` too or enable `{off}`")
}

/// A plugin that depends on one whose manifest (`<id>.yaml`) was refused is reported as
/// such, and left out of resolution so the dependency is not reported as missing too.
fn leave_out_dependents_of_invalid(manifests: &mut Vec<Manifest>, errors: &mut Vec<ManifestError>) {
    let valid: BTreeSet<String> = manifests.iter().map(|m| m.id.clone()).collect();
    let refused: BTreeMap<String, std::path::PathBuf> = errors
        .iter()
        .filter_map(|e| Some((e.file.file_stem()?.to_str()?.to_string(), e.file.clone())))
        .filter(|(id, _)| !valid.contains(id))
        .collect();
    manifests.retain(|manifest| {
        let mut kept = true;
        for (i, dep) in manifest.depends_on.iter().enumerate() {
            if let Some(file) = refused.get(&dep.id) {
                errors.push(ManifestError {
                    file: manifest.file.clone(),
                    field: format!("depends_on[{i}].id"),
                    message: format!(
                        "`{}` depends on `{}`, whose manifest {} is invalid (see its error)",
                        manifest.id,
                        dep.id,
                        file.display()
                    ),
                });
                kept = false;
            }
        }
        kept
    });
}

/// Order valid manifests by their dependencies.
pub fn resolve(manifests: Vec<Manifest>) -> Result<PluginSet, Vec<ManifestError>> {
    let mut errors = Vec::new();
    let mut by_id: BTreeMap<String, Manifest> = BTreeMap::new();
    for manifest in manifests {
        if let Some(first) = by_id.get(&manifest.id) {
            errors.push(ManifestError {
                file: manifest.file.clone(),
                field: "id".into(),
                message: format!(
                    "duplicate plugin id `{}`, also declared in {}",
                    manifest.id,
                    first.file.display()
                ),
            });
            continue;
        }
        by_id.insert(manifest.id.clone(), manifest);
    }

    for manifest in by_id.values() {
        for (i, dep) in manifest.depends_on.iter().enumerate() {
            match by_id.get(&dep.id) {
                None => errors.push(ManifestError {
                    file: manifest.file.clone(),
                    field: format!("depends_on[{i}].id"),
                    message: format!(
                        "`{}` depends on `{}`, which is not in the plugin directory",
                        manifest.id, dep.id
                    ),
                }),
                Some(found) if !dep.version.matches(&found.version) => errors.push(ManifestError {
                    file: manifest.file.clone(),
                    field: format!("depends_on[{i}].version"),
                    message: format!(
                        "`{}` requires `{}` {} but the directory has version {} ({})",
                        manifest.id,
                        dep.id,
                        dep.version,
                        found.version,
                        found.file.display()
                    ),
                }),
                Some(_) => {}
            }
        }
    }

    // The terminal has one reader: a second would take lines the first never sees.
    let mut terminal = by_id.values().filter(|m| m.capabilities.stdio);
    if let Some(first) = terminal.next() {
        for other in terminal {
            errors.push(ManifestError {
                file: other.file.clone(),
                field: "capabilities.stdio".into(),
                message: format!(
                    "`{}` and `{}` ({}) both read the terminal: expected one plugin with stdio",
                    other.id,
                    first.id,
                    first.file.display()
                ),
            });
        }
    }

    for cycle in find_cycles(&by_id) {
        let first = &by_id[&cycle[0]];
        errors.push(ManifestError {
            file: first.file.clone(),
            field: "depends_on".into(),
            message: format!("dependency cycle: {}", cycle.join(" -> ")),
        });
    }

    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(PluginSet {
        start_order: backend_first(topological_order(by_id)),
        disabled: Vec::new(),
    })
}

/// `order` with each memory backend that depends on nothing moved to the front (it keeps
/// every dependency before its dependents), so that every other plugin's `init` can already
/// reach memory through it.
fn backend_first(mut order: Vec<Manifest>) -> Vec<Manifest> {
    order.sort_by_key(|m| !is_lone_backend(m));
    order
}

/// A memory backend that depends on nothing: it starts before every other plugin.
fn is_lone_backend(manifest: &Manifest) -> bool {
    manifest.kind == manifest::PluginKind::MemoryBackend && manifest.depends_on.is_empty()
}

/// Kahn's algorithm over present dependencies, smallest id first among the ready ones.
fn topological_order(mut by_id: BTreeMap<String, Manifest>) -> Vec<Manifest> {
    let mut waiting_on: BTreeMap<String, BTreeSet<String>> = by_id
        .values()
        .map(|m| {
            let deps = m
                .depends_on
                .iter()
                .map(|d| d.id.clone())
                .filter(|d| by_id.contains_key(d))
                .collect();
            (m.id.clone(), deps)
        })
        .collect();
    let mut order = Vec::with_capacity(by_id.len());
    while let Some(ready) = waiting_on
        .iter()
        .find(|(_, deps)| deps.is_empty())
        .map(|(id, _)| id.clone())
    {
        waiting_on.remove(&ready);
        for deps in waiting_on.values_mut() {
            deps.remove(&ready);
        }
        if let Some(manifest) = by_id.remove(&ready) {
            order.push(manifest);
        }
    }
    order
}

/// Every elementary cycle reachable by depth-first search, each once, written as
/// `a -> b -> a` starting from its smallest id.
fn find_cycles(by_id: &BTreeMap<String, Manifest>) -> Vec<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Unvisited,
        OnStack,
        Done,
    }
    fn visit(
        id: &str,
        by_id: &BTreeMap<String, Manifest>,
        marks: &mut BTreeMap<String, Mark>,
        stack: &mut Vec<String>,
        cycles: &mut BTreeSet<Vec<String>>,
    ) {
        marks.insert(id.to_string(), Mark::OnStack);
        stack.push(id.to_string());
        if let Some(manifest) = by_id.get(id) {
            for dep in &manifest.depends_on {
                match marks.get(dep.id.as_str()).copied() {
                    Some(Mark::Unvisited) => visit(&dep.id, by_id, marks, stack, cycles),
                    Some(Mark::OnStack) => {
                        let start = stack.iter().position(|s| *s == dep.id).unwrap_or(0);
                        let mut cycle: Vec<String> = stack[start..].to_vec();
                        let smallest = cycle
                            .iter()
                            .enumerate()
                            .min_by_key(|(_, s)| *s)
                            .map(|(i, _)| i)
                            .unwrap_or(0);
                        cycle.rotate_left(smallest);
                        cycle.push(cycle[0].clone());
                        cycles.insert(cycle);
                    }
                    _ => {}
                }
            }
        }
        stack.pop();
        marks.insert(id.to_string(), Mark::Done);
    }

    let mut marks: BTreeMap<String, Mark> = by_id
        .keys()
        .map(|id| (id.clone(), Mark::Unvisited))
        .collect();
    let mut cycles = BTreeSet::new();
    for id in by_id.keys() {
        if marks[id] == Mark::Unvisited {
            visit(id, by_id, &mut marks, &mut Vec::new(), &mut cycles);
        }
    }
    cycles.into_iter().collect()
}

/// The plugins (indices of `in_start_order`) in groups that may start together: each
/// after the groups holding everything it depends on, and every other plugin after a memory
/// backend that depends on nothing (see [`backend_first`]). A dependency that is not among
/// them (it could not be loaded) holds nothing back.
pub fn start_levels<'a>(in_start_order: impl Iterator<Item = &'a Manifest>) -> Vec<Vec<usize>> {
    let mut level_of: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let mut levels: Vec<Vec<usize>> = Vec::new();
    let mut after_backend = 0;
    for (index, manifest) in in_start_order.enumerate() {
        let level = if is_lone_backend(manifest) {
            after_backend = 1;
            0
        } else {
            manifest
                .depends_on
                .iter()
                .filter_map(|dependency| level_of.get(dependency.id.as_str()))
                .map(|level| level + 1)
                .max()
                .unwrap_or(0)
                .max(after_backend)
        };
        level_of.insert(&manifest.id, level);
        if levels.len() <= level {
            levels.resize_with(level + 1, Vec::new);
        }
        levels[level].push(index);
    }
    levels
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::load_file;

    /// A test plugin: id, version and `(dependency id, requirement)` pairs.
    type TestPlugin<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

    fn dir_with(manifests: &[TestPlugin<'_>]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("c.wasm"),
            [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00],
        )
        .expect("wasm");
        for (id, version, deps) in manifests {
            let mut body = format!(
                "id: {id}\nversion: {version}\nkind: handler\ncomponent: c.wasm\napi: ^0.1\n"
            );
            if !deps.is_empty() {
                body.push_str("depends_on:\n");
                for (dep, req) in *deps {
                    body.push_str(&format!("  - id: {dep}\n    version: '{req}'\n"));
                }
            }
            std::fs::write(dir.path().join(format!("{id}.yaml")), body).expect("manifest");
        }
        dir
    }

    fn ids(set: &PluginSet) -> Vec<&str> {
        set.start_order().iter().map(|m| m.id.as_str()).collect()
    }

    #[test]
    fn plugins_that_do_not_depend_on_each_other_start_together() {
        let dir = dir_with(&[
            ("app", "1.0.0", &[("store", "^2"), ("log", "*")]),
            ("store", "2.1.0", &[("log", ">=1")]),
            ("log", "1.0.0", &[]),
            ("alone", "0.1.0", &[]),
            ("meter", "0.1.0", &[("log", "*")]),
        ]);
        let set = load(dir.path()).expect("resolves");
        let order = ids(&set);
        let levels: Vec<Vec<&str>> = start_levels(set.start_order().iter())
            .into_iter()
            .map(|level| level.into_iter().map(|i| order[i]).collect())
            .collect();
        assert_eq!(
            levels,
            [vec!["alone", "log"], vec!["meter", "store"], vec!["app"]]
        );
        // A dependency that could not be loaded holds nothing back.
        let without_log = set.start_order().iter().filter(|m| m.id != "log");
        assert_eq!(start_levels(without_log), [vec![0, 1, 2], vec![3]]);
    }

    #[test]
    fn dependencies_start_first_and_stop_last() {
        let dir = dir_with(&[
            ("app", "1.0.0", &[("store", "^2"), ("log", "*")]),
            ("store", "2.1.0", &[("log", ">=1")]),
            ("log", "1.0.0", &[]),
            ("alone", "0.1.0", &[]),
        ]);
        let set = load(dir.path()).expect("resolves");
        assert_eq!(ids(&set), ["alone", "log", "store", "app"]);
        assert_eq!(set.stop_order(), ["app", "store", "log", "alone"]);
    }

    #[test]
    fn a_memory_backend_without_dependencies_starts_first_and_stops_last() {
        let dir = dir_with(&[
            ("alpha", "1.0.0", &[]),
            ("beta", "1.0.0", &[("alpha", "*")]),
        ]);
        std::fs::write(
            dir.path().join("zeta.yaml"),
            "id: zeta\nversion: 1.0.0\nkind: memory-backend\ncomponent: c.wasm\napi: ^0.1\n",
        )
        .expect("backend manifest");
        let set = load(dir.path()).expect("resolves");
        assert_eq!(ids(&set), ["zeta", "alpha", "beta"]);
        assert_eq!(set.stop_order(), ["beta", "alpha", "zeta"]);
        assert_eq!(
            start_levels(set.start_order().iter()),
            [vec![0], vec![1], vec![2]],
            "the backend's init ends before the others' begin"
        );
    }

    #[test]
    fn a_dependent_of_an_invalid_manifest_names_it_as_invalid_not_missing() {
        let dir = dir_with(&[("app", "1.0.0", &[("store", "*")])]);
        std::fs::write(dir.path().join("store.yaml"), "id: store\nversion: nope\n")
            .expect("invalid manifest");
        let errors = load(dir.path()).expect_err("refused");
        let app = errors
            .iter()
            .find(|e| e.file.ends_with("app.yaml"))
            .expect("the dependent is reported");
        assert!(
            app.message.contains("store.yaml is invalid") && !app.message.contains("not in"),
            "{}",
            app.message
        );
        assert!(errors.iter().any(|e| e.file.ends_with("store.yaml")));
    }

    #[test]
    fn disabled_plugins_are_left_out_and_their_dependents_named() {
        let dir = dir_with(&[
            ("app", "1.0.0", &[("store", "^2")]),
            ("store", "2.1.0", &[]),
            ("log", "1.0.0", &[]),
        ]);
        let set = load_enabled(dir.path(), &["log".to_string()]).expect("resolves");
        assert_eq!(ids(&set), ["store", "app"]);
        let disabled: Vec<&str> = set.disabled().iter().map(|m| m.id.as_str()).collect();
        assert_eq!(disabled, ["log"], "kept aside");
        let errors = load_enabled(dir.path(), &["store".to_string()]).expect_err("app needs store");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].field, "depends_on[0].id");
        assert!(
            errors[0].message.contains("disables (plugins.disabled)"),
            "{}",
            errors[0]
        );
    }

    #[test]
    fn a_plugin_needing_a_disabled_one_through_another_is_told_the_way() {
        let dir = dir_with(&[
            ("app", "1.0.0", &[("store", "^2")]),
            ("store", "2.1.0", &[("log", "*")]),
            ("log", "1.0.0", &[]),
        ]);
        let errors = load_enabled(dir.path(), &["log".to_string()]).expect_err("log is off");
        let message = |file: &str| {
            errors
                .iter()
                .find(|e| e.file.ends_with(file))
                .map(|e| e.message.clone())
                .unwrap_or_else(|| panic!("no error for {file}: {errors:?}"))
        };
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert_eq!(
            message("store.yaml"),
            "`store` depends on `log`, which the host config disables (plugins.disabled); disable `store` too or enable `log`"
        );
        assert_eq!(
            message("app.yaml"),
            "`app` depends on `store`, which cannot start: it needs `log` (store → log), which the host config disables (plugins.disabled); disable `app` too or enable `log`"
        );
    }

    #[test]
    fn all_resolution_problems_are_reported_together() {
        let dir = dir_with(&[
            ("a", "1.0.0", &[("b", "*")]),
            ("b", "1.0.0", &[("c", "*")]),
            ("c", "1.0.0", &[("a", "*")]),
            ("d", "1.0.0", &[("ghost", "*")]),
            ("e", "1.0.0", &[("d", "^2")]),
        ]);
        let errors = load(dir.path()).expect_err("invalid");
        let text: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        assert!(
            text.iter()
                .any(|t| t.contains("dependency cycle: a -> b -> c -> a")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t.contains("`ghost`, which is not in the plugin directory")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t.contains("requires `d` ^2 but the directory has version 1.0.0")),
            "{text:?}"
        );
    }

    #[test]
    fn two_plugins_reading_the_terminal_are_refused() {
        let dir = dir_with(&[]);
        for id in ["cli", "cli2"] {
            let body = format!(
                "id: {id}\nversion: 1.0.0\nkind: channel\ncomponent: c.wasm\napi: ^0.2\ncapabilities:\n  stdio: true\n"
            );
            std::fs::write(dir.path().join(format!("{id}.yaml")), body).expect("manifest");
        }
        let errors = load(dir.path()).expect_err("two readers");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].field, "capabilities.stdio");
        assert!(errors[0].message.contains("`cli2` and `cli`"), "{errors:?}");
    }

    #[test]
    fn duplicate_ids_name_both_files() {
        let dir = dir_with(&[("a", "1.0.0", &[])]);
        let body = std::fs::read_to_string(dir.path().join("a.yaml")).expect("read");
        std::fs::write(dir.path().join("z-copy.yaml"), body).expect("write");
        let errors = load(dir.path()).expect_err("duplicate");
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].message.contains("duplicate plugin id `a`"),
            "{errors:?}"
        );
        assert!(errors[0].file.ends_with("z-copy.yaml"));
        assert!(errors[0].message.contains("a.yaml"));
        let _ = load_file(&dir.path().join("a.yaml")).expect("each alone is valid");
    }
}
