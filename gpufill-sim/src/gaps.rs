//! Filling the gaps of live work without MPS ([`gpufill_core::LaunchShape::Gaps`]): our kernels of
//! [`GAP_KERNEL`] one at a time, an idle gap of at least [`MIN_GAP`] after each, and
//! launches paced by the same [`GapPacer`] the CUDA launcher uses: it is told each
//! kernel's outcome and says when the next may go (after a busy kernel, at least the
//! hold that [`gpufill_core::LoadSource::set_gap_hold`] sets); what each piece of a job's
//! work (a request, a training step) pays for it, and what our kernels report
//! ([`gpufill_core::LoadSource::gaps_seen`]).
//!
//! # The physics, as the model takes it
//! Measured on H200s (docs/benchmarks.md#time-slicing-between-two-contexts-the-physics-of-filling-gaps;
//! the constants are [`gpufill_core::gaps`]'s). A job's work that arrives while a kernel of
//! ours runs waits the rest of it and a switch, and one that arrives when our context
//! was the last on the GPU pays a switch ([`super::kernels::serve`], as for every shape).
//! Then, piece by piece of the job's work:
//! - a kernel of ours running when the work came **meets** it (it is cut short: the
//!   pacer hears [`KernelOutcome::Busy`]);
//! - a kernel of ours launched while the work is queued waits for the job's kernel to
//!   end, in a launch gap between two of its kernels (a training step), or for the end
//!   of its time slice or of its work (a request, queued whole): it **meets** the job
//!   (busy too), is **held back** when it waited [`HELD_BACK`] or more, and, when it ran
//!   in the middle of the job's work, costs the job two switches and our kernel (the
//!   job's next kernel waits for it, and for the switch back);
//! - the first kernel of ours after the work, when the work ran after our last kernel,
//!   starts a switch late: it **meets** the job too ([`KernelOutcome::AfterOthers`]); the
//!   first after a wait that nothing ran in is [`KernelOutcome::Clear`]. The CUDA
//!   launcher learns this from a probe pair after each wait, and from a check of each
//!   kernel just after its due end: the model takes both as exact. Of the kernels that
//!   run clear while filling only those after a wait are told to the pacer; the rest,
//!   up to the next piece of work, is told as one clear stretch
//!   ([`GapPacer::clear_until`]).
//!
//! # The launcher, as the CUDA pacing thread runs it
//! A kernel is judged when the thread checks it, after its rest: a kernel's length and
//! the duty's gap after its launch (the layout's cycle), or when it ends if that is
//! later (the model leaves out how late the thread's polls find it). After a busy kernel
//! the thread asks the pacer at once; after any other, at the end of its rest. Where the
//! pacer puts a launch off (a busy spell's hold, a spell it predicts) our launcher is
//! idle until the time it gives; a new hold re-times that wait from when it began, as
//! the CUDA launcher does, except after work that ran during it (the launch it waits for
//! is then past the work's end, and stays). A new launcher thread (after an idle load or
//! a change of shape) starts a new pacer. The kernels of ours that find the job busy are
//! counted, not laid out: the model's utilization leaves them out (a kernel or two a
//! meeting).

use std::time::Duration;

use super::kernels::{Layout, Plan, Served, Slicing};
use gpufill_core::gaps::{GAP_KERNEL, GapPacer, GapReport, KernelOutcome, MIN_GAP, MIN_HOLD};
use gpufill_core::time::Time;

/// A kernel of ours that ended this long after it was due to (it waited behind the job's
/// queued work, and for the switch) is reported held back ([`GapReport::held_back`]), as
/// the CUDA launcher judges it (its `LATE`).
pub(super) const HELD_BACK: Duration = Duration::from_micros(300);

/// How far ahead, at most, the model looks for a launch that the pacer puts off (it
/// looks again there): two of the job's learned periods, and no further than this.
const LOOK_AHEAD: Duration = Duration::from_millis(250);

/// How our kernels of `kernel` lie at `duty` while filling gaps: one every
/// `max(kernel / duty, kernel + MIN_GAP)`, plus `overhead` (the launch and the sleep's
/// overshoot lengthen the idle gap: a model choice, as the launch overhead of the other
/// shapes is). `kernel` is [`GAP_KERNEL`], or longer where the pacer
/// stretches them ([`GapPacer::kernel_for`]).
pub(super) fn layout(duty: f64, overhead: Duration, kernel: Duration) -> Layout {
    if duty <= 0.0 {
        return Layout::Idle;
    }
    let cycle = kernel.div_f64(duty.min(1.0)).max(kernel + MIN_GAP) + overhead;
    Layout::Paced { kernel, cycle }
}

