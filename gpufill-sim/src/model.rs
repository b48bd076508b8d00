//! The simulated GPU's state, advanced in virtual time from one change to the next:
//! the fluid shares behind NVML's samples, our kernels one by one ([`super::kernels`])
//! and the requests of services ([`super::requests`]).

use std::collections::VecDeque;
use std::time::Duration;

use super::config::{SimConfig, SimError, SimReport};
use super::gaps::{self, GapFill, Ours, Work};
use super::jitter::Timing;
use super::job::{ForeignJob, ForeignReport, Ran, Tally};
use super::kernels::{Layout, Plan, Served, Slicing, serve};
use super::requests::{Request, Requests};
use gpufill_core::device::LaunchShape;
use gpufill_core::gaps::GAP_KERNEL;
use gpufill_core::kernel_timing::OthersSign;
use gpufill_core::time::Time;
use gpufill_core::units::Load;
use gpufill_core::unlisted::MemoryReading;

/// The simulated GPU's state; the handles ([`super::SimGpu`] and the rest) lock it.
#[derive(Debug)]
pub(super) struct Model {
    /// The strongest sign a kernel of ours showed since the last `others_seen` that
    /// another context ran: it started a switch late, or a request preempted it.
    pub(super) seen: Option<OthersSign>,
    /// With [`SimConfig::host_jitter`]: our groups timed and judged as the launcher
    /// does, the host's jitter included.
    pub(super) timing: Option<Timing>,
    /// With timing: the start of the group of ours that a context switch delays.
    switch_at: Option<Time>,
    /// Foreign work ran (from this time on) that no kernel of ours has shown yet: the
    /// next kernel of ours starts a switch late, and a probe finds it.
    pub(super) pending: Option<Time>,
    /// When foreign work (time-sliced with us) last ended, or ends.
    last_foreign_end: Time,
    /// Our kernels one by one ([`super::kernels`]).
    pub(super) plan: Plan,
    /// Probes so far.
    pub(super) probes: u64,
    /// How many foreign jobs serve requests one by one.
    streams: usize,
    pub(super) cfg: SimConfig,
    pub(super) now: Time,
    own: f64,
    own_sm: f64,
    tail: Option<(Time, f64, f64)>,
    next_sample: Time,
    window_busy: f64,
    window_sm: f64,
    pub(super) published: VecDeque<(f64, f64)>,
    /// Per foreign job, in the order of `cfg.foreign`.
    pub(super) jobs: Vec<Tally>,
    own_busy: f64,
    samples: u64,
    pub(super) requested: Load,
    /// How our kernels are laid out, as the loop last asked.
    pub(super) shape: LaunchShape,
    /// Filling gaps ([`LaunchShape::Gaps`]): the hold, and what our kernels met.
    pub(super) gaps: GapFill,
    /// Published per-process samples not yet visible (with `process_sample_lag`): when
    /// each shows, and the PIDs that worked in its window.
    pub(super) pending_active: VecDeque<(Time, Vec<u32>)>,
    pub(super) active: Vec<u32>,
    pub(super) active_published: bool,
    pub(super) holds_context: bool,
    /// The number of jobs in the configuration (never retired).
    pub(super) configured: usize,
    /// Calls of `SimLoad::set_load`.
    pub(super) load_calls: u64,
    /// The driver's memory moves so far (`driver_memory` up to `now`), and how many of
    /// them have been taken: the model's time only goes forward.
    driver_moved: i64,
    driver_taken: usize,
    /// The earliest job event after the time it was computed; `None` when unknown
    /// (see [`Model::next_job_event`]).
    pub(super) next_job_event: Option<Time>,
}

impl Model {
    pub(super) fn new(cfg: SimConfig) -> Self {
        let n = cfg.foreign.len();
        Model {
            seen: None,
            timing: cfg.host_jitter.map(Timing::new),
            switch_at: None,
            pending: None,
            last_foreign_end: Time::ZERO,
            plan: Plan::default(),
            probes: 0,
            streams: cfg.foreign.iter().filter(|j| j.requests.is_some()).count(),
            next_sample: Time::from_duration(cfg.sample_phase),
            cfg,
            now: Time::ZERO,
            own: 0.0,
            own_sm: 0.0,
            tail: None,
            window_busy: 0.0,
            window_sm: 0.0,
            published: VecDeque::new(),
            jobs: vec![Tally::default(); n],
            own_busy: 0.0,
            samples: 0,
            requested: Load::IDLE,
            shape: LaunchShape::default(),
            gaps: GapFill::default(),
            pending_active: VecDeque::new(),
            active: Vec::new(),
            active_published: false,
            holds_context: true,
            configured: n,
            load_calls: 0,
            driver_moved: 0,
            driver_taken: 0,
            next_job_event: None,
        }
    }

