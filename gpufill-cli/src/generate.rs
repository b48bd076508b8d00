//! `gpufill generate`: the man pages (`clap_mangen`) and shell completions
//! (`clap_complete`), generated from the clap definitions in [`crate::cli`], so that they
//! cannot drift from the flags.
//!
//! `cargo install` users run `gpufill generate man DIR` and `gpufill generate completions
//! SHELL`. The `.deb` installs the copies committed in `gpufill-cli/share/` instead, so
//! that building the package runs nothing (a cross-built binary could not run on the
//! build host); a test keeps those copies equal to what this module generates.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::{Cli, GenerateCommand};
use crate::version::VERSION;

/// The shells whose completions the `.deb` installs, and their file names under
/// `share/completions/`.
pub const PACKAGED_SHELLS: [(Shell, &str); 3] = [
    (Shell::Bash, "gpufill.bash"),
    (Shell::Zsh, "_gpufill"),
    (Shell::Fish, "gpufill.fish"),
];

/// The command as the pages and scripts describe it: the version without the commit,
/// so that generated files change with the flags or a release, not with every commit.
fn command() -> clap::Command {
    let mut cmd = Cli::command()
        .version(VERSION)
        .disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// Writes `gpufill.1` and one page per visible subcommand (`gpufill-run.1`,
/// `gpufill-config-check.1`, ...) into `dir`, which is created if missing.
///
/// # Errors
/// The directory or a page cannot be written.
pub fn man_pages(dir: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    write_pages(&command(), dir, &mut written)?;
    Ok(written)
}

fn write_pages(cmd: &clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> io::Result<()> {
    let man = clap_mangen::Man::new(cmd.clone())
        .source(format!("gpufill {VERSION}"))
        .manual("gpufill manual");
    let path = dir.join(man.get_filename());
    let mut page = Vec::new();
    man.render(&mut page)?;
    std::fs::write(&path, page)?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir, written)?;
    }
    Ok(())
}

/// The completion script of `shell`.
pub fn completions(shell: Shell) -> Vec<u8> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut visible_command(), "gpufill", &mut script);
    script
}

/// [`command`] without the hidden subcommands, which `clap_complete` would offer
/// (unlike `clap_mangen`): the same global flags and visible subcommands.
fn visible_command() -> clap::Command {
    let full = Cli::command();
    let mut cmd = clap::Command::new("gpufill").version(VERSION);
    if let Some(about) = full.get_about() {
        cmd = cmd.about(about.clone());
    }
    cmd.args(full.get_arguments().cloned())
        .subcommands(full.get_subcommands().filter(|s| !s.is_hide_set()).cloned())
        .disable_help_subcommand(true)
}

/// Writes what the `.deb` installs into `dir`: `man/` with every page, and
/// `completions/` with the scripts of [`PACKAGED_SHELLS`].
///
/// # Errors
/// A directory or file cannot be written.
pub fn packaged(dir: &Path) -> io::Result<()> {
    man_pages(&dir.join("man"))?;
    let scripts = dir.join("completions");
    std::fs::create_dir_all(&scripts)?;
    for (shell, name) in PACKAGED_SHELLS {
        std::fs::write(scripts.join(name), completions(shell))?;
    }
    Ok(())
}

/// Runs `gpufill generate ...`.
///
/// # Errors
/// A page or the script cannot be written.
pub fn run(command: &GenerateCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    match command {
        GenerateCommand::Man { dir } => {
            let written = man_pages(dir)
                .with_context(|| format!("cannot write man pages into {}", dir.display()))?;
            let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
            writeln!(out, "{}", names.join("\n")).context("cannot write to standard output")
        }
        GenerateCommand::Completions { shell } => out
            .write_all(&completions(*shell))
            .and_then(|()| out.flush())
            .context("cannot write to standard output"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_page_for_the_binary_and_each_visible_subcommand() {
        let dir = tempfile::tempdir().unwrap();
        let written = man_pages(dir.path()).unwrap();
        let names: Vec<_> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for name in ["gpufill.1", "gpufill-run.1", "gpufill-config-check.1"] {
            assert!(names.contains(&name.to_owned()), "{name} in {names:?}");
        }
        assert!(
            !names
                .iter()
                .any(|n| n.contains("bench-foreign") || n.contains("help")),
            "hidden commands and clap's help get no page: {names:?}"
        );
        let run = std::fs::read_to_string(dir.path().join("gpufill-run.1")).unwrap();
        assert!(run.starts_with(".ie \\n(.g .ds Aq"), "{run}");
        assert!(run.contains(&format!("gpufill {VERSION}")), "{run}");
        assert!(
            run.contains("\\-\\-target"),
            "the flags are documented: {run}"
        );
    }

    #[test]
    fn completions_name_the_subcommands_and_their_flags() {
        for (shell, _) in PACKAGED_SHELLS {
            let script = String::from_utf8(completions(shell)).unwrap();
            for word in ["simulate", "target", "every", "gpus", "verbose"] {
                assert!(script.contains(word), "{shell}: {word}");
            }
            assert!(
                !script.contains("bench-foreign"),
                "{shell}: hidden commands stay hidden"
            );
        }
    }
}
