//! Finding our own entry in NVML's process list.
//!
//! NVML reports host PIDs, also inside a container, where `std::process::id()` is a
//! namespaced PID that NVML never shows ("the nvidia-driver itself does not support
//! pid-namespaces", NVIDIA/nvidia-docker#1483). So the CLI snapshots the device's
//! compute PIDs ([`crate::Nvml::compute_pids`]) just before and just after it creates
//! its CUDA context; what appeared in between is us ([`identify_own`]).

/// Which PIDs on a device are gpufill's own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnProcess {
    /// Our PIDs as NVML reports them (host PIDs), sorted. Empty when nothing appeared.
    pub pids: Vec<u32>,
    /// Several PIDs appeared while our context was created and none is our own PID:
    /// all of them are counted as ours, so a process that started in the same few
    /// milliseconds will not make us yield. The CLI should warn.
    pub ambiguous: bool,
}

impl OwnProcess {
    /// No own PID: for a probe that runs without a CUDA context of its own.
    pub fn none() -> Self {
        OwnProcess::default()
    }

    /// Exactly `pid` (outside a container, `std::process::id()`).
    pub fn pid(pid: u32) -> Self {
        OwnProcess {
            pids: vec![pid],
            ambiguous: false,
        }
    }

    /// Whether `pid` is one of ours.
    pub fn contains(&self, pid: u32) -> bool {
        self.pids.contains(&pid)
    }
}

/// Our PIDs, from the device's compute PIDs `before` and `after` our CUDA context
/// was created, and our own PID `my_pid` (`std::process::id()`).
///
/// - `my_pid` listed (no PID namespace): it is ours, and only it.
/// - One PID appeared: ours (our host PID, seen from inside a container).
/// - Several appeared: all are counted as ours and the result is `ambiguous`. Under
///   MPS the server process starts with the first client, so it appears with us.
/// - None appeared: no own PID (e.g. no context was created).
pub fn identify_own(before: &[u32], after: &[u32], my_pid: u32) -> OwnProcess {
    if after.contains(&my_pid) || before.contains(&my_pid) {
        return OwnProcess::pid(my_pid);
    }
    let mut appeared: Vec<u32> = after
        .iter()
        .copied()
        .filter(|pid| !before.contains(pid))
        .collect();
    appeared.sort_unstable();
    appeared.dedup();
    OwnProcess {
        ambiguous: appeared.len() > 1,
        pids: appeared,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_pid_wins_over_anything_that_appeared() {
        let own = identify_own(&[10], &[10, 42, 77], 42);
        assert_eq!(own, OwnProcess::pid(42));
        assert!(!own.ambiguous);
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
        assert!(own.ambiguous);
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
}
