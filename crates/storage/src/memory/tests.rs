//! The session state machine's rows, rescoring, full-text search's common words — each on
//! SQLite and on PostgreSQL (see [`on_each_backend`]) — and the move of sessions out of an
//! older host.db (SQLite only).

use super::*;
use cairn_vocab::memory::MemoryKind;
use cairn_vocab::session::SessionState;
use serde_json::json;

/// Both of memory's interfaces, as one store implements them.
trait Stores: MemoryStore + SessionStore {}

impl<T: MemoryStore + SessionStore> Stores for T {}

/// Each named test function (taking a store) once on a fresh SQLite data dir and once on
/// a fresh PostgreSQL database (loudly skipped without a server), as `name::sqlite` and
/// `name::postgres`.
macro_rules! on_each_backend {
    ($($test:ident),*) => {$(
        mod $test {
            #[test]
            fn sqlite() {
                let dir = tempfile::tempdir().expect("tempdir");
                let memory = super::SqliteMemory::open(dir.path()).expect("open");
                super::$test(&memory)
            }
            #[test]
            fn postgres() {
                if let Some(cluster) = crate::pg::cluster::TestCluster::shared() {
                    let url = cluster.fresh_database();
                    let memory = crate::pg::memory::PgMemory::connect(&url).expect("connect");
                    super::$test(&memory)
                }
            }
        }
    )*};
}

on_each_backend!(
    a_conversation_resumed_after_idling_gets_a_numbered_session,
    a_session_awaiting_its_answer_is_not_ended_idle,
    activity_is_recorded_once_and_a_users_new_session_completes_the_older_ones,
    rescoring_changes_a_live_entry_with_an_audit_row_and_leaves_the_forgotten_alone,
    a_word_in_most_of_a_busy_scopes_entries_is_left_out_of_its_search,
    a_word_in_more_entries_than_a_search_may_rank_finds_its_newest,
    what_was_said_in_a_span_merges_the_users_own_and_shared_entries_newest_first,
    a_fact_supersedes_the_live_fact_with_its_subject_and_predicate,
    purging_a_link_of_a_supersede_chain_leaves_one_current_fact,
    a_fact_said_before_the_current_one_is_stored_as_its_past,
    export_then_import_into_an_empty_store_keeps_every_record,
    a_new_store_awaits_hydration_until_it_is_settled,
    stored_vectors_are_read_back_for_the_entries_asked_of_the_model_asked
);

fn state(memory: &dyn Stores, id: &str) -> SessionState {
    memory.session(id).expect("read").expect("known").state
}

fn a_conversation_resumed_after_idling_gets_a_numbered_session(memory: &dyn Stores) {
    let new = |now| {
        let choice = memory
            .session_for("cli:c1", Some("alice"), Some("main"), now, 1_000)
            .expect("session");
        choice.recorded.wait().expect("recorded");
        choice.id
    };
    assert_eq!(new(10), "cli:c1");
    assert_eq!(new(900), "cli:c1", "still active and not idle");
    assert_eq!(new(5_000), "cli:c1#2", "idle for over a second");
    let ended = memory
        .end_idle(5_000, 5_001, KeepOpen::default())
        .wait()
        .expect("end idle");
    assert_eq!(ended.len(), 2, "both sessions were last active by 5000");
    assert_eq!(new(6_000), "cli:c1#3", "the current session ended");
}

