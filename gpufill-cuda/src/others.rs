//! Seeing other contexts' work in the timing of our own kernels
//! ([`LoadSource::others_seen`](gpufill_core::LoadSource::others_seen) and
//! [`LoadSource::probe`](gpufill_core::LoadSource::probe)).
//!
//! Without MPS the GPU time-slices between contexts, and a switch from one context to
//! another takes time (measured on an H100: docs/benchmarks.md, "Live services"):
//! - our first kernel after any kernel of another context starts a context switch late,
//!   however long ago that work ran, well beyond how much our starts vary with nobody
//!   else;
//! - a kernel of ours running when another context's work arrives is preempted at the
//!   end of a time slice; the spin kernel then ends at once (it sees its clock jump) and
//!   is shorter than asked.
//!
//! So every group of kernels we launch is bracketed by timing events: a start event
//! recorded before it and the launcher's end event after it. Its **start offset** (the
//! GPU time of the start event less the host time of the launch) is compared with the
//! recent ones ([`StartChain`]); its **length**, less the host's time to launch it (on
//! an idle GPU the start event is stamped before the kernel arrives), with what was
//! asked. Either one off by more than [`LATE_START`] or [`CUT_SHORT`] says that someone
//! else ran. GPU and host
//! clocks drift apart, so start offsets are compared only
//! within a chain of launches less than [`CHAIN_GAP`] apart. After a longer gap a
//! [`probe`] pairs two tiny kernels instead: the second starts on time, so the first one's
//! start against it says whether anyone ran since our previous kernel.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT;
use cudarc::driver::{CudaEvent, CudaFunction, CudaStream};

use crate::error::CudaError;
use crate::spin::{NEVER_YIELD, launch_spin};

/// A start this much later than the chain's recent starts follows another context's
/// work: a context switch, against the spread of our starts
/// with nobody else.
pub(crate) const LATE_START: Duration = Duration::from_micros(60);

/// A group this much shorter than asked was cut short by a preemption
/// ([`crate::spin::YIELD_JUMP`]).
pub(crate) const CUT_SHORT: Duration = Duration::from_micros(50);

/// What each kernel of a group may add to its run beyond what it asked (a launch behind
/// the last, with nobody else).
const PER_KERNEL_SLACK: Duration = Duration::from_micros(5);

/// Start offsets are compared only between launches less than this apart (the clocks
/// drift apart).
pub(crate) const CHAIN_GAP: Duration = Duration::from_secs(1);

/// How many recent start offsets the baseline is drawn from: their lower quartile (the
/// second lowest), so that one launch whose host time was read late cannot drag it
/// down; few, so that a drift of the clocks (100 ppm: 5 us per 50 ms burst) moves it
/// little within the window.
const BASELINE_LEN: usize = 8;

/// The first kernel of a probe pair starting this much later against the second than
/// the pair's usual spread with nobody else (it starts earlier than the second then;
/// a context switch later after another context's work) says that someone ran since our previous kernel.
pub(crate) const PROBE_LATE: Duration = Duration::from_micros(30);

/// The length of each kernel of a probe.
pub(crate) const PROBE_KERNEL: Duration = Duration::from_micros(5);

/// How long a probe waits for each of its kernels: one that has not run by then is held
/// back by someone else's work right now.
pub(crate) const PROBE_WAIT: Duration = Duration::from_millis(20);

/// Start offsets of a chain of launches, in microseconds of GPU time less host time.
#[derive(Debug, Default)]
pub(crate) struct StartChain {
    recent: VecDeque<f64>,
    offset: f64,
    last_host: Option<Instant>,
}

/// What the chain says of one launch.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct StartVerdict {
    /// This launch started [`LATE_START`] or more later than the chain's recent ones.
    pub late: bool,
    /// How much later than the chain's baseline this launch started, in us.
    pub late_us: f64,
    /// The chain's first launch now shows to have been late: this one, its second,
    /// started that much earlier against it (the first has nothing else to be judged
    /// by). Only the second judges the first: later, one launch whose host time was
    /// read late (its thread preempted after the launch) would look early and make the
    /// one before it look late.
    pub previous_late: bool,
}

