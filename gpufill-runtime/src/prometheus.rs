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
//! `/proc` by the `procfs` crate at each scrape (`ProcessStats`). The crate
//! `prometheus-client` was weighed for the rendering and left: it writes OpenMetrics
//! text only, which would change the content type and the form of every series that
//! scrapers, `promtool check metrics` and the rules here are written against.
//!
//! Each series is described once, in [`series()`]: its name, type, labels, help text and
//! what the docs say beyond the help. [`render`] writes them in that order, and the
//! metric tables of README.md and docs/operations.md are generated from the same list
//! ([`markdown_table`], kept equal to the docs by a test of the binary's).

use std::fmt::Write;

use gpufill_core::{PidView, State};

use crate::snapshot::GpuSnapshot;

mod list;
mod table;

pub use table::{MetricTable, markdown_table};

/// The `Content-Type` of the rendered text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

const STATES: [State; 5] = [
    State::Filling,
    State::Yielding,
    State::Blind,
    State::Stopped,
    State::Off,
];

/// The states of `gpufill_mps`, in order.
pub(crate) const MPS_STATES: [&str; 3] = ["client", "none", "left"];

/// The PID views of `gpufill_pid_view`, in order.
const PID_VIEWS: [PidView; 2] = [PidView::Host, PidView::Namespace];

/// A series' type, as its TYPE line names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A value that goes up and down.
    Gauge,
    /// A count that only goes up (from 0 at start).
    Counter,
}

impl Kind {
    /// The name in a TYPE line: `gauge`, `counter`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        }
    }
}

/// The labels of a series' samples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Labels {
    /// Whether each sample carries a GPU's labels (`gpu`, `UUID`, `model_name`,
    /// `Hostname`): a sample per GPU.
    pub gpu: bool,
    /// Its own labels, after the GPU's.
    pub own: Vec<&'static str>,
    /// The values its one own label takes, a sample each: 1 for the one that holds, 0
    /// for the others. Empty where the values are free (`gpufill_build_info`'s).
    pub values: Vec<&'static str>,
}

/// Where a series' samples come from.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// A value per GPU (`None`: no sample for that GPU).
    Gpu(fn(&GpuSnapshot) -> Option<f64>),
    /// `gpufill_state`: a sample per GPU (once it ticked) and state.
    State,
    /// One sample per value of the label, 1 for this process's.
    Choice {
        label: &'static str,
        values: fn() -> Vec<&'static str>,
        current: fn(&Process) -> &'static str,
    },
    /// `gpufill_build_info`.
    BuildInfo,
    /// One unlabelled sample about the process; the series is left out, HELP and
    /// TYPE too, when there is no value.
    Process(fn(&Process, Option<&ProcessStats>) -> Option<f64>),
    /// Rendered by the series' owner, not by [`render`] ([`Series::elsewhere`]).
    Elsewhere,
}

/// One series: what `/metrics` says of it, and what the docs' metric tables say.
#[derive(Clone, Copy, Debug)]
pub struct Series {
    /// Its name.
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
    /// Its HELP text, plain text: the one line a README table gives it too.
    pub help: &'static str,
    /// What docs/operations.md says beyond the help (Markdown; may be empty).
    pub notes: &'static str,
    source: Source,
}

impl Series {
    const fn new(name: &'static str, kind: Kind, help: &'static str, source: Source) -> Series {
        Series {
            name,
            kind,
            help,
            notes: "",
            source,
        }
    }

    const fn notes(self, notes: &'static str) -> Series {
        Series { notes, ..self }
    }

    /// A series of one unlabelled sample that its owner renders (the reload series,
    /// [`crate::reload::SERIES`]): [`render`] knows nothing of it, the docs list it with
    /// the others.
    pub(crate) const fn elsewhere(
        name: &'static str,
        kind: Kind,
        help: &'static str,
        notes: &'static str,
    ) -> Series {
        Series::new(name, kind, help, Source::Elsewhere).notes(notes)
    }

