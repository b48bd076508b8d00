//! Schedules: which target holds now, from the time of day and how long the GPU has
//! been free of foreign processes.
//!
//! The original tool filled to 50 % and raised that to 60 % after a long idle; gpufill
//! keeps its default target and adds two optional rules, in this order of precedence:
//!
//! 1. a matching time-of-day [`Window`] (a window may cross midnight; its target 0
//!    turns gpufill off inside it);
//! 2. the idle rule: once no foreign process has been on the GPU for `idle_after`, the
//!    target becomes `idle_target`, until a foreign process appears;
//! 3. the default target.
//!
//! [`Schedule::target`] is pure: the caller passes the local time of day and how long
//! the GPU has been quiet ([`crate::FillLoop::quiet_for`]), so it is tested without a
//! clock and `gpufill simulate` can run it in virtual time.

use std::fmt;
use std::time::Duration;

use crate::units::Utilization;

/// Minutes in a day.
const DAY_MINUTES: u16 = 24 * 60;

/// A time of day to the minute, `00:00` to `23:59`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimeOfDay(u16);

impl TimeOfDay {
    /// Midnight.
    pub const MIDNIGHT: TimeOfDay = TimeOfDay(0);

    /// `hour:minute`; `None` outside `0..24` and `0..60`.
    pub fn new(hour: u8, minute: u8) -> Option<Self> {
        (hour < 24 && minute < 60).then(|| TimeOfDay(u16::from(hour) * 60 + u16::from(minute)))
    }

    /// Parses `HH:MM` (24-hour clock, two digits each, e.g. `06:00`, `22:30`).
    ///
    /// # Errors
    /// A message saying what is expected.
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad = || format!("expected a time of day as HH:MM (00:00 to 23:59), got {s:?}");
        let (h, m) = s.split_once(':').ok_or_else(bad)?;
        let two_digits = |x: &str| {
            (x.len() == 2 && x.bytes().all(|b| b.is_ascii_digit()))
                .then(|| x.parse::<u8>().ok())
                .flatten()
        };
        match (two_digits(h), two_digits(m)) {
            (Some(h), Some(m)) => TimeOfDay::new(h, m).ok_or_else(bad),
            _ => Err(bad()),
        }
    }

    /// Minutes since midnight.
    pub fn minutes(self) -> u16 {
        self.0
    }

    /// The time of day `elapsed` after this one, wrapping at midnight (seconds are
    /// truncated to the minute).
    pub fn after(self, elapsed: Duration) -> Self {
        let minutes = (elapsed.as_secs() / 60) % u64::from(DAY_MINUTES);
        // `minutes` < 1440, so the sum fits in u16.
        TimeOfDay((self.0 + minutes as u16) % DAY_MINUTES)
    }
}

impl fmt::Display for TimeOfDay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02}:{:02}", self.0 / 60, self.0 % 60)
    }
}

/// A daily window `[start, end)` with its own target; `end` before `start` crosses midnight.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    /// First minute inside.
    pub start: TimeOfDay,
    /// First minute outside.
    pub end: TimeOfDay,
    /// The target inside the window (zero: gpufill off).
    pub target: Utilization,
}

impl Window {
    /// Whether `t` falls inside. A window with `start == end` is empty (the config
    /// refuses it).
    pub fn contains(&self, t: TimeOfDay) -> bool {
        if self.start <= self.end {
            self.start <= t && t < self.end
        } else {
            t >= self.start || t < self.end
        }
    }
}

/// The idle rule: after `after` without foreign processes, hold `target`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IdleRule {
    /// How long the GPU must have been free of foreign processes.
    pub after: Duration,
    /// The target from then on, until a foreign process appears.
    pub target: Utilization,
}

/// The target as a function of time of day and quiet time. See the module docs for
/// the precedence.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// The target when no rule applies.
    pub default: Utilization,
    /// The idle rule, if any.
    pub idle: Option<IdleRule>,
    /// Time-of-day windows; the first that contains the time wins.
    pub windows: Vec<Window>,
}

impl Schedule {
    /// A schedule that always gives `default`.
    pub fn constant(default: Utilization) -> Self {
        Schedule {
            default,
            idle: None,
            windows: Vec::new(),
        }
    }

    /// Whether any rule can change the target (else the caller may skip the clock).
    pub fn is_constant(&self) -> bool {
        self.idle.is_none() && self.windows.is_empty()
    }

    /// Whether windows need the time of day.
    pub fn uses_time_of_day(&self) -> bool {
        !self.windows.is_empty()
    }

