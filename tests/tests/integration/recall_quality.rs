//! Recall quality on the harder generated set (`cairn_tests::recall_eval`): paraphrased
//! questions in five categories against raw episodes, with the local embedding model.
//! Tuned on seed 1 (`CAIRN_EVAL_SEED=1`); the assertions hold on the report seed. And the
//! local model through the real binary, present and absent.

use std::collections::HashMap;
use std::process::{Command, Output};

use cairn::memory::embed::ProviderKind;
use cairn::memory::{ExportRecord, LocalMemory, MemoryConfig, MemoryKind, NewMemory};
use cairn_tests::memory_dataset;
use cairn_tests::recall_eval::{self, Category, EvalSet};

/// The seed reported on (never tuned against).
const REPORT_SEED: u64 = 20_261_124;

fn load(memory: &LocalMemory, set: &EvalSet) -> HashMap<String, String> {
    let mut id_to_label = HashMap::new();
    for planned in &set.memories {
        let outcome = memory
            .store_blocking(planned.memory.clone())
            .expect("store");
        id_to_label.insert(outcome.id().to_string(), planned.label.clone());
    }
    id_to_label
}

fn run(
    memory: &LocalMemory,
    set: &EvalSet,
    ids: &HashMap<String, String>,
    lexical: bool,
) -> recall_eval::EvalReport {
    recall_eval::evaluate(set, |question| {
        memory
            .recall(&memory_dataset::question_recall(
                &question.user,
                &question.text,
                lexical,
            ))
            .expect("recall")
            .iter()
            .map(|hit| ids[&hit.entry.id].clone())
            .collect()
    })
}

