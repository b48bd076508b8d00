//! The spin kernels, embedded as PTX (`gpufill-cuda/kernels/spin.ptx`, generated from `gpufill-cuda/kernels/spin.cu`;
//! `gpufill-cuda/kernels/README.md` says how). The driver JIT-compiles it when the module loads.

/// The PTX text of `gpufill-cuda/kernels/spin.ptx`: `.target sm_70`, PTX ISA 7.0.
pub const SPIN_PTX: &str = include_str!("../kernels/spin.ptx");

/// The entry gpufill launches: `spin(unsigned long long spin_ns, unsigned long long
/// yield_ns)`, busy-waiting on `%globaltimer` for `spin_ns` nanoseconds in every thread,
/// and ending at once when the clock jumps by more than `yield_ns` between two reads
/// (another context preempted it).
pub const SPIN: &str = "spin";

/// The same wait with `__nanosleep(200)` in the loop: same residency, less power.
pub const SPIN_SLEEP: &str = "spin_sleep";

/// Which entry of [`SPIN_PTX`] the launcher runs: the one kernel choice, named in the
/// config as `load.kernel = "spin" | "sleep"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SpinKernel {
    /// [`SPIN`]: a pure busy-wait on `%globaltimer`.
    Spin,
    /// [`SPIN_SLEEP`]: the busy-wait with `__nanosleep(200)` per iteration: the same NVML
    /// and GPM readings for less power
    /// (docs/benchmarks.md#power-and-gpm-sm-utilization-over-width-x-duty-scriptspower_gridpy),
    /// so the default.
    #[default]
    Sleep,
}

impl SpinKernel {
    /// The PTX entry name.
    pub fn entry(self) -> &'static str {
        match self {
            SpinKernel::Spin => SPIN,
            SpinKernel::Sleep => SPIN_SLEEP,
        }
    }

    /// The short name used in the config and on the command line: `spin` or `sleep`
    /// ([`SpinKernel::as_str`]).
    pub fn name(self) -> &'static str {
        self.as_str()
    }
}

gpufill_core::named_choice!(SpinKernel { Spin => "spin", Sleep => "sleep" });

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// The parameter list of `.visible .entry name(...)`, whitespace-collapsed.
    fn entry_params(ptx: &str, name: &str) -> Option<String> {
        let start = ptx.find(&format!(".visible .entry {name}("))?;
        let rest = &ptx[start..];
        let open = rest.find('(')? + 1;
        let close = rest.find(')')?;
        Some(
            rest[open..close]
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
        )
    }

    #[test]
    fn every_kernel_choice_names_an_entry_of_the_embedded_ptx() {
        for kernel in [SpinKernel::Spin, SpinKernel::Sleep] {
            assert!(
                entry_params(SPIN_PTX, kernel.entry()).is_some(),
                "{kernel:?}"
            );
        }
        assert_ne!(SpinKernel::Spin.entry(), SpinKernel::Sleep.entry());
    }

    #[test]
    fn embedded_ptx_targets_sm_70_at_a_low_isa_version() {
        let lines: Vec<&str> = SPIN_PTX.lines().map(str::trim).collect();
        assert!(lines.contains(&".target sm_70"), "PTX must target sm_70");
        assert!(
            lines.contains(&".version 7.0"),
            "PTX ISA must stay at 7.0 for older drivers"
        );
        assert!(lines.contains(&".address_size 64"));
    }

    #[test]
    fn spin_entries_take_exactly_two_u64s() {
        for name in [SPIN, SPIN_SLEEP] {
            let params = entry_params(SPIN_PTX, name).unwrap_or_else(|| panic!("no entry {name}"));
            assert_eq!(params.matches(".param").count(), 2, "{name}: {params}");
            assert_eq!(
                params.matches(".param .u64 ").count(),
                2,
                "{name}: {params}"
            );
        }
    }

    #[test]
    fn kernel_names_parse_back_and_others_are_refused() {
        for kernel in SpinKernel::ALL {
            assert_eq!(kernel.name().parse::<SpinKernel>(), Ok(kernel));
        }
        assert_eq!(SpinKernel::default(), SpinKernel::Sleep);
        assert_eq!(
            "nap".parse::<SpinKernel>(),
            Err("expected \"spin\" or \"sleep\", got \"nap\"".to_owned())
        );
    }

    #[test]
    fn spin_ptx_uses_no_memory_beyond_its_argument() {
        for forbidden in [
            ".local",
            "st.global",
            "ld.global",
            "vprintf",
            "malloc",
            ".shared",
        ] {
            assert!(!SPIN_PTX.contains(forbidden), "PTX contains {forbidden}");
        }
        assert!(SPIN_PTX.contains("%globaltimer"));
    }

    /// ptxas: `$PTXAS`, else `PATH`, else the `nvidia-cuda-nvcc-cu12` wheel.
    fn find_ptxas() -> Option<PathBuf> {
        if let Some(path) = std::env::var_os("PTXAS").filter(|p| !p.is_empty()) {
            return Some(PathBuf::from(path));
        }
        let on_path = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("ptxas"))
                .find(|p| p.is_file())
        });
        on_path.or_else(|| {
            // The wheel's `nvidia` is a namespace package: no __file__, but a __path__.
            let script = "import nvidia.cuda_nvcc as m; print(list(m.__path__)[0])";
            let out = Command::new("python3").args(["-c", script]).output().ok()?;
            let dir = String::from_utf8(out.stdout).ok()?;
            let ptxas = Path::new(dir.trim()).join("bin").join("ptxas");
            (out.status.success() && ptxas.is_file()).then_some(ptxas)
        })
    }

    /// The ptxas `-v` report for `arch`, after asserting that it assembled.
    fn assemble(ptxas: &Path, arch: &str) -> String {
        let dir = std::env::temp_dir().join(format!("gpufill-ptx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ptx = dir.join("spin.ptx");
        std::fs::write(&ptx, SPIN_PTX).unwrap();
        let out = Command::new(ptxas)
            .arg("-v")
            .arg(format!("-arch={arch}"))
            .arg(&ptx)
            .arg("-o")
            .arg(dir.join(format!("spin_{arch}.cubin")))
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", ptxas.display()));
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let _ = std::fs::remove_dir_all(&dir);
        assert!(out.status.success(), "ptxas -arch={arch} failed:\n{report}");
        report
    }

    /// Ignored unless asked for, since it needs ptxas (a test that found none and
    /// returned would be reported as passed); `.ci/run` runs it with `--ignored`, and
    /// there a missing ptxas fails it.
    #[test]
    #[ignore = "needs ptxas: pip install nvidia-cuda-nvcc-cu12 (or set PTXAS), then --ignored"]
    fn ptxas_assembles_the_kernels_with_no_stack_and_no_local_memory() {
        let ptxas = find_ptxas()
            .expect("ptxas not found: pip install nvidia-cuda-nvcc-cu12 (or set PTXAS)");
        for arch in ["sm_70", "sm_90"] {
            let report = assemble(&ptxas, arch);
            for name in [SPIN, SPIN_SLEEP] {
                let props = report
                    .split(&format!("Function properties for {name}\n"))
                    .nth(1)
                    .and_then(|rest| rest.lines().next())
                    .unwrap_or_else(|| panic!("{arch}: no properties for {name}:\n{report}"));
                assert!(
                    props.trim()
                        == "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads",
                    "{arch} {name}: {props}"
                );
            }
            assert!(
                !report.contains("lmem"),
                "{arch}: local memory used:\n{report}"
            );
        }
    }
}