    /// Our resident share and SM share at `t` (queued work finishing after a stop included).
    fn own_at(&self, t: Time) -> (f64, f64) {
        if self.shape == LaunchShape::Gaps && self.gaps.holding(t) {
            return (0.0, 0.0);
        }
        match self.tail {
            Some((until, duty, sm)) if t < until => (duty, sm),
            _ if self.shape == LaunchShape::Gaps && self.gaps.stretched() => {
                // Longer kernels, the same least gap: resident more of the time.
                let (duty, overhead) = (self.requested.duty.fraction(), self.cfg.launch_overhead);
                let short = gaps::resident(duty, overhead, GAP_KERNEL);
                let long = gaps::resident(duty, overhead, self.gaps.kernel());
                let ratio = if short > 0.0 { long / short } else { 1.0 };
                (self.own * ratio, self.own_sm * ratio)
            }
            _ => (self.own, self.own_sm),
        }
    }

    /// The earliest time after `now` at which something changes.
    fn next_breakpoint(&mut self, limit: Time) -> Time {
        let mut next = limit
            .min(self.next_sample)
            .min(self.next_job_event())
            .min(self.next_stream_event());
        if let Some((until, _, _)) = self.tail.filter(|&(until, _, _)| until > self.now) {
            next = next.min(until);
        }
        if let Some(resume) = self.gaps.resume.filter(|&r| r > self.now) {
            next = next.min(resume);
        }
        if let Some(defer) = self.gaps.defer.filter(|d| d.at > self.now) {
            next = next.min(defer.at);
        }
        for &t in &self.cfg.context_breaks {
            if t > self.now {
                next = next.min(t);
            }
        }
        next
    }

    /// The earliest change of a foreign job after `now`. Cached: between two job events
    /// only samples come (five a second), and a scan of every job at each would make a
    /// long run with many jobs around cost jobs x samples. The cache holds while `now`
    /// has not reached it and no job was added or retired.
    fn next_job_event(&mut self) -> Time {
        if let Some(at) = self.next_job_event.filter(|&at| at > self.now) {
            return at;
        }
        let next = self
            .cfg
            .foreign
            .iter()
            .filter_map(|job| job.next_event(self.now))
            .min()
            .unwrap_or(Time::MAX);
        self.next_job_event = Some(next);
        next
    }

    pub(super) fn advance(&mut self, to: Time) {
        self.serve_due();
        while self.now < to {
            let next = self.next_breakpoint(to);
            self.integrate(next - self.now);
            self.now = next;
            self.gap_events();
            self.serve_due();
            self.show_others();
            if self.cfg.context_breaks.contains(&self.now) {
                // The context in use stops running kernels; `requested` keeps what was asked.
                let requested = self.requested;
                self.set_load(Load::IDLE);
                self.requested = requested;
            }
            if self.now >= self.next_sample {
                self.publish();
            }
        }
        self.judge_groups();
        self.show_active();
        while let Some(&(at, bytes)) = self.cfg.driver_memory.get(self.driver_taken) {
            if at > self.now {
                break;
            }
            self.driver_moved += bytes;
            self.driver_taken += 1;
        }
    }

    /// Filling gaps, what our launcher does at `now`: a wait for the pacer ends (it
    /// fills again), or the pacer puts the launch laid out now off (it waits).
    fn gap_events(&mut self) {
        // Each round ends a wait or begins one; a few at one instant at most.
        for _ in 0..8 {
            if self.gaps.resume == Some(self.now) {
                self.gaps.due(self.now, self.gap_cycle());
                self.replan();
                continue;
            }
            if self.gaps.defer.is_none_or(|d| d.at > self.now) {
                return;
            }
            if self.gaps.put_off(self.now) || self.gaps.restretch(self.now) {
                self.replan();
            } else {
                self.gaps.look_ahead(&self.plan, self.now);
            }
        }
    }

    /// Filling gaps: our kernels' cycle at the duty asked (a kernel and the duty's gap).
    fn gap_cycle(&self) -> Duration {
        let kernel = self.gaps.kernel();
        match gaps::layout(
            self.requested.duty.fraction(),
            self.cfg.launch_overhead,
            kernel,
        ) {
            Layout::Paced { cycle, .. } => cycle,
            _ => gpufill_core::gaps::GAP_KERNEL + gpufill_core::gaps::MIN_GAP,
        }
    }

