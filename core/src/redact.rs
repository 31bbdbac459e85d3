//! Secrets out of every text a reader sees: broker and store URLs come from Kubernetes Secrets
//! with their passwords (`nats://user:s3cret@host`, `redis://:s3cret@host/0`,
//! `rediss://host?password=s3cret`), and error texts, termination records, status fields,
//! Events and log lines quote those URLs to say what failed.
//!
//! [`redact_text`] rewrites every URL inside a text: the password of the user information
//! becomes `***` (the user name stays, it tells which account), a user information without a
//! password (a token, `nats://t0ken@host`) becomes `***`, and so does the value of a query
//! parameter that names a secret. Everything else — scheme, host, port, path — stays, so the
//! text still says where the failure was. Idempotent: redacting twice changes nothing more.

/// What replaces a secret.
pub const MASK: &str = "***";

/// Query parameters whose values are secrets (compared case-insensitively).
const SECRET_PARAMS: [&str; 10] = [
    "password",
    "pass",
    "passwd",
    "pwd",
    "token",
    "auth_token",
    "access_token",
    "secret",
    "auth",
    "nkey",
];

/// Characters that end a URL inside free text.
fn ends_url(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>')
}

/// One URL (no surrounding text) with its secrets masked.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let (head, rest) = url.split_at(scheme_end + 3);
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rfind('@') {
        Some(at) => {
            let (userinfo, host) = authority.split_at(at);
            match userinfo.split_once(':') {
                Some((user, _password)) => format!("{user}:{MASK}{host}"),
                None => format!("{MASK}{host}"),
            }
        }
        None => authority.to_owned(),
    };
    format!("{head}{authority}{}", redact_query(tail))
}

/// `tail` (path, query, fragment) with secret query values masked.
fn redact_query(tail: &str) -> String {
    let Some(q) = tail.find('?') else {
        return tail.to_owned();
    };
    let (path, query) = tail.split_at(q + 1);
    let (query, fragment) = match query.find('#') {
        Some(h) => query.split_at(h),
        None => (query, ""),
    };
    let params: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) if SECRET_PARAMS.iter().any(|s| s.eq_ignore_ascii_case(k)) => {
                // Closing punctuation of the sentence around the URL is not the value's.
                let kept = v.find([')', ']', '}', ',', ';']).map_or("", |i| &v[i..]);
                format!("{k}={MASK}{kept}")
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{path}{}{fragment}", params.join("&"))
}

/// `text` with every URL in it redacted by [`redact_url`]; text without `://` is returned as
/// is (no allocation beyond the copy).
pub fn redact_text(text: &str) -> String {
    if !text.contains("://") {
        return text.to_owned();
    }
    // The scheme: the letters, digits, `+`, `-`, `.` just before a `://`; it starts after the
    // last other character, however many bytes that one takes.
    let scheme_start = |s: &str, sep: usize| {
        s[..sep]
            .char_indices()
            .rev()
            .find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |(i, c)| i + c.len_utf8())
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(sep) = rest.find("://") {
        let start = scheme_start(rest, sep);
        out.push_str(&rest[..start]);
        let after = sep + 3;
        // A URL ends at a delimiter, or where the next URL of a list begins.
        let delimited = rest[after..]
            .find(ends_url)
            .map_or(rest.len(), |i| after + i);
        let next_url = rest[after..]
            .find("://")
            .map(|i| scheme_start(rest, after + i))
            .filter(|&n| n > after);
        let url_end = next_url.map_or(delimited, |n| n.min(delimited));
        out.push_str(&redact_url(&rest[start..url_end]));
        rest = &rest[url_end..];
    }
    out.push_str(rest);
    out
}

/// Credentials a broker URL carried in its user information.
#[derive(Clone, PartialEq, Eq)]
pub enum UrlCredentials {
    /// `user:password@`.
    UserPassword {
        /// The user name.
        user: String,
        /// The password.
        password: String,
    },
    /// `token@`.
    Token(String),
}

impl std::fmt::Debug for UrlCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UrlCredentials::UserPassword { user, .. } => write!(f, "UserPassword({user}:{MASK})"),
            UrlCredentials::Token(_) => write!(f, "Token({MASK})"),
        }
    }
}

/// A URL, or a comma list of them, without user information, and the credentials the first
/// one carried. Why: a client library that logs its server addresses (async-nats does, at
/// debug level, with the password in clear) must never be given them; the credentials go
/// through its options instead. Percent-escapes in the user information are decoded.
pub fn split_credentials(urls: &str) -> (String, Option<UrlCredentials>) {
    let mut found = None;
    let stripped: Vec<String> = urls
        .split(',')
        .map(|url| {
            let Some(scheme_end) = url.find("://") else {
                return url.to_owned();
            };
            let (head, rest) = url.split_at(scheme_end + 3);
            let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            let Some(at) = rest[..authority_end].rfind('@') else {
                return url.to_owned();
            };
            let userinfo = &rest[..at];
            if found.is_none() && !userinfo.is_empty() {
                found = Some(match userinfo.split_once(':') {
                    Some((user, password)) => UrlCredentials::UserPassword {
                        user: percent_decode(user),
                        password: percent_decode(password),
                    },
                    None => UrlCredentials::Token(percent_decode(userinfo)),
                });
            }
            format!("{head}{}", &rest[at + 1..])
        })
        .collect();
    (stripped.join(","), found)
}

