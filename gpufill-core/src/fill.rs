//! The fill loop: one [`FillLoop::step`] per tick, which measures, decides and applies,
//! and returns a [`Tick`] that says what it did.
//!
//! Order inside a step, and why:
//! 1. read the foreign processes, what the device shows beyond that list (inside a PID
//!    namespace: [`crate::unlisted`]) and the utilization (the probe); where the list is
//!    partial, compare the new sample with what our own load explains;
//! 2. on a probe fault, hold the last load for `fault_hold`, then idle (a blind filler
//!    could overlap a newcomer); on a lost or unsupported device, idle and stop for good;
//! 3. ask the yield policy, which always wins over the controller;
//! 4. only while filling, run the controller on a new sample, skipping the first sample
//!    after idling (its window still holds idle time);
//! 5. apply the load if it changed;
//! 6. let the load source launch what is due ([`LoadSource::launch_due`]): a launcher
//!    driven from this thread starts a burst only here, microseconds after the process
//!    list was read, so it never starts one on a stale list;
//! 7. after yielding for `release_after` (when set), release the load source, so a
//!    yielding gpufill holds no GPU memory.

use std::time::Duration;

use crate::controller::{Controller, ControllerKind};
use crate::device::{DeviceError, ErrorKind, LaunchShape, LoadSource, Probe, ProcessInfo};
use crate::drive::{Driven, drive};
use crate::gaps::GapCost;
use crate::hint::NoHint;
use crate::kernel_timing::OthersSign;
use crate::policy::{Decision, Seen, YieldMode, YieldPolicy, YieldSettings};
use crate::unlisted::{OwnShare, Unlisted};

use crate::shaper::{Shaper, Shaping};
use crate::time::{Clock, Time};
use crate::units::{Duty, Load, Utilization, Width};

/// Settings of a [`FillLoop`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FillSettings {
    /// Utilization to hold: where the loop starts. Whoever schedules the target owns it
    /// from then on, through [`FillLoop::set_target`] (the runtime's schedule, before every
    /// step); [`FillLoop::set_settings`] leaves it alone.
    pub target: Utilization,
    /// Blocks per kernel: our share of the SMs (with [`Shaping::Fixed`]).
    pub width: Width,
    /// How the controller's output becomes a load: a duty at `width` (the `util`
    /// metric), or an SM-time share shaped into width and duty (the `sm` metric).
    pub shaping: Shaping,
    /// Upper bound of our own time share.
    pub max_duty: Duty,
    /// How long a failing probe is trusted: the last load holds this long, then the loop idles.
    pub fault_hold: Duration,
    /// After yielding this long, release the load source (drop the CUDA context) so
    /// gpufill holds no GPU memory; `None` keeps it.
    pub release_after: Option<Duration>,
    /// While filling the gaps of live work: the most it may cost that work, estimated
    /// ([`crate::gaps`]), as a ratio (0.02 is 2 %).
    pub max_cost: f64,
}

impl Default for FillSettings {
    fn default() -> Self {
        FillSettings {
            target: Utilization::saturating_from_fraction(0.5),
            width: Width::ONE_WARP,
            shaping: Shaping::Fixed,
            max_duty: Duty::FULL,
            fault_hold: Duration::from_secs(2),
            release_after: None,
            max_cost: 0.02,
        }
    }
}

/// What the loop is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// Holding the target.
    Filling,
    /// Idle because another process is (or was, within the grace) on the GPU.
    Yielding,
    /// Idle because of a fault: the probe has failed for longer than `fault_hold`, or
    /// the loop would fill but no load source runs (a replacement CUDA context is
    /// awaited: [`LoadSource::is_running`]).
    Blind,
    /// Idle for good: the device is lost or cannot be measured.
    Stopped,
    /// Idle because the target is 0 (a schedule window that turns gpufill off): there
    /// is nothing to fill, and nobody to yield to.
    Off,
}

impl State {
    /// A lowercase name for logs and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Filling => "filling",
            State::Yielding => "yielding",
            State::Blind => "blind",
            State::Stopped => "stopped",
            State::Off => "off",
        }
    }

    /// Whether our kernels may run in this state.
    pub fn fills(self) -> bool {
        self == State::Filling
    }
}

