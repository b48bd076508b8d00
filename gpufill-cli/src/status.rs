//! `gpufill status`: each GPU with its utilization, memory and compute processes.
//!
//! It reads NVML only, never CUDA: it works where the driver's libcuda is missing,
//! such as a container given only the `utility` driver capability.

use std::io::Write;

use anyhow::Context;
use gpufill_nvml::{GpuInfo, Nvml};
use gpufill_runtime::PidView;

const MIB: f64 = 1024.0 * 1024.0;

/// Prints every GPU NVML sees; gpufill's own processes are marked.
///
/// # Errors
/// NVML missing (no driver: "libnvidia-ml.so.1 not found") or failing; `out` that
/// cannot be written ("cannot write to standard output").
pub fn run(out: &mut dyn Write) -> anyhow::Result<()> {
    let nvml = Nvml::init().context("cannot start NVML")?;
    let driver = nvml.driver_version().unwrap_or_else(|_| "?".into());
    let gpus = nvml.gpus().context("cannot list GPUs through NVML")?;
    write_all(out, &driver, gpufill_runtime::pid_view(), &gpus)
        .and_then(|()| out.flush())
        .context("cannot write to standard output")
}

/// The whole report: the driver, the PID view, then each GPU.
fn write_all(
    out: &mut dyn Write,
    driver: &str,
    view: PidView,
    gpus: &[GpuInfo],
) -> std::io::Result<()> {
    writeln!(out, "driver {driver}, {} GPU(s)", gpus.len())?;
    writeln!(out, "{}", view_line(view))?;
    for gpu in gpus {
        write_gpu(out, gpu)?;
    }
    Ok(())
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
        let ours = if name
            .rsplit('/')
            .next()
            .is_some_and(|n| n.starts_with("gpufill"))
        {
            "  (gpufill)"
        } else {
            ""
        };
        writeln!(
            out,
            "  pid {:>8}  {:>8} MiB  {name}{ours}",
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

/// `s` safe for a terminal: a process name comes from its argv, which any user sets,
/// so control characters (escape sequences that move the cursor, retitle the window or
/// clear the screen) are shown escaped, as `\u{1b}`, never written raw.
fn printable(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufill_nvml::ProcessEntry;

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
