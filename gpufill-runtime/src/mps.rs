//! Whether an MPS control daemon runs, for `yield.mps = "auto"`, and [`DaemonWatch`],
//! which follows it while gpufill runs.
//!
//! Under MPS gpufill never yields (kernels of MPS clients run together), so believing
//! in a daemon that is not there switches yielding off: the check must not be one any
//! local user can satisfy. The daemon (`nvidia-cuda-mps-control -d`) creates its
//! control endpoint, `control`, in its pipe directory, as the user it runs as (root for
//! a shared daemon); NVIDIA documents the directory as holding "named pipes and UNIX
//! domain sockets", so either counts. A plain file, or a pipe or socket that another
//! user made in a world-writable `/tmp`, is not taken for one.
//!
//! Nor is one reached through a path someone else controls: `ln -s DIR /tmp/nvidia-mps`
//! by any user would otherwise point gpufill at a root-owned socket elsewhere. Every
//! directory from `/` down to the endpoint is looked at without following it (`lstat`):
//! each must be owned by root or by us and writable by nobody else, unless it has the
//! sticky bit (`/tmp`: others may add entries there but not replace ours, and whatever
//! they add is theirs, so it fails the owner check). A symbolic link on the way is
//! followed only if root or we own it (`/var/run -> /run`), in a directory that passed;
//! the endpoint itself is never a link.
//!
//! The endpoint outlives its daemon: `nvidia-cuda-mps-control` leaves `control` behind
//! when it stops, and removes its PID file, `nvidia-cuda-mps-control.pid`, beside it
//! (CUDA clients then fail to connect and run without MPS). So a daemon runs only
//! where that PID file is there too, a regular file of root or ours, and the process
//! it names, where this PID namespace shows it, is an `nvidia-cuda-mps-control` (on
//! the host's PID view a PID that is not there is a daemon that died). Inside a PID
//! namespace of our own, the daemon of a mounted pipe directory cannot be seen: its
//! PID file stands for it.
//!
//! Whether a process is an MPS client is fixed by the CUDA driver when it first
//! initializes ("When CUDA is first initialized in a program, the CUDA driver attempts
//! to connect to the MPS control daemon", nvidia-cuda-mps-control(1); and a client whose
//! server went away "must be terminated and relaunched", `CUDA_ERROR_MPS_CLIENT_TERMINATED`
//! in the driver API's error codes). A new context in the same process cannot change
//! it: a gpufill that follows the daemon starts afresh ([`DaemonWatch`]; the binary
//! executes itself again).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

/// Symbolic links followed on the way to the endpoint, at most.
const MAX_LINKS: usize = 8;

/// The daemon's PID file in its pipe directory.
pub const PID_FILE: &str = "nvidia-cuda-mps-control.pid";

/// How often [`DaemonWatch`] looks, and how many looks in a row must agree.
pub const WATCH_EVERY: Duration = Duration::from_secs(1);
/// See [`WATCH_EVERY`].
pub const WATCH_CONFIRM: u32 = 2;

/// What a pipe directory shows of an MPS control daemon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Daemon {
    /// A daemon runs: CUDA processes started now become its clients.
    Running,
    /// None: no endpoint, or one its daemon left behind when it stopped.
    Absent,
    /// Something is there that is not trusted as a daemon, and why.
    Untrusted(String),
}

/// `$CUDA_MPS_PIPE_DIRECTORY` (default `/tmp/nvidia-mps`): where CUDA clients look.
pub fn pipe_directory() -> PathBuf {
    std::env::var_os("CUDA_MPS_PIPE_DIRECTORY")
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "/tmp/nvidia-mps".into())
        .into()
}

/// What [`pipe_directory`] shows now, to the user we run as ([`daemon_in`]).
pub fn daemon() -> Daemon {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let host = gpufill_nvml::pid_view() == gpufill_core::PidView::Host;
    daemon_in(&pipe_directory(), euid, host)
}