/// A change worth logging.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// Started filling (first time, or after yielding or a blind spell).
    Filling,
    /// Started yielding to these PIDs and/or a process the list does not show (neither:
    /// the reason is only the grace).
    Yielded {
        /// The listed foreign PIDs seen.
        pids: Vec<u32>,
        /// A foreign process without a PID in our view (inside a PID namespace: seen by
        /// device memory, samples of an unknown PID or utilization beyond ours).
        unlisted: bool,
    },
    /// Filling beside quiet holders, one of them showed work ([`Decision::Pause`]):
    /// idle until it no longer does. Filling resumes without an [`Event::Filling`]
    /// (bursts come often; this is the one line per burst).
    Paused {
        /// The listed foreign PIDs present.
        pids: Vec<u32>,
        /// A foreign process the list does not show is present.
        unlisted: bool,
        /// What our kernels' timing showed, when that was the evidence (`None`: NVML
        /// showed the work, or a probe found it).
        sign: Option<OthersSign>,
    },
    /// A kernel of ours showed a sign of another context while nothing else could
    /// be there (every context is listed, or shows in device memory): the host's own
    /// jitter ([`crate::kernel_timing`]). Nothing pauses for it.
    Unexplained {
        /// What our kernels' timing showed.
        sign: OthersSign,
    },
    /// The probe failed; the last load is held for now.
    ProbeFault {
        /// The adapter's message.
        message: String,
    },
    /// The probe works again.
    ProbeRecovered,
    /// The probe has failed for too long: idle until it recovers.
    WentBlind,
    /// Yielded for `release_after`: the load source (the CUDA context) was released.
    Released,
    /// Began filling the gaps that these listed processes' work leaves
    /// ([`crate::Decision::FillGaps`]).
    FillingGaps {
        /// The listed foreign PIDs present.
        pids: Vec<u32>,
    },
    /// Filling gaps: the estimated cost to the live work went over the bound (`over`),
    /// so gpufill holds off longer after each meeting, or came back under 0.9 of it
    /// ([`GapCost::over`]), so it holds off less.
    CostBound {
        /// Whether it is over the bound now.
        over: bool,
        /// The estimate, a ratio.
        estimate: f64,
        /// The hold after each meeting now.
        hold: Duration,
        /// What the last sample's cost was weighed against.
        weighed: Option<crate::gaps::Weighed>,
    },
    /// Applying or launching the load failed transiently, retried next tick; or the
    /// load source failed for good and no load runs until its replacement
    /// ([`crate::Reopening`]), reported at every tick until then.
    LoadFault {
        /// The adapter's message.
        message: String,
    },
    /// The device is lost or unsupported: the loop is stopped and the device left idle.
    Stopped {
        /// Why.
        kind: ErrorKind,
        /// The adapter's message.
        message: String,
    },
}

/// What one step did.
#[derive(Clone, Debug, PartialEq)]
pub struct Tick {
    /// When.
    pub at: Time,
    /// The state after the step.
    pub state: State,
    /// The target.
    pub target: Utilization,
    /// A new utilization sample read in this step.
    pub sample: Option<Utilization>,
    /// The latest utilization known.
    pub util: Option<Utilization>,
    /// The duty in force after the step.
    pub duty: Duty,
    /// The width in force after the step (blocks per kernel).
    pub width: Width,
    /// How the load is launched: in bursts on a GPU of our own, one short kernel at a
    /// time beside quiet holders of a context.
    pub shape: LaunchShape,
    /// How many foreign processes cause a yield now (0 while filling, also beside
    /// quiet processes in activity mode and under MPS); a presence the list does not
    /// show counts as one.
    pub foreign: usize,
    /// What a probe of the GPU in this step found ([`crate::LoadSource::probe`]):
    /// whether someone had run since our previous kernel. `None` when no probe ran, or
    /// when the load source could not tell (then NVML's word stands).
    pub probed: Option<bool>,
    /// While filling the gaps of live work: what it is estimated to cost that work, as
    /// a ratio ([`crate::gaps::GapCost`]).
    pub cost: Option<f64>,
    /// Changes in this step.
    pub events: Vec<Event>,
}

/// A fill loop as gpufill runs it: the controller chosen by its kind, boxed.
pub type Loop<P, L> = FillLoop<P, L, Box<dyn Controller + Send>>;

/// What a [`Loop`] is built from besides its probe and load source: the one recipe
/// ([`FillLoop::build`]) for every place that opens a GPU, real or simulated.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoopSettings {
    /// The loop's own settings.
    pub fill: FillSettings,
    /// The yield policy's.
    pub yielding: YieldSettings,
    /// Which controller holds the target.
    pub controller: ControllerKind,
}

