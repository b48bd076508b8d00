//! A small HTTP/1.x server for `GET /metrics` and `GET /healthz` (also `/health`), on
//! `std::net`.
//!
//! Nothing a client does can stall it for others, and nothing it does can make a fill
//! loop wait (the loops only `try_lock` their snapshot):
//! - **concurrent**: an acceptor thread hands each connection to a thread of its own, up
//!   to [`ServerSettings::max_connections`] at once;
//! - **slow clients give way** (`server/slots.rs`): when every slot is taken, a newcomer
//!   takes the slot of a connection that is only being drained, else of the oldest one
//!   still sending its head (answered `408`), so slow clients and floods cannot keep a
//!   health probe, which sends its whole head at once, from being answered at once;
//!   a connection that had sent nothing when accepted, less than 5 ms ago, is not
//!   evicted, for a probe's head may be on its way; only when every slot is held by
//!   such a connection, or even the threads of evicted connections reach twice the
//!   limit, is a newcomer answered `503` (from a thread of its own, after up to 5 ms
//!   for a health probe's head that had not arrived when the acceptor looked:
//!   `Refuser`);
//! - **health probes first**: a `/healthz` or `/health` probe whose whole head has
//!   arrived when it is accepted is answered by the acceptor, before it needs a slot,
//!   and one evicted after its head arrived is answered all the same;
//! - **one deadline per request**: the head must arrive within
//!   [`ServerSettings::request_deadline`] (2 s) in total, however it trickles in (the read
//!   timeout shrinks to what is left of the deadline before each read), else `408`; the
//!   response gets the same budget for writing;
//! - **strict parsing** (one parser, [`http::HeadParser`], fed each read as it comes):
//!   `400` for a malformed head, as soon as the bytes so far cannot begin a good one (a
//!   TLS hello or garbage is answered at its first byte, not after the deadline; bare LF
//!   line ends are accepted, see there), `431` for a head that has not ended within
//!   [`ServerSettings::max_head_bytes`] (8 KiB; only those are judged), `405` for
//!   methods other than GET and HEAD, `404` for other paths, `505` for HTTP versions
//!   other than 1.x; one request per connection (`Connection: close`), and
//!   unread input is drained briefly after the response so the client reads the answer
//!   rather than a reset.
//!
//! The server knows nothing of where snapshots live: it serves an [`Exposition`] (the
//! metrics text and the workers' [`Health`]). [`start`] serves a runtime [`Registry`]
//! through [`RegistryExposition`].

pub mod http;
mod slots;

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use super::render::CONTENT_TYPE;
use super::{GpuSnapshot, Process, Registry};
use http::{Feed, HeadParser, Refusal, Request};
use slots::{Phase, Slot, Slots};

/// What the endpoint serves.
pub trait Exposition: Send + Sync + 'static {
    /// The Prometheus text of every series, for `/metrics`.
    fn metrics(&self) -> String;
    /// Whether every worker ticks, for `/healthz`.
    fn health(&self) -> Health;
}

/// A pair of closures serves as an exposition: `(metrics, health)`.
impl<M, H> Exposition for (M, H)
where
    M: Fn() -> String + Send + Sync + 'static,
    H: Fn() -> Health + Send + Sync + 'static,
{
    fn metrics(&self) -> String {
        (self.0)()
    }
    fn health(&self) -> Health {
        (self.1)()
    }
}

/// The workers' health as `/healthz` reports it: `200 ok` when `failing` is empty, else
/// `503` with one line per entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Health {
    /// One line per GPU whose worker has not ticked yet, not recently, or has ended,
    /// naming the GPU and saying why (e.g. `gpu 1 (GPU-...): no tick for 12.0 s`).
    pub failing: Vec<String>,
}

impl Health {
    /// Every worker is well.
    pub fn ok() -> Self {
        Health::default()
    }

    /// Whether every worker is well.
    pub fn is_ok(&self) -> bool {
        self.failing.is_empty()
    }
}

/// Limits of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerSettings {
    /// Connections served at once; a newcomer beyond that takes the slot of one that is
    /// slow to ask (see the module docs).
    pub max_connections: usize,
    /// Time a client has to send its whole request head; the response has as long to
    /// be written.
    pub request_deadline: Duration,
    /// The longest request head accepted; a longer one is answered `431`.
    pub max_head_bytes: usize,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            max_connections: 32,
            request_deadline: Duration::from_secs(2),
            max_head_bytes: 8192,
        }
    }
}

