//! The metrics server (`gpufill_cli::metrics::server`) over loopback sockets: every test
//! binds port 0 on 127.0.0.1, and every loop in it is bounded, so the tests end by
//! themselves. The test of the private `Refuser` stays in `src/metrics/server/tests.rs`.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use gpufill_cli::metrics::server::{
    Health, ServerSettings, bind_may_recover, health_of, serve, serve_retrying, start,
};
use gpufill_cli::metrics::{GpuLabels, GpuSnapshot, Registry};

fn get(addr: SocketAddr, request: impl AsRef<[u8]>) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(request.as_ref()).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn serves_metrics_on_port_0_and_404_elsewhere() {
    let (registry, _publishers) = Registry::new(vec![GpuLabels {
        index: 0,
        uuid: "GPU-x".into(),
        model: "m".into(),
    }]);
    let addr = start("127.0.0.1:0".parse().unwrap(), registry).unwrap();
    assert_ne!(addr.port(), 0);
    let ok = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
    assert!(
        ok.contains("Content-Type: text/plain; version=0.0.4"),
        "{ok}"
    );
    assert!(ok.contains("gpufill_build_info{version="), "{ok}");
    let missing = get(addr, "GET /other HTTP/1.1\r\n\r\n");
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
    let post = get(addr, "POST /metrics HTTP/1.1\r\n\r\n");
    assert!(post.starts_with("HTTP/1.1 405"), "{post}");
}

fn registry_server() -> SocketAddr {
    let (registry, _publishers) = Registry::new(vec![GpuLabels {
        index: 0,
        uuid: "GPU-x".into(),
        model: "m".into(),
    }]);
    start("127.0.0.1:0".parse().unwrap(), registry).unwrap()
}

/// `GET /metrics`, with the time it took to be answered.
fn timed_scrape(addr: SocketAddr) -> (String, std::time::Duration) {
    let t = std::time::Instant::now();
    let out = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    (out, t.elapsed())
}

#[test]
fn a_scrape_is_answered_within_a_second_beside_20_idle_connections() {
    let addr = registry_server();
    let idle: Vec<TcpStream> = (0..20).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let (out, took) = timed_scrape(addr);
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    drop(idle);
}

#[test]
fn a_client_sending_a_byte_every_1_5_s_neither_delays_a_scrape_nor_holds_on() {
    let addr = registry_server();
    let slow = thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let start = std::time::Instant::now();
        // At most 6 bytes (9 s): the server must have cut it off long before.
        for b in b"GET /m".iter() {
            if s.write_all(&[*b]).is_err() {
                break;
            }
            thread::sleep(Duration::from_millis(1500));
            let mut probe = [0u8; 1];
            s.set_nonblocking(true).unwrap();
            let closed = s.read(&mut probe).is_ok();
            s.set_nonblocking(false).unwrap();
            if closed {
                break;
            }
        }
        start.elapsed()
    });
    thread::sleep(Duration::from_millis(100));
    let (out, took) = timed_scrape(addr);
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    let held = slow.join().unwrap();
    assert!(
        held < Duration::from_secs(4),
        "slow client held on for {held:?}"
    );
}

#[test]
fn malformed_requests_get_400_and_an_oversized_head_431() {
    let addr = registry_server();
    for garbage in [
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n" as &[u8],
        b"hello\r\n\r\n",
        b"GET\r\n\r\n",
        b"GET /metrics\r\n\r\n",
        b"GET  /metrics HTTP/1.1\r\n\r\n",
        b"GET /metrics HTTP/1.1 extra\r\n\r\n",
        b"GET metrics HTTP/1.1\r\n\r\n",
        b"GET /metrics HTTP/x\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nno colon\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost : x\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: a\rb\r\n\r\n",
    ] {
        let out = get(addr, garbage);
        let shown = String::from_utf8_lossy(garbage);
        assert!(out.starts_with("HTTP/1.1 400 "), "{shown:?}: {out}");
    }
    let big = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(9 * 1024)
    );
    let out = get(addr, &big);
    assert!(out.starts_with("HTTP/1.1 431 "), "{out}");
    // A head cut short by the client's end of input.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 400 "), "{out}");
}

#[test]
fn bare_lf_line_ends_are_accepted() {
    let addr = registry_server();
    let out = get(addr, "GET /metrics HTTP/1.1\nHost: x\n\n");
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    // An empty line before the request line is ignored (RFC 9112, 2.2).
    let out = get(addr, "\r\nGET /metrics HTTP/1.0\r\n\r\n");
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
}

