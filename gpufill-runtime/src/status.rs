//! A machine's GPU status as `gpufill status` reports it: the driver, each GPU NVML
//! lists with its compute processes (gpufill's own marked by [`is_gpufill`], the rule of
//! the claim), the PID view, and the MPS control daemon of the pipe directory. It reads
//! NVML only, never CUDA, so it works where the driver's libcuda is missing (a container
//! given only the `utility` driver capability). [`MachineStatus::write_text`] gives it as
//! `gpufill status` prints it; where it goes is the caller's.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use gpufill_core::PidView;
use gpufill_nvml::{GpuInfo, Nvml, ProbeError, ProcessEntry};

use crate::claim::escape_controls;
use crate::is_gpufill;
use crate::mps::{self, Daemon};

const MIB: f64 = 1024.0 * 1024.0;

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

    /// The whole status as text: the driver, the PID view, MPS, then each GPU with its
    /// processes, gpufill's own and MPS clients marked. Text that other processes set
    /// (a process's name comes from its argv) has its control characters escaped.
    ///
    /// # Errors
    /// I/O errors of `out`.
    pub fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "driver {}, {} GPU(s)", self.driver, self.gpus.len())?;
        writeln!(out, "{}", view_line(self.pid_view))?;
        writeln!(out, "{}", mps_line(&self.mps_pipe, &self.mps))?;
        for gpu in &self.gpus {
            write_gpu(out, gpu)?;
        }
        Ok(())
    }
}

/// What the MPS state means for the process lists below.
fn mps_line(pipe: &Path, daemon: &Daemon) -> String {
    let pipe = escape_controls(&pipe.display().to_string());
    match daemon {
        Daemon::Running => format!(
            "MPS: a control daemon runs ({pipe}): its clients (marked) share the SMs; the other \
             processes time-slice with them"
        ),
        Daemon::Quitting => format!(
            "MPS: a control daemon was told to quit ({pipe}): it waits for its clients (marked) \
             to exit; the other processes time-slice with them"
        ),
        Daemon::Absent => format!("MPS: no control daemon ({pipe}): processes time-slice"),
        Daemon::Untrusted(why) => format!(
            "MPS: not trusted as a control daemon ({}): processes time-slice",
            escape_controls(why)
        ),
    }
}

fn write_gpu(out: &mut dyn Write, gpu: &GpuInfo) -> io::Result<()> {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    writeln!(
        out,
        "\nGPU {}  {}  {}{}",
        gpu.index,
        escape_controls(&gpu.name),
        escape_controls(&gpu.uuid),
        if gpu.mig_enabled { "  (MIG)" } else { "" }
    )?;
    writeln!(
        out,
        "  utilization {} %   memory {:.0} / {:.0} MiB   power {} W",
        opt(gpu.utilization_percent.map(|u| u.to_string())),
        gpu.memory_used_bytes as f64 / MIB,
        gpu.memory_total_bytes as f64 / MIB,
        opt(gpu.power_watts.map(|w| format!("{w:.0}"))),
    )?;
    if gpu.processes.is_empty() {
        writeln!(out, "  no compute processes")?;
    }
    for p in &gpu.processes {
        let name = escape_controls(p.name.as_deref().unwrap_or("?"));
        let ours = if is_ours(p) { "  (gpufill)" } else { "" };
        let client = if p.mps_client { "  (MPS client)" } else { "" };
        writeln!(
            out,
            "  pid {:>8}  {:>8} MiB  {name}{ours}{client}",
            p.pid,
            opt(p
                .used_memory_bytes
                .map(|b| format!("{:.0}", b as f64 / MIB)))
        )?;
    }
    Ok(())
}

