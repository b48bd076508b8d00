//! Our kernels one by one, as the launcher lays them out in time, and what they cost a
//! request of another process that meets them (without MPS).
//!
//! The model's utilization is a fluid share ([`super::model`]); what a request waits and
//! what our kernels see of others depends on where each kernel lies, so a [`Plan`] says
//! it for any instant without listing kernels (a long run has millions of them):
//! - **Bursts** ([`Layout::Bursts`]): at each period start (periods counted from time
//!   zero, as the launcher starts bursts only at ticks), `duty x period` of kernels back
//!   to back, each at most `max_kernel` (by default one kernel a burst). A burst is laid
//!   out with the load in force at its period start; one that has begun when the load
//!   changes runs on ([`Plan::change`]).
//! - **One in flight** ([`Layout::Paced`]): one kernel of `one_in_flight_kernel`, then
//!   an idle gap, so a kernel starts every `kernel / duty`.
//!
//! # What a request pays ([`serve`])
//! Measured by the retired `live_probe.py` (scripts/RETIRED.md):
//! docs/benchmarks.md#what-another-contexts-work-does-to-our-kernels-the-physics-the-design-rests-on.
//! Without MPS the GPU time-slices between contexts. A request that arrives while a
//! kernel of ours runs waits for the rest of it, but at most for the rest of the time
//! slice it is in (slices of [`SimConfig::time_slice`], counted from the kernel's
//! start), plus a context switch ([`SimConfig::context_switch`]: the lateness of the
//! first kernel after another context's). Our spin kernel then ends early (it ends at a jump of the GPU
//! clock), so later requests do not meet it. A request that arrives when our context
//! was the last on the GPU pays one switch; otherwise it pays nothing.
//!
//! Only a request's arrival is weighed: a kernel of ours that starts while a request
//! runs is met by the next request that arrives while it runs (in a burst of requests,
//! the next one), not by the request's own later kernels. For a launch-bound request
//! much longer than our kernels' gaps (one kernel in flight beside a 10 ms request)
//! this counts fewer waits than the GPU makes; beside isolated sub-ms requests and
//! one kernel a burst it matches the measurements (`SimConfig::context_switch` docs).
//!
//! [`SimConfig::time_slice`]: super::SimConfig::time_slice
//! [`SimConfig::context_switch`]: super::SimConfig::context_switch

use std::time::Duration;

use gpufill_core::time::Time;

/// One kernel of ours: `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Kernel {
    pub(super) start: Time,
    pub(super) end: Time,
}

/// How our kernels lie in time under one load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Layout {
    /// No kernels.
    Idle,
    /// Each period, `on` of kernels from the period start, each at most `piece` long.
    Bursts {
        period: Duration,
        on: Duration,
        piece: Duration,
    },
    /// A kernel of `kernel` every `cycle`.
    Paced { kernel: Duration, cycle: Duration },
}

impl Layout {
    /// The layout of `duty` (a fraction) in bursts of `period`, kernels at most
    /// `max_kernel` long.
    pub(super) fn bursts(duty: f64, period: Duration, max_kernel: Duration) -> Self {
        let on = period.mul_f64(duty.clamp(0.0, 1.0));
        if on.is_zero() || period.is_zero() {
            return Layout::Idle;
        }
        Layout::Bursts {
            period,
            on,
            piece: max_kernel.min(on).max(Duration::from_nanos(1)),
        }
    }

    /// The layout of `duty` with one kernel of `kernel` in flight at a time.
    pub(super) fn paced(duty: f64, kernel: Duration) -> Self {
        if duty <= 0.0 || kernel.is_zero() {
            return Layout::Idle;
        }
        Layout::Paced {
            kernel,
            cycle: kernel.div_f64(duty.min(1.0)),
        }
    }

    /// The length of one kernel (zero when idle).
    pub(super) fn kernel_len(&self) -> Duration {
        match *self {
            Layout::Idle => Duration::ZERO,
            Layout::Bursts { piece, .. } => piece,
            Layout::Paced { kernel, .. } => kernel,
        }
    }
}

fn ns(t: Time) -> u64 {
    u64::try_from(t.since_epoch().as_nanos()).unwrap_or(u64::MAX)
}

fn dns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
}

fn at(ns: u64) -> Time {
    Time::from_duration(Duration::from_nanos(ns))
}