/// The runtime's [`Registry`] as an [`Exposition`]: its Prometheus text, and each
/// snapshot judged by [`GpuSnapshot::unhealthy`] against its own `stall_after` (the
/// same rule as `gpufill_worker_up`).
#[derive(Debug)]
pub struct RegistryExposition {
    registry: Arc<Registry>,
    process: Process,
}

impl RegistryExposition {
    /// Serves `registry`, with `process`'s own series.
    pub fn new(registry: Arc<Registry>, process: Process) -> Self {
        RegistryExposition { registry, process }
    }
}

impl Exposition for RegistryExposition {
    fn metrics(&self) -> String {
        let mut text =
            gpufill_runtime::prometheus::render(&self.registry.snapshots(), &self.process);
        text.push_str(&super::RELOADS.render());
        text
    }
    fn health(&self) -> Health {
        health_of(&self.registry.snapshots(), Instant::now())
    }
}

/// The health of these snapshots at `now` (monotonic): one line, naming the GPU, for
/// each whose worker has not ticked yet, has ended, or has not ticked within its
/// `stall_after` ([`GpuSnapshot::unhealthy`]).
pub fn health_of(snapshots: &[GpuSnapshot], now: Instant) -> Health {
    let failing = snapshots
        .iter()
        .filter_map(|s| {
            let why = s.unhealthy(now)?;
            Some(format!("gpu {} ({}): {why}", s.labels.index, s.labels.uuid))
        })
        .collect();
    Health { failing }
}

/// Binds `addr` and serves the registry (see [`RegistryExposition`]) with the default
/// [`ServerSettings`]. Returns the bound address (its port is the chosen one when `addr`
/// asked for port 0).
///
/// # Errors
/// The bind error (address in use, not an address of this host, no permission).
pub fn start(addr: SocketAddr, registry: Arc<Registry>) -> io::Result<SocketAddr> {
    let process = super::this_process(gpufill_runtime::PidView::Host);
    let exposition = Arc::new(RegistryExposition::new(registry, process));
    serve(addr, exposition, ServerSettings::default())
}

/// Binds `addr` and serves `exposition` from background threads. Returns the bound
/// address.
///
/// # Errors
/// The bind error, or the error of spawning the acceptor thread.
pub fn serve(
    addr: SocketAddr,
    exposition: Arc<dyn Exposition>,
    settings: ServerSettings,
) -> io::Result<SocketAddr> {
    serve_on(TcpListener::bind(addr)?, exposition, settings)
}

/// Whether a failure to bind may go away by itself: the port held by another process
/// (which may end), or an address not yet configured on this host (an interface still
/// coming up at boot). Anything else (no permission for the port, an address of
/// another family) needs the operator.
pub fn bind_may_recover(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::AddrInUse | io::ErrorKind::AddrNotAvailable
    )
}

/// Keeps trying to bind `addr` in the background, after `backoff`'s delays (each
/// failure doubles the next, up to its cap), and serves `exposition` once it can;
/// `bound` is called with the bound address then. Gives up only on an error that
/// [`bind_may_recover`] says will not go away.
///
/// # Errors
/// The error of spawning the thread that retries.
pub fn serve_retrying(
    addr: SocketAddr,
    exposition: Arc<dyn Exposition>,
    settings: ServerSettings,
    mut backoff: gpufill_core::Backoff,
    bound: impl FnOnce(SocketAddr) + Send + 'static,
) -> io::Result<()> {
    thread::Builder::new()
        .name("gpufill-metrics-bind".into())
        .spawn(move || {
            for attempt in 1u64.. {
                thread::sleep(backoff.next_delay());
                let error = match TcpListener::bind(addr) {
                    Ok(listener) => match serve_on(listener, Arc::clone(&exposition), settings) {
                        Ok(at) => return bound(at),
                        Err(e) => e,
                    },
                    Err(e) => e,
                };
                if !bind_may_recover(&error) {
                    warn!("metrics: giving up on {addr}: {error}");
                    return;
                }
                // At the cap of 60 s, about once in 10 minutes.
                if attempt % 10 == 0 {
                    warn!(attempt, "metrics: still cannot serve on {addr}: {error}");
                } else {
                    debug!(attempt, "metrics: cannot serve on {addr}: {error}");
                }
            }
        })?;
    Ok(())
}

