//! When NVML has published a new utilization sample: pure arithmetic, no NVML.
//!
//! The driver updates the device utilization once per sample period (1/6 s to 1 s by
//! product; one GPU's, measured: docs/benchmarks.md#hardware-tests-run-b).
//! `nvmlDeviceGetSamples` tells when (each
//! sample carries a CPU wall-clock timestamp in microseconds) but costs milliseconds;
//! `nvmlDeviceGetUtilizationRates` costs microseconds but has no timestamp. So the
//! probe reads the timestamps now and then ([`SampleTiming::learn`]), derives the period
//! and the phase, and in between reads the cheap value once per period, a quarter of
//! a period after each expected publication ([`next_read_due`]), far from the
//! boundary where jitter would make it read one sample twice or miss one.

use std::time::Duration;

use gpufill_core::Time;

/// The sample period assumed until the device says otherwise (the one measured:
/// docs/benchmarks.md#hardware-tests-run-b).
pub const NOMINAL_PERIOD: Duration = Duration::from_millis(200);
/// How often the period and phase are read again while samples come in.
pub const RESYNC_INTERVAL: Duration = Duration::from_secs(10);
/// How soon to look again when the device published nothing new (idle) or the
/// phase is unknown.
pub const RESYNC_RETRY: Duration = Duration::from_secs(1);
/// Periods outside this range are not believed (NVIDIA documents 1/6 s to 1 s).
const PLAUSIBLE_PERIOD: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(50)..=Duration::from_secs(2);
/// Fewer gaps than this say too little about the period (an idle GPU skips samples).
const MIN_GAPS: usize = 3;

/// The sample period from sample timestamps (microseconds, any order): the median
/// gap between consecutive distinct timestamps, so that the gaps an idle GPU leaves
/// do not count. `None` with fewer than three gaps or an implausible median.
pub fn period_from_timestamps(timestamps_us: &[u64]) -> Option<Duration> {
    let mut sorted = timestamps_us.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut gaps: Vec<u64> = sorted.windows(2).map(|w| w[1] - w[0]).collect();
    if gaps.len() < MIN_GAPS {
        return None;
    }
    gaps.sort_unstable();
    let period = Duration::from_micros(gaps[gaps.len() / 2]);
    PLAUSIBLE_PERIOD.contains(&period).then_some(period)
}

/// Where an NVML timestamp (wall-clock microseconds) falls on the loop's timeline,
/// given the wall clock `wall_now_us` read at the loop's time `now`. A timestamp
/// later than `wall_now_us` maps to `now`; one before the loop's epoch to the epoch.
pub fn wall_to_loop(timestamp_us: u64, wall_now_us: u64, now: Time) -> Time {
    let age = Duration::from_micros(wall_now_us.saturating_sub(timestamp_us));
    Time::from_duration(now.since_epoch().saturating_sub(age))
}

/// When to read the utilization next so as to see each sample once.
///
/// With a known `phase` (any publication time on the loop's timeline), samples are
/// out at `phase + k * period`; a read at `t` sees the latest one at or before `t`.
/// The next read is due a quarter period after the first publication after the one
/// `last_read` saw, or, before any read, a quarter period after the latest one at
/// `now` (possibly already past: read at once). With no phase, reads are one period
/// apart, the first at once.
pub fn next_read_due(
    last_read: Option<Time>,
    now: Time,
    phase: Option<Time>,
    period: Duration,
) -> Time {
    let Some(phase) = phase else {
        return last_read.map_or(now, |read| read + period);
    };
    let period_ns = period.as_nanos().max(1) as i128;
    let latest_at_or_before = |t: Time| {
        let since_phase =
            t.since_epoch().as_nanos() as i128 - phase.since_epoch().as_nanos() as i128;
        phase.since_epoch().as_nanos() as i128 + since_phase.div_euclid(period_ns) * period_ns
    };
    let due_ns = match last_read {
        Some(read) => latest_at_or_before(read) + period_ns + period_ns / 4,
        None => latest_at_or_before(now) + period_ns / 4,
    };
    Time::from_duration(Duration::from_nanos(
        due_ns.clamp(0, u64::MAX as i128) as u64
    ))
}

