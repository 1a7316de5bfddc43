//! Targets for what reaches the stores from outside: recall queries (the full-text query
//! sanitiser), memory imports (JSONL), and payloads plugins and channels hand the buffer
//! and the journal (huge, deeply nested, not JSON, not UTF-8 once lossily decoded).

use std::sync::Arc;

use proptest::prelude::*;

use cairn::buffer::{Buffer, BufferConfig, BufferError, NewMessage};
use cairn::journal::{Journal, JournalConfig, JournalError, NewEvent};
use cairn::memory::RecallQuery;
use cairn::memory::{LocalMemory, MemoryConfig, MemoryError, MemoryKind, NewMemory, Scope};

use super::driver::Target;

fn memory(dir: &std::path::Path) -> Arc<LocalMemory> {
    let mut config = MemoryConfig::default();
    config.embeddings.provider = cairn::memory::embed::ProviderKind::Hash;
    LocalMemory::open(dir, config).expect("memory.db")
}

fn user(user: &str) -> Scope {
    Scope {
        user_id: Some(user.into()),
        ..Scope::default()
    }
}

/// `recall`: free text as a recall query, lexical and hybrid, over a small memory.
/// Properties: no panic, and never an error — the text is matched as words, never read as
/// full-text query syntax.
pub struct Recall {
    memory: Arc<LocalMemory>,
    _dir: tempfile::TempDir,
}

impl Recall {
    /// A target over a memory of a few entries in a temp dir.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let memory = memory(dir.path());
        for content in [
            "The user's favourite drink is green tea.",
            "Meeting with Ana moved to Thursday \"after lunch\" (room 4-B).",
            "NEAR the lighthouse, OR by the sea: NOT decided * yet ^ maybe",
            "日本語のメモ — café naïve façade",
        ] {
            memory
                .store_blocking(NewMemory {
                    kind: MemoryKind::Fact,
                    content: content.into(),
                    category: "general".into(),
                    scope: user("u1"),
                    importance: None,
                    tags: Vec::new(),
                    sources: Vec::new(),
                    subject: None,
                    predicate: None,
                    supersedes: None,
                    valid_from: None,
                    id: None,
                })
                .expect("seed memory");
        }
        Self { memory, _dir: dir }
    }
}

impl Target for Recall {
    fn name(&self) -> &'static str {
        "recall"
    }

    fn generated(&self) -> BoxedStrategy<Vec<u8>> {
        let word = prop_oneof![
            prop_oneof![
                Just("AND"),
                Just("OR"),
                Just("NOT"),
                Just("NEAR"),
                Just("NEAR/2"),
                Just("*"),
                Just("^"),
                Just("\""),
                Just("("),
                Just(")"),
                Just("content:"),
                Just("{a b}"),
                Just("-"),
                Just("+"),
                Just(":"),
                Just("'"),
                Just("\u{0}"),
                Just("tea"),
                Just("Thursday")
            ]
            .prop_map(str::to_string),
            "[a-zA-Z0-9\"*^():{}+-]{0,10}",
            "\\PC{0,6}",
        ];
        proptest::collection::vec(word, 0..12)
            .prop_map(|words| words.join(" ").into_bytes())
            .boxed()
    }

    fn check(&self, input: &[u8]) -> Result<(), String> {
        let text = String::from_utf8_lossy(input).into_owned();
        for lexical_only in [true, false] {
            let query = RecallQuery {
                text: text.clone(),
                scope: user("u1"),
                limit: 5,
                lexical_only,
                ..RecallQuery::default()
            };
            self.memory.recall(&query).map_err(|e| {
                format!("recall refused free text (lexical_only {lexical_only}): {e}")
            })?;
        }
        Ok(())
    }
}

/// `import`: a JSONL export as `cairn memory import` reads it. Properties: no panic; a
/// refusal is `invalid input` naming the line and writes nothing at all.
pub struct Import {
    memory: Arc<LocalMemory>,
    _dir: tempfile::TempDir,
}

impl Import {
    /// A target importing into one memory in a temp dir.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        Self {
            memory: memory(dir.path()),
            _dir: dir,
        }
    }

    fn total(&self) -> Result<u64, String> {
        let stats = self.memory.stats().map_err(|e| format!("stats: {e}"))?;
        Ok(stats.live_by_kind.values().sum::<u64>() + stats.superseded + stats.forgotten)
    }
}