    /// The labels of its samples.
    pub(crate) fn labels(&self) -> Labels {
        let (gpu, own, values) = match self.source {
            Source::Gpu(_) => (true, vec![], vec![]),
            Source::State => (true, vec!["state"], STATES.map(State::as_str).to_vec()),
            Source::Choice { label, values, .. } => (false, vec![label], values()),
            Source::BuildInfo => (false, vec!["version", "revision"], vec![]),
            Source::Process(_) | Source::Elsewhere => (false, vec![], vec![]),
        };
        Labels { gpu, own, values }
    }

    /// Writes its HELP and TYPE lines to `out`.
    pub(crate) fn header(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, escape_help(self.help));
        let _ = writeln!(out, "# TYPE {} {}", self.name, self.kind.as_str());
    }
}

/// Every series [`render`] writes, in its order, and none other.
pub fn series() -> &'static [Series] {
    list::SERIES
}

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
    /// `gpufill_mps`: whether this process has left an MPS control daemon that still
    /// runs or quits ([`crate::mps::Left`]): it fills without MPS.
    pub mps_left: bool,
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
            mps_left: crate::mps::left().is_some(),
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
pub(crate) struct ProcessStats {
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

/// Renders every series for `gpus`, then the process's (`gpufill_build_info`,
/// `gpufill_pid_view`, `gpufill_mps` and `process_*`, this process read now).
pub fn render(gpus: &[GpuSnapshot], process: &Process) -> String {
    render_with(gpus, process, ProcessStats::current().as_ref())
}

/// [`render`] with `stats` for the `process_*` series that change (none: left out).
pub(crate) fn render_with(
    gpus: &[GpuSnapshot],
    process: &Process,
    stats: Option<&ProcessStats>,
) -> String {
    let mut out = String::new();
    for series in list::SERIES {
        series.render(&mut out, gpus, process, stats);
    }
    out
}

impl Series {
    fn render(
        &self,
        out: &mut String,
        gpus: &[GpuSnapshot],
        process: &Process,
        stats: Option<&ProcessStats>,
    ) {
        let (name, host) = (self.name, &process.hostname);
        match self.source {
            Source::Gpu(value) => {
                self.header(out);
                for gpu in gpus {
                    if let Some(v) = value(gpu) {
                        sample(out, name, &labels(gpu, host, None), v);
                    }
                }
            }
            Source::State => {
                self.header(out);
                render_state(out, gpus, host);
            }
            Source::Choice {
                label,
                values,
                current,
            } => {
                self.header(out);
                let now = current(process);
                for value in values() {
                    let v = f64::from(u8::from(value == now));
                    sample(out, name, &format!("{label}=\"{value}\""), v);
                }
            }
            Source::BuildInfo => {
                self.header(out);
                let l = format!(
                    "version=\"{}\",revision=\"{}\"",
                    escape_label(process.version),
                    escape_label(process.revision)
                );
                sample(out, name, &l, 1.0);
            }
            Source::Process(value) => {
                if let Some(v) = value(process, stats) {
                    self.header(out);
                    let _ = writeln!(out, "{name} {}", number(v));
                }
            }
            Source::Elsewhere => {}
        }
    }
}

fn render_state(out: &mut String, gpus: &[GpuSnapshot], host: &str) {
    for gpu in gpus.iter().filter(|g| g.state.is_some()) {
        for state in STATES {
            let v = f64::from(u8::from(gpu.state == Some(state)));
            sample(out, "gpufill_state", &labels(gpu, host, Some(state)), v);
        }
    }
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
    use std::time::UNIX_EPOCH;

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
            mps_left: false,
        }
    }

    fn value_of(text: &str, series: &str) -> Option<String> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ').map(str::to_owned))
    }

    /// Every series with a sample: a GPU that ticked, and every process value known.
    fn everything() -> String {
        let stats = ProcessStats {
            cpu_seconds: 1.25,
            resident_bytes: 8 << 20,
            open_fds: 12,
            max_fds: Some(1024),
        };
        let mut g = gpu(0, "NVIDIA H200");
        g.power_watts = Some(300.0);
        g.last_tick = Some(UNIX_EPOCH);
        let mut sm = gpu(1, "NVIDIA H200");
        sm.sm_metric = true;
        let mut gaps = gpu(2, "NVIDIA H200");
        gaps.filling_gaps = true;
        gaps.estimated_cost_ratio = Some(0.012);
        render_with(&[g, sm, gaps], &process(), Some(&stats))
    }

    #[test]
    fn every_series_has_help_and_type_before_its_samples() {
        let text = everything();
        for series in series() {
            let name = series.name;
            let help = text
                .find(&format!("# HELP {name} {}\n", series.help))
                .expect(name);
            let kind = text
                .find(&format!("# TYPE {name} {}\n", series.kind.as_str()))
                .expect(name);
            let first = text
                .find(&format!("\n{name}{{"))
                .or_else(|| text.find(&format!("\n{name} ")))
                .expect(name);
            assert!(help < kind && kind < first, "{name}");
        }
        assert!(
            text.contains("gpufill_build_info{version=\"1.2.3\",revision=\"0123456789ab\"} 1\n")
        );
        assert!(text.ends_with("process_start_time_seconds 1700000000.25\n"));
    }

    #[test]
    fn the_series_list_is_what_render_writes_in_its_order() {
        let text = everything();
        let written: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .collect();
        let listed: Vec<String> = series()
            .iter()
            .map(|s| format!("{} {}", s.name, s.kind.as_str()))
            .collect();
        assert_eq!(written, listed);
        assert!(listed.len() > 20, "{listed:?}");
    }

    /// The label names of a sample line, and the value of `label` there.
    fn label_names_and_value<'a>(line: &'a str, label: &str) -> (Vec<&'a str>, Option<&'a str>) {
        let Some((_, rest)) = line.split_once('{') else {
            return (Vec::new(), None);
        };
        let pairs = rest.split_once('}').unwrap().0.split("\",");
        let pairs: Vec<(&str, &str)> = pairs.filter_map(|p| p.split_once("=\"")).collect();
        let value = pairs
            .iter()
            .find(|(n, _)| *n == label)
            .map(|(_, v)| v.trim_end_matches('"'));
        (pairs.iter().map(|(n, _)| *n).collect(), value)
    }

    #[test]
    fn each_series_labels_are_those_of_its_samples() {
        let text = everything();
        for series in series() {
            let labels = series.labels();
            let mut names: Vec<&str> = Vec::new();
            if labels.gpu {
                names.extend(["gpu", "UUID", "model_name", "Hostname"]);
            }
            names.extend(&labels.own);
            let mut values = Vec::new();
            let samples = text.lines().filter(|l| {
                l.strip_prefix(series.name)
                    .is_some_and(|r| r.starts_with(['{', ' ']))
            });
            for line in samples {
                let own = labels.own.first().copied().unwrap_or("");
                let (have, value) = label_names_and_value(line, own);
                assert_eq!(have, names, "{line}");
                values.extend(value.filter(|_| !labels.values.is_empty()));
            }
            values.dedup();
            if series.name == "gpufill_state" {
                assert_eq!(values.len(), labels.values.len() * 3, "three GPUs");
                values.truncate(labels.values.len());
            }
            assert_eq!(values, labels.values, "{}", series.name);
        }
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
    fn the_pid_view_and_the_mps_state_are_a_series_per_value_with_1_for_ours() {
        let client = Process {
            mps_client: true,
            ..process()
        };
        let left = Process {
            mps_left: true,
            ..process()
        };
        for (p, series, ours, other) in [
            (process(), "gpufill_pid_view{view=", "namespace", "host"),
            (process(), "gpufill_mps{state=", "none", "client"),
            (client.clone(), "gpufill_mps{state=", "client", "none"),
            (client, "gpufill_mps{state=", "client", "left"),
            (left.clone(), "gpufill_mps{state=", "left", "none"),
            (left, "gpufill_mps{state=", "left", "client"),
        ] {
            let text = render(&[], &p);
            let value = |v: &str| value_of(&text, &format!("{series}\"{v}\"}}"));
            assert_eq!(value(ours).as_deref(), Some("1"), "{series}{ours}");
            assert_eq!(value(other).as_deref(), Some("0"), "{series}{other}");
        }
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
                cost: None,
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
