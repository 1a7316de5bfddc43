//! The five phases of a sleep. Each returns how many memories it changed, or that it
//! stopped because a message arrived; each is safe to run again from the start.
//!
//! - **review**: an episode or fact that other memories draw on (a source of live facts,
//!   reflections, procedures) rises to `5 + references` (at most 10); an episode nothing
//!   draws on, older than `stale_after_days`, loses one point per sleep (at least 1).
//! - **prune**: forgets episodes older than `stale_after_days` with importance at most
//!   `prune_max_importance` that nothing draws on (soft delete: the audit trail keeps them).
//! - **compress**: of two facts of one user more alike than `compress_similarity`, forgets
//!   the less important (the older on a tie).
//!
//! Prune and compress forget; where the host's `memory.autonomy` does not let plugins
//! forget (`supervised`, `read-only`), they propose instead: the ids they would forget are
//! listed in `sleep.completed`'s `proposed`, for the operator to `cairn memory forget`.
//! - **reflect**: per user with two or more facts, asks the model for insights their recent
//!   facts support; stores new ones as `reflection` memories citing those facts.
//! - **generalize**: per user, asks the model for procedures from requests repeated three
//!   or more times; stores new ones as `procedure` memories citing the requests.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cognition::model::{self, cited_items};
use cognition::text::similarity;
use cognition::{
    Error, MemoryEntry, MemoryKind, MemoryScope, NewMemory, emit, lifecycle, memory, prompts,
};

/// What a phase did.
pub enum Outcome {
    /// It finished, changing this many memories.
    Done(u64),
    /// A message arrived: it stopped part-way.
    Interrupted,
}

/// A phase: its name and what it runs.
pub type Phase = (
    &'static str,
    fn(&Settings, &mut Proposals) -> Result<Outcome, Error>,
);

/// Memories a phase would have forgotten had the host's autonomy allowed it.
pub type Proposals = Vec<String>;

/// The phases in order.
pub const PHASES: [Phase; 5] = [
    ("review", review),
    ("prune", prune),
    ("compress", compress),
    ("reflect", reflect),
    ("generalize", generalize),
];

/// The sleeper's config.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Most memories a phase looks at (newest first).
    pub limit: u32,
    /// Unreferenced episodes older than this are stale, in ms.
    pub stale_ms: i64,
    /// Stale episodes at or under this importance are pruned.
    pub prune_max_importance: u8,
    /// Facts more alike than this are near-duplicates.
    pub compress_similarity: f64,
    /// A pause between phases, so a long sleep leaves the host room; a message cuts it short.
    pub pause: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            limit: 1000,
            stale_ms: 30 * 86_400_000,
            prune_max_importance: 2,
            compress_similarity: 0.85,
            pause: Duration::ZERO,
        }
    }
}

impl Settings {
    /// The settings in the plugin's config, defaults where absent.
    pub fn from_config(config: &serde_json::Value) -> Result<Self, Error> {
        let number = |key, default, range| cognition::config_number(config, key, default, range);
        Ok(Self {
            limit: number("limit", 1000.0, 1.0..=1000.0)? as u32,
            stale_ms: (number("stale_after_days", 30.0, 0.0..=3650.0)? * 86_400_000.0) as i64,
            prune_max_importance: number("prune_max_importance", 2.0, 0.0..=10.0)? as u8,
            compress_similarity: number("compress_similarity", 0.85, 0.0..=1.0)?,
            pause: Duration::from_millis(number("pause_ms", 0.0, 0.0..=600_000.0)? as u64),
        })
    }

    /// Wait the pause between phases; false when `interrupted` said stop.
    pub fn pause(&self, interrupted: impl Fn() -> bool) -> bool {
        let slice = Duration::from_millis(50);
        let mut waited = Duration::ZERO;
        while waited < self.pause {
            if interrupted() {
                return false;
            }
            std::thread::sleep(slice.min(self.pause - waited));
            waited += slice;
        }
        !interrupted()
    }
}

/// How often a phase asks whether a message arrived.
const CHECK_EVERY: usize = 25;

fn everything() -> MemoryScope {
    MemoryScope {
        agent_id: None,
        user_id: None,
        session_id: None,
    }
}

fn live(kinds: &[MemoryKind], limit: u32) -> Result<Vec<MemoryEntry>, Error> {
    memory::list_entries(&everything(), kinds, limit)
}

