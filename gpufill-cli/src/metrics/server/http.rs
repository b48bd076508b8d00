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
//!
//! A head is judged as it arrives ([`HeadChecker`]): as soon as the bytes so far cannot
//! begin a head that [`parse`] accepts (a TLS hello's first byte, garbage, a control
//! byte in a field), it is refused, without waiting for a blank line that never comes.

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

/// Judges a request head while it arrives: [`HeadChecker::check`] refuses the bytes so
/// far as soon as no head that [`parse`] accepts can begin with them. Complete lines
/// are checked once each, the line still arriving at every call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct HeadChecker {
    /// How far complete lines have been checked.
    checked: usize,
    /// Whether the request line has been seen (and passed).
    request_line: bool,
    /// Whether the head's final empty line has been seen: nothing after it is looked at.
    done: bool,
}

impl HeadChecker {
    /// Checks what `buf` holds (the same growing buffer each time).
    ///
    /// # Errors
    /// [`Refusal`]: the bytes so far cannot begin an acceptable head; [`parse`] would
    /// refuse any head that begins with them.
    pub(super) fn check(&mut self, buf: &[u8]) -> Result<(), Refusal> {
        while !self.done {
            let rest = buf.get(self.checked..).unwrap_or_default();
            let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
                return if self.request_line {
                    field_prefix(rest)
                } else {
                    request_line_prefix(rest)
                };
            };
            let line = &rest[..nl];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            self.checked += nl + 1;
            match (line.is_empty(), self.request_line) {
                (true, true) => self.done = true,
                (true, false) => {}
                (false, true) => check_field(line)?,
                (false, false) => {
                    request_line_parts(line)?;
                    self.request_line = true;
                }
            }
        }
        Ok(())
    }
}

/// A request line still arriving: the parts so far could still make one that
/// [`request_line_parts`] accepts.
fn request_line_prefix(partial: &[u8]) -> Result<(), Refusal> {
    let bad = Refusal::BadRequest;
    // A CR may be the first half of the CRLF that ends the line.
    let partial = partial.strip_suffix(b"\r").unwrap_or(partial);
    let mut parts = partial.split(|&b| b == b' ');
    let method = parts.next().unwrap_or_default();
    let (target, version) = (parts.next(), parts.next());
    if parts.next().is_some() {
        return Err(bad("expected METHOD TARGET HTTP/1.1"));
    }
    if !method.iter().copied().all(is_tchar) || (target.is_some() && method.is_empty()) {
        return Err(bad("malformed method"));
    }
    let target_ok = match (target, version) {
        (None, _) => true,
        // Complete: followed by a space.
        (Some(t), Some(_)) => std::str::from_utf8(t).ok().and_then(target_path).is_some(),
        (Some(t), None) => target_prefix(t),
    };
    if !target_ok {
        return Err(bad("malformed request target"));
    }
    if version.is_some_and(|v| !version_prefix(v)) {
        return Err(bad("malformed HTTP version"));
    }
    Ok(())
}

/// Whether a target still arriving could become one that [`target_path`] accepts.
fn target_prefix(t: &[u8]) -> bool {
    if !t.iter().all(u8::is_ascii_graphic) {
        return false;
    }
    if t.is_empty() || t[0] == b'/' {
        return true;
    }
    let lower = t.to_ascii_lowercase();
    [&b"http://"[..], b"https://"]
        .iter()
        .any(|scheme| lower.starts_with(scheme) || scheme.starts_with(&lower))
}

/// Whether a version still arriving could become `HTTP/d.d`.
fn version_prefix(v: &[u8]) -> bool {
    v.len() <= 8
        && v.iter().enumerate().all(|(i, &b)| match i {
            0..=4 => b == b"HTTP/"[i],
            5 | 7 => b.is_ascii_digit(),
            _ => b == b'.',
        })
}

