//! The `[schedule]` and `[metrics]` tables.

use std::net::SocketAddr;

use gpufill_core::TimeOfDay;
use gpufill_runtime::{ScheduleSettings, WindowSettings};
use serde::{Deserialize, Deserializer, Serialize, de};

use super::de::{float_problem, number};

/// The `[schedule]` table: the idle rule and time-of-day windows. Precedence: a
/// matching window, then the idle rule, then `target_percent`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScheduleConfig {
    /// Seconds without foreign processes after which `idle_target_percent` holds;
    /// 0 turns the idle rule off. `[0, 2592000]`.
    #[serde(deserialize_with = "number")]
    pub idle_after_s: f64,
    /// The target after `idle_after_s` without foreign processes, percent `[0, 100]`.
    #[serde(deserialize_with = "number")]
    pub idle_target_percent: f64,
    /// `[[schedule.window]]`: daily windows with their own target; the first that
    /// contains the local time wins.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub window: Vec<WindowConfig>,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        ScheduleConfig::from_settings(&ScheduleSettings::default())
    }
}

/// One `[[schedule.window]]`: `start` and `end` as `HH:MM` local time (the window may
/// cross midnight), and the target inside it (0: gpufill off).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawWindow")]
pub struct WindowConfig {
    /// First minute inside, `HH:MM`.
    pub start: String,
    /// First minute outside, `HH:MM`.
    pub end: String,
    /// The target inside, percent `[0, 100]`.
    pub target_percent: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWindow {
    #[serde(deserialize_with = "time_of_day")]
    start: String,
    #[serde(deserialize_with = "time_of_day")]
    end: String,
    #[serde(deserialize_with = "percent")]
    target_percent: f64,
}

impl TryFrom<RawWindow> for WindowConfig {
    type Error = String;

    fn try_from(raw: RawWindow) -> Result<Self, String> {
        if raw.start == raw.end {
            return Err(format!(
                "start and end must differ, both are {} (the window would be empty)",
                raw.start
            ));
        }
        Ok(WindowConfig {
            start: raw.start,
            end: raw.end,
            target_percent: raw.target_percent,
        })
    }
}

fn time_of_day<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    TimeOfDay::parse(&s).map_err(de::Error::custom)?;
    Ok(s)
}

fn percent<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = number(d)?;
    match float_problem(v, 0.0, 100.0) {
        None => Ok(v),
        Some(reason) => Err(de::Error::custom(reason)),
    }
}

impl ScheduleConfig {
    /// The runtime's schedule settings. Windows were checked when parsed; one that
    /// does not parse is left out rather than panicking.
    pub(super) fn to_settings(&self) -> ScheduleSettings {
        let windows = self
            .window
            .iter()
            .filter_map(|w| {
                Some(WindowSettings {
                    start: TimeOfDay::parse(&w.start).ok()?,
                    end: TimeOfDay::parse(&w.end).ok()?,
                    target_percent: w.target_percent,
                })
            })
            .collect();
        ScheduleSettings {
            idle_after_s: self.idle_after_s,
            idle_target_percent: self.idle_target_percent,
            windows,
        }
    }

    pub(super) fn from_settings(s: &ScheduleSettings) -> ScheduleConfig {
        ScheduleConfig {
            idle_after_s: s.idle_after_s,
            idle_target_percent: s.idle_target_percent,
            window: s
                .windows
                .iter()
                .map(|w| WindowConfig {
                    start: w.start.to_string(),
                    end: w.end.to_string(),
                    target_percent: w.target_percent,
                })
                .collect(),
        }
    }
}

/// The `[metrics]` table: the Prometheus endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// `IP:PORT` to serve `/metrics` on, e.g. `127.0.0.1:9401`; empty: no endpoint.
    pub listen: String,
}

impl MetricsConfig {
    /// The address to listen on; `None` when off. Call on a validated configuration.
    pub fn addr(&self) -> Option<SocketAddr> {
        parse_listen(&self.listen).ok().flatten()
    }

    pub(super) fn problem(&self) -> Option<(&'static str, String)> {
        parse_listen(&self.listen)
            .err()
            .map(|reason| ("metrics.listen", reason))
    }
}

fn parse_listen(s: &str) -> Result<Option<SocketAddr>, String> {
    if s.is_empty() {
        return Ok(None);
    }
    s.parse().map(Some).map_err(|_| {
        format!(
            "expected IP:PORT, e.g. 127.0.0.1:9401 or [::]:9401 (port 0: any free port), got {s:?}"
        )
    })
}
