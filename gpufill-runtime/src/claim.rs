//! One gpufill per GPU. Two would each see the other as a foreign process and yield to
//! it, or fill beside it, and neither would hold the target. So an agent claims each of
//! its GPUs before it starts a worker, and refuses to start ([`ClaimError`], a settings
//! error: exit 2 in the binary) when another gpufill has one, naming it:
//!
//! - **A lock per GPU** ([`claim_all`]): an exclusive `flock` on `DIR/UUID.lock`, held
//!   until the agent is dropped or the process ends, however it ends (the kernel drops
//!   the lock with the last descriptor). The holder writes who it is into the file (PID,
//!   host name, start time), which a refused instance quotes. A lock works across the
//!   containers of one host when they share the directory: `/run/gpufill` ([`CLAIM_DIR`])
//!   is the systemd unit's runtime directory and can be mounted into a container
//!   (docs/operations.md, "One gpufill per GPU"). Where the directory cannot be used (not
//!   there and cannot be made, read-only), the agent logs one warning and starts
//!   unclaimed.
//! - **Its name in NVML's list** ([`listed_gpufill`]): a process named `gpufill` already
//!   on the GPU. NVML lists the processes of other containers where gpufill sees the
//!   host's PIDs (a systemd service, a pod with `hostPID`), so a systemd gpufill finds a
//!   DaemonSet's that started before it, with no shared directory.
//!
//! A lock file is created with mode 0666, and a directory that gpufill creates with
//! 1777 (sticky, as `/tmp`), so that gpufills running as different users (a systemd
//! service's dynamic user, a container's) can claim GPUs beside one another. It is
//! opened without following a symlink and used only if it is a regular file with one
//! link, so that a planted link cannot make gpufill write elsewhere.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use gpufill_nvml::GpuInfo;
use tracing::warn;

use crate::select::Gpu;

/// Where `gpufill run` claims its GPUs: on tmpfs, so the locks never outlive a boot.
pub const CLAIM_DIR: &str = "/run/gpufill";

/// The most of a lock file read to name its holder.
const MAX_RECORD: u64 = 1024;

/// A GPU claimed: its lock is held until this is dropped.
#[derive(Debug)]
pub struct Claim {
    _file: File,
}

/// Another gpufill has the GPU.
#[derive(Debug, thiserror::Error)]
#[error(
    "GPU {index} ({uuid}) is already filled by another gpufill: {other}; run one gpufill per \
     GPU: stop the other one, or select other GPUs"
)]
pub struct ClaimError {
    /// The GPU's NVML index.
    pub index: u32,
    /// The GPU's UUID.
    pub uuid: String,
    /// Who has it, in words: its PID, host and start, or the process NVML lists.
    pub other: String,
}

