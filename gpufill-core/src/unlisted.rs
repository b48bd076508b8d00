//! Seeing the GPU's other users when the process list does not show them.
//!
//! NVML's compute-process list is complete only in the host's PID view. Inside a PID
//! namespace of our own (a container without `hostPID`, `unshare --pid`), NVML lists only
//! the processes of our namespace, under their namespace PIDs: everyone else on the GPU
//! is missing, however much memory or time they take (measured:
//! docs/benchmarks.md#inside-a-pid-namespace-of-its-own-scriptsns_signalspy-scriptsnamespace_benchpy;
//! raw in `docs/data/ns-signals-h100.txt`). Which view we have is a [`PidView`],
//! found once at start by comparing `/proc/self/ns/pid` with the host's.
//!
//! In the namespace view three device-wide signals still show the others, each with its
//! own lead or lag (the figures are in that section and the data file):
//!
//! 1. **Memory beyond the listed processes** ([`UnexplainedMemory`]): device memory in use
//!    (`nvmlDeviceGetMemoryInfo` v2 `used`, which leaves out `reserved`) minus what the
//!    listed processes hold (ours included), minus the driver's share per listed context
//!    ([`DRIVER_PER_CONTEXT`]), minus a learned baseline. It **leads**: a newcomer's
//!    context takes memory before NVML lists it even in the host view, and crossed the
//!    [`UNLISTED_MARGIN`] well before its context was ready; an idle holder shows
//!    for as long as it lives. It says nothing about work.
//! 2. **Per-process samples of PIDs that are neither ours nor listed**: NVML returns
//!    other processes' samples under their host PIDs inside the namespace too. They
//!    **lag**: at best one sample period, and the first sample of a new PID came
//!    seconds after its work began.
//! 3. **Utilization beyond our own load** ([`OwnShare`]): **coarse and lagging**. A light
//!    job beside a 50 % fill did not show at all (the device kept reading about the
//!    fill); heavy jobs do, within a sample.
//!
//! The probe reports (1) as an [`Unlisted`] every tick; the loop adds (2) and (3), and the
//! yield policy treats whatever they show as one foreign process without a PID. In the
//! host view the list is complete ([`Unlisted::ListComplete`]) and none of this runs.

use std::collections::VecDeque;
use std::time::Duration;

use crate::time::Time;
use crate::units::Utilization;

const MIB: u64 = 1 << 20;

/// The driver's device memory per CUDA context that NVML attributes to no process: the
/// device used this much more than it listed with our context alone, and about twice
/// this with a PyTorch job beside it
/// (docs/benchmarks.md#inside-a-pid-namespace-of-its-own-scriptsns_signalspy-scriptsnamespace_benchpy). Subtracted
/// once per listed context, so listed processes that come and go (a sidecar in our
/// namespace) do not move the unexplained memory.
pub const DRIVER_PER_CONTEXT: u64 = 8 * MIB;

/// How far the unexplained memory must rise above its baseline to mean a context that
/// is not listed. Alone, the device's memory stayed flat to the MiB, so any margin
/// keeps off noise; 16 MiB (two contexts' worth of driver share) leaves room for
/// [`DRIVER_PER_CONTEXT`] being off on other GPUs and drivers, and is crossed early in a
/// newcomer's context creation, well before its context was ready, where a 32 MiB
/// margin was crossed only shortly before (both in the section above).
pub const UNLISTED_MARGIN: u64 = 16 * MIB;

/// The most the learned baseline may hold. Every CUDA context takes far more (ours with
/// no stack and PyTorch's: docs/benchmarks.md#the-gpu-itself-measured-before-gpufill-probes;
/// about 100 MiB on a 34-SM GPU, as reported in llama.cpp pull request 23604), so
/// a baseline learned while a holder is already there (present from the start, or for
/// longer than [`BASELINE_WINDOW`]) can never absorb it: baseline plus margin stays
/// below any context.
pub const MAX_BASELINE: u64 = 64 * MIB;

/// The baseline is the least unexplained memory seen over this window (capped at
/// [`MAX_BASELINE`]): it follows the driver down at once and up only after a window with
/// nothing lower, so a driver that keeps a few MiB more for good stops looking like a
/// foreign process after ten minutes, while anything larger than a context never does.
pub const BASELINE_WINDOW: Duration = Duration::from_secs(600);

