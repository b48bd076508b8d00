//! The little of HTTP/1.x the endpoint needs, as pure functions over bytes: where a
//! request head ends, and what it asks for (RFC 9112).
//!
//! Lenient where RFC 9112 allows it, strict elsewhere:
//! - a bare LF ends a line as CRLF does (section 2.2: a recipient MAY recognise a single
//!   LF as a line terminator and ignore any preceding CR), so `printf 'GET /metrics
//!   HTTP/1.1\n\n' | nc` works;
//! - empty lines before the request line are ignored (section 2.2);
//! - a missing `Host` is accepted: every host gets the same two paths;
//! - anything else that is not a request line of three parts separated by single spaces
//!   (a token, an origin- or absolute-form target, `HTTP/d.d`) followed by `name: value`
//!   fields is a 400: a bare CR inside a line, whitespace before a field's colon
//!   (section 5.1), obsolete line folding (section 5.2), control bytes, a TLS hello.

/// Finds the end of a request head as bytes arrive: the empty line after a non-empty one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct HeadScanner {
    /// Where the line being scanned starts.
    line_start: usize,
    /// How far the buffer has been scanned.
    scanned: usize,
    /// Whether a non-empty line (the request line) has been seen.
    seen_line: bool,
}

impl HeadScanner {
    /// Scans what `buf` holds beyond the previous call (the same growing buffer each
    /// time); returns the length of the head, its final empty line included, once the
    /// buffer holds all of it.
    pub(super) fn end(&mut self, buf: &[u8]) -> Option<usize> {
        while self.scanned < buf.len() {
            let i = self.scanned;
            self.scanned += 1;
            if buf[i] != b'\n' {
                continue;
            }
            let line = &buf[self.line_start..i];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            self.line_start = i + 1;
            if !line.is_empty() {
                self.seen_line = true;
            } else if self.seen_line {
                return Some(i + 1);
            }
        }
        None
    }
}

/// What a well-formed request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Request<'a> {
    /// The method, e.g. `GET`.
    pub method: &'a str,
    /// The path of the target, without its query.
    pub path: &'a str,
}

/// Why a request head is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Malformed (400), with a short reason for the body.
    BadRequest(&'static str),
    /// An HTTP version other than 1.x (505).
    Version,
}

/// Parses a complete request head (as delimited by [`HeadScanner`]).
///
/// # Errors
/// [`Refusal`] for a malformed head or an HTTP major version other than 1.
pub(super) fn parse(head: &[u8]) -> Result<Request<'_>, Refusal> {
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .skip_while(|l| l.is_empty());
    let request_line = lines.next().unwrap_or_default();
    let request = request_line_parts(request_line)?;
    for field in lines.take_while(|l| !l.is_empty()) {
        check_field(field)?;
    }
    Ok(request)
}

fn request_line_parts(line: &[u8]) -> Result<Request<'_>, Refusal> {
    let bad = Refusal::BadRequest;
    let line = std::str::from_utf8(line).map_err(|_| bad("request line is not ASCII"))?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("expected METHOD TARGET HTTP/1.1"));
    };
    if method.is_empty() || !method.bytes().all(is_tchar) {
        return Err(bad("malformed method"));
    }
    let path = target_path(target).ok_or(bad("malformed request target"))?;
    match version.as_bytes() {
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            if *major != b'1' {
                return Err(Refusal::Version);
            }
        }
        _ => return Err(bad("malformed HTTP version")),
    }
    Ok(Request { method, path })
}

/// The path of an origin-form (`/metrics?x`) or absolute-form
/// (`http://host:9401/metrics`) target; `None` for anything else.
fn target_path(target: &str) -> Option<&str> {
    if target.is_empty() || !target.bytes().all(|b| b.is_ascii_graphic()) {
        return None;
    }
    let origin = if target.starts_with('/') {
        target
    } else {
        let (scheme, rest) = target.split_once("://")?;
        if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
            return None;
        }
        rest.find('/').map_or("/", |i| &rest[i..])
    };
    Some(origin.split(['?', '#']).next().unwrap_or(origin))
}