fn a_session_awaiting_its_answer_is_not_ended_idle(memory: &dyn Stores) {
    for conversation in ["cli:waiting", "cli:unread", "cli:quiet"] {
        let choice = memory
            .session_for(conversation, Some("bob"), None, 10, 1_000)
            .expect("session");
        choice.recorded.wait().expect("recorded");
    }
    let end_idle = |now, conversations: &[&str], sessions: &[&str]| -> Vec<String> {
        let names = |list: &[&str]| list.iter().map(|c| c.to_string()).collect();
        let keep = KeepOpen {
            conversations: names(conversations),
            sessions: names(sessions),
        };
        let ended = memory.end_idle(5_000, now, keep).wait().expect("end idle");
        ended.into_iter().map(|session| session.id).collect()
    };
    assert_eq!(
        end_idle(5_001, &["cli:waiting"], &["cli:unread"]),
        ["cli:quiet"]
    );
    assert_eq!(state(memory, "cli:waiting"), SessionState::Active);
    assert_eq!(state(memory, "cli:unread"), SessionState::Active);
    let mut ended = end_idle(5_002, &[], &[]);
    ended.sort();
    assert_eq!(ended, ["cli:unread", "cli:waiting"], "answered, and read");
}

fn activity_is_recorded_once_and_a_users_new_session_completes_the_older_ones(memory: &dyn Stores) {
    let record = |session: &str, seq| {
        memory
            .record_activity(
                session,
                Some("alice"),
                seq,
                seq * 10,
                json!({"seq": seq}),
                2,
            )
            .wait()
            .expect("record")
    };
    assert_eq!(record("a", 1), Activity::Started { completed: vec![] });
    assert_eq!(record("a", 2), Activity::Continued);
    assert_eq!(record("a", 2), Activity::Replay);
    assert_eq!(record("a", 3), Activity::Continued);
    let ended = memory
        .end_idle(1_000, 1_001, KeepOpen::default())
        .wait()
        .expect("end idle");
    assert_eq!(
        ended[0].transcript,
        json!([{"seq": 2}, {"seq": 3}]),
        "the last two kept"
    );
    assert_eq!(state(memory, "a"), SessionState::Ended);
    assert_eq!(
        record("b", 4),
        Activity::Started {
            completed: vec!["a".to_string()]
        }
    );
    assert_eq!(state(memory, "a"), SessionState::Pending);
    let waiting = memory.awaiting_consolidation(10).expect("waiting");
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].end_reason.as_deref(), Some("idle"));
    assert!(memory.mark_consolidated("a", 2_000).wait().expect("mark"));
    assert!(
        !memory
            .mark_consolidated("nope", 2_000)
            .wait()
            .expect("mark")
    );
    assert!(
        memory
            .awaiting_consolidation(10)
            .expect("waiting")
            .is_empty()
    );
    assert_eq!(memory.active_sessions().expect("count"), 1);
    assert_eq!(record("a", 5), Activity::Continued);
    assert_eq!(
        state(memory, "a"),
        SessionState::Consolidated,
        "late activity never reopens a consolidated session"
    );
}

#[test]
fn sessions_an_older_host_db_kept_move_into_memory_db_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = rusqlite::Connection::open(dir.path().join("host.db")).expect("host.db");
    host.execute_batch(
        "CREATE TABLE lifecycle_sessions (id TEXT PRIMARY KEY, user_id TEXT, state TEXT NOT NULL,
             started_at INTEGER NOT NULL, last_activity INTEGER NOT NULL, ended_at INTEGER,
             end_reason TEXT, last_seq INTEGER NOT NULL, transcript TEXT NOT NULL DEFAULT '[]');
         INSERT INTO lifecycle_sessions VALUES
             ('cli:a', 'alice', 'ended', 1, 5, 9, 'idle', 3, '[{\"text\":\"hi\"}]'),
             ('cli:b', 'bob', 'active', 2, 6, NULL, NULL, 4, '[]');",
    )
    .expect("legacy rows");
    drop(host);
    let memory = SqliteMemory::open(dir.path()).expect("open adopts");
    let a = memory.session("cli:a").expect("read").expect("moved");
    assert_eq!(
        (a.state, a.end_reason.as_deref()),
        (SessionState::Ended, Some("idle"))
    );
    assert_eq!(state(&memory, "cli:b"), SessionState::Active);
    let ended = memory
        .end_idle(100, 101, KeepOpen::default())
        .wait()
        .expect("end idle");
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].id, "cli:b");
    drop(memory);
    let host = rusqlite::Connection::open(dir.path().join("host.db")).expect("host.db");
    let left: i64 = host
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 'lifecycle_sessions'",
            [],
            |r| r.get(0),
        )
        .expect("query");
    assert_eq!(left, 0, "the old table is gone");
    SqliteMemory::open(dir.path()).expect("a second open has nothing to move");
}

