//! A minimal HTTP/1.x server for `GET /metrics`, on `std::net` in one thread of its own.
//!
//! One connection at a time, each with short read and write timeouts, so a stuck client
//! delays only other scrapes, never a fill loop (the loops only `try_lock` their
//! snapshot). No dependency is needed for a single read-only path.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use tracing::debug;

use super::render::CONTENT_TYPE;
use super::{Registry, Render};

const TIMEOUT: Duration = Duration::from_secs(2);
const MAX_HEAD: usize = 8192;

/// Binds `addr` and serves the registry from a background thread. Returns the bound
/// address (its port is the chosen one when `addr` asked for port 0).
///
/// # Errors
/// The bind error (address in use, not an address of this host, no permission).
pub fn start(addr: SocketAddr, registry: Arc<Registry>) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    thread::Builder::new()
        .name("gpufill-metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                match stream {
                    Ok(stream) => {
                        if let Err(e) = serve(stream, &registry) {
                            debug!("metrics connection: {e}");
                        }
                    }
                    Err(e) => debug!("metrics accept: {e}"),
                }
            }
        })?;
    Ok(bound)
}

fn serve(mut stream: TcpStream, registry: &Registry) -> io::Result<()> {
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    let head = read_head(&mut stream)?;
    let (status, body) = respond(&head, registry);
    let content_type = if status.starts_with("200") {
        CONTENT_TYPE
    } else {
        "text/plain; charset=utf-8"
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    if !head.starts_with("HEAD ") {
        stream.write_all(body.as_bytes())?;
    }
    stream.flush()
}

/// The status line's code and reason, and the body, for a request head.
fn respond(head: &str, registry: &Registry) -> (&'static str, String) {
    let mut parts = head.lines().next().unwrap_or("").split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => ("200 OK", registry.render()),
        ("GET" | "HEAD", _) => ("404 Not Found", "not found; try /metrics\n".to_owned()),
        _ => ("405 Method Not Allowed", "only GET /metrics\n".to_owned()),
    }
}

/// Reads up to the blank line that ends the request head (or `MAX_HEAD` bytes).
fn read_head(stream: &mut TcpStream) -> io::Result<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

#[cfg(test)]
mod tests {
    use super::super::GpuLabels;
    use super::*;

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
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

    #[test]
    fn a_port_in_use_is_an_error() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let (registry, _) = Registry::new(Vec::new());
        assert!(start(taken.local_addr().unwrap(), registry).is_err());
    }
}