/// The share of the time our kernels of `kernel` are resident at `duty` while filling
/// gaps (no hold in force).
pub(super) fn resident(duty: f64, overhead: Duration, kernel: Duration) -> f64 {
    match layout(duty, overhead, kernel) {
        Layout::Paced { kernel, cycle } => kernel.as_secs_f64() / cycle.as_secs_f64(),
        _ => 0.0,
    }
}

/// One piece of a job's work beside our gap filling.
#[derive(Clone, Copy, Debug)]
pub(super) struct Work {
    /// When it came.
    pub(super) start: Time,
    /// How long it takes alone.
    pub(super) len: Duration,
    /// Its kernels' length and the launch gap between them (a training step); `None`:
    /// its work is queued whole (a request).
    pub(super) launch: Option<(Duration, Duration)>,
}

/// Our launcher beside a piece of work: the kernel of ours that the work cut short (its
/// launch), the next launch laid out after the work came, and the layout's cycle (a
/// kernel and the duty's gap: when the launcher checks a kernel after its launch).
#[derive(Clone, Copy, Debug)]
pub(super) struct Ours {
    pub(super) running: Option<Time>,
    pub(super) next: Option<Time>,
    pub(super) cycle: Duration,
}

/// A launch the pacer puts off while our launcher fills ([`GapFill::look_ahead`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Defer {
    /// When: a launch laid out then, or a time to look again.
    pub(super) at: Time,
    /// Until when the launcher stays idle from then; `None`: nothing put off up to
    /// `at`, look again then.
    pub(super) until: Option<Time>,
}

/// The gap filler's state in the simulated GPU.
#[derive(Clone, Debug)]
pub(super) struct GapFill {
    /// The hold after a busy kernel, as the loop last set it.
    pub(super) hold: Duration,
    /// No launch before this (the pacer's wait in force).
    pub(super) resume: Option<Time>,
    /// When that wait began: the pacer was asked then, and a new hold re-times it from
    /// there.
    waited_from: Time,
    /// The next launch the pacer puts off while our launcher fills.
    pub(super) defer: Option<Defer>,
    /// When the latest kernel of ours that found the job busy ended.
    met_at: Option<Time>,
    /// The job ran since our last kernel: our next one starts a switch late.
    stale: bool,
    /// The first kernel after a wait, not yet judged: its launch, when the launcher
    /// checks it, and what it shows unless the job's work cuts it short.
    judging: Option<(Time, Time, KernelOutcome)>,
    /// When our launcher launches next, as the CUDA launcher learns it.
    pacer: GapPacer,
    /// What our kernels met since the last report.
    seen: GapReport,
    /// Kernels of ours laid out since the last report, in part, and their GPU time (s).
    kernels: f64,
    ours: f64,
    /// The length of the kernels laid out: [`GAP_KERNEL`], or longer where the pacer
    /// stretches them ([`GapPacer::kernel_for`]).
    kernel: Duration,
}

impl Default for GapFill {
    fn default() -> Self {
        GapFill {
            hold: MIN_HOLD,
            resume: None,
            waited_from: Time::ZERO,
            defer: None,
            met_at: None,
            stale: false,
            judging: None,
            pacer: GapPacer::new(),
            seen: GapReport::default(),
            kernels: 0.0,
            ours: 0.0,
            kernel: GAP_KERNEL,
        }
    }
}

impl GapFill {
    /// A new launcher thread (after an idle load, or a change of shape): a new pacer,
    /// nothing waited for; the hold and what was seen stay.
    pub(super) fn restart(&mut self) {
        *self = GapFill {
            hold: self.hold,
            met_at: self.met_at,
            seen: self.seen,
            kernels: self.kernels,
            ours: self.ours,
            ..GapFill::default()
        };
        self.pacer.set_hold(self.hold);
    }

    /// Sets the hold at `now`: a wait under way is re-timed from when it began (not one
    /// for a launch after the job's work, which stays). Returns whether our launcher's
    /// plan may change at `now`: it fills again, or (filling) a launch ahead may be put
    /// off ([`GapFill::look_ahead`]).
    pub(super) fn set_hold(&mut self, hold: Duration, now: Time) -> bool {
        self.hold = hold;
        self.pacer.set_hold(hold);
        if !self.holding(now) {
            return true;
        }
        if self.stale {
            return false;
        }
        self.judge(now);
        let resume = self.next_launch(self.waited_from).max(now);
        self.resume = Some(resume);
        resume == now
    }

