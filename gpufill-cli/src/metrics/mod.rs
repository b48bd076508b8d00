//! The metrics endpoint: the runtime's per-GPU snapshots ([`Registry`]), rendered as
//! Prometheus text by the runtime ([`gpufill_runtime::prometheus`]), served by a small
//! HTTP listener of the binary's own ([`server`]).
//!
//! The workers publish into the registry with `try_lock`, so a scrape in progress never
//! makes a fill loop wait; the server locks each snapshot only long enough to clone it,
//! then renders outside any lock.

pub mod server;

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use gpufill_core::Backoff;
use gpufill_runtime::PidView;
pub use gpufill_runtime::prometheus::Process;
use gpufill_runtime::prometheus::{Kind, Series};
pub use gpufill_runtime::{GpuLabels, GpuSnapshot, Registry};
use tracing::{info, warn};

/// The exposition format's pieces the server needs.
pub mod render {
    pub use gpufill_runtime::prometheus::CONTENT_TYPE;
}

/// This process as the metrics describe it, seeing `pid_view`.
pub fn this_process(pid_view: PidView) -> Process {
    Process::current(crate::version::VERSION, crate::version::REVISION, pid_view)
}

/// The outcome of the config's loads: at start, and at each SIGHUP reload. The
/// `Reloader` records each final outcome only: a file refused, or new settings once
/// their receiver (the agent) took them (`commit`) or refused them (`refuse`); a reload
/// still waiting for its file, or proposed and not yet taken, changes nothing.
/// Served as Prometheus serves its own (`prometheus_config_last_reload_*`).
#[derive(Debug)]
pub struct ReloadStatus {
    refused: AtomicBool,
    /// Unix time of the last successful load, in milliseconds; 0: none yet.
    success_ms: AtomicU64,
}

impl Default for ReloadStatus {
    fn default() -> Self {
        ReloadStatus::new()
    }
}

/// The process's [`ReloadStatus`].
pub static RELOADS: ReloadStatus = ReloadStatus::new();

/// The reload series, described where their values are kept; rendered by
/// [`ReloadStatus::render`], listed in the docs with the runtime's
/// ([`gpufill_runtime::prometheus::series`]).
pub const RELOAD_SERIES: [Series; 2] = [
    Series::elsewhere(
        "gpufill_config_last_reload_successful",
        Kind::Gauge,
        "1 if the last load of the config file (at start or on SIGHUP) succeeded, 0 if it was refused (the old settings stay).",
        "As Prometheus's own `prometheus_config_last_reload_successful`.",
    ),
    Series::elsewhere(
        "gpufill_config_last_reload_success_timestamp_seconds",
        Kind::Gauge,
        "When the config file was last loaded successfully (at start or on SIGHUP), Unix time in seconds.",
        "",
    ),
];

impl ReloadStatus {
    /// No load recorded yet: successful, with no timestamp.
    pub const fn new() -> Self {
        ReloadStatus {
            refused: AtomicBool::new(false),
            success_ms: AtomicU64::new(0),
        }
    }

    /// The config was loaded and is in force, at `at`.
    pub fn succeeded(&self, at: SystemTime) {
        let ms = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
        self.success_ms
            .store(u64::try_from(ms).unwrap_or(u64::MAX), Ordering::Relaxed);
        self.refused.store(false, Ordering::Relaxed);
    }

    /// A reload was refused: the old settings stay.
    pub fn refused(&self) {
        self.refused.store(true, Ordering::Relaxed);
    }

    /// The two series as Prometheus text (the timestamp only once a load succeeded).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let ok = if self.refused.load(Ordering::Relaxed) {
            0
        } else {
            1
        };
        let ms = self.success_ms.load(Ordering::Relaxed);
        let values = [
            Some(ok.to_string()),
            (ms > 0).then(|| gpufill_runtime::prometheus::number(ms as f64 / 1000.0)),
        ];
        for (series, value) in RELOAD_SERIES.iter().zip(values) {
            series.header(&mut out);
            if let Some(value) = value {
                let _ = writeln!(out, "{} {value}", series.name);
            }
        }
        out
    }
}

/// Starts the endpoint when `addr` is set and logs the address it bound
/// (`metrics listening on http://IP:PORT/metrics`).
///
/// # Errors
/// When the address cannot be bound (in use, not of this host).
pub fn start_endpoint(
    addr: Option<SocketAddr>,
    registry: Arc<Registry>,
    process: Process,
) -> anyhow::Result<()> {
    let Some(addr) = addr else {
        return Ok(());
    };
    let exposition = Arc::new(server::RegistryExposition::new(registry, process));
    let bound = server::serve(addr, exposition, server::ServerSettings::default())
        .with_context(|| format!("cannot serve metrics on {addr}"))?;
    info!("metrics listening on http://{bound}/metrics");
    Ok(())
}

