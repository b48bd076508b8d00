//! `simulate --training START-END:STEP_MS:WAIT_MS`: a training job that waits on its
//! input, beside which gpufill fills gaps or holds off.

pub use gpufill_runtime::simulate::TrainingSpec;

use super::parse_foreign;

/// The longest step or wait `--training` takes, in milliseconds.
pub const MAX_STEP_MS: f64 = 10_000.0;

/// Parses `START-END:STEP_MS:WAIT_MS`, e.g. `2-300:12:25`.
///
/// # Errors
/// A message saying what is wrong, for clap to print.
pub fn parse_training(s: &str) -> Result<TrainingSpec, String> {
    let bad = || {
        format!(
            "expected START-END:STEP_MS:WAIT_MS, seconds and milliseconds, e.g. 2-300:12:25, got {s:?}"
        )
    };
    let (span, rest) = s.split_once(':').ok_or_else(bad)?;
    let (step, wait) = rest.split_once(':').ok_or_else(bad)?;
    let load = format!("{span}:0");
    let window = parse_foreign(&load).map_err(|e| e.replace(&load, s))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_training_spec_and_rejects_bad_ones() {
        assert_eq!(
            parse_training("2-300:12:25").unwrap(),
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
            assert!(parse_training(bad).is_err(), "{bad}");
        }
        let e = parse_training("9-3:12:25").unwrap_err();
        assert!(e.contains("9-3:12:25"), "{e}");
    }
}
