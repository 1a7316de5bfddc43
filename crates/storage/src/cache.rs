//! `cache.db` behind [`ResponseCacheStore`]: completions by request key, expired by age
//! and evicted least-recently-used first, with hit and miss counters for `cairn status`.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::database::Database;
use crate::writer::Receipt;
use crate::{Migrations, StorageError};

/// The store's file in a data dir.
pub const FILE: &str = "cache.db";

/// Migrations of `cache.db`.
pub const MIGRATIONS: Migrations = Migrations {
    name: "cache",
    scripts: &[include_str!("../../../migrations/cache/0001_init.sql")],
};

/// The cache's size and how well it does. Field names are the `--json` keys.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct CacheStats {
    /// Completions kept.
    pub entries: u64,
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups that went to the provider.
    pub misses: u64,
}

/// Where cached completions live.
pub trait ResponseCacheStore: Send + Sync {
    /// The completion (JSON) under `key` if it was stored after `fresh_after` (ms), counting
    /// a hit (and marking it used at `now`) or a miss.
    fn lookup(&self, key: &str, fresh_after: i64, now: i64) -> Receipt<Option<String>>;
    /// Keep `completion` (JSON) under `key`, then drop the least recently used beyond
    /// `capacity`.
    fn store(&self, key: &str, completion: String, now: i64, capacity: usize) -> Receipt<()>;
    /// Entries, hits and misses.
    fn stats(&self) -> Result<CacheStats, StorageError>;
}

/// `cache.db`: a writer thread for writes (lookups count, so they write too), a connection
/// for reads.
pub struct SqliteCache {
    db: Database,
}

impl SqliteCache {
    /// Open (creating and migrating) `<data>/cache.db` and start its writer thread.
    pub fn open(data_dir: &Path) -> Result<Self, StorageError> {
        Ok(Self {
            db: Database::open(&data_dir.join(FILE), &MIGRATIONS, "cache-writer")?,
        })
    }

    /// The stats of `<data>/cache.db` without opening it for writing; `None` when there is
    /// no cache.
    pub fn read_stats(data_dir: &Path) -> Result<Option<CacheStats>, StorageError> {
        let path = data_dir.join(FILE);
        let Some(conn) = crate::open_read_only(&path)? else {
            return Ok(None);
        };
        read_stats(&conn)
            .map(Some)
            .map_err(|e| StorageError::open(&path, e))
    }
}

impl ResponseCacheStore for SqliteCache {
    fn lookup(&self, key: &str, fresh_after: i64, now: i64) -> Receipt<Option<String>> {
        let key = key.to_string();
        self.db.submit(move |conn| {
            let found: Option<String> = conn
                .prepare_cached(
                    "SELECT completion FROM responses WHERE key = ?1 AND created_at > ?2",
                )?
                .query_row(params![key, fresh_after], |r| r.get(0))
                .optional()?;
            let counter = if found.is_some() { "hits" } else { "misses" };
            conn.prepare_cached("UPDATE counters SET value = value + 1 WHERE name = ?1")?
                .execute(params![counter])?;
            if found.is_some() {
                conn.prepare_cached(
                    "UPDATE responses SET last_used = ?2, hits = hits + 1 WHERE key = ?1",
                )?
                .execute(params![key, now])?;
            }
            Ok(found)
        })
    }

    fn store(&self, key: &str, completion: String, now: i64, capacity: usize) -> Receipt<()> {
        let key = key.to_string();
        self.db.submit(move |conn| {
            conn.prepare_cached("INSERT INTO responses (key, completion, created_at, last_used) VALUES (?1, ?2, ?3, ?3)
                 ON CONFLICT (key) DO UPDATE SET completion = excluded.completion,
                     created_at = excluded.created_at, last_used = excluded.last_used")?.execute(params![key, completion, now])?;
            let kept: i64 = conn.prepare_cached("SELECT count(*) FROM responses")?.query_row([], |r| r.get(0))?;
            let over = kept - capacity.max(1) as i64;
            if over > 0 {
                conn.prepare_cached("DELETE FROM responses WHERE key IN
                         (SELECT key FROM responses ORDER BY last_used, created_at LIMIT ?1)")?.execute(params![over])?;
            }
            Ok(())
        })
    }

    fn stats(&self) -> Result<CacheStats, StorageError> {
        self.db.read(read_stats)
    }
}

fn read_stats(conn: &Connection) -> rusqlite::Result<CacheStats> {
    let counter = |name: &str| {
        conn.query_row(
            "SELECT value FROM counters WHERE name = ?1",
            params![name],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n as u64)
    };
    Ok(CacheStats {
        entries: conn.query_row("SELECT count(*) FROM responses", [], |r| r.get::<_, i64>(0))?
            as u64,
        hits: counter("hits")?,
        misses: counter("misses")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_sqlite_lookups_count_hits_and_misses_and_old_or_unused_entries_go() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = SqliteCache::open(dir.path()).expect("open");
        lookups_count_hits_and_misses_and_old_or_unused_entries_go(&cache);
        drop(cache);
        let stats = SqliteCache::read_stats(dir.path())
            .expect("read")
            .expect("a cache");
        assert_eq!(stats.entries, 2, "read without a host too");
    }

    #[test]
    fn on_postgres_lookups_count_hits_and_misses_and_old_or_unused_entries_go() {
        let Some(cluster) = crate::pg::cluster::TestCluster::shared() else {
            return;
        };
        let cache = crate::pg::cache::PgCache::connect(&cluster.fresh_database()).expect("connect");
        lookups_count_hits_and_misses_and_old_or_unused_entries_go(&cache);
    }

    fn lookups_count_hits_and_misses_and_old_or_unused_entries_go(cache: &dyn ResponseCacheStore) {
        assert_eq!(cache.lookup("a", 0, 10).wait().expect("lookup"), None);
        cache
            .store("a", "{\"x\":1}".into(), 10, 2)
            .wait()
            .expect("store");
        cache
            .store("b", "{\"x\":2}".into(), 20, 2)
            .wait()
            .expect("store");
        assert_eq!(
            cache.lookup("a", 0, 30).wait().expect("lookup").as_deref(),
            Some("{\"x\":1}")
        );
        assert_eq!(
            cache.lookup("a", 10, 31).wait().expect("lookup"),
            None,
            "stored at 10: not fresh after 10"
        );
        cache
            .store("c", "{\"x\":3}".into(), 40, 2)
            .wait()
            .expect("store");
        assert_eq!(
            cache.lookup("b", 0, 50).wait().expect("lookup"),
            None,
            "b was the least recently used of three with room for two"
        );
        assert_eq!(
            cache.stats().expect("stats"),
            CacheStats {
                entries: 2,
                hits: 1,
                misses: 3
            }
        );
    }
}
