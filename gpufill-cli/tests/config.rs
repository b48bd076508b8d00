//! Tests of the configuration (`gpufill_cli::config`): parsing, errors, layering.

use std::path::{Path, PathBuf};
use std::time::Duration;

use gpufill_cli::config::{Config, ConfigError, Overrides, Position};
use gpufill_core::YieldMode;
use gpufill_runtime::{
    ControllerKind, GpuId, GpuSelector, Metric, Settings, SpinKernel, TimeOfDay, WindowSettings,
};

const EXAMPLE: &str = include_str!("../gpufill.example.toml");

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml_str(text, Some(Path::new("gpufill.toml")))
}

fn error(text: &str) -> ConfigError {
    match parse(text) {
        Ok(config) => panic!("{text:?} was accepted as {config:?}"),
        Err(e) => e,
    }
}

fn gpus(text: &str) -> Result<GpuSelector, ConfigError> {
    parse(&format!("gpus = {text}")).map(|config| config.settings.gpus)
}

fn list(ids: &[GpuId]) -> GpuSelector {
    GpuSelector::List(ids.to_vec())
}

fn uuid(s: &str) -> GpuId {
    GpuId::Uuid(s.to_owned())
}

#[test]
fn shipped_example_equals_the_defaults() {
    assert_eq!(parse(EXAMPLE).unwrap(), Config::default());
}

#[test]
fn shipped_example_lists_every_key_with_its_default() {
    let example: toml::Table = toml::from_str(EXAMPLE).unwrap();
    let rendered: toml::Table = toml::from_str(&Config::default().to_toml_string()).unwrap();
    assert_eq!(example, rendered);
}

#[test]
fn empty_file_gives_the_defaults() {
    assert_eq!(parse("").unwrap(), Config::default());
    assert_eq!(parse("# nothing\n\n[load]\n").unwrap(), Config::default());
}

#[test]
fn rendered_settings_parse_back_equal() {
    let mut config = Config {
        settings: Settings {
            target_percent: 37.25,
            gpus: list(&[GpuId::Index(2), uuid("GPU-5f2c0a1b")]),
            controller: ControllerKind::Window,
            metric: Metric::Sm,
            tick_ms: 50,
            ..Settings::default()
        },
        ..Config::default()
    };
    config.load.kernel = SpinKernel::Sleep;
    config.load.width_blocks = 132;
    config.load.max_duty_percent = 80.5;
    config.load.period_ms = 100;
    config.yielding.grace_s = 0.25;
    config.metrics.listen = "127.0.0.1:9401".to_owned();
    config.load.max_kernel_us = 100_000;
    config.probe.fault_hold_s = 0.0;
    config.yielding.ignore_pids = vec![1, 4242];
    config.schedule.idle_after_s = 600.0;
    config.schedule.windows = vec![WindowSettings {
        start: TimeOfDay::parse("22:00").unwrap(),
        end: TimeOfDay::parse("06:00").unwrap(),
        target_percent: 0.0,
    }];
    for config in [Config::default(), config] {
        assert_eq!(parse(&config.to_toml_string()).unwrap(), config);
    }
}

#[test]
fn integer_values_are_accepted_for_decimal_keys() {
    let config = parse("target_percent = 40\n[yield]\ngrace_s = 0\n").unwrap();
    assert_eq!(config.target_percent, 40.0);
    assert_eq!(config.yielding.grace_s, 0.0);
}

