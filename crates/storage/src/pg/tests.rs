//! Several hosts on one database: the buffer's claims, leases and take-over, the journal's
//! commit order and subscription leases, the schema guard, and errors that name the
//! server. Each test gets a fresh database on the test server (see
//! [`super::cluster`]); without PostgreSQL they say so loudly and pass.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use cairn_vocab::buffer::{BatchStatus, NewBatch, Route};
use cairn_vocab::event::NewEvent;

use super::PgUrl;
use super::buffer::{DEFAULT_LEASE, PgBuffer};
use super::cluster::TestCluster;
use super::journal::{DEFAULT_SUBSCRIPTION_LEASE, PgJournal};
use crate::StorageError;
use crate::buffer::{BufferStore, MessageRow};
use crate::journal::JournalStore;

fn database() -> Option<PgUrl> {
    TestCluster::shared().map(TestCluster::fresh_database)
}

fn message(conversation: &str) -> MessageRow {
    MessageRow {
        channel: "hook".into(),
        sender: "ada".into(),
        conversation: conversation.into(),
        payload: "{}".into(),
        priority: 10,
        priority_is_default: false,
        dedup_key: None,
        received_at: crate::now_ms(),
        said_at: None,
    }
}

/// Store one message of `conversation` and route it as a main batch; the batch's id.
fn queue_turn(buffer: &PgBuffer, conversation: &str) -> i64 {
    let id = buffer.insert(message(conversation)).wait().expect("insert");
    buffer
        .route(NewBatch {
            channel: "hook".into(),
            conversation: conversation.into(),
            priority: 10,
            route: Route::Main,
            rule: None,
            message_ids: vec![id],
        })
        .wait()
        .expect("route")
}

/// The id of the main batch `host` claims next, if any.
fn claimed(host: &PgBuffer) -> Option<i64> {
    host.claim_main(None)
        .wait()
        .expect("claim")
        .map(|batch| batch.id)
}

#[test]
fn one_conversation_runs_one_turn_at_a_time_in_order_across_hosts() {
    let Some(url) = database() else { return };
    let a = PgBuffer::connect(&url, DEFAULT_LEASE).expect("host a");
    let b = PgBuffer::connect(&url, DEFAULT_LEASE).expect("host b");
    let first = queue_turn(&a, "c1");
    let second = queue_turn(&b, "c1");
    let other = queue_turn(&b, "c2");
    assert_eq!(claimed(&a), Some(first));
    assert_eq!(
        claimed(&b),
        Some(other),
        "c1's next turn waits for its first; another conversation goes ahead"
    );
    assert_eq!(claimed(&b), None);
    a.finish_batch(first, BatchStatus::Done, Some("hi".into()), None)
        .wait()
        .expect("finish");
    assert_eq!(claimed(&b), Some(second));
}

#[test]
fn a_backlog_is_claimed_head_of_each_conversation_first_most_urgent_first() {
    let Some(url) = database() else { return };
    let a = PgBuffer::connect(&url, DEFAULT_LEASE).expect("host a");
    let b = PgBuffer::connect(&url, DEFAULT_LEASE).expect("host b");
    // Three conversations' turns interleaved, the last conversation's more urgent.
    let mut queued: Vec<(String, i64)> = Vec::new();
    for round in 0..4 {
        for conversation in ["c1", "c2", "c3"] {
            let id = if conversation == "c3" {
                let message_id = a.insert(message(conversation)).wait().expect("insert");
                a.route(NewBatch {
                    channel: "hook".into(),
                    conversation: conversation.into(),
                    priority: 1,
                    route: Route::Main,
                    rule: None,
                    message_ids: vec![message_id],
                })
                .wait()
                .expect("route")
            } else {
                queue_turn(&a, conversation)
            };
            queued.push((format!("{conversation}/{round}"), id));
        }
    }
    let id_of = |name: &str| queued.iter().find(|(n, _)| n == name).expect("queued").1;
    // c3 is the most urgent: its head goes first; c1 and c2 follow in age; each
    // conversation then waits for its running turn, whichever host asks.
    assert_eq!(claimed(&a), Some(id_of("c3/0")));
    assert_eq!(claimed(&b), Some(id_of("c1/0")));
    assert_eq!(claimed(&a), Some(id_of("c2/0")));
    assert_eq!(claimed(&b), None);
    a.finish_batch(id_of("c2/0"), BatchStatus::Done, None, None)
        .wait()
        .expect("finish");
    assert_eq!(claimed(&b), Some(id_of("c2/1")));
    a.finish_batch(id_of("c3/0"), BatchStatus::Failed, None, Some("no".into()))
        .wait()
        .expect("finish");
    assert_eq!(claimed(&b), Some(id_of("c3/1")));
    assert_eq!(claimed(&a), None);
}

