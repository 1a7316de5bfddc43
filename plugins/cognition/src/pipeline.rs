//! The steps that turn a session into memory, shared by the plugins that run them: the
//! summarizer (step 1 on `session.ended`), the fact extractor (step 2 on
//! `episode.summarized`) and the consolidator (both, for sessions the first two did not
//! finish). Every step is safe to repeat: the host answers a duplicate store with the
//! existing memory, known facts are skipped, and a consolidated session is left alone.

use crate::facts::{self, Candidate, Selection};
use crate::model::{self, Garbage};
use crate::summary::{self, Line, Summary};
use crate::{Error, MemoryEntry, MemoryKind, MemoryScope, NewMemory, consolidation, memory, prompts};

/// Most sources a summary memory lists (the session's first episodes).
const MAX_SUMMARY_SOURCES: usize = 100;

/// A session as the pipeline works on it: its episodes and the scope its memories take.
#[derive(Debug, Clone)]
pub struct Session {
    /// The session id.
    pub id: String,
    /// The agent its memories belong to, from its episodes.
    pub agent_id: Option<String>,
    /// The user its memories belong to.
    pub user_id: Option<String>,
    /// Its episodes, oldest first.
    pub episodes: Vec<MemoryEntry>,
}

impl Session {
    /// Load a session's episodes; `user` names its user when it has none.
    pub fn load(id: &str, user: Option<String>) -> Result<Self, Error> {
        let episodes = consolidation::session_episodes(id)?;
        let first = episodes.first().map(|e| e.scope.clone());
        Ok(Self {
            id: id.to_string(),
            agent_id: first.as_ref().and_then(|s| s.agent_id.clone()),
            user_id: first.and_then(|s| s.user_id).or(user),
            episodes,
        })
    }

    /// When the user last said something in the session (the last episode, if the user
    /// said nothing): what is drawn from the session holds from then, so history replayed
    /// with its real dates is remembered at those dates. The agent's replies are dated when
    /// they were made, at replay time, so they do not count.
    pub fn said_until(&self) -> Option<i64> {
        let by_user = |e: &&MemoryEntry| !e.tags.iter().any(|t| t == "assistant");
        let last = |episodes: Vec<&MemoryEntry>| episodes.iter().map(|e| e.valid_from).max();
        last(self.episodes.iter().filter(by_user).collect())
            .or_else(|| last(self.episodes.iter().collect()))
    }

    /// The scope of what is learned about the user: every later session sees it.
    pub fn user_scope(&self) -> MemoryScope {
        MemoryScope {
            agent_id: self.agent_id.clone(),
            user_id: self.user_id.clone(),
            session_id: None,
        }
    }

    /// The scope of what belongs to this session alone (its summary).
    pub fn session_scope(&self) -> MemoryScope {
        MemoryScope {
            session_id: Some(self.id.clone()),
            ..self.user_scope()
        }
    }

    /// The transcript as its episodes tell it (`assistant` for the agent's replies).
    pub fn lines(&self) -> Vec<Line> {
        self.episodes
            .iter()
            .map(|e| {
                let agent = e.tags.iter().any(|t| t == "assistant");
                let speaker = if agent {
                    "assistant".to_string()
                } else {
                    self.user_id.clone().unwrap_or_else(|| "user".into())
                };
                Line {
                    speaker,
                    text: e.content.clone(),
                }
            })
            .collect()
    }

    /// What the user said, one `speaker: text` line each.
    fn user_words(&self) -> String {
        let lines: Vec<Line> = self
            .lines()
            .into_iter()
            .filter(|l| l.speaker != "assistant")
            .collect();
        summary::transcript_text(&lines)
    }
}

/// Summarise a transcript: `Ok(None)` when it is too short to be worth one.
pub fn summarize(lines: &[Line]) -> Result<Option<Result<Summary, Garbage>>, Error> {
    let text = summary::transcript_text(lines);
    if text.chars().count() < summary::MIN_TRANSCRIPT_CHARS {
        return Ok(None);
    }
    model::ask(prompts::SUMMARIZE, &text, 800, Summary::from_answer).map(Some)
}