/// A reading more than [`UNLISTED_MARGIN`] below the baseline is learned only once
/// such readings have lasted this long. The list and device memory are read microseconds
/// apart, so a listed process that leaves in between (or whose memory the driver frees
/// before the list drops it) reads as a deep dip; learned at once, it would lower the
/// baseline and make every ordinary reading after it look like a foreign context for a
/// whole [`BASELINE_WINDOW`]. A baseline that stays high a little longer only makes the
/// signal less sensitive meanwhile.
pub const BASELINE_DROP_AFTER: Duration = Duration::from_secs(5);

/// The baseline window is kept as this many minima, one per slice of the window.
const BASELINE_SLICES: u32 = 10;

/// How far utilization must exceed what our own load explains to count as someone
/// else's work. Alone, the device read 48-53 % holding 50 % (a few points either side of
/// our duty); a heavy job beside us read 63-100 %. A light job did not show at all, so
/// this signal catches heavy work only.
pub const BEYOND_OWN_MARGIN: f64 = 0.10;

/// The inode of the host's (the initial) PID namespace, `PROC_PID_INIT_INO` in the
/// kernel: a constant since Linux 3.8, so `/proc/self/ns/pid` reads `pid:[4026531836]`
/// exactly when we are in the host's PID namespace.
pub const INIT_PID_NAMESPACE_INODE: u64 = 0xEFFF_FFFC;

/// Which PIDs NVML shows us, and whether its process list is complete.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PidView {
    /// The host's PID namespace: NVML lists every compute process, by host PID.
    #[default]
    Host,
    /// A PID namespace of our own (a container without `hostPID`): NVML lists only our
    /// namespace's processes, under namespace PIDs; the others must be seen otherwise.
    Namespace,
}

impl PidView {
    /// The view given the target of the `/proc/self/ns/pid` link (`pid:[4026531836]` on
    /// the host). An unreadable link (`None`) or an unexpected one gives
    /// [`PidView::Namespace`], the safe side: it only adds signals.
    pub fn from_pid_namespace_link(link: Option<&str>) -> PidView {
        let inode = link
            .and_then(|l| l.strip_prefix("pid:["))
            .and_then(|l| l.strip_suffix(']'))
            .and_then(|n| n.parse::<u64>().ok());
        if inode == Some(INIT_PID_NAMESPACE_INODE) {
            PidView::Host
        } else {
            PidView::Namespace
        }
    }

    /// `host` or `namespace`, for logs, metrics and `gpufill status`.
    pub fn as_str(self) -> &'static str {
        match self {
            PidView::Host => "host",
            PidView::Namespace => "namespace",
        }
    }

    /// Whether NVML's process list shows every compute process.
    pub fn list_complete(self) -> bool {
        self == PidView::Host
    }
}

impl std::fmt::Display for PidView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the probe can tell about processes missing from its process list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Unlisted {
    /// The list shows every process (the host view): nothing else to look for.
    #[default]
    ListComplete,
    /// The list may miss processes, and device memory shows none.
    Explained,
    /// Device memory beyond the listed processes and the driver's baseline, bytes: a
    /// context that is not listed.
    Memory(u64),
    /// The list may miss processes and memory cannot tell (the driver gives no
    /// per-process sizes, or no memory reading): only activity can show them.
    Unknown,
}

impl Unlisted {
    /// Whether the process list may miss processes.
    pub fn partial(self) -> bool {
        self != Unlisted::ListComplete
    }

    /// The memory of unlisted contexts, when memory shows one.
    pub fn memory_bytes(self) -> Option<u64> {
        match self {
            Unlisted::Memory(bytes) => Some(bytes),
            _ => None,
        }
    }
}

/// One reading of device memory against the process list, for [`UnexplainedMemory`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryReading {
    /// Device memory in use, bytes (NVML's v2 `used`, without `reserved`).
    pub used_bytes: u64,
    /// What the listed processes hold, ours included, summed; `None` when one is listed
    /// without a size (the memory signal cannot work then).
    pub listed_bytes: Option<u64>,
    /// How many contexts those are (each has [`DRIVER_PER_CONTEXT`] besides its size).
    pub listed_contexts: u32,
}