#[test]
fn a_dead_hosts_claim_is_taken_over_once_its_lease_lapses() {
    let Some(url) = database() else { return };
    // Long enough that a loaded machine renews in time (every third of it).
    let lease = Duration::from_secs(3);
    let dying = PgBuffer::connect(&url, lease).expect("dying host");
    let survivor = PgBuffer::connect(&url, lease).expect("surviving host");
    let batch = queue_turn(&dying, "c");
    let task_batch = {
        let id = dying.insert(message("t")).wait().expect("insert");
        dying
            .route(NewBatch {
                channel: "hook".into(),
                conversation: "t".into(),
                priority: 10,
                route: Route::Spawn,
                rule: None,
                message_ids: vec![id],
            })
            .wait()
            .expect("route")
    };
    assert_eq!(claimed(&dying), Some(batch));
    let (task, _) = dying.claim_task().wait().expect("claim").expect("a task");
    // Renewals keep a live host's claims: well past one lease, nobody else gets them.
    std::thread::sleep(lease * 2);
    assert_eq!(claimed(&survivor), None);
    assert!(survivor.claim_task().wait().expect("claim").is_none());
    drop(dying);
    std::thread::sleep(lease + Duration::from_secs(1));
    assert_eq!(claimed(&survivor), Some(batch));
    assert_eq!(
        survivor
            .claim_task()
            .wait()
            .expect("claim")
            .map(|(task, batch)| (task, batch.id)),
        Some((task, task_batch))
    );
    survivor
        .finish_batch(batch, BatchStatus::Done, None, None)
        .wait()
        .expect("the new owner finishes it");
}

#[test]
fn a_host_whose_claim_was_taken_over_cannot_finish_it() {
    let Some(url) = database() else { return };
    let lease = Duration::from_millis(300);
    let slow = PgBuffer::connect(&url, lease).expect("slow host");
    let batch = queue_turn(&slow, "c");
    assert_eq!(claimed(&slow), Some(batch));
    let other = PgBuffer::connect(&url, lease).expect("other host");
    // The slow host stops renewing (it is dropped below) only after the other took over:
    // simulate a lapse by ending its lease by hand.
    expire_leases(&url);
    assert_eq!(claimed(&other), Some(batch));
    let refused = slow
        .finish_batch(batch, BatchStatus::Done, None, None)
        .wait()
        .expect_err("not the slow host's any more");
    assert!(
        refused.to_string().contains("another host took it over"),
        "{refused}"
    );
}

#[test]
fn a_claim_whose_answer_never_reached_its_host_lapses_and_is_taken_over() {
    let Some(url) = database() else { return };
    let lease = Duration::from_secs(1);
    let host = PgBuffer::connect(&url, lease).expect("host");
    let known = queue_turn(&host, "known");
    let lost = queue_turn(&host, "lost");
    assert_eq!(claimed(&host), Some(known));
    // A second claim that committed but whose answer the host never got (its connection
    // broke under the commit): the row says the host runs it; the host knows nothing of it.
    by_hand(
        &url,
        format!(
            "UPDATE buffer_batches
                SET status = 'running', started_at = {now}, lease_until = {now} + 1000,
                    claimed_by = (SELECT claimed_by FROM buffer_batches WHERE id = {known}),
                    attempts = attempts + 1
              WHERE id = {lost}",
            now = crate::now_ms()
        ),
    );
    let other = PgBuffer::connect(&url, lease).expect("other host");
    std::thread::sleep(lease * 3);
    assert_eq!(
        claimed(&other),
        Some(lost),
        "work no caller holds is not renewed, so it lapses and is taken over"
    );
    assert_eq!(
        claimed(&other),
        None,
        "what the host was given stays its own"
    );
}