/// Our kernels from `since` on, and what is left of earlier ones.
#[derive(Clone, Debug)]
pub(super) struct Plan {
    since: Time,
    layout: Layout,
    /// A kernel of the previous plan still running at `since`.
    tail: Option<Kernel>,
    /// The latest kernel cut short (its end is then the cut).
    cut: Option<Kernel>,
    /// The end of the last kernel of earlier plans, capped at their change.
    before: Option<Time>,
    /// When we last probed (two tiny kernels).
    probed: Option<Time>,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            since: Time::ZERO,
            layout: Layout::Idle,
            tail: None,
            cut: None,
            before: None,
            probed: None,
        }
    }
}

impl Plan {
    /// The layout in force.
    #[cfg(test)]
    pub(super) fn layout(&self) -> Layout {
        self.layout
    }

    /// Lays kernels out in `layout` from `now`; the kernel running at `now` (begun
    /// before it) runs on: a burst in the queue, or the kernel in flight.
    pub(super) fn change(&mut self, now: Time, layout: Layout) {
        if layout == self.layout {
            return;
        }
        let tail = self.kernel_at(now).filter(|k| k.start < now);
        let before = self.last_end_before(now);
        *self = Plan {
            since: now,
            layout,
            tail,
            cut: self.cut,
            before,
            probed: self.probed,
        };
    }

    /// Records a probe at `now`: a kernel of ours, however short.
    pub(super) fn probe(&mut self, now: Time) {
        self.probed = Some(now);
    }

    /// Records a kernel of ours that ended at `end`, not laid out by the plan (filling
    /// gaps, one that met another context: `gaps.rs`).
    pub(super) fn ran(&mut self, end: Time) {
        self.probed = Some(self.probed.map_or(end, |p| p.max(end)));
    }

    /// The kernel running at `t`.
    pub(super) fn kernel_at(&self, t: Time) -> Option<Kernel> {
        let k = self
            .tail
            .filter(|k| k.start <= t && t < k.end)
            .or_else(|| self.layout_at(t))?;
        let k = self.with_cut(k);
        (t < k.end).then_some(k)
    }

    /// The first kernel that starts after `t`.
    pub(super) fn next_after(&self, t: Time) -> Option<Kernel> {
        if let Some(k) = self.tail.filter(|k| k.start > t) {
            return Some(self.with_cut(k));
        }
        self.layout_next(t).map(|k| self.with_cut(k))
    }

    /// When a kernel of ours last ran before `t` (`t` itself while one runs).
    pub(super) fn last_end_before(&self, t: Time) -> Option<Time> {
        let mut last = self.before.filter(|&e| e <= t);
        let mut take = |e: Time| last = Some(last.map_or(e, |l: Time| l.max(e)));
        if let Some(p) = self.probed.filter(|&p| p <= t) {
            take(p);
        }
        if let Some(k) = self.tail.filter(|k| k.start <= t) {
            take(self.with_cut(k).end.min(t));
        }
        if let Some(k) = self.layout_last(t) {
            take(self.with_cut(k).end.min(t));
        }
        last
    }

    /// Cuts `k` short at `end` (a preempted spin kernel ends early).
    pub(super) fn cut(&mut self, k: Kernel, end: Time) {
        self.cut = Some(Kernel {
            start: k.start,
            end: end.min(k.end),
        });
    }

    fn with_cut(&self, k: Kernel) -> Kernel {
        match self.cut {
            Some(c) if c.start == k.start => Kernel {
                start: k.start,
                end: c.end.min(k.end),
            },
            _ => k,
        }
    }

    /// The first burst period that this plan lays out (periods that began before it
    /// were laid out by the previous one).
    fn first_period(&self, period: u64) -> u64 {
        ns(self.since).div_ceil(period)
    }

    /// Where paced kernels start: at the change, or when the tail ends.
    fn paced_base(&self) -> u64 {
        let base = ns(self.since);
        self.tail.map_or(base, |k| base.max(ns(k.end)))
    }

    /// The kernel of the layout whose span holds `t` (uncut).
    fn layout_at(&self, t: Time) -> Option<Kernel> {
        let k = self.layout_last(t)?;
        (t < k.end).then_some(k)
    }

