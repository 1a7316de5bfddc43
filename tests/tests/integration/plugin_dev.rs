//! `cairn plugin new` and `cairn plugin build` through the real binary: projects in every
//! language are generated, built with their real toolchains, checked, and run in a host.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use cairn_tests::{Host, PluginDir, cairn_bin, http_client, test_env, workspace_root};

/// Where `cargo xtask install-tools` puts componentize-js.
pub(crate) fn componentize_js_bin() -> PathBuf {
    workspace_root().join("target/tools/componentize-js/node_modules/.bin")
}

/// `cairn ARGS` with the test environment, componentize-js on PATH and one cargo target
/// dir for every generated Rust project (so wit-bindgen compiles once).
pub(crate) fn plugin_command(args: &[&str], path: Option<&str>) -> Output {
    let mut command = Command::new(cairn_bin());
    command.args(args).stdin(Stdio::null());
    for (key, value) in test_env() {
        command.env(key, value);
    }
    let inherited = std::env::var("PATH").unwrap_or_default();
    let path = path.map_or_else(
        || format!("{}:{inherited}", componentize_js_bin().display()),
        str::to_string,
    );
    command.env("PATH", path).env(
        "CARGO_TARGET_DIR",
        workspace_root().join("target/scaffolded"),
    );
    command.output().expect("run cairn")
}

/// `cairn ARGS` as [`plugin_command`] runs it, asserting success; its stdout.
pub(crate) fn plugin_ok(args: &[&str]) -> String {
    let out = plugin_command(args, None);
    assert!(
        out.status.success(),
        "cairn {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Generate, build and check one project; returns its directory.
fn generate_and_build(root: &Path, id: &str, kind: &str, language: &str) -> PathBuf {
    let dir = root.join(id);
    let dir_arg = dir.display().to_string();
    plugin_ok(&[
        "plugin", "new", id, "--kind", kind, "--lang", language, "--dir", &dir_arg,
    ]);
    let built = plugin_ok(&["plugin", "build", &dir_arg]);
    assert!(
        built.contains(&format!("built {id} ({language})")),
        "{built}"
    );
    let checked = plugin_ok(&["plugins", "check", &dir_arg]);
    assert!(checked.contains("1 plugin(s), all valid"), "{checked}");
    assert!(checked.contains(", api 0.2.0)"), "{checked}");
    dir
}

/// A C handler's `on-events` (API 0.2.1), as the README gives it: each event handled by
/// the generated `on_event` (which frees it); on a failure, how many were handled, and the
/// rest freed.
const C_ON_EVENTS: &str = r#"
bool exports_cairn_plugin_handler_plugin_on_events(exports_cairn_plugin_handler_plugin_list_event_t *events,
                                                   exports_cairn_plugin_handler_plugin_run_failure_t *err) {
    for (size_t i = 0; i < events->len; i++) {
        if (!exports_cairn_plugin_handler_plugin_on_event(&events->ptr[i], &err->error)) {
            err->handled = (uint32_t)i;
            for (size_t rest = i + 1; rest < events->len; rest++) {
                exports_cairn_plugin_handler_plugin_event_free(&events->ptr[rest]);
            }
            free(events->ptr);
            return false;
        }
    }
    free(events->ptr);
    return true;
}
"#;

#[test]
fn a_c_handler_moved_to_0_2_1_is_told_the_function_it_lacks_and_runs_with_it() {
    let projects = tempfile::tempdir().expect("temp dir");
    let dir = generate_and_build(projects.path(), "tally", "handler", "c");
    let dir_arg = dir.display().to_string();
    let manifest = dir.join("tally.yaml");
    let yaml = std::fs::read_to_string(&manifest).expect("manifest");
    std::fs::write(&manifest, yaml.replace("api: ^0.2", "api: ^0.2.1")).expect("manifest");
    // Until 2026-12-04 the hint said only to install clang, lld and wasi-libc.
    let refused = plugin_command(&["plugin", "build", &dir_arg], None);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains("means the source lacks a function")
            && stderr.contains("exports_cairn_plugin_handler_plugin_on_events (declared in"),
        "{stderr}"
    );
    let source = dir.join("plugin.c");
    let mut code = std::fs::read_to_string(&source).expect("source");
    code.push_str(C_ON_EVENTS);
    std::fs::write(&source, code).expect("source");
    plugin_ok(&["plugin", "build", &dir_arg]);
    let checked = plugin_ok(&["plugins", "check", &dir_arg]);
    assert!(checked.contains(", api 0.2.1)"), "{checked}");

    let plugins = PluginDir::new();
    plugins.bundled("cli");
    for file in ["tally.yaml", "tally.wasm"] {
        std::fs::copy(dir.join(file), plugins.path().join(file)).expect("copy");
    }
    let data = tempfile::tempdir().expect("data dir");
    let mut host = Host::start(plugins.path(), data.path(), &[]);
    host.wait_for("cairn is running", Duration::from_secs(120));
    for line in ["one", "two", "three"] {
        host.type_line(line);
    }
    host.wait_for("event #3: message.received", Duration::from_secs(60));
    let (exit, log) = host.stop();
    assert!(exit.success(), "{log}");
    assert!(!log.contains("plugin faulted"), "{log}");
}

#[test]
fn a_project_builds_against_the_api_its_manifest_names_and_check_reads_the_component() {
    let projects = tempfile::tempdir().expect("temp dir");
    let dir = generate_and_build(projects.path(), "keeper", "handler", "rust");
    let dir_arg = dir.display().to_string();
    let manifest = dir.join("keeper.yaml");
    let yaml = std::fs::read_to_string(&manifest).expect("manifest");
    // A project that says ^0.1 gets wit/v0.1 and a v0.1 component.
    std::fs::write(&manifest, yaml.replace("api: ^0.2", "api: ^0.1")).expect("manifest");
    plugin_ok(&["plugin", "build", &dir_arg]);
    let wit = std::fs::read_to_string(dir.join("wit/worlds.wit")).expect("wit");
    assert!(wit.starts_with("package cairn:plugin@0.1.0;"), "{wit}");
    let checked = plugin_ok(&["plugins", "check", &dir_arg]);
    assert!(
        checked.contains("keeper 0.1.0 (handler, api 0.1.0)"),
        "{checked}"
    );
    // A component that does not implement its manifest's world is named by check, exit 2.
    std::fs::write(
        &manifest,
        "id: keeper\nversion: 0.1.0\nkind: channel\ncomponent: keeper.wasm\napi: ^0.1\n",
    )
    .expect("manifest");
    let refused = plugin_command(&["plugins", "check", &dir_arg], None);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("keeper.yaml: component:")
            && stderr.contains("lacks the export cairn:plugin/channel-plugin@0.1.0")
            && stderr.contains("exports cairn:plugin/handler-plugin@0.1.0"),
        "{stderr}"
    );
}

