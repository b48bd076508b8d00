//! `gpufill status`: each GPU with its utilization, memory and compute processes, and
//! whether an MPS control daemon runs: its clients (marked) share the SMs, the other
//! processes time-slice with them. `--json` prints the same as one JSON object.
//!
//! What it shows is the runtime's `status::MachineStatus`, read from NVML only, never
//! CUDA: it works where the driver's libcuda is missing, such as a container given only
//! the `utility` driver capability; its text is the runtime's too
//! (`MachineStatus::write_text`). This module prints it, and makes the JSON.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use gpufill_runtime::mps::Daemon;
use gpufill_runtime::status::{MachineStatus, daemon_state, is_ours};
use gpufill_runtime::{GpuInfo, PidView};
use serde_json::{Value, json};

use crate::cli::StatusArgs;

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
        status.write_text(out)
    };
    written
        .and_then(|()| out.flush())
        .context("cannot write to standard output")
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
    fn a_gpufill_is_marked_in_the_json_by_its_program_s_file_name_as_run_s_claim_judges_it() {
        let gpu = gpu_with(vec![
            process(20, "/usr/bin/gpufill --config /etc/g.toml", false),
            process(21, "gpufill-bench", false),
            process(22, "/opt/gpufill/bin/gpufill", false),
        ]);
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
}
