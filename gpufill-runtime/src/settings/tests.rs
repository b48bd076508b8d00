//! Tests of the settings: defaults, rules, relations, conversions, live updates.

use std::time::Duration;

use gpufill_core::{
    ControllerKind, Duty, FillSettings, PowerModel, Shaping, TimeOfDay, Utilization, Width,
    YieldMode, YieldSettings,
};
use gpufill_cuda::{LauncherSettings, SpinKernel};

use super::*;

#[test]
fn the_defaults_are_valid_and_the_product_defaults() {
    let s = Settings::default();
    assert_eq!(s.validate(), Ok(()));
    assert_eq!(s.tick(), Duration::from_millis(50));
    assert_eq!(s.launcher_settings().kernel, SpinKernel::Sleep);
    assert_eq!(s.launcher_settings().period, Duration::from_millis(50));
    // The launcher's own defaults agree with the product's.
    assert_eq!(LauncherSettings::default().kernel, s.load.kernel);
    assert_eq!(LauncherSettings::default(), s.launcher_settings());
}

#[test]
fn bursts_beside_holders_unless_a_beside_kernel_is_set() {
    let mut s = Settings::default();
    assert_eq!(s.launcher_settings().beside_kernel, None);
    s.load.beside_kernel_us = 250;
    assert_eq!(
        s.launcher_settings().beside_kernel,
        Some(Duration::from_micros(250))
    );
    s.load.beside_kernel_us = 5;
    assert_eq!(s.validate().unwrap_err().key, "load.beside_kernel_us");
    // The longest kernel may exceed the period: a burst is never longer than its
    // on-time.
    let mut long = Settings::default();
    long.load.max_kernel_us = 1_000_000;
    assert_eq!(long.validate(), Ok(()));
    long.load.max_kernel_us = 1_000_001;
    assert_eq!(long.validate().unwrap_err().key, "load.max_kernel_us");
}

#[test]
fn graphs_of_short_kernels_only_under_mps_unless_turned_off() {
    let mut s = Settings::default();
    assert_eq!(s.launcher_settings_under(false), s.launcher_settings());
    assert_eq!(s.launcher_settings_under(false).graph_kernel, None);
    let under = s.launcher_settings_under(true);
    assert_eq!(under.graph_kernel, Some(Duration::from_micros(50)));
    assert_eq!(
        LauncherSettings {
            graph_kernel: None,
            ..under
        },
        s.launcher_settings(),
        "nothing else changes under MPS"
    );
    s.load.mps_kernel_us = 0;
    assert_eq!(s.launcher_settings_under(true).graph_kernel, None);
    s.load.mps_kernel_us = 9;
    assert_eq!(s.validate().unwrap_err().key, "load.mps_kernel_us");
}

#[test]
fn cross_key_rules_name_the_key_to_change() {
    let tick = Settings {
        tick_ms: 40,
        ..Settings::default()
    };
    assert_eq!(tick.validate().unwrap_err().key, "load.period_ms");
    let mut kernel = Settings::default();
    kernel.load.period_ms = 1;
    kernel.tick_ms = 1;
    kernel.load.beside_kernel_us = 2000;
    assert_eq!(kernel.validate().unwrap_err().key, "load.beside_kernel_us");
    kernel.load.beside_kernel_us = 0;
    kernel.load.mps_kernel_us = 1001;
    let e = kernel.validate().unwrap_err();
    assert_eq!(e.key, "load.mps_kernel_us");
    assert_eq!(
        e.blaming("load.period_ms").reason,
        "must be at least load.mps_kernel_us (1001 us), got 1"
    );
    let mut retry = Settings::default();
    retry.probe.retry_initial_s = 500.0;
    let e = retry.validate().unwrap_err();
    assert_eq!(e.key, "probe.retry_max_s");
    assert_eq!(e.reason, "must be between 500 and 86400, got 300");
    // Seen from the key the user set.
    let e = e.blaming("probe.retry_initial_s");
    assert_eq!(e.key, "probe.retry_initial_s");
    assert_eq!(e.reason, "must be at most probe.retry_max_s (300), got 500");
    let tick = tick.validate().unwrap_err().blaming("tick_ms");
    assert_eq!(
        tick.reason,
        "must divide load.period_ms (50 ms): bursts start only at ticks, got 40"
    );
}

#[test]
fn a_window_must_not_be_empty() {
    let mut s = Settings::default();
    let at = TimeOfDay::parse("22:00").unwrap();
    s.schedule.windows.push(WindowSettings {
        start: at,
        end: at,
        target_percent: 0.0,
    });
    assert_eq!(s.validate().unwrap_err().key, "schedule.window");
}

