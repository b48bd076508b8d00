//! The little of HTTP/1.x the endpoint needs: one parser of a request head, fed the
//! bytes as they arrive (RFC 9112). It keeps no buffer and does no I/O, so the server,
//! the fuzz target (`fuzz/fuzz_targets/http_head.rs`) and the tests drive the same code.
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
//! A head is refused at its first impossible byte: as soon as the bytes so far cannot
//! begin an acceptable head (a TLS hello's first byte, garbage, a control byte in a
//! field), without waiting for a blank line that never comes. Two verdicts wait for the
//! end of a line: a CR is judged by the byte after it (it may begin a CRLF), and another
//! HTTP version (505, not 400) by the end of the request line.

/// What [`HeadParser::feed`] says of the bytes so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Feed {
    /// They begin an acceptable head, not yet complete.
    NeedMore,
    /// The head is complete (up to its empty line) and acceptable; bytes after it are
    /// not looked at.
    Done(Request),
    /// No head that begins with them is acceptable.
    Refused(Refusal),
}

/// What a well-formed request asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The method, e.g. `GET`.
    pub method: String,
    /// The path of the target, without its query.
    pub path: String,
}

/// Why a request head is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Malformed (400), with a short reason for the body.
    BadRequest(&'static str),
    /// An HTTP version other than 1.x (505).
    Version,
}

/// A request head's parser, fed its bytes as they arrive, in pieces of any size.
///
/// Each call of [`HeadParser::feed`] takes the bytes that follow those of the calls
/// before, and answers for all of them so far: the answer does not depend on how the
/// bytes are split. Once it is [`Feed::Done`] or [`Feed::Refused`], later bytes are not
/// looked at and every call gives that answer again.
#[derive(Clone, Debug, Default)]
pub struct HeadParser {
    /// The part of the head the next byte belongs to.
    at: At,
    /// Whether the last byte was a CR, judged by the byte after it.
    cr: bool,
    method: String,
    target: String,
    version: String,
    verdict: Option<Feed>,
}

/// The part of a head the next byte belongs to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum At {
    /// The method, or an empty line before the request line.
    #[default]
    Method,
    Target,
    Version,
    /// The start of a field line, or the empty line that ends the head.
    LineStart,
    /// A field's name.
    Name,
    /// A field's value.
    Value,
}

const PARTS: &str = "expected METHOD TARGET HTTP/1.1";
const METHOD: &str = "malformed method";
const TARGET: &str = "malformed request target";
const VERSION: &str = "malformed HTTP version";
const NAME: &str = "malformed header field name";
const FOLDED: &str = "obsolete line folding";
const NO_COLON: &str = "header field without a colon";
const CONTROL: &str = "control character in a header field";

impl HeadParser {
    /// Takes the bytes that follow those fed before, and says what all of them so far
    /// make.
    pub fn feed(&mut self, bytes: &[u8]) -> Feed {
        for &b in bytes {
            if self.verdict.is_some() {
                break;
            }
            match self.byte(b) {
                Ok(false) => {}
                Ok(true) => self.verdict = Some(Feed::Done(self.request())),
                Err(why) => self.verdict = Some(Feed::Refused(why)),
            }
        }
        self.verdict.clone().unwrap_or(Feed::NeedMore)
    }

    /// Takes one byte; `Ok(true)` once it ends the head.
    fn byte(&mut self, b: u8) -> Result<bool, Refusal> {
        if std::mem::take(&mut self.cr) {
            return match b {
                b'\n' => self.line_end(),
                _ => Err(self.stray_cr(b)),
            };
        }
        match b {
            b'\r' => self.cr = true,
            b'\n' => return self.line_end(),
            _ => self.content(b)?,
        }
        Ok(false)
    }

    /// A byte inside a line.
    fn content(&mut self, b: u8) -> Result<(), Refusal> {
        let bad = Refusal::BadRequest;
        match self.at {
            At::Method if b == b' ' && !self.method.is_empty() => self.at = At::Target,
            At::Method if is_tchar(b) => self.method.push(char::from(b)),
            At::Target if b == b' ' => {
                target_path(&self.target).ok_or(bad(TARGET))?;
                self.at = At::Version;
            }
            At::Target if b.is_ascii_graphic() => {
                self.target.push(char::from(b));
                if !target_may_begin(self.target.as_bytes()) {
                    return Err(bad(TARGET));
                }
            }
            At::Version if b == b' ' => return Err(bad(PARTS)),
            At::Version if version_may_go_on(self.version.len(), b) => {
                self.version.push(char::from(b));
            }
            At::LineStart if matches!(b, b' ' | b'\t') => {
                return Err(bad(FOLDED));
            }
            At::LineStart if is_tchar(b) => self.at = At::Name,
            At::Name if b == b':' => self.at = At::Value,
            At::Name if is_tchar(b) => {}
            At::Value if b == b'\t' || (b >= 0x20 && b != 0x7f) => {}
            _ => return Err(self.misplaced()),
        }
        Ok(())
    }