    /// The last kernel of the layout that starts at or before `t` (uncut).
    fn layout_last(&self, t: Time) -> Option<Kernel> {
        let t = ns(t);
        match self.layout {
            Layout::Idle => None,
            Layout::Bursts { period, on, piece } => {
                let (p, on, piece) = (dns(period), dns(on), dns(piece));
                let n = t / p;
                let first = self.first_period(p);
                if n < first {
                    return None;
                }
                let ps = n * p;
                // The piece at `t`, or the burst's last piece once it is over.
                let j = ((t - ps).min(on - 1)) / piece;
                let start = ps + j * piece;
                Some(Kernel {
                    start: at(start),
                    end: at((start + piece).min(ps + on)),
                })
            }
            Layout::Paced { kernel, cycle } => {
                let base = self.paced_base();
                if t < base {
                    return None;
                }
                let c = dns(cycle);
                let start = base + (t - base) / c * c;
                Some(Kernel {
                    start: at(start),
                    end: at(start + dns(kernel)),
                })
            }
        }
    }

    /// The first kernel of the layout that starts after `t` (uncut).
    fn layout_next(&self, t: Time) -> Option<Kernel> {
        let t = ns(t);
        match self.layout {
            Layout::Idle => None,
            Layout::Bursts { period, on, piece } => {
                let (p, on, piece) = (dns(period), dns(on), dns(piece));
                let first = self.first_period(p) * p;
                let start = if t < first {
                    first
                } else {
                    let ps = t / p * p;
                    let next_piece = ps + ((t - ps) / piece + 1) * piece;
                    if next_piece < ps + on {
                        next_piece
                    } else {
                        ps + p
                    }
                };
                let ps = start / p * p;
                Some(Kernel {
                    start: at(start),
                    end: at((start + piece).min(ps + on)),
                })
            }
            Layout::Paced { kernel, cycle } => {
                let base = self.paced_base();
                let c = dns(cycle);
                let start = if t < base {
                    base
                } else {
                    base + ((t - base) / c + 1) * c
                };
                Some(Kernel {
                    start: at(start),
                    end: at(start + dns(kernel)),
                })
            }
        }
    }
}

/// What meeting our kernels cost one request.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Served {
    /// How long it waited for us in all.
    pub(super) wait: Duration,
    /// Whether a kernel of ours held it up (it arrived while one ran).
    pub(super) met: bool,
    /// Whether it paid only a context switch (our context ran last before it).
    pub(super) switched: bool,
}

/// The timing constants of time-slicing.
#[derive(Clone, Copy, Debug)]
pub(super) struct Slicing {
    pub(super) time_slice: Duration,
    pub(super) switch: Duration,
}

