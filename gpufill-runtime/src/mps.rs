//! Whether an MPS control daemon runs, for `yield.mps = "auto"`.
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

use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

/// Symbolic links followed on the way to the endpoint, at most.
const MAX_LINKS: usize = 8;

/// Whether an MPS control daemon runs: a control pipe ([`control_pipe_in`]) in
/// `$CUDA_MPS_PIPE_DIRECTORY` (default `/tmp/nvidia-mps`), where CUDA clients look.
pub fn daemon_running() -> bool {
    let dir =
        std::env::var_os("CUDA_MPS_PIPE_DIRECTORY").unwrap_or_else(|| "/tmp/nvidia-mps".into());
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let control = Path::new(&dir).join("control");
    match untrusted_reason(&control, euid) {
        None => true,
        // Say why only where something is there: no MPS at all is the common case.
        Some(why) if control.exists() => {
            tracing::warn!("not trusted as an MPS control daemon: {why}");
            false
        }
        Some(_) => false,
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
