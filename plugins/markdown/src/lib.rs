//! The `markdown` memory backend (world `memory-backend`).
//!
//! Memories live as Markdown in the plugin's preopened directory `/workspace`: core
//! memories in `MEMORY.md`, everything else in the day's file `memory/YYYY-MM-DD.md`. Files
//! are append-only and readable by people; each memory is a bullet with its full record in
//! an HTML comment, and `forget` appends a tombstone comment. Recall is by keywords: the
//! share of the query's words an entry contains, ties broken by recency.
//!
//! Point `memory.backend` in `cairn.yaml` at this plugin's id to use it.

wit_bindgen::generate!({
    path: "../../wit/v0.2",
    world: "memory-backend",
});

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use cairn::plugin::types::{
    Error, MemoryEntry, MemoryKind, MemoryScope, NewMemory, RecallHit, RecallQuery,
};
use exports::cairn::plugin::memory_backend_plugin::Guest;
use serde::{Deserialize, Serialize};

const ROOT: &str = "/workspace";
const ENTRY_MARK: &str = "<!-- cairn:entry ";
const FORGET_MARK: &str = "<!-- cairn:forget ";

/// A memory as written into the files.
#[derive(Serialize, Deserialize, Clone)]
struct Record {
    id: String,
    kind: String,
    content: String,
    category: String,
    agent_id: Option<String>,
    user_id: Option<String>,
    session_id: Option<String>,
    importance: u8,
    tags: Vec<String>,
    sources: Vec<String>,
    subject: Option<String>,
    predicate: Option<String>,
    recorded_at: i64,
}

#[derive(Serialize, Deserialize)]
struct Tombstone {
    id: String,
    at: i64,
}

fn kind_name(kind: MemoryKind) -> &'static str {
    match kind {
        MemoryKind::Episode => "episode",
        MemoryKind::Fact => "fact",
        MemoryKind::Core => "core",
        MemoryKind::Reflection => "reflection",
        MemoryKind::Procedure => "procedure",
    }
}

fn kind_of(name: &str) -> MemoryKind {
    match name {
        "fact" => MemoryKind::Fact,
        "core" => MemoryKind::Core,
        "reflection" => MemoryKind::Reflection,
        "procedure" => MemoryKind::Procedure,
        _ => MemoryKind::Episode,
    }
}

fn io_error(path: &Path, error: std::io::Error) -> Error {
    Error::Internal(format!("{}: {error}", path.display()))
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Every Markdown file of the store, `MEMORY.md` first, then the daily files in date order.
fn files() -> Result<Vec<PathBuf>, Error> {
    let mut found = vec![Path::new(ROOT).join("MEMORY.md")];
    let daily = Path::new(ROOT).join("memory");
    if daily.is_dir() {
        let mut days: Vec<PathBuf> = fs::read_dir(&daily)
            .map_err(|e| io_error(&daily, e))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        days.sort();
        found.extend(days);
    }
    Ok(found.into_iter().filter(|p| p.is_file()).collect())
}

/// The live records of every file, in the order written, minus the forgotten ones.
fn load() -> Result<Vec<Record>, Error> {
    let mut records = Vec::new();
    let mut forgotten = BTreeSet::new();
    for path in files()? {
        let text = fs::read_to_string(&path).map_err(|e| io_error(&path, e))?;
        for line in text.lines() {
            let line = line.trim();
            if let Some(json) = line.strip_prefix(ENTRY_MARK).and_then(|r| r.strip_suffix("-->")) {
                if let Ok(record) = serde_json::from_str::<Record>(json.trim()) {
                    records.push(record);
                }
            } else if let Some(json) =
                line.strip_prefix(FORGET_MARK).and_then(|r| r.strip_suffix("-->"))
                && let Ok(tombstone) = serde_json::from_str::<Tombstone>(json.trim())
            {
                forgotten.insert(tombstone.id);
            }
        }
    }
    records.retain(|r| !forgotten.contains(&r.id));
    Ok(records)
}

fn append(path: &Path, text: &str) -> Result<(), Error> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    }
    let fresh = !path.exists();
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| io_error(path, e))?;
    let mut out = String::new();
    if fresh {
        let title = path.file_stem().and_then(|s| s.to_str()).unwrap_or("memory");
        out.push_str(&format!("# {title}\n\n"));
    }
    out.push_str(text);
    file.write_all(out.as_bytes()).map_err(|e| io_error(path, e))?;
    file.sync_all().map_err(|e| io_error(path, e))
}

/// A scope admits a record when every set agent/user matches or the record is shared at
/// that level, and a set session matches exactly.
fn admits(scope: &MemoryScope, record: &Record) -> bool {
    let level = |wanted: &Option<String>, have: &Option<String>| match (wanted, have) {
        (Some(w), Some(h)) => w == h,
        _ => true,
    };
    level(&scope.agent_id, &record.agent_id)
        && level(&scope.user_id, &record.user_id)
        && scope
            .session_id
            .as_ref()
            .is_none_or(|s| record.session_id.as_ref() == Some(s))
}

