//! `CAIRN_…` environment variables that nothing reads. Settings come from `CAIRN_…`
//! variables, so a mistyped one (`CAIRN_AGENT_LLM_PROVDER`) would otherwise be ignored
//! without a word and the host run on the default; `cairn run` and `cairn config` warn about
//! each, naming the setting's variable it most likely meant. The same matching names the
//! set variable an unset one a setting names (`agent.llm.api_key_env`) probably misspells.

use crate::config::HostConfig;

/// Prefixes of variables read by Cairn's development tools (tests, benches), not the host.
const TOOL_PREFIXES: [&str; 2] = ["CAIRN_TEST_", "CAIRN_BENCH_"];

/// Variables read by Cairn's development tools: the PostgreSQL binaries the test cluster
/// uses, the dev set's seed, the models directory `cargo xtask` installs into, and the
/// paths the test crate's build script gives it (cargo sets them for the tests it runs,
/// and the hosts a test starts inherit them).
const TOOL_VARIABLES: [&str; 6] = [
    "CAIRN_PG_BIN",
    "CAIRN_EVAL_SEED",
    "CAIRN_MODELS_DIR",
    "CAIRN_GUESTS_DIR",
    "CAIRN_PYTHON_PLUGIN",
    "CAIRN_WORKSPACE_ROOT",
];

/// Edits within which a known variable counts as what was meant: one per four characters
/// after `CAIRN_`, at least one and at most this, so a short name is not matched to
/// anything merely short.
const MAX_EDITS: usize = 3;

/// A `CAIRN_…` variable that is set and that nothing reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadVariable {
    /// Its name.
    pub name: String,
    /// The setting's variable it most likely meant, when one is close.
    pub meant: Option<String>,
    /// The disabled plugin it is granted to, when only one that does not run is.
    pub disabled_plugin: Option<String>,
}

impl std::fmt::Display for UnreadVariable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(plugin) = &self.disabled_plugin {
            return write!(
                f,
                "{} is granted only to plugin `{plugin}`, which plugins.disabled turns off: \
                 nothing reads it while it is",
                self.name
            );
        }
        write!(f, "{} is set but no setting or plugin reads it", self.name)?;
        match &self.meant {
            Some(meant) => write!(f, " (did you mean {meant}?)"),
            None => write!(f, " (`cairn config` lists the settings' variables)"),
        }
    }
}

/// The `CAIRN_…` variables among `set` that no setting of `config` reads, nor a running
/// plugin is granted (`granted`, from the manifests' `capabilities.env`), nor the config
/// names as a key's variable, nor Cairn's development tools read; sorted by name. One
/// granted to a disabled plugin (`disabled_grants`: variable, plugin) says so.
pub fn unread_variables(
    config: &HostConfig,
    set: impl IntoIterator<Item = String>,
    granted: &[String],
    disabled_grants: &[(String, String)],
) -> Vec<UnreadVariable> {
    let settings: Vec<String> = config
        .settings()
        .into_iter()
        .filter_map(|(variable, _, _)| variable)
        .collect();
    let named_keys = [
        Some(config.agent.llm.api_key_env.as_str()),
        config.memory.embeddings.api_key_env.as_deref(),
    ];
    let mut unread: Vec<UnreadVariable> = set
        .into_iter()
        .filter(|name| name.to_ascii_uppercase().starts_with("CAIRN_"))
        .filter(|name| !settings.contains(name) && !granted.contains(name))
        .filter(|name| !named_keys.contains(&Some(name.as_str())))
        .filter(|name| !TOOL_PREFIXES.iter().any(|prefix| name.starts_with(prefix)))
        .filter(|name| !TOOL_VARIABLES.contains(&name.as_str()))
        .map(|name| UnreadVariable {
            meant: closest(&name, settings.iter().chain(granted), MAX_EDITS),
            disabled_plugin: disabled_grants
                .iter()
                .find(|(variable, _)| *variable == name)
                .map(|(_, plugin)| plugin.clone()),
            name,
        })
        .collect();
    unread.sort_by(|a, b| a.name.cmp(&b.name));
    unread
}