    /// When the latest kernel of ours that found the job busy ended.
    pub(super) fn last_met(&self) -> Option<Time> {
        self.met_at
    }

    /// Whether our launcher is idle at `t`, waiting for the pacer.
    pub(super) fn holding(&self, t: Time) -> bool {
        self.resume.is_some_and(|r| t < r)
    }

    /// Counts the kernels of ours laid out over `dt` at the resident share `own`.
    pub(super) fn count(&mut self, dt: f64, own: f64) {
        self.kernels += own * dt / self.kernel().as_secs_f64();
        self.ours += own * dt;
    }

    /// The length of the kernels laid out.
    pub(super) fn kernel(&self) -> Duration {
        self.kernel
    }

    /// Whether the kernels laid out are stretched.
    pub(super) fn stretched(&self) -> bool {
        self.kernel > GAP_KERNEL
    }

    /// At `now`, filling: our kernels ran clear since the last one told (the spell in
    /// progress may end), and the pacer says how long the next ones are. Returns whether
    /// that changed (the launcher lays its kernels out anew).
    pub(super) fn restretch(&mut self, now: Time) -> bool {
        self.filled_clear_until(now);
        let kernel = if self.holding(now) {
            GAP_KERNEL
        } else {
            self.pacer.kernel_for(now)
        };
        std::mem::replace(&mut self.kernel, kernel) != kernel
    }

    /// What our kernels saw since the last call.
    pub(super) fn report(&mut self) -> GapReport {
        let whole = self.kernels.floor();
        self.kernels -= whole;
        let kernels = u32::try_from(whole as u64).unwrap_or(u32::MAX);
        let seen = std::mem::take(&mut self.seen);
        let ours = Duration::from_secs_f64(std::mem::take(&mut self.ours));
        GapReport {
            kernels: seen.kernels.saturating_add(kernels),
            ours: seen.ours + ours,
            ..seen
        }
    }

    /// If our launcher is filling at `t` (not waiting, its first kernel after a wait
    /// judged), its kernels ran clear until then: the pacer is told so
    /// ([`GapPacer::clear_until`]), and what that ends is reported.
    fn filled_clear_until(&mut self, t: Time) {
        if !self.holding(t) && self.judging.is_none() {
            self.seen += self.pacer.clear_until(t);
        }
    }

    /// When the pacer lets a kernel go, asked at `earliest` with the hold in force.
    fn next_launch(&self, earliest: Time) -> Time {
        let kernel = self.pacer.kernel_for(earliest);
        self.pacer.next_launch(earliest, kernel, self.hold)
    }

    /// Tells the pacer what the first kernel after a wait showed, once the launcher has
    /// checked it (by `now`); a meeting (a late start) is counted.
    fn judge(&mut self, now: Time) {
        let Some((launched, checked, outcome)) = self.judging.filter(|j| j.1 <= now) else {
            return;
        };
        self.judging = None;
        // Counted in the layout already ([`GapFill::count`]).
        let report = self.pacer.kernel_done(launched, checked, outcome);
        self.seen += GapReport {
            kernels: 0,
            ours: Duration::ZERO,
            ..report
        };
    }

    /// A kernel of ours launched at `launched` found the job busy (cut short, or queued
    /// into its work), ran until `ran_until`, `late` past when it was due to, and was
    /// checked at `checked` or when it ended: counted, told to the pacer, and the
    /// launcher asks at once when the next may go, which this returns.
    fn busy(&mut self, launched: Time, ran_until: Time, checked: Time, late: Duration) -> Time {
        self.met_at = Some(ran_until);
        let ended = ran_until.max(checked);
        let outcome = if late >= HELD_BACK {
            KernelOutcome::HeldBack
        } else {
            KernelOutcome::Busy
        };
        self.seen += self.pacer.kernel_done(launched, ended, outcome);
        self.waited_from = ended;
        self.next_launch(ended)
    }

