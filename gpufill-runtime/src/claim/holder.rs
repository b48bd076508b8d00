//! Who holds a lock file, and whether it is a gpufill. The record in the file is what
//! its holder chose to write, so it decides only where nothing better can be seen: the
//! kernel's list of locks (`/proc/locks`, proc(5)) names the process that took the
//! lock, and where that process is visible here its command line decides ([`judge`]).
//! A process in another PID namespace shows as PID 0 there (or not at all); then the
//! record decides, as it did before.
//!
//! The list is parsed here rather than through `procfs`: its `Lock` does not say which
//! entries are waiters (`->`), and a process blocked on the lock does not hold it.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::time::{SystemTime, UNIX_EPOCH};

use super::{MAX_RECORD, escape_controls, printable};

/// Who holds a lock, in words, and whether it is a gpufill.
#[derive(Debug, PartialEq)]
pub(super) struct Holder {
    /// `pid 4242 on host node-a, started 37 s ago`, `pid 77 (flock x sleep 600)`.
    pub words: String,
    /// Whether the holder is a gpufill.
    pub gpufill: bool,
}

/// The holder of the lock on `file`, which this process failed to take.
pub(super) fn holder(file: &mut File) -> Holder {
    let mut text = String::new();
    let _ = file.take(MAX_RECORD).read_to_string(&mut text);
    let owner = file.metadata().ok().and_then(|m| {
        let locks = std::fs::read_to_string("/proc/locks").ok()?;
        lock_owner(&locks, libc::major(m.dev()), libc::minor(m.dev()), m.ino())
    });
    let process = owner.map(|pid| (pid, command_line(pid)));
    judge(&text, process, std::process::id(), SystemTime::now())
}

/// Who holds a lock whose file says `record`, taken by `owner` (its PID and command
/// line, where visible), asked by process `me` at `now`:
/// - this very process (another agent in it): a gpufill, as its record says;
/// - a process whose command line is visible: a gpufill when [`is_gpufill`] says so,
///   named by the record where the record names that PID, else by its command line;
/// - otherwise (no owner listed, or its command line unreadable): the record decides,
///   a gpufill when it is one that gpufill writes.
fn judge(record: &str, owner: Option<(u32, Option<String>)>, me: u32, now: SystemTime) -> Holder {
    let recorded = Record::parse(record);
    match owner {
        Some((pid, _)) if pid == me => Holder {
            words: describe(&recorded, now),
            gpufill: true,
        },
        Some((pid, Some(command))) => {
            let gpufill = is_gpufill(&command);
            let words = if gpufill && recorded.pid.as_deref() == Some(&pid.to_string()) {
                describe(&recorded, now)
            } else {
                let shown: String = command.chars().take(120).collect();
                format!("pid {pid} ({})", escape_controls(&shown))
            };
            Holder { words, gpufill }
        }
        _ => Holder {
            gpufill: recorded.is_gpufills(),
            words: describe(&recorded, now),
        },
    }
}

/// Whether a process name as NVML gives it, or a command line (a path, perhaps with
/// arguments), is gpufill's: its program's file name is `gpufill`.
pub fn is_gpufill(name: &str) -> bool {
    name.split_whitespace()
        .next()
        .and_then(|program| program.rsplit('/').next())
        == Some("gpufill")
}

/// The process that holds a `flock` on the file `major:minor:inode`, from the text of
/// `/proc/locks`: the first holder (not a waiter, `->`) with a visible PID (not 0).
fn lock_owner(locks: &str, major: u32, minor: u32, inode: u64) -> Option<u32> {
    let device = format!("{major:02x}:{minor:02x}:{inode}");
    locks.lines().find_map(|line| {
        let mut fields = line.split_whitespace().skip(1);
        let kind = fields.next()?;
        if kind == "->" || kind != "FLOCK" {
            return None;
        }
        let pid = fields.nth(2)?.parse::<u32>().ok().filter(|pid| *pid != 0)?;
        (fields.next()? == device).then_some(pid)
    })
}

/// A process's command line, its arguments joined by spaces, or its name where the
/// command line is empty; none where it cannot be read (gone, or hidden by `hidepid`).
fn command_line(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let words: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    if words.is_empty() {
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        return Some(name.trim().to_owned());
    }
    Some(words.join(" "))
}

/// The fields of a lock file's record (`pid=`, `host=`, `started_unix_s=`).
#[derive(Debug, Default)]
struct Record {
    pid: Option<String>,
    host: Option<String>,
    started: Option<u64>,
}

impl Record {
    fn parse(text: &str) -> Record {
        let field = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                .map(printable)
                .filter(|v| !v.is_empty())
        };
        Record {
            pid: field("pid"),
            host: field("host"),
            started: field("started_unix_s").and_then(|s| s.parse().ok()),
        }
    }

    /// Whether it is a record that gpufill writes: a numeric PID, a host and a start.
    fn is_gpufills(&self) -> bool {
        let numeric = self.pid.as_ref().is_some_and(|p| p.parse::<u32>().is_ok());
        numeric && self.host.is_some() && self.started.is_some()
    }
}

