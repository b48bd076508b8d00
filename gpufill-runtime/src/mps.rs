//! Whether an MPS control daemon runs, for `yield.mps = "auto"`.

use std::path::Path;

/// Whether an MPS control daemon runs: its control pipe exists in
/// `$CUDA_MPS_PIPE_DIRECTORY` (default `/tmp/nvidia-mps`), where CUDA clients look for it.
pub fn daemon_running() -> bool {
    let dir =
        std::env::var_os("CUDA_MPS_PIPE_DIRECTORY").unwrap_or_else(|| "/tmp/nvidia-mps".into());
    control_pipe_in(Path::new(&dir))
}

/// Whether `dir` holds an MPS control pipe.
pub fn control_pipe_in(dir: &Path) -> bool {
    dir.join("control").exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_mps_daemon_is_recognised_by_its_control_pipe() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!control_pipe_in(dir.path()));
        std::fs::write(dir.path().join("control"), b"").unwrap();
        assert!(control_pipe_in(dir.path()));
    }
}
