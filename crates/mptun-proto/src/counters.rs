//! Stack counters, named after the kernel's `nstat` names so a lab can compare
//! an mptun run with a kernel run one to one.
//!
//! Every field is a monotonically increasing count. Snapshots are plain copies;
//! [`Counters::add`] sums subflows into a connection or connections into a stack.

use std::fmt::Write as _;

macro_rules! counters {
    ($($(#[$doc:meta])* $field:ident => $name:literal,)*) => {
        /// A snapshot of counters. Field names are snake case of the kernel's names.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct Counters {
            $($(#[$doc])* pub $field: u64,)*
        }

        impl Counters {
            /// `(kernel name, value)` pairs, in a fixed order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
                [$(($name, self.$field),)*].into_iter()
            }

            /// Adds every counter of `other` into `self`.
            pub fn add(&mut self, other: &Counters) {
                $(self.$field += other.$field;)*
            }
        }
    };
}

counters! {
    /// Segments sent, retransmissions included (`Tcp OutSegs`).
    tcp_out_segs => "TcpOutSegs",
    /// Segments received (`Tcp InSegs`).
    tcp_in_segs => "TcpInSegs",
    /// Segments retransmitted (`Tcp RetransSegs`).
    tcp_retrans_segs => "TcpRetransSegs",
    /// Segments received with a bad checksum or malformed header (`Tcp InErrs`).
    tcp_in_errs => "TcpInErrs",
    /// Segments dropped for a bad TCP checksum (`Tcp InCsumErrors`); also
    /// counted in `TcpInErrs`, as Linux does.
    tcp_in_csum_errors => "TcpInCsumErrors",
    /// RSTs sent (`Tcp OutRsts`).
    tcp_out_rsts => "TcpOutRsts",
    /// Connections reset by a RST we accepted (`Tcp EstabResets`).
    tcp_estab_resets => "TcpEstabResets",
    /// Connection attempts that failed: a RST or a timeout in SYN-SENT or
    /// SYN-RECEIVED (`Tcp AttemptFails`).
    tcp_attempt_fails => "TcpAttemptFails",
    /// Connections opened actively (`Tcp ActiveOpens`).
    tcp_active_opens => "TcpActiveOpens",
    /// Connections opened passively (`Tcp PassiveOpens`).
    tcp_passive_opens => "TcpPassiveOpens",
    /// Retransmission timeouts (`TcpExt TCPTimeouts`).
    tcp_ext_tcp_timeouts => "TcpExtTCPTimeouts",
    /// Recoveries entered on SACK information (`TcpExt TCPSACKRecovery`).
    tcp_ext_tcp_sack_recovery => "TcpExtTCPSackRecovery",
    /// Recoveries entered on duplicate ACKs without SACK (`TcpExt TCPRenoRecovery`).
    tcp_ext_tcp_reno_recovery => "TcpExtTCPRenoRecovery",
    /// Fast retransmissions (`TcpExt TCPFastRetrans`).
    tcp_ext_tcp_fast_retrans => "TcpExtTCPFastRetrans",
    /// Retransmissions found unnecessary (the original arrived), widening RACK's window.
    tcp_ext_tcp_spurious_retrans => "TcpExtTCPSpuriousRetrans",
    /// Tail loss probes sent (`TcpExt TCPLossProbes`).
    tcp_ext_tcp_loss_probes => "TcpExtTCPLossProbes",
    /// Retransmissions found lost again (RACK) and re-sent (`TcpExt TCPLostRetransmit`).
    tcp_ext_tcp_lost_retransmit => "TcpExtTCPLostRetransmit",
    /// Retransmissions after an RTO (`TcpExt TCPLossProbes` is not this; `TCPSlowStartRetrans`).
    tcp_ext_tcp_slow_start_retrans => "TcpExtTCPSlowStartRetrans",
    /// D-SACKs sent for data below `rcv_nxt` (`TcpExt TCPDSACKOldSent`).
    tcp_ext_tcp_dsack_old_sent => "TcpExtTCPDSACKOldSent",
    /// D-SACKs sent for data already held out of order (`TcpExt TCPDSACKOfoSent`).
    tcp_ext_tcp_dsack_ofo_sent => "TcpExtTCPDSACKOfoSent",
    /// Segments queued out of order at the receiver (`TcpExt TCPOFOQueue`).
    tcp_ext_tcp_ofo_queue => "TcpExtTCPOFOQueue",
    /// Out-of-order segments merged with a neighbour (`TcpExt TCPOFOMerge`).
    tcp_ext_tcp_ofo_merge => "TcpExtTCPOFOMerge",
    /// Out-of-order segments dropped for lack of buffer (`TcpExt TCPOFODrop`).
    tcp_ext_tcp_ofo_drop => "TcpExtTCPOFODrop",
    /// Receive queues found over their memory budget
    /// (twice the window plus a fixed slack), the out-of-order tail
    /// then pruned (`TcpExt PruneCalled`).
    tcp_ext_prune_called => "TcpExtPruneCalled",
    /// Prunings that dropped out-of-order data (`TcpExt OfoPruned`).
    tcp_ext_ofo_pruned => "TcpExtOfoPruned",
    /// In-order segments dropped because the receive queue stayed over its
    /// budget after pruning; never acknowledged (`TcpExt RcvPruned`).
    tcp_ext_rcv_pruned => "TcpExtRcvPruned",
    /// Fully duplicate segments received (`TcpExt TCPDSACKRecv` is the sender side; this is `DelivedDup`).
    tcp_ext_tcp_duplicate_data => "TcpExtTCPDuplicateData",
    /// Challenge ACKs sent (RFC 5961, `TcpExt TCPChallengeACK`).
    tcp_ext_tcp_challenge_ack => "TcpExtTCPChallengeACK",
    /// Challenge ACKs not sent: within `invalid_ratelimit` of the last ACK
    /// answering an invalid segment (`TcpExt TCPACKSkippedChallenge`).
    tcp_ext_tcp_ack_skipped_challenge => "TcpExtTCPACKSkippedChallenge",
    /// Duplicate ACKs for out-of-window segments not sent, rate-limited
    /// (`TcpExt TCPACKSkippedSeq`).
    tcp_ext_tcp_ack_skipped_seq => "TcpExtTCPACKSkippedSeq",
    /// Duplicate ACKs for segments PAWS rejected not sent, rate-limited
    /// (`TcpExt TCPACKSkippedPAWS`).
    tcp_ext_tcp_ack_skipped_paws => "TcpExtTCPACKSkippedPAWS",
    /// Segments dropped by PAWS, their timestamp older than the last one
    /// taken (RFC 7323 5.3, `TcpExt PAWSEstab`).
    tcp_ext_paws_estab => "TcpExtPAWSEstab",
    /// Retransmission timeouts that found the head of the queue SACKed: the
    /// receiver reneged, every SACK mark is dropped (`TcpExt TCPSACKReneging`).
    tcp_ext_tcp_sack_reneging => "TcpExtTCPSACKReneging",
    /// Segments dropped because they were outside the window (`TcpExt TCPOutOfWindowIcmps` analogue: `BeyondWindow`).
    tcp_ext_beyond_window => "TcpExtBeyondWindow",
    /// SYNs answered with a challenge ACK in a synchronized state (`TcpExt TCPSYNChallenge`).
    tcp_ext_tcp_syn_challenge => "TcpExtTCPSYNChallenge",
    /// Data segments at RCV.NXT dropped because our window was zero (`TcpExt TCPZeroWindowDrop`).
    tcp_ext_tcp_zero_window_drop => "TcpExtTCPZeroWindowDrop",
    /// Zero-window probes sent (`TcpExt TCPWinProbe`).
    tcp_ext_tcp_win_probe => "TcpExtTCPWinProbe",
    /// Delayed ACKs sent by the timer (`TcpExt DelayedACKs`).
    tcp_ext_delayed_acks => "TcpExtDelayedACKs",
    /// ACKs that advertised a zero window (`TcpExt TCPToZeroWindowAdv`).
    tcp_ext_tcp_to_zero_window_adv => "TcpExtTCPToZeroWindowAdv",
    /// Receive buffer autotuning steps (`TcpExt TCPRcvSpaceGrow` is not in Linux; named for clarity).
    tcp_ext_tcp_rcv_space_grow => "TcpExtTCPRcvSpaceGrow",
    /// ICMP errors about TCP ignored because the quoted sequence number
    /// was outside `snd_una..=snd_nxt` (RFC 5927; `TcpExt OutOfWindowIcmps`).
    tcp_ext_out_of_window_icmps => "TcpExtOutOfWindowIcmps",
    /// Path-MTU probes that were lost: the search ceiling came down
    /// (`TcpExt TCPMTUPFail`).
    tcp_ext_tcp_mtup_fail => "TcpExtTCPMTUPFail",
    /// Path-MTU probes acknowledged: the MSS went up (`TcpExt TCPMTUPSuccess`).
    tcp_ext_tcp_mtup_success => "TcpExtTCPMTUPSuccess",
    /// ICMPv4 destination-unreachable messages received (`Icmp InDestUnreachs`).
    icmp_in_dest_unreachs => "IcmpInDestUnreachs",
    /// ICMPv4 time-exceeded messages received (`Icmp InTimeExcds`).
    icmp_in_time_excds => "IcmpInTimeExcds",
    /// ICMPv6 destination-unreachable messages received (`Icmp6 InDestUnreachs`).
    icmp6_in_dest_unreachs => "Icmp6InDestUnreachs",
    /// ICMPv6 time-exceeded messages received (`Icmp6 InTimeExcds`).
    icmp6_in_time_excds => "Icmp6InTimeExcds",
    /// Handshakes (ours or a peer's half-open one) that an ICMP error
    /// ended at once instead of their SYN retries (no Linux counter:
    /// `TcpAttemptFails` counts them with the rest).
    mptun_icmp_handshake_aborts => "MptunIcmpHandshakeAborts",
    /// ICMP messages received that were malformed (bad checksum, short
    /// quote) (`Icmp InErrors`).
    icmp_in_errors => "IcmpInErrors",
    /// ICMPv6 "packet too big" messages received (`Icmp6 InPktTooBigs`).
    icmp6_in_pkt_too_bigs => "Icmp6InPktTooBigs",
    /// ICMP "too big" reports that lowered a subflow's path MTU (no Linux
    /// counter: the kernel records the new MTU in the route cache).
    mptun_pmtu_reduced => "MptunPmtuReduced",
    /// Black holes detected (full-size segments timing out while smaller
    /// ones get through): the MSS fell back to `tcp_base_mss` and probing
    /// started (Linux `tcp_mtu_probing`, no counter there).
    mptun_pmtu_black_hole => "MptunPmtuBlackHole",
    /// SYNs carrying MP_CAPABLE received (`MPTcpExt MPCapableSYNRX`).
    mptcp_mp_capable_syn_rx => "MPTcpExtMPCapableSYNRX",
    /// SYNs carrying MP_CAPABLE sent (`MPTcpExt MPCapableSYNTX`).
    mptcp_mp_capable_syn_tx => "MPTcpExtMPCapableSYNTX",
    /// SYN-ACKs carrying MP_CAPABLE received (`MPTcpExt MPCapableSYNACKRX`).
    mptcp_mp_capable_synack_rx => "MPTcpExtMPCapableSYNACKRX",
    /// Third ACKs carrying MP_CAPABLE received (`MPTcpExt MPCapableACKRX`).
    mptcp_mp_capable_ack_rx => "MPTcpExtMPCapableACKRX",
    /// Client fell back to TCP: SYN-ACK without MP_CAPABLE (`MPTcpExt MPCapableFallbackSYNACK`).
    mptcp_mp_capable_fallback_synack => "MPTcpExtMPCapableFallbackSYNACK",
    /// Server fell back to TCP: SYN without (usable) MP_CAPABLE (`MPTcpExt MPCapableFallbackACK`).
    mptcp_mp_capable_fallback_ack => "MPTcpExtMPCapableFallbackACK",
    /// SYNs with MP_JOIN received (`MPTcpExt MPJoinSynRx`).
    mptcp_mp_join_syn_rx => "MPTcpExtMPJoinSynRx",
    /// SYN-ACKs with MP_JOIN received and verified (`MPTcpExt MPJoinSynAckRx`).
    mptcp_mp_join_synack_rx => "MPTcpExtMPJoinSynAckRx",
    /// Third ACKs with MP_JOIN received and verified (`MPTcpExt MPJoinAckRx`).
    mptcp_mp_join_ack_rx => "MPTcpExtMPJoinAckRx",
    /// MP_JOIN subflows the path manager asked for that could not be
    /// opened: no free local port towards the peer (`MPTcpExt MPJoinSynTxConnectErr`).
    mptcp_mp_join_syn_tx_connect_err => "MPTcpExtMPJoinSynTxConnectErr",
    /// MP_JOIN SYNs for an unknown token (`MPTcpExt MPJoinNoTokenFound`).
    mptcp_mp_join_no_token_found => "MPTcpExtMPJoinNoTokenFound",
    /// MP_JOIN SYN-ACKs with a wrong HMAC (`MPTcpExt MPJoinSynAckHMacFailure`).
    mptcp_mp_join_synack_hmac_failure => "MPTcpExtMPJoinSynAckHMacFailure",
    /// MP_JOIN third ACKs with a wrong HMAC (`MPTcpExt MPJoinAckHMacFailure`).
    mptcp_mp_join_ack_hmac_failure => "MPTcpExtMPJoinAckHMacFailure",
    /// Data segments queued out of order at the connection level (`MPTcpExt OFOQueue`).
    mptcp_ofo_queue => "MPTcpExtOFOQueue",
    /// ... of which appended at the tail of the OFO queue (`MPTcpExt OFOQueueTail`).
    mptcp_ofo_queue_tail => "MPTcpExtOFOQueueTail",
    /// OFO segments merged with a neighbour (`MPTcpExt OFOMerge`).
    mptcp_ofo_merge => "MPTcpExtOFOMerge",
    /// Data dropped at the connection level because it ends past the right
    /// edge of the largest window the connection announced (`MPTcpExt NoDSSInWindow`).
    mptcp_no_dss_in_window => "MPTcpExtNoDSSInWindow",
    /// Out-of-order data pruned from the connection's queue to keep it within
    /// its memory budget: one per pruning (`MPTcpExt OFOPruned`).
    mptcp_ofo_pruned => "MPTcpExtOFOPruned",
    /// Data dropped at the connection level for lack of memory budget even
    /// after pruning; the subflow acknowledged it, the DATA_ACK does not
    /// cover it, so the peer sends it again (`MPTcpExt RcvPruned`).
    mptcp_rcv_pruned => "MPTcpExtRcvPruned",
    /// Data already received at the connection level (`MPTcpExt DuplicateData`).
    mptcp_duplicate_data => "MPTcpExtDuplicateData",
    /// Fell back to TCP mid-stream: options stripped on the only subflow (`MPTcpExt DSSFallback`).
    mptcp_dss_fallback => "MPTcpExtDSSFallback",
    /// Mappings that placed data outside the offered window; the subflow is reset (`MPTcpExt DSSNotMatching`).
    mptcp_dss_not_matching => "MPTcpExtDSSNotMatching",
    /// Mappings whose DSS checksum did not match (`MPTcpExt DataCsumErr`).
    mptcp_data_csum_err => "MPTcpExtDataCsumErr",
    /// MP_FAIL sent after a checksum failure (`MPTcpExt MPFailTx`).
    mptcp_mp_fail_tx => "MPTcpExtMPFailTx",
    /// MP_FAIL received (`MPTcpExt MPFailRx`).
    mptcp_mp_fail_rx => "MPTcpExtMPFailRx",
    /// ADD_ADDR received with a valid HMAC (`MPTcpExt AddAddr`).
    mptcp_add_addr => "MPTcpExtAddAddr",
    /// ADD_ADDR echoes received (`MPTcpExt EchoAdd`).
    mptcp_echo_add => "MPTcpExtEchoAdd",
    /// ADD_ADDR dropped: bad HMAC or over the limit (`MPTcpExt AddAddrDrop`).
    mptcp_add_addr_drop => "MPTcpExtAddAddrDrop",
    /// ADD_ADDR sent (`MPTcpExt AddAddrTx`).
    mptcp_add_addr_tx => "MPTcpExtAddAddrTx",
    /// RM_ADDR received (`MPTcpExt RmAddr`).
    mptcp_rm_addr => "MPTcpExtRmAddr",
    /// RM_ADDRs we sent: an address withdrawn by a `remove` command or an
    /// endpoint deleted (`MPTcpExt RmAddrTx`).
    mptcp_rm_addr_tx => "MPTcpExtRmAddrTx",
    /// MP_PRIO received (`MPTcpExt MPPrioRx`).
    mptcp_mp_prio_rx => "MPTcpExtMPPrioRx",
    /// MP_FASTCLOSE received (`MPTcpExt MPFastcloseRx`).
    mptcp_mp_fastclose_rx => "MPTcpExtMPFastcloseRx",
    /// MP_FASTCLOSE sent (`MPTcpExt MPFastcloseTx`).
    mptcp_mp_fastclose_tx => "MPTcpExtMPFastcloseTx",
    /// MP_TCPRST received (`MPTcpExt MPRstRx`).
    mptcp_mp_rst_rx => "MPTcpExtMPRstRx",
    /// MP_TCPRST sent (`MPTcpExt MPRstTx`).
    mptcp_mp_rst_tx => "MPTcpExtMPRstTx",
    /// Bytes re-sent on another subflow after theirs stalled or failed (`MPTcpExt Reinjected` analogue).
    mptcp_reinjected_bytes => "MptunMPReinjectedBytes",
    /// Bytes a scheduler sent again on a further subflow: redundant copies
    /// and the reinjections it chose (`Request::Reinject`) (mptun's).
    mptun_sched_copy_bytes => "MptunSchedCopyBytes",
    /// Picks a scheduler declined, waiting for a faster subflow rather
    /// than sending on a slow one (BLEST, ECF) (mptun's).
    mptun_sched_waits => "MptunSchedWaits",
    /// Segments with MPTCP options that the subflow found unacceptable (out
    /// of window, challenged, bad ACK): their options were ignored (mptun's).
    mptun_mp_opts_unacceptable => "MptunMPOptsUnacceptable",
    /// Subflows marked stale after an RTO streak (`MPTcpExt SubflowStale`).
    mptcp_subflow_stale => "MPTcpExtSubflowStale",
    /// Stale subflows that recovered (`MPTcpExt SubflowRecover`).
    mptcp_subflow_recover => "MPTcpExtSubflowRecover",
    /// Slow-subflow cwnd halvings applied (`MPTcpExt CwndPenalized`, reference patch 3/3).
    mptcp_cwnd_penalized => "MPTcpExtCwndPenalized",
    /// Times a slow subflow qualified for a penalty, guard or not (`MPTcpExt PenalCandidate`).
    mptcp_penal_candidate => "MPTcpExtPenalCandidate",
    /// MPTCP-level zero-window probes sent (`MPTcpExt WinProbe`).
    mptcp_win_probe => "MPTcpExtWinProbe",
    /// Data retransmitted by the MPTCP-level retransmission timer (`MPTcpExt MPTCPRetrans`).
    mptcp_retrans => "MPTcpExtMPTCPRetrans",
    /// Infinite mappings received (`MPTcpExt InfiniteMapRx`).
    mptcp_infinite_map_rx => "MPTcpExtInfiniteMapRx",
    /// Infinite mappings sent, in answer to an MP_FAIL (`MPTcpExt InfiniteMapTx`).
    mptcp_infinite_map_tx => "MPTcpExtInfiniteMapTx",
    /// Connections reset because their DATA_FIN was not acknowledged within
    /// the close timeout (mptun's; Linux `mptcp_close_tout_expired`).
    mptun_data_fin_timeout => "MptunDataFinTimeout",
    /// SYN-ACKs sent with a SYN cookie, the half-open queue being full
    /// (`TcpExt SyncookiesSent`).
    tcp_ext_syncookies_sent => "TcpExtSyncookiesSent",
    /// Third ACKs with a valid SYN cookie: connections built from it
    /// (`TcpExt SyncookiesRecv`).
    tcp_ext_syncookies_recv => "TcpExtSyncookiesRecv",
    /// ACKs to a listener whose cookie did not check out, while cookies were
    /// in use (`TcpExt SyncookiesFailed`).
    tcp_ext_syncookies_failed => "TcpExtSyncookiesFailed",
    /// SYNs dropped because the half-open queue (`max_syn_backlog`) was
    /// full and SYN cookies were off (`TcpExt TCPReqQFullDrop`).
    tcp_ext_tcp_req_q_full_drop => "TcpExtTCPReqQFullDrop",
    /// Connections whose handshake completed while the accept queue was
    /// full (`TcpExt ListenOverflows`).
    tcp_ext_listen_overflows => "TcpExtListenOverflows",
    /// SYNs or handshakes dropped at a listener, for any reason
    /// (`TcpExt ListenDrops`).
    tcp_ext_listen_drops => "TcpExtListenDrops",
    /// Connects refused or SYNs dropped at `max_connections` (mptun's).
    mptun_conn_limit => "MptunConnLimit",
    /// MP_JOIN SYNs refused: the connection has its `subflows` limit of
    /// subflows, or takes no joins (`MPTcpExt MPJoinRejected`).
    mptcp_mp_join_rejected => "MPTcpExtMPJoinRejected",
    /// MP_JOIN SYNs refused: a `max_half_open_joins` cap is set and that
    /// many joins of the connection are in SYN-RECEIVED (mptun's).
    mptun_mp_join_half_open_limit => "MptunMPJoinHalfOpenLimit",
    /// Joins of ours reset at their SYN-ACK because our DATA_FIN went out
    /// meanwhile: a Linux peer refuses a join once it has it (mptun's).
    mptun_mp_join_after_data_fin => "MptunMPJoinAfterDataFin",
    /// MP_JOIN SYNs refused: over `max_join_syn_per_sec` for the token (mptun's).
    mptun_mp_join_rate_limited => "MptunMPJoinRateLimited",
    /// Path-manager events dropped, oldest first: nobody read them and
    /// the connection's queue (256) or the endpoint's was full (mptun's).
    mptun_pm_events_dropped => "MptunPmEventsDropped",
    /// Subflows of ours that failed (reset or timed out) opened again by
    /// the path manager while their endpoint exists (mptun's).
    mptun_pm_subflow_reopen => "MptunPMSubflowReopen",
    /// Packets dropped at the endpoint because they were malformed.
    mptun_malformed => "MptunMalformed",
    /// Packets that were not TCP (or used IP features we do not handle), ignored.
    mptun_not_tcp => "MptunNotTcp",
    /// Packets for which no connection or listener existed.
    mptun_no_socket => "MptunNoSocket",
    /// Third ACKs that returned a SYN cookie to a pair that had since got a
    /// half-open connection (the client's SYN sent again found room): the
    /// connection is built from the cookie and the half-open one dropped
    /// (mptun's; Linux hands such an ACK to the listener's cookie check).
    mptun_syncookies_over_half_open => "MptunSyncookiesOverHalfOpen",
}

impl Counters {
    /// The counters that are not zero, one `Name value` per line like `nstat`.
    pub fn to_nstat(&self) -> String {
        let mut s = String::new();
        for (name, v) in self.iter().filter(|(_, v)| *v != 0) {
            let _ = writeln!(s, "{name:<32}{v}");
        }
        s
    }
}
