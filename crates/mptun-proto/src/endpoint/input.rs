//! Packet input: demultiplexing by 4-tuple, passive opens (bounded by the
//! half-open and connection limits), MP_JOIN SYNs by token, ICMP "too big",
//! and RSTs for strays (RFC 9293 3.10.7.1).

use super::{wrap_early_iss, ConnectionHandle, Endpoint, MAX_STATELESS, MAX_STRAY_RSTS};
use crate::mptcp::Connection;
use crate::seq::Seq;
use bytes::Bytes;
use mptun_time::Instant;
use mptun_wire::icmp::{parse_icmp_packet, Icmp, Unreachable};
use mptun_wire::tcp::OptionSummary;
use mptun_wire::{parse_tcp_packet, parse_tcp_packet_unverified, MptcpOption, TcpFlags, TcpHeader, TcpOptions};
use rand::Rng;
use std::net::SocketAddr;

impl Endpoint {
    /// Feeds one received IP packet. Malformed packets are counted and dropped.
    ///
    /// A TCP packet may be a super-segment of any length up to 64 KiB (a
    /// device's GRO or a peer's TSO, kept whole): the receiver takes it as
    /// one segment, as Linux takes a GRO skb.
    pub fn handle_packet(&mut self, now: Instant, packet: &[u8]) {
        self.input(now, packet, true, None);
    }

    /// As [`Self::handle_packet`] for a packet whose TCP checksum the device
    /// vouched for: the kernel verified it (virtio `DATA_VALID`) or the packet
    /// comes from a local stack that left the checksum to the hardware
    /// (`NEEDS_CSUM`, the field holding only the pseudo-header sum). Linux
    /// trusts both on receive (`skb_csum_unnecessary`); verifying again would
    /// be a pass over every byte for nothing, or, for a partial checksum, a
    /// wrong drop. The IPv4 header checksum is still checked.
    pub fn handle_packet_checksum_verified(&mut self, now: Instant, packet: &[u8]) {
        self.input(now, packet, false, None);
    }

    /// [`Self::handle_packet`] (or, if `checksum_verified`,
    /// [`Self::handle_packet_checksum_verified`]) for a packet the caller
    /// can lend as it is: the receive queues keep slices of it instead of
    /// copying its payload, and the buffer lives on until the application
    /// has read the last of them. Worth it for super-segments (see
    /// [`crate::RECV_ZERO_COPY_MIN`]). The memory budget charges what is
    /// kept, and the queues copy shared pieces shorter than that minimum
    /// (also what a partial read leaves of a long one), so a buffer of up
    /// to 64 KiB outlives at most four times what it is charged. That bound
    /// assumes `packet`'s allocation is about the packet's size: lend a
    /// packet's own buffer (as `PacketBatch::take_bytes` does), not a slice
    /// of a large receive area, which every kept piece would pin whole.
    pub fn handle_packet_bytes(&mut self, now: Instant, packet: Bytes, checksum_verified: bool) {
        self.input(now, &packet, !checksum_verified, Some(&packet));
    }

