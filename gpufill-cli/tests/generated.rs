//! The man pages and completions that the `.deb` installs (committed in
//! `gpufill-cli/share/`) are what `gpufill generate` makes from the clap definitions
//! today; and `gpufill generate` itself, end to end.
//!
//! After changing a flag, its help or the version, refresh the copies with
//! `GPUFILL_BLESS=1 cargo test -p gpufill-cli --test generated`.

use std::collections::BTreeMap;
use std::path::Path;

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
        return;
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
