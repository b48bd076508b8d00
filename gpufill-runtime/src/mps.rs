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
//!
//! # Leaving a daemon that quits, or whose server died
//!
//! `quit` makes the control daemon wait until its clients have exited; MPS offers a
//! client no call that says a quit is pending. What the daemon does show is its control
//! log, `control.log` in its `CUDA_MPS_LOG_DIRECTORY` (default `/var/log/nvidia-mps`):
//! every command typed at `nvidia-cuda-mps-control` is written there as `Cmd:` and the
//! command, on a line headed with the daemon's PID (`[date time Control PID] Cmd:quit`,
//! the format of NVIDIA's "Control Log" appendix, where `Cmd:get_server_list` is logged
//! the same way). So a daemon is [`Daemon::Quitting`] once its log holds `Cmd:quit` from
//! the PID its PID file names ([`quit_pending`]); the log is trusted only as the PID
//! file is (a regular file of root or ours), and only its last [`LOG_TAIL`] bytes are
//! read. Its directory is the daemon's own (its `/proc/PID/environ`), else ours, else
//! the default ([`log_directory`]).
//!
//! A client must leave for the quit to end, and only a new process can: gpufill then
//! starts afresh as a process that has [`Left`] that daemon, whose CUDA finds no daemon
//! ([`NO_DAEMON`] as its pipe directory: "If the connection attempt fails, the program
//! continues to run as it normally would without MPS", nvidia-cuda-mps-control(1)). It
//! fills without MPS, under its yield policy, and follows the next daemon, one of
//! another PID, as any process that is not a client does.
//!
//! The MPS server (`nvidia-cuda-mps-server`) is a child of the control daemon. Killed,
//! it takes its clients' contexts with it: the driver documents
//! `CUDA_ERROR_MPS_CLIENT_TERMINATED` as "the process must be terminated and
//! relaunched", and a client's calls may fail otherwise or not return. So [`DaemonWatch`]
//! also watches the daemon's child of our user ([`server_of`]): once the server we
//! had is gone, gpufill starts afresh and the daemon starts a new one for it; a second
//! loss within [`SERVER_LOST_WINDOW`] leaves the daemon instead, so that a server that
//! keeps dying cannot make a restart loop.
//!
//! What a fresh start says, and the environment its new image runs with (the daemon
//! left, CUDA's directory given back), is a [`Restart`]; the exec is the caller's.
//!
//! A simulated run's daemon ([`SimDaemon`]) is followed by this same watch
//! ([`MpsFollower`]), on the virtual clock.

mod quit;
mod restart;
mod sim;
mod watch;

pub use quit::{is_server, log_directory, quit_pending, server_of};
pub use restart::{EnvChanges, Restart, Standing, leave_at_start};
pub use sim::{MpsFollower, SimDaemon};
pub use watch::{Change, DaemonWatch, Seen};

use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

/// Symbolic links followed on the way to the endpoint, at most.
const MAX_LINKS: usize = 8;

/// The daemon's PID file in its pipe directory.
pub const PID_FILE: &str = "nvidia-cuda-mps-control.pid";

/// How often [`DaemonWatch`] looks, and how many looks in a row must agree.
pub const WATCH_EVERY: Duration = Duration::from_secs(1);
/// See [`WATCH_EVERY`].
pub const WATCH_CONFIRM: u32 = 2;

/// The daemon's log in its log directory ([`log_directory`]).
pub const CONTROL_LOG: &str = "control.log";

/// How much of the end of the control log [`quit_pending`] reads: a quit is among the
/// last lines the daemon writes, and a long-lived daemon's log grows without bound.
pub const LOG_TAIL: u64 = 64 * 1024;

/// The pipe directory a process that has [`Left`] a daemon gives its CUDA: a path under
/// which nothing can be created, so no daemon is ever found there.
pub const NO_DAEMON: &str = "/dev/null";

/// The variable that says this process has left an MPS daemon ([`Left`]).
pub const LEFT_VAR: &str = "GPUFILL_MPS_LEFT";

/// The variable that holds when this process's MPS server was last lost (Unix seconds).
pub const SERVER_LOST_VAR: &str = "GPUFILL_MPS_SERVER_LOST";

/// A second loss of the MPS server within this time of the first leaves the daemon
/// instead of joining it again.
pub const SERVER_LOST_WINDOW: Duration = Duration::from_secs(60);

