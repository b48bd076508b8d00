//! The host's local time of day, for schedule windows.
//!
//! `libc::localtime_r` is the C library's own conversion: it honours `TZ` and the
//! system zone database exactly as `date` does, and `libc` is already in the build
//! (through `signal-hook`), so no time-zone crate (`chrono`, `jiff`) with its own
//! zone handling is added for one hour-and-minute read. The price is two small
//! `unsafe` blocks, here only. glibc reads `TZ` once, at the first call.

use std::mem::MaybeUninit;
use std::time::{SystemTime, UNIX_EPOCH};

use gpufill_core::TimeOfDay;

/// The local time of day now; `None` if the clock is before 1970 or the C library
/// cannot convert it.
pub fn now() -> Option<TimeOfDay> {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
    let t = libc::time_t::try_from(secs).ok()?;
    let mut tm = MaybeUninit::<libc::tm>::uninit();
    // SAFETY: `t` and `tm` are valid for reads and writes of their types for the whole
    // call; localtime_r is the reentrant variant and writes only into `tm`.
    let filled = unsafe { libc::localtime_r(&t, tm.as_mut_ptr()) };
    if filled.is_null() {
        return None;
    }
    // SAFETY: a non-null return means localtime_r filled in every field of `tm`.
    let tm = unsafe { tm.assume_init() };
    TimeOfDay::new(
        u8::try_from(tm.tm_hour).ok()?,
        u8::try_from(tm.tm_min).ok()?,
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_local_time_of_day_is_known_and_moves_with_the_clock() {
        let before = super::now().expect("local time");
        let after = super::now().expect("local time");
        // Two reads a moment apart are equal or one minute apart (a minute boundary).
        let diff = (after.minutes() + 1440 - before.minutes()) % 1440;
        assert!(diff <= 1, "{before} then {after}");
    }
}
