//! The Prometheus text exposition format (version 0.0.4): HELP and TYPE lines, then
//! one sample per line, `name{label="value",...} number`.

use std::fmt::Write;

use gpufill_core::State;

use super::GpuSnapshot;

/// The `Content-Type` of the rendered text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

const STATES: [State; 4] = [
    State::Filling,
    State::Yielding,
    State::Blind,
    State::Stopped,
];

type Value = fn(&GpuSnapshot) -> Option<f64>;

/// The per-GPU series other than the state: name, type, help, value (`None`: no sample).
const SERIES: &[(&str, &str, &str, Value)] = &[
    (
        "gpufill_target_percent",
        "gauge",
        "Target gpufill holds now, percent (after schedules): utilization, or SM activity with metric = \"sm\".",
        |s| Some(s.target_percent),
    ),
    (
        "gpufill_utilization_percent",
        "gauge",
        "Last measured GPU utilization, percent (NVML); absent when unknown or with metric = \"sm\".",
        |s| s.util_percent.filter(|_| !s.sm_metric),
    ),
    (
        "gpufill_sm_activity_percent",
        "gauge",
        "Last measured SM activity, percent (GPM SM utilization); only with metric = \"sm\".",
        |s| s.util_percent.filter(|_| s.sm_metric),
    ),
    (
        "gpufill_duty_ratio",
        "gauge",
        "gpufill's own time share of the GPU, 0 to 1.",
        |s| Some(s.duty_ratio),
    ),
    (
        "gpufill_width_blocks",
        "gauge",
        "One-warp blocks per gpufill kernel.",
        |s| Some(f64::from(s.width_blocks)),
    ),
    (
        "gpufill_foreign_processes",
        "gauge",
        "Foreign processes gpufill yields to now.",
        |s| Some(s.foreign as f64),
    ),
    (
        "gpufill_yields_total",
        "counter",
        "Times gpufill started yielding to other processes.",
        |s| Some(s.yields_total as f64),
    ),
    (
        "gpufill_probe_faults_total",
        "counter",
        "Times measuring the GPU failed.",
        |s| Some(s.probe_faults_total as f64),
    ),
    (
        "gpufill_memory_used_bytes",
        "gauge",
        "GPU memory held by gpufill itself, bytes (NVML's process list).",
        |s| s.memory_used_bytes.map(|b| b as f64),
    ),
    (
        "gpufill_power_watts",
        "gauge",
        "Board power draw, watts.",
        |s| s.power_watts,
    ),
];

/// Renders every series for `gpus`, and `gpufill_build_info` with `version`.
pub fn render(gpus: &[GpuSnapshot], version: &str) -> String {
    let mut out = String::new();
    for &(name, kind, help, value) in SERIES {
        header(&mut out, name, kind, help);
        for gpu in gpus {
            if let Some(v) = value(gpu) {
                sample(&mut out, name, &labels(gpu, None), v);
            }
        }
        if name == "gpufill_width_blocks" {
            render_state(&mut out, gpus);
        }
    }
    header(
        &mut out,
        "gpufill_build_info",
        "gauge",
        "gpufill's version; always 1.",
    );
    sample(
        &mut out,
        "gpufill_build_info",
        &format!("version=\"{}\"", escape_label(version)),
        1.0,
    );
    out
}

fn render_state(out: &mut String, gpus: &[GpuSnapshot]) {
    header(
        out,
        "gpufill_state",
        "gauge",
        "1 for the loop's current state, 0 for the others; blind and stopped are error states.",
    );
    for gpu in gpus.iter().filter(|g| g.state.is_some()) {
        for state in STATES {
            let v = if gpu.state == Some(state) { 1.0 } else { 0.0 };
            sample(out, "gpufill_state", &labels(gpu, Some(state)), v);
        }
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn labels(gpu: &GpuSnapshot, state: Option<State>) -> String {
    let l = &gpu.labels;
    let mut s = format!(
        "gpu=\"{}\",UUID=\"{}\",modelName=\"{}\"",
        l.index,
        escape_label(&l.uuid),
        escape_label(&l.model)
    );
    if let Some(state) = state {
        let _ = write!(s, ",state=\"{}\"", state.as_str());
    }
    s
}

fn sample(out: &mut String, name: &str, labels: &str, value: f64) {
    let _ = writeln!(out, "{name}{{{labels}}} {}", number(value));
}

/// A sample value as Prometheus spells it: `NaN`, `+Inf`, `-Inf`, or a Go-parsable float.
pub fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        v.to_string()
    }
}

