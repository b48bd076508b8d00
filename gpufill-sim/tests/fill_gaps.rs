//! Filling the gaps of live work without MPS (issue 40) on the simulated GPU: the real
//! loop's rate control ([`gpufill_core::gaps::GapCost`]) against the model of what our
//! kernels cost a training job and a sub-millisecond service (the crate docs, "Filling
//! gaps"). The CLI's tests (gpufill-cli/tests/fill_gaps.rs) hold the issue's bounds on
//! `gpufill simulate`; these say what the loop estimates and how it holds off.

use std::time::Duration;

use gpufill_core::{
    BesideLive, ControllerKind, FillSettings, LoopSettings, Time, Utilization, YieldMode,
    YieldSettings,
};
use gpufill_sim::{ForeignJob, SimConfig, Simulation};

/// 300 s beside `job` with the loop filling gaps (target 50 %, activity mode, 30 s
/// idle grace, a 2 % bound), ticking every 50 ms: the job's report and the loop's cost
/// estimates from 60 s on.
fn fill_gaps_beside(job: ForeignJob) -> (gpufill_sim::RequestReport, Vec<f64>) {
    let (report, costs, _) = fill_gaps_beside_with_util(job);
    (report, costs)
}

/// [`fill_gaps_beside`], and the mean utilization NVML read from 60 s on.
fn fill_gaps_beside_with_util(job: ForeignJob) -> (gpufill_sim::RequestReport, Vec<f64>, f64) {
    let (mut reports, costs, util) = fill_gaps_beside_all(vec![job]);
    (reports.swap_remove(0), costs, util)
}

