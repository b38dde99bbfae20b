//! The announcements a connection owes the peer (Linux `mptcp_pm_add_entry`
//! and `mptcp_pm_add_timer`): ADD_ADDRs of our addresses, retransmitted
//! until echoed and given up after [`ADD_ADDR_RETRANS_MAX`] retransmissions,
//! echoes of the peer's, and RM_ADDRs, each sent once. The queue decides
//! what is due and what happens after a segment carried it (or had no
//! room); the connection's segment hook puts it on the wire.

use mptun_time::{Duration, Instant};
use std::net::IpAddr;

/// Retransmissions of an unechoed ADD_ADDR before it is given up (Linux
/// `ADD_ADDR_RETRANS_MAX`), each `MptcpConfig::add_addr_timeout` apart.
pub(crate) const ADD_ADDR_RETRANS_MAX: u8 = 3;

/// How long a due announcement waits after a segment had no room for it
/// (its SACK blocks took the option space): a short retry rather than an
/// ACK asked for at once, forever.
pub(crate) const ADD_ADDR_NO_ROOM_RETRY: Duration = Duration::from_millis(10);

/// An announcement we owe the peer, or an echo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AddrAnnounce {
    pub id: u8,
    pub addr: IpAddr,
    pub port: Option<u16>,
    pub echo: bool,
    /// An RM_ADDR for `id` instead (sent once, as Linux sends it).
    pub remove: bool,
    /// Next (re)transmission.
    pub at: Instant,
    /// Transmissions so far: the first and at most `ADD_ADDR_RETRANS_MAX`
    /// retransmissions, as Linux.
    pub sent: u8,
}

/// The queue of announcements, echoes and removals owed, each with its
/// next (re)transmission.
#[derive(Clone, Debug)]
pub(crate) struct Announcements {
    queue: Vec<AddrAnnounce>,
    /// Retransmission interval of an unechoed ADD_ADDR (`add_addr_timeout`).
    timeout: Duration,
}

impl Announcements {
    pub fn new(timeout: Duration) -> Self {
        Announcements { queue: Vec::new(), timeout }
    }

