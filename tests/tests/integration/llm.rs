//! The LLM providers against local servers that speak their APIs: answers, JSON mode,
//! malformed answers, slow answers, 429 storms, 5xx and dropped connections; and a turn of
//! the real binary answered by an OpenAI-compatible server.

use std::time::Duration;

use std::sync::Arc;

use cairn::llm::anthropic::AnthropicProvider;
use cairn::llm::cache::{CacheConfig, CachingProvider};
use cairn::llm::openai::OpenAiProvider;
use cairn::llm::{
    ChatMessage, CompletionRequest, ErrorKind, LlmConfig, LlmError, LlmProvider, ProviderKind,
    Usage,
};
use cairn::store::cache::SqliteCache;
use cairn_tests::stub_http::{Reply, StubServer};
use cairn_tests::{Host, PluginDir, cairn_ok, status_json};
use serde_json::{Value, json};

fn config(server: &StubServer, provider: ProviderKind) -> LlmConfig {
    LlmConfig {
        provider,
        base_url: match provider {
            ProviderKind::Openai => format!("{}/v1", server.url()),
            _ => server.url(),
        },
        model: "stub-model".into(),
        timeout_ms: 2_000,
        max_retries: 2,
        backoff_initial_ms: 1,
        backoff_max_ms: 50,
        ..LlmConfig::default()
    }
}

fn openai(server: &StubServer) -> OpenAiProvider {
    OpenAiProvider::with_key(
        &config(server, ProviderKind::Openai),
        Some("sk-test".into()),
    )
}

fn ask(text: &str) -> CompletionRequest {
    CompletionRequest {
        messages: vec![
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", text),
        ],
        ..CompletionRequest::default()
    }
}

/// A host on `plugins` and `data` whose agent asks `server` (OpenAI-compatible), with `extra`
/// settings, once it is running.
fn host_answered_by(
    server: &StubServer,
    plugins: &PluginDir,
    data: &std::path::Path,
    extra: &[(&str, &str)],
) -> Host {
    let base_url = format!("{}/v1", server.url());
    let mut env = vec![
        ("CAIRN_HTTP_LISTEN", "127.0.0.1:0"),
        ("CAIRN_AGENT_LLM_PROVIDER", "openai"),
        ("CAIRN_AGENT_LLM_BASE_URL", base_url.as_str()),
    ];
    env.extend_from_slice(extra);
    let mut host = Host::start(plugins.path(), data, &env);
    host.wait_for("cairn is running", Duration::from_secs(60));
    host
}

/// Sessions that end after `secs` idle, looked at every 50 ms.
fn short_sessions(secs: &'static str) -> [(&'static str, &'static str); 2] {
    [
        ("CAIRN_LIFECYCLE_SESSION_TIMEOUT_SECS", secs),
        ("CAIRN_LIFECYCLE_CHECK_INTERVAL_MS", "50"),
    ]
}

/// Quick retries, so a provider that is down makes a waiting turn at once; and a short claim
/// lease, so a killed host's claim on shared storage lapses quickly.
const OUTAGE_SETTINGS: [(&str, &str); 4] = [
    ("CAIRN_AGENT_LLM_MAX_RETRIES", "1"),
    ("CAIRN_AGENT_LLM_BACKOFF_INITIAL_MS", "20"),
    ("CAIRN_AGENT_LLM_BACKOFF_MAX_MS", "50"),
    ("CAIRN_BUFFER_CLAIM_LEASE_MS", "1500"),
];

/// Quick retries, so a provider's failures are seen within a second.
const QUICK_RETRIES: [(&str, &str); 3] = [
    ("CAIRN_AGENT_LLM_MAX_RETRIES", "1"),
    ("CAIRN_AGENT_LLM_BACKOFF_INITIAL_MS", "20"),
    ("CAIRN_AGENT_LLM_BACKOFF_MAX_MS", "50"),
];

/// A host on `plugins` and `data` whose provider (`down`) answers 503, with
/// [`OUTAGE_SETTINGS`] and `extra`, asked `question`: returned once the batch waits for the
/// provider.
fn asked_during_an_outage(
    down: &StubServer,
    plugins: &PluginDir,
    data: &std::path::Path,
    extra: &[(&str, &str)],
    question: &str,
) -> Host {
    let mut settings = OUTAGE_SETTINGS.to_vec();
    settings.extend_from_slice(extra);
    let mut host = host_answered_by(down, plugins, data, &settings);
    host.type_line(question);
    host.wait_for(
        "batch 1 waits for the LLM provider",
        Duration::from_secs(30),
    );
    host
}

/// An OpenAI-compatible server that answers every request with `text`, `after` it came.
fn answering_after(after: Duration, text: &str) -> StubServer {
    let slow = Reply::Slow(after, Box::new(Reply::openai_chat(text)));
    StubServer::start(vec![slow])
}

/// The `session.ended` payloads in `events`, in order.
fn sessions_ended(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["topic"] == "session.ended")
        .map(|e| serde_json::from_str(e["payload"].as_str().expect("payload")).expect("json"))
        .collect()
}