/// End every running batch's lease, as if its host stopped renewing long ago.
fn expire_leases(url: &PgUrl) {
    by_hand(
        url,
        "UPDATE buffer_batches SET lease_until = 0 WHERE status = 'running'".into(),
    );
}

/// Run `sql` on a connection of its own, as an administrator (or a host) would beside the
/// stores under test.
fn by_hand(url: &PgUrl, sql: String) {
    let url = url.clone();
    std::thread::spawn(move || {
        let mut client = url.config().connect(postgres::NoTls).expect("connect");
        client.batch_execute(&sql).expect("by hand");
    })
    .join()
    .expect("the statement ran");
}

#[test]
fn concurrent_claims_by_three_hosts_take_each_turn_exactly_once() {
    let Some(url) = database() else { return };
    let hosts: Vec<Arc<PgBuffer>> = (0..3)
        .map(|_| Arc::new(PgBuffer::connect(&url, DEFAULT_LEASE).expect("host")))
        .collect();
    let queued: BTreeSet<i64> = (0..60)
        .map(|i| queue_turn(&hosts[i % 3], &format!("c{i}")))
        .collect();
    let workers: Vec<_> = hosts
        .iter()
        .flat_map(|host| (0..2).map(move |_| Arc::clone(host)))
        .map(|host| {
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                while let Some(id) = claimed(&host) {
                    host.finish_batch(id, BatchStatus::Done, None, None)
                        .wait()
                        .expect("finish");
                    mine.push(id);
                }
                mine
            })
        })
        .collect();
    let mut claimed: Vec<i64> = workers
        .into_iter()
        .flat_map(|w| w.join().expect("worker"))
        .collect();
    claimed.sort_unstable();
    assert_eq!(claimed.len(), queued.len(), "no turn claimed twice");
    assert_eq!(claimed.into_iter().collect::<BTreeSet<_>>(), queued);
}

#[test]
fn two_hosts_routing_the_same_messages_route_them_once() {
    let Some(url) = database() else { return };
    let a = PgBuffer::connect(&url, DEFAULT_LEASE).expect("host a");
    let b = PgBuffer::connect(&url, DEFAULT_LEASE).expect("host b");
    let id = a.insert(message("c")).wait().expect("insert");
    let batch = NewBatch {
        channel: "hook".into(),
        conversation: "c".into(),
        priority: 10,
        route: Route::Main,
        rule: None,
        message_ids: vec![id],
    };
    a.route(batch.clone()).wait().expect("first router");
    let refused = b.route(batch).wait().expect_err("second router");
    assert!(refused.to_string().contains("already routed"), "{refused}");
    assert_eq!(
        b.stats().expect("stats").batches.get("main/queued"),
        Some(&1)
    );
}

#[test]
fn a_schema_newer_than_this_build_is_refused() {
    let Some(url) = database() else { return };
    drop(PgBuffer::connect(&url, DEFAULT_LEASE).expect("migrate"));
    let admin = url.clone();
    std::thread::spawn(move || {
        let mut client = admin.config().connect(postgres::NoTls).expect("connect");
        client
            .execute(
                "UPDATE cairn_schema SET version = 99 WHERE store = 'buffer'",
                &[],
            )
            .expect("bump");
    })
    .join()
    .expect("bump the schema");
    match PgBuffer::connect(&url, DEFAULT_LEASE) {
        Err(StorageError::SchemaTooNew {
            found: 99,
            known,
            store,
            ..
        }) => {
            assert_eq!(store, "buffer");
            assert!(known < 99);
        }
        Err(other) => panic!("expected a refusal of the newer schema, got {other}"),
        Ok(_) => panic!("a newer schema was accepted"),
    }
}

#[test]
fn an_unreachable_server_is_named_without_its_password() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url: PgUrl = format!(
        "postgres://ada:hunter2@{}/cairn",
        dir.path().display().to_string().replace('/', "%2F")
    )
    .parse()
    .expect("url");
    match PgBuffer::connect(&url, DEFAULT_LEASE) {
        Err(error @ StorageError::Unreachable { .. }) => {
            let text = error.to_string();
            assert!(
                text.contains("cannot reach PostgreSQL at postgres://ada:***@"),
                "{text}"
            );
            assert!(!text.contains("hunter2"), "{text}");
        }
        Err(other) => panic!("expected unreachable, got {other}"),
        Ok(_) => panic!("connected to nothing"),
    }
}

