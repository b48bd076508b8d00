//! SIGHUP reload: read the config file again, lay the command-line flags on top,
//! validate, and hand the result to the workers; all or nothing.
//!
//! A file that fails to load or validate is refused with one `error` line naming
//! `file:line:col: key: reason`, and the settings in force stay.
//!
//! The logic, when the file is complete and the two phases, is the runtime's
//! ([`gpufill_runtime::reload`], tested there); this module is its wiring: the signal,
//! the watch, the file, TOML, the logs and the metrics.
//!
//! A reload can race an editor or a script that is writing the file, and an empty or
//! cut-short file is valid TOML: taken as it is, it would put the built-in defaults in
//! place of every setting it lacks. So a reload reads only a complete file. An inotify
//! watch on the file's directory ([`FileWatch`]) follows its writers: a writer in
//! place is waited for until it closes the file (however long it pauses between writes),
//! a file renamed over it is complete as it lands (the last one read wins, so a writer that
//! renames a new file every 20 ms never blocks a reload), and a read during which the
//! file changed is read again. A file still being written after `Settle::limit` is
//! refused. Where inotify cannot be used, the file must have settled instead: two reads
//! `Settle::quiet` apart give the same text and modification time, and that time is at
//! least `quiet` old. A file that sets no key at all (empty, blank or comments only) is
//! refused too: to go back to the defaults on purpose, set one of them
//! (`target_percent = 50`).
//!
//! The wait never blocks: [`Reloader::propose`] answers at once, and a reload that waits
//! for its file is taken up again at the next call, so a SIGTERM that comes meanwhile is
//! acted on at once.
//!
//! A reload is two-phase: [`Reloader::propose`] gives the new settings, the caller hands
//! them to its workers (`Agent::update`, which checks them against the GPUs too), and
//! only then [`Reloader::commit`] makes them the settings in force and logs
//! `config reloaded`, or [`Reloader::refuse`] logs why they were refused and keeps the
//! old ones. `gpufill_config_last_reload_successful` and its timestamp
//! ([`crate::metrics::RELOADS`]) follow that final outcome: a file refused, a commit or a
//! refusal; a proposal not yet answered changes neither. Keys that cannot change while running ([`gpufill_runtime::RESTART_KEYS`] and
//! `metrics.listen`) keep their old values, each with a `warn` line; every other key
//! (target, schedule, yield, max duty, width, grace, fault hold, controller) takes effect
//! at each worker's next tick, without restarting workers or CUDA contexts.

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
#[cfg(test)]
use gpufill_runtime::reload::Settle;
use gpufill_runtime::reload::{FileWatch, Next, Reload, Watch as _};
use tracing::{debug, error, info, warn};

use crate::config::{Config, ConfigError, MetricsConfig, Overrides};
use gpufill_runtime::reload::ReloadStatus;

/// New settings from the config file, not yet in force: hand them to the workers,
/// then [`Reloader::commit`] or [`Reloader::refuse`] them.
pub type Proposal = gpufill_runtime::reload::Proposal<Config>;

/// What a reload would do: the config to apply, with the keys that need a restart
/// kept at their old values, and the names of those that the new file changed: the
/// runtime's ([`gpufill_runtime::RESTART_KEYS`]) and the binary's `metrics.listen`.
fn diff(old: &Config, new: Config) -> (Config, Vec<&'static str>) {
    let (settings, mut kept) = old.to_settings().live_update(new.to_settings());
    let mut config = Config {
        settings,
        metrics: new.metrics,
    };
    if config.copy_key(old, MetricsConfig::LISTEN) {
        kept.push(MetricsConfig::LISTEN);
    }
    (config, kept)
}

/// Loads `path` and lays `flags` over it, as at start (tests).
///
/// # Errors
/// The file's or the flags' [`ConfigError`].
#[cfg(test)]
pub(crate) fn load(path: &Path, flags: &Overrides) -> Result<Config, ConfigError> {
    let mut config = Config::load(path)?;
    config.apply(flags);
    config.validate(Some(path))?;
    Ok(config)
}