/// How many live derived memories (facts, reflections, procedures) cite each memory.
fn references(settings: &Settings) -> Result<HashMap<String, u32>, Error> {
    let derived = live(
        &[
            MemoryKind::Fact,
            MemoryKind::Reflection,
            MemoryKind::Procedure,
        ],
        settings.limit,
    )?;
    let mut counts = HashMap::new();
    for entry in derived {
        for source in entry.sources {
            *counts.entry(source).or_default() += 1;
        }
    }
    Ok(counts)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The importance review gives an entry.
fn rescored(entry: &MemoryEntry, references: u32, now: i64, stale_ms: i64) -> u8 {
    if references > 0 {
        entry.importance.max((5 + references).min(10) as u8)
    } else if entry.kind == MemoryKind::Episode && now - entry.recorded_at > stale_ms {
        entry.importance.saturating_sub(1).max(1)
    } else {
        entry.importance
    }
}

/// Forget `id`, or propose it when the host's autonomy denies plugins forgetting; whether
/// it was forgotten.
fn forget_or_propose(id: &str, proposals: &mut Proposals) -> Result<bool, Error> {
    match memory::forget(id) {
        Ok(forgotten) => Ok(forgotten),
        Err(Error::Denied(_)) => {
            proposals.push(id.to_string());
            Ok(false)
        }
        Err(other) => Err(other),
    }
}

fn review(settings: &Settings, _: &mut Proposals) -> Result<Outcome, Error> {
    let references = references(settings)?;
    let now = now_ms();
    let mut changed = 0;
    for (i, entry) in live(&[MemoryKind::Episode, MemoryKind::Fact], settings.limit)?
        .iter()
        .enumerate()
    {
        if i % CHECK_EVERY == 0 && lifecycle::interrupted() {
            return Ok(Outcome::Interrupted);
        }
        let score = rescored(
            entry,
            references.get(&entry.id).copied().unwrap_or(0),
            now,
            settings.stale_ms,
        );
        if score != entry.importance && memory::set_importance(&entry.id, score)? {
            changed += 1;
        }
    }
    Ok(Outcome::Done(changed))
}

fn prune(settings: &Settings, proposals: &mut Proposals) -> Result<Outcome, Error> {
    let references = references(settings)?;
    let now = now_ms();
    let mut changed = 0;
    for (i, entry) in live(&[MemoryKind::Episode], settings.limit)?
        .iter()
        .enumerate()
    {
        if i % CHECK_EVERY == 0 && lifecycle::interrupted() {
            return Ok(Outcome::Interrupted);
        }
        let stale = now - entry.recorded_at > settings.stale_ms;
        if stale
            && entry.importance <= settings.prune_max_importance
            && !references.contains_key(&entry.id)
            && forget_or_propose(&entry.id, proposals)?
        {
            changed += 1;
        }
    }
    Ok(Outcome::Done(changed))
}

fn compress(settings: &Settings, proposals: &mut Proposals) -> Result<Outcome, Error> {
    let facts = live(&[MemoryKind::Fact], settings.limit)?;
    let mut forgotten: HashSet<usize> = HashSet::new();
    let mut proposed: HashSet<usize> = HashSet::new();
    for i in 0..facts.len() {
        if lifecycle::interrupted() {
            return Ok(Outcome::Interrupted);
        }
        for j in i + 1..facts.len() {
            let (a, b) = (&facts[i], &facts[j]);
            let gone = |k| forgotten.contains(&k) || proposed.contains(&k);
            if gone(i) || gone(j) || a.scope.user_id != b.scope.user_id {
                continue;
            }
            if similarity(&a.content, &b.content) > settings.compress_similarity {
                // Newest first: on a tie the older (j) goes.
                let weaker = if b.importance > a.importance { i } else { j };
                if forget_or_propose(&facts[weaker].id, proposals)? {
                    forgotten.insert(weaker);
                } else {
                    proposed.insert(weaker);
                }
            }
        }
    }
    Ok(Outcome::Done(forgotten.len() as u64))
}

/// Who memories belong to: (agent, user).
type Owner = (Option<String>, Option<String>);

/// Live entries of `kinds` grouped by the (agent, user) they belong to, oldest first.
fn by_user(
    kinds: &[MemoryKind],
    settings: &Settings,
) -> Result<BTreeMap<Owner, Vec<MemoryEntry>>, Error> {
    let mut groups: BTreeMap<_, Vec<MemoryEntry>> = BTreeMap::new();
    for entry in live(kinds, settings.limit)?.into_iter().rev() {
        let key = (entry.scope.agent_id.clone(), entry.scope.user_id.clone());
        groups.entry(key).or_default().push(entry);
    }
    Ok(groups)
}

/// Ask the model for the memories `derivation` makes from numbered `inputs`, and store those not
/// already known; how many were stored.
fn derive(
    inputs: &[MemoryEntry],
    scope: MemoryScope,
    derivation: &Derivation,
    settings: &Settings,
) -> Result<u64, Error> {
    let (kind, (prompt, list, category)) = (derivation.stores, derivation.task);
    let numbered: Vec<String> = inputs
        .iter()
        .enumerate()
        .map(|(i, e)| format!("{}. {}", i + 1, e.content))
        .collect();
    let items = match model::ask(prompt, &numbered.join("\n"), 600, |v| {
        cited_items(v, list, inputs.len())
    })? {
        Ok(items) => items,
        Err(garbage) => {
            // The phase goes on for the other users, and completes.
            let about = format!(
                "sleep phase {} for user {}",
                derivation.phase,
                scope.user_id.as_deref().unwrap_or("(shared)")
            );
            let mut report = garbage.report("", &about);
            report["phase"] = derivation.phase.into();
            report["user_id"] = scope.user_id.clone().into();
            emit("sleep.phase_failed", report)?;
            return Ok(0);
        }
    };
    let known: Vec<String> = memory::list_entries(&scope, &[kind], settings.limit)?
        .into_iter()
        .map(|e| e.content)
        .collect();
    let mut stored = 0;
    for (content, sources) in items {
        if known
            .iter()
            .any(|k| similarity(k, &content) > settings.compress_similarity)
        {
            continue;
        }
        memory::store(&NewMemory {
            kind,
            content,
            category: category.into(),
            scope: scope.clone(),
            importance: None,
            tags: vec!["sleep".into()],
            sources: sources.iter().map(|&n| inputs[n - 1].id.clone()).collect(),
            subject: None,
            predicate: None,
            supersedes: None,
            valid_from: None,
        })?;
        stored += 1;
    }
    Ok(stored)
}

/// A phase that asks the model for new memories per user: what it reads, which of those
/// it gives the model, and what it stores.
struct Derivation {
    /// The kinds it reads.
    reads: &'static [MemoryKind],
    /// Which of them count as inputs.
    counts: fn(&MemoryEntry) -> bool,
    /// Fewer inputs than this, and the user is skipped.
    at_least: usize,
    /// The newest this many inputs are given to the model.
    newest: usize,
    /// Its phase's name (`reflect`, `generalize`), as events name it.
    phase: &'static str,
    /// The kind it stores, and the prompt, answer list and category it uses.
    stores: MemoryKind,
    task: (&'static str, &'static str, &'static str),
}

/// Insights from a user's newest facts.
const REFLECTION: Derivation = Derivation {
    reads: &[MemoryKind::Fact],
    counts: |_| true,
    at_least: 2,
    newest: 30,
    phase: "reflect",
    stores: MemoryKind::Reflection,
    task: (prompts::REFLECT, "reflections", "insight"),
};

/// Procedures from a user's repeated requests.
const GENERALIZATION: Derivation = Derivation {
    reads: &[MemoryKind::Episode],
    counts: |e| e.tags.iter().any(|t| t == "user"),
    at_least: 3,
    newest: 100,
    phase: "generalize",
    stores: MemoryKind::Procedure,
    task: (prompts::GENERALIZE, "procedures", "procedure"),
};

/// Run a derivation for every user; how many memories it stored.
fn derive_per_user(derivation: &Derivation, settings: &Settings) -> Result<Outcome, Error> {
    let mut changed = 0;
    for ((agent_id, user_id), entries) in by_user(derivation.reads, settings)? {
        if lifecycle::interrupted() {
            return Ok(Outcome::Interrupted);
        }
        let inputs: Vec<MemoryEntry> = entries.into_iter().filter(derivation.counts).collect();
        if inputs.len() < derivation.at_least {
            continue;
        }
        let newest = &inputs[inputs.len().saturating_sub(derivation.newest)..];
        let scope = MemoryScope {
            agent_id,
            user_id,
            session_id: None,
        };
        changed += derive(newest, scope, derivation, settings)?;
    }
    Ok(Outcome::Done(changed))
}

fn reflect(settings: &Settings, _: &mut Proposals) -> Result<Outcome, Error> {
    derive_per_user(&REFLECTION, settings)
}

fn generalize(settings: &Settings, _: &mut Proposals) -> Result<Outcome, Error> {
    derive_per_user(&GENERALIZATION, settings)
}
