//! How `cairn memory` prints memories, hits and times.

use super::*;

pub(super) fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M").to_string())
        .unwrap_or_else(|| ms.to_string())
}

pub(super) fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}

pub(super) fn entry_line(entry: &MemoryEntry) -> String {
    let mut state = String::new();
    if entry.forgotten_at.is_some() {
        state.push_str(" [forgotten]");
    }
    if let Some(by) = &entry.superseded_by {
        state.push_str(&format!(" [superseded by {by}]"));
    }
    format!(
        "{}  {:<10} {}  imp {:>2}  {}{}",
        entry.id,
        entry.kind.as_str(),
        time(entry.valid_from),
        entry.importance,
        one_line(&entry.content, 80),
        state
    )
}

pub(super) fn print_json(value: &impl serde::Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

pub(super) fn print_entry(entry: &MemoryEntry) {
    println!("id:          {}", entry.id);
    println!("kind:        {} ({})", entry.kind, entry.category);
    println!("content:     {}", entry.content);
    let scope = &entry.scope;
    println!(
        "scope:       agent {} / user {} / session {}",
        scope.agent_id.as_deref().unwrap_or("-"),
        scope.user_id.as_deref().unwrap_or("-"),
        scope.session_id.as_deref().unwrap_or("-")
    );
    println!("importance:  {}", entry.importance);
    if !entry.tags.is_empty() {
        println!("tags:        {}", entry.tags.join(", "));
    }
    if !entry.issue_refs.is_empty() || !entry.pr_refs.is_empty() {
        println!(
            "refs:        issues {:?}, pull requests {:?}",
            entry.issue_refs, entry.pr_refs
        );
    }
    if let Some(subject) = &entry.subject {
        println!(
            "states:      {subject} / {}",
            entry.predicate.as_deref().unwrap_or("-")
        );
    }
    if !entry.sources.is_empty() {
        println!("sources:     {}", entry.sources.join(", "));
    }
    println!(
        "valid:       {} → {}",
        time(entry.valid_from),
        entry.valid_to.map(time).unwrap_or_else(|| "now".into())
    );
    println!("recorded:    {}", time(entry.recorded_at));
    if let Some(by) = &entry.superseded_by {
        println!("superseded:  by {by}");
    }
    if let Some(at) = entry.forgotten_at {
        println!("forgotten:   {}", time(at));
    }
}

pub(super) fn print_hits(hits: &[RecallHit], explain: bool) {
    if hits.is_empty() {
        println!("nothing recalled");
        return;
    }
    for (rank, hit) in hits.iter().enumerate() {
        println!(
            "{:>2}. {:.3}  {}",
            rank + 1,
            hit.score,
            entry_line(&hit.entry)
        );
        if explain && let Some(backend) = &hit.explain.scored_by {
            println!(
                "      scored by the memory backend plugin `{backend}`, which gives its score and no parts"
            );
        } else if explain {
            let e = &hit.explain;
            let bm25 = e
                .bm25_raw
                .map(|raw| format!("{:.3} (raw {raw:.3e})", e.bm25))
                .unwrap_or_else(|| "no match".into());
            let cosine = match (e.cosine, e.centred_cosine) {
                (Some(plain), Some(centred)) => format!("{plain:.3} (centred {centred:.3})"),
                (Some(plain), None) => format!("{plain:.3}"),
                _ => "n/a".into(),
            };
            let age = if e.age_hours < 0.0 {
                format!("said {:.1} h after now", -e.age_hours)
            } else {
                format!("age {:.1} h", e.age_hours)
            };
            println!(
                "      bm25 {bm25} · cosine {cosine} · relevance {:.3} · importance {:.2} · recency {:.3} ({age})",
                e.relevance, e.importance, e.recency
            );
            if let Some(crowding) = e.crowding {
                println!(
                    "      crowding {crowding:.3}: alike that much to the candidates most like it"
                );
            }
            if let Some(time) = &e.time {
                println!("      time: {time}");
            }
            if let Some(adjusted) = &e.adjusted {
                println!("      {adjusted}");
            }
        }
    }
}
