//! `gpufill generate`: the man pages (`clap_mangen`) and shell completions
//! (`clap_complete`), generated from the clap definitions in [`crate::cli`], so that they
//! cannot drift from the flags.
//!
//! `cargo install` users run `gpufill generate man DIR` and `gpufill generate completions
//! SHELL`. The `.deb` installs the copies committed in `gpufill-cli/share/` instead, so
//! that building the package runs nothing (a cross-built binary could not run on the
//! build host); a test keeps those copies equal to what this module generates.
//!
//! Each page has clap_mangen's sections (NAME, SYNOPSIS, OPTIONS, SUBCOMMANDS, VERSION)
//! and the ones a reader of a daemon's page looks for, written here (`PAGES`): a
//! DESCRIPTION longer than NAME's line, EXIT STATUS, SIGNALS, FILES, ENVIRONMENT (every
//! `GPUFILL_*` variable comes from the flag's own `env`) and EXAMPLES.
//!
//! The metric tables of README.md and docs/operations.md ([`metric_table`]) come from
//! the series list in code ([`gpufill_runtime::prometheus::series`] and the reload's,
//! [`gpufill_runtime::reload::SERIES`]); a test keeps the docs' copies equal to them.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::roff::{Roff, bold, roman};
use gpufill_runtime::prometheus::{self, MetricTable, Series};
use gpufill_runtime::reload;

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
    let name = man.get_filename();
    let page_name = name.trim_end_matches(".1");
    let text = PAGES
        .iter()
        .find(|p| p.name == page_name)
        .ok_or_else(|| io::Error::other(format!("no page text for {page_name} in generate.rs")))?;
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    paragraphs(&mut page, "DESCRIPTION", text.description)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut page)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut page)?;
    }
    definitions(&mut page, "EXIT STATUS", text.exit_status)?;
    if text.signals {
        definitions(&mut page, "SIGNALS", SIGNALS)?;
    }
    let files: Vec<(String, &str)> = text
        .files
        .iter()
        .map(|(path, what)| (path.concat(), *what))
        .collect();
    definitions(&mut page, "FILES", &files)?;
    definitions(&mut page, "ENVIRONMENT", &environment(cmd))?;
    definitions(&mut page, "EXAMPLES", text.examples)?;
    if cmd
        .get_version()
        .or_else(|| cmd.get_long_version())
        .is_some()
    {
        man.render_version_section(&mut page)?;
    }
    std::fs::write(&path, page)?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir, written)?;
    }
    Ok(())
}

/// A page's own text, beside what clap knows.
struct Page {
    /// The page's name, `gpufill-config-check` for `gpufill-config-check.1`.
    name: &'static str,
    /// DESCRIPTION, paragraphs separated by blank lines.
    description: &'static str,
    exit_status: &'static [(&'static str, &'static str)],
    signals: bool,
    /// FILES: each file's path, in parts (joined when written), and what it is.
    files: &'static [File],
    examples: &'static [(&'static str, &'static str)],
}

const EXIT_STATUS: &[(&str, &str)] = &[
    (
        "0",
        "Success, or stopped by SIGINT or SIGTERM (every GPU left idle).",
    ),
    (
        "1",
        "A runtime failure: no NVIDIA driver, NVML failing, a GPU that failed and was not reopened, standard output that cannot be written.",
    ),
    (
        "2",
        "A usage or config error: a bad flag, variable or file (the message names the file, key and reason), or, for run, a GPU that another gpufill already fills (the message names it). systemd's unit does not restart on it.",
    ),
];

const SIGNALS: &[(&str, &str)] = &[
    (
        "SIGHUP",
        "Re-read the config file once its writer is done (closed, or renamed into place); the new settings are in force, and logged as reloaded, only once every worker took them. A file that fails, or settings a GPU cannot meet, are refused with one error line and the settings in force stay. Keys that need a restart keep their old values.",
    ),
    (
        "SIGTERM, SIGINT",
        "Stop: every GPU is idle within a tick and the burst already queued; exit 0.",
    ),
];

/// A file a page names: its path in parts, joined when written (so that a path the
/// code defines is taken from there), and what it is.
type File = (&'static [&'static str], &'static str);