/// Serves a request that starts at `start` beside the kernels of `plan` (module docs),
/// when another context's work last ended at `foreign_end`. Cuts the kernel it meets
/// short.
pub(super) fn serve(plan: &mut Plan, start: Time, foreign_end: Time, s: Slicing) -> Served {
    let slice = s.time_slice.max(Duration::from_nanos(1));
    // A kernel of ours due at the very instant the request comes queues behind it.
    if let Some(k) = plan.kernel_at(start).filter(|k| k.start < start) {
        let into_slice = Duration::from_nanos(ns(start).saturating_sub(ns(k.start)) % dns(slice));
        let held = (k.end - start).min(slice - into_slice);
        plan.cut(k, start + held);
        return Served {
            wait: held + s.switch,
            met: true,
            switched: false,
        };
    }
    let ours_last = plan
        .last_end_before(start)
        .is_some_and(|ours| ours > foreign_end);
    Served {
        wait: if ours_last { s.switch } else { Duration::ZERO },
        met: false,
        switched: ours_last,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: f64) -> Time {
        Time::from_secs_f64(x / 1e3)
    }

    fn us(x: u64) -> Duration {
        Duration::from_micros(x)
    }

    const SLICING: Slicing = Slicing {
        time_slice: Duration::from_millis(2),
        switch: Duration::from_micros(130),
    };

    fn bursts(duty: f64, max_kernel_ms: u64) -> Plan {
        let mut p = Plan::default();
        let layout = Layout::bursts(
            duty,
            Duration::from_millis(50),
            Duration::from_millis(max_kernel_ms),
        );
        p.change(Time::ZERO, layout);
        p
    }

    #[test]
    fn a_burst_is_one_kernel_from_each_period_start_or_pieces_of_the_longest_kernel() {
        let one = bursts(0.5, 50);
        assert_eq!(
            one.kernel_at(ms(110.0)),
            Some(Kernel {
                start: ms(100.0),
                end: ms(125.0)
            })
        );
        assert_eq!(one.kernel_at(ms(130.0)), None);
        assert_eq!(one.next_after(ms(130.0)).unwrap().start, ms(150.0));
        assert_eq!(one.last_end_before(ms(130.0)), Some(ms(125.0)));
        let pieces = bursts(0.5, 2);
        let k = pieces.kernel_at(ms(111.0)).unwrap();
        assert_eq!((k.start, k.end), (ms(110.0), ms(112.0)));
        assert_eq!(pieces.next_after(ms(111.0)).unwrap().start, ms(112.0));
        // The last piece ends with the burst.
        assert_eq!(pieces.next_after(ms(124.5)).unwrap().start, ms(150.0));
        assert_eq!(pieces.kernel_at(ms(124.5)).unwrap().end, ms(125.0));
    }

    #[test]
    fn one_in_flight_starts_a_kernel_every_kernel_over_duty() {
        let mut p = Plan::default();
        p.change(ms(10.0), Layout::paced(0.5, us(500)));
        assert_eq!(p.kernel_at(ms(10.2)).unwrap().start, ms(10.0));
        assert_eq!(p.kernel_at(ms(10.7)), None);
        assert_eq!(p.next_after(ms(10.2)).unwrap().start, ms(11.0));
        assert_eq!(p.layout().kernel_len(), us(500));
    }

    #[test]
    fn a_burst_begun_runs_on_after_the_load_changes_and_the_new_one_starts_next_period() {
        let mut p = bursts(0.5, 50);
        p.change(ms(110.0), Layout::Idle);
        assert_eq!(p.kernel_at(ms(120.0)).unwrap().end, ms(125.0));
        assert_eq!(p.next_after(ms(120.0)), None);
        assert_eq!(p.last_end_before(ms(400.0)), Some(ms(125.0)));
        let mut q = bursts(0.5, 50);
        q.change(
            ms(110.0),
            Layout::bursts(0.2, Duration::from_millis(50), Duration::from_millis(50)),
        );
        let next = q.next_after(ms(120.0)).unwrap();
        assert_eq!((next.start, next.end), (ms(150.0), ms(160.0)));
        // A change at a period start lays that period out anew.
        let mut r = bursts(0.5, 50);
        r.change(ms(150.0), Layout::Idle);
        assert_eq!(r.kernel_at(ms(151.0)), None);
    }

    #[test]
    fn a_request_during_our_kernel_waits_the_rest_of_its_time_slice_and_a_switch() {
        let mut p = bursts(0.5, 50);
        // 10.5 ms into a 25 ms kernel: 1.5 ms left of the sixth 2 ms slice.
        let s = serve(&mut p, ms(110.5), Time::ZERO, SLICING);
        assert_eq!(s.wait, us(1500) + us(130));
        assert!(s.met);
        // Our kernel ended there (preempted); the next request pays a switch only if
        // ours ran after this one.
        assert_eq!(p.kernel_at(ms(113.0)), None);
        let after = ms(110.5) + s.wait + us(800);
        let s2 = serve(&mut p, ms(115.0), after, SLICING);
        assert_eq!(s2, Served::default());
        // Near the end of a kernel it waits only the rest of it.
        let mut q = bursts(0.5, 50);
        let s = serve(&mut q, ms(124.9), Time::ZERO, SLICING);
        assert_eq!(s.wait, us(100) + us(130));
    }

    #[test]
    fn a_request_after_our_kernel_pays_one_switch_and_none_once_another_context_ran() {
        let mut p = bursts(0.5, 50);
        let s = serve(&mut p, ms(130.0), ms(90.0), SLICING);
        assert_eq!(s.wait, us(130));
        assert!(!s.met);
        let s = serve(&mut p, ms(140.0), ms(130.93), SLICING);
        assert_eq!(s.wait, Duration::ZERO);
        // A probe is a kernel of ours too.
        p.probe(ms(142.0));
        let s = serve(&mut p, ms(145.0), ms(140.8), SLICING);
        assert_eq!(s.wait, us(130));
        // Idle and never ran: nothing.
        let mut idle = Plan::default();
        assert_eq!(
            serve(&mut idle, ms(5.0), Time::ZERO, SLICING),
            Served::default()
        );
    }

    #[test]
    fn one_in_flight_a_request_waits_at_most_the_rest_of_one_short_kernel() {
        let mut q = Plan::default();
        q.change(Time::ZERO, Layout::paced(0.5, us(500)));
        let s = serve(&mut q, ms(1.2), Time::ZERO, SLICING);
        assert_eq!(s.wait, us(300) + us(130));
        // The next kernel of ours, 1 ms after the last, is whole.
        assert_eq!(q.kernel_at(ms(2.4)).unwrap().end, ms(2.5));
    }
}
