//! The LLM response cache on PostgreSQL: one cache for every host, so a completion one host
//! paid for answers the same request on another.

use super::{PgPool, PgUrl};
use crate::cache::{CacheStats, ResponseCacheStore};
use crate::writer::Receipt;
use crate::{Migrations, StorageError};

/// Migrations of the cache's tables on PostgreSQL.
pub const MIGRATIONS: Migrations = Migrations {
    name: "cache",
    scripts: &[include_str!(
        "../../../../migrations/postgres/cache/0001_init.sql"
    )],
};

/// Connections the cache keeps.
const CONNECTIONS: usize = 2;

/// The cache's tables on a PostgreSQL database.
pub struct PgCache {
    pool: PgPool,
}

impl PgCache {
    /// Connect to `url` and migrate the cache's tables.
    pub fn connect(url: &PgUrl) -> Result<Self, StorageError> {
        Ok(Self {
            pool: PgPool::connect_migrated(url, CONNECTIONS, "cache-pg", &MIGRATIONS)?,
        })
    }
}

impl ResponseCacheStore for PgCache {
    fn lookup(&self, key: &str, fresh_after: i64, now: i64) -> Receipt<Option<String>> {
        let key = key.to_string();
        self.pool.submit(move |tx| {
            let found: Option<String> = tx
                .query_opt(
                    "UPDATE cache_responses SET last_used = $3, hits = hits + 1
                      WHERE key = $1 AND created_at > $2
                      RETURNING completion",
                    &[&key, &fresh_after, &now],
                )?
                .map(|row| row.get(0));
            let counter = if found.is_some() { "hits" } else { "misses" };
            tx.execute(
                "UPDATE cache_counters SET value = value + 1 WHERE name = $1",
                &[&counter],
            )?;
            Ok(found)
        })
    }

    fn store(&self, key: &str, completion: String, now: i64, capacity: usize) -> Receipt<()> {
        let key = key.to_string();
        let capacity = i64::try_from(capacity.max(1)).unwrap_or(i64::MAX);
        self.pool.submit(move |tx| {
            tx.execute(
                "INSERT INTO cache_responses (key, completion, created_at, last_used)
                 VALUES ($1, $2, $3, $3)
                 ON CONFLICT (key) DO UPDATE SET completion = excluded.completion,
                     created_at = excluded.created_at, last_used = excluded.last_used",
                &[&key, &completion, &now],
            )?;
            tx.execute(
                "DELETE FROM cache_responses WHERE key IN
                   (SELECT key FROM cache_responses ORDER BY last_used DESC, created_at DESC
                    OFFSET $1)",
                &[&capacity],
            )?;
            Ok(())
        })
    }

    fn stats(&self) -> Result<CacheStats, StorageError> {
        self.pool.read(|client| {
            let count = |value: i64| u64::try_from(value).unwrap_or(0);
            let entries: i64 = client
                .query_one("SELECT count(*) FROM cache_responses", &[])?
                .get(0);
            let counter =
                |client: &mut postgres::Client, name: &str| -> Result<u64, StorageError> {
                    let value: i64 = client
                        .query_one("SELECT value FROM cache_counters WHERE name = $1", &[&name])?
                        .get(0);
                    Ok(count(value))
                };
            Ok(CacheStats {
                entries: count(entries),
                hits: counter(client, "hits")?,
                misses: counter(client, "misses")?,
            })
        })
    }
}
