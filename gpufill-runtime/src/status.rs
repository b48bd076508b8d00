//! A machine's GPU status as `gpufill status` reports it: the driver, each GPU NVML
//! lists with its compute processes (gpufill's own marked by [`is_gpufill`], the rule of
//! the claim), the PID view, and the MPS control daemon of the pipe directory. It reads
//! NVML only, never CUDA, so it works where the driver's libcuda is missing (a container
//! given only the `utility` driver capability). Printing it is the caller's.

use std::path::PathBuf;

use gpufill_core::PidView;
use gpufill_nvml::{GpuInfo, Nvml, ProbeError, ProcessEntry};

use crate::is_gpufill;
use crate::mps::{self, Daemon};

/// Why the status could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// NVML could not start (no driver: "libnvidia-ml.so.1 not found").
    #[error("cannot start NVML")]
    Start(#[source] ProbeError),
    /// NVML started but could not list the GPUs.
    #[error("cannot list GPUs through NVML")]
    List(#[source] ProbeError),
}

/// What `gpufill status` shows.
#[derive(Clone, Debug, PartialEq)]
pub struct MachineStatus {
    /// The driver's version, `?` where NVML does not say.
    pub driver: String,
    /// Whether NVML lists host PIDs or only this namespace's.
    pub pid_view: PidView,
    /// The MPS pipe directory looked at ([`mps::pipe_directory`]).
    pub mps_pipe: PathBuf,
    /// The MPS control daemon there.
    pub mps: Daemon,
    /// Every GPU NVML lists, with its compute processes.
    pub gpus: Vec<GpuInfo>,
}

impl MachineStatus {
    /// Reads the status of this machine.
    ///
    /// # Errors
    /// NVML cannot start (no driver) or cannot list the GPUs.
    pub fn read() -> Result<MachineStatus, StatusError> {
        let nvml = Nvml::init().map_err(StatusError::Start)?;
        let driver = nvml.driver_version().unwrap_or_else(|_| "?".into());
        let gpus = nvml.gpus().map_err(StatusError::List)?;
        Ok(MachineStatus {
            driver,
            pid_view: gpufill_nvml::pid_view(),
            mps_pipe: mps::pipe_directory(),
            mps: mps::daemon(),
            gpus,
        })
    }
}

/// Whether this process is a gpufill: by its program's file name, the rule by which
/// `run` refuses a GPU another gpufill fills.
pub fn is_ours(process: &ProcessEntry) -> bool {
    process.name.as_deref().is_some_and(is_gpufill)
}

/// The daemon's state as one word (`running`, `quitting`, `absent`, `untrusted`), and
/// why it is not trusted, if it is not.
pub fn daemon_state(daemon: &Daemon) -> (&'static str, Option<&str>) {
    match daemon {
        Daemon::Running => ("running", None),
        Daemon::Quitting => ("quitting", None),
        Daemon::Absent => ("absent", None),
        Daemon::Untrusted(why) => ("untrusted", Some(why.as_str())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: Option<&str>) -> ProcessEntry {
        ProcessEntry {
            pid: 1,
            used_memory_bytes: None,
            name: name.map(Into::into),
            mps_client: false,
        }
    }

    #[test]
    fn a_gpufill_is_known_by_its_program_s_file_name() {
        assert!(is_ours(&named(Some(
            "/usr/bin/gpufill --config /etc/g.toml"
        ))));
        assert!(is_ours(&named(Some("/opt/gpufill/bin/gpufill"))));
        assert!(!is_ours(&named(Some("gpufill-bench"))));
        assert!(!is_ours(&named(None)));
    }

    #[test]
    fn the_daemon_is_one_word_and_an_untrusted_one_says_why() {
        assert_eq!(daemon_state(&Daemon::Running), ("running", None));
        assert_eq!(daemon_state(&Daemon::Quitting), ("quitting", None));
        assert_eq!(daemon_state(&Daemon::Absent), ("absent", None));
        assert_eq!(
            daemon_state(&Daemon::Untrusted("a link".into())),
            ("untrusted", Some("a link"))
        );
    }

    #[test]
    fn no_driver_is_said_once_under_its_context() {
        let e = StatusError::Start(ProbeError::DriverNotLoaded);
        assert_eq!(e.to_string(), "cannot start NVML");
        assert_eq!(
            std::error::Error::source(&e).map(ToString::to_string),
            Some("NVIDIA driver is not loaded".to_owned())
        );
    }
}
