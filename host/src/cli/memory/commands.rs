//! One function per `cairn memory` subcommand.

use super::*;

/// `cairn memory list`.
pub(super) fn list(
    memory: &MemoryService,
    filter: &ScopeArgs,
    all: &bool,
    limit: &usize,
    json: &bool,
) -> Result<()> {
    let entries = memory
        .list(&ListFilter {
            scope: filter.scope(),
            kinds: filter.kinds.clone(),
            category: filter.category.clone(),
            include_superseded: *all,
            include_forgotten: *all,
            limit: *limit,
        })
        .map_err(memory_failure)?;
    if *json {
        print_json(&entries)?;
    } else if entries.is_empty() {
        println!("no memories");
    } else {
        for entry in &entries {
            println!("{}", entry_line(entry));
        }
    }
    Ok(())
}

/// `cairn memory get`.
pub(super) fn get(memory: &CommandMemory, id: &str, json: &bool) -> Result<()> {
    let entry = memory
        .service
        .get(id)
        .map_err(memory_failure)?
        .ok_or_else(|| BadInput(format!("no memory `{id}`")))?;
    let trail = match memory.service.backend_plugin() {
        None => memory.local.audit_trail(id).map_err(memory_failure)?,
        Some(_) => Vec::new(),
    };
    if *json {
        print_json(&json!({"entry": entry, "audit": trail}))?;
    } else {
        print_entry(&entry);
        for row in trail {
            let detail = row.detail.map(|d| format!(" ({d})")).unwrap_or_default();
            println!(
                "audit:       {} {} by {}{detail}",
                time(row.at),
                row.action,
                row.actor
            );
        }
    }
    Ok(())
}

/// `cairn memory search`.
pub(super) fn search(
    memory: &MemoryService,
    args: &SearchArgs,
    recall: &crate::memory::RecallConfig,
) -> Result<()> {
    let SearchArgs {
        query,
        filter,
        as_of,
        at,
        since,
        until,
        limit,
        min_relevance,
        lexical,
        explain,
        json,
    } = args;
    let mut request = RecallQuery {
        text: query.clone(),
        scope: filter.scope(),
        kinds: filter.kinds.clone(),
        categories: filter.category.iter().cloned().collect(),
        exclude_session: None,
        since: *since,
        until: *until,
        as_of: *as_of,
        now: *at,
        limit: *limit,
        min_relevance: *min_relevance,
        lexical_only: *lexical,
        query_vector: None,
    };
    embed_for_search(memory, &mut request);
    let hits = memory.recall(&request).map_err(memory_failure)?;
    if !*lexical {
        note_unembedded(memory)?;
    }
    if *json {
        return print_json(&hits);
    }
    print_hits(&hits, *explain);
    if hits.is_empty() && *explain && min_relevance.is_none() {
        // Say why: with a floor given, recall does not abstain, so it names the best match.
        request.min_relevance = Some(0.0);
        request.limit = 1;
        let best = memory.recall(&request).map_err(memory_failure)?;
        match best.first() {
            Some(best) if best.explain.relevance < recall.min_relevance => println!(
                "  the most relevant memory, {} (relevance {:.3}), is under memory.recall.min_relevance ({})",
                best.entry.id, best.explain.relevance, recall.min_relevance
            ),
            Some(best) => println!(
                "  the most relevant memory, {} (relevance {:.3}), is under memory.recall.abstain_below ({}): \
                 recall answers nothing rather than something unrelated",
                best.entry.id, best.explain.relevance, recall.abstain_below
            ),
            None => println!("  no memory in this scope matches the question"),
        }
    }
    Ok(())
}

/// Embed the search's text here rather than in recall, so a provider that fails (a model
/// server that is down) is said on stderr: recall would fall back to words only and say so
/// only in a log, which a command has none of.
fn embed_for_search(memory: &MemoryService, request: &mut RecallQuery) {
    if request.lexical_only || memory.backend_plugin().is_some() {
        return;
    }
    match memory.local().try_embed_query(&request.text) {
        Ok(vector) => request.query_vector = vector,
        Err(e) => {
            eprintln!("warning: this search ranks by words only (BM25): {e}");
            request.lexical_only = true;
        }
    }
}

/// Say on stderr how many memories recall could find by their words only: an import, or a
/// model change, leaves them without a vector until a host or `cairn memory reindex` embeds
/// them, and a search that finds nothing should not look like memory has nothing.
fn note_unembedded(memory: &MemoryService) -> Result<()> {
    if memory.backend_plugin().is_some() || !memory.local().embeds() {
        return Ok(());
    }
    let backlog = memory.local().embedding_backlog().map_err(memory_failure)?;
    if backlog > 0 {
        eprintln!(
            "note: {backlog} memor{} no vector yet, so recall finds {} by {} words only; \
             `cairn memory reindex` embeds them (a running host does it in the background)",
            if backlog == 1 { "y has" } else { "ies have" },
            if backlog == 1 { "it" } else { "them" },
            if backlog == 1 { "its" } else { "their" },
        );
    }
    Ok(())
}