/// A header field line still arriving: what [`check_field`] would accept so far.
fn field_prefix(partial: &[u8]) -> Result<(), Refusal> {
    let bad = Refusal::BadRequest;
    let partial = partial.strip_suffix(b"\r").unwrap_or(partial);
    if matches!(partial.first(), Some(b' ' | b'\t')) {
        return Err(bad("obsolete line folding"));
    }
    match partial.iter().position(|&b| b == b':') {
        None if partial.iter().copied().all(is_tchar) => Ok(()),
        None => Err(bad("malformed header field name")),
        Some(_) => check_field(partial),
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

    /// The first prefix of `head` that the checker refuses, fed `chunk` bytes at a time.
    fn refused_at(head: &[u8], chunk: usize) -> Option<usize> {
        refusal(head, chunk).map(|(at, _)| at)
    }

    fn refusal(head: &[u8], chunk: usize) -> Option<(usize, Refusal)> {
        let mut checker = HeadChecker::default();
        let mut buf = Vec::new();
        for piece in head.chunks(chunk) {
            buf.extend_from_slice(piece);
            if let Err(why) = checker.check(&buf) {
                return Some((buf.len(), why));
            }
        }
        None
    }

    #[test]
    fn garbage_is_refused_at_its_first_impossible_byte() {
        for (head, at) in [
            (&b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"[..], 1),
            (b"hello world", 7),
            (b"GET metrics", 5),
            (b"GET /metrics HTTP/1.1 ", 22),
            (b"GET /metrics HTTQ", 17),
            (b"GET /metrics HTTP/1.1\r\nHost\x00", 28),
            (b"GET /metrics HTTP/1.1\r\nHost : x", 28),
            (b"GET /metrics HTTP/1.1\r\n folded", 24),
            (b"GET /metrics HTTP/1.1\r\nX: a\rb", 29),
            (b"GET ftp://x/ HTTP/1.1", 5),
        ] {
            assert_eq!(
                refused_at(head, 1),
                Some(at),
                "{:?}",
                String::from_utf8_lossy(head)
            );
            assert!(refused_at(head, 100).is_some());
        }
    }

    #[test]
    fn every_prefix_of_an_acceptable_head_passes_the_checker() {
        for head in [
            &b"GET /metrics HTTP/1.1\r\nHost: x\r\nUser-Agent: caf\xc3\xa9\tx\r\n\r\n"[..],
            b"\r\n\nHEAD /healthz?v=1 HTTP/1.0\n\n",
            b"GET HTTPS://h:9401/metrics HTTP/1.1\r\nX-Empty:\r\n\r\n",
            b"GET http://h HTTP/1.1\r\n\r\n",
        ] {
            assert!(parse(head).is_ok());
            assert_eq!(
                refused_at(head, 1),
                None,
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
        // Another version is refused as such once its request line is complete.
        let http2 = b"GET / HTTP/2.0\r\nHost: x\r\n\r\n";
        assert_eq!(parse(http2), Err(Refusal::Version));
        assert_eq!(refusal(http2, 1), Some((16, Refusal::Version)));
    }

    #[test]
    fn what_follows_the_head_is_not_judged() {
        let mut checker = HeadChecker::default();
        assert!(checker.check(b"GET / HTTP/1.1\r\n\r\n\x16\x03").is_ok());
    }

    /// A request head from common and odd parts, maybe with one piece of trouble put
    /// in at some byte.
    fn head() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let pick = |options: &'static [&'static str]| proptest::sample::select(options);
        let eol = pick(&["\r\n", "\n"]);
        let line = (
            pick(&["GET", "HEAD", "POST", "G(T", ""]),
            pick(&[
                "/metrics",
                "/healthz?x=1",
                "http://h:9401/metrics",
                "HTTPS://h",
                "*",
                "ftp://x/",
            ]),
            pick(&["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/11", "http/1.1"]),
            eol.clone(),
        )
            .prop_map(|(m, t, v, e)| format!("{m} {t} {v}{e}"));
        let field = (
            pick(&["Host", "User-Agent", "X-Empty", "Bad Name", ""]),
            pick(&[" x", "", " caf\u{e9}\tx", " a\u{1}b"]),
            eol.clone(),
        )
            .prop_map(|(n, v, e)| format!("{n}:{v}{e}"));
        let trouble = pick(&[
            "", " ", "\r", "\n", "\t", "\u{0}", ":", "\u{7f}", "HTTP/", "/",
        ]);
        (
            pick(&["", "\r\n"]),
            line,
            proptest::collection::vec(field, 0..3),
            eol,
            trouble,
            any::<proptest::sample::Index>(),
        )
            .prop_map(|(pre, line, fields, end, trouble, at)| {
                let mut head = format!("{pre}{line}{}{end}", fields.concat()).into_bytes();
                let at = at.index(head.len() + 1);
                head.splice(at..at, trouble.bytes());
                head
            })
    }

    proptest::proptest! {
        /// The scanner, the checker and the parser agree (`check_head_parsers`) on
        /// heads made of common and odd parts, and on any bytes.
        #[test]
        fn the_head_parsers_agree_on_heads_of_common_and_odd_parts(head in head()) {
            super::super::check_head_parsers(&head);
        }

        #[test]
        fn the_head_parsers_agree_on_any_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            super::super::check_head_parsers(&bytes);
        }
    }
}
