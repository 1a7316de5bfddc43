//! Recall quality on the harder generated set (`cairn_tests::recall_eval`): paraphrased
//! questions in five categories against raw episodes, with the local embedding model.
//! Tuned on seed 1 (`CAIRN_EVAL_SEED=1`); the assertions hold on the report seed. And the
//! local model through the real binary, present and absent.

use std::collections::HashMap;
use std::process::{Command, Output};

use cairn::memory::embed::ProviderKind;
use cairn::memory::{
    ExportRecord, LocalMemory, MemoryConfig, MemoryKind, NewMemory, RecallQuery, Scope,
};
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
            .recall(&RecallQuery {
                text: question.text.clone(),
                scope: Scope {
                    agent_id: Some("main".into()),
                    user_id: Some(question.user.clone()),
                    session_id: None,
                },
                limit: 5,
                lexical_only: lexical,
                ..RecallQuery::default()
            })
            .expect("recall")
            .iter()
            .map(|hit| ids[&hit.entry.id].clone())
            .collect()
    })
}

#[test]
fn semantic_recall_on_paraphrased_questions_in_five_categories() {
    let seed = std::env::var("CAIRN_EVAL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(REPORT_SEED);
    let data = tempfile::tempdir().expect("data dir");
    let mut config = MemoryConfig::default();
    config.embeddings.provider = ProviderKind::Local;
    let memory = LocalMemory::open(data.path(), config).expect("open memory");
    let (in_use, warning) = memory.embeddings_in_use();
    assert!(warning.is_none(), "{in_use}: {warning:?}");
    let set = recall_eval::generate(60, seed, cairn::store::now_ms());
    let ids = load(&memory, &set);
    memory.embed_pending(|_| {}).expect("embed");

    let semantic = run(&memory, &set, &ids, false);
    let lexical = run(&memory, &set, &ids, true);
    println!(
        "seed {seed}: {} questions, {} sessions, {} memories; mean content-word overlap of a question with its evidence {:.3}\n\
         {in_use}:\n{}\nBM25 only:\n{}",
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
    // Floors against regression, below the targets (recall@5 ≥ 0.90, ≥ 0.85 per
    // category, stale ≤ 5%, balanced accuracy ≥ 0.8), which are not met yet.
    assert!(
        semantic.recall_at_5 >= 0.80 && semantic.recall_at_5 > 5.0 * lexical.recall_at_5,
        "recall@5 {:.3} (BM25 alone {:.3})",
        semantic.recall_at_5,
        lexical.recall_at_5
    );
    for category in Category::ALL
        .into_iter()
        .filter(|c| *c != Category::Abstention)
    {
        let score = semantic.category(category).recall_at_5;
        assert!(score >= 0.65, "{} recall@5 {score:.3}", category.name());
    }
    assert!(
        semantic.stale_above_newest <= 0.30,
        "stale above newest {:.3}",
        semantic.stale_above_newest
    );
    assert!(
        semantic.abstention_balanced_accuracy >= 0.65,
        "abstention balanced accuracy {:.3}",
        semantic.abstention_balanced_accuracy
    );
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
}