/// What the PID view means for the process lists below.
fn view_line(view: PidView) -> &'static str {
    match view {
        PidView::Host => "PID view: host (NVML lists every compute process, with host PIDs)",
        PidView::Namespace => {
            "PID view: namespace (NVML lists only this PID namespace's processes; gpufill \
             sees the others by the device memory they hold and their utilization)"
        }
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

    fn gpu_with(processes: Vec<ProcessEntry>) -> GpuInfo {
        GpuInfo {
            index: 0,
            uuid: "GPU-1".into(),
            name: "NVIDIA H100".into(),
            memory_used_bytes: 300 << 20,
            memory_total_bytes: 80 << 30,
            utilization_percent: Some(50),
            power_watts: Some(120.0),
            mig_enabled: false,
            processes,
        }
    }

    fn process(pid: u32, name: &str, mps_client: bool) -> ProcessEntry {
        ProcessEntry {
            pid,
            used_memory_bytes: Some(254 << 20),
            name: Some(name.into()),
            mps_client,
        }
    }

    /// `gpu`'s lines as `write_text` prints them.
    fn text_of(gpu: &GpuInfo) -> String {
        let mut out = Vec::new();
        write_gpu(&mut out, gpu).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn mps_clients_are_marked_and_the_daemon_is_said() {
        let gpu = gpu_with(vec![
            process(10, "/usr/bin/gpufill", true),
            process(11, "python3", true),
            process(12, "other", false),
        ]);
        let text = text_of(&gpu);
        let line = |pid: &str| text.lines().find(|l| l.contains(pid)).unwrap().to_owned();
        assert!(
            line(" 10 ").ends_with("/usr/bin/gpufill  (gpufill)  (MPS client)"),
            "{text}"
        );
        assert!(line(" 11 ").ends_with("python3  (MPS client)"), "{text}");
        assert!(line(" 12 ").ends_with("other"), "{text}");
        let pipe = Path::new("/run/nvidia-mps");
        assert!(
            mps_line(pipe, &Daemon::Running)
                .contains("(/run/nvidia-mps): its clients (marked) share the SMs")
        );
        assert!(mps_line(pipe, &Daemon::Absent).ends_with("processes time-slice"));
        assert!(mps_line(pipe, &Daemon::Quitting).contains("told to quit"));
        assert!(mps_line(pipe, &Daemon::Untrusted("x is a link".into())).contains("x is a link"));
    }

    #[test]
    fn a_gpufill_is_marked_by_its_program_s_file_name_as_run_s_claim_judges_it() {
        let gpu = gpu_with(vec![
            process(20, "/usr/bin/gpufill --config /etc/g.toml", false),
            process(21, "gpufill-bench", false),
            process(22, "/opt/gpufill/bin/gpufill", false),
        ]);
        let text = text_of(&gpu);
        let line = |pid: &str| text.lines().find(|l| l.contains(pid)).unwrap().to_owned();
        assert!(
            line(" 20 ").ends_with("/usr/bin/gpufill --config /etc/g.toml  (gpufill)"),
            "{text}"
        );
        assert!(line(" 21 ").ends_with("gpufill-bench"), "{text}");
        assert!(line(" 22 ").ends_with("(gpufill)"), "{text}");
    }

    #[test]
    fn control_characters_in_process_names_are_escaped() {
        let gpu = gpu_with(vec![ProcessEntry {
            pid: 7,
            used_memory_bytes: None,
            name: Some("evil\u{1b}]0;pwned\u{7}\u{1b}[2J".into()),
            mps_client: false,
        }]);
        let text = text_of(&gpu);
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{text:?}"
        );
        assert!(text.contains("evil\\u{1b}]0;pwned"), "{text}");
    }

    #[test]
    fn the_text_gives_the_driver_the_pid_view_and_mps_before_each_gpu() {
        let status = MachineStatus {
            driver: "580.1".into(),
            pid_view: PidView::Namespace,
            mps_pipe: "/tmp/nvidia-mps".into(),
            mps: Daemon::Absent,
            gpus: vec![gpu_with(Vec::new())],
        };
        let mut out = Vec::new();
        status.write_text(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "driver 580.1, 1 GPU(s)");
        assert!(lines[1].starts_with("PID view: namespace"), "{text}");
        assert!(
            lines[2].starts_with("MPS: no control daemon (/tmp/nvidia-mps)"),
            "{text}"
        );
        assert_eq!(lines[4], "GPU 0  NVIDIA H100  GPU-1");
        assert_eq!(lines[6], "  no compute processes");
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