fn new_event(topic: &str) -> NewEvent {
    NewEvent {
        topic: topic.into(),
        payload: "{}".into(),
        source: "test".into(),
        ..NewEvent::default()
    }
}

#[test]
fn a_reader_never_passes_an_append_that_commits_after_a_later_one() {
    let Some(url) = database() else { return };
    let journal = Arc::new(PgJournal::connect(&url, DEFAULT_SUBSCRIPTION_LEASE).expect("journal"));
    let all = vec!["*".to_string()];
    assert_eq!(
        journal.append(new_event("a.first")).wait().expect("append"),
        1
    );
    // Another host's append takes sequence number 2 and has not committed yet.
    let (committing, commit) = std::sync::mpsc::channel::<()>();
    let (taken, seq_taken) = std::sync::mpsc::channel::<i64>();
    let slow_url = url.clone();
    let slow_host = std::thread::spawn(move || {
        let mut client = slow_url.config().connect(postgres::NoTls).expect("connect");
        let mut tx = client.transaction().expect("begin");
        let seq: i64 = tx
            .query_one("UPDATE journal_head SET seq = seq + 1 RETURNING seq", &[])
            .expect("take a number")
            .get(0);
        tx.execute(
            "INSERT INTO journal_events (seq, topic, payload, source, created_at)
             VALUES ($1, 'b.slow', '{}', 'other host', 0)",
            &[&seq],
        )
        .expect("insert");
        taken.send(seq).expect("tell");
        commit.recv().expect("wait for the go");
        tx.commit().expect("commit");
    });
    assert_eq!(seq_taken.recv().expect("seq"), 2);
    // This host's append queues behind it for number 3, on a thread of its own.
    let appender = Arc::clone(&journal);
    let fast = std::thread::spawn(move || appender.append(new_event("c.fast")).wait());
    std::thread::sleep(Duration::from_millis(300));
    let seen = journal.pending(1, &all, 10).expect("read");
    assert!(
        seen.events.is_empty(),
        "nothing after 1 is committed: {:?}",
        seen.events
    );
    assert_eq!(
        seen.searched_to, 1,
        "the search stops at the committed head"
    );
    committing.send(()).expect("go");
    slow_host.join().expect("slow host");
    assert_eq!(fast.join().expect("fast").expect("append"), 3);
    let seen = journal.pending(seen.searched_to, &all, 10).expect("read");
    let order: Vec<(i64, &str)> = seen
        .events
        .iter()
        .map(|e| (e.seq, e.topic.as_str()))
        .collect();
    assert_eq!(order, [(2, "b.slow"), (3, "c.fast")]);
}

#[test]
fn one_host_at_a_time_delivers_to_a_subscriber_and_another_takes_over_when_it_stops() {
    let Some(url) = database() else { return };
    let lease = Duration::from_secs(2);
    let first = PgJournal::connect(&url, lease).expect("first host");
    let second = PgJournal::connect(&url, lease).expect("second host");
    let patterns = vec!["a.*".to_string()];
    first
        .subscribe("plugin", &patterns)
        .wait()
        .expect("subscribe");
    second
        .subscribe("plugin", &patterns)
        .wait()
        .expect("subscribe");
    assert!(first.hold("plugin").wait().expect("hold"));
    assert!(
        !second.hold("plugin").wait().expect("hold"),
        "held by the first"
    );
    assert!(
        first.hold("plugin").wait().expect("renew"),
        "renewing keeps it"
    );
    // The first host stops renewing (it died); after the lease the second takes over.
    std::thread::sleep(lease + Duration::from_millis(500));
    assert!(second.hold("plugin").wait().expect("hold"), "taken over");
    assert!(
        !first.hold("plugin").wait().expect("hold"),
        "the old holder has lost it"
    );
    first.release("plugin").wait().expect("release");
    assert!(
        second.hold("plugin").wait().expect("renew"),
        "a release by a host that lost it changes nothing"
    );
    // The second host stops cleanly: the first takes over at once, not after the lease.
    second.release("plugin").wait().expect("release");
    assert!(first.hold("plugin").wait().expect("hold"), "released");
    assert!(
        !second.hold("unknown").wait().expect("hold"),
        "subscribe first"
    );
}

