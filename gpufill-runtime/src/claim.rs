//! One gpufill per GPU. Two would each see the other as a foreign process and yield to
//! it, or fill beside it, and neither would hold the target. So an agent claims each of
//! its GPUs before it starts a worker, and refuses to start ([`ClaimError`]) when
//! another gpufill has one, naming it (one GPU is enough: two gpufills whose selections
//! overlap are a configuration to fix, not to fill around):
//!
//! - **A lock per GPU** ([`claim_all`]): an exclusive `flock` on `DIR/UUID.lock`, held
//!   until the agent is dropped or the process ends, however it ends (the kernel drops
//!   the lock with the last descriptor). The holder writes who it is into the file (PID,
//!   host name, start time), which a refused instance quotes. A lock works across the
//!   containers of one host when they share the directory: `/run/gpufill` ([`CLAIM_DIR`])
//!   is the systemd unit's runtime directory and can be mounted into a container
//!   (docs/operations.md, "One gpufill per GPU"). Where the directory cannot be used (not
//!   there and cannot be made, read-only), the agent logs one warning, with the error
//!   that stopped it, and starts unclaimed.
//! - **Its name in NVML's list** ([`listed_gpufill`]): a process named `gpufill` already
//!   on the GPU. NVML lists the processes of other containers where gpufill sees the
//!   host's PIDs (a systemd service, a pod with `hostPID`), so a systemd gpufill finds a
//!   DaemonSet's that started before it, with no shared directory.
//!
//! **Who holds a lock** ([`holder`]): the kernel's list of locks (`/proc/locks`) names
//! the process that took it, whatever the file says; where that process is visible here,
//! its command line decides whether it is a gpufill ([`is_gpufill`]), and where it is not
//! (another PID namespace), the record it wrote does. A lock that something else holds,
//! or a lock path that is not a lock file gpufill can trust, is [`ClaimError::by_gpufill`]
//! false: that GPU alone waits ([`Claimed::Waiting`]). The agent starts on the GPUs it
//! claimed, and the waiting GPU's worker says who holds the lock, tries again every few
//! seconds ([`claim_gpu`]) and starts filling once it is free, so that nothing but a
//! gpufill ever stops a gpufill for good, and nothing at all stops its other GPUs.
//!
//! **Who may lock**: only the users who may run gpufill. A directory that gpufill
//! creates is mode 2770 (its owner and group; set-group-ID, so that every lock file takes
//! the directory's group whoever creates it) and its lock files 0660, so that no other
//! user can open, and so lock, one. The systemd unit's runtime directory is made the same
//! way (`RuntimeDirectoryMode=2770`). A directory that any user may write (an older
//! gpufill's 1777) is made 2770 where gpufill owns it, and otherwise claimed in with a
//! warning. A lock file is opened without following a symbolic link and without blocking
//! on a FIFO, and used only if it is a regular file with one link whose owner may write
//! the directory; anything else at its path holds the GPU as a lock would, until it is
//! removed, and is never written to.

mod holder;
mod wait;

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use gpufill_nvml::GpuInfo;
use tracing::{info, warn};

use crate::select::Gpu;

pub use holder::is_gpufill;
use holder::{Holder, holder};
pub(crate) use wait::wait_for_claim;

/// Where `gpufill run` claims its GPUs: on tmpfs, so the locks never outlive a boot.
pub const CLAIM_DIR: &str = "/run/gpufill";

/// The mode of a claim directory that gpufill makes: its owner and group only, and
/// set-group-ID, so that each lock file takes the directory's group.
const DIR_MODE: u32 = 0o2770;

/// The mode of a lock file: its owner and the directory's group.
const FILE_MODE: u32 = 0o660;

/// The most of a lock file read to name its holder.
const MAX_RECORD: u64 = 1024;

/// A GPU claimed: its lock is held until this is dropped.
#[derive(Debug)]
pub struct Claim {
    _file: File,
}

