//! The metrics endpoint: the runtime's per-GPU snapshots ([`Registry`]), rendered as
//! Prometheus text by the runtime ([`gpufill_runtime::prometheus`]), served by a small
//! HTTP listener of the binary's own ([`server`]).
//!
//! The workers publish into the registry with `try_lock`, so a scrape in progress never
//! makes a fill loop wait; the server locks each snapshot only long enough to clone it,
//! then renders outside any lock.

pub mod server;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use gpufill_core::PidView;
pub use gpufill_runtime::prometheus::Process;
pub use gpufill_runtime::{GpuLabels, GpuSnapshot, Registry};
use tracing::info;

/// The exposition format's pieces the server needs.
pub mod render {
    pub use gpufill_runtime::prometheus::CONTENT_TYPE;
}

/// This process as the metrics describe it, seeing `pid_view`.
pub fn this_process(pid_view: PidView) -> Process {
    Process::current(crate::version::VERSION, crate::version::REVISION, pid_view)
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
