//! A foreign process of the simulated GPU: when it is listed, when it runs kernels, the
//! memory it holds, what a kernel of ours costs it in each [`LaunchShape`], and the
//! tally the model keeps of it.
//!
//! # What our filling costs a job
//! Without MPS the GPU time-slices between processes, and what a job loses depends on
//! how our kernels are laid out ([`LaunchShape`]):
//! - [`LaunchShape::Bursts`]: `duty x period` of kernels queued back to back. A kernel
//!   of the job that arrives during a burst waits up to a time slice
//!   (`SimConfig::time_slice`), and then shares the GPU with the rest of the burst. The job progresses at
//!   `1 - interference x own_duty` of its wanted rate, `interference` calibrated per job
//!   on measured slowdowns.
//! - [`LaunchShape::OneInFlight`]: one kernel of ours in flight at a time. A kernel of
//!   the job waits at most our kernel's remaining length, so a request of length
//!   `request` that arrives while we run waits about `kernel` for each of the
//!   [`ForeignJob::WAITS_PER_REQUEST`] times our next kernel slips in between its own
//!   (its CPU-side gaps let it). The loss per unit of our duty is therefore
//!   `WAITS_PER_REQUEST x kernel / request`, never more than `interference` (a kernel
//!   as long as a time slice costs what a queued burst does).
//!
//! Calibration: ResNet-50 requests (batch 1) beside one kernel of ours in flight of
//! 250, 500 and 1000 us and beside queued bursts, at 50 % duty
//! (docs/benchmarks.md#beside-a-mostly-idle-service-and-under-mps, "Launch
//! shapes beside a ResNet-50 service"). Slowdowns here are shares of progress lost: a
//! request taking `1 + x` times as long has lost `x / (1 + x)`. The 1000 us point, the
//! one clear of the noise, gives about 2 waits per request. The older probe beside
//! sparse PyTorch requests (the same section, "Earlier notes": one 100 us kernel in
//! flight at 100 % duty) gives fewer, and one 2 ms kernel fewer still, as a request
//! shorter than our kernel waits at most once. The model takes 2, the service's figure
//! rounded up. It then predicts for the ResNet-50 service at 50 % duty 4.5 % (250 us),
//! 8.9 % (500 us), both within the noise of what was measured, and 15 % (1000 us: the
//! cap, the service's `interference`, a little under what was measured); for the
//! 8192^3 matmul loop ([`ForeignJob::MATMUL_ITERATION`]) beside 100 us kernels 6 %, a
//! little under what was measured, and beside 1 ms kernels the cap, 21 %, as measured
//! (docs/benchmarks.md#the-gpu-itself-measured-before-gpufill-probes; assuming that
//! filler, like the probes' open-loop one, ran one kernel at a time).

use std::time::Duration;

use super::requests::{RequestReport, Requests, Serving, Spacing, Stream};
use gpufill_core::device::LaunchShape;
use gpufill_core::time::Time;

const MIB: u64 = 1 << 20;

/// A newcomer's device memory while its context is created, as measured
/// (docs/data/ns-signals-h100.txt;
/// docs/benchmarks.md#inside-a-pid-namespace-of-its-own-scriptsns_signalspy-scriptsnamespace_benchpy;
/// PyTorch, `torch.cuda.init`): milliseconds from the moment NVML listed it (in the
/// host view) and MiB held, its driver share included. It held memory before it was
/// listed; the context was complete (`CONTEXT_COMPLETE_MS` after the listing) when
/// its first kernel came. Times after the
/// listing scale with the job's `first_kernel_after`, so the context is complete at its
/// first kernel whatever that delay.
const CONTEXT_RAMP: [(f64, u64); 5] = [
    (-36.0, 8),
    (-24.0, 19),
    (94.0, 36),
    (121.0, 110),
    (134.0, 526),
];

/// When, after the listing, the measured context was complete (ms).
const CONTEXT_COMPLETE_MS: f64 = 167.0;