/// Serves `exposition` on `listener` from background threads. Returns its address.
///
/// # Errors
/// The error of reading the listener's address or spawning the acceptor thread.
pub fn serve_on(
    listener: TcpListener,
    exposition: Arc<dyn Exposition>,
    settings: ServerSettings,
) -> io::Result<SocketAddr> {
    let bound = listener.local_addr()?;
    if let Err(e) = widen_backlog(&listener) {
        debug!("metrics: the listen backlog stays at std's 128: {e}");
    }
    let refuser = Refuser::spawn(Arc::clone(&exposition))?;
    let shared = Arc::new(Shared {
        exposition,
        settings,
        slots: Slots::new(settings.max_connections),
        refuser,
    });
    thread::Builder::new()
        .name("gpufill-metrics".into())
        .spawn(move || accept_loop(&listener, &shared))?;
    Ok(bound)
}

struct Shared {
    exposition: Arc<dyn Exposition>,
    settings: ServerSettings,
    slots: Arc<Slots>,
    refuser: Refuser,
}

/// A connection handler's stack: it parses a head of at most 8 KiB and renders text.
const HANDLER_STACK: usize = 256 * 1024;

/// The pause after a failed accept (out of file descriptors), so the acceptor does not
/// spin while the condition lasts.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(stream) => stream,
            Err(e) => {
                debug!("metrics accept: {e}");
                thread::sleep(ACCEPT_PAUSE);
                continue;
            }
        };
        let look = answer_probe_at_once(&stream, shared.exposition.as_ref());
        if look == Look::Answered {
            continue;
        }
        let Some(slot) = shared
            .slots
            .take(&stream, Instant::now(), look == Look::Silent)
        else {
            debug!(
                "metrics: {} connections just accepted, or as many ending, refusing",
                shared.settings.max_connections
            );
            shared.refuser.refuse(stream);
            continue;
        };
        let shared = Arc::clone(shared);
        let spawned = thread::Builder::new()
            .name("gpufill-metrics-conn".into())
            .stack_size(HANDLER_STACK)
            .spawn(move || {
                if let Err(e) = handle(stream, &shared, &slot) {
                    debug!("metrics connection: {e}");
                }
                drop(slot);
            });
        if let Err(e) = spawned {
            // The closure, its stream and its slot are dropped: the connection closes.
            debug!("metrics: cannot start a connection thread: {e}");
        }
    }
}

/// What the acceptor's look at a new connection found ([`answer_probe_at_once`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Look {
    /// A whole health probe, which it answered.
    Answered,
    /// Nothing yet: a probe's head may be on its way (the look can come between a
    /// probe's handshake and its head), so its slot is kept for a moment (`slots.rs`).
    Silent,
    /// Something else: part of a head, another request, or a closed connection.
    Other,
}

/// Answers a health probe from the acceptor, before it needs a slot, when its whole
/// head (and nothing after it) has arrived by the time it is accepted, as a probe's
/// has under load, when connections wait to be accepted: a flood of slow clients can
/// then neither take its slot nor have it refused `503`. Only looks at what has
/// arrived, never waits: anything else (a head still arriving, another path) goes on
/// to a slot.
fn answer_probe_at_once(stream: &TcpStream, exposition: &dyn Exposition) -> Look {
    let mut buf = [0u8; 1024];
    let peeked = stream
        .set_nonblocking(true)
        .and_then(|()| stream.peek(&mut buf));
    if stream.set_nonblocking(false).is_err() {
        return Look::Other;
    }
    let arrived = match peeked {
        Ok(arrived) => arrived,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Look::Silent,
        Err(_) => return Look::Other,
    };
    let Some(request) = whole_head(&buf[..arrived]).filter(is_probe) else {
        return Look::Other;
    };
    let (response, head_only, extra) = route(&request, exposition);
    let mut stream = stream;
    // The head is read, not only peeked, so that closing sends no reset; it is there.
    let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    if stream.read_exact(&mut buf[..arrived]).is_ok() {
        let _ = stream.write_all(&response.bytes(head_only, extra));
    }
    let _ = stream.shutdown(Shutdown::Write);
    Look::Answered
}

