//! What build this is: the crate version and the commit it was built from
//! (`build.rs` sets `GPUFILL_REVISION`). `gpufill --version` prints both, and the
//! metrics endpoint publishes both in `gpufill_build_info`.

/// The commit the binary was built from (12 hex digits), the `GPUFILL_REVISION`
/// environment variable given to a build without git, or `unknown`.
pub const REVISION: &str = env!("GPUFILL_REVISION");

/// The crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("GPUFILL_REVISION"),
    ")"
);

/// `VERSION (REVISION)`, e.g. `0.1.0 (6d7c4a2e1f0b)`: what `gpufill --version` prints
/// after the name.
pub fn long_version() -> &'static str {
    LONG_VERSION
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_long_version_names_the_version_and_the_revision() {
        assert_eq!(long_version(), format!("{VERSION} ({REVISION})"));
        assert!(!REVISION.is_empty());
    }

    #[test]
    fn a_build_from_a_git_checkout_names_its_commit() {
        let Ok(out) = std::process::Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
        else {
            return; // no git here: build.rs fell back too
        };
        if out.status.success() {
            let head = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            assert_eq!(REVISION, head, "rebuild: HEAD moved since the last build");
        }
    }
}
