//! What the timing of our own kernels shows of other contexts, and what is only the
//! host's jitter ([`StartChain`], [`judge_group`], [`OthersSign`]).
//!
//! Without MPS the GPU time-slices between contexts, and a switch from one context to
//! another takes time
//! (docs/benchmarks.md#what-another-contexts-work-does-to-our-kernels-the-physics-the-design-rests-on):
//! our first kernel after another context's work starts a switch late, and a kernel of
//! ours that another context's work preempts ends early (the spin kernel ends at a jump
//! of its clock). The CUDA launcher brackets every group of kernels it launches with
//! timing events and hands their times here; the simulated GPU hands simulated ones.
//!
//! # The host's own jitter
//! A group's **start offset** is the GPU time of its start event less a host time; a
//! start later than the chain's recent ones shows a switch. But the host is not exact
//! either. On some hosts (virtual machines among them) the launching thread stalls now
//! and then for longer than a switch, often twice in a row, on every GPU of the host at
//! once
//! (docs/benchmarks.md#the-cause-the-host-stalls-the-launching-thread-and-the-baseline-took-the-stalls-in).
//! Up to 052ca04
//! the host time was when the first launch *returned*: a stalled launch returned late,
//! so its offset looked early by the stall, and taken into the baseline (its lower
//! quartile), two such launches made every ordinary launch after them look late until
//! they left it. gpufill paused at each, the pause added no ordinary launch
//! to the baseline, and so the pauses came in chains. Hence:
//! - the host time is when the **start event's record returned**
//!   ([`GroupTiming::recorded_at`]): the GPU stamps the event after the record was
//!   submitted (well before the kernel's launch returns, on the hosts measured), so a stall in the
//!   launch does not move the offset, and a stall inside the record can only make it
//!   look early;
//! - a launch whose record call took more than [`SLOW_RECORD`] above the host's usual
//!   is judged (it can only look early) but never enters the baseline;
//! - the baseline is the **median** of the recent ordinary offsets, and a launch is
//!   judged only against at least [`BASELINE_MIN`] of them;
//! - a chain restarts whenever we were idle (the caller passes no `gpu_since_us` to
//!   [`StartChain::next`] for the first launch after it): after an
//!   idle spell the GPU starts our first kernels later for a while (its clocks come
//!   back up; the same section), so a resumption is never judged against the
//!   baseline from before it; and the first launch of a chain is not judged by its start
//!   at all (a probe answers whether anyone ran while we were idle).
//!
//! Which signs the yield rule then believes is the policy's business
//! ([`crate::policy`]): a late start is a **weak** sign ([`OthersSign::is_weak`]).

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use crate::time::Time;

/// A start this much later than the chain's baseline follows another context's work: a
/// context switch, against the spread of our starts with nobody else.
pub const LATE_START: Duration = Duration::from_micros(60);

/// A group this much shorter than asked was cut short by a preemption.
pub const CUT_SHORT: Duration = Duration::from_micros(50);

/// What each kernel of a group may add to its run beyond what it asked (a launch behind
/// the last, with nobody else).
pub const PER_KERNEL_SLACK: Duration = Duration::from_micros(5);

/// Start offsets are compared only between launches less than this apart (the GPU's and
/// the host's clocks drift apart).
pub const CHAIN_GAP: Duration = Duration::from_secs(1);

/// How many recent ordinary start offsets the baseline is the median of: few, so that a
/// drift of the clocks (100 ppm: 5 us per 50 ms burst) moves it little within them.
pub const BASELINE_LEN: usize = 8;

/// How many ordinary offsets a chain needs before its launches are judged by their
/// start: the median of three is not moved by one stalled launch.
pub const BASELINE_MIN: usize = 3;

/// A launch whose start event's record call took this much longer than the host's usual
/// (the median of its recent ones) was stalled on the host: its host time is late by up
/// to the stall, so it does not enter the baseline. The stalls measured were several
/// times this long
/// (docs/benchmarks.md#the-cause-the-host-stalls-the-launching-thread-and-the-baseline-took-the-stalls-in).
pub const SLOW_RECORD: Duration = Duration::from_micros(40);