/// `cairn memory stats`.
pub(super) fn stats(memory: &CommandMemory, json: &bool) -> Result<()> {
    if let Some(backend) = memory.service.backend_plugin() {
        return backend_stats(memory, backend, json);
    }
    let stats = memory.local.stats().map_err(memory_failure)?;
    let (embeddings, warning) = memory.local.embeddings_in_use();
    let counted = memory.local.counted_model();
    if *json {
        let mut value = serde_json::to_value(&stats)?;
        value["embeddings"] = json!({
            "in_use": embeddings,
            "warning": warning,
            "counted_for": counted.as_ref().map(|((provider, model), _)| format!("{provider} {model}")),
            "counted_model_loaded": counted.as_ref().map(|(_, loaded)| *loaded),
        });
        print_json(&value)?;
    } else {
        println!("embeddings:               {embeddings}");
        if let Some(warning) = warning {
            println!("                          {warning}");
        }
        println!("live entries by kind:     {:?}", stats.live_by_kind);
        println!("live entries by category: {:?}", stats.live_by_category);
        println!("superseded (kept):        {}", stats.superseded);
        println!("forgotten (until purge):  {}", stats.forgotten);
        // While the model asked for cannot load, its vectors are kept and the backlog
        // waits for it: say so, rather than count for no model (0 / 0 until 2026-12-04).
        let waiting = match &counted {
            Some(((_, model), false)) => {
                format!(" (of {model}, not loaded: the backlog waits for it)")
            }
            _ => String::new(),
        };
        println!(
            "embedded / backlog:       {} / {}{waiting}",
            stats.embedded, stats.embedding_backlog
        );
        println!("embedding cache rows:     {}", stats.embedding_cache);
        println!("sessions:                 {:?}", stats.sessions);
        println!(
            "memory.db size:           {:.1} MiB",
            stats.database_bytes as f64 / 1_048_576.0
        );
        println!(
            "hygiene last run:         {}",
            stats
                .hygiene_last_run
                .map(time)
                .unwrap_or_else(|| "never".into())
        );
    }
    Ok(())
}

/// `cairn memory stats` with a backend plugin: its health line and the sessions by state.
fn backend_stats(memory: &CommandMemory, backend: &str, json: &bool) -> Result<()> {
    let health = memory.service.health().map_err(memory_failure)?;
    let sessions = memory.local.stats().map_err(memory_failure)?.sessions;
    if *json {
        print_json(&json!({"backend": backend, "health": health, "sessions": sessions}))?;
    } else {
        println!("backend:                  {backend} ({health})");
        println!("sessions:                 {sessions:?}");
    }
    Ok(())
}

/// `cairn memory forget`.
pub(super) fn forget(memory: &MemoryService, id: &str, json: &bool) -> Result<()> {
    let forgotten = memory.forget(id, "cli").map_err(memory_failure)?;
    if !forgotten && memory.get(id).map_err(memory_failure)?.is_none() {
        return Err(BadInput(format!("no memory `{id}`")).into());
    }
    if *json {
        print_json(&json!({"id": id, "forgotten": forgotten}))?;
    } else if forgotten {
        println!("forgot {id} (kept until `cairn memory purge`)");
    } else {
        println!("{id} was already forgotten");
    }
    Ok(())
}

/// `cairn memory purge`.
pub(super) fn purge(
    memory: &LocalMemory,
    ids: &[String],
    forgotten: &bool,
    json: &bool,
) -> Result<()> {
    if ids.is_empty() && !forgotten {
        return Err(BadInput(
            "purge removes data for good: name the memories with --id, or pass --forgotten to remove every forgotten memory".into(),
        )
        .into());
    }
    for id in ids {
        if memory.get(id).map_err(memory_failure)?.is_none() {
            return Err(BadInput(format!(
                "--id: no memory `{id}` (never stored, or purged already); nothing was removed"
            ))
            .into());
        }
    }
    let removed = memory.purge(ids, "cli").map_err(memory_failure)?;
    if *json {
        print_json(&json!({"removed": removed}))?;
    } else {
        println!("removed {removed} memories for good");
    }
    Ok(())
}