/// A foreign process in the simulation.
#[derive(Clone, Debug, PartialEq)]
pub struct ForeignJob {
    /// Its PID.
    pub pid: u32,
    /// When the probe starts listing it (its context creation has begun).
    pub listed_at: Time,
    /// Delay from being listed to its first kernel (for PyTorch see
    /// docs/benchmarks.md#the-gpu-itself-measured-before-gpufill-probes).
    pub first_kernel_after: Duration,
    /// When it leaves (stops running and is no longer listed).
    pub leaves_at: Time,
    /// The share of time it wants the GPU while it works, in `[0, 1]`.
    pub load: f64,
    /// Its share of the SMs while it runs, in `[0, 1]` (for the SM-activity reading).
    pub sm_share: f64,
    /// Loss of progress per unit of our duty while it runs beside our bursts (0.42: the
    /// 8192^3 matmul loop); beside one kernel in flight it loses less (module docs).
    pub interference: f64,
    /// How long one of its requests (or steps) takes alone: what one kernel of ours in
    /// flight delays ([`LaunchShape::OneInFlight`], module docs).
    pub request: Duration,
    /// Its process name, as the probe reports it.
    pub name: Option<String>,
    /// When set, it runs kernels in `[from, to)` and merely holds its context otherwise
    /// (a notebook); see also `windows`. With neither, it runs from its first kernel
    /// until it leaves.
    pub work: Option<(Time, Time)>,
    /// Further windows `[from, to)` in which it runs kernels, in time order and
    /// disjoint: a service's bursts ([`ForeignJob::service`]), a notebook's cells
    /// ([`ForeignJob::notebook`]). It works inside `work` and inside any of these.
    pub windows: Vec<(Time, Time)>,
    /// The device memory NVML lists for it once its context is complete, bytes (by
    /// default PyTorch's with a tiny tensor:
    /// docs/benchmarks.md#the-gpu-itself-measured-before-gpufill-probes). Before that it
    /// grows as a PyTorch context was measured to (`CONTEXT_RAMP`), from before the host
    /// view would list it until its first kernel.
    pub memory_bytes: u64,
    /// With `SimConfig::mps`: a process that is not a client of the MPS server (started
    /// without its pipe directory), which time-slices with us as without MPS.
    pub outside_mps: bool,
    /// Under MPS, besides `SimConfig::mps_interference`: what one unit of our duty costs
    /// it when its kernels fill every SM in a few waves and ours outlasts a wave (a block
    /// of its that needs a whole SM waits for the one ours holds: an extra wave). 0 for
    /// a job whose blocks fit beside ours; [`ForeignJob::FEW_WAVE_MPS_LOSS`] with
    /// [`ForeignJob::filling_every_sm`]. Scaled by `SimConfig::mps_wave_factor`.
    pub mps_wave_loss: f64,
    /// The requests it serves, for the cost of our kernels request by request
    /// ([`Requests`], [`ForeignReport::requests`]); `None` for a job whose cost
    /// is its lost progress alone (training, a notebook's cells).
    pub requests: Option<Requests>,
}

impl ForeignJob {
    /// How many times, per request, a kernel of ours in flight makes the job wait for
    /// it (the module docs say what it was fitted on).
    pub const WAITS_PER_REQUEST: f64 = 2.0;

    /// One iteration of the 8192^3 bf16 matmul loop alone, as measured
    /// (docs/benchmarks.md#the-gpu-itself-measured-before-gpufill-probes).
    pub const MATMUL_ITERATION: Duration = Duration::from_micros(1660);

    /// A ResNet-50 request at batch 1 alone, its measured p50
    /// (docs/benchmarks.md#beside-a-mostly-idle-service-and-under-mps).
    pub const RESNET50_REQUEST: Duration = Duration::from_micros(5590);