fn rescoring_changes_a_live_entry_with_an_audit_row_and_leaves_the_forgotten_alone(
    memory: &dyn Stores,
) {
    let entry = MemoryEntry {
        scope: Scope::default(),
        ..episode("mem_a", "nobody", "the boat is blue")
    };
    memory.insert(entry, None, "test").wait().expect("stored");
    assert!(
        memory
            .set_importance("mem_a", 8, "sleeper")
            .wait()
            .expect("rescored")
    );
    assert!(
        memory
            .set_importance("mem_a", 8, "sleeper")
            .wait()
            .expect("same score")
    );
    assert_eq!(
        memory.get("mem_a").expect("read").map(|e| e.importance),
        Some(8)
    );
    let rescores: Vec<_> = memory
        .audit_trail("mem_a")
        .expect("audit")
        .into_iter()
        .filter(|row| row.action == "rescore")
        .collect();
    assert_eq!(rescores.len(), 1, "an unchanged score writes no audit row");
    assert_eq!(rescores[0].detail.as_deref(), Some("5 -> 8"));
    assert_eq!(rescores[0].actor, "sleeper");
    memory.forget("mem_a", "test").wait().expect("forgotten");
    assert!(
        !memory
            .set_importance("mem_a", 2, "sleeper")
            .wait()
            .expect("no-op")
    );
    assert!(
        !memory
            .set_importance("mem_missing", 2, "sleeper")
            .wait()
            .expect("no-op")
    );
}

fn episode(id: &str, user: &str, content: &str) -> MemoryEntry {
    MemoryEntry {
        id: id.into(),
        kind: MemoryKind::Episode,
        content: content.into(),
        category: "conversation".into(),
        scope: Scope {
            agent_id: Some("main".into()),
            user_id: Some(user.into()),
            session_id: Some(format!("s-{id}")),
        },
        importance: 5,
        tags: Vec::new(),
        issue_refs: Vec::new(),
        pr_refs: Vec::new(),
        sources: Vec::new(),
        subject: None,
        predicate: None,
        valid_from: 1,
        valid_to: None,
        recorded_at: 1,
        superseded_by: None,
        forgotten_at: None,
    }
}

fn words_matching(memory: &dyn Stores, phrases: &[&str], user: &str) -> Vec<String> {
    words_matching_at_most(memory, phrases, user, 1000)
}

/// Ids of the (at most `limit`) entries a search for `phrases` in `user`'s scope finds, sorted.
fn words_matching_at_most(
    memory: &dyn Stores,
    phrases: &[&str],
    user: &str,
    limit: usize,
) -> Vec<String> {
    let fts = FullTextMatch {
        phrases: phrases.iter().map(|p| format!("\"{p}\"")).collect(),
        scope: format!("AND scope_tokens : (u{} OR unone)", hex::encode(user)),
    };
    let query = RecallQuery {
        scope: Scope {
            user_id: Some(user.into()),
            ..Scope::default()
        },
        ..RecallQuery::default()
    };
    let seqs: Vec<i64> = memory
        .lexical_candidates(&fts, &query, limit)
        .expect("search")
        .into_keys()
        .collect();
    let mut ids: Vec<String> = memory
        .entries_matching(&seqs, &query)
        .expect("entries")
        .into_iter()
        .map(|(_, e)| e.id)
        .collect();
    ids.sort();
    ids
}