    /// Integrates `[now, now + dt)`, over which nothing changes.
    fn integrate(&mut self, span: Duration) {
        let dt = span.as_secs_f64();
        let (own, own_sm) = self.own_at(self.now);
        let (shape, kernel) = self.effective_shape();
        let mut idle = 1.0 - own;
        let mut sm = own_sm;
        let mut time_sliced = own;
        let mut all_beside = true;
        for (job, tally) in self.cfg.foreign.iter().zip(&mut self.jobs) {
            if !job.running(self.now) && !tally.stream.serving_at(self.now) {
                tally.stopped();
                continue;
            }
            let beside = self.cfg.mps && !job.outside_mps;
            all_beside &= beside;
            if !beside && dt > 0.0 {
                // Time-sliced work: our next kernel shows it (or the one running).
                self.pending.get_or_insert(self.now);
                self.last_foreign_end = self.last_foreign_end.max(self.now + span);
            }
            let loss = if beside {
                self.cfg.mps_loss(job)
            } else {
                job.loss_per_duty(shape, kernel)
            };
            let progress = job.load * (1.0 - loss * own).max(0.0);
            tally.ran(&Ran {
                at: self.now,
                dt: span,
                wanted: job.load,
                progress,
                own,
                shape,
                min_run: self.cfg.process_sample_min_run,
            });
            idle *= 1.0 - progress;
            time_sliced += progress;
            sm += progress * job.sm_share;
        }
        // Without MPS contexts take turns, so busy shares add up; with MPS they overlap
        // (a process outside MPS takes turns with everyone).
        let busy = if self.cfg.mps && all_beside {
            1.0 - idle
        } else {
            time_sliced.min(1.0)
        };
        self.window_busy += busy * dt;
        self.window_sm += sm.min(1.0) * dt;
        self.own_busy += own * dt;
        if shape == LaunchShape::Gaps {
            self.gaps.count(dt, own);
        }
    }

    /// The shape our kernels really take, and the kernel in flight: one in flight only
    /// where a kernel length is configured for it (otherwise bursts beside holders too).
    fn effective_shape(&self) -> (LaunchShape, Duration) {
        match (self.shape, self.cfg.one_in_flight_kernel) {
            (LaunchShape::OneInFlight, Some(kernel)) => (LaunchShape::OneInFlight, kernel),
            (LaunchShape::Gaps, _) => (LaunchShape::Gaps, gpufill_core::gaps::GAP_KERNEL),
            _ => (LaunchShape::Bursts, self.cfg.max_kernel),
        }
    }

    /// Serves the requests due at `now` beside our kernels ([`super::kernels::serve`];
    /// under MPS a small interference only).
    fn serve_due(&mut self) {
        if self.streams == 0 {
            return;
        }
        let slicing = Slicing {
            time_slice: self.cfg.time_slice,
            switch: self.cfg.context_switch,
        };
        for i in 0..self.jobs.len() {
            let beside = self.cfg.mps && !self.cfg.foreign[i].outside_mps;
            loop {
                let job = &self.cfg.foreign[i];
                let Some(req) = self.jobs[i].stream.due(job.serving(), self.now) else {
                    break;
                };
                let served = if beside {
                    let (own, _) = self.own_at(req.start);
                    Served {
                        wait: req.len.mul_f64(self.cfg.mps_loss(job) * own),
                        ..Served::default()
                    }
                } else {
                    self.pending = Some(self.pending.map_or(req.start, |p| p.min(req.start)));
                    let served = serve(&mut self.plan, req.start, self.last_foreign_end, slicing);
                    self.fill_gaps_beside(i, req, served, slicing)
                };
                let job = &self.cfg.foreign[i];
                let end = self.jobs[i].stream.served(job.serving(), req, served);
                if !beside {
                    self.last_foreign_end = self.last_foreign_end.max(end);
                }
            }
        }
    }

    /// Filling gaps, what our kernels did beside the job `i`'s work `req` (served
    /// `served` at its start: [`super::gaps`]): its wait grows by our kernels that ran in
    /// the middle of it, and our launcher holds off after the kernels that met it.
    fn fill_gaps_beside(&mut self, i: usize, req: Request, served: Served, s: Slicing) -> Served {
        if self.shape != LaunchShape::Gaps || self.own <= 0.0 {
            return served;
        }
        let launch = match self.cfg.foreign[i].requests {
            Some(Requests::Steps {
                kernel, launch_gap, ..
            }) => Some((kernel, launch_gap)),
            _ => None,
        };
        let work = Work {
            start: req.start,
            len: req.len,
            launch,
        };
        let ours = Ours {
            // The kernel of ours the work cut short (`serve`).
            running: served
                .met
                .then(|| self.plan.kernel_at(req.start))
                .flatten()
                .map(|k| k.start),
            next: self.plan.next_after(req.start).map(|k| k.start),
            cycle: self.gap_cycle(),
        };
        let Some(extra) = self.gaps.beside(work, served, ours, s) else {
            return served;
        };
        if let Some(end) = self.gaps.last_met() {
            // A kernel of ours: the job's next work pays a switch if it came last.
            self.plan.ran(end);
        }
        self.replan();
        Served {
            wait: served.wait + extra,
            ..served
        }
    }