impl MemoryReading {
    /// Memory that neither the listed processes nor their driver shares explain, bytes
    /// (negative when the driver holds less than assumed); `None` without sizes.
    pub fn unexplained(&self) -> Option<i64> {
        let listed = self.listed_bytes?;
        let driver = u64::from(self.listed_contexts) * DRIVER_PER_CONTEXT;
        Some(to_i64(self.used_bytes) - to_i64(listed) - to_i64(driver))
    }
}

fn to_i64(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// Signal 1: learns the driver's own baseline of unexplained memory and reports memory
/// beyond it plus [`UNLISTED_MARGIN`] as [`Unlisted::Memory`]. Pure: the probe reads the
/// device and the list, this decides.
///
/// The baseline is the least unexplained memory over [`BASELINE_WINDOW`], capped at
/// [`MAX_BASELINE`]; it follows small moves down at once, a deep drop only after
/// [`BASELINE_DROP_AFTER`], and moves up only as the window forgets lower readings.
#[derive(Clone, Debug)]
pub struct UnexplainedMemory {
    /// Minima of the unexplained memory per slice of [`BASELINE_WINDOW`], oldest first,
    /// with each slice's start.
    slices: VecDeque<(Time, i64)>,
    /// Since when readings have been deep below the baseline (not yet learned).
    low_since: Option<Time>,
}

impl Default for UnexplainedMemory {
    fn default() -> Self {
        UnexplainedMemory {
            slices: VecDeque::with_capacity(BASELINE_SLICES as usize + 1),
            low_since: None,
        }
    }
}

impl UnexplainedMemory {
    /// A learner that has seen nothing yet.
    pub fn new() -> Self {
        UnexplainedMemory::default()
    }

    /// Takes the reading at `now` (`None`: memory could not be read) and says what it
    /// shows. Never [`Unlisted::ListComplete`]: the caller knows the list is partial.
    pub fn observe(&mut self, now: Time, reading: Option<MemoryReading>) -> Unlisted {
        let Some(unexplained) = reading.and_then(|r| r.unexplained()) else {
            return Unlisted::Unknown;
        };
        self.learn(now, unexplained);
        let beyond = unexplained - self.baseline().unwrap_or(unexplained);
        if beyond > to_i64(UNLISTED_MARGIN) {
            Unlisted::Memory(u64::try_from(beyond).unwrap_or(0))
        } else {
            Unlisted::Explained
        }
    }

    /// The baseline in force, bytes: the least unexplained memory over the window,
    /// at most [`MAX_BASELINE`]; `None` before the first reading.
    pub fn baseline(&self) -> Option<i64> {
        let least = self.slices.iter().map(|&(_, min)| min).min()?;
        Some(least.min(to_i64(MAX_BASELINE)))
    }

    fn learn(&mut self, now: Time, unexplained: i64) {
        let deep = self
            .baseline()
            .is_some_and(|b| unexplained < b - to_i64(UNLISTED_MARGIN));
        if !deep {
            self.low_since = None;
        } else {
            let since = *self.low_since.get_or_insert(now);
            if now.saturating_since(since) < BASELINE_DROP_AFTER {
                return;
            }
        }
        let slice = BASELINE_WINDOW / BASELINE_SLICES;
        match self.slices.back_mut() {
            Some((start, min)) if now.saturating_since(*start) < slice => {
                *min = (*min).min(unexplained);
            }
            _ => {
                // Within capacity: no allocation once running.
                self.slices.push_back((now, unexplained));
            }
        }
        while self.slices.len() > BASELINE_SLICES as usize {
            self.slices.pop_front();
        }
    }
}

/// Signal 3: utilization beyond what our own load explains. The loop notes the reading
/// its load should give at every tick ([`OwnShare::note`]); on each new sample
/// ([`OwnShare::beyond`]) the sample is compared with the most our load could have put
/// in its window: the largest noted over the interval since the previous sample and the
/// one before, since a sample's window starts before the previous sample is read.
///
/// A duty reads a little below itself (launch overhead; more with one short kernel in
/// flight, where the controller asks, say, 0.54 to read 0.50), so comparing samples with
/// the duty would widen the margin by that shortfall. `OwnShare` therefore learns how much
/// of a steady duty the device reads (from samples that show nobody else, between
/// [`OWN_GAIN_MIN`] and 1) and compares each sample with the duty times that.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OwnShare {
    last: f64,
    current: f64,
    previous: f64,
    gain: f64,
}

