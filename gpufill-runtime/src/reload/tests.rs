use std::cell::Cell;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

const QUICK: Settle = Settle {
    quiet: Duration::from_millis(40),
    limit: Duration::from_millis(400),
};

const FULL: &str = "target_percent = 30\n[yield]\ngrace_s = 2\nignore_names = [\"dcgm\"]\n";

/// The reads a [`Settling`] takes, `QUICK.quiet / 2` apart from a start in virtual
/// time, each of them `read(n)`; its steps.
fn settle_steps(mut read: impl FnMut(u32) -> Read) -> Vec<Step> {
    let start = Instant::now();
    let mut settling = Settling::new(start);
    let mut steps = Vec::new();
    for n in 0..100 {
        let now = start + QUICK.quiet / 2 * n;
        let step = settling.next(read(n), now, QUICK);
        let done = step != Step::Wait;
        steps.push(step);
        if done {
            break;
        }
    }
    steps
}

#[test]
fn without_inotify_a_file_still_being_written_is_refused_once_the_limit_passes() {
    // Every read finds new text, just written: a writer that never stops.
    let steps = settle_steps(|n| (format!("{FULL}# {n}\n"), Some(SystemTime::now())));
    assert_eq!(steps.last(), Some(&Step::GiveUp));
    // Reads QUICK.quiet / 2 apart: the limit passes at the 21st.
    assert_eq!(steps.len(), 21);
}

#[test]
fn without_inotify_the_same_text_read_twice_a_quiet_apart_is_settled() {
    let old = SystemTime::now() - Duration::from_secs(1);
    let steps = settle_steps(|_| (FULL.to_string(), Some(old)));
    // The first read, one half a quiet later, then a whole quiet after the first.
    assert_eq!(
        steps,
        [Step::Wait, Step::Wait, Step::Load(FULL.to_string())]
    );
    // A modification time less than a quiet old is not settled yet.
    let steps = settle_steps(|_| (FULL.to_string(), Some(SystemTime::now())));
    assert_eq!(steps.last(), Some(&Step::GiveUp));
}

/// A watch that reports, at each update, the next of `seen` (then nothing new).
struct Scripted {
    active: bool,
    seen: Vec<Seen>,
}

impl Scripted {
    /// A watch that works, and sees `seen`, one at each look.
    fn working(seen: Vec<Seen>) -> Self {
        Scripted { active: true, seen }
    }
}

impl Watch for Scripted {
    fn active(&self) -> bool {
        self.active
    }

    fn update(&mut self) -> Seen {
        if self.seen.is_empty() {
            Seen::default()
        } else {
            self.seen.remove(0)
        }
    }
}

const WRITING: Seen = Seen {
    writing: true,
    changed: true,
};

const CLOSED: Seen = Seen {
    writing: false,
    changed: true,
};

fn full() -> Result<Read, Infallible> {
    Ok((FULL.to_string(), None))
}

#[test]
fn nothing_is_read_until_a_reload_is_asked() {
    let mut r = Reload::new(0);
    let read = Cell::new(0);
    let mut watch = Scripted::working(Vec::new());
    let next = r.next(Instant::now(), Some((&mut watch, Seen::default())), || {
        read.set(read.get() + 1);
        full()
    });
    assert_eq!(next, None);
    assert_eq!(read.get(), 0);
}

#[test]
fn a_writer_in_place_is_waited_for_said_once_and_its_closed_file_read() {
    let t = Instant::now();
    let mut r = Reload::new(0).with_settle(QUICK);
    let mut watch = Scripted::working(Vec::new());
    r.request(t);
    let first = r.next(t, Some((&mut watch, WRITING)), full);
    assert_eq!(first, Some(Next::Waiting { first: true }));
    let again = r.next(t + QUICK.quiet, Some((&mut watch, WRITING)), full);
    assert_eq!(again, Some(Next::Waiting { first: false }));
    assert!(r.pending());
    let done = r.next(t + QUICK.quiet * 2, Some((&mut watch, CLOSED)), full);
    assert_eq!(done, Some(Next::Text(FULL.to_string())));
    assert!(!r.pending(), "answered");
}

