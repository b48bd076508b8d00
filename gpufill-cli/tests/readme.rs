//! README.md's Commands section against the clap definitions: a row for every command,
//! and in it every flag and positional argument the command takes, and nothing it
//! lacks; the loop flags and the global flags as the paragraphs below the table say.

use std::collections::{BTreeMap, BTreeSet};

use clap::CommandFactory;
use gpufill_cli::cli::Cli;

/// A command's path (`config check`) -> its flags (`--target`) and positional value
/// names (`FILE`).
type Commands = BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)>;

fn flags_in(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (i, _) in text.match_indices("--") {
        let name: String = text[i + 2..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '-')
            .collect();
        if !name.is_empty() {
            found.insert(format!("--{name}"));
        }
    }
    found
}

/// The Commands section of the README: its table and the paragraphs after it.
fn section(readme: &str) -> &str {
    let start = readme
        .find("\n## Commands\n")
        .expect("README has a Commands section");
    let rest = &readme[start + 1..];
    let end = rest[3..].find("\n#").map_or(rest.len(), |i| i + 3);
    &rest[..end]
}

/// The paragraph of `section` that starts with `start`.
fn paragraph<'a>(section: &'a str, start: &str) -> &'a str {
    let at = section
        .find(start)
        .unwrap_or_else(|| panic!("no paragraph starting {start:?}"));
    let text = &section[at..];
    &text[..text.find("\n\n").unwrap_or(text.len())]
}

/// What the README documents, the loop flags expanded.
fn documented(readme: &str) -> Commands {
    let section = section(readme);
    let loop_flags = flags_in(paragraph(section, "The loop flags"));
    let mut commands = Commands::new();
    for row in section.lines().filter(|l| l.starts_with("| `gpufill ")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        let usage = cells[0]
            .trim_start_matches("| `gpufill ")
            .trim_end_matches('`');
        let (mut path, mut positionals) = (Vec::new(), BTreeSet::new());
        for word in usage.split_whitespace() {
            if word.chars().all(|c| c.is_ascii_lowercase() || c == '-') {
                path.push(word);
            } else {
                positionals.insert(word.trim_matches(['[', ']']).to_owned());
            }
        }
        let mut flags = flags_in(cells[1]);
        if cells[1].contains("the loop flags") {
            flags.extend(loop_flags.iter().cloned());
        }
        commands.insert(path.join(" "), (flags, positionals));
    }
    commands
}

/// What clap defines: every visible command without subcommands, its own flags (not
/// the global ones, nor help) and positional arguments.
fn defined() -> Commands {
    fn walk(cmd: &clap::Command, path: &mut Vec<String>, out: &mut Commands) {
        let subs: Vec<_> = cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
            .collect();
        if subs.is_empty() {
            let (mut flags, mut positionals) = (BTreeSet::new(), BTreeSet::new());
            for arg in cmd.get_arguments().filter(|a| !a.is_global_set()) {
                match arg.get_long() {
                    Some("help" | "version") => {}
                    Some(long) => {
                        flags.insert(format!("--{long}"));
                    }
                    None => {
                        let name = arg.get_value_names().and_then(|n| n.first()).map_or_else(
                            || arg.get_id().to_string().to_uppercase(),
                            |n| n.to_string(),
                        );
                        positionals.insert(name);
                    }
                }
            }
            out.insert(path.join(" "), (flags, positionals));
        }
        for sub in subs {
            path.push(sub.get_name().to_owned());
            walk(sub, path, out);
            path.pop();
        }
    }
    let mut cmd = Cli::command();
    cmd.build();
    let mut out = Commands::new();
    walk(&cmd, &mut Vec::new(), &mut out);
    out.remove(""); // the binary itself: its flags are the global ones
    out
}

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap()
}

#[test]
fn the_readme_lists_every_command_with_every_flag_clap_defines() {
    let (have, want) = (documented(&readme()), defined());
    assert_eq!(
        have.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "README.md's Commands table has a row per command"
    );
    for (command, (flags, positionals)) in &want {
        let (doc_flags, doc_positionals) = &have[command];
        assert_eq!(doc_flags, flags, "README.md, `gpufill {command}`: flags");
        assert_eq!(
            doc_positionals, positionals,
            "README.md, `gpufill {command}`: arguments"
        );
    }
}

#[test]
fn the_readme_names_the_global_flags() {
    let readme = readme();
    let global = flags_in(paragraph(section(&readme), "Every command takes"));
    let mut cmd = Cli::command();
    cmd.build();
    for arg in cmd.get_arguments() {
        let long = format!("--{}", arg.get_long().unwrap());
        assert!(global.contains(&long), "README.md does not name {long}");
    }
}

#[test]
fn the_check_finds_a_missing_and_an_extra_flag() {
    let readme = readme();
    let want = defined();
    let without_every = readme.replacen("`--every SECS`, ", "", 1);
    let with_bogus = readme.replacen("`--force`", "`--force`, `--bogus`", 1);
    for broken in [without_every, with_bogus] {
        assert_ne!(broken, readme, "the breakage changed the README");
        assert_ne!(documented(&broken), want);
    }
}

#[test]
fn the_readme_states_the_licence_of_cargo_toml_and_links_its_texts() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = readme
        .split("\n## Licence\n")
        .nth(1)
        .expect("README has a Licence section");
    let section = section.split("\n## ").next().unwrap();
    let licence = env!("CARGO_PKG_LICENSE");
    assert_eq!(licence, "MIT OR Apache-2.0");
    assert!(
        section.contains(&format!("`license = \"{licence}\"`")),
        "{section}"
    );
    for file in ["LICENSE-APACHE", "LICENSE-MIT"] {
        assert!(section.contains(&format!("]({file})")), "{file}: {section}");
        assert!(root.join(file).is_file(), "{file}");
    }
}
