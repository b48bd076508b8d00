//! The `[metrics]` table: the one key of the binary's own.

use std::net::SocketAddr;

use gpufill_runtime::Flag;
use serde::{Deserialize, Serialize};

/// The `[metrics]` table: the Prometheus endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// `IP:PORT` to serve `/metrics` on, e.g. `127.0.0.1:9401`; empty: no endpoint.
    pub listen: String,
}

impl MetricsConfig {
    /// The key of the binary's own.
    pub const LISTEN: &'static str = "metrics.listen";

    /// `metrics.listen`'s flag.
    pub const LISTEN_FLAG: Flag = Flag {
        long: "--metrics",
        value_name: "ADDR",
        help: "Serve Prometheus metrics at http://ADDR/metrics, e.g. 127.0.0.1:9401; port 0 picks a free port (logged)",
    };

    /// The address to listen on; `None` when off. Call on a validated configuration.
    pub fn addr(&self) -> Option<SocketAddr> {
        parse_listen(&self.listen).ok().flatten()
    }

    pub(super) fn problem(&self) -> Option<(&'static str, String)> {
        parse_listen(&self.listen)
            .err()
            .map(|reason| (MetricsConfig::LISTEN, reason))
    }
}

fn parse_listen(s: &str) -> Result<Option<SocketAddr>, String> {
    if s.is_empty() {
        return Ok(None);
    }
    s.parse().map(Some).map_err(|_| {
        format!(
            "expected IP:PORT, e.g. 127.0.0.1:9401 or [::]:9401 (port 0: any free port), got {s:?}"
        )
    })
}