/// (key, TOML prefix for its table, values just inside, values just outside).
const BOUNDS: &[(&str, &str, &[&str], &[&str])] = &[
    (
        "target_percent",
        "",
        &["0", "100", "0.0"],
        &["-0.001", "100.001"],
    ),
    // Ticks that divide the default period; longer ones need a longer period (below).
    ("tick_ms", "", &["1", "25", "50"], &["0", "1001", "-1"]),
    (
        "load.width_blocks",
        "[load]\n",
        &["1", "65535"],
        &["0", "65536", "-1"],
    ),
    (
        "load.max_duty_percent",
        "[load]\n",
        &["0", "100"],
        &["-0.1", "100.1"],
    ),
    (
        "load.period_ms",
        "tick_ms = 1\n[load]\n",
        &["1", "1000"],
        &["0", "1001"],
    ),
    (
        "load.max_kernel_us",
        "[load]\n",
        &["10", "1000000"],
        &["9", "1000001"],
    ),
    (
        "load.beside_kernel_us",
        "[load]\nperiod_ms = 1000\n",
        &["0", "10", "100000"],
        &["9", "100001"],
    ),
    (
        "load.beside_kernel_us",
        "tick_ms = 1\n[load]\nperiod_ms = 1\n",
        &["1000"],
        &["1001"],
    ),
    (
        "load.mps_kernel_us",
        "[load]\nperiod_ms = 1000\n",
        &["0", "10", "100000"],
        &["9", "100001"],
    ),
    (
        "load.mps_kernel_us",
        "tick_ms = 1\n[load]\nperiod_ms = 1\n",
        &["1000"],
        &["1001"],
    ),
    (
        "yield.grace_s",
        "[yield]\n",
        &["0", "86400"],
        &["-0.001", "86400.001"],
    ),
    (
        "yield.max_cost_percent",
        "[yield]\n",
        &["0", "100"],
        &["-0.001", "100.001"],
    ),
    (
        "probe.fault_hold_s",
        "[probe]\n",
        &["0", "3600"],
        &["-0.1", "3600.1"],
    ),
    (
        "probe.retry_initial_s",
        "[probe]\n",
        &["0.01", "300"],
        &["0", "0.009", "3600.1"],
    ),
    (
        "probe.retry_max_s",
        "[probe]\n",
        &["1", "86400"],
        &["0.5", "86400.5"],
    ),
    (
        "yield.ignore_pids",
        "[yield]\n",
        &["[1, 4294967295]"],
        &["[0]", "[-5]", "[4294967296]"],
    ),
];

fn with_value(key: &str, prefix: &str, value: &str) -> String {
    let name = key.rsplit('.').next().unwrap();
    format!("{prefix}{name} = {value}\n")
}

#[test]
fn values_just_inside_every_range_are_accepted() {
    for (key, prefix, inside, _) in BOUNDS {
        for value in *inside {
            let text = with_value(key, prefix, value);
            assert!(parse(&text).is_ok(), "{text:?}: {}", error(&text));
        }
    }
}

#[test]
fn values_just_outside_every_range_are_refused_naming_the_key() {
    for (key, prefix, _, outside) in BOUNDS {
        for value in *outside {
            let e = error(&with_value(key, prefix, value));
            assert_eq!(e.key(), Some(*key), "{e}");
            assert!(e.to_string().contains(&format!(": {key}: ")), "{e}");
            assert!(e.position().is_some(), "{e}");
        }
    }
}

#[test]
fn nan_and_infinities_are_refused() {
    for value in ["nan", "+nan", "-nan", "inf", "+inf", "-inf"] {
        let e = error(&format!("target_percent = {value}"));
        assert_eq!(e.key(), Some("target_percent"), "{e}");
        let e = error(&format!("[yield]\ngrace_s = {value}"));
        assert_eq!(e.key(), Some("yield.grace_s"), "{e}");
    }
    let mut config = Config::default();
    config.probe.fault_hold_s = f64::INFINITY;
    assert_eq!(
        config.validate(None).unwrap_err().key(),
        Some("probe.fault_hold_s")
    );
}

#[test]
fn a_period_that_is_not_a_whole_number_of_ticks_is_refused() {
    let e = error("tick_ms = 20\n[load]\nperiod_ms = 30\n");
    assert_eq!(
        e.to_string(),
        "gpufill.toml:3:13: load.period_ms: must be a multiple of tick_ms (20 ms): bursts \
         start only at ticks, got 30"
    );
    // The default period (50 ms) with a tick that does not divide it: the file has only
    // the tick, so the tick is blamed, at its position.
    let e = error("tick_ms = 20\n");
    assert_eq!(
        e.to_string(),
        "gpufill.toml:1:11: tick_ms: must divide load.period_ms (50 ms): bursts start only \
         at ticks, got 20"
    );
    for ok in [
        "tick_ms = 10\n",
        "tick_ms = 20\n[load]\nperiod_ms = 40\n",
        "tick_ms = 1000\n[load]\nperiod_ms = 1000\n",
    ] {
        assert!(parse(ok).is_ok(), "{ok}");
    }
}

