//! Filling the gaps of live work without MPS ([`gpufill_core::LaunchShape::Gaps`]): our kernels of
//! [`GAP_KERNEL`] one at a time, an idle gap of at least [`MIN_GAP`] after each, no launch
//! for the hold ([`gpufill_core::LoadSource::set_gap_hold`]) after a kernel that met another context;
//! what each piece of a job's work (a request, a training step) pays for it, and what
//! our kernels report ([`gpufill_core::LoadSource::gaps_seen`]).
//!
//! # The physics, as the model takes it
//! Measured on H200s (docs/benchmarks.md#time-slicing-between-two-contexts-the-physics-of-filling-gaps;
//! the constants are [`gpufill_core::gaps`]'s). A job's work that arrives while a kernel of
//! ours runs waits the rest of it and a switch, and one that arrives when our context
//! was the last on the GPU pays a switch ([`super::kernels::serve`], as for every shape).
//! Then, piece by piece of the job's work:
//! - a kernel of ours running when the work came **meets** it (it is cut short), and the
//!   hold begins at its end;
//! - a kernel of ours launched while the work is queued waits for the job's kernel to
//!   end, in a launch gap between two of its kernels (a training step), or for the end
//!   of its time slice or of its work (a request, queued whole): it **meets** the job,
//!   is **held back** when it waited [`HELD_BACK`] or more, and, when it ran in the
//!   middle of the job's work, costs the job two switches and our kernel (the job's
//!   next kernel waits for it, and for the switch back);
//! - the first kernel of ours after the work, when the work ran after our last kernel,
//!   starts a switch late: it **meets** the job too (on its way out), at no cost to it.
//!
//! Each meeting begins a hold; a new hold re-times the one under way from its meeting,
//! as the CUDA launcher does. The kernels of ours that meet the job are counted, not
//! laid out: the model's utilization leaves them out (a kernel or two a meeting).

use std::time::Duration;

use super::kernels::{Layout, Served, Slicing};
use gpufill_core::gaps::{GAP_KERNEL, GapReport, MIN_GAP, MIN_HOLD};
use gpufill_core::time::Time;

/// A kernel of ours that ended this long after it was due to (it waited behind the job's
/// queued work, and for the switch) is reported held back ([`GapReport::held_back`]), as
/// the CUDA launcher judges it (its `LATE`).
pub(super) const HELD_BACK: Duration = Duration::from_micros(300);

/// How our kernels lie at `duty` while filling gaps: one of [`GAP_KERNEL`] every
/// `max(GAP_KERNEL / duty, GAP_KERNEL + MIN_GAP)`, plus `overhead` (the launch and the
/// sleep's overshoot lengthen the idle gap: a model choice, as the launch overhead of
/// the other shapes is).
pub(super) fn layout(duty: f64, overhead: Duration) -> Layout {
    if duty <= 0.0 {
        return Layout::Idle;
    }
    let cycle = GAP_KERNEL.div_f64(duty.min(1.0)).max(GAP_KERNEL + MIN_GAP) + overhead;
    Layout::Paced {
        kernel: GAP_KERNEL,
        cycle,
    }
}