#[test]
fn choices_parse_their_names_and_refuse_others_with_the_list() {
    for m in &Metric::ALL {
        assert_eq!(m.as_str().parse::<Metric>(), Ok(*m));
    }
    assert_eq!(
        "SM".parse::<Metric>(),
        Err("expected \"util\" or \"sm\", got \"SM\"".to_owned())
    );
    assert_eq!(
        "x".parse::<MpsChoice>(),
        Err("expected \"auto\", \"on\" or \"off\", got \"x\"".to_owned())
    );
}

#[test]
fn a_live_update_keeps_restart_keys_and_says_which() {
    let old = Settings::default();
    let mut new = Settings {
        target_percent: 30.0,
        tick_ms: 25,
        ..Settings::default()
    };
    new.load.kernel = SpinKernel::Spin;
    let (applied, kept) = old.live_update(new);
    assert_eq!(applied.target_percent, 30.0);
    assert_eq!(applied.tick_ms, 50);
    assert_eq!(applied.load.kernel, SpinKernel::Sleep);
    assert_eq!(kept, vec!["tick_ms", "load.kernel"]);
}

#[test]
fn mps_auto_follows_the_daemon_and_wins_over_the_policy() {
    let s = Settings::default();
    assert_eq!(s.yield_settings(true).mode, YieldMode::Mps);
    assert_eq!(
        s.yield_settings(false).mode,
        YieldMode::Activity {
            idle_grace: Duration::from_secs(30)
        }
    );
    let mut off = Settings::default();
    off.yielding.mps = MpsChoice::Off;
    off.yielding.policy = YieldPolicyChoice::Presence;
    assert_eq!(off.yield_settings(true).mode, YieldMode::Presence);
}

