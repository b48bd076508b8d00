//! How a process starts afresh to follow MPS (`gpufill run` executes itself again):
//! what it says, and the environment the new image runs with ([`Restart`]), for a
//! [`Change`] that [`DaemonWatch`](super::DaemonWatch) found. Executing the new image is
//! the caller's.
//!
//! A process that leaves a daemon (told to quit, or its server lost twice within
//! [`SERVER_LOST_WINDOW`]) runs again with `CUDA_MPS_PIPE_DIRECTORY` set to
//! [`NO_DAEMON`], so that its CUDA connects to no daemon, and [`LEFT_VAR`] naming the
//! daemon left and the directory CUDA had before, which the runtime watches still
//! ([`Left`]). Following a new daemon gives CUDA its directory back.

use std::ffi::OsString;
use std::time::Duration;

use super::{Change, Daemon, LEFT_VAR, Left, NO_DAEMON, SERVER_LOST_VAR, SERVER_LOST_WINDOW};

/// The environment a fresh start changes: a variable set (`Some`) or removed.
pub type EnvChanges = Vec<(&'static str, Option<OsString>)>;

/// What a fresh start says and runs with.
#[derive(Debug, PartialEq)]
pub struct Restart {
    /// The log line.
    pub message: String,
    /// What changes in the new image's environment.
    pub env: EnvChanges,
}

/// What this process knows of its own MPS standing, from its environment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Standing {
    /// `CUDA_MPS_PIPE_DIRECTORY` as set now.
    pub pipe_directory: Option<OsString>,
    /// The daemon this process has left, if any.
    pub left: Option<Left>,
    /// When its MPS server was last lost (Unix seconds), if it was.
    pub server_lost: Option<u64>,
}

impl Standing {
    /// This process's.
    pub fn current() -> Standing {
        Standing {
            pipe_directory: std::env::var_os("CUDA_MPS_PIPE_DIRECTORY"),
            left: super::left(),
            server_lost: std::env::var(SERVER_LOST_VAR)
                .ok()
                .and_then(|v| v.parse().ok()),
        }
    }

    /// The directory watched, as the log says it.
    fn watched(&self) -> String {
        let dir = match &self.left {
            Some(left) => left.pipe_directory.clone(),
            None => self.pipe_directory.clone(),
        };
        dir.filter(|d| !d.is_empty()).map_or_else(
            || "/tmp/nvidia-mps".to_owned(),
            |d| d.to_string_lossy().into_owned(),
        )
    }

    /// Leaving the daemon `pid`: CUDA pointed at no daemon, the one left named.
    fn leave(&self, pid: u32) -> EnvChanges {
        let left = Left {
            daemon: pid,
            pipe_directory: self.pipe_directory.clone().filter(|d| !d.is_empty()),
        };
        vec![
            (LEFT_VAR, Some(left.to_value())),
            ("CUDA_MPS_PIPE_DIRECTORY", Some(NO_DAEMON.into())),
        ]
    }

    /// Following a daemon again: CUDA's directory given back, nothing left.
    fn rejoin(&self) -> EnvChanges {
        match &self.left {
            Some(left) => vec![
                (LEFT_VAR, None),
                ("CUDA_MPS_PIPE_DIRECTORY", left.pipe_directory.clone()),
                (SERVER_LOST_VAR, None),
            ],
            None => vec![(SERVER_LOST_VAR, None)],
        }
    }
}

impl Restart {
    /// What to do for `change`, standing as `standing`, at `now` (Unix seconds).
    pub fn plan(change: Change, standing: &Standing, now: u64) -> Restart {
        let dir = standing.watched();
        match change {
            Change::Started => Restart {
                message: format!(
                    "MPS control daemon started ({dir}): restarting to become its client"
                ),
                env: standing.rejoin(),
            },
            Change::Stopped => Restart {
                message: format!(
                    "MPS control daemon stopped ({dir}): restarting without MPS; the yield policy applies again"
                ),
                env: vec![],
            },
            Change::Quitting(pid) => Restart {
                message: format!(
                    "MPS control daemon {pid} was told to quit ({dir}): leaving it so that it can \
                 exit; restarting without MPS, the yield policy applies until another daemon starts"
                ),
                env: standing.leave(pid),
            },
            Change::ServerLost(pid) => {
                let again = standing
                    .server_lost
                    .is_some_and(|at| now.saturating_sub(at) < SERVER_LOST_WINDOW.as_secs());
                if again {
                    Restart {
                        message: format!(
                            "our MPS server is gone again within {} s (daemon {pid}, {dir}): leaving \
                         that daemon; restarting without MPS, the yield policy applies until \
                         another daemon starts",
                            SERVER_LOST_WINDOW.as_secs()
                        ),
                        env: standing.leave(pid),
                    }
                } else {
                    Restart {
                        message: format!(
                            "our MPS server is gone (daemon {pid}, {dir}): our contexts went with it; \
                         restarting to become a client of a new one"
                        ),
                        env: vec![(SERVER_LOST_VAR, Some(now.to_string().into()))],
                    }
                }
            }
        }
    }