#[test]
fn a_beside_kernel_longer_than_the_period_blames_the_key_the_file_sets() {
    let e = error("tick_ms = 1\n[load]\nperiod_ms = 1\nbeside_kernel_us = 1001\n");
    assert_eq!(
        e.to_string(),
        "gpufill.toml:4:20: load.beside_kernel_us: must not exceed load.period_ms \
         (1 ms = 1000 us), got 1001"
    );
    // A longest kernel beyond the period is fine (a burst is never longer than its
    // on-time), and so is a short period with the defaults.
    assert!(parse("tick_ms = 1\n[load]\nperiod_ms = 1\nmax_kernel_us = 5000\n").is_ok());
}

#[test]
fn a_beside_kernel_longer_than_the_period_or_out_of_range_is_refused() {
    let e =
        error("tick_ms = 1\n[load]\nperiod_ms = 1\nmax_kernel_us = 500\nbeside_kernel_us = 1001\n");
    assert_eq!(
        e.to_string(),
        "gpufill.toml:5:20: load.beside_kernel_us: must not exceed load.period_ms \
         (1 ms = 1000 us), got 1001"
    );
    let e = error("[load]\nbeside_kernel_us = 5\n");
    assert!(
        e.to_string()
            .starts_with("gpufill.toml:2:20: load.beside_kernel_us: "),
        "{e}"
    );
    assert_eq!(
        parse("[load]\nbeside_kernel_us = 250\n")
            .unwrap()
            .to_settings()
            .launcher_settings()
            .beside_kernel,
        Some(Duration::from_micros(250))
    );
}

#[test]
fn wrong_types_are_refused_naming_the_key() {
    for (text, key) in [
        ("target_percent = \"50\"", "target_percent"),
        ("tick_ms = 1.5", "tick_ms"),
        ("controller = 1", "controller"),
        ("load = 5", "load"),
        ("[[load]]\nwidth_blocks = 1", "load"),
        ("[load]\nwidth_blocks = true", "load.width_blocks"),
        ("[yield]\nignore_pids = 5", "yield.ignore_pids"),
        ("[yield]\nignore_pids = [\"a\"]", "yield.ignore_pids"),
        ("[probe]\nfault_hold_s = 1979-05-27", "probe.fault_hold_s"),
        ("probe = [1]", "probe"),
    ] {
        let e = error(text);
        assert_eq!(e.key(), Some(key), "{text:?}: {e}");
        assert!(e.position().is_some(), "{e}");
    }
}

#[test]
fn unknown_names_for_controller_and_policy_are_refused() {
    let e = error("controller = \"PI\"");
    assert_eq!(
        e.to_string(),
        "gpufill.toml:1:14: controller: expected \"pi\" or \"window\", got \"PI\""
    );
    let flag = <gpufill_cli::cli::Cli as clap::Parser>::try_parse_from([
        "gpufill",
        "simulate",
        "--controller",
        "window",
    ])
    .unwrap();
    let gpufill_cli::cli::Command::Simulate(args) = flag.command else {
        panic!("not simulate")
    };
    let mut config = Config::default();
    config.apply(&args.flags.overrides());
    assert_eq!(config.controller, ControllerKind::Window);
    let e = error("[yield]\npolicy = \"never\"");
    assert_eq!(e.key(), Some("yield.policy"));
    assert_eq!(
        parse("controller = \"window\"").unwrap().controller,
        ControllerKind::Window
    );
}

#[test]
fn unknown_keys_are_refused_at_the_top_level_and_in_tables() {
    for (text, key) in [
        ("colour = 1", "colour"),
        ("[extra]\n", "extra"),
        ("[load]\nspeed = 1", "load.speed"),
        ("[yield]\ngrace_ms = 1", "yield.grace_ms"),
        ("[probe]\nfault_hold = 1", "probe.fault_hold"),
        ("load.widht_blocks = 2", "load.widht_blocks"),
    ] {
        let e = error(text);
        assert_eq!(e.key(), Some(key), "{text:?}: {e}");
        assert!(e.to_string().contains("unknown field"), "{e}");
    }
}