    /// Filling gaps: the hold after a busy kernel, re-timing the wait under way (our
    /// launcher fills again at once when it has already run out), or putting a launch
    /// ahead off.
    pub(super) fn set_gap_hold(&mut self, hold: Duration) {
        if self.gaps.set_hold(hold, self.now) {
            if self.gaps.resume == Some(self.now) {
                self.gaps.due(self.now, self.gap_cycle());
            }
            self.replan();
        }
    }

    /// The next change of a job serving requests (a request starts or ends).
    fn next_stream_event(&mut self) -> Time {
        if self.streams == 0 {
            return Time::MAX;
        }
        let now = self.now;
        self.cfg
            .foreign
            .iter()
            .zip(&mut self.jobs)
            .filter_map(|(job, tally)| tally.stream.next_event(job.serving(), now))
            .filter(|&t| t > now)
            .min()
            .unwrap_or(Time::MAX)
    }

    /// A kernel of ours has shown the foreign work pending, if one ran when it came
    /// (preempted), or started after it within [`SimConfig::late_start_window`] of our
    /// previous kernel (a switch late), up to now: set `seen`. A kernel that starts after
    /// a longer gap shows nothing, and the work is then no longer since our previous
    /// kernel.
    fn show_others(&mut self) {
        let Some(from) = self.pending else {
            return;
        };
        // A kernel of ours that starts at the very instant the work comes starts after
        // it; one that starts at `now` has not run yet (the step at `now` may cancel it).
        let running = self.plan.kernel_at(from);
        if let Some(k) = running.filter(|k| k.start < from) {
            let short_us = k.end.saturating_since(from).as_secs_f64() * 1e6;
            self.note_sign(OthersSign::CutShort { short_us });
            self.pending = None;
            return;
        }
        let Some(next) = running
            .or_else(|| self.plan.next_after(from))
            .filter(|k| k.start < self.now)
        else {
            return;
        };
        let just_before = Time::from_duration(
            next.start
                .since_epoch()
                .saturating_sub(Duration::from_nanos(1)),
        );
        let previous = self.plan.last_end_before(just_before);
        self.pending = None;
        if self.timing.is_some() {
            // The launcher's judge weighs the switch with the host's jitter.
            self.switch_at = Some(next.start);
        } else if previous.is_some_and(|p| next.start - p < self.cfg.late_start_window) {
            let late_us = self.cfg.context_switch.as_secs_f64() * 1e6;
            self.note_sign(OthersSign::LateStart { late_us });
        }
    }

    fn note_sign(&mut self, sign: OthersSign) {
        self.seen = OthersSign::strongest(self.seen, Some(sign));
    }

    /// With timing: judges our groups that started since the last call, before now.
    fn judge_groups(&mut self) {
        let Some(timing) = &mut self.timing else {
            return;
        };
        let mut signs = None;
        while let Some(k) = self.plan.next_after(timing.judged_until) {
            if k.start >= self.now {
                break;
            }
            timing.judged_until = k.start;
            let switch = if self.switch_at.is_some_and(|at| at <= k.start) {
                self.switch_at = None;
                self.cfg.context_switch
            } else {
                Duration::ZERO
            };
            if let Some(sign) = timing.group(k.start, k.end, switch) {
                signs = Some(sign);
            }
        }
        if let Some(sign) = signs {
            self.note_sign(sign);
        }
    }

    /// A probe at the model's time: whether foreign work ran since our previous kernel;
    /// the probe is then our latest kernel.
    pub(super) fn probe(&mut self) -> bool {
        self.probes += 1;
        self.plan.probe(self.now);
        if let Some(timing) = &mut self.timing {
            timing.restart();
        }
        self.pending.take().is_some()
    }

    fn publish(&mut self) {
        let period = self.cfg.sample_period.as_secs_f64();
        // NVML reports whole percents.
        let util = (self.window_busy / period * 100.0).round() / 100.0;
        let sm = (self.window_sm / period * 100.0).round() / 100.0;
        self.published.push_back((util, sm));
        let mut worked = Vec::new();
        for (job, tally) in self.cfg.foreign.iter().zip(&mut self.jobs) {
            if std::mem::take(&mut tally.window_active) {
                worked.push(job.pid);
            }
        }
        let visible = self.now + self.cfg.process_sample_lag;
        self.pending_active.push_back((visible, worked));
        self.show_active();
        self.samples += 1;
        self.window_busy = 0.0;
        self.window_sm = 0.0;
        self.next_sample += self.cfg.sample_period;
    }

    /// Moves the per-process samples that have become visible into `active`.
    fn show_active(&mut self) {
        while self
            .pending_active
            .front()
            .is_some_and(|&(visible, _)| visible <= self.now)
        {
            if let Some((_, pids)) = self.pending_active.pop_front() {
                for pid in pids {
                    if !self.active.contains(&pid) {
                        self.active.push(pid);
                    }
                }
                self.active_published = true;
            }
        }
    }

