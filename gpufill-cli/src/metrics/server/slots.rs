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
//! Evicting shuts the connection's socket down under its thread (its read returns at
//! once; an answer being written fails), which then ends by itself. Threads still
//! ending count against a hard cap of twice `max`; only beyond it is a newcomer
//! answered `503` (by the caller).

use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

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
    phase: Phase,
    evicted: bool,
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

    /// A slot for `stream`, evicting another connection if every slot is taken; `None`
    /// when even the threads of evicted connections fill the hard cap, or the socket
    /// cannot be shared.
    pub(super) fn take(self: &Arc<Self>, stream: &TcpStream) -> Option<Slot> {
        let mut inner = self.lock();
        if inner.entries.len() >= 2 * self.max {
            return None;
        }
        let live = inner.entries.iter().filter(|e| !e.evicted).count();
        if live >= self.max {
            let victim = inner
                .entries
                .iter_mut()
                .filter(|e| !e.evicted)
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
            accepted: Instant::now(),
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

    #[test]
    fn a_newcomer_evicts_a_draining_connection_then_the_oldest_head_never_one_answered_first() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let slots = Slots::new(3);
        let mut conns: Vec<_> = (0..3).map(|_| pair(&listener)).collect();
        let held: Vec<Slot> = conns.iter().map(|(s, _)| slots.take(s).unwrap()).collect();
        held[0].enter(Phase::Answer);
        held[2].enter(Phase::Linger);
        let (new1, _c1) = pair(&listener);
        let s1 = slots.take(&new1).unwrap();
        assert!(held[2].evicted() && !held[1].evicted() && !held[0].evicted());
        assert!(shut(&mut conns[2].0));
        let (new2, _c2) = pair(&listener);
        let _s2 = slots.take(&new2).unwrap();
        assert!(held[1].evicted(), "the oldest still sending its head");
        assert!(!held[0].evicted() && !s1.evicted());
        assert_eq!(slots.live(), 3);
        // Every other is being answered: the oldest of those goes.
        s1.enter(Phase::Answer);
        _s2.enter(Phase::Answer);
        let (new3, _c3) = pair(&listener);
        let _s3 = slots.take(&new3).unwrap();
        assert!(held[0].evicted() && !s1.evicted());
    }

    #[test]
    fn threads_of_evicted_connections_count_against_a_hard_cap_until_they_end() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let slots = Slots::new(1);
        let (a, _ca) = pair(&listener);
        let (b, _cb) = pair(&listener);
        let (c, _cc) = pair(&listener);
        let sa = slots.take(&a).unwrap();
        let sb = slots.take(&b).unwrap();
        assert!(sa.evicted());
        assert!(slots.take(&c).is_none(), "a and b's threads still run");
        drop(sa);
        let sc = slots.take(&c).unwrap();
        assert!(sb.evicted() && !sc.evicted());
    }
}
