//! `gpufill status`: each GPU with its utilization, memory and compute processes, and
//! whether an MPS control daemon runs: its clients (marked) share the SMs, the other
//! processes time-slice with them. `--json` prints the same as one JSON object.
//!
//! What it shows is the runtime's `status::MachineStatus`, read from NVML only, never
//! CUDA: it works where the driver's libcuda is missing, such as a container given only
//! the `utility` driver capability. This module prints it.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use gpufill_runtime::mps::Daemon;
use gpufill_runtime::status::{MachineStatus, daemon_state, is_ours};
use gpufill_runtime::{GpuInfo, PidView};
use serde_json::{Value, json};

use crate::cli::StatusArgs;

const MIB: f64 = 1024.0 * 1024.0;

/// Prints every GPU NVML sees; gpufill's own processes and MPS clients are marked.
///
/// # Errors
/// NVML missing (no driver: "libnvidia-ml.so.1 not found") or failing; `out` that
/// cannot be written ("cannot write to standard output").
pub fn run(args: &StatusArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let status = match MachineStatus::read() {
        Ok(status) => status,
        // A reader of the JSON gets JSON that says so; the error follows as ever.
        Err(e) if args.json && matches!(e, gpufill_runtime::status::StatusError::Start(_)) => {
            let e = anyhow::Error::new(e);
            let text = serde_json::to_string_pretty(&no_driver_json(&e))?;
            writeln!(out, "{text}")
                .and_then(|()| out.flush())
                .context("cannot write to standard output")?;
            return Err(e);
        }
        Err(e) => return Err(e.into()),
    };
    let MachineStatus {
        driver,
        pid_view: view,
        mps_pipe: pipe,
        mps: daemon,
        gpus,
    } = &status;
    let written = if args.json {
        let text = serde_json::to_string_pretty(&to_json(driver, *view, pipe, daemon, gpus))?;
        writeln!(out, "{text}")
    } else {
        write_all(out, driver, *view, pipe, daemon, gpus)
    };
    written
        .and_then(|()| out.flush())
        .context("cannot write to standard output")
}

/// The whole report as text: the driver, the PID view, MPS, then each GPU.
fn write_all(
    out: &mut dyn Write,
    driver: &str,
    view: PidView,
    pipe: &Path,
    daemon: &Daemon,
    gpus: &[GpuInfo],
) -> std::io::Result<()> {
    writeln!(out, "driver {driver}, {} GPU(s)", gpus.len())?;
    writeln!(out, "{}", view_line(view))?;
    writeln!(out, "{}", mps_line(pipe, daemon))?;
    for gpu in gpus {
        write_gpu(out, gpu)?;
    }
    Ok(())
}

/// What the MPS state means for the process lists below.
fn mps_line(pipe: &Path, daemon: &Daemon) -> String {
    let pipe = printable(&pipe.display().to_string());
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
            printable(why)
        ),
    }
}

/// The JSON status of a machine where NVML cannot start (no driver): no GPUs, and why.
fn no_driver_json(error: &anyhow::Error) -> Value {
    json!({
        "driver": Value::Null,
        "error": format!("{error:#}"),
        "gpus": [],
    })
}

/// The whole status as one JSON value.
fn to_json(driver: &str, view: PidView, pipe: &Path, daemon: &Daemon, gpus: &[GpuInfo]) -> Value {
    let (state, reason) = daemon_state(daemon);
    let gpus: Vec<Value> = gpus
        .iter()
        .map(|gpu| {
            let processes: Vec<Value> = gpu
                .processes
                .iter()
                .map(|p| {
                    json!({
                        "pid": p.pid,
                        "name": p.name,
                        "used_memory_bytes": p.used_memory_bytes,
                        "mps_client": p.mps_client,
                        "gpufill": is_ours(p),
                    })
                })
                .collect();
            json!({
                "index": gpu.index,
                "uuid": gpu.uuid,
                "name": gpu.name,
                "mig_enabled": gpu.mig_enabled,
                "utilization_percent": gpu.utilization_percent,
                "memory_used_bytes": gpu.memory_used_bytes,
                "memory_total_bytes": gpu.memory_total_bytes,
                "power_watts": gpu.power_watts,
                "processes": processes,
            })
        })
        .collect();
    json!({
        "driver": driver,
        "pid_view": view.as_str(),
        "mps": {
            "daemon": state,
            "pipe_directory": pipe.display().to_string(),
            "reason": reason,
        },
        "gpus": gpus,
    })
}

