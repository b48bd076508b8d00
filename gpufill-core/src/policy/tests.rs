//! Tests of the yield rule, mode by mode.

use super::*;
use crate::kernel_timing::OthersSign;

/// A late start of ours alone: a weak sign.
const LATE: Option<OthersSign> = Some(OthersSign::LateStart { late_us: 96.0 });
/// A kernel of ours held back by another context's time slice: a strong sign.
const HELD: Option<OthersSign> = Some(OthersSign::HeldBack { past_us: 400.0 });

fn procs(pids: &[u32]) -> Vec<ProcessInfo> {
    pids.iter()
        .map(|&pid| ProcessInfo {
            pid,
            used_memory_bytes: None,
            name: Some(format!("/usr/bin/job{pid}")),
            mps_client: false,
        })
        .collect()
}

fn mps_policy() -> YieldPolicy {
    YieldPolicy::new(YieldSettings {
        mode: YieldMode::Mps,
        ..YieldSettings::default()
    })
}

#[test]
fn under_mps_clients_run_beside_us_and_a_non_client_makes_us_yield_with_the_grace() {
    let mut policy = mps_policy();
    let t = |s: u64| Time::from_secs_f64(s as f64);
    let mut clients = procs(&[10, 11]);
    for p in &mut clients {
        p.mps_client = true;
    }
    assert_eq!(policy.decide(t(0), &clients, &[10, 11]), Decision::FILL);
    let mut mixed = clients.clone();
    mixed.extend(procs(&[12]));
    assert_eq!(
        policy.decide(t(1), &mixed, &[]),
        Decision::Yield {
            pids: vec![12],
            unlisted: false
        }
    );
    // It left: the grace (5 s) holds, then clients alone let us fill again.
    assert!(matches!(
        policy.decide(t(3), &clients, &[]),
        Decision::Yield { .. }
    ));
    assert_eq!(policy.decide(t(7), &clients, &[]), Decision::FILL);
}

#[test]
fn yields_while_anyone_else_is_listed_and_fills_when_alone() {
    let mut p = YieldPolicy::default();
    assert!(p.decide(Time::ZERO, &[], &[]).is_fill());
    assert_eq!(
        p.decide(Time::from_millis(10), &procs(&[42]), &[]),
        Decision::Yield {
            pids: vec![42],
            unlisted: false
        }
    );
}

#[test]
fn stays_idle_for_the_grace_after_the_last_one_leaves() {
    let mut p = YieldPolicy::new(YieldSettings {
        grace: Duration::from_secs(2),
        ..YieldSettings::default()
    });
    p.decide(Time::from_millis(1000), &procs(&[7]), &[]);
    assert!(!p.decide(Time::from_millis(2999), &[], &[]).is_fill());
    assert!(p.decide(Time::from_millis(3000), &[], &[]).is_fill());
}

#[test]
fn ignored_pids_never_cause_a_yield() {
    let mut p = YieldPolicy::new(YieldSettings {
        ignore_pids: vec![99],
        ..YieldSettings::default()
    });
    assert!(p.decide(Time::ZERO, &procs(&[99]), &[]).is_fill());
    assert!(!p.decide(Time::ZERO, &procs(&[99, 5]), &[]).is_fill());
}

#[test]
fn ignored_names_never_cause_a_yield() {
    let mut p = YieldPolicy::new(YieldSettings {
        ignore_names: vec!["job7".into()],
        ..YieldSettings::default()
    });
    assert!(p.decide(Time::ZERO, &procs(&[7]), &[]).is_fill());
    assert!(!p.decide(Time::ZERO, &procs(&[7, 8]), &[]).is_fill());
}

fn activity(idle_grace_ms: u64) -> YieldPolicy {
    YieldPolicy::new(YieldSettings {
        mode: YieldMode::Activity {
            idle_grace: Duration::from_millis(idle_grace_ms),
        },
        ..YieldSettings::default()
    })
}

/// The decision, with a probe (when asked for) answered: nobody ran.
fn answered(p: &mut YieldPolicy, now: Time, seen: &Seen<'_>) -> Decision {
    match p.decide_seen(now, seen) {
        Decision::Probe => p.probed(now, Some(false)),
        d => d,
    }
}