impl Target for Import {
    fn name(&self) -> &'static str {
        "import"
    }

    fn generated(&self) -> BoxedStrategy<Vec<u8>> {
        let id = "mem_[0-9a-f]{0,8}";
        let kind = prop_oneof![
            Just("episode"),
            Just("fact"),
            Just("summary"),
            Just("core"),
            Just("bogus")
        ];
        let time = prop_oneof![
            Just("0".to_string()),
            Just("-1".to_string()),
            Just("9223372036854775807".to_string()),
            "[0-9]{1,14}"
        ];
        // A whole record as `cairn memory export` writes it, sometimes with a field no
        // record has (which the import must refuse rather than drop).
        let extra = prop_oneof![3 => Just(None), 1 => Just(Some("mood"))];
        let entry = (id, kind, "\\PC{0,20}", time.clone(), any::<u8>(), extra).prop_map(
            |(id, kind, content, at, importance, extra)| {
                let at: i64 = at.parse().unwrap_or_default();
                let mut record = serde_json::json!({"type": "entry", "id": id, "kind": kind,
                "content": content, "category": "general", "scope": {"user_id": "u"},
                "importance": importance, "tags": [], "issue_refs": [], "pr_refs": [],
                "sources": [], "subject": null, "predicate": null, "valid_from": at,
                "valid_to": null, "recorded_at": at, "superseded_by": null,
                "forgotten_at": null});
                if let Some(field) = extra {
                    record[field] = serde_json::json!("calm");
                }
                record.to_string()
            },
        );
        let audit = ("mem_[0-9a-f]{0,8}", prop_oneof![Just("forget"), Just("purge"), Just("supersede"), Just("edit"), Just("x")], time)
            .prop_map(|(id, action, at)| {
                format!(r#"{{"type":"audit","entry_id":"{id}","action":"{action}","actor":"fuzz","at":{at},"detail":null}}"#)
            });
        let session = "[a-z:#0-9]{0,12}".prop_map(|id| {
            format!(
                r#"{{"type":"session","id":"{id}","user_id":"u","started_at":1,"state":"active"}}"#
            )
        });
        let line = prop_oneof![3 => entry, 1 => audit, 1 => session, 1 => "\\PC{0,40}"];
        proptest::collection::vec(line, 0..6)
            .prop_map(|lines| lines.join("\n").into_bytes())
            .boxed()
    }

    fn check(&self, input: &[u8]) -> Result<(), String> {
        let text = String::from_utf8_lossy(input);
        let before = self.total()?;
        match self.memory.import(&text) {
            Ok(_) => Ok(()),
            Err(MemoryError::InvalidInput(message)) => {
                let after = self.total()?;
                if after != before {
                    return Err(format!(
                        "a refused import wrote {} entries: {message}",
                        after as i64 - before as i64
                    ));
                }
                if message.trim().is_empty() {
                    return Err("a refusal that says nothing".into());
                }
                Ok(())
            }
            Err(other) => Err(format!(
                "an import failed with other than invalid input: {other}"
            )),
        }
    }
}

/// `payloads`: a payload text as a channel's `buffer.push` and a plugin's `emit` hand it
/// over. Properties: no panic; the buffer takes exactly the JSON objects within its size
/// limit and refuses everything else as invalid input (never a store failure); the journal
/// refuses what is not JSON as invalid input.
pub struct Payloads {
    runtime: tokio::runtime::Runtime,
    buffer: Buffer,
    journal: Journal,
    limit: usize,
    _dir: tempfile::TempDir,
}

impl Payloads {
    /// A target over a buffer and a journal in a temp dir.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let config = BufferConfig::default();
        let limit = config.max_payload_bytes;
        let buffer_store = cairn::store::buffer::SqliteBuffer::open(dir.path()).expect("buffer.db");
        let buffer = Buffer::over(Box::new(buffer_store), config).expect("buffer");
        let journal_store =
            cairn::store::journal::SqliteJournal::open(dir.path()).expect("journal.db");
        let journal = Journal::over(Box::new(journal_store), JournalConfig::default());
        Self {
            runtime,
            buffer,
            journal,
            limit,
            _dir: dir,
        }
    }
}

/// JSON built to stress a parser: deep nesting, long strings, big numbers, odd escapes.
fn hostile_json() -> BoxedStrategy<Vec<u8>> {
    let leaf = prop_oneof![
        Just("null".to_string()),
        Just("1e999".to_string()),
        Just("-0".to_string()),
        Just("18446744073709551616".to_string()),
        Just("\"\\ud800\"".to_string()),
        Just("\"\\u0000\"".to_string()),
        "\"\\PC{0,16}\"",
        "-?[0-9]{1,30}(\\.[0-9]{1,5})?",
    ];
    let nested = (0usize..3000, any::<bool>(), leaf).prop_map(|(depth, objects, leaf)| {
        let (open, close) = if objects {
            ("{\"a\":", "}")
        } else {
            ("[", "]")
        };
        format!(
            "{{\"deep\":{}{leaf}{}}}",
            open.repeat(depth),
            close.repeat(depth)
        )
    });
    let long = (0usize..3_000_000).prop_map(|len| format!("{{\"text\":\"{}\"}}", "x".repeat(len)));
    let duplicate = "[a-z]{1,3}".prop_map(|key| format!("{{\"{key}\":1,\"{key}\":2}}"));
    prop_oneof![4 => nested, 1 => long, 1 => duplicate]
        .prop_map(String::into_bytes)
        .boxed()
}

impl Target for Payloads {
    fn name(&self) -> &'static str {
        "payloads"
    }

    fn generated(&self) -> BoxedStrategy<Vec<u8>> {
        hostile_json()
    }

    fn check(&self, input: &[u8]) -> Result<(), String> {
        let payload = String::from_utf8_lossy(input).into_owned();
        let is_object = payload.len() <= self.limit
            && serde_json::from_str::<serde_json::Value>(&payload).is_ok_and(|v| v.is_object());
        let message = NewMessage {
            channel: "fuzz".into(),
            sender: "fuzzer".into(),
            conversation: "c".into(),
            payload: payload.clone(),
            priority: None,
            dedup_key: None,
            said_at: None,
        };
        match self.runtime.block_on(self.buffer.push_async(message)) {
            Ok(_) if is_object => {}
            Ok(_) => {
                return Err(
                    "the buffer took a payload that is not a JSON object within its limit".into(),
                );
            }
            Err(BufferError::InvalidInput(_)) if !is_object => {}
            Err(e) => {
                return Err(format!(
                    "the buffer refused (JSON object: {is_object}): {e}"
                ));
            }
        }
        let event = NewEvent {
            topic: "fuzz.payload".into(),
            payload,
            source: "fuzz".into(),
            ..NewEvent::default()
        };
        match self.runtime.block_on(self.journal.append(event)) {
            Ok(_) | Err(JournalError::InvalidInput(_)) => Ok(()),
            Err(e) => Err(format!("the journal failed on a payload: {e}")),
        }
    }
}