/// The roles of a `session.ended` payload's transcript, in order.
fn transcript_roles(ended: &Value) -> Vec<String> {
    let transcript = ended["transcript"].as_array().expect("transcript");
    transcript
        .iter()
        .map(|entry| entry["role"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn openai_sends_the_chat_with_its_key_and_json_mode_and_reads_text_and_usage() {
    let server = StubServer::start(vec![Reply::openai_chat("{\"ok\": true}")]);
    let mut request = ask("hello");
    request.json = true;
    request.temperature = Some(0.2);
    let answer = openai(&server).complete(&request).expect("an answer");
    assert_eq!(answer.content, "{\"ok\": true}");
    assert_eq!(answer.model, "stub-model-2025");
    assert_eq!(
        (answer.usage.input_tokens, answer.usage.output_tokens),
        (12, 3)
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].line, "POST /v1/chat/completions");
    assert_eq!(seen[0].header("authorization"), Some("Bearer sk-test"));
    let body = seen[0].json();
    assert_eq!(body["model"], "stub-model");
    assert_eq!(
        body["messages"][1],
        json!({"role": "user", "content": "hello"})
    );
    assert_eq!(body["response_format"], json!({"type": "json_object"}));
    assert_eq!(body["max_tokens"], 1024);
}

#[test]
fn a_malformed_answer_is_a_typed_error_without_retries() {
    for broken in ["{not json", "{\"choices\": []}", "[1, 2]"] {
        let server = StubServer::start(vec![Reply::status(200, broken)]);
        let error = openai(&server).complete(&ask("hi")).expect_err(broken);
        assert!(
            matches!(error, LlmError::InvalidResponse { .. }),
            "{broken}: {error:?}"
        );
        assert_eq!(error.kind(), ErrorKind::Internal);
        assert_eq!(server.seen().len(), 1, "{broken}: not retried");
    }
}

#[test]
fn rate_limits_and_server_errors_are_retried_honouring_retry_after() {
    let server = StubServer::start(vec![
        Reply::status(429, "{\"error\": \"slow down\"}").header("Retry-After", "0"),
        Reply::status(503, "overloaded"),
        Reply::openai_chat("finally"),
    ]);
    let answer = openai(&server).complete(&ask("hi")).expect("the third try");
    assert_eq!(answer.content, "finally");
    assert_eq!(server.seen().len(), 3);
}

#[test]
fn a_request_timeout_or_conflict_is_retried_and_a_404_names_the_base_url() {
    let server = StubServer::start(vec![
        Reply::status(408, "request timeout"),
        Reply::status(409, "conflict"),
        Reply::openai_chat("after all"),
    ]);
    let answer = openai(&server).complete(&ask("hi")).expect("the third try");
    assert_eq!(answer.content, "after all");
    assert_eq!(server.seen().len(), 3);

    let server = StubServer::start(vec![Reply::status(404, "not found")]);
    let error = openai(&server).complete(&ask("hi")).expect_err("404");
    assert!(
        error.to_string().contains("is agent.llm.base_url right?"),
        "{error}"
    );
    assert_eq!(server.seen().len(), 1, "a 404 is final");
}

#[test]
fn a_429_storm_ends_as_rate_limited_after_the_retries() {
    let server = StubServer::start(vec![Reply::status(429, "{}").header("Retry-After", "0.01")]);
    let error = openai(&server).complete(&ask("hi")).expect_err("storm");
    assert_eq!(
        error,
        LlmError::RateLimited {
            provider: format!("openai ({}/v1/chat/completions)", server.url()),
            retry_after_ms: Some(10),
        }
    );
    assert!(error.is_transient());
    assert_eq!(server.seen().len(), 3, "the first try and two retries");
}

#[test]
fn a_retry_after_date_is_waited_and_an_empty_or_oversized_answer_is_final() {
    // An HTTP date a second ahead: waited (within the cap), not ignored.
    let soon = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(2));
    let server = StubServer::start(vec![
        Reply::status(429, "{}").header("Retry-After", &soon),
        Reply::openai_chat("after the date"),
    ]);
    let mut capped = config(&server, ProviderKind::Openai);
    capped.backoff_max_ms = 700;
    let asked = std::time::Instant::now();
    let answer = OpenAiProvider::with_key(&capped, None)
        .complete(&ask("hi"))
        .expect("the second try");
    assert_eq!(answer.content, "after the date");
    assert!(
        asked.elapsed() >= Duration::from_millis(600),
        "waited the date, capped at 700 ms: {:?}",
        asked.elapsed()
    );
    // An empty message is no answer: final, never delivered or cached as one.
    let server = StubServer::start(vec![Reply::openai_chat("  ")]);
    let error = openai(&server).complete(&ask("hi")).expect_err("empty");
    assert!(
        matches!(&error, LlmError::InvalidResponse { message, .. } if message == "an empty message"),
        "{error:?}"
    );
    assert_eq!(server.seen().len(), 1, "not asked again");
    // An answer over ureq's 10 MiB cap: final, not an outage to download again and again.
    let huge = format!("{{\"pad\": \"{}\"}}", "x".repeat(11 << 20));
    let server = StubServer::start(vec![Reply::status(200, &huge)]);
    let error = openai(&server).complete(&ask("hi")).expect_err("huge");
    assert!(
        matches!(&error, LlmError::InvalidResponse { message, .. } if message.starts_with("an answer longer than")),
        "{error:?}"
    );
    assert_eq!(server.seen().len(), 1, "not asked again");
}

#[test]
fn a_slow_answer_times_out_and_a_dropped_connection_is_retried() {
    let server = StubServer::start(vec![Reply::Slow(
        Duration::from_secs(5),
        Box::new(Reply::openai_chat("too late")),
    )]);
    let mut slow = config(&server, ProviderKind::Openai);
    slow.timeout_ms = 200;
    slow.max_retries = 1;
    let error = OpenAiProvider::with_key(&slow, None)
        .complete(&ask("hi"))
        .expect_err("slow");
    assert!(
        matches!(
            error,
            LlmError::Timeout {
                timeout_ms: 200,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(error.kind(), ErrorKind::Unavailable);

    let server = StubServer::start(vec![Reply::Drop, Reply::openai_chat("after the drop")]);
    let answer = openai(&server).complete(&ask("hi")).expect("retried");
    assert_eq!(answer.content, "after the drop");
    let server = StubServer::start(vec![Reply::Drop]);
    let error = openai(&server)
        .complete(&ask("hi"))
        .expect_err("always dropped");
    assert!(matches!(error, LlmError::Unavailable { .. }), "{error:?}");
}

#[test]
fn an_answer_that_is_not_utf8_is_final_and_a_huge_retry_after_is_capped() {
    // Malformed, not an outage: asked again it would come back the same, and every later
    // batch would wait behind it.
    let server = StubServer::start(vec![Reply::bytes(200, b"{\"choices\": \"caf\xe9\"}")]);
    let error = openai(&server).complete(&ask("hi")).expect_err("latin-1");
    assert!(
        matches!(&error, LlmError::InvalidResponse { message, .. } if message.starts_with("an answer that is not UTF-8 text")),
        "{error:?}"
    );
    assert_eq!(error.kind(), ErrorKind::Internal);
    assert_eq!(server.seen().len(), 1, "not asked again");
    // An error inside a 200 answer is named, not only the fields the answer lacks.
    let server = StubServer::start(vec![Reply::status(
        200,
        "{\"error\": {\"message\": \"The model is overloaded\"}}",
    )]);
    let error = openai(&server).complete(&ask("hi")).expect_err("an error");
    assert!(
        error
            .to_string()
            .contains("an error instead of an answer: The model is overloaded"),
        "{error}"
    );
    // A wait past what a Duration holds is capped like any other (it used to panic).
    let server = StubServer::start(vec![
        Reply::status(429, "{}").header("Retry-After", "99999999999999999999"),
        Reply::openai_chat("after the cap"),
    ]);
    let answer = openai(&server)
        .complete(&ask("hi"))
        .expect("the second try");
    assert_eq!(answer.content, "after the cap");
}

#[test]
fn a_key_the_provider_quotes_back_is_never_kept() {
    let server = StubServer::start(vec![Reply::status(
        401,
        "{\"error\": {\"message\": \"Incorrect API key provided: Bearer sk-test-0123456789\"}}",
    )]);
    let provider = OpenAiProvider::with_key(
        &config(&server, ProviderKind::Openai),
        Some("sk-test-0123456789".into()),
    );
    let error = provider
        .complete(&ask("hi"))
        .expect_err("refused")
        .to_string();
    assert!(!error.contains("sk-test-0123456789"), "{error}");
    assert!(
        error.contains("Incorrect API key provided: Bearer ***"),
        "{error}"
    );
}

#[test]
fn a_piped_run_whose_message_was_not_answered_exits_1_saying_why() {
    let server = StubServer::start(vec![Reply::status(401, "{\"error\": \"bad key\"}")]);
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let data = tempfile::tempdir().expect("data");
    let mut host = host_answered_by(&server, &plugins, data.path(), &[]);
    host.type_line("hello");
    host.close_stdin();
    let (exit, log) = host.wait_exit(Duration::from_secs(60));
    assert_eq!(exit.code(), Some(1), "{log}");
    assert!(
        log.contains("1 message(s) sent on cli were not answered: ")
            && log.contains("refused the request: HTTP 401")
            && log.contains("see `cairn buffer failed`"),
        "{log}"
    );
}

#[test]
fn a_task_the_provider_refuses_is_logged_as_failed_with_the_reason() {
    let server = StubServer::start(vec![Reply::status(401, "{\"error\": \"bad key\"}")]);
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let data = tempfile::tempdir().expect("data");
    let rules = "[{name: tasks, match: {channel: cli}, route: spawn}]";
    let mut host = host_answered_by(
        &server,
        &plugins,
        data.path(),
        &[("CAIRN_ROUTER_RULES", rules)],
    );
    host.type_line("summarise the logs");
    host.wait_for("task failed: ", Duration::from_secs(60));
    let (_, log) = host.stop();
    let line = log
        .lines()
        .find(|line| line.contains("task failed: "))
        .unwrap_or_default();
    assert!(
        line.contains("WARN") && line.contains("refused the request: HTTP 401"),
        "{log}"
    );
}

#[test]
fn an_answer_cut_at_max_tokens_is_delivered_and_said_to_be_cut() {
    let server = StubServer::start(vec![Reply::json(json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "stub-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "The answer is"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
    }))]);
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let data = tempfile::tempdir().expect("data");
    let mut host = host_answered_by(&server, &plugins, data.path(), &[]);
    host.type_line("what is the answer?");
    host.wait_for("cairn> The answer is", Duration::from_secs(60));
    let (_, log) = host.stop();
    assert!(
        log.contains("the model's answer was cut at max_tokens (1024; agent.llm.max_tokens"),
        "{log}"
    );
}

#[test]
fn a_refusal_is_final_and_a_bad_key_is_denied() {
    let server = StubServer::start(vec![Reply::status(401, "{\"error\": \"bad key\"}")]);
    let error = openai(&server).complete(&ask("hi")).expect_err("refused");
    assert!(
        matches!(error, LlmError::Refused { status: 401, .. }),
        "{error:?}"
    );
    assert_eq!(error.kind(), ErrorKind::Denied);
    assert_eq!(server.seen().len(), 1);
    let error = openai(&server)
        .complete(&CompletionRequest::default())
        .expect_err("nothing to answer");
    assert_eq!(error.kind(), ErrorKind::InvalidInput);
    assert_eq!(server.seen().len(), 1, "an invalid request is never sent");
}

#[test]
fn anthropic_sends_system_apart_with_its_headers_and_joins_text_blocks() {
    let server = StubServer::start(vec![Reply::json(json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-stub",
        "content": [{"type": "text", "text": "Pier "}, {"type": "text", "text": "seven."}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 20, "output_tokens": 4}
    }))]);
    let provider = AnthropicProvider::with_key(
        &config(&server, ProviderKind::Anthropic),
        Some("ant-key".into()),
    );
    let answer = provider
        .complete(&ask("where is the boat?"))
        .expect("answer");
    assert_eq!(answer.content, "Pier seven.");
    assert_eq!(answer.model, "claude-stub");
    assert_eq!(
        (answer.usage.input_tokens, answer.usage.output_tokens),
        (20, 4)
    );
    let seen = &server.seen()[0];
    assert_eq!(seen.line, "POST /v1/messages");
    assert_eq!(seen.header("x-api-key"), Some("ant-key"));
    assert_eq!(seen.header("anthropic-version"), Some("2023-06-01"));
    let body = seen.json();
    assert_eq!(body["system"], "Be brief.");
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": "where is the boat?"}])
    );

    let server = StubServer::start(vec![Reply::json(json!({"content": []}))]);
    let provider = AnthropicProvider::with_key(&config(&server, ProviderKind::Anthropic), None);
    assert!(matches!(
        provider.complete(&ask("hi")),
        Err(LlmError::InvalidResponse { .. })
    ));
}