impl<P: Probe, L: LoadSource> Loop<P, L> {
    /// The loop over `probe` and `load` that `settings` describe.
    pub fn build(probe: P, load: L, settings: &LoopSettings) -> Self {
        FillLoop::new(
            probe,
            load,
            settings.controller.build(),
            YieldPolicy::new(settings.yielding.clone()),
            settings.fill,
        )
    }
}

/// The loop for one GPU.
pub struct FillLoop<P, L, C> {
    probe: P,
    load: L,
    controller: C,
    policy: YieldPolicy,
    settings: FillSettings,
    shaper: Shaper,
    /// What the loop is doing, with what that state needs to know ([`Phase`]).
    phase: Phase,
    /// The load and launch shape in force on the load source.
    in_force: InForce,
    /// What the loop keeps of its measurements from one step to the next.
    sensed: Sensed,
}

/// How often the process list is read while yielding to a process that is still
/// listed. Filling needs it every tick (a newcomer must be seen before its first kernel);
/// yielding in `presence` mode to a listed process launches nothing whatever else
/// arrives, so a list read less than this ago is reused until one shows no such process;
/// from then on (the grace, the return to filling) it is read every tick again, so no
/// decision to fill rests on a reused list. Reading the list is an NVML call whose CPU
/// cost grows while other processes create and destroy contexts (beside 3 new CUDA
/// processes a second, polling at every 10 ms tick while yielding cost the loop thread
/// several times what this poll does:
/// docs/benchmarks-history.md#faults-sigkill-churn-long-run-scriptsrobustnesssh).
pub const YIELDING_POLL: Duration = Duration::from_millis(100);

/// The loop's state, with the data that belongs to it. [`State`] is its public name;
/// the transitions are in [`FillLoop::enter`] (and a lost device, [`FillLoop::stop`],
/// and a load source that does not run, [`FillLoop::report_no_load`]).
#[derive(Clone, Debug, PartialEq)]
enum Phase {
    /// Before the first step.
    New,
    /// Holding the target.
    Filling {
        /// The controller was replaced: it starts afresh at the next step.
        fresh: bool,
        /// The next sample is not the controller's: its window began before we filled.
        skip_sample: bool,
    },
    /// Idle for others, since `since`.
    Yielding {
        since: Time,
        /// It began as a pause for a quiet holder's burst: filling resumes silently.
        paused: bool,
        /// The load source was released ([`FillSettings::release_after`]).
        released: bool,
        /// In presence mode, the process list read at that time, reused for
        /// [`YIELDING_POLL`].
        list: Option<(Time, Vec<ProcessInfo>)>,
    },
    /// Idle because of a fault: the probe has failed for longer than `fault_hold`, or no
    /// load source runs.
    Blind,
    /// Idle: the target is 0.
    Off,
    /// Idle for good: the device is lost or cannot be measured.
    Stopped,
}

impl Phase {
    fn state(&self) -> State {
        match self {
            Phase::New | Phase::Blind => State::Blind,
            Phase::Filling { .. } => State::Filling,
            Phase::Yielding { .. } => State::Yielding,
            Phase::Off => State::Off,
            Phase::Stopped => State::Stopped,
        }
    }

    fn filling(&self) -> bool {
        matches!(self, Phase::Filling { .. })
    }
}

/// Where one step's measurements lead ([`FillLoop::enter`]).
#[derive(Debug)]
enum Next {
    /// Fill with this load, in this shape; `skip_sample` as the controller left it.
    Fill {
        load: Load,
        shape: LaunchShape,
        skip_sample: bool,
    },
    /// Yield to these processes (or the grace).
    Yield { pids: Vec<u32>, unlisted: bool },
    /// Pause for a quiet holder's work, on this evidence.
    Pause {
        pids: Vec<u32>,
        unlisted: bool,
        sign: Option<OthersSign>,
    },
    /// The target is 0 (the shape the policy chose stays in force).
    Off { shape: LaunchShape },
    /// The probe failed: keep the state and the load for now.
    Hold,
    /// The probe has failed too long.
    Blind,
}

/// The load and launch shape in force on the load source.
#[derive(Clone, Copy, Debug, Default)]
struct InForce {
    load: Load,
    shape: LaunchShape,
}