/// The seed: `CAIRN_EVAL_SEED`, or the report seed.
fn eval_seed() -> u64 {
    std::env::var("CAIRN_EVAL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(REPORT_SEED)
}

/// Generate 60 users from `bank`, store them in a fresh memory with the local model, and score
/// recall with it and with BM25 alone; print both tables. Also checks the set itself: every
/// category has at least 150 questions, and the questions are paraphrases of their evidence.
fn evaluate_bank(
    bank: &recall_eval::Bank,
    seed: u64,
) -> (recall_eval::EvalReport, recall_eval::EvalReport) {
    let data = tempfile::tempdir().expect("data dir");
    let mut config = MemoryConfig::default();
    config.embeddings.provider = ProviderKind::Local;
    let memory = LocalMemory::open(data.path(), config).expect("open memory");
    let (in_use, warning) = memory.embeddings_in_use();
    assert!(warning.is_none(), "{in_use}: {warning:?}");
    let set = recall_eval::generate(bank, 60, seed, cairn::store::now_ms());
    let ids = load(&memory, &set);
    memory.embed_pending(|_| {}).expect("embed");

    let semantic = run(&memory, &set, &ids, false);
    let lexical = run(&memory, &set, &ids, true);
    println!(
        "phrasebook {}, seed {seed}: {} questions, {} sessions, {} memories; mean content-word overlap of a question with its evidence {:.3}\n\
         {in_use}:\n{}\nBM25 only:\n{}",
        bank.name,
        set.questions.len(),
        set.sessions,
        set.memories.len(),
        set.mean_word_overlap(),
        semantic.table(),
        lexical.table()
    );
    for category in Category::ALL {
        assert!(semantic.category(category).questions >= 150, "{category:?}");
    }
    assert!(
        set.mean_word_overlap() < 0.2,
        "the questions must be paraphrases"
    );
    (semantic, lexical)
}

/// Floors against regression, below the targets (recall@5 ≥ 0.90, ≥ 0.85 per
/// category, stale ≤ 5%, balanced accuracy ≥ 0.8), which are not met yet.
struct Floors {
    overall: f64,
    category: f64,
    stale: f64,
    balanced_accuracy: f64,
}

fn assert_floors(
    semantic: &recall_eval::EvalReport,
    lexical: &recall_eval::EvalReport,
    floors: Floors,
) {
    assert!(
        semantic.recall_at_5 >= floors.overall && semantic.recall_at_5 > 5.0 * lexical.recall_at_5,
        "recall@5 {:.3} (BM25 alone {:.3})",
        semantic.recall_at_5,
        lexical.recall_at_5
    );
    for category in Category::ALL
        .into_iter()
        .filter(|c| *c != Category::Abstention)
    {
        let score = semantic.category(category).recall_at_5;
        assert!(
            score >= floors.category,
            "{} recall@5 {score:.3}",
            category.name()
        );
    }
    assert!(
        semantic.stale_above_newest <= floors.stale,
        "stale above newest {:.3}",
        semantic.stale_above_newest
    );
    assert!(
        semantic.abstention_balanced_accuracy() >= floors.balanced_accuracy,
        "abstention balanced accuracy {:.3}",
        semantic.abstention_balanced_accuracy()
    );
}

#[test]
fn semantic_recall_on_paraphrased_questions_in_five_categories() {
    let (semantic, lexical) = evaluate_bank(&recall_eval::FIRST, eval_seed());
    assert_floors(
        &semantic,
        &lexical,
        Floors {
            overall: 0.80,
            category: 0.65,
            stale: 0.18,
            balanced_accuracy: 0.65,
        },
    );
}

/// The same on the phrasebook nothing was tuned on.
#[test]
fn semantic_recall_on_a_second_phrasebook_never_tuned_on() {
    let (semantic, lexical) = evaluate_bank(&recall_eval::SECOND, eval_seed());
    assert_floors(
        &semantic,
        &lexical,
        Floors {
            overall: 0.75,
            category: 0.60,
            stale: 0.22,
            balanced_accuracy: 0.52,
        },
    );
}

/// A recall for fewer hits shows the first hits of a recall for more: the re-ranking looks at
/// the same top five whatever the limit, so `--limit 1` never answers with something the
/// default search ranks lower. Checked on every question of six generated users, those
/// comparing two events (led by the best match of each) among them.
#[test]
fn a_smaller_limit_shows_the_first_hits_of_a_larger_one() {
    let data = tempfile::tempdir().expect("data dir");
    let mut config = MemoryConfig::default();
    config.embeddings.provider = ProviderKind::Local;
    let memory = LocalMemory::open(data.path(), config).expect("open memory");
    let set = recall_eval::generate(&recall_eval::FIRST, 6, eval_seed(), cairn::store::now_ms());
    load(&memory, &set);
    memory.embed_pending(|_| {}).expect("embed");
    let recalled = |question: &recall_eval::EvalQuestion, limit: usize| -> Vec<String> {
        let mut query = memory_dataset::question_recall(&question.user, &question.text, false);
        query.limit = limit;
        let hits = memory.recall(&query).expect("recall");
        hits.into_iter().map(|hit| hit.entry.id).collect()
    };
    let mut compared = 0;
    for question in &set.questions {
        let longest = recalled(question, 10);
        for limit in [1, 3, 5] {
            let shorter = recalled(question, limit);
            let expected: Vec<String> = longest.iter().take(limit).cloned().collect();
            assert_eq!(shorter, expected, "{:?} with limit {limit}", question.text);
            compared += 1;
        }
    }
    assert!(compared >= 200, "{compared} recalls compared");
}

/// `cairn memory …` with the test environment, the local model asked for, and `env`.
fn cairn_local(data: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(cairn_tests::cairn_bin());
    for (key, value) in cairn_tests::test_env() {
        command.env(key, value);
    }
    command
        .env("CAIRN_MEMORY_EMBEDDINGS_PROVIDER", "local")
        .envs(env.iter().copied())
        .arg("memory")
        .args(args)
        .arg("--data")
        .arg(data);
    command.output().expect("run cairn")
}

#[test]
fn the_binary_recalls_by_meaning_with_the_local_model_and_lexically_without_it() {
    let data = tempfile::tempdir().expect("data dir");
    let now = cairn::store::now_ms();
    let said = [
        "We finally adopted a beagle puppy and named him Biscuit.",
        "Traffic was terrible on the bridge again.",
        "I need a recipe for a quick lunch.",
    ];
    let mut jsonl = String::new();
    for (i, text) in said.iter().enumerate() {
        let mut memory = NewMemory::new(MemoryKind::Episode, *text);
        memory.scope.user_id = Some("ana".into());
        let entry = cairn::memory::record(&memory, format!("mem_said{i}"), now);
        jsonl.push_str(&serde_json::to_string(&ExportRecord::Entry(Box::new(entry))).unwrap());
        jsonl.push('\n');
    }
    let file = data.path().join("said.jsonl");
    std::fs::write(&file, jsonl).unwrap();
    let file = file.display().to_string();
    for args in [vec!["import", file.as_str()], vec!["reindex"]] {
        let out = cairn_local(data.path(), &args, &[]);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stats = cairn_local(data.path(), &["stats"], &[]);
    let stats = String::from_utf8_lossy(&stats.stdout);
    assert!(
        stats.contains("local all-MiniLM-L6-v2 (semantic)"),
        "{stats}"
    );
    let ask = [
        "search",
        "What is my pet called?",
        "--user",
        "ana",
        "--json",
    ];
    let top = |out: &Output| -> Vec<String> {
        let hits: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
        hits.as_array()
            .expect("a list of hits")
            .iter()
            .map(|h| h["entry"]["id"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let semantic = cairn_local(data.path(), &ask, &[]);
    assert_eq!(
        top(&semantic).first().map(String::as_str),
        Some("mem_said0")
    );
    // `--explain` shows how crowded each hit's neighbourhood among the candidates is.
    let explain = [
        "search",
        "What is my pet called?",
        "--user",
        "ana",
        "--explain",
    ];
    let explained = cairn_local(data.path(), &explain, &[]);
    let explained = String::from_utf8_lossy(&explained.stdout);
    assert!(
        explained.contains("crowding 0.") || explained.contains("crowding -0."),
        "{explained}"
    );

    // The model gone: a warning naming the file and the install command; recall still
    // answers, lexically (the question shares no word with the answer, so nothing).
    let empty = tempfile::tempdir().expect("models dir");
    let gone = [(
        "CAIRN_MEMORY_EMBEDDINGS_MODELS_DIR",
        empty.path().to_str().expect("utf-8 path"),
    )];
    let lexical = cairn_local(data.path(), &ask, &gone);
    let warning = String::from_utf8_lossy(&lexical.stderr);
    assert!(lexical.status.success(), "{warning}");
    assert!(
        warning.contains("config.json is missing")
            && warning.contains("cargo xtask install-model")
            && warning.contains("recall is lexical"),
        "{warning}"
    );
    assert!(top(&lexical).is_empty());
    let lunch = cairn_local(
        data.path(),
        &["search", "lunch recipe", "--user", "ana", "--json"],
        &gone,
    );
    assert_eq!(top(&lunch), vec!["mem_said2".to_string()]);

    // Damaged weights load (the file's layout is whole) but give vectors that are not
    // numbers, which were stored as vectors matching nothing (found by an operator's test):
    // refused at load the same way, naming the file.
    let damaged = tempfile::tempdir().expect("models dir");
    damage_a_copy_of_the_model(damaged.path());
    let broken = [(
        "CAIRN_MEMORY_EMBEDDINGS_MODELS_DIR",
        damaged.path().to_str().expect("utf-8 path"),
    )];
    let lexical = cairn_local(data.path(), &ask, &broken);
    let warning = String::from_utf8_lossy(&lexical.stderr);
    assert!(lexical.status.success(), "{warning}");
    assert!(
        warning.contains("model.safetensors")
            && warning.contains("damaged")
            && warning.contains("cargo xtask install-model")
            && warning.contains("recall is lexical"),
        "{warning}"
    );

    // Under `auto` the model gone does not let hash embeddings replace the model's vectors:
    // recall is BM25 only meanwhile, a reindex is refused, and the vectors are all there
    // once the model is back.
    let auto_gone = [gone[0], ("CAIRN_MEMORY_EMBEDDINGS_PROVIDER", "auto")];
    let kept = cairn_local(data.path(), &["stats", "--json"], &auto_gone);
    let kept: serde_json::Value = serde_json::from_slice(&kept.stdout).expect("stats json");
    assert_eq!(kept["embeddings"]["in_use"], "none (BM25 only)", "{kept}");
    let why = kept["embeddings"]["warning"].as_str().unwrap_or_default();
    assert!(
        why.contains("keeping the 3 vectors of all-MiniLM-L6-v2"),
        "{why}"
    );
    // The kept vectors and what waits for the model are counted for it (until 2026-12-04
    // stats counted for no model, 0 / 0), and the install command is said once.
    let late = NewMemory::new(MemoryKind::Episode, "Biscuit chewed my slippers.");
    let late = cairn::memory::record(&late, "mem_late".into(), now);
    let late_file = data.path().join("late.jsonl");
    let line = serde_json::to_string(&ExportRecord::Entry(Box::new(late))).expect("json");
    std::fs::write(&late_file, line + "\n").expect("write");
    let late_file = late_file.display().to_string();
    let imported = cairn_local(data.path(), &["import", &late_file], &auto_gone);
    assert!(imported.status.success(), "{imported:?}");
    for env in [&auto_gone[..], &gone[..], &[broken[0], auto_gone[1]][..]] {
        let waiting = cairn_local(data.path(), &["stats", "--json"], env);
        let waiting: serde_json::Value =
            serde_json::from_slice(&waiting.stdout).expect("stats json");
        assert_eq!(
            (&waiting["embedded"], &waiting["embedding_backlog"]),
            (&3.into(), &1.into()),
            "{env:?}: {waiting}"
        );
        let counted = &waiting["embeddings"];
        assert_eq!(
            counted["counted_for"], "local all-MiniLM-L6-v2",
            "{waiting}"
        );
        assert_eq!(counted["counted_model_loaded"], false, "{waiting}");
        let why = counted["warning"].as_str().unwrap_or_default();
        assert_eq!(why.matches("cargo xtask install-model").count(), 1, "{why}");
    }
    let text = cairn_local(data.path(), &["stats"], &auto_gone);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("3 / 1 (of all-MiniLM-L6-v2, not loaded: the backlog waits for it)"),
        "{text}"
    );
    let reindex = cairn_local(data.path(), &["reindex", "--force"], &auto_gone);
    assert_eq!(reindex.status.code(), Some(2), "{reindex:?}");
    let lunch = cairn_local(
        data.path(),
        &["search", "lunch recipe", "--user", "ana", "--json"],
        &auto_gone,
    );
    assert_eq!(top(&lunch), vec!["mem_said2".to_string()]);
    let back = cairn_local(data.path(), &["stats", "--json"], &[]);
    let back: serde_json::Value = serde_json::from_slice(&back.stdout).expect("stats json");
    assert_eq!(
        (&back["embedded"], &back["embedding_backlog"]),
        (&3.into(), &1.into()),
        "{back}"
    );
    assert_eq!(back["embeddings"]["counted_model_loaded"], true, "{back}");
}

/// Copy the installed model into `models_dir` with 4 KiB of its weights overwritten by
/// `0xFF` bytes (NaN as floats), as a disk or a careless copy damages a file in place.
fn damage_a_copy_of_the_model(models_dir: &std::path::Path) {
    use std::io::{Seek, SeekFrom, Write};
    let installed = cairn::memory::embed::local_model::model_dir(std::path::Path::new(""));
    let copy = cairn::memory::embed::local_model::model_dir(models_dir);
    std::fs::create_dir_all(&copy).expect("model dir");
    for name in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(installed.join(name), copy.join(name)).expect("copy the model");
    }
    let mut weights = std::fs::OpenOptions::new()
        .write(true)
        .open(copy.join("model.safetensors"))
        .expect("open the weights");
    weights.seek(SeekFrom::Start(60_000_000)).expect("seek");
    weights.write_all(&[0xFF; 4096]).expect("overwrite");
}

/// Import `said` (id, text, when it was said) as ana's episodes and embed them.
fn import_said(data: &std::path::Path, said: &[(&str, &str, &str)]) {
    let mut jsonl = String::new();
    for (id, text, at) in said {
        let mut memory = NewMemory::new(MemoryKind::Episode, *text);
        memory.scope.user_id = Some("ana".into());
        let at = chrono::DateTime::parse_from_rfc3339(at).expect("RFC 3339");
        memory.valid_from = Some(at.timestamp_millis());
        let entry = cairn::memory::record(&memory, id.to_string(), at.timestamp_millis());
        jsonl.push_str(&serde_json::to_string(&ExportRecord::Entry(Box::new(entry))).unwrap());
        jsonl.push('\n');
    }
    let file = data.join("said.jsonl");
    std::fs::write(&file, jsonl).unwrap();
    let file = file.display().to_string();
    for args in [vec!["import", file.as_str()], vec!["reindex"]] {
        let out = cairn_local(data, &args, &[]);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `cairn memory search QUESTION --user ana --json` plus `extra`, with `env`: the hits.
fn search_local(
    data: &std::path::Path,
    question: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Vec<serde_json::Value> {
    let mut args = vec!["search", question, "--user", "ana", "--json"];
    args.extend_from_slice(extra);
    let out = cairn_local(data, &args, env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hits: serde_json::Value = serde_json::from_slice(&out.stdout).expect("hits as JSON");
    hits.as_array().expect("a list of hits").clone()
}

fn ids(hits: &[serde_json::Value]) -> Vec<&str> {
    hits.iter()
        .map(|h| h["entry"]["id"].as_str().unwrap_or_default())
        .collect()
}

#[test]
fn room_in_the_top_k_is_filled_from_below_the_floor_and_a_span_lifts_only_what_answers() {
    let data = tempfile::tempdir().expect("data dir");
    import_said(
        data.path(),
        &[
            (
                "mem_pet",
                "We finally adopted a beagle puppy and named him Biscuit.",
                "2026-05-10T10:00:00Z",
            ),
            (
                "mem_traffic",
                "Traffic was terrible on the bridge again.",
                "2026-10-12T10:00:00Z",
            ),
            (
                "mem_lunch",
                "I need a recipe for a quick lunch.",
                "2026-10-14T10:00:00Z",
            ),
            (
                "mem_walk",
                "Took the dog for a long walk by the river.",
                "2026-10-16T10:00:00Z",
            ),
        ],
    );
    // Only the puppy is above the floor (0.15) for this question; lunch (≈ 0.11) fills
    // the room, traffic (a negative cosine, below half the floor) never does.
    let pet = "What is my pet called?";
    let filled = search_local(data.path(), pet, &[], &[]);
    assert!(ids(&filled).contains(&"mem_pet"), "{filled:?}");
    let lunch = filled
        .iter()
        .find(|h| h["entry"]["id"] == "mem_lunch")
        .unwrap_or_else(|| panic!("lunch fills the top k: {filled:?}"));
    assert_eq!(
        lunch["explain"]["adjusted"],
        "below the relevance floor: fills the top k"
    );
    assert!(!ids(&filled).contains(&"mem_traffic"), "{filled:?}");
    let strict = [("CAIRN_MEMORY_RECALL_FILL_BELOW_FLOOR", "false")];
    let unfilled = search_local(data.path(), pet, &[], &strict);
    assert!(ids(&unfilled).contains(&"mem_pet"), "{unfilled:?}");
    assert!(!ids(&unfilled).contains(&"mem_lunch"), "{unfilled:?}");

    // "Last month" is October: the walk was then, the puppy came in May. The walk answers
    // the question less than 0.6 as well as the puppy does, so the span does not lift it.
    let named = "What did we name the pet we got last month?";
    let at = ["--at", "2026-11-20T10:00:00Z"];
    let hits = search_local(data.path(), named, &at, &[]);
    assert_eq!(ids(&hits).first(), Some(&"mem_pet"), "{hits:?}");
    let walk = hits
        .iter()
        .find(|h| h["entry"]["id"] == "mem_walk")
        .unwrap_or_else(|| panic!("the walk is recalled: {hits:?}"));
    let time = walk["explain"]["time"].as_str().unwrap_or_default();
    assert!(
        time.starts_with("inside \"last month\"") && time.contains("not lifted"),
        "{time}"
    );
    // Every memory of the span lifted, as before the share: the walk outranks the answer.
    let any = [("CAIRN_MEMORY_RECALL_TIME_BOOST_SHARE", "0")];
    let lifted = search_local(data.path(), named, &at, &any);
    assert_eq!(ids(&lifted).first(), Some(&"mem_walk"), "{lifted:?}");
}

#[test]
fn a_recall_setting_of_the_wrong_type_is_refused_naming_its_variable() {
    let data = tempfile::tempdir().expect("data dir");
    let out = cairn_local(
        data.path(),
        &["search", "anything", "--user", "ana"],
        &[("CAIRN_MEMORY_RECALL_FILL_BELOW_FLOOR", "maybe")],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "CAIRN_MEMORY_RECALL_FILL_BELOW_FLOOR: memory.recall.fill_below_floor: invalid type"
        ) && stderr.contains("expected a boolean"),
        "{stderr}"
    );
}

#[test]
fn a_newer_memory_telling_of_a_change_goes_above_the_statement_it_updates() {
    let data = tempfile::tempdir().expect("data dir");
    import_said(
        data.path(),
        &[
            (
                "mem_run",
                "I go running along the canal every morning before work.",
                "2026-03-02T08:00:00Z",
            ),
            (
                "mem_coffee",
                "I tried a new coffee shop near the station.",
                "2026-04-10T08:00:00Z",
            ),
            (
                "mem_climb",
                "These days my free time goes into climbing.",
                "2026-09-20T08:00:00Z",
            ),
            (
                "mem_sister",
                "My sister is visiting next weekend.",
                "2026-09-25T08:00:00Z",
            ),
        ],
    );
    let question = "What do I do for exercise?";
    // Running answers best; climbing, said later, about 0.6 as well, and the two are alike
    // enough for the likeness rule. Turned off here, and the nearest-memory rule too, so
    // the change words alone decide.
    let no_likeness_rule = ("CAIRN_MEMORY_RECALL_SAME_SUBJECT_WHEN_BOTH_ANSWER", "1");
    let no_successor_rule = ("CAIRN_MEMORY_RECALL_SUCCESSOR_PROBES", "0");
    let hits = search_local(
        data.path(),
        question,
        &[],
        &[no_likeness_rule, no_successor_rule],
    );
    assert_eq!(ids(&hits)[..2], ["mem_climb", "mem_run"], "{hits:?}");
    assert_eq!(
        hits[0]["explain"]["adjusted"],
        "ranked above mem_run: newer, tells of a change to the same subject"
    );
    let no_change_rule = (
        "CAIRN_MEMORY_RECALL_UPDATE_RELEVANCE_RATIO_WHEN_CHANGED",
        "1",
    );
    // With both rules off, climbing still goes first: it tells of a change, it is among
    // the nearest memories of running, and running is its own nearest memory.
    let hits = search_local(
        data.path(),
        question,
        &[],
        &[no_likeness_rule, no_change_rule],
    );
    assert_eq!(ids(&hits)[..2], ["mem_climb", "mem_run"], "{hits:?}");
    assert_eq!(
        hits[0]["explain"]["adjusted"],
        "ranked above mem_run: newer, tells of a change, and this is its nearest memory"
    );
    let hits = search_local(
        data.path(),
        question,
        &[],
        &[no_likeness_rule, no_change_rule, no_successor_rule],
    );
    assert_eq!(ids(&hits)[..2], ["mem_run", "mem_climb"], "{hits:?}");
}

#[test]
fn a_search_says_when_the_embeddings_provider_fails_and_ranks_by_words() {
    let data = tempfile::tempdir().expect("data dir");
    let mut memory = NewMemory::new(MemoryKind::Episode, "We adopted a beagle puppy.");
    memory.scope.user_id = Some("ana".into());
    let entry = cairn::memory::record(&memory, "mem_pet".into(), cairn::store::now_ms());
    let line = serde_json::to_string(&ExportRecord::Entry(Box::new(entry))).expect("json");
    let file = data.path().join("said.jsonl");
    std::fs::write(&file, line + "\n").expect("write");
    let imported = cairn_local(data.path(), &["import", &file.display().to_string()], &[]);
    assert!(imported.status.success());
    // A model server that is not there (nothing listens on the discard port).
    let away = [
        ("CAIRN_MEMORY_EMBEDDINGS_PROVIDER", "openai"),
        ("CAIRN_MEMORY_EMBEDDINGS_URL", "http://127.0.0.1:9/v1"),
    ];
    let search = ["search", "beagle puppy", "--user", "ana", "--json"];
    let found = cairn_local(data.path(), &search, &away);
    let warning = String::from_utf8_lossy(&found.stderr);
    assert!(found.status.success(), "{warning}");
    assert!(
        warning.contains("warning: this search ranks by words only (BM25)")
            && warning.contains("127.0.0.1:9"),
        "{warning}"
    );
    let hits: Vec<serde_json::Value> = serde_json::from_slice(&found.stdout).expect("json");
    assert_eq!(ids(&hits), ["mem_pet"], "found by its words all the same");

    // A forced reindex asks the provider first: one that is away costs no vector.
    assert!(cairn_local(data.path(), &["reindex"], &[]).status.success());
    let forced = cairn_local(data.path(), &["reindex", "--force"], &away);
    let refusal = String::from_utf8_lossy(&forced.stderr);
    assert_eq!(forced.status.code(), Some(1), "{refusal}");
    assert!(
        refusal.contains("the embeddings provider does not answer, so the vectors are kept"),
        "{refusal}"
    );
    let stats = cairn_local(data.path(), &["stats", "--json"], &[]);
    let stats: serde_json::Value = serde_json::from_slice(&stats.stdout).expect("stats json");
    assert_eq!(stats["embedded"], 1, "{stats}");
}

#[test]
fn a_search_says_when_memories_have_no_vector_yet() {
    let data = tempfile::tempdir().expect("data dir");
    let mut memory = NewMemory::new(MemoryKind::Episode, "We adopted a beagle puppy.");
    memory.scope.user_id = Some("ana".into());
    let entry = cairn::memory::record(&memory, "mem_pet".into(), cairn::store::now_ms());
    let line = serde_json::to_string(&ExportRecord::Entry(Box::new(entry))).expect("json");
    let file = data.path().join("said.jsonl");
    std::fs::write(&file, line + "\n").expect("write");
    let imported = cairn_local(data.path(), &["import", &file.display().to_string()], &[]);
    assert!(imported.status.success());
    let search = [
        "search",
        "What is my pet called?",
        "--user",
        "ana",
        "--json",
    ];
    let before = cairn_local(data.path(), &search, &[]);
    let note = String::from_utf8_lossy(&before.stderr);
    assert!(
        before.status.success()
            && note.contains("note: 1 memory has no vector yet")
            && note.contains("cairn memory reindex"),
        "{note}"
    );
    assert!(cairn_local(data.path(), &["reindex"], &[]).status.success());
    let after = cairn_local(data.path(), &search, &[]);
    let quiet = String::from_utf8_lossy(&after.stderr);
    assert!(!quiet.contains("no vector yet"), "{quiet}");
}

#[test]
fn the_memory_naming_the_asked_number_comes_first_not_a_newer_one_like_it() {
    let data = tempfile::tempdir().expect("data dir");
    let pages = [
        "login", "signup", "billing", "search", "export", "import", "profile", "settings",
        "avatar", "logout", "sidebar", "footer",
    ];
    let said: Vec<(String, String, String)> = pages
        .iter()
        .enumerate()
        .map(|(i, page)| {
            (
                format!("mem_pr{}", 101 + i),
                format!("Pull request {} changes the {page} page", 101 + i),
                format!("2026-03-{:02}T08:00:00Z", 1 + i),
            )
        })
        .collect();
    let said: Vec<(&str, &str, &str)> = said
        .iter()
        .map(|(id, text, at)| (id.as_str(), text.as_str(), at.as_str()))
        .collect();
    import_said(data.path(), &said);
    // Each later pull request is alike the last in every word but its number and page: on
    // likeness alone each was "newer, on the same subject" and went above 105.
    let question = "what does pull request 105 change";
    let hits = search_local(data.path(), question, &[], &[]);
    assert_eq!(ids(&hits).first(), Some(&"mem_pr105"), "{hits:?}");
    assert!(hits[0]["explain"]["adjusted"].is_null(), "{hits:?}");
    // The assistant's later reply repeats 105 as it answers about 112: its echo names the
    // number too, and is still no update of what the user said.
    let mut reply = NewMemory::new(
        MemoryKind::Episode,
        "I received: ana: Pull request 112 changes the footer page (I remember: Pull request 105 changes the export page)",
    );
    reply.scope.user_id = Some("ana".into());
    reply.tags = vec!["assistant".into()];
    let at = chrono::DateTime::parse_from_rfc3339("2026-03-20T08:00:00Z").expect("time");
    reply.valid_from = Some(at.timestamp_millis());
    let entry = cairn::memory::record(&reply, "mem_reply".into(), at.timestamp_millis());
    let line = serde_json::to_string(&ExportRecord::Entry(Box::new(entry))).expect("json");
    let file = data.path().join("reply.jsonl");
    std::fs::write(&file, line + "\n").expect("write");
    for args in [
        vec!["import", &*file.display().to_string()],
        vec!["reindex"],
    ] {
        assert!(
            cairn_local(data.path(), &args, &[]).status.success(),
            "{args:?}"
        );
    }
    let hits = search_local(data.path(), question, &["--limit", "20"], &[]);
    assert!(ids(&hits).contains(&"mem_reply"), "a candidate: {hits:?}");
    assert_eq!(ids(&hits).first(), Some(&"mem_pr105"), "{hits:?}");
}

#[test]
fn a_later_question_is_not_ranked_above_the_statement_it_asks_about() {
    let data = tempfile::tempdir().expect("data dir");
    import_said(
        data.path(),
        &[
            (
                "mem_said",
                "My favourite drink is green tea.",
                "2026-03-02T08:00:00Z",
            ),
            (
                "mem_asked",
                "What is my favourite drink?",
                "2026-03-09T08:00:00Z",
            ),
        ],
    );
    // Alike and newer, but a question states nothing: no update of the statement.
    let hits = search_local(data.path(), "green tea", &[], &[]);
    assert_eq!(ids(&hits).first(), Some(&"mem_said"), "{hits:?}");
}
