//! A worker's log lines: each tick's events ([`log_tick`]), with faults that may repeat
//! every tick rate-limited (the first of a run is logged in full, then at most one
//! summary line a minute says how many followed, [`gpufill_core::RateLimiter`]), and
//! the supervisor's lines about a lost GPU.

use gpufill_core::{Event, RateLimiter, Supervised, SupervisorEvent, Tick, Time};
use tracing::{debug, error, info, trace, warn};

/// Logs one tick: its sample at debug, every tick at trace, and its events (state
/// changes at info, faults at warn, admitted by `faults`).
pub fn log_tick(tick: &Tick, faults: &mut FaultLog) {
    let util = tick.util.map(|u| u.percent());
    if let Some(found) = tick.probed {
        if found {
            debug!("probe: another process ran a kernel since ours; holding off");
        } else {
            info!("probe: nobody ran a kernel since ours; filling beside the quiet holders");
        }
    }
    if let Some(sample) = tick.sample {
        debug!(
            util = sample.percent(),
            target = tick.target.percent(),
            duty = tick.duty.percent(),
            width = tick.width.get(),
            state = tick.state.as_str(),
            foreign = tick.foreign,
            "sample"
        );
    } else {
        trace!(
            ?util,
            duty = tick.duty.percent(),
            state = tick.state.as_str(),
            "tick"
        );
    }
    for event in tick.events.iter().filter(|e| faults.admit(tick.at, e)) {
        match event {
            Event::Filling => info!(target = tick.target.percent(), "filling"),
            Event::Yielded {
                pids,
                unlisted: false,
            } if pids.is_empty() => info!("yielding (grace)"),
            Event::Yielded {
                pids,
                unlisted: false,
            } => info!(foreign = ?pids, "yielding"),
            // A process outside our PID namespace, seen by device memory, per-process
            // samples or utilization beyond ours (issue 14).
            Event::Yielded {
                pids,
                unlisted: true,
            } => info!(
                foreign = ?pids,
                "yielding to a process our PID namespace does not list (seen by device memory or its work)"
            ),
            // A dormant holder woke (or someone unlisted ran): rare now that a live
            // holder is held off for longer and longer, so info. The line names the
            // evidence: a late start of ours alone may be the host's own jitter.
            Event::Paused {
                pids,
                unlisted,
                sign: Some(sign),
            } if sign.is_weak() => info!(
                foreign = ?pids,
                unlisted,
                "paused: {sign}, after another process's kernel or by the host's own jitter; probing before holding off"
            ),
            Event::Paused {
                pids,
                unlisted,
                sign: Some(sign),
            } => info!(
                foreign = ?pids,
                unlisted,
                "paused: {sign}: another process ran a kernel beside ours; holding off"
            ),
            Event::Paused {
                pids,
                unlisted,
                sign: None,
            } => info!(
                foreign = ?pids,
                unlisted,
                "paused: a quiet process showed work (NVML, or a probe of ours); holding off"
            ),
            // Nobody else can be there (every context is listed, or shows in device
            // memory): the host's own jitter, so no pause, and not a line at info.
            Event::Unexplained { sign } => debug!(
                "{sign} with nobody else on the GPU: the host's own jitter, not a neighbour; no pause"
            ),
            Event::FillingGaps { pids } => info!(
                foreign = ?pids,
                "filling the gaps of live work: listed for the idle grace, working or not; one short kernel at a time, within the cost bound"
            ),
            Event::CostBound {
                over,
                estimate,
                hold,
                weighed,
            } => {
                let what = if *over {
                    "estimated cost to live work over the bound: holding off longer after each meeting"
                } else {
                    "estimated cost to live work back under the bound: filling more of its gaps"
                };
                info!(
                    estimate_percent = estimate * 100.0,
                    hold_ms = hold.as_secs_f64() * 1e3,
                    job_percent = weighed.map(|w| w.job * 100.0),
                    weighed_by = weighed.map(|w| tracing::field::display(w.by)),
                    ours_percent = weighed.map(|w| w.ours * 100.0),
                    "{what}"
                )
            }
            Event::ProbeFault { message } => {
                warn!("probe failed, holding the last load: {message}")
            }
            Event::ProbeRecovered => info!("probe recovered"),
            Event::WentBlind => warn!("probe failing too long: idle until it recovers"),
            Event::Released => {
                info!("yielded long enough: CUDA context released, no GPU memory held")
            }
            Event::LoadFault { message } => warn!("cannot apply the load, retrying: {message}"),
            Event::Stopped { kind, message } => {
                error!(?kind, "GPU unusable, stopped with the GPU idle: {message}")
            }
        }
    }
}

/// The rate limiters of one GPU's worker.
#[derive(Debug)]
pub struct FaultLog {
    probe: RateLimiter,
    load: RateLimiter,
}

impl Default for FaultLog {
    fn default() -> Self {
        FaultLog {
            probe: RateLimiter::per_minute(),
            load: RateLimiter::per_minute(),
        }
    }
}

impl FaultLog {
    /// Whether a fault event of the loop should be logged in full now; false for
    /// repeats that are only counted. Other events are always logged.
    pub fn admit(&mut self, at: Time, event: &Event) -> bool {
        match event {
            Event::ProbeFault { .. } => self.probe.hit(at),
            // A recovery is worth a line only when its fault was.
            Event::ProbeRecovered => self.probe.held_back() == 0,
            Event::LoadFault { .. } => self.load.hit(at),
            _ => true,
        }
    }

    /// Logs the summaries that are due and the supervisor's event. Call every tick.
    pub fn log(&mut self, step: &Supervised) {
        let at = step.tick.at;
        if let Some(n) = self.probe.summary(at) {
            warn!(
                count = n,
                "probe failed {n} more times in the last minute (transient; last load held each time)"
            );
        }
        if let Some(n) = self.load.summary(at) {
            warn!(
                count = n,
                "applying the load failed {n} more times in the last minute"
            );
        }
        match &step.event {
            None => {}
            Some(SupervisorEvent::Dropped { retry_in }) => warn!(
                retry_s = retry_in.as_secs_f64(),
                state = "stopped",
                "GPU lost: probe and CUDA context closed; reopening in {:.0} s",
                retry_in.as_secs_f64()
            ),
            Some(SupervisorEvent::OpenFailed { message, retry_in }) => warn!(
                retry_s = retry_in.as_secs_f64(),
                state = "stopped",
                "cannot reopen the GPU, next attempt in {:.0} s: {message}",
                retry_in.as_secs_f64()
            ),
            Some(SupervisorEvent::Reopened { attempts }) => {
                info!(attempts, "GPU reopened: probe and CUDA context ready")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_probe_faults_are_admitted_once_a_minute_with_their_recoveries() {
        let mut log = FaultLog::default();
        let fault = Event::ProbeFault {
            message: "x".into(),
        };
        let mut admitted = 0;
        // A probe flapping every other tick for two minutes.
        for i in 0..12_000u64 {
            let at = Time::from_millis(i * 10);
            let event = if i % 2 == 0 {
                &fault
            } else {
                &Event::ProbeRecovered
            };
            admitted += u32::from(log.admit(at, event));
            log.probe.summary(at);
        }
        // The first fault and its recovery, then nothing but summaries.
        assert!(admitted <= 4, "{admitted}");
        assert!(log.admit(Time::from_millis(0), &Event::Filling));
    }
}