#[test]
fn syntax_errors_give_line_and_column() {
    let e = error("target_percent = 50\n\n[load\n");
    assert!(matches!(e, ConfigError::Syntax { .. }), "{e:?}");
    assert_eq!(e.position(), Some(Position { line: 3, column: 6 }));
    assert!(e.to_string().starts_with("gpufill.toml:3:6: "), "{e}");
    let e = error("tick_ms = 10\ntick_ms = 20\n");
    assert_eq!(e.position().map(|p| p.line), Some(2), "{e}");
    assert!(error("a = \"unterminated").position().is_some());
}

#[test]
fn keys_and_tables_nested_100_levels_deep_are_refused_with_their_line() {
    let dotted = vec!["a"; 100].join(".");
    let header = format!("target_percent = 50\n\n[{dotted}]\nx = 1\n");
    let e = error(&header);
    assert_eq!(e.position(), Some(Position { line: 3, column: 1 }), "{e}");
    assert!(
        e.to_string()
            .starts_with("gpufill.toml:3:1: key nested too deep"),
        "{e}"
    );
    let e = error(&format!("target_percent = 50\n  {dotted} = 1\n"));
    assert_eq!(e.position(), Some(Position { line: 2, column: 3 }), "{e}");
    // Inline tables and arrays nested as deep: the parser gives their place itself.
    for (open, close) in [("{b = ", "}"), ("[", "]")] {
        let value = format!("{}1{}", open.repeat(100), close.repeat(100));
        let e = error(&format!("target_percent = 50\na = {value}\n"));
        assert_eq!(e.position().map(|p| p.line), Some(2), "{e}");
    }
}

#[test]
fn error_messages_read_file_line_column_key_reason() {
    assert_eq!(
        error("[load]\nwidth_blocks = 0\n").to_string(),
        "gpufill.toml:2:16: load.width_blocks: must be between 1 and 65535, got 0"
    );
    assert_eq!(
        error("target_percent = \"x\"").to_string(),
        "gpufill.toml:1:18: target_percent: invalid type: string \"x\", expected a number"
    );
    let e = Config::from_toml_str("tick_ms = 0", None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 1, column 11: tick_ms: must be between 1 and 1000, got 0"
    );
    let mut config = Config::default();
    config.load.width_blocks = 0;
    let e = config
        .validate(Some(Path::new("gpufill.toml")))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "gpufill.toml: load.width_blocks: must be between 1 and 65535, got 0"
    );
    let e = config.validate(None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "load.width_blocks: must be between 1 and 65535, got 0"
    );
}

#[test]
fn columns_count_characters_not_bytes() {
    let e = error("# é\n[load] # ü\nwidth_blocks = 0 # ß\n");
    assert_eq!(
        e.position(),
        Some(Position {
            line: 3,
            column: 16
        })
    );
    let e = error("load = { \"é\" = 1, width_blocks = 0 }");
    assert_eq!(
        e.position(),
        Some(Position {
            line: 1,
            column: 34
        })
    );
}

#[test]
fn gpus_accept_all_indices_and_uuids() {
    assert_eq!(gpus("\"all\"").unwrap(), GpuSelector::All);
    assert_eq!(
        gpus("[0, 2, \"GPU-5f2c0a1b-aaaa\"]").unwrap(),
        list(&[GpuId::Index(0), GpuId::Index(2), uuid("GPU-5f2c0a1b-aaaa")])
    );
    assert_eq!(gpus("[\"MIG-1234\"]").unwrap(), list(&[uuid("MIG-1234")]));
    assert_eq!(gpus("3").unwrap(), list(&[GpuId::Index(3)]));
    assert_eq!(gpus("\"GPU-abc\"").unwrap(), list(&[uuid("GPU-abc")]));
    assert_eq!(
        gpus("[4294967295]").unwrap(),
        list(&[GpuId::Index(u32::MAX)])
    );
}

