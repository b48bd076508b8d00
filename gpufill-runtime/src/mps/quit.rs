//! What a running daemon shows beyond its PID file: a pending quit in its control log
//! ([`quit_pending`]) and its MPS servers ([`servers_of`]). See the parent module's
//! docs for why these.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::{CONTROL_LOG, LOG_TAIL};

/// Where the daemon `pid` writes its logs: its own `CUDA_MPS_LOG_DIRECTORY` (from its
/// `/proc/PID/environ`, readable by root or its user), else ours, else the default
/// `/var/log/nvidia-mps`.
pub fn log_directory(pid: u32) -> PathBuf {
    let theirs = std::fs::read(format!("/proc/{pid}/environ"))
        .ok()
        .and_then(|environ| variable_in(&environ, b"CUDA_MPS_LOG_DIRECTORY"));
    theirs
        .or_else(|| std::env::var_os("CUDA_MPS_LOG_DIRECTORY").map(PathBuf::from))
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or_else(|| PathBuf::from("/var/log/nvidia-mps"))
}

/// The value of `name` in a NUL-separated environment block.
fn variable_in(environ: &[u8], name: &[u8]) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    environ.split(|b| *b == 0).find_map(|entry| {
        let value = entry.strip_prefix(name)?.strip_prefix(b"=")?;
        Some(PathBuf::from(std::ffi::OsStr::from_bytes(value)))
    })
}

/// Whether the control log in `dir` says that the daemon `pid` was told to quit: a
/// line `[... Control PID] Cmd:quit` (with or without `-t`) among its last
/// [`LOG_TAIL`] bytes. A log that is not a regular file of root or `euid` says nothing.
pub fn quit_pending(dir: &Path, pid: u32, euid: u32) -> bool {
    let path = dir.join(CONTROL_LOG);
    let trusted = std::fs::symlink_metadata(&path)
        .is_ok_and(|m| m.file_type().is_file() && (m.uid() == 0 || m.uid() == euid));
    trusted && tail(&path).is_some_and(|text| quit_in(&text, pid))
}

/// The last [`LOG_TAIL`] bytes of `path`, as text.
fn tail(path: &Path) -> Option<String> {
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL)))
        .ok()?;
    let mut bytes = Vec::new();
    file.take(LOG_TAIL).read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// Whether `log` holds a quit command received by the daemon `pid`.
fn quit_in(log: &str, pid: u32) -> bool {
    log.lines().any(|line| {
        let Some((head, rest)) = line.strip_prefix('[').and_then(|l| l.split_once(']')) else {
            return false;
        };
        // `date time Control PID`, the PID right-aligned.
        let mut words = head.split_whitespace().skip(2);
        words.next() == Some("Control")
            && words.next().and_then(|w| w.parse::<u32>().ok()) == Some(pid)
            && rest
                .trim_start()
                .strip_prefix("Cmd:quit")
                .is_some_and(|after| after.is_empty() || after.starts_with(' '))
    })
}

/// The MPS server of the user `euid` that the daemon `pid` runs: `known` while it is
/// still one (a cheap look at that one process), else the first found among the
/// daemon's children ([`is_server`]), listed by `/proc/PID/task/TID/children` where the
/// kernel has it and otherwise by reading every process's parent. `None`: there is none
/// (or, outside this PID namespace, none can be seen).
pub fn server_of(pid: u32, euid: u32, known: Option<u32>) -> Option<u32> {
    if let Some(known) = known {
        return is_server(known, pid, euid).then_some(known);
    }
    children(pid)
        .unwrap_or_else(|| every_process().collect())
        .into_iter()
        .find(|child| is_server(*child, pid, euid))
}

/// Whether `child` is an MPS server of the daemon `pid` and the user `euid`: its parent
/// is the daemon, its `comm` `nvidia-cuda-mps` (`nvidia-cuda-mps-server` cut to 15
/// bytes) and its owner `euid`.
pub fn is_server(child: u32, pid: u32, euid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
        return false;
    };
    // `PID (comm) state PPID ...`; comm may hold spaces and parentheses.
    let Some((head, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let comm = head.split_once('(').map_or("", |(_, c)| c);
    let parent = rest
        .split_whitespace()
        .nth(1)
        .and_then(|w| w.parse::<u32>().ok());
    let owner = std::fs::metadata(format!("/proc/{child}")).map(|m| m.uid());
    parent == Some(pid) && comm.starts_with("nvidia-cuda-mps") && owner.is_ok_and(|u| u == euid)
}

/// The children of `pid` as its tasks' `children` files list them; `None` where the
/// kernel has no such file.
fn children(pid: u32) -> Option<Vec<u32>> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut found = None::<Vec<u32>>;
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            found.get_or_insert_with(Vec::new).extend(
                text.split_whitespace()
                    .filter_map(|w| w.parse::<u32>().ok()),
            );
        }
    }
    found
}

