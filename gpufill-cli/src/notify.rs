//! systemd's notify protocol (`sd_notify(3)`): `READY=1` once every worker has ticked,
//! `WATCHDOG=1` from then on only while every worker ticks (so a stalled fill loop, not
//! just a dead process, makes systemd restart the unit), `STOPPING=1` on the way out. Outside
//! systemd (`NOTIFY_SOCKET` unset) it does nothing. No dependency: one datagram per
//! message on the socket systemd names, which may be in the abstract namespace (`@`).

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::{Duration, Instant};

/// A connection to systemd's notify socket, or nothing.
#[derive(Debug, Default)]
pub struct Notifier {
    socket: Option<(UnixDatagram, SocketAddr)>,
    watchdog: Option<Duration>,
    last_ping: Option<Instant>,
    ready: bool,
}

impl Notifier {
    /// From the environment systemd sets: `NOTIFY_SOCKET`, and `WATCHDOG_USEC` when
    /// `WatchdogSec=` is set (ignored if `WATCHDOG_PID` names another process).
    pub fn from_env() -> Notifier {
        let socket = std::env::var("NOTIFY_SOCKET").ok();
        let ours = std::env::var("WATCHDOG_PID")
            .ok()
            .is_none_or(|pid| pid.trim() == std::process::id().to_string());
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|us| us.trim().parse::<u64>().ok())
            .filter(|us| *us > 0 && ours)
            .map(Duration::from_micros);
        Notifier::new(socket.as_deref(), watchdog)
    }

    /// To the socket at `path` (`@name`: abstract), with a watchdog of `watchdog`.
    pub fn new(path: Option<&str>, watchdog: Option<Duration>) -> Notifier {
        let socket = path.and_then(|p| Some((UnixDatagram::unbound().ok()?, address(p)?)));
        Notifier {
            socket,
            watchdog,
            last_ping: None,
            ready: false,
        }
    }

    /// Says the service is up (once).
    pub fn ready(&mut self) {
        if !std::mem::replace(&mut self.ready, true) {
            self.send("READY=1");
        }
    }

    /// Says the service is stopping.
    pub fn stopping(&mut self) {
        self.send("STOPPING=1");
    }

    /// Says the service is restarting in place (the same PID, a new program image: the
    /// MPS daemon started or stopped); its `READY=1` ends that.
    pub fn reloading(&mut self) {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec, which `now` is, and reads nothing.
        let usec = if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) } == 0 {
            now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1_000
        } else {
            0
        };
        self.send(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
    }

    /// Call often (every loop of the main thread) with whether every worker has ticked
    /// lately: the first time it is, says the service is up ([`Notifier::ready`]);
    /// from then on pings the watchdog at half its interval, but only while `healthy`,
    /// so that systemd restarts a stalled daemon.
    pub fn keep_alive(&mut self, healthy: bool) {
        if !healthy {
            return;
        }
        self.ready();
        let Some(interval) = self.watchdog else {
            return;
        };
        let due = self.last_ping.is_none_or(|at| at.elapsed() >= interval / 2);
        if due {
            self.send("WATCHDOG=1");
            self.last_ping = Some(Instant::now());
        }
    }

    fn send(&self, message: &str) {
        if let Some((socket, addr)) = &self.socket {
            // Best effort, as sd_notify: a lost notification is systemd's to time out.
            let _ = socket.send_to_addr(message.as_bytes(), addr);
        }
    }
}

fn address(path: &str) -> Option<SocketAddr> {
    match path.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name.as_bytes()).ok()
        }
        None => SocketAddr::from_pathname(path).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener() -> (tempfile::TempDir, UnixDatagram, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        (dir, socket, path.to_string_lossy().into_owned())
    }

    fn received(socket: &UnixDatagram) -> Vec<String> {
        let mut out = Vec::new();
        let mut buf = [0u8; 64];
        while let Ok(n) = socket.recv(&mut buf) {
            out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        out
    }

    #[test]
    fn ready_comes_once_every_worker_has_ticked_and_stopping_at_the_end() {
        let (_dir, socket, path) = listener();
        let mut n = Notifier::new(Some(&path), None);
        n.keep_alive(false); // workers still opening their GPUs
        assert!(received(&socket).is_empty(), "not ready before every tick");
        n.keep_alive(true);
        n.keep_alive(true); // once only; no watchdog configured
        n.stopping();
        assert_eq!(received(&socket), ["READY=1", "STOPPING=1"]);
    }

    #[test]
    fn the_watchdog_is_pinged_at_half_its_interval_and_never_while_unhealthy() {
        let (_dir, socket, path) = listener();
        let mut n = Notifier::new(Some(&path), Some(Duration::from_millis(100)));
        n.keep_alive(false);
        assert!(received(&socket).is_empty(), "unhealthy: no ping");
        n.keep_alive(true);
        n.keep_alive(true); // too soon after the first
        assert_eq!(received(&socket), ["READY=1", "WATCHDOG=1"]);
        std::thread::sleep(Duration::from_millis(60));
        n.keep_alive(true);
        assert_eq!(received(&socket), ["WATCHDOG=1"]);
    }

    #[test]
    fn a_restart_in_place_says_reloading_with_the_monotonic_time() {
        let (_dir, socket, path) = listener();
        let mut n = Notifier::new(Some(&path), None);
        n.reloading();
        let got = received(&socket);
        let usec: u64 = got[0]
            .strip_prefix("RELOADING=1\nMONOTONIC_USEC=")
            .and_then(|us| us.parse().ok())
            .unwrap_or_else(|| panic!("{got:?}"));
        assert!(usec > 0);
    }

    #[test]
    fn without_a_socket_nothing_happens() {
        let mut n = Notifier::new(None, Some(Duration::from_secs(1)));
        n.ready();
        n.keep_alive(true);
    }
}
