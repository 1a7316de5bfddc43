//! Several hosts on one database: claims, leases and take-over, the schema guard, and
//! errors that name the server. Each test gets a fresh database on the test server (see
//! [`super::cluster`]); without PostgreSQL they say so loudly and pass.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use cairn_vocab::buffer::{BatchStatus, NewBatch, Route};

use super::PgUrl;
use super::buffer::{DEFAULT_LEASE, PgBuffer};
use super::cluster::TestCluster;
use crate::StorageError;
use crate::buffer::{BufferStore, MessageRow};

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

#[test]
fn one_conversation_runs_one_turn_at_a_time_in_order_across_hosts() {
    let Some(url) = database() else { return };
    let a = PgBuffer::connect(&url, DEFAULT_LEASE).expect("host a");
    let b = PgBuffer::connect(&url, DEFAULT_LEASE).expect("host b");
    let first = queue_turn(&a, "c1");
    let second = queue_turn(&b, "c1");
    let other = queue_turn(&b, "c2");
    assert_eq!(a.claim_main().wait().expect("claim"), Some(first));
    assert_eq!(
        b.claim_main().wait().expect("claim"),
        Some(other),
        "c1's next turn waits for its first; another conversation goes ahead"
    );
    assert_eq!(b.claim_main().wait().expect("claim"), None);
    a.finish_batch(first, BatchStatus::Done, Some("hi".into()), None)
        .wait()
        .expect("finish");
    assert_eq!(b.claim_main().wait().expect("claim"), Some(second));
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
    assert_eq!(dying.claim_main().wait().expect("claim"), Some(batch));
    let (task, _) = dying.claim_task().wait().expect("claim").expect("a task");
    // Renewals keep a live host's claims: well past one lease, nobody else gets them.
    std::thread::sleep(lease * 2);
    assert_eq!(survivor.claim_main().wait().expect("claim"), None);
    assert_eq!(survivor.claim_task().wait().expect("claim"), None);
    drop(dying);
    std::thread::sleep(lease + Duration::from_secs(1));
    assert_eq!(survivor.claim_main().wait().expect("claim"), Some(batch));
    assert_eq!(
        survivor.claim_task().wait().expect("claim"),
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
    assert_eq!(slow.claim_main().wait().expect("claim"), Some(batch));
    let other = PgBuffer::connect(&url, lease).expect("other host");
    // The slow host stops renewing (it is dropped below) only after the other took over:
    // simulate a lapse by ending its lease by hand.
    expire_leases(&url);
    assert_eq!(other.claim_main().wait().expect("claim"), Some(batch));
    let refused = slow
        .finish_batch(batch, BatchStatus::Done, None, None)
        .wait()
        .expect_err("not the slow host's any more");
    assert!(
        refused.to_string().contains("another host took it over"),
        "{refused}"
    );
}

fn expire_leases(url: &PgUrl) {
    let url = url.clone();
    std::thread::spawn(move || {
        let mut client = url.config().connect(postgres::NoTls).expect("connect");
        client
            .execute(
                "UPDATE buffer_batches SET lease_until = 0 WHERE status = 'running'",
                &[],
            )
            .expect("expire");
    })
    .join()
    .expect("expire leases");
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
                while let Some(id) = host.claim_main().wait().expect("claim") {
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
