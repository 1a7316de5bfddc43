//! Recall quality on a generated set, scope isolation, and facts superseded and read as of
//! earlier times.

use std::collections::HashMap;

use cairn::memory::{
    LocalMemory, MemoryConfig, MemoryKind, NewMemory, RecallQuery, Scope, StoreOutcome,
};
use cairn_tests::cairn;
use cairn_tests::memory_dataset::{self, Dataset};

use super::{cli_json, data_arg, load_dataset, stored_id, user_scope};

/// A fact about `user`, valid from `valid_from`.
fn fact(user: &str, predicate: &str, content: &str, valid_from: i64) -> NewMemory {
    let mut memory = NewMemory::new(MemoryKind::Fact, content);
    memory.scope = user_scope(user);
    memory.subject = Some(user.into());
    memory.predicate = Some(predicate.into());
    memory.valid_from = Some(valid_from);
    memory
}
/// recall@5 of the direct questions (overall and updated facts) and of the paraphrased ones.
struct RecallScore {
    overall: f64,
    updated: f64,
    paraphrased: f64,
    stale_hits: usize,
    questions: usize,
}

fn score_recall(
    memory: &LocalMemory,
    dataset: &Dataset,
    ids: &HashMap<String, String>,
    lexical: bool,
) -> RecallScore {
    let mut tally = [(0usize, 0usize); 3];
    let mut stale_hits = 0;
    for question in &dataset.questions {
        let recalled = memory
            .recall(&memory_dataset::question_recall(
                &question.user,
                &question.text,
                lexical,
            ))
            .expect("recall");
        let found: Vec<&str> = recalled.iter().map(|h| h.entry.id.as_str()).collect();
        let hit = usize::from(
            question
                .evidence
                .iter()
                .any(|label| found.contains(&ids[label].as_str())),
        );
        stale_hits += question
            .stale
            .iter()
            .filter(|label| found.contains(&ids[*label].as_str()))
            .count();
        let mut count = |i: usize| {
            tally[i].0 += hit;
            tally[i].1 += 1;
        };
        if question.paraphrase {
            count(2);
        } else {
            count(0);
            if question.updated {
                count(1);
            }
        }
    }
    let rate = |(hits, total): (usize, usize)| hits as f64 / total.max(1) as f64;
    RecallScore {
        overall: rate(tally[0]),
        updated: rate(tally[1]),
        paraphrased: rate(tally[2]),
        stale_hits,
        questions: dataset.questions.len(),
    }
}

#[test]
fn recall_quality_on_generated_conversations() {
    let data = tempfile::tempdir().expect("data dir");
    let memory = cairn_tests::storage::open_memory(data.path(), MemoryConfig::default());
    let dataset = memory_dataset::generate(120, 7, cairn::store::now_ms());
    assert!(
        dataset.sessions >= 100 * 3,
        "at least 100 multi-session conversations"
    );
    let ids = load_dataset(&memory, &dataset);
    let embedded = memory.embed_pending(|_| {}).expect("embed");
    assert_eq!(embedded as usize, dataset.memories.len());

    let hybrid = score_recall(&memory, &dataset, &ids, false);
    let lexical = score_recall(&memory, &dataset, &ids, true);
    println!(
        "recall@5 over {} questions ({} users, {} sessions, {} memories): hybrid: direct {:.3}, updated facts {:.3}, paraphrased {:.3}; BM25 only: direct {:.3}, updated {:.3}, paraphrased {:.3}; stale facts recalled: {}",
        hybrid.questions,
        120,
        dataset.sessions,
        dataset.memories.len(),
        hybrid.overall,
        hybrid.updated,
        hybrid.paraphrased,
        lexical.overall,
        lexical.updated,
        lexical.paraphrased,
        hybrid.stale_hits + lexical.stale_hits,
    );
    assert!(
        hybrid.overall >= 0.85,
        "hybrid recall@5 {:.3} is below the floor 0.85",
        hybrid.overall
    );
    assert!(
        hybrid.updated >= 0.85,
        "recall@5 of updated facts {:.3} is below the floor 0.85",
        hybrid.updated
    );
    assert!(
        hybrid.paraphrased >= 0.3,
        "recall@5 of paraphrased questions {:.3} fell below 0.3",
        hybrid.paraphrased
    );
    assert_eq!(
        hybrid.stale_hits + lexical.stale_hits,
        0,
        "a superseded fact was recalled as current"
    );
}

