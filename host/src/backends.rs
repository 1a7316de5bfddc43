//! Tests that run once per storage backend: a [`Place`] is a fresh SQLite data dir or a
//! fresh database on the PostgreSQL test server, and [`on_each_backend!`] runs a test
//! function taking one on each (the PostgreSQL run passes, loudly skipped, when there is
//! no server to be had).

/// Where a test's stores live.
pub(crate) enum Place {
    /// A temporary data dir.
    Sqlite(tempfile::TempDir),
    /// A fresh database on the test server.
    Postgres(Box<cairn_storage::pg::PgUrl>),
}

impl Place {
    /// A fresh data dir.
    pub(crate) fn sqlite() -> Self {
        Place::Sqlite(tempfile::tempdir().expect("tempdir"))
    }

    /// A fresh database; None when no PostgreSQL server can be had.
    pub(crate) fn postgres() -> Option<Self> {
        let cluster = cairn_storage::pg::cluster::TestCluster::shared()?;
        Some(Place::Postgres(Box::new(cluster.fresh_database())))
    }
}

/// Each named test function (taking a [`Place`]) once on SQLite and once on PostgreSQL, as
/// `name::sqlite` and `name::postgres`.
macro_rules! on_each_backend {
    ($($test:ident),*) => {$(
        mod $test {
            #[test]
            fn sqlite() {
                super::$test($crate::backends::Place::sqlite())
            }
            #[test]
            fn postgres() {
                if let Some(place) = $crate::backends::Place::postgres() {
                    super::$test(place)
                }
            }
        }
    )*};
    ($(async $test:ident),*) => {$(
        mod $test {
            #[tokio::test]
            async fn sqlite() {
                super::$test($crate::backends::Place::sqlite()).await
            }
            #[tokio::test]
            async fn postgres() {
                if let Some(place) = $crate::backends::Place::postgres() {
                    super::$test(place).await
                }
            }
        }
    )*};
}

pub(crate) use on_each_backend;
