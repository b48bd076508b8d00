//! The two faces of a GPU that the loop sees: a [`Probe`] that measures it and a
//! [`LoadSource`] that loads it. `gpufill-nvml` and `gpufill-cuda` implement them for
//! real hardware, `gpufill-sim` for the simulated GPU.

use std::time::Duration;

use crate::gaps::GapReport;
use crate::kernel_timing::OthersSign;
use crate::time::Time;
use crate::units::{Load, Utilization};
use crate::unlisted::Unlisted;

/// How a device error should be handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Worth retrying: the loop holds its last decision and asks again next tick.
    Transient,
    /// The device or driver cannot do this at all (an old driver, MIG, no permission).
    Unsupported,
    /// The device is gone (fell off the bus, driver unloaded): stop using it.
    Lost,
}

/// An error from a device adapter, classified so the loop never needs to name NVML or CUDA.
pub trait DeviceError: std::error::Error + Send + Sync + 'static {
    /// How the loop should treat this error.
    fn kind(&self) -> ErrorKind;
}

/// For devices that cannot fail (test doubles).
impl DeviceError for std::convert::Infallible {
    fn kind(&self) -> ErrorKind {
        match *self {}
    }
}

/// A compute process on the device that is not gpufill itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessInfo {
    /// The PID as the driver reports it: a host PID, or inside a PID namespace of our
    /// own the namespace's PID (NVML then lists only the namespace's processes).
    pub pid: u32,
    /// Device memory the process holds, when the driver says.
    pub used_memory_bytes: Option<u64>,
    /// The process name (a path or a bare name), when it can be resolved: NVML cannot
    /// resolve host PIDs from inside a container.
    pub name: Option<String>,
    /// Whether the driver lists it as a client of an MPS server: under MPS its kernels
    /// run beside ours. A process that is not one (another container, a job started
    /// without the pipe directory) time-slices with us as without MPS.
    pub mps_client: bool,
}

/// Measures a device: its utilization and who else is on it.
pub trait Probe {
    /// The adapter's error type.
    type Error: DeviceError;

    /// The device utilization measured since the previous call, or `None` when the
    /// device has published no new sample since then (NVML updates every 1/6 s to 1 s
    /// by product; one GPU's: docs/benchmarks.md#hardware-tests-run-b). The loop runs
    /// its controller only on new samples.
    ///
    /// # Errors
    /// A classified device error.
    fn utilization(&mut self, now: Time) -> Result<Option<Utilization>, Self::Error>;

    /// The compute processes on the device other than our own. Cheap (microseconds on
    /// NVML: docs/benchmarks.md#hardware-tests-run-b): the loop calls it every tick to see newcomers before their first kernel.
    ///
    /// # Errors
    /// A classified device error.
    fn foreign_processes(&mut self, now: Time) -> Result<Vec<ProcessInfo>, Self::Error>;

    /// PIDs of foreign processes that ran kernels in the samples the device published
    /// since the previous call, or `None` when it published none. Costly on NVML (over a
    /// millisecond a call: docs/benchmarks.md#hardware-tests-run-b), so the loop asks only when the `activity` policy needs it and
    /// implementations read at most once per sample period. The default knows nothing.
    ///
    /// # Errors
    /// A classified device error.
    fn active_processes(&mut self, now: Time) -> Result<Option<Vec<u32>>, Self::Error> {
        let _ = now;
        Ok(None)
    }

    /// What the device shows of processes missing from the list that
    /// [`Probe::foreign_processes`] read in this tick: inside a PID namespace of our own
    /// NVML lists only our namespace's processes, and device memory beyond the listed
    /// ones shows the others ([`crate::unlisted`]). Called every tick right after
    /// `foreign_processes`; cheap. The default: the list is complete
    /// ([`Unlisted::ListComplete`]), as in the host's PID view.
    ///
    /// # Errors
    /// A classified device error.
    fn unlisted(&mut self, now: Time) -> Result<Unlisted, Self::Error> {
        let _ = now;
        Ok(Unlisted::ListComplete)
    }