impl StartChain {
    /// Adds a launch made at host time `host`, whose start event came `gpu_since_us`
    /// microseconds of GPU time after the previous launch's (`None` for the first of a
    /// chain). A launch more than [`CHAIN_GAP`] after the previous one starts a new chain.
    pub(crate) fn next(&mut self, host: Instant, gpu_since_us: Option<f64>) -> StartVerdict {
        let follows = self
            .last_host
            .is_some_and(|last| host.saturating_duration_since(last) < CHAIN_GAP);
        let since = match gpu_since_us {
            Some(gpu) if follows => gpu,
            _ => {
                self.restart(host);
                return StartVerdict::default();
            }
        };
        let host_since = host
            .saturating_duration_since(self.last_host.unwrap_or(host))
            .as_secs_f64()
            * 1e6;
        let previous = self.offset;
        self.offset += since - host_since;
        self.last_host = Some(host);
        let late_us = LATE_START.as_secs_f64() * 1e6;
        let verdict = StartVerdict {
            late_us: self.offset - self.baseline(),
            late: self.offset - self.baseline() > late_us,
            previous_late: self.recent.len() == 1 && previous - self.offset > late_us,
        };
        if self.recent.len() == BASELINE_LEN {
            self.recent.pop_front();
        }
        self.recent.push_back(self.offset);
        verdict
    }

    /// Forgets the chain: the next launch starts a new one.
    pub(crate) fn restart_next(&mut self) {
        self.last_host = None;
    }

    fn restart(&mut self, host: Instant) {
        self.recent.clear();
        self.offset = 0.0;
        self.recent.push_back(0.0);
        self.last_host = Some(host);
    }

    /// The lower quartile of the recent offsets (sorted on the stack: no allocation
    /// per burst).
    fn baseline(&self) -> f64 {
        let mut sorted = [0.0; BASELINE_LEN];
        let n = self.recent.len().min(BASELINE_LEN);
        for (slot, v) in sorted.iter_mut().zip(&self.recent) {
            *slot = *v;
        }
        let sorted = &mut sorted[..n];
        sorted.sort_by(f64::total_cmp);
        sorted
            .get(n.saturating_sub(1) / 4)
            .copied()
            .unwrap_or(self.offset)
    }
}

/// Whether a group of kernels that was asked to run `asked` and ran `ran` (GPU time
/// between its start and end events) was cut short by a preemption.
pub(crate) fn cut_short(asked: Duration, ran: Duration) -> bool {
    ran + CUT_SHORT < asked
}

/// Whether a group of `kernels` kernels ran [`LATE_START`] longer than asked: its start
/// event was stamped before a context switch that its first kernel then waited for
/// (where the GPU stamps an event without our context in place), or another context's
/// work came between two of its kernels. Either way someone else ran.
///
/// `host_gap` is the host's time from recording the start event to the first kernel's
/// launch returning. On an idle GPU the start event is stamped at once and the kernel
/// waits for the host's launch, so that gap counts into `ran` with nobody else there. It
/// is taken off first. (Without this, gpufill paused about every 1.5 s on an idle H100
/// of one host; a slow launch is the likely cause, not shown by a measurement:
/// docs/benchmarks.md, "Live services".)
pub(crate) fn ran_long(asked: Duration, ran: Duration, host_gap: Duration, kernels: u32) -> bool {
    ran.saturating_sub(host_gap) > asked + LATE_START + PER_KERNEL_SLACK * kernels
}

/// What the timing of one group of our kernels shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Judged {
    /// It (or, for the second of a chain, the first) started a context switch late.
    pub late_start: bool,
    /// It ran shorter than asked: a preemption ended it.
    pub cut_short: bool,
}

impl Judged {
    /// Whether it shows another context's work.
    pub(crate) fn others(self) -> bool {
        self.late_start || self.cut_short
    }
}