/// Store a session's summary (kind `reflection`, category `summary`, in the session's
/// scope, its episodes as sources); its id.
pub fn store_summary(session: &Session, summary: &Summary) -> Result<String, Error> {
    let mut tags = vec!["summary".to_string()];
    tags.extend(summary.topics.iter().cloned());
    memory::store(&NewMemory {
        kind: MemoryKind::Reflection,
        content: summary.as_memory_text(),
        category: "summary".into(),
        scope: session.session_scope(),
        importance: None,
        tags,
        sources: session
            .episodes
            .iter()
            .take(MAX_SUMMARY_SOURCES)
            .map(|e| e.id.clone())
            .collect(),
        subject: None,
        predicate: None,
        supersedes: None,
        valid_from: session.said_until(),
    })
}

/// How much of a fact extraction was kept.
#[derive(Debug, Default)]
pub struct Extraction {
    /// Ids of the facts saved (existing ids for exact duplicates).
    pub saved: Vec<String>,
    /// The selection's counts of what was left out.
    pub selection: Selection,
}

/// Fact extraction thresholds (`min_confidence`, `max_similarity` in a plugin's config).
#[derive(Debug, Clone, Copy)]
pub struct FactPolicy {
    /// Candidates below this confidence are left out (default 0.6).
    pub min_confidence: f64,
    /// Candidates more alike than this to a known fact are left out (default 0.85).
    pub max_similarity: f64,
}

impl Default for FactPolicy {
    fn default() -> Self {
        Self {
            min_confidence: 0.6,
            max_similarity: 0.85,
        }
    }
}

impl FactPolicy {
    /// The policy in a plugin's config, defaults where absent.
    pub fn from_config(config: &serde_json::Value) -> Result<Self, Error> {
        let default = Self::default();
        Ok(Self {
            min_confidence: crate::config_number(
                config,
                "min_confidence",
                default.min_confidence,
                0.0..=1.0,
            )?,
            max_similarity: crate::config_number(
                config,
                "max_similarity",
                default.max_similarity,
                0.0..=1.0,
            )?,
        })
    }
}

/// Ask for the facts a session states, keep the new and sure ones, save them all at once
/// with the session's episodes as sources, and mark the session consolidated.
pub fn extract_and_save(
    session: &Session,
    summary: Option<&Summary>,
    policy: FactPolicy,
) -> Result<Result<Extraction, Garbage>, Error> {
    let mut input = summary.map(Summary::as_fact_input).unwrap_or_default();
    input.push_str("\nWhat was said:\n");
    input.push_str(&session.user_words());
    let candidates = match model::ask(
        prompts::EXTRACT_FACTS,
        &input,
        800,
        facts::candidates_from_answer,
    )? {
        Ok(candidates) => candidates,
        Err(garbage) => return Ok(Err(garbage)),
    };
    let existing: Vec<String> =
        memory::list_entries(&session.user_scope(), &[MemoryKind::Fact], 1000)?
            .into_iter()
            .map(|e| e.content)
            .collect();
    let selection = facts::select(
        candidates,
        &existing,
        policy.min_confidence,
        policy.max_similarity,
    );
    let new: Vec<NewMemory> = selection
        .kept
        .iter()
        .map(|c| fact_memory(session, c))
        .collect();
    let saved = if new.is_empty() {
        Vec::new()
    } else {
        consolidation::save_facts(&session.id, &new)?
    };
    consolidation::mark_consolidated(&session.id)?;
    Ok(Ok(Extraction { saved, selection }))
}

/// A candidate as the fact memory saved for it: in the user's scope, its subject and
/// predicate kept so a later value supersedes it, sources filled in by the host.
fn fact_memory(session: &Session, candidate: &Candidate) -> NewMemory {
    NewMemory {
        kind: MemoryKind::Fact,
        content: candidate.content.clone(),
        category: "fact".into(),
        scope: session.user_scope(),
        importance: None,
        tags: vec!["extracted".into()],
        sources: Vec::new(),
        subject: candidate
            .subject
            .clone()
            .or_else(|| candidate.predicate.as_ref().map(|_| "user".into())),
        predicate: candidate.predicate.clone(),
        supersedes: None,
        valid_from: session.said_until(),
    }
}