    /// Device memory in use at the model's time (NVML's v2 `used`): our context while
    /// we hold one, each foreign job's, and the driver's own moves.
    pub(super) fn used_memory(&self) -> u64 {
        let driver = self.cfg.driver_per_context_bytes;
        let own = if self.holds_context {
            self.cfg.own_context_bytes + driver
        } else {
            0
        };
        let foreign: u64 = self
            .cfg
            .foreign
            .iter()
            .map(|job| job.memory_at(self.now, driver))
            .sum();
        (own + foreign).saturating_add_signed(self.driver_moved)
    }

    /// What our probe reads of device memory against its list (our own context only:
    /// the foreign jobs are never in our namespace).
    pub(super) fn memory_reading(&self) -> MemoryReading {
        let (listed, contexts) = if self.holds_context {
            (self.cfg.own_context_bytes, 1)
        } else {
            (0, 0)
        };
        MemoryReading {
            used_bytes: self.used_memory(),
            listed_bytes: self.cfg.process_sizes.then_some(listed),
            listed_contexts: contexts,
        }
    }

    pub(super) fn lost(&self) -> bool {
        self.cfg.lost_at.is_some_and(|t| self.now >= t)
            && self.cfg.recovers_at.is_none_or(|t| self.now < t)
    }

    pub(super) fn check(&self, probing: bool) -> Result<(), SimError> {
        if self.lost() {
            return Err(SimError::Lost);
        }
        let faulty = self
            .cfg
            .probe_faults
            .iter()
            .any(|&(from, to)| from <= self.now && self.now < to);
        if probing && faulty {
            return Err(SimError::Transient);
        }
        Ok(())
    }

    /// How our kernels lie with `duty` laid out in `shape` ([`super::kernels`]).
    fn layout(&self, shape: LaunchShape, duty: f64) -> Layout {
        match (shape, self.cfg.one_in_flight_kernel) {
            (LaunchShape::Gaps, _) => {
                gaps::layout(duty, self.cfg.launch_overhead, self.gaps.kernel())
            }
            (LaunchShape::OneInFlight, Some(kernel)) => Layout::paced(duty, kernel),
            _ => Layout::bursts(duty, self.cfg.period, self.cfg.max_kernel),
        }
    }

    /// The share of its duty our load is resident in `shape`: each kernel loses the
    /// launch overhead (a burst of `duty x period` is one kernel by default, so the
    /// share depends on the duty).
    fn efficiency(&self, shape: LaunchShape, duty: f64) -> f64 {
        if shape == LaunchShape::Gaps {
            // The overhead lengthens the idle gap after each kernel (`gaps.rs`).
            let resident = gaps::resident(duty, self.cfg.launch_overhead, GAP_KERNEL);
            return if duty > 0.0 { resident / duty } else { 1.0 };
        }
        let kernel = match self.layout(shape, duty) {
            Layout::Idle => self.cfg.max_kernel,
            layout => layout.kernel_len(),
        };
        let lost = self.cfg.launch_overhead.as_secs_f64() / kernel.as_secs_f64().max(1e-9);
        (1.0 - lost).clamp(0.0, 1.0)
    }

    /// Lays our kernels out anew from now on, for the load in force.
    fn replan(&mut self) {
        let duty = if self.own > 0.0 {
            self.requested.duty.fraction()
        } else {
            0.0
        };
        let layout = if self.shape == LaunchShape::Gaps && self.gaps.holding(self.now) {
            Layout::Idle
        } else {
            self.layout(self.shape, duty)
        };
        self.plan.change(self.now, layout);
        if self.shape == LaunchShape::Gaps {
            self.gaps.look_ahead(&self.plan, self.now);
        }
    }

    /// Lays our load out in `shape` from now on: the same duty, resident for the new
    /// shape's share of it.
    pub(super) fn set_shape(&mut self, shape: LaunchShape) {
        let duty = self.requested.duty.fraction();
        let (before, after) = (
            self.efficiency(self.shape, duty),
            self.efficiency(shape, duty),
        );
        if shape != self.shape && (shape == LaunchShape::Gaps || self.shape == LaunchShape::Gaps) {
            // A new launcher thread, and a new pacer.
            self.gaps.restart();
        }
        self.shape = shape;
        // Scaled rather than recomputed from `requested`, which a broken context keeps
        // while running nothing.
        let ratio = if before > 0.0 { after / before } else { 0.0 };
        self.own *= ratio;
        self.own_sm *= ratio;
        self.replan();
    }