const CONFIG_FILE: File = (
    &[crate::config::DEFAULT_CONFIG],
    "The config file read by run and config check when no --config (nor GPUFILL_CONFIG) names one, where it exists (the .deb installs it). Every key with its default: gpufill.example.toml.",
);
const CLAIM_FILES: File = (
    &[gpufill_runtime::CLAIM_DIR, "/UUID.lock"],
    "run's claim of each GPU it fills (an flock, released when it ends, however it ends, and before it executes itself again to follow MPS): a second gpufill on that GPU exits 2, naming the first.",
);
const MPS_FILES: File = (
    &["$CUDA_MPS_PIPE_DIRECTORY/control, nvidia-cuda-mps-control.pid"],
    "An MPS control daemon's endpoint and PID file (default directory /tmp/nvidia-mps): MPS runs while both are there, trusted, and the daemon lives.",
);

/// Every page's text; a page without one fails `generate` (and the tests).
const PAGES: &[Page] = &[
    Page {
        name: "gpufill",
        description: "gpufill holds an NVIDIA GPU's utilization (NVML's, what nvidia-smi and DCGM show) at a target, 50 % by default, with the duty cycle of a one-warp spin kernel under closed-loop control, using no GPU memory beyond a CUDA context. It yields the moment another process uses the GPU: it reads the compute-process list before each burst of kernels and launches nothing once a newcomer is listed.\n\nUnder MPS, where kernels of different processes run together, it fills beside MPS clients instead, and restarts itself when an MPS control daemon starts or stops.\n\nSettings come from the flags, then the GPUFILL_* variables, then the config file, then the built-in defaults.",
        exit_status: EXIT_STATUS,
        signals: true,
        files: &[CONFIG_FILE, CLAIM_FILES, MPS_FILES],
        examples: &[
            ("gpufill run --target 40", "Fill every GPU at 40 %."),
            (
                "gpufill run --metrics 127.0.0.1:9401",
                "Also serve Prometheus metrics and /healthz.",
            ),
            (
                "gpufill simulate --foreign 5-12:30",
                "The loop on a simulated GPU, with a foreign job from 5 s to 12 s.",
            ),
            (
                "gpufill status",
                "Each GPU, its processes, and whether they share SMs under MPS.",
            ),
        ],
    },
    Page {
        name: "gpufill-run",
        description: "Fills the selected GPUs until SIGINT or SIGTERM (or --duration): one worker thread per GPU holds its utilization at the target and stands aside whenever another process is on it (yield.policy). SIGHUP re-reads the config file. With --metrics it serves Prometheus metrics at /metrics, and /healthz and /health, which answer 200 while every GPU's worker ticks or waits for its GPU's lock.\n\nUnder systemd (Type=notify) it reports READY=1 once every worker has ticked (or waits for its GPU's lock) and pings the watchdog only while all do.\n\nWith yield.mps = \"auto\" it follows the MPS control daemon: when one starts or stops it leaves every GPU idle and executes itself again with the same arguments, since the CUDA driver decides once per process whether it is an MPS client.",
        exit_status: EXIT_STATUS,
        signals: true,
        files: &[CONFIG_FILE, CLAIM_FILES, MPS_FILES],
        examples: &[
            (
                "gpufill run",
                "Every GPU at 50 %, with /etc/gpufill/gpufill.toml where it exists.",
            ),
            (
                "gpufill run --gpus 0,1 --target 30 --metrics 0.0.0.0:9401",
                "GPUs 0 and 1 at 30 %, metrics on every interface.",
            ),
            (
                "GPUFILL_TARGET=30 GPUFILL_LOG_FORMAT=json gpufill run",
                "The same from the environment, logging JSON lines.",
            ),
            (
                "systemctl reload gpufill",
                "Send SIGHUP to the service: re-read its config file.",
            ),
        ],
    },
    Page {
        name: "gpufill-simulate",
        description: "Runs the real control loop against a simulated GPU (NVML's sampling window, duty to utilization, foreign jobs, services, MPS, a PID namespace), in virtual time: minutes in milliseconds, no GPU needed. It prints a table of target, utilization, duty and state, and a summary; --csv writes every tick. With --realtime it runs at wall-clock speed, so that --metrics can be scraped and SIGHUP sent while it runs.",
        exit_status: EXIT_STATUS,
        signals: true,
        files: &[],
        examples: &[
            (
                "gpufill simulate --duration 60 --foreign 5-12:30",
                "A foreign job wanting 30 % from 5 s to 12 s.",
            ),
            (
                "gpufill simulate --mps --service 2-60:5/s:2ms:gpu",
                "Under MPS, beside a service of GPU-bound requests.",
            ),
            (
                "gpufill simulate --realtime --metrics 127.0.0.1:9401",
                "Serve the metrics a real run would.",
            ),
        ],
    },
    Page {
        name: "gpufill-status",
        description: "Shows each GPU NVML sees: name, UUID, utilization, memory, power and compute processes, gpufill's own marked. It says whether an MPS control daemon runs (CUDA_MPS_PIPE_DIRECTORY) and marks its clients: they share the SMs, while the other processes time-slice with them. It reads NVML only, never CUDA, so it works where only the driver's utility capability is given. --json prints the same as one JSON object.",
        exit_status: EXIT_STATUS,
        signals: false,
        files: &[MPS_FILES],
        examples: &[
            ("gpufill status", "The table."),
            (
                "gpufill status --json | jq '.gpus[].processes[] | select(.mps_client)'",
                "The MPS clients.",
            ),
        ],
    },
    Page {
        name: "gpufill-config",
        description: "Works with config files: see gpufill-config-check(1).",
        exit_status: EXIT_STATUS,
        signals: false,
        files: &[CONFIG_FILE],
        examples: &[(
            "gpufill config check /etc/gpufill/gpufill.toml",
            "Validate a file before deploying it.",
        )],
    },
    Page {
        name: "gpufill-config-check",
        description: "Validates a config file and prints the settings it resolves to, every key present, as TOML; without FILE, /etc/gpufill/gpufill.toml where it exists, else the built-in defaults. An unknown key, a wrong type or a value out of range is an error naming FILE:LINE:COLUMN, the key and the reason, with exit status 2.",
        exit_status: EXIT_STATUS,
        signals: false,
        files: &[CONFIG_FILE],
        examples: &[
            ("gpufill config check my.toml", "Check my.toml."),
            (
                "gpufill config check > gpufill.toml",
                "Start a config from the defaults.",
            ),
        ],
    },
    Page {
        name: "gpufill-bench",
        description: "Measures gpufill on this machine's GPU: how fast and how closely it holds each target, its GPU memory and board power, and, in a yield test, how soon it stands aside for a foreign CUDA process and comes back. It writes a table, bench.svg, bench.csv and bench.json. It refuses a GPU that others use unless --force. --sim runs the same on the simulated GPU, in virtual time.",
        exit_status: EXIT_STATUS,
        signals: false,
        files: &[],
        examples: &[
            (
                "gpufill bench --gpu 0",
                "Measure GPU 0 at 10, 25, 50, 75 and 90 %.",
            ),
            (
                "gpufill bench --sim --seconds 5",
                "The same on the simulated GPU.",
            ),
        ],
    },
    Page {
        name: "gpufill-generate",
        description: "Writes the man pages or a shell's completions, generated from gpufill's own flag definitions: see gpufill-generate-man(1) and gpufill-generate-completions(1).",
        exit_status: EXIT_STATUS,
        signals: false,
        files: &[],
        examples: &[(
            "gpufill generate man ~/.local/share/man/man1",
            "Install the pages for man(1).",
        )],
    },
    Page {
        name: "gpufill-generate-man",
        description: "Writes gpufill.1 and one page per subcommand (gpufill-run.1, ...) into DIR, which is created if missing, and prints their paths.",
        exit_status: EXIT_STATUS,
        signals: false,
        files: &[],
        examples: &[(
            "gpufill generate man ~/.local/share/man/man1",
            "Then: man gpufill-run.",
        )],
    },
    Page {
        name: "gpufill-generate-completions",
        description: "Prints SHELL's completion script for gpufill to standard output.",
        exit_status: EXIT_STATUS,
        signals: false,
        files: &[],
        examples: &[
            (
                "gpufill generate completions bash > ~/.local/share/bash-completion/completions/gpufill",
                "bash.",
            ),
            (
                "gpufill generate completions fish > ~/.config/fish/completions/gpufill.fish",
                "fish.",
            ),
        ],
    },
    Page {
        name: "gpufill-healthcheck",
        description: "Asks a running gpufill's /healthz on its metrics address (run --metrics, or GPUFILL_METRICS as the container image sets it; 0.0.0.0 and [::] are asked on loopback) and exits 0 when it answers 200, that is while every GPU's worker ticks, and 1 otherwise. The container image's HEALTHCHECK runs it, since the image has no shell or curl.",
        exit_status: &[
            ("0", "/healthz answered 200: every worker ticks."),
            (
                "1",
                "/healthz answered otherwise (the message names the GPUs not ticking), or did not answer within --timeout.",
            ),
            ("2", "A bad flag or GPUFILL_METRICS."),
        ],
        signals: false,
        files: &[],
        examples: &[
            (
                "gpufill healthcheck --metrics 127.0.0.1:9401",
                "Probe a local gpufill.",
            ),
            (
                "HEALTHCHECK CMD [\"/usr/local/bin/gpufill\", \"healthcheck\"]",
                "In a Dockerfile whose image sets GPUFILL_METRICS.",
            ),
        ],
    },
];