/// What the loop keeps of its measurements from one step to the next.
#[derive(Debug)]
struct Sensed {
    /// The latest utilization sample.
    last_util: Option<Utilization>,
    /// What the probe saw beyond its list at the last step.
    unlisted: Unlisted,
    /// Our own load's share of the samples (signal 3 of [`crate::unlisted`]).
    own_share: OwnShare,
    /// The foreign PIDs listed at the last step (see [`FillLoop::newcomer_listed`]).
    listed_at_step: Vec<u32>,
    /// Since when nobody who counts has been on the GPU.
    quiet_since: Option<Time>,
    /// Since when the probe has been failing.
    fault_since: Option<Time>,
    /// While filling gaps: the cost estimate and the hold after each meeting.
    gap_cost: Option<GapCost>,
    /// In this step the loop began filling: where [`Event::Filling`] goes among the
    /// tick's events once the load runs.
    announce: Option<usize>,
}

struct Measured {
    foreign: Vec<ProcessInfo>,
    /// When the list kept while yielding was read (`None`: not kept).
    list_read: Option<Time>,
    unlisted: Unlisted,
    sample: Option<Utilization>,
    /// The sample exceeds what our load explains.
    beyond_own: bool,
    /// The sample is new, its window held none of our load, and it shows nothing.
    quiet_sample: bool,
    active: Vec<u32>,
}

