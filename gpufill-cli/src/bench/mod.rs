//! `gpufill bench`: tracking, memory, power and yield, measured on the user's own GPU
//! (or on the simulated GPU with `--sim`), with a progress bar, a table and files.
//!
//! The measurement, its summary and their rendering are the runtime's
//! (`gpufill_runtime::bench`: the phases, the `Rig` it drives, the real `RealRig` and
//! the simulated `SimRig`, the maths, the table, the CSV and the plot). This module adds
//! the flags, the real rig's foreign CUDA process (this binary as `gpufill
//! bench-foreign`, [`foreign`]), the progress bar, and the files with the JSON; all of it
//! is the same for both rigs, so `--sim` tests the whole command in CI.

pub mod foreign;

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use gpufill_core::Utilization;
use gpufill_runtime::bench::{
    self, BenchSummary, Plan, Progress, RealRig, RealRigError, Recording, Rig, RigError, SimRig,
    svg,
};
use gpufill_runtime::{Metric, OpenError, Settings};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cli::BenchArgs;
use crate::config::Config;
use crate::error::UsageError;

/// Runs `gpufill bench`, printing the table to `out`.
///
/// # Errors
/// [`UsageError`] for bad flags or a GPU that does not exist; runtime errors for a
/// missing driver, a busy GPU (without `--force`), a failed GPU or unwritable files.
pub fn run(args: &BenchArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let targets = check_args(args)?;
    let config = bench_config(args)?;
    let mut rig: Box<dyn Rig> = if args.sim {
        if let Some(gpu) = &args.gpu {
            tracing::warn!("--gpu {gpu} is not used with --sim: the simulated GPU is measured");
        }
        Box::new(SimRig::new(&config))
    } else {
        Box::new(open_real(args, &config)?)
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let bar = progress_bar(args, &targets, &config);
    let plan = Plan {
        targets,
        seconds_per_target: args.seconds,
        skip_yield: args.no_yield.then(|| "--no-yield".to_owned()),
    };
    let recorded = bench::measure(rig.as_mut(), &plan, &config, &mut |p| match p {
        Progress::Target(t) => bar.set_message(format!("target {:.0}%", t.percent())),
        Progress::YieldTest => bar.set_message("yield test"),
        Progress::ElapsedMs(ms) => bar.set_position(ms),
    });
    rig.finish();
    bar.finish_and_clear();
    let (recording, skipped) = recorded?;
    let summary = BenchSummary::new(rig.as_ref(), &plan, args.sim, &config, &recording, skipped);
    write_files(&args.out, &rig.name(), &recording, &summary)?;
    bench::write_table(&summary, out)?;
    writeln!(
        out,
        "wrote bench.svg, bench.csv and bench.json to {}",
        args.out.display()
    )?;
    if summary.pauses() > 0 {
        bail!(
            "gpufill paused {} times with nobody else on the GPU",
            summary.pauses()
        );
    }
    match &summary.yield_test {
        Some(y) if !y.passed() => bail!("the yield test failed"),
        _ => Ok(()),
    }
}

/// The real GPU of `--gpu` (else the settings' first), with this binary as the yield
/// test's foreign process.
fn open_real(args: &BenchArgs, config: &Settings) -> anyhow::Result<RealRig> {
    match RealRig::open(
        config,
        args.gpu.clone(),
        args.force,
        Box::new(spawn_foreign),
    ) {
        Ok(rig) => Ok(rig),
        Err(RealRigError::Open(OpenError::NoDriver)) => bail!(
            "{}; `gpufill bench --sim` measures the simulated GPU",
            OpenError::NoDriver
        ),
        Err(e) if e.is_settings_error() => Err(UsageError(e.into()).into()),
        Err(e) => Err(e.into()),
    }
}

/// Starts `gpufill bench-foreign` on CUDA device `ordinal` for `run`.
fn spawn_foreign(ordinal: usize, run: Duration) -> Result<Child, RigError> {
    let exe = std::env::current_exe().context("cannot find the gpufill binary")?;
    let child = Command::new(exe)
        .args(["-q", "bench-foreign", "--ordinal"])
        .arg(ordinal.to_string())
        .arg("--seconds")
        .arg(run.as_secs_f64().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start the foreign process (gpufill bench-foreign)")?;
    Ok(child)
}

/// The settings measured: the file's (`--config`), else the defaults. Only the `util`
/// metric can be benched: its readings are what the table and plot show.
fn bench_config(args: &BenchArgs) -> Result<Settings, UsageError> {
    let Some(path) = &args.config else {
        return Ok(Settings::default());
    };
    let config = Config::load(path).map_err(|e| UsageError(e.into()))?;
    if config.metric != Metric::Util {
        return Err(UsageError(anyhow::anyhow!(
            "{}: metric: bench measures metric = \"util\" only",
            path.display()
        )));
    }
    Ok(config.to_settings())
}

fn check_args(args: &BenchArgs) -> Result<Vec<Utilization>, UsageError> {
    let fail = |m: String| Err(UsageError(anyhow::anyhow!(m)));
    if !(args.seconds.is_finite() && (1.0..=3600.0).contains(&args.seconds)) {
        return fail(format!(
            "--seconds must be between 1 and 3600, got {}",
            args.seconds
        ));
    }
    if args.targets.is_empty() || args.targets.len() > 20 {
        return fail(format!(
            "--targets must list 1 to 20 percentages, got {}",
            args.targets.len()
        ));
    }
    args.targets
        .iter()
        .map(|&t| match Utilization::from_percent(t) {
            Ok(u) if t > 0.0 => Ok(u),
            _ => Err(UsageError(anyhow::anyhow!(
                "--targets: each target must be above 0 and at most 100 percent, got {t}"
            ))),
        })
        .collect()
}

fn progress_bar(args: &BenchArgs, targets: &[Utilization], config: &Settings) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let per_target = Duration::from_secs_f64(args.seconds);
    let mut total = per_target * u32::try_from(targets.len()).unwrap_or(u32::MAX);
    if !args.no_yield {
        total += bench::yield_test_length(config);
    }
    let bar = ProgressBar::with_draw_target(
        Some(u64::try_from(total.as_millis()).unwrap_or(u64::MAX)),
        ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = ProgressStyle::with_template("{msg:<16} [{bar:40}] {percent:>3}% eta {eta}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

fn write_files(
    dir: &Path,
    gpu: &str,
    rec: &Recording,
    summary: &BenchSummary,
) -> anyhow::Result<()> {
    let create = |name: &str| {
        let path = dir.join(name);
        File::create(&path)
            .map(BufWriter::new)
            .with_context(|| format!("cannot create {}", path.display()))
    };
    let mut csv = create("bench.csv")?;
    bench::write_csv(&mut csv, rec).and_then(|()| csv.flush())?;
    let mut svg = create("bench.svg")?;
    svg.write_all(svg::render(&svg::Plot::of(gpu, rec, summary.simulated)).as_bytes())
        .and_then(|()| svg.flush())?;
    let mut json = create("bench.json")?;
    serde_json::to_writer_pretty(&mut json, summary)?;
    writeln!(json).and_then(|()| json.flush())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufill_runtime::Time;

    fn args() -> BenchArgs {
        BenchArgs {
            gpu: None,
            config: None,
            targets: vec![50.0],
            seconds: 3.0,
            out: "unused".into(),
            no_yield: false,
            sim: true,
            force: false,
        }
    }

    #[test]
    fn an_empty_window_is_null_in_the_json_rather_than_nan() {
        let s = bench::summarize_target(
            &[],
            Time::ZERO,
            Time::from_millis(1000),
            Utilization::from_percent(10.0).unwrap(),
            &[],
            None,
        );
        let json = serde_json::to_string(&s).unwrap();
        assert!(!json.contains("NaN"), "{json}");
    }
    #[test]
    fn a_rig_error_keeps_its_causes() {
        let e = anyhow::anyhow!("exec format error")
            .context("cannot start the foreign process (gpufill bench-foreign)");
        let err = anyhow::Error::from(bench::BenchError::Rig(e.into()));
        assert_eq!(
            format!("{err:#}"),
            "cannot start the foreign process (gpufill bench-foreign): exec format error"
        );
    }

    #[test]
    fn targets_and_seconds_are_checked() {
        let mut a = args();
        a.targets = vec![50.0, 100.0];
        assert_eq!(check_args(&a).unwrap().len(), 2);
        for bad in [vec![], vec![0.0], vec![-5.0], vec![101.0], vec![f64::NAN]] {
            a.targets = bad;
            assert!(check_args(&a).is_err(), "{:?}", a.targets);
        }
        a.targets = vec![50.0];
        for bad in [0.0, 0.9, 3601.0, f64::INFINITY] {
            a.seconds = bad;
            assert!(check_args(&a).is_err(), "{bad}");
        }
    }
}
