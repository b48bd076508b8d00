//! The metrics endpoint: the runtime's per-GPU snapshots ([`Registry`]), rendered as
//! Prometheus text by the runtime ([`gpufill_runtime::prometheus`]), served by a small
//! HTTP listener of the binary's own ([`server`]).
//!
//! The workers publish into the registry with `try_lock`, so a scrape in progress never
//! makes a fill loop wait; the server locks each snapshot only long enough to clone it,
//! then renders outside any lock.

pub mod server;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use gpufill_core::Backoff;
use gpufill_runtime::PidView;
pub use gpufill_runtime::prometheus::Process;
use gpufill_runtime::reload::ReloadStatus;
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

/// The process's reloads, served with the runtime's series: recorded by the
/// `Reloader` at start and at each SIGHUP.
pub static RELOADS: ReloadStatus = ReloadStatus::new();

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
