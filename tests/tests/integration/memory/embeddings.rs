//! OpenAI-compatible embeddings from a local server, and re-indexing when the model
//! changes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};

use cairn::memory::{MemoryKind, NewMemory, RecallQuery};

use super::{cli_json, data_arg, user_scope};
/// What the embeddings server saw: (model, Authorization header, number of inputs) per request.
type SeenRequests = Arc<Mutex<Vec<(String, String, usize)>>>;

/// A minimal OpenAI-compatible embeddings server: vectors count letters, so texts sharing
/// letters are similar. Records (model, authorization, inputs) of each request.
fn embeddings_server() -> (u16, SeenRequests) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let log = log.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut length = 0usize;
                let mut authorization = String::new();
                let mut line = String::new();
                reader.read_line(&mut line).expect("request line");
                loop {
                    line.clear();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    let lower = line.to_ascii_lowercase();
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    if lower.starts_with("authorization:") {
                        authorization = line[14..].trim().to_string();
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).expect("body");
                let request: serde_json::Value = serde_json::from_slice(&body).expect("json body");
                let inputs: Vec<String> = request["input"]
                    .as_array()
                    .expect("input list")
                    .iter()
                    .map(|v| v.as_str().unwrap_or_default().to_string())
                    .collect();
                let model = request["model"].as_str().unwrap_or_default().to_string();
                log.lock()
                    .expect("log")
                    .push((model.clone(), authorization, inputs.len()));
                let data: Vec<serde_json::Value> = inputs
                    .iter()
                    .enumerate()
                    .map(|(index, text)| {
                        let mut vector = vec![0f32; 26];
                        for c in text.to_ascii_lowercase().bytes().filter(u8::is_ascii_lowercase) {
                            vector[(c - b'a') as usize] += 1.0;
                        }
                        serde_json::json!({"object": "embedding", "index": index, "embedding": vector})
                    })
                    .collect();
                let answer =
                    serde_json::json!({"object": "list", "data": data, "model": model}).to_string();
                let mut stream = stream;
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                    answer.len()
                );
            });
        }
    });
    (port, seen)
}

fn openai_config(dir: &Path, port: u16, model: &str) -> std::path::PathBuf {
    let path = dir.join(format!("cairn-{model}.yaml"));
    std::fs::write(
        &path,
        format!("memory:\n  embeddings:\n    provider: openai\n    url: http://127.0.0.1:{port}/v1\n    model: {model}\n    api_key_env: CAIRN_TEST_EMBED_KEY\n    batch_size: 4\n"),
    )
    .expect("write config");
    path
}

#[test]
fn openai_compatible_embeddings_from_a_local_server_and_reindex_on_model_change() {
    let (port, seen) = embeddings_server();
    let dir = tempfile::tempdir().expect("data dir");
    // SAFETY: set before any thread of this test reads the environment; the key is this test's own.
    unsafe { std::env::set_var("CAIRN_TEST_EMBED_KEY", "sk-local-test") };
    let config_a = openai_config(dir.path(), port, "letters-a");
    let config =
        cairn::config::HostConfig::load(Some(&config_a), Some(dir.path())).expect("config");
    {
        let memory = cairn_tests::storage::open_memory(dir.path(), config.memory.clone());
        for text in ["zebra zoo", "apple banana", "apple banana", "quartz jazz"] {
            let mut episode = NewMemory::new(MemoryKind::Episode, text);
            episode.scope = user_scope("alice");
            memory.store_blocking(episode).expect("store");
        }
        assert_eq!(memory.embed_pending(|_| {}).expect("embed"), 4);
        let hits = memory
            .recall(&RecallQuery {
                text: "jazz zebra".into(),
                scope: user_scope("alice"),
                limit: 5,
                ..RecallQuery::default()
            })
            .expect("recall");
        assert!(
            hits.iter().all(|h| h.explain.cosine.is_some()),
            "every hit has a cosine from the provider"
        );
        let stats = memory.stats().expect("stats");
        assert_eq!((stats.embedded, stats.embedding_backlog), (4, 0));
    }
    {
        let requests = seen.lock().expect("log");
        assert!(
            requests
                .iter()
                .all(|(model, auth, _)| model == "letters-a" && auth == "Bearer sk-local-test"),
            "{requests:?}"
        );
        let texts: usize = requests.iter().map(|r| r.2).sum();
        assert_eq!(
            texts, 4,
            "three distinct texts embedded once each, plus the query"
        );
    }

    // A model change: every vector is stale; reindex re-embeds them all through the binary.
    let config_b = openai_config(dir.path(), port, "letters-b");
    let data = data_arg(dir.path());
    let config_b = config_b.display().to_string();
    // The test environment's `hash` override gives way to the file's provider.
    let stats_b = || {
        let output = std::process::Command::new(cairn_tests::cairn_bin())
            .args([
                "--config", &config_b, "memory", "stats", "--json", "--data", &data,
            ])
            .env("CAIRN_MEMORY_EMBEDDINGS_PROVIDER", "openai")
            .envs(cairn_tests::storage::env_for(dir.path()))
            .output()
            .expect("stats");
        serde_json::from_slice::<serde_json::Value>(&output.stdout).expect("json")
    };
    let stats = stats_b();
    assert_eq!(stats["embedding_backlog"], 4);
    let output = std::process::Command::new(cairn_tests::cairn_bin())
        .args([
            "--config", &config_b, "memory", "reindex", "--json", "--data", &data,
        ])
        .env("CAIRN_TEST_EMBED_KEY", "sk-local-test")
        .envs(cairn_tests::storage::env_for(dir.path()))
        .output()
        .expect("reindex");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let reindexed: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(reindexed["embedded"], 4);
    assert!(
        seen.lock()
            .expect("log")
            .iter()
            .any(|(model, _, _)| model == "letters-b")
    );
    let stats = stats_b();
    assert_eq!(
        (
            stats["embedded"].clone(),
            stats["embedding_backlog"].clone()
        ),
        (4.into(), 0.into())
    );

    // An unreachable provider: recall still answers from BM25.
    let dead = dir.path().join("dead.yaml");
    std::fs::write(&dead, "memory:\n  embeddings:\n    provider: openai\n    url: http://127.0.0.1:9/v1\n    timeout_ms: 500\n").expect("write");
    let hits = cli_json(&[
        "--config",
        &dead.display().to_string(),
        "memory",
        "search",
        "apple",
        "--user",
        "alice",
        "--json",
        "--data",
        &data,
    ]);
    assert_eq!(
        hits.as_array().map(Vec::len),
        Some(1),
        "two equal episodes collapse into one hit: {hits}"
    );
    assert!(
        hits[0]["explain"]["cosine"].is_null(),
        "no vector signal without the provider"
    );
}