/// Whether an MPS control daemon runs ([`daemon`]); logs why something there is not
/// trusted.
pub fn daemon_running() -> bool {
    match daemon() {
        Daemon::Running => true,
        Daemon::Absent => false,
        Daemon::Untrusted(why) => {
            tracing::warn!("not trusted as an MPS control daemon: {why}");
            false
        }
    }
}

/// What `dir` shows to the user `euid`: a trusted endpoint ([`control_pipe_in`]) with
/// its daemon's PID file beside it, naming a running `nvidia-cuda-mps-control` where
/// `host_pids` says this process sees the host's PIDs (see the module docs).
pub fn daemon_in(dir: &Path, euid: u32, host_pids: bool) -> Daemon {
    let control = dir.join("control");
    if let Some(why) = untrusted_reason(&control, euid) {
        // Say why only where something is there: no MPS at all is the common case.
        return if std::fs::symlink_metadata(&control).is_ok() {
            Daemon::Untrusted(why)
        } else {
            Daemon::Absent
        };
    }
    let pid_file = dir.join(PID_FILE);
    let Ok(meta) = std::fs::symlink_metadata(&pid_file) else {
        // The endpoint of a daemon that stopped.
        return Daemon::Absent;
    };
    if !meta.file_type().is_file() || !(meta.uid() == 0 || meta.uid() == euid) {
        return Daemon::Untrusted(format!(
            "{} is not a regular file of root or uid {euid}",
            pid_file.display()
        ));
    }
    let pid = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
        .filter(|pid| *pid > 0);
    let Some(pid) = pid else {
        return Daemon::Untrusted(format!("{} holds no PID", pid_file.display()));
    };
    match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
        // `comm` is the executable's name cut to 15 bytes: "nvidia-cuda-mps".
        Ok(comm) if comm.trim_end().starts_with("nvidia-cuda-mps") => Daemon::Running,
        // Its PID taken by another process: the daemon is gone.
        Ok(_) => Daemon::Absent,
        Err(_) if host_pids => Daemon::Absent,
        Err(_) => Daemon::Running,
    }
}

/// Follows the MPS control daemon while gpufill runs: says when it has started or
/// stopped, against what this process began with (its CUDA contexts are clients of the
/// daemon that ran then, or of none, for good: see the module docs). Looks at most
/// every [`WATCH_EVERY`]; a change counts once [`WATCH_CONFIRM`] looks in a row agree,
/// so a daemon caught between its endpoint and its PID file is not a change.
#[derive(Debug)]
pub struct DaemonWatch {
    client: bool,
    last: Option<Instant>,
    differing: u32,
    untrusted: Option<String>,
}

impl DaemonWatch {
    /// A watch for a process whose contexts are MPS clients (`client`) or not.
    pub fn new(client: bool) -> Self {
        DaemonWatch {
            client,
            last: None,
            differing: 0,
            untrusted: None,
        }
    }

    /// At `now`, looks with `look` if a look is due; returns whether a daemon runs once
    /// that has differed from `client` (as it was made) on [`WATCH_CONFIRM`] looks in a
    /// row (then this process should start afresh). An untrusted endpoint counts as no
    /// daemon, and its reason is logged once.
    pub fn poll(&mut self, now: Instant, look: impl FnOnce() -> Daemon) -> Option<bool> {
        if self
            .last
            .is_some_and(|at| now.saturating_duration_since(at) < WATCH_EVERY)
        {
            return None;
        }
        self.last = Some(now);
        let running = match look() {
            Daemon::Running => true,
            Daemon::Absent => false,
            Daemon::Untrusted(why) => {
                if self.untrusted.as_ref() != Some(&why) {
                    tracing::warn!("not trusted as an MPS control daemon: {why}");
                    self.untrusted = Some(why);
                }
                false
            }
        };
        if running == self.client {
            self.differing = 0;
            return None;
        }
        self.differing += 1;
        (self.differing >= WATCH_CONFIRM).then_some(running)
    }
}