    fn input(&mut self, now: Instant, packet: &[u8], verify: bool, owner: Option<&Bytes>) {
        self.sync_dirty();
        let parsed = if verify { parse_tcp_packet(packet) } else { parse_tcp_packet_unverified(packet) };
        let pkt = match parsed {
            Ok(p) => p,
            Err(mptun_wire::Error::NotTcp) => {
                self.handle_non_tcp(now, packet);
                return;
            }
            Err(mptun_wire::Error::Unsupported) => {
                // Not ours to judge (fragments, extension headers).
                self.counters.mptun_not_tcp += 1;
                return;
            }
            Err(e) => {
                if e == mptun_wire::Error::BadChecksum && ip_header_checksum_ok(packet) {
                    self.counters.tcp_in_csum_errors += 1;
                }
                self.counters.tcp_in_errs += 1;
                self.counters.mptun_malformed += 1;
                return;
            }
        };
        let local = SocketAddr::new(pkt.dst, pkt.tcp.dst_port);
        let remote = SocketAddr::new(pkt.src, pkt.tcp.src_port);
        let opts = pkt.tcp.options.summary();
        if opts.malformed {
            self.counters.mptun_malformed += 1;
        }
        if let Some((h, idx)) = self.tuple_owner(&(local, remote)) {
            if idx == 0 && self.acks_a_cookie_instead(now, h, local, remote, &pkt.tcp) {
                self.counters.mptun_syncookies_over_half_open += 1;
                self.free_slot(h);
                if self.cookie_ack(now, local, remote, &pkt.tcp, &opts, pkt.payload) {
                    return;
                }
            } else {
                let s = self.conns[h.0].as_mut().expect("tuple_owner checked the slot");
                s.conn.handle_segment(now, idx, &pkt.tcp, &opts, pkt.payload, owner);
                self.ready.insert(h.0);
                self.post_conn(now, h);
                return;
            }
        }
        self.by_tuple.remove(&(local, remote));
        let f = pkt.tcp.flags;
        if f.syn() && !f.ack() && !f.rst() {
            let join = opts.mptcp.iter().find_map(|o| match o {
                MptcpOption::MpJoinSyn { backup, addr_id, token, nonce } => Some((*backup, *addr_id, *token, *nonce)),
                _ => None,
            });
            if let Some((backup, addr_id, token, peer_nonce)) = join {
                if self.accept_join(now, local, remote, &pkt.tcp, &opts, (backup, addr_id, token, peer_nonce)) {
                    return;
                }
            } else if self.is_listening(local) {
                self.passive_open(now, local, remote, &pkt.tcp, &opts);
                return;
            }
        }
        let cookie = f.ack() && !f.syn() && !f.rst() && self.cookies.active(now) && self.is_listening(local);
        if cookie && self.cookie_ack(now, local, remote, &pkt.tcp, &opts, pkt.payload) {
            return;
        }
        self.counters.mptun_no_socket += 1;
        let refused_join = opts.mptcp.iter().any(|o| matches!(o, MptcpOption::MpJoinSyn { .. }));
        self.queue_rst(local, remote, &pkt.tcp, pkt.payload.len(), refused_join);
    }

    /// A SYN to a listener: a new half-open connection, unless the
    /// half-open queue (`max_syn_backlog`) or the endpoint
    /// (`max_connections`) is full; then the SYN is dropped and counted, as
    /// Linux drops it (`TcpExtListenDrops`), and the client retries.
    fn passive_open(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        syn: &TcpHeader,
        opts: &OptionSummary,
    ) {
        let lim = &self.config.limits;
        if self.half_open >= lim.max_syn_backlog {
            if lim.syncookies {
                self.cookie_synack(now, local, remote, syn, opts);
                return;
            }
            self.counters.tcp_ext_tcp_req_q_full_drop += 1;
            self.counters.tcp_ext_listen_drops += 1;
            return;
        }
        if self.live >= lim.max_connections {
            self.counters.mptun_conn_limit += 1;
            self.counters.tcp_ext_listen_drops += 1;
            return;
        }
        let mpc = offers_mptcp(opts);
        let key = self.fresh_key();
        let (iss, ts) = (self.rng.random(), self.rng.random());
        let cfg = self.config.conn();
        let iss = wrap_early_iss(&cfg, iss);
        let c = Connection::accept(now, cfg, local, remote, syn, opts, mpc, key, iss, ts);
        let mptcp = c.mode() == crate::mptcp::Mode::Mptcp;
        let h = self.insert(c, false, true);
        if mptcp {
            self.add_token(h, key);
        }
        self.add_tuple(h, (local, remote), 0);
        self.apply_device_mtu(h, 0, local.ip());
        self.ready.insert(h.0);
        self.settle(h);
    }