    /// Tells the probe the load in force from `now` on (the loop calls it after
    /// applying a load). A probe that must tell our own process from others' without
    /// trusting PIDs uses it: a process that works while we run nothing is not ours.
    /// The default ignores it.
    fn note_load(&mut self, now: Time, load: Load) {
        let _ = (now, load);
    }
}

/// How a load source lays its kernels out in time. The duty is the same either way; what
/// differs is how long another process's next kernel can wait behind ours, and the CPU.
///
/// Without MPS the GPU time-slices between processes. Work of ours that is *queued* when
/// another process's kernel arrives can make it wait a whole time slice; a *single*
/// kernel in flight makes it wait at most that kernel's remaining length
/// (docs/benchmarks.md#beside-a-mostly-idle-service-and-under-mps).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LaunchShape {
    /// Each period, `duty x period` of kernels queued back to back: one wake-up and
    /// launch call per period, the least CPU. For a GPU nobody else holds.
    #[default]
    Bursts,
    /// One short kernel in flight at a time, an idle gap after each: beside a process
    /// that holds a context but is quiet, so its next kernel waits at most one short
    /// kernel of ours. Costs a wake-up per kernel.
    OneInFlight,
    /// Beside live work without MPS (`yield.beside_live = "fill_gaps"`): one short
    /// kernel at a time, an idle gap of at least [`crate::gaps::MIN_GAP`] after each, and
    /// after a kernel that met another context, no launch for the hold the loop sets
    /// ([`LoadSource::set_gap_hold`]); what the kernels met is reported
    /// ([`LoadSource::gaps_seen`]). Costs a wake-up per kernel.
    Gaps,
}

impl LaunchShape {
    /// A lowercase name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            LaunchShape::Bursts => "bursts",
            LaunchShape::OneInFlight => "one_in_flight",
            LaunchShape::Gaps => "gaps",
        }
    }
}

/// Puts load on a device.
pub trait LoadSource {
    /// The adapter's error type.
    type Error: DeviceError;

    /// Applies `load` from `now` on, until the next call. [`Load::IDLE`] must stop
    /// launching at once; what is already queued may finish (kernels are short).
    ///
    /// # Errors
    /// A classified device error.
    fn set_load(&mut self, now: Time, load: Load) -> Result<(), Self::Error>;

    /// Does, in the caller's thread, the work that is due at `now` with the load in
    /// force: a source that launches from the loop's own thread (the CUDA launcher)
    /// launches the burst of a period that has begun. The loop calls it at every step
    /// right after reading the process list and applying the load, so no work starts on
    /// a decision older than that step. The default does nothing (a source that runs
    /// by itself, like the simulated GPU).
    ///
    /// # Errors
    /// A classified device error.
    fn launch_due(&mut self, now: Time) -> Result<(), Self::Error> {
        let _ = now;
        Ok(())
    }

    /// Frees what the source holds on the device while idle (for CUDA, the context), so
    /// that a yielding gpufill holds no GPU memory; the next non-idle `set_load` takes
    /// it again. Called only while the load is idle. The default keeps everything.
    ///
    /// # Errors
    /// A classified device error.
    fn release(&mut self, now: Time) -> Result<(), Self::Error> {
        let _ = now;
        Ok(())
    }

    /// Lays the load out in `shape` from the next launch on (the loop calls it only when
    /// the shape changes, before `set_load`). The default ignores it: a source with one
    /// way of launching.
    fn set_shape(&mut self, shape: LaunchShape) {
        let _ = shape;
    }