/// A header field line: `token ":" value`, no whitespace before the colon, no folding,
/// no control bytes but HTAB in the value.
fn check_field(line: &[u8]) -> Result<(), Refusal> {
    let bad = Refusal::BadRequest;
    if matches!(line.first(), Some(b' ' | b'\t')) {
        return Err(bad("obsolete line folding"));
    }
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(bad("header field without a colon"))?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    if name.is_empty() || !name.iter().copied().all(is_tchar) {
        return Err(bad("malformed header field name"));
    }
    if value.iter().any(|&b| b != b'\t' && (b < 0x20 || b == 0x7f)) {
        return Err(bad("control character in a header field"));
    }
    Ok(())
}

/// A `tchar` of RFC 9110, section 5.6.2 (what tokens such as methods and field names
/// are made of).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end_fed(bytes: &[u8], chunk: usize) -> Option<usize> {
        let mut scanner = HeadScanner::default();
        let mut buf = Vec::new();
        for piece in bytes.chunks(chunk) {
            buf.extend_from_slice(piece);
            if let Some(end) = scanner.end(&buf) {
                return Some(end);
            }
        }
        None
    }

    #[test]
    fn the_head_ends_at_the_first_empty_line_after_the_request_line_however_it_arrives() {
        let crlf = b"GET / HTTP/1.1\r\nHost: x\r\n\r\nbody";
        let lf = b"\nGET / HTTP/1.1\nHost: x\n\nbody";
        for chunk in [1, 2, 5, 100] {
            assert_eq!(end_fed(crlf, chunk), Some(crlf.len() - 4));
            assert_eq!(end_fed(lf, chunk), Some(lf.len() - 4));
        }
        assert_eq!(end_fed(b"\r\n\r\n\r\n", 1), None, "only empty lines");
        assert_eq!(end_fed(b"GET / HTTP/1.1\r\nHost: x\r\n", 3), None);
    }

    #[test]
    fn well_formed_requests_give_their_method_and_path() {
        fn ok(head: &[u8]) -> Request<'_> {
            parse(head).unwrap()
        }
        assert_eq!(
            ok(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Request {
                method: "GET",
                path: "/metrics"
            }
        );
        assert_eq!(ok(b"HEAD /healthz?verbose=1 HTTP/1.0\n\n").path, "/healthz");
        assert_eq!(
            ok(b"GET http://h:9401/metrics HTTP/1.1\r\n\r\n").path,
            "/metrics"
        );
        assert_eq!(ok(b"GET http://h:9401 HTTP/1.1\r\n\r\n").path, "/");
        assert_eq!(ok(b"PATCH / HTTP/1.1\r\nX-Empty:\r\n\r\n").method, "PATCH");
        let obs_text = b"GET / HTTP/1.1\r\nUser-Agent: caf\xc3\xa9\tx\r\n\r\n";
        assert_eq!(ok(obs_text).path, "/");
    }

    #[test]
    fn other_versions_are_refused_as_such() {
        assert_eq!(parse(b"GET / HTTP/2.0\r\n\r\n"), Err(Refusal::Version));
        assert_eq!(parse(b"GET / HTTP/0.9\r\n\r\n"), Err(Refusal::Version));
    }

    #[test]
    fn malformed_heads_are_bad_requests() {
        for head in [
            &b""[..],
            b"\r\n\r\n",
            b"GET / HTTP/1.1 \r\n\r\n",
            b"GET\t/ HTTP/1.1\r\n\r\n",
            b"G(T / HTTP/1.1\r\n\r\n",
            b"GET * HTTP/1.1\r\n\r\n",
            b"GET ftp://x/ HTTP/1.1\r\n\r\n",
            b"GET /\x7f HTTP/1.1\r\n\r\n",
            b"GET /\xc3\xa9 HTTP/1.1\r\n\r\n",
            b"GET / HTTP/11\r\n\r\n",
            b"GET / http/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\n: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nX\x00: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n",
            b"GET / HTTP/1.1\r\n\tfolded\r\n\r\n",
        ] {
            assert!(
                matches!(parse(head), Err(Refusal::BadRequest(_))),
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
    }
}