    /// Whether an ACK to the half-open connection `h` returns, instead of
    /// its SYN-ACK's sequence number, a cookie we sent for the same pair: the
    /// client's SYN was answered with a cookie while the queue was full, then
    /// sent again (the cookie SYN-ACK late) and given a half-open connection
    /// once the queue had room. The client completes the handshake it got
    /// first; the half-open connection would reset it (RFC 9293, an
    /// unacceptable ACK in SYN-RECEIVED), so the cookie wins, as in Linux,
    /// where such an ACK fails the request socket's check and goes on to the
    /// listener's cookie check.
    fn acks_a_cookie_instead(
        &self,
        now: Instant,
        h: ConnectionHandle,
        local: SocketAddr,
        remote: SocketAddr,
        ack: &TcpHeader,
    ) -> bool {
        let f = ack.flags;
        if !f.ack() || f.syn() || f.rst() || !self.cookies.active(now) || !self.is_listening(local) {
            return false;
        }
        let Some(s) = self.slot(h) else { return false };
        if !s.half_open || s.owned {
            return false;
        }
        let Some(sf) = s.conn.subflow(0) else { return false };
        // The same SYN sent again (not a stray segment of an earlier
        // connection of the pair), and not an ACK of this connection's SYN-ACK.
        if sf.state() != crate::tcp::State::SynReceived || Seq(ack.seq) != sf.irs() + 1 || Seq(ack.ack) == sf.iss() + 1
        {
            return false;
        }
        let (peer_isn, iss) = (ack.seq.wrapping_sub(1), ack.ack.wrapping_sub(1));
        self.cookies.check(now, local, remote, peer_isn, iss).is_some()
    }

    /// Answers a SYN with a cookie SYN-ACK and keeps nothing. The SYN-ACK is
    /// the one a connection would send (options, window, MP_CAPABLE with a
    /// fresh key): a throwaway connection with the cookie as its ISS writes
    /// it, then goes.
    fn cookie_synack(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        syn: &TcpHeader,
        opts: &OptionSummary,
    ) {
        if self.stray_rsts.len() >= MAX_STATELESS {
            self.counters.tcp_ext_listen_drops += 1;
            return;
        }
        let mpc = offers_mptcp(opts);
        let iss = self.cookies.make(now, local, remote, syn.seq, opts);
        let ts = self.cookies.ts_offset(local, remote);
        let key = self.rng.random();
        let mut c = Connection::accept(now, self.config.conn(), local, remote, syn, opts, mpc, key, iss, ts);
        self.give_device_mtu(&mut c, local);
        let mut buf = [0u8; 256];
        let Some((_, t)) = c.poll_transmit(now, &mut buf, 0) else { return };
        let Ok(p) = parse_tcp_packet_unverified(&buf[..t.len]) else { return };
        self.stray_rsts.push_back((local, remote, p.tcp));
        self.counters.tcp_ext_syncookies_sent += 1;
    }

    /// An ACK to a listener that matches no connection: if it returns one
    /// of our cookies, the connection is built as the SYN had found room and
    /// the ACK is fed to it. `false`: not a cookie of ours (the caller resets).
    fn cookie_ack(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        ack: &TcpHeader,
        opts: &OptionSummary,
        payload: &[u8],
    ) -> bool {
        let peer_isn = ack.seq.wrapping_sub(1);
        let iss = ack.ack.wrapping_sub(1);
        let Some(ck) = self.cookies.check(now, local, remote, peer_isn, iss) else {
            self.counters.tcp_ext_syncookies_failed += 1;
            return false;
        };
        if self.live >= self.config.limits.max_connections {
            self.counters.mptun_conn_limit += 1;
            self.counters.tcp_ext_listen_drops += 1;
            return true;
        }
        // The SYN as the cookie remembers it.
        let syn = TcpHeader::new(remote.port(), local.port(), peer_isn, 0, TcpFlags::SYN, ack.window);
        let mut so = OptionSummary {
            mss: Some(ck.mss),
            window_scale: ck.wscale,
            sack_permitted: ck.sack,
            timestamp: opts.timestamp.map(|(v, _)| (v, 0)),
            ..Default::default()
        };
        // MPTCP v1: the third ACK carries both keys; ours is the receiver's.
        let keys = opts.mptcp.iter().find_map(|o| match o {
            MptcpOption::MpCapable { version: 1, flags, sender_key: Some(_), receiver_key: Some(k), .. }
                if crate::mptcp::usable_cap_flags(*flags) =>
            {
                Some((*flags, *k))
            }
            _ => None,
        });
        let keys = keys.filter(|&(_, k)| !self.tokens.contains_key(&mptun_wire::crypto::token(k)));
        let key = match keys {
            Some((flags, k)) => {
                let o = MptcpOption::MpCapable {
                    version: 1,
                    flags,
                    sender_key: None,
                    receiver_key: None,
                    data_len: None,
                    checksum: None,
                };
                let _ = so.mptcp.try_push(o);
                k
            }
            None => self.fresh_key(),
        };
        let ts = self.cookies.ts_offset(local, remote);
        // When the SYN-ACK left: the ACK's TSecr is our clock then (the
        // subflow's SYN-ACK RTT sample). Without timestamps it is unknown
        // and the sample is 0, as Linux, which takes none, has srtt 0 then.
        let sent_ms =
            opts.timestamp.map_or(0, |(_, ecr)| ((now.as_millis() as u32).wrapping_add(ts)).wrapping_sub(ecr));
        let sent = if sent_ms < 2 * 64_000 { now - mptun_time::Duration::from_millis(u64::from(sent_ms)) } else { now };
        let mut c =
            Connection::accept(sent, self.config.conn(), local, remote, &syn, &so, keys.is_some(), key, iss, ts);
        self.give_device_mtu(&mut c, local);
        // The SYN-ACK went out when the cookie was made: let the subflow
        // write it again (and drop it) so its sequence space is past it.
        let mut buf = [0u8; 256];
        let _ = c.poll_transmit(sent, &mut buf, 0);
        self.counters.tcp_ext_syncookies_recv += 1;
        let mptcp = c.mode() == crate::mptcp::Mode::Mptcp;
        let h = self.insert(c, false, true);
        if mptcp {
            self.add_token(h, key);
        }
        self.add_tuple(h, (local, remote), 0);
        let s = self.conns[h.0].as_mut().expect("just inserted");
        s.conn.handle_segment(now, 0, ack, opts, payload, None);
        self.ready.insert(h.0);
        self.post_conn(now, h);
        true
    }