#[test]
fn generated_plugins_in_four_languages_build_pass_check_and_run() {
    let projects = tempfile::tempdir().expect("temp dir");
    let plugins = PluginDir::new();
    let languages = ["rust", "python", "js", "c"];
    for language in languages {
        let mut kinds = vec!["channel", "handler", "memory-backend"];
        if matches!(language, "rust" | "c") {
            kinds.extend(["consolidator", "sleep-handler"]);
        }
        for kind in kinds {
            let id = format!("{language}-{kind}");
            let dir = generate_and_build(projects.path(), &id, kind, language);
            if matches!(kind, "channel" | "handler") {
                for file in [format!("{id}.yaml"), format!("{id}.wasm")] {
                    std::fs::copy(dir.join(&file), plugins.path().join(&file)).expect("copy");
                }
            }
        }
    }

    let data = tempfile::tempdir().expect("data dir");
    let mut host = Host::start(
        plugins.path(),
        data.path(),
        &[("CAIRN_HTTP_LISTEN", "127.0.0.1:0")],
    );
    // The host compiles two Python and two JavaScript components before it listens: minutes
    // on a loaded two-core machine in a debug build.
    host.wait_for(
        "webhook server listening on http://127.0.0.1:",
        Duration::from_secs(900),
    );
    let port = host.webhook_port();
    let client = http_client();
    for language in languages {
        let url = format!("http://127.0.0.1:{port}/channels/{language}-channel/talk-{language}");
        let mut response = client
            .post(&url)
            .header("x-sender", "ann")
            .send(format!("hello in {language}").as_bytes())
            .expect("post");
        let body = response.body_mut().read_to_string().unwrap_or_default();
        assert_eq!(response.status().as_u16(), 202, "{language}: {body}");
        assert!(body.contains("\"id\""), "{language}: {body}");
    }
    host.wait_until(
        Duration::from_secs(180),
        "every channel delivered and every handler counted",
        |log| {
            languages.iter().all(|language| {
                let replied = log.lines().any(|l| {
                    l.contains(&format!("reply to talk-{language}:"))
                        && l.contains(&format!("ann: hello in {language}"))
                        && l.contains(&format!("plugin=\"{language}-channel\""))
                });
                let counted = log.lines().any(|l| {
                    l.contains("event #4: message.received")
                        && l.contains(&format!("plugin=\"{language}-handler\""))
                });
                replied && counted
            })
        },
    );
    host.stop();
}