    /// How busy an isolated request keeps the GPU while it is served: a quarter (the
    /// rest is the host's work and synchronisation). NVML read 0 % beside the
    /// sub-millisecond service of issue 21 at 20 requests a second
    /// (docs/benchmarks.md#live-services-labpy-live),
    /// which its requests, busy throughout, would have raised to about 2 %.
    pub const ISOLATED_REQUEST_LOAD: f64 = 0.25;

    /// [`ForeignJob::mps_wave_loss`] of requests of ten bf16 4096^2 matmuls beside our
    /// 25 ms kernels under MPS at duty 0.5, as measured on the mean
    /// (docs/benchmarks.md#graphs-of-short-kernels-under-mps-and-the-cpu-by-state-0a2bee4-to-55f8aaf-one-h100-a-host).
    pub const FEW_WAVE_MPS_LOSS: f64 = 0.2;

    /// A compute-bound job (the measured 8192^3 matmul loop) that wants `load` of the
    /// time from `start` to `end` seconds; PID 1000 + the start in ms.
    pub fn compute_bound(start_s: f64, end_s: f64, load: f64) -> Self {
        let listed_at = Time::from_secs_f64(start_s);
        ForeignJob {
            pid: 1000
                + u32::try_from(listed_at.since_epoch().as_millis()).unwrap_or(u32::MAX - 1000),
            listed_at,
            first_kernel_after: Duration::from_millis(85),
            leaves_at: Time::from_secs_f64(end_s),
            load: load.clamp(0.0, 1.0),
            sm_share: 1.0,
            interference: 0.42,
            request: Self::MATMUL_ITERATION,
            name: Some("python3".into()),
            work: None,
            windows: Vec::new(),
            memory_bytes: 612 * MIB,
            outside_mps: false,
            mps_wave_loss: 0.0,
            requests: None,
        }
    }

    /// An inference service that works in sparse bursts, like the ResNet-50 service
    /// (batch 1) measured beside gpufill, in bursts of 20 requests a few seconds apart
    /// (docs/benchmarks.md#beside-a-mostly-idle-service-and-under-mps: the
    /// bursts' length in "Earlier notes" and in the launch-shape probe), the GPU busy
    /// roughly 0.3 to 0.5 of a burst (it is CPU-bound). It holds its context from `start_s` to `end_s`
    /// and works only in bursts of `burst` every `every`, the first at its first kernel,
    /// wanting `load` of the GPU inside a burst.
    ///
    /// Beside our bursts it loses 0.3 per unit of our duty: between the queued-burst
    /// probe and the activity-mode run, which filled in bursts through the service's
    /// bursts (both in the same section).
    pub fn service(start_s: f64, end_s: f64, every: Duration, burst: Duration, load: f64) -> Self {
        let job = ForeignJob {
            interference: 0.3,
            request: Self::RESNET50_REQUEST,
            name: Some("resnet-service".into()),
            ..ForeignJob::compute_bound(start_s, end_s, load)
        };
        let every = every.max(burst).max(Duration::from_millis(1));
        let mut windows = Vec::new();
        let mut from = job.first_kernel();
        while from < job.leaves_at {
            windows.push((from, from + burst));
            from += every;
        }
        ForeignJob {
            windows,
            // Nothing outside its bursts (an empty `work`), even with none.
            work: Some((job.leaves_at, job.leaves_at)),
            requests: Some(Requests::InBursts),
            ..job
        }
    }

    /// A service answering isolated requests: it holds its context from `start_s` to
    /// `end_s` and runs kernels only while it serves a request, `per_s` a second as a
    /// Poisson process (seeded with its PID) from its first kernel on, each `request`
    /// long alone, the GPU busy [`ForeignJob::ISOLATED_REQUEST_LOAD`] of it.
    pub fn isolated_requests(start_s: f64, end_s: f64, per_s: f64, request: Duration) -> Self {
        let job = ForeignJob {
            request,
            name: Some("service".into()),
            interference: 1.0,
            ..ForeignJob::compute_bound(start_s, end_s, Self::ISOLATED_REQUEST_LOAD)
        };
        ForeignJob {
            requests: Some(Requests::Rate {
                per_s: per_s.max(0.0),
                from: job.first_kernel(),
                spacing: Spacing::Poisson {
                    seed: u64::from(job.pid),
                },
            }),
            // Nothing but its requests.
            work: Some((job.leaves_at, job.leaves_at)),
            ..job
        }
    }