    /// A passive connection completed its handshake: it leaves the
    /// half-open count for the accept queue, unless that is full
    /// (`max_accept_backlog`, Linux's `somaxconn`): then it is reset and
    /// counted as Linux counts an accept-queue overflow.
    pub(super) fn on_passive_connected(&mut self, h: ConnectionHandle) {
        let Some(s) = self.slot_mut(h) else { return };
        s.half_open = false;
        self.half_open -= 1;
        if self.accept_queue.len() >= self.config.limits.max_accept_backlog {
            self.counters.tcp_ext_listen_overflows += 1;
            self.counters.tcp_ext_listen_drops += 1;
            if let Some(s) = self.slot_mut(h) {
                s.conn.abort();
            }
            return;
        }
        self.accept_queue.push_back(h);
    }

    /// A packet that is not TCP: an ICMP error about one of our subflows
    /// ("fragmentation needed" / "packet too big", destination
    /// unreachable, time exceeded) goes to that subflow, which checks the
    /// quoted sequence number; the rest is counted and dropped (neighbour
    /// discovery on a TUN, UDP...).
    fn handle_non_tcp(&mut self, now: Instant, packet: &[u8]) {
        let icmp = match parse_icmp_packet(packet) {
            Ok(Icmp::Other) | Err(mptun_wire::Error::NotTcp) => {
                self.counters.mptun_not_tcp += 1;
                return;
            }
            Ok(icmp) => icmp,
            Err(_) => {
                self.counters.icmp_in_errors += 1;
                return;
            }
        };
        let q = match icmp {
            Icmp::TooBig(t) => t.quote,
            Icmp::Unreachable(q, _) => q,
            Icmp::Other => unreachable!("counted above"),
        };
        let c = &mut self.counters;
        *match (icmp, q.v6) {
            (Icmp::TooBig(_), true) => &mut c.icmp6_in_pkt_too_bigs,
            (Icmp::Unreachable(_, Unreachable::TimeExceeded), false) => &mut c.icmp_in_time_excds,
            (Icmp::Unreachable(_, Unreachable::TimeExceeded), true) => &mut c.icmp6_in_time_excds,
            (_, false) => &mut c.icmp_in_dest_unreachs,
            (_, true) => &mut c.icmp6_in_dest_unreachs,
        } += 1;
        let tuple = (SocketAddr::new(q.local, q.local_port), SocketAddr::new(q.remote, q.remote_port));
        let Some((h, idx)) = self.tuple_owner(&tuple) else { return };
        let s = self.conns[h.0].as_mut().expect("tuple_owner checked the slot");
        match icmp {
            Icmp::TooBig(t) => s.conn.handle_too_big(now, idx, Seq(q.seq), t.mtu),
            Icmp::Unreachable(_, why) => {
                // A half-open connection of a listener dies as its request
                // would in Linux's `tcp_req_err`: a listen drop.
                if s.conn.handle_unreachable(now, idx, Seq(q.seq), why) && s.half_open {
                    self.counters.tcp_ext_listen_drops += 1;
                }
            }
            Icmp::Other => {}
        }
        self.ready.insert(h.0);
        self.post_conn(now, h);
    }