/// A server of closures: fixed metrics text, and the health in `health`.
fn closure_server(settings: ServerSettings) -> (SocketAddr, Arc<std::sync::Mutex<Health>>) {
    let health = Arc::new(std::sync::Mutex::new(Health::ok()));
    let read = Arc::clone(&health);
    let exposition = (|| "m 1\n".to_owned(), move || read.lock().unwrap().clone());
    let addr = serve(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(exposition),
        settings,
    )
    .unwrap();
    (addr, health)
}

#[test]
fn healthz_is_ok_until_a_worker_stops_ticking_and_then_names_it() {
    let (addr, health) = closure_server(ServerSettings::default());
    let ok = get(addr, "GET /healthz HTTP/1.1\r\n\r\n");
    assert!(
        ok.starts_with("HTTP/1.1 200 OK\r\n") && ok.ends_with("\r\n\r\nok\n"),
        "{ok}"
    );
    health.lock().unwrap().failing = vec!["gpu 1 (GPU-b): last tick 12.0 s ago".into()];
    let bad = get(addr, "GET /healthz HTTP/1.1\r\n\r\n");
    assert!(bad.starts_with("HTTP/1.1 503 "), "{bad}");
    assert!(
        bad.ends_with("not ticking:\ngpu 1 (GPU-b): last tick 12.0 s ago\n"),
        "{bad}"
    );
    // HEAD: the same status and length, no body.
    let head = get(addr, "HEAD /healthz HTTP/1.1\r\n\r\n");
    assert!(
        head.starts_with("HTTP/1.1 503 ") && head.ends_with("\r\n\r\n"),
        "{head}"
    );
    let metrics = get(addr, "GET /metrics HTTP/1.1\r\n\r\n");
    assert!(metrics.ends_with("\r\n\r\nm 1\n"), "{metrics}");
    // dcgm-exporter's path answers the same, and other paths name both.
    let dcgm = get(addr, "GET /health HTTP/1.1\r\n\r\n");
    assert!(
        dcgm.starts_with("HTTP/1.1 503 ") && dcgm.ends_with(&bad[bad.find("\r\n\r\n").unwrap()..]),
        "{dcgm}"
    );
    health.lock().unwrap().failing.clear();
    let dcgm = get(addr, "GET /health HTTP/1.1\r\n\r\n");
    assert!(dcgm.starts_with("HTTP/1.1 200 OK\r\n"), "{dcgm}");
    let other = get(addr, "GET /healthy HTTP/1.1\r\n\r\n");
    assert!(
        other.starts_with("HTTP/1.1 404 ") && other.ends_with("/healthz or /health\n"),
        "{other}"
    );
}

#[test]
fn other_methods_get_405_with_allow_and_other_versions_505() {
    let (addr, _) = closure_server(ServerSettings::default());
    let out = get(addr, "DELETE /healthz HTTP/1.1\r\n\r\n");
    assert!(
        out.starts_with("HTTP/1.1 405 ") && out.contains("\r\nAllow: GET, HEAD\r\n"),
        "{out}"
    );
    let out = get(addr, "GET /metrics HTTP/2.0\r\n\r\n");
    assert!(out.starts_with("HTTP/1.1 505 "), "{out}");
}

#[test]
fn a_head_that_does_not_arrive_in_time_gets_408() {
    let (addr, _) = closure_server(ServerSettings {
        request_deadline: Duration::from_millis(300),
        ..ServerSettings::default()
    });
    let t = Instant::now();
    let out = get(addr, "GET /metrics HTTP/1.1\r\n");
    assert!(out.starts_with("HTTP/1.1 408 "), "{out}");
    assert!(t.elapsed() >= Duration::from_millis(300) && t.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_connection_beyond_the_cap_takes_the_slot_of_the_oldest_idle_one_which_gets_408() {
    let (addr, _) = closure_server(ServerSettings {
        max_connections: 3,
        ..ServerSettings::default()
    });
    let mut idle: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr).unwrap()).collect();
    thread::sleep(Duration::from_millis(100)); // all three accepted, oldest first
    let t = Instant::now();
    let out = get(addr, "GET /metrics HTTP/1.1\r\n\r\n");
    assert!(out.starts_with("HTTP/1.1 200 "), "{out}");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    let mut evicted = String::new();
    idle[0]
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    idle[0].read_to_string(&mut evicted).unwrap();
    assert!(evicted.starts_with("HTTP/1.1 408 "), "{evicted}");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    drop(idle);
}

