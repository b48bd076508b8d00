//! Which PID view NVML gives this process ([`PidView`]), found once.

use std::sync::OnceLock;

use gpufill_core::PidView;

/// This process's PID view: [`PidView::Host`] when `/proc/self/ns/pid` is the host's
/// PID namespace (NVML's process list is complete), else [`PidView::Namespace`] (a
/// container without `hostPID`: NVML lists only our namespace's processes, and the
/// probe must see the others by device memory and per-process samples). An unreadable
/// link counts as a namespace, the safe side. Read once per process and logged once, at
/// info.
pub fn pid_view() -> PidView {
    static VIEW: OnceLock<PidView> = OnceLock::new();
    *VIEW.get_or_init(|| {
        let link = std::fs::read_link("/proc/self/ns/pid").ok();
        let link = link.as_deref().and_then(|p| p.to_str());
        let view = PidView::from_pid_namespace_link(link);
        match view {
            PidView::Host => tracing::info!(
                pid_view = view.as_str(),
                "PID view: host; NVML lists every compute process"
            ),
            PidView::Namespace => tracing::info!(
                pid_view = view.as_str(),
                pid_namespace = link.unwrap_or("unreadable"),
                "PID view: a PID namespace of our own; NVML lists only its processes, \
                 others are seen by device memory, per-process samples and utilization"
            ),
        }
        view
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_is_read_once_and_agrees_with_the_link() {
        let link = std::fs::read_link("/proc/self/ns/pid").ok();
        let expected = PidView::from_pid_namespace_link(link.as_deref().and_then(|p| p.to_str()));
        assert_eq!(pid_view(), expected);
        assert_eq!(pid_view(), expected);
    }
}