/// Another gpufill has the GPU, or something else holds its lock.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.words())]
pub struct ClaimError {
    /// The GPU's NVML index.
    pub index: u32,
    /// The GPU's UUID.
    pub uuid: String,
    /// Who has it, in words: its PID, host and start, or the process NVML lists; or what
    /// holds its lock, or lies at the lock's path, when that is not a gpufill.
    pub other: String,
    /// Whether a gpufill has it. When not (a process that is not a gpufill holds the
    /// lock, or the path holds something other than a lock file), the claim may succeed
    /// later: the caller waits and tries again.
    pub by_gpufill: bool,
}

impl ClaimError {
    fn words(&self) -> String {
        let (index, uuid, other) = (self.index, &self.uuid, &self.other);
        if self.by_gpufill {
            format!(
                "GPU {index} ({uuid}) is already filled by another gpufill: {other}; run one \
                 gpufill per GPU: stop the other one, or select other GPUs"
            )
        } else {
            format!("GPU {index} ({uuid}) is held by something that is not a gpufill: {other}")
        }
    }
}

/// What claiming one GPU gave ([`claim_all`]).
#[derive(Debug)]
pub enum Claimed {
    /// Its lock, held until this is dropped.
    Held(Claim),
    /// Nothing to hold: the claim directory or the GPU's lock file cannot be used (one
    /// warning logged); the GPU is filled unclaimed.
    Unclaimed,
    /// Something that is not a gpufill holds its lock ([`ClaimError::by_gpufill`]
    /// false): the GPU waits, and [`claim_gpu`] tries again later.
    Waiting(ClaimError),
}

impl Claimed {
    /// The claim held, if any.
    pub fn held(&self) -> Option<&Claim> {
        match self {
            Claimed::Held(claim) => Some(claim),
            _ => None,
        }
    }
}

/// Claims every GPU in `gpus` in `dir` ([`CLAIM_DIR`] for the binary): what each gave,
/// in the order of `gpus`. Where the directory cannot be used, every GPU is
/// [`Claimed::Unclaimed`] (and one warning logged).
///
/// # Errors
/// [`ClaimError`] naming the holder of the first GPU that another gpufill holds
/// ([`ClaimError::by_gpufill`] true), whatever the others gave: every claim taken is
/// released then.
pub fn claim_all(dir: &Path, gpus: &[Gpu]) -> Result<Vec<Claimed>, ClaimError> {
    if let Err(e) = make_dir(dir) {
        warn!(
            dir = %dir.display(),
            "cannot claim the GPUs ({e}): a second gpufill on them is found only if NVML \
             lists it (docs/operations.md, \"One gpufill per GPU\")"
        );
        return Ok(gpus.iter().map(|_| Claimed::Unclaimed).collect());
    }
    let mut claimed = Vec::with_capacity(gpus.len());
    for gpu in gpus {
        claimed.push(match claim_gpu(dir, gpu) {
            Ok(Some(claim)) => Claimed::Held(claim),
            Ok(None) => Claimed::Unclaimed,
            // A gpufill's refusal is final, for every GPU.
            Err(e) if e.by_gpufill => return Err(e),
            Err(e) => Claimed::Waiting(e),
        });
    }
    Ok(claimed)
}