#[test]
fn scopes_isolate_users_even_against_crafted_query_syntax() {
    let data = tempfile::tempdir().expect("data dir");
    let memory = cairn_tests::storage::open_memory(data.path(), MemoryConfig::default());
    let mut secret = NewMemory::new(
        MemoryKind::Fact,
        "Alice keeps the vault code 4417 under the green tea tin",
    );
    secret.scope = user_scope("alice");
    memory.store_blocking(secret).expect("store");
    memory.embed_pending(|_| {}).expect("embed");
    let data = data_arg(data.path());

    let own = cli_json(&[
        "memory",
        "search",
        "vault code tea",
        "--user",
        "alice",
        "--json",
        "--data",
        &data,
    ]);
    assert_eq!(
        own.as_array().map(Vec::len),
        Some(1),
        "alice recalls her memory: {own}"
    );
    for crafted in [
        "vault code tea",
        "vault OR code OR *",
        "\"vault\" OR user_id:alice",
        "content:vault",
        "tea) OR (1",
        "NEAR(vault code, 5)",
        "*",
        "' OR 1=1 --",
    ] {
        let hits = cli_json(&[
            "memory", "search", crafted, "--user", "bob", "--json", "--data", &data,
        ]);
        assert_eq!(
            hits,
            serde_json::json!([]),
            "bob recalled alice's memory with {crafted:?}"
        );
        let listed = cli_json(&["memory", "list", "--user", "bob", "--json", "--data", &data]);
        assert_eq!(listed, serde_json::json!([]));
    }
    let hits = memory
        .recall(&RecallQuery {
            text: "vault".into(),
            scope: Scope {
                user_id: Some("bob".into()),
                session_id: Some("any".into()),
                ..Scope::default()
            },
            limit: 5,
            ..RecallQuery::default()
        })
        .expect("recall");
    assert!(hits.is_empty());
}