fn a_word_in_most_of_a_busy_scopes_entries_is_left_out_of_its_search(memory: &dyn Stores) {
    let many = SCORED_MATCHES + 40;
    store_pull_requests(memory, many);
    memory
        .insert(episode("z", "octocat", "a kayak trip"), None, "test")
        .wait()
        .expect("stored");
    // Another user's entries never count toward this user's common words.
    memory
        .insert(episode("other", "mona", "octocat kayak"), None, "test")
        .wait()
        .expect("stored");
    // "octocat" is in every one of the scope's matches: only the rarer words are searched.
    assert_eq!(
        words_matching(memory, &["octocat", "17"], "octocat"),
        ["b0017"]
    );
    assert_eq!(
        words_matching(memory, &["octocat", "kayak"], "octocat"),
        ["z"]
    );
    // When every word is common, the rarest is searched.
    let bench = words_matching(memory, &["octocat", "bench"], "octocat");
    assert_eq!(bench.len(), many);
    // A scope with few matches is searched with every word.
    assert_eq!(
        words_matching(memory, &["octocat", "kayak"], "mona"),
        ["other"]
    );
}

/// A search's cost must not grow with the scope: a word in more of the scope's entries
/// than a search may rank finds the newest of them, still only in the scope.
fn a_word_in_more_entries_than_a_search_may_rank_finds_its_newest(memory: &dyn Stores) {
    store_pull_requests(memory, SCORED_MATCHES_MAX + 50);
    memory
        .insert(
            episode("other", "mona", "a bench by the lake"),
            None,
            "test",
        )
        .wait()
        .expect("stored");
    assert_eq!(
        words_matching_at_most(memory, &["bench", "octocat"], "octocat", 3),
        ["b1047", "b1048", "b1049"]
    );
}

/// What was said in a span is read from the user's own entries and the shared ones (no
/// user) apart, each newest first, and merged: newest first by valid time, then by save
/// order; other users' entries, and entries outside the span or no longer valid, stay out.
fn what_was_said_in_a_span_merges_the_users_own_and_shared_entries_newest_first(
    memory: &dyn Stores,
) {
    let said = |id: &str, user: Option<&str>, at: i64| {
        let mut entry = episode(id, user.unwrap_or("nobody"), id);
        entry.scope.user_id = user.map(str::to_string);
        entry.valid_from = at;
        entry.recorded_at = at;
        memory.insert(entry, None, "test").wait().expect("stored");
    };
    said("own-1", Some("octocat"), 10);
    said("shared-2", None, 20);
    said("own-3", Some("octocat"), 30);
    said("other-4", Some("mona"), 40);
    said("own-5", Some("octocat"), 50);
    said("shared-5", None, 50);
    said("own-9", Some("octocat"), 90);
    let newest = |since, until, limit| -> Vec<String> {
        let query = RecallQuery {
            scope: Scope {
                agent_id: Some("main".into()),
                user_id: Some("octocat".into()),
                session_id: None,
            },
            since: Some(since),
            until: Some(until),
            ..RecallQuery::default()
        };
        let found = memory.newest_matching(&query, limit).expect("read");
        found.into_iter().map(|entry| entry.id).collect()
    };
    assert_eq!(
        newest(10, 90, 10),
        ["shared-5", "own-5", "own-3", "shared-2", "own-1"],
        "the span ends before 90; at 50 the later saved first"
    );
    assert_eq!(newest(0, 100, 2), ["own-9", "shared-5"]);
    assert_eq!(newest(15, 45, 1), ["own-3"]);
}