#[test]
fn a_turn_of_the_real_binary_is_answered_by_an_openai_compatible_server() {
    let server = StubServer::start(vec![Reply::openai_chat(
        "The boat is moored at pier seven.",
    )]);
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let data = tempfile::tempdir().expect("data");
    let mut host = host_answered_by(
        &server,
        &plugins,
        data.path(),
        &[
            ("CAIRN_AGENT_LLM_MODEL", "stub-model"),
            ("CAIRN_AGENT_LLM_CACHE_ENABLED", "true"),
        ],
    );
    host.type_line("where is the boat?");
    host.wait_for(
        "cairn> The boat is moored at pier seven.",
        Duration::from_secs(30),
    );
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    let body = server.seen()[0].json();
    let prompt = body["messages"].to_string();
    assert!(prompt.contains("where is the boat?"), "{prompt}");
    let journal = cairn_tests::cairn(&[
        "journal",
        "tail",
        "--topic",
        "turn.completed",
        "--json",
        "--data",
        &data.path().display().to_string(),
    ]);
    let text = String::from_utf8_lossy(&journal.stdout);
    let usage: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|event| serde_json::from_str(event["payload"].as_str()?).ok())
        .map(|payload: serde_json::Value| payload["usage"].clone())
        .collect();
    assert_eq!(
        usage,
        [json!({"input_tokens": 12, "output_tokens": 3})],
        "turn.completed records the tokens the provider counted: {text}"
    );
    let status = cairn_tests::status_json(data.path());
    assert_eq!(
        status["llm_cache"],
        json!({"entries": 1, "hits": 0, "misses": 1}),
        "{status}"
    );
}