/// Why a reload was refused.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The file, or the flags over it, did not load or validate.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The file kept being written.
    #[error("{}: still being written after {:.1} s", path.display(), limit.as_secs_f64())]
    Unsettled {
        /// The file.
        path: PathBuf,
        /// How long the reload waited.
        limit: Duration,
    },
    /// The file sets no key.
    #[error(
        "{}: sets no key (empty, or being written); to go back to the defaults, set one (target_percent = 50)",
        path.display()
    )]
    NoKey {
        /// The file.
        path: PathBuf,
    },
}

/// Loads the text of `path` as a reload does: refused when it sets no key, else
/// parsed, with `flags` laid over it, and validated. A file that does not end in a
/// newline is loaded with a warning: a file cut short ends so too, and TOML cannot tell
/// `target_percent = 7` from the first character of `target_percent = 75`.
fn load_text(path: &Path, text: &str, flags: &Overrides) -> Result<Config, Refused> {
    if Config::sets_no_key(text) {
        return Err(Refused::NoKey {
            path: path.to_path_buf(),
        });
    }
    let mut config = Config::from_toml_str(text, Some(path))?;
    config.apply(flags);
    config.validate(Some(path))?;
    if !text.ends_with('\n') {
        warn!(
            file = %path.display(),
            "reload: the file does not end in a newline, as a file cut short would not: \
             check that it is whole; write a new file and rename it over the old one \
             (docs/operations.md, \"Configure\")"
        );
    }
    Ok(config)
}

/// The process's SIGHUP flag, set by the handler [`catch_hangups`] installs.
static HANGUP: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Installs the SIGHUP handler, once per process: the binary calls it first thing, so a
/// SIGHUP during start-up is kept for the [`Reloader`] instead of killing the process
/// (the default action). Later calls do nothing.
///
/// # Errors
/// When the signal handler cannot be installed.
pub fn catch_hangups() -> anyhow::Result<Arc<AtomicBool>> {
    if let Some(flag) = HANGUP.get() {
        return Ok(Arc::clone(flag));
    }
    let flag = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&flag))
        .context("cannot install the SIGHUP handler")?;
    Ok(Arc::clone(HANGUP.get_or_init(|| flag)))
}

/// Watches for SIGHUP and reloads the config file.
#[derive(Debug)]
pub struct Reloader {
    path: Option<PathBuf>,
    flags: Overrides,
    /// The settings in force and the reload asked for.
    reload: Reload<Config>,
    hangup: Arc<AtomicBool>,
    watch: Option<FileWatch>,
    /// Where each reload's final outcome is recorded ([`crate::metrics::RELOADS`]).
    status: &'static ReloadStatus,
}

impl Reloader {
    /// Installs the SIGHUP handler and, with a file, the watch on its directory.
    /// `path` is the `--config` file (none: a SIGHUP only logs that there is nothing to
    /// reload), `flags` the command line's overrides, `current` the settings in force.
    ///
    /// # Errors
    /// When the signal handler cannot be installed.
    pub fn install(
        path: Option<PathBuf>,
        flags: Overrides,
        current: Config,
    ) -> anyhow::Result<Self> {
        let hangup = catch_hangups()?;
        let status = &crate::metrics::RELOADS;
        status.succeeded(SystemTime::now());
        let watch = path.as_deref().map(FileWatch::on);
        Ok(Reloader {
            path,
            flags,
            reload: Reload::new(current),
            hangup,
            watch,
            status,
        })
    }

    /// Records the outcomes in `status` instead of the process's (tests).
    #[cfg(test)]
    pub(crate) fn recording_to(mut self, status: &'static ReloadStatus) -> Self {
        self.status = status;
        self
    }