    /// The target for local time of day `now` (`None` when unknown: windows are then
    /// skipped) and a GPU free of foreign processes for `quiet_for` (`None` while one
    /// is there).
    pub fn target(&self, now: Option<TimeOfDay>, quiet_for: Option<Duration>) -> Utilization {
        if let Some(window) = now.and_then(|t| self.windows.iter().find(|w| w.contains(t))) {
            return window.target;
        }
        match (self.idle, quiet_for) {
            (Some(rule), Some(quiet)) if quiet >= rule.after => rule.target,
            _ => self.default,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pct(p: f64) -> Utilization {
        Utilization::from_percent(p).unwrap()
    }

    fn tod(s: &str) -> TimeOfDay {
        TimeOfDay::parse(s).unwrap()
    }

    fn window(start: &str, end: &str, target: f64) -> Window {
        Window {
            start: tod(start),
            end: tod(end),
            target: pct(target),
        }
    }

    fn original_rule() -> Schedule {
        Schedule {
            default: pct(50.0),
            idle: Some(IdleRule {
                after: Duration::from_secs(600),
                target: pct(60.0),
            }),
            windows: Vec::new(),
        }
    }

    #[test]
    fn parses_hh_mm_and_prints_it_back() {
        assert_eq!(tod("00:00"), TimeOfDay::MIDNIGHT);
        assert_eq!(tod("06:05").minutes(), 365);
        assert_eq!(tod("23:59").minutes(), 1439);
        assert_eq!(tod("22:30").to_string(), "22:30");
    }

    #[test]
    fn rejects_anything_but_hh_mm() {
        for bad in [
            "", "6:00", "06:0", "24:00", "23:60", "06-00", "0600", "06:00:00", " 6:00", "+6:00",
            "aa:bb",
        ] {
            assert!(TimeOfDay::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn time_of_day_wraps_at_midnight() {
        assert_eq!(tod("23:59").after(Duration::from_secs(60)), tod("00:00"));
        assert_eq!(tod("21:59").after(Duration::from_secs(119)), tod("22:00"));
        assert_eq!(
            tod("12:00").after(Duration::from_secs(86400 * 3)),
            tod("12:00")
        );
    }

    #[test]
    fn a_window_is_half_open_and_may_cross_midnight() {
        let day = window("09:00", "17:00", 0.0);
        assert!(day.contains(tod("09:00")) && day.contains(tod("16:59")));
        assert!(!day.contains(tod("17:00")) && !day.contains(tod("08:59")));
        let night = window("22:00", "06:00", 0.0);
        for inside in ["22:00", "23:59", "00:00", "05:59"] {
            assert!(night.contains(tod(inside)), "{inside}");
        }
        for outside in ["06:00", "12:00", "21:59"] {
            assert!(!night.contains(tod(outside)), "{outside}");
        }
    }

    #[test]
    fn the_idle_rule_raises_the_target_after_the_quiet_time_only() {
        let s = original_rule();
        assert_eq!(s.target(None, None), pct(50.0));
        assert_eq!(s.target(None, Some(Duration::from_secs(599))), pct(50.0));
        assert_eq!(s.target(None, Some(Duration::from_secs(600))), pct(60.0));
        // A foreign process is there: back to the default at once.
        assert_eq!(s.target(None, None), pct(50.0));
    }

    #[test]
    fn a_window_wins_over_the_idle_rule_which_wins_over_the_default() {
        let mut s = original_rule();
        s.windows = vec![
            window("22:00", "06:00", 0.0),
            window("05:00", "07:00", 80.0),
        ];
        let long_quiet = Some(Duration::from_secs(3600));
        assert_eq!(s.target(Some(tod("23:00")), long_quiet), pct(0.0));
        // Overlapping windows: the first listed wins.
        assert_eq!(s.target(Some(tod("05:30")), None), pct(0.0));
        assert_eq!(s.target(Some(tod("06:30")), long_quiet), pct(80.0));
        assert_eq!(s.target(Some(tod("12:00")), long_quiet), pct(60.0));
        assert_eq!(s.target(Some(tod("12:00")), None), pct(50.0));
        // Time of day unknown: windows are skipped.
        assert_eq!(s.target(None, long_quiet), pct(60.0));
    }

    #[test]
    fn a_constant_schedule_ignores_time_and_quiet() {
        let s = Schedule::constant(pct(42.0));
        assert!(s.is_constant() && !s.uses_time_of_day());
        assert_eq!(s.target(Some(tod("03:00")), Some(Duration::MAX)), pct(42.0));
        assert!(!original_rule().is_constant());
    }
}