    /// The length of a training job's kernels ([`ForeignJob::training`]): a model choice,
    /// not a measurement (none is in docs/benchmarks.md), a typical length of the
    /// convolutions and GEMMs of PyTorch eager training of a ResNet on an H100 or H200.
    pub const TRAINING_KERNEL: Duration = Duration::from_micros(300);

    /// The idle gap between two kernels of a training step: a model choice, like
    /// [`ForeignJob::TRAINING_KERNEL`], for PyTorch eager mode, whose launches (about
    /// 10-30 us each on the host) leave its queue empty between kernels.
    pub const TRAINING_LAUNCH_GAP: Duration = Duration::from_micros(20);

    /// The pieces of a training step ([`ForeignJob::training`]), with a host-side gap
    /// between two: a ResNet-18 step on H200s showed 5-19 idle gaps over 150 us, 3.2-5.7
    /// ms of idle in them, the longest 0.7-2.7 ms (docs/data/gap-trace-h200.txt).
    pub const TRAINING_PIECES: u32 = 10;

    /// The mean host-side gap between two pieces of a training step (the same
    /// measurement: about 4 ms of idle in 9 gaps).
    pub const TRAINING_HOST_GAP: Duration = Duration::from_micros(450);

    /// A training job that waits on its input: it holds its context from `start_s` to
    /// `end_s` and, from its first kernel, runs steps that keep the GPU busy `step`
    /// each, in kernels of [`ForeignJob::TRAINING_KERNEL`] with
    /// [`ForeignJob::TRAINING_LAUNCH_GAP`] between them, in
    /// [`ForeignJob::TRAINING_PIECES`] pieces with host-side gaps of mean
    /// [`ForeignJob::TRAINING_HOST_GAP`] between them (so a step lasts a few
    /// milliseconds longer than `step`, and not always the same), then waits `wait` on
    /// its input before the next ([`Requests::Steps`]). Whatever delays a step delays
    /// all later ones.
    pub fn training(start_s: f64, end_s: f64, step: Duration, wait: Duration) -> Self {
        let kernel = Self::TRAINING_KERNEL;
        Self::in_pieces(start_s, end_s, "train", step, kernel, |seed| {
            Requests::Steps {
                wait,
                per_s: None,
                kernel,
                launch_gap: Self::TRAINING_LAUNCH_GAP,
                pieces: Self::TRAINING_PIECES,
                host_gap: Self::TRAINING_HOST_GAP,
                seed,
            }
        })
    }

    /// A job named `name` whose work comes in pieces of `kernel`-long kernels with
    /// [`ForeignJob::TRAINING_LAUNCH_GAP`] between them, `busy` of GPU work a step or
    /// request, as `steps` (given the job's seed) says: its load is its kernels' share of
    /// a piece, and a step's length alone its busy time over that share.
    fn in_pieces(
        start_s: f64,
        end_s: f64,
        name: &str,
        busy: Duration,
        kernel: Duration,
        steps: impl FnOnce(u64) -> Requests,
    ) -> Self {
        let launch_gap = Self::TRAINING_LAUNCH_GAP;
        let load = kernel.as_secs_f64() / (kernel + launch_gap).as_secs_f64();
        let job = ForeignJob::isolated_requests(start_s, end_s, 0.0, busy);
        let seed = u64::from(job.pid);
        ForeignJob {
            request: busy.div_f64(load),
            name: Some(name.into()),
            requests: Some(steps(seed)),
            ..job
        }
        .with_load(load)
    }

