//! Finding our own entry in NVML's process list, and keeping it right while we run.
//!
//! On driver 580 NVML translates PIDs into the caller's PID namespace: inside a PID
//! namespace of our own it lists us under `std::process::id()` (as measured:
//! docs/benchmarks.md#inside-a-pid-namespace-of-its-own-scriptsns_signalspy-scriptsnamespace_benchpy;
//! raw in docs/data/ns-signals-h100.txt), as on the host. So our own PID, when listed, is ours
//! and only it ([`OwnProcess::pid`]): nothing to guess.
//!
//! Where it is not listed (a driver that shows host PIDs in a container), the CLI
//! snapshots the device ([`crate::Nvml::snapshot`]) just before and just after creating
//! its CUDA context, and the PIDs that appeared in between are **candidates**
//! ([`identify_own_context`]). A candidate can be wrong: a newcomer that opened its
//! context in the same fraction of a second would be taken for ours for its whole life,
//! and so would a later process that reuses its PID. So candidates are re-checked while
//! gpufill runs, and one that fails a check is not ours from then on (it becomes
//! foreign, and the yield policy sees it):
//!
//! - **Memory** ([`OwnProcess::recheck_list`]): we allocate nothing, so our context's
//!   memory stays what it was when it was created (flat for as long as the measured run
//!   lasted: the same section), and our own probe never sees our context half made (it runs in the
//!   thread that opens it). A candidate listed with more than [`OWN_MEMORY_TOLERANCE`]
//!   more or less than at identification is someone else: a newcomer's context grows
//!   while it is created (the same section), and a process reusing a PID comes with its
//!   own size.
//! - **Work** ([`OwnProcess::recheck_work`]): a candidate whose per-process samples show
//!   kernels in a window in which we ran nothing is not ours; nor, while we filled for a
//!   whole window, is a candidate that shows no kernel when another candidate does. Each
//!   must be seen in [`WORK_STRIKES`] separate reads (samples are irregular).

/// How far a candidate's listed memory may move from its size at identification and
/// still be our context: twice the margin that device memory is read with
/// ([`gpufill_core::unlisted::UNLISTED_MARGIN`]); our own context does not move at all.
pub const OWN_MEMORY_TOLERANCE: u64 = 2 * gpufill_core::unlisted::UNLISTED_MARGIN;

/// Reads of per-process samples that must disagree with our load before a candidate is
/// dropped on that ground.
pub const WORK_STRIKES: u8 = 2;

/// One snapshot of a device around our context's creation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The compute processes listed (MPS clients included), with their sizes.
    pub processes: Vec<gpufill_core::ProcessInfo>,
    /// Device memory in use (NVML's v2 `used`), when it could be read.
    pub used_bytes: Option<u64>,
}

impl Snapshot {
    fn pids(&self) -> Vec<u32> {
        self.processes.iter().map(|p| p.pid).collect()
    }

    fn memory_of(&self, pid: u32) -> Option<u64> {
        self.processes
            .iter()
            .find(|p| p.pid == pid)
            .and_then(|p| p.used_memory_bytes)
    }
}

/// A PID that appeared with our context, not yet proven someone else's.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Candidate {
    pid: u32,
    /// Its listed memory at identification (or at the first read with a size).
    memory: Option<u64>,
    strikes: u8,
}

/// Which PIDs on a device are gpufill's own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnProcess {
    /// Our PIDs as NVML lists them, sorted. Empty when nothing of ours is listed.
    pub pids: Vec<u32>,
    /// Several PIDs appeared while our context was created and none is our own PID:
    /// all of them count as ours until the re-checks tell them apart (candidates). The
    /// CLI should warn.
    pub ambiguous: bool,
    /// Our context's device memory, bytes, when known: our entry's listed size at
    /// identification, or, with nothing of ours listed, how much device memory grew
    /// across our context's creation (what to count as ours when reading device
    /// memory, [`gpufill_core::unlisted`]).
    pub context_bytes: Option<u64>,
    /// The PIDs found only by appearing (not our own PID): re-checked while running.
    candidates: Vec<Candidate>,
}

