//! The example plugins of `examples/plugins` (a Python file-drop channel, a JavaScript HTTP
//! inbox channel and a C topic-tally handler), built with `cairn plugin build` from copies
//! of their sources and run together in one host through the real binary.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cairn_tests::stub_http::{Reply, StubServer};
use cairn_tests::{
    Host, PluginDir, copy_project_sources, http_client, journal_events, workspace_root,
};

use crate::plugin_dev::plugin_ok;

/// Copy an example's sources (not what a local build left beside them) and build it.
fn build_example(projects: &Path, name: &str, plugins: &PluginDir) {
    let source = workspace_root().join("examples/plugins").join(name);
    let dir = projects.join(name);
    copy_project_sources(&source, &dir).expect("copy the example's sources");
    let dir_arg = dir.display().to_string();
    plugin_ok(&["plugin", "build", &dir_arg]);
    for file in [format!("{name}.yaml"), format!("{name}.wasm")] {
        std::fs::copy(dir.join(&file), plugins.path().join(&file)).expect("copy");
    }
}

/// The file-drop channel's folders on a data dir.
fn drop_dir(data: &Path) -> PathBuf {
    data.join("plugins/file-drop")
}

/// `(status, JSON body)` of one request to the HTTP inbox.
fn inbox(port: u16, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    inbox_dated(port, method, path, body, None)
}

/// [`inbox`], with an `x-said-at` header on a POST when `said_at` is given.
fn inbox_dated(
    port: u16,
    method: &str,
    path: &str,
    body: &str,
    said_at: Option<&str>,
) -> (u16, serde_json::Value) {
    let url = format!("http://127.0.0.1:{port}/channels/http-inbox/{path}");
    let client = http_client();
    let response = match method {
        "POST" => {
            let mut request = client
                .post(&url)
                .header("x-sender", "ann")
                .header("idempotency-key", body);
            if let Some(said_at) = said_at {
                request = request.header("x-said-at", said_at);
            }
            request.send(body.as_bytes())
        }
        "GET" => client.get(&url).call(),
        "DELETE" => client.delete(&url).call(),
        other => panic!("no {other} in this test"),
    };
    let mut response = response.expect("request");
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().expect("body");
    (status, serde_json::from_str(&text).expect("JSON answer"))
}

/// When the `message.received` of the message with this text says it was said.
fn said_at_of(data: &Path, text: &str) -> Option<i64> {
    journal_events(data)
        .into_iter()
        .filter(|e| e["topic"] == "message.received")
        .map(|e| serde_json::from_str::<serde_json::Value>(e["payload"].as_str().unwrap_or("{}")))
        .filter_map(Result::ok)
        .find(|payload| payload["text"].as_str().is_some_and(|t| t.contains(text)))
        .and_then(|payload| payload["said_at"].as_i64())
}