    /// The length of a decode service's kernels ([`ForeignJob::decode_requests`]): a
    /// model choice, a GPT-2 small layer's matmuls at batch 1 (tens of microseconds).
    pub const DECODE_KERNEL: Duration = Duration::from_micros(40);

    /// A token-by-token decode service: requests `per_s` a second as a Poisson process
    /// (seeded with its PID), each `pieces` bursts of kernels that keep the GPU busy
    /// `busy` in all, in kernels of [`ForeignJob::DECODE_KERNEL`] with
    /// [`ForeignJob::TRAINING_LAUNCH_GAP`] between them, and host-side gaps of mean
    /// `host_gap` between two (the GPU idle while Python launches the next layer or
    /// samples a token; drawn as a training step's are, 0.1-3 ms). A GPT-2 request on
    /// H200s was busy 23 ms of 310 ms, with 200-300 gaps over 150 us
    /// (docs/data/gap-trace-h200.txt): most of a request is host time, and NVML sees a
    /// small share of the time its requests take.
    pub fn decode_requests(
        start_s: f64,
        end_s: f64,
        per_s: f64,
        pieces: u32,
        busy: Duration,
        host_gap: Duration,
    ) -> Self {
        let kernel = Self::DECODE_KERNEL;
        Self::in_pieces(start_s, end_s, "decode", busy, kernel, |seed| {
            Requests::Steps {
                wait: Duration::ZERO,
                per_s: Some(per_s.max(0.0)),
                kernel,
                launch_gap: Self::TRAINING_LAUNCH_GAP,
                pieces: pieces.max(1),
                host_gap,
                seed,
            }
        })
    }

    fn with_load(self, load: f64) -> Self {
        ForeignJob { load, ..self }
    }

    /// The same job with kernels that fill every SM in a few waves (large GEMMs): under
    /// MPS it loses [`ForeignJob::FEW_WAVE_MPS_LOSS`] per unit of our duty beside our
    /// long kernels, little beside short ones ([`ForeignJob::mps_wave_loss`]).
    pub fn filling_every_sm(self) -> Self {
        ForeignJob {
            mps_wave_loss: Self::FEW_WAVE_MPS_LOSS,
            ..self
        }
    }

    /// The same job with its isolated requests spaced by `spacing` (a no-op for other
    /// jobs).
    pub fn with_spacing(mut self, spacing: Spacing) -> Self {
        if let Some(Requests::Rate { spacing: s, .. }) = &mut self.requests {
            *s = spacing;
        }
        self
    }

    /// The same job with no isolated request before `from_s` seconds: a holder that
    /// stays dormant until then (a no-op for other jobs).
    pub fn dormant_until(mut self, from_s: f64) -> Self {
        let first_kernel = self.first_kernel();
        if let Some(Requests::Rate { from, .. }) = &mut self.requests {
            *from = Time::from_secs_f64(from_s).max(first_kernel);
        }
        self
    }

    /// A notebook: it holds its context from `start_s` to `end_s` and runs a cell of
    /// heavy work (load 1.0, the 8192^3 matmul loop's costs) in each `[from, to)` of
    /// `cells` (seconds, in time order), idle in between.
    pub fn notebook(start_s: f64, end_s: f64, cells: &[(f64, f64)]) -> Self {
        let leaves_at = Time::from_secs_f64(end_s);
        ForeignJob {
            name: Some("ipykernel_launcher".into()),
            // Nothing outside its cells (an empty `work`), even with none.
            work: Some((leaves_at, leaves_at)),
            windows: cells
                .iter()
                .map(|&(from, to)| (Time::from_secs_f64(from), Time::from_secs_f64(to)))
                .collect(),
            ..ForeignJob::compute_bound(start_s, end_s, 1.0)
        }
    }