/// What a pipe directory shows of an MPS control daemon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Daemon {
    /// A daemon runs: CUDA processes started now become its clients.
    Running,
    /// A daemon runs that was told to quit: it waits for its clients to exit
    /// ([`quit_pending`]).
    Quitting,
    /// None: no endpoint, or one its daemon left behind when it stopped.
    Absent,
    /// Something is there that is not trusted as a daemon, and why.
    Untrusted(String),
}

/// `$CUDA_MPS_PIPE_DIRECTORY` (default `/tmp/nvidia-mps`): where CUDA clients look; in
/// a process that has [`Left`] a daemon, the directory it left, which it still watches.
pub fn pipe_directory() -> PathBuf {
    let chosen = match left() {
        Some(left) => left.pipe_directory,
        None => std::env::var_os("CUDA_MPS_PIPE_DIRECTORY"),
    };
    chosen
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "/tmp/nvidia-mps".into())
        .into()
}

/// Where this process stands, when it has left an MPS daemon: started afresh because
/// that daemon was quitting or its server kept dying, its CUDA pointed at
/// [`NO_DAEMON`]. Read from [`LEFT_VAR`], `PID` or `PID:DIRECTORY`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Left {
    /// The PID of the daemon left; a daemon of another PID is followed again.
    pub daemon: u32,
    /// `CUDA_MPS_PIPE_DIRECTORY` as it was before (none: unset), to give back to CUDA
    /// when a new daemon is followed.
    pub pipe_directory: Option<OsString>,
}

impl Left {
    /// Parses [`LEFT_VAR`]'s value.
    pub fn parse(value: &std::ffi::OsStr) -> Option<Left> {
        use std::os::unix::ffi::OsStrExt;
        let bytes = value.as_bytes();
        let (pid, dir) = match bytes.iter().position(|b| *b == b':') {
            Some(at) => (&bytes[..at], Some(&bytes[at + 1..])),
            None => (bytes, None),
        };
        let daemon = std::str::from_utf8(pid).ok()?.parse().ok()?;
        let pipe_directory = dir
            .filter(|d| !d.is_empty())
            .map(|d| std::ffi::OsStr::from_bytes(d).to_os_string());
        Some(Left {
            daemon,
            pipe_directory,
        })
    }

    /// [`LEFT_VAR`]'s value for this.
    pub fn to_value(&self) -> OsString {
        let mut value = OsString::from(self.daemon.to_string());
        if let Some(dir) = &self.pipe_directory {
            value.push(":");
            value.push(dir);
        }
        value
    }
}

/// This process's [`Left`], from [`LEFT_VAR`].
pub fn left() -> Option<Left> {
    std::env::var_os(LEFT_VAR).and_then(|v| Left::parse(&v))
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
    if let Some(left) = left() {
        tracing::info!(
            "left the MPS control daemon {} ({}): filling without MPS until another starts",
            left.daemon,
            pipe_directory().display()
        );
        return false;
    }
    match daemon() {
        Daemon::Running => true,
        // A quitting daemon takes no new clients for long: it is going.
        Daemon::Quitting | Daemon::Absent => false,
        Daemon::Untrusted(why) => {
            tracing::warn!("not trusted as an MPS control daemon: {why}");
            false
        }
    }
}

/// What `dir` shows to the user `euid`: a trusted endpoint ([`control_pipe_in`]) with
/// its daemon's PID file beside it, naming a running `nvidia-cuda-mps-control` where
/// `host_pids` says this process sees the host's PIDs (see the module docs), quitting
/// where its control log says so ([`quit_pending`]).
pub fn daemon_in(dir: &Path, euid: u32, host_pids: bool) -> Daemon {
    seen_in(dir, euid, host_pids, None).daemon
}

/// What [`pipe_directory`] shows now, to the user we run as ([`seen_in`]), our MPS
/// server `known` so far.
pub fn look(known: Option<u32>) -> Seen {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let host = gpufill_nvml::pid_view() == gpufill_core::PidView::Host;
    seen_in(&pipe_directory(), euid, host, known)
}

/// [`daemon_in`], with the daemon's PID and, where it runs, its MPS server of `euid`
/// (`known` if still there: [`server_of`]).
pub fn seen_in(dir: &Path, euid: u32, host_pids: bool, known: Option<u32>) -> Seen {
    let (daemon, pid) = match running_pid(dir, euid, host_pids) {
        Ok(pid) => (Daemon::Running, Some(pid)),
        Err(daemon) => (daemon, None),
    };
    let Some(pid) = pid else {
        return Seen {
            daemon,
            pid,
            server: None,
        };
    };
    let daemon = if quit_pending(&log_directory(pid), pid, euid) {
        Daemon::Quitting
    } else {
        Daemon::Running
    };
    Seen {
        daemon,
        pid: Some(pid),
        server: server_of(pid, euid, known),
    }
}