    pub(super) fn set_load(&mut self, load: Load) {
        if load.is_idle()
            && let Some(timing) = &mut self.timing
        {
            // The launcher starts a new chain after an idle spell.
            timing.restart();
        }
        if load.is_idle() && self.shape == LaunchShape::Gaps {
            // The launcher thread stops; the next load starts a new one.
            self.gaps.restart();
        }
        self.requested = load;
        let fraction = load.duty.fraction();
        let duty = fraction * self.efficiency(self.shape, fraction);
        let width = f64::from(load.width.get().min(self.cfg.sm_count));
        let sm = duty * width / f64::from(self.cfg.sm_count.max(1));
        if duty == 0.0 && self.own > 0.0 {
            let tail = match self.effective_shape() {
                (LaunchShape::Bursts, _) => self.cfg.stop_tail,
                // Nothing is queued behind the kernel in flight.
                (LaunchShape::OneInFlight | LaunchShape::Gaps, kernel) => {
                    self.cfg.stop_tail.min(kernel)
                }
            };
            self.tail = Some((self.now + tail, self.own, self.own_sm));
        } else if duty > 0.0 {
            self.tail = None;
        }
        self.own = duty;
        self.own_sm = sm;
        self.replan();
    }

    pub(super) fn report(&self) -> SimReport {
        let foreign = self
            .cfg
            .foreign
            .iter()
            .zip(&self.jobs)
            .map(|(job, tally)| tally.report(job))
            .collect();
        SimReport {
            foreign,
            own_busy: Duration::from_secs_f64(self.own_busy),
            samples: self.samples,
            probes: self.probes,
            host_stalls: self.timing.as_ref().map(|t| (t.groups, t.stalls)),
        }
    }

    /// Adds a foreign job (for scenarios built as they go).
    pub(super) fn add_foreign(&mut self, job: ForeignJob) {
        self.streams += usize::from(job.requests.is_some());
        self.cfg.foreign.push(job);
        self.next_job_event = None;
        self.jobs.push(Tally::default());
    }