    /// What one unit of our duty costs its progress while it runs, for our kernels laid
    /// out in `shape`, one kernel of ours lasting `kernel` in
    /// [`LaunchShape::OneInFlight`] (module docs).
    pub fn loss_per_duty(&self, shape: LaunchShape, kernel: Duration) -> f64 {
        match shape {
            LaunchShape::Bursts => self.interference,
            // Filling gaps, what a job that serves requests (or steps) pays is charged
            // request by request (`model.rs`), and our kernels are held off its work;
            // a job that always works is weighed as beside one kernel in flight.
            LaunchShape::OneInFlight | LaunchShape::Gaps => {
                let request = self.request.as_secs_f64();
                let per_request = if request > 0.0 {
                    Self::WAITS_PER_REQUEST * kernel.as_secs_f64() / request
                } else {
                    f64::INFINITY
                };
                per_request.min(self.interference)
            }
        }
    }

    /// Its device memory at `t`, its driver share `driver` included: nothing until the
    /// measured ramp (`CONTEXT_RAMP`) begins, before it is listed, the ramp up to its first kernel, then
    /// `memory_bytes + driver` until it leaves.
    pub(super) fn memory_at(&self, t: Time, driver: u64) -> u64 {
        if t >= self.leaves_at {
            return 0;
        }
        let full = self.memory_bytes + driver;
        let since_ms = (t.as_secs_f64() - self.listed_at.as_secs_f64()) * 1e3;
        let scale = self.first_kernel_after.as_secs_f64() * 1e3 / CONTEXT_COMPLETE_MS;
        if since_ms >= CONTEXT_COMPLETE_MS * scale {
            return full;
        }
        let at = |ms: f64| if ms > 0.0 { ms * scale } else { ms };
        CONTEXT_RAMP
            .iter()
            .take_while(|&&(ms, _)| at(ms) <= since_ms)
            .last()
            .map_or(0, |&(_, mib)| (mib * MIB).min(full))
    }

    pub(super) fn first_kernel(&self) -> Time {
        self.listed_at + self.first_kernel_after
    }

    /// What its request stream needs of it.
    pub(super) fn serving(&self) -> Serving<'_> {
        Serving {
            requests: self.requests.as_ref(),
            first_kernel: self.first_kernel(),
            leaves_at: self.leaves_at,
            request: self.request,
            windows: &self.windows,
        }
    }

    pub(super) fn listed(&self, t: Time) -> bool {
        self.listed_at <= t && t < self.leaves_at
    }

    /// Whether it runs kernels at `t`.
    pub(super) fn running(&self, t: Time) -> bool {
        self.first_kernel() <= t && t < self.leaves_at && self.working(t)
    }

    fn working(&self, t: Time) -> bool {
        if self.work.is_none() && self.windows.is_empty() {
            return true;
        }
        let inside = |(from, to): (Time, Time)| from <= t && t < to;
        self.work.is_some_and(inside) || self.window_at(t).is_some_and(inside)
    }

    /// The first of `windows` that has not ended at `t`.
    fn window_at(&self, t: Time) -> Option<(Time, Time)> {
        let i = self.windows.partition_point(|&(_, to)| to <= t);
        self.windows.get(i).copied()
    }

    /// The earliest time after `now` at which it is listed, starts or stops running, or
    /// leaves.
    pub(super) fn next_event(&self, now: Time) -> Option<Time> {
        if self.leaves_at <= now {
            return None;
        }
        let (from, to) = self.work.unwrap_or((self.leaves_at, self.leaves_at));
        let mut next = self.leaves_at;
        for t in [self.first_kernel(), from, to] {
            if t > now && t < next {
                next = t;
            }
        }
        if let Some((from, to)) = self.window_at(now) {
            next = next.min(if from > now { from } else { to });
        }
        Some(next)
    }
}