/// Every PID in `/proc`.
fn every_process() -> impl Iterator<Item = u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
[2026-12-01 10:00:00.000 Control   411] Starting control daemon using socket /tmp/p/control
[2026-12-01 10:00:01.000 Control   411] Accepting connection...
[2026-12-01 10:00:01.000 Control   411] NEW UI
[2026-12-01 10:00:01.000 Control   411] Cmd:get_server_list
[2026-12-01 10:00:01.000 Control   411] UI closed
[2026-12-01 10:00:02.000 Control   412] Starting new server 412 for user 0
";

    #[test]
    fn a_quit_counts_only_from_the_daemon_that_runs_now() {
        assert!(!quit_in(LOG, 411), "no quit yet");
        let quit = format!(
            "{LOG}[2026-12-01 10:01:00.000 Control   411] NEW UI\n[2026-12-01 10:01:00.000 Control   411] Cmd:quit\n"
        );
        assert!(quit_in(&quit, 411));
        // A daemon started since, with another PID, has not been told to quit.
        assert!(!quit_in(&quit, 977));
        // quit -t, too; a command that only begins with quit is another command.
        assert!(quit_in("[d t Control 5] Cmd:quit -t 10\n", 5));
        assert!(!quit_in("[d t Control 5] Cmd:quitx\n", 5));
        assert!(!quit_in("[d t Other 5] Cmd:quit\n", 5));
    }

    #[test]
    fn the_log_is_read_where_the_daemon_writes_it_and_only_if_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let euid = std::fs::metadata(dir.path()).unwrap().uid();
        assert!(!quit_pending(dir.path(), 5, euid), "no log");
        // A long log: the quit comes last, beyond the first LOG_TAIL bytes.
        let mut text = "[d t Control 5] Accepting connection...\n".repeat(4000);
        text.push_str("[d t Control 5] Cmd:quit\n");
        std::fs::write(dir.path().join(CONTROL_LOG), &text).unwrap();
        assert!(quit_pending(dir.path(), 5, euid));
        let stranger = if euid == 65534 { 65533 } else { 65534 };
        assert_eq!(quit_pending(dir.path(), 5, stranger), euid == 0);
        // A link in place of the log is not read.
        let other = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(dir.path().join(CONTROL_LOG), other.path().join(CONTROL_LOG))
            .unwrap();
        assert!(!quit_pending(other.path(), 5, euid));
    }

    #[test]
    fn the_log_directory_is_the_daemons_own_first() {
        let environ = b"PATH=/bin\0CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log\0HOME=/root\0";
        assert_eq!(
            variable_in(environ, b"CUDA_MPS_LOG_DIRECTORY"),
            Some(PathBuf::from("/tmp/mps-log"))
        );
        assert_eq!(
            variable_in(b"CUDA_MPS_LOG_DIRECTORYX=/a\0", b"CUDA_MPS_LOG_DIRECTORY"),
            None
        );
        // A process whose environment says: a child started with the variable.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("CUDA_MPS_LOG_DIRECTORY", "/tmp/its-own")
            .spawn()
            .unwrap();
        // Until the child has executed `sleep`, its environment is still ours.
        let mut found = PathBuf::new();
        for _ in 0..200 {
            found = log_directory(child.id());
            if found == Path::new("/tmp/its-own") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(found, PathBuf::from("/tmp/its-own"));
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn the_server_is_a_child_of_the_daemon_of_our_user_named_as_mps() {
        // Our own children: a copy of `sleep` named as a server, and a plain `sleep`.
        let dir = tempfile::tempdir().unwrap();
        let server = dir.path().join("nvidia-cuda-mps-server");
        let sleep = std::process::Command::new("sh")
            .args(["-c", "command -v sleep"])
            .output()
            .unwrap();
        std::fs::copy(String::from_utf8(sleep.stdout).unwrap().trim(), &server).unwrap();
        let mut plain = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut named = std::process::Command::new(&server)
            .arg("30")
            .spawn()
            .unwrap();
        let me = std::process::id();
        let euid = std::fs::metadata(format!("/proc/{me}")).unwrap().uid();
        let mut found = None;
        for _ in 0..200 {
            found = server_of(me, euid, None);
            if found.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(found, Some(named.id()), "the named child alone");
        assert!(!is_server(plain.id(), me, euid));
        assert!(!is_server(named.id(), me, euid + 1), "another user's");
        assert!(!is_server(named.id(), me + 1, euid), "another parent's");
        assert_eq!(server_of(me, euid, Some(named.id())), Some(named.id()));
        for child in [&mut named, &mut plain] {
            let _ = child.kill();
            let _ = child.wait();
        }
        assert_eq!(server_of(me, euid, Some(named.id())), None, "gone");
    }
}
