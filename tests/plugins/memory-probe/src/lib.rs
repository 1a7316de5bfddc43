//! Test plugin for the `memory` interface (world `handler`; run as kind `handler` or
//! `consolidator`). Every outcome is logged as `probe <name>: <outcome>` so tests can read
//! what the host allowed and denied.
//!
//! - `init(config)`: with `{"ask": TEXT, "times": N}` it asks the host's LLM (`llm.complete`)
//!   N times (default once) and logs each answer or error as `probe llm: …`; with `{"user": U, "other": V}` it stores a fact for U, then tries to
//!   store one for V, to recall without naming a user, to recall U's memories and to list
//!   pending sessions; with `"forget": true` it forgets its own fact right after storing it.
//! - `on-event`: for `memory.session_completed` / `session.ended` (consolidators) it takes
//!   every pending session, reads its episodes, saves one fact summarising them (with the
//!   episodes as provenance), marks the session consolidated and checks that it is.

wit_bindgen::generate!({
    path: "../../../wit/v0.1",
    world: "handler",
});

use cairn::plugin::types::{Error, Event, LogLevel, MemoryKind, MemoryScope, NewMemory, RecallQuery};
use cairn::plugin::types::{ChatMessage, CompletionRequest};
use cairn::plugin::{llm, log, memory};
use exports::cairn::plugin::handler_plugin::Guest;

struct Probe;

fn say(name: &str, outcome: String) {
    log::log(LogLevel::Info, &format!("probe {name}: {outcome}"));
}

fn describe<T: std::fmt::Debug>(result: Result<T, Error>) -> String {
    match result {
        Ok(value) => format!("ok {value:?}"),
        Err(Error::Denied(text)) => format!("denied {text}"),
        Err(Error::NotFound(text)) => format!("not-found {text}"),
        Err(Error::InvalidInput(text)) => format!("invalid {text}"),
        Err(Error::Unavailable(text)) => format!("unavailable {text}"),
        Err(Error::Internal(text)) => format!("internal {text}"),
    }
}

fn user_scope(user: &str) -> MemoryScope {
    MemoryScope {
        agent_id: None,
        user_id: Some(user.to_string()),
        session_id: None,
    }
}

fn fact(user: &str, content: &str) -> NewMemory {
    NewMemory {
        kind: MemoryKind::Fact,
        content: content.to_string(),
        category: "custom".into(),
        scope: user_scope(user),
        importance: None,
        tags: vec!["probe".into()],
        sources: Vec::new(),
        subject: Some(user.to_string()),
        predicate: Some("drinks".into()),
        supersedes: None,
    }
}

fn recall(scope: MemoryScope, text: &str) -> Result<Vec<String>, Error> {
    memory::recall(&RecallQuery {
        text: text.into(),
        scope,
        kinds: Vec::new(),
        limit: 5,
        as_of: None,
        exclude_session: None,
    })
    .map(|hits| hits.into_iter().map(|h| h.entry.content).collect())
}

impl Guest for Probe {
    fn init(config: String) -> Result<(), Error> {
        let config: serde_json::Value =
            serde_json::from_str(&config).map_err(|e| Error::InvalidInput(format!("config: {e}")))?;
        if let Some(text) = config["ask"].as_str() {
            for _ in 0..config["times"].as_u64().unwrap_or(1) {
                let asked = llm::complete(&CompletionRequest {
                    messages: vec![ChatMessage { role: "user".into(), content: text.into() }],
                    max_tokens: Some(50),
                    temperature: None,
                });
                say("llm", describe(asked.map(|c| format!("{} from {}", c.content, c.model))));
            }
        }
        let (Some(user), Some(other)) = (config["user"].as_str(), config["other"].as_str()) else {
            return Ok(());
        };
        let own = memory::store(&fact(user, &format!("{user} drinks green tea")));
        say("store-own", describe(own.clone()));
        if let (Ok(id), Some(true)) = (&own, config["forget"].as_bool()) {
            say("forget", describe(memory::forget(id)));
        }
        say("store-other", describe(memory::store(&fact(other, &format!("{other} drinks coffee")))));
        let unscoped = MemoryScope { agent_id: None, user_id: None, session_id: None };
        say("recall-unscoped", describe(recall(unscoped, "tea")));
        say("recall-own", describe(recall(user_scope(user), "what does she drink tea")));
        say("pending", describe(memory::pending_sessions(10).map(|s| s.len())));
        Ok(())
    }

    fn on_event(event: Event) -> Result<(), Error> {
        if event.topic != "memory.session_completed" && event.topic != "session.ended" {
            return Ok(());
        }
        for session in memory::pending_sessions(50)? {
            let episodes = memory::session_episodes(&session.id)?;
            let summary = episodes
                .iter()
                .map(|e| e.content.as_str())
                .collect::<Vec<_>>()
                .join(" / ");
            let facts = memory::save_facts(
                &session.id,
                &[NewMemory {
                    kind: MemoryKind::Fact,
                    content: format!("In {} the user said: {summary}", session.id),
                    category: "custom".into(),
                    scope: MemoryScope {
                        agent_id: None,
                        user_id: session.user_id.clone(),
                        session_id: None,
                    },
                    importance: None,
                    tags: vec!["summary".into()],
                    sources: Vec::new(),
                    subject: None,
                    predicate: None,
                    supersedes: None,
                }],
            )?;
            memory::mark_consolidated(&session.id)?;
            let done = memory::is_consolidated(&session.id)?;
            say(
                "consolidated",
                format!("{} episodes={} facts={} consolidated={done}", session.id, episodes.len(), facts.len()),
            );
        }
        Ok(())
    }
}

export!(Probe);