#[test]
fn garbage_and_tls_hellos_get_400_at_once_not_408_after_the_deadline() {
    let (addr, _) = closure_server(ServerSettings::default());
    // The start of a TLS 1.2 ClientHello, as `curl https://` sends it: no line end.
    let hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\x8a\x1c\x00\x00";
    for garbage in [
        &hello[..],
        b"\x00\x01\x02\x03",
        b"hello world",
        b"GET /metrics HTTP/1.1\r\nHost: x\x01",
        b"SSH-2.0-OpenSSH_9.6\r\n",
    ] {
        let t = Instant::now();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        s.write_all(garbage).unwrap(); // and nothing more, the connection left open
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        let out = String::from_utf8_lossy(&out);
        let shown = String::from_utf8_lossy(garbage);
        assert!(out.starts_with("HTTP/1.1 400 "), "{shown:?}: {out}");
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "{shown:?}: {:?}",
            t.elapsed()
        );
    }
}

#[test]
fn health_names_the_workers_that_ended_started_or_have_not_ticked_lately() {
    let labels = |index| GpuLabels {
        index,
        uuid: format!("GPU-{index}"),
        model: "m".into(),
    };
    let now = Instant::now();
    let ticked = |index, ago| GpuSnapshot {
        last_tick_at: Some(now - Duration::from_secs(ago)),
        stall_after: Duration::from_secs(5),
        ..GpuSnapshot::new(labels(index))
    };
    let ended = GpuSnapshot {
        worker_running: false,
        ..ticked(3, 0)
    };
    // A worker still opening its GPU has not ticked yet: not healthy either.
    let opening = GpuSnapshot::new(labels(2));
    let snapshots = [ticked(0, 1), ticked(1, 20), opening, ended];
    let health = health_of(&snapshots, now);
    assert_eq!(
        health.failing,
        [
            "gpu 1 (GPU-1): no tick for 20.0 s",
            "gpu 2 (GPU-2): starting: no tick yet",
            "gpu 3 (GPU-3): worker ended"
        ]
    );
    assert!(health_of(&snapshots[..1], now).is_ok());
}

#[test]
fn a_port_in_use_is_an_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let (registry, _) = Registry::new(Vec::new());
    assert!(start(taken.local_addr().unwrap(), registry).is_err());
}

/// The simulated GPU, opened only once `gate` says so: a first CUDA or NVML call that
/// takes its time (or hangs).
struct GatedOpener {
    inner: gpufill_runtime::SimOpener,
    gate: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
}

impl gpufill_runtime::Opener for GatedOpener {
    type Probe = gpufill_sim::SimProbe;
    type Load = gpufill_sim::SimLoad;
    type Error = gpufill_sim::SimError;

    fn open(
        &self,
        gpu: &gpufill_runtime::Gpu,
        settings: &gpufill_runtime::Settings,
        mps: bool,
        now: gpufill_runtime::Time,
    ) -> Result<gpufill_runtime::Loop<Self::Probe, Self::Load>, Self::Error> {
        let (open, turn) = &*self.gate;
        let mut go = open.lock().unwrap();
        while !*go {
            go = turn.wait(go).unwrap();
        }
        self.inner.open(gpu, settings, mps, now)
    }
}

#[test]
fn healthz_and_worker_up_say_healthy_only_after_the_first_tick() {
    let inner = gpufill_runtime::SimOpener::default();
    let gpus = inner.gpus(1);
    let gate = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let opener = GatedOpener {
        inner,
        gate: Arc::clone(&gate),
    };
    let settings = gpufill_runtime::Settings::default();
    let options = gpufill_runtime::AgentOptions::default();
    let agent = gpufill_runtime::Agent::start(opener, gpus, settings, options).unwrap();
    let addr = start("127.0.0.1:0".parse().unwrap(), agent.registry()).unwrap();
    thread::sleep(Duration::from_millis(200)); // ten ticks' time, still opening
    let out = get(addr, "GET /healthz HTTP/1.1\r\n\r\n");
    assert!(out.starts_with("HTTP/1.1 503 "), "{out}");
    assert!(
        out.ends_with("gpu 0 (GPU-00000000-0000-0000-0000-000000000000): starting: no tick yet\n"),
        "{out}"
    );
    let metrics = get(addr, "GET /metrics HTTP/1.1\r\n\r\n");
    assert!(
        metrics.contains("gpufill_worker_up{gpu=\"0\","),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("gpufill_worker_up{") && l.ends_with(" 0")),
        "{metrics}"
    );
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    let healthy = (0..40).any(|_| {
        thread::sleep(Duration::from_millis(50));
        get(addr, "GET /healthz HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200 ")
    });
    assert!(healthy, "healthy after the first tick");
    agent.stop();
    agent.join().unwrap();
}