/// The PID of the daemon `dir` shows as running, or what it shows instead.
fn running_pid(dir: &Path, euid: u32, host_pids: bool) -> Result<u32, Daemon> {
    let control = dir.join("control");
    if let Some(why) = untrusted_reason(&control, euid) {
        // Say why only where something is there: no MPS at all is the common case.
        return Err(if std::fs::symlink_metadata(&control).is_ok() {
            Daemon::Untrusted(why)
        } else {
            Daemon::Absent
        });
    }
    let pid_file = dir.join(PID_FILE);
    let Ok(meta) = std::fs::symlink_metadata(&pid_file) else {
        // The endpoint of a daemon that stopped.
        return Err(Daemon::Absent);
    };
    if !meta.file_type().is_file() || !(meta.uid() == 0 || meta.uid() == euid) {
        return Err(Daemon::Untrusted(format!(
            "{} is not a regular file of root or uid {euid}",
            pid_file.display()
        )));
    }
    let pid = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
        .filter(|pid| *pid > 0);
    let Some(pid) = pid else {
        return Err(Daemon::Untrusted(format!(
            "{} holds no PID",
            pid_file.display()
        )));
    };
    match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
        // `comm` is the executable's name cut to 15 bytes: "nvidia-cuda-mps".
        Ok(comm) if comm.trim_end().starts_with("nvidia-cuda-mps") => Ok(pid),
        // Its PID taken by another process: the daemon is gone.
        Ok(_) => Err(Daemon::Absent),
        Err(_) if host_pids => Err(Daemon::Absent),
        Err(_) => Ok(pid),
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
        // Whose own or root's things only are trusted. Not root, the test cannot give
        // its link or directory away: another user looks at them instead. Root's things
        // everyone trusts: as root it hands them to another user (`nobody`). Either
        // way, a link and a directory of another user are not followed.
        let stranger = other_uid(owner);
        if owner != 0 {
            assert!(!control_pipe_in(&link, stranger), "a link of uid {owner}");
            assert!(
                !control_pipe_in(&real, stranger),
                "a directory of uid {owner}"
            );
            return;
        }
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
            let process = Command::new(&bin)
                .arg("60")
                .env("CUDA_MPS_LOG_DIRECTORY", dir)
                .spawn()
                .unwrap();
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
    fn a_daemon_whose_control_log_has_its_quit_is_quitting_and_shows_its_pid() {
        let dir = tempfile::tempdir().unwrap();
        let euid = owner(dir.path());
        let daemon = FakeDaemon::start(dir.path());
        let pid = daemon.process.id();
        let log = dir.path().join(CONTROL_LOG);
        std::fs::write(&log, format!("[d t Control {pid:>5}] NEW UI\n")).unwrap();
        let seen = seen_in(dir.path(), euid, true, None);
        assert_eq!((seen.daemon, seen.pid), (Daemon::Running, Some(pid)));
        // An old daemon's quit is not this one's.
        std::fs::write(
            &log,
            format!("[d t Control 1] Cmd:quit\n[d t Control {pid}] NEW UI\n"),
        )
        .unwrap();
        assert_eq!(daemon_in(dir.path(), euid, true), Daemon::Running);
        std::fs::write(&log, format!("[d t Control {pid:>5}] Cmd:quit\n")).unwrap();
        assert_eq!(daemon_in(dir.path(), euid, true), Daemon::Quitting);
    }

    #[test]
    fn a_left_process_names_the_daemon_and_the_directory_it_left() {
        let left = Left::parse(std::ffi::OsStr::new("42:/tmp/a:b")).unwrap();
        assert_eq!(left.daemon, 42);
        assert_eq!(left.pipe_directory, Some("/tmp/a:b".into()));
        assert_eq!(Left::parse(&left.to_value()), Some(left));
        let unset = Left::parse(std::ffi::OsStr::new("42")).unwrap();
        assert_eq!(unset.pipe_directory, None);
        assert_eq!(Left::parse(std::ffi::OsStr::new("x:/tmp")), None);
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
    fn a_link_to_a_fifo_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("elsewhere");
        mkfifo(&fifo);
        std::os::unix::fs::symlink(&fifo, dir.path().join("control")).unwrap();
        let owner = std::fs::metadata(&fifo).unwrap().uid();
        assert!(!control_pipe_in(dir.path(), owner));
    }
}