/// The delays between attempts to bind a port that is taken: 1 s, doubling to 60 s.
pub const BIND_RETRY: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(60));

/// The metrics endpoint of a daemon (`gpufill run`), bound before its workers start.
#[derive(Debug)]
pub enum Endpoint {
    /// No `--metrics`.
    Off,
    /// Bound; served once the workers' registry exists.
    Bound(TcpListener),
    /// Taken by another process, or not yet an address of this host: the fill goes on,
    /// and binding is retried in the background ([`BIND_RETRY`]).
    Retrying(SocketAddr),
}

impl Endpoint {
    /// Binds `addr` before any worker starts. A port that is taken (or an address not
    /// yet up) is no reason to stop filling, let alone to exit and be restarted in a
    /// loop by systemd: it is logged, and retried once serving ([`Endpoint::serve`]).
    ///
    /// # Errors
    /// A bind error that will not go away by itself ([`server::bind_may_recover`]):
    /// no permission for the port, say.
    pub fn bind(addr: Option<SocketAddr>) -> anyhow::Result<Endpoint> {
        let Some(addr) = addr else {
            return Ok(Endpoint::Off);
        };
        match TcpListener::bind(addr) {
            Ok(listener) => Ok(Endpoint::Bound(listener)),
            Err(e) if server::bind_may_recover(&e) => {
                warn!(
                    "cannot serve metrics on {addr}: {e}; filling anyway, and trying again \
                     (every {} s at most); /metrics and /healthz are unavailable until then",
                    BIND_RETRY.1.as_secs()
                );
                Ok(Endpoint::Retrying(addr))
            }
            Err(e) => Err(e).with_context(|| format!("cannot serve metrics on {addr}")),
        }
    }

    /// Serves `registry` (with `process`'s own series) on the bound port, or keeps
    /// trying to bind it in the background; logs the address once serving
    /// (`metrics listening on http://IP:PORT/metrics`).
    ///
    /// # Errors
    /// A thread cannot be started.
    pub fn serve(self, registry: Arc<Registry>, process: Process) -> anyhow::Result<()> {
        let exposition = Arc::new(server::RegistryExposition::new(registry, process));
        let settings = server::ServerSettings::default();
        match self {
            Endpoint::Off => Ok(()),
            Endpoint::Bound(listener) => {
                let bound = server::serve_on(listener, exposition, settings)
                    .context("cannot serve metrics")?;
                info!("metrics listening on http://{bound}/metrics");
                Ok(())
            }
            Endpoint::Retrying(addr) => {
                let backoff = Backoff::new(BIND_RETRY.0, BIND_RETRY.1);
                server::serve_retrying(addr, exposition, settings, backoff, |bound| {
                    info!("metrics listening on http://{bound}/metrics");
                })
                .context("cannot start the metrics endpoint")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reloads_read_as_prometheus_reads_its_own() {
        let status = ReloadStatus::new();
        let text = status.render();
        assert!(
            text.contains("\ngpufill_config_last_reload_successful 1\n"),
            "{text}"
        );
        assert!(!text.contains("\ngpufill_config_last_reload_success_timestamp_seconds "));
        status.succeeded(UNIX_EPOCH + Duration::from_millis(1_700_000_000_250));
        status.refused();
        let text = status.render();
        assert!(
            text.contains("\ngpufill_config_last_reload_successful 0\n"),
            "{text}"
        );
        assert!(
            text.contains("\ngpufill_config_last_reload_success_timestamp_seconds 1700000000.25\n"),
            "{text}"
        );
        status.succeeded(UNIX_EPOCH + Duration::from_secs(1_700_000_100));
        assert!(status.render().contains("_successful 1\n"));
    }

    #[test]
    fn a_daemon_goes_on_when_its_metrics_port_is_taken_or_the_address_is_not_up() {
        let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
        let taken = squatter.local_addr().unwrap();
        let endpoint = Endpoint::bind(Some(taken)).unwrap();
        assert!(
            matches!(endpoint, Endpoint::Retrying(a) if a == taken),
            "{endpoint:?}"
        );
        // TEST-NET-1 (RFC 5737): never an address of this host.
        let elsewhere = "192.0.2.1:9401".parse().unwrap();
        assert!(matches!(
            Endpoint::bind(Some(elsewhere)).unwrap(),
            Endpoint::Retrying(_)
        ));
        assert!(matches!(Endpoint::bind(None).unwrap(), Endpoint::Off));
        let free = Endpoint::bind(Some("127.0.0.1:0".parse().unwrap())).unwrap();
        assert!(matches!(free, Endpoint::Bound(_)));
    }
}
