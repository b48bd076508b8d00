//! Seeing other contexts' work in the timing of our own kernels
//! ([`LoadSource::others_seen`](gpufill_core::LoadSource::others_seen) and
//! [`LoadSource::probe`](gpufill_core::LoadSource::probe)).
//!
//! Every group of kernels we launch is bracketed by timing events: a start event
//! recorded before it and the launcher's end event after it. [`OthersWatch`] reads their
//! times and hands them to core's [`gpufill_core::kernel_timing`], which says what they
//! show: a start a context switch late, a run cut short by a preemption, or only the
//! host's own jitter (the reasons are there). After a longer gap a [`probe`] pairs two
//! tiny kernels instead: the second starts on time, so the first one's start against it
//! says whether anyone ran since our previous kernel.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT;
use cudarc::driver::{CudaEvent, CudaFunction, CudaStream};
use gpufill_core::Time;
use gpufill_core::kernel_timing::{
    GroupTiming, OthersSign, PROBE_KERNEL, PairTiming, PairVerdict, StartChain, judge_group,
    judge_probe_pair,
};

use crate::error::CudaError;
use crate::spin::{NEVER_YIELD, launch_spin};

/// How long a probe waits for each of its kernels: one that has not run by then is held
/// back by someone else's work right now.
pub(crate) const PROBE_WAIT: Duration = Duration::from_millis(20);

/// How many times a probe pair is run again when the host stalled on its second launch
/// (its reading is then uncertain by the stall) before it is believed anyway.
const PROBE_RETRIES: u32 = 2;

/// The start events of one launcher (bursts or the pacing thread) and the chain of
/// their offsets; the end event is the launcher's own.
pub(crate) struct OthersWatch {
    starts: [CudaEvent; 2],
    next: usize,
    chain: StartChain,
    /// Host times are handed to core as time since this instant.
    epoch: Instant,
    /// The group launched last and not yet judged.
    pending: Option<Pending>,
    /// The next group launched starts a new chain (we were idle).
    fresh_chain: bool,
    /// When the start event of the group being launched was about to be recorded, and
    /// when its record returned.
    recording_at: Option<(Instant, Instant)>,
    /// The start event of the last group judged, for the next group's GPU time since.
    last_start: Option<usize>,
    /// Groups judged whose start event's record the host stalled in.
    pub(crate) stalled_starts: u64,
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
            chain: StartChain::new(),
            epoch: Instant::now(),
            pending: None,
            fresh_chain: false,
            last_start: None,
            stalled_starts: 0,
            recording_at: None,
        })
    }

    fn time(&self, at: Instant) -> Time {
        Time::from_duration(at.saturating_duration_since(self.epoch))
    }

    /// Records the start event of a group about to be launched on `stream`.
    ///
    /// # Errors
    /// The failed `cuEventRecord`.
    pub(crate) fn before_launch(&mut self, stream: &CudaStream) -> Result<(), CudaError> {
        let recording = Instant::now();
        self.starts[self.next]
            .record(stream)
            .map_err(|e| CudaError::driver("cuEventRecord", e))?;
        self.recording_at = Some((recording, Instant::now()));
        Ok(())
    }

    /// The group whose start was just recorded was launched at host time `at` (its
    /// first launch returned) as `kernels` kernels asking for `asked` of GPU time in all.
    pub(crate) fn launched(&mut self, at: Instant, asked: Duration, kernels: u32) {
        let (recording, recorded) = self.recording_at.take().unwrap_or((at, at));
        self.pending = Some(Pending {
            start: self.next,
            recorded,
            record_call: recorded.saturating_duration_since(recording),
            host_gap: at.saturating_duration_since(recording),
            asked,
            kernels,
            fresh: std::mem::take(&mut self.fresh_chain),
        });
        self.next = 1 - self.next;
    }

    /// Judges the pending group once `end` (recorded after it) has completed: the sign
    /// of another context it shows, if any. `None` while there is none pending or it
    /// has not finished.
    ///
    /// # Errors
    /// A failed event query.
    pub(crate) fn judge(
        &mut self,
        end: &CudaEvent,
    ) -> Result<Option<Option<OthersSign>>, CudaError> {
        if self.pending.is_none()
            || !end
                .try_is_complete()
                .map_err(|e| CudaError::driver("cuEventQuery", e))?
        {
            return Ok(None);
        }
        self.judge_finished(end).map(Some)
    }

    /// [`Self::judge`] for a caller that has already seen `end` complete (the pacing
    /// thread checks it before each launch): one `cuEventQuery` a kernel fewer. The
    /// sign of another context the pending group shows, if any; nothing without one.
    ///
    /// # Errors
    /// A failed `cuEventElapsedTime`.
    pub(crate) fn judge_finished(
        &mut self,
        end: &CudaEvent,
    ) -> Result<Option<OthersSign>, CudaError> {
        let Some(Pending {
            start,
            recorded,
            record_call,
            host_gap,
            asked,
            kernels,
            fresh,
        }) = self.pending
        else {
            return Ok(None);
        };
        self.pending = None;
        let ran = self.starts[start]
            .elapsed_ms(end)
            .map_err(|e| CudaError::driver("cuEventElapsedTime", e))?;
        let since = match self.last_start.filter(|_| !fresh) {
            Some(prev) => Some(
                f64::from(
                    self.starts[prev]
                        .elapsed_ms(&self.starts[start])
                        .map_err(|e| CudaError::driver("cuEventElapsedTime", e))?,
                ) * 1e3,
            ),
            None => None,
        };
        self.last_start = Some(start);
        let group = GroupTiming {
            recorded_at: self.time(recorded),
            record_call,
            host_gap,
            gpu_since_previous_us: since,
            ran: Duration::from_secs_f64(f64::from(ran.max(0.0)) / 1e3),
            asked,
            kernels,
        };
        let (sign, verdict) = judge_group(&mut self.chain, &group);
        self.stalled_starts += u64::from(verdict.slow_record);
        // Every group, for the host's own start jitter
        // (docs/benchmarks.md#start-jitter-on-an-empty-gpu-labpy-jitter-scriptsjitter_sessionsh):
        // `gpufill run -vv` or RUST_LOG=gpufill_cuda=trace.
        tracing::trace!(
            late_us = verdict.late_us,
            judged = verdict.judged,
            slow_record = verdict.slow_record,
            record_call_us = record_call.as_secs_f64() * 1e6,
            ran_us = group.ran.as_secs_f64() * 1e6,
            asked_us = asked.as_secs_f64() * 1e6,
            host_gap_us = host_gap.as_secs_f64() * 1e6,
            idle_before_us = verdict.idle_before_us,
            "group timing"
        );
        if let Some(sign) = sign {
            tracing::debug!(%sign, "our kernels' timing shows another context, or the host");
        }
        Ok(sign)
    }

    /// Starts a new chain with the next launch, still judging the group in flight
    /// (after an idle spell of ours: the GPU starts our first kernels late after one).
    pub(crate) fn restart_next(&mut self) {
        self.fresh_chain = true;
    }

    /// Drops what is pending and starts a new chain with the next launch (after a probe,
    /// or when the shape changes hands).
    pub(crate) fn restart(&mut self) {
        self.pending = None;
        self.last_start = None; // the next launch starts a new chain
    }
}