#[test]
fn gpus_refuse_other_strings_negatives_empty_lists_and_duplicates() {
    for (text, reason) in [
        ("\"none\"", "got \"none\""),
        ("\"ALL\"", "got \"ALL\""),
        ("\"gpu-abc\"", "got \"gpu-abc\""),
        ("\"GPU-\"", "got \"GPU-\""),
        ("[\"GPU-a b\"]", "got \"GPU-a b\""),
        ("[0, \"1\"]", "got \"1\""),
        ("[\"all\"]", "\"all\" cannot be part of a GPU list"),
        ("[-1]", "must not be negative, got -1"),
        ("-1", "must not be negative, got -1"),
        ("[4294967296]", "must be at most 4294967295"),
        ("[]", "the GPU list is empty"),
        ("[0, 1, 0]", "GPU 0 is listed twice"),
        ("[\"GPU-a\", \"GPU-a\"]", "GPU GPU-a is listed twice"),
        ("[1.5]", "expected a GPU index or UUID"),
        ("[[1]]", "expected a GPU index or UUID"),
        ("true", "expected \"all\" or a list"),
        ("{ a = 1 }", "expected \"all\" or a list"),
    ] {
        let e = gpus(text).unwrap_err();
        assert_eq!(e.key(), Some("gpus"), "{text}: {e}");
        assert!(e.to_string().contains(reason), "{text}: {e}");
    }
}

#[test]
fn gpus_flag_follows_the_same_rules() {
    assert_eq!(GpuSelector::parse_flag("all"), Ok(GpuSelector::All));
    assert_eq!(
        GpuSelector::parse_flag(" 0, 1 ,GPU-abc"),
        Ok(list(&[GpuId::Index(0), GpuId::Index(1), uuid("GPU-abc")]))
    );
    assert_eq!("MIG-x".parse(), Ok(list(&[uuid("MIG-x")])));
    for (flag, reason) in [
        ("", "empty item"),
        ("0,,1", "empty item"),
        ("0,", "empty item"),
        ("-1", "must not be negative"),
        ("99999999999999999999", "must be at most"),
        ("x", "got \"x\""),
        ("all,0", "got \"all\""),
        ("0,0", "GPU 0 is listed twice"),
    ] {
        let e = GpuSelector::parse_flag(flag).unwrap_err();
        assert!(e.contains(reason), "{flag:?}: {e}");
    }
}

#[test]
fn gpus_render_back_as_written() {
    let selector = list(&[GpuId::Index(0), uuid("GPU-abc")]);
    assert_eq!(selector.to_string(), "0,GPU-abc");
    assert_eq!(GpuSelector::parse_flag(&selector.to_string()), Ok(selector));
    assert_eq!(GpuSelector::All.to_string(), "all");
}

#[test]
fn validate_refuses_gpu_lists_built_in_code() {
    let mut config = Config::default();
    for bad in [
        list(&[]),
        list(&[uuid("nope")]),
        list(&[GpuId::Index(1), GpuId::Index(1)]),
    ] {
        config.gpus = bad;
        assert_eq!(config.validate(None).unwrap_err().key(), Some("gpus"));
    }
}

#[test]
fn flags_override_file_values() {
    let mut config = parse("target_percent = 30\ntick_ms = 25\n[load]\nperiod_ms = 50\n").unwrap();
    let mut flags = Overrides::default();
    flags.set("target_percent").target_percent = 70.0;
    flags.set("gpus").gpus = list(&[GpuId::Index(1)]);
    config.apply(&flags);
    // No flag sets it: the value laid in code beside the flags stays.
    config.load.max_kernel_us = 5000;
    config.validate(None).unwrap();
    assert_eq!(config.target_percent, 70.0);
    assert_eq!(config.gpus, list(&[GpuId::Index(1)]));
    assert_eq!(
        config.tick_ms, 25,
        "a value without a flag keeps the file's"
    );
    assert_eq!(
        config.to_settings().launcher_settings().period,
        Duration::from_millis(50)
    );
    assert_eq!(
        config.to_settings().launcher_settings().max_kernel,
        Duration::from_micros(5000)
    );
}