/// The state of the timing: period, phase, last read and when to resync.
#[derive(Clone, Debug)]
pub(crate) struct SampleTiming {
    period: Duration,
    phase: Option<Time>,
    last_read: Option<Time>,
    next_read: Time,
    /// `None` once `nvmlDeviceGetSamples` proved unsupported: plain polling.
    next_resync: Option<Time>,
    last_seen_us: Option<u64>,
}

impl Default for SampleTiming {
    fn default() -> Self {
        SampleTiming {
            period: NOMINAL_PERIOD,
            phase: None,
            last_read: None,
            next_read: Time::ZERO,
            next_resync: Some(Time::ZERO),
            last_seen_us: None,
        }
    }
}

impl SampleTiming {
    /// Whether it is time to read the sample timestamps again.
    pub(crate) fn resync_due(&self, now: Time) -> bool {
        self.next_resync.is_some_and(|due| now >= due)
    }

    /// The newest timestamp learned so far: pass it to `samples()` to get only newer ones.
    pub(crate) fn last_seen_us(&self) -> Option<u64> {
        self.last_seen_us
    }

    /// The sample period in use.
    pub(crate) fn period(&self) -> Duration {
        self.period
    }

    /// Whether the phase of the samples is known (else reads are merely one period apart).
    pub(crate) fn phase_known(&self) -> bool {
        self.phase.is_some()
    }

    /// Learns from new sample timestamps (`samples()` since [`Self::last_seen_us`]),
    /// with the wall clock `wall_now_us` read at the loop's time `now`.
    pub(crate) fn learn(&mut self, timestamps_us: &[u64], wall_now_us: u64, now: Time) {
        let Some(&newest) = timestamps_us.iter().max() else {
            self.nothing_new(now);
            return;
        };
        if let Some(period) = period_from_timestamps(timestamps_us) {
            self.period = period;
        }
        let period_us = self.period.as_micros() as u64;
        let fresh = if newest > wall_now_us.saturating_add(period_us) {
            // NVML's clock is ahead of ours by more than a period: the mapping is off.
            tracing::warn!(
                ahead_us = newest - wall_now_us,
                "nvml sample timestamps are ahead of the system clock; sampling blind"
            );
            self.phase = None;
            false
        } else {
            self.phase = Some(wall_to_loop(newest, wall_now_us, now));
            wall_now_us.saturating_sub(newest) <= 2 * period_us
        };
        self.last_seen_us = Some(self.last_seen_us.map_or(newest, |seen| seen.max(newest)));
        let wait = if fresh { RESYNC_INTERVAL } else { RESYNC_RETRY };
        self.next_resync = Some(now + wait);
        self.next_read = next_read_due(self.last_read, now, self.phase, self.period);
    }

    /// No new sample since the last one learned (NVML's `NotFound` while idle) or the
    /// read failed for now: keep the timing and look again soon.
    pub(crate) fn nothing_new(&mut self, now: Time) {
        self.next_resync = Some(now + RESYNC_RETRY);
    }

    /// `nvmlDeviceGetSamples` does not work here: poll once per nominal period.
    pub(crate) fn samples_unsupported(&mut self) {
        self.next_resync = None;
        self.phase = None;
        self.period = NOMINAL_PERIOD;
        self.next_read = self.last_read.map_or(Time::ZERO, |read| read + self.period);
    }

    /// Whether a new sample is due at `now`.
    pub(crate) fn read_due(&self, now: Time) -> bool {
        now >= self.next_read
    }