/// [`answered`] for a complete list.
fn listed(p: &mut YieldPolicy, now: Time, foreign: &[ProcessInfo], active: &[u32]) -> Decision {
    answered(p, now, &Seen::complete(foreign, active))
}

/// A hold's marker probe is due at `now`: answered (found or not), the hold goes on.
fn marker(p: &mut YieldPolicy, now: Time, seen: &Seen<'_>, paused: &Decision) {
    let before = Time::from_duration(now.since_epoch() - Duration::from_millis(1));
    assert_eq!(p.decide_seen(before, seen), *paused);
    assert_eq!(
        p.decide_seen(now, seen),
        Decision::Probe,
        "marker at {now:?}"
    );
    assert_eq!(
        p.probed(now, Some(true)),
        *paused,
        "a marker only marks the time"
    );
}

fn pause(pids: &[u32]) -> Decision {
    paused_by(pids, None)
}

/// A pause whose evidence is `sign` of our kernels' timing.
fn paused_by(pids: &[u32], sign: Option<OthersSign>) -> Decision {
    Decision::Pause {
        pids: pids.to_vec(),
        unlisted: false,
        sign,
    }
}

#[test]
fn activity_mode_probes_before_filling_beside_a_quiet_holder() {
    let mut p = activity(1000);
    let nb = procs(&[5]);
    let quiet = Seen::complete(&nb, &[]);
    assert!(matches!(
        p.decide_seen(ms(0), &quiet),
        Decision::Yield { .. }
    ));
    // Quiet for the idle grace: ask whether anyone ran since our last kernel.
    assert_eq!(p.decide_seen(ms(1000), &quiet), Decision::Probe);
    // Someone did (NVML saw nothing of it: a service of sub-millisecond requests):
    // that probe spoke for its start-up too, so pause and probe again CONFIRM_AFTER
    // later (at most the idle grace).
    assert_eq!(p.probed(ms(1000), Some(true)), pause(&[5]));
    assert_eq!(p.decide_seen(ms(1999), &quiet), pause(&[5]));
    assert_eq!(p.decide_seen(ms(2000), &quiet), Decision::Probe);
    // Nobody did: it is dormant, fill beside it.
    assert_eq!(p.probed(ms(2000), Some(false)), Decision::FillBeside);
    assert_eq!(p.decide_seen(ms(2050), &quiet), Decision::FillBeside);
    // A source that cannot tell leaves NVML's word standing.
    let mut q = activity(1000);
    q.decide_seen(ms(0), &quiet);
    assert_eq!(q.decide_seen(ms(1000), &quiet), Decision::Probe);
    assert_eq!(q.probed(ms(1000), None), Decision::FillBeside);
}

#[test]
fn a_live_holder_is_probed_ever_more_rarely_and_never_filled_beside() {
    let mut p = activity(1000);
    let nb = procs(&[5]);
    let quiet = Seen::complete(&nb, &[]);
    p.decide_seen(ms(0), &quiet);
    let mut probes = Vec::new();
    for t in (1000..120_000).step_by(10) {
        match p.decide_seen(ms(t), &quiet) {
            Decision::Probe => {
                probes.push(t);
                assert_eq!(p.probed(ms(t), Some(true)), pause(&[5]));
            }
            d => assert_eq!(d, pause(&[5]), "at {t} ms"),
        }
    }
    // After the idle grace a confirming probe (CONFIRM_AFTER, at most the idle grace,
    // later), then holds of 1, 2, 4, 8, then 8 idle graces; the first with its marker
    // half-way.
    assert_eq!(
        &probes[..8],
        &[1000, 2000, 2500, 3000, 5000, 9000, 17_000, 25_000]
    );
    assert_eq!(
        live_hold(Duration::from_secs(30), 1),
        Duration::from_secs(30)
    );
    assert_eq!(
        live_hold(Duration::from_secs(30), 3),
        Duration::from_secs(120)
    );
    assert_eq!(
        live_hold(Duration::from_secs(30), 9),
        Duration::from_secs(240)
    );
}