    /// The strongest sign, since the last call, that a kernel of ours showed of another
    /// context's work on the GPU ([`crate::kernel_timing`]): without MPS the GPU
    /// time-slices between contexts, so our first kernel after anyone else's work starts
    /// a context switch late
    /// (docs/benchmarks.md#what-another-contexts-work-does-to-our-kernels-the-physics-the-design-rests-on), one launched while
    /// their work runs starts later still, and one of ours that their work preempts is
    /// cut short (the spin kernels end at a jump of the GPU clock). A late start alone is
    /// a weak sign: the host's own jitter can fake it. The loop asks at every step;
    /// beside quiet holders it is their first sign of life. The default sees nothing.
    fn others_seen(&mut self) -> Option<OthersSign> {
        None
    }

    /// Whether another context has run on the GPU since our previous kernel, however
    /// long ago: `Some(true)` yes, `Some(false)` no, `None` when the source cannot tell.
    /// The CUDA launcher runs two tiny kernels, the second as soon as the first has
    /// finished, and compares their starts: the first starts a context switch late if
    /// anyone ran since our last kernel. Asked before filling beside quiet holders
    /// ([`crate::Decision::Probe`]); it costs a live neighbour at most one context
    /// switch on its next kernel. The default cannot tell.
    ///
    /// # Errors
    /// The launch or query that failed.
    fn probe(&mut self, now: Time) -> Result<Option<bool>, Self::Error> {
        let _ = now;
        Ok(None)
    }

    /// Whether the load last set runs: false while none can, such as while a source
    /// that failed for good waits for its replacement ([`crate::Reopening`]). The loop
    /// then reports its tick as it is, with no load running, rather than as asked. The
    /// default: a source that takes a load runs it.
    fn is_running(&self) -> bool {
        true
    }

    /// Filling gaps ([`LaunchShape::Gaps`]): what our kernels met since the last call.
    /// The default saw nothing.
    fn gaps_seen(&mut self) -> GapReport {
        GapReport::default()
    }

    /// Filling gaps: how long to launch nothing after a kernel of ours met another
    /// context ([`crate::gaps::GapCost`] sets it). The default ignores it.
    fn set_gap_hold(&mut self, hold: Duration) {
        let _ = hold;
    }
}

impl<P: Probe + ?Sized> Probe for &mut P {
    type Error = P::Error;
    fn utilization(&mut self, now: Time) -> Result<Option<Utilization>, Self::Error> {
        (**self).utilization(now)
    }
    fn foreign_processes(&mut self, now: Time) -> Result<Vec<ProcessInfo>, Self::Error> {
        (**self).foreign_processes(now)
    }
    fn active_processes(&mut self, now: Time) -> Result<Option<Vec<u32>>, Self::Error> {
        (**self).active_processes(now)
    }
    fn unlisted(&mut self, now: Time) -> Result<Unlisted, Self::Error> {
        (**self).unlisted(now)
    }
    fn note_load(&mut self, now: Time, load: Load) {
        (**self).note_load(now, load)
    }
}

impl<L: LoadSource + ?Sized> LoadSource for &mut L {
    type Error = L::Error;
    fn set_load(&mut self, now: Time, load: Load) -> Result<(), Self::Error> {
        (**self).set_load(now, load)
    }
    fn launch_due(&mut self, now: Time) -> Result<(), Self::Error> {
        (**self).launch_due(now)
    }
    fn release(&mut self, now: Time) -> Result<(), Self::Error> {
        (**self).release(now)
    }
    fn set_shape(&mut self, shape: LaunchShape) {
        (**self).set_shape(shape)
    }
    fn others_seen(&mut self) -> Option<OthersSign> {
        (**self).others_seen()
    }
    fn probe(&mut self, now: Time) -> Result<Option<bool>, Self::Error> {
        (**self).probe(now)
    }
    fn is_running(&self) -> bool {
        (**self).is_running()
    }
    fn gaps_seen(&mut self) -> GapReport {
        (**self).gaps_seen()
    }
    fn set_gap_hold(&mut self, hold: Duration) {
        (**self).set_gap_hold(hold)
    }
}