#[test]
fn a_writer_that_never_closes_is_refused_at_the_limit() {
    let t = Instant::now();
    let mut r = Reload::new(0).with_settle(QUICK);
    let mut watch = Scripted::working(Vec::new());
    r.request(t);
    let before = r.next(t + QUICK.limit / 2, Some((&mut watch, WRITING)), full);
    assert!(matches!(before, Some(Next::Waiting { .. })));
    let at = r.next(t + QUICK.limit, Some((&mut watch, WRITING)), full);
    assert_eq!(at, Some(Next::Unsettled(QUICK.limit)));
    assert!(!r.pending());
}

#[test]
fn a_file_replaced_during_its_read_is_read_again_and_the_last_complete_one_wins() {
    let t = Instant::now();
    let mut r = Reload::new(0);
    // Changed during the first read, quiet during the second.
    let mut watch = Scripted::working(vec![CLOSED]);
    let n = Cell::new(0);
    let read = || -> Result<Read, Infallible> {
        n.set(n.get() + 1);
        Ok((format!("# read {}\n", n.get()), None))
    };
    r.request(t);
    let next = r.next(t, Some((&mut watch, Seen::default())), read);
    assert_eq!(next, Some(Next::Text("# read 2\n".to_string())));
    // Changed during every read: the last of three.
    let mut watch = Scripted::working(vec![CLOSED; 3]);
    r.request(t);
    let next = r.next(t, Some((&mut watch, Seen::default())), read);
    assert_eq!(next, Some(Next::Text("# read 5\n".to_string())));
    // A writer that began during the read: wait for it.
    let mut watch = Scripted::working(vec![WRITING]);
    r.request(t);
    let next = r.next(t, Some((&mut watch, Seen::default())), read);
    assert_eq!(next, Some(Next::Waiting { first: true }));
}

#[test]
fn an_inactive_watch_falls_back_to_the_settle_rule_and_a_failed_read_ends_the_reload() {
    let t = Instant::now();
    let mut r = Reload::new(0).with_settle(QUICK);
    let mut watch = Scripted {
        active: false,
        seen: vec![WRITING],
    };
    let old = SystemTime::now() - Duration::from_secs(1);
    let settled = || Ok::<_, Infallible>((FULL.to_string(), Some(old)));
    r.request(t);
    let first = r.next(t, Some((&mut watch, WRITING)), settled);
    assert_eq!(first, Some(Next::Waiting { first: true }));
    let second = r.next(t + QUICK.quiet, None::<(&mut Scripted, _)>, settled);
    assert_eq!(second, Some(Next::Text(FULL.to_string())));
    r.request(t);
    let failed = r.next(t, None::<(&mut Scripted, _)>, || Err("gone"));
    assert_eq!(failed, Some(Next::Failed("gone")));
    assert!(!r.pending());
}

#[test]
fn a_proposal_is_in_force_only_once_committed() {
    let mut r = Reload::new(30);
    let proposal = r.propose(39, vec!["tick_ms"]);
    assert_eq!((*proposal.config(), *r.current()), (39, 30));
    drop(proposal);
    assert_eq!(*r.current(), 30, "refused: the settings in force stay");
    let proposal = r.propose(40, vec!["tick_ms"]);
    assert_eq!(r.commit(proposal), ["tick_ms"]);
    assert_eq!(*r.current(), 40);
}

// A real file, watched by a `FileWatch`, racing its writers: only whole files are taken.

/// A file holding `text`, its watch, and the settings in force: the text.
fn file_with(text: &str) -> (tempfile::TempDir, PathBuf, FileWatch, Reload<String>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.toml");
    std::fs::write(&path, text).unwrap();
    let watch = FileWatch::on(&path);
    (
        dir,
        path,
        watch,
        Reload::new(text.to_owned()).with_settle(QUICK),
    )
}

fn read_file(path: &Path) -> std::io::Result<Read> {
    let text = std::fs::read_to_string(path)?;
    Ok((text, std::fs::metadata(path)?.modified().ok()))
}

/// A reload asked for now and taken a step at a time until it is answered, as the
/// binary's loops take it at each poll; the text it put in force, if any.
fn reload_file(r: &mut Reload<String>, watch: &mut FileWatch, path: &Path) -> Option<String> {
    r.request(Instant::now());
    loop {
        let seen = watch.update();
        match r.next(Instant::now(), Some((&mut *watch, seen)), || {
            read_file(path)
        })? {
            Next::Waiting { .. } => std::thread::sleep(r.settle().quiet / 4),
            Next::Text(text) => {
                let proposal = r.propose(text, Vec::new());
                r.commit(proposal);
                return Some(r.current().clone());
            }
            Next::Unsettled(_) | Next::Failed(_) => return None,
        }
    }
}