impl<P: Probe, L: LoadSource, C: Controller> FillLoop<P, L, C> {
    /// A loop over `probe` and `load`. Nothing is applied until the first step.
    pub fn new(
        probe: P,
        load: L,
        controller: C,
        policy: YieldPolicy,
        settings: FillSettings,
    ) -> Self {
        FillLoop {
            probe,
            load,
            controller,
            policy,
            shaper: Shaper::new(settings.shaping),
            settings,
            phase: Phase::New,
            in_force: InForce::default(),
            sensed: Sensed {
                last_util: None,
                unlisted: Unlisted::ListComplete,
                own_share: OwnShare::new(),
                listed_at_step: Vec::new(),
                quiet_since: None,
                fault_since: None,
                gap_cost: None,
                announce: None,
            },
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> &FillSettings {
        &self.settings
    }

    /// Changes the target from the next step on.
    pub fn set_target(&mut self, target: Utilization) {
        self.settings.target = target;
    }

    /// Replaces the settings from the next step on (a config reload), all but the
    /// target, which is [`FillLoop::set_target`]'s. Nothing restarts: the controller
    /// keeps its state, and a new bound applies at the next step.
    pub fn set_settings(&mut self, settings: FillSettings) {
        self.settings = FillSettings {
            target: self.settings.target,
            ..settings
        };
    }

    /// Replaces the yield policy's settings from the next step on.
    pub fn set_yield_settings(&mut self, settings: YieldSettings) {
        self.policy.set_settings(settings);
    }

    /// Replaces the controller; it starts afresh at the next filling step.
    pub fn set_controller(&mut self, controller: C) {
        self.controller = controller;
        if let Phase::Filling { fresh, .. } = &mut self.phase {
            *fresh = true;
        }
    }

    /// How long the GPU has been free of foreign processes that count (ignore lists
    /// apply) at `now`: since the first step, or since the last one left. `None` while
    /// one is there, before the first step, and while the probe fails.
    pub fn quiet_for(&self, now: Time) -> Option<Duration> {
        self.sensed
            .quiet_since
            .map(|since| now.saturating_since(since))
    }

    /// What the probe saw beyond its process list at the last step:
    /// [`Unlisted::ListComplete`] in the host's PID view; inside a PID namespace, the
    /// memory of processes the list misses (for metrics and status).
    pub fn unlisted(&self) -> Unlisted {
        self.sensed.unlisted
    }

    /// The probe (for adapters that expose more than the trait).
    pub fn probe(&self) -> &P {
        &self.probe
    }

    /// The load source.
    pub fn load_source(&self) -> &L {
        &self.load
    }

    /// One tick: measure, decide, apply. A stopped loop does nothing.
    pub fn step(&mut self, now: Time) -> Tick {
        let mut tick = Tick {
            at: now,
            state: State::Stopped,
            target: self.settings.target,
            sample: None,
            util: self.sensed.last_util,
            duty: self.in_force.load.duty,
            width: self.in_force.load.width,
            shape: self.in_force.shape,
            foreign: 0,
            probed: None,
            cost: None,
            events: Vec::new(),
        };
        if self.phase == Phase::Stopped {
            // Whatever the failed idle left recorded, a stopped loop asks for nothing.
            tick.duty = Duty::ZERO;
            return tick;
        }
        let (next, kept) = match self.measure(now) {
            Ok(measured) => {
                let next = self.decide(now, &measured, &mut tick);
                // While yielding the list is kept for the next ticks (moved, not copied:
                // a yielding tick allocates no more than a filling one needs to).
                (next, measured.list_read.map(|at| (at, measured.foreign)))
            }
            Err((ErrorKind::Transient, message)) => {
                // Blind: whether anyone came cannot be known, so the quiet time restarts.
                self.sensed.quiet_since = None;
                (self.hold_or_go_blind(now, message, &mut tick), None)
            }
            Err((kind, message)) => {
                self.stop(now, kind, message, &mut tick);
                return tick;
            }
        };
        let (desired, shape) = self.enter(now, next, kept, &mut tick);
        tick.state = self.phase.state();
        if shape != self.in_force.shape {
            self.load.set_shape(shape);
            self.in_force.shape = shape;
        }
        tick.shape = self.in_force.shape;
        self.apply(now, desired, &mut tick);
        self.note_load(now);
        self.launch_due(now, &mut tick);
        self.meter_gaps(now, &mut tick);
        self.report_no_load(&mut tick);
        self.release_if_idle_long(now, &mut tick);
        tick
    }

    /// The transitions: from the phase the loop was in to the one `next` leads to, with
    /// the events that the change is worth. Returns the load and shape to put in force.
    /// `kept` is the process list of this step, when a yield in presence mode keeps it.
    fn enter(
        &mut self,
        now: Time,
        next: Next,
        kept: Option<(Time, Vec<ProcessInfo>)>,
        tick: &mut Tick,
    ) -> (Load, LaunchShape) {
        let shape = self.in_force.shape;
        let was = std::mem::replace(&mut self.phase, Phase::New);
        let (phase, load, shape) = match (was, next) {
            (was, Next::Hold) => (was, self.in_force.load, shape),
            (_, Next::Blind) => (Phase::Blind, Load::IDLE, shape),
            (_, Next::Off { shape }) => (Phase::Off, Load::IDLE, shape),
            (
                was,
                Next::Fill {
                    load,
                    shape,
                    skip_sample,
                },
            ) => {
                // Resuming after a pause for a burst is silent (bursts come often). The
                // line goes where it belongs among this tick's events once the load runs
                // ([`FillLoop::report_no_load`]).
                let resumes_silently = matches!(was, Phase::Yielding { paused: true, .. });
                if !was.filling() && !resumes_silently {
                    self.sensed.announce = Some(tick.events.len());
                }
                let filling = Phase::Filling {
                    fresh: false,
                    skip_sample,
                };
                (filling, load, shape)
            }
            (
                Phase::Yielding {
                    since,
                    paused,
                    released,
                    ..
                },
                Next::Yield { pids, unlisted },
            ) => {
                // A pause that turns into a yield is worth a line of its own.
                if paused {
                    tick.events.push(Event::Yielded { pids, unlisted });
                }
                let yielding = Phase::Yielding {
                    since,
                    paused: false,
                    released,
                    list: kept,
                };
                (yielding, Load::IDLE, shape)
            }
            (_, Next::Yield { pids, unlisted }) => {
                tick.events.push(Event::Yielded { pids, unlisted });
                (Phase::yielding(now, false), Load::IDLE, shape)
            }
            (
                Phase::Yielding {
                    since,
                    paused,
                    released,
                    ..
                },
                Next::Pause { .. },
            ) => {
                let yielding = Phase::Yielding {
                    since,
                    paused,
                    released,
                    list: kept,
                };
                (yielding, Load::IDLE, shape)
            }
            (
                _,
                Next::Pause {
                    pids,
                    unlisted,
                    sign,
                },
            ) => {
                tick.events.push(Event::Paused {
                    pids,
                    unlisted,
                    sign,
                });
                (Phase::yielding(now, true), Load::IDLE, shape)
            }
        };
        self.phase = phase;
        (load, shape)
    }

    /// A tick that would fill while no load source runs (a replacement context awaited)
    /// is blind, duty 0; the controller starts afresh once a source runs, as after any
    /// idle spell (its samples meanwhile show none of our load). One that fills with its
    /// load running, after not filling, says so ([`Event::Filling`]).
    fn report_no_load(&mut self, tick: &mut Tick) {
        let announce = self.sensed.announce.take();
        if !self.phase.filling() {
            return;
        }
        if !self.load.is_running() {
            self.phase = Phase::Blind;
            tick.state = State::Blind;
            tick.duty = Duty::ZERO;
        } else if let Some(at) = announce {
            tick.events.insert(at, Event::Filling);
        }
    }

    /// Tells the probe and the own-share signal the load in force from now on.
    fn note_load(&mut self, now: Time) {
        if self.phase == Phase::Stopped {
            return;
        }
        let load = self.in_force.load;
        self.sensed
            .own_share
            .note(self.settings.shaping.reading(load));
        self.probe.note_load(now, load);
    }

    /// While our kernels fill gaps: what they met goes into the cost estimate, and a new
    /// hold after each meeting to the load source ([`GapCost`]). Filling gaps anew starts
    /// a fresh estimate at the shortest hold.
    fn meter_gaps(&mut self, now: Time, tick: &mut Tick) {
        if self.in_force.shape != LaunchShape::Gaps || self.in_force.load.is_idle() {
            self.sensed.gap_cost = None;
            return;
        }
        let cost = self.sensed.gap_cost.get_or_insert_with(|| {
            self.load.set_gap_hold(crate::gaps::MIN_HOLD);
            GapCost::new(crate::gaps::GAP_KERNEL)
        });
        let was_over = cost.over();
        let report = self.load.gaps_seen();
        if let Some(hold) = cost.update(now, report, tick.sample, self.settings.max_cost) {
            self.load.set_gap_hold(hold);
        }
        tick.cost = cost.estimate();
        if let Some(estimate) = cost.estimate().filter(|_| cost.over() != was_over) {
            tick.events.push(Event::CostBound {
                over: cost.over(),
                estimate,
                hold: cost.hold(),
                weighed: cost.weighed(),
            });
        }
    }

    fn launch_due(&mut self, now: Time, tick: &mut Tick) {
        if self.phase == Phase::Stopped {
            return;
        }
        match self.load.launch_due(now) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Transient => tick.events.push(Event::LoadFault {
                message: e.to_string(),
            }),
            Err(e) => self.stop(now, e.kind(), e.to_string(), tick),
        }
    }

    fn release_if_idle_long(&mut self, now: Time, tick: &mut Tick) {
        let Phase::Yielding {
            since, released, ..
        } = &mut self.phase
        else {
            return;
        };
        let due = self
            .settings
            .release_after
            .is_some_and(|after| now.saturating_since(*since) >= after);
        if due && !*released && self.in_force.load.is_idle() {
            match self.load.release(now) {
                Ok(()) => {
                    *released = true;
                    tick.events.push(Event::Released);
                }
                Err(e) => tick.events.push(Event::LoadFault {
                    message: e.to_string(),
                }),
            }
        }
    }

    /// Leaves the device idle (for a shutdown). The loop can be stepped again afterwards.
    ///
    /// # Errors
    /// The load source's error if the idle load could not be applied.
    pub fn idle(&mut self, now: Time) -> Result<(), L::Error> {
        self.load.set_load(now, Load::IDLE)?;
        self.in_force.load = Load::IDLE;
        Ok(())
    }

    /// Runs ticks every `period` on `clock` until `keep_going` returns false or the loop
    /// stops, then leaves the device idle. Returns the last tick. A step that overruns its
    /// tick is followed by the next one at once, then the grid goes on from there
    /// ([`crate::time::next_tick`]): no burst of catch-up ticks.
    pub fn run<K: Clock>(
        &mut self,
        clock: &K,
        period: Duration,
        mut keep_going: impl FnMut(&Tick) -> bool,
    ) -> Tick {
        let tick = drive(clock, period, &mut NoHint, self, |tick| {
            tick.state != State::Stopped && keep_going(tick)
        });
        // Best effort: a failed idle on a lost device has nothing left to stop.
        let _ = self.idle(clock.now());
        tick
    }

    fn measure(&mut self, now: Time) -> Result<Measured, (ErrorKind, String)> {
        let (foreign, list_read) = self.processes(now)?;
        let unlisted = self.probe.unlisted(now).map_err(classify)?;
        self.sensed.unlisted = unlisted;
        let sample = self.probe.utilization(now).map_err(classify)?;
        // Every sample moves the own-share window on, whatever the list.
        let own_share = &mut self.sensed.own_share;
        let window_idle = own_share.window_idle();
        let beyond_own = sample.is_some_and(|s| own_share.beyond(s));
        // A new sample whose window held none of our load and shows nothing beyond it:
        // nobody worked (ends a pause for a burst).
        let quiet_sample = sample.is_some() && window_idle && !beyond_own;
        // Per-process activity is costly to read: only when the policy uses it.
        let active = if self.policy.wants_activity(&foreign, unlisted) {
            self.probe
                .active_processes(now)
                .map_err(classify)?
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        Ok(Measured {
            foreign,
            list_read,
            unlisted,
            sample,
            beyond_own,
            quiet_sample,
            active,
        })
    }

    /// The foreign processes: read every tick, except while yielding in `presence` mode to
    /// a process listed in a read less than [`YIELDING_POLL`] ago, which is then reused
    /// (the decision is to yield either way). Also when the list returned is to be kept
    /// for the next ticks: while yielding in `presence` mode, when it was read.
    fn processes(
        &mut self,
        now: Time,
    ) -> Result<(Vec<ProcessInfo>, Option<Time>), (ErrorKind, String)> {
        let presence = self.policy.settings().mode == YieldMode::Presence;
        let Phase::Yielding { list, .. } = &mut self.phase else {
            return Ok((self.probe.foreign_processes(now).map_err(classify)?, None));
        };
        if !presence {
            return Ok((self.probe.foreign_processes(now).map_err(classify)?, None));
        }
        if let Some((read, kept)) = list
            && now.saturating_since(*read) < YIELDING_POLL
            && self.policy.counts_any(kept)
        {
            return Ok((std::mem::take(kept), Some(*read)));
        }
        let fresh = self.probe.foreign_processes(now).map_err(classify)?;
        Ok((fresh, Some(now)))
    }

    /// What the policy makes of this step's measurements (asking the load source for a
    /// probe of the GPU when it wants one), and the controller's load when it is to fill.
    fn decide(&mut self, now: Time, measured: &Measured, tick: &mut Tick) -> Next {
        if self.sensed.fault_since.take().is_some() {
            tick.events.push(Event::ProbeRecovered);
        }
        let seen = Seen {
            listed: &measured.foreign,
            active: &measured.active,
            unlisted: measured.unlisted,
            beyond_own: measured.beyond_own,
            quiet_sample: measured.quiet_sample,
            held_back: self.load.others_seen(),
        };
        if self.policy.sees_anyone(&seen) {
            self.sensed.quiet_since = None;
        } else {
            self.sensed.quiet_since.get_or_insert(now);
        }
        tick.sample = measured.sample;
        if measured.sample.is_some() {
            self.sensed.last_util = measured.sample;
            tick.util = measured.sample;
        }
        let mut decision = self.policy.decide_seen(now, &seen);
        // Reused, not rebuilt: a steady tick allocates nothing.
        let listed_at_step = &mut self.sensed.listed_at_step;
        listed_at_step.clear();
        listed_at_step.extend(seen.listed.iter().map(|p| p.pid));
        if decision == Decision::Probe {
            decision = self.probe_gpu(now, tick);
        }
        tick.foreign = decision.foreign_count();
        let shape = match decision {
            Decision::FillBeside => LaunchShape::OneInFlight,
            Decision::FillGaps { .. } => LaunchShape::Gaps,
            _ => LaunchShape::Bursts,
        };
        match decision {
            Decision::Yield { pids, unlisted } => Next::Yield { pids, unlisted },
            Decision::Pause {
                pids,
                unlisted,
                sign,
            } => Next::Pause {
                pids,
                unlisted,
                sign,
            },
            // `probe_gpu` above answers it, never with another probe: idle meanwhile.
            Decision::Probe => Next::Pause {
                pids: Vec::new(),
                unlisted: false,
                sign: None,
            },
            Decision::Fill { .. } | Decision::FillBeside | Decision::FillGaps { .. }
                if self.settings.target == Utilization::ZERO =>
            {
                Next::Off { shape }
            }
            Decision::FillGaps { pids } => {
                if self.in_force.shape != LaunchShape::Gaps {
                    tick.events.push(Event::FillingGaps { pids });
                }
                self.fill(now, measured.sample, shape)
            }
            Decision::Fill { unexplained } => {
                if let Some(sign) = unexplained {
                    tick.events.push(Event::Unexplained { sign });
                }
                self.fill(now, measured.sample, shape)
            }
            Decision::FillBeside => self.fill(now, measured.sample, shape),
        }
    }

    /// Asks the load source whether anyone ran on the GPU since our previous kernel and
    /// lets the policy decide on the answer. A failed probe counts as someone there (a
    /// transient fault is reported; a broken context shows at the next launch).
    fn probe_gpu(&mut self, now: Time, tick: &mut Tick) -> Decision {
        let found = match self.load.probe(now) {
            Ok(found) => found,
            Err(e) => {
                tick.events.push(Event::LoadFault {
                    message: e.to_string(),
                });
                Some(true)
            }
        };
        tick.probed = found;
        self.policy.probed(now, found)
    }

    /// Between two steps, while kernels of ours may run: whether a foreign process that
    /// counts has been listed since the last step. Reads only the process list (a few
    /// microseconds), so a runner can call it every few milliseconds for a while when
    /// something hints that a newcomer is starting ([`crate::Hint`]) and step at once
    /// when it returns true. Not filling: false, without reading anything. A failed read
    /// returns true, so the step that follows handles it.
    pub fn newcomer_listed(&mut self, now: Time) -> bool {
        if !self.phase.filling() {
            return false;
        }
        match self.probe.foreign_processes(now) {
            Ok(list) => list.iter().any(|p| {
                !self.sensed.listed_at_step.contains(&p.pid)
                    && self.policy.counts_any(std::slice::from_ref(p))
            }),
            Err(_) => true,
        }
    }

    /// The controller's load for this step. A loop that was not filling, or whose
    /// controller was replaced, starts it afresh and skips the first sample after (its
    /// window began before we filled).
    fn fill(&mut self, now: Time, sample: Option<Utilization>, shape: LaunchShape) -> Next {
        let mut skip_sample = match self.phase {
            Phase::Filling {
                fresh: false,
                skip_sample,
            } => skip_sample,
            _ => {
                self.controller.reset(now);
                true
            }
        };
        let measured = match sample {
            Some(_) if skip_sample => {
                skip_sample = false;
                None
            }
            other => other,
        };
        let share = self.controller.update(now, measured, self.settings.target);
        let load = self
            .shaper
            .shape(share, self.settings.max_duty, self.settings.width);
        Next::Fill {
            load,
            shape,
            skip_sample,
        }
    }

    /// The probe failed: hold the last state and load for `fault_hold`, then go blind.
    fn hold_or_go_blind(&mut self, now: Time, message: String, tick: &mut Tick) -> Next {
        let since = *self.sensed.fault_since.get_or_insert_with(|| {
            tick.events.push(Event::ProbeFault { message });
            now
        });
        let blind = matches!(self.phase, Phase::New | Phase::Blind);
        if now.saturating_since(since) < self.settings.fault_hold && !blind {
            return Next::Hold;
        }
        if !blind {
            tick.events.push(Event::WentBlind);
        }
        Next::Blind
    }

    fn stop(&mut self, now: Time, kind: ErrorKind, message: String, tick: &mut Tick) {
        // Best effort: on a lost device this fails too, and there is nothing left to stop.
        let _ = self.idle(now);
        self.phase = Phase::Stopped;
        tick.state = State::Stopped;
        tick.duty = Duty::ZERO;
        tick.events.push(Event::Stopped { kind, message });
    }

    fn apply(&mut self, now: Time, desired: Load, tick: &mut Tick) {
        if desired != self.in_force.load {
            match self.load.set_load(now, desired) {
                Ok(()) => self.in_force.load = desired,
                Err(e) if e.kind() == ErrorKind::Transient => {
                    tick.events.push(Event::LoadFault {
                        message: e.to_string(),
                    });
                }
                Err(e) => self.stop(now, e.kind(), e.to_string(), tick),
            }
        }
        tick.duty = self.in_force.load.duty;
        tick.width = self.in_force.load.width;
    }
}

impl<P: Probe, L: LoadSource, C: Controller> Driven for FillLoop<P, L, C> {
    type Step = Tick;

    fn step(&mut self, now: Time) -> Tick {
        FillLoop::step(self, now)
    }

    fn newcomer_listed(&mut self, now: Time) -> bool {
        FillLoop::newcomer_listed(self, now)
    }
}

impl Phase {
    /// Idle for others from `now`, as a pause for a burst (`paused`) or a yield.
    fn yielding(now: Time, paused: bool) -> Phase {
        Phase::Yielding {
            since: now,
            paused,
            released: false,
            list: None,
        }
    }
}

fn classify<E: DeviceError>(e: E) -> (ErrorKind, String) {
    (e.kind(), e.to_string())
}