#[test]
fn flags_are_validated_by_the_same_rules() {
    let mut config = Config::default();
    let mut flags = Overrides::default();
    flags.set("yield.grace_s").yielding.grace_s = -1.0;
    config.apply(&flags);
    let e = config.validate(None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "yield.grace_s: must be between 0 and 86400, got -1"
    );
}

fn temp_file(name: &str, contents: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpufill-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

#[test]
fn load_reads_a_file_and_names_it_in_errors() {
    let good = temp_file("good.toml", b"tick_ms = 10\n");
    assert_eq!(Config::load(&good).unwrap().tick_ms, 10);
    let bad = temp_file("bad.toml", b"tick_ms = 0\n");
    let e = Config::load(&bad).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}:1:11: tick_ms: must be between 1 and 1000, got 0",
            bad.display()
        )
    );
}

#[test]
fn load_names_the_file_and_the_os_reason() {
    let path = std::env::temp_dir().join("gpufill-no-such-dir/gpufill.toml");
    let e = Config::load(&path).unwrap_err();
    let message = e.to_string();
    assert!(
        message.starts_with(&format!("{}: cannot read: ", path.display())),
        "{e}"
    );
    assert!(message.contains("os error"), "{e}");
}

#[test]
fn load_refuses_text_that_is_not_utf8_with_its_position() {
    let path = temp_file("latin1.toml", b"tick_ms = 10\n# caf\xe9\n");
    let e = Config::load(&path).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("{}:2:6: not valid UTF-8", path.display())
    );
}

#[test]
fn positions_past_the_end_or_inside_a_character_do_not_panic() {
    assert_eq!(Position::of_offset("", 5), Position { line: 1, column: 1 });
    assert_eq!(Position::of_offset("é", 1), Position { line: 1, column: 1 });
    assert_eq!(
        Position::of_offset("a\nb", 99),
        Position { line: 2, column: 2 }
    );
}

/// A tiny linear congruential generator: deterministic, no dependency.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) as usize) % below.max(1)
    }
}

fn check_without_panic(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    if let Ok(config) = Config::from_toml_str(&text, Some(Path::new("fuzz.toml"))) {
        // Whatever is accepted renders, parses back equal, and resolves.
        assert_eq!(parse(&config.to_toml_string()).unwrap(), config);
        let _ = (
            config.to_settings().fill_settings(),
            config.to_settings().yield_settings(false),
            config.to_settings().tick(),
        );
    }
}

#[test]
fn mutated_examples_never_panic() {
    let example = EXAMPLE.as_bytes();
    for end in 0..=example.len() {
        check_without_panic(&example[..end]);
    }
    const BYTES: &[u8] = b"\"'[]{}=.,-+#\n\r\t 019eEx_:\xff\xc3";
    let mut rng = Lcg(0x9e37_79b9_7f4a_7c15);
    for _ in 0..600 {
        let mut bytes = example.to_vec();
        for _ in 0..=rng.next(4) {
            let at = rng.next(bytes.len());
            match rng.next(3) {
                0 => bytes[at] = BYTES[rng.next(BYTES.len())],
                1 => bytes.insert(at, BYTES[rng.next(BYTES.len())]),
                _ => {
                    bytes.remove(at);
                }
            }
        }
        check_without_panic(&bytes);
    }
}

#[test]
fn activity_policy_resolves_with_its_idle_grace_and_ignored_names() {
    let config = parse(
        "[yield]\npolicy = \"activity\"\nidle_grace_s = 12\nignore_names = [\"dcgm-exporter\"]\n",
    )
    .unwrap();
    let y = config.to_settings().yield_settings(false);
    assert_eq!(
        y.mode,
        YieldMode::Activity {
            idle_grace: Duration::from_secs(12)
        }
    );
    assert_eq!(y.ignore_names, vec!["dcgm-exporter".to_string()]);
    assert!(parse("[yield]\nidle_grace_s = -1\n").is_err());
    assert!(parse("[yield]\nignore_names = [\"\"]\n").is_err());
    assert!(parse("[yield]\nignore_names = [\"/usr/bin/x\"]\n").is_err());
    assert!(parse("[yield]\npolicy = \"never\"\n").is_err());
}

