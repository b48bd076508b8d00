//! The series list: each series' name, type, help and notes, and where its samples come
//! from (which also says its labels). [`super::render`] writes them in this order; the
//! docs' metric tables are generated from it.

use std::time::{Instant, UNIX_EPOCH};

use gpufill_core::PidView;

use super::Kind::{Counter, Gauge};
use super::{MPS_STATES, PID_VIEWS, Series, Source};
use crate::snapshot::Liveness;

/// Every series, in the order of `/metrics`.
pub(super) const SERIES: &[Series] = &[
    Series::new(
        "gpufill_worker_up",
        Gauge,
        "1 while the GPU's worker runs and ticks; 0 before its first tick, and once it has ended or stalled (no tick for ten ticks, at least 5 s).",
        Source::Gpu(|s| {
            let ticking = s.liveness(Instant::now()) == Liveness::Ticking;
            Some(f64::from(u8::from(ticking)))
        }),
    )
    .notes(
        "Ended: failed or panicked. `/healthz` follows the same rule, but for a GPU that waits for its lock, which a process other than a gpufill holds: 0 here, healthy there (docs/operations.md, \"One gpufill per GPU\").",
    ),
    Series::new(
        "gpufill_last_tick_timestamp_seconds",
        Gauge,
        "When the GPU's worker last ticked, Unix time in seconds.",
        Source::Gpu(|s| {
            s.last_tick
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map(|d| d.as_secs_f64())
        }),
    )
    .notes("`time() - gpufill_last_tick_timestamp_seconds` is how stale it is."),
    Series::new(
        "gpufill_target_percent",
        Gauge,
        "Target gpufill holds now, percent (after schedules): utilization, or SM activity with metric = \"sm\".",
        Source::Gpu(|s| Some(s.target_percent)),
    ),
    Series::new(
        "gpufill_utilization_percent",
        Gauge,
        "Last measured GPU utilization, percent (NVML); absent when unknown or with metric = \"sm\".",
        Source::Gpu(|s| s.util_percent.filter(|_| !s.sm_metric)),
    )
    .notes("NVML's device utilization counts everyone's kernels, not only gpufill's."),
    Series::new(
        "gpufill_sm_activity_percent",
        Gauge,
        "Last measured SM activity, percent (GPM SM utilization); only with metric = \"sm\".",
        Source::Gpu(|s| s.util_percent.filter(|_| s.sm_metric)),
    )
    .notes("The value gpufill then holds at the target."),
    Series::new(
        "gpufill_duty_ratio",
        Gauge,
        "gpufill's own time share of the GPU, 0 to 1.",
        Source::Gpu(|s| Some(s.duty_ratio)),
    )
    .notes("0 while yielding."),
    Series::new(
        "gpufill_width_blocks",
        Gauge,
        "One-warp blocks per gpufill kernel.",
        Source::Gpu(|s| Some(f64::from(s.width_blocks))),
    ),
    Series::new(
        "gpufill_state",
        Gauge,
        "1 for the loop's current state, 0 for the others; blind and stopped are error states.",
        Source::State,
    )
    .notes(
        "The states: `filling`; `yielding` (another process is, or was within the grace, on the GPU; \
         also while paused beside a quiet holder that works); `blind` (the probe fails, or no \
         CUDA context runs while a new one is awaited; idle); `stopped` (the GPU's loop \
         ended, e.g. the GPU was lost; reopened with backoff); `off` (the target is 0, e.g. \
         inside a schedule window).",
    ),
    Series::new(
        "gpufill_foreign_processes",
        Gauge,
        "Foreign processes gpufill yields to now.",
        Source::Gpu(|s| Some(s.foreign as f64)),
    )
    .notes(
        "Ignore lists applied; 0 while it fills, beside quiet holders and as an MPS client \
         too; a presence NVML's process list does not show counts as one.",
    ),
    Series::new(
        "gpufill_yields_total",
        Counter,
        "Times gpufill started yielding to other processes.",
        Source::Gpu(|s| Some(s.yields_total as f64)),
    ),
    Series::new(
        "gpufill_pauses_total",
        Counter,
        "Times gpufill paused beside a quiet holder of the GPU because an NVML sample or a held-back kernel of its own showed the holder's work.",
        Source::Gpu(|s| Some(s.pauses_total as f64)),
    ),
    Series::new(
        "gpufill_unexplained_signs_total",
        Counter,
        "Times a kernel of gpufill's own showed a sign of another context while nobody else could be on the GPU: the host's own jitter, ignored.",
        Source::Gpu(|s| Some(s.unexplained_signs_total as f64)),
    )
    .notes(
        "Nothing pauses for these (every context is listed, or shows in device memory); a \
         host where this climbs stalls gpufill's launching thread (`-v` logs each).",
    ),
    Series::new(
        "gpufill_filling_beside",
        Gauge,
        "1 while gpufill fills beside a quiet holder of the GPU, one short kernel at a time; else 0.",
        Source::Gpu(|s| Some(f64::from(u8::from(s.filling_beside)))),
    )
    .notes("A kernel lasts `load.beside_kernel_us`; gpufill's CPU is then a few percent of a core."),
    Series::new(
        "gpufill_filling_gaps",
        Gauge,
        "1 while gpufill fills the gaps of live work (yield.beside_live = \"fill_gaps\"); else 0.",
        Source::Gpu(|s| Some(f64::from(u8::from(s.filling_gaps)))),
    ),
    Series::new(
        "gpufill_estimated_cost_ratio",
        Gauge,
        "While filling gaps: what gpufill estimates it costs the live work, from its own kernels' timing, 0 to 1.",
        Source::Gpu(|s| s.estimated_cost_ratio),
    )
    .notes(
        "Absent unless filling gaps. gpufill holds it under `yield.max_cost_percent`: each \
         meeting with the work is charged a context switch and half the kernel it met \
         (more when that kernel waited behind the work), against the work's own busy \
         time, or all the time for work on a clock (a trainer's steps).",
    ),
    Series::new(
        "gpufill_probe_faults_total",
        Counter,
        "Times measuring the GPU failed.",
        Source::Gpu(|s| Some(s.probe_faults_total as f64)),
    ),
    Series::new(
        "gpufill_load_faults_total",
        Counter,
        "Ticks on which the load could not be applied (a launch or a CUDA context that failed; it is replaced with backoff).",
        Source::Gpu(|s| Some(s.load_faults_total as f64)),
    ),
    Series::new(
        "gpufill_memory_used_bytes",
        Gauge,
        "GPU memory held by gpufill itself, bytes (NVML's process list).",
        Source::Gpu(|s| s.memory_used_bytes.map(|b| b as f64)),
    )
    .notes(
        "Read once a second; 0 while `release_context` has dropped the context; absent \
         under `simulate` and where the driver gives no size.",
    ),
    Series::new(
        "gpufill_power_watts",
        Gauge,
        "Board power draw, watts.",
        Source::Gpu(|s| s.power_watts),
    )
    .notes("Whoever causes it; read once a second; absent under `simulate`."),
    Series::new(
        "gpufill_build_info",
        Gauge,
        "gpufill's version and the commit it was built from; always 1.",
        Source::BuildInfo,
    )
    .notes("`gpufill --version` prints both."),
    Series::new(
        "gpufill_pid_view",
        Gauge,
        "1 for the PID view gpufill has: host (NVML lists every process) or namespace (only this PID namespace's; the others are seen by memory and utilization).",
        Source::Choice {
            label: "view",
            values: || PID_VIEWS.map(PidView::as_str).to_vec(),
            current: |p| p.pid_view.as_str(),
        },
    )
    .notes("0 for the other. `namespace`: inside a container without the host's PID namespace."),
    Series::new(
        "gpufill_mps",
        Gauge,
        "1 for gpufill's MPS state: client (an MPS control daemon ran when gpufill started: its kernels run beside other clients' and it does not yield to them), none (no daemon: the yield policy applies) or left (gpufill left a daemon that was told to quit or whose server kept dying, and fills without MPS under the yield policy until another daemon starts). gpufill restarts itself when the daemon starts, stops, quits or loses its server.",
        Source::Choice {
            label: "state",
            values: || MPS_STATES.to_vec(),
            current: |p| match (p.mps_client, p.mps_left) {
                (true, _) => MPS_STATES[0],
                (false, false) => MPS_STATES[1],
                (false, true) => MPS_STATES[2],
            },
        },
    )
    .notes("0 for the others."),
    Series::new(
        "process_cpu_seconds_total",
        Counter,
        "Total user and system CPU time spent in seconds.",
        Source::Process(|_, s| Some(s?.cpu_seconds)),
    ),
    Series::new(
        "process_resident_memory_bytes",
        Gauge,
        "Resident memory size in bytes.",
        Source::Process(|_, s| Some(s?.resident_bytes as f64)),
    ),
    Series::new(
        "process_open_fds",
        Gauge,
        "Number of open file descriptors.",
        Source::Process(|_, s| Some(s?.open_fds as f64)),
    ),
    Series::new(
        "process_max_fds",
        Gauge,
        "Maximum number of open file descriptors.",
        Source::Process(|_, s| s?.max_fds.map(|n| n as f64)),
    )
    .notes("Absent when unlimited."),
    Series::new(
        "process_start_time_seconds",
        Gauge,
        "Start time of the process since unix epoch in seconds.",
        Source::Process(|p, _| p.start_time_seconds),
    ),
];
