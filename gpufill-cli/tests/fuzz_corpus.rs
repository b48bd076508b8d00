//! The fuzz targets' functions (fuzz/, cargo-fuzz on nightly) on a fixed corpus of
//! nasty inputs, on the stable toolchain: the config parser and the flag parser give a
//! value or an error, and never panic; the request-head parser gives one answer however
//! the bytes arrive. docs/faults.md says how to run the fuzzer itself.

use clap::{CommandFactory, Parser};
use gpufill_cli::cli::Cli;
use gpufill_cli::config::Config;
use gpufill_cli::metrics::server::http::{Feed, HeadParser};

/// Values that have broken parsers: huge, tiny, not numbers, not text, empty.
const NASTY_VALUES: &[&str] = &[
    "",
    "0",
    "-0",
    "-1",
    "1e20",
    "-1e20",
    "1e308",
    "1e309",
    "5e-324",
    "NaN",
    "nan",
    "inf",
    "-inf",
    "18446744073709551616",
    "-9223372036854775809",
    "0x7fffffffffffffff",
    "1_000",
    "0-1e20:30",
    "1e20-2e20:30",
    "5-12:1e20",
    "::",
    "-",
    "--",
    "=",
    ",",
    "0,,1",
    "GPU-",
    "99:99",
    "24:00",
    "23:60",
    "-00:01",
    "\u{0}",
    "\u{feff}",
    "\u{202e}50",
    "é",
    "[]",
    "{}",
];

/// TOML values for every key: the same kinds of trouble, typed.
const NASTY_TOML: &[&str] = &[
    "0",
    "-1",
    "-0.0",
    "1e20",
    "1e308",
    "-1e308",
    "5e-324",
    "nan",
    "+inf",
    "-inf",
    "9223372036854775807",
    "-9223372036854775808",
    "\"\"",
    "\"1e20\"",
    "\"nan\"",
    "\"24:00\"",
    "\"99:99\"",
    "\"\\u0000\"",
    "\"\u{202e}\"",
    "true",
    "[]",
    "[1, \"a\"]",
    "[-1, 4294967296]",
    "{}",
    "{ a = 1 }",
    "1979-05-27T07:32:00Z",
    "07:32:00",
];

fn config(text: &str) {
    // Either is fine; a panic fails the test (and would be a fuzzer crash).
    let _ = Config::from_toml_str(text, None);
}

#[test]
fn the_config_parser_survives_nasty_documents() {
    let deep = |open: &str, close: &str| {
        format!(
            "target_percent = {}1{}",
            open.repeat(10_000),
            close.repeat(10_000)
        )
    };
    let documents = [
        String::new(),
        "\u{feff}".into(),
        "\u{0}".into(),
        "\r".into(),
        "a = 1\r\r\n".into(),
        "[load]\n[load]\n".into(),
        "target_percent = 1\ntarget_percent = 2\n".into(),
        "[[schedule.window]]\n".into(),
        "[[schedule.window]]\nstart = \"22:00\"\nend = \"22:00\"\ntarget_percent = 0\n".into(),
        "[schedule]\nwindow = 1\n".into(),
        "[yield]\nignore_pids = [1, 1, 4294967295, 4294967296]\n".into(),
        "[yield]\nignore_names = [\"\", \"\u{0}\", \"a\"]\n".into(),
        "metrics.listen = \"[::1]:99999\"\n".into(),
        "metrics.listen = \"999.0.0.1:1\"\n".into(),
        "gpus = [0, 0, -1, \"GPU-\", \"\"]\n".into(),
        "x".repeat(100_000),
        format!("{} = 1", "a.".repeat(10_000) + "b"),
        deep("[", "]"),
        deep("{a=", "}"),
        format!("target_percent = \"{}\"", "9".repeat(100_000)),
    ];
    for text in &documents {
        config(text);
    }
}

#[test]
fn every_key_of_the_example_config_survives_every_nasty_value() {
    let example = include_str!("../gpufill.example.toml");
    let lines: Vec<&str> = example.lines().collect();
    let mut tried = 0;
    for (i, line) in lines.iter().enumerate() {
        let Some((key, _)) = line.split_once(" = ").filter(|_| !line.starts_with('#')) else {
            continue;
        };
        for value in NASTY_TOML {
            let mut text = lines.clone();
            let replaced = format!("{key} = {value}");
            text[i] = &replaced;
            config(&text.join("\n"));
            tried += 1;
        }
    }
    assert!(
        tried > 20 * NASTY_TOML.len(),
        "{tried}: the example lost its keys?"
    );
}

