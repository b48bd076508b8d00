//! The Prometheus text exposition format (version 0.0.4): HELP and TYPE lines, then
//! one sample per line, `name{label="value",...} number`.
//!
//! Per-GPU series carry dcgm-exporter's labels `gpu`, `UUID` and `Hostname`, so that they
//! join with DCGM's series (`on(UUID)`), and the model as `model_name`: dcgm-exporter's
//! `modelName` fails `promtool check metrics` (label names are snake_case), and a join
//! can take DCGM's `modelName` along with `group_left(modelName)`.
//!
//! The process's own series have the names and help texts of Prometheus's client
//! libraries (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
//! `process_open_fds`, `process_max_fds`, `process_start_time_seconds`), read from
//! `/proc` by the `procfs` crate at each scrape ([`ProcessStats`]). The crate
//! `prometheus-client` was weighed for the rendering and left: it writes OpenMetrics
//! text only, which would change the content type and the form of every series that
//! scrapers, `promtool check metrics` and the rules here are written against.

use std::fmt::Write;
use std::time::{Instant, UNIX_EPOCH};

use gpufill_core::{PidView, State};

use crate::snapshot::{GpuSnapshot, Liveness};

/// The `Content-Type` of the rendered text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

const STATES: [State; 5] = [
    State::Filling,
    State::Yielding,
    State::Blind,
    State::Stopped,
    State::Off,
];

type Value = fn(&GpuSnapshot) -> Option<f64>;

/// The per-GPU series other than the state: name, type, help, value (`None`: no sample).
const SERIES: &[(&str, &str, &str, Value)] = &[
    (
        "gpufill_worker_up",
        "gauge",
        "1 while the GPU's worker runs and ticks; 0 before its first tick, and once it has ended or stalled (no tick for ten ticks, at least 5 s).",
        |s| {
            Some(if s.liveness(Instant::now()) == Liveness::Ticking {
                1.0
            } else {
                0.0
            })
        },
    ),
    (
        "gpufill_last_tick_timestamp_seconds",
        "gauge",
        "When the GPU's worker last ticked, Unix time in seconds.",
        |s| {
            s.last_tick
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map(|d| d.as_secs_f64())
        },
    ),
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
        "gpufill_pauses_total",
        "counter",
        "Times gpufill paused beside a quiet holder of the GPU because the utilization showed a burst of its work.",
        |s| Some(s.pauses_total as f64),
    ),
    (
        "gpufill_filling_beside",
        "gauge",
        "1 while gpufill fills beside a quiet holder of the GPU, one short kernel at a time; else 0.",
        |s| Some(f64::from(u8::from(s.filling_beside))),
    ),
    (
        "gpufill_probe_faults_total",
        "counter",
        "Times measuring the GPU failed.",
        |s| Some(s.probe_faults_total as f64),
    ),
    (
        "gpufill_load_faults_total",
        "counter",
        "Ticks on which the load could not be applied (a launch or a CUDA context that failed; it is replaced with backoff).",
        |s| Some(s.load_faults_total as f64),
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

/// What the series about the process say, and the `Hostname` label: read once, at start.
#[derive(Clone, Debug, PartialEq)]
pub struct Process {
    /// The `Hostname` label: `$NODE_NAME` where set (the Kubernetes node, which the chart
    /// passes in, as dcgm-exporter reads it), else the kernel's host name.
    pub hostname: String,
    /// `process_start_time_seconds`: when this process started, Unix time; `None` where
    /// `/proc` does not say.
    pub start_time_seconds: Option<f64>,
    /// `gpufill_pid_view`: whether NVML shows every process (the host's PID namespace)
    /// or only this namespace's.
    pub pid_view: PidView,
    /// `gpufill_build_info`'s `version`.
    pub version: &'static str,
    /// `gpufill_build_info`'s `revision`: the commit built.
    pub revision: &'static str,
    /// `gpufill_mps`: whether this process's CUDA contexts are clients of an MPS control
    /// daemon (one ran when it started: [`crate::mps`]).
    pub mps_client: bool,
}

impl Process {
    /// This process, from the environment and `/proc`, built from `version` at
    /// `revision` (the binary's own, which a library cannot know), seeing `pid_view`
    /// (`gpufill_nvml::pid_view()`, or a simulated view).
    pub fn current(version: &'static str, revision: &'static str, pid_view: PidView) -> Process {
        let hostname = std::env::var("NODE_NAME")
            .ok()
            .filter(|n| !n.is_empty())
            .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
            .map(|n| n.trim().to_owned())
            .unwrap_or_default();
        Process {
            hostname,
            start_time_seconds: start_time_seconds(),
            pid_view,
            version,
            revision,
            mps_client: false,
        }
    }
}

/// Boot time plus the process's start in clock ticks after boot, as Prometheus's
/// client libraries compute `process_start_time_seconds`.
fn start_time_seconds() -> Option<f64> {
    let stat = procfs::process::Process::myself().ok()?.stat().ok()?;
    let boot = procfs::boot_time_secs().ok()? as f64;
    Some(boot + stat.starttime as f64 / procfs::ticks_per_second() as f64)
}

/// What the process uses now: the `process_*` series that change (read at each
/// scrape).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProcessStats {
    /// `process_cpu_seconds_total`: user and system CPU time.
    pub cpu_seconds: f64,
    /// `process_resident_memory_bytes`.
    pub resident_bytes: u64,
    /// `process_open_fds`.
    pub open_fds: u64,
    /// `process_max_fds`: the soft limit of open files; `None` when unlimited.
    pub max_fds: Option<u64>,
}