/// [`fill_gaps_beside_with_util`] beside all of `jobs` at once: each job's report.
fn fill_gaps_beside_all(jobs: Vec<ForeignJob>) -> (Vec<gpufill_sim::RequestReport>, Vec<f64>, f64) {
    let settings = LoopSettings {
        fill: FillSettings {
            target: Utilization::from_percent(50.0).unwrap(),
            ..FillSettings::default()
        },
        yielding: YieldSettings {
            mode: YieldMode::Activity {
                idle_grace: Duration::from_secs(30),
            },
            beside_live: BesideLive::FillGaps,
            ..YieldSettings::default()
        },
        controller: ControllerKind::Pi,
    };
    let cfg = SimConfig {
        foreign: jobs,
        ..SimConfig::default()
    };
    let mut sim = Simulation::new(cfg, &settings, Duration::from_millis(50));
    let mut costs = Vec::new();
    let mut utils = Vec::new();
    sim.run_until(Time::from_secs_f64(300.0), |t| {
        if t.at < Time::from_secs_f64(60.0) {
            return;
        }
        if let Some(c) = t.cost {
            costs.push(c);
        }
        if let Some(u) = t.sample {
            utils.push(u.fraction());
        }
    });
    let report = sim.gpu().report(Time::from_secs_f64(300.0));
    let requests = report
        .foreign
        .iter()
        .map(|f| f.requests.clone().unwrap())
        .collect();
    (requests, costs, mean(&utils))
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

/// [`fill_gaps_beside_with_util`], printed as a line named `name`: the report, the mean
/// estimate and the mean utilization.
fn fill_gaps_beside_printed(name: &str, job: ForeignJob) -> (gpufill_sim::RequestReport, f64, f64) {
    let (requests, costs, util) = fill_gaps_beside_with_util(job);
    let estimate = mean(&costs);
    print_costs(name, &requests, estimate, util);
    (requests, estimate, util)
}

/// One line: what `requests` paid at the median and on the mean, the estimate and the
/// GPU.
fn print_costs(name: &str, requests: &gpufill_sim::RequestReport, estimate: f64, util: f64) {
    eprintln!(
        "{name}: median {:.2} %, mean {:.2} %, estimated {:.2} %, GPU {:.1} %",
        requests.slowdown() * 100.0,
        requests.mean_slowdown() * 100.0,
        estimate * 100.0,
        util * 100.0
    );
}

#[test]
fn beside_an_input_bound_trainer_the_estimate_stays_near_the_bound_and_its_steps_barely_slow() {
    let trainer = ForeignJob::training(
        2.0,
        300.0,
        Duration::from_millis(12),
        Duration::from_millis(25),
    );
    let (steps, costs) = fill_gaps_beside(trainer);
    let slowed = steps.rate_slowdown(Duration::from_millis(25));
    let estimate = mean(&costs);
    eprintln!(
        "trainer: slowed by {:.3} %, estimated {:.3} %",
        slowed * 100.0,
        estimate * 100.0
    );
    assert!(slowed <= 0.01, "{steps:?}");
    // The loop's estimate bounds what the model charged it, within three times and a
    // point (issue 40's rule for the metric). That the GPU is filled beside it is the
    // CLI's test (gpufill-cli/tests/fill_gaps.rs, 45 % or more).
    assert!(estimate >= slowed, "{estimate} {slowed}");
    assert!(estimate <= 3.0 * slowed + 0.01, "{estimate} {slowed}");
}

#[test]
fn beside_sub_millisecond_requests_the_hold_grows_until_they_barely_pay() {
    let service = ForeignJob::isolated_requests(2.0, 300.0, 20.0, Duration::from_micros(870));
    let (requests, costs) = fill_gaps_beside(service);
    eprintln!(
        "service: median {:.3} %, mean {:.3} %, estimated {:.3} %",
        requests.slowdown() * 100.0,
        requests.mean_slowdown() * 100.0,
        mean(&costs) * 100.0
    );
    assert!(requests.slowdown() <= 0.02, "{requests:?}");
    assert!(requests.mean_slowdown() <= 0.02, "{requests:?}");
    // Issue 40's bound for such requests: p99 at most 0.1 ms more than alone. (Kernels of
    // 1 ms between spells the pacer predicted wrongly beside them put it at +0.137 ms.)
    let p99_more = requests.p99.saturating_sub(requests.p99_alone);
    assert!(p99_more <= Duration::from_micros(100), "{requests:?}");
    let estimate = mean(&costs);
    // The rate control holds its own estimate under the bound, on average.
    assert!(estimate <= 0.02, "{estimate}");
    assert!(estimate >= requests.mean_slowdown(), "{estimate}");
    assert!(
        estimate <= 3.0 * requests.mean_slowdown() + 0.01,
        "{estimate}"
    );
}

#[test]
fn services_of_every_request_length_pay_at_most_the_bound_and_long_ones_are_filled_beside() {
    // (requests a second, length in ms): short requests that a meeting costs a third
    // of, to requests longer than a decode request's busy time.
    let services = [
        (20.0, 0.87),
        (10.0, 5.0),
        (5.0, 20.0),
        (10.0, 20.0),
        (2.0, 50.0),
        (1.0, 100.0),
        (2.0, 230.0),
    ];
    for (per_s, ms) in services {
        let service =
            ForeignJob::isolated_requests(2.0, 300.0, per_s, Duration::from_secs_f64(ms / 1e3));
        let (requests, _, util) = fill_gaps_beside_with_util(service);
        eprintln!(
            "{per_s}/s of {ms} ms: median {:.2} %, mean {:.2} %, GPU {:.1} %",
            requests.slowdown() * 100.0,
            requests.mean_slowdown() * 100.0,
            util * 100.0
        );
        assert!(
            requests.slowdown() <= 0.02,
            "{per_s}/s {ms} ms: {requests:?}"
        );
        assert!(
            requests.mean_slowdown() <= 0.02,
            "{per_s}/s {ms} ms: {requests:?}"
        );
        // Requests of 100 ms, a second apart: their spells are long, so our kernels are
        // stretched between them (GapPacer::kernel_for): the GPU near the target.
        if ms >= 100.0 && per_s <= 1.0 {
            assert!(util >= 0.40, "{per_s}/s {ms} ms: GPU {util}");
        }
    }
}

#[test]
fn beside_a_decode_service_its_requests_pay_at_most_the_bound() {
    // GPT-2 decode as the GPU showed it: 2 requests a second, each busy 23 ms of about
    // 320 ms, in 250 bursts with host gaps of about 1.15 ms between them.
    let decode = ForeignJob::decode_requests(
        2.0,
        300.0,
        2.0,
        250,
        Duration::from_millis(23),
        Duration::from_micros(1150),
    );
    let (requests, costs, util) = fill_gaps_beside_with_util(decode);
    print_costs("decode", &requests, mean(&costs), util);
    assert!(requests.slowdown() <= 0.02, "{requests:?}");
    assert!(requests.mean_slowdown() <= 0.02, "{requests:?}");
    // The estimate follows what the requests paid (their mean), within issue 40's rule
    // for the metric (at most three times the cost and a point): a request outlasts
    // NVML's samples, so its time at work is counted as its signs come, and the
    // stretched kernels between requests count as their own length in our share. (It
    // runs above the cost since a spell seen only after others, in a wait of ours, is
    // credited what was seen of it and not the length learned.)
    let (estimate, paid) = (mean(&costs), requests.mean_slowdown());
    assert!(
        estimate >= paid / 2.0 && estimate <= paid * 3.0 + 0.01,
        "estimated {estimate}, paid {paid}"
    );
}

#[test]
fn beside_sub_millisecond_requests_in_pieces_the_estimate_sees_what_they_pay() {
    // Requests as the GPU's sub-ms service runs them: a few bursts of kernels with
    // host gaps between them, 0.4 ms busy in all, about 20 a second at slightly
    // different rates and starts (so different arrival sequences). Each request's tail
    // ran in the wait after the kernel of ours that met it, a spell seen only after
    // others: credited the spell length learned at the start (6-12 ms, from requests
    // merged before the hold grew), those spells weighed the charge against 20-50 %
    // of the time, and the fill ran beside one shape at 28 % of the GPU while its
    // requests paid 31 % at p50 and the estimate read 1.5 %.
    for i in 0..12_u32 {
        let pieces = 2 + i % 4;
        let service = ForeignJob::decode_requests(
            2.0 + f64::from(i) * 0.0137,
            300.0,
            20.0 + f64::from(i) * 0.11,
            pieces,
            Duration::from_micros(400),
            Duration::from_micros(100),
        );
        let (requests, estimate, util) =
            fill_gaps_beside_printed(&format!("{pieces} pieces"), service);
        assert!(requests.slowdown() <= 0.02, "shape {i}: {requests:?}");
        assert!(
            estimate >= requests.mean_slowdown() / 3.0,
            "shape {i}: estimated {estimate}, {requests:?}"
        );
        assert!(util <= 0.10, "shape {i}: GPU {util}");
    }
}

#[test]
fn beside_rare_requests_they_pay_within_the_bound() {
    // Services of one to five requests a second, 0.87-50 ms at work each, and decode
    // requests of a few short bursts. An estimate that averaged the samples' own costs
    // was watered down by the samples in which such a job did nothing: beside 1/s of 3
    // and 10 ms the requests paid 4.3 and 4.9 % at p50, and beside 2/s of four 0.5 ms
    // bursts 3.5 %, with the estimate at 1 %. (1/s of 0.2 ms still pays over the bound
    // on the mean: docs/benchmarks.md, "Filling the gaps of live work".)
    let ms = |x: f64| Duration::from_secs_f64(x / 1e3);
    let mut jobs = Vec::new();
    for (per_s, request) in [
        (1.0, 0.87),
        (1.0, 3.0),
        (1.0, 10.0),
        (5.0, 3.0),
        (5.0, 50.0),
    ] {
        let job = ForeignJob::isolated_requests(2.0, 300.0, per_s, ms(request));
        jobs.push((format!("{per_s}/s of {request} ms"), job));
    }
    for (per_s, pieces, busy, gap) in [(0.5, 8, 5.0, 2.0), (2.0, 8, 5.0, 2.0), (2.0, 4, 2.0, 0.3)] {
        let job = ForeignJob::decode_requests(2.0, 300.0, per_s, pieces, ms(busy), ms(gap));
        jobs.push((format!("{per_s}/s of {pieces} bursts, {busy} ms"), job));
    }
    for (name, job) in jobs {
        let (requests, _, _) = fill_gaps_beside_printed(&name, job);
        assert!(requests.slowdown() <= 0.02, "{name}: {requests:?}");
        assert!(requests.mean_slowdown() <= 0.02, "{name}: {requests:?}");
    }
}

#[test]
fn beside_requests_too_short_for_nvml_the_estimate_keeps_the_metrics_rule() {
    // Sub-millisecond requests whose GPU time NVML does not show (a quarter of each
    // request, 0.1-0.16 ms): the estimate, which counts what NVML and our kernels show
    // of the job, must still say about what they pay, at most three times it and a point
    // (issue 40's rule for the metric). With nothing counted between meetings it read
    // what one met request pays: 14 % beside 20/s of 0.4 ms, which paid 0.1 %.
    for (per_s, request) in [(20.0, 0.4), (20.0, 0.65), (10.0, 0.65)] {
        let job = ForeignJob::isolated_requests(
            2.0,
            300.0,
            per_s,
            Duration::from_secs_f64(request / 1e3),
        );
        let (requests, costs) = fill_gaps_beside(job);
        let (estimate, paid) = (mean(&costs), requests.mean_slowdown());
        eprintln!(
            "{per_s}/s of {request} ms: mean {:.2} %, estimated {:.2} %",
            paid * 100.0,
            estimate * 100.0
        );
        assert!(requests.slowdown() <= 0.02, "{requests:?}");
        assert!(
            estimate <= 3.0 * paid + 0.01,
            "estimated {estimate}, paid {paid}"
        );
    }
}

#[test]
fn beside_two_live_jobs_at_once_each_pays_within_the_bound() {
    // The pacer learns one job's spells and period from what its kernels meet; beside
    // two jobs it meets both, and neither may pay more than the bound for the other's
    // rhythm: a trainer with a sub-millisecond service, two trainers of different
    // periods, a decode service with a trainer.
    let ms = |x: u64| Duration::from_millis(x);
    let pairs = [
        (
            "trainer and sub-ms requests",
            ForeignJob::training(2.0, 300.0, ms(12), ms(25)),
            ForeignJob::isolated_requests(3.0, 300.0, 20.0, Duration::from_micros(870)),
        ),
        (
            "two trainers",
            ForeignJob::training(2.0, 300.0, ms(12), ms(25)),
            ForeignJob::training(3.0, 300.0, ms(6), ms(40)),
        ),
        (
            "decode and a trainer",
            ForeignJob::decode_requests(2.0, 300.0, 2.0, 32, ms(23), ms(8)),
            ForeignJob::training(3.0, 300.0, ms(12), ms(25)),
        ),
    ];
    for (name, a, b) in pairs {
        let (reports, costs, util) = fill_gaps_beside_all(vec![a, b]);
        for (i, r) in reports.iter().enumerate() {
            // A trainer's steps count as its requests: their median and mean time,
            // stricter than its rate, which its wait on its input dilutes.
            print_costs(&format!("{name}, job {i}"), r, mean(&costs), util);
            assert!(r.slowdown() <= 0.02, "{name}, job {i}: {r:?}");
            assert!(r.mean_slowdown() <= 0.02, "{name}, job {i}: {r:?}");
        }
    }
}