/// What our filling cost one foreign job so far.
#[derive(Clone, Debug, PartialEq)]
pub struct ForeignReport {
    /// Its PID.
    pub pid: u32,
    /// Share of its wanted progress it lost, in `[0, 1]` (0 when it never ran). For a
    /// small loss, about how much longer its requests took on average.
    pub slowdown: f64,
    /// The largest share of its wanted progress lost in one run of its kernels without
    /// a break (a burst of a service, a cell of a notebook, the whole stay of a job that
    /// always works): for a small loss, about how much longer that burst or cell took.
    pub worst_run: f64,
    /// Time our kernels were resident while it was running.
    pub overlap: Duration,
    /// The part of `overlap` in which our kernels ran one in flight
    /// ([`LaunchShape::OneInFlight`]); the rest ran in bursts.
    pub overlap_one_in_flight: Duration,
    /// For a job that serves requests ([`ForeignJob::requests`]): their latency beside
    /// us against alone.
    pub requests: Option<RequestReport>,
}

/// The running tally of one foreign job.
#[derive(Clone, Debug, Default)]
pub(super) struct Tally {
    wanted: f64,
    got: f64,
    overlap: f64,
    overlap_one_in_flight: f64,
    /// Whether the per-process samples show it in the current sample window.
    pub(super) window_active: bool,
    /// Since when it has run without a break, and the run's wanted and got progress.
    run: Option<(Time, f64, f64)>,
    worst_run: f64,
    /// Its requests, one by one (none for a job that serves none).
    pub(super) stream: Stream,
}

/// One interval `[at, at + dt)` of a job running, for [`Tally::ran`].
pub(super) struct Ran {
    pub(super) at: Time,
    pub(super) dt: Duration,
    pub(super) wanted: f64,
    pub(super) progress: f64,
    pub(super) own: f64,
    pub(super) shape: LaunchShape,
    /// How long a run must last before the per-process samples show it.
    pub(super) min_run: Duration,
}

impl Tally {
    /// Counts an interval in which the job ran.
    pub(super) fn ran(&mut self, r: &Ran) {
        let dt = r.dt.as_secs_f64();
        self.wanted += r.wanted * dt;
        self.got += r.progress * dt;
        self.overlap += r.own * dt;
        if r.shape == LaunchShape::OneInFlight {
            self.overlap_one_in_flight += r.own * dt;
        }
        let (since, wanted, got) = self.run.get_or_insert((r.at, 0.0, 0.0));
        *wanted += r.wanted * dt;
        *got += r.progress * dt;
        let long_enough = (r.at + r.dt).saturating_since(*since) >= r.min_run;
        self.window_active |= r.progress > 0.0 && long_enough;
    }

    /// The job runs no kernel now: its run, if any, has ended.
    pub(super) fn stopped(&mut self) {
        if let Some((_, wanted, got)) = self.run.take() {
            self.worst_run = self.worst_run.max(loss(wanted, got));
        }
    }

    pub(super) fn report(&self, job: &ForeignJob) -> ForeignReport {
        let current = self.run.map_or(0.0, |(_, wanted, got)| loss(wanted, got));
        ForeignReport {
            pid: job.pid,
            requests: job.requests.as_ref().map(|_| self.stream.report()),
            slowdown: loss(self.wanted, self.got),
            worst_run: self.worst_run.max(current),
            overlap: Duration::from_secs_f64(self.overlap),
            overlap_one_in_flight: Duration::from_secs_f64(self.overlap_one_in_flight),
        }
    }
}

