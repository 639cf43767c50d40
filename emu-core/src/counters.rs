//! Counters, named as rxe and mlx5 users know them (`rdma statistic`, `hw_counters/`).

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// The engine's counters. Every drop and every recovery is counted somewhere.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        pub struct Counters {
            $($(#[doc = $doc])* pub $name: u64,)*
        }

        impl Counters {
            /// Every counter with its name.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
                [$((stringify!($name), self.$name),)*].into_iter()
            }

            /// Adds `other`'s counts (a device's engines, counted as one).
            pub fn add(&mut self, other: &Counters) {
                $(self.$name += other.$name;)*
            }
        }
    };
}

counters! {
    /// Frames sent.
    sent_pkts,
    /// Frames received and accepted by the parser.
    rcvd_pkts,
    /// Frames dropped because the ICRC was wrong.
    rcvd_icrc_err,
    /// Frames dropped as malformed (any other parse error).
    rcvd_malformed,
    /// Frames for a QP that does not exist, or not addressed to this device.
    rcvd_unknown_qp,
    /// Frames whose addresses or transport do not match the QP, or arriving in a state that
    /// does not receive.
    rcvd_bad_context,
    /// CE-marked packets (ECN Congestion Experienced) that reached a connected QP: the
    /// notification point's input.
    np_ecn_marked_roce_packets,
    /// CNPs sent to peers for CE-marked packets (at most one per QP per 4 µs).
    np_cnp_sent,
    /// CNPs that cut a QP's rate or found it cut (DCQCN's reaction point).
    rp_cnp_handled,
    /// CNPs not acted on: for a QP that does not send, not from its peer, or with DCQCN off.
    rp_cnp_ignored,
    /// Duplicate requests the responder saw (re-ACKed or replayed, never executed twice).
    duplicate_request,
    /// Requests that arrived with a PSN ahead of the expected one.
    out_of_sequence,
    /// PSN sequence error NAKs received by the requester.
    packet_seq_err,
    /// READ responses or atomic ACKs found missing by a later response (implied NAK).
    implied_nak_seq_err,
    /// Retransmissions started by the local ACK timer.
    local_ack_timeout_err,
    /// RNR NAKs received by the requester.
    rnr_nak_retry_err,
    /// RNR NAKs sent by the responder.
    rnr_nak_sent,
    /// Work requests that failed because transport retries ran out.
    retry_exceeded_err,
    /// Work requests that failed because RNR retries ran out.
    rnr_retry_exceeded_err,
    /// Packets sent again by go-back-N.
    retransmitted_pkts,
    /// Duplicate or ghost ACKs and responses the completer ignored.
    duplicate_response,
    /// Responses of the wrong kind or length for the request they answer, failing it.
    bad_response,
    /// NAK remote access errors received.
    req_remote_access_errors,
    /// NAK invalid request errors received.
    req_remote_invalid_request,
    /// NAK remote operational errors received.
    req_remote_operational_errors,
    /// Requests the responder refused with a remote access error.
    resp_remote_access_errors,
    /// Requests the responder refused as invalid.
    resp_invalid_request,
    /// Receives longer than the receive buffer.
    resp_local_length_error,
    /// UD datagrams dropped for a wrong Q_Key.
    qkey_violation,
    /// UD/UC messages dropped because no receive WQE was posted.
    rcv_no_wqe_drop,
    /// UC messages dropped for a PSN gap or a broken opcode sequence.
    uc_seq_drop,
    /// Completions lost because a CQ was full.
    cq_overflow,
    /// MADs to QP1 the Communication Manager dropped: malformed, truncated, or of another
    /// management class.
    cm_mad_dropped,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_fields() {
        let c = Counters {
            duplicate_request: 3,
            ..Counters::default()
        };
        let found = c.iter().find(|(n, _)| *n == "duplicate_request");
        assert_eq!(found, Some(("duplicate_request", 3)));
        assert!(c.iter().count() > 20);
    }

    #[test]
    fn counters_add_up_field_by_field() {
        let mut sum = Counters {
            sent_pkts: 1,
            ..Counters::default()
        };
        let other = Counters {
            sent_pkts: 2,
            cm_mad_dropped: 5,
            ..Counters::default()
        };
        sum.add(&other);
        sum.add(&other);
        assert_eq!((sum.sent_pkts, sum.cm_mad_dropped), (5, 10));
        assert_eq!(sum.iter().map(|(_, n)| n).sum::<u64>(), 15);
    }
}