#[test]
fn a_missing_toolchain_or_a_bad_argument_is_named_with_what_to_do() {
    let projects = tempfile::tempdir().expect("temp dir");
    let dir = projects.path().join("lonely");
    let dir_arg = dir.display().to_string();
    plugin_ok(&[
        "plugin", "new", "lonely", "--kind", "handler", "--lang", "js", "--dir", &dir_arg,
    ]);

    // No componentize-js anywhere: the build says which tool and how to get it.
    let out = plugin_command(&["plugin", "build", &dir_arg], Some("/usr/bin:/bin"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("componentize-js is not installed"),
        "{stderr}"
    );
    assert!(stderr.contains("npm install"), "{stderr}");
    assert!(!dir.join("lonely.wasm").exists());

    for (args, expected) in [
        (
            vec![
                "plugin", "new", "Bad_Name", "--kind", "handler", "--lang", "c",
            ],
            "plugin name `Bad_Name`",
        ),
        (
            vec![
                "plugin", "new", "ok", "--kind", "handler", "--lang", "cobol",
            ],
            "expected rust, python, js or c",
        ),
        (
            vec!["plugin", "new", "ok", "--kind", "gadget", "--lang", "c"],
            "expected channel, handler",
        ),
        (
            vec![
                "plugin", "new", "lonely", "--kind", "handler", "--lang", "c", "--dir", &dir_arg,
            ],
            "already exists",
        ),
    ] {
        let out = plugin_command(&args, None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }

    // A directory that is no project: no manifest.
    let empty = projects.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let out = plugin_command(&["plugin", "build", &empty.display().to_string()], None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("expected one plugin manifest"), "{stderr}");
}

/// A manifest whose `component` names the project's source, its manifest or a directory
/// is refused (exit 2, naming the field) and nothing is replaced: until 2026-12-04 the
/// build wrote the component over `plugin.c`.
#[test]
fn a_build_never_writes_its_component_over_the_source_or_the_manifest() {
    let projects = tempfile::tempdir().expect("temp dir");
    let dir = projects.path().join("careful");
    let dir_arg = dir.display().to_string();
    plugin_ok(&[
        "plugin", "new", "careful", "--kind", "handler", "--lang", "c", "--dir", &dir_arg,
    ]);
    let manifest = dir.join("careful.yaml");
    let yaml = std::fs::read_to_string(&manifest).expect("manifest");
    let source = std::fs::read(dir.join("plugin.c")).expect("source");
    for (component, what) in [
        ("plugin.c", "is a file that is no WebAssembly binary"),
        ("careful.yaml", "is a file that is no WebAssembly binary"),
        ("wit", "is a directory"),
    ] {
        let edited: String = yaml
            .lines()
            .map(|line| {
                if line.starts_with("component:") {
                    format!("component: {component}\n")
                } else {
                    format!("{line}\n")
                }
            })
            .collect();
        std::fs::write(&manifest, &edited).expect("edit");
        let out = plugin_command(&["plugin", "build", &dir_arg], None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{component}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "careful.yaml: component: {} {what}, which the build would replace",
                dir.join(component).display()
            )),
            "{stderr}"
        );
        assert_eq!(
            std::fs::read_to_string(&manifest).expect("manifest"),
            edited
        );
        assert_eq!(std::fs::read(dir.join("plugin.c")).expect("source"), source);
        assert!(dir.join("wit").is_dir());
    }
}
