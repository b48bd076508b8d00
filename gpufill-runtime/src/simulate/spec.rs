//! The text of a scenario's foreign work, as `gpufill simulate`'s `--foreign`,
//! `--service` and `--training` take it (`START-END:LOAD`, ...): each spec's `parse`,
//! with the simulator's limits on it.

use super::{ForeignSpec, ServiceRequests, ServiceSpec, TrainingSpec};

/// The longest simulation, and so the latest time a `--foreign` job may name: 30 days.
pub const MAX_SIMULATED_S: f64 = 30.0 * 86400.0;

impl ForeignSpec {
    /// Parses `START-END:LOAD`, e.g. `5-12:30`.
    ///
    /// # Errors
    /// A message saying what is wrong, naming `s`.
    pub fn parse(s: &str) -> Result<ForeignSpec, String> {
        let bad =
            || format!("expected START-END:LOAD in seconds and percent, e.g. 5-12:30, got {s:?}");
        let (span, load) = s.split_once(':').ok_or_else(bad)?;
        let (start, end) = span.split_once('-').ok_or_else(bad)?;
        let num = |x: &str| x.trim().parse::<f64>().ok().filter(|v| v.is_finite());
        let (start_s, end_s, load_percent) = match (num(start), num(end), num(load)) {
            (Some(a), Some(b), Some(c)) => (a, b, c),
            _ => return Err(bad()),
        };
        if start_s < 0.0 || end_s <= start_s {
            return Err(format!(
                "foreign job {s:?}: END must be after START, both at least 0"
            ));
        }
        if end_s > MAX_SIMULATED_S {
            return Err(format!(
                "foreign job {s:?}: END must be at most {MAX_SIMULATED_S} seconds (30 days, the longest simulation)"
            ));
        }
        if !(0.0..=100.0).contains(&load_percent) {
            return Err(format!(
                "foreign job {s:?}: LOAD must be a percent between 0 and 100"
            ));
        }
        Ok(ForeignSpec {
            start_s,
            end_s,
            load_percent,
        })
    }
}

/// The most isolated requests a second `--service` takes: the simulated GPU serves each
/// one by one, and a month at this rate is already 260 million of them.
pub const MAX_REQUESTS_PER_S: f64 = 100.0;

impl ServiceSpec {
    /// Parses `START-END:EVERY:BURST`, e.g. `2-60:6:0.17`, or `START-END:RATE/s:LENGTHms`,
    /// e.g. `2-60:20/s:0.87ms`.
    ///
    /// # Errors
    /// A message saying what is wrong, naming `s`.
    pub fn parse(s: &str) -> Result<ServiceSpec, String> {
        let bad = || {
            format!(
                "expected START-END:EVERY:BURST in seconds, e.g. 2-60:6:0.17, or START-END:RATE/s:LENGTHms, e.g. 2-60:20/s:0.87ms, got {s:?}"
            )
        };
        let (span, rest) = s.split_once(':').ok_or_else(bad)?;
        let (first, second) = rest.split_once(':').ok_or_else(bad)?;
        let load = format!("{span}:0");
        let window = ForeignSpec::parse(&load).map_err(|e| e.replace(&load, s))?;
        let num = |x: &str| x.trim().parse::<f64>().ok().filter(|v| v.is_finite());
        let requests = if let Some(rate) = first.trim().strip_suffix("/s") {
            let (second, fills_every_sm) = match second.trim().strip_suffix(":gpu") {
                Some(length) => (length, true),
                None => (second, false),
            };
            let length = second.trim().strip_suffix("ms").ok_or_else(bad)?;
            let (Some(per_s), Some(request_ms)) = (num(rate), num(length)) else {
                return Err(bad());
            };
            if !(per_s > 0.0 && per_s <= MAX_REQUESTS_PER_S) {
                return Err(format!(
                    "service {s:?}: RATE must be more than 0 and at most {MAX_REQUESTS_PER_S} a second"
                ));
            }
            if !(request_ms > 0.0 && request_ms <= 1000.0) {
                return Err(format!(
                    "service {s:?}: LENGTH must be more than 0 and at most 1000 ms"
                ));
            }
            ServiceRequests::Rate {
                per_s,
                request_ms,
                fills_every_sm,
            }
        } else {
            let (Some(every_s), Some(burst_s)) = (num(first), num(second)) else {
                return Err(bad());
            };
            if !(burst_s > 0.0 && burst_s <= every_s && every_s <= 86400.0) {
                return Err(format!(
                    "service {s:?}: BURST must be more than 0 and at most EVERY, EVERY at most 86400"
                ));
            }
            ServiceRequests::Bursts { every_s, burst_s }
        };
        Ok(ServiceSpec {
            start_s: window.start_s,
            end_s: window.end_s,
            requests,
        })
    }
}

