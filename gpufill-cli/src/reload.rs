//! SIGHUP reload: read the config file again, lay the command-line flags on top,
//! validate, and hand the result to the workers; all or nothing.
//!
//! A file that fails to load or validate is refused with one `error` line naming
//! `file:line:col: key: reason`, and the settings in force stay. Keys that cannot change
//! while running ([`gpufill_runtime::RESTART_KEYS`] and `metrics.listen`) keep their old values, each with a `warn` line; every
//! other key (target, schedule, yield, max duty, width, grace, fault hold, controller)
//! takes effect at each worker's next tick, without restarting workers or CUDA contexts.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

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
    (Config::from_settings(&settings, metrics), kept)
}

/// Loads `path` and lays `flags` over it, as at start.
///
/// # Errors
/// The file's or the flags' [`ConfigError`].
pub fn load(path: &std::path::Path, flags: &Overrides) -> Result<Config, ConfigError> {
    let mut config = Config::load(path)?;
    config.apply(flags);
    config.validate(Some(path))?;
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
    current: Config,
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
        Ok(Reloader {
            path,
            flags,
            current,
            hangup,
        })
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
        let new = match load(path, &self.flags) {
            Ok(new) => new,
            Err(e) => {
                error!("reload refused, old settings kept: {e}");
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
        self.current = new.clone();
        Some(Arc::new(new))
    }

    /// The settings in force.
    pub fn current(&self) -> &Config {
        &self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufill_cuda::SpinKernel;
    use gpufill_runtime::{GpuSelector, Metric};

    #[test]
    fn live_keys_pass_and_restart_keys_keep_their_old_values() {
        let old = Config::default();
        let mut new = Config {
            target_percent: 70.0,
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
}