#[test]
fn the_first_sign_of_life_pauses_at_once_and_holds_for_the_idle_grace() {
    for sign in ["samples", "utilization", "held back"] {
        let mut p = activity(1000);
        let nb = procs(&[5]);
        let quiet = Seen::complete(&nb, &[]);
        let active = [5];
        let working = match sign {
            "samples" => Seen::complete(&nb, &active),
            "utilization" => Seen {
                beyond_own: true,
                ..quiet
            },
            _ => Seen {
                held_back: HELD,
                ..quiet
            },
        };
        // The pause carries our kernels' sign when that was the evidence.
        let evidence = if sign == "held back" { HELD } else { None };
        p.decide_seen(ms(0), &quiet);
        assert_eq!(answered(&mut p, ms(1000), &quiet), Decision::FillBeside);
        assert_eq!(
            p.decide_seen(ms(5000), &working),
            paused_by(&[5], evidence),
            "{sign}"
        );
        // More work extends the hold (and moves its marker); it ends with a probe.
        assert_eq!(
            p.decide_seen(ms(5500), &working),
            paused_by(&[5], evidence),
            "{sign}"
        );
        marker(&mut p, ms(6000), &quiet, &pause(&[5]));
        assert_eq!(p.decide_seen(ms(6499), &quiet), pause(&[5]), "{sign}");
        assert_eq!(p.decide_seen(ms(6500), &quiet), Decision::Probe, "{sign}");
        assert_eq!(p.probed(ms(6500), Some(false)), Decision::FillBeside);
    }
}

#[test]
fn the_backoff_starts_afresh_once_a_holder_was_dormant_for_the_idle_grace() {
    let mut p = activity(1000);
    let nb = procs(&[5]);
    let quiet = Seen::complete(&nb, &[]);
    let woke = Seen {
        held_back: HELD,
        ..quiet
    };
    p.decide_seen(ms(0), &quiet);
    // The first probe, its confirmation and two probes at the ends of holds found work
    // (the first hold's marker between): the next hold is 4 idle graces.
    let mut t = 1000;
    for _ in 0..5 {
        while p.decide_seen(ms(t), &quiet) != Decision::Probe {
            t += 10;
        }
        p.probed(ms(t), Some(true));
    }
    while p.decide_seen(ms(t), &quiet) != Decision::Probe {
        t += 10;
    }
    assert_eq!(p.probed(ms(t), Some(false)), Decision::FillBeside);
    // It wakes soon after: the hold keeps the backoff (4 idle graces: it was live).
    assert_eq!(p.decide_seen(ms(t + 100), &woke), paused_by(&[5], HELD));
    assert_eq!(p.decide_seen(ms(t + 100 + 3999), &quiet), pause(&[5]));
    assert_eq!(p.decide_seen(ms(t + 100 + 4000), &quiet), Decision::Probe);
    let t = t + 4100;
    assert_eq!(p.probed(ms(t), Some(false)), Decision::FillBeside);
    // Dormant for a whole idle grace, then it wakes: one idle grace again.
    assert_eq!(p.decide_seen(ms(t + 3000), &woke), paused_by(&[5], HELD));
    marker(&mut p, ms(t + 3500), &quiet, &pause(&[5]));
    assert_eq!(p.decide_seen(ms(t + 3999), &quiet), pause(&[5]));
    assert_eq!(p.decide_seen(ms(t + 4000), &quiet), Decision::Probe);
}

#[test]
fn in_the_host_view_with_nobody_listed_our_kernels_timing_never_pauses() {
    // Every compute context is listed before its first kernel: a sign is the host's.
    for sign in [LATE, HELD] {
        let mut p = activity(1000);
        let nobody = Seen::complete(&[], &[]);
        let shown = Seen {
            held_back: sign,
            ..nobody
        };
        for t in 0..100 {
            assert_eq!(
                p.decide_seen(ms(t * 50), &shown),
                Decision::Fill { unexplained: sign },
                "{sign:?}"
            );
        }
    }
}

#[test]
fn in_a_namespace_where_memory_shows_every_context_our_kernels_timing_never_pauses() {
    let mut p = activity(1000);
    let explained = hidden(0);
    let shown = Seen {
        held_back: HELD,
        ..explained
    };
    for t in 0..100 {
        assert_eq!(
            p.decide_seen(ms(t * 50), &shown),
            Decision::Fill { unexplained: HELD }
        );
    }
}