/// The variables a page's command reads: its flags' `GPUFILL_*` ones, then those of the
/// environment that gpufill reads itself.
fn environment(cmd: &clap::Command) -> Vec<(String, String)> {
    let mut vars: Vec<(String, String)> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| {
            let var = a.get_env()?.to_string_lossy().into_owned();
            let flag = a.get_long().map_or_else(String::new, |l| format!("--{l}"));
            Some((
                var,
                format!("As {flag}, which overrides it; it overrides the config file."),
            ))
        })
        .collect();
    for (var, what) in [
        (
            "RUST_LOG",
            "The log filter (tracing's EnvFilter syntax); overrides -v and -q. One that is empty or not understood (it enables nothing of gpufill's) gives way to them, with one warning; errors are logged whatever it says.",
        ),
        (
            "NO_COLOR",
            "Any value but empty: no colours in the log, even on a terminal.",
        ),
        (
            "CUDA_MPS_PIPE_DIRECTORY",
            "Where the MPS control daemon's endpoint is looked for (default /tmp/nvidia-mps), as CUDA clients do.",
        ),
        (
            "NODE_NAME",
            "The Hostname label of the metrics (the Kubernetes node), else the host name.",
        ),
        ("TZ", "The time zone of schedule windows."),
    ] {
        vars.push((var.to_owned(), what.to_owned()));
    }
    vars
}