/// The variable of `known` fewest edits from `name` (case aside; two letters swapped are
/// one edit), if within one edit per four characters after any `CAIRN_`, at least one and at
/// most `max_edits`.
fn closest<'a>(
    name: &str,
    known: impl Iterator<Item = &'a String>,
    max_edits: usize,
) -> Option<String> {
    let name = name.to_ascii_uppercase();
    let own = name.strip_prefix("CAIRN_").unwrap_or(&name);
    let allowed = (own.len() / 4).clamp(1, max_edits);
    known
        .map(|candidate| {
            let edits = strsim::damerau_levenshtein(&name, &candidate.to_ascii_uppercase());
            (edits, candidate)
        })
        .filter(|(edits, _)| *edits <= allowed)
        .min_by_key(|(edits, _)| *edits)
        .map(|(_, candidate)| candidate.clone())
}

/// The set, non-empty environment variable other than `name` that `name` (a variable a
/// setting names, as `agent.llm.api_key_env` does, and that is not set) most likely
/// misspells: within two edits, by the rule of [`closest`].
pub fn set_variable_like(name: &str) -> Option<String> {
    if name.is_empty() {
        return None;
    }
    let set: Vec<String> = std::env::vars_os()
        .filter(|(_, value)| !value.is_empty())
        .filter_map(|(variable, _)| variable.into_string().ok())
        .filter(|variable| variable != name)
        .collect();
    closest(name, set.iter(), 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_mistyped_setting_is_named_with_what_it_meant_and_read_ones_pass() {
        let config = HostConfig::default();
        let set = names(&[
            "CAIRN_AGENT_LLM_PROVDER",
            "CAIRN_AGENT_LLM_PROVIDER",
            "CAIRN_WEBHOOK_SECRET",
            "CAIRN_TEST_STORAGE",
            "CAIRN_PG_BIN",
            "CAIRN_SOMETHING_ELSE_ENTIRELY",
            "HOME",
        ]);
        let unread = unread_variables(&config, set, &names(&["CAIRN_WEBHOOK_SECRET"]), &[]);
        assert_eq!(
            unread,
            [
                UnreadVariable {
                    name: "CAIRN_AGENT_LLM_PROVDER".into(),
                    meant: Some("CAIRN_AGENT_LLM_PROVIDER".into()),
                    disabled_plugin: None,
                },
                UnreadVariable {
                    name: "CAIRN_SOMETHING_ELSE_ENTIRELY".into(),
                    meant: None,
                    disabled_plugin: None,
                },
            ]
        );
        assert_eq!(
            unread[0].to_string(),
            "CAIRN_AGENT_LLM_PROVDER is set but no setting or plugin reads it (did you mean CAIRN_AGENT_LLM_PROVIDER?)"
        );
    }

    #[test]
    fn suggestions_ignore_case_count_a_swap_once_and_include_plugin_grants() {
        let config = HostConfig::default();
        let granted = names(&["CAIRN_WEBHOOK_SECRET"]);
        let meant = |name: &str| {
            unread_variables(&config, names(&[name]), &granted, &[])
                .first()
                .and_then(|unread| unread.meant.clone())
        };
        assert_eq!(meant("cairn_log").as_deref(), Some("CAIRN_LOG"));
        assert_eq!(meant("CAIRN_LGO").as_deref(), Some("CAIRN_LOG"));
        assert_eq!(
            meant("CAIRN_WEBHOOK_SECRT").as_deref(),
            Some("CAIRN_WEBHOOK_SECRET")
        );
        assert_eq!(meant("CAIRN_X"), None, "too short to be anything's typo");
    }

    #[test]
    fn the_variable_a_key_setting_names_is_read() {
        let mut config = HostConfig::default();
        config.agent.llm.api_key_env = "CAIRN_OPENAI_KEY".into();
        assert!(unread_variables(&config, names(&["CAIRN_OPENAI_KEY"]), &[], &[]).is_empty());
    }

    #[test]
    fn a_variable_granted_only_to_a_disabled_plugin_says_so() {
        let config = HostConfig::default();
        let disabled = [("CAIRN_PAGER_TOKEN".to_string(), "pager".to_string())];
        let unread = unread_variables(&config, names(&["CAIRN_PAGER_TOKEN"]), &[], &disabled);
        assert_eq!(
            unread[0].to_string(),
            "CAIRN_PAGER_TOKEN is granted only to plugin `pager`, which plugins.disabled turns \
             off: nothing reads it while it is"
        );
        let also_running = names(&["CAIRN_PAGER_TOKEN"]);
        let read = unread_variables(&config, also_running.clone(), &also_running, &disabled);
        assert!(read.is_empty(), "a running plugin reads it");
    }
}