/// Escapes a label value: backslash, double quote and newline.
pub fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Escapes HELP text: backslash and newline.
fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::super::GpuLabels;
    use super::*;

    fn gpu(index: u32, model: &str) -> GpuSnapshot {
        GpuSnapshot {
            target_percent: 50.0,
            util_percent: Some(49.5),
            duty_ratio: 0.515,
            width_blocks: 1,
            state: Some(State::Yielding),
            foreign: 2,
            yields_total: 3,
            probe_faults_total: 0,
            memory_used_bytes: Some(266_338_304),
            power_watts: None,
            ..GpuSnapshot::new(GpuLabels {
                index,
                uuid: format!("GPU-{index}"),
                model: model.to_owned(),
            })
        }
    }

    fn value_of(text: &str, series: &str) -> Option<String> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ').map(str::to_owned))
    }

    #[test]
    fn every_series_has_help_and_type_before_its_samples() {
        let text = render(&[gpu(0, "NVIDIA H200")], "1.2.3");
        let names = [
            "gpufill_target_percent gauge",
            "gpufill_utilization_percent gauge",
            "gpufill_sm_activity_percent gauge",
            "gpufill_duty_ratio gauge",
            "gpufill_width_blocks gauge",
            "gpufill_state gauge",
            "gpufill_foreign_processes gauge",
            "gpufill_yields_total counter",
            "gpufill_probe_faults_total counter",
            "gpufill_memory_used_bytes gauge",
            "gpufill_power_watts gauge",
            "gpufill_build_info gauge",
        ];
        for name_type in names {
            let name = name_type.split(' ').next().unwrap();
            let help = text.find(&format!("# HELP {name} ")).expect(name);
            let kind = text.find(&format!("# TYPE {name_type}\n")).expect(name);
            let first = text.find(&format!("\n{name}{{")).unwrap_or(usize::MAX);
            assert!(help < kind && kind < first, "{name}");
        }
        assert!(text.contains("gpufill_build_info{version=\"1.2.3\"} 1\n"));
    }

    #[test]
    fn samples_carry_the_dcgm_labels_and_the_current_state_is_1() {
        let text = render(&[gpu(3, "NVIDIA H200")], "0");
        let l = "gpu=\"3\",UUID=\"GPU-3\",modelName=\"NVIDIA H200\"";
        assert_eq!(
            value_of(&text, &format!("gpufill_target_percent{{{l}}}")).as_deref(),
            Some("50")
        );
        assert_eq!(
            value_of(&text, &format!("gpufill_duty_ratio{{{l}}}")).as_deref(),
            Some("0.515")
        );
        for (state, v) in [
            ("filling", "0"),
            ("yielding", "1"),
            ("blind", "0"),
            ("stopped", "0"),
        ] {
            let series = format!("gpufill_state{{{l},state=\"{state}\"}}");
            assert_eq!(value_of(&text, &series).as_deref(), Some(v), "{state}");
        }
        assert_eq!(
            value_of(&text, &format!("gpufill_memory_used_bytes{{{l}}}")).as_deref(),
            Some("266338304")
        );
    }

    #[test]
    fn unknown_values_have_no_sample() {
        let mut g = gpu(0, "x");
        g.util_percent = None;
        let text = render(&[g], "0");
        assert!(text.contains("# TYPE gpufill_utilization_percent gauge"));
        assert!(!text.contains("\ngpufill_utilization_percent{"));
        assert!(!text.contains("\ngpufill_power_watts{"));
    }

    #[test]
    fn sm_activity_is_published_under_its_own_name() {
        let mut g = gpu(0, "x");
        g.util_percent = Some(30.0);
        let util = render(std::slice::from_ref(&g), "0");
        assert!(util.contains("\ngpufill_utilization_percent{"), "{util}");
        assert!(!util.contains("\ngpufill_sm_activity_percent{"), "{util}");
        g.sm_metric = true;
        let sm = render(&[g], "0");
        assert!(!sm.contains("\ngpufill_utilization_percent{"), "{sm}");
        assert!(sm.contains("\ngpufill_sm_activity_percent{"), "{sm}");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label("two\nlines"), "two\\nlines");
        let text = render(&[gpu(0, "Odd \"GPU\"\\\n")], "0");
        assert!(text.contains(r#"modelName="Odd \"GPU\"\\\n""#), "{text}");
        // Every sample stays on one line.
        assert!(
            text.lines()
                .all(|l| l.starts_with('#') || l.starts_with("gpufill_"))
        );
    }

    #[test]
    fn special_numbers_use_prometheus_spelling() {
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(f64::NEG_INFINITY), "-Inf");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(3.0), "3");
    }

    #[test]
    fn counters_never_go_down_across_renders() {
        let (registry, mut publishers) = super::super::Registry::new(vec![gpu(0, "x").labels]);
        let mut last = 0.0;
        for i in 0..20 {
            let events = if i % 3 == 0 {
                vec![gpufill_core::Event::Yielded {
                    pids: vec![1],
                    unlisted: false,
                }]
            } else {
                Vec::new()
            };
            let tick = gpufill_core::Tick {
                at: gpufill_core::Time::ZERO,
                state: State::Yielding,
                target: gpufill_core::Utilization::ZERO,
                sample: None,
                util: None,
                duty: gpufill_core::Duty::ZERO,
                width: gpufill_core::Width::ONE_WARP,
                foreign: 1,
                events,
            };
            publishers[0].observe(&tick, 1);
            let text = registry.render();
            let v: f64 = value_of(
                &text,
                "gpufill_yields_total{gpu=\"0\",UUID=\"GPU-0\",modelName=\"x\"}",
            )
            .unwrap()
            .parse()
            .unwrap();
            assert!(v >= last, "{v} after {last}");
            last = v;
        }
        assert_eq!(last, 7.0);
    }
}