/// The least share of a steady duty `OwnShare` takes the device to read: a lower reading
/// is more likely someone else's absence than our overhead.
pub const OWN_GAIN_MIN: f64 = 0.7;

impl Default for OwnShare {
    fn default() -> Self {
        OwnShare {
            last: 0.0,
            current: 0.0,
            previous: 0.0,
            gain: 1.0,
        }
    }
}

impl OwnShare {
    /// Nothing of ours noted yet.
    pub fn new() -> Self {
        OwnShare::default()
    }

    /// The load now in force should read `expected` (a fraction: the duty, or with the
    /// `sm` metric the SM share).
    pub fn note(&mut self, expected: f64) {
        self.last = expected;
        self.current = self.current.max(expected);
    }

    /// Whether the window of the next sample holds none of our load (nothing noted over
    /// the interval since the previous sample and the one before): such a sample shows
    /// only others' work. Ask before [`OwnShare::beyond`], which starts the next interval.
    pub fn window_idle(&self) -> bool {
        self.current == 0.0 && self.previous == 0.0
    }

    /// Whether the new `sample` exceeds what our load explains by more than
    /// [`BEYOND_OWN_MARGIN`]; starts the next interval.
    pub fn beyond(&mut self, sample: Utilization) -> bool {
        let own = self.current.max(self.previous);
        let steady = self.current == self.previous;
        self.previous = self.current;
        self.current = self.last;
        let beyond = sample.fraction() - own * self.gain > BEYOND_OWN_MARGIN;
        if !beyond && steady && own >= 0.1 {
            // A steady duty and nobody else seen: learn what it reads.
            let read = (sample.fraction() / own).clamp(OWN_GAIN_MIN, 1.0);
            self.gain = 0.75 * self.gain + 0.25 * read;
        }
        beyond
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mib(n: u64) -> u64 {
        n * MIB
    }

    /// A reading as measured (module docs): our 254 MiB listed, `used_mib` on the device.
    fn ours_listed(used_mib: u64) -> Option<MemoryReading> {
        Some(MemoryReading {
            used_bytes: mib(used_mib),
            listed_bytes: Some(mib(254)),
            listed_contexts: 1,
        })
    }

    fn secs(s: f64) -> Time {
        Time::from_secs_f64(s)
    }

    #[test]
    fn the_host_namespace_is_known_by_its_inode_and_anything_else_is_a_namespace() {
        let view = PidView::from_pid_namespace_link;
        assert_eq!(view(Some("pid:[4026531836]")), PidView::Host);
        assert_eq!(view(Some("pid:[4026532261]")), PidView::Namespace);
        assert_eq!(view(None), PidView::Namespace);
        assert_eq!(view(Some("garbage")), PidView::Namespace);
        assert_eq!(PidView::Host.as_str(), "host");
        assert_eq!(PidView::Namespace.to_string(), "namespace");
        assert!(PidView::Host.list_complete() && !PidView::Namespace.list_complete());
    }

    #[test]
    fn a_newcomer_is_seen_from_its_second_reading_as_on_the_h100() {
        // The namespace view of docs/data/ns-signals-h100.txt, seconds from the job's
        // start; its context was ready at 6.314 s.
        let mut m = UnexplainedMemory::new();
        for t in [0.0, 2.0, 4.0, 6.0] {
            assert_eq!(m.observe(secs(t), ours_listed(262)), Unlisted::Explained);
        }
        assert_eq!(m.baseline(), Some(0));
        assert_eq!(
            m.observe(secs(6.112), ours_listed(270)),
            Unlisted::Explained
        );
        assert_eq!(
            m.observe(secs(6.124), ours_listed(281)),
            Unlisted::Memory(mib(19))
        );
        assert_eq!(
            m.observe(secs(6.315), ours_listed(880)),
            Unlisted::Memory(mib(618))
        );
        // It leaves: back to what the list explains.
        assert_eq!(m.observe(secs(14.4), ours_listed(262)), Unlisted::Explained);
    }

    #[test]
    fn a_holder_there_from_the_start_is_never_absorbed() {
        let mut m = UnexplainedMemory::new();
        // 612 MiB of a PyTorch holder plus its driver share, unlisted from the first read.
        for i in 0..10_000 {
            let seen = m.observe(Time::from_millis(i * 360), ours_listed(262 + 620));
            assert_eq!(seen, Unlisted::Memory(mib(620) - MAX_BASELINE), "{i}");
        }
        assert_eq!(m.baseline(), Some(to_i64(MAX_BASELINE)));
    }

    #[test]
    fn the_driver_moving_a_little_is_not_a_process() {
        let mut m = UnexplainedMemory::new();
        for i in 0..2_000u64 {
            // A few MiB either way, as a driver might.
            let wobble = [0, 2, 6, 3, 0, 12, 4][(i % 7) as usize];
            let seen = m.observe(Time::from_millis(i * 50), ours_listed(262 + wobble));
            assert_eq!(seen, Unlisted::Explained, "{i}");
        }
    }

    #[test]
    fn a_driver_that_keeps_more_for_good_is_relearned_after_the_window() {
        let mut m = UnexplainedMemory::new();
        m.observe(secs(0.0), ours_listed(262));
        // 30 MiB more from 1 s on, for good: a foreign process for now...
        assert_eq!(
            m.observe(secs(1.0), ours_listed(292)),
            Unlisted::Memory(mib(30))
        );
        let mut t = 1.0;
        while t < 1.0 + BASELINE_WINDOW.as_secs_f64() + 60.0 {
            m.observe(secs(t), ours_listed(292));
            t += 1.0;
        }
        // ... and the driver's own once the window holds nothing lower.
        assert_eq!(m.observe(secs(t), ours_listed(292)), Unlisted::Explained);
        assert_eq!(m.baseline(), Some(to_i64(mib(30))));
        // A newcomer still shows against the new baseline.
        assert_eq!(
            m.observe(secs(t + 1.0), ours_listed(292 + 620)),
            Unlisted::Memory(mib(620))
        );
    }

    #[test]
    fn a_context_longer_than_the_window_is_still_a_context() {
        let mut m = UnexplainedMemory::new();
        m.observe(secs(0.0), ours_listed(262));
        for s in 1..3_000 {
            let seen = m.observe(secs(f64::from(s)), ours_listed(262 + 620));
            assert!(seen.memory_bytes().is_some_and(|b| b >= mib(556)), "{s}");
        }
    }

    #[test]
    fn listed_contexts_come_and_go_without_moving_the_signal() {
        let mut m = UnexplainedMemory::new();
        m.observe(secs(0.0), ours_listed(262));
        // Three more listed contexts in our namespace, each with its driver share.
        let sidecars = MemoryReading {
            used_bytes: mib(262 + 3 * (300 + 8)),
            listed_bytes: Some(mib(254 + 3 * 300)),
            listed_contexts: 4,
        };
        assert_eq!(m.observe(secs(1.0), Some(sidecars)), Unlisted::Explained);
    }

    #[test]
    fn a_listed_process_leaving_between_the_two_reads_does_not_lower_the_baseline() {
        let mut m = UnexplainedMemory::new();
        for i in 0..20 {
            m.observe(Time::from_millis(i * 50), ours_listed(262));
        }
        // The list still shows a 612 MiB sibling whose memory is already freed.
        let torn = MemoryReading {
            used_bytes: mib(262),
            listed_bytes: Some(mib(254 + 612)),
            listed_contexts: 2,
        };
        assert_eq!(m.observe(secs(1.0), Some(torn)), Unlisted::Explained);
        for i in 0..200 {
            let t = Time::from_millis(1050 + i * 50);
            assert_eq!(m.observe(t, ours_listed(262)), Unlisted::Explained, "{t:?}");
        }
        assert_eq!(m.baseline(), Some(0));
    }

    #[test]
    fn a_lasting_drop_is_learned_after_a_while() {
        let mut m = UnexplainedMemory::new();
        // A holder there from the start (baseline capped), then gone for good.
        m.observe(secs(0.0), ours_listed(262 + 620));
        assert_eq!(m.baseline(), Some(to_i64(MAX_BASELINE)));
        let mut t = 0.05;
        while t < BASELINE_DROP_AFTER.as_secs_f64() + 0.1 {
            assert_eq!(m.observe(secs(t), ours_listed(262)), Unlisted::Explained);
            t += 0.05;
        }
        assert_eq!(m.baseline(), Some(0));
        // Now a newcomer shows from 16 MiB on, not only beyond the cap.
        assert_eq!(
            m.observe(secs(t), ours_listed(262 + 20)),
            Unlisted::Memory(mib(20))
        );
    }

    #[test]
    fn without_sizes_or_a_reading_memory_cannot_tell() {
        let mut m = UnexplainedMemory::new();
        let no_sizes = MemoryReading {
            used_bytes: mib(262),
            listed_bytes: None,
            listed_contexts: 1,
        };
        assert_eq!(m.observe(secs(0.0), Some(no_sizes)), Unlisted::Unknown);
        assert_eq!(m.observe(secs(0.1), None), Unlisted::Unknown);
        assert_eq!(m.baseline(), None);
        assert!(Unlisted::Unknown.partial() && !Unlisted::ListComplete.partial());
    }

    #[test]
    fn the_baseline_keeps_ten_slices_whatever_the_run_length() {
        let mut m = UnexplainedMemory::new();
        for s in 0..100_000 {
            m.observe(secs(f64::from(s)), ours_listed(262));
        }
        assert!(m.slices.len() <= BASELINE_SLICES as usize);
        assert!(m.slices.capacity() <= BASELINE_SLICES as usize + 1);
    }

    fn util(p: f64) -> Utilization {
        Utilization::from_percent(p).unwrap()
    }

    #[test]
    fn our_own_duty_is_not_someone_elses_work() {
        let mut own = OwnShare::new();
        own.note(0.5);
        for u in [48.0, 53.0, 50.0, 59.0] {
            own.note(0.5);
            assert!(!own.beyond(util(u)), "{u}");
        }
        assert!(own.beyond(util(63.0)));
    }

    #[test]
    fn it_learns_what_our_duty_reads_so_the_margin_stays_ten_points() {
        // One kernel in flight: the controller asks 0.57 to read 0.50.
        let mut own = OwnShare::new();
        for _ in 0..30 {
            own.note(0.57);
            assert!(!own.beyond(util(50.0)));
        }
        // A burst that adds 12 points: 7 above the duty asked, 12 above what it reads.
        own.note(0.57);
        assert!(own.beyond(util(62.0)));
        own.note(0.57);
        assert!(!own.beyond(util(58.0)));
        // It never takes the device to read less than OWN_GAIN_MIN of the duty.
        let mut idle_device = OwnShare::new();
        for _ in 0..50 {
            idle_device.note(0.5);
            idle_device.beyond(util(10.0));
        }
        idle_device.note(0.5);
        assert!(idle_device.beyond(util(0.5 * OWN_GAIN_MIN * 100.0 + 11.0)));
        idle_device.note(0.5);
        assert!(!idle_device.beyond(util(0.5 * OWN_GAIN_MIN * 100.0 + 9.0)));
    }

    #[test]
    fn a_sample_still_showing_our_old_duty_is_ours() {
        let mut own = OwnShare::new();
        own.note(0.9);
        assert!(!own.beyond(util(90.0)));
        // We stopped (a yield, or a target step to 10 %): the next two samples may
        // still hold the old duty in their windows.
        own.note(0.0);
        assert!(!own.beyond(util(90.0)));
        own.note(0.0);
        assert!(!own.beyond(util(40.0)));
        own.note(0.0);
        // Now only someone else can be busy.
        assert!(own.beyond(util(30.0)));
        assert!(!own.beyond(util(5.0)));
    }
}
