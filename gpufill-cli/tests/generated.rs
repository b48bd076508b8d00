//! The man pages and completions that the `.deb` installs (committed in
//! `gpufill-cli/share/`) are what `gpufill generate` makes from the clap definitions
//! today; and `gpufill generate` itself, end to end. The metric tables of README.md and
//! docs/operations.md are what `generate::metric_table` makes from the series list.
//!
//! After changing a flag, its help, the version or a series, refresh the copies with
//! `GPUFILL_BLESS=1 cargo test -p gpufill-cli --test generated`: that run rewrites what
//! is stale and fails, naming it (a run that rewrote the files it checks has checked
//! nothing); run the tests again without the variable.

use std::collections::BTreeMap;
use std::path::Path;

use gpufill_cli::generate::{metric_series, metric_table};
use gpufill_runtime::prometheus::MetricTable;
use predicates::str::contains;

mod common;

use common::gpufill;

/// Every file under `dir`, by its path relative to `dir`.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut found = BTreeMap::new();
    for sub in ["man", "completions"] {
        let Ok(entries) = std::fs::read_dir(dir.join(sub)) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let name = format!("{sub}/{}", path.file_name().unwrap().to_string_lossy());
            found.insert(name, std::fs::read(&path).unwrap());
        }
    }
    found
}

#[test]
fn the_packaged_man_pages_and_completions_are_generated_from_the_flags() {
    let share = Path::new(env!("CARGO_MANIFEST_DIR")).join("share");
    let fresh = tempfile::tempdir().unwrap();
    gpufill_cli::generate::packaged(fresh.path()).unwrap();
    let (want, have) = (files(fresh.path()), files(&share));
    if want != have && std::env::var_os("GPUFILL_BLESS").is_some() {
        let _ = std::fs::remove_dir_all(&share);
        gpufill_cli::generate::packaged(&share).unwrap();
        panic!("GPUFILL_BLESS: rewrote gpufill-cli/share/; run the tests again without it");
    }
    let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&have),
        names(&want),
        "gpufill-cli/share/ holds other files than `gpufill generate` makes: \
         GPUFILL_BLESS=1 cargo test -p gpufill-cli --test generated"
    );
    for (name, text) in &want {
        assert!(
            have[name] == *text,
            "gpufill-cli/share/{name} is stale: GPUFILL_BLESS=1 cargo test -p gpufill-cli --test generated"
        );
    }
    assert!(
        want.contains_key("man/gpufill.1") && want.len() > 3,
        "{:?}",
        names(&want)
    );
}

#[test]
fn generate_man_writes_the_pages_into_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man1");
    gpufill()
        .args(["generate", "man"])
        .arg(&out)
        .assert()
        .success()
        .stdout(contains("gpufill-simulate.1"));
    let page = std::fs::read_to_string(out.join("gpufill-simulate.1")).unwrap();
    assert!(page.contains("\\-\\-every"), "{page}");
    let top = std::fs::read_to_string(out.join("gpufill.1")).unwrap();
    assert!(
        top.contains("gpufill\\-run(1)"),
        "the top page names the others: {top}"
    );
}

#[test]
fn generate_completions_prints_a_shell_s_script_and_refuses_an_unknown_shell() {
    gpufill()
        .args(["generate", "completions", "zsh"])
        .assert()
        .success()
        .stdout(contains("#compdef gpufill"))
        .stdout(contains("--target"));
    gpufill()
        .args(["generate", "completions", "tcsh"])
        .assert()
        .code(2)
        .stderr(contains("gpufill: invalid value 'tcsh'"));
}

const BEGIN: &str = "<!-- metrics:begin";
const END: &str = "<!-- metrics:end -->";

/// `doc` with the lines between its metric markers replaced by `table`; `None` without
/// exactly one pair of markers, in order.
fn with_metric_table(doc: &str, table: &str) -> Option<String> {
    let begin = doc.find(&format!("\n{BEGIN}"))? + 1;
    let body = begin + doc[begin..].find('\n')? + 1;
    let end = body + doc[body..].find(&format!("\n{END}\n"))? + 1;
    let later = &doc[end + END.len()..];
    if later.contains(BEGIN) || later.contains(END) || doc[..begin].contains(END) {
        return None;
    }
    Some(format!("{}{table}{}", &doc[..body], &doc[end..]))
}

#[test]
fn the_docs_metric_tables_are_generated_from_the_series_list() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut rewrote = Vec::new();
    for (doc, table) in [
        ("README.md", MetricTable::Short),
        ("docs/operations.md", MetricTable::Full),
    ] {
        let path = root.join(doc);
        let have = std::fs::read_to_string(&path).unwrap();
        let want = with_metric_table(&have, &metric_table(table))
            .unwrap_or_else(|| panic!("{doc}: no `{BEGIN} ... -->` ... `{END}` around its table"));
        if want != have && std::env::var_os("GPUFILL_BLESS").is_some() {
            std::fs::write(&path, want).unwrap();
            rewrote.push(doc);
            continue;
        }
        assert!(
            want == have,
            "{doc}'s metric table is not the one generated from the series list: \
             GPUFILL_BLESS=1 cargo test -p gpufill-cli --test generated"
        );
    }
    assert!(
        rewrote.is_empty(),
        "GPUFILL_BLESS: rewrote the metric tables of {rewrote:?}; run the tests again without it"
    );
}

#[test]
fn a_metric_table_has_a_row_for_each_series_in_order_and_is_spliced_between_markers() {
    let table = metric_table(MetricTable::Full);
    let rows: Vec<&str> = table.lines().skip(2).collect();
    let names: Vec<&str> = metric_series().map(|s| s.name).collect();
    assert_eq!(rows.len(), names.len());
    for (row, name) in rows.iter().zip(&names) {
        assert!(row.starts_with(&format!("| `{name}")), "{row}");
    }
    assert!(table.contains(
        "| `gpufill_state{state=\"filling\\|yielding\\|blind\\|stopped\\|off\"}` | gauge | yes | 1 for"
    ), "{table}");
    assert!(table.contains("| `gpufill_build_info{version,revision}` | gauge | no |"));
    let short = metric_table(MetricTable::Short);
    assert!(short.contains(
        "| `process_max_fds` | gauge | no | Maximum number of open file descriptors. |\n"
    ));
    let doc = format!("# Metrics\n\n{BEGIN} x -->\nold\n{END}\nafter\n");
    assert_eq!(
        with_metric_table(&doc, "new\n").unwrap(),
        format!("# Metrics\n\n{BEGIN} x -->\nnew\n{END}\nafter\n")
    );
    assert_eq!(with_metric_table("# Metrics\nold\n", "new\n"), None);
    assert_eq!(with_metric_table(&format!("{doc}{END}\n"), "new\n"), None);
}