/// The longest step or wait `--training` takes, in milliseconds.
pub const MAX_STEP_MS: f64 = 10_000.0;

impl TrainingSpec {
    /// Parses `START-END:STEP_MS:WAIT_MS`, e.g. `2-300:12:25`.
    ///
    /// # Errors
    /// A message saying what is wrong, naming `s`.
    pub fn parse(s: &str) -> Result<TrainingSpec, String> {
        let bad = || {
            format!(
                "expected START-END:STEP_MS:WAIT_MS, seconds and milliseconds, e.g. 2-300:12:25, got {s:?}"
            )
        };
        let (span, rest) = s.split_once(':').ok_or_else(bad)?;
        let (step, wait) = rest.split_once(':').ok_or_else(bad)?;
        let load = format!("{span}:0");
        let window = ForeignSpec::parse(&load).map_err(|e| e.replace(&load, s))?;
        let num = |x: &str| x.trim().parse::<f64>().ok().filter(|v| v.is_finite());
        let (Some(step_ms), Some(wait_ms)) = (num(step), num(wait)) else {
            return Err(bad());
        };
        // A step of at least a tenth of a millisecond: the model serves steps one by one.
        if !(0.1..=MAX_STEP_MS).contains(&step_ms) || !(0.0..=MAX_STEP_MS).contains(&wait_ms) {
            return Err(format!(
                "training {s:?}: STEP_MS must be between 0.1 and {MAX_STEP_MS}, WAIT_MS between 0 and {MAX_STEP_MS}"
            ));
        }
        Ok(TrainingSpec {
            start_s: window.start_s,
            end_s: window.end_s,
            step_ms,
            wait_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_service_spec_and_rejects_bad_ones() {
        assert_eq!(
            ServiceSpec::parse("2-60:6:0.17").unwrap(),
            ServiceSpec {
                start_s: 2.0,
                end_s: 60.0,
                requests: ServiceRequests::Bursts {
                    every_s: 6.0,
                    burst_s: 0.17
                }
            }
        );
        assert_eq!(
            ServiceSpec::parse("2-60:20/s:0.87ms").unwrap().requests,
            ServiceRequests::Rate {
                per_s: 20.0,
                request_ms: 0.87,
                fills_every_sm: false
            }
        );
        assert_eq!(
            ServiceSpec::parse("2-60:5/s:2ms:gpu").unwrap().requests,
            ServiceRequests::Rate {
                per_s: 5.0,
                request_ms: 2.0,
                fills_every_sm: true
            }
        );
        for bad in [
            "",
            "2-60:6",
            "2-60",
            "60-2:6:0.1",
            "2-60:6:0",
            "2-60:1:2",
            "2-60:x:1",
            "2-60:20/s:0.87",
            "2-60:20/s:0.87ms:cpu",
            "2-60:6:0.1:gpu",
            "2-60:20/s:0ms",
            "2-60:0/s:1ms",
            "2-60:101/s:1ms",
            "2-60:20/s:1001ms",
            "2-60:x/s:1ms",
        ] {
            assert!(ServiceSpec::parse(bad).is_err(), "{bad}");
        }
        assert!(
            ServiceSpec::parse("9-3:6:1")
                .unwrap_err()
                .contains("\"9-3:6:1\""),
            "names the whole spec"
        );
    }

    #[test]
    fn parses_a_foreign_job_spec() {
        assert_eq!(
            ForeignSpec::parse("5-12:30").unwrap(),
            ForeignSpec {
                start_s: 5.0,
                end_s: 12.0,
                load_percent: 30.0
            }
        );
        assert_eq!(ForeignSpec::parse("0.5-1.5:100").unwrap().end_s, 1.5);
    }

    #[test]
    fn rejects_malformed_foreign_job_specs() {
        for bad in [
            "",
            "5-12",
            "5:30",
            "12-5:30",
            "5-12:130",
            "a-b:c",
            "5-12:nan",
            "-1-3:10",
            "0-1e20:30",
        ] {
            assert!(ForeignSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_a_training_spec_and_rejects_bad_ones() {
        assert_eq!(
            TrainingSpec::parse("2-300:12:25").unwrap(),
            TrainingSpec {
                start_s: 2.0,
                end_s: 300.0,
                step_ms: 12.0,
                wait_ms: 25.0
            }
        );
        for bad in [
            "2-300:12",
            "2-300",
            "300-2:12:25",
            "2-300:0:25",
            "2-300:12:-1",
            "2-300:x:1",
        ] {
            assert!(TrainingSpec::parse(bad).is_err(), "{bad}");
        }
        let e = TrainingSpec::parse("9-3:12:25").unwrap_err();
        assert!(e.contains("9-3:12:25"), "{e}");
    }
}