#[test]
fn where_nothing_else_could_show_a_neighbour_a_kernel_that_shows_one_pauses_briefly() {
    let mut p = activity(1000);
    let nobody = Seen {
        unlisted: Unlisted::Unknown,
        ..Seen::complete(&[], &[])
    };
    let shown = Seen {
        held_back: LATE,
        ..nobody
    };
    let quiet_sample = Seen {
        quiet_sample: true,
        ..nobody
    };
    assert_eq!(p.decide_seen(ms(0), &nobody), Decision::FILL);
    let paused_by = |sign| Decision::Pause {
        pids: vec![],
        unlisted: true,
        sign,
    };
    assert_eq!(p.decide_seen(ms(100), &shown), paused_by(LATE));
    assert_eq!(p.decide_seen(ms(599), &nobody), paused_by(None));
    assert_eq!(p.decide_seen(ms(600), &nobody), Decision::FILL);
    // A quiet sample ends it sooner.
    assert_eq!(p.decide_seen(ms(1000), &shown), paused_by(LATE));
    assert_eq!(p.decide_seen(ms(1200), &quiet_sample), Decision::FILL);
    // Utilization beyond ours with nobody there is nobody's (no pause).
    let beyond = Seen {
        beyond_own: true,
        ..nobody
    };
    assert_eq!(p.decide_seen(ms(2000), &beyond), Decision::FILL);
}

#[test]
fn per_process_samples_are_read_only_until_a_probe_has_judged_the_holders() {
    let mut p = activity(1000);
    let nb = procs(&[5]);
    let quiet = Seen::complete(&nb, &[]);
    p.decide_seen(ms(0), &quiet);
    assert!(
        p.wants_activity(&nb, Unlisted::ListComplete),
        "a newcomer's idle grace"
    );
    assert_eq!(answered(&mut p, ms(1000), &quiet), Decision::FillBeside);
    assert!(
        !p.wants_activity(&nb, Unlisted::ListComplete),
        "filling beside"
    );
    p.decide_seen(
        ms(1100),
        &Seen {
            held_back: HELD,
            ..quiet
        },
    );
    assert!(
        !p.wants_activity(&nb, Unlisted::ListComplete),
        "holding off"
    );
    // A newcomer: its idle grace needs the samples again.
    let two = procs(&[5, 6]);
    p.decide_seen(ms(1200), &Seen::complete(&two, &[]));
    assert!(p.wants_activity(&two, Unlisted::ListComplete));
}

#[test]
fn activity_mode_treats_an_unlisted_holder_like_a_listed_one() {
    let mut p = activity(1000);
    // Appears (memory): yield for the idle grace, then probe and fill beside it.
    assert!(!p.decide_seen(ms(0), &hidden(19)).is_fill());
    assert!(!p.decide_seen(ms(200), &hidden(620)).is_fill());
    assert!(!p.decide_seen(ms(1199), &hidden(620)).is_fill());
    assert_eq!(p.decide_seen(ms(1200), &hidden(620)), Decision::Probe);
    assert_eq!(p.probed(ms(1200), Some(false)), Decision::FillBeside);
    assert!(p.decide_seen(ms(5000), &hidden(625)).is_fill());
    // Its first per-process sample (a host PID we cannot see): a sign of life of a
    // quiet holder, so a pause and a hold.
    let active = [444];
    let working = Seen {
        active: &active,
        ..hidden(620)
    };
    let unlisted = Decision::Pause {
        pids: vec![],
        unlisted: true,
        sign: None,
    };
    assert_eq!(p.decide_seen(ms(5010), &working), unlisted);
    marker(&mut p, ms(5510), &hidden(620), &unlisted);
    assert_eq!(p.decide_seen(ms(6009), &hidden(620)), unlisted);
    assert_eq!(p.decide_seen(ms(6010), &hidden(620)), Decision::Probe);
    assert_eq!(p.probed(ms(6010), Some(false)), Decision::FillBeside);
    // Quiet when it leaves: fill at once, no grace owed.
    assert!(p.decide_seen(ms(6020), &hidden(0)).is_fill());
}

#[test]
fn activity_mode_yields_to_a_newcomer_then_fills_beside_it_once_quiet() {
    let mut p = activity(1000);
    let nb = procs(&[5]);
    assert!(!listed(&mut p, Time::from_millis(0), &nb, &[]).is_fill());
    assert!(!listed(&mut p, Time::from_millis(999), &nb, &[]).is_fill());
    assert!(listed(&mut p, Time::from_millis(1000), &nb, &[]).is_fill());
}

