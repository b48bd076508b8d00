//! The server's connection slots: at most `max` connections are served at once, and a
//! newcomer is not turned away while a slot is held by a client that is slow to ask.
//!
//! A connection holds its slot in one of three [`Phase`]s. When every slot is taken,
//! a newcomer takes the slot of another connection, evicted in this order:
//! 1. one whose answer is sent and that is only being drained ([`Phase::Linger`]);
//! 2. one whose request head is still arriving ([`Phase::Head`]), the oldest first:
//!    a client that trickles its head (or sends nothing) can hold a slot only until
//!    newer clients need it, so slow clients cannot starve a health probe, which sends
//!    its whole head at once and is answered within the millisecond;
//! 3. as a last resort, one being answered ([`Phase::Answer`]), the oldest first.
//!
//! A connection that had sent nothing when it was accepted, less than
//! [`LATE_PROBE_WAIT`] ago, and whose head has not arrived since, is never evicted: a
//! probe may be accepted between its handshake and its head, and when a burst of slow
//! clients was accepted right behind it, the fourth evicted it before its head was
//! there (1 probe in 100 answered `408`, beside 200 slow clients and 4 slots). A client
//! that sent part of a head at once is no such probe, and goes as before. When every
//! slot is held by a connection kept so, none is evicted and the newcomer is refused
//! (by the caller, which gives a probe the same wait for its head).
//!
//! Evicting shuts the connection's socket down under its thread (its read returns at
//! once; an answer being written fails), which then ends by itself. Threads still
//! ending count against a hard cap of twice `max`; only beyond it is a newcomer
//! answered `503` (by the caller).

use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use super::LATE_PROBE_WAIT;

/// Where a connection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Its request head is arriving.
    Head,
    /// Its answer is being written.
    Answer,
    /// Its answer is sent; its input is being drained before closing.
    Linger,
}

impl Phase {
    /// The order of eviction: lower goes first.
    fn rank(self) -> u8 {
        match self {
            Phase::Linger => 0,
            Phase::Head => 1,
            Phase::Answer => 2,
        }
    }
}

#[derive(Debug)]
struct Entry {
    id: u64,
    /// A handle on the connection's socket, to shut it down when evicted.
    stream: TcpStream,
    accepted: Instant,
    /// Nothing had arrived when it was accepted.
    silent: bool,
    phase: Phase,
    evicted: bool,
}

impl Entry {
    /// Whether it may be a probe whose head is still on its way, as a probe's can be
    /// for a moment after its handshake: it had sent nothing when accepted, moments
    /// ago, and its head is still awaited.
    fn head_may_be_on_its_way(&self, now: Instant) -> bool {
        self.silent
            && self.phase == Phase::Head
            && now.saturating_duration_since(self.accepted) < LATE_PROBE_WAIT
    }
}

/// The slots of one server.
#[derive(Debug)]
pub(super) struct Slots {
    max: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    entries: Vec<Entry>,
}

/// A connection's slot, given back when dropped (also on a panic).
#[derive(Debug)]
pub(super) struct Slot {
    slots: Arc<Slots>,
    id: u64,
}