    /// Waits for a file being written as `settle` says (tests shorten it).
    #[cfg(test)]
    pub(crate) fn with_settle(mut self, settle: Settle) -> Self {
        self.reload = self.reload.with_settle(settle);
        self
    }

    /// [`Reloader::propose`], and the settings proposed taken at once
    /// ([`Reloader::commit`]): for a caller whose workers cannot refuse them. Returns
    /// them when a reload was accepted.
    pub fn poll(&mut self) -> Option<Arc<Config>> {
        self.propose().map(|p| self.commit(p))
    }

    /// If a SIGHUP came since the last call, or a reload waits for its file, takes it
    /// one step: new settings once the file is complete and valid; `None` while
    /// waiting, when nothing was asked, or when the file was refused (logged). Never
    /// blocks; cheap when no reload is asked (one atomic swap and one `read` of the
    /// watch that finds nothing).
    pub fn propose(&mut self) -> Option<Proposal> {
        let seen = self.watch.as_mut().map(FileWatch::update);
        if self.hangup.swap(false, Ordering::Relaxed) {
            self.request();
        }
        let path = self.path.as_deref()?;
        // The watch and what it saw: both or neither.
        let watched = self.watch.as_mut().zip(seen);
        let next = self
            .reload
            .next(Instant::now(), watched, || crate::config::read_text(path))?;
        let loaded = match next {
            Next::Waiting { first } => {
                if first {
                    debug!(file = %path.display(), "reload: waiting for the file's writer");
                }
                return None;
            }
            Next::Text(text) => load_text(path, &text, &self.flags),
            Next::Unsettled(limit) => Err(Refused::Unsettled {
                path: path.to_path_buf(),
                limit,
            }),
            Next::Failed(e) => Err(Refused::Config(e)),
        };
        match loaded {
            Ok(new) => {
                let (config, kept) = diff(self.reload.current(), new);
                Some(self.reload.propose(config, kept))
            }
            Err(why) => {
                self.refused(why);
                None
            }
        }
    }

    /// Asks for a reload, as a SIGHUP does; [`Reloader::propose`] answers it.
    pub fn request(&mut self) {
        if self.path.is_none() {
            warn!("SIGHUP: no --config file, nothing to reload");
        } else {
            self.reload.request(Instant::now());
        }
    }

    /// Reloads now and waits for the outcome, as a SIGHUP does (tests; the binary's
    /// loops call [`Reloader::poll`] or [`Reloader::propose`], which never wait).
    #[cfg(test)]
    pub(crate) fn reload(&mut self) -> Option<Arc<Config>> {
        self.request();
        while self.reload.pending() {
            if let Some(new) = self.poll() {
                return Some(new);
            }
            if self.reload.pending() {
                std::thread::sleep(self.reload.settle().quiet / 4);
            }
        }
        None
    }

    /// Makes `proposal` the settings in force, once its receiver has taken them, and
    /// logs `config reloaded` (and each key kept for a restart). Returns them.
    pub fn commit(&mut self, proposal: Proposal) -> Arc<Config> {
        let file = self.path.as_deref().unwrap_or(Path::new("")).display();
        for key in self.reload.commit(proposal) {
            warn!(
                key,
                "reload: {key} changed but needs a restart; old value kept"
            );
        }
        let config = self.reload.current();
        info!(target = config.target_percent, file = %file, "config reloaded");
        self.status.succeeded(SystemTime::now());
        Arc::new(config.clone())
    }

    /// Drops `proposal`, which its receiver refused for `why`, keeping the settings in
    /// force, and logs it.
    pub fn refuse(&mut self, proposal: Proposal, why: impl Display) {
        drop(proposal);
        self.refused(why);
    }

    /// Logs a reload refused for `why`, the settings in force kept, and records it.
    fn refused(&self, why: impl Display) {
        error!("reload refused, old settings kept: {why}");
        self.status.refused();
    }

