//! The summary of a simulated run: how well it tracked, its pauses, what the foreign
//! work paid, MPS, and for long or churning runs the hourly table.

use std::fmt;
use std::time::Duration;

use gpufill_core::{Tick, Utilization};
use gpufill_sim::{ChurnReport, ForeignReport, Period, Tracking, tracking};

use super::{ForeignSpec, Recorded, Scenario, ServiceRequests, ServiceSpec, SimRun, TrainingSpec};
use crate::{State, Time};

/// What a simulated run did, as `gpufill simulate` prints it after its table
/// ([`fmt::Display`]).
#[derive(Clone, Debug)]
pub struct Report {
    /// Where tracking is judged from: the schedule's last change of the target before
    /// the judged span ends (zero without one).
    pub from: Time,
    /// The target tracking is judged against.
    pub target: Utilization,
    /// How the loop tracked `target` from `from`, within 2 points.
    pub tracking: Tracking,
    /// With `metric = "sm"`: the width while filling after settling, lowest and highest
    /// (blocks), and how often it changed.
    pub width: Option<(u32, u32, usize)>,
    /// Pauses over the whole run.
    pub pauses: usize,
    /// Signs of our kernels with nobody else there, taken as the host's own jitter.
    pub unexplained: usize,
    /// With host jitter: groups of our kernels, and how many stalled on the host.
    pub host_stalls: Option<(u64, u64)>,
    /// Each compute-bound foreign job, and what it paid.
    pub foreign: Vec<(ForeignSpec, ForeignReport)>,
    /// Whether the loop filled gaps (`beside_live = "fill_gaps"`) at some tick: beside a
    /// compute-bound job, which the model keeps fluid, its figure is then no prediction.
    pub filled_gaps: bool,
    /// Each service, and what its requests paid.
    pub services: Vec<(ServiceSpec, ForeignReport)>,
    /// Each training job, and what its steps paid.
    pub training: Vec<(TrainingSpec, ForeignReport)>,
    /// With an MPS daemon told to quit: when it was, and what followed.
    pub mps: Option<MpsReport>,
    /// For long or churning runs: the random jobs, and each hour's tracking.
    pub long_run: Option<(ChurnReport, Vec<Period>)>,
    /// The loop stopped (a fault it could not recover from) at this time.
    pub stopped_at: Option<Time>,
}

/// What became of a simulated MPS daemon told to quit, and of our client.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MpsReport {
    /// When the daemon was told to quit.
    pub quit: Time,
    /// When gpufill left it, if within the run.
    pub left: Option<Time>,
    /// When the daemon exited, if within the run.
    pub gone: Option<Time>,
}

impl SimRun {
    /// The summary of the run `recorded` by [`SimRun::drive`] on `scenario`.
    pub fn report(&self, scenario: &Scenario, recorded: &Recorded) -> Report {
        let (ticks, until) = (&recorded.ticks[..], recorded.judged_until);
        let end = self.sim.now().max(Time::from_secs_f64(scenario.duration_s));
        // A schedule may change the target: judge from its last change before `until`.
        let (from, target) = ticks
            .iter()
            .take_while(|t| t.at < until)
            .fold(None, |last: Option<(Time, Utilization)>, t| match last {
                Some((_, target)) if target == t.target => last,
                _ => Some((t.at, t.target)),
            })
            .unwrap_or((Time::ZERO, Utilization::ZERO));
        let tracked = tracking(ticks, from, until, target, 2.0);
        let gpu = self.sim.gpu().report(end);
        let mut jobs = gpu.foreign.into_iter();
        let foreign = scenario
            .foreign
            .iter()
            .copied()
            .zip(jobs.by_ref())
            .collect();
        let services = scenario
            .service
            .iter()
            .copied()
            .zip(jobs.by_ref())
            .collect();
        let training = scenario.training.iter().copied().zip(jobs).collect();
        let mps = self.mps.as_ref().and_then(|f| {
            f.daemon().quit_at().map(|quit| MpsReport {
                quit,
                left: f.left_at(),
                gone: f.daemon().gone_at(),
            })
        });
        Report {
            from,
            target,
            tracking: tracked,
            width: self
                .sm
                .then(|| width_after(ticks, tracked.settle))
                .flatten(),
            pauses: recorded.pauses,
            unexplained: recorded.unexplained,
            host_stalls: gpu.host_stalls,
            foreign,
            filled_gaps: recorded.filled_gaps,
            services,
            training,
            mps,
            long_run: scenario
                .long_or_churning()
                .then(|| (recorded.churn, recorded.hours.clone())),
            stopped_at: match recorded.last_state {
                Some((at, State::Stopped)) => Some(at),
                _ => None,
            },
        }
    }
}