    /// Nothing is owed.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// When the earliest announcement is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.queue.iter().map(|a| a.at).min()
    }

    /// The first announcement due at `now`, the one a segment should carry.
    pub fn due(&self, now: Instant) -> Option<AddrAnnounce> {
        self.queue.iter().find(|a| a.at <= now).copied()
    }

    /// Queues an announcement of our address `id` (or, `echo`, the echo of
    /// the peer's), due at `now`.
    pub fn queue(&mut self, id: u8, addr: IpAddr, port: Option<u16>, echo: bool, now: Instant) {
        self.queue.push(AddrAnnounce { id, addr, port, echo, remove: false, at: now, sent: 0 });
    }

    /// Queues the announcement of our address `id` again, due at `now`: an
    /// earlier announcement of `id` still owed is dropped, an RM_ADDR of it
    /// still queued goes first (the peer drops the old address before it
    /// hears of the new one).
    pub fn requeue(&mut self, id: u8, addr: IpAddr, port: Option<u16>, now: Instant) {
        self.echoed(id);
        self.queue(id, addr, port, false, now);
    }

    /// Queues the echo of the peer's announcement `id`, unless one is owed.
    pub fn queue_echo(&mut self, id: u8, addr: IpAddr, port: Option<u16>, now: Instant) {
        if !self.queue.iter().any(|a| a.echo && a.id == id) {
            self.queue(id, addr, port, true, now);
        }
    }

    /// The peer echoed our announcement `id`: its retransmissions stop.
    pub fn echoed(&mut self, id: u8) {
        self.queue.retain(|a| a.echo || a.remove || a.id != id);
    }

    /// Queues an RM_ADDR for our address `id`, due at `now`; an
    /// announcement of it not yet sent or echoed is dropped.
    pub fn queue_remove(&mut self, id: u8, now: Instant) {
        self.queue.retain(|a| a.echo || a.id != id);
        let addr = IpAddr::from([0, 0, 0, 0]);
        self.queue.push(AddrAnnounce { id, addr, port: None, echo: false, remove: true, at: now, sent: 0 });
    }

    /// Moves every announcement due at `now` out by `by`.
    pub fn postpone_due(&mut self, now: Instant, by: Duration) {
        for a in self.queue.iter_mut().filter(|a| a.at <= now) {
            a.at = now + by;
        }
    }

    /// No options go out any more: nothing is owed.
    pub fn clear(&mut self) {
        self.queue.clear();
    }

    /// What a segment did with the first announcement due at `now`
    /// ([`Announcements::due`]): `carried` it, or had no room (tried again
    /// after [`ADD_ADDR_NO_ROOM_RETRY`]). An echo or an RM_ADDR carried is
    /// done; an ADD_ADDR is retransmitted every `add_addr_timeout` until
    /// echoed, at most [`ADD_ADDR_RETRANS_MAX`] times (Linux
    /// `mptcp_pm_add_timer`).
    pub fn on_due_sent(&mut self, now: Instant, carried: bool) {
        let Some(i) = self.queue.iter().position(|a| a.at <= now) else { return };
        let a = &mut self.queue[i];
        if !carried {
            a.at = now + ADD_ADDR_NO_ROOM_RETRY;
            return;
        }
        if a.echo || a.remove {
            self.queue.remove(i);
            return;
        }
        a.sent = a.sent.saturating_add(1);
        if a.sent > ADD_ADDR_RETRANS_MAX {
            self.queue.remove(i);
        } else {
            a.at = now + self.timeout;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::ip;

    fn queue() -> (Announcements, Instant) {
        (Announcements::new(Duration::from_secs(2)), Instant::from_millis(1000))
    }

    #[test]
    fn an_unechoed_add_addr_is_sent_four_times_then_given_up() {
        let (mut q, mut now) = queue();
        q.queue(1, ip("10.0.0.2"), None, false, now);
        let mut sent = 0;
        while let Some(a) = q.due(now) {
            assert_eq!(a.id, 1);
            q.on_due_sent(now, true);
            sent += 1;
            if let Some(next) = q.next_due() {
                assert_eq!(next, now + Duration::from_secs(2), "retransmitted add_addr_timeout later");
                now = next;
            }
        }
        assert_eq!(sent, 1 + ADD_ADDR_RETRANS_MAX as usize);
        assert!(q.is_empty());
    }

    #[test]
    fn an_echo_stops_the_retransmissions_and_is_itself_sent_once() {
        let (mut q, now) = queue();
        q.queue(1, ip("10.0.0.2"), None, false, now);
        q.on_due_sent(now, true);
        q.echoed(1);
        assert!(q.is_empty());
        q.queue_echo(7, ip("10.0.1.1"), None, now);
        q.queue_echo(7, ip("10.0.1.1"), None, now);
        assert!(q.due(now).is_some_and(|a| a.echo && a.id == 7));
        q.on_due_sent(now, true);
        assert!(q.is_empty(), "one echo owed per announcement, sent once");
    }

    #[test]
    fn no_room_retries_shortly_and_costs_no_retransmission() {
        let (mut q, now) = queue();
        q.queue(1, ip("10.0.0.2"), None, false, now);
        q.on_due_sent(now, false);
        assert_eq!(q.due(now), None);
        let later = now + ADD_ADDR_NO_ROOM_RETRY;
        assert_eq!(q.due(later).map(|a| a.sent), Some(0));
    }

    #[test]
    fn a_removal_drops_the_unsent_announcement_and_an_announcement_again_follows_it() {
        let (mut q, now) = queue();
        q.queue(1, ip("10.0.0.2"), None, false, now);
        q.queue_remove(1, now);
        assert!(q.due(now).is_some_and(|a| a.remove));
        q.requeue(1, ip("10.0.0.3"), None, now);
        q.on_due_sent(now, true);
        let a = q.due(now).expect("the new announcement is due next");
        assert_eq!((a.remove, a.addr), (false, ip("10.0.0.3")));
    }

    #[test]
    fn postponed_announcements_wait() {
        let (mut q, now) = queue();
        q.queue(1, ip("10.0.0.2"), None, false, now);
        q.postpone_due(now, Duration::from_millis(200));
        assert_eq!(q.next_due(), Some(now + Duration::from_millis(200)));
    }
}
