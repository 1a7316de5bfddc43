//! The `storage:` connection string: a `postgres://` or `postgresql://` URL, or libpq's
//! `key=value` form. Every message shows it with the password replaced by `***`.

use std::fmt;
use std::str::FromStr;

use crate::StorageError;

/// Session options every connection sets: only warnings and errors come back as notices.
const QUIET: &str = "-c client_min_messages=warning";

/// A parsed PostgreSQL connection string and its redacted form.
#[derive(Clone)]
pub struct PgUrl {
    config: postgres::Config,
    redacted: String,
}

impl PgUrl {
    /// Whether `text` asks for PostgreSQL rather than naming a SQLite data directory.
    pub fn is_postgres(text: &str) -> bool {
        let text = text.trim_start();
        text.starts_with("postgres://") || text.starts_with("postgresql://")
    }

    /// The connection settings.
    pub fn config(&self) -> &postgres::Config {
        &self.config
    }

    /// The connection string with its password replaced by `***`.
    pub fn redacted(&self) -> &str {
        &self.redacted
    }

    /// The error for a server this URL could not reach.
    pub(crate) fn unreachable(&self, message: &str) -> StorageError {
        StorageError::Unreachable {
            url: self.redacted.clone(),
            message: message.to_string(),
        }
    }
}

impl FromStr for PgUrl {
    type Err = StorageError;

    fn from_str(text: &str) -> Result<Self, StorageError> {
        let redacted = redact(text);
        let mut config = text
            .parse::<postgres::Config>()
            .map_err(|e| StorageError::BadUrl {
                url: redacted.clone(),
                message: e.to_string(),
            })?;
        if config.get_dbname().is_none() {
            return Err(StorageError::BadUrl {
                url: redacted,
                message: "expected a database name (postgres://host/DATABASE)".into(),
            });
        }
        // The server's notices ("relation … already exists, skipping") are not worth a
        // line in the host's log each.
        let options = match config.get_options() {
            Some(given) => format!("{given} {QUIET}"),
            None => QUIET.to_string(),
        };
        config.options(&options);
        Ok(Self { config, redacted })
    }
}

impl fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

impl fmt::Display for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

/// `text` with every password hidden: the one in a URL's user info, a `password=`
/// query parameter, or a `password=` key of the `key=value` form.
pub fn redact(text: &str) -> String {
    let mut out = text.to_string();
    if let Some(scheme_end) = out.find("://") {
        let rest = scheme_end + 3;
        let authority_end = out[rest..].find(['/', '?']).map_or(out.len(), |i| rest + i);
        if let Some(at) = out[rest..authority_end].rfind('@') {
            let user_info = &out[rest..rest + at];
            if let Some(colon) = user_info.find(':') {
                out.replace_range(rest + colon + 1..rest + at, "***");
            }
        }
    }
    hide_after(&out, "password=")
}

/// Replace the value after every `key` (up to `&`, white space or the end) with `***`.
fn hide_after(text: &str, key: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(key) {
        let value = at + key.len();
        out.push_str(&rest[..value]);
        out.push_str("***");
        let end = rest[value..]
            .find(|c: char| c == '&' || c.is_whitespace())
            .map_or(rest.len(), |i| value + i);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redact("postgres://ada:s3cr:et@db.example:5432/cairn?sslmode=disable"),
            "postgres://ada:***@db.example:5432/cairn?sslmode=disable"
        );
        assert_eq!(
            redact("postgresql://ada@db/cairn?password=hunter2&application_name=x"),
            "postgresql://ada@db/cairn?password=***&application_name=x"
        );
        assert_eq!(
            redact("host=/tmp/pg user=ada password=hunter2 dbname=cairn"),
            "host=/tmp/pg user=ada password=*** dbname=cairn"
        );
        assert_eq!(redact("postgres://db/cairn"), "postgres://db/cairn");
    }

    #[test]
    fn a_bad_url_names_the_url_without_its_password() {
        let error = "postgres://ada:hunter2@db:notaport/cairn"
            .parse::<PgUrl>()
            .expect_err("bad port");
        let text = error.to_string();
        assert!(
            text.contains("postgres://ada:***@db:notaport/cairn"),
            "{text}"
        );
        assert!(!text.contains("hunter2"), "{text}");
        let error = "postgres://db".parse::<PgUrl>().expect_err("no database");
        assert!(
            error.to_string().contains("expected a database name"),
            "{error}"
        );
    }
}