/// What our kernels' timing showed of another context.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OthersSign {
    /// A group started this much later than the chain's baseline: a context switch
    /// before it, or the GPU or host late on its own (weak).
    LateStart {
        /// How late, in microseconds.
        late_us: f64,
    },
    /// A group ran this much longer than asked, the host's launch time taken off: its
    /// start event was stamped before a context switch it then waited for, or another
    /// context's work came between two of its kernels.
    RanLong {
        /// How much longer, in microseconds.
        extra_us: f64,
    },
    /// A group ran this much shorter than asked: a preemption ended it.
    CutShort {
        /// How much shorter, in microseconds.
        short_us: f64,
    },
    /// A kernel of ours was seen still running this long past its length: held back by
    /// another context's time slice.
    HeldBack {
        /// How long past its length it was seen unfinished, in microseconds.
        past_us: f64,
    },
}

impl OthersSign {
    /// Whether the sign is weak: a late start alone, which the host's own jitter can
    /// fake. The others need another context's work.
    pub fn is_weak(self) -> bool {
        matches!(self, OthersSign::LateStart { .. })
    }

    /// The stronger of two signs (a strong one over a weak one, else the first).
    pub fn stronger(self, other: OthersSign) -> OthersSign {
        if self.is_weak() && !other.is_weak() {
            other
        } else {
            self
        }
    }

    /// The stronger of two optional signs ([`Self::stronger`]; either when one is
    /// missing): how a run of signs is folded into the one a caller reports.
    pub fn strongest(a: Option<OthersSign>, b: Option<OthersSign>) -> Option<OthersSign> {
        match (a, b) {
            (Some(a), Some(b)) => Some(a.stronger(b)),
            (a, b) => a.or(b),
        }
    }
}

impl fmt::Display for OthersSign {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            OthersSign::LateStart { late_us } => {
                write!(f, "our kernel started {late_us:.0} us late")
            }
            OthersSign::RanLong { extra_us } => {
                write!(f, "our kernels ran {extra_us:.0} us longer than asked")
            }
            OthersSign::CutShort { short_us } => {
                write!(f, "our kernel was preempted, {short_us:.0} us short")
            }
            OthersSign::HeldBack { past_us } => write!(
                f,
                "our kernel was held back, still running {past_us:.0} us past its length"
            ),
        }
    }
}

/// One group of our kernels as timed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupTiming {
    /// Host time at which the record of its start event returned.
    pub recorded_at: Time,
    /// How long that record call took on the host.
    pub record_call: Duration,
    /// Host time from recording its start event to its first launch returning.
    pub host_gap: Duration,
    /// GPU time from the previous group's start event to this one's, in microseconds;
    /// `None` for the first group after a restart.
    pub gpu_since_previous_us: Option<f64>,
    /// GPU time from its start event to its end event.
    pub ran: Duration,
    /// GPU time it asked for, in all.
    pub asked: Duration,
    /// How many kernels.
    pub kernels: u32,
}

/// What the chain says of one launch's start.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StartVerdict {
    /// How much later than the chain's baseline it started, us (0 when not judged).
    pub late_us: f64,
    /// It was judged by its start: it followed the chain's previous launch and the
    /// chain had a baseline.
    pub judged: bool,
    /// Its record call was a stall ([`SLOW_RECORD`]): it stays out of the baseline.
    pub slow_record: bool,
    /// Host time since the chain's previous launch, us (0 for the first of a chain).
    pub idle_before_us: f64,
}

