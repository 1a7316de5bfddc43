//! Agent memory through the real binary and library: recall quality on a generated set,
//! scope isolation (also against crafted query syntax), supersede and as-of, lossless
//! export/import, snapshot hydration and hygiene, OpenAI-compatible embeddings from a local
//! server, agent turns saving episodes for a real consolidator plugin, and the markdown
//! backend. This module holds what several of them share.

mod embeddings;
mod lifecycle;
mod plugins;
mod recall;

use std::collections::HashMap;
use std::path::Path;

use cairn::memory::{LocalMemory, Scope, StoreOutcome};
use cairn_tests::cairn;
use cairn_tests::memory_dataset::Dataset;

/// The scope of one user's memories.
fn user_scope(user: &str) -> Scope {
    Scope {
        user_id: Some(user.into()),
        ..Scope::default()
    }
}

/// The id of a memory that was stored as a new entry.
fn stored_id(outcome: StoreOutcome) -> String {
    match outcome {
        StoreOutcome::Stored { id, .. } => id,
        other => panic!("expected a new entry, got {other:?}"),
    }
}

/// `dir` as a `--data` argument.
fn data_arg(dir: &Path) -> String {
    dir.display().to_string()
}

/// `cairn memory stats` on `data` reports no live memory.
fn assert_no_live_memories(data: &Path, why: &str) {
    let stats = cli_json(&["memory", "stats", "--json", "--data", &data_arg(data)]);
    assert_eq!(stats["live_by_kind"], serde_json::json!({}), "{why}");
}

/// Run `cairn` with `args`, which must succeed and print JSON.
fn cli_json(args: &[&str]) -> serde_json::Value {
    let output = cairn(args);
    assert!(
        output.status.success(),
        "cairn {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "cairn {args:?} did not print JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// Store a generated dataset; returns label → id.
fn load_dataset(memory: &LocalMemory, dataset: &Dataset) -> HashMap<String, String> {
    let mut ids: HashMap<String, String> = HashMap::new();
    for planned in &dataset.memories {
        let mut entry = planned.memory.clone();
        entry.sources = entry
            .sources
            .iter()
            .map(|label| ids.get(label).cloned().unwrap_or_else(|| label.clone()))
            .collect();
        let outcome = memory.store_blocking(entry).expect("store");
        ids.insert(planned.label.clone(), outcome.id().to_string());
    }
    ids
}