impl OwnProcess {
    /// No own PID: for a probe that runs without a CUDA context of its own.
    pub fn none() -> Self {
        OwnProcess::default()
    }

    /// Exactly `pid` (our `std::process::id()`, listed as such): never re-checked.
    pub fn pid(pid: u32) -> Self {
        OwnProcess {
            pids: vec![pid],
            ..OwnProcess::default()
        }
    }

    /// Whether `pid` is one of ours.
    pub fn contains(&self, pid: u32) -> bool {
        self.pids.contains(&pid)
    }

    /// Whether our PIDs are candidates (found by appearing) rather than our own PID.
    pub fn has_candidates(&self) -> bool {
        !self.candidates.is_empty()
    }

    /// Whether per-process samples are worth reading to tell several candidates apart.
    pub fn needs_work_checks(&self) -> bool {
        self.candidates.len() > 1
    }

    fn from_candidates(candidates: Vec<Candidate>, context_bytes: Option<u64>) -> Self {
        let mut own = OwnProcess {
            pids: Vec::new(),
            ambiguous: false,
            context_bytes,
            candidates,
        };
        own.candidates.sort_unstable_by_key(|c| c.pid);
        own.candidates.dedup_by_key(|c| c.pid);
        own.sync();
        own
    }

    fn sync(&mut self) {
        self.pids = self.candidates.iter().map(|c| c.pid).collect();
        self.ambiguous = self.candidates.len() > 1;
    }

    /// Drops the candidates for which `not_ours` holds and returns their PIDs.
    fn drop_where(&mut self, mut not_ours: impl FnMut(&mut Candidate) -> bool) -> Vec<u32> {
        let mut dropped = Vec::new();
        self.candidates.retain_mut(|c| {
            let drop = not_ours(c);
            if drop {
                dropped.push(c.pid);
            }
            !drop
        });
        if !dropped.is_empty() {
            self.sync();
        }
        dropped
    }

    /// The memory check against a full process list: a candidate listed with more than
    /// [`OWN_MEMORY_TOLERANCE`] more or less than at identification is not ours.
    /// Returns the PIDs dropped (now foreign).
    pub fn recheck_list(&mut self, list: &[gpufill_core::ProcessInfo]) -> Vec<u32> {
        if self.candidates.is_empty() {
            return Vec::new();
        }
        self.drop_where(|c| {
            let Some(now) = list
                .iter()
                .find(|p| p.pid == c.pid)
                .and_then(|p| p.used_memory_bytes)
            else {
                return false;
            };
            match c.memory {
                Some(then) => now.abs_diff(then) > OWN_MEMORY_TOLERANCE,
                None => {
                    c.memory = Some(now);
                    false
                }
            }
        })
    }

    /// The work check against one read of per-process samples: `working` are the PIDs
    /// with kernels in the read's windows. `idle_throughout`: we ran nothing for the
    /// whole of those windows; `busy_throughout`: we filled for the whole of them. A
    /// candidate that disagrees with our load in [`WORK_STRIKES`] reads is dropped;
    /// returns the PIDs dropped (now foreign).
    pub fn recheck_work(
        &mut self,
        working: &[u32],
        idle_throughout: bool,
        busy_throughout: bool,
    ) -> Vec<u32> {
        if self.candidates.is_empty() {
            return Vec::new();
        }
        let any_candidate_works = self.candidates.iter().any(|c| working.contains(&c.pid));
        self.drop_where(|c| {
            let works = working.contains(&c.pid);
            let disagrees =
                (idle_throughout && works) || (busy_throughout && any_candidate_works && !works);
            if disagrees {
                c.strikes = c.strikes.saturating_add(1);
            }
            c.strikes >= WORK_STRIKES
        })
    }
}

/// Our PIDs, from the device's compute PIDs `before` and `after` our CUDA context
/// was created, and our own PID `my_pid` (`std::process::id()`), without sizes: the
/// candidates' memory is learned at the first full read. See [`identify_own_context`].
pub fn identify_own(before: &[u32], after: &[u32], my_pid: u32) -> OwnProcess {
    if after.contains(&my_pid) || before.contains(&my_pid) {
        return OwnProcess::pid(my_pid);
    }
    let candidates = after
        .iter()
        .filter(|pid| !before.contains(pid))
        .map(|&pid| Candidate {
            pid,
            memory: None,
            strikes: 0,
        })
        .collect();
    OwnProcess::from_candidates(candidates, None)
}