/// A word many users share is matched within the scope, so the search does not look up
/// every other user's match; a word few entries hold is matched alone. Either way only the
/// scope's entries are found (SQLite; PostgreSQL searches its own way).
#[test]
fn a_word_many_users_share_is_searched_within_the_scope() {
    use super::search::{UNSCOPED_MATCHES_MAX, ranked_expression};
    let dir = tempfile::tempdir().expect("tempdir");
    let memory = SqliteMemory::open(dir.path()).expect("open");
    for i in 0..=UNSCOPED_MATCHES_MAX {
        let entry = episode(
            &format!("m{i:04}"),
            &format!("user{}", i % 50),
            "a kayak trip",
        );
        memory.insert(entry, None, "test").wait().expect("stored");
    }
    for id in ["o1", "o2"] {
        let entry = episode(id, "octocat", "my kayak and a lighthouse");
        memory.insert(entry, None, "test").wait().expect("stored");
    }
    let search = |word: &str| FullTextMatch {
        phrases: vec![format!("\"{word}\"")],
        scope: format!("AND scope_tokens : (u{} OR unone)", hex::encode("octocat")),
    };
    let chosen = |fts: &FullTextMatch| {
        memory
            .read(|conn| ranked_expression(conn, fts, &fts.phrases))
            .expect("chosen")
    };
    let shared = search("kayak");
    assert_eq!(chosen(&shared), shared.expression(&shared.phrases));
    let rare = search("lighthouse");
    assert_eq!(chosen(&rare), FullTextMatch::words_only(&rare.phrases));
    assert_eq!(words_matching(&memory, &["kayak"], "octocat"), ["o1", "o2"]);
    assert_eq!(
        words_matching(&memory, &["lighthouse"], "octocat"),
        ["o1", "o2"]
    );
}

/// `count` of octocat's pull-request episodes `b0000`…, stored one at a time (the last
/// written is the newest).
fn store_pull_requests(memory: &dyn Stores, count: usize) {
    for i in 0..count {
        let text = format!("octocat opened pull request {i} on the bench");
        memory
            .insert(episode(&format!("b{i:04}"), "octocat", &text), None, "test")
            .wait()
            .expect("stored");
    }
}

fn fact(id: &str, content: &str, predicate: &str, at: i64) -> MemoryEntry {
    MemoryEntry {
        kind: MemoryKind::Fact,
        subject: Some("ann".into()),
        predicate: Some(predicate.into()),
        valid_from: at,
        recorded_at: at,
        scope: Scope {
            agent_id: Some("main".into()),
            user_id: Some("ann".into()),
            session_id: None,
        },
        ..episode(id, "ann", content)
    }
}

fn a_fact_supersedes_the_live_fact_with_its_subject_and_predicate(memory: &dyn Stores) {
    let stored = |entry| memory.insert(entry, None, "test").wait().expect("insert");
    let old = fact("f1", "Ann lives in Oslo", "lives_in", 10);
    assert_eq!(
        stored(old.clone()),
        Insertion::Stored { superseded: vec![] }
    );
    assert_eq!(
        stored(fact("f1b", "Ann lives in Oslo", "lives_in", 11)),
        Insertion::Duplicate {
            existing: "f1".into()
        },
        "the same live fact is stored once"
    );
    stored(fact("f2", "Ann likes tea", "likes", 12));
    assert_eq!(
        stored(fact("f3", "Ann lives in Bergen", "lives_in", 20)),
        Insertion::Stored {
            superseded: vec!["f1".into()]
        }
    );
    let f1 = memory.get("f1").expect("read").expect("kept");
    assert_eq!(
        (f1.valid_to, f1.superseded_by.as_deref()),
        (Some(20), Some("f3"))
    );
    let live: Vec<String> = memory
        .list(&ListFilter {
            scope: old.scope.clone(),
            limit: 10,
            ..ListFilter::default()
        })
        .expect("list")
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(live, ["f3", "f2"], "newest first, the superseded left out");
    let trail = memory.audit_trail("f1").expect("audit");
    assert_eq!(
        (trail[0].action.as_str(), trail[0].detail.as_deref()),
        ("supersede", Some("f3"))
    );
    assert!(matches!(
        memory
            .insert(
                fact("f4", "Ann lives in Rome", "lives_in", 30),
                Some("f1".into()),
                "test"
            )
            .wait(),
        Ok(Insertion::Refused(_))
    ));
    assert_eq!(memory.count(&old.scope).expect("count"), 2);
    // Purged for good, the successor leaves the fact it replaced current again, not
    // pointing at a row that is gone.
    memory
        .purge(vec!["f3".into()], "operator")
        .wait()
        .expect("purge");
    let f1 = memory.get("f1").expect("read").expect("kept");
    assert_eq!((f1.valid_to, f1.superseded_by), (None, None));
    let trail = memory.audit_trail("f1").expect("audit");
    let last = trail.last().expect("a row");
    assert_eq!(
        (last.action.as_str(), last.detail.as_deref()),
        ("reinstate", Some("f3, which superseded it, was purged"))
    );
    assert_eq!(memory.count(&old.scope).expect("count"), 2, "f1 and f2");
}

