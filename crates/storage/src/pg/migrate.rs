//! Versioned schemas on PostgreSQL. The table `cairn_schema` holds each store's version;
//! a store's pending scripts run in one transaction under an advisory lock, so hosts
//! starting together apply each migration once, and a host finding a newer schema than it
//! knows refuses to start.

use crate::{Migrations, StorageError};

use super::PgPool;

/// The advisory lock every host takes to migrate ("cairn" in ASCII).
const MIGRATION_LOCK: i64 = 0x0063_6169_726e;

/// Bring `migrations.name`'s schema up to date.
pub fn migrate(pool: &PgPool, migrations: &'static Migrations) -> Result<(), StorageError> {
    let url = pool.url().redacted().to_string();
    pool.submit_alone(move |tx| {
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS cairn_schema (
                 store       TEXT    PRIMARY KEY,
                 version     INTEGER NOT NULL,
                 migrated_at BIGINT  NOT NULL
             )",
        )?;
        let found: i32 = tx
            .query_opt(
                "SELECT version FROM cairn_schema WHERE store = $1",
                &[&migrations.name],
            )?
            .map_or(0, |row| row.get(0));
        let found = usize::try_from(found).unwrap_or(0);
        let known = migrations.scripts.len();
        if found > known {
            return Err(StorageError::SchemaTooNew {
                url: url.clone(),
                store: migrations.name.to_string(),
                found,
                known,
            });
        }
        for script in &migrations.scripts[found..] {
            tx.batch_execute(script)?;
        }
        if found < known {
            let version = i32::try_from(known).unwrap_or(i32::MAX);
            tx.execute(
                "INSERT INTO cairn_schema (store, version, migrated_at) VALUES ($1, $2, $3)
                 ON CONFLICT (store) DO UPDATE SET version = $2, migrated_at = $3",
                &[&migrations.name, &version, &crate::now_ms()],
            )?;
        }
        Ok(())
    })
    .wait()
}