#[test]
fn a_taken_port_is_served_as_soon_as_its_holder_lets_go() {
    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = squatter.local_addr().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let exposition = (|| "m 1\n".to_owned(), Health::ok);
    let backoff = gpufill_core::Backoff::new(Duration::from_millis(10), Duration::from_millis(40));
    serve_retrying(
        addr,
        Arc::new(exposition),
        ServerSettings::default(),
        backoff,
        move |at| tx.send(at).unwrap(),
    )
    .unwrap();
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "served while taken"
    );
    drop(squatter);
    let at = rx.recv_timeout(Duration::from_secs(2)).unwrap();
    assert_eq!(at, addr);
    let out = get(addr, "GET /healthz HTTP/1.1\r\n\r\n");
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
}

#[test]
fn only_a_taken_port_or_an_address_not_yet_up_is_retried() {
    use std::io::{Error, ErrorKind};
    assert!(bind_may_recover(&Error::from(ErrorKind::AddrInUse)));
    assert!(bind_may_recover(&Error::from(ErrorKind::AddrNotAvailable)));
    assert!(!bind_may_recover(&Error::from(ErrorKind::PermissionDenied)));
    assert!(!bind_may_recover(&Error::from(ErrorKind::InvalidInput)));
}

/// A client of the audit's (issue 22): sends `GET /metrics HTTP/1.1\r\n`, then a byte
/// every 0.5 s, and reconnects after 1.9 s, until `stop`.
fn slow_client(addr: SocketAddr, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = TcpStream::connect(addr) else {
            thread::sleep(Duration::from_millis(50));
            continue;
        };
        let since = Instant::now();
        let mut ok = s.write_all(b"GET /metrics HTTP/1.1\r\n").is_ok();
        while ok && since.elapsed() < Duration::from_millis(1900) && !stop.load(Ordering::Relaxed) {
            thread::sleep(
                Duration::from_millis(500)
                    .min(Duration::from_millis(1900).saturating_sub(since.elapsed())),
            );
            ok = s.write_all(b"X").is_ok();
        }
    }
}

/// Back-to-back `GET /metrics` until `stop`.
fn flood(addr: SocketAddr, stop: Arc<AtomicBool>) -> usize {
    let mut served = 0;
    while !stop.load(Ordering::Relaxed) {
        if timed_get(
            addr,
            "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
            Duration::from_secs(2),
        )
        .is_some_and(|(out, _)| out.starts_with("HTTP/1.1 200 "))
        {
            served += 1;
        }
    }
    served
}

/// `request` with a read deadline: the answer and how long it took, `None` on an error.
fn timed_get(addr: SocketAddr, request: &str, limit: Duration) -> Option<(String, Duration)> {
    let t = Instant::now();
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(limit)).ok()?;
    s.write_all(request.as_bytes()).ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).ok()?;
    Some((String::from_utf8_lossy(&out).into_owned(), t.elapsed()))
}

#[test]
fn healthz_answers_within_a_second_while_40_slow_clients_and_a_flood_hold_the_endpoint() {
    let (addr, _) = closure_server(ServerSettings::default());
    let stop = Arc::new(AtomicBool::new(false));
    let slow: Vec<_> = (0..40)
        .map(|_| {
            let stop = Arc::clone(&stop);
            thread::spawn(move || slow_client(addr, stop))
        })
        .collect();
    let floods: Vec<_> = (0..2)
        .map(|_| {
            let stop = Arc::clone(&stop);
            thread::spawn(move || flood(addr, stop))
        })
        .collect();
    thread::sleep(Duration::from_millis(1000)); // every slot taken by now
    let probes = 100;
    let mut healthy = 0;
    let mut answers = Vec::new();
    for _ in 0..probes {
        let got = timed_get(
            addr,
            "GET /healthz HTTP/1.1\r\n\r\n",
            Duration::from_secs(2),
        );
        match &got {
            Some((out, took))
                if out.starts_with("HTTP/1.1 200 ") && *took <= Duration::from_secs(1) =>
            {
                healthy += 1
            }
            _ => answers
                .push(got.map(|(out, took)| (out.lines().next().unwrap_or("").to_owned(), took))),
        }
        thread::sleep(Duration::from_millis(50));
    }
    let scrape = timed_get(
        addr,
        "GET /metrics HTTP/1.1\r\n\r\n",
        Duration::from_secs(2),
    );
    stop.store(true, Ordering::Relaxed);
    for t in slow {
        t.join().unwrap();
    }
    let flooded: usize = floods.into_iter().map(|t| t.join().unwrap()).sum();
    answers.truncate(5);
    assert!(
        healthy >= 99,
        "{healthy} of {probes} probes answered 200 within 1 s; some others: {answers:?}"
    );
    let (out, took) = scrape.expect("a scrape");
    assert!(
        out.starts_with("HTTP/1.1 200 ") && took < Duration::from_secs(1),
        "{took:?} {out}"
    );
    assert!(flooded > 100, "the flood was served too: {flooded}");
}