/// The start events of one launcher (bursts or the pacing thread) and the chain of
/// their offsets; the end event is the launcher's own.
pub(crate) struct OthersWatch {
    starts: [CudaEvent; 2],
    next: usize,
    chain: StartChain,
    /// The group launched last and not yet judged: its start event, host launch time,
    /// the GPU time it asked for, its kernels, and the host's time from recording its
    /// start to its first launch returning.
    pending: Option<(usize, Instant, Duration, u32, Duration)>,
    /// When the start event of the group being launched was about to be recorded.
    recording_at: Option<Instant>,
    /// The start event of the last group judged, for the next group's GPU time since.
    last_start: Option<usize>,
}

impl OthersWatch {
    /// Two timing events on `stream`'s context.
    ///
    /// # Errors
    /// The failed `cuEventCreate`.
    pub(crate) fn new(stream: &Arc<CudaStream>) -> Result<Self, CudaError> {
        let ctx = stream.context();
        // Timing on: cudarc's default (`None`) turns it off.
        let event = || {
            ctx.new_event(Some(CU_EVENT_DEFAULT))
                .map_err(|e| CudaError::driver("cuEventCreate", e))
        };
        Ok(OthersWatch {
            starts: [event()?, event()?],
            next: 0,
            chain: StartChain::default(),
            pending: None,
            last_start: None,
            recording_at: None,
        })
    }

    /// Records the start event of a group about to be launched on `stream`.
    ///
    /// # Errors
    /// The failed `cuEventRecord`.
    pub(crate) fn before_launch(&mut self, stream: &CudaStream) -> Result<(), CudaError> {
        self.recording_at = Some(Instant::now());
        self.starts[self.next]
            .record(stream)
            .map_err(|e| CudaError::driver("cuEventRecord", e))
    }

    /// The group whose start was just recorded was launched at host time `at` (its
    /// first launch returned) as `kernels` kernels asking for `asked` of GPU time in all.
    pub(crate) fn launched(&mut self, at: Instant, asked: Duration, kernels: u32) {
        let host_gap = self
            .recording_at
            .take()
            .map_or(Duration::ZERO, |r| at.saturating_duration_since(r));
        self.pending = Some((self.next, at, asked, kernels, host_gap));
        self.next = 1 - self.next;
    }

    /// Judges the pending group once `end` (recorded after it) has completed; `None`
    /// while there is none or it has not finished.
    ///
    /// # Errors
    /// A failed event query.
    pub(crate) fn judge(&mut self, end: &CudaEvent) -> Result<Option<Judged>, CudaError> {
        let Some((start, at, asked, kernels, host_gap)) = self.pending else {
            return Ok(None);
        };
        if !end
            .try_is_complete()
            .map_err(|e| CudaError::driver("cuEventQuery", e))?
        {
            return Ok(None);
        }
        self.pending = None;
        let ran = self.starts[start]
            .elapsed_ms(end)
            .map_err(|e| CudaError::driver("cuEventElapsedTime", e))?;
        let since = match self.last_start {
            Some(prev) => Some(
                self.starts[prev]
                    .elapsed_ms(&self.starts[start])
                    .map_err(|e| CudaError::driver("cuEventElapsedTime", e))?
                    * 1e3,
            ),
            None => None,
        };
        self.last_start = Some(start);
        let verdict = self.chain.next(at, since.map(f64::from));
        let ran = Duration::from_secs_f64(f64::from(ran.max(0.0)) / 1e3);
        let judged = Judged {
            late_start: verdict.late
                || verdict.previous_late
                || ran_long(asked, ran, host_gap, kernels),
            cut_short: cut_short(asked, ran),
        };
        if judged.others() {
            tracing::debug!(
                late_us = verdict.late_us,
                ran_us = ran.as_secs_f64() * 1e6,
                asked_us = asked.as_secs_f64() * 1e6,
                host_gap_us = host_gap.as_secs_f64() * 1e6,
                first_late = verdict.previous_late,
                "our kernels' timing shows another context"
            );
        }
        Ok(Some(judged))
    }