/// The request in `bytes` if they are exactly one whole, acceptable head.
fn whole_head(bytes: &[u8]) -> Option<Request> {
    let mut parser = HeadParser::default();
    for (i, byte) in bytes.iter().enumerate() {
        match parser.feed(std::slice::from_ref(byte)) {
            Feed::NeedMore => {}
            Feed::Done(request) => return (i + 1 == bytes.len()).then_some(request),
            Feed::Refused(_) => return None,
        }
    }
    None
}

/// Whether `request` is a health probe: `/healthz` or `/health`, by GET or HEAD.
fn is_probe(request: &Request) -> bool {
    matches!(request.method.as_str(), "GET" | "HEAD")
        && matches!(request.path.as_str(), "/healthz" | "/health")
}

/// The listen backlog asked for (the kernel caps it at `net.core.somaxconn`, 4096 by
/// default on current Linux). std's `TcpListener::bind` asks for 128: a wave of
/// connections made at once overflowed that queue, the kernel dropped the SYNs beyond
/// it, and a health probe among them was answered only after its SYN was sent again, a
/// second later (`scripts/endpoint_flood.py`).
const LISTEN_BACKLOG: libc::c_int = 4096;

/// Asks the kernel for a longer queue of connections waiting to be accepted
/// ([`LISTEN_BACKLOG`]): `listen` again on a listening socket changes its backlog.
#[cfg(unix)]
fn widen_backlog(listener: &TcpListener) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: `listen` on a socket this function borrows; no pointers.
    if unsafe { libc::listen(listener.as_raw_fd(), LISTEN_BACKLOG) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Elsewhere the backlog stays std's.
#[cfg(not(unix))]
fn widen_backlog(_: &TcpListener) -> io::Result<()> {
    Ok(())
}

/// How long a health probe's head is given to arrive once its connection is accepted: a
/// probe sends its head at once, a few microseconds after its handshake, which is when
/// the acceptor may have looked. A refused connection waits this long in the
/// [`Refuser`], and one this young that had sent nothing when accepted is not evicted
/// from its slot (`slots.rs`).
const LATE_PROBE_WAIT: Duration = Duration::from_millis(5);

/// How many connections refused at the hard cap wait at once for a probe's head; a
/// newcomer beyond them is refused at once.
const LATE_PROBES: usize = 64;

/// How often the waiting connections are looked at.
const LATE_PROBE_POLL: Duration = Duration::from_micros(200);

/// Refuses connections at the hard cap from a thread of its own, after giving each up
/// to [`LATE_PROBE_WAIT`] for a health probe's head, which it answers instead. The
/// acceptor looks at a new connection without waiting ([`answer_probe_at_once`]), and
/// may look in the microseconds between a probe's handshake and its head: on a loaded
/// machine, 1 probe in 100 beside 200 slow clients against 4 slots was then refused
/// `503`. Waiting in the acceptor would hold up every connection behind it under a
/// flood; accepting only once data arrives (`TCP_DEFER_ACCEPT`) left silent connections
/// in the kernel's queue, and probes behind them waited for a SYN resent after 1 s.
struct Refuser {
    waiting: std::sync::mpsc::SyncSender<(TcpStream, Instant)>,
}

impl Refuser {
    /// Starts the refusing thread, which answers probes from `exposition`.
    fn spawn(exposition: Arc<dyn Exposition>) -> io::Result<Refuser> {
        let (waiting, refused) = std::sync::mpsc::sync_channel(LATE_PROBES);
        thread::Builder::new()
            .name("gpufill-metrics-refuse".into())
            .spawn(move || refuse_late_probes(&refused, exposition.as_ref()))?;
        Ok(Refuser { waiting })
    }

    /// Refuses `stream` (`503`), unless a probe's head arrives within the wait; at once
    /// when [`LATE_PROBES`] already wait.
    fn refuse(&self, stream: TcpStream) {
        if let Err(full) = self.waiting.try_send((stream, Instant::now())) {
            let (std::sync::mpsc::TrySendError::Full((stream, _))
            | std::sync::mpsc::TrySendError::Disconnected((stream, _))) = full;
            refuse_busy(stream);
        }
    }
}

/// The refusing thread: each connection handed over is answered as a probe once its
/// whole probe head has arrived, or refused `503` once [`LATE_PROBE_WAIT`] has passed.
fn refuse_late_probes(
    refused: &std::sync::mpsc::Receiver<(TcpStream, Instant)>,
    exposition: &dyn Exposition,
) {
    let mut waiting: Vec<(TcpStream, Instant)> = Vec::new();
    loop {
        if waiting.is_empty() {
            match refused.recv() {
                Ok(next) => waiting.push(next),
                Err(_) => return,
            }
        }
        waiting.extend(refused.try_iter());
        let mut still = Vec::with_capacity(waiting.len());
        for (stream, since) in waiting.drain(..) {
            if answer_probe_at_once(&stream, exposition) == Look::Answered {
                continue;
            }
            if since.elapsed() >= LATE_PROBE_WAIT {
                refuse_busy(stream);
            } else {
                still.push((stream, since));
            }
        }
        waiting = still;
        if !waiting.is_empty() {
            thread::sleep(LATE_PROBE_POLL);
        }
    }
}

/// Answers `503` without reading (from the acceptor, or the [`Refuser`]): the response fits any socket
/// buffer, and the short timeout bounds the write all the same.
fn refuse_busy(mut stream: TcpStream) {
    let response = Response::text(503, "too many connections; retry shortly\n".to_owned());
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = stream.write_all(&response.bytes(false, &["Retry-After: 1"]));
    let _ = stream.shutdown(Shutdown::Write);
}

/// A response: status, content type and body.
struct Response {
    status: u16,
    content_type: &'static str,
    body: String,
}

impl Response {
    fn text(status: u16, body: String) -> Self {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body,
        }
    }

    /// The bytes to send; `head_only` for HEAD (the length is still the body's).
    fn bytes(&self, head_only: bool, extra: &[&str]) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        );
        for line in extra {
            out.push_str(line);
            out.push_str("\r\n");
        }
        out.push_str("\r\n");
        if !head_only {
            out.push_str(&self.body);
        }
        out.into_bytes()
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// What reading a request head gave.
enum Head {
    /// The head, complete and acceptable.
    Complete(Request),
    /// Longer than the limit.
    TooLarge,
    /// The deadline passed first.
    TimedOut,
    /// The client closed without sending anything.
    Closed,
    /// The client ended its side before the head was complete.
    Incomplete,
    /// The bytes so far cannot begin a head that would be accepted.
    Refused(Refusal),
}