    /// What to do for `change`, standing as this process does now
    /// ([`Standing::current`]), at the wall clock's time.
    pub fn for_this_process(change: Change) -> Restart {
        Restart::plan(change, &Standing::current(), unix_now())
    }
}

/// At the start of `run`: a daemon that is quitting is left before any CUDA call
/// connects to it (a client would keep it waiting). The plan, if so.
pub fn leave_at_start() -> Option<Restart> {
    if super::left().is_some() {
        return None;
    }
    let seen = super::look(None);
    match (seen.daemon, seen.pid) {
        (Daemon::Quitting, Some(pid)) => Some(Restart::for_this_process(Change::Quitting(pid))),
        _ => None,
    }
}

/// Seconds since the Unix epoch.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(env: &EnvChanges, name: &str) -> Option<Option<OsString>> {
        env.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn a_quit_leaves_the_daemon_pointing_cuda_at_none_and_naming_what_it_left() {
        let standing = Standing {
            pipe_directory: Some("/tmp/pipe".into()),
            ..Standing::default()
        };
        let plan = Restart::plan(Change::Quitting(42), &standing, 1000);
        assert!(
            plan.message
                .contains("daemon 42 was told to quit (/tmp/pipe)"),
            "{}",
            plan.message
        );
        assert_eq!(
            value(&plan.env, "CUDA_MPS_PIPE_DIRECTORY"),
            Some(Some(NO_DAEMON.into()))
        );
        let left = Left::parse(&value(&plan.env, LEFT_VAR).unwrap().unwrap()).unwrap();
        assert_eq!(left.daemon, 42);
        assert_eq!(left.pipe_directory, Some("/tmp/pipe".into()));
    }

    #[test]
    fn a_new_daemon_after_leaving_gives_cuda_its_directory_back() {
        let left = Standing {
            pipe_directory: Some(NO_DAEMON.into()),
            left: Some(Left {
                daemon: 42,
                pipe_directory: Some("/tmp/pipe".into()),
            }),
            server_lost: Some(990),
        };
        let plan = Restart::plan(Change::Started, &left, 1000);
        assert!(
            plan.message.contains("started (/tmp/pipe)"),
            "{}",
            plan.message
        );
        assert_eq!(value(&plan.env, LEFT_VAR), Some(None));
        assert_eq!(
            value(&plan.env, "CUDA_MPS_PIPE_DIRECTORY"),
            Some(Some("/tmp/pipe".into()))
        );
        assert_eq!(value(&plan.env, SERVER_LOST_VAR), Some(None));
        // Where CUDA had no directory set, it gets none again (the default).
        let unset = Standing {
            left: Some(Left {
                daemon: 42,
                pipe_directory: None,
            }),
            ..left
        };
        let plan = Restart::plan(Change::Started, &unset, 1000);
        assert_eq!(value(&plan.env, "CUDA_MPS_PIPE_DIRECTORY"), Some(None));
    }

    #[test]
    fn a_lost_server_is_rejoined_once_and_left_when_lost_again_within_the_window() {
        let first = Restart::plan(Change::ServerLost(42), &Standing::default(), 1000);
        assert!(
            first
                .message
                .contains("restarting to become a client of a new one")
        );
        assert_eq!(first.env, vec![(SERVER_LOST_VAR, Some("1000".into()))]);
        let after = Standing {
            server_lost: Some(1000),
            ..Standing::default()
        };
        let window = SERVER_LOST_WINDOW.as_secs();
        let again = Restart::plan(Change::ServerLost(42), &after, 1000 + window - 1);
        assert!(again.message.contains("gone again"), "{}", again.message);
        assert_eq!(
            value(&again.env, "CUDA_MPS_PIPE_DIRECTORY"),
            Some(Some(NO_DAEMON.into()))
        );
        // Past the window it is a first loss again.
        let later = Restart::plan(Change::ServerLost(42), &after, 1000 + window);
        assert!(later.message.contains("a new one"), "{}", later.message);
    }

    #[test]
    fn a_stopped_daemon_restarts_with_the_environment_as_it_is() {
        let plan = Restart::plan(Change::Stopped, &Standing::default(), 1);
        assert!(plan.message.contains("the yield policy applies again"));
        assert!(plan.env.is_empty());
    }
}