/// The width while filling after `settle`: lowest, highest, and how often it changed.
fn width_after(ticks: &[Tick], settle: Option<Duration>) -> Option<(u32, u32, usize)> {
    let from = Time::ZERO + settle.unwrap_or_default();
    let filling: Vec<u32> = ticks
        .iter()
        .filter(|t| t.at >= from && t.state == State::Filling)
        .map(|t| t.width.get())
        .collect();
    let changes = filling.windows(2).filter(|w| w[0] != w[1]).count();
    Some((*filling.iter().min()?, *filling.iter().max()?, changes))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl fmt::Display for Report {
    /// The summary after the table: a blank line, then one line per finding.
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (target, t) = (self.target, &self.tracking);
        writeln!(out)?;
        if self.from > Time::ZERO {
            writeln!(
                out,
                "the schedule last changed the target at {:.2} s: judged from there",
                self.from.as_secs_f64()
            )?;
        }
        match t.settle {
            Some(s) => writeln!(
                out,
                "settled within 2 points of {:.1}% after {:.2} s; mean absolute error after that {:.2} points over {} samples",
                target.percent(),
                s.as_secs_f64(),
                t.mean_abs_error,
                t.samples
            )?,
            None => writeln!(
                out,
                "did not settle within 2 points of {:.1}%",
                target.percent()
            )?,
        }
        if let Some((lo, hi, changes)) = self.width {
            writeln!(
                out,
                "width after settling: {lo}-{hi} blocks (one per SM), {changes} changes"
            )?;
        }
        self.write_pauses(out)?;
        for (spec, job) in &self.foreign {
            writeln!(
                out,
                "foreign job {}-{} s at {:.0}%: slowed by {:.2}%, our kernels resident beside it for {:.1} ms",
                spec.start_s,
                spec.end_s,
                spec.load_percent,
                job.slowdown * 100.0,
                ms(job.overlap)
            )?;
            if self.filled_gaps {
                writeln!(
                    out,
                    "  (a fluid load: it shows our gap kernels no meetings, so beside fill_gaps this figure is no prediction; --training and --service model them)"
                )?;
            }
        }
        for (spec, job) in &self.services {
            write_service(out, spec, job)?;
        }
        for (spec, job) in &self.training {
            write_training(out, spec, job)?;
        }
        if let Some(mps) = &self.mps {
            write_mps(out, mps)?;
        }
        if let Some((churn, hours)) = &self.long_run {
            write_long_run(out, churn, hours)?;
        }
        Ok(())
    }
}

impl Report {
    /// The pauses of the run (a quiet holder's work, or a sign of our kernels), how many
    /// signs of our kernels were taken for the host's own jitter, and with host jitter
    /// how often the host stalled.
    fn write_pauses(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (pauses, unexplained) = (self.pauses, self.unexplained);
        write!(out, "{pauses} pauses")?;
        if unexplained > 0 {
            write!(
                out,
                "; {unexplained} signs of our kernels with nobody else there, taken as the host's own jitter"
            )?;
        }
        writeln!(out)?;
        if let Some((groups, stalls)) = self.host_stalls {
            writeln!(
                out,
                "host jitter: {stalls} of {groups} groups of our kernels stalled on the host"
            )?;
        }
        Ok(())
    }
}