/// A record in words, at `now`: `pid 4242 on host node-a, started 37 s ago`, or that it
/// says nothing.
fn describe(record: &Record, now: SystemTime) -> String {
    let Some(pid) = &record.pid else {
        return "its lock file does not say who it is".to_owned();
    };
    let mut words = format!("pid {pid}");
    if let Some(host) = &record.host {
        words.push_str(&format!(" on host {host}"));
    }
    if let Some(ago) = record.started.and_then(|s| {
        let now = now.duration_since(UNIX_EPOCH).ok()?.as_secs();
        now.checked_sub(s)
    }) {
        words.push_str(&format!(", started {} ago", duration_words(ago)));
    }
    words
}

/// `37 s`, `12 min`, `5 h`, `3 d`.
fn duration_words(s: u64) -> String {
    match s {
        0..120 => format!("{s} s"),
        120..7200 => format!("{} min", s / 60),
        7200..172_800 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn words(text: &str, now: SystemTime) -> String {
        describe(&Record::parse(text), now)
    }

    #[test]
    fn a_record_reads_as_words_and_a_hostile_one_is_escaped() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(
            words("pid=4242\nhost=node-a\nstarted_unix_s=999963\n", now),
            "pid 4242 on host node-a, started 37 s ago"
        );
        assert_eq!(
            words("pid=1\nstarted_unix_s=900000\n", now),
            "pid 1, started 27 h ago"
        );
        assert_eq!(words("", now), "its lock file does not say who it is");
        assert_eq!(
            words("pid=1\u{1b}[2J\nhost=x\n", now),
            "pid 1\\u{1b}[2J on host x"
        );
    }

    const LOCKS: &str = "\
1: POSIX  ADVISORY  WRITE 500 00:19:77 0 EOF
2: FLOCK  ADVISORY  WRITE 0 00:19:77 0 EOF
2: -> FLOCK  ADVISORY  WRITE 600 00:19:77 0 EOF
3: FLOCK  ADVISORY  WRITE 4242 00:19:77 0 EOF
4: FLOCK  ADVISORY  WRITE 700 103:02:77 0 EOF
5: OFDLCK ADVISORY  READ -1 00:19:78 0 EOF
";

    #[test]
    fn the_lock_list_names_the_holder_not_a_waiter_a_posix_lock_or_another_device() {
        // Entry 2 is held in another PID namespace (0), its waiter is not a holder.
        assert_eq!(lock_owner(LOCKS, 0x00, 0x19, 77), Some(4242));
        // Devices are hexadecimal, two digits at least.
        assert_eq!(lock_owner(LOCKS, 0x103, 0x02, 77), Some(700));
        assert_eq!(lock_owner(LOCKS, 0x00, 0x19, 78), None);
        assert_eq!(lock_owner(LOCKS, 0x00, 0x1a, 77), None);
        assert_eq!(lock_owner("", 0, 0x19, 77), None);
    }

    #[test]
    fn the_holder_s_command_line_outranks_its_record() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let forged = "pid=4242\nhost=node-a\nstarted_unix_s=999963\n";
        let judged = |owner: Option<(u32, Option<&str>)>| {
            judge(
                forged,
                owner.map(|(p, c)| (p, c.map(str::to_owned))),
                1,
                now,
            )
        };
        // A visible process that is not gpufill, whatever the file says.
        assert_eq!(
            judged(Some((4242, Some("flock /run/gpufill/x.lock sleep 600")))),
            Holder {
                words: "pid 4242 (flock /run/gpufill/x.lock sleep 600)".into(),
                gpufill: false
            }
        );
        // A gpufill: named by its record when the record is its own.
        let gpufill = "/usr/bin/gpufill run --config /etc/gpufill/gpufill.toml";
        assert_eq!(
            judged(Some((4242, Some(gpufill)))),
            Holder {
                words: "pid 4242 on host node-a, started 37 s ago".into(),
                gpufill: true
            }
        );
        // A gpufill in a container seen from the host: its own PID there differs.
        assert_eq!(
            judged(Some((9000, Some(gpufill)))).words,
            format!("pid 9000 ({gpufill})")
        );
        // This process: another agent of ours.
        assert!(judged(Some((1, Some("some-test-binary")))).gpufill);
        // Not visible: the record decides, and only a whole one counts.
        assert!(judged(None).gpufill);
        assert!(judged(Some((4242, None))).gpufill);
        let none = judge("", None, 1, now);
        assert!(!none.gpufill, "{none:?}");
        assert!(!judge("pid=x\nhost=h\nstarted_unix_s=1\n", None, 1, now).gpufill);
        // A hostile command line is escaped.
        assert_eq!(
            judged(Some((5, Some("evil\u{1b}[2J")))).words,
            "pid 5 (evil\\u{1b}[2J)"
        );
    }

    #[test]
    fn a_command_line_reads_as_its_words() {
        let me = command_line(std::process::id()).unwrap();
        let exe = std::env::current_exe().unwrap();
        let name = exe.file_name().unwrap().to_str().unwrap();
        assert!(me.split(' ').next().unwrap().ends_with(name), "{me}");
        assert_eq!(command_line(u32::MAX), None);
    }
}