    /// Records a read at `now`; the next one is due after the next publication.
    pub(crate) fn mark_read(&mut self, now: Time) {
        self.last_read = Some(now);
        self.next_read = next_read_due(self.last_read, now, self.phase, self.period);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1000; // microseconds

    fn ms(millis: u64) -> Time {
        Time::from_millis(millis)
    }

    #[test]
    fn the_period_is_the_median_gap_between_timestamps() {
        let stamps = [1_000 * MS, 1_200 * MS, 1_400 * MS, 1_600 * MS, 1_800 * MS];
        assert_eq!(
            period_from_timestamps(&stamps),
            Some(Duration::from_millis(200))
        );
    }

    #[test]
    fn idle_gaps_and_duplicates_do_not_change_the_period() {
        // Samples stop while idle, then resume; one duplicate; out of order.
        let stamps = [
            5_000 * MS,
            200 * MS,
            400 * MS,
            400 * MS,
            600 * MS,
            5_200 * MS,
            5_400 * MS,
        ];
        assert_eq!(
            period_from_timestamps(&stamps),
            Some(Duration::from_millis(200))
        );
    }

    #[test]
    fn a_sixth_of_a_second_survives_microsecond_rounding() {
        let stamps: Vec<u64> = (0..8).map(|k| k * 1_000_000 / 6).collect();
        let period = period_from_timestamps(&stamps).unwrap();
        assert!(period.abs_diff(Duration::from_micros(166_667)) <= Duration::from_micros(1));
    }

    #[test]
    fn too_few_or_implausible_timestamps_give_no_period() {
        assert_eq!(period_from_timestamps(&[]), None);
        assert_eq!(period_from_timestamps(&[0, 200 * MS, 400 * MS]), None);
        assert_eq!(period_from_timestamps(&[0, 1, 2, 3, 4]), None);
        assert_eq!(
            period_from_timestamps(&[0, 5_000 * MS, 10_000 * MS, 15_000 * MS]),
            None
        );
    }

    #[test]
    fn timestamps_map_back_from_the_wall_clock_to_the_loop_clock() {
        let now = ms(10_000);
        assert_eq!(wall_to_loop(9_950 * MS, 10_000 * MS, now), ms(9_950));
        assert_eq!(
            wall_to_loop(
                1_700_000_000_000 * MS - 80 * MS,
                1_700_000_000_000 * MS,
                now
            ),
            ms(9_920)
        );
        // From the future: now. From before the loop's epoch: the epoch.
        assert_eq!(wall_to_loop(10_005 * MS, 10_000 * MS, now), now);
        assert_eq!(wall_to_loop(0, 20_000 * MS, now), Time::ZERO);
    }

    #[test]
    fn the_first_read_waits_for_a_quarter_period_after_a_publication() {
        let period = Duration::from_millis(200);
        let phase = Some(ms(1_000));
        // 30 ms after a publication: wait until 50 ms after it.
        assert_eq!(next_read_due(None, ms(1_430), phase, period), ms(1_450));
        // 120 ms after: read at once (the due time is already past).
        assert_eq!(next_read_due(None, ms(1_520), phase, period), ms(1_450));
    }

    #[test]
    fn reads_follow_each_publication_by_a_quarter_period() {
        let period = Duration::from_millis(200);
        let phase = Some(ms(1_000));
        assert_eq!(
            next_read_due(Some(ms(1_450)), ms(1_450), phase, period),
            ms(1_650)
        );
        // A late read (the loop stalled) still waits for the next publication.
        assert_eq!(
            next_read_due(Some(ms(1_590)), ms(1_590), phase, period),
            ms(1_650)
        );
    }

    #[test]
    fn a_phase_later_than_the_read_still_lands_between_boundaries() {
        let period = Duration::from_millis(200);
        // The phase was learned from a sample published after the last read.
        assert_eq!(
            next_read_due(Some(ms(950)), ms(1_100), Some(ms(1_010)), period),
            ms(1_060)
        );
    }

    #[test]
    fn without_a_phase_reads_are_one_period_apart() {
        let period = Duration::from_millis(200);
        assert_eq!(next_read_due(None, ms(77), None, period), ms(77));
        assert_eq!(next_read_due(Some(ms(77)), ms(80), None, period), ms(277));
    }

    impl SampleTiming {
        fn take_read(&mut self, now: Time) -> bool {
            let due = self.read_due(now);
            if due {
                self.mark_read(now);
            }
            due
        }
    }

    /// Drives a timing every 10 ms from `from` to `to` and returns the read times.
    fn reads(timing: &mut SampleTiming, from: u64, to: u64) -> Vec<u64> {
        (from..to)
            .step_by(10)
            .filter(|&t| timing.take_read(ms(t)))
            .collect()
    }

    #[test]
    fn a_learned_schedule_reads_once_per_period_a_quarter_after_each_sample() {
        let mut timing = SampleTiming::default();
        assert!(timing.resync_due(Time::ZERO));
        // At loop time 1 s the wall clock reads 5_000_020 us; samples every 200 ms.
        let stamps: Vec<u64> = (0..10).map(|k| 3_200_000 + k * 200 * MS).collect();
        timing.learn(&stamps, 5_000_020, ms(1_000));
        assert!(timing.phase_known());
        assert_eq!(timing.period(), Duration::from_millis(200));
        assert_eq!(timing.last_seen_us(), Some(5_000_000));
        assert!(!timing.resync_due(ms(10_990)));
        assert!(timing.resync_due(ms(11_000)));
        // The last sample was at loop time 999.98 ms: reads at ~1050, 1250, ...
        assert_eq!(
            reads(&mut timing, 1_000, 2_000),
            vec![1_050, 1_250, 1_450, 1_650, 1_850]
        );
    }

    #[test]
    fn two_seconds_of_ticks_give_ten_reads() {
        let mut timing = SampleTiming::default();
        let stamps: Vec<u64> = (0..20).map(|k| 1_000_000 + k * 200 * MS).collect();
        timing.learn(&stamps, 4_810_000, ms(500));
        assert_eq!(reads(&mut timing, 500, 2_500).len(), 10);
    }

    #[test]
    fn an_idle_device_keeps_the_nominal_period_and_retries_soon() {
        let mut timing = SampleTiming::default();
        timing.nothing_new(ms(0));
        assert_eq!(timing.period(), NOMINAL_PERIOD);
        assert!(!timing.phase_known());
        assert!(timing.resync_due(ms(1_000)));
        assert_eq!(reads(&mut timing, 0, 1_000), vec![0, 200, 400, 600, 800]);
    }

    #[test]
    fn stale_samples_give_a_phase_but_a_quick_resync() {
        let mut timing = SampleTiming::default();
        let stamps: Vec<u64> = (0..5).map(|k| k * 200 * MS).collect();
        timing.learn(&stamps, 60_000 * MS, ms(100_000));
        assert!(timing.phase_known());
        assert!(timing.resync_due(ms(101_000)));
    }

    #[test]
    fn timestamps_from_the_future_leave_the_phase_unknown() {
        let mut timing = SampleTiming::default();
        let stamps: Vec<u64> = (0..5).map(|k| 10_000 * MS + k * 200 * MS).collect();
        timing.learn(&stamps, 1_000 * MS, ms(1_000));
        assert!(!timing.phase_known());
        assert_eq!(timing.period(), Duration::from_millis(200));
    }

    #[test]
    fn a_resync_that_shifts_the_phase_neither_skips_nor_repeats_a_sample() {
        let mut timing = SampleTiming::default();
        let stamps: Vec<u64> = (0..5).map(|k| k * 200 * MS).collect();
        timing.learn(&stamps, 800 * MS, ms(800));
        assert_eq!(reads(&mut timing, 800, 1_300), vec![850, 1_050, 1_250]);
        // The phase turns out 8 ms later than learned.
        timing.learn(&[1_008 * MS, 1_208 * MS], 1_300 * MS, ms(1_300));
        assert_eq!(reads(&mut timing, 1_300, 2_000), vec![1_460, 1_660, 1_860]);
    }

    #[test]
    fn unsupported_samples_fall_back_to_polling_every_nominal_period() {
        let mut timing = SampleTiming::default();
        assert!(timing.take_read(ms(3)));
        timing.samples_unsupported();
        assert!(!timing.resync_due(ms(1_000_000)));
        assert_eq!(reads(&mut timing, 10, 700), vec![210, 410, 610]);
    }
}
