//! The simulated GPU's handles: [`SimGpu`] (the device, for scenarios), [`SimProbe`]
//! (what NVML would read) and [`SimLoad`] (our kernels).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::config::{SimConfig, SimError, SimReport};
use super::job::{ForeignJob, ForeignReport};
use super::model::Model;
use gpufill_core::device::{LaunchShape, LoadSource, Probe, ProcessInfo};
use gpufill_core::gaps::GapReport;
use gpufill_core::kernel_timing::OthersSign;
use gpufill_core::time::Time;
use gpufill_core::units::{Load, Utilization};
use gpufill_core::unlisted::{PidView, UnexplainedMemory, Unlisted};

/// The simulated GPU. Clone handles share one device.
#[derive(Clone, Debug)]
pub struct SimGpu {
    model: Arc<Mutex<Model>>,
}

impl SimGpu {
    /// A simulated GPU at time zero.
    pub fn new(cfg: SimConfig) -> Self {
        SimGpu {
            model: Arc::new(Mutex::new(Model::new(cfg))),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Model> {
        // A panic while holding the lock leaves plain numbers behind: still usable.
        self.model.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A probe on this GPU.
    pub fn probe(&self) -> SimProbe {
        SimProbe {
            gpu: self.clone(),
            sm_metric: false,
            memory: UnexplainedMemory::new(),
        }
    }

    /// A probe that reads SM activity instead of utilization (the `sm` metric).
    pub fn sm_probe(&self) -> SimProbe {
        SimProbe {
            gpu: self.clone(),
            sm_metric: true,
            memory: UnexplainedMemory::new(),
        }
    }

    /// A load source on this GPU (a fresh context, opened at the model's current time).
    pub fn load(&self) -> SimLoad {
        let opened_at = self.lock().now;
        SimLoad {
            gpu: self.clone(),
            opened_at,
        }
    }

    /// Opens a probe and a load source at `now`, as a real adapter opens NVML and a CUDA
    /// context: fails while the device is lost.
    ///
    /// # Errors
    /// [`SimError::Lost`] while the device is lost.
    pub fn open(&self, now: Time) -> Result<(SimProbe, SimLoad), SimError> {
        {
            let mut m = self.lock();
            m.advance(now);
            m.check(false)?;
        }
        Ok((self.probe(), self.load()))
    }

    /// How many times a load source of this GPU was asked to change the load (the
    /// loop's work on the device side, for churn tests).
    pub fn load_calls(&self) -> u64 {
        self.lock().load_calls
    }

    /// How many foreign jobs are listed at `t` (the model must have reached `t`).
    pub fn listed_count(&self, t: Time) -> usize {
        self.lock()
            .cfg
            .foreign
            .iter()
            .filter(|j| j.listed(t))
            .count()
    }

    /// How many foreign jobs the model keeps (grows with arrivals until retired).
    pub fn foreign_len(&self) -> usize {
        self.lock().cfg.foreign.len()
    }

    /// How many PIDs seen working the model keeps for the next
    /// [`Probe::active_processes`] read (only the `activity` policy reads them).
    pub fn pending_active_len(&self) -> usize {
        self.lock().active.len()
    }

    /// The model's time: where the loop (or [`SimGpu::open`], [`SimGpu::report`]) last
    /// advanced it. A job added at this time arrives now.
    pub fn now(&self) -> Time {
        self.lock().now
    }

    /// Runs the simulation up to `t` and reports.
    pub fn report(&self, t: Time) -> SimReport {
        let mut m = self.lock();
        m.advance(t);
        m.report()
    }

    /// Whether our process holds a context on the device (false after a release until
    /// the next non-idle load).
    pub fn holds_context(&self) -> bool {
        self.lock().holds_context
    }

    /// The load most recently asked for.
    pub fn requested_load(&self) -> Load {
        self.lock().requested
    }

    /// How our kernels are laid out, as a load source of this GPU was last told
    /// ([`LoadSource::set_shape`]).
    pub fn shape(&self) -> LaunchShape {
        self.lock().shape
    }

    /// How many foreign jobs listed at `t` a simulated MPS daemon counts as its clients:
    /// all but those outside MPS (whether or not our process is still a client).
    pub fn mps_clients(&self, t: Time) -> usize {
        self.lock()
            .cfg
            .foreign
            .iter()
            .filter(|j| j.listed(t) && !j.outside_mps)
            .count()
    }

    /// Our process leaves MPS: from now on its kernels take turns with every other
    /// process's, in the bursts laid out without MPS (as `gpufill run` restarted
    /// without MPS launches them).
    pub fn leave_mps(&self) {
        let mut m = self.lock();
        m.cfg.mps = false;
        m.cfg.mps_kernel = None;
    }

    /// Adds a foreign job (for scenarios built as they go, such as long random runs).
    pub fn add_foreign(&self, job: ForeignJob) {
        self.lock().add_foreign(job);
    }

    /// Drops foreign jobs added with [`SimGpu::add_foreign`] that left before `t`,
    /// keeping memory bounded in long runs; the jobs of the [`SimConfig`] stay, so
    /// their reports remain in [`SimGpu::report`]. The dropped jobs' reports are returned.
    pub fn retire_foreign(&self, t: Time) -> Vec<ForeignReport> {
        self.lock().retire_foreign(t)
    }
}

/// The simulated GPU's [`Probe`].
#[derive(Clone, Debug)]
pub struct SimProbe {
    gpu: SimGpu,
    sm_metric: bool,
    /// The baseline learner, as the NVML probe keeps one (namespace view only).
    memory: UnexplainedMemory,
}

impl Probe for SimProbe {
    type Error = SimError;

    fn utilization(&mut self, now: Time) -> Result<Option<Utilization>, SimError> {
        let mut m = self.gpu.lock();
        m.advance(now);
        m.check(true)?;
        let n = m.published.len();
        if n == 0 {
            return Ok(None);
        }
        let pick = |s: &(f64, f64)| if self.sm_metric { s.1 } else { s.0 };
        let mean = m.published.iter().map(pick).sum::<f64>() / n as f64;
        m.published.clear();
        Ok(Some(Utilization::saturating_from_fraction(mean)))
    }

    fn foreign_processes(&mut self, now: Time) -> Result<Vec<ProcessInfo>, SimError> {
        let mut m = self.gpu.lock();
        m.advance(now);
        m.check(true)?;
        if m.cfg.pid_view == PidView::Namespace {
            // NVML lists only our namespace's processes: ours, which are not foreign.
            return Ok(Vec::new());
        }
        Ok(m.cfg
            .foreign
            .iter()
            .filter(|job| job.listed(now))
            .map(|job| ProcessInfo {
                pid: job.pid,
                used_memory_bytes: m.cfg.process_sizes.then_some(job.memory_at(now, 0)),
                name: job.name.clone(),
                mps_client: m.cfg.mps && !job.outside_mps,
            })
            .collect())
    }

    fn active_processes(&mut self, now: Time) -> Result<Option<Vec<u32>>, SimError> {
        let mut m = self.gpu.lock();
        m.advance(now);
        m.check(true)?;
        if !std::mem::take(&mut m.active_published) {
            return Ok(None);
        }
        Ok(Some(std::mem::take(&mut m.active)))
    }

    /// In the namespace view, device memory against our own context, through the same
    /// [`UnexplainedMemory`] the NVML probe uses.
    fn unlisted(&mut self, now: Time) -> Result<Unlisted, SimError> {
        let mut m = self.gpu.lock();
        m.advance(now);
        m.check(true)?;
        if m.cfg.pid_view == PidView::Host {
            return Ok(Unlisted::ListComplete);
        }
        let reading = m.memory_reading();
        drop(m);
        Ok(self.memory.observe(now, Some(reading)))
    }
}

/// The simulated GPU's [`LoadSource`].
#[derive(Clone, Debug)]
pub struct SimLoad {
    gpu: SimGpu,
    opened_at: Time,
}

impl LoadSource for SimLoad {
    type Error = SimError;

    fn set_load(&mut self, now: Time, load: Load) -> Result<(), SimError> {
        let mut m = self.gpu.lock();
        m.advance(now);
        m.load_calls += 1;
        // A lost device runs nothing whatever it is asked, so the load is recorded
        // (for tests to see what the loop asked for) before the error.
        m.set_load(load);
        if !load.is_idle() {
            m.holds_context = true;
        }
        m.check(false)?;
        if context_broke(&m, self.opened_at) {
            // A broken context runs nothing.
            m.set_load(Load::IDLE);
            return Err(SimError::ContextBroken);
        }
        Ok(())
    }

    /// Recorded for the model's costs: our later kernels are laid out in `shape`. The
    /// loop calls it in the step that read the probe at the same time, so the model
    /// is already there.
    fn set_shape(&mut self, shape: LaunchShape) {
        self.gpu.lock().set_shape(shape);
    }

    /// Filling gaps: what our kernels met since the last call, the model as of the
    /// probe's last reading (the crate docs: **Filling gaps**).
    fn gaps_seen(&mut self) -> GapReport {
        self.gpu.lock().gaps.report()
    }

    /// Filling gaps: the hold after each kernel of ours that meets another context, from
    /// the next meeting on and for the hold under way (re-timed from its meeting).
    fn set_gap_hold(&mut self, hold: Duration) {
        self.gpu.lock().set_gap_hold(hold);
    }

    /// Whether, since the last call, a kernel of ours showed that another context ran
    /// (without MPS): one started after foreign work that came since our previous
    /// kernel (a switch late), or foreign work came while one ran (it was preempted),
    /// the model as of the probe's last reading.
    fn others_seen(&mut self) -> Option<OthersSign> {
        self.gpu.lock().seen.take()
    }

    /// Whether foreign work (time-sliced with us: never an MPS client's) ran since our
    /// previous kernel or probe. The probe is a kernel of ours: the next request of a
    /// service that our context now precedes pays a switch.
    fn probe(&mut self, now: Time) -> Result<Option<bool>, SimError> {
        let mut m = self.gpu.lock();
        m.advance(now);
        m.check(false)?;
        if context_broke(&m, self.opened_at) {
            return Err(SimError::ContextBroken);
        }
        Ok(Some(m.probe()))
    }

    fn release(&mut self, now: Time) -> Result<(), SimError> {
        let mut m = self.gpu.lock();
        m.advance(now);
        m.check(false)?;
        m.holds_context = false;
        Ok(())
    }
}

/// Whether a context opened at `opened_at` has broken by the model's now
/// ([`super::SimConfig::context_breaks`]).
fn context_broke(m: &Model, opened_at: Time) -> bool {
    m.cfg
        .context_breaks
        .iter()
        .any(|&t| opened_at < t && t <= m.now)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use gpufill_core::device::{DeviceError, ErrorKind};

    const MIB: u64 = 1 << 20;
    use gpufill_core::units::{Duty, Width};

    fn load(duty: f64) -> Load {
        Load {
            duty: Duty::clamped(duty),
            width: Width::ONE_WARP,
        }
    }

    /// The samples published in `(from_ms, to_ms]`, read every 10 ms.
    fn samples_between(gpu: &SimGpu, from_ms: u64, to_ms: u64) -> Vec<f64> {
        let mut probe = gpu.probe();
        probe.utilization(Time::from_millis(from_ms)).unwrap();
        let mut out = Vec::new();
        for ms in (from_ms + 10..=to_ms).step_by(10) {
            if let Some(u) = probe.utilization(Time::from_millis(ms)).unwrap() {
                out.push(u.percent());
            }
        }
        out
    }

    /// Kernels as the launcher laid them out for issue 16: bursts of 1 ms kernels, 500 us
    /// one in flight beside quiet holders.
    fn issue16_kernels() -> SimConfig {
        SimConfig {
            max_kernel: Duration::from_millis(1),
            one_in_flight_kernel: Some(Duration::from_micros(500)),
            ..SimConfig::default()
        }
    }

    #[test]
    fn open_loop_duty_reads_as_measured_with_one_ms_kernels() {
        for (duty, expect) in [(0.5, 48.5), (0.25, 24.0), (0.75, 73.0)] {
            let gpu = SimGpu::new(issue16_kernels());
            gpu.load().set_load(Time::ZERO, load(duty)).unwrap();
            let s = samples_between(&gpu, 300, 2000);
            assert_eq!(s.len(), 8);
            for v in s {
                assert!((v - expect).abs() <= 1.0, "duty {duty}: {v}");
            }
        }
    }

    #[test]
    fn publishes_one_sample_per_period() {
        let gpu = SimGpu::new(SimConfig::default());
        // Boundaries at 73, 273, ..., 1873 ms: ten of them in the first 2 s.
        assert_eq!(samples_between(&gpu, 0, 2000).len(), 10);
        assert_eq!(samples_between(&gpu, 2000, 2200).len(), 1);
    }

    #[test]
    fn compute_bound_job_loses_a_fifth_beside_a_half_duty_filler() {
        let cfg = SimConfig {
            foreign: vec![ForeignJob {
                first_kernel_after: Duration::ZERO,
                ..ForeignJob::compute_bound(0.0, 10.0, 1.0)
            }],
            launch_overhead: Duration::ZERO,
            ..SimConfig::default()
        };
        let gpu = SimGpu::new(cfg);
        gpu.load().set_load(Time::ZERO, load(0.5)).unwrap();
        let r = gpu.report(Time::from_millis(10_000));
        assert!((r.foreign[0].slowdown - 0.21).abs() < 0.005, "{r:?}");
        assert!((r.foreign[0].overlap.as_secs_f64() - 5.0).abs() < 1e-6);
    }

    #[test]
    fn mps_costs_the_foreign_job_little_and_utilization_is_the_union() {
        let cfg = SimConfig {
            mps: true,
            foreign: vec![ForeignJob::compute_bound(0.0, 10.0, 0.5)],
            launch_overhead: Duration::ZERO,
            ..SimConfig::default()
        };
        let gpu = SimGpu::new(cfg);
        gpu.load().set_load(Time::ZERO, load(1.0)).unwrap();
        let r = gpu.report(Time::from_millis(10_000));
        assert!(r.foreign[0].slowdown < 0.02, "{r:?}");
        let s = samples_between(&gpu, 10_000, 10_400);
        assert!(s.iter().all(|&v| v == 100.0), "{s:?}");
    }

    #[test]
    fn queued_work_runs_for_the_stop_tail_after_idling() {
        let gpu = SimGpu::new(SimConfig {
            launch_overhead: Duration::ZERO,
            ..SimConfig::default()
        });
        gpu.load().set_load(Time::ZERO, load(1.0)).unwrap();
        gpu.load()
            .set_load(Time::from_millis(1000), Load::IDLE)
            .unwrap();
        let r = gpu.report(Time::from_millis(3000));
        assert!((r.own_busy.as_secs_f64() - 1.010).abs() < 1e-6, "{r:?}");
    }

    #[test]
    fn probe_faults_and_loss_surface_as_classified_errors() {
        let gpu = SimGpu::new(SimConfig {
            probe_faults: vec![(Time::from_millis(100), Time::from_millis(200))],
            lost_at: Some(Time::from_millis(500)),
            ..SimConfig::default()
        });
        let mut p = gpu.probe();
        assert!(p.foreign_processes(Time::from_millis(50)).is_ok());
        let e = p.foreign_processes(Time::from_millis(150)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Transient);
        assert!(p.utilization(Time::from_millis(250)).is_ok());
        let e = gpu
            .load()
            .set_load(Time::from_millis(600), load(0.5))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Lost);
    }

    #[test]
    fn lists_a_job_from_its_listing_until_it_leaves() {
        let gpu = SimGpu::new(SimConfig {
            foreign: vec![ForeignJob::compute_bound(1.0, 2.0, 0.3)],
            ..SimConfig::default()
        });
        let mut p = gpu.probe();
        assert!(
            p.foreign_processes(Time::from_millis(999))
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            p.foreign_processes(Time::from_millis(1000)).unwrap().len(),
            1
        );
        assert!(
            p.foreign_processes(Time::from_millis(2000))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn sm_activity_scales_with_width() {
        let gpu = SimGpu::new(SimConfig {
            launch_overhead: Duration::ZERO,
            ..SimConfig::default()
        });
        let wide = Load {
            duty: Duty::FULL,
            width: Width::blocks(66).unwrap(),
        };
        gpu.load().set_load(Time::ZERO, wide).unwrap();
        let mut p = gpu.sm_probe();
        p.utilization(Time::from_millis(300)).unwrap();
        let u = p.utilization(Time::from_millis(500)).unwrap().unwrap();
        assert!((u.percent() - 50.0).abs() < 0.6, "{u}");
    }

    #[test]
    fn a_newcomers_memory_grows_as_it_did_on_the_h100() {
        // The times below are the measured ones: listed (host view) at 6.148 s, context
        // ready 166 ms later; used_v2 minus what we held alone
        // (docs/benchmarks.md#inside-a-pid-namespace-of-its-own-scriptsns_signalspy-scriptsnamespace_benchpy;
        // raw in docs/data/ns-signals-h100.txt).
        let job = ForeignJob {
            first_kernel_after: Duration::from_millis(166),
            ..ForeignJob::compute_bound(6.148, 14.0, 1.0)
        };
        let driver = 8 * MIB;
        let mib_at = |t: f64| job.memory_at(Time::from_secs_f64(t), driver) / MIB;
        assert_eq!(mib_at(6.100), 0);
        assert_eq!(mib_at(6.1125), 8);
        assert_eq!(mib_at(6.1245), 19);
        assert_eq!(mib_at(6.2425), 36);
        assert_eq!(mib_at(6.2695), 110);
        assert_eq!(mib_at(6.2825), 526);
        assert_eq!(mib_at(6.315), 620);
        assert_eq!(mib_at(14.0), 0);
    }

    #[test]
    fn the_namespace_view_shows_memory_beyond_our_context_and_late_samples() {
        let job = ForeignJob::compute_bound(1.0, 10.0, 1.0);
        let gpu = SimGpu::new(
            SimConfig {
                foreign: vec![job],
                ..SimConfig::default()
            }
            .pid_namespace(),
        );
        let mut p = gpu.probe();
        assert_eq!(p.unlisted(Time::from_millis(500)), Ok(Unlisted::Explained));
        assert!(
            p.foreign_processes(Time::from_millis(2000))
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            p.unlisted(Time::from_millis(2000)),
            Ok(Unlisted::Memory(620 * MIB))
        );
        // It worked from 1.085 s; the first window showing it closed at 1.273 s and
        // shows in the per-process samples 2.6 s later.
        p.active_processes(Time::from_millis(3800)).unwrap();
        assert_eq!(p.active_processes(Time::from_millis(3860)), Ok(None));
        assert_eq!(
            p.active_processes(Time::from_millis(3880)),
            Ok(Some(vec![2000]))
        );
        // The host view lists it and has nothing to add.
        let host = SimGpu::new(SimConfig {
            foreign: vec![ForeignJob::compute_bound(1.0, 10.0, 1.0)],
            ..SimConfig::default()
        });
        let mut h = host.probe();
        assert_eq!(
            h.foreign_processes(Time::from_millis(2000)).unwrap().len(),
            1
        );
        assert_eq!(
            h.unlisted(Time::from_millis(2000)),
            Ok(Unlisted::ListComplete)
        );
    }

    #[test]
    fn retiring_finished_jobs_returns_their_reports() {
        let gpu = SimGpu::new(SimConfig::default());
        gpu.add_foreign(ForeignJob::compute_bound(0.0, 1.0, 1.0));
        gpu.add_foreign(ForeignJob::compute_bound(0.5, 5.0, 1.0));
        let retired = gpu.retire_foreign(Time::from_millis(2000));
        assert_eq!(retired.len(), 1);
        assert_eq!(retired[0].pid, 1000);
        assert_eq!(gpu.report(Time::from_millis(2000)).foreign.len(), 1);
    }

    /// One long burst of a service at `load`, from 0 to 10 s, with no launch overhead
    /// unless `overhead`.
    fn service_gpu(load: f64, overhead: bool) -> SimGpu {
        let job = ForeignJob {
            first_kernel_after: Duration::ZERO,
            ..ForeignJob::service(
                0.0,
                10.0,
                Duration::from_secs(20),
                Duration::from_secs(10),
                load,
            )
        };
        SimGpu::new(SimConfig {
            foreign: vec![job],
            launch_overhead: if overhead {
                Duration::from_micros(30)
            } else {
                Duration::ZERO
            },
            ..issue16_kernels()
        })
    }

    #[test]
    fn one_kernel_in_flight_costs_a_service_less_than_queued_bursts() {
        let bursts = service_gpu(0.4, false);
        bursts.load().set_load(Time::ZERO, load(0.5)).unwrap();
        let r = bursts.report(Time::from_millis(10_000)).foreign[0].clone();
        assert!((r.slowdown - 0.15).abs() < 1e-6, "{r:?}");
        assert_eq!(r.overlap_one_in_flight, Duration::ZERO);

        let one = service_gpu(0.4, false);
        let mut source = one.load();
        source.set_shape(LaunchShape::OneInFlight);
        source.set_load(Time::ZERO, load(0.5)).unwrap();
        let r = one.report(Time::from_millis(10_000)).foreign[0].clone();
        // 500 us kernels against 5.59 ms requests, two waits a request: 8.9 % of the
        // time it overlaps (at most `interference`, 0.3 per unit of duty: 15 %).
        assert!((r.slowdown - 0.0894).abs() < 1e-3, "{r:?}");
        assert!((r.worst_run - r.slowdown).abs() < 1e-9, "one burst: {r:?}");
        assert_eq!(r.overlap, r.overlap_one_in_flight);
        assert_eq!(one.shape(), LaunchShape::OneInFlight);
    }

    #[test]
    fn one_short_kernel_at_a_time_reads_lower_and_stops_at_once() {
        let gpu = SimGpu::new(issue16_kernels());
        let mut source = gpu.load();
        source.set_load(Time::ZERO, load(0.5)).unwrap();
        let s = samples_between(&gpu, 300, 1000);
        assert!(s.iter().all(|&v| (48.0..=49.0).contains(&v)), "{s:?}");
        // 30 us lost per 500 us kernel: 47 %.
        source.set_shape(LaunchShape::OneInFlight);
        let s = samples_between(&gpu, 1300, 2000);
        assert!(s.iter().all(|&v| v == 47.0), "{s:?}");
        let busy = gpu.report(Time::from_millis(3000)).own_busy;
        source
            .set_load(Time::from_millis(3000), Load::IDLE)
            .unwrap();
        let after = gpu.report(Time::from_millis(4000)).own_busy;
        // The kernel in flight finishes; nothing is queued behind it.
        assert!((after - busy).as_secs_f64() < 0.000_5, "{busy:?} {after:?}");
    }

    #[test]
    fn with_the_measured_min_run_short_bursts_never_show_in_per_process_samples() {
        let job = |start: f64| ForeignJob {
            first_kernel_after: Duration::ZERO,
            ..ForeignJob::service(
                start,
                start + 10.0,
                Duration::from_secs(2),
                Duration::from_millis(170),
                0.4,
            )
        };
        let notebook = ForeignJob {
            first_kernel_after: Duration::ZERO,
            ..ForeignJob::notebook(0.0, 10.0, &[(5.0, 7.0)])
        };
        let gpu = SimGpu::new(SimConfig {
            foreign: vec![job(0.0), notebook],
            process_sample_min_run: SimConfig::MEASURED_PROCESS_SAMPLE_MIN_RUN,
            ..SimConfig::default()
        });
        let mut p = gpu.probe();
        let mut seen = Vec::new();
        for ms in (0..7000).step_by(10) {
            if let Some(pids) = p.active_processes(Time::from_millis(ms)).unwrap()
                && !pids.is_empty()
            {
                seen.push((ms, pids));
            }
        }
        // Only the notebook's cell, 400 ms into it, at the next sample (5.473 s).
        assert_eq!(seen.first(), Some(&(5480, vec![1000])), "{seen:?}");
        assert!(seen.iter().all(|(_, pids)| pids == &vec![1000]));
        // Without the min run, every burst shows.
        let gpu = SimGpu::new(SimConfig {
            foreign: vec![job(0.0)],
            ..SimConfig::default()
        });
        let mut p = gpu.probe();
        let shown = (0..7000)
            .step_by(10)
            .filter_map(|ms| p.active_processes(Time::from_millis(ms)).unwrap())
            .filter(|pids| !pids.is_empty())
            .count();
        assert!(shown >= 4, "{shown}");
    }
}