fn handle(mut stream: TcpStream, shared: &Shared, slot: &Slot) -> io::Result<()> {
    let settings = shared.settings;
    let deadline = Instant::now() + settings.request_deadline;
    let head = read_head(&mut stream, deadline, settings.max_head_bytes)?;
    // A probe whose head had arrived whole is answered even when evicted: eviction shuts
    // only our reading down, and it is the probes that eviction makes room for.
    let probe = matches!(&head, Head::Complete(request) if is_probe(request));
    let (response, head_only, extra): (Response, bool, &[&str]) = if slot.evicted() && !probe {
        // A newcomer took the slot while this head was still arriving.
        let why = "request head too slow while the server is busy\n";
        (Response::text(408, why.into()), false, &[])
    } else {
        match head {
            Head::Closed => return Ok(()),
            Head::TimedOut => (
                Response::text(408, "request head not received in time\n".into()),
                false,
                &[],
            ),
            Head::Incomplete => (
                Response::text(400, "bad request: incomplete request head\n".into()),
                false,
                &[],
            ),
            Head::TooLarge => (
                Response::text(431, "request head too large\n".into()),
                false,
                &[],
            ),
            Head::Refused(why) => (refusal(why), false, &[]),
            Head::Complete(request) => route(&request, shared.exposition.as_ref()),
        }
    };
    slot.enter(Phase::Answer);
    let deadline = Instant::now() + settings.request_deadline;
    write_all_by(&mut stream, &response.bytes(head_only, extra), deadline)?;
    slot.enter(Phase::Linger);
    linger(&mut stream);
    Ok(())
}