#[test]
fn reloads_racing_a_writer_that_truncates_and_rewrites_take_only_the_whole_file() {
    let (_dir, path, mut watch, mut r) = file_with(FULL);
    let writing = Arc::new(AtomicBool::new(true));
    let writer = {
        let (path, writing) = (path.clone(), Arc::clone(&writing));
        std::thread::spawn(move || {
            use std::io::Write;
            let (head, tail) = FULL.split_at(FULL.find("[yield]").unwrap());
            let mut pause = 7u64;
            while writing.load(Ordering::Relaxed) {
                // As an editor saving in place: truncate, then write in two parts,
                // each a valid TOML document on its own.
                let mut f = std::fs::File::create(&path).unwrap();
                std::thread::sleep(Duration::from_millis(2));
                f.write_all(head.as_bytes()).unwrap();
                std::thread::sleep(Duration::from_millis(2));
                f.write_all(tail.as_bytes()).unwrap();
                drop(f);
                pause = (pause * 7 + 3) % 61;
                std::thread::sleep(Duration::from_millis(pause));
            }
        })
    };
    for _ in 0..12 {
        if let Some(new) = reload_file(&mut r, &mut watch, &path) {
            assert_eq!(new, FULL, "a reload applied {new:?}");
        }
        assert_eq!(r.current(), FULL);
        std::thread::sleep(Duration::from_millis(3));
    }
    writing.store(false, Ordering::Relaxed);
    writer.join().unwrap();
    // Once the writer is done, the file loads.
    assert_eq!(
        reload_file(&mut r, &mut watch, &path).as_deref(),
        Some(FULL)
    );
}

#[test]
fn a_writer_pausing_150_ms_between_two_writes_is_waited_for() {
    let (_dir, path, mut watch, r) = file_with(FULL);
    let mut r = r.with_settle(Settle::default());
    let (head, tail) = FULL.split_at(FULL.find("[yield]").unwrap());
    for _ in 0..3 {
        let (wrote_head, head_written) = std::sync::mpsc::channel();
        let writer = {
            let path = path.clone();
            std::thread::spawn(move || {
                use std::io::Write;
                let mut f = std::fs::File::create(&path).unwrap();
                f.write_all(head.as_bytes()).unwrap();
                wrote_head.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(150));
                f.write_all(tail.as_bytes()).unwrap();
            })
        };
        head_written.recv().unwrap();
        // A reload asked for between the two writes: the file is taken once it is closed.
        let new = reload_file(&mut r, &mut watch, &path).expect("the whole file, once written");
        assert_eq!(new, FULL, "a reload applied {new:?}");
        writer.join().unwrap();
    }
}

#[test]
fn a_writer_renaming_a_new_file_every_20_ms_never_blocks_a_reload() {
    let (dir, path, mut watch, r) = file_with(FULL);
    let mut r = r.with_settle(Settle::default());
    let writing = Arc::new(AtomicBool::new(true));
    let writer = {
        let (tmp, path, writing) = (
            dir.path().join("g.toml.new"),
            path.clone(),
            Arc::clone(&writing),
        );
        std::thread::spawn(move || {
            let mut n = 0u64;
            while writing.load(Ordering::Relaxed) {
                n += 1;
                let target = 40 + n % 20;
                std::fs::write(&tmp, format!("target_percent = {target}\n")).unwrap();
                std::fs::rename(&tmp, &path).unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    while std::fs::read_to_string(&path).unwrap() == FULL {
        std::thread::sleep(Duration::from_millis(5));
    }
    let whole = (40..60)
        .map(|t| format!("target_percent = {t}\n"))
        .collect::<Vec<_>>();
    for _ in 0..5 {
        let t = Instant::now();
        let new = reload_file(&mut r, &mut watch, &path).expect("the last complete file");
        assert!(whole.contains(&new), "{new:?}");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    }
    writing.store(false, Ordering::Relaxed);
    writer.join().unwrap();
}