/// `Cli::try_parse_from` with the binary's name first. `--help` and `--version` come
/// back as errors too: nothing is printed.
fn flags(args: &[&str]) {
    let _ = Cli::try_parse_from(std::iter::once("gpufill").chain(args.iter().copied()));
}

#[test]
fn every_flag_of_every_command_survives_every_nasty_value() {
    let command = Cli::command();
    let mut tried = 0;
    let mut commands: Vec<(Vec<String>, &clap::Command)> = vec![(Vec::new(), &command)];
    while let Some((path, cmd)) = commands.pop() {
        for sub in cmd.get_subcommands() {
            let mut p = path.clone();
            p.push(sub.get_name().to_owned());
            commands.push((p, sub));
        }
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let flag = format!("--{long}");
            for value in NASTY_VALUES {
                let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
                args.extend([flag.as_str(), value]);
                flags(&args);
                let joined = format!("{flag}={value}");
                args.truncate(path.len());
                args.push(&joined);
                flags(&args);
                tried += 2;
            }
        }
        flags(&path.iter().map(String::as_str).collect::<Vec<_>>());
    }
    assert!(tried > 30 * NASTY_VALUES.len(), "{tried}");
}

#[test]
fn odd_argument_lists_survive() {
    let long = "9".repeat(100_000);
    for args in [
        &[][..],
        &[""],
        &["--"],
        &["-"],
        &["-vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"],
        &["-v", "-q"],
        &["run", "--target", "50", "--target", "60"],
        &["run", "--gpus", ",,,"],
        &["run", "--duration", "1e20"],
        &["simulate", "--foreign", "0-1e20:30", "--every", "1e20"],
        &["simulate", "--random-foreign", "1000000", "--seed", "-1"],
        &["simulate", "--start-time", "25:61"],
        &["config", "check", "--", "--target"],
        &["bench", "--targets", "10,,1e20,-1,nan"],
        &["\u{0}"],
        &[&long],
        &["run", "--target", &long],
    ] {
        flags(args);
    }
}

/// The fuzz target `http_head`'s check: the head parser gives the same answer to `data`
/// fed all at once as fed a byte at a time (and never panics).
fn head_alike_whole_and_bytewise(data: &[u8]) {
    let whole = HeadParser::default().feed(data);
    let mut parser = HeadParser::default();
    let mut bytewise = Feed::NeedMore;
    for &b in data {
        bytewise = parser.feed(&[b]);
    }
    assert_eq!(whole, bytewise, "{:?}", String::from_utf8_lossy(data));
}

/// Request heads and garbage the metrics endpoint meets: the fuzz target `http_head`'s
/// check over each, whole and cut at every byte.
#[test]
fn request_heads_and_garbage_get_one_answer_however_they_arrive() {
    let tls_hello: &[u8] = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\x8a\x1c\x00\x00";
    let long_value = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    let corpus: Vec<&[u8]> = vec![
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        b"HEAD /healthz?v=1 HTTP/1.0\n\n",
        b"\r\n\r\nGET http://h:9401/metrics HTTP/1.1\r\n\r\nbody",
        b"GET HTTPS://h HTTP/1.1\r\nUser-Agent: caf\xc3\xa9\tx\r\n\r\n",
        b"GET / HTTP/2.0\r\n\r\n",
        b"GET / HTTP/0.9\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        tls_hello,
        b"SSH-2.0-OpenSSH_9.6\r\n",
        b"GET / HTTP/1.1\r\n folded\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost : x\r\n\r\n",
        b"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",
        b"GET / HTTP/1.1\r\r\n\r\n",
        b"GET  / HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1 \r\n\r\n",
        b"GET /\x7f HTTP/1.1\r\n\r\n",
        b"GET ftp://x/ HTTP/1.1\r\n\r\n",
        b"GET http: HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.12\r\n\r\n",
        b": x\r\n\r\n",
        b"\r\n\r\n\r\n",
        b"",
        b"\n",
        b"\x00",
        long_value.as_bytes(),
    ];
    for head in corpus {
        for cut in 0..=head.len().min(300) {
            head_alike_whole_and_bytewise(&head[..cut]);
        }
        head_alike_whole_and_bytewise(head);
    }
}