/// Poll the inbox until its replies answer every id in `ids`; returns the replies.
fn wait_for_replies(host: &mut Host, port: u16, ids: &[u64]) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, body) = inbox(port, "GET", "garden", "");
        let replies = body["replies"].as_array().cloned().unwrap_or_default();
        let answered: Vec<u64> = replies
            .iter()
            .flat_map(|r| r["in_reply_to"].as_array().cloned().unwrap_or_default())
            .filter_map(|id| id.as_u64())
            .collect();
        if ids.iter().all(|id| answered.contains(id)) {
            return replies;
        }
        assert!(
            Instant::now() < deadline,
            "replies to {ids:?} never arrived: {replies:?}\n{}",
            host.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn python_js_and_c_examples_build_and_do_their_work_in_one_host() {
    let projects = tempfile::tempdir().expect("temp dir");
    let plugins = PluginDir::new();
    for name in ["file-drop", "http-inbox", "topic-tally"] {
        build_example(projects.path(), name, &plugins);
    }
    // The inbox also forwards each reply, with fetch, to a hook granted in capabilities.http.
    let hook = StubServer::start(vec![Reply::status(204, "")]);
    let manifest = plugins.path().join("http-inbox.yaml");
    let yaml = std::fs::read_to_string(&manifest)
        .expect("manifest")
        .replace("http: []", &format!("http: ['{}']", hook.url()))
        .replace(
            "forward_to: \"\"",
            &format!("forward_to: \"{}/hooks/replies\"", hook.url()),
        );
    std::fs::write(&manifest, yaml).expect("manifest");
    let data = tempfile::tempdir().expect("data dir");
    let inbox_dir = drop_dir(data.path()).join("inbox");
    std::fs::create_dir_all(inbox_dir.join("ann")).expect("inbox");
    std::fs::write(
        inbox_dir.join("ann/garden.txt"),
        "I want to plan a garden with tomatoes.\n",
    )
    .expect("drop");
    // Written three days ago: the channel dates the message by the file (API v0.2 said-at).
    let written = std::time::SystemTime::now() - Duration::from_secs(3 * 86_400);
    std::fs::File::options()
        .append(true)
        .open(inbox_dir.join("ann/garden.txt"))
        .and_then(|file| file.set_modified(written))
        .expect("date the file");
    let written_ms = written
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis() as i64;
    std::fs::write(inbox_dir.join("big.txt"), "x".repeat(70_000)).expect("drop");
    std::fs::write(inbox_dir.join("draft.txt.part"), "not finished").expect("drop");

    let env = [("CAIRN_HTTP_LISTEN", "127.0.0.1:0")];
    let mut host = Host::start(plugins.path(), data.path(), &env);
    // A debug host compiles the Python and JavaScript components first: minutes when loaded.
    host.wait_for(
        "webhook server listening on http://127.0.0.1:",
        Duration::from_secs(900),
    );
    let port = host.webhook_port();

    // File drop: the dropped file is answered in outbox/garden.txt and filed away.
    let outbox = drop_dir(data.path()).join("outbox/garden.txt");
    host.wait_until(Duration::from_secs(120), "file-drop's reply", |_| {
        std::fs::read_to_string(&outbox).is_ok_and(|text| {
            text.contains("--- reply to ann ---")
                && text.contains("I received: ann: I want to plan a garden with tomatoes.")
        })
    });
    assert!(inbox_dir.join(".processed/ann/garden.txt").is_file());
    assert_eq!(
        said_at_of(data.path(), "plan a garden"),
        Some(written_ms),
        "the file's modification time dates the message"
    );
    assert!(
        inbox_dir.join(".rejected/big.txt").is_file(),
        "over max_bytes"
    );
    assert!(
        inbox_dir.join("draft.txt.part").is_file(),
        "unfinished files wait"
    );
    assert!(
        host.log().contains("over max_bytes 65536"),
        "{}",
        host.log()
    );

    // HTTP inbox: three posts, a retried post is the same message, bad input is a 400.
    let mut ids = Vec::new();
    for text in [
        "tomatoes need sun",
        "how deep to plant tomatoes?",
        "tomatoes or peppers?",
    ] {
        let (status, body) = inbox(port, "POST", "garden", text);
        assert_eq!(status, 202, "{body}");
        ids.push(body["id"].as_u64().expect("id"));
    }
    let (_, again) = inbox(port, "POST", "garden", "tomatoes or peppers?");
    assert_eq!(again["id"].as_u64(), ids.last().copied(), "idempotency-key");
    let (status, _) = inbox(port, "DELETE", "garden?through=zero", "");
    assert_eq!(status, 400);
    // A message written earlier is dated by x-said-at; a time that is not one is a 400.
    let (status, dated) = inbox_dated(
        port,
        "POST",
        "garden",
        "tomatoes were planted in may",
        Some("2026-05-04T09:30:00Z"),
    );
    assert_eq!(status, 202, "{dated}");
    ids.push(dated["id"].as_u64().expect("id"));
    let (status, refused) = inbox_dated(port, "POST", "garden", "when?", Some("last tuesday"));
    assert_eq!(status, 400, "{refused}");
    let (status, _) = inbox(port, "GET", "a/b", "");
    assert_eq!(status, 404);
    let replies = wait_for_replies(&mut host, port, &ids);
    assert_eq!(
        said_at_of(data.path(), "tomatoes were planted in may"),
        Some(1_777_887_000_000),
        "x-said-at dates the message"
    );
    assert!(
        replies.iter().any(|r| r["text"]
            .as_str()
            .unwrap_or("")
            .contains("ann: tomatoes need sun")),
        "{replies:?}"
    );

    // Topic tally: ann mentioned "tomatoes" in four messages over two channels; the third
    // made it trend, once.
    host.wait_until(Duration::from_secs(60), "topic.trending", |log| {
        log.contains("trending for ann: \"tomatoes\" in 3 messages")
    });
    let trending: Vec<serde_json::Value> = journal_events(data.path())
        .into_iter()
        .filter(|e| e["topic"] == "topic.trending")
        .map(|e| serde_json::from_str(e["payload"].as_str().expect("payload")).expect("json"))
        .collect();
    assert_eq!(
        trending,
        vec![serde_json::json!({"user": "ann", "word": "tomatoes", "messages": 3})]
    );

    // Replies wait in the outbox across a restart until acknowledged.
    host.stop();
    let mut host = Host::start(plugins.path(), data.path(), &env);
    let port = host.webhook_port();
    let (_, kept) = inbox(port, "GET", "garden", "");
    assert_eq!(
        kept["replies"].as_array(),
        Some(&replies),
        "kept across a restart"
    );
    let last = replies.last().expect("a reply")["id"].as_u64().expect("id");
    let (status, removed) = inbox(port, "DELETE", &format!("garden?through={last}"), "");
    assert_eq!(
        (status, removed["removed"].as_u64()),
        (200, Some(replies.len() as u64))
    );
    let (_, after) = inbox(port, "GET", "garden", "");
    assert_eq!(after["replies"], serde_json::json!([]));

    // A file dropped while the host runs is picked up by the next poll.
    std::fs::write(inbox_dir.join("later.md"), "One more note.").expect("drop");
    let later = drop_dir(data.path()).join("outbox/later.txt");
    host.wait_until(Duration::from_secs(60), "the later file's reply", |_| {
        std::fs::read_to_string(&later).is_ok_and(|text| text.contains("user: One more note."))
    });
    host.stop();
}

#[test]
fn the_readme_shows_each_example_whole() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).expect("README");
    let examples = workspace_root().join("examples/plugins");
    for example in std::fs::read_dir(&examples).expect("examples") {
        for entry in std::fs::read_dir(example.expect("example").path()).expect("files") {
            let path = entry.expect("entry").path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if !path.is_file() || name.starts_with('.') || name.ends_with(".wasm") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("source");
            assert!(
                readme.contains(&format!("\n{text}```\n")),
                "README.md does not show {} as it is",
                path.display()
            );
        }
    }
}