#[test]
fn a_turn_waits_out_a_provider_outage_and_a_stop_leaves_it_for_the_next_start() {
    // Down for three asks (two attempts each), then back.
    let mut script = vec![Reply::status(503, "down for maintenance"); 6];
    script.push(Reply::openai_chat("Back, and the boat is at pier seven."));
    let server = StubServer::start(script);
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let data = tempfile::tempdir().expect("data");
    let mut host = host_answered_by(&server, &plugins, data.path(), &QUICK_RETRIES);
    host.type_line("where is the boat?");
    host.wait_for(
        "batch 1 waits for the LLM provider",
        Duration::from_secs(30),
    );
    host.wait_for(
        "cairn> Back, and the boat is at pier seven.",
        Duration::from_secs(30),
    );
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    assert_eq!(server.seen().len(), 7, "asked until it answered: {log}");
    assert!(!log.contains("turn failed"), "{log}");

    // A provider that stays down: the stop queues the batch again (on shared storage too,
    // without waiting out its 30 s claim lease), and the next start answers it.
    let down = StubServer::start(vec![Reply::status(503, "down")]);
    let data = tempfile::tempdir().expect("data");
    let mut host = host_answered_by(&down, &plugins, data.path(), &QUICK_RETRIES);
    host.type_line("is anyone there?");
    host.wait_for(
        "batch 1 waits for the LLM provider",
        Duration::from_secs(30),
    );
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    assert!(
        log.contains("the batch is answered after the next start"),
        "{log}"
    );
    assert!(
        log.contains("work the stop left unfinished is queued for the next host batches=1"),
        "{log}"
    );
    let up = StubServer::start(vec![Reply::openai_chat("Yes, here now.")]);
    let mut host = host_answered_by(&up, &plugins, data.path(), &QUICK_RETRIES);
    host.wait_for("cairn> Yes, here now.", Duration::from_secs(30));
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    let prompt = up.seen()[0].json()["messages"].to_string();
    assert!(prompt.contains("is anyone there?"), "{prompt}");
}

#[test]
fn an_outage_that_ends_at_the_probe_delays_the_turn_and_never_fails_it() {
    // Down until the host's one-word probe, which is the first request it answers: the
    // turn's own request failed before the probe only because the provider was down.
    use std::sync::atomic::{AtomicBool, Ordering};
    let up = Arc::new(AtomicBool::new(false));
    let back = up.clone();
    let server = StubServer::answering(move |seen| {
        if seen.body.contains("Answer with one word.") {
            back.store(true, Ordering::SeqCst);
        }
        if back.load(Ordering::SeqCst) {
            Reply::openai_chat("back again")
        } else {
            Reply::status(503, "down")
        }
    });
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let data = tempfile::tempdir().expect("data");
    let mut host = host_answered_by(&server, &plugins, data.path(), &QUICK_RETRIES);
    host.type_line("are you there?");
    // Until 2026-12-02 the answered probe failed the batch as one the provider fails alone
    // (found by an operator's test).
    host.wait_for("cairn> back again", Duration::from_secs(30));
    let (_, log) = host.stop();
    assert!(!log.contains("fails alone"), "{log}");
    assert!(up.load(Ordering::SeqCst), "the probe was asked");
}

#[test]
fn a_batch_the_provider_fails_alone_is_failed_and_the_next_conversations_are_answered() {
    // A proxy answering 500 to one message's content, and everything else as usual.
    let server = StubServer::answering(|seen| {
        if seen.body.contains("poison") {
            Reply::status(500, "upstream choked")
        } else {
            Reply::openai_chat("fine")
        }
    });
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let data = tempfile::tempdir().expect("data");
    let mut host = host_answered_by(&server, &plugins, data.path(), &QUICK_RETRIES);
    host.type_line("poison pill");
    host.wait_for("fails alone", Duration::from_secs(30));
    // Another conversation (this one's history holds the poison) is answered.
    let d = data.path().display().to_string();
    let sent = cairn_tests::cairn(&[
        "send",
        "--channel",
        "cli",
        "--conversation",
        "other",
        "--data",
        &d,
        "hello after it",
    ]);
    assert!(sent.status.success(), "{sent:?}");
    host.wait_for("cairn> fine", Duration::from_secs(30));
    let (_, log) = host.stop();
    assert!(
        log.contains("keeps failing this request while it answers others"),
        "{log}"
    );
    let failed = cairn_tests::cairn(&["buffer", "failed", "--data", &d]);
    let listed = String::from_utf8_lossy(&failed.stdout);
    assert!(
        listed.contains("batch 1: channel cli conversation cli")
            && listed.contains("keeps failing this request while it answers others"),
        "listed for a retry: {listed}"
    );

    // A provider that is down fails every request: that is an outage, waited out.
    let down = StubServer::start(vec![Reply::status(503, "down")]);
    let data = tempfile::tempdir().expect("data");
    let mut host = host_answered_by(&down, &plugins, data.path(), &QUICK_RETRIES);
    host.type_line("is anyone there?");
    host.wait_until(Duration::from_secs(30), "a probe of the provider", |_| {
        down.seen()
            .iter()
            .any(|seen| seen.body.contains("Answer with one word."))
    });
    let (_, log) = host.stop();
    assert!(!log.contains("fails alone"), "{log}");
    assert!(
        log.contains("the batch is answered after the next start"),
        "{log}"
    );
}