/// Claims every GPU in `gpus` in `dir` ([`CLAIM_DIR`] for the binary): the claims, to
/// hold while filling; none (and one warning) where the directory cannot be used.
///
/// # Errors
/// [`ClaimError`] naming the holder of the first GPU that another gpufill holds.
pub fn claim_all(dir: &Path, gpus: &[Gpu]) -> Result<Vec<Claim>, ClaimError> {
    if let Err(e) = make_dir(dir) {
        warn!(
            dir = %dir.display(),
            "cannot claim the GPUs ({e}): a second gpufill on them is found only if NVML \
             lists it (docs/operations.md, \"One gpufill per GPU\")"
        );
        return Ok(Vec::new());
    }
    let mut claims = Vec::new();
    for gpu in gpus {
        match claim(dir, gpu) {
            Ok(Some(claim)) => claims.push(claim),
            Ok(None) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(claims)
}

/// Creates `dir` (mode 1777) unless it is there.
fn make_dir(dir: &Path) -> io::Result<()> {
    match DirBuilder::new().mode(0o1777).create(dir) {
        // The umask took bits away: put them back, as the module docs say.
        Ok(()) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Claims `gpu` in `dir`: its claim, or none (with a warning) where its lock file
/// cannot be used.
fn claim(dir: &Path, gpu: &Gpu) -> Result<Option<Claim>, ClaimError> {
    let path = dir.join(format!("{}.lock", file_stem(&gpu.uuid)));
    let cannot = |e: io::Error| {
        warn!(
            gpu = gpu.index,
            file = %path.display(),
            "cannot claim the GPU ({e}): a second gpufill on it is found only if NVML lists it"
        );
        Ok(None)
    };
    let (mut file, writable) = match open(&path) {
        Ok(opened) => opened,
        Err(e) => return cannot(e),
    };
    match lock(&file) {
        Ok(true) => {}
        Ok(false) => {
            return Err(ClaimError {
                index: gpu.index,
                uuid: gpu.uuid.clone(),
                other: format!("{} (it holds {})", holder(&mut file), path.display()),
            });
        }
        Err(e) => return cannot(e),
    }
    if writable {
        // Who holds it, for the next one's message; a claim holds without it.
        let _ = file
            .set_len(0)
            .and_then(|()| file.write_all(record().as_bytes()));
    }
    Ok(Some(Claim { _file: file }))
}

/// The lock file's name for a UUID: its letters, digits and dashes (a UUID's own), any
/// other byte as `_`.
fn file_stem(uuid: &str) -> String {
    uuid.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Opens (or creates, mode 0666) a lock file, read-write where allowed, else read-only
/// (a lock needs no more); and whether it is writable.
fn open(path: &Path) -> io::Result<(File, bool)> {
    let options = |write: bool| {
        let mut o = OpenOptions::new();
        o.read(true)
            .write(write)
            .create(write)
            .mode(0o666)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
        o
    };
    let (file, writable) = match options(true).open(path) {
        Ok(file) => (file, true),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            (options(false).open(path)?, false)
        }
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() || meta.nlink() != 1 {
        return Err(io::Error::other(
            "not a regular file with one link: left alone",
        ));
    }
    if writable && meta.uid() == current_uid() {
        // The umask took bits away: another user's gpufill must open it too.
        let _ = file.set_permissions(std::fs::Permissions::from_mode(0o666));
    }
    Ok((file, writable))
}

/// This process's effective user, as the lock file's owner shows it.
fn current_uid() -> u32 {
    // SAFETY: geteuid takes no arguments, cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() }
}

/// Takes the lock without waiting: true when taken, false when another holds it.
fn lock(file: &File) -> io::Result<bool> {
    // SAFETY: flock on a descriptor that `file` owns and keeps open for the call.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.kind() == io::ErrorKind::WouldBlock {
        Ok(false)
    } else {
        Err(e)
    }
}

/// What a lock file says of its holder, in words: `pid 4242 on host node-a, started 37 s
/// ago`, or that it says nothing.
fn holder(file: &mut File) -> String {
    let mut text = String::new();
    let _ = file.take(MAX_RECORD).read_to_string(&mut text);
    describe(&text, SystemTime::now())
}

/// [`holder`] of a record's text, at `now`.
fn describe(text: &str, now: SystemTime) -> String {
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(printable)
            .filter(|v| !v.is_empty())
    };
    let Some(pid) = field("pid") else {
        return "its lock file does not say who it is".to_owned();
    };
    let mut words = format!("pid {pid}");
    if let Some(host) = field("host") {
        words.push_str(&format!(" on host {host}"));
    }
    let started = field("started_unix_s").and_then(|s| s.parse::<u64>().ok());
    if let Some(ago) = started.and_then(|s| {
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

/// `s` with control characters escaped, at most 64 characters: the file is anyone's to
/// write.
fn printable(s: &str) -> String {
    escape_controls(&s.trim().chars().take(64).collect::<String>())
}

/// `s` safe for a terminal or a log: control characters (escape sequences that move the
/// cursor, retitle the window or clear the screen) escaped, as `\u{1b}`, never raw. For
/// text any user sets: a process name (its argv), a lock file's record.
pub fn escape_controls(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

/// This process's record: its PID, host name (a container's own) and start.
fn record() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!(
        "pid={}\nhost={}\nstarted_unix_s={now}\n",
        std::process::id(),
        host.trim()
    )
}

/// Another gpufill that NVML lists on one of `gpus` (not `me`), named: the first such
/// GPU and process as a [`ClaimError`].
///
/// # Errors
/// [`ClaimError`] naming the GPU and the process.
pub fn listed_gpufill(listed: &[GpuInfo], gpus: &[Gpu], me: u32) -> Result<(), ClaimError> {
    for gpu in gpus {
        let Some(info) = listed
            .iter()
            .find(|i| i.uuid.eq_ignore_ascii_case(&gpu.uuid))
        else {
            continue;
        };
        let found = info
            .processes
            .iter()
            .filter(|p| p.pid != me)
            .find_map(|p| Some((p.pid, p.name.as_deref().filter(|n| is_gpufill(n))?)));
        if let Some((pid, name)) = found {
            return Err(ClaimError {
                index: gpu.index,
                uuid: gpu.uuid.clone(),
                other: format!("NVML lists process {pid} ({}) on it", printable(name)),
            });
        }
    }
    Ok(())
}

/// Whether a process name as NVML gives it (a path, perhaps with arguments) is
/// gpufill's: its program's file name is `gpufill`.
pub fn is_gpufill(name: &str) -> bool {
    name.split_whitespace()
        .next()
        .and_then(|program| program.rsplit('/').next())
        == Some("gpufill")
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufill_nvml::ProcessEntry;
    use std::time::Duration;

    fn gpu(index: u32) -> Gpu {
        Gpu {
            index,
            uuid: format!("GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd"),
            name: "simulated GPU".into(),
            ordinal: index as usize,
            sm_count: 132,
            max_resident_blocks: 0,
        }
    }

    #[test]
    fn a_second_claim_of_a_gpu_is_refused_naming_the_first_until_it_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = claim_all(dir.path(), &[gpu(0), gpu(1)]).unwrap();
        assert_eq!(first.len(), 2);
        let e = claim_all(dir.path(), &[gpu(1)]).unwrap_err();
        let text = e.to_string();
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        assert!(
            text.starts_with(&format!(
                "GPU 1 (GPU-00000001-aaaa-bbbb-cccc-dddddddddddd) is already filled by another \
                 gpufill: pid {} on host {}, started ",
                std::process::id(),
                host.trim()
            )),
            "{text}"
        );
        assert!(
            text.ends_with(
                "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd.lock); run one gpufill per GPU: stop \
                 the other one, or select other GPUs"
            ),
            "{text}"
        );
        // Another GPU is free.
        assert_eq!(claim_all(dir.path(), &[gpu(2)]).unwrap().len(), 1);
        drop(first);
        assert_eq!(claim_all(dir.path(), &[gpu(1)]).unwrap().len(), 1);
    }

    #[test]
    fn a_lock_held_by_another_process_refuses_the_claim() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir
            .path()
            .join("GPU-00000000-aaaa-bbbb-cccc-dddddddddddd.lock");
        // Another holder: a flock belongs to an open file description, so this one
        // conflicts with the claim's own open as another process's would (no flock(1)
        // needed, and no early return where it is missing).
        let mut held = File::create(&file).unwrap();
        held.write_all(b"pid=77\nhost=node-a\n").unwrap();
        assert!(lock(&held).unwrap());
        let text = claim_all(dir.path(), &[gpu(0)]).unwrap_err().to_string();
        assert!(
            text.contains("another gpufill: pid 77 on host node-a (it holds"),
            "{text}"
        );
        drop(held);
        assert_eq!(claim_all(dir.path(), &[gpu(0)]).unwrap().len(), 1);
    }

    #[test]
    fn a_directory_that_cannot_be_used_claims_nothing_and_refuses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let not_a_dir = dir.path().join("file");
        std::fs::write(&not_a_dir, "").unwrap();
        assert!(claim_all(&not_a_dir, &[gpu(0)]).unwrap().is_empty());
        assert!(
            claim_all(&not_a_dir.join("sub"), &[gpu(0)])
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_planted_symlink_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let lock = dir
            .path()
            .join("GPU-00000000-aaaa-bbbb-cccc-dddddddddddd.lock");
        std::os::unix::fs::symlink(&victim, &lock).unwrap();
        assert!(claim_all(dir.path(), &[gpu(0)]).unwrap().is_empty());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    }

    #[test]
    fn a_directory_made_for_claims_and_its_files_are_open_to_every_user() {
        let dir = tempfile::tempdir().unwrap();
        let claims_dir = dir.path().join("gpufill");
        let _claims = claim_all(&claims_dir, &[gpu(0)]).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&claims_dir), 0o1777);
        let file = claims_dir.join("GPU-00000000-aaaa-bbbb-cccc-dddddddddddd.lock");
        assert_eq!(mode(&file), 0o666);
    }

    #[test]
    fn a_record_reads_as_words_and_a_hostile_one_is_escaped() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(
            describe("pid=4242\nhost=node-a\nstarted_unix_s=999963\n", now),
            "pid 4242 on host node-a, started 37 s ago"
        );
        assert_eq!(
            describe("pid=1\nstarted_unix_s=900000\n", now),
            "pid 1, started 27 h ago"
        );
        assert_eq!(describe("", now), "its lock file does not say who it is");
        assert_eq!(
            describe("pid=1\u{1b}[2J\nhost=x\n", now),
            "pid 1\\u{1b}[2J on host x"
        );
        assert_eq!(file_stem("GPU-1/../x"), "GPU-1____x");
    }

    fn listing(uuid: &str, processes: &[(u32, Option<&str>)]) -> GpuInfo {
        GpuInfo {
            index: 0,
            uuid: uuid.into(),
            name: "NVIDIA H100".into(),
            memory_used_bytes: 0,
            memory_total_bytes: 1,
            utilization_percent: None,
            power_watts: None,
            mig_enabled: false,
            processes: processes
                .iter()
                .map(|(pid, name)| ProcessEntry {
                    pid: *pid,
                    used_memory_bytes: None,
                    name: name.map(str::to_owned),
                    mps_client: false,
                })
                .collect(),
        }
    }

    #[test]
    fn a_gpufill_listed_on_the_gpu_is_named_and_other_processes_are_not() {
        let g = gpu(0);
        let gs = std::slice::from_ref(&g);
        let others = [
            (10, Some("/usr/bin/python3 train.py")),
            (11, Some("gpufill-exporter")),
            (12, None),
            (13, Some("/opt/gpufill/bin/worker")),
        ];
        assert!(listed_gpufill(&[listing(&g.uuid, &others)], gs, 99).is_ok());
        let with = [
            others[0],
            (4242, Some("/usr/local/bin/gpufill run --config x")),
        ];
        let e = listed_gpufill(&[listing(&g.uuid, &with)], gs, 99).unwrap_err();
        assert_eq!(
            e.other,
            "NVML lists process 4242 (/usr/local/bin/gpufill run --config x) on it"
        );
        // Ourselves, and another GPU's gpufill, do not count.
        assert!(listed_gpufill(&[listing(&g.uuid, &with)], gs, 4242).is_ok());
        assert!(listed_gpufill(&[listing("GPU-other", &with)], &[g], 99).is_ok());
    }
}
