use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use cairn_storage::pg::cluster::TestCluster;
use cairn_storage::pg::journal::PgJournal;

use super::*;
use crate::journal::{JournalAdmin, JournalConfig, JournalOperator, NewEvent};

/// Records the events it takes, as one host's instance of a plugin would.
struct Recorder {
    taken: Mutex<Vec<i64>>,
}

impl Subscriber for Recorder {
    fn id(&self) -> &str {
        "recorder"
    }

    async fn take(&self, event: &Event) -> Result<(), Undelivered> {
        self.taken
            .lock()
            .map_err(|_| "poisoned".to_string())?
            .push(event.seq);
        Ok(())
    }
}

/// Append `n` events on `work.item`.
async fn append_work(journal: &Journal, n: usize) {
    for _ in 0..n {
        journal
            .append(NewEvent {
                topic: "work.item".into(),
                payload: "{}".into(),
                source: "test".into(),
                ..NewEvent::default()
            })
            .await
            .expect("append");
    }
}

/// Serve `subscriber` on `work.*`, append `events` once it has subscribed (a new
/// subscriber starts at the journal's end), wait (up to 30 s) until `done`, then stop
/// serving.
async fn serve_work<S: Subscriber>(
    journal: &Arc<Journal>,
    subscriber: &Arc<S>,
    events: usize,
    done: impl Fn() -> bool,
) {
    let (stop, task) = start_serving(journal, subscriber).await;
    append_work(journal, events).await;
    for _ in 0..600 {
        if done() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.send(true).expect("stop");
    task.await.expect("stops");
}

/// Serve `subscriber` on `work.*` until the returned sender says stop; returns once it
/// has had time to subscribe.
async fn start_serving<S: Subscriber>(
    journal: &Arc<Journal>,
    subscriber: &Arc<S>,
) -> (watch::Sender<bool>, tokio::task::JoinHandle<()>) {
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(serve(
        journal.clone(),
        subscriber.clone(),
        vec!["work.*".to_string()],
        stopped,
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    (stop, task)
}

fn seen(recorder: &Recorder) -> Vec<i64> {
    recorder.taken.lock().expect("lock").clone()
}

/// Wait (up to a minute, polling) until the two recorders took `count` events in all.
async fn until_taken(hosts: [&Recorder; 2], count: usize) {
    for _ in 0..600 {
        if hosts.iter().map(|h| seen(h).len()).sum::<usize>() >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{count} deliveries never happened: {:?}", hosts.map(seen));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_on_a_busy_subscriber_is_not_overridden_by_its_own_cursor_moves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = Arc::new(Journal::open(dir.path(), JournalConfig::default()).expect("open"));
    let recorder = Arc::new(Recorder {
        taken: Mutex::new(Vec::new()),
    });
    let (stop, task) = start_serving(&journal, &recorder).await;
    // A steady stream, so the host commits its cursor many times between two looks at
    // what an operator did.
    let appender = {
        let journal = journal.clone();
        tokio::spawn(async move {
            let mut last = 0;
            for _ in 0..300 {
                append_work(&journal, 1).await;
                last += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            last
        })
    };
    while seen(&recorder).len() < 40 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let first = seen(&recorder)[0];
    let operator = JournalAdmin::open(dir.path()).expect("operator");
    assert!(operator.replay_from("recorder", first).expect("replay"));
    let last = first - 1 + appender.await.expect("appender");
    let replayed = |seen: &[i64]| seen.iter().filter(|s| **s == first).count() == 2;
    for _ in 0..600 {
        let now = seen(&recorder);
        if replayed(&now) && now.last() == Some(&last) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.send(true).expect("stop");
    task.await.expect("stops");
    let taken = seen(&recorder);
    assert!(
        replayed(&taken),
        "the replay from {first} was never delivered: {taken:?}"
    );
    let again = taken.iter().rposition(|s| *s == first).expect("replayed");
    assert_eq!(
        taken[again..],
        (first..=last).collect::<Vec<_>>(),
        "everything from the replay on, once, in order"
    );
}

/// Fails on `bad` until `healed`, and takes every other event.
struct Flaky {
    taken: Mutex<Vec<i64>>,
    bad: i64,
    healed: AtomicBool,
}

impl Subscriber for Flaky {
    fn id(&self) -> &str {
        "flaky"
    }

    async fn take(&self, event: &Event) -> Result<(), Undelivered> {
        if event.seq == self.bad && !self.healed.load(Ordering::SeqCst) {
            return Err("not yet".into());
        }
        self.taken.lock().expect("lock").push(event.seq);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_a_replay_delivers_is_cleared() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = JournalConfig {
        max_attempts: 1,
        backoff_initial_ms: 1,
        ..JournalConfig::default()
    };
    let journal = Arc::new(Journal::open(dir.path(), config).expect("open"));
    let flaky = Arc::new(Flaky {
        taken: Mutex::new(Vec::new()),
        bad: 3,
        healed: AtomicBool::new(false),
    });
    let taken = || flaky.taken.lock().expect("lock").clone();
    let (stop, task) = start_serving(&journal, &flaky).await;
    append_work(&journal, 5).await;
    let operator = JournalAdmin::open(dir.path()).expect("operator");
    let dead = || operator.dead_letters(10).expect("dead letters");
    for _ in 0..600 {
        if taken().len() == 4 && !dead().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(dead().iter().map(|d| d.seq).collect::<Vec<_>>(), [3]);
    flaky.healed.store(true, Ordering::SeqCst);
    assert!(operator.replay_from("flaky", 1).expect("replay"));
    for _ in 0..600 {
        if taken().len() == 9 && dead().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.send(true).expect("stop");
    task.await.expect("stops");
    assert_eq!(taken(), [1, 2, 4, 5, 1, 2, 3, 4, 5]);
    assert!(dead().is_empty(), "the replay delivered it: {:?}", dead());
}

/// Takes events in runs of at most three and never takes `bad`.
struct Picky {
    taken: Mutex<Vec<i64>>,
    bad: i64,
    tries_of_bad: AtomicUsize,
}

impl Subscriber for Picky {
    fn id(&self) -> &str {
        "picky"
    }

    async fn take(&self, event: &Event) -> Result<(), Undelivered> {
        if event.seq == self.bad {
            self.tries_of_bad.fetch_add(1, Ordering::SeqCst);
            return Err("not this one".into());
        }
        self.taken.lock().expect("lock").push(event.seq);
        Ok(())
    }

    async fn take_run(&self, events: EventRun) -> Run {
        let mut taken = 0;
        for event in events.iter().take(3) {
            if let Err(error) = self.take(event).await {
                return Run {
                    taken,
                    failure: Some(error),
                };
            }
            taken += 1;
        }
        Run {
            taken,
            failure: None,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_that_stop_short_or_fail_deliver_every_event_once_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = JournalConfig {
        max_attempts: 2,
        backoff_initial_ms: 1,
        ..JournalConfig::default()
    };
    let journal = Arc::new(Journal::open(dir.path(), config).expect("open"));
    let picky = Arc::new(Picky {
        taken: Mutex::new(Vec::new()),
        bad: 5,
        tries_of_bad: AtomicUsize::new(0),
    });
    serve_work(&journal, &picky, 20, || {
        picky.taken.lock().expect("lock").len() >= 19
    })
    .await;
    let expected: Vec<i64> = (1..=20).filter(|seq| *seq != 5).collect();
    assert_eq!(
        *picky.taken.lock().expect("lock"),
        expected,
        "in order, once"
    );
    assert_eq!(
        picky.tries_of_bad.load(Ordering::SeqCst),
        2,
        "the failure in a run is the first of max_attempts"
    );
    assert_eq!(journal.cursor("picky").expect("cursor"), Some(20));
}

/// Not ready for its first `down` asks (a plugin restarting), then takes every event.
struct Restarting {
    down: usize,
    asked: AtomicUsize,
    taken: Mutex<Vec<i64>>,
}

impl Subscriber for Restarting {
    fn id(&self) -> &str {
        "restarting"
    }

    async fn take(&self, event: &Event) -> Result<(), Undelivered> {
        if self.asked.fetch_add(1, Ordering::SeqCst) < self.down {
            return Err(Undelivered {
                error: "plugin restarting is restarting".into(),
                absent: Some(Absence::Returning),
            });
        }
        self.taken.lock().expect("lock").push(event.seq);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_not_ready_is_waited_for_without_spending_attempts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = JournalConfig {
        max_attempts: 1,
        ..JournalConfig::default()
    };
    let journal = Arc::new(Journal::open(dir.path(), config).expect("open"));
    let restarting = Arc::new(Restarting {
        down: 4,
        asked: AtomicUsize::new(0),
        taken: Mutex::new(Vec::new()),
    });
    serve_work(&journal, &restarting, 3, || {
        restarting.taken.lock().expect("lock").len() >= 3
    })
    .await;
    assert_eq!(
        *restarting.taken.lock().expect("lock"),
        vec![1, 2, 3],
        "one attempt allowed, yet nothing dead-lettered while it was not ready"
    );
    assert_eq!(restarting.asked.load(Ordering::SeqCst), 4 + 3);
    assert_eq!(journal.cursor("restarting").expect("cursor"), Some(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_shared_journal_one_host_delivers_and_another_takes_over_when_it_stops() {
    let Some(cluster) = TestCluster::shared() else {
        return;
    };
    let url = cluster.fresh_database();
    let lease = Duration::from_secs(2);
    let open = || {
        let store = PgJournal::connect(&url, lease).expect("connect");
        Arc::new(Journal::over(Box::new(store), JournalConfig::default()))
    };
    let journals = [open(), open()];
    let recorders = [
        Arc::new(Recorder {
            taken: Mutex::new(Vec::new()),
        }),
        Arc::new(Recorder {
            taken: Mutex::new(Vec::new()),
        }),
    ];
    let patterns = vec!["work.*".to_string()];
    let mut hosts = Vec::new();
    for (journal, recorder) in journals.iter().zip(&recorders) {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(serve(
            journal.clone(),
            recorder.clone(),
            patterns.clone(),
            stopped,
        ));
        hosts.push((stop, task));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    append_work(&journals[0], 10).await;
    append_work(&journals[1], 10).await;
    until_taken([&recorders[0], &recorders[1]], 20).await;
    let holder = usize::from(seen(&recorders[0]).is_empty());
    let other = 1 - holder;
    assert!(
        seen(&recorders[other]).is_empty(),
        "both hosts delivered: {:?}",
        recorders.each_ref().map(|r| seen(r))
    );
    assert_eq!(
        seen(&recorders[holder]),
        (1..=20).collect::<Vec<i64>>(),
        "in order, once"
    );

    // The holding host stops; the other takes over once the lease lapsed and goes on
    // from the cursor.
    let (stop, task) = hosts.swap_remove(holder);
    stop.send(true).expect("stop");
    task.await.expect("the holder stops");
    append_work(&journals[other], 5).await;
    until_taken([&recorders[0], &recorders[1]], 25).await;
    assert_eq!(seen(&recorders[other]), (21..=25).collect::<Vec<i64>>());
}

/// Fails event `bad` with an error of its own, then goes absent (as a quarantined plugin)
/// until `back`.
struct Quarantined {
    taken: Mutex<Vec<i64>>,
    bad: i64,
    absent: AtomicBool,
    back: AtomicBool,
}

impl Subscriber for Quarantined {
    fn id(&self) -> &str {
        "quarantined"
    }

    async fn take(&self, event: &Event) -> Result<(), Undelivered> {
        if self.back.load(Ordering::SeqCst) {
            self.taken.lock().expect("lock").push(event.seq);
            return Ok(());
        }
        if self.absent.load(Ordering::SeqCst) {
            return Err(Undelivered {
                error: "plugin quarantined is quarantined".into(),
                absent: Some(Absence::UntilRestart),
            });
        }
        if event.seq == self.bad {
            self.absent.store(true, Ordering::SeqCst);
            return Err("the plugin returned internal: its own reason".into());
        }
        self.taken.lock().expect("lock").push(event.seq);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_asked_while_the_subscriber_is_absent_waits_with_its_error_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = JournalConfig {
        max_attempts: 1,
        ..JournalConfig::default()
    };
    let journal = Arc::new(Journal::open(dir.path(), config).expect("open"));
    let subscriber = Arc::new(Quarantined {
        taken: Mutex::new(Vec::new()),
        bad: 2,
        absent: AtomicBool::new(false),
        back: AtomicBool::new(false),
    });
    let (stop, task) = start_serving(&journal, &subscriber).await;
    append_work(&journal, 3).await;
    let operator = JournalAdmin::open(dir.path()).expect("operator");
    let dead = || operator.dead_letters(10).expect("dead letters");
    let errors = || {
        dead()
            .iter()
            .map(|d| (d.seq, d.error.clone()))
            .collect::<Vec<_>>()
    };
    for _ in 0..600 {
        if dead().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = errors();
    assert_eq!(before.len(), 2, "{before:?}");
    assert!(
        before
            .iter()
            .any(|(seq, e)| *seq == 2 && e.contains("its own reason"))
    );
    assert!(
        before
            .iter()
            .any(|(seq, e)| *seq == 3 && e.contains("quarantined"))
    );
    // Asked while it is absent, the retry waits: two looks later the errors are as they were.
    assert_eq!(
        operator
            .retry_dead_letters(Some("quarantined"), None)
            .expect("retry"),
        2
    );
    tokio::time::sleep(OPERATOR_LOOK * 2 + Duration::from_millis(500)).await;
    assert_eq!(errors(), before);
    assert!(
        dead()
            .iter()
            .all(|d| d.status == cairn_vocab::event::DeadLetterStatus::Retry),
        "{:?}",
        dead()
    );
    // Back (the host started again): the retry delivers both.
    subscriber.back.store(true, Ordering::SeqCst);
    for _ in 0..600 {
        if dead().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.send(true).expect("stop");
    task.await.expect("stops");
    assert!(dead().is_empty(), "{:?}", dead());
    let mut taken = subscriber.taken.lock().expect("lock").clone();
    taken.sort_unstable();
    assert_eq!(taken, [1, 2, 3]);
}
