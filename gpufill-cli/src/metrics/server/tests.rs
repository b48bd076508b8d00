//! The server's private `Refuser` over loopback sockets (port 0 on 127.0.0.1, bounded
//! waits). The tests of the public API are in `gpufill-cli/tests/metrics_server.rs`.

use super::*;

/// A connection accepted from `listener` and refused at the hard cap by `refuser`, the
/// client sending `head` `after` it connected: what it was answered, and when.
fn refused(
    refuser: &Refuser,
    listener: &TcpListener,
    head: &'static [u8],
    after: Duration,
) -> (String, Duration) {
    let addr = listener.local_addr().unwrap();
    let client = thread::spawn(move || {
        let t = Instant::now();
        let mut s = TcpStream::connect(addr).unwrap();
        thread::sleep(after);
        if !head.is_empty() {
            s.write_all(head).unwrap();
        }
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        (String::from_utf8_lossy(&out).into_owned(), t.elapsed())
    });
    let (stream, _) = listener.accept().unwrap();
    refuser.refuse(stream);
    client.join().unwrap()
}

#[test]
fn at_the_hard_cap_a_probe_whose_head_comes_late_is_answered_and_others_get_503() {
    let exposition: Arc<dyn Exposition> = Arc::new((|| "m 1\n".to_owned(), Health::ok));
    let refuser = Refuser::spawn(exposition).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    // Accepted before its head arrived, as the acceptor may: answered all the same.
    let ms = Duration::from_millis(1);
    let (out, _) = refused(
        &refuser,
        &listener,
        b"GET /healthz HTTP/1.1\r\n\r\n",
        ms * 2,
    );
    assert!(out.starts_with("HTTP/1.1 200 "), "{out}");
    // A scrape, and a client that says nothing: 503, within the wait and a little.
    let (out, took) = refused(&refuser, &listener, b"GET /metrics HTTP/1.1\r\n\r\n", ms);
    assert!(out.starts_with("HTTP/1.1 503 "), "{out}");
    assert!(took < Duration::from_millis(500), "{took:?}");
    let (out, took) = refused(&refuser, &listener, b"", Duration::ZERO);
    assert!(out.starts_with("HTTP/1.1 503 "), "{out}");
    assert!(
        took >= LATE_PROBE_WAIT && took < Duration::from_millis(500),
        "{took:?}"
    );
}