fn purging_a_link_of_a_supersede_chain_leaves_one_current_fact(memory: &dyn Stores) {
    let stored = |entry| memory.insert(entry, None, "test").wait().expect("insert");
    stored(fact("berlin", "Ann lives in Berlin", "lives_in", 10));
    stored(fact("lisbon", "Ann lives in Lisbon", "lives_in", 20));
    stored(fact("paris", "Ann lives in Paris", "lives_in", 30));
    let current = || {
        let filter = ListFilter {
            scope: fact("x", "x", "lives_in", 0).scope,
            limit: 10,
            ..ListFilter::default()
        };
        let live = memory.list(&filter).expect("list");
        live.into_iter().map(|e| e.id).collect::<Vec<_>>()
    };
    // The middle link, named twice: purged and counted once; Berlin is Paris's now.
    let purged = memory
        .purge(vec!["lisbon".into(), "lisbon".into()], "operator")
        .wait()
        .expect("purge");
    assert_eq!(purged.len(), 1, "{purged:?}");
    assert_eq!(current(), ["paris"]);
    let berlin = memory.get("berlin").expect("read").expect("kept");
    assert_eq!(
        (berlin.valid_to, berlin.superseded_by.as_deref()),
        (Some(20), Some("paris"))
    );
    let trail = memory.audit_trail("berlin").expect("audit");
    let last = trail.last().expect("a row");
    assert_eq!(
        (last.action.as_str(), last.detail.as_deref()),
        ("supersede", Some("paris"))
    );
    // Both later links at once, in whichever order the store takes them: the first holds.
    stored(fact("rome", "Ann lives in Rome", "lives_in", 40));
    memory
        .purge(vec!["rome".into(), "paris".into()], "operator")
        .wait()
        .expect("purge");
    assert_eq!(current(), ["berlin"]);
    let berlin = memory.get("berlin").expect("read").expect("kept");
    assert_eq!((berlin.valid_to, berlin.superseded_by), (None, None));
}

fn a_fact_said_before_the_current_one_is_stored_as_its_past(memory: &dyn Stores) {
    let stored = |entry| memory.insert(entry, None, "test").wait().expect("insert");
    stored(fact("globex", "Ann works at Globex", "works_at", 30));
    // History replayed out of order: January's job arrives after November's.
    assert_eq!(
        stored(fact("initech", "Ann works at Initech", "works_at", 10)),
        Insertion::Stored { superseded: vec![] }
    );
    let globex = memory.get("globex").expect("read").expect("kept");
    assert_eq!(
        (globex.valid_to, globex.superseded_by),
        (None, None),
        "the newest stays current"
    );
    let initech = memory.get("initech").expect("read").expect("kept");
    assert_eq!(
        (initech.valid_to, initech.superseded_by.as_deref()),
        (Some(30), Some("globex"))
    );
    let trail = memory.audit_trail("initech").expect("audit");
    assert_eq!(
        (trail[0].action.as_str(), trail[0].detail.as_deref()),
        ("supersede", Some("globex"))
    );
    // A later statement still supersedes as before.
    assert_eq!(
        stored(fact("hooli", "Ann works at Hooli", "works_at", 40)),
        Insertion::Stored {
            superseded: vec!["globex".into()]
        }
    );
}

