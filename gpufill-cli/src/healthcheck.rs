//! `gpufill healthcheck`: asks a running gpufill's `/healthz`, for a container's
//! `HEALTHCHECK` (the distroless image has no shell, curl or wget). Exit 0 when it
//! answers 200, 1 when it answers otherwise or cannot be reached, 2 for bad flags.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};

use crate::cli::HealthcheckArgs;
use crate::error::UsageError;

/// The longest `--timeout`, seconds.
const MAX_TIMEOUT_S: f64 = 60.0;
/// The most of an answer read: a status line, a few headers and the failing GPUs.
const MAX_ANSWER: u64 = 64 * 1024;

/// Runs `gpufill healthcheck`, writing one line on success to `out`.
///
/// # Errors
/// [`UsageError`] for an address or timeout that cannot be used; a runtime error (exit
/// 1) when `/healthz` cannot be reached or does not answer 200.
pub fn run(args: &HealthcheckArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let addr = probe_address(&args.metrics).map_err(|e| UsageError(anyhow!(e)))?;
    if !(args.timeout > 0.0 && args.timeout <= MAX_TIMEOUT_S) {
        return Err(UsageError(anyhow!(
            "--timeout must be more than 0 and at most {MAX_TIMEOUT_S} seconds, got {}",
            args.timeout
        ))
        .into());
    }
    let timeout = Duration::from_secs_f64(args.timeout);
    let url = format!("http://{addr}/healthz");
    let (status, body) = get_healthz(addr, timeout).with_context(|| format!("{url}: no answer"))?;
    if status != 200 {
        bail!("{url} answered {status}: {}", body.trim());
    }
    writeln!(out, "ok: {url} answered 200").context("cannot write to standard output")?;
    Ok(())
}

/// The address to probe for `run --metrics ADDR`: an unspecified IP (`0.0.0.0`, `[::]`),
/// which a server listens on but a client cannot reach, becomes loopback.
///
/// # Errors
/// A message naming the value when it is not `IP:PORT` or its port is 0.
pub fn probe_address(metrics: &str) -> Result<SocketAddr, String> {
    let mut addr: SocketAddr = metrics.trim().parse().map_err(|_| {
        format!("--metrics: expected IP:PORT as given to `run --metrics`, e.g. 127.0.0.1:9401, got {metrics:?}")
    })?;
    if addr.port() == 0 {
        return Err(format!(
            "--metrics: port 0 is chosen at random by `run`: give the port it logged, got {metrics:?}"
        ));
    }
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        });
    }
    Ok(addr)
}

/// `GET /healthz` at `addr`, all of it within `timeout`: the status code and the body.
fn get_healthz(addr: SocketAddr, timeout: Duration) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(
        stream,
        "GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = Vec::new();
    stream.take(MAX_ANSWER).read_to_end(&mut answer)?;
    let answer = String::from_utf8_lossy(&answer);
    let status = answer
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.get(2..5))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other("not an HTTP answer"))?;
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, body)| body)
        .to_owned();
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn an_unspecified_listen_address_is_probed_on_loopback() {
        assert_eq!(
            probe_address("0.0.0.0:9401").unwrap(),
            "127.0.0.1:9401".parse().unwrap()
        );
        assert_eq!(
            probe_address("[::]:9401").unwrap(),
            "[::1]:9401".parse().unwrap()
        );
        assert_eq!(
            probe_address("10.1.2.3:9").unwrap(),
            "10.1.2.3:9".parse().unwrap()
        );
        assert!(
            probe_address("localhost:9401")
                .unwrap_err()
                .contains("IP:PORT")
        );
        assert!(probe_address("127.0.0.1:0").unwrap_err().contains("port 0"));
    }

    /// Answers one connection with `answer`.
    fn answering(answer: &'static str) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            // The whole request head first: a socket closed with unread bytes is reset,
            // and the client would read the reset rather than the answer.
            let mut head = Vec::new();
            let mut buf = [0u8; 512];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = s.write_all(answer.as_bytes());
        });
        addr
    }

    #[test]
    fn the_status_and_body_are_read_and_garbage_is_an_error() {
        let ok = answering("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n");
        assert_eq!(
            get_healthz(ok, Duration::from_secs(2)).unwrap(),
            (200, "ok\n".to_owned())
        );
        let sick = answering("HTTP/1.1 503 Service Unavailable\r\n\r\nnot ticking:\ngpu 0\n");
        assert_eq!(get_healthz(sick, Duration::from_secs(2)).unwrap().0, 503);
        let garbage = answering("SSH-2.0-OpenSSH\r\n");
        assert!(get_healthz(garbage, Duration::from_secs(2)).is_err());
    }
}