    /// Drops what is pending and starts a new chain with the next launch (after a probe,
    /// or when the shape changes hands).
    pub(crate) fn restart(&mut self) {
        self.pending = None;
        self.last_start = None;
        self.chain.restart_next();
    }
}

/// Runs a probe pair on `stream`: whether another context has run on the GPU since our
/// previous kernel. Nothing of ours may be queued. `end` is recorded after each kernel.
///
/// # Errors
/// A failed launch, record or query.
pub(crate) fn probe(
    stream: &CudaStream,
    func: &CudaFunction,
    watch: &mut OthersWatch,
    end: &CudaEvent,
) -> Result<bool, CudaError> {
    watch.restart();
    let ns = u64::try_from(PROBE_KERNEL.as_nanos()).unwrap_or(u64::MAX);
    let mut host = [Instant::now(); 2];
    let mut first_ran = Duration::ZERO;
    let mut first_gap = Duration::ZERO;
    for (i, at) in host.iter_mut().enumerate() {
        let recording = Instant::now();
        watch.starts[i]
            .record(stream)
            .map_err(|e| CudaError::driver("cuEventRecord", e))?;
        launch_spin(stream, func, ns, NEVER_YIELD, 1)?;
        *at = Instant::now();
        if i == 0 {
            first_gap = at.saturating_duration_since(recording);
        }
        end.record(stream)
            .map_err(|e| CudaError::driver("cuEventRecord", e))?;
        if !wait_for(end, PROBE_WAIT)? {
            // Held back right now by someone else's work.
            return Ok(true);
        }
        if i == 0 {
            let ms = watch.starts[0]
                .elapsed_ms(end)
                .map_err(|e| CudaError::driver("cuEventElapsedTime", e))?;
            first_ran = Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3);
        }
    }
    // The first kernel ran a context switch long: its start event was stamped before
    // the switch it then waited for.
    if ran_long(PROBE_KERNEL, first_ran, first_gap, 1) {
        tracing::debug!(
            first_ran_us = first_ran.as_secs_f64() * 1e6,
            host_gap_us = first_gap.as_secs_f64() * 1e6,
            "probe pair: first kernel long"
        );
        return Ok(true);
    }
    let gpu_us = f64::from(
        watch.starts[0]
            .elapsed_ms(&watch.starts[1])
            .map_err(|e| CudaError::driver("cuEventElapsedTime", e))?,
    ) * 1e3;
    let host_us = host[1].saturating_duration_since(host[0]).as_secs_f64() * 1e6;
    tracing::debug!(host_us, gpu_us, late_us = host_us - gpu_us, "probe pair");
    Ok(host_us - gpu_us > PROBE_LATE.as_secs_f64() * 1e6)
}