    /// Why a byte that its part of the head cannot hold is refused.
    fn misplaced(&self) -> Refusal {
        Refusal::BadRequest(match self.at {
            At::Method => METHOD,
            At::Target => TARGET,
            At::Version => VERSION,
            At::LineStart | At::Name => NAME,
            At::Value => CONTROL,
        })
    }

    /// A CR followed by `next`, not by LF: a byte no part of a line can hold, unless a
    /// space after it splits the request line into too many parts first.
    fn stray_cr(&self, next: u8) -> Refusal {
        if self.at == At::Version && next == b' ' {
            return Refusal::BadRequest(PARTS);
        }
        self.misplaced()
    }

    /// The end of a line (LF or CRLF); `Ok(true)` when it was the empty line that ends
    /// the head.
    fn line_end(&mut self) -> Result<bool, Refusal> {
        let bad = Refusal::BadRequest;
        match self.at {
            // An empty line before the request line.
            At::Method if self.method.is_empty() => {}
            At::Method | At::Target => return Err(bad(PARTS)),
            At::Version => {
                let v = self.version.as_bytes();
                if v.len() != 8 {
                    return Err(bad(VERSION));
                }
                if v[5] != b'1' {
                    return Err(Refusal::Version);
                }
                self.at = At::LineStart;
            }
            At::LineStart => return Ok(true),
            At::Name => return Err(bad(NO_COLON)),
            At::Value => self.at = At::LineStart,
        }
        Ok(false)
    }

    /// The request of a complete head.
    fn request(&self) -> Request {
        Request {
            method: self.method.clone(),
            path: target_path(&self.target).unwrap_or_default().to_owned(),
        }
    }
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

/// Whether a target of graphic bytes that begins with `so_far` could still become one
/// that [`target_path`] accepts: a path, or `http://` or `https://` in any case.
fn target_may_begin(so_far: &[u8]) -> bool {
    so_far.first() == Some(&b'/')
        || [&b"http://"[..], b"https://"].iter().any(|scheme| {
            let n = so_far.len().min(scheme.len());
            so_far[..n].eq_ignore_ascii_case(&scheme[..n])
        })
}

/// Whether `b` may follow the `len` bytes of a version so far, in `HTTP/d.d`.
fn version_may_go_on(len: usize, b: u8) -> bool {
    match len {
        0..=4 => b == b"HTTP/"[len],
        5 | 7 => b.is_ascii_digit(),
        6 => b == b'.',
        _ => false,
    }
}

/// A `tchar` of RFC 9110, section 5.6.2 (what tokens such as methods and field names
/// are made of).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer to `bytes` fed `chunk` bytes at a time, and how many bytes had been
    /// fed when it came (all of them for [`Feed::NeedMore`]).
    fn fed(bytes: &[u8], chunk: usize) -> (Feed, usize) {
        let mut parser = HeadParser::default();
        let mut seen = 0;
        for piece in bytes.chunks(chunk) {
            seen += piece.len();
            let answer = parser.feed(piece);
            if answer != Feed::NeedMore {
                return (answer, seen);
            }
        }
        (Feed::NeedMore, seen)
    }

    fn whole(bytes: &[u8]) -> Feed {
        HeadParser::default().feed(bytes)
    }

    fn request(method: &str, path: &str) -> Feed {
        Feed::Done(Request {
            method: method.into(),
            path: path.into(),
        })
    }

