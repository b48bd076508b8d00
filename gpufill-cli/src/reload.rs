//! SIGHUP reload: read the config file again, lay the command-line flags on top,
//! validate, and hand the result to the workers; all or nothing.
//!
//! A file that fails to load or validate is refused with one `error` line naming
//! `file:line:col: key: reason`, and the settings in force stay.
//!
//! A reload can race an editor or a script that is writing the file, and an empty or
//! cut-short file is valid TOML: taken as it is, it would put the built-in defaults in
//! place of every setting it lacks. So a reload reads the file only once it has
//! settled ([`Settle`]): two reads [`Settle::quiet`] apart give the same text and
//! modification time, and that time is at least `quiet` old; a file still changing
//! after [`Settle::limit`] is refused. A file that sets no key at all (empty, blank or
//! comments only) is refused too: to go back to the defaults on purpose, set one of
//! them (`target_percent = 50`). A writer that replaces the file whole (write a new
//! file, then rename it over the old one) never shows a reader a partial file. Keys that cannot change
//! while running ([`gpufill_runtime::RESTART_KEYS`] and `metrics.listen`) keep their old values, each with a `warn` line; every
//! other key (target, schedule, yield, max duty, width, grace, fault hold, controller)
//! takes effect at each worker's next tick, without restarting workers or CUDA contexts.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use tracing::{error, info, warn};

use crate::config::{Config, ConfigError, Overrides};

/// What a reload would do: the config to apply, with the keys that need a restart
/// kept at their old values, and the names of those that the new file changed: the
/// runtime's ([`gpufill_runtime::RESTART_KEYS`]) and the binary's `metrics.listen`.
pub fn diff(old: &Config, new: Config) -> (Config, Vec<&'static str>) {
    let (settings, mut kept) = old.to_settings().live_update(new.to_settings());
    let mut metrics = new.metrics;
    if metrics.listen != old.metrics.listen {
        metrics.listen.clone_from(&old.metrics.listen);
        kept.push("metrics.listen");
    }
    (Config { settings, metrics }, kept)
}

/// Loads `path` and lays `flags` over it, as at start.
///
/// # Errors
/// The file's or the flags' [`ConfigError`].
pub fn load(path: &Path, flags: &Overrides) -> Result<Config, ConfigError> {
    let mut config = Config::load(path)?;
    config.apply(flags);
    config.validate(Some(path))?;
    Ok(config)
}

/// How a reload waits for a file that is being written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settle {
    /// How long the file must stay unchanged, and the pause between two reads.
    pub quiet: Duration,
    /// How long to wait for that before refusing the reload.
    pub limit: Duration,
}

impl Default for Settle {
    fn default() -> Self {
        Settle {
            quiet: Duration::from_millis(100),
            limit: Duration::from_secs(2),
        }
    }
}

/// Why a reload was refused.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The file, or the flags over it, did not load or validate.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The file kept changing.
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

/// Reads `path` once it has settled (see the module docs), then loads it as [`load`]
/// does.
///
/// # Errors
/// [`Refused`]: the file kept changing, sets no key, or did not load or validate.
pub fn load_settled(path: &Path, flags: &Overrides, settle: Settle) -> Result<Config, Refused> {
    let text = read_settled(path, settle)?;
    if Config::sets_no_key(&text) {
        return Err(Refused::NoKey {
            path: path.to_path_buf(),
        });
    }
    let mut config = Config::from_toml_str(&text, Some(path))?;
    config.apply(flags);
    config.validate(Some(path))?;
    Ok(config)
}

/// The text of `path` once two reads `settle.quiet` apart agree and its modification
/// time is at least that old (a time in the future, after a clock step, counts as old).
fn read_settled(path: &Path, settle: Settle) -> Result<String, Refused> {
    settle_reads(path, settle, || crate::config::read_text(path))
}

/// [`read_settled`] over `read`, which gives the file's text and modification time.
fn settle_reads(
    path: &Path,
    settle: Settle,
    mut read: impl FnMut() -> Result<(String, Option<SystemTime>), ConfigError>,
) -> Result<String, Refused> {
    let give_up = Instant::now() + settle.limit;
    let mut last: Option<(String, Option<SystemTime>)> = None;
    loop {
        let read = read()?;
        let quiet = read
            .1
            .and_then(|at| SystemTime::now().duration_since(at).ok())
            .is_none_or(|age| age >= settle.quiet);
        if quiet && last.as_ref() == Some(&read) {
            return Ok(read.0);
        }
        if Instant::now() >= give_up {
            return Err(Refused::Unsettled {
                path: path.to_path_buf(),
                limit: settle.limit,
            });
        }
        last = Some(read);
        std::thread::sleep(settle.quiet);
    }
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
    current: Config,
    /// What was in force before the last reload, for [`Reloader::undo`].
    previous: Option<Config>,
    settle: Settle,
    hangup: Arc<AtomicBool>,
}

impl Reloader {
    /// Installs the SIGHUP handler. `path` is the `--config` file (none: a SIGHUP only
    /// logs that there is nothing to reload), `flags` the command line's overrides,
    /// `current` the settings in force.
    ///
    /// # Errors
    /// When the signal handler cannot be installed.
    pub fn install(
        path: Option<PathBuf>,
        flags: Overrides,
        current: Config,
    ) -> anyhow::Result<Self> {
        let hangup = catch_hangups()?;
        crate::metrics::RELOADS.succeeded(SystemTime::now());
        Ok(Reloader {
            path,
            flags,
            current,
            previous: None,
            settle: Settle::default(),
            hangup,
        })
    }