impl ProcessStats {
    /// This process now, from `/proc/self`; `None` where it cannot be read.
    pub fn current() -> Option<ProcessStats> {
        let me = procfs::process::Process::myself().ok()?;
        let stat = me.stat().ok()?;
        let limits = me.limits().ok()?;
        Some(ProcessStats {
            cpu_seconds: (stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64,
            resident_bytes: stat.rss * procfs::page_size(),
            open_fds: me.fd_count().ok()? as u64,
            max_fds: match limits.max_open_files.soft_limit {
                procfs::process::LimitValue::Value(n) => Some(n),
                procfs::process::LimitValue::Unlimited => None,
            },
        })
    }
}

/// The process's series that change: name, type, help, value (`None`: no sample).
type StatValue = fn(&ProcessStats) -> Option<f64>;
const PROCESS_SERIES: &[(&str, &str, &str, StatValue)] = &[
    (
        "process_cpu_seconds_total",
        "counter",
        "Total user and system CPU time spent in seconds.",
        |p| Some(p.cpu_seconds),
    ),
    (
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
        |p| Some(p.resident_bytes as f64),
    ),
    (
        "process_open_fds",
        "gauge",
        "Number of open file descriptors.",
        |p| Some(p.open_fds as f64),
    ),
    (
        "process_max_fds",
        "gauge",
        "Maximum number of open file descriptors.",
        |p| p.max_fds.map(|n| n as f64),
    ),
];

/// The states of `gpufill_mps`, in order.
pub const MPS_STATES: [&str; 2] = ["client", "none"];

/// Renders every series for `gpus`, then the process's (`gpufill_build_info`,
/// `gpufill_pid_view`, `gpufill_mps` and `process_*`, this process read now).
pub fn render(gpus: &[GpuSnapshot], process: &Process) -> String {
    render_with(gpus, process, ProcessStats::current().as_ref())
}

/// [`render`] with `stats` for the `process_*` series that change (none: left out).
pub fn render_with(
    gpus: &[GpuSnapshot],
    process: &Process,
    stats: Option<&ProcessStats>,
) -> String {
    let mut out = String::new();
    let host = &process.hostname;
    for &(name, kind, help, value) in SERIES {
        header(&mut out, name, kind, help);
        for gpu in gpus {
            if let Some(v) = value(gpu) {
                sample(&mut out, name, &labels(gpu, host, None), v);
            }
        }
        if name == "gpufill_width_blocks" {
            render_state(&mut out, gpus, host);
        }
    }
    header(
        &mut out,
        "gpufill_build_info",
        "gauge",
        "gpufill's version and the commit it was built from; always 1.",
    );
    sample(
        &mut out,
        "gpufill_build_info",
        &format!(
            "version=\"{}\",revision=\"{}\"",
            escape_label(process.version),
            escape_label(process.revision)
        ),
        1.0,
    );
    header(
        &mut out,
        "gpufill_pid_view",
        "gauge",
        "1 for the PID view gpufill has: host (NVML lists every process) or namespace (only this PID namespace's; the others are seen by memory and utilization).",
    );
    for view in [PidView::Host, PidView::Namespace] {
        let v = if process.pid_view == view { 1.0 } else { 0.0 };
        sample(
            &mut out,
            "gpufill_pid_view",
            &format!("view=\"{}\"", view.as_str()),
            v,
        );
    }
    header(
        &mut out,
        "gpufill_mps",
        "gauge",
        "1 for gpufill's MPS state: client (an MPS control daemon ran when gpufill started: its kernels run beside other clients' and it does not yield to them) or none (no daemon: the yield policy applies). gpufill restarts itself when the daemon starts or stops.",
    );
    for state in MPS_STATES {
        let v = if (state == "client") == process.mps_client {
            1.0
        } else {
            0.0
        };
        sample(&mut out, "gpufill_mps", &format!("state=\"{state}\""), v);
    }
    for &(name, kind, help, value) in PROCESS_SERIES {
        if let Some(v) = stats.and_then(value) {
            header(&mut out, name, kind, help);
            let _ = writeln!(out, "{name} {}", number(v));
        }
    }
    if let Some(start) = process.start_time_seconds {
        header(
            &mut out,
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
        );
        let _ = writeln!(out, "process_start_time_seconds {}", number(start));
    }
    out
}

fn render_state(out: &mut String, gpus: &[GpuSnapshot], host: &str) {
    header(
        out,
        "gpufill_state",
        "gauge",
        "1 for the loop's current state, 0 for the others; blind and stopped are error states.",
    );
    for gpu in gpus.iter().filter(|g| g.state.is_some()) {
        for state in STATES {
            let v = if gpu.state == Some(state) { 1.0 } else { 0.0 };
            sample(out, "gpufill_state", &labels(gpu, host, Some(state)), v);
        }
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn labels(gpu: &GpuSnapshot, host: &str, state: Option<State>) -> String {
    let l = &gpu.labels;
    let mut s = format!(
        "gpu=\"{}\",UUID=\"{}\",model_name=\"{}\",Hostname=\"{}\"",
        l.index,
        escape_label(&l.uuid),
        escape_label(&l.model),
        escape_label(host)
    );
    if let Some(state) = state {
        let _ = write!(s, ",state=\"{}\"", state.as_str());
    }
    s
}

fn sample(out: &mut String, name: &str, labels: &str, value: f64) {
    let _ = writeln!(out, "{name}{{{labels}}} {}", number(value));
}

/// A sample value as Prometheus spells it: `NaN`, `+Inf`, `-Inf`, or a Go-parsable
/// float: the shorter of the exact shortest form and the value rounded to nine
/// decimals, so a duty of 41 % reads `0.41`, not the `0.41000000000000003` that
/// `41.0 / 100.0` holds, and a timestamp keeps its microseconds.
pub fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        let fixed = format!("{v:.9}");
        let rounded = match fixed.trim_end_matches('0').trim_end_matches('.') {
            "-0" | "" => "0".to_owned(),
            t => t.to_owned(),
        };
        let exact = v.to_string();
        if rounded.len() < exact.len() {
            rounded
        } else {
            exact
        }
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
    use super::*;
    use crate::snapshot::{GpuLabels, Registry};

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

    fn process() -> Process {
        Process {
            hostname: "node-a".to_owned(),
            start_time_seconds: Some(1_700_000_000.25),
            pid_view: PidView::Namespace,
            version: "1.2.3",
            revision: "0123456789ab",
            mps_client: false,
        }
    }

    fn value_of(text: &str, series: &str) -> Option<String> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ').map(str::to_owned))
    }

    #[test]
    fn every_series_has_help_and_type_before_its_samples() {
        let text = render(&[gpu(0, "NVIDIA H200")], &process());
        let names = [
            "gpufill_target_percent gauge",
            "gpufill_utilization_percent gauge",
            "gpufill_sm_activity_percent gauge",
            "gpufill_duty_ratio gauge",
            "gpufill_width_blocks gauge",
            "gpufill_state gauge",
            "gpufill_foreign_processes gauge",
            "gpufill_yields_total counter",
            "gpufill_pauses_total counter",
            "gpufill_filling_beside gauge",
            "gpufill_probe_faults_total counter",
            "gpufill_memory_used_bytes gauge",
            "gpufill_power_watts gauge",
            "gpufill_build_info gauge",
            "process_start_time_seconds gauge",
        ];
        for name_type in names {
            let name = name_type.split(' ').next().unwrap();
            let help = text.find(&format!("# HELP {name} ")).expect(name);
            let kind = text.find(&format!("# TYPE {name_type}\n")).expect(name);
            let first = text
                .find(&format!("\n{name}{{"))
                .or_else(|| text.find(&format!("\n{name} ")))
                .unwrap_or(usize::MAX);
            assert!(help < kind && kind < first, "{name}");
        }
        assert!(
            text.contains("gpufill_build_info{version=\"1.2.3\",revision=\"0123456789ab\"} 1\n")
        );
        assert!(text.ends_with("process_start_time_seconds 1700000000.25\n"));
    }

    #[test]
    fn without_a_start_time_there_is_no_process_series() {
        let p = Process {
            start_time_seconds: None,
            ..process()
        };
        assert!(!render(&[], &p).contains("process_start_time_seconds"));
    }

    #[test]
    fn the_pid_view_is_one_series_per_view_with_1_for_ours() {
        let text = render(&[], &process());
        assert_eq!(
            value_of(&text, "gpufill_pid_view{view=\"namespace\"}").as_deref(),
            Some("1")
        );
        assert_eq!(
            value_of(&text, "gpufill_pid_view{view=\"host\"}").as_deref(),
            Some("0")
        );
    }

    #[test]
    fn the_mps_state_is_one_series_per_state_with_1_for_ours() {
        let none = render(&[], &process());
        assert_eq!(
            value_of(&none, "gpufill_mps{state=\"none\"}").as_deref(),
            Some("1")
        );
        assert_eq!(
            value_of(&none, "gpufill_mps{state=\"client\"}").as_deref(),
            Some("0")
        );
        let client = Process {
            mps_client: true,
            ..process()
        };
        let text = render(&[], &client);
        assert_eq!(
            value_of(&text, "gpufill_mps{state=\"client\"}").as_deref(),
            Some("1")
        );
        assert_eq!(
            value_of(&text, "gpufill_mps{state=\"none\"}").as_deref(),
            Some("0")
        );
    }

    #[test]
    fn the_process_series_carry_prometheus_names_and_leave_out_what_is_unknown() {
        let stats = ProcessStats {
            cpu_seconds: 1.25,
            resident_bytes: 8 << 20,
            open_fds: 12,
            max_fds: None,
        };
        let text = render_with(&[], &process(), Some(&stats));
        assert!(text.contains(
            "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.25\n"
        ));
        assert_eq!(
            value_of(&text, "process_resident_memory_bytes").as_deref(),
            Some("8388608")
        );
        assert_eq!(value_of(&text, "process_open_fds").as_deref(), Some("12"));
        assert!(!text.contains("process_max_fds"), "unlimited: no sample");
        assert!(!render_with(&[], &process(), None).contains("process_open_fds"));
    }

    #[test]
    fn this_process_reads_its_cpu_memory_and_descriptors() {
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        let stats = ProcessStats::current().expect("/proc gives them");
        assert!(stats.resident_bytes > 1 << 20, "{stats:?}");
        assert!(
            stats.open_fds >= 4,
            "stdin, stdout, stderr and the file: {stats:?}"
        );
        assert!(stats.max_fds.is_none_or(|max| max >= stats.open_fds));
        assert!(stats.cpu_seconds >= 0.0);
        drop(file);
    }

    #[test]
    fn this_process_started_before_now_and_has_a_host_name() {
        let p = Process::current("1.2.3", "abc", PidView::Host);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = p.start_time_seconds.expect("/proc gives the start time");
        assert!(
            start <= now + 1.0 && start > now - 86_400.0 * 365.0,
            "{start}"
        );
        assert!(!p.hostname.is_empty());
        assert_eq!((p.version, p.revision), ("1.2.3", "abc"));
    }

    #[test]
    fn samples_carry_the_dcgm_labels_and_the_current_state_is_1() {
        let text = render(&[gpu(3, "NVIDIA H200")], &process());
        let l = "gpu=\"3\",UUID=\"GPU-3\",model_name=\"NVIDIA H200\",Hostname=\"node-a\"";
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
        let text = render(&[g], &process());
        assert!(text.contains("# TYPE gpufill_utilization_percent gauge"));
        assert!(!text.contains("\ngpufill_utilization_percent{"));
        assert!(!text.contains("\ngpufill_power_watts{"));
    }

    #[test]
    fn sm_activity_is_published_under_its_own_name() {
        let mut g = gpu(0, "x");
        g.util_percent = Some(30.0);
        let util = render(std::slice::from_ref(&g), &process());
        assert!(util.contains("\ngpufill_utilization_percent{"), "{util}");
        assert!(!util.contains("\ngpufill_sm_activity_percent{"), "{util}");
        g.sm_metric = true;
        let sm = render(&[g], &process());
        assert!(!sm.contains("\ngpufill_utilization_percent{"), "{sm}");
        assert!(sm.contains("\ngpufill_sm_activity_percent{"), "{sm}");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label("two\nlines"), "two\\nlines");
        let text = render(&[gpu(0, "Odd \"GPU\"\\\n")], &process());
        assert!(text.contains(r#"model_name="Odd \"GPU\"\\\n""#), "{text}");
        // Every sample stays on one line.
        assert!(
            text.lines().all(|l| l.starts_with('#')
                || l.starts_with("gpufill_")
                || l.starts_with("process_"))
        );
    }

    #[test]
    fn special_numbers_use_prometheus_spelling() {
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(f64::NEG_INFINITY), "-Inf");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(41.0 / 100.0 + 1e-17), "0.41");
        assert_eq!(number(0.1 + 0.2), "0.3");
        assert_eq!(number(266_338_304.0), "266338304");
        assert_eq!(number(1_795_504_436.298_443), "1795504436.298443");
        assert_eq!(number(-0.0), "0");
        assert_eq!(number(3.0), "3");
    }

    #[test]
    fn counters_never_go_down_across_renders() {
        let (registry, mut publishers) = Registry::new(vec![(*gpu(0, "x").labels).clone()]);
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
                shape: gpufill_core::LaunchShape::Bursts,
                foreign: 1,
                probed: None,
                events,
            };
            publishers[0].observe(&tick, 1);
            let text = render(&registry.snapshots(), &process());
            let v: f64 = value_of(
                &text,
                "gpufill_yields_total{gpu=\"0\",UUID=\"GPU-0\",model_name=\"x\",Hostname=\"node-a\"}",
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