/// Refuse an `--output` path no file can be written at (a directory, or in a directory
/// that does not exist) or that must not be replaced, before anything is written or opened:
/// a device, FIFO or socket, a database (any SQLite file: a data dir's memory.db written
/// over with JSONL loses every memory), or one of `data_dir`'s own files. A symbolic link
/// is judged by the file it names, which is what is replaced.
pub(super) fn check_output(path: &Path, data_dir: &Path) -> Result<()> {
    let refuse = |problem: String| -> Result<()> {
        Err(BadInput(format!("--output: {}: {problem}", path.display())).into())
    };
    let target = cairn_memory::link_target(path)
        .map_err(|e| BadInput(format!("--output: {}: {e}", path.display())))?;
    if target.is_dir() {
        return refuse("is a directory; expected the path of a file".into());
    }
    let directory = target.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(directory) = directory
        && !directory.is_dir()
    {
        return refuse(format!(
            "the directory {} does not exist",
            directory.display()
        ));
    }
    if let Ok(metadata) = std::fs::metadata(&target)
        && !metadata.is_file()
    {
        return refuse(
            "is not a regular file (a device, FIFO or socket), which the file written \
             beside it and renamed over it would replace; expected the path of a file"
                .into(),
        );
    }
    if is_data_dir_file(&target, data_dir) {
        return refuse(format!(
            "is one of the data dir's own files ({}), which it would replace; expected a \
             path outside the databases",
            data_dir.display()
        ));
    }
    if holds_a_database(&target) {
        return refuse(
            "is an SQLite database, which it would replace (every record in it lost); \
             expected a new file or an earlier export"
                .into(),
        );
    }
    Ok(())
}

/// The files of a data dir that an export must never replace: its databases, their WAL
/// and shared-memory files, and the lock.
const DATA_DIR_FILES: [&str; 6] = [
    cairn_storage::memory::FILE,
    cairn_storage::host::FILE,
    cairn_storage::buffer::FILE,
    cairn_storage::journal::FILE,
    cairn_storage::cache::FILE,
    "cairn.lock",
];

/// Whether `target` is one of [`DATA_DIR_FILES`] (or a database's `-wal`, `-shm` or
/// `-journal`) in `data_dir`.
fn is_data_dir_file(target: &Path, data_dir: &Path) -> bool {
    let (Some(name), Some(parent)) = (target.file_name(), target.parent()) else {
        return false;
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let same_dir = match (
        std::fs::canonicalize(parent),
        std::fs::canonicalize(data_dir),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    let name = name.to_string_lossy();
    let base = ["-wal", "-shm", "-journal"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))
        .unwrap_or(&name);
    same_dir && DATA_DIR_FILES.contains(&base)
}

/// Whether the file at `path` begins as an SQLite database does.
fn holds_a_database(path: &Path) -> bool {
    let mut header = [0u8; 16];
    std::fs::File::open(path)
        .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut header))
        .is_ok_and(|()| &header == b"SQLite format 3\0")
}

/// `cairn memory export`.
pub(super) fn export(memory: &LocalMemory, output: Option<&Path>, json: &bool) -> Result<()> {
    let records = match output {
        Some(path) => memory.export_file(path).map_err(memory_failure)?,
        None => {
            let stdout = std::io::stdout();
            let mut lock = stdout.lock();
            memory.export(&mut lock).map_err(memory_failure)?
        }
    };
    if let Some(path) = output {
        if *json {
            print_json(&json!({"records": records, "path": path}))?;
        } else {
            println!("exported {records} records to {}", path.display());
        }
    }
    Ok(())
}

/// `cairn memory import`.
/// Read and check the JSONL import at `file` (`-`: stdin) whole, before memory.db is opened,
/// so a refused import leaves nothing behind; `into_empty`: memory holds nothing yet, so
/// an entry superseded by one the file lacks is refused here too.
pub(super) fn read_import(file: &Path, into_empty: bool) -> Result<CheckedImport> {
    let (bytes, name) = if file.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
            .map_err(|e| anyhow::Error::new(e).context("cannot read stdin"))?;
        (bytes, "-: stdin".to_string())
    } else {
        let bytes =
            std::fs::read(file).map_err(|e| BadInput(format!("{}: {e}", file.display())))?;
        (bytes, file.display().to_string())
    };
    let text = utf8_text(bytes).map_err(|e| BadInput(format!("{name}: {e}")))?;
    let checked = CheckedImport::parse(&text).map_err(|e| import_failure(file, e))?;
    if into_empty {
        checked
            .check_successors(|_| Ok(false))
            .map_err(|e| import_failure(file, e))?;
    }
    Ok(checked)
}