#[test]
fn activity_mode_yields_to_a_newcomer_beside_a_quiet_holder_for_the_idle_grace() {
    let mut p = activity(1000);
    listed(&mut p, ms(0), &procs(&[5]), &[]);
    assert_eq!(
        listed(&mut p, ms(2000), &procs(&[5]), &[]),
        Decision::FillBeside
    );
    assert_eq!(
        listed(&mut p, ms(2010), &procs(&[5, 6]), &[]),
        Decision::Yield {
            pids: vec![6],
            unlisted: false
        }
    );
    assert!(!listed(&mut p, ms(3000), &procs(&[5, 6]), &[]).is_fill());
    assert_eq!(
        listed(&mut p, ms(3010), &procs(&[5, 6]), &[]),
        Decision::FillBeside
    );
}

#[test]
fn presence_mode_never_fills_beside_anyone_and_ignores_bursts() {
    let mut p = YieldPolicy::default();
    let nb = procs(&[5]);
    let burst = Seen {
        beyond_own: true,
        ..Seen::complete(&nb, &[])
    };
    for t in [0, 1000, 60_000] {
        assert!(matches!(
            answered(&mut p, ms(t), &burst),
            Decision::Yield { .. }
        ));
    }
}

#[test]
fn activity_mode_fills_at_once_when_a_quiet_process_leaves() {
    let mut p = activity(1000);
    listed(&mut p, Time::from_millis(0), &procs(&[5]), &[]);
    assert!(listed(&mut p, Time::from_millis(2000), &procs(&[5]), &[]).is_fill());
    assert!(listed(&mut p, Time::from_millis(2010), &[], &[]).is_fill());
    assert!(p.needs_activity());
    assert!(!YieldPolicy::default().needs_activity());
}

const MIB: u64 = 1 << 20;

/// Inside a PID namespace: nothing listed, `memory` MiB unexplained (0: none).
fn hidden(memory_mib: u64) -> Seen<'static> {
    Seen {
        listed: &[],
        active: &[],
        unlisted: if memory_mib == 0 {
            Unlisted::Explained
        } else {
            Unlisted::Memory(memory_mib * MIB)
        },
        beyond_own: false,
        quiet_sample: false,
        held_back: None,
    }
}

fn ms(ms: u64) -> Time {
    Time::from_millis(ms)
}

#[test]
fn presence_yields_to_memory_no_listed_process_holds_then_keeps_the_grace() {
    let mut p = YieldPolicy::default();
    assert!(answered(&mut p, ms(0), &hidden(0)).is_fill());
    let d = answered(&mut p, ms(100), &hidden(19));
    assert_eq!(
        d,
        Decision::Yield {
            pids: vec![],
            unlisted: true
        }
    );
    assert_eq!(d.foreign_count(), 1);
    assert!(p.sees_anyone(&hidden(19)));
    // An idle holder: as long as its memory is there.
    assert!(!answered(&mut p, ms(60_000), &hidden(620)).is_fill());
    // Gone: the grace, then fill.
    let grace = answered(&mut p, ms(60_100), &hidden(0));
    assert_eq!(
        grace,
        Decision::Yield {
            pids: vec![],
            unlisted: false
        }
    );
    assert!(!p.sees_anyone(&hidden(0)));
    assert!(answered(&mut p, ms(65_000), &hidden(0)).is_fill());
}

#[test]
fn samples_of_unknown_pids_and_utilization_beyond_ours_count_only_where_the_list_is_partial() {
    let active = [444];
    let partial = Seen {
        active: &active,
        ..hidden(0)
    };
    let complete = Seen::complete(&[], &active);
    assert!(
        !YieldPolicy::default()
            .decide_seen(ms(0), &partial)
            .is_fill()
    );
    // The host view keeps its old behaviour: a sample of a process that already
    // left the list does not make it yield.
    assert!(
        YieldPolicy::default()
            .decide_seen(ms(0), &complete)
            .is_fill()
    );
    let busy = Seen {
        beyond_own: true,
        ..hidden(0)
    };
    assert!(!YieldPolicy::default().decide_seen(ms(0), &busy).is_fill());
    let busy_host = Seen {
        beyond_own: true,
        ..Seen::complete(&[], &[])
    };
    assert!(
        YieldPolicy::default()
            .decide_seen(ms(0), &busy_host)
            .is_fill()
    );
}