    /// Drops the added jobs that left before `t` and returns their reports.
    pub(super) fn retire_foreign(&mut self, t: Time) -> Vec<ForeignReport> {
        self.advance(t);
        let mut retired = Vec::new();
        let mut i = self.configured;
        while i < self.cfg.foreign.len() {
            if self.cfg.foreign[i].leaves_at < t {
                let job = self.cfg.foreign.remove(i);
                self.next_job_event = None;
                self.streams -= usize::from(job.requests.is_some());
                // A PID seen working stays pending until the `activity` policy reads
                // it; nothing reads it in `presence` mode, so a retired job takes its
                // PID along, or the list (searched at every sample) grows with every
                // job of the run.
                self.active.retain(|&pid| pid != job.pid);
                let tally = self.jobs.remove(i);
                retired.push(tally.report(&job));
            } else {
                i += 1;
            }
        }
        retired
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{SimGpu, Spacing};
    use gpufill_core::device::LoadSource;
    use gpufill_core::units::{Duty, Width};

    fn load(duty: f64) -> Load {
        Load {
            duty: Duty::clamped(duty),
            width: Width::ONE_WARP,
        }
    }

    fn ms(x: u64) -> Time {
        Time::from_millis(x)
    }

    /// Isolated requests as long as those of the service of issue 21 alone
    /// (docs/benchmarks.md#live-services-labpy-live)
    /// at `per_s`, evenly spaced from `from_ms` or as a Poisson process.
    fn requests(per_s: f64, from_ms: u64, spacing: Spacing) -> ForeignJob {
        ForeignJob::isolated_requests(0.0, 1000.0, per_s, Duration::from_micros(870))
            .with_spacing(spacing)
            .dormant_until(from_ms as f64 / 1e3)
    }

    fn gpu(job: ForeignJob, cfg: SimConfig) -> SimGpu {
        SimGpu::new(SimConfig {
            foreign: vec![job],
            ..cfg
        })
    }

    /// The request report of the first job at `t`.
    fn served(gpu: &SimGpu, t: Time) -> crate::RequestReport {
        gpu.report(t).foreign[0].requests.clone().unwrap()
    }

    #[test]
    fn one_kernel_a_burst_costs_isolated_requests_what_the_h100_measured() {
        // One 25 ms kernel every 50 ms beside 20 requests a second, Poisson, as measured
        // (docs/benchmarks.md#what-another-contexts-work-does-to-our-kernels-the-physics-the-design-rests-on;
        // raw in docs/data/live-long-kernels-h100.txt, from the retired `live_probe.py`:
        // scripts/RETIRED.md): the bounds below bracket its p50, mean, p99 and the share
        // of bursts cut short.
        for seed in [1, 2, 3] {
            let g = gpu(
                requests(20.0, 0, Spacing::Poisson { seed }),
                SimConfig::default(),
            );
            g.load().set_load(Time::ZERO, load(0.5)).unwrap();
            let r = served(&g, Time::from_secs_f64(200.0));
            assert!(r.count > 3800, "{r:?}");
            assert!((0.10..0.20).contains(&r.slowdown()), "{r:?}");
            let extra = (r.mean - r.mean_alone).as_secs_f64() * 1e3;
            assert!((0.25..0.55).contains(&extra), "{extra} ms: {r:?}");
            assert!(r.p99 >= Duration::from_micros(2700), "{r:?}");
            assert!(r.p99 <= Duration::from_micros(3200), "{r:?}");
            // A request waits at most a time slice and a switch.
            assert!(r.max_wait <= Duration::from_micros(2130), "{r:?}");
            // Cut short in about the measured share of the bursts: a request came while
            // it ran.
            let bursts = 200.0 * 20.0;
            let cut = r.met_kernel as f64 / bursts;
            assert!((0.33..0.47).contains(&cut), "{cut}");
        }
    }

    #[test]
    fn one_short_kernel_in_flight_costs_a_request_at_most_that_kernel_and_a_switch() {
        // 500/500 us: the p50 as measured (the same section's last paragraph; raw in
        // docs/data/live-probe-h100.txt).
        let cfg = SimConfig {
            one_in_flight_kernel: Some(Duration::from_micros(500)),
            ..SimConfig::default()
        };
        let g = gpu(requests(20.0, 0, Spacing::Poisson { seed: 4 }), cfg);
        let mut source = g.load();
        source.set_shape(LaunchShape::OneInFlight);
        source.set_load(Time::ZERO, load(0.5)).unwrap();
        let r = served(&g, Time::from_secs_f64(100.0));
        let p50 = (r.median - r.median_alone).as_secs_f64() * 1e3;
        assert!((0.1..0.3).contains(&p50), "{p50}: {r:?}");
        assert!(r.max_wait <= Duration::from_micros(630), "{r:?}");
    }

    #[test]
    fn a_request_that_meets_our_kernel_shows_at_once_and_one_between_at_our_next() {
        // Requests 1.02 s apart from 1.011 s.
        let g = gpu(
            requests(1.0 / 1.02, 1011, Spacing::Even),
            SimConfig::default(),
        );
        let mut source = g.load();
        source.set_load(Time::ZERO, load(0.5)).unwrap();
        // Nobody yet: nothing shows.
        g.report(ms(1000));
        assert!(source.others_seen().is_none());
        // A request at 1.011 s, inside our kernel of 1.000-1.025 s: it preempts it.
        g.report(ms(1012));
        assert!(source.others_seen().is_some());
        assert!(source.others_seen().is_none(), "once");
        let r = served(&g, ms(1012));
        assert_eq!(r.met_kernel, 1);
        // 11 ms into the kernel: it waits the rest of its 2 ms slice, and a switch.
        assert_eq!(r.first, Some((ms(1011), Duration::from_micros(1130))));
        // It ran after our kernel ended: our next kernel (1.050 s) starts late too, and
        // shows it once it has started (the step at 1.050 s could still cancel it).
        g.report(ms(1050));
        assert!(source.others_seen().is_none());
        g.report(ms(1051));
        assert!(source.others_seen().is_some());
        // The next at 2.031 s arrives after ours (2.000-2.025 s): one switch. Our next
        // kernel, at 2.050 s, starts late and shows it then, not before.
        g.report(ms(2050));
        assert!(source.others_seen().is_none());
        g.report(ms(2051));
        assert!(source.others_seen().is_some());
        assert_eq!(served(&g, ms(2051)).switched, 1);
        // While we are idle nothing shows, however much runs.
        source.set_load(ms(2100), Load::IDLE).unwrap();
        g.report(ms(9000));
        assert!(source.others_seen().is_none());
    }

    #[test]
    fn a_probe_finds_work_since_our_previous_kernel_however_long_ago_and_counts_as_one() {
        let g = gpu(requests(0.1, 5000, Spacing::Even), SimConfig::default());
        let mut source = g.load();
        source.set_load(Time::ZERO, load(0.5)).unwrap();
        source.set_load(ms(1000), Load::IDLE).unwrap();
        assert_eq!(source.probe(ms(4000)), Ok(Some(false)));
        // One request at 5 s; found 7 s later.
        assert_eq!(source.probe(ms(12_000)), Ok(Some(true)));
        // The probe was a kernel of ours: nothing since.
        assert_eq!(source.probe(ms(13_000)), Ok(Some(false)));
        // Each request after a probe pays a switch: the one at 5 s (our probe at 4 s
        // ran after our last kernel) and the one at 15 s.
        let r = served(&g, ms(15_001));
        let switch = Duration::from_micros(130);
        assert_eq!(r.waits, vec![(ms(5000), switch), (ms(15_000), switch)]);
        assert_eq!(g.report(ms(15_001)).probes, 3);
        assert!(
            source.others_seen().is_none(),
            "a probe is not a kernel that shows others"
        );
    }

    #[test]
    fn under_mps_requests_pay_a_small_interference_and_nothing_shows() {
        let g = gpu(
            requests(20.0, 0, Spacing::Poisson { seed: 5 }),
            SimConfig {
                mps: true,
                ..SimConfig::default()
            },
        );
        let mut source = g.load();
        source.set_load(Time::ZERO, load(0.5)).unwrap();
        let r = served(&g, Time::from_secs_f64(60.0));
        assert!(source.others_seen().is_none());
        assert_eq!(source.probe(Time::from_secs_f64(60.0)), Ok(Some(false)));
        assert_eq!((r.met_kernel, r.switched), (0, 0));
        // 0.015 per unit of our duty (0.5), as the fluid model's MPS loss.
        assert!((r.slowdown() - 0.0075).abs() < 0.001, "{r:?}");
        assert!(r.mean_slowdown() < 0.01, "{r:?}");
    }

    #[test]
    fn under_mps_a_few_wave_service_pays_for_long_kernels_and_not_for_short_ones() {
        // The matmul service under MPS at duty 0.5 (5 requests a second, ten bf16
        // 4096^2 matmuls): the bounds below bracket its measured mean cost beside one
        // 25 ms kernel a burst, beside 200 us kernels and beside 50 us ones (nothing
        // measurable)
        // (docs/benchmarks.md#graphs-of-short-kernels-under-mps-and-the-cpu-by-state-0a2bee4-to-55f8aaf-one-h100-a-host).
        let matmuls = || {
            ForeignJob::isolated_requests(0.0, 1000.0, 5.0, Duration::from_millis(2))
                .with_spacing(Spacing::Poisson { seed: 3 })
                .filling_every_sm()
        };
        let mean = |kernel: Option<Duration>| {
            let g = gpu(
                matmuls(),
                SimConfig {
                    mps: true,
                    ..SimConfig::default()
                }
                .with_mps_kernel(kernel),
            );
            let mut source = g.load();
            source.set_load(Time::ZERO, load(0.5)).unwrap();
            served(&g, Time::from_secs_f64(60.0)).mean_slowdown()
        };
        let long = mean(None);
        let two_hundred = mean(Some(Duration::from_micros(200)));
        let short = mean(Some(Duration::from_micros(50)));
        assert!((0.07..=0.12).contains(&long), "{long}");
        assert!((0.025..=0.045).contains(&two_hundred), "{two_hundred}");
        assert!(short < 0.01, "{short}");
        // A service whose blocks fit beside ours pays the small interference alone.
        let g = gpu(
            ForeignJob::isolated_requests(0.0, 1000.0, 5.0, Duration::from_millis(2)),
            SimConfig {
                mps: true,
                ..SimConfig::default()
            },
        );
        let mut source = g.load();
        source.set_load(Time::ZERO, load(0.5)).unwrap();
        assert!(served(&g, Time::from_secs_f64(60.0)).mean_slowdown() < 0.01);
    }

    #[test]
    fn the_launch_settings_lay_our_kernels_out() {
        let cfg = SimConfig::default().with_launch(
            Duration::from_millis(50),
            Duration::from_millis(2),
            None,
        );
        assert_eq!(
            (cfg.max_kernel, cfg.one_in_flight_kernel),
            (Duration::from_millis(2), None)
        );
        let beside = SimConfig::default().with_launch(
            Duration::from_millis(100),
            Duration::from_millis(100),
            Some(Duration::from_micros(250)),
        );
        assert_eq!(beside.period, Duration::from_millis(100));
        assert_eq!(
            beside.one_in_flight_kernel,
            Some(Duration::from_micros(250))
        );
        // 2 ms pieces: a request at 1.010 s waits the rest of the piece then running
        // (1.010-1.012 s), not of the 25 ms burst.
        let g = gpu(requests(1.0, 1011, Spacing::Even), cfg.clone());
        g.load().set_load(Time::ZERO, load(0.5)).unwrap();
        let r = served(&g, ms(1012));
        assert_eq!(r.first, Some((ms(1011), Duration::from_micros(1130))));
        // With no kernel length beside holders, one in flight is laid out in bursts.
        let g = gpu(requests(1.0, 1011, Spacing::Even), cfg);
        let mut source = g.load();
        source.set_shape(LaunchShape::OneInFlight);
        source.set_load(Time::ZERO, load(0.5)).unwrap();
        assert_eq!(served(&g, ms(1012)).first, r.first);
        // The overhead per kernel: 30 us per 2 ms piece reads 98.5 % of the duty, per
        // 25 ms burst 99.9 %.
        let busy = |max_kernel_ms: u64| {
            let g = SimGpu::new(SimConfig {
                max_kernel: Duration::from_millis(max_kernel_ms),
                ..SimConfig::default()
            });
            g.load().set_load(Time::ZERO, load(0.5)).unwrap();
            g.report(ms(10_000)).own_busy.as_secs_f64()
        };
        assert!((busy(2) - 5.0 * 0.985).abs() < 1e-6);
        assert!((busy(50) - 5.0 * 0.9988).abs() < 1e-6);
    }
}