/// An import's bytes as text, or where they stop being UTF-8: the line and column, as a
/// bad record is named (until 2026-12-02 the error said only that the stream was not UTF-8,
/// in a file of thousands of lines; found by an operator's test).
fn utf8_text(bytes: Vec<u8>) -> Result<String, String> {
    String::from_utf8(bytes).map_err(|e| {
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = valid.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let column = valid.len() - line_start + 1;
        let byte = e.as_bytes()[valid.len()];
        format!(
            "line {line}: byte 0x{byte:02X} at column {column} is not UTF-8: expected UTF-8 text"
        )
    })
}

/// `cairn memory import`: write `checked` (see [`read_import`]), reporting what was added.
pub(super) fn import(
    memory: &LocalMemory,
    file: &Path,
    checked: CheckedImport,
    json: &bool,
) -> Result<()> {
    let report = memory
        .import_checked(checked)
        .map_err(|e| import_failure(file, e))?;
    if *json {
        print_json(&report)?;
    } else {
        println!(
            "imported {} memories, {} sessions and {} audit rows ({} already present)",
            report.entries, report.sessions, report.audit, report.skipped
        );
    }
    Ok(())
}

/// An import's refusal as bad input naming the file, or the store's failure.
fn import_failure(file: &Path, e: MemoryError) -> anyhow::Error {
    match e {
        MemoryError::InvalidInput(text) => {
            BadInput(format!("{}: {text} (nothing was imported)", file.display())).into()
        }
        other => memory_failure(other),
    }
}

/// `cairn memory snapshot`.
pub(super) fn snapshot(
    memory: &LocalMemory,
    config: &HostConfig,
    output: Option<&Path>,
    hydrate: Option<(&Path, CheckedSnapshot)>,
    json: &bool,
) -> Result<()> {
    if let Some((source, checked)) = hydrate {
        let restored = memory.hydrate_checked(checked).map_err(memory_failure)?;
        if *json {
            print_json(&json!({"restored": restored}))?;
        } else {
            println!(
                "restored {restored} core memories from {}",
                source.display()
            );
        }
    } else {
        let path = output
            .map(Path::to_path_buf)
            .unwrap_or_else(|| config.data_dir.join(SNAPSHOT_FILE));
        let written = memory.export_snapshot(&path).map_err(memory_failure)?;
        if *json {
            print_json(&json!({"core_memories": written, "path": path}))?;
        } else {
            println!("wrote {written} core memories to {}", path.display());
        }
    }
    Ok(())
}

/// Read and check the snapshot `--hydrate` names, before memory.db is opened, so a
/// refused one leaves nothing behind.
pub(super) fn read_snapshot(source: &Path) -> Result<CheckedSnapshot> {
    if !source.is_file() {
        return Err(BadInput(format!("--hydrate: {} is not a file", source.display())).into());
    }
    CheckedSnapshot::read(source).map_err(memory_failure)
}

/// `cairn memory reindex`.
pub(super) fn reindex(
    memory: &LocalMemory,
    config: &HostConfig,
    force: &bool,
    json: &bool,
) -> Result<()> {
    if config.memory.embeddings.provider == crate::memory::embed::ProviderKind::None {
        return Err(BadInput(
            "memory.embeddings.provider is `none`: there is nothing to index with".into(),
        )
        .into());
    }
    // A model that is not there leaves no provider (see `embeddings_in_use`): a forced
    // reindex would clear the vectors kept for it and write none.
    if !memory.embeds() {
        let (_, why) = memory.embeddings_in_use();
        let why = why.unwrap_or_else(|| "no embeddings provider is in use".into());
        return Err(BadInput(format!("there is nothing to index with: {why}")).into());
    }
    if *force {
        memory.check_embedder().map_err(|e| {
            anyhow::anyhow!("the embeddings provider does not answer, so the vectors are kept: {e}")
        })?;
        memory.clear_vectors().map_err(memory_failure)?;
    }
    let total = memory.embedding_backlog().map_err(memory_failure)?;
    let bar = if *json {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(total).with_style(
            indicatif::ProgressStyle::with_template(
                "embedding {bar:40} {pos}/{len} ({per_sec}, eta {eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        )
    };
    let embedded = memory
        .embed_pending(|done| {
            bar.set_length(total.max(done));
            bar.set_position(done);
        })
        .map_err(memory_failure)?;
    bar.finish_and_clear();
    if *json {
        print_json(&json!({"embedded": embedded}))?;
    } else {
        println!("embedded {embedded} memories");
    }
    Ok(())
}

/// `cairn memory hygiene`.
pub(super) fn hygiene(memory: &LocalMemory, json: &bool) -> Result<()> {
    let report = memory.hygiene(true).map_err(memory_failure)?;
    if *json {
        print_json(&report)?;
    } else {
        println!("forgotten by retention: {:?}", report.forgotten);
        if let Some(n) = report.snapshot_entries {
            println!("snapshot: {n} core memories");
        }
    }
    Ok(())
}