    /// `work` was served beside our kernels (`ours`), having waited `served.wait` for
    /// them (its start: module docs). Returns how much longer the job's work took for our
    /// kernels that ran in the middle of it, and sets the wait that follows. `None` when
    /// nothing of ours met it.
    pub(super) fn beside(
        &mut self,
        work: Work,
        served: Served,
        ours: Ours,
        s: Slicing,
    ) -> Option<Duration> {
        // Our launcher filled until the work came, every kernel clear.
        self.filled_clear_until(work.start);
        let cut = served.met.then(|| ours.running.unwrap_or(work.start));
        if self.judging.is_some_and(|j| Some(j.0) == cut) {
            // The first kernel after a wait, cut short: it found the job busy.
            self.judging = None;
        }
        self.judge(Time::MAX);
        let work_from = work.start + served.wait;
        let mut extra = Duration::ZERO;
        let mut ours_end = None;
        let mut free = match cut {
            Some(launched) => {
                // Cut short when the work came: it ended a switch before the work ran.
                let end = work.start + served.wait.saturating_sub(s.switch);
                ours_end = Some(end);
                Some(self.busy(launched, end, launched + ours.cycle, Duration::ZERO))
            }
            None => self
                .resume
                .filter(|&r| r > work.start)
                .or_else(|| ours.next.map(|n| self.next_launch(n))),
        };
        while let Some(launch) = free {
            let end = work_from + work.len + extra;
            if launch >= end {
                // The first kernel after the work starts late, if the work ran after
                // our last kernel: it meets the job when it comes ([`GapFill::due`]),
                // unless more of the job's work comes first.
                if ours_end.is_none_or(|e| e < end) {
                    self.wait_for(launch, true);
                    return Some(extra);
                }
                break;
            }
            let got_in = got_in(work, work_from, launch, end, s.time_slice);
            if got_in < end {
                // In the middle of its work: its next kernel waits for ours, and for
                // the switch back.
                extra += s.switch * 2 + GAP_KERNEL;
            }
            let ran_until = got_in + s.switch + GAP_KERNEL;
            ours_end = Some(ran_until);
            // It was due to end a kernel after its launch.
            let late = ran_until - (launch + GAP_KERNEL);
            free = Some(self.busy(launch, ran_until, launch + ours.cycle, late));
        }
        // Nothing of ours met it: nothing changes.
        ours_end?;
        if let Some(launch) = free {
            self.wait_for(launch, false);
        }
        Some(extra)
    }

    /// Our launcher waits until `launch`; `stale`: the job ran after our last kernel.
    fn wait_for(&mut self, launch: Time, stale: bool) {
        self.resume = Some(launch);
        self.stale = stale;
        self.defer = None;
        // The first kernel after a wait is a short one.
        self.kernel = GAP_KERNEL;
    }

    /// Our launcher launches again at `now`, its wait over: the first kernel after it
    /// starts a switch late if the job ran since our last kernel, and is judged once the
    /// launcher checks it, a `cycle` after its launch.
    pub(super) fn due(&mut self, now: Time, cycle: Duration) {
        let outcome = if std::mem::take(&mut self.stale) {
            KernelOutcome::AfterOthers
        } else {
            KernelOutcome::Clear
        };
        self.resume = None;
        self.judging = Some((now, now + cycle, outcome));
    }

    /// Filling from `now` with the kernels of `plan`: the first launch the pacer puts
    /// off ([`GapFill::defer`]). While the first kernel after a wait is still to be
    /// judged, it looks again once it is; with no period learned only the next kernel
    /// can be put off (by a busy spell's hold).
    pub(super) fn look_ahead(&mut self, plan: &Plan, now: Time) {
        self.judge(now);
        self.defer = if self.holding(now) {
            None
        } else if let Some((_, checked, _)) = self.judging {
            Some(Defer {
                at: checked,
                until: None,
            })
        } else {
            self.first_put_off(plan, now)
        };
    }

    fn first_put_off(&self, plan: &Plan, now: Time) -> Option<Defer> {
        let put_off = self.launch_put_off(plan, now);
        // The kernels' length changes before that: look again then.
        match self.pacer.kernel_changes_at(now) {
            Some(at) if put_off.is_none_or(|d| at < d.at) => Some(Defer { at, until: None }),
            _ => put_off,
        }
    }

    fn launch_put_off(&self, plan: &Plan, now: Time) -> Option<Defer> {
        let mut k = plan
            .kernel_at(now)
            .filter(|k| k.start >= now)
            .or_else(|| plan.next_after(now))?;
        let horizon = (self.pacer.learned().1).map(|p| now + (p * 2).clamp(GAP_KERNEL, LOOK_AHEAD));
        loop {
            let at = self.next_launch(k.start);
            if at > k.start {
                return Some(Defer {
                    at: k.start,
                    until: Some(at),
                });
            }
            let horizon = horizon?;
            if k.start >= horizon {
                return Some(Defer {
                    at: k.start,
                    until: None,
                });
            }
            k = plan.next_after(k.start)?;
        }
    }

