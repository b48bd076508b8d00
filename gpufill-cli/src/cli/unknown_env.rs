//! `GPUFILL_*` variables that nothing reads. A flag's variable with a typo
//! (`GPUFILL_TARGT=90`) would otherwise change nothing in silence, so each unknown one
//! gets a warning at start naming the nearest known one.

use std::collections::BTreeSet;
use std::ffi::OsString;

use tracing::warn;

/// `GPUFILL_*` variables that the project's other tools read, not a flag: the build's
/// commit, the tests' re-blessing switch, the GPU lab's binary; and those gpufill sets
/// for itself when it restarts having left an MPS daemon or lost its server.
const READ_ELSEWHERE: [&str; 5] = [
    "GPUFILL_REVISION",
    "GPUFILL_BLESS",
    "GPUFILL_BINARY",
    gpufill_runtime::mps::LEFT_VAR,
    gpufill_runtime::mps::SERVER_LOST_VAR,
];

/// Logs a warning for each `GPUFILL_*` variable in this process's environment that no
/// flag of `command` reads.
pub fn warn_unknown(command: &clap::Command) {
    let names = std::env::vars_os().map(|(name, _)| name);
    for line in unknown(names, &known(command)) {
        warn!("{line}");
    }
}

/// Every `GPUFILL_*` variable a flag of `command` or of its subcommands reads, and those
/// read elsewhere.
pub fn known(command: &clap::Command) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = READ_ELSEWHERE.iter().map(|s| (*s).to_owned()).collect();
    collect(command, &mut names);
    names
}

fn collect(command: &clap::Command, names: &mut BTreeSet<String>) {
    for arg in command.get_arguments() {
        if let Some(env) = arg.get_env().and_then(|e| e.to_str()) {
            names.insert(env.to_owned());
        }
    }
    for sub in command.get_subcommands() {
        collect(sub, names);
    }
}

/// A warning for each name in `vars` that starts with `GPUFILL_` and is not in
/// `known`, naming the nearest known one.
pub fn unknown(vars: impl IntoIterator<Item = OsString>, known: &BTreeSet<String>) -> Vec<String> {
    let mut lines: Vec<String> = vars
        .into_iter()
        .filter_map(|name| name.into_string().ok())
        .filter(|name| name.starts_with("GPUFILL_") && !known.contains(name))
        .map(|name| match nearest(&name, known) {
            Some(near) => format!(
                "unknown environment variable {name} (did you mean {near}?): it changes nothing"
            ),
            None => format!("unknown environment variable {name}: it changes nothing"),
        })
        .collect();
    lines.sort();
    lines
}

/// The known name with the fewest edits from `name` (the first of equals).
fn nearest<'a>(name: &str, known: &'a BTreeSet<String>) -> Option<&'a str> {
    known
        .iter()
        .min_by_key(|k| edits(name, k))
        .map(String::as_str)
}

/// Levenshtein distance: the fewest insertions, deletions and substitutions of
/// characters that turn `a` into `b`.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn names(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_misspelt_variable_is_named_with_the_nearest_known_one() {
        let known = known(&crate::cli::Cli::command());
        // The flags' own, of every subcommand, and the global ones.
        for name in [
            "GPUFILL_TARGET",
            "GPUFILL_METRICS",
            "GPUFILL_CONFIG",
            "GPUFILL_LOG_FORMAT",
        ] {
            assert!(known.contains(name), "{name}: {known:?}");
        }
        let vars = names(&[
            "GPUFILL_TARGT",
            "GPUFILL_TARGET",
            "PATH",
            "GPUFILL_METRIKS",
            "gpufill_target",
            "GPUFILL_REVISION",
            // gpufill's own, set when it restarts having left an MPS daemon.
            "GPUFILL_MPS_LEFT",
            "GPUFILL_MPS_SERVER_LOST",
        ]);
        assert_eq!(
            unknown(vars, &known),
            [
                "unknown environment variable GPUFILL_METRIKS (did you mean GPUFILL_METRICS?): it changes nothing",
                "unknown environment variable GPUFILL_TARGT (did you mean GPUFILL_TARGET?): it changes nothing",
            ]
        );
    }

    #[test]
    fn edits_count_insertions_deletions_and_substitutions() {
        assert_eq!(edits("GPUFILL_TARGT", "GPUFILL_TARGET"), 1);
        assert_eq!(edits("kitten", "sitting"), 3);
        assert_eq!(edits("", "abc"), 3);
        assert_eq!(edits("same", "same"), 0);
        assert_eq!(nearest("X", &BTreeSet::new()), None);
    }
}
