use super::*;

/// Hooks that keep every tick, stop after `stop_after` steps, and hand over `reload`
/// at the step `reload_at`.
#[derive(Default)]
struct Kept {
    ticks: Vec<Tick>,
    steps: usize,
    stop_after: Option<usize>,
    reload: Option<(usize, Settings)>,
}

impl Hooks for Kept {
    fn stop(&mut self) -> bool {
        self.stop_after.is_some_and(|n| self.steps >= n)
    }

    fn reload(&mut self) -> Option<Settings> {
        match &self.reload {
            Some((at, _)) if *at == self.steps => self.reload.take().map(|(_, s)| s),
            _ => None,
        }
    }

    fn tick(&mut self, tick: &Tick) {
        self.ticks.push(tick.clone());
    }

    fn stepped(&mut self, _now: Time) {
        self.steps += 1;
    }
}

fn run(scenario: &Scenario, settings: Settings, hooks: &mut Kept) -> Report {
    let mut sim = SimRun::new(scenario, settings, TimeOfDay::MIDNIGHT, None);
    let recorded = sim.drive(scenario, hooks);
    sim.report(scenario, &recorded)
}

#[test]
fn services_become_jobs_that_serve_requests() {
    let scenario = Scenario {
        service: vec![
            ServiceSpec {
                start_s: 2.0,
                end_s: 60.0,
                requests: ServiceRequests::Bursts {
                    every_s: 6.0,
                    burst_s: 0.17,
                },
            },
            ServiceSpec {
                start_s: 3.0,
                end_s: 9.0,
                requests: ServiceRequests::Rate {
                    per_s: 20.0,
                    request_ms: 0.5,
                    fills_every_sm: false,
                },
            },
        ],
        ..Scenario::default()
    };
    let cfg = scenario.sim_config(&Settings::default());
    let [bursts, isolated] = &cfg.foreign[..] else {
        panic!("{:?}", cfg.foreign);
    };
    assert_eq!(bursts.requests, Some(gpufill_sim::Requests::InBursts));
    assert_eq!(bursts.windows.len(), 10);
    assert_eq!(isolated.request, Duration::from_micros(500));
    assert!(matches!(
        isolated.requests,
        Some(gpufill_sim::Requests::Rate { per_s, .. }) if per_s == 20.0
    ));
}

#[test]
fn a_quiet_run_settles_and_its_report_says_so() {
    let mut hooks = Kept::default();
    let report = run(&Scenario::default(), Settings::default(), &mut hooks);
    let last = hooks.ticks.last().unwrap();
    assert!(last.at >= Time::from_secs_f64(19.9), "{:?}", last.at);
    assert!(report.tracking.settle.is_some(), "{report:?}");
    assert_eq!(
        (report.from, report.pauses, report.stopped_at),
        (Time::ZERO, 0, None)
    );
    assert!(report.long_run.is_none() && report.mps.is_none() && report.width.is_none());
    let text = report.to_string();
    assert!(text.starts_with("\nsettled within 2 points of "), "{text}");
    assert!(text.ends_with("\n0 pauses\n"), "{text}");
}

#[test]
fn a_foreign_job_ends_the_judged_span_and_gets_its_line() {
    let scenario = Scenario {
        duration_s: 30.0,
        foreign: vec![ForeignSpec {
            start_s: 10.0,
            end_s: 20.0,
            load_percent: 40.0,
        }],
        ..Scenario::default()
    };
    let mut sim = SimRun::new(&scenario, Settings::default(), TimeOfDay::MIDNIGHT, None);
    let mut hooks = Kept::default();
    let recorded = sim.drive(&scenario, &mut hooks);
    assert!(hooks.ticks.iter().any(|t| t.state == State::Yielding));
    assert_eq!(recorded.judged_until, Time::from_secs_f64(10.0));
    assert!(recorded.ticks.iter().all(|t| t.at < recorded.judged_until));
    let report = sim.report(&scenario, &recorded);
    assert_eq!(report.foreign.len(), 1);
    let text = report.to_string();
    assert!(
        text.contains("\nforeign job 10-20 s at 40%: slowed by "),
        "{text}"
    );
}

#[test]
fn the_hooks_stop_a_run_and_it_reports_what_ran() {
    let mut hooks = Kept {
        stop_after: Some(10),
        ..Kept::default()
    };
    let report = run(&Scenario::default(), Settings::default(), &mut hooks);
    assert_eq!(hooks.steps, 10);
    assert!(hooks.ticks.last().unwrap().at < Time::from_secs_f64(1.0));
    assert!(report.to_string().contains("pauses"));
}

#[test]
fn a_reload_takes_the_new_target_and_the_report_judges_from_it() {
    let settings = Settings::default();
    let mut hooks = Kept {
        reload: Some((
            100,
            Settings {
                target_percent: settings.target_percent - 20.0,
                ..settings.clone()
            },
        )),
        ..Kept::default()
    };
    let report = run(&Scenario::default(), settings.clone(), &mut hooks);
    assert!(report.from > Time::ZERO, "{report:?}");
    let target = report.target.percent();
    assert!(
        (target - (settings.target_percent - 20.0)).abs() < 1e-9,
        "{target}"
    );
    assert!(
        report
            .to_string()
            .contains("the schedule last changed the target at "),
        "{report}"
    );
}

#[test]
fn an_mps_daemon_told_to_quit_is_left_and_reported() {
    let scenario = Scenario {
        mps: true,
        mps_quit_at: Some(5.0),
        ..Scenario::default()
    };
    let report = run(&scenario, Settings::default(), &mut Kept::default());
    let mps = report.mps.unwrap();
    assert_eq!(mps.quit, Time::from_secs_f64(5.0));
    assert!(mps.left.is_some_and(|t| t >= mps.quit), "{mps:?}");
    assert!(
        report
            .to_string()
            .contains("MPS: daemon told to quit at 5.00 s; gpufill left it at "),
        "{report}"
    );
}

#[test]
fn measuring_sm_activity_reports_the_width() {
    let settings = Settings {
        metric: Metric::Sm,
        ..Settings::default()
    };
    let report = run(&Scenario::default(), settings, &mut Kept::default());
    let (lo, hi, _) = report.width.unwrap();
    assert!(lo >= 1 && lo <= hi, "{report:?}");
    assert!(report.to_string().contains("\nwidth after settling: "));
}

#[test]
fn random_foreign_jobs_add_the_hourly_table() {
    let scenario = Scenario {
        duration_s: 120.0,
        random_foreign: Some(60.0),
        seed: 3,
        ..Scenario::default()
    };
    let report = run(&scenario, Settings::default(), &mut Kept::default());
    let (_, hours) = report.long_run.as_ref().unwrap();
    assert_eq!(hours.len(), 1);
    assert!(report.to_string().contains("\nrandom foreign jobs: "));
}