#[test]
fn a_batch_cut_short_by_a_stop_and_by_a_crash_is_received_and_remembered_once() {
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let dir = tempfile::tempdir().expect("data");
    let data = dir.path();
    let settings = OUTAGE_SETTINGS;
    let down = StubServer::start(vec![Reply::status(503, "down")]);
    let host = asked_during_an_outage(&down, &plugins, data, &[], "is the ferry running today?");
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");

    let mut host = host_answered_by(&down, &plugins, data, &settings);
    host.wait_for(
        "batch 1 waits for the LLM provider",
        Duration::from_secs(30),
    );
    host.kill9();
    if !cairn_tests::storage::on_postgres() {
        // As if the host had died between journaling the message and marking the batch:
        // the journal tells the next attempt.
        rusqlite::Connection::open(data.join("buffer.db"))
            .expect("buffer.db")
            .execute("UPDATE batches SET received_at = NULL", [])
            .expect("unmark");
    }

    let up = StubServer::start(vec![Reply::openai_chat("Yes, every hour.")]);
    let mut host = host_answered_by(&up, &plugins, data, &settings);
    host.wait_for("cairn> Yes, every hour.", Duration::from_secs(60));
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");

    let events = cairn_tests::journal_events(data);
    let count = |topic: &str| events.iter().filter(|e| e["topic"] == topic).count();
    assert_eq!(count("message.received"), 1, "received once: {events:?}");
    assert_eq!(count("agent.response"), 1, "answered once: {events:?}");
    let memories = cairn_tests::memory_list(data);
    let asked = cairn_tests::saying(&memories, "is the ferry running today?");
    assert_eq!(asked, 1, "remembered once: {memories:?}");
    let prompt = up.seen()[0].json()["messages"].to_string();
    assert_eq!(
        prompt.matches("is the ferry running today?").count(),
        1,
        "asked, not also quoted back as an earlier turn: {prompt}"
    );
}

#[test]
fn a_batch_received_again_after_a_crash_before_its_journal_is_remembered_once() {
    if cairn_tests::storage::on_postgres() {
        return; // (It edits the data dir's journal.db to stand for the crash.)
    }
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let dir = tempfile::tempdir().expect("data");
    let data = dir.path();
    let down = StubServer::start(vec![Reply::status(503, "down")]);
    let host = asked_during_an_outage(&down, &plugins, data, &[], "where did I park?");
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    // As if the host had died after saving the episodes and before journaling them: neither
    // the mark nor the journal says the batch was received.
    rusqlite::Connection::open(data.join("buffer.db"))
        .expect("buffer.db")
        .execute("UPDATE batches SET received_at = NULL", [])
        .expect("unmark");
    rusqlite::Connection::open(data.join("journal.db"))
        .expect("journal.db")
        .execute("DELETE FROM events WHERE topic = 'message.received'", [])
        .expect("unjournal");

    let up = StubServer::start(vec![Reply::openai_chat("Level two.")]);
    let mut host = host_answered_by(&up, &plugins, data, &OUTAGE_SETTINGS);
    host.wait_for("cairn> Level two.", Duration::from_secs(60));
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    let memories = cairn_tests::memory_list(data);
    let asked = cairn_tests::saying(&memories, "where did I park?");
    assert_eq!(asked, 1, "remembered once: {memories:?}");
}

#[test]
fn a_question_waiting_for_its_answer_keeps_its_session_open_across_a_stop() {
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let dir = tempfile::tempdir().expect("data");
    let data = dir.path();
    let lifecycle = short_sessions("2");
    let down = StubServer::start(vec![Reply::status(503, "down")]);
    let host = asked_during_an_outage(&down, &plugins, data, &lifecycle, "did my parcel arrive?");
    // Idle well past the session timeout while the provider is down, and across a restart.
    std::thread::sleep(Duration::from_secs(4));
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    std::thread::sleep(Duration::from_secs(1));

    let up = StubServer::start(vec![Reply::openai_chat("It came this morning.")]);
    let settings = [OUTAGE_SETTINGS.as_slice(), lifecycle.as_slice()].concat();
    let mut host = host_answered_by(&up, &plugins, data, &settings);
    host.wait_for("cairn> It came this morning.", Duration::from_secs(60));
    host.wait_until(
        Duration::from_secs(30),
        "the answered session ending",
        |_| !sessions_ended(&cairn_tests::journal_events(data)).is_empty(),
    );
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");

    let events = cairn_tests::journal_events(data);
    let sessions = |topic: &str| -> Vec<Value> {
        events
            .iter()
            .filter(|e| e["topic"] == topic)
            .map(|e| e["session_id"].clone())
            .collect()
    };
    assert_eq!(
        sessions("message.received"),
        [json!("cli:cli")],
        "{events:?}"
    );
    assert_eq!(sessions("agent.response"), [json!("cli:cli")], "{events:?}");
    let ended = sessions_ended(&events);
    assert_eq!(ended.len(), 1, "ended once, after its answer: {ended:?}");
    assert_eq!(
        transcript_roles(&ended[0]),
        ["user", "assistant"],
        "{ended:?}"
    );
}