impl StartVerdict {
    /// Whether it started [`LATE_START`] or more late.
    pub fn late(&self) -> bool {
        self.judged && self.late_us > us(LATE_START)
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Start offsets of a chain of launches, in microseconds of GPU time less host time,
/// and the host's recent record calls (kept across chains: they are the host's).
#[derive(Clone, Debug, Default)]
pub struct StartChain {
    /// Offsets of the chain's recent ordinary launches.
    recent: VecDeque<f64>,
    /// How long the host's recent record calls took, us.
    calls: VecDeque<f64>,
    offset: f64,
    last_host: Option<Time>,
}

impl StartChain {
    /// A chain that has seen nothing.
    pub fn new() -> Self {
        StartChain::default()
    }

    /// Adds a launch whose start event's record returned at host time `host` after
    /// `record_call`, and whose start event came `gpu_since_us` microseconds of GPU time
    /// after the previous launch's (`None` for the first of a chain). A launch more than
    /// [`CHAIN_GAP`] after the previous one starts a new chain.
    pub fn next(
        &mut self,
        host: Time,
        record_call: Duration,
        gpu_since_us: Option<f64>,
    ) -> StartVerdict {
        let call = us(record_call);
        let usual_call = median(&self.calls);
        push_bounded(&mut self.calls, call);
        let slow_record = usual_call.is_some_and(|usual| call > usual + us(SLOW_RECORD));
        let follows = self
            .last_host
            .is_some_and(|last| host.saturating_since(last) < CHAIN_GAP);
        let since = match gpu_since_us {
            Some(gpu) if follows => gpu,
            _ => {
                self.restart(host, slow_record);
                return StartVerdict {
                    slow_record,
                    ..StartVerdict::default()
                };
            }
        };
        let host_since = us(host.saturating_since(self.last_host.unwrap_or(host)));
        self.offset += since - host_since;
        self.last_host = Some(host);
        let baseline = (self.recent.len() >= BASELINE_MIN)
            .then(|| median(&self.recent))
            .flatten();
        let verdict = StartVerdict {
            late_us: baseline.map_or(0.0, |b| self.offset - b),
            judged: baseline.is_some(),
            slow_record,
            idle_before_us: host_since,
        };
        if !slow_record {
            push_bounded(&mut self.recent, self.offset);
        }
        verdict
    }

    /// How long the host's record calls usually take (the median of its recent ones),
    /// if any was seen.
    pub fn usual_record_call(&self) -> Option<Duration> {
        median(&self.calls).map(|g| Duration::from_secs_f64(g.max(0.0) / 1e6))
    }

    fn restart(&mut self, host: Time, slow_record: bool) {
        self.recent.clear();
        self.offset = 0.0;
        if !slow_record {
            self.recent.push_back(0.0);
        }
        self.last_host = Some(host);
    }
}

fn push_bounded(q: &mut VecDeque<f64>, v: f64) {
    if q.len() == BASELINE_LEN {
        q.pop_front();
    }
    q.push_back(v);
}

/// The median (the lower middle of an even count), sorted on the stack: no allocation
/// per launch.
fn median(q: &VecDeque<f64>) -> Option<f64> {
    let mut sorted = [0.0; BASELINE_LEN];
    let n = q.len().min(BASELINE_LEN);
    for (slot, v) in sorted.iter_mut().zip(q) {
        *slot = *v;
    }
    let sorted = &mut sorted[..n];
    sorted.sort_by(f64::total_cmp);
    sorted.get(n.saturating_sub(1) / 2).copied()
}

/// Whether a group that was asked to run `asked` and ran `ran` was cut short by a
/// preemption: by how much, if so.
pub fn cut_short(asked: Duration, ran: Duration) -> Option<f64> {
    (ran + CUT_SHORT < asked).then(|| us(asked - ran))
}

/// Whether a group of `kernels` kernels ran [`LATE_START`] longer than asked (by how
/// much, if so): its start event was stamped before a context switch that its first
/// kernel then waited for, or another context's work came between two of its kernels.
///
/// `host_gap` is the host's time from recording the start event to the first kernel's
/// launch returning. On an idle GPU the start event is stamped at once and the kernel
/// waits for the host's launch, so that gap counts into `ran` with nobody else there
/// (a stalled launch: more than [`LATE_START`], as measured in
/// docs/benchmarks.md#the-cause-the-host-stalls-the-launching-thread-and-the-baseline-took-the-stalls-in).
/// It is taken off first.
pub fn ran_long(asked: Duration, ran: Duration, host_gap: Duration, kernels: u32) -> Option<f64> {
    let extra = ran.saturating_sub(host_gap).saturating_sub(asked);
    (extra > LATE_START + PER_KERNEL_SLACK * kernels).then(|| us(extra))
}

/// Judges one group against `chain`: the strongest sign it shows, if any, with the
/// chain's verdict on its start.
pub fn judge_group(chain: &mut StartChain, g: &GroupTiming) -> (Option<OthersSign>, StartVerdict) {
    let verdict = chain.next(g.recorded_at, g.record_call, g.gpu_since_previous_us);
    let cut = cut_short(g.asked, g.ran).map(|short_us| OthersSign::CutShort { short_us });
    let long = ran_long(g.asked, g.ran, g.host_gap, g.kernels)
        .map(|extra_us| OthersSign::RanLong { extra_us });
    let late = verdict.late().then_some(OthersSign::LateStart {
        late_us: verdict.late_us,
    });
    let sign = [cut, long, late]
        .into_iter()
        .flatten()
        .reduce(OthersSign::stronger);
    (sign, verdict)
}

/// The first kernel of a probe pair starting this much later against the second than
/// the pair's usual spread with nobody else (it starts earlier than the second then; a
/// context switch later after another context's work) says that someone ran since our
/// previous kernel.
pub const PROBE_LATE: Duration = Duration::from_micros(30);

/// The length of each kernel of a probe pair.
pub const PROBE_KERNEL: Duration = Duration::from_micros(5);

/// What one probe pair measured: two [`PROBE_KERNEL`] kernels, each launched right after
/// its start event was recorded, with nothing of ours queued before them (the CUDA
/// launcher's probe, `LoadSource::probe`). Both kernels ran; a kernel that did not run
/// within the probe's wait was held back, which the caller knows without timing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PairTiming {
    /// How long the first kernel ran, from its start event to the end event after it.
    pub first_ran: Duration,
    /// The host's time from recording the first start event to its launch returning.
    pub first_gap: Duration,
    /// The GPU's time between the two start events.
    pub gpu_between: Duration,
    /// The host's time between the two start events' records returning.
    pub host_between: Duration,
    /// How long the second record call took.
    pub second_record_call: Duration,
    /// The host's usual record call (the chain's; `None` before it knows one: the
    /// faster of the pair's two calls is taken).
    pub usual_record_call: Option<Duration>,
    /// How long the first record call took.
    pub first_record_call: Duration,
}

/// What a probe pair says ([`judge_probe_pair`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairVerdict {
    /// Nobody ran since our previous kernel.
    Nobody,
    /// Someone ran since our previous kernel.
    Someone,
    /// It looks like someone ran, but the host stalled in the second record call, by
    /// which the first kernel looks late: run the pair again (a caller that has run it
    /// again enough believes it: someone ran).
    Stalled,
}

