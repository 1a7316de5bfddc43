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

/// `text` with every password hidden: the one in a URL's user info, a `password=` query
/// parameter, or a `password` key of libpq's `key=value` form (blanks around `=`, quoted
/// values and backslash escapes read as libpq reads them, so no part of one shows).
pub fn redact(text: &str) -> String {
    if text.contains("://") {
        redact_url(text)
    } else if text.contains('=') {
        redact_key_values(text)
    } else {
        // No connection string at all (`sqlite`, a typo): shown as it is, but from a
        // `password` word on, in case one was written without its `=`.
        match text.to_ascii_lowercase().find("password") {
            Some(at) => hidden_from(String::new(), &text[..at + "password".len()]),
            None => text.to_string(),
        }
    }
}

/// A URL with the password of its user info and of a `password=` parameter hidden. The user
/// info ends at the last `@` before the query, so a `/` in an unencoded password does not
/// end it early (a database name holding `@` is hidden too: better too much than too little).
fn redact_url(text: &str) -> String {
    let mut out = text.to_string();
    if let Some(scheme_end) = out.find("://") {
        let rest = scheme_end + 3;
        let query = out[rest..].find('?').map_or(out.len(), |i| rest + i);
        if let Some(at) = out[rest..query].rfind('@') {
            let user_info = &out[rest..rest + at];
            if let Some(colon) = user_info.find(':') {
                out.replace_range(rest + colon + 1..rest + at, "***");
            }
        }
    }
    let Some(query) = out.find('?') else {
        return out;
    };
    let (head, parameters) = out.split_at(query + 1);
    let parameters: Vec<String> = parameters
        .split('&')
        .map(|parameter| match parameter.split_once('=') {
            Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
            _ => parameter.to_string(),
        })
        .collect();
    format!("{head}{}", parameters.join("&"))
}

/// libpq's `key = value …` form with every `password` value hidden. A value is a run of
/// non-blanks (`\x` standing for `x`) or `'…'` (with `\'` and `\\`); what cannot be read
/// as keys and values (a stray `=`, an unclosed quote) is hidden from there on.
fn redact_key_values(text: &str) -> String {
    let mut chars = text.char_indices().peekable();
    let (mut out, mut copied) = (String::with_capacity(text.len()), 0);
    let at = |chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        chars.peek().map_or(text.len(), |&(i, _)| i)
    };
    let skip_blanks = |chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        while chars.next_if(|&(_, c)| c.is_whitespace()).is_some() {}
    };
    loop {
        skip_blanks(&mut chars);
        let key_start = at(&mut chars);
        if key_start == text.len() {
            break;
        }
        while chars
            .next_if(|&(_, c)| !c.is_whitespace() && c != '=')
            .is_some()
        {}
        let key = &text[key_start..at(&mut chars)];
        skip_blanks(&mut chars);
        if key.is_empty() || chars.next_if(|&(_, c)| c == '=').is_none() {
            return hidden_from(out, &text[copied..key_start]);
        }
        skip_blanks(&mut chars);
        let value_start = at(&mut chars);
        if !skip_value(&mut chars) {
            return hidden_from(out, &text[copied..value_start]);
        }
        if key.eq_ignore_ascii_case("password") {
            out.push_str(&text[copied..value_start]);
            out.push_str("***");
            copied = at(&mut chars);
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// Step over one value (quoted or not); false when a quote is never closed.
fn skip_value(chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>) -> bool {
    if chars.next_if(|&(_, c)| c == '\'').is_some() {
        while let Some((_, c)) = chars.next() {
            match c {
                '\\' => {
                    chars.next();
                }
                '\'' => return true,
                _ => {}
            }
        }
        return false;
    }
    while let Some((_, c)) = chars.next_if(|&(_, c)| !c.is_whitespace()) {
        if c == '\\' {
            chars.next();
        }
    }
    true
}

/// `out` and `kept`, then `***` for whatever of the text is left.
fn hidden_from(mut out: String, kept: &str) -> String {
    out.push_str(kept);
    out.push_str("***");
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
    fn a_password_is_hidden_however_libpq_would_read_it() {
        let cases = [
            (
                "host=127.0.0.1 port=55432 user=cairn password = s3cretPW dbname=cairn",
                "host=127.0.0.1 port=55432 user=cairn password = *** dbname=cairn",
            ),
            (
                "password='top secret words' dbname=c",
                "password=*** dbname=c",
            ),
            ("password=hunter\\ two dbname=c", "password=*** dbname=c"),
            (r"password='it\'s \\ x' user=a", "password=*** user=a"),
            ("PASSWORD=shout dbname=c", "PASSWORD=*** dbname=c"),
            ("password='open dbname=c", "password=***"),
            ("host=x password", "host=x ***"),
            ("sqlite", "sqlite"),
            ("password hunter2", "password***"),
            ("postgres://ada:pa/ss@db/x", "postgres://ada:***@db/x"),
            ("postgres://ada:pq1@ss@db/x", "postgres://ada:***@db/x"),
            (
                "postgres://db/x?password=a b&user=y",
                "postgres://db/x?password=***&user=y",
            ),
        ];
        for (given, shown) in cases {
            assert_eq!(redact(given), shown, "{given}");
        }
        // Whatever the client reads as the password never shows.
        for (given, _) in cases {
            if let Ok(config) = given.parse::<postgres::Config>()
                && let Some(password) = config.get_password()
            {
                let password = String::from_utf8_lossy(password);
                assert!(!redact(given).contains(password.as_ref()), "{given}");
            }
        }
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