#[test]
fn release_context_sets_the_release_delay_only_when_on() {
    assert_eq!(
        Config::default()
            .to_settings()
            .fill_settings()
            .release_after,
        None
    );
    let config = parse("[yield]\nrelease_context = true\nrelease_after_s = 2.5\n").unwrap();
    assert_eq!(
        config.to_settings().fill_settings().release_after,
        Some(Duration::from_millis(2500))
    );
    assert!(parse("[yield]\nrelease_after_s = -1\n").is_err());
    assert!(parse("[yield]\nrelease_context = 1\n").is_err());
}

#[test]
fn mps_mode_follows_the_daemon_in_auto_and_the_setting_otherwise() {
    let auto = Config::default();
    assert_eq!(auto.to_settings().yield_settings(true).mode, YieldMode::Mps);
    assert_eq!(
        auto.to_settings().yield_settings(false).mode,
        YieldMode::Activity {
            idle_grace: Duration::from_secs(30)
        }
    );
    let off = parse("[yield]\nmps = \"off\"\npolicy = \"presence\"\n").unwrap();
    assert_eq!(
        off.to_settings().yield_settings(true).mode,
        YieldMode::Presence
    );
    let on = parse("[yield]\nmps = \"on\"\n").unwrap();
    assert_eq!(on.to_settings().yield_settings(false).mode, YieldMode::Mps);
    let e = parse("[yield]\nmps = \"maybe\"\n").unwrap_err();
    assert_eq!(e.key(), Some("yield.mps"), "{e}");
}

#[test]
fn bad_schedule_values_name_file_line_column_and_key() {
    let window = |body: &str| format!("[schedule]\n[[schedule.window]]\n{body}");
    let cases = [
        (
            window("start = \"6:00\"\nend = \"07:00\"\ntarget_percent = 0\n"),
            "gpufill.toml:3:9: schedule.window.start: expected a time of day as HH:MM",
        ),
        (
            window("start = \"06:00\"\nend = \"24:00\"\ntarget_percent = 0\n"),
            "gpufill.toml:4:7: schedule.window.end: expected a time of day as HH:MM",
        ),
        (
            window("start = \"06:00\"\nend = \"07:00\"\ntarget_percent = 101\n"),
            "gpufill.toml:5:18: schedule.window.target_percent: must be between 0 and 100, got 101",
        ),
        (
            window("start = \"06:00\"\nend = \"07:00\"\ntarget = 5\n"),
            "schedule.window.target: unknown field",
        ),
        (
            "[schedule]\nidle_target_percent = -1\n".to_owned(),
            "gpufill.toml:2:23: schedule.idle_target_percent: must be between 0 and 100, got -1",
        ),
        (
            "[schedule]\nidle_after_s = 2592001\n".to_owned(),
            "gpufill.toml:2:16: schedule.idle_after_s: must be between 0 and 2592000, got 2592001",
        ),
        (
            "[metrics]\nlisten = \"localhost\"\n".to_owned(),
            "gpufill.toml:2:10: metrics.listen: expected IP:PORT",
        ),
    ];
    for (text, expected) in cases {
        let message = error(&text).to_string();
        assert!(message.contains(expected), "{text:?}: {message}");
    }
}

#[test]
fn an_empty_window_is_refused_with_its_place() {
    let text = "[[schedule.window]]\nstart = \"06:00\"\nend = \"06:00\"\ntarget_percent = 0\n";
    let message = error(text).to_string();
    assert!(
        message.contains("schedule.window: start and end must differ"),
        "{message}"
    );
    assert!(message.starts_with("gpufill.toml:"), "{message}");
}

#[test]
fn metrics_listen_is_off_when_empty_and_takes_port_0() {
    assert_eq!(Config::default().metrics.addr(), None);
    let config = parse("[metrics]\nlisten = \"127.0.0.1:0\"\n").unwrap();
    assert_eq!(config.metrics.addr().unwrap().port(), 0);
    let v6 = parse("[metrics]\nlisten = \"[::1]:9401\"\n").unwrap();
    assert_eq!(v6.metrics.addr().unwrap().port(), 9401);
}