fn a_new_store_awaits_hydration_until_it_is_settled(memory: &dyn Stores) {
    assert!(memory.awaits_hydration().expect("read"), "a new store");
    // Entries stored meanwhile (a hydration half done) leave it waiting.
    let stored = memory.insert(
        fact("f1", "Ann lives in Oslo", "lives_in", 10),
        None,
        "test",
    );
    stored.wait().expect("insert");
    assert!(memory.awaits_hydration().expect("read"), "until settled");
    memory.settle_hydration().wait().expect("settle");
    assert!(!memory.awaits_hydration().expect("read"), "settled");
    memory
        .settle_hydration()
        .wait()
        .expect("settling again is harmless");
}

fn export_then_import_into_an_empty_store_keeps_every_record(memory: &dyn Stores) {
    memory
        .insert(
            fact("f1", "Ann lives in Oslo", "lives_in", 10),
            None,
            "test",
        )
        .wait()
        .expect("insert");
    memory
        .insert(
            fact("f2", "Ann lives in Bergen", "lives_in", 20),
            None,
            "test",
        )
        .wait()
        .expect("insert");
    memory.forget("f2", "test").wait().expect("forget");
    memory
        .session_for("cli:c", Some("ann"), Some("main"), 5, 1_000)
        .expect("session")
        .recorded
        .wait()
        .expect("recorded");
    let records = memory.export().expect("export");
    assert_eq!(
        records.len(),
        1 + 2 + 2,
        "a session, two entries, two audit rows"
    );
    let again = memory.import(records.clone()).wait().expect("import");
    assert_eq!(again.skipped, 5, "everything is there already");
    let dir = tempfile::tempdir().expect("tempdir");
    let fresh = SqliteMemory::open(dir.path()).expect("open");
    let report = fresh.import(records.clone()).wait().expect("import");
    assert_eq!((report.sessions, report.entries, report.audit), (1, 2, 2));
    assert_eq!(
        serde_json::to_value(fresh.export().expect("export")).expect("json"),
        serde_json::to_value(records).expect("json"),
        "the records read back as they were exported"
    );
}

fn stored_vectors_are_read_back_for_the_entries_asked_of_the_model_asked(memory: &dyn Stores) {
    for (id, text) in [("e1", "tea"), ("e2", "coffee"), ("e3", "water")] {
        memory
            .insert(episode(id, "ann", text), None, "test")
            .wait()
            .expect("insert");
    }
    let pending = memory.unembedded("hash", "h4", 0, 10).expect("pending");
    let seqs: Vec<i64> = pending.iter().map(|p| p.seq).collect();
    assert_eq!(seqs.len(), 3);
    let vector = |seq: i64| vec![seq as f32, 1.0, -0.5, 0.25];
    let rows = pending[..2]
        .iter()
        .map(|p| (p.seq, p.content_hash.clone(), vector(p.seq)))
        .collect();
    memory
        .save_vectors("hash", "h4", rows, 10)
        .wait()
        .expect("save");
    let mut asked = seqs.clone();
    asked.push(seqs[2] + 1_000);
    let stored = memory
        .stored_vectors("hash", "h4", &asked)
        .expect("read vectors");
    let mut found: Vec<i64> = stored.keys().copied().collect();
    found.sort();
    assert_eq!(found, seqs[..2].to_vec(), "only the entries with a vector");
    for (seq, read) in &stored {
        // int8 with the largest magnitude (the seq) as scale: off by at most half a step.
        let step = (*seq).max(1) as f32 / 127.0;
        let close = read
            .iter()
            .zip(vector(*seq))
            .all(|(a, b)| (a - b).abs() <= step);
        assert!(close, "int8 keeps the values: {read:?} for {seq}");
    }
    assert!(
        memory
            .stored_vectors("openai", "other", &seqs)
            .expect("read vectors")
            .is_empty(),
        "another model's vectors are not these"
    );
}