#[test]
fn facts_supersede_and_stay_queryable_as_of_earlier_times() {
    let dir = tempfile::tempdir().expect("data dir");
    let memory = cairn_tests::storage::open_memory(dir.path(), MemoryConfig::default());
    let day = 86_400_000;
    let t0 = cairn::store::now_ms() - 10 * day;
    let paris = stored_id(
        memory
            .store_blocking(fact("alice", "lives_in", "Alice lives in Paris", t0))
            .expect("store"),
    );
    let berlin_outcome = memory
        .store_blocking(fact(
            "alice",
            "lives_in",
            "Alice lives in Berlin",
            t0 + 5 * day,
        ))
        .expect("store");
    let StoreOutcome::Stored {
        id: berlin,
        superseded,
    } = berlin_outcome
    else {
        panic!("the update was not stored")
    };
    assert_eq!(superseded, vec![paris.clone()]);
    let old = memory
        .get(&paris)
        .expect("get")
        .expect("the old fact is kept");
    assert_eq!(old.valid_to, Some(t0 + 5 * day));
    assert_eq!(old.superseded_by.as_deref(), Some(berlin.as_str()));

    let search = |as_of: Option<i64>| -> Vec<String> {
        memory
            .recall(&RecallQuery {
                text: "where does alice live".into(),
                scope: user_scope("alice"),
                as_of,
                limit: 5,
                ..RecallQuery::default()
            })
            .expect("recall")
            .into_iter()
            .map(|h| h.entry.id)
            .collect()
    };
    assert_eq!(
        search(None),
        vec![berlin.clone()],
        "now: only the current fact"
    );
    assert_eq!(
        search(Some(t0 + 2 * day)),
        vec![paris.clone()],
        "as of day 2: Paris"
    );
    assert!(
        search(Some(t0 - day)).is_empty(),
        "before either was true: nothing"
    );

    // The same through the binary.
    let data = data_arg(dir.path());
    let as_of = (t0 + 2 * day).to_string();
    let hits = cli_json(&[
        "memory",
        "search",
        "alice live",
        "--user",
        "alice",
        "--as-of",
        &as_of,
        "--json",
        "--data",
        &data,
    ]);
    assert_eq!(hits[0]["entry"]["id"], paris.as_str());
    let output = cairn(&[
        "memory",
        "search",
        "alice live",
        "--user",
        "alice",
        "--explain",
        "--data",
        &data,
    ]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains(&berlin) && text.contains("bm25") && text.contains("recency"),
        "{text}"
    );

    // Duplicates are skipped and reported; an explicit supersede works by id.
    let again = memory
        .store_blocking(fact(
            "alice",
            "lives_in",
            "Alice lives in Berlin",
            t0 + 6 * day,
        ))
        .expect("store");
    assert_eq!(
        again,
        StoreOutcome::Duplicate {
            existing: berlin.clone(),
            similarity: 1.0
        }
    );
    // An episode stored again under the id its caller chose is stored once; repeated
    // words in another episode are not a duplicate.
    let mut said = NewMemory::new(MemoryKind::Episode, "yes please");
    said.scope = user_scope("alice");
    said.id = Some("ep_turn_7_user".into());
    let first = memory.store_blocking(said.clone()).expect("store");
    assert_eq!(stored_id(first), "ep_turn_7_user");
    assert_eq!(
        memory.store_blocking(said.clone()).expect("store"),
        StoreOutcome::Duplicate {
            existing: "ep_turn_7_user".into(),
            similarity: 1.0
        }
    );
    said.id = None;
    assert!(matches!(
        memory.store_blocking(said.clone()).expect("store"),
        StoreOutcome::Stored { .. }
    ));
    said.id = Some("not an id!".into());
    let refused = memory.store_blocking(said).expect_err("a bad id");
    assert!(
        refused
            .to_string()
            .contains("id: `not an id!` is not an id"),
        "{refused}"
    );
    let mut hobby = NewMemory::new(
        MemoryKind::Fact,
        "Alice plays chess in the park every Sunday morning",
    );
    hobby.scope = user_scope("alice");
    hobby.subject = Some("alice".into());
    let hobby = stored_id(memory.store_blocking(hobby).expect("store"));
    let mut near = NewMemory::new(
        MemoryKind::Fact,
        "Alice plays chess in the park every Sunday morning!",
    );
    near.scope = user_scope("alice");
    near.subject = Some("alice".into());
    near.predicate = Some("hobby".into());
    match memory.store_blocking(near).expect("store") {
        StoreOutcome::Duplicate {
            existing,
            similarity,
        } => {
            assert_eq!(existing, hobby);
            assert!(similarity >= 0.85);
        }
        other => panic!("a near duplicate about the same subject was stored: {other:?}"),
    }
    let mut correction = NewMemory::new(MemoryKind::Fact, "Alice plays go, not chess, on Sundays");
    correction.scope = user_scope("alice");
    correction.supersedes = Some(hobby.clone());
    let correction = stored_id(memory.store_blocking(correction).expect("store"));
    assert_eq!(
        memory
            .get(&hobby)
            .expect("get")
            .expect("kept")
            .superseded_by,
        Some(correction)
    );
    let mut bad = NewMemory::new(MemoryKind::Fact, "x");
    bad.supersedes = Some("mem_missing".into());
    assert!(
        memory.store_blocking(bad).is_err(),
        "superseding an unknown id is an input error"
    );

    // Forget is a soft delete with an audit row; only purge removes.
    let forget = cli_json(&["memory", "forget", &berlin, "--json", "--data", &data]);
    assert_eq!(forget["forgotten"], true);
    assert!(
        !search(None).contains(&berlin),
        "a forgotten fact is not recalled"
    );
    let shown = cli_json(&["memory", "get", &berlin, "--json", "--data", &data]);
    assert!(shown["entry"]["forgotten_at"].is_i64());
    assert_eq!(shown["audit"][0]["action"], "forget");
    assert_eq!(shown["audit"][0]["actor"], "cli");
    let refused = cairn(&["memory", "purge", "--data", &data]);
    assert_eq!(
        refused.status.code(),
        Some(2),
        "purge without a target is refused"
    );
    let purged = cli_json(&["memory", "purge", "--forgotten", "--json", "--data", &data]);
    assert_eq!(purged["removed"], 1);
    assert_eq!(
        cairn(&["memory", "get", &berlin, "--data", &data])
            .status
            .code(),
        Some(2)
    );
    assert!(
        memory.get(&paris).expect("get").is_some(),
        "the superseded fact was not purged"
    );
}

#[test]
fn memories_sharing_only_a_function_word_with_the_question_are_not_recalled() {
    let data = tempfile::tempdir().expect("data dir");
    let memory = cairn_tests::storage::open_memory(data.path(), MemoryConfig::default());
    let said = [
        "my sister talked about a job interview",
        "we argued about the garden fence",
        "a podcast about sourdough starters",
    ];
    for text in said {
        let mut episode = NewMemory::new(MemoryKind::Episode, text);
        episode.scope = user_scope("ana");
        memory.store_blocking(episode).expect("store");
    }
    memory.embed_pending(|_| {}).expect("embed");
    let recall = |text: &str| {
        let query = memory_dataset::question_recall("ana", text, true);
        let hits = memory.recall(&query).expect("recall");
        hits.into_iter()
            .map(|h| h.entry.content)
            .collect::<Vec<_>>()
    };
    // "about" is in every memory: it tells none of them apart, and no memory is about
    // quantum physics (until 2026-12-02 all three were recalled, each as relevant as an
    // answer).
    assert!(recall("Tell me about quantum physics").is_empty());
    assert_eq!(
        recall("What did we say about the fence?"),
        ["we argued about the garden fence"]
    );
}