#[test]
fn an_answer_journaled_as_its_host_stops_joins_its_session_after_a_restart() {
    let server = answering_after(Duration::from_secs(3), "Tuesday, by noon.");
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let dir = tempfile::tempdir().expect("data");
    let data = dir.path();
    let settings = short_sessions("2");
    let mut host = host_answered_by(&server, &plugins, data, &settings);
    host.type_line("when is the delivery?");
    let asked = std::time::Instant::now();
    while server.seen().is_empty() {
        assert!(asked.elapsed() < Duration::from_secs(30), "never asked");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Stopped with the request in flight: the answer comes, and is journaled, as the host
    // stops, after its session monitor stopped reading.
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    assert!(log.contains("cairn> Tuesday, by noon."), "{log}");
    std::thread::sleep(Duration::from_secs(3));

    let mut host = host_answered_by(&server, &plugins, data, &settings);
    host.wait_until(Duration::from_secs(30), "the session ending", |_| {
        !sessions_ended(&cairn_tests::journal_events(data)).is_empty()
    });
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    let ended = sessions_ended(&cairn_tests::journal_events(data));
    assert_eq!(ended.len(), 1, "ended once: {ended:?}");
    assert_eq!(
        transcript_roles(&ended[0]),
        ["user", "assistant"],
        "{ended:?}"
    );
}

#[test]
fn a_follow_up_waiting_behind_another_conversation_stays_in_its_session() {
    let server = answering_after(Duration::from_secs(2), "Noted.");
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let dir = tempfile::tempdir().expect("data");
    let data = dir.path();
    let settings = short_sessions("1");
    let mut host = host_answered_by(&server, &plugins, data, &settings);
    let d = data.display().to_string();
    let send = |conversation: &str, sender: &str, text: &str| {
        cairn_tests::cairn_ok(&[
            "send",
            "--channel",
            "cli",
            "--conversation",
            conversation,
            "--sender",
            sender,
            "--data",
            &d,
            text,
        ]);
    };
    send("a", "ann", "first from a");
    send("b", "bob", "first from b");
    // Said while a's first turn runs: it waits behind b's, past a's session timeout.
    std::thread::sleep(Duration::from_secs(1));
    send("a", "ann", "second from a");
    host.wait_until(Duration::from_secs(60), "three answers", |log| {
        cairn_tests::count_lines(log, "cairn> Noted.") >= 3
    });
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    let events = cairn_tests::journal_events(data);
    let received: Vec<(Value, Value)> = events
        .iter()
        .filter(|e| e["topic"] == "message.received")
        .map(|e| {
            let payload: Value =
                serde_json::from_str(e["payload"].as_str().expect("payload")).expect("json");
            (payload["text"].clone(), e["session_id"].clone())
        })
        .collect();
    assert!(
        received.contains(&(json!("second from a"), json!("cli:a"))),
        "the follow-up joins the session of the turn before it: {received:?}"
    );
}

#[test]
fn the_agent_sleeps_a_sleep_timeout_after_its_last_answer_not_its_question() {
    let server = answering_after(Duration::from_secs(5), "After a long think: yes.");
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let dir = tempfile::tempdir().expect("data");
    let data = dir.path();
    let mut settings = short_sessions("1").to_vec();
    settings.push(("CAIRN_LIFECYCLE_SLEEP_TIMEOUT_SECS", "3"));
    let mut host = host_answered_by(&server, &plugins, data, &settings);
    host.type_line("is it worth it?");
    host.wait_for("cairn> After a long think: yes.", Duration::from_secs(60));
    let topic_at = |events: &[Value], topic: &str| {
        events
            .iter()
            .find(|e| e["topic"] == topic)
            .and_then(|e| e["created_at"].as_i64())
    };
    host.wait_until(Duration::from_secs(60), "sleep.started", |_| {
        topic_at(&cairn_tests::journal_events(data), "sleep.started").is_some()
    });
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    let events = cairn_tests::journal_events(data);
    let answered = topic_at(&events, "agent.response").expect("answered");
    let slept = topic_at(&events, "sleep.started").expect("slept");
    assert!(
        slept - answered >= 3_000,
        "asleep {} ms after the answer, before the 3 s sleep timeout: {events:?}",
        slept - answered
    );
}

/// A host on `cli` whose provider answers only after a minute, once it has asked it
/// (with its server, plugins and data dir, to keep alive).
fn asking_a_slow_provider() -> (Host, StubServer, PluginDir, tempfile::TempDir) {
    let slow = Reply::Slow(
        Duration::from_secs(60),
        Box::new(Reply::openai_chat("Too late.")),
    );
    let server = StubServer::start(vec![slow]);
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let data = tempfile::tempdir().expect("data");
    let mut host = host_answered_by(&server, &plugins, data.path(), &[]);
    host.type_line("what time is it?");
    let asked = std::time::Instant::now();
    while server.seen().is_empty() {
        assert!(asked.elapsed() < Duration::from_secs(30), "never asked");
        std::thread::sleep(Duration::from_millis(20));
    }
    (host, server, plugins, data)
}

#[test]
fn status_says_stopping_while_a_stop_waits_for_the_provider() {
    // The provider takes longer than the 10 s a stop gives a request in flight.
    let (mut host, _server, _plugins, data) = asking_a_slow_provider();
    assert_eq!(
        status_json(data.path())["host"]["stopping_since"],
        Value::Null
    );
    // Status names the batch being answered, and how long it has run.
    let running = &status_json(data.path())["buffer"]["running"];
    assert_eq!(running[0]["id"], 1, "{running}");
    assert_eq!(running[0]["conversation"], "cli", "{running}");
    let text = cairn_ok(&["status", "--data", &data.path().display().to_string()]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains("batch 1 (cli:cli) running since"), "{text}");
    std::process::Command::new("kill")
        .args(["-TERM", &host.pid().to_string()])
        .status()
        .expect("kill");
    // The stop waits 10 s for the request in flight: status says so meanwhile.
    host.wait_until(Duration::from_secs(30), "status saying stopping", |_| {
        status_json(data.path())["host"]["stopping_since"].is_i64()
    });
    let seen = status_json(data.path());
    assert_eq!(seen["host"]["running"], true, "{seen}");
    let text = cairn_ok(&["status", "--data", &data.path().display().to_string()]);
    assert!(
        String::from_utf8_lossy(&text.stdout).starts_with("host: stopping since"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    let after = status_json(data.path());
    assert_eq!(after["host"]["running"], false, "{after}");
    assert_eq!(after["host"]["stopping_since"], Value::Null, "{after}");
}

#[test]
fn a_plugin_deadline_shorter_than_a_slow_completion_is_warned_about_at_start() {
    let server = StubServer::start(vec![Reply::openai_chat("unused")]);
    let plugins = PluginDir::new();
    plugins.bundled_all(&["cli", "episode-summarizer"]);
    let data = tempfile::tempdir().expect("data");
    // Four attempts of two minutes: longer than the summarizer's five-minute deadline.
    let slow = [("CAIRN_AGENT_LLM_TIMEOUT_MS", "120000")];
    let host = host_answered_by(&server, &plugins, data.path(), &slow);
    let (_, log) = host.stop();
    let warned = |log: &str| {
        log.lines().any(|line| {
            line.contains("plugin=episode-summarizer")
                && line.contains("longer than the plugin's limits.timeout_ms of 300 s")
        })
    };
    assert!(warned(&log), "{log}");
    // The defaults fit: no warning.
    let host = host_answered_by(&server, &plugins, data.path(), &[]);
    let (_, log) = host.stop();
    assert!(!warned(&log), "{log}");
}

#[test]
fn a_password_in_the_base_url_is_never_logged_or_stored() {
    let server = StubServer::start(vec![Reply::status(401, "{\"error\": \"bad key\"}")]);
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let data = tempfile::tempdir().expect("data");
    let with_password = server.url().replace("http://", "http://ann:hunter2@") + "/v1";
    let mut host = host_answered_by(
        &server,
        &plugins,
        data.path(),
        &[("CAIRN_AGENT_LLM_BASE_URL", with_password.as_str())],
    );
    host.type_line("hello");
    host.wait_for("refused the request: HTTP 401", Duration::from_secs(60));
    let (_, log) = host.stop();
    let d = data.path().display().to_string();
    let failed = cairn_ok(&["buffer", "failed", "--data", &d]);
    assert!(log.contains("ann:***@"), "{log}");
    for (place, text) in [
        ("the log", log),
        (
            "cairn buffer failed",
            String::from_utf8_lossy(&failed.stdout).into_owned(),
        ),
    ] {
        assert!(!text.contains("hunter2"), "{place}: {text}");
    }
    let failure = String::from_utf8_lossy(&failed.stdout).into_owned();
    assert!(failure.contains("ann:***@"), "{failure}");
    for file in std::fs::read_dir(data.path()).expect("data dir").flatten() {
        let Ok(bytes) = std::fs::read(file.path()) else {
            continue;
        };
        let needle = b"hunter2";
        assert!(
            !bytes.windows(needle.len()).any(|w| w == needle),
            "{} holds the password",
            file.path().display()
        );
    }
}

#[test]
fn status_after_a_kill_says_the_batch_it_left_running_waits_for_the_next_host() {
    let (host, _server, _plugins, data) = asking_a_slow_provider();
    host.kill9();
    // (On a shared database a host counts as running until its heartbeat goes stale.)
    let gone = std::time::Instant::now();
    while status_json(data.path())["host"]["running"] != false {
        assert!(gone.elapsed() < Duration::from_secs(60), "still running");
        std::thread::sleep(Duration::from_millis(200));
    }
    let text = cairn_ok(&["status", "--data", &data.path().display().to_string()]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.starts_with("host: not running"), "{text}");
    assert!(
        text.contains("batch 1 (cli:cli) was running (started ")
            && text.contains(", attempt 1) when the last host ended")
            && text.contains("the next host to start takes it up again")
            && !text.contains("running since"),
        "{text}"
    );
}

#[test]
fn the_response_cache_answers_a_repeated_request_without_the_provider() {
    let server = StubServer::start(vec![Reply::openai_chat("From the model.")]);
    let dir = tempfile::tempdir().expect("cache dir");
    let cache = CacheConfig {
        enabled: true,
        ttl_secs: 60,
        max_entries: 10,
    };
    let provider = CachingProvider::new(
        Box::new(openai(&server)),
        Arc::new(SqliteCache::open(dir.path()).expect("cache.db")),
        &cache,
    );
    let first = provider.complete(&ask("hello")).expect("asked");
    let again = provider.complete(&ask("hello")).expect("cached");
    assert_eq!(again.content, first.content);
    assert_eq!(
        again.usage,
        Usage::default(),
        "a cached answer spends no tokens"
    );
    assert_eq!(server.seen().len(), 1);
    provider.complete(&ask("something else")).expect("asked");
    let mut hotter = ask("hello");
    hotter.temperature = Some(0.9);
    provider.complete(&hotter).expect("another request");
    assert_eq!(server.seen().len(), 3, "the key covers the whole request");
    drop(provider);
    let stats = SqliteCache::read_stats(dir.path())
        .expect("read")
        .expect("a cache");
    assert_eq!((stats.entries, stats.hits, stats.misses), (3, 1, 3));
}

#[test]
fn plugins_granted_llm_ask_the_configured_provider_and_others_are_denied() {
    let server = StubServer::start(vec![Reply::openai_chat("Paris.")]);
    let plugins = PluginDir::new();
    for (id, grant) in [
        (
            "asker",
            "capabilities: {llm: true}\nlimits: {llm_calls_per_hour: 1}\n",
        ),
        ("ungranted", ""),
    ] {
        plugins.plugin(
            id,
            "handler",
            "memory_probe",
            &format!("{grant}config: {{ask: \"capital of France?\", times: 2}}\n"),
        );
    }
    let data = tempfile::tempdir().expect("data");
    let host = host_answered_by(&server, &plugins, data.path(), &[]);
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");
    assert!(
        log.lines().any(
            |l| l.contains("probe llm: ok \"Paris. from stub-model-2025\"") && l.contains("asker")
        ),
        "{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("probe llm: denied") && l.contains("ungranted")),
        "{log}"
    );
    assert_eq!(
        server.seen().len(),
        1,
        "only the granted plugin reached the model"
    );
}

#[test]
fn a_plugins_hourly_llm_budget_holds_across_a_restart() {
    let server = StubServer::start(vec![Reply::openai_chat("Paris.")]);
    let plugins = PluginDir::new();
    plugins.plugin(
        "asker",
        "handler",
        "memory_probe",
        "capabilities: {llm: true}\nlimits: {llm_calls_per_hour: 1}\nconfig: {ask: \"capital of France?\", times: 1}\n",
    );
    let data = tempfile::tempdir().expect("data");
    for run in ["first", "second"] {
        let host = host_answered_by(&server, &plugins, data.path(), &[]);
        let (status, log) = host.stop();
        assert!(status.success(), "{run} run: {log}");
        if run == "second" {
            assert!(
                log.lines().any(|l| l.contains("probe llm:")
                    && l.contains("llm budget of `asker`: 1 calls per hour used")),
                "the restart gave no fresh budget: {log}"
            );
        }
    }
    assert_eq!(
        server.seen().len(),
        1,
        "one call in the hour, across both runs"
    );
}

/// `cairn memory import` of `entries` (export records) into the data dir `data`.
fn import_memories(data: &std::path::Path, entries: &[Value]) {
    let file = data.join("import.jsonl");
    let lines: Vec<String> = entries.iter().map(Value::to_string).collect();
    std::fs::write(&file, lines.join("\n") + "\n").expect("write");
    let file = file.display().to_string();
    let data = data.display().to_string();
    let imported = cairn_tests::cairn(&["memory", "import", &file, "--data", &data]);
    assert!(imported.status.success(), "{imported:?}");
}

#[test]
fn a_turn_sees_the_recent_turns_of_its_session_and_the_users_core_memories() {
    let data = tempfile::tempdir().expect("data");
    let now = cairn::store::now_ms();
    let core = json!({
        "type": "entry", "id": "mem_core_wind", "kind": "core",
        "content": "The user sails a boat called Wind", "category": "core",
        "scope": {"agent_id": "main", "user_id": "user", "session_id": null},
        "importance": 8, "tags": [], "issue_refs": [], "pr_refs": [], "sources": [],
        "subject": null, "predicate": null, "valid_from": now, "valid_to": null,
        "recorded_at": now, "superseded_by": null, "forgotten_at": null
    });
    import_memories(data.path(), &[core]);

    let server = StubServer::start(vec![
        Reply::openai_chat("Noted."),
        Reply::openai_chat("Pier seven."),
    ]);
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let mut host = host_answered_by(&server, &plugins, data.path(), &[]);
    host.type_line("I moored the boat at pier seven");
    host.wait_for("cairn> Noted.", Duration::from_secs(30));
    host.type_line("where is the boat?");
    host.wait_for("cairn> Pier seven.", Duration::from_secs(30));
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");

    let seen = server.seen();
    let system = |n: usize| {
        seen[n].json()["messages"][0]["content"]
            .as_str()
            .expect("a system message")
            .to_string()
    };
    let first = system(0);
    assert!(
        !first.contains("## Recent conversation"),
        "a new session has no history: {first}"
    );
    assert!(
        first.contains("## Core memories") && first.contains("> The user sails a boat called Wind"),
        "{first}"
    );
    let second = system(1);
    let history = second
        .split("## Recent conversation")
        .nth(1)
        .expect("the second turn has the first in its prompt");
    assert!(
        history.contains("> user: I moored the boat at pier seven")
            && history.contains("> you: Noted."),
        "{second}"
    );
    assert!(
        !history.contains("where is the boat?"),
        "the current message is the user turn, not history: {second}"
    );
    assert!(
        second.find("## Recent conversation") < second.find("## Core memories"),
        "recent turns come first (higher priority): {second}"
    );
}

#[test]
fn a_turn_asking_what_was_said_yesterday_is_given_what_was_said_then() {
    let data = tempfile::tempdir().expect("data");
    let yesterday = cairn::store::now_ms() - 24 * 3_600_000;
    let episode = |id: &str, content: &str, valid_from: i64| {
        json!({
            "type": "entry", "id": id, "kind": "episode", "content": content,
            "category": "conversation",
            "scope": {"agent_id": "main", "user_id": "user", "session_id": "cli:earlier"},
            "importance": 5, "tags": ["user"], "issue_refs": [], "pr_refs": [], "sources": [],
            "subject": null, "predicate": null, "valid_from": valid_from, "valid_to": null,
            "recorded_at": valid_from, "superseded_by": null, "forgotten_at": null
        })
    };
    let said = [
        episode(
            "mem_plumber",
            "user: The plumber comes on Friday to fix the kitchen sink",
            yesterday,
        ),
        episode(
            "mem_old",
            "user: My sister moved to Lisbon",
            yesterday - 30 * 86_400_000,
        ),
    ];
    import_memories(data.path(), &said);

    let server = StubServer::start(vec![Reply::openai_chat("The plumber, on Friday.")]);
    let plugins = PluginDir::new();
    plugins.bundled("cli");
    let mut host = host_answered_by(&server, &plugins, data.path(), &[]);
    host.type_line("What did we talk about yesterday?");
    host.wait_for("cairn> The plumber, on Friday.", Duration::from_secs(30));
    let (status, log) = host.stop();
    assert!(status.success(), "{log}");

    // Until 2026-12-04 recall abstained (nothing in the question to be relevant to), and
    // the model was told nothing of yesterday.
    let seen = server.seen();
    let system = seen[0].json()["messages"][0]["content"]
        .as_str()
        .expect("a system message")
        .to_string();
    let recalled = system
        .split("## Relevant memory")
        .nth(1)
        .unwrap_or_else(|| panic!("nothing recalled: {system}"));
    assert!(recalled.contains("The plumber comes on Friday"), "{system}");
    assert!(
        !recalled.contains("Lisbon"),
        "what was said a month ago is not yesterday: {system}"
    );
}