fn loss(wanted: f64, got: f64) -> f64 {
    if wanted > 0.0 {
        (1.0 - got / wanted).clamp(0.0, 1.0)
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Time {
        Time::from_secs_f64(s)
    }

    #[test]
    fn a_service_works_only_in_its_bursts() {
        let job = ForeignJob::service(
            1.0,
            20.0,
            Duration::from_secs(6),
            Duration::from_millis(170),
            0.4,
        );
        // The first burst at its first kernel (85 ms after it was listed), then every 6 s.
        assert_eq!(job.windows.len(), 4);
        assert!(!job.running(secs(1.05)));
        assert!(job.running(secs(1.1)));
        assert!(!job.running(secs(1.3)));
        assert!(job.running(secs(7.2)));
        assert!(!job.running(secs(7.3)));
        assert!(job.listed(secs(5.0)));
        assert_eq!(job.next_event(secs(1.1)), Some(secs(1.255)));
        assert_eq!(job.next_event(secs(1.3)), Some(secs(7.085)));
        assert_eq!(job.next_event(secs(19.5)), Some(secs(20.0)));
    }

    #[test]
    fn a_notebook_works_only_in_its_cells_and_a_plain_job_always() {
        let nb = ForeignJob::notebook(0.0, 60.0, &[(10.0, 14.0), (30.0, 31.0)]);
        assert!(!nb.running(secs(5.0)));
        assert!(nb.running(secs(12.0)));
        assert!(!nb.running(secs(20.0)));
        assert!(nb.running(secs(30.5)));
        assert!(!nb.running(secs(40.0)));
        let idle = ForeignJob::notebook(0.0, 60.0, &[]);
        assert!(
            !idle.running(secs(5.0)),
            "no cells: it only holds its context"
        );
        let plain = ForeignJob::compute_bound(0.0, 60.0, 1.0);
        assert!(plain.running(secs(5.0)));
        // `work` and `windows` add up.
        let both = ForeignJob {
            work: Some((secs(1.0), secs(2.0))),
            ..nb
        };
        assert!(both.running(secs(1.5)) && both.running(secs(12.0)));
    }

    #[test]
    fn one_kernel_in_flight_costs_less_the_shorter_it_is_against_a_request() {
        let service = ForeignJob::service(0.0, 10.0, Duration::from_secs(6), Duration::ZERO, 0.4);
        let us = Duration::from_micros;
        let at_half = |k: u64| 0.5 * service.loss_per_duty(LaunchShape::OneInFlight, us(k));
        // The measured p50s at 50 % duty are within the noise at 250 and 500 us and a
        // little above the model's cap (queued bursts' cost) at 1000 us: module docs.
        assert!((at_half(250) - 0.045).abs() < 0.001, "{}", at_half(250));
        assert!((at_half(500) - 0.089).abs() < 0.001, "{}", at_half(500));
        assert_eq!(at_half(1000), 0.5 * service.interference);
        assert_eq!(service.loss_per_duty(LaunchShape::Bursts, us(250)), 0.3);
        // The matmul loop beside 100 us kernels at 50 %: 6 %, a little under what was
        // measured (module docs).
        let matmul = ForeignJob::compute_bound(0.0, 10.0, 1.0);
        let l = 0.5 * matmul.loss_per_duty(LaunchShape::OneInFlight, us(100));
        assert!((l - 0.06).abs() < 0.001, "{l}");
        let l = 0.5 * matmul.loss_per_duty(LaunchShape::OneInFlight, us(1000));
        assert!((l - 0.21).abs() < 0.001, "{l}");
    }

    #[test]
    fn the_worst_run_is_the_costliest_burst() {
        let mut t = Tally::default();
        let ran = |at: f64, progress: f64| Ran {
            at: secs(at),
            dt: Duration::from_millis(100),
            wanted: 1.0,
            progress,
            own: 0.5,
            shape: LaunchShape::OneInFlight,
            min_run: Duration::from_millis(400),
        };
        t.ran(&ran(0.0, 0.9));
        assert!(!t.window_active, "shorter than the min run");
        t.stopped();
        t.ran(&ran(1.0, 1.0));
        t.ran(&ran(1.1, 1.0));
        let r = t.report(&ForeignJob {
            pid: 7,
            ..ForeignJob::compute_bound(0.0, 1.0, 1.0)
        });
        assert!((r.worst_run - 0.1).abs() < 1e-9, "{r:?}");
        assert!((r.slowdown - 0.1 / 3.0).abs() < 1e-9, "{r:?}");
        assert_eq!(r.overlap, r.overlap_one_in_flight);
    }
}
