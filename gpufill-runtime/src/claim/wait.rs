//! A GPU whose lock something other than a gpufill holds ([`super::Claimed::Waiting`]):
//! its worker waits for the lock alone, while the agent's other GPUs fill. It says who
//! holds the lock once, and again only when that changes (not at every try), tries
//! again every few seconds, and starts filling once the lock is free.

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::{Claim, ClaimError, claim_gpu};
use crate::select::Gpu;

/// How often a stop is looked for while waiting.
const STOP_POLL: Duration = Duration::from_millis(100);

/// A wait ended by a stop (or the agent's deadline) before the lock was free.
#[derive(Debug)]
pub(crate) struct Stopped;

/// Waits until `gpu`'s lock in `dir`, which `held` holds now, is free, trying again every
/// `retry`; `waiting` hears who holds it (for the GPU's snapshot) at first and at each
/// change, and `None` once the wait is over. The claim, or none where the lock file
/// could not be used at the last try (logged: the GPU is filled unclaimed).
///
/// # Errors
/// [`Stopped`] when `stopped` says so before the lock is free.
pub(crate) fn wait_for_claim(
    dir: &Path,
    gpu: &Gpu,
    held: &ClaimError,
    retry: Duration,
    mut waiting: impl FnMut(Option<String>),
    stopped: impl Fn() -> bool,
) -> Result<Option<Claim>, Stopped> {
    let mut said = Said::default();
    said.tell(held, retry);
    waiting(Some(held.other.clone()));
    loop {
        sleep_unless(retry, &stopped)?;
        match claim_gpu(dir, gpu) {
            Ok(claim) => {
                if claim.is_some() {
                    info!(gpu = gpu.index, "the GPU's lock is free: claimed, filling");
                }
                waiting(None);
                return Ok(claim);
            }
            Err(e) => {
                if said.tell(&e, retry) {
                    waiting(Some(e.other.clone()));
                }
            }
        }
    }
}

/// Sleeps `span`, looking for a stop every [`STOP_POLL`].
fn sleep_unless(span: Duration, stopped: &impl Fn() -> bool) -> Result<(), Stopped> {
    let until = Instant::now() + span;
    loop {
        if stopped() {
            return Err(Stopped);
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        thread::sleep(left.min(STOP_POLL));
    }
}

/// Who was last said to hold the lock.
#[derive(Debug, Default)]
struct Said {
    who: Option<(bool, String)>,
}

impl Said {
    /// Says who holds the lock (`e`) unless that was said last: whether it said so.
    fn tell(&mut self, e: &ClaimError, retry: Duration) -> bool {
        let who = holder_of(e);
        if self.who.as_ref() == Some(&who) {
            return false;
        }
        let again = if self.who.is_some() { "now " } else { "" };
        warn!(
            gpu = e.index,
            "{again}{e}; waiting until it is free, trying again every {} s, while the \
             other GPUs fill (docs/operations.md, \"One gpufill per GPU\")",
            retry.as_secs_f64()
        );
        self.who = Some(who);
        true
    }
}

/// Who holds the lock, as compared from one try to the next: whether a gpufill, and its
/// words without the record's age, which changes at every try.
fn holder_of(e: &ClaimError) -> (bool, String) {
    let who = e.other.split(", started ").next().unwrap_or_default();
    (e.by_gpufill, who.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(other: &str, by_gpufill: bool) -> ClaimError {
        ClaimError {
            index: 0,
            uuid: "GPU-0".into(),
            other: other.into(),
            by_gpufill,
        }
    }

    #[test]
    fn who_holds_the_lock_is_said_once_and_again_only_when_it_changes() {
        let mut said = Said::default();
        let retry = Duration::from_secs(5);
        let flock = held("pid 3170 (flock x sleep 600) (it holds x)", false);
        assert!(said.tell(&flock, retry));
        assert!(!said.tell(&flock, retry));
        // A gpufill's record with a start that reads older at every try: the same one.
        let gpufill = |age| held(&format!("pid 42 on host a, started {age} s ago"), true);
        assert!(said.tell(&gpufill(1), retry));
        assert!(!said.tell(&gpufill(6), retry));
        assert!(said.tell(&flock, retry));
    }

    #[test]
    fn a_stop_ends_the_wait_at_once() {
        let at = Instant::now();
        assert!(sleep_unless(Duration::from_secs(60), &|| true).is_err());
        assert!(sleep_unless(Duration::from_millis(30), &|| false).is_ok());
        assert!(at.elapsed() < Duration::from_secs(5));
    }
}