/// A group launched and not yet judged.
#[derive(Clone, Copy, Debug)]
struct Pending {
    /// Its start event.
    start: usize,
    /// When the record of its start event returned (the host time its start is judged
    /// against), and how long that record call took.
    recorded: Instant,
    record_call: Duration,
    /// The GPU time it asked for.
    asked: Duration,
    /// Its kernels.
    kernels: u32,
    /// The host's time from recording its start to its first launch returning.
    host_gap: Duration,
    /// It starts a new chain.
    fresh: bool,
}

/// Runs a probe pair on `stream`: whether another context has run on the GPU since our
/// previous kernel. Nothing of ours may be queued. `end` is recorded after each kernel.
///
/// The pair's times are judged by core's
/// [`judge_probe_pair`](gpufill_core::kernel_timing::judge_probe_pair). A pair whose
/// second record the host stalled in would make the first kernel look late by the
/// stall: it is run again, up to [`PROBE_RETRIES`] times, then believed.
///
/// # Errors
/// A failed launch, record or query.
pub(crate) fn probe(
    stream: &CudaStream,
    func: &CudaFunction,
    watch: &mut OthersWatch,
    end: &CudaEvent,
) -> Result<bool, CudaError> {
    let mut tries = 0;
    loop {
        let verdict = match probe_pair(stream, func, watch, end)? {
            // Held back right now by someone else's work.
            None => return Ok(true),
            Some(timing) => judge_probe_pair(&timing),
        };
        match verdict {
            PairVerdict::Nobody => return Ok(false),
            PairVerdict::Someone => return Ok(true),
            PairVerdict::Stalled if tries >= PROBE_RETRIES => return Ok(true),
            PairVerdict::Stalled => tries += 1,
        }
    }
}

/// Runs one probe pair and reads its times; `None` when a kernel did not run within
/// [`PROBE_WAIT`] (held back by someone else's work right now).
fn probe_pair(
    stream: &CudaStream,
    func: &CudaFunction,
    watch: &mut OthersWatch,
    end: &CudaEvent,
) -> Result<Option<PairTiming>, CudaError> {
    watch.restart();
    let ns = u64::try_from(PROBE_KERNEL.as_nanos()).unwrap_or(u64::MAX);
    let mut host = [Instant::now(); 2];
    let mut calls = [Duration::ZERO; 2];
    let mut first_gap = Duration::ZERO;
    let mut first_ran = Duration::ZERO;
    for (i, at) in host.iter_mut().enumerate() {
        let recording = Instant::now();
        watch.starts[i]
            .record(stream)
            .map_err(|e| CudaError::driver("cuEventRecord", e))?;
        *at = Instant::now();
        calls[i] = at.saturating_duration_since(recording);
        launch_spin(stream, func, ns, NEVER_YIELD, 1)?;
        if i == 0 {
            first_gap = recording.elapsed();
        }
        end.record(stream)
            .map_err(|e| CudaError::driver("cuEventRecord", e))?;
        if !wait_for(end, PROBE_WAIT)? {
            return Ok(None);
        }
        if i == 0 {
            first_ran = elapsed(&watch.starts[0], end)?;
        }
    }
    let timing = PairTiming {
        first_ran,
        first_gap,
        gpu_between: elapsed(&watch.starts[0], &watch.starts[1])?,
        host_between: host[1].saturating_duration_since(host[0]),
        second_record_call: calls[1],
        usual_record_call: watch.chain.usual_record_call(),
        first_record_call: calls[0],
    };
    tracing::debug!(?timing, "probe pair");
    Ok(Some(timing))
}

/// The GPU time from `from` to `to`, both completed (0 if negative).
fn elapsed(from: &CudaEvent, to: &CudaEvent) -> Result<Duration, CudaError> {
    let ms = from
        .elapsed_ms(to)
        .map_err(|e| CudaError::driver("cuEventElapsedTime", e))?;
    Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3))
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
