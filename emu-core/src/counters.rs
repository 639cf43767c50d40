//! Counters. Where kernel rxe or mlx5 count the same thing, the counter has their name (`rdma
//! statistic`, `hw_counters/`), so their users read it as they know it; the rest are softrnic's
//! own, and say so ([`Counters::described`]).

/// Whose name a counter has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Kernel rxe's (`drivers/infiniband/sw/rxe/rxe_hw_counters.c`).
    Rxe,
    /// mlx5's (ConnectX, `drivers/infiniband/hw/mlx5/counters.c`).
    Mlx5,
    /// Both rxe's and mlx5's.
    Both,
    /// softrnic's own: neither counts this under a name of its own.
    Softrnic,
}

impl Origin {
    /// How the documentation says it.
    pub fn name(self) -> &'static str {
        match self {
            Origin::Rxe => "rxe",
            Origin::Mlx5 => "mlx5",
            Origin::Both => "rxe, mlx5",
            Origin::Softrnic => "softrnic",
        }
    }
}

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident: $origin:ident,)*) => {
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

            /// Every counter's name, whose name it is, and what it counts (its documentation,
            /// on one line), for the documentation and the lessons.
            pub fn described() -> impl Iterator<Item = (&'static str, Origin, &'static str)> {
                [$((stringify!($name), Origin::$origin, concat!($($doc),*).trim_ascii()),)*]
                    .into_iter()
            }
        }
    };
}

counters! {
    /// Frames sent.
    sent_pkts: Rxe,
    /// Frames received and accepted by the parser.
    rcvd_pkts: Rxe,
    /// Frames dropped because the ICRC was wrong.
    rcvd_icrc_err: Softrnic,
    /// Frames dropped as malformed (any other parse error).
    rcvd_malformed: Softrnic,
    /// Frames for a QP that does not exist, or not addressed to this device.
    rcvd_unknown_qp: Softrnic,
    /// Frames whose addresses or transport do not match the QP, or arriving in a state that
    /// does not receive.
    rcvd_bad_context: Softrnic,
    /// CE-marked packets (ECN Congestion Experienced) that reached a connected QP: the
    /// notification point's input.
    np_ecn_marked_roce_packets: Mlx5,
    /// CNPs sent to peers for CE-marked packets (at most one per QP per 4 µs).
    np_cnp_sent: Mlx5,
    /// CNPs that cut a QP's rate or found it cut (DCQCN's reaction point).
    rp_cnp_handled: Mlx5,
    /// CNPs not acted on: for a QP that does not send, not from its peer, or with DCQCN off.
    rp_cnp_ignored: Mlx5,
    /// Duplicate requests the responder saw (re-ACKed or replayed, never executed twice).
    duplicate_request: Both,
    /// Requests that arrived with a PSN ahead of the expected one (rxe: `out_of_seq_request`).
    out_of_sequence: Mlx5,
    /// PSN sequence error NAKs received by the requester, each followed by a resend from the
    /// PSN it names.
    packet_seq_err: Mlx5,
    /// READ responses or atomic ACKs found missing by a later response (implied NAK).
    implied_nak_seq_err: Mlx5,
    /// Retransmissions started by the local ACK timer. As in mlx5's other `_err` counters, the
    /// retry limit was not reached: a count in a run that succeeded is a recovery.
    local_ack_timeout_err: Mlx5,
    /// RNR NAKs received by the requester, each waited out and retried (rxe: `rcvd_rnr_err`).
    /// Not a failure, whatever mlx5's name says: a count in a run that succeeded is flow control
    /// at work, a SEND that came before its receive was posted.
    rnr_nak_retry_err: Mlx5,
    /// RNR NAKs sent by the responder, each for a SEND that found no receive posted (rxe:
    /// `send_rnr_err`).
    rnr_nak_sent: Softrnic,
    /// Work requests that failed with `RETRY_EXC_ERR`: transport retries (timeouts and
    /// sequence NAKs) ran out.
    retry_exceeded_err: Rxe,
    /// Work requests that failed with `RNR_RETRY_EXC_ERR`: RNR retries ran out (rxe:
    /// `retry_rnr_exceeded_err`).
    rnr_retry_exceeded_err: Softrnic,
    /// Packets sent again by go-back-N.
    retransmitted_pkts: Softrnic,
    /// Duplicate or ghost ACKs and responses the completer ignored.
    duplicate_response: Softrnic,
    /// Responses of the wrong kind or length for the request they answer, failing it.
    bad_response: Softrnic,
    /// NAK remote access errors received.
    req_remote_access_errors: Mlx5,
    /// NAK invalid request errors received.
    req_remote_invalid_request: Mlx5,
    /// NAK remote operational errors received.
    req_remote_operational_errors: Softrnic,
    /// Requests the responder refused with a remote access error.
    resp_remote_access_errors: Mlx5,
    /// Requests the responder refused as invalid.
    resp_invalid_request: Softrnic,
    /// Receives longer than the receive buffer.
    resp_local_length_error: Mlx5,
    /// UD datagrams dropped for a wrong Q_Key.
    qkey_violation: Softrnic,
    /// UD/UC messages dropped because no receive WQE was posted.
    rcv_no_wqe_drop: Softrnic,
    /// UC messages dropped for a PSN gap or a broken opcode sequence.
    uc_seq_drop: Softrnic,
    /// Completions lost because a CQ was full.
    cq_overflow: Softrnic,
    /// MADs to QP1 the Communication Manager dropped: malformed, truncated, or of another
    /// management class.
    cm_mad_dropped: Softrnic,
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
    fn every_counter_is_described() {
        let c = Counters::default();
        let described: Vec<&str> = Counters::described().map(|(n, _, _)| n).collect();
        assert_eq!(described, c.iter().map(|(n, _)| n).collect::<Vec<_>>());
        for (name, _, text) in Counters::described() {
            assert!(
                text.ends_with('.') && !text.contains("  "),
                "{name}: {text:?}"
            );
        }
        let (_, origin, text) = Counters::described()
            .find(|(n, _, _)| *n == "rnr_nak_retry_err")
            .unwrap();
        assert_eq!(origin, Origin::Mlx5);
        assert!(text.contains("Not a failure"), "{text}");
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