/// The answer to a head refused by the parser.
fn refusal(why: Refusal) -> Response {
    match why {
        Refusal::BadRequest(why) => Response::text(400, format!("bad request: {why}\n")),
        Refusal::Version => Response::text(505, "only HTTP/1.x\n".into()),
    }
}

/// The response to a request, whether it is a HEAD request, and extra header lines.
fn route(
    request: &Request,
    exposition: &dyn Exposition,
) -> (Response, bool, &'static [&'static str]) {
    let head_only = request.method == "HEAD";
    if !matches!(request.method.as_str(), "GET" | "HEAD") {
        let response = Response::text(405, "only GET and HEAD\n".into());
        return (response, false, &["Allow: GET, HEAD"]);
    }
    let response = match request.path.as_str() {
        "/metrics" => Response {
            status: 200,
            content_type: CONTENT_TYPE,
            body: exposition.metrics(),
        },
        // /health is dcgm-exporter's path, /healthz Kubernetes' habit: the same answer.
        "/healthz" | "/health" => {
            let health = exposition.health();
            if health.is_ok() {
                Response::text(200, "ok\n".into())
            } else {
                let mut body = String::from("not ticking:\n");
                for line in &health.failing {
                    body.push_str(line);
                    body.push('\n');
                }
                Response::text(503, body)
            }
        }
        _ => Response::text(404, "not found; try /metrics, /healthz or /health\n".into()),
    };
    (response, head_only, &[])
}

/// Reads until the head is complete, with the read timeout shrunk before each read to
/// what is left of `deadline`; stops at once when the bytes so far cannot begin a head
/// that would be accepted. Only the first `max` bytes are judged: a head that has not
/// ended by then is too large, whatever follows.
fn read_head(stream: &mut TcpStream, deadline: Instant, max: usize) -> io::Result<Head> {
    let mut parser = HeadParser::default();
    let mut received = 0;
    let mut buf = [0u8; 1024];
    loop {
        let Some(left) = left_until(deadline) else {
            return Ok(Head::TimedOut);
        };
        stream.set_read_timeout(Some(left))?;
        let n = match stream.read(&mut buf) {
            Ok(0) if received == 0 => return Ok(Head::Closed),
            Ok(0) => return Ok(Head::Incomplete),
            Ok(n) => n,
            Err(e) if is_timeout(&e) => return Ok(Head::TimedOut),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        // Under `max` until now, or it would have returned.
        let judged = n.min(max - received);
        received += n;
        match parser.feed(&buf[..judged]) {
            Feed::Done(request) => return Ok(Head::Complete(request)),
            Feed::Refused(why) => return Ok(Head::Refused(why)),
            Feed::NeedMore if received > max => return Ok(Head::TooLarge),
            Feed::NeedMore => {}
        }
    }
}

/// Writes all of `bytes` by `deadline`, however slowly the client reads.
fn write_all_by(stream: &mut TcpStream, mut bytes: &[u8], deadline: Instant) -> io::Result<()> {
    while !bytes.is_empty() {
        let left = left_until(deadline).ok_or(io::ErrorKind::TimedOut)?;
        stream.set_write_timeout(Some(left))?;
        match stream.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    stream.flush()
}

/// How long unread input is drained after a response, at most.
const LINGER: Duration = Duration::from_millis(250);
/// How much unread input is drained after a response, at most.
const LINGER_BYTES: usize = 64 * 1024;

/// Ends our side, then reads and discards what the client still sends (the rest of an
/// oversized head, a body) for a moment: closing with unread input would send a reset,
/// which can destroy the response before the client reads it.
fn linger(stream: &mut TcpStream) {
    if stream.shutdown(Shutdown::Write).is_err() {
        return;
    }
    let deadline = Instant::now() + LINGER;
    let mut buf = [0u8; 4096];
    let mut drained = 0;
    while drained < LINGER_BYTES {
        let Some(left) = left_until(deadline) else {
            return;
        };
        if stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => drained += n,
        }
    }
}

/// Time left until `deadline`; `None` once it has passed (a zero timeout would mean
/// "block forever" to `set_read_timeout`).
fn left_until(deadline: Instant) -> Option<Duration> {
    Some(deadline.saturating_duration_since(Instant::now())).filter(|d| !d.is_zero())
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

#[cfg(test)]
mod tests;