fn write_gpu(out: &mut dyn Write, gpu: &GpuInfo) -> std::io::Result<()> {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    writeln!(
        out,
        "\nGPU {}  {}  {}{}",
        gpu.index,
        printable(&gpu.name),
        printable(&gpu.uuid),
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
        let name = printable(p.name.as_deref().unwrap_or("?"));
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

/// `s` safe for a terminal: a process name comes from its argv, which any user sets.
fn printable(s: &str) -> String {
    gpufill_runtime::escape_controls(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufill_runtime::ProcessEntry;

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

    #[test]
    fn mps_clients_are_marked_and_the_daemon_is_said() {
        let gpu = gpu_with(vec![
            process(10, "/usr/bin/gpufill", true),
            process(11, "python3", true),
            process(12, "other", false),
        ]);
        let mut out = Vec::new();
        write_gpu(&mut out, &gpu).unwrap();
        let text = String::from_utf8(out).unwrap();
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
    fn the_json_status_carries_the_daemon_gpus_and_clients() {
        let gpu = gpu_with(vec![
            process(10, "gpufill", true),
            process(12, "other", false),
        ]);
        let value = to_json(
            "580.1",
            PidView::Host,
            Path::new("/tmp/nvidia-mps"),
            &Daemon::Untrusted("why".into()),
            &[gpu],
        );
        assert_eq!(value["driver"], "580.1");
        assert_eq!(value["pid_view"], "host");
        assert_eq!(value["mps"]["daemon"], "untrusted");
        assert_eq!(value["mps"]["reason"], "why");
        assert_eq!(value["mps"]["pipe_directory"], "/tmp/nvidia-mps");
        let gpu = &value["gpus"][0];
        assert_eq!(gpu["uuid"], "GPU-1");
        assert_eq!(gpu["memory_total_bytes"], 80u64 << 30);
        assert_eq!(gpu["processes"][0]["mps_client"], true);
        assert_eq!(gpu["processes"][0]["gpufill"], true);
        assert_eq!(gpu["processes"][1]["mps_client"], false);
        assert_eq!(gpu["processes"][1]["used_memory_bytes"], 254u64 << 20);
    }

    #[test]
    fn a_gpufill_is_marked_by_its_program_s_file_name_as_run_s_claim_judges_it() {
        let gpu = gpu_with(vec![
            process(20, "/usr/bin/gpufill --config /etc/g.toml", false),
            process(21, "gpufill-bench", false),
            process(22, "/opt/gpufill/bin/gpufill", false),
        ]);
        let mut out = Vec::new();
        write_gpu(&mut out, &gpu).unwrap();
        let text = String::from_utf8(out).unwrap();
        let line = |pid: &str| text.lines().find(|l| l.contains(pid)).unwrap().to_owned();
        assert!(
            line(" 20 ").ends_with("/usr/bin/gpufill --config /etc/g.toml  (gpufill)"),
            "{text}"
        );
        assert!(line(" 21 ").ends_with("gpufill-bench"), "{text}");
        assert!(line(" 22 ").ends_with("(gpufill)"), "{text}");
        let value = to_json(
            "580.1",
            PidView::Host,
            Path::new("/tmp/nvidia-mps"),
            &Daemon::Absent,
            &[gpu],
        );
        let marks: Vec<&Value> = (0..3)
            .map(|i| &value["gpus"][0]["processes"][i]["gpufill"])
            .collect();
        assert_eq!(marks, [true, false, true]);
    }

    #[test]
    fn control_characters_in_process_names_are_escaped() {
        let gpu = GpuInfo {
            index: 0,
            uuid: "GPU-1".into(),
            name: "NVIDIA H100".into(),
            memory_used_bytes: 0,
            memory_total_bytes: 1,
            utilization_percent: Some(0),
            power_watts: None,
            mig_enabled: false,
            processes: vec![ProcessEntry {
                pid: 7,
                used_memory_bytes: None,
                name: Some("evil\u{1b}]0;pwned\u{7}\u{1b}[2J".into()),
                mps_client: false,
            }],
        };
        let mut out = Vec::new();
        write_gpu(&mut out, &gpu).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{text:?}"
        );
        assert!(text.contains("evil\\u{1b}]0;pwned"), "{text}");
    }
}
