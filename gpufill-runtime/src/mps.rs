//! Whether an MPS control daemon runs, for `yield.mps = "auto"`.
//!
//! Under MPS gpufill never yields (kernels of MPS clients run together), so believing
//! in a daemon that is not there switches yielding off: the check must not be one any
//! local user can satisfy. The daemon (`nvidia-cuda-mps-control -d`) creates its
//! control endpoint, `control`, in its pipe directory, as the user it runs as (root for
//! a shared daemon); NVIDIA documents the directory as holding "named pipes and UNIX
//! domain sockets", so either counts. A plain file, or a pipe or socket that another
//! user made in a world-writable `/tmp`, is not taken for one.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// Whether an MPS control daemon runs: a control pipe ([`control_pipe_in`]) in
/// `$CUDA_MPS_PIPE_DIRECTORY` (default `/tmp/nvidia-mps`), where CUDA clients look.
pub fn daemon_running() -> bool {
    let dir =
        std::env::var_os("CUDA_MPS_PIPE_DIRECTORY").unwrap_or_else(|| "/tmp/nvidia-mps".into());
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    control_pipe_in(Path::new(&dir), euid)
}

/// Whether `dir` holds an MPS control endpoint: `control` is a FIFO or a UNIX socket
/// (not followed if a link) owned by root or by `euid`, the user we run as.
pub fn control_pipe_in(dir: &Path, euid: u32) -> bool {
    match std::fs::symlink_metadata(dir.join("control")) {
        Ok(meta) => {
            let kind = meta.file_type();
            (kind.is_fifo() || kind.is_socket()) && (meta.uid() == 0 || meta.uid() == euid)
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn a_unix_socket_of_our_own_user_is_a_daemon() {
        let dir = tempfile::tempdir().unwrap();
        let control = dir.path().join("control");
        let _listener = std::os::unix::net::UnixListener::bind(&control).unwrap();
        let owner = std::fs::metadata(&control).unwrap().uid();
        assert!(control_pipe_in(dir.path(), owner));
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