#[test]
fn samples_of_listed_or_ignored_pids_are_not_an_unlisted_process() {
    let mut p = YieldPolicy::new(YieldSettings {
        ignore_pids: vec![444, 7],
        ..YieldSettings::default()
    });
    let listed = procs(&[7]);
    let active = [444, 7];
    let seen = Seen {
        listed: &listed,
        active: &active,
        ..hidden(0)
    };
    assert!(answered(&mut p, ms(0), &seen).is_fill());
}

#[test]
fn activity_mode_owes_only_the_grace_once_an_unlisted_newcomers_memory_is_gone() {
    let mut p = activity(30_000);
    assert!(!answered(&mut p, ms(0), &hidden(620)).is_fill());
    assert!(!answered(&mut p, ms(7000), &hidden(620)).is_fill());
    // It left before its idle grace ran out: the grace (5 s) after the last yield,
    // not the rest of the idle grace.
    assert_eq!(
        answered(&mut p, ms(7050), &hidden(0)),
        Decision::Yield {
            pids: vec![],
            unlisted: false
        }
    );
    assert_eq!(answered(&mut p, ms(12_050), &hidden(0)), Decision::FILL);
}

#[test]
fn activity_mode_yields_when_unlisted_memory_grows_beside_a_quiet_holder() {
    let mut p = activity(1000);
    answered(&mut p, ms(0), &hidden(620));
    assert!(answered(&mut p, ms(2000), &hidden(620)).is_fill());
    // A newcomer's context (or the holder allocating before its work).
    assert!(
        answered(&mut p, ms(2010), &hidden(630)).is_fill(),
        "within the margin"
    );
    assert!(!answered(&mut p, ms(2020), &hidden(640)).is_fill());
    // Less memory, then a rise from there, also counts.
    assert!(answered(&mut p, ms(3100), &hidden(300)).is_fill());
    assert!(!answered(&mut p, ms(3110), &hidden(330)).is_fill());
}

#[test]
fn activity_mode_seeing_only_samples_yields_for_the_idle_grace_after_each() {
    let mut p = activity(1000);
    let active = [444];
    let unknown = Seen {
        listed: &[],
        active: &active,
        unlisted: Unlisted::Unknown,
        beyond_own: false,
        quiet_sample: false,
        held_back: None,
    };
    let quiet = Seen {
        active: &[],
        ..unknown
    };
    assert!(answered(&mut p, ms(0), &quiet).is_fill());
    assert!(!answered(&mut p, ms(100), &unknown).is_fill());
    assert!(!answered(&mut p, ms(1099), &quiet).is_fill());
    assert!(answered(&mut p, ms(1100), &quiet).is_fill());
    assert!(answered(&mut p, ms(1110), &quiet).is_fill());
}

#[test]
fn activity_is_read_when_someone_may_be_there_to_show_it() {
    let none: &[ProcessInfo] = &[];
    let presence = YieldPolicy::default();
    assert!(!presence.wants_activity(none, Unlisted::ListComplete));
    assert!(!presence.wants_activity(none, Unlisted::Memory(MIB)));
    assert!(presence.wants_activity(none, Unlisted::Unknown));
    let a = activity(1000);
    assert!(!a.wants_activity(none, Unlisted::ListComplete));
    assert!(!a.wants_activity(none, Unlisted::Explained));
    assert!(a.wants_activity(none, Unlisted::Memory(MIB)));
    assert!(a.wants_activity(none, Unlisted::Unknown));
    assert!(a.wants_activity(&procs(&[5]), Unlisted::ListComplete));
    let mps = YieldPolicy::new(YieldSettings {
        mode: YieldMode::Mps,
        ..YieldSettings::default()
    });
    assert!(!mps.wants_activity(&procs(&[5]), Unlisted::Unknown));
    assert!(mps.clone().decide_seen(ms(0), &hidden(620)).is_fill());
}

#[test]
fn mps_mode_never_yields_to_mps_clients() {
    let mut p = YieldPolicy::new(YieldSettings {
        mode: YieldMode::Mps,
        ..YieldSettings::default()
    });
    let mut clients = procs(&[5, 6]);
    for c in &mut clients {
        c.mps_client = true;
    }
    assert!(p.decide(Time::ZERO, &clients, &[5]).is_fill());
}