/// A section of paragraphs (separated by blank lines in `text`).
fn paragraphs(out: &mut Vec<u8>, title: &str, text: &str) -> io::Result<()> {
    let mut roff = Roff::default();
    roff.control("SH", [title]);
    for (i, paragraph) in text.split("\n\n").enumerate() {
        if i > 0 {
            roff.control("PP", []);
        }
        roff.text([roman(paragraph)]);
    }
    roff.to_writer(out)
}

/// A section of tagged paragraphs: a term in bold, then what it means.
fn definitions<T: AsRef<str>, D: AsRef<str>>(
    out: &mut Vec<u8>,
    title: &str,
    items: &[(T, D)],
) -> io::Result<()> {
    if items.is_empty() {
        return Ok(());
    }
    let mut roff = Roff::default();
    roff.control("SH", [title]);
    for (term, meaning) in items {
        roff.control("TP", []);
        roff.text([bold(term.as_ref())]);
        roff.text([roman(meaning.as_ref())]);
    }
    roff.to_writer(out)
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

/// Every series `/metrics` serves, in its order: the runtime's, then the reload series.
pub fn metric_series() -> impl Iterator<Item = &'static Series> {
    prometheus::series().iter().chain(&reload::SERIES)
}

/// `table` in Markdown: a header, then a row a series ([`metric_series`]).
pub fn metric_table(table: MetricTable) -> String {
    prometheus::markdown_table(metric_series(), table)
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
    fn each_page_has_the_sections_a_reader_looks_for() {
        let dir = tempfile::tempdir().unwrap();
        let written = man_pages(dir.path()).unwrap();
        assert_eq!(written.len(), PAGES.len(), "a text for every page, no more");
        for path in &written {
            let page = std::fs::read_to_string(path).unwrap();
            for section in [
                "NAME",
                "SYNOPSIS",
                "DESCRIPTION",
                "EXIT STATUS",
                "ENVIRONMENT",
                "EXAMPLES",
            ] {
                assert!(
                    page.contains(&format!(".SH \"{section}\""))
                        || page.contains(&format!(".SH {section}\n")),
                    "{}: {section}",
                    path.display()
                );
            }
        }
        let run = std::fs::read_to_string(dir.path().join("gpufill-run.1")).unwrap();
        for needle in [
            "SIGNALS",
            "SIGHUP",
            "FILES",
            "/etc/gpufill/gpufill.toml",
            "GPUFILL_TARGET",
            "GPUFILL_LOG_FORMAT",
            "CUDA_MPS_PIPE_DIRECTORY",
        ] {
            assert!(run.contains(needle), "gpufill-run.1: {needle}");
        }
        // DESCRIPTION says more than NAME's one line.
        let description = run
            .split(".SH DESCRIPTION")
            .nth(1)
            .unwrap()
            .split(".SH")
            .next()
            .unwrap();
        assert!(description.len() > 400, "{description}");
        let status = std::fs::read_to_string(dir.path().join("gpufill-status.1")).unwrap();
        assert!(
            !status.contains("SIGNALS"),
            "status handles no signal of its own"
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