#[test]
fn every_health_probe_is_answered_while_50_slow_clients_a_slot_hold_the_endpoint() {
    // 4 slots and 200 slow clients: as 2,000 against the default 32, where 2 of 277
    // probes failed (one 408, one 503) before probes were answered first.
    let settings = ServerSettings {
        max_connections: 4,
        ..ServerSettings::default()
    };
    let (addr, _) = closure_server(settings);
    let stop = Arc::new(AtomicBool::new(false));
    let slow: Vec<_> = (0..200)
        .map(|_| {
            let stop = Arc::clone(&stop);
            thread::spawn(move || slow_client(addr, stop))
        })
        .collect();
    thread::sleep(Duration::from_millis(500)); // every slot taken by now
    let mut failed = Vec::new();
    for (i, path) in ["/healthz", "/health"].iter().cycle().take(100).enumerate() {
        let request = format!("GET {path} HTTP/1.1\r\n\r\n");
        match timed_get(addr, &request, Duration::from_secs(2)) {
            Some((out, took))
                if out.starts_with("HTTP/1.1 200 ") && took < Duration::from_secs(1) => {}
            got => failed.push((
                i,
                got.map(|(out, took)| (out.lines().next().map(str::to_owned), took)),
            )),
        }
        thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    for t in slow {
        t.join().unwrap();
    }
    assert!(
        failed.is_empty(),
        "{} of 100 probes failed: {failed:?}",
        failed.len()
    );
}

/// Opens `n` TCP connections to `addr` at once (non-blocking connects, nothing sent) and
/// returns their descriptors, to be closed by [`close_all`].
#[cfg(unix)]
fn connect_wave(addr: SocketAddr, n: usize) -> Vec<libc::c_int> {
    let SocketAddr::V4(v4) = addr else {
        panic!("an IPv4 address")
    };
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: v4.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*v4.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    (0..n)
        .filter_map(|_| {
            // SAFETY: plain socket calls on a descriptor this function owns, with a
            // pointer to a sockaddr_in that lives through the call and its size.
            unsafe {
                let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0);
                if fd < 0 {
                    return None;
                }
                libc::connect(
                    fd,
                    (&raw const sin).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                );
                Some(fd)
            }
        })
        .collect()
}

#[cfg(unix)]
fn close_all(fds: Vec<libc::c_int>) {
    for fd in fds {
        // SAFETY: each descriptor was opened by connect_wave and is closed once.
        unsafe { libc::close(fd) };
    }
}

#[test]
#[cfg(unix)]
fn a_probe_right_after_a_wave_of_connections_is_not_dropped_with_the_queue() {
    // std's backlog of 128 overflowed under such a wave: the kernel dropped the SYNs
    // beyond it, a probe's among them, and the probe was answered a second later.
    // Without the wider backlog a round failed about one time in four here: five
    // rounds, each a wave and a probe right after it.
    let (addr, _) = closure_server(ServerSettings::default());
    for round in 0..5 {
        let wave = connect_wave(addr, 800);
        let t = Instant::now();
        let out = get(addr, "GET /healthz HTTP/1.1\r\n\r\n");
        let took = t.elapsed();
        close_all(wave);
        assert!(out.starts_with("HTTP/1.1 200 "), "round {round}: {out}");
        assert!(took < Duration::from_millis(700), "round {round}: {took:?}");
        thread::sleep(Duration::from_millis(100));
    }
}
