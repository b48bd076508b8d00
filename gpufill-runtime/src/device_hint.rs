//! The newcomer hint of a real GPU ([`gpufill_core::Hint`]): every CUDA process opens
//! `/dev/nvidiactl` and `/dev/nvidia-uvm` as its driver starts, before NVML lists it
//! (the first open came before the listing:
//! docs/benchmarks.md#what-another-contexts-work-does-to-our-kernels-the-physics-the-design-rests-on,
//! on a newcomer). An inotify watch on those files wakes the loop between ticks, and the
//! loop then reads the process list every few milliseconds for a short window
//! ([`gpufill_core::Supervisor::run_watched`]), so a newcomer is yielded to within
//! milliseconds of its listing instead of up to a tick later, while an idle watch wakes
//! nothing. Processes that only open the files (nvidia-smi, a framework probing the
//! devices at import) cost one window each (not measured).
//!
//! Where the files cannot be watched (not Linux, no such file, inotify refused) the hint
//! never fires and the loop reads the list once a tick, as before. Inside a container
//! whose device nodes are its own, opens in other containers are not seen.

use gpufill_core::{Clock, Hint, Time};

/// The device files every CUDA process opens at start.
pub const DEVICE_FILES: [&str; 2] = ["/dev/nvidiactl", "/dev/nvidia-uvm"];

/// Watches `DEVICE_FILES` for opens.
#[derive(Debug)]
pub struct DeviceOpenHint {
    #[cfg(target_os = "linux")]
    fd: Option<std::os::fd::OwnedFd>,
}

impl DeviceOpenHint {
    /// A watch on the device files every CUDA process opens, `/dev/nvidiactl` and
    /// `/dev/nvidia-uvm` (those that exist); one that never fires when none
    /// can be watched.
    pub fn on_device_files() -> Self {
        Self::on(&DEVICE_FILES)
    }

    /// A hint that never fires.
    pub fn disabled() -> Self {
        DeviceOpenHint {
            #[cfg(target_os = "linux")]
            fd: None,
        }
    }

    /// A watch on `paths` (for tests: any file's opens).
    pub fn on(paths: &[&str]) -> Self {
        #[cfg(target_os = "linux")]
        {
            DeviceOpenHint {
                fd: linux::watch(paths),
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = paths;
            DeviceOpenHint {}
        }
    }

    /// Whether any file is watched.
    pub fn watching(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.fd.is_some()
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }
}

impl Hint for DeviceOpenHint {
    fn wait_until<K: Clock>(&mut self, clock: &K, deadline: Time) -> bool {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.fd {
            return linux::wait(fd, clock, deadline);
        }
        clock.sleep_until(deadline);
        false
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::ffi::CString;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    use gpufill_core::{Clock, Time};

    /// An inotify instance watching `paths` for opens; `None` when none could be watched.
    pub(super) fn watch(paths: &[&str]) -> Option<OwnedFd> {
        // SAFETY: inotify_init1 takes flags only; a non-negative result is a new file
        // descriptor that nothing else owns.
        let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if raw < 0 {
            tracing::debug!("inotify unavailable: newcomers are looked for once a tick");
            return None;
        }
        // SAFETY: `raw` is a valid descriptor we own (above).
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut watched = 0;
        for path in paths {
            let Ok(c) = CString::new(*path) else { continue };
            // SAFETY: `fd` is an inotify descriptor and `c` a NUL-terminated path that
            // outlives the call.
            let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), libc::IN_OPEN) };
            if wd >= 0 {
                watched += 1;
            }
        }
        if watched == 0 {
            tracing::debug!(
                ?paths,
                "no device file to watch: newcomers are looked for once a tick"
            );
            return None;
        }
        Some(fd)
    }

    /// Waits on `fd` until `deadline`: true as soon as an open was seen (the events are
    /// drained).
    pub(super) fn wait<K: Clock>(fd: &OwnedFd, clock: &K, deadline: Time) -> bool {
        loop {
            let left = deadline.saturating_since(clock.now());
            if left.is_zero() {
                return false;
            }
            let timeout = libc::timespec {
                tv_sec: libc::time_t::try_from(left.as_secs()).unwrap_or(libc::time_t::MAX),
                tv_nsec: libc::c_long::from(left.subsec_nanos() as i32),
            };
            let mut poll = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, a valid timespec, no signal mask.
            let ready = unsafe { libc::ppoll(&mut poll, 1, &timeout, std::ptr::null()) };
            if ready > 0 {
                drain(fd);
                tracing::trace!("device file opened");
                return true;
            }
            if ready == 0 {
                // Timed out: the deadline has come (as the kernel counts; our clock may
                // read a hair earlier, and another call would cost a wake-up for it).
                return false;
            }
            if ready < 0
                && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
            {
                // A broken watch: sleep out the wait rather than spin.
                clock.sleep_until(deadline);
                return false;
            }
        }
    }

    /// Reads every pending event (their content does not matter).
    fn drain(fd: &OwnedFd) {
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: `buf` is valid for its length; the descriptor is non-blocking.
            let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return;
            }
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use gpufill_core::SystemClock;
    use std::time::{Duration, Instant};

    #[test]
    fn an_open_of_a_watched_file_cuts_the_wait_short_and_nothing_else_does() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("nvidia-uvm");
        std::fs::write(&file, b"").unwrap();
        let mut hint = DeviceOpenHint::on(&[file.to_str().unwrap()]);
        assert!(hint.watching());
        let clock = SystemClock::new();
        // Nobody opens it: the whole wait.
        let start = Instant::now();
        assert!(!hint.wait_until(&clock, clock.now() + Duration::from_millis(60)));
        assert!(start.elapsed() >= Duration::from_millis(60));
        // An open from another thread 20 ms in: cut short then.
        let path = file.clone();
        let opener = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            std::fs::File::open(path).unwrap();
        });
        let start = Instant::now();
        assert!(hint.wait_until(&clock, clock.now() + Duration::from_secs(5)));
        let took = start.elapsed();
        opener.join().unwrap();
        assert!(took < Duration::from_secs(1), "{took:?}");
        // Drained: the next wait runs out again.
        assert!(!hint.wait_until(&clock, clock.now() + Duration::from_millis(30)));
    }

    #[test]
    fn without_a_file_to_watch_it_never_fires_and_still_waits() {
        let mut hint = DeviceOpenHint::on(&["/nonexistent/nvidia-uvm"]);
        assert!(!hint.watching());
        let clock = SystemClock::new();
        let start = Instant::now();
        assert!(!hint.wait_until(&clock, clock.now() + Duration::from_millis(30)));
        assert!(start.elapsed() >= Duration::from_millis(30));
        assert!(!DeviceOpenHint::disabled().watching());
    }
}