#[test]
fn one_bad_event_among_appends_committed_together_fails_alone() {
    let Some(url) = database() else { return };
    let journal = Arc::new(PgJournal::connect(&url, DEFAULT_SUBSCRIPTION_LEASE).expect("journal"));
    let receipts: Vec<_> = (0..40)
        .map(|i| {
            let mut event = new_event("a.ok");
            if i == 17 {
                event.payload = "not json".into();
            }
            journal.append(event)
        })
        .collect();
    let outcomes: Vec<_> = receipts.into_iter().map(|r| r.wait()).collect();
    assert!(outcomes[17].is_err(), "the bad event is refused");
    let mut seqs: Vec<i64> = outcomes
        .iter()
        .filter_map(|o| o.as_ref().ok().copied())
        .collect();
    assert_eq!(seqs.len(), 39, "every other event is appended");
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), 39, "each with its own number");
    let stored = journal.pending(0, &["*".to_string()], 100).expect("read");
    assert_eq!(stored.events.len(), 39);
    assert!(
        stored.events.windows(2).all(|w| w[0].seq < w[1].seq),
        "in sequence order"
    );
}

#[test]
fn other_hosts_hear_of_an_append_when_it_commits() {
    let Some(url) = database() else { return };
    let writer = PgJournal::connect(&url, DEFAULT_SUBSCRIPTION_LEASE).expect("writing host");
    let listener = PgJournal::connect(&url, DEFAULT_SUBSCRIPTION_LEASE).expect("listening host");
    let (heard, topics) = std::sync::mpsc::channel::<String>();
    let heard = std::sync::Mutex::new(heard);
    listener.on_appended_elsewhere(Arc::new(move |topic: &str| {
        let _ = heard.lock().expect("lock").send(topic.to_string());
    }));
    // The listener connects on its own thread: append until it has heard one, for at most
    // a minute (a hint may be missed while it connects; none is missed after).
    let mut first = None;
    for _ in 0..60 {
        writer
            .append(new_event("hint.first"))
            .wait()
            .expect("append");
        if let Ok(topic) = topics.recv_timeout(Duration::from_secs(1)) {
            first = Some(topic);
            break;
        }
    }
    assert_eq!(first.as_deref(), Some("hint.first"));
    writer
        .append(new_event("hint.second"))
        .wait()
        .expect("append");
    // Hints of the first appends may still be on their way; the second's must follow.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let topic = topics.recv_timeout(left).expect("heard the second append");
        if topic == "hint.second" {
            break;
        }
        assert_eq!(topic, "hint.first", "only appended topics are heard");
    }
}

/// Work that takes the advisory lock `key` till the end of its transaction.
fn take_lock(key: i64) -> impl Fn(&mut postgres::Transaction<'_>) -> Result<(), StorageError> {
    move |tx| {
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&key])?;
        Ok(())
    }
}

#[test]
fn writes_that_take_an_advisory_lock_commit_alone_so_two_hosts_never_deadlock() {
    let Some(url) = database() else { return };
    let pool = super::PgPool::connect(&url, 1, "alone").expect("pool");
    let (claim, task) = (1_i64, 2_i64);
    // Another host is in the middle of a task claim: it holds the task lock and is about to
    // take the claim lock.
    let mut other = url.config().connect(postgres::NoTls).expect("another host");
    let mut other_tx = other.transaction().expect("its transaction");
    take_lock(task)(&mut other_tx).expect("the task lock");
    // The pool's only worker is busy while this host queues a claim and a task claim, as a
    // busy host would (queued writes are what a group takes together).
    let (go, busy) = std::sync::mpsc::channel::<()>();
    assert!(pool.run(move |_| {
        let _ = busy.recv();
    }));
    let claimed = pool.submit_alone(take_lock(claim));
    let task_claimed = pool.submit_alone(take_lock(task));
    go.send(()).expect("the worker freed");
    std::thread::sleep(Duration::from_millis(300));
    // Grouped, this host's transaction would hold the claim lock while it waits for the
    // task lock: the other host's wait for the claim lock would close a cycle, and
    // PostgreSQL would abort one of the two.
    take_lock(claim)(&mut other_tx).expect("the other host takes the claim lock");
    other_tx.commit().expect("the other host commits");
    claimed.wait().expect("this host's claim");
    task_claimed.wait().expect("this host's task claim");
}
