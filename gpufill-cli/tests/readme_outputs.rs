//! README.md's sample outputs are what the binary prints: every ```console block whose
//! command is `gpufill simulate ...` (or the `cargo run ... --` form of it) is run, and
//! its lines must appear in the output, in order; a line `...` stands for any lines.

use std::process::Command;

/// The console blocks of `readme`: (the command's arguments after `gpufill`, the
/// expected lines).
fn console_blocks(readme: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let mut blocks = Vec::new();
    let mut rest = readme;
    while let Some(start) = rest.find("```console\n") {
        let body = &rest[start + "```console\n".len()..];
        let end = body.find("```").expect("a console block ends");
        let mut lines = body[..end].lines();
        let command = lines.next().unwrap_or_default();
        rest = &body[end..];
        let Some(args) = command
            .strip_prefix("$ cargo run --release -p gpufill-cli -- ")
            .or_else(|| command.strip_prefix("$ gpufill "))
        else {
            continue;
        };
        if !args.starts_with("simulate ") {
            continue;
        }
        let args = args.split_whitespace().map(str::to_owned).collect();
        blocks.push((args, lines.map(str::to_owned).collect()));
    }
    blocks
}

/// Whether `expected` (with `...` for any lines) appears in `printed`, in order; the
/// first line that does not, if any.
fn missing<'a>(expected: &'a [String], printed: &str) -> Option<&'a str> {
    let printed: Vec<&str> = printed.lines().collect();
    let mut at = 0;
    let mut skipping = false;
    for line in expected {
        if line == "..." {
            skipping = true;
            continue;
        }
        let found = if skipping {
            printed[at..].iter().position(|p| p == line).map(|i| at + i)
        } else {
            (printed.get(at) == Some(&line.as_str())).then_some(at)
        };
        match found {
            Some(i) => at = i + 1,
            None => return Some(line),
        }
        skipping = false;
    }
    None
}

#[test]
fn the_readmes_simulate_outputs_are_what_the_binary_prints() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let blocks = console_blocks(&readme);
    assert!(
        blocks.len() >= 2,
        "the README's simulate examples: {blocks:?}"
    );
    for (args, expected) in blocks {
        let out = Command::new(env!("CARGO_BIN_EXE_gpufill"))
            .args(&args)
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG")
            .output()
            .expect("gpufill runs");
        assert!(out.status.success(), "gpufill {args:?}: {out:?}");
        let printed = String::from_utf8_lossy(&out.stdout);
        if let Some(line) = missing(&expected, &printed) {
            panic!(
                "README.md: `gpufill {}` does not print\n{line}\nit prints:\n{printed}",
                args.join(" ")
            );
        }
    }
}

#[test]
fn a_line_the_binary_does_not_print_is_found() {
    let lines = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let printed = "a\nb\nc\nd\n";
    assert_eq!(missing(&lines(&["a", "b"]), printed), None);
    assert_eq!(missing(&lines(&["a", "...", "d"]), printed), None);
    assert_eq!(
        missing(&lines(&["a", "c"]), printed),
        Some("c"),
        "no skipping without ..."
    );
    assert_eq!(missing(&lines(&["...", "x"]), printed), Some("x"));
}