/// `%XX` escapes decoded (RFC 3986 user information); a malformed escape is kept as is.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// [`redact_text`] of an owned text, without a copy when it quotes no URL (the common case:
/// every error text passes through here).
pub fn redact_string(text: String) -> String {
    if text.contains("://") {
        redact_text(&text)
    } else {
        text
    }
}

/// A JSON value with every string in it redacted (context values of an error record).
pub fn redact_json(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) if s.contains("://") => Value::String(redact_text(&s)),
        Value::Array(items) => Value::Array(items.into_iter().map(redact_json).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, redact_json(v))).collect())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_tokens_and_secret_params_are_masked() {
        for (url, want) in [
            ("nats://user:s3cret@h:4222", "nats://user:***@h:4222"),
            (
                "nats://vf:s3cret-Pa55@127.0.0.1:34143",
                "nats://vf:***@127.0.0.1:34143",
            ),
            ("redis://:s3cret@h:6379/0", "redis://:***@h:6379/0"),
            ("nats://t0ken@h", "nats://***@h"),
            (
                "rediss://h:6380/0?password=s3cret&ssl_cert_reqs=none",
                "rediss://h:6380/0?password=***&ssl_cert_reqs=none",
            ),
            ("nats://h?Token=s3cret#frag", "nats://h?Token=***#frag"),
            ("nats://127.0.0.1:4222", "nats://127.0.0.1:4222"),
            ("file:///var/ledger", "file:///var/ledger"),
            ("redis://u:p%40ss@h/0", "redis://u:***@h/0"),
        ] {
            assert_eq!(redact_url(url), want, "{url}");
            assert_eq!(redact_url(want), want, "idempotent: {want}");
        }
    }

    #[test]
    fn every_url_in_a_text_is_redacted_and_the_rest_kept() {
        let text = "could not connect to NATS at nats://a:s3cret@h1:4222: refused; \
                    fallback 'redis://:hunter2@h2/0' failed (see rediss://h3?password=x).";
        let got = redact_text(text);
        for secret in ["s3cret", "hunter2", "password=x"] {
            assert!(!got.contains(secret), "{got}");
        }
        assert_eq!(
            got,
            "could not connect to NATS at nats://a:***@h1:4222: refused; \
             fallback 'redis://:***@h2/0' failed (see rediss://h3?password=***)."
        );
        assert_eq!(redact_text("no url here: a:b@c"), "no url here: a:b@c");
        assert_eq!(
            redact_text("nats://u:p@h1,nats://v:q@h2"),
            "nats://u:***@h1,nats://v:***@h2"
        );
    }

    #[test]
    fn credentials_are_split_off_every_url_of_a_list() {
        let (urls, creds) = split_credentials("nats://vf:s3%40cret@h1:4222,nats://vf:s3%40cret@h2");
        assert_eq!(urls, "nats://h1:4222,nats://h2");
        assert_eq!(
            creds,
            Some(UrlCredentials::UserPassword {
                user: "vf".into(),
                password: "s3@cret".into()
            })
        );
        assert!(
            !format!("{creds:?}").contains("s3"),
            "Debug shows no secret"
        );
        let (urls, creds) = split_credentials("tls://t0ken@h:4443/x");
        assert_eq!(
            (urls.as_str(), creds),
            (
                "tls://h:4443/x",
                Some(UrlCredentials::Token("t0ken".into()))
            )
        );
        let (urls, creds) = split_credentials("nats://127.0.0.1:4222");
        assert_eq!((urls.as_str(), creds), ("nats://127.0.0.1:4222", None));
    }

    #[test]
    fn json_strings_are_redacted_at_any_depth() {
        let v = serde_json::json!({"url": "nats://u:s3cret@h", "n": 1, "l": ["redis://:x@h/0"]});
        let got = redact_json(v).to_string();
        assert!(!got.contains("s3cret") && !got.contains(":x@"), "{got}");
    }

    #[test]
    fn a_multibyte_character_before_a_scheme_is_kept_whole() {
        // The scheme starts after the last character that cannot be in one; when that one
        // takes several bytes, the cut must fall after all of them (a cut inside panics).
        assert_eq!(
            redact_text("é://u:s3cret@h and übernats://u:pw@h"),
            "é://u:***@h and übernats://u:***@h"
        );
        assert_eq!(redact_text("VF_\u{fffd}://h"), "VF_\u{fffd}://h");
        assert_eq!(
            redact_text("\u{fffd}nats://u:pw@h"),
            "\u{fffd}nats://u:***@h"
        );
    }
}