/// Judges a probe pair. The first kernel ran a context switch long (its start event was
/// stamped before the switch it then waited for: [`ran_long`]), or the first start is
/// more than [`PROBE_LATE`] later against the second on the GPU than on the host: someone
/// ran. A late reading whose second record call took [`SLOW_RECORD`] beyond the host's
/// usual is uncertain by the stall ([`PairVerdict::Stalled`]). The first record after
/// idling is slow on the host too (cold): only the second one's call is weighed.
pub fn judge_probe_pair(t: &PairTiming) -> PairVerdict {
    if ran_long(PROBE_KERNEL, t.first_ran, t.first_gap, 1).is_some() {
        return PairVerdict::Someone;
    }
    let late = t.host_between.as_secs_f64() - t.gpu_between.as_secs_f64();
    if late <= PROBE_LATE.as_secs_f64() {
        return PairVerdict::Nobody;
    }
    let usual = t
        .usual_record_call
        .unwrap_or(t.first_record_call.min(t.second_record_call));
    if t.second_record_call > usual + SLOW_RECORD {
        PairVerdict::Stalled
    } else {
        PairVerdict::Someone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strongest_keeps_a_strong_sign_over_a_weak_one_and_either_when_one_is_missing() {
        let late = OthersSign::LateStart { late_us: 70.0 };
        let cut = OthersSign::CutShort { short_us: 900.0 };
        assert_eq!(OthersSign::strongest(Some(late), Some(cut)), Some(cut));
        assert_eq!(OthersSign::strongest(Some(cut), Some(late)), Some(cut));
        assert_eq!(OthersSign::strongest(None, Some(late)), Some(late));
        assert_eq!(OthersSign::strongest(Some(late), None), Some(late));
        assert_eq!(OthersSign::strongest(None, None), None);
    }

    const US: Duration = Duration::from_micros(1);
    /// An ordinary record call.
    const CALL: Duration = Duration::from_micros(6);

    /// A clean pair: the second kernel starts 20 us after the first on both clocks.
    fn clean_pair() -> PairTiming {
        PairTiming {
            first_ran: 8 * US,
            first_gap: 4 * US,
            gpu_between: 20 * US,
            host_between: 20 * US,
            second_record_call: CALL,
            usual_record_call: Some(CALL),
            first_record_call: CALL,
        }
    }

    #[test]
    fn a_probe_pair_on_time_finds_nobody_and_a_late_first_start_finds_someone() {
        assert_eq!(judge_probe_pair(&clean_pair()), PairVerdict::Nobody);
        // Within the spread allowed: still nobody.
        let spread = PairTiming {
            host_between: 49 * US,
            ..clean_pair()
        };
        assert_eq!(judge_probe_pair(&spread), PairVerdict::Nobody);
        // The first kernel started a switch (130 us) late: the GPU saw less time between
        // the two starts than the host did.
        let late = PairTiming {
            host_between: 150 * US,
            ..clean_pair()
        };
        assert_eq!(judge_probe_pair(&late), PairVerdict::Someone);
    }

    #[test]
    fn a_first_probe_kernel_that_ran_a_switch_long_finds_someone_whatever_the_starts() {
        let long = PairTiming {
            first_ran: 150 * US,
            ..clean_pair()
        };
        assert_eq!(judge_probe_pair(&long), PairVerdict::Someone);
        // The host's own launch time is taken off: a slow launch is not a switch.
        let slow_launch = PairTiming {
            first_ran: 150 * US,
            first_gap: 140 * US,
            ..clean_pair()
        };
        assert_eq!(judge_probe_pair(&slow_launch), PairVerdict::Nobody);
    }

    #[test]
    fn a_late_reading_after_a_stalled_second_record_is_uncertain_not_someone() {
        let stalled = PairTiming {
            host_between: 150 * US,
            second_record_call: CALL + 140 * US,
            ..clean_pair()
        };
        assert_eq!(judge_probe_pair(&stalled), PairVerdict::Stalled);
        // A stall on a pair that found nobody changes nothing.
        let clean_but_slow = PairTiming {
            second_record_call: CALL + 140 * US,
            ..clean_pair()
        };
        assert_eq!(judge_probe_pair(&clean_but_slow), PairVerdict::Nobody);
        // Before the chain knows the usual call, the faster of the pair's two is taken:
        // a fast first record shows the second one stalled...
        let unknown_usual = PairTiming {
            usual_record_call: None,
            ..stalled
        };
        assert_eq!(judge_probe_pair(&unknown_usual), PairVerdict::Stalled);
        // ...and two records as slow as each other show no stall of the second.
        let both_slow = PairTiming {
            usual_record_call: None,
            first_record_call: CALL + 140 * US,
            ..stalled
        };
        assert_eq!(judge_probe_pair(&both_slow), PairVerdict::Someone);
    }

    /// A chain of launches every `every`, with GPU start offsets `offsets_us` and record
    /// calls of `calls_us` (host time is the record's return; each launch's GPU start
    /// is its host time plus its offset).
    fn run_gaps(every: Duration, offsets_us: &[f64], calls_us: &[f64]) -> Vec<StartVerdict> {
        let mut chain = StartChain::default();
        let mut out = Vec::new();
        for (i, off) in offsets_us.iter().enumerate() {
            let host = Time::from_secs_f64(1.0) + every * u32::try_from(i).unwrap();
            let since = (i > 0).then(|| us(every) + off - offsets_us[i - 1]);
            let call = Duration::from_secs_f64(calls_us[i] / 1e6);
            out.push(chain.next(host, call, since));
        }
        out
    }

    fn run(every: Duration, offsets_us: &[f64]) -> Vec<StartVerdict> {
        run_gaps(every, offsets_us, &vec![6.0; offsets_us.len()])
    }

    const BURSTS: Duration = Duration::from_millis(50);

    #[test]
    fn a_start_a_context_switch_late_is_seen_and_spread_is_not() {
        // Nobody else: offsets spread by up to 45 us around 10.
        let mut offsets: Vec<f64> = (0..40)
            .map(|i| 10.0 + f64::from(i % 7) * 7.0 - 20.0)
            .collect();
        offsets.push(10.0 + 136.0); // after another context's work
        offsets.push(10.0);
        let v = run(BURSTS, &offsets);
        assert!(v[..40].iter().all(|v| !v.late()), "{v:?}");
        assert!(v[40].late());
        assert!(!v[41].late());
    }

    #[test]
    fn the_first_launches_of_a_chain_are_not_judged_by_their_start() {
        // A resumption: the GPU starts our first kernels late after idling.
        let v = run(BURSTS, &[140.0, 60.0, 40.0, 5.0, 6.0, 4.0]);
        assert!(v.iter().all(|v| !v.late()), "{v:?}");
        assert!(!v[0].judged && !v[1].judged && !v[2].judged && v[3].judged);
    }

    #[test]
    fn drift_of_the_gpu_clock_is_followed_not_reported() {
        // 100 ppm for 20 s at 20 launches a second: 2 ms in all, 5 us per launch.
        let offsets: Vec<f64> = (0..400).map(|i| f64::from(i) * 5.0).collect();
        assert!(run(BURSTS, &offsets).iter().all(|v| !v.late()));
        let falling: Vec<f64> = (0..400).map(|i| -f64::from(i) * 5.0).collect();
        assert!(run(BURSTS, &falling).iter().all(|v| !v.late()));
    }

    /// The host stalls inside two record calls in a row, after each was submitted, as
    /// the hosts that paused stalled: each returns about 150 us late, so its offset
    /// looks that much early.
    fn two_stalls_at(n: usize, at: usize) -> (Vec<f64>, Vec<f64>) {
        let mut offsets = vec![10.0; n];
        let mut calls = vec![6.0; n];
        for i in [at, at + 1] {
            offsets[i] = 10.0 - 150.0;
            calls[i] = 6.0 + 150.0;
        }
        (offsets, calls)
    }

    #[test]
    fn two_stalled_launches_do_not_make_the_next_ones_late() {
        let (offsets, calls) = two_stalls_at(40, 20);
        let v = run_gaps(BURSTS, &offsets, &calls);
        assert!(v.iter().all(|v| !v.late()), "{v:?}");
        assert!(v[20].slow_record && v[21].slow_record && !v[22].slow_record);
    }

    #[test]
    fn three_stalled_launches_without_their_gaps_still_leave_the_median() {
        // Host time read late three times without a long call to show it (the thread
        // preempted after the record returned): the median of eight is not moved.
        let mut offsets = vec![10.0; 40];
        for i in [20, 22, 24] {
            offsets[i] = -190.0;
        }
        let v = run(BURSTS, &offsets);
        assert!(v.iter().all(|v| !v.late()), "{v:?}");
    }

    #[test]
    fn a_switch_after_stalls_is_still_seen() {
        let (mut offsets, calls) = two_stalls_at(40, 20);
        offsets[25] = 10.0 + 130.0;
        let v = run_gaps(BURSTS, &offsets, &calls);
        let late: Vec<usize> = (0..40).filter(|&i| v[i].late()).collect();
        assert_eq!(late, vec![25]);
    }

    #[test]
    fn a_gap_longer_than_the_chain_allows_starts_a_new_chain() {
        let t0 = Time::from_secs_f64(1.0);
        let mut chain = StartChain::default();
        chain.next(t0, CALL, None);
        for i in 1..5 {
            chain.next(t0 + BURSTS * i, CALL, Some(50_000.0));
        }
        // 2 s later a launch that would look 500 us late against the old chain.
        let v = chain.next(t0 + Duration::from_secs(2), CALL, Some(1_950_500.0));
        assert!(!v.judged && !v.late());
    }

    #[test]
    fn a_restart_after_idle_forgets_the_baseline_before_it() {
        let t0 = Time::from_secs_f64(1.0);
        let mut chain = StartChain::default();
        chain.next(t0, CALL, None);
        for i in 1..10 {
            chain.next(t0 + BURSTS * i, CALL, Some(50_000.0));
        }
        // Idle for 0.5 s (a pause), then the GPU starts us 80 us later than before.
        // The launcher passes no GPU gap for the first launch after an idle spell.
        let back = t0 + BURSTS * 9 + Duration::from_millis(550);
        let v = chain.next(back, CALL, None);
        assert!(!v.judged);
        for i in 1..10 {
            let v = chain.next(back + BURSTS * i, CALL, Some(50_000.0));
            assert!(!v.late(), "{i}: {v:?}");
        }
    }

    #[test]
    fn the_hosts_usual_record_call_is_kept_across_chains() {
        let mut chain = StartChain::default();
        let t0 = Time::from_secs_f64(1.0);
        for i in 0..8 {
            chain.next(t0 + BURSTS * i, CALL, None);
        }
        assert_eq!(chain.usual_record_call(), Some(CALL));
        // A stalled first launch of a chain is known as one.
        let v = chain.next(t0 + Duration::from_secs(5), 200 * US, None);
        assert!(v.slow_record);
    }

    #[test]
    fn a_group_runs_long_only_beyond_a_switch_margin_and_its_kernels_slack() {
        let asked = Duration::from_millis(25);
        let none = Duration::ZERO;
        assert!(ran_long(asked, asked + 40 * US, none, 1).is_none());
        assert!(ran_long(asked, asked + 130 * US, none, 1).is_some());
        // Thirteen kernels may each add a little.
        assert!(ran_long(asked, asked + 100 * US, none, 13).is_none());
        assert!(ran_long(asked, asked + 200 * US, none, 13).is_some());
    }

    #[test]
    fn the_hosts_launch_time_is_not_taken_for_a_switch() {
        // The start event stamped at once on an idle GPU, the kernel launched 150 us
        // later by a slow host; nobody else ran.
        let asked = Duration::from_millis(25);
        assert!(ran_long(asked, asked + 160 * US, 150 * US, 1).is_none());
        // A switch of 136 us after a launch of 15 us still shows.
        assert!(ran_long(asked, asked + 151 * US, 15 * US, 1).is_some());
    }

    #[test]
    fn a_group_is_cut_short_only_beyond_the_margin() {
        let asked = Duration::from_millis(25);
        assert!(cut_short(asked, asked).is_none());
        assert!(cut_short(asked, asked - 40 * US).is_none());
        assert!(cut_short(asked, asked - 60 * US).is_some());
        assert_eq!(cut_short(asked, Duration::from_millis(6)), Some(19_000.0));
    }

    #[test]
    fn a_group_shows_its_strongest_sign_and_names_it() {
        let mut chain = StartChain::default();
        let asked = Duration::from_millis(25);
        let g = |i: u32, since: Option<f64>, ran: Duration| GroupTiming {
            recorded_at: Time::from_secs_f64(1.0) + BURSTS * i,
            record_call: CALL,
            host_gap: Duration::from_micros(45),
            gpu_since_previous_us: since,
            ran,
            asked,
            kernels: 1,
        };
        for i in 0..5 {
            let since = (i > 0).then_some(50_000.0);
            assert_eq!(judge_group(&mut chain, &g(i, since, asked)).0, None);
        }
        // Late and preempted: the preemption is the stronger sign.
        let (sign, v) = judge_group(&mut chain, &g(5, Some(50_130.0), asked / 2));
        assert!(v.late());
        assert_eq!(sign, Some(OthersSign::CutShort { short_us: 12_500.0 }));
        let late = OthersSign::LateStart { late_us: 96.4 };
        assert!(late.is_weak() && !OthersSign::HeldBack { past_us: 300.0 }.is_weak());
        assert_eq!(late.to_string(), "our kernel started 96 us late");
    }
}