    /// The settings in force.
    pub fn current(&self) -> &Config {
        self.reload.current()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufill_runtime::{GpuSelector, Metric, Settings, SpinKernel};

    #[test]
    fn live_keys_pass_and_restart_keys_keep_their_old_values() {
        let old = Config::default();
        let mut new = Config {
            settings: Settings {
                target_percent: 70.0,
                ..Settings::default()
            },
            ..Config::default()
        };
        new.load.max_duty_percent = 80.0;
        new.yielding.grace_s = 1.0;
        new.schedule.idle_after_s = 60.0;
        new.tick_ms = 20;
        new.load.period_ms = 100;
        new.gpus = GpuSelector::parse_flag("0").unwrap();
        new.metrics.listen = "127.0.0.1:9401".into();
        new.probe.retry_max_s = 60.0;
        new.metric = Metric::Sm;
        new.load.kernel = SpinKernel::Spin;
        let (applied, kept) = diff(&old, new);
        assert_eq!(
            kept,
            [
                "gpus",
                "metric",
                "tick_ms",
                "load.period_ms",
                "load.kernel",
                "probe.retry_max_s",
                "metrics.listen"
            ]
        );
        assert_eq!(applied.metric, Metric::Util);
        assert_eq!(applied.load.kernel, SpinKernel::Sleep);
        assert_eq!(applied.probe.retry_max_s, 300.0);
        assert_eq!(applied.tick_ms, 50);
        assert_eq!(applied.load.period_ms, 50);
        assert_eq!(applied.gpus, GpuSelector::All);
        assert_eq!(applied.metrics.listen, "");
        assert_eq!(applied.target_percent, 70.0);
        assert_eq!(applied.load.max_duty_percent, 80.0);
        assert_eq!(applied.yielding.grace_s, 1.0);
        assert_eq!(applied.schedule.idle_after_s, 60.0);
    }

    #[test]
    fn an_unchanged_file_needs_no_restart() {
        let (applied, kept) = diff(&Config::default(), Config::default());
        assert!(kept.is_empty());
        assert_eq!(applied, Config::default());
    }

    #[test]
    fn a_reload_lays_the_flags_over_the_file_and_refuses_a_bad_file_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.toml");
        std::fs::write(&path, "target_percent = 30\n[yield]\ngrace_s = 2\n").unwrap();
        let mut flags = Overrides::default();
        flags.set("yield.grace_s").yielding.grace_s = 9.0;
        let start = load(&path, &flags).unwrap();
        let mut r = Reloader::install(Some(path.clone()), flags, start).unwrap();
        std::fs::write(&path, "target_percent = 40\n[yield]\ngrace_s = 3\n").unwrap();
        let new = r.reload().unwrap();
        assert_eq!((new.target_percent, new.yielding.grace_s), (40.0, 9.0));
        // A good key beside a bad one: nothing of the file is taken.
        std::fs::write(&path, "target_percent = 45\n[load]\nwidth_blocks = 0\n").unwrap();
        assert!(r.reload().is_none());
        assert_eq!(r.current().target_percent, 40.0);
        assert!(r.poll().is_none(), "no SIGHUP came");
    }

    /// A shorter settle for tests (still far above the writer's 2 ms steps below).
    const QUICK: Settle = Settle {
        quiet: Duration::from_millis(40),
        limit: Duration::from_millis(400),
    };

    const FULL: &str = "target_percent = 30\n[yield]\ngrace_s = 2\nignore_names = [\"dcgm\"]\n";