/// Whether `dir` holds an MPS control endpoint we trust: `control` is a FIFO or a UNIX
/// socket (not a link) owned by root or by `euid`, the user we run as, and every
/// directory on the way to it is safe ([`untrusted_reason`]).
pub fn control_pipe_in(dir: &Path, euid: u32) -> bool {
    untrusted_reason(&dir.join("control"), euid).is_none()
}

/// Why the endpoint `path` is not to be trusted by the user `euid`, or `None` when it
/// is (see the module docs for the rules).
pub fn untrusted_reason(path: &Path, euid: u32) -> Option<String> {
    untrusted_from(path, euid, std::env::current_dir)
}

/// [`untrusted_reason`], a relative `path` taken from `cwd`: a working directory that
/// cannot be read leaves the endpoint untrusted (it once made it trusted).
fn untrusted_from(
    path: &Path,
    euid: u32,
    cwd: impl FnOnce() -> std::io::Result<PathBuf>,
) -> Option<String> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        match cwd() {
            Ok(dir) => dir.join(path),
            Err(e) => {
                return Some(format!(
                    "{}: relative, and the working directory is unknown: {e}",
                    path.display()
                ));
            }
        }
    };
    let mut walk = Walk {
        at: PathBuf::from("/"),
        pending: names(&absolute),
        links: 0,
        euid,
    };
    if let Err(why) = walk.check_dir(Path::new("/")) {
        return Some(why);
    }
    loop {
        match walk.next() {
            Ok(true) => return None,
            Ok(false) => {}
            Err(why) => return Some(why),
        }
    }
}

/// The named components of a path (`..` kept), in order.
fn names(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect()
}

/// A walk from `/` to the endpoint; `at` has passed every check.
struct Walk {
    at: PathBuf,
    pending: VecDeque<OsString>,
    links: usize,
    euid: u32,
}

impl Walk {
    fn trusted_owner(&self, uid: u32) -> bool {
        uid == 0 || uid == self.euid
    }

    /// Takes one component; `Ok(true)` once the endpoint passed.
    fn next(&mut self) -> Result<bool, String> {
        let Some(name) = self.pending.pop_front() else {
            return Err("no endpoint named".into());
        };
        if name == ".." {
            // Every prefix of `at` has passed already.
            self.at.pop();
            return Ok(false);
        }
        let next = self.at.join(&name);
        let meta =
            std::fs::symlink_metadata(&next).map_err(|e| format!("{}: {e}", next.display()))?;
        let last = self.pending.is_empty();
        if meta.file_type().is_symlink() && !last {
            self.follow(&next, meta.uid())?;
            return Ok(false);
        }
        if last {
            let kind = meta.file_type();
            if !(kind.is_fifo() || kind.is_socket()) {
                return Err(format!("{} is not a FIFO or a socket", next.display()));
            }
            if !self.trusted_owner(meta.uid()) {
                return Err(format!("{} belongs to uid {}", next.display(), meta.uid()));
            }
            return Ok(true);
        }
        self.check_dir(&next)?;
        self.at = next;
        Ok(false)
    }

    /// A directory we may go through: ours or root's, and nobody else can replace its
    /// entries (writable by us alone, or sticky).
    fn check_dir(&self, dir: &Path) -> Result<(), String> {
        let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if !meta.is_dir() {
            return Err(format!("{} is not a directory", dir.display()));
        }
        if !self.trusted_owner(meta.uid()) {
            return Err(format!("{} belongs to uid {}", dir.display(), meta.uid()));
        }
        let others_write = meta.mode() & 0o022 != 0;
        let sticky = meta.mode() & 0o1000 != 0;
        if others_write && !sticky {
            return Err(format!(
                "{} is writable by others (mode {:o})",
                dir.display(),
                meta.mode() & 0o7777
            ));
        }
        Ok(())
    }