/// Creates `dir` (mode [`DIR_MODE`]) unless it is there; one that any user may write is
/// closed where this process owns it, and otherwise claimed in with a warning.
fn make_dir(dir: &Path) -> io::Result<()> {
    match DirBuilder::new().mode(DIR_MODE).create(dir) {
        // The umask took bits away (and mkdir ignores set-group-ID): set them.
        Ok(()) => return set_mode(dir, DIR_MODE),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::metadata(dir)?;
    if meta.mode() & 0o002 != 0 {
        if meta.uid() == current_uid() && set_mode(dir, DIR_MODE).is_ok() {
            info!(dir = %dir.display(), "claim directory closed to other users (mode 2770)");
        } else {
            warn!(
                dir = %dir.display(),
                "any user may write the claim directory (mode {:o}) and so hold gpufill off \
                 its GPUs: make it mode 2770, owned by gpufill's user or group \
                 (docs/operations.md, \"One gpufill per GPU\")",
                meta.mode() & 0o7777
            );
        }
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Claims `gpu` in `dir` (a directory [`claim_all`] made): its claim, or none (with a
/// warning) where its lock file cannot be used.
///
/// # Errors
/// [`ClaimError`] naming what holds the GPU's lock, or lies at its path.
pub fn claim_gpu(dir: &Path, gpu: &Gpu) -> Result<Option<Claim>, ClaimError> {
    let path = dir.join(format!("{}.lock", file_stem(&gpu.uuid)));
    let cannot = |e: io::Error| {
        warn!(
            gpu = gpu.index,
            file = %path.display(),
            "cannot claim the GPU ({e}): a second gpufill on it is found only if NVML lists it"
        );
        Ok(None)
    };
    let refused = |holder: Holder| ClaimError {
        index: gpu.index,
        uuid: gpu.uuid.clone(),
        by_gpufill: holder.gpufill,
        other: format!("{} (it holds {})", holder.words, path.display()),
    };
    let (mut file, writable) = match open(dir, &path) {
        Ok(Opened::File(file, writable)) => (file, writable),
        Ok(Opened::Untrusted(why)) => {
            return Err(ClaimError {
                index: gpu.index,
                uuid: gpu.uuid.clone(),
                by_gpufill: false,
                other: format!("{} {why}: remove it", path.display()),
            });
        }
        Err(e) => return cannot(e),
    };
    match lock(&file) {
        Ok(true) => {}
        Ok(false) => return Err(refused(holder(&mut file))),
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

/// A lock file opened, or why what is at its path is not one to use.
enum Opened {
    /// The file, and whether it is writable.
    File(File, bool),
    /// What is at the path instead of a lock file, in words (`is a symbolic link`).
    Untrusted(String),
}

/// Opens (or creates, mode [`FILE_MODE`]) the lock file `path` in `dir`, read-write where
/// allowed, else read-only (a lock needs no more), never through a symbolic link and
/// never waiting on a FIFO; and checks that it is one gpufill can trust.
fn open(dir: &Path, path: &Path) -> io::Result<Opened> {
    let options = |write: bool| {
        let mut o = OpenOptions::new();
        o.read(true)
            .write(write)
            .create(write)
            .mode(FILE_MODE)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC);
        o
    };
    // What is there already, looked at without opening it (a device node, a socket).
    if let Ok(there) = std::fs::symlink_metadata(path)
        && let Some(why) = not_a_file(there.file_type())
    {
        return Ok(Opened::Untrusted(why));
    }
    let (file, writable) = match options(true).open(path) {
        Ok(file) => (file, true),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => (
            options(false).open(path).map_err(|r| read_error(e, r))?,
            false,
        ),
        // O_NOFOLLOW on a symbolic link.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Ok(Opened::Untrusted(
                "is a symbolic link, not a regular file".into(),
            ));
        }
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    let dir_meta = std::fs::metadata(dir)?;
    if let Some(why) = untrusted(&meta, &dir_meta, current_uid()) {
        return Ok(Opened::Untrusted(why));
    }
    if writable && meta.uid() == current_uid() {
        // The umask took bits away: the group's other gpufills must open it too.
        let _ = file.set_permissions(std::fs::Permissions::from_mode(FILE_MODE));
    }
    Ok(Opened::File(file, writable))
}

/// The error to report when opening a lock file read-write failed with `write` and then
/// read-only with `read`: an unwritable directory gives "permission denied" for the
/// first and "no such file" for the second, and the first is the one to fix.
fn read_error(write: io::Error, read: io::Error) -> io::Error {
    if read.kind() == io::ErrorKind::NotFound {
        write
    } else {
        read
    }
}

/// Why a lock file (`file`) in a directory (`dir`) is not one to trust, for a process
/// of user `me`: not a regular file, more than one link (a hard link to another file),
/// or an owner who could not have made it there as gpufill would. In a directory that
/// only its owner and group may write, its owner is one of them; where any user may
/// write it, only this user, root and the directory's owner count.
fn untrusted(file: &std::fs::Metadata, dir: &std::fs::Metadata, me: u32) -> Option<String> {
    if let Some(why) = not_a_file(file.file_type()) {
        return Some(why);
    }
    if file.nlink() != 1 {
        return Some(format!("has {} links (a hard link)", file.nlink()));
    }
    untrusted_owner(file.uid(), dir.mode(), dir.uid(), me).then(|| {
        format!(
            "belongs to user {}, in a directory that any user may write",
            file.uid()
        )
    })
}

/// Whether a lock file's `owner` could be anyone: the directory (`dir_mode`, owned by
/// `dir_owner`) lets any user write, and the owner is neither `me`, root nor the
/// directory's owner.
fn untrusted_owner(owner: u32, dir_mode: u32, dir_owner: u32, me: u32) -> bool {
    dir_mode & 0o002 != 0 && owner != me && owner != 0 && owner != dir_owner
}

/// What a file type that is not a regular file is, in words: `is a FIFO, not a regular
/// file`.
fn not_a_file(kind: std::fs::FileType) -> Option<String> {
    use std::os::unix::fs::FileTypeExt;
    let what = if kind.is_file() {
        return None;
    } else if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a device"
    };
    Some(format!("is {what}, not a regular file"))
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
                by_gpufill: true,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufill_nvml::ProcessEntry;
    use std::io::{BufRead, BufReader, Read};
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command, Stdio};

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

    fn lock_path(dir: &Path, index: u32) -> std::path::PathBuf {
        dir.join(format!(
            "GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd.lock"
        ))
    }

    /// How many of `claimed` hold their GPU's lock.
    fn held(claimed: &[Claimed]) -> usize {
        claimed.iter().filter(|c| c.held().is_some()).count()
    }

    /// What holds the lock of the one GPU in `gpus` that waits (none held by a gpufill).
    fn waiting(dir: &Path, gpus: &[Gpu]) -> ClaimError {
        let mut waiting = claim_all(dir, gpus)
            .unwrap()
            .into_iter()
            .filter_map(|c| match c {
                Claimed::Waiting(e) => Some(e),
                _ => None,
            });
        let e = waiting.next().expect("a GPU that waits");
        assert!(waiting.next().is_none(), "one GPU waits");
        e
    }

    #[test]
    fn a_second_claim_of_a_gpu_is_refused_naming_the_first_until_it_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = claim_all(dir.path(), &[gpu(0), gpu(1)]).unwrap();
        assert_eq!(held(&first), 2);
        let e = claim_all(dir.path(), &[gpu(1)]).unwrap_err();
        assert!(e.by_gpufill);
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
        assert_eq!(held(&claim_all(dir.path(), &[gpu(2)]).unwrap()), 1);
        // Beside it a GPU another gpufill holds: refused for all, the free one released.
        claim_all(dir.path(), &[gpu(3), gpu(1)]).unwrap_err();
        assert_eq!(held(&claim_soon(dir.path(), &[gpu(3)])), 1);
        drop(first);
        assert_eq!(held(&claim_soon(dir.path(), &[gpu(1)])), 1);
    }

    /// `claim_all`, tried for up to 2 s: a lock dropped here can stay held a moment
    /// longer by a child that another test of this binary forks meanwhile (it shares
    /// the open lock file until it execs, which closes it), as 2 runs in 20 showed.
    fn claim_soon(dir: &Path, gpus: &[Gpu]) -> Vec<Claimed> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        loop {
            match claim_all(dir, gpus) {
                Ok(claims) => return claims,
                Err(e) if std::time::Instant::now() >= deadline => panic!("{e}"),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        }
    }

    const HOLD: &str = "GPUFILL_TEST_HOLD";
    const RECORD: &str = "GPUFILL_TEST_RECORD";
    const HOLDING_TEST: &str =
        "claim::tests::a_lock_held_by_another_process_is_judged_by_that_process";

    /// Another process (this test binary again, named `gpufill` when `as_gpufill`) that
    /// writes `record` (`{pid}`: its PID) into `path` and holds a lock on it until its
    /// stdin closes; returned once it holds the lock.
    fn holder_process(path: &Path, as_gpufill: bool, record: &str) -> Child {
        let mut command = Command::new(std::env::current_exe().unwrap());
        if as_gpufill {
            command.arg0("gpufill");
        }
        let mut child = command
            .args(["--exact", HOLDING_TEST, "--nocapture", "--test-threads=1"])
            .env(HOLD, path)
            .env(RECORD, record)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // libtest prints the test's name first, on the same line.
        let held = lines
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.ends_with("held"));
        assert!(held, "the holder process never held the lock");
        // The rest (libtest's report) is read, so that the holder never writes into a
        // closed pipe.
        std::thread::spawn(move || lines.for_each(drop));
        child
    }

    /// What [`holder_process`] runs.
    fn hold(path: &Path) {
        let record = std::env::var(RECORD).unwrap();
        let mut file = File::create(path).unwrap();
        let record = record.replace("{pid}", &std::process::id().to_string());
        file.write_all(record.as_bytes()).unwrap();
        assert!(lock(&file).unwrap());
        println!("held");
        let _ = io::stdin().read_to_end(&mut Vec::new());
    }

    fn release(mut child: Child) {
        drop(child.stdin.take());
        assert!(child.wait().unwrap().success());
    }

    #[test]
    fn a_lock_held_by_another_process_is_judged_by_that_process() {
        if let Some(path) = std::env::var_os(HOLD) {
            return hold(Path::new(&path));
        }
        let dir = tempfile::tempdir().unwrap();
        let path = lock_path(dir.path(), 0);
        // Not a gpufill, though its file says it is one: it never stops gpufill for
        // good. The claim names it and may be tried again, and succeeds once it is gone.
        let forged = "pid=77\nhost=node-a\nstarted_unix_s=1\n";
        let squatter = holder_process(&path, false, forged);
        // Only that GPU waits: the other one beside it is claimed.
        let claimed = claim_all(dir.path(), &[gpu(1), gpu(0)]).unwrap();
        assert!(claimed[0].held().is_some());
        assert!(matches!(&claimed[1], Claimed::Waiting(e) if !e.by_gpufill));
        drop(claimed);
        let e = claim_gpu(dir.path(), &gpu(0)).unwrap_err();
        assert!(!e.by_gpufill, "{e}");
        let exe = std::env::current_exe().unwrap();
        let text = e.to_string();
        assert!(
            text.starts_with(&format!(
                "GPU 0 (GPU-00000000-aaaa-bbbb-cccc-dddddddddddd) is held by something that is \
                 not a gpufill: pid {} ({}",
                squatter.id(),
                exe.display()
            )),
            "{text}"
        );
        assert!(
            text.ends_with(&format!("(it holds {})", path.display())),
            "{text}"
        );
        release(squatter);
        assert_eq!(held(&claim_all(dir.path(), &[gpu(0)]).unwrap()), 1);
        // A gpufill (its program is named gpufill): refused for good, named by its record.
        let other = holder_process(&path, true, "pid={pid}\nhost=node-b\nstarted_unix_s=1\n");
        let e = claim_all(dir.path(), &[gpu(0)]).unwrap_err();
        assert!(e.by_gpufill, "{e}");
        assert!(claim_gpu(dir.path(), &gpu(0)).unwrap_err().by_gpufill);
        assert!(
            e.other
                .starts_with(&format!("pid {} on host node-b, started ", other.id())),
            "{e}"
        );
        // Beside a free GPU and one a non-gpufill holds, the gpufill's refusal wins.
        let e = claim_all(dir.path(), &[gpu(1), gpu(0)]).unwrap_err();
        assert!(e.by_gpufill, "{e}");
        release(other);
    }

    /// Plants `what` at GPU 0's lock path and checks that the claim is held off, naming
    /// it, that the victim (if any) is untouched, and that the claim succeeds once it
    /// is removed.
    fn planted(what: &str, plant: impl FnOnce(&Path, &Path)) {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let path = lock_path(dir.path(), 0);
        plant(&path, &victim);
        let e = waiting(dir.path(), &[gpu(0)]);
        assert!(!e.by_gpufill, "{what}: {e}");
        assert_eq!(
            e.other,
            format!("{} {what}: remove it", path.display()),
            "{what}"
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        if path.is_dir() {
            std::fs::remove_dir(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
        assert_eq!(
            held(&claim_all(dir.path(), &[gpu(0)]).unwrap()),
            1,
            "{what}"
        );
    }

    #[test]
    fn a_planted_link_fifo_or_directory_holds_the_gpu_until_it_is_removed() {
        planted("is a symbolic link, not a regular file", |path, victim| {
            std::os::unix::fs::symlink(victim, path).unwrap();
        });
        planted("has 2 links (a hard link)", |path, victim| {
            std::fs::hard_link(victim, path).unwrap();
        });
        planted("is a FIFO, not a regular file", |path, _| {
            let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: mkfifo reads the NUL-terminated path, which `c` owns for the call.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        });
        planted("is a directory, not a regular file", |path, _| {
            std::fs::create_dir(path).unwrap();
        });
    }

    #[test]
    fn a_lock_file_anyone_could_have_made_is_not_trusted() {
        let (me, other, root) = (1000, 1001, 0);
        // A directory only its owner and group may write: whoever made the file may.
        assert!(!untrusted_owner(other, 0o2770, me, me));
        // One any user may write: only ourselves, root and its owner.
        assert!(untrusted_owner(other, 0o1777, root, me));
        assert!(!untrusted_owner(me, 0o1777, root, me));
        assert!(!untrusted_owner(root, 0o1777, root, me));
        assert!(!untrusted_owner(other, 0o1777, other, me));
    }

    #[test]
    fn a_directory_that_cannot_be_used_claims_nothing_and_refuses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let not_a_dir = dir.path().join("file");
        std::fs::write(&not_a_dir, "").unwrap();
        for dir in [not_a_dir.clone(), not_a_dir.join("sub")] {
            let claimed = claim_all(&dir, &[gpu(0), gpu(1)]).unwrap();
            assert!(claimed.iter().all(|c| matches!(c, Claimed::Unclaimed)));
        }
    }

    #[test]
    fn an_unwritable_directory_is_reported_as_permission_denied_not_as_missing() {
        let denied = || io::Error::from(io::ErrorKind::PermissionDenied);
        let missing = io::Error::from(io::ErrorKind::NotFound);
        let chosen = read_error(denied(), missing);
        assert_eq!(chosen.kind(), io::ErrorKind::PermissionDenied);
        // A read that failed for a reason of its own is that reason.
        let busy = io::Error::from(io::ErrorKind::ResourceBusy);
        assert_eq!(
            read_error(denied(), busy).kind(),
            io::ErrorKind::ResourceBusy
        );
    }

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn a_directory_made_for_claims_and_its_files_are_closed_to_other_users() {
        let dir = tempfile::tempdir().unwrap();
        let claims_dir = dir.path().join("gpufill");
        let claims = claim_all(&claims_dir, &[gpu(0)]).unwrap();
        assert_eq!(mode(&claims_dir), 0o2770);
        assert_eq!(mode(&lock_path(&claims_dir, 0)), 0o660);
        drop(claims);
        // An older gpufill's directory, open to all, is closed where we own it.
        set_mode(&claims_dir, 0o1777).unwrap();
        let _claims = claim_all(&claims_dir, &[gpu(0)]).unwrap();
        assert_eq!(mode(&claims_dir), 0o2770);
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