    /// At `now`, the launch put off ([`GapFill::defer`]) comes: our launcher waits for
    /// the pacer if it still puts the launch off. Returns whether it does; otherwise it
    /// fills on, and the caller looks ahead again.
    pub(super) fn put_off(&mut self, now: Time) -> bool {
        self.defer = None;
        self.judge(now);
        let launch = self.next_launch(now);
        if launch <= now {
            return false;
        }
        self.waited_from = now;
        self.wait_for(launch, false);
        true
    }
}

/// When a kernel of ours launched at `launch` while the job's work (from `work_from`
/// until `end`) is queued gets the GPU: at the end of the job's kernel running then (a
/// training step's launch gap), or of its time slice or its work (a request, queued
/// whole).
fn got_in(work: Work, work_from: Time, launch: Time, end: Time, slice: Duration) -> Time {
    let into = launch.saturating_since(work_from);
    let at = match work.launch {
        Some((kernel, gap)) => {
            let period = (kernel + gap).as_nanos().max(1);
            let offset = into.as_nanos() % period;
            let left = kernel.as_nanos().saturating_sub(offset);
            launch + Duration::from_nanos(u64::try_from(left).unwrap_or(u64::MAX))
        }
        None => {
            let slice_ns = slice.as_nanos().max(1);
            let slices = into.as_nanos() / slice_ns + 1;
            let ns = u64::try_from(slices * slice_ns).unwrap_or(u64::MAX);
            work_from + Duration::from_nanos(ns)
        }
    };
    at.min(end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufill_core::gaps::STRETCH_KERNEL;

    const S: Slicing = Slicing {
        time_slice: Duration::from_millis(2),
        switch: Duration::from_micros(130),
    };

    /// Our kernels' cycle at full duty with a 30 us overhead.
    const CYCLE: Duration = Duration::from_micros(280);

    fn us(x: u64) -> Duration {
        Duration::from_micros(x)
    }

    fn at_us(x: u64) -> Time {
        Time::from_duration(us(x))
    }

    /// A training step at `start_us`, 12.8 ms long, in kernels of 300 us, 20 us apart.
    fn step_at(start_us: u64) -> Work {
        Work {
            start: at_us(start_us),
            len: us(12_800),
            launch: Some((us(300), us(20))),
        }
    }

    fn step() -> Work {
        step_at(10_000)
    }

    /// Our kernel launched 40 us before the work came: it waited 60 us and a switch.
    const CUT: Served = Served {
        wait: Duration::from_micros(190),
        met: true,
        switched: false,
    };

    fn cut_at(start_us: u64) -> Ours {
        Ours {
            running: Some(at_us(start_us - 40)),
            next: None,
            cycle: CYCLE,
        }
    }

    #[test]
    fn our_kernels_start_at_most_every_kernel_and_min_gap_plus_the_overhead() {
        let full = layout(1.0, us(30), GAP_KERNEL);
        assert_eq!(
            full,
            Layout::Paced {
                kernel: GAP_KERNEL,
                cycle: us(280)
            }
        );
        assert!((resident(1.0, us(30), GAP_KERNEL) - 100.0 / 280.0).abs() < 1e-9);
        // At 20 % the duty's gap is longer than the least one.
        assert_eq!(resident(0.2, Duration::ZERO, GAP_KERNEL), 0.2);
        assert_eq!(layout(0.0, us(30), GAP_KERNEL), Layout::Idle);
        // Stretched: 500 us kernels, still at least MIN_GAP apart.
        assert!((resident(1.0, us(30), STRETCH_KERNEL) - 500.0 / 680.0).abs() < 1e-9);
    }

    #[test]
    fn a_kernel_cut_short_by_a_step_holds_and_the_first_after_it_starts_late_and_holds_not() {
        let mut g = GapFill {
            hold: Duration::from_millis(20),
            ..GapFill::default()
        };
        let extra = g.beside(step(), CUT, cut_at(10_000), S);
        assert_eq!(extra, Some(Duration::ZERO));
        // Held 20 ms from that sign (its launch at 9.96 ms): past the step's end
        // (22.99 ms), so the kernel at 29.96 ms starts late.
        assert_eq!(g.resume, Some(at_us(29_960)));
        g.due(at_us(29_960), CYCLE);
        assert_eq!(g.resume, None);
        g.judge(at_us(30_240));
        // That sign comes long after our last kernel: the job worked somewhere in the
        // hold, maybe in another spell. A new spell, so the first was not seen to its
        // end and no length is learned; not seen at work, it holds nothing.
        assert_eq!(g.pacer.learned().0, None);
        let look = g.next_launch(at_us(30_520));
        assert_eq!(look, at_us(30_520));
        // A look then runs clear: that spell is over, and nothing is held any more.
        g.due(look, CYCLE);
        g.judge(look + CYCLE);
        assert_eq!(g.next_launch(look + CYCLE), look + CYCLE);
        let r = g.report();
        assert_eq!((r.kernels, r.met, r.held_back), (1, 2, 0));
    }

    #[test]
    fn a_kernel_launched_during_a_step_gets_in_at_its_launch_gap_and_costs_two_switches_and_itself()
    {
        let mut g = GapFill::default();
        // The step came in our gap (a switch), our next launch 100 us later, before the
        // job's first kernel began (10.13 ms): it waits that whole kernel.
        let served = Served {
            wait: us(130),
            met: false,
            switched: true,
        };
        let ours = Ours {
            running: None,
            next: Some(at_us(10_100)),
            cycle: CYCLE,
        };
        let extra = g.beside(step(), served, ours, S).unwrap();
        // The pacer knows no spell yet: launched mid-step three times (at 10.1 ms, then
        // 5 ms after each, the shortest hold), each waiting for the job's kernel running
        // then and a switch: at 10.1 and 20.1 ms 300 us late or more (held back), at
        // 15.1 ms 260 us; then once after the step, a switch late.
        assert_eq!(extra, (us(130) * 2 + GAP_KERNEL) * 3);
        let resume = g.resume.unwrap();
        g.due(resume, CYCLE);
        g.judge(resume + CYCLE);
        let r = g.report();
        assert_eq!((r.met, r.held_back), (4, 2));
    }

    #[test]
    fn a_kernel_launched_during_a_request_waits_for_its_end_and_costs_it_nothing() {
        let mut g = GapFill::default();
        let request = Work {
            start: at_us(10_000),
            len: us(870),
            launch: None,
        };
        let served = Served {
            wait: us(130),
            met: false,
            switched: true,
        };
        let ours = Ours {
            running: None,
            next: Some(at_us(10_100)),
            cycle: CYCLE,
        };
        let extra = g.beside(request, served, ours, S);
        assert_eq!(extra, Some(Duration::ZERO));
        // It waited 900 us: held back, and it ran after the request, which it met.
        let r = g.report();
        assert_eq!((r.met, r.held_back), (1, 1));
        // The hold runs from the sign: our kernel's launch, when the job worked.
        assert_eq!(g.resume, Some(at_us(10_100) + MIN_HOLD));
    }

    #[test]
    fn once_it_knows_the_steps_period_the_launcher_stays_idle_through_the_next_step() {
        let mut g = GapFill::default();
        let period = 37_800;
        // Each step cuts a kernel of ours short; the launcher starts again after it.
        for n in 0..6 {
            let start = 10_000 + n * period;
            g.beside(step_at(start), CUT, cut_at(start), S);
            let resume = g.resume.unwrap();
            g.due(resume, CYCLE);
            g.judge(resume + CYCLE);
        }
        let (len, learned) = g.pacer.learned();
        assert!(
            learned.is_some_and(|p| p.abs_diff(us(period)) < us(100)),
            "{learned:?}"
        );
        // Filling from 5 ms after the last step ends: the launcher looks again when the
        // step's spell would end with our kernels clear, and stretches them from then
        // until a guard before the next step; the launch before that step is put off
        // until its predicted end.
        let now = at_us(10_000 + 5 * period + 18_000);
        let mut plan = Plan::default();
        plan.change(now, layout(1.0, us(30), GAP_KERNEL));
        let (mut at, mut stretched) = (now, false);
        let defer = loop {
            g.look_ahead(&plan, at);
            let defer = g.defer.unwrap();
            if defer.until.is_some() {
                break defer;
            }
            g.restretch(defer.at);
            stretched |= g.stretched();
            at = defer.at;
        };
        assert!(stretched, "kernels stretched between the steps");
        assert!(!g.stretched(), "and short again before the next");
        let next = at_us(10_000 + 6 * period);
        assert!(defer.at < next && defer.at + us(5_000) > next, "{defer:?}");
        let until = defer.until.unwrap();
        assert!(until >= next + len.unwrap(), "{defer:?} {len:?}");
        assert!(g.put_off(defer.at));
        assert!(g.holding(next));
    }
}
