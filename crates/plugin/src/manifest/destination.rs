//! `capabilities.http` entries: where a plugin may send HTTP requests.
//!
//! An entry is `[scheme://]host[:port]`. Without a scheme only `https` is allowed; plain
//! `http` must be spelled out (`http://127.0.0.1:8080`), so a plugin never sends a token in
//! clear text by accident. Without a port the scheme's default (443, 80) is the only one.
//! `*.example.com` allows every subdomain of `example.com` (not `example.com` itself).

use std::fmt;

/// One parsed `capabilities.http` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpDestination {
    /// Whether plain `http` (rather than `https`) is what this entry allows.
    pub plain_http: bool,
    /// The host, lower case; for a wildcard, the suffix after `*.`.
    pub host: String,
    /// Whether `host` is a `*.` suffix.
    pub wildcard: bool,
    /// The one port allowed.
    pub port: u16,
}

impl HttpDestination {
    /// Parse an entry; `None` when it is not `[http://|https://]host[:port]` with a DNS name,
    /// an IPv4 literal or a bracketed IPv6 literal, and a port from 1 to 65535.
    pub fn parse(text: &str) -> Option<Self> {
        let (plain_http, rest) = match text.split_once("://") {
            Some(("https", rest)) => (false, rest),
            Some(("http", rest)) => (true, rest),
            Some(_) => return None,
            None => (false, text),
        };
        let (host, port) = split_port(rest)?;
        let port = port.unwrap_or(if plain_http { 80 } else { 443 });
        let (wildcard, host) = match host.strip_prefix("*.") {
            Some(suffix) => (true, suffix),
            None => (false, host),
        };
        is_host(host).then(|| Self {
            plain_http,
            host: host.to_ascii_lowercase(),
            wildcard,
            port,
        })
    }

    /// Whether a request to `host:port` over `https` (or plain http) is allowed by this
    /// entry. `host` is as the request's URI has it (IPv6 in brackets).
    pub fn allows(&self, https: bool, host: &str, port: u16) -> bool {
        if https == self.plain_http || port != self.port {
            return false;
        }
        let host = host.to_ascii_lowercase();
        if self.wildcard {
            host.strip_suffix(&self.host)
                .is_some_and(|prefix| prefix.len() > 1 && prefix.ends_with('.'))
        } else {
            host == self.host
        }
    }
}

impl fmt::Display for HttpDestination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.plain_http { "http" } else { "https" };
        let star = if self.wildcard { "*." } else { "" };
        write!(f, "{scheme}://{star}{}:{}", self.host, self.port)
    }
}

/// `host[:port]`, with `[v6]` brackets kept on the host.
fn split_port(text: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if text.starts_with('[') {
        let end = text.find(']')?;
        match &text[end + 1..] {
            "" => (&text[..=end], None),
            rest => (&text[..=end], Some(rest.strip_prefix(':')?)),
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let port = match port {
        Some(port) => Some(port.parse::<u16>().ok().filter(|p| *p != 0)?),
        None => None,
    };
    Some((host, port))
}

/// A DNS name, an IPv4 literal or a bracketed IPv6 literal.
fn is_host(host: &str) -> bool {
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6.parse::<std::net::Ipv6Addr>().is_ok();
    }
    host.parse::<std::net::Ipv4Addr>().is_ok()
        || (!host.is_empty()
            && host.len() <= 253
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && !label.starts_with('-')
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allows(entry: &str, https: bool, host: &str, port: u16) -> bool {
        HttpDestination::parse(entry)
            .expect("valid entry")
            .allows(https, host, port)
    }

    #[test]
    fn https_on_its_default_port_unless_told_otherwise() {
        assert!(allows("api.github.com", true, "api.github.com", 443));
        assert!(allows("API.GitHub.com", true, "api.github.COM", 443));
        assert!(
            !allows("api.github.com", false, "api.github.com", 80),
            "no clear text"
        );
        assert!(!allows("api.github.com", true, "api.github.com", 8443));
        assert!(allows("api.github.com:8443", true, "api.github.com", 8443));
        assert!(allows("http://127.0.0.1:8080", false, "127.0.0.1", 8080));
        assert!(!allows("http://127.0.0.1:8080", true, "127.0.0.1", 8080));
        assert!(allows("http://localhost", false, "localhost", 80));
        assert!(allows("https://[::1]:9000", true, "[::1]", 9000));
    }

    #[test]
    fn a_wildcard_allows_subdomains_only() {
        assert!(allows("*.example.com", true, "api.example.com", 443));
        assert!(allows("*.example.com", true, "a.b.example.com", 443));
        assert!(!allows("*.example.com", true, "example.com", 443));
        assert!(!allows("*.example.com", true, "badexample.com", 443));
    }

    #[test]
    fn malformed_entries_are_refused() {
        for bad in [
            "",
            "ftp://host",
            "host:0",
            "host:99999",
            "-bad.com",
            "exa mple.com",
            "https://",
            "[::1",
            "[nope]:80",
            "host:80/path",
            "*.",
        ] {
            assert_eq!(HttpDestination::parse(bad), None, "{bad}");
        }
    }
}