/// What became of the simulated MPS daemon told to quit, and of our client.
fn write_mps(out: &mut fmt::Formatter<'_>, mps: &MpsReport) -> fmt::Result {
    let secs = |t: Option<Time>| {
        t.map_or_else(
            || "not within the run".to_owned(),
            |t| format!("at {:.2} s", t.as_secs_f64()),
        )
    };
    writeln!(
        out,
        "MPS: daemon told to quit at {:.2} s; gpufill left it {} (then without MPS, under its yield policy); the daemon exited {}",
        mps.quit.as_secs_f64(),
        secs(mps.left),
        secs(mps.gone),
    )
}

fn write_long_run(
    out: &mut fmt::Formatter<'_>,
    churn: &ChurnReport,
    hours: &[Period],
) -> fmt::Result {
    writeln!(
        out,
        "random foreign jobs: {} arrived; ticks filling while one was listed: {}; our kernels beside them: {:.1} ms; most kept at once: {}",
        churn.arrived,
        churn.filling_while_listed,
        ms(churn.overlap),
        churn.max_retained
    )?;
    writeln!(
        out,
        "{:>5} {:>9} {:>8} {:>7} {:>9}",
        "hour", "samples", "MAE", "events", "yielding"
    )?;
    for (i, p) in hours.iter().enumerate() {
        writeln!(
            out,
            "{:>5} {:>9} {:>8.3} {:>7} {:>8.1}%",
            i,
            p.samples,
            p.mean_abs_error,
            p.events,
            100.0 * p.yielding_ticks as f64 / p.ticks.max(1) as f64
        )?;
    }
    Ok(())
}

/// A training job's line: how much longer a step and its wait took than alone
/// ("slowed by": its step rate), from what our kernels charged its steps, and our
/// kernels' time beside its work.
fn write_training(
    out: &mut fmt::Formatter<'_>,
    spec: &TrainingSpec,
    job: &ForeignReport,
) -> fmt::Result {
    let r = job.requests.clone().unwrap_or_default();
    let wait = Duration::from_secs_f64(spec.wait_ms / 1e3);
    writeln!(
        out,
        "training {}-{} s, steps of {} ms busy then {} ms on its input: slowed by {:.2}% (a step {:.3} ms against {:.3} ms alone, on the mean; {} steps, {} held up by a kernel of ours, {} by a context switch), our kernels resident beside it for {:.1} ms",
        spec.start_s,
        spec.end_s,
        spec.step_ms,
        spec.wait_ms,
        r.rate_slowdown(wait) * 100.0,
        ms(r.mean),
        ms(r.mean_alone),
        r.count,
        r.met_kernel,
        r.switched,
        ms(job.overlap),
    )
}

/// A service's line: its requests' median latency against alone ("slowed by"), the
/// mean and p99, how many met our kernels, and our kernels' time beside its work.
fn write_service(
    out: &mut fmt::Formatter<'_>,
    spec: &ServiceSpec,
    job: &ForeignReport,
) -> fmt::Result {
    let what = match spec.requests {
        ServiceRequests::Bursts { every_s, burst_s } => {
            format!("a {burst_s} s burst every {every_s} s")
        }
        ServiceRequests::Rate {
            per_s,
            request_ms,
            fills_every_sm,
        } => {
            let noun = if per_s == 1.0 { "request" } else { "requests" };
            let gpu = if fills_every_sm {
                ", filling every SM"
            } else {
                ""
            };
            format!("{per_s} {noun}/s of {request_ms} ms{gpu}")
        }
    };
    let r = job.requests.clone().unwrap_or_default();
    writeln!(
        out,
        "service {}-{} s, {what}: requests slowed by {:.2}% (median {:.3} ms against {:.3} ms alone; mean {:+.2}%, p99 {:+.3} ms; {} requests, {} held up by a kernel of ours, {} by a context switch), our kernels resident beside it for {:.1} ms",
        spec.start_s,
        spec.end_s,
        r.slowdown() * 100.0,
        ms(r.median),
        ms(r.median_alone),
        r.mean_slowdown() * 100.0,
        ms(r.p99) - ms(r.p99_alone),
        r.count,
        r.met_kernel,
        r.switched,
        ms(job.overlap),
    )
}