    /// Follows the link `link` (in `at`, which passed) if root or we own it.
    fn follow(&mut self, link: &Path, owner: u32) -> Result<(), String> {
        if !self.trusted_owner(owner) {
            return Err(format!("{} is a link of uid {owner}", link.display()));
        }
        self.links += 1;
        if self.links > MAX_LINKS {
            return Err(format!("more than {MAX_LINKS} links on the way"));
        }
        let target = std::fs::read_link(link).map_err(|e| format!("{}: {e}", link.display()))?;
        if target.is_absolute() {
            self.at = PathBuf::from("/");
        }
        for name in names(&target).into_iter().rev() {
            self.pending.push_front(name);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::process::Command;

    fn mkfifo(path: &Path) {
        assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
    }

    #[test]
    fn a_plain_file_named_control_is_not_a_daemon() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!control_pipe_in(dir.path(), 1000));
        std::fs::write(dir.path().join("control"), b"").unwrap();
        assert!(!control_pipe_in(dir.path(), 1000));
    }

    #[test]
    fn a_fifo_of_root_or_of_our_own_user_is_a_daemon_and_one_of_another_user_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let control = dir.path().join("control");
        mkfifo(&control);
        let owner = std::fs::metadata(&control).unwrap().uid();
        assert!(control_pipe_in(dir.path(), owner));
        // Seen by another user: only root's pipe counts.
        assert_eq!(control_pipe_in(dir.path(), owner + 1), owner == 0);
    }

    #[test]
    fn a_relative_endpoint_is_trusted_only_where_the_working_directory_is_known() {
        let dir = tempfile::tempdir().unwrap();
        mkfifo(&dir.path().join("control"));
        let owner = std::fs::metadata(dir.path().join("control")).unwrap().uid();
        let relative = Path::new("control");
        assert_eq!(
            untrusted_from(relative, owner, || Ok(dir.path().to_path_buf())),
            None
        );
        let why = untrusted_from(relative, owner, || {
            Err(std::io::Error::from(std::io::ErrorKind::NotFound))
        });
        assert!(why.is_some_and(|w| w.contains("working directory")));
    }

    #[test]
    fn a_unix_socket_of_our_own_user_is_a_daemon() {
        let dir = tempfile::tempdir().unwrap();
        let control = dir.path().join("control");
        let _listener = std::os::unix::net::UnixListener::bind(&control).unwrap();
        let owner = std::fs::metadata(&control).unwrap().uid();
        assert!(control_pipe_in(dir.path(), owner));
    }

    /// A uid that is neither root nor `owner`.
    fn other_uid(owner: u32) -> u32 {
        if owner == 65534 { 65533 } else { 65534 }
    }

    fn mode(path: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// `root/real/control`, a UNIX socket of ours; returns `real` and the owner.
    fn daemon_dir(root: &Path) -> (PathBuf, u32, std::os::unix::net::UnixListener) {
        let real = root.join("real");
        std::fs::create_dir(&real).unwrap();
        mode(&real, 0o755);
        let listener = std::os::unix::net::UnixListener::bind(real.join("control")).unwrap();
        let owner = std::fs::metadata(real.join("control")).unwrap().uid();
        (real, owner, listener)
    }

    #[test]
    fn a_link_planted_in_a_directory_others_can_write_is_not_followed() {
        // As `ln -s DIR /tmp/nvidia-mps` by anyone, where anyone may write.
        let dir = tempfile::tempdir().unwrap();
        let (real, owner, _daemon) = daemon_dir(dir.path());
        assert!(
            control_pipe_in(&real, owner),
            "the endpoint itself is trusted"
        );
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        mode(&shared, 0o777);
        std::os::unix::fs::symlink(&real, shared.join("nvidia-mps")).unwrap();
        assert!(!control_pipe_in(&shared.join("nvidia-mps"), owner));
        // The same link in a directory only its owner writes is the owner's choice.
        let safe = dir.path().join("safe");
        std::fs::create_dir(&safe).unwrap();
        mode(&safe, 0o755);
        std::os::unix::fs::symlink("../real", safe.join("nvidia-mps")).unwrap();
        assert!(control_pipe_in(&safe.join("nvidia-mps"), owner));
    }

    #[test]
    fn a_directory_on_the_way_that_others_can_write_is_not_trusted_unless_sticky() {
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        let (real, owner, _daemon) = daemon_dir(&open);
        mode(&open, 0o777);
        assert!(!control_pipe_in(&real, owner));
        mode(&open, 0o1777); // as /tmp
        assert!(control_pipe_in(&real, owner));
        mode(&real, 0o775);
        let reason = untrusted_reason(&real.join("control"), owner).unwrap();
        assert!(
            reason.contains("is writable by others (mode 775)"),
            "{reason}"
        );
    }

    #[test]
    fn a_directory_or_link_of_another_user_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let (real, owner, _daemon) = daemon_dir(dir.path());
        let link = dir.path().join("nvidia-mps");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(control_pipe_in(&link, owner));
        // Seen by someone else, whose own or root's things only are trusted.
        let stranger = other_uid(owner);
        if owner != 0 {
            assert!(!control_pipe_in(&real, stranger));
            return;
        }
        // As root: hand the link, then the directory, to another user (`nobody`).
        std::os::unix::fs::lchown(&link, Some(stranger), None).unwrap();
        assert!(!control_pipe_in(&link, owner), "a link of uid {stranger}");
        assert!(control_pipe_in(&real, owner));
        std::os::unix::fs::lchown(&real, Some(stranger), None).unwrap();
        assert!(
            !control_pipe_in(&real, owner),
            "a directory of uid {stranger}"
        );
    }

    /// A stand-in daemon in `dir`: its endpoint, and a process named
    /// `nvidia-cuda-mps-control` (a copy of `sleep`) in its PID file.
    struct FakeDaemon {
        _endpoint: std::os::unix::net::UnixListener,
        process: std::process::Child,
    }

    impl FakeDaemon {
        fn start(dir: &Path) -> FakeDaemon {
            let endpoint = std::os::unix::net::UnixListener::bind(dir.join("control")).unwrap();
            let bin = dir.join("nvidia-cuda-mps-control");
            let sleep = Command::new("sh")
                .args(["-c", "command -v sleep"])
                .output()
                .unwrap();
            let sleep = String::from_utf8(sleep.stdout).unwrap();
            std::fs::copy(sleep.trim(), &bin).unwrap();
            let process = Command::new(&bin).arg("60").spawn().unwrap();
            wait_for_comm(process.id());
            std::fs::write(dir.join(PID_FILE), format!("{}\n", process.id())).unwrap();
            FakeDaemon {
                _endpoint: endpoint,
                process,
            }
        }

        /// Stops the process as a daemon stops: its PID file goes, its endpoint stays.
        fn stop(&mut self, dir: &Path) {
            let _ = self.process.kill();
            let _ = self.process.wait();
            std::fs::remove_file(dir.join(PID_FILE)).unwrap();
        }
    }

    /// Waits until `pid` shows the daemon's name: the child may not have executed it yet.
    fn wait_for_comm(pid: u32) {
        for _ in 0..200 {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.starts_with("nvidia-cuda-mps") {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("process {pid} never showed the daemon's name");
    }

    impl Drop for FakeDaemon {
        fn drop(&mut self) {
            let _ = self.process.kill();
            let _ = self.process.wait();
        }
    }

    fn owner(dir: &Path) -> u32 {
        std::fs::metadata(dir).unwrap().uid()
    }

    #[test]
    fn a_daemon_runs_while_its_pid_file_names_it_and_the_endpoint_it_leaves_is_no_daemon() {
        let dir = tempfile::tempdir().unwrap();
        let euid = owner(dir.path());
        assert_eq!(daemon_in(dir.path(), euid, true), Daemon::Absent);
        let mut daemon = FakeDaemon::start(dir.path());
        assert_eq!(daemon_in(dir.path(), euid, true), Daemon::Running);
        daemon.stop(dir.path());
        assert!(dir.path().join("control").exists(), "the endpoint stays");
        assert_eq!(daemon_in(dir.path(), euid, true), Daemon::Absent);
    }

    #[test]
    fn a_pid_file_naming_a_dead_or_other_process_is_no_daemon_where_host_pids_are_seen() {
        let dir = tempfile::tempdir().unwrap();
        let euid = owner(dir.path());
        let _endpoint = std::os::unix::net::UnixListener::bind(dir.path().join("control")).unwrap();
        // Our own PID: a process, but not an MPS control daemon.
        std::fs::write(dir.path().join(PID_FILE), std::process::id().to_string()).unwrap();
        assert_eq!(daemon_in(dir.path(), euid, true), Daemon::Absent);
        // A PID nobody has (above the kernel's pid_max): dead on the host's view; in a
        // PID namespace of our own the host's daemon cannot be seen, so it is believed.
        std::fs::write(dir.path().join(PID_FILE), "4194305\n").unwrap();
        assert_eq!(daemon_in(dir.path(), euid, true), Daemon::Absent);
        assert_eq!(daemon_in(dir.path(), euid, false), Daemon::Running);
        std::fs::write(dir.path().join(PID_FILE), "none").unwrap();
        assert!(matches!(
            daemon_in(dir.path(), euid, false),
            Daemon::Untrusted(why) if why.contains("holds no PID")
        ));
        // A link in place of the PID file is not followed.
        std::fs::remove_file(dir.path().join(PID_FILE)).unwrap();
        std::os::unix::fs::symlink("/proc/self/stat", dir.path().join(PID_FILE)).unwrap();
        assert!(matches!(
            daemon_in(dir.path(), euid, false),
            Daemon::Untrusted(_)
        ));
    }

    #[test]
    fn an_untrusted_endpoint_is_said_and_none_is_absent() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("control"), b"").unwrap();
        assert!(matches!(
            daemon_in(dir.path(), owner(dir.path()), true),
            Daemon::Untrusted(why) if why.contains("not a FIFO or a socket")
        ));
    }

    #[test]
    fn the_watch_reports_a_change_after_two_looks_a_second_apart_and_not_before() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut watch = DaemonWatch::new(false);
        assert_eq!(watch.poll(at(0), || Daemon::Absent), None);
        // Not due yet: the look is not even taken.
        assert_eq!(watch.poll(at(500), || panic!("looked too soon")), None);
        assert_eq!(watch.poll(at(1000), || Daemon::Running), None, "one look");
        assert_eq!(watch.poll(at(2000), || Daemon::Running), Some(true));
        // A flicker resets the count.
        let mut watch = DaemonWatch::new(false);
        assert_eq!(watch.poll(at(0), || Daemon::Running), None);
        assert_eq!(watch.poll(at(1000), || Daemon::Absent), None);
        assert_eq!(watch.poll(at(2000), || Daemon::Running), None);
        assert_eq!(watch.poll(at(3000), || Daemon::Running), Some(true));
    }

    #[test]
    fn a_client_watch_reports_the_daemon_gone_and_an_untrusted_one_counts_as_gone() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut watch = DaemonWatch::new(true);
        assert_eq!(watch.poll(at(0), || Daemon::Running), None);
        assert_eq!(watch.poll(at(1), || Daemon::Untrusted("x".into())), None);
        assert_eq!(watch.poll(at(2), || Daemon::Absent), Some(false));
    }

    #[test]
    fn a_link_to_a_fifo_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("elsewhere");
        mkfifo(&fifo);
        std::os::unix::fs::symlink(&fifo, dir.path().join("control")).unwrap();
        let owner = std::fs::metadata(&fifo).unwrap().uid();
        assert!(!control_pipe_in(dir.path(), owner));
    }
}