#[test]
fn a_late_start_alone_beside_a_holder_pauses_only_until_a_confirming_probe() {
    let mut p = activity(30_000);
    let nb = procs(&[5]);
    let quiet = Seen::complete(&nb, &[]);
    let late = Seen {
        held_back: LATE,
        ..quiet
    };
    p.decide_seen(ms(0), &quiet);
    assert_eq!(answered(&mut p, ms(30_000), &quiet), Decision::FillBeside);
    // The host's jitter: paused, probed CONFIRM_AFTER (5 s) later, clean: filling again.
    assert_eq!(p.decide_seen(ms(40_000), &late), paused_by(&[5], LATE));
    assert_eq!(p.decide_seen(ms(44_999), &quiet), pause(&[5]));
    assert_eq!(p.decide_seen(ms(45_000), &quiet), Decision::Probe);
    assert_eq!(p.probed(ms(45_000), Some(false)), Decision::FillBeside);
    // A live holder: the confirming probe finds it, and it is held off for the grace.
    assert_eq!(p.decide_seen(ms(50_000), &late), paused_by(&[5], LATE));
    assert_eq!(p.decide_seen(ms(55_000), &quiet), Decision::Probe);
    assert_eq!(p.probed(ms(55_000), Some(true)), pause(&[5]));
    marker(&mut p, ms(70_000), &quiet, &pause(&[5]));
    assert_eq!(p.decide_seen(ms(84_999), &quiet), pause(&[5]));
    assert_eq!(p.decide_seen(ms(85_000), &quiet), Decision::Probe);
}

#[test]
fn a_holder_that_ran_one_burst_is_filled_beside_again_one_idle_grace_after_it() {
    let mut p = activity(30_000);
    let nb = procs(&[5]);
    let quiet = Seen::complete(&nb, &[]);
    let burst = Seen {
        held_back: HELD,
        ..quiet
    };
    p.decide_seen(ms(0), &quiet);
    assert_eq!(answered(&mut p, ms(30_000), &quiet), Decision::FillBeside);
    // A 0.5 s burst from 120 s: paused at its first sign.
    assert_eq!(p.decide_seen(ms(120_000), &burst), paused_by(&[5], HELD));
    // The marker half-way finds the burst (it ran after our last kernel); the probe at
    // the end of the hold asks only about the time since the marker: nobody.
    marker(&mut p, ms(135_000), &quiet, &pause(&[5]));
    assert_eq!(p.decide_seen(ms(150_000), &quiet), Decision::Probe);
    assert_eq!(p.probed(ms(150_000), Some(false)), Decision::FillBeside);
}

#[test]
fn nvml_showing_work_while_confirming_holds_the_holder_off_as_live() {
    let mut p = activity(30_000);
    let nb = procs(&[5]);
    let quiet = Seen::complete(&nb, &[]);
    p.decide_seen(ms(0), &quiet);
    assert_eq!(answered(&mut p, ms(30_000), &quiet), Decision::FillBeside);
    let late = Seen {
        held_back: LATE,
        ..quiet
    };
    assert_eq!(p.decide_seen(ms(40_000), &late), paused_by(&[5], LATE));
    let beyond = Seen {
        beyond_own: true,
        ..quiet
    };
    assert_eq!(p.decide_seen(ms(40_500), &beyond), pause(&[5]));
    // No confirming probe: held for the idle grace from the sample.
    assert_eq!(p.decide_seen(ms(45_000), &quiet), pause(&[5]));
    marker(&mut p, ms(55_500), &quiet, &pause(&[5]));
    assert_eq!(p.decide_seen(ms(70_499), &quiet), pause(&[5]));
    assert_eq!(p.decide_seen(ms(70_500), &quiet), Decision::Probe);
}