/// Our PIDs and our context's memory, from snapshots of the device `before` and `after`
/// our CUDA context was created, and our own PID `my_pid` (`std::process::id()`):
///
/// - `my_pid` listed (the host, or a driver that translates PIDs into our namespace):
///   it is ours, and only it; our context's memory is its listed size.
/// - Otherwise the PIDs that appeared are candidates, re-checked while running by their
///   memory ([`OwnProcess::recheck_list`]) and work ([`OwnProcess::recheck_work`]):
///   a newcomer that started with us, or a later process reusing a candidate's PID,
///   becomes foreign. Several are [`OwnProcess::ambiguous`] (under MPS the server starts
///   with the first client, so it appears with us). One candidate's listed size is our
///   context's.
/// - None appeared (nothing of ours is listed): our context's memory is how much device
///   memory grew across its creation, when both snapshots read it.
pub fn identify_own_context(before: &Snapshot, after: &Snapshot, my_pid: u32) -> OwnProcess {
    let (before_pids, after_pids) = (before.pids(), after.pids());
    if after_pids.contains(&my_pid) || before_pids.contains(&my_pid) {
        return OwnProcess {
            context_bytes: after.memory_of(my_pid).or_else(|| before.memory_of(my_pid)),
            ..OwnProcess::pid(my_pid)
        };
    }
    let candidates: Vec<Candidate> = after_pids
        .iter()
        .filter(|pid| !before_pids.contains(pid))
        .map(|&pid| Candidate {
            pid,
            memory: after.memory_of(pid),
            strikes: 0,
        })
        .collect();
    let context_bytes = match candidates.as_slice() {
        [one] => one.memory,
        [] => after
            .used_bytes
            .zip(before.used_bytes)
            .map(|(a, b)| a.saturating_sub(b)),
        _ => None,
    };
    OwnProcess::from_candidates(candidates, context_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufill_core::ProcessInfo;

    const MIB: u64 = 1 << 20;

    fn entry(pid: u32, mib: u64) -> ProcessInfo {
        ProcessInfo {
            pid,
            used_memory_bytes: Some(mib * MIB),
            name: None,
            mps_client: false,
        }
    }

    fn snapshot(entries: &[(u32, u64)], used_mib: u64) -> Snapshot {
        Snapshot {
            processes: entries.iter().map(|&(p, m)| entry(p, m)).collect(),
            used_bytes: Some(used_mib * MIB),
        }
    }

    #[test]
    fn our_own_pid_wins_over_anything_that_appeared() {
        let own = identify_own(&[10], &[10, 42, 77], 42);
        assert_eq!(own, OwnProcess::pid(42));
        assert!(!own.ambiguous && !own.has_candidates());
    }

    #[test]
    fn our_own_pid_counts_even_if_it_was_there_before() {
        assert_eq!(identify_own(&[42], &[42], 42), OwnProcess::pid(42));
    }

    #[test]
    fn in_a_container_the_one_pid_that_appeared_is_ours() {
        let own = identify_own(&[1000, 2000], &[2000, 1000, 31337], 7);
        assert_eq!(own.pids, vec![31337]);
        assert!(!own.ambiguous);
        assert!(own.contains(31337));
        assert!(!own.contains(1000));
    }

    #[test]
    fn several_newcomers_are_all_kept_and_flagged_ambiguous() {
        let own = identify_own(&[5], &[900, 5, 300, 900], 7);
        assert_eq!(own.pids, vec![300, 900]);
        assert!(own.ambiguous && own.needs_work_checks());
    }

    #[test]
    fn a_process_that_left_meanwhile_is_not_ours() {
        let own = identify_own(&[5, 6], &[6, 8], 7);
        assert_eq!(own.pids, vec![8]);
    }

    #[test]
    fn equal_snapshots_of_an_idle_device_give_no_own_pid() {
        assert_eq!(identify_own(&[], &[], 7), OwnProcess::none());
        assert_eq!(identify_own(&[3, 4], &[4, 3], 7), OwnProcess::none());
    }

    #[test]
    fn listed_under_our_own_pid_we_know_our_context_size() {
        // Inside a PID namespace on driver 580: PID 2 is us, listed at 254 MiB.
        let own = identify_own_context(&snapshot(&[], 0), &snapshot(&[(2, 254)], 262), 2);
        assert_eq!(own.pids, vec![2]);
        assert_eq!(own.context_bytes, Some(254 * MIB));
        assert!(!own.has_candidates());
    }

    #[test]
    fn with_nothing_of_ours_listed_our_context_is_the_growth_of_device_memory() {
        let own = identify_own_context(&snapshot(&[], 0), &snapshot(&[], 262), 2);
        assert!(own.pids.is_empty());
        assert_eq!(own.context_bytes, Some(262 * MIB));
    }

    #[test]
    fn a_newcomer_that_started_with_us_is_dropped_when_its_memory_grows() {
        // Host PIDs in a container: ours (31337, complete) and a PyTorch newcomer
        // (31400, 14 MiB into its context) appeared together.
        let mut own = identify_own_context(
            &snapshot(&[], 0),
            &snapshot(&[(31337, 254), (31400, 14)], 276),
            7,
        );
        assert_eq!(own.pids, vec![31337, 31400]);
        assert!(own.ambiguous);
        assert!(
            own.recheck_list(&[entry(31337, 254), entry(31400, 40)])
                .is_empty()
        );
        assert_eq!(
            own.recheck_list(&[entry(31337, 254), entry(31400, 612)]),
            vec![31400]
        );
        assert_eq!(own.pids, vec![31337]);
        assert!(!own.ambiguous && !own.contains(31400));
    }

    #[test]
    fn a_later_process_reusing_a_candidates_pid_is_not_ours() {
        let mut own = identify_own_context(&snapshot(&[], 0), &snapshot(&[(31337, 254)], 262), 7);
        assert_eq!(own.context_bytes, Some(254 * MIB));
        // Our context released and opened again (same PID, same size): still ours.
        assert!(own.recheck_list(&[]).is_empty());
        assert!(own.recheck_list(&[entry(31337, 254)]).is_empty());
        assert!(own.contains(31337));
        // Had 31337 been someone else that left, a process reusing the PID would come
        // with its own size, and is not ours.
        assert_eq!(own.recheck_list(&[entry(31337, 1634)]), vec![31337]);
        assert!(own.pids.is_empty());
    }

    #[test]
    fn a_candidate_that_works_while_we_run_nothing_is_not_ours() {
        let mut own = identify_own(&[], &[300, 900], 7);
        // One odd read is not enough; a second one is.
        assert!(own.recheck_work(&[900], true, false).is_empty());
        assert!(own.recheck_work(&[], true, false).is_empty());
        assert_eq!(own.recheck_work(&[900], true, false), vec![900]);
        assert_eq!(own.pids, vec![300]);
    }

    #[test]
    fn an_idle_candidate_while_we_fill_and_another_works_is_not_ours() {
        // A holder that opened its context with ours and stays idle: while we fill,
        // only our own PID shows kernels.
        let mut own = identify_own(&[], &[300, 900], 7);
        assert!(own.recheck_work(&[300], false, true).is_empty());
        // Samples missing for both say nothing.
        assert!(own.recheck_work(&[], false, true).is_empty());
        // Filling only part of the window says nothing.
        assert!(own.recheck_work(&[300], false, false).is_empty());
        assert_eq!(own.recheck_work(&[300], false, true), vec![900]);
        assert_eq!(own.pids, vec![300]);
        assert!(!own.needs_work_checks());
    }

    #[test]
    fn our_own_pid_is_never_rechecked() {
        let mut own = OwnProcess::pid(2);
        assert!(own.recheck_list(&[entry(2, 5000)]).is_empty());
        assert!(own.recheck_work(&[2], true, false).is_empty());
        assert!(own.recheck_work(&[2], true, false).is_empty());
        assert_eq!(own.pids, vec![2]);
    }
}