/// The share of the time our kernels are resident at `duty` while filling gaps (no hold
/// in force).
pub(super) fn resident(duty: f64, overhead: Duration) -> f64 {
    match layout(duty, overhead) {
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

/// The gap filler's state in the simulated GPU.
#[derive(Clone, Debug)]
pub(super) struct GapFill {
    /// The hold after a meeting, as the loop last set it.
    pub(super) hold: Duration,
    /// No launch before this (a hold in force).
    pub(super) resume: Option<Time>,
    /// When the latest kernel of ours that met the job ended: the hold runs from it.
    met_at: Option<Time>,
    /// The job ran since our last kernel: our next one starts a switch late.
    stale: bool,
    /// What our kernels met since the last report.
    seen: GapReport,
    /// Kernels of ours laid out since the last report, in part.
    kernels: f64,
}

impl Default for GapFill {
    fn default() -> Self {
        GapFill {
            hold: MIN_HOLD,
            resume: None,
            met_at: None,
            stale: false,
            seen: GapReport::default(),
            kernels: 0.0,
        }
    }
}

impl GapFill {
    /// Sets the hold: from the next meeting on, and for the one under way (re-timed from
    /// its meeting). Returns the new end of the hold under way.
    pub(super) fn set_hold(&mut self, hold: Duration, now: Time) -> Option<Time> {
        self.hold = hold;
        // A launch due after the job's work (stale) is no hold: it stays.
        if self.holding(now) && !self.stale {
            self.resume = self.met_at.map(|m| (m + hold).max(now));
        }
        self.resume
    }

    /// When the latest kernel of ours that met the job ended.
    pub(super) fn last_met(&self) -> Option<Time> {
        self.met_at
    }

    /// Whether a hold keeps our launcher idle at `t`.
    pub(super) fn holding(&self, t: Time) -> bool {
        self.resume.is_some_and(|r| t < r)
    }

    /// Counts the kernels of ours laid out over `dt` at the resident share `own`.
    pub(super) fn count(&mut self, dt: f64, own: f64) {
        self.kernels += own * dt / GAP_KERNEL.as_secs_f64();
    }

    /// What our kernels saw since the last call.
    pub(super) fn report(&mut self) -> GapReport {
        let whole = self.kernels.floor();
        self.kernels -= whole;
        let kernels = u32::try_from(whole as u64).unwrap_or(u32::MAX);
        let seen = std::mem::take(&mut self.seen);
        GapReport {
            kernels: seen.kernels.saturating_add(kernels),
            ..seen
        }
    }

    /// A kernel of ours that met the job, ended `late` after it was due to, at `end`:
    /// counted, and the hold begins at its end.
    fn met(&mut self, late: Duration, end: Time) -> Time {
        self.seen.kernels += 1;
        self.seen.met += 1;
        if late >= HELD_BACK {
            self.seen.held_back += 1;
        }
        self.met_at = Some(end);
        end + self.hold
    }

    /// `work` was served beside our kernels, having waited `served.wait` for them (its
    /// start: module docs); our next launch was due at `next` (`None`: none laid out).
    /// Returns how much longer the job's work took for our kernels that ran in the
    /// middle of it, and sets the hold that follows. `None` when nothing of ours met it.
    pub(super) fn beside(
        &mut self,
        work: Work,
        served: Served,
        next: Option<Time>,
        s: Slicing,
    ) -> Option<Duration> {
        let work_from = work.start + served.wait;
        let mut extra = Duration::ZERO;
        let mut ours_end = None;
        let mut free = if served.met {
            // Cut short when the work came: it ended a switch before the work ran.
            let cut = work.start + served.wait.saturating_sub(s.switch);
            ours_end = Some(cut);
            Some(self.met(Duration::ZERO, cut))
        } else {
            self.resume.filter(|&r| r > work.start).or(next)
        };
        while let Some(launch) = free {
            let end = work_from + work.len + extra;
            if launch >= end {
                // The first kernel after the work starts late, if the work ran after
                // our last kernel: it meets the job when it comes ([`GapFill::due`]),
                // unless more of the job's work comes first.
                if ours_end.is_none_or(|e| e < end) {
                    self.stale = true;
                    self.resume = Some(launch);
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
            free = Some(self.met(ran_until - (launch + GAP_KERNEL), ran_until));
        }
        // Nothing of ours met it: nothing changes.
        ours_end?;
        self.resume = free;
        self.stale = false;
        Some(extra)
    }

    /// Our launcher launches again at `now`, its hold over: if the job ran since our
    /// last kernel, that kernel starts a switch late and meets it (at no cost to it),
    /// and a new hold begins; returns when that kernel ends. `None`: it fills again.
    pub(super) fn due(&mut self, now: Time, switch: Duration) -> Option<Time> {
        if !std::mem::take(&mut self.stale) {
            return None;
        }
        let end = now + switch + GAP_KERNEL;
        self.resume = Some(self.met(switch, end));
        Some(end)
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

    const S: Slicing = Slicing {
        time_slice: Duration::from_millis(2),
        switch: Duration::from_micros(130),
    };

    fn us(x: u64) -> Duration {
        Duration::from_micros(x)
    }

    fn at_us(x: u64) -> Time {
        Time::from_duration(us(x))
    }

    /// A training step at 10 ms, 12.8 ms long, in kernels of 300 us, 20 us apart.
    fn step() -> Work {
        Work {
            start: at_us(10_000),
            len: us(12_800),
            launch: Some((us(300), us(20))),
        }
    }

    #[test]
    fn our_kernels_start_at_most_every_kernel_and_min_gap_plus_the_overhead() {
        let full = layout(1.0, us(30));
        assert_eq!(
            full,
            Layout::Paced {
                kernel: GAP_KERNEL,
                cycle: us(280)
            }
        );
        assert!((resident(1.0, us(30)) - 100.0 / 280.0).abs() < 1e-9);
        // At 20 % the duty's gap is longer than the least one.
        assert_eq!(resident(0.2, Duration::ZERO), 0.2);
        assert_eq!(layout(0.0, us(30)), Layout::Idle);
    }

    #[test]
    fn a_kernel_running_when_a_step_comes_meets_it_and_so_does_the_first_after_it() {
        let mut g = GapFill {
            hold: Duration::from_millis(20),
            ..GapFill::default()
        };
        // It came 40 us into our kernel: it waited 60 us and a switch.
        let served = Served {
            wait: us(190),
            met: true,
            switched: false,
        };
        let extra = g.beside(step(), served, None, S);
        assert_eq!(extra, Some(Duration::ZERO));
        // Held 20 ms from the cut (10.06 ms): past the step's end (22.99 ms), so the
        // kernel at 30.06 ms starts late, and another hold follows it.
        assert_eq!(g.resume, Some(at_us(30_060)));
        assert_eq!(g.due(at_us(30_060), S.switch), Some(at_us(30_290)));
        assert_eq!(g.resume, Some(at_us(30_290 + 20_000)));
        let r = g.report();
        assert_eq!((r.kernels, r.met, r.held_back), (2, 2, 0));
        // After that hold nothing ran: it fills again.
        assert_eq!(g.due(at_us(50_290), S.switch), None);
    }

    #[test]
    fn a_kernel_launched_during_a_step_gets_in_at_its_launch_gap_and_costs_two_switches_and_itself()
    {
        let mut g = GapFill {
            hold: Duration::from_millis(5),
            ..GapFill::default()
        };
        // The step came in our gap (a switch), our next launch 100 us later, before the
        // job's first kernel began (10.13 ms): it waits that whole kernel.
        let served = Served {
            wait: us(130),
            met: false,
            switched: true,
        };
        let extra = g.beside(step(), served, Some(at_us(10_100)), S).unwrap();
        // Launched mid-step three times (at 10.1 ms, then after each 5 ms hold), each
        // ending 300 us or more late (its wait and the switch): held back; then once
        // after the step, a switch late.
        assert_eq!(extra, (us(130) * 2 + GAP_KERNEL) * 3);
        let resume = g.resume.unwrap();
        assert!(g.due(resume, S.switch).is_some());
        let r = g.report();
        assert_eq!((r.met, r.held_back), (4, 3));
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
        let extra = g.beside(request, served, Some(at_us(10_100)), S);
        assert_eq!(extra, Some(Duration::ZERO));
        // It waited 900 us: held back, and it ran after the request, which it met.
        let r = g.report();
        assert_eq!((r.met, r.held_back), (1, 1));
        assert_eq!(g.resume, Some(at_us(11_000 + 230) + MIN_HOLD));
    }
}