#[test]
fn a_late_start_in_the_same_tick_as_nvml_showing_work_pauses_on_nvmls_word_and_holds_off() {
    let mut p = activity(30_000);
    let nb = procs(&[5]);
    let quiet = Seen::complete(&nb, &[]);
    p.decide_seen(ms(0), &quiet);
    assert_eq!(answered(&mut p, ms(30_000), &quiet), Decision::FillBeside);
    let both = Seen {
        held_back: LATE,
        beyond_own: true,
        ..quiet
    };
    // The evidence is NVML's (strong), not the weak late start: no confirming probe
    // after CONFIRM_AFTER, but a hold for the idle grace (and its marker half-way).
    assert_eq!(p.decide_seen(ms(40_000), &both), pause(&[5]));
    assert_eq!(p.decide_seen(ms(45_000), &quiet), pause(&[5]));
    marker(&mut p, ms(55_000), &quiet, &pause(&[5]));
    // A strong sign of our kernels with NVML's is the sign.
    let mut q = activity(30_000);
    q.decide_seen(ms(0), &quiet);
    assert_eq!(answered(&mut q, ms(30_000), &quiet), Decision::FillBeside);
    let strong = Seen {
        held_back: HELD,
        ..both
    };
    assert_eq!(q.decide_seen(ms(40_000), &strong), paused_by(&[5], HELD));
}

#[test]
fn where_the_view_cannot_tell_a_sign_just_after_someone_was_listed_is_not_called_the_hosts() {
    let mut p = YieldPolicy::default();
    let unknown = Seen {
        unlisted: Unlisted::Unknown,
        ..Seen::complete(&[], &[])
    };
    let ignored = procs(&[7]);
    p.set_settings(YieldSettings {
        ignore_pids: vec![7],
        ..p.settings().clone()
    });
    // An ignored process was listed a moment ago: our kernels' sign may be its work, so
    // neither a burst hold nor the host's jitter.
    assert_eq!(
        p.decide_seen(
            ms(0),
            &Seen {
                listed: &ignored,
                ..unknown
            }
        ),
        Decision::FILL
    );
    let shown = Seen {
        held_back: LATE,
        ..unknown
    };
    assert_eq!(p.decide_seen(ms(100), &shown), Decision::FILL);
    // In the host's view the same sign is the host's own.
    let host = Seen {
        held_back: LATE,
        ..Seen::complete(&[], &[])
    };
    assert_eq!(
        p.decide_seen(ms(200), &host),
        Decision::Fill { unexplained: LATE }
    );
}

fn fill_gaps(idle_grace_ms: u64) -> YieldPolicy {
    YieldPolicy::new(YieldSettings {
        mode: YieldMode::Activity {
            idle_grace: Duration::from_millis(idle_grace_ms),
        },
        beside_live: BesideLive::FillGaps,
        ..YieldSettings::default()
    })
}

#[test]
fn filling_gaps_spares_a_newcomer_for_its_idle_grace_then_fills_beside_its_work() {
    let mut p = fill_gaps(1000);
    let one = procs(&[5]);
    let active = [5];
    let working = Seen::complete(&one, &active);
    // A newcomer that works at once: yielded to for its idle grace.
    for t in [0, 500, 999] {
        assert_eq!(
            p.decide_seen(ms(t), &working),
            Decision::Yield {
                pids: vec![5],
                unlisted: false
            },
            "{t} ms"
        );
    }
    // Listed for the idle grace: its gaps are filled, however much it works.
    for t in [1000, 1500, 5000] {
        assert_eq!(
            p.decide_seen(ms(t), &working),
            Decision::FillGaps { pids: vec![5] },
            "{t} ms"
        );
    }
    // A second newcomer is yielded to for its own idle grace.
    let two = procs(&[5, 6]);
    let d = p.decide_seen(ms(6000), &Seen::complete(&two, &[]));
    assert!(matches!(d, Decision::Yield { .. }), "{d:?}");
    assert!(
        !p.decide_seen(ms(6999), &Seen::complete(&two, &[]))
            .is_fill()
    );
    assert_eq!(
        p.decide_seen(ms(7000), &Seen::complete(&two, &[])),
        Decision::FillGaps { pids: vec![5, 6] }
    );
    // Both leave: nobody was yielded to last, so no grace is owed.
    assert_eq!(
        p.decide_seen(ms(7100), &Seen::complete(&[], &[])),
        Decision::FILL
    );
}

#[test]
fn holding_off_a_working_holder_is_still_the_default() {
    let mut p = activity(1000);
    let one = procs(&[5]);
    let active = [5];
    let working = Seen::complete(&one, &active);
    for t in (0..5000).step_by(500) {
        assert!(
            matches!(p.decide_seen(ms(t), &working), Decision::Yield { .. }),
            "{t} ms"
        );
    }
}