/// Polls `event` (20 us, then every 100 us) until it completes (`true`) or `limit`
/// passes.
fn wait_for(event: &CudaEvent, limit: Duration) -> Result<bool, CudaError> {
    let deadline = Instant::now() + limit;
    let mut wait = Duration::from_micros(20);
    loop {
        if event
            .try_is_complete()
            .map_err(|e| CudaError::driver("cuEventQuery", e))?
        {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(wait);
        wait = Duration::from_micros(100);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    /// A chain of launches every `every`, with GPU start offsets `offsets_us` (host
    /// time is exact; each launch's GPU start is its host time plus its offset).
    fn run(every: Duration, offsets_us: &[f64]) -> Vec<StartVerdict> {
        let t0 = Instant::now();
        let mut chain = StartChain::default();
        let mut out = Vec::new();
        for (i, off) in offsets_us.iter().enumerate() {
            let host = t0 + every * u32::try_from(i).unwrap();
            let since = (i > 0).then(|| every.as_secs_f64() * 1e6 + off - offsets_us[i - 1]);
            out.push(chain.next(host, since));
        }
        out
    }

    #[test]
    fn a_start_a_context_switch_late_is_seen_and_spread_is_not() {
        // Nobody else: offsets spread by up to 45 us around 10.
        let mut offsets: Vec<f64> = (0..40)
            .map(|i| 10.0 + f64::from(i % 7) * 7.0 - 20.0)
            .collect();
        offsets.push(10.0 + 136.0); // after another context's work
        offsets.push(10.0);
        let v = run(Duration::from_millis(50), &offsets);
        assert!(v[..40].iter().all(|v| !v.late && !v.previous_late), "{v:?}");
        assert!(v[40].late);
        assert!(!v[41].late);
    }

    #[test]
    fn the_first_launch_of_a_chain_is_judged_by_the_next() {
        let v = run(Duration::from_millis(50), &[140.0, 5.0, 6.0]);
        assert!(!v[0].late && !v[0].previous_late);
        assert!(v[1].previous_late, "{v:?}");
        assert!(!v[2].late && !v[2].previous_late);
    }

    #[test]
    fn drift_of_the_gpu_clock_is_followed_not_reported() {
        // 100 ppm for 20 s at 20 launches a second: 2 ms in all, 5 us per launch.
        let offsets: Vec<f64> = (0..400).map(|i| f64::from(i) * 5.0).collect();
        assert!(
            run(Duration::from_millis(50), &offsets)
                .iter()
                .all(|v| !v.late && !v.previous_late)
        );
        let falling: Vec<f64> = (0..400).map(|i| -f64::from(i) * 5.0).collect();
        assert!(
            run(Duration::from_millis(50), &falling)
                .iter()
                .all(|v| !v.late && !v.previous_late)
        );
    }

    #[test]
    fn one_host_time_read_late_does_not_make_the_next_launches_late() {
        // Launch 20's host time was read 200 us after its start: it looks early.
        let mut offsets = vec![10.0; 40];
        offsets[20] = -190.0;
        let v = run(Duration::from_millis(50), &offsets);
        assert!(v.iter().all(|v| !v.late && !v.previous_late), "{v:?}");
    }

    #[test]
    fn a_gap_longer_than_the_chain_allows_starts_a_new_chain() {
        let t0 = Instant::now();
        let mut chain = StartChain::default();
        chain.next(t0, None);
        chain.next(t0 + Duration::from_millis(50), Some(50_000.0));
        // 2 s later a launch that would look 500 us late against the old chain.
        let v = chain.next(t0 + Duration::from_secs(2), Some(1_950_500.0));
        assert_eq!(v, StartVerdict::default());
    }

    #[test]
    fn a_group_runs_long_only_beyond_a_switch_margin_and_its_kernels_slack() {
        let asked = Duration::from_millis(25);
        let none = Duration::ZERO;
        assert!(!ran_long(asked, asked + 40 * US, none, 1));
        assert!(ran_long(asked, asked + 130 * US, none, 1));
        // Thirteen kernels may each add a little.
        assert!(!ran_long(asked, asked + 100 * US, none, 13));
        assert!(ran_long(asked, asked + 200 * US, none, 13));
    }

    #[test]
    fn the_hosts_launch_time_is_not_taken_for_a_switch() {
        // The start event stamped at once on an idle GPU, the kernel launched 150 us
        // later by a slow host; nobody else ran.
        let asked = Duration::from_millis(25);
        assert!(!ran_long(asked, asked + 160 * US, 150 * US, 1));
        // A switch of 136 us after a launch of 15 us still shows.
        assert!(ran_long(asked, asked + 151 * US, 15 * US, 1));
    }

    #[test]
    fn a_group_is_cut_short_only_beyond_the_margin() {
        let asked = Duration::from_millis(25);
        assert!(!cut_short(asked, asked));
        assert!(!cut_short(asked, asked - 40 * US));
        assert!(cut_short(asked, asked - 60 * US));
        assert!(cut_short(asked, Duration::from_millis(6)));
    }
}