impl Slots {
    /// Slots for `max` connections at once.
    pub(super) fn new(max: usize) -> Arc<Slots> {
        Arc::new(Slots {
            max,
            inner: Mutex::new(Inner::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for `stream`, accepted at `now` (`silent`: nothing had arrived on it
    /// then), evicting another connection if every slot is taken; `None` when even the
    /// threads of evicted connections fill the hard cap, when no connection may be
    /// evicted, or when the socket cannot be shared.
    pub(super) fn take(
        self: &Arc<Self>,
        stream: &TcpStream,
        now: Instant,
        silent: bool,
    ) -> Option<Slot> {
        let mut inner = self.lock();
        if inner.entries.len() >= 2 * self.max {
            return None;
        }
        let live = inner.entries.iter().filter(|e| !e.evicted).count();
        if live >= self.max {
            let victim = inner
                .entries
                .iter_mut()
                .filter(|e| !e.evicted && !e.head_may_be_on_its_way(now))
                .min_by_key(|e| (e.phase.rank(), e.accepted))?;
            victim.evicted = true;
            let how = match victim.phase {
                Phase::Answer => Shutdown::Both,
                Phase::Head | Phase::Linger => Shutdown::Read,
            };
            let _ = victim.stream.shutdown(how);
        }
        let id = inner.next_id;
        inner.next_id += 1;
        inner.entries.push(Entry {
            id,
            stream: stream.try_clone().ok()?,
            accepted: now,
            silent,
            phase: Phase::Head,
            evicted: false,
        });
        Some(Slot {
            slots: Arc::clone(self),
            id,
        })
    }

    /// Connections served now, evicted ones not counted.
    #[cfg(test)]
    pub(super) fn live(&self) -> usize {
        self.lock().entries.iter().filter(|e| !e.evicted).count()
    }
}

impl Slot {
    /// Moves the connection on to `phase`.
    pub(super) fn enter(&self, phase: Phase) {
        if let Some(e) = self
            .slots
            .lock()
            .entries
            .iter_mut()
            .find(|e| e.id == self.id)
        {
            e.phase = phase;
        }
    }

    /// Whether another connection took this one's slot.
    pub(super) fn evicted(&self) -> bool {
        self.slots
            .lock()
            .entries
            .iter()
            .find(|e| e.id == self.id)
            .is_some_and(|e| e.evicted)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.lock().entries.retain(|e| e.id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpListener;

    /// A connected pair: (ours, the client's).
    fn pair(listener: &TcpListener) -> (TcpStream, TcpStream) {
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        (listener.accept().unwrap().0, client)
    }

    /// Whether our side of a connection was shut down for reading.
    fn shut(ours: &mut TcpStream) -> bool {
        ours.set_read_timeout(Some(std::time::Duration::from_millis(50)))
            .unwrap();
        matches!(ours.read(&mut [0u8; 1]), Ok(0))
    }

    /// `ms` milliseconds after `t0`.
    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + std::time::Duration::from_millis(ms)
    }

    #[test]
    fn a_newcomer_evicts_a_draining_connection_then_the_oldest_head_never_one_answered_first() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let slots = Slots::new(3);
        let t0 = Instant::now();
        let mut conns: Vec<_> = (0..3).map(|_| pair(&listener)).collect();
        let held: Vec<Slot> = conns
            .iter()
            .map(|(s, _)| slots.take(s, t0, true).unwrap())
            .collect();
        held[0].enter(Phase::Answer);
        held[2].enter(Phase::Linger);
        let (new1, _c1) = pair(&listener);
        let s1 = slots.take(&new1, at(t0, 1000), true).unwrap();
        assert!(held[2].evicted() && !held[1].evicted() && !held[0].evicted());
        assert!(shut(&mut conns[2].0));
        let (new2, _c2) = pair(&listener);
        let _s2 = slots.take(&new2, at(t0, 1000), true).unwrap();
        assert!(held[1].evicted(), "the oldest still sending its head");
        assert!(!held[0].evicted() && !s1.evicted());
        assert_eq!(slots.live(), 3);
        // Every other is being answered: the oldest of those goes.
        s1.enter(Phase::Answer);
        _s2.enter(Phase::Answer);
        let (new3, _c3) = pair(&listener);
        let _s3 = slots.take(&new3, at(t0, 1000), true).unwrap();
        assert!(held[0].evicted() && !s1.evicted());
    }

    #[test]
    fn a_connection_whose_head_may_still_be_on_its_way_is_not_evicted() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let slots = Slots::new(2);
        let t0 = Instant::now();
        let conns: Vec<_> = (0..4).map(|_| pair(&listener)).collect();
        let a = slots.take(&conns[0].0, t0, true).unwrap();
        let b = slots.take(&conns[1].0, at(t0, 1), true).unwrap();
        // Both heads are awaited and both were accepted within the wait: none goes.
        assert!(slots.take(&conns[2].0, at(t0, 4), true).is_none());
        assert!(!a.evicted() && !b.evicted());
        // One being answered may go, however young.
        b.enter(Phase::Answer);
        let c = slots.take(&conns[2].0, at(t0, 4), true).unwrap();
        assert!(b.evicted() && !a.evicted());
        // Once the wait has passed, a head still awaited is a slow client's.
        let wait = u64::try_from(LATE_PROBE_WAIT.as_millis()).unwrap();
        let _d = slots.take(&conns[3].0, at(t0, wait), true).unwrap();
        assert!(a.evicted() && !c.evicted());
    }

    #[test]
    fn a_connection_that_sent_part_of_its_head_at_once_is_no_probe_on_its_way() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let slots = Slots::new(1);
        let t0 = Instant::now();
        let (a, _ca) = pair(&listener);
        let (b, _cb) = pair(&listener);
        let sa = slots.take(&a, t0, false).unwrap();
        let sb = slots.take(&b, at(t0, 1), true).unwrap();
        assert!(sa.evicted() && !sb.evicted());
    }

    #[test]
    fn threads_of_evicted_connections_count_against_a_hard_cap_until_they_end() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let slots = Slots::new(1);
        let t0 = Instant::now();
        let (a, _ca) = pair(&listener);
        let (b, _cb) = pair(&listener);
        let (c, _cc) = pair(&listener);
        let sa = slots.take(&a, t0, true).unwrap();
        let sb = slots.take(&b, at(t0, 1000), true).unwrap();
        assert!(sa.evicted());
        assert!(
            slots.take(&c, at(t0, 2000), true).is_none(),
            "a and b's threads still run"
        );
        drop(sa);
        let sc = slots.take(&c, at(t0, 2000), true).unwrap();
        assert!(sb.evicted() && !sc.evicted());
    }
}
