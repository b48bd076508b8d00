//! Whether the config file's writer is done with it: an inotify watch on the file's
//! directory (and on the directory of the file a symlink leads to, when it is another)
//! follows every write to the file, every close after a write and every rename onto it.
//!
//! A writer in place (an editor saving over the file, `cat > file`, a script's two
//! `write`s 150 ms apart) makes the file [`writing`](Seen::writing) from its first write
//! (`IN_MODIFY`, the truncation included) until it closes the file (`IN_CLOSE_WRITE`).
//! A writer that renames a finished file over it (`IN_MOVED_TO`), or deletes it, leaves
//! nothing half-written. So a reader that finds the file not being written, and no event
//! on it while it read, has read one complete version. The watch is on the directory,
//! not the file, so that it follows the name across renames; events on other names in
//! the directory are skipped (a Kubernetes ConfigMap's `..data` swap is a rename of a
//! directory link, complete as it happens).
//!
//! A writer that already held the file open, half-written, when gpufill started is not
//! seen, nor one that writes through `mmap`. Where inotify cannot be used (not Linux,
//! the per-user instance limit reached) [`FileWatch::on`] says so, and [`Reload::next`]
//! falls back to waiting for the file to settle.

use std::path::Path;

#[cfg(doc)]
use super::Reload;
use super::{Seen, Watch};

/// An inotify watch on the directories of a config file.
#[derive(Debug)]
pub struct FileWatch {
    #[cfg(target_os = "linux")]
    inner: Option<linux::Inotify>,
    writing: bool,
}

impl FileWatch {
    /// A watch on `path`'s directory and on that of the file it resolves to; one that
    /// is not active ([`Watch::active`]) where inotify cannot watch the first (the
    /// reason is logged).
    pub fn on(path: &Path) -> FileWatch {
        #[cfg(target_os = "linux")]
        {
            let inner = linux::Inotify::on(path)
                .map_err(|e| {
                    tracing::warn!(
                        file = %path.display(),
                        "cannot watch the config file's directory ({e}): a reload waits for \
                         the file to stay unchanged instead of for its writer to close it"
                    );
                })
                .ok();
            FileWatch {
                inner,
                writing: false,
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = path;
            FileWatch { writing: false }
        }
    }
}

impl Watch for FileWatch {
    /// Whether the watch follows the file (else a reload must wait for the file to
    /// settle).
    fn active(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.inner.is_some()
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }

    /// Takes in the events queued since the last call (without waiting).
    fn update(&mut self) -> Seen {
        let mut seen = Seen {
            writing: self.writing,
            changed: false,
        };
        #[cfg(target_os = "linux")]
        if let Some(inotify) = &mut self.inner {
            match inotify.drain(&mut seen) {
                Ok(()) => {}
                Err(e) => {
                    tracing::warn!(
                        "the config file's watch ended ({e}): a reload waits for the file to \
                         stay unchanged instead"
                    );
                    self.inner = None;
                    seen = Seen {
                        writing: false,
                        changed: true,
                    };
                }
            }
        }
        self.writing = seen.writing;
        seen
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::ffi::{CString, OsStr, OsString};
    use std::fs::File;
    use std::io::{self, ErrorKind, Read};
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    use super::Seen;

    /// What a watch on a directory listens to for the config file's name.
    const MASK: u32 = libc::IN_MODIFY
        | libc::IN_CLOSE_WRITE
        | libc::IN_MOVED_TO
        | libc::IN_MOVED_FROM
        | libc::IN_CREATE
        | libc::IN_DELETE;

    /// The fixed part of `struct inotify_event`: wd, mask, cookie, len.
    const HEADER: usize = 16;

    /// An inotify instance with one watch per directory, each for one file name.
    #[derive(Debug)]
    pub(super) struct Inotify {
        file: File,
        /// `(watch descriptor, file name)`; the first is the path as given.
        names: Vec<(i32, OsString)>,
    }

    impl Inotify {
        /// Watches the directory of `path` and, when a symlink leads elsewhere, the
        /// directory of the file it resolves to.
        pub(super) fn on(path: &Path) -> io::Result<Inotify> {
            // SAFETY: inotify_init1 takes flags only; a non-negative result is a new file
            // descriptor that nothing else owns.
            let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
            if raw < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `raw` is a valid descriptor we own (above).
            let file = File::from(unsafe { OwnedFd::from_raw_fd(raw) });
            let mut inotify = Inotify {
                file,
                names: Vec::new(),
            };
            inotify.add(path)?;
            if let Ok(resolved) = std::fs::canonicalize(path) {
                let same = std::fs::canonicalize(dir_of(path)).ok().as_deref()
                    == Some(dir_of(&resolved))
                    && path.file_name() == resolved.file_name();
                if !same {
                    // The file a symlink leads to: written in place there, if at all.
                    let _ = inotify.add(&resolved);
                }
            }
            Ok(inotify)
        }

        fn add(&mut self, path: &Path) -> io::Result<()> {
            let name = path
                .file_name()
                .ok_or_else(|| io::Error::new(ErrorKind::InvalidInput, "no file name"))?;
            let dir = CString::new(dir_of(path).as_os_str().as_bytes())?;
            use std::os::fd::AsRawFd;
            // SAFETY: the descriptor is an inotify instance's and `dir` a NUL-terminated
            // path that outlives the call.
            let wd = unsafe {
                libc::inotify_add_watch(
                    self.file.as_raw_fd(),
                    dir.as_ptr(),
                    MASK | libc::IN_ONLYDIR,
                )
            };
            if wd < 0 {
                return Err(io::Error::last_os_error());
            }
            self.names.push((wd, name.to_owned()));
            Ok(())
        }

        /// Reads every queued event into `seen`; an error when the first watch has
        /// gone (its directory removed or unmounted) or the instance fails.
        pub(super) fn drain(&mut self, seen: &mut Seen) -> io::Result<()> {
            let mut buf = [0u8; 4096];
            loop {
                let n = match self.file.read(&mut buf) {
                    Ok(n) => n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                let mut at = 0;
                while at + HEADER <= n {
                    let field = |i: usize| {
                        let mut four = [0u8; 4];
                        four.copy_from_slice(&buf[at + i..at + i + 4]);
                        four
                    };
                    let wd = i32::from_ne_bytes(field(0));
                    let mask = u32::from_ne_bytes(field(4));
                    let len = u32::from_ne_bytes(field(12)) as usize;
                    let end = (at + HEADER + len).min(n);
                    let name = &buf[at + HEADER..end];
                    let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                    self.take(wd, mask, OsStr::from_bytes(name), seen)?;
                    at = end;
                }
            }
        }

        fn take(&mut self, wd: i32, mask: u32, name: &OsStr, seen: &mut Seen) -> io::Result<()> {
            if mask & libc::IN_Q_OVERFLOW != 0 {
                // Events were lost: what the writer did is unknown, so the next read
                // must be checked again.
                seen.changed = true;
                return Ok(());
            }
            if mask & libc::IN_IGNORED != 0 {
                if self.names.first().is_some_and(|(first, _)| *first == wd) {
                    return Err(io::Error::other("the directory is gone"));
                }
                self.names.retain(|(w, _)| *w != wd);
                return Ok(());
            }
            if !self.names.iter().any(|(w, n)| *w == wd && n == name) {
                return Ok(());
            }
            seen.changed = true;
            if mask & libc::IN_MODIFY != 0 {
                seen.writing = true;
            }
            if mask
                & (libc::IN_CLOSE_WRITE | libc::IN_MOVED_TO | libc::IN_MOVED_FROM | libc::IN_DELETE)
                != 0
            {
                seen.writing = false;
            }
            Ok(())
        }
    }

    /// The directory of `path` (`.` for a bare file name).
    fn dir_of(path: &Path) -> &Path {
        match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Write;

    fn watched() -> (tempfile::TempDir, std::path::PathBuf, FileWatch) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.toml");
        std::fs::write(&path, "target_percent = 30\n").unwrap();
        let watch = FileWatch::on(&path);
        assert!(watch.active());
        (dir, path, watch)
    }

    #[test]
    fn a_writer_in_place_is_writing_from_its_first_write_until_it_closes() {
        let (_dir, path, mut watch) = watched();
        assert_eq!(watch.update(), Seen::default());
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(b"target_percent = 40\n").unwrap();
        let seen = watch.update();
        assert!(seen.writing && seen.changed, "{seen:?}");
        // Still open, nothing new: still being written.
        assert_eq!(
            watch.update(),
            Seen {
                writing: true,
                changed: false
            }
        );
        f.write_all(b"[yield]\ngrace_s = 2\n").unwrap();
        drop(f);
        let seen = watch.update();
        assert!(!seen.writing && seen.changed, "{seen:?}");
    }

    #[test]
    fn a_file_renamed_into_place_is_complete_and_other_names_do_not_count() {
        let (dir, path, mut watch) = watched();
        let tmp = dir.path().join("g.toml.tmp");
        let mut f = std::fs::File::create(&tmp).unwrap();
        f.write_all(b"target_percent = 40\n").unwrap();
        assert_eq!(watch.update(), Seen::default(), "another name");
        drop(f);
        std::fs::rename(&tmp, &path).unwrap();
        let seen = watch.update();
        assert!(!seen.writing && seen.changed, "{seen:?}");
    }

    #[test]
    fn writes_through_a_symlink_are_seen_in_the_directory_it_leads_to() {
        let (dir, target, _) = watched();
        let links = tempfile::tempdir().unwrap();
        let link = links.path().join("gpufill.toml");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let mut watch = FileWatch::on(&link);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("g.toml"))
            .unwrap();
        f.write_all(b"# more\n").unwrap();
        assert!(watch.update().writing);
        drop(f);
        assert!(!watch.update().writing);
    }

    #[test]
    fn a_directory_that_cannot_be_watched_leaves_the_watch_inactive() {
        let mut watch = FileWatch::on(Path::new("/nonexistent/dir/g.toml"));
        assert!(!watch.active());
        assert_eq!(watch.update(), Seen::default());
    }
}