    /// Waits for a file being written as `settle` says (tests shorten it).
    pub fn with_settle(mut self, settle: Settle) -> Self {
        self.settle = settle;
        self
    }

    /// If a SIGHUP came since the last call, reloads; returns the new settings when
    /// they were accepted. Cheap when no signal came (one atomic swap).
    pub fn poll(&mut self) -> Option<Arc<Config>> {
        if !self.hangup.swap(false, Ordering::Relaxed) {
            return None;
        }
        self.reload()
    }

    /// Reloads now (what a SIGHUP does), logging the outcome.
    pub fn reload(&mut self) -> Option<Arc<Config>> {
        let Some(path) = &self.path else {
            warn!("SIGHUP: no --config file, nothing to reload");
            return None;
        };
        let new = match load_settled(path, &self.flags, self.settle) {
            Ok(new) => new,
            Err(e) => {
                error!("reload refused, old settings kept: {e}");
                crate::metrics::RELOADS.refused();
                return None;
            }
        };
        let (new, kept) = diff(&self.current, new);
        for key in kept {
            warn!(
                key,
                "reload: {key} changed but needs a restart; old value kept"
            );
        }
        info!(
            target = new.target_percent,
            file = %path.display(),
            "config reloaded"
        );
        self.previous = Some(std::mem::replace(&mut self.current, new.clone()));
        crate::metrics::RELOADS.succeeded(SystemTime::now());
        Some(Arc::new(new))
    }

    /// Goes back to the settings in force before the last reload, which its receiver
    /// refused after all (the runtime checks the GPUs too).
    pub fn undo(&mut self) {
        if let Some(previous) = self.previous.take() {
            self.current = previous;
        }
    }

    /// The settings in force.
    pub fn current(&self) -> &Config {
        &self.current
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
                "tick_ms",
                "load.period_ms",
                "probe.retry_max_s",
                "metric",
                "load.kernel",
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
        let flags = Overrides {
            grace_s: Some(9.0),
            ..Overrides::default()
        };
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
            let e = load_settled(&path, &Overrides::default(), QUICK).unwrap_err();
            assert!(e.to_string().ends_with("sets no key (empty, or being written); to go back to the defaults, set one (target_percent = 50)"), "{e}");
        }
    }

    #[test]
    fn a_file_still_being_written_is_refused_once_the_limit_passes() {
        // Every read finds new text, just written: a writer that never stops. (A writer
        // thread made this depend on the scheduler: starved on a loaded machine, it left
        // the file looking settled, sometimes empty.)
        let path = Path::new("g.toml");
        let mut n = 0u32;
        let t = Instant::now();
        let e = settle_reads(path, QUICK, || {
            n += 1;
            Ok((format!("{FULL}# {n}\n"), Some(SystemTime::now())))
        })
        .unwrap_err();
        assert!(matches!(e, Refused::Unsettled { .. }), "{e}");
        assert!(t.elapsed() >= QUICK.limit, "{:?}", t.elapsed());
        assert!(n >= 2, "{n} reads");
    }

    #[test]
    fn the_same_text_read_twice_a_quiet_apart_is_settled() {
        let old = SystemTime::now() - Duration::from_secs(1);
        let mut reads = 0u32;
        let text = settle_reads(Path::new("g.toml"), QUICK, || {
            reads += 1;
            Ok((FULL.to_string(), Some(old)))
        })
        .unwrap();
        assert_eq!((text.as_str(), reads), (FULL, 2));
    }

    #[test]
    fn reloads_racing_a_writer_that_truncates_and_rewrites_never_lose_a_setting() {
        let (_dir, path, mut r) = reloader_on(FULL);
        let writing = Arc::new(AtomicBool::new(true));
        let writer = {
            let (path, writing) = (path.clone(), Arc::clone(&writing));
            std::thread::spawn(move || {
                use std::io::Write;
                let (head, tail) = FULL.split_at(FULL.find("[yield]").unwrap());
                let mut pause = 7u64;
                while writing.load(Ordering::Relaxed) {
                    // As an editor saving in place: truncate, then write in two parts,
                    // each a valid TOML document on its own.
                    let mut f = std::fs::File::create(&path).unwrap();
                    std::thread::sleep(Duration::from_millis(2));
                    f.write_all(head.as_bytes()).unwrap();
                    std::thread::sleep(Duration::from_millis(2));
                    f.write_all(tail.as_bytes()).unwrap();
                    drop(f);
                    pause = (pause * 7 + 3) % 61;
                    std::thread::sleep(Duration::from_millis(pause));
                }
            })
        };
        for _ in 0..12 {
            if let Some(new) = r.reload() {
                assert!(is_full(&new), "a reload applied {new:?}");
            }
            assert!(is_full(r.current()));
            std::thread::sleep(Duration::from_millis(3));
        }
        writing.store(false, Ordering::Relaxed);
        writer.join().unwrap();
        // Once the writer is done, the file loads.
        assert!(r.reload().is_some_and(|c| is_full(&c)));
    }

    #[test]
    fn undo_goes_back_to_the_settings_before_the_last_reload() {
        let (_dir, path, mut r) = reloader_on(FULL);
        std::fs::write(&path, "target_percent = 40\n").unwrap();
        assert_eq!(r.reload().unwrap().target_percent, 40.0);
        r.undo();
        assert!(is_full(r.current()));
    }
}
