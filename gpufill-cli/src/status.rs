//! `gpufill status`: each GPU with its utilization, memory and compute processes.

use std::io::Write;

use anyhow::{Context, bail};
use gpufill_nvml::{GpuInfo, Nvml};

use gpufill_runtime::NO_DRIVER;

const MIB: f64 = 1024.0 * 1024.0;

/// Prints every GPU NVML sees; gpufill's own processes are marked.
///
/// # Errors
/// A missing driver, or NVML failing.
pub fn run(out: &mut dyn Write) -> anyhow::Result<()> {
    if !gpufill_cuda::driver_present() {
        bail!(NO_DRIVER);
    }
    let nvml = Nvml::init().context("cannot start NVML")?;
    let driver = nvml.driver_version().unwrap_or_else(|_| "?".into());
    let gpus = nvml.gpus().context("cannot list GPUs through NVML")?;
    writeln!(out, "driver {driver}, {} GPU(s)", gpus.len())?;
    for gpu in &gpus {
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
        gpu.name,
        gpu.uuid,
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
        let name = p.name.as_deref().unwrap_or("?");
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