    fn accept_join(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        syn: &TcpHeader,
        opts: &OptionSummary,
        (backup, addr_id, token, peer_nonce): (bool, u8, u32, u32),
    ) -> bool {
        let Some(&h) = self.tokens.get(&token) else {
            self.counters.mptcp_mp_join_no_token_found += 1;
            return false;
        };
        let (nonce, iss, ts) = (self.rng.random(), self.rng.random(), self.rng.random());
        let lim = self.config.limits.join_limits();
        let Some(s) = self.slot_mut(h) else { return false };
        let idx = s.conn.accept_join(now, local, remote, syn, opts, (backup, addr_id, peer_nonce), nonce, iss, ts, lim);
        match idx {
            Some(idx) => {
                self.add_tuple(h, (local, remote), idx);
                self.apply_device_mtu(h, idx, local.ip());
                self.ready.insert(h.0);
                self.settle(h);
                true
            }
            None => false,
        }
    }

    pub(super) fn queue_rst(
        &mut self,
        local: SocketAddr,
        remote: SocketAddr,
        hdr: &TcpHeader,
        payload_len: usize,
        mptcp_err: bool,
    ) {
        let f = hdr.flags;
        if f.rst() {
            return;
        }
        // RFC 9293 3.10.7.1: RST for anything arriving at a closed port.
        let seg_len = payload_len as u32 + f.syn() as u32 + f.fin() as u32;
        let (seq, ack, flags) = if f.ack() {
            (hdr.ack, 0, TcpFlags::RST)
        } else {
            (0, (Seq(hdr.seq) + seg_len).0, TcpFlags::RST | TcpFlags::ACK)
        };
        let mut rst = TcpHeader::new(local.port(), remote.port(), seq, ack, flags, 0);
        rst.options = TcpOptions::new();
        if mptcp_err {
            // RFC 8684 3.6: say why (Linux: MPTCP_RST_EMPTCP for an unknown token).
            let o = MptcpOption::MpTcpRst { flags: 0, reason: crate::mptcp::MPTCP_RST_EMPTCP };
            if rst.options.push_aligned(&mptun_wire::TcpOption::Mptcp(o)).is_ok() {
                self.counters.mptcp_mp_rst_tx += 1;
            }
        }
        if self.stray_rsts.len() < MAX_STRAY_RSTS {
            self.stray_rsts.push_back((local, remote, rst));
        }
    }

    /// A connection not yet in a slot gets the MTU of `local`'s device.
    fn give_device_mtu(&self, c: &mut Connection, local: SocketAddr) {
        if let Some(&mtu) = self.device_mtus.get(&local.ip()) {
            c.set_device_mtu(0, mtu);
        }
    }
}

/// A SYN's usable MP_CAPABLE: H set and B clear, or it is ignored (RFC 8684 3.1).
fn offers_mptcp(opts: &OptionSummary) -> bool {
    opts.mptcp.iter().any(
        |o| matches!(o, MptcpOption::MpCapable { version: 1, flags, .. } if crate::mptcp::usable_cap_flags(*flags)),
    )
}

/// The packet's IP header checksum holds (IPv6 has none): a
/// [`mptun_wire::Error::BadChecksum`] was then the TCP checksum's, what
/// `TcpInCsumErrors` counts (a bad IPv4 header is Linux's `IpInCsumErrors`).
fn ip_header_checksum_ok(packet: &[u8]) -> bool {
    match packet.first().map(|b| (b >> 4, usize::from(b & 0x0f) * 4)) {
        Some((4, ihl)) => packet.get(..ihl).is_some_and(mptun_wire::checksum::verify),
        _ => true,
    }
}