    #[test]
    fn the_head_ends_at_the_first_empty_line_after_the_request_line_however_it_arrives() {
        let crlf = b"GET / HTTP/1.1\r\nHost: x\r\n\r\nbody";
        let lf = b"\nGET / HTTP/1.1\nHost: x\n\nbody";
        for head in [&crlf[..], lf] {
            assert_eq!(fed(head, 1), (request("GET", "/"), head.len() - 4));
            for chunk in [2, 5, 100] {
                assert_eq!(fed(head, chunk).0, request("GET", "/"));
            }
        }
        assert_eq!(whole(b"\r\n\r\n\r\n"), Feed::NeedMore, "only empty lines");
        assert_eq!(whole(b""), Feed::NeedMore);
        assert_eq!(fed(b"GET / HTTP/1.1\r\nHost: x\r\n", 3).0, Feed::NeedMore);
    }

    #[test]
    fn well_formed_requests_give_their_method_and_path() {
        fn ok(head: &[u8]) -> Request {
            match whole(head) {
                Feed::Done(request) => request,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            ok(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Request {
                method: "GET".into(),
                path: "/metrics".into()
            }
        );
        assert_eq!(ok(b"HEAD /healthz?verbose=1 HTTP/1.0\n\n").path, "/healthz");
        assert_eq!(
            ok(b"GET http://h:9401/metrics HTTP/1.1\r\n\r\n").path,
            "/metrics"
        );
        assert_eq!(ok(b"GET http://h:9401 HTTP/1.1\r\n\r\n").path, "/");
        assert_eq!(ok(b"GET /x#frag HTTP/1.9\r\n\r\n").path, "/x");
        assert_eq!(ok(b"PATCH / HTTP/1.1\r\nX-Empty:\r\n\r\n").method, "PATCH");
        let obs_text = b"GET / HTTP/1.1\r\nUser-Agent: caf\xc3\xa9\tx\r\n\r\n";
        assert_eq!(ok(obs_text).path, "/");
    }

    #[test]
    fn other_versions_are_refused_as_such() {
        assert_eq!(
            whole(b"GET / HTTP/2.0\r\n\r\n"),
            Feed::Refused(Refusal::Version)
        );
        assert_eq!(
            whole(b"GET / HTTP/0.9\r\n\r\n"),
            Feed::Refused(Refusal::Version)
        );
    }

    #[test]
    fn malformed_heads_are_bad_requests() {
        for head in [
            &b"GET / HTTP/1.1 \r\n\r\n"[..],
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
                matches!(whole(head), Feed::Refused(Refusal::BadRequest(_))),
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
    }

    /// How many bytes of `head`, fed `chunk` at a time, had been fed when it was
    /// refused.
    fn refused_at(head: &[u8], chunk: usize) -> Option<usize> {
        match fed(head, chunk) {
            (Feed::Refused(_), at) => Some(at),
            _ => None,
        }
    }

    /// The start of a TLS ClientHello, as `curl https://` sends it.
    const TLS_HELLO: [u8; 11] = *b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";

    #[test]
    fn garbage_is_refused_at_its_first_impossible_byte() {
        for (head, at, why) in [
            (&TLS_HELLO[..], 1, METHOD),
            (b"hello world", 7, TARGET),
            (b"GET metrics", 5, TARGET),
            (b"GET /metrics HTTP/1.1 ", 22, PARTS),
            (b"GET /metrics HTTQ", 17, VERSION),
            (b"GET /metrics HTTP/1.1\r\nHost\x00", 28, NAME),
            (b"GET /metrics HTTP/1.1\r\nHost : x", 28, NAME),
            (b"GET /metrics HTTP/1.1\r\n folded", 24, FOLDED),
            (b"GET /metrics HTTP/1.1\r\nX: a\rb", 29, CONTROL),
            (b"GET ftp://x/ HTTP/1.1", 5, TARGET),
            (b"GET / HTTP/1.1\r ", 16, PARTS),
            (b"GET / HTTP/1.1\r\nHost\r\n", 22, NO_COLON),
        ] {
            let shown = String::from_utf8_lossy(head);
            assert_eq!(refused_at(head, 1), Some(at), "{shown:?}");
            assert_eq!(
                whole(head),
                Feed::Refused(Refusal::BadRequest(why)),
                "{shown:?}"
            );
        }
    }

    #[test]
    fn no_prefix_of_an_acceptable_head_is_refused() {
        for head in [
            &b"GET /metrics HTTP/1.1\r\nHost: x\r\nUser-Agent: caf\xc3\xa9\tx\r\n\r\n"[..],
            b"\r\n\nHEAD /healthz?v=1 HTTP/1.0\n\n",
            b"GET HTTPS://h:9401/metrics HTTP/1.1\r\nX-Empty:\r\n\r\n",
            b"GET http://h HTTP/1.1\r\n\r\n",
        ] {
            let shown = String::from_utf8_lossy(head);
            assert_eq!(refused_at(head, 1), None, "{shown:?}");
            assert!(matches!(whole(head), Feed::Done(_)), "{shown:?}");
        }
        // Another version is refused as such once its request line is complete.
        let http2 = b"GET / HTTP/2.0\r\nHost: x\r\n\r\n";
        assert_eq!(fed(http2, 1), (Feed::Refused(Refusal::Version), 16));
    }

    #[test]
    fn what_follows_the_head_is_not_judged() {
        let mut parser = HeadParser::default();
        let done = parser.feed(b"GET / HTTP/1.1\r\n\r\n\x16\x03");
        assert_eq!(done, request("GET", "/"));
        assert_eq!(parser.feed(b"\x00garbage"), done, "nor what comes later");
    }

    /// Bytes that would end `parser`'s head as an acceptable one, or as one of another
    /// HTTP version: what shows that the bytes fed so far could begin one.
    fn completion(parser: &HeadParser) -> Vec<u8> {
        let rest = match parser.at {
            At::Method if parser.method.is_empty() => "GET / HTTP/1.1\r\n\r\n".to_owned(),
            At::Method => " / HTTP/1.1\r\n\r\n".to_owned(),
            At::Target => {
                let t = parser.target.as_bytes();
                let scheme = ["http://", "https://"]
                    .into_iter()
                    .find(|s| t.len() < s.len() && t.eq_ignore_ascii_case(&s.as_bytes()[..t.len()]))
                    .map_or("", |s| &s[t.len()..]);
                format!("{scheme} HTTP/1.1\r\n\r\n")
            }
            At::Version => format!("{}\r\n\r\n", &"HTTP/1.1"[parser.version.len()..]),
            At::LineStart => "\r\n".to_owned(),
            At::Name => ": x\r\n\r\n".to_owned(),
            At::Value => "\r\n\r\n".to_owned(),
        };
        rest.into_bytes()
    }

    /// Fed a byte at a time, `bytes` are refused at the first byte that no acceptable
    /// head (nor one of another version) can hold: each prefix not refused, but for one
    /// ending in a CR (judged by the byte after it), can still be completed.
    fn refused_no_later_than_it_must(bytes: &[u8]) {
        let mut parser = HeadParser::default();
        for (n, &b) in bytes.iter().enumerate() {
            if parser.feed(&[b]) != Feed::NeedMore {
                return;
            }
            if parser.cr {
                continue;
            }
            let mut completed = parser.clone();
            let answer = completed.feed(&completion(&parser));
            assert!(
                matches!(answer, Feed::Done(_) | Feed::Refused(Refusal::Version)),
                "{:?} cannot be completed: {answer:?}",
                String::from_utf8_lossy(&bytes[..=n])
            );
        }
    }

    /// The same answer however `bytes` are split: at `cuts`, a byte at a time, whole.
    fn split_alike(bytes: &[u8], cuts: &[proptest::sample::Index]) {
        let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        at.sort_unstable();
        let mut parser = HeadParser::default();
        let mut from = 0;
        for to in at.into_iter().chain([bytes.len()]) {
            parser.feed(&bytes[from..to]);
            from = to;
        }
        let split = parser.feed(&[]);
        assert_eq!(split, whole(bytes));
        assert_eq!(fed(bytes, 1).0, split);
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

    fn cuts() -> impl proptest::strategy::Strategy<Value = Vec<proptest::sample::Index>> {
        proptest::collection::vec(proptest::prelude::any::<proptest::sample::Index>(), 0..6)
    }

    fn bytes() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)
    }

    proptest::proptest! {
        #[test]
        fn heads_of_common_and_odd_parts_get_one_answer_however_they_are_split(head in head(), cuts in cuts()) {
            split_alike(&head, &cuts);
        }

        #[test]
        fn any_bytes_get_one_answer_however_they_are_split(bytes in bytes(), cuts in cuts()) {
            split_alike(&bytes, &cuts);
        }

        #[test]
        fn heads_of_common_and_odd_parts_are_refused_no_later_than_they_must(head in head()) {
            refused_no_later_than_it_must(&head);
        }

        #[test]
        fn any_bytes_are_refused_no_later_than_they_must(bytes in bytes()) {
            refused_no_later_than_it_must(&bytes);
        }
    }
}