fn to_entry(record: &Record) -> MemoryEntry {
    MemoryEntry {
        id: record.id.clone(),
        kind: kind_of(&record.kind),
        content: record.content.clone(),
        category: record.category.clone(),
        scope: MemoryScope {
            agent_id: record.agent_id.clone(),
            user_id: record.user_id.clone(),
            session_id: record.session_id.clone(),
        },
        importance: record.importance,
        tags: record.tags.clone(),
        issue_refs: Vec::new(),
        pr_refs: Vec::new(),
        sources: record.sources.clone(),
        subject: record.subject.clone(),
        predicate: record.predicate.clone(),
        valid_from: record.recorded_at,
        valid_to: None,
        recorded_at: record.recorded_at,
        superseded_by: None,
    }
}

fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() > 2)
        .map(str::to_lowercase)
        .collect()
}

struct Markdown;

impl Guest for Markdown {
    fn init(_config: String) -> Result<(), Error> {
        fs::create_dir_all(Path::new(ROOT).join("memory"))
            .map_err(|e| io_error(Path::new(ROOT), e))
    }

    fn store_entry(entry: NewMemory) -> Result<String, Error> {
        if entry.content.trim().is_empty() {
            return Err(Error::InvalidInput("content: expected non-empty text".into()));
        }
        let now = now_ms();
        let count = load()?.len();
        let record = Record {
            id: format!("md_{now}_{count}"),
            kind: kind_name(entry.kind).into(),
            content: entry.content,
            category: entry.category,
            agent_id: entry.scope.agent_id,
            user_id: entry.scope.user_id,
            session_id: entry.scope.session_id,
            importance: entry.importance.unwrap_or(5).clamp(1, 10),
            tags: entry.tags,
            sources: entry.sources,
            subject: entry.subject,
            predicate: entry.predicate,
            recorded_at: now,
        };
        let path = if record.kind == "core" {
            Path::new(ROOT).join("MEMORY.md")
        } else {
            let day = chrono::Utc::now().format("%Y-%m-%d").to_string();
            Path::new(ROOT).join("memory").join(format!("{day}.md"))
        };
        let json = serde_json::to_string(&record)
            .map_err(|e| Error::Internal(e.to_string()))?
            .replace("--", "\\u002d\\u002d");
        let bullet = record.content.lines().collect::<Vec<_>>().join("\n  ");
        append(
            &path,
            &format!("- **{}** {bullet}\n  {ENTRY_MARK}{json} -->\n", record.kind),
        )?;
        Ok(record.id)
    }

    fn recall(query: RecallQuery) -> Result<Vec<RecallHit>, Error> {
        let wanted = words(&query.text);
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let mut hits: Vec<(f64, Record)> = load()?
            .into_iter()
            .filter(|r| admits(&query.scope, r))
            .filter(|r| query.kinds.is_empty() || query.kinds.iter().any(|k| kind_name(*k) == r.kind))
            .filter(|r| query.exclude_session.is_none() || r.session_id != query.exclude_session)
            .filter(|r| query.as_of.is_none_or(|at| r.recorded_at <= at))
            .filter_map(|r| {
                let have = words(&r.content);
                let shared = wanted.intersection(&have).count();
                (shared > 0).then(|| (shared as f64 / wanted.len() as f64, r))
            })
            .collect();
        hits.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.recorded_at.cmp(&a.1.recorded_at)));
        hits.truncate(query.limit.max(1) as usize);
        Ok(hits
            .into_iter()
            .map(|(score, record)| RecallHit {
                entry: to_entry(&record),
                score,
            })
            .collect())
    }

    fn get(id: String) -> Result<MemoryEntry, Error> {
        load()?
            .iter()
            .find(|r| r.id == id)
            .map(to_entry)
            .ok_or_else(|| Error::NotFound(format!("memory `{id}` does not exist")))
    }

    fn list_entries(
        scope: MemoryScope,
        kinds: Vec<MemoryKind>,
        limit: u32,
    ) -> Result<Vec<MemoryEntry>, Error> {
        Ok(load()?
            .iter()
            .rev()
            .filter(|r| admits(&scope, r))
            .filter(|r| kinds.is_empty() || kinds.iter().any(|k| kind_name(*k) == r.kind))
            .take(limit.max(1) as usize)
            .map(to_entry)
            .collect())
    }

    fn forget(id: String) -> Result<bool, Error> {
        if !load()?.iter().any(|r| r.id == id) {
            return Ok(false);
        }
        let day = chrono::Utc::now().format("%Y-%m-%d").to_string();
        let path = Path::new(ROOT).join("memory").join(format!("{day}.md"));
        let json = serde_json::to_string(&Tombstone { id, at: now_ms() })
            .map_err(|e| Error::Internal(e.to_string()))?;
        append(&path, &format!("{FORGET_MARK}{json} -->\n"))?;
        Ok(true)
    }

    fn count(scope: MemoryScope) -> Result<u64, Error> {
        Ok(load()?.iter().filter(|r| admits(&scope, r)).count() as u64)
    }

    fn health() -> Result<String, Error> {
        let files = files()?;
        let records = load()?;
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        for record in &records {
            *kinds.entry(record.kind.as_str()).or_default() += 1;
        }
        Ok(format!(
            "markdown: {} memories in {} files ({kinds:?})",
            records.len(),
            files.len()
        ))
    }
}

export!(Markdown);