    fn reloader_on(text: &str) -> (tempfile::TempDir, PathBuf, Reloader) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.toml");
        std::fs::write(&path, text).unwrap();
        let start = load(&path, &Overrides::default()).unwrap();
        let r = Reloader::install(Some(path.clone()), Overrides::default(), start)
            .unwrap()
            .with_settle(QUICK);
        (dir, path, r)
    }

    fn is_full(c: &Config) -> bool {
        c.target_percent == 30.0 && c.yielding.grace_s == 2.0 && c.yielding.ignore_names == ["dcgm"]
    }

    #[test]
    fn a_file_that_sets_no_key_is_refused_on_reload_and_the_settings_stay() {
        let (_dir, path, mut r) = reloader_on(FULL);
        for text in ["", "\n  \n", "# being edited\n"] {
            std::fs::write(&path, text).unwrap();
            assert!(r.reload().is_none(), "{text:?}");
            assert!(is_full(r.current()), "{text:?}: {:?}", r.current());
            let e = load_text(&path, text, &Overrides::default()).unwrap_err();
            assert!(e.to_string().ends_with("sets no key (empty, or being written); to go back to the defaults, set one (target_percent = 50)"), "{e}");
        }
    }

    #[test]
    fn a_reloaded_file_without_a_final_newline_is_applied_with_a_warning() {
        let (_dir, path, mut r) = reloader_on(FULL);
        // Meant: target_percent = 75; written: a file cut short.
        std::fs::write(&path, "target_percent = 7").unwrap();
        let (reloaded, log) = crate::logging::capture::logged(|| r.reload());
        assert_eq!(reloaded.unwrap().target_percent, 7.0);
        assert!(
            log.contains(
                "reload: the file does not end in a newline, as a file cut short would not"
            ),
            "{log}"
        );
        assert!(log.contains(&path.display().to_string()), "{log}");
        // A whole file: no warning.
        std::fs::write(&path, "target_percent = 75\n").unwrap();
        let (reloaded, log) = crate::logging::capture::logged(|| r.reload());
        assert_eq!(reloaded.unwrap().target_percent, 75.0);
        assert!(!log.contains("newline"), "{log}");
    }

    #[test]
    fn a_reload_that_waits_for_its_writer_never_blocks_and_gives_up_at_the_limit() {
        use std::io::Write;
        let (_dir, path, mut r) = reloader_on(FULL);
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(b"target_percent = 40\n").unwrap();
        r.request();
        let t = Instant::now();
        assert!(r.propose().is_none());
        assert!(t.elapsed() < QUICK.quiet, "{:?}", t.elapsed());
        // Held open past the limit: refused, the settings in force kept.
        let ((), log) = crate::logging::capture::logged(|| {
            while t.elapsed() <= QUICK.limit {
                assert!(r.propose().is_none());
                std::thread::sleep(Duration::from_millis(10));
            }
            assert!(r.propose().is_none());
        });
        assert!(
            log.contains("reload refused, old settings kept: ")
                && log.contains("g.toml: still being written after 0.4 s"),
            "{log}"
        );
        assert!(is_full(r.current()));
        // Once closed, the next reload takes it.
        drop(f);
        assert_eq!(r.reload().unwrap().target_percent, 40.0);
    }

    #[test]
    fn a_proposal_is_in_force_and_logged_as_reloaded_only_once_committed() {
        let (_dir, path, mut r) = reloader_on(FULL);
        std::fs::write(&path, "target_percent = 39\n[load]\nwidth_blocks = 99\n").unwrap();
        r.request();
        let (proposal, log) = crate::logging::capture::logged(|| r.propose());
        let proposal = proposal.expect("a valid file");
        assert_eq!(proposal.config().target_percent, 39.0);
        assert!(!log.contains("config reloaded"), "{log}");
        let ((), log) = crate::logging::capture::logged(|| r.refuse(proposal, "too wide"));
        assert!(
            log.contains("reload refused, old settings kept: too wide")
                && !log.contains("reloaded"),
            "{log}"
        );
        assert!(is_full(r.current()));
        r.request();
        let proposal = r.propose().unwrap();
        let (new, log) = crate::logging::capture::logged(|| r.commit(proposal));
        assert!(log.contains("config reloaded target=39.0"), "{log}");
        assert_eq!(
            (new.target_percent, r.current().load.width_blocks),
            (39.0, 99)
        );
    }
}