#[test]
fn sm_shaping_uses_the_device_sm_count_and_the_kernel_power() {
    let mut s = Settings::default();
    assert_eq!(s.shaping(132), Shaping::Fixed);
    s.metric = Metric::Sm;
    match s.shaping(78) {
        Shaping::Sm(sm) => {
            assert_eq!(sm.sm_count, 78);
            assert_eq!(sm.model, PowerModel::H200_SPIN_SLEEP);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_keys_that_need_a_restart_are_those_whose_line_says_so() {
    assert_eq!(
        *RESTART_KEYS,
        [
            "gpus",
            "metric",
            "tick_ms",
            "load.period_ms",
            "load.max_kernel_us",
            "load.beside_kernel_us",
            "load.mps_kernel_us",
            "load.kernel",
            "probe.retry_initial_s",
            "probe.retry_max_s",
        ]
    );
    // Every one of them is kept by a live update, and no other key.
    let old = Settings::default();
    let mut new = Settings {
        gpus: crate::GpuSelector::parse_flag("1").unwrap(),
        metric: Metric::Sm,
        tick_ms: 25,
        ..Settings::default()
    };
    new.load.period_ms = 100;
    new.load.max_kernel_us = 1000;
    new.load.beside_kernel_us = 100;
    new.load.mps_kernel_us = 100;
    new.load.kernel = SpinKernel::Spin;
    new.probe.retry_initial_s = 2.0;
    new.probe.retry_max_s = 200.0;
    new.yielding.grace_s = 1.0;
    let (applied, kept) = old.live_update(new);
    assert_eq!(kept, *RESTART_KEYS);
    let mut expected = Settings::default();
    expected.yielding.grace_s = 1.0;
    assert_eq!(applied, expected);
}

#[test]
fn every_key_is_listed_once_and_copied_by_its_name() {
    let keys = Settings::every_key();
    let names: Vec<&str> = keys.iter().map(|k| k.name).collect();
    assert_eq!(names.len(), 28, "{names:?}");
    assert_eq!(
        &names[..5],
        ["target_percent", "gpus", "controller", "metric", "tick_ms"]
    );
    assert!(names.contains(&"yield.grace_s") && names.contains(&"schedule.window"));
    for (i, name) in names.iter().enumerate() {
        assert!(!names[..i].contains(name), "{name} twice");
    }
    let mut other = Settings {
        target_percent: 10.0,
        ..Settings::default()
    };
    other.yielding.ignore_names = vec!["x".into()];
    let mut s = Settings::default();
    assert!(!s.copy_key(&other, "tick_ms"), "the same value: no change");
    assert!(!s.copy_key(&other, "no_such_key"));
    assert!(s.copy_key(&other, "yield.ignore_names"));
    assert_eq!(s.yielding.ignore_names, ["x"]);
    assert_eq!(s.target_percent, 50.0, "only the key named");
}

#[test]
fn a_key_with_a_flag_says_where_its_value_lives() {
    let mut s = Settings::default();
    let flagged: Vec<(&str, Flag)> = Settings::every_key()
        .into_iter()
        .filter_map(|k| k.flag.map(|f| (k.name, f)))
        .collect();
    let longs: Vec<&str> = flagged.iter().map(|(_, f)| f.long).collect();
    assert_eq!(
        longs,
        [
            "--target",
            "--gpus",
            "--controller",
            "--metric",
            "--tick-ms",
            "--width",
            "--max-duty",
            "--period-ms",
            "--kernel",
            "--grace",
            "--beside-live",
            "--max-cost"
        ]
    );
    for (key, _) in &flagged {
        assert!(s.flag_value(key).is_some(), "{key}");
    }
    assert!(s.flag_value("load.max_kernel_us").is_none(), "no flag");
    match s.flag_value("load.kernel") {
        Some(FlagValue::Name(choice)) => {
            assert_eq!(choice.names(), ["spin", "sleep"]);
            choice.choose("spin").unwrap();
            assert!(choice.choose("x").is_err());
        }
        _ => panic!("a name"),
    }
    assert_eq!(s.load.kernel, SpinKernel::Spin);
    match s.flag_value("load.width_blocks") {
        Some(FlagValue::U32(v)) => *v = 7,
        _ => panic!("an integer"),
    }
    assert_eq!(s.load.width_blocks, 7);
}

#[test]
fn defaults_resolve_to_the_core_defaults() {
    let s = Settings::default();
    assert_eq!(s.fill_settings(), FillSettings::default());
    // The product's default policy is activity (issue 16); the core's is presence.
    assert_eq!(
        s.yield_settings(false),
        YieldSettings {
            mode: YieldMode::Activity {
                idle_grace: Duration::from_secs(30)
            },
            ..YieldSettings::default()
        }
    );
    assert_eq!(s.controller, ControllerKind::default());
    assert_eq!(s.yielding.policy, YieldPolicyChoice::Activity);
    assert_eq!(s.tick(), Duration::from_millis(50));
    assert_eq!(s.launcher_settings().period, Duration::from_millis(50));
    assert_eq!(s.launcher_settings().max_kernel, Duration::from_millis(50));
    assert_eq!(s.launcher_settings().beside_kernel, None);
}

#[test]
fn settings_resolve_into_core_types() {
    let mut s = Settings {
        target_percent: 25.0,
        controller: ControllerKind::Window,
        ..Settings::default()
    };
    s.load.width_blocks = 8;
    s.load.max_duty_percent = 40.0;
    s.yielding.grace_s = 0.5;
    s.yielding.ignore_pids = vec![7];
    s.probe.fault_hold_s = 1.5;
    let fill = s.fill_settings();
    assert_eq!(fill.target, Utilization::from_percent(25.0).unwrap());
    assert_eq!(fill.width.get(), 8);
    assert_eq!(fill.max_duty, Duty::from_percent(40.0).unwrap());
    assert_eq!(fill.fault_hold, Duration::from_millis(1500));
    let yielding = s.yield_settings(false);
    assert_eq!(yielding.grace, Duration::from_millis(500));
    assert_eq!(yielding.ignore_pids, vec![7]);
}

#[test]
fn resolving_unvalidated_settings_clamps_instead_of_panicking() {
    let mut s = Settings {
        target_percent: f64::NAN,
        ..Settings::default()
    };
    s.load.width_blocks = 0;
    s.load.max_duty_percent = 1e9;
    s.yielding.grace_s = f64::INFINITY;
    s.probe.fault_hold_s = -3.0;
    let fill = s.fill_settings();
    assert_eq!(fill.target, Utilization::ZERO);
    assert_eq!(fill.width, Width::ONE_WARP);
    assert_eq!(fill.max_duty, Duty::FULL);
    assert_eq!(fill.fault_hold, Duration::ZERO);
    assert_eq!(s.yield_settings(false).grace, Duration::MAX);
}

#[test]
fn a_schedule_resolves_with_windows_first_then_the_idle_rule_then_the_target() {
    let at = |s| Some(TimeOfDay::parse(s).unwrap());
    let mut s = Settings {
        target_percent: 50.0,
        ..Settings::default()
    };
    s.schedule.idle_after_s = 600.0;
    s.schedule.idle_target_percent = 60.0;
    s.schedule.windows = vec![WindowSettings {
        start: TimeOfDay::parse("22:00").unwrap(),
        end: TimeOfDay::parse("06:00").unwrap(),
        target_percent: 0.0,
    }];
    let schedule = s.schedule();
    let pct = |p: f64| Utilization::from_percent(p).unwrap();
    let quiet = |s| Some(Duration::from_secs(s));
    assert_eq!(schedule.target(at("23:00"), quiet(9999)), pct(0.0));
    assert_eq!(schedule.target(at("12:00"), quiet(600)), pct(60.0));
    assert_eq!(schedule.target(at("12:00"), quiet(599)), pct(50.0));
    assert!(Settings::default().schedule().is_constant());
}
