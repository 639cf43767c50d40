//! Queue pair types, states and attributes, and the IBA rules for which attributes each state
//! transition requires and allows (IBA 11.2.5 table 91; the kernel's `qp_state_table`).

use softrnic_wire::Transport;

use crate::ah::AddressHandle;
use crate::attr::Mtu;
use crate::keys::Access;
use crate::{Result, VerbsError};

/// A QP's transport service, numbered as `enum ibv_qp_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum QpType {
    /// Reliable Connected.
    Rc = 2,
    /// Unreliable Connected.
    Uc = 3,
    /// Unreliable Datagram.
    Ud = 4,
    /// XRC initiator (IBA Annex A14): sends only, each request to the SRQ its work request
    /// names at the target.
    XrcSend = 9,
    /// XRC target: receives only, into the SRQ each request names, within its XRC domain.
    XrcRecv = 10,
}

impl QpType {
    /// The transport its packets belong to.
    pub const fn transport(self) -> Transport {
        match self {
            QpType::Rc => Transport::Rc,
            QpType::Uc => Transport::Uc,
            QpType::Ud => Transport::Ud,
            QpType::XrcSend | QpType::XrcRecv => Transport::Xrc,
        }
    }

    /// Whether its transport is reliable: ACKs, retries, READs and atomics (RC and XRC).
    pub const fn is_reliable(self) -> bool {
        matches!(self, QpType::Rc | QpType::XrcSend | QpType::XrcRecv)
    }
}

/// A QP state, numbered as `enum ibv_qp_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum QpState {
    /// Created, or reset: nothing is processed.
    Reset = 0,
    /// Receive WRs may be posted; nothing is processed.
    Init = 1,
    /// Ready to receive.
    Rtr = 2,
    /// Ready to send.
    Rts = 3,
    /// Send queue drain: no new send WRs are started.
    Sqd = 4,
    /// Send queue error (UC/UD): sends fail, receives continue.
    Sqe = 5,
    /// Error: every WR is flushed.
    Err = 6,
}

bitflags::bitflags! {
    /// `ibv_qp_attr_mask` bits.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
    pub struct AttrMask: u32 {
        /// `IBV_QP_STATE`.
        const STATE = 1;
        /// `IBV_QP_CUR_STATE`.
        const CUR_STATE = 1 << 1;
        /// `IBV_QP_EN_SQD_ASYNC_NOTIFY`.
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// `IBV_QP_ACCESS_FLAGS`.
        const ACCESS_FLAGS = 1 << 3;
        /// `IBV_QP_PKEY_INDEX`.
        const PKEY_INDEX = 1 << 4;
        /// `IBV_QP_PORT`.
        const PORT = 1 << 5;
        /// `IBV_QP_QKEY`.
        const QKEY = 1 << 6;
        /// `IBV_QP_AV`.
        const AV = 1 << 7;
        /// `IBV_QP_PATH_MTU`.
        const PATH_MTU = 1 << 8;
        /// `IBV_QP_TIMEOUT`.
        const TIMEOUT = 1 << 9;
        /// `IBV_QP_RETRY_CNT`.
        const RETRY_CNT = 1 << 10;
        /// `IBV_QP_RNR_RETRY`.
        const RNR_RETRY = 1 << 11;
        /// `IBV_QP_RQ_PSN`.
        const RQ_PSN = 1 << 12;
        /// `IBV_QP_MAX_QP_RD_ATOMIC`.
        const MAX_QP_RD_ATOMIC = 1 << 13;
        /// `IBV_QP_ALT_PATH`.
        const ALT_PATH = 1 << 14;
        /// `IBV_QP_MIN_RNR_TIMER`.
        const MIN_RNR_TIMER = 1 << 15;
        /// `IBV_QP_SQ_PSN`.
        const SQ_PSN = 1 << 16;
        /// `IBV_QP_MAX_DEST_RD_ATOMIC`.
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        /// `IBV_QP_PATH_MIG_STATE`.
        const PATH_MIG_STATE = 1 << 18;
        /// `IBV_QP_CAP`.
        const CAP = 1 << 19;
        /// `IBV_QP_DEST_QPN`.
        const DEST_QPN = 1 << 20;
    }
}

/// Attributes for `modify_qp`; only those named by the mask are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct QpAttr {
    /// The new state.
    pub qp_state: QpState,
    /// The state the caller believes the QP is in.
    pub cur_qp_state: QpState,
    /// Remote access the QP allows (REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC).
    pub qp_access_flags: Access,
    /// P_Key index (softrnic has one P_Key, 0xffff).
    pub pkey_index: u16,
    /// Port number (1).
    pub port_num: u8,
    /// Q_Key (UD).
    pub qkey: u32,
    /// The path to the peer (RC/UC).
    pub ah: Option<AddressHandle>,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Transport retries (3 bits).
    pub retry_cnt: u8,
    /// RNR retries (3 bits; 7 is infinite).
    pub rnr_retry: u8,
    /// The first PSN the responder expects.
    pub rq_psn: u32,
    /// Outstanding READ/atomic requests this QP may send.
    pub max_rd_atomic: u8,
    /// The RNR NAK timer code this QP's responder sends.
    pub min_rnr_timer: u8,
    /// The first PSN the requester sends.
    pub sq_psn: u32,
    /// Outstanding READ/atomic requests this QP's responder accepts.
    pub max_dest_rd_atomic: u8,
    /// The remote QP.
    pub dest_qp_num: u32,
    /// Ask for an async event when the send queue has drained (RTS to SQD).
    pub en_sqd_async_notify: bool,
}

impl Default for QpAttr {
    fn default() -> QpAttr {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            qp_access_flags: Access::default(),
            pkey_index: 0,
            port_num: 1,
            qkey: 0,
            ah: None,
            path_mtu: Mtu::M1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            rq_psn: 0,
            max_rd_atomic: 1,
            min_rnr_timer: 12,
            sq_psn: 0,
            max_dest_rd_atomic: 1,
            dest_qp_num: 0,
            en_sqd_async_notify: false,
        }
    }
}

use AttrMask as M;
use QpState as S;
use QpType as T;

const fn bits(masks: &[AttrMask]) -> AttrMask {
    let mut m = AttrMask::empty();
    let mut i = 0;
    while i < masks.len() {
        m = m.union(masks[i]);
        i += 1;
    }
    m
}

/// The required and optional attributes of a transition, or `None` if it is not allowed
/// (IBA 11.2.5 table 91; the kernel's `qp_state_table`).
pub fn transition(t: QpType, from: QpState, to: QpState) -> Option<(AttrMask, AttrMask)> {
    let none = AttrMask::empty();
    let rc_uc_access = bits(&[M::PKEY_INDEX, M::PORT, M::ACCESS_FLAGS]);
    let ud_qkey = bits(&[M::PKEY_INDEX, M::PORT, M::QKEY]);
    let rts_opt = match t {
        T::Rc | T::XrcRecv => bits(&[
            M::CUR_STATE,
            M::ACCESS_FLAGS,
            M::ALT_PATH,
            M::PATH_MIG_STATE,
            M::MIN_RNR_TIMER,
        ]),
        T::Uc | T::XrcSend => bits(&[
            M::CUR_STATE,
            M::ACCESS_FLAGS,
            M::ALT_PATH,
            M::PATH_MIG_STATE,
        ]),
        T::Ud => bits(&[M::CUR_STATE, M::QKEY]),
    };
    Some(match (from, to) {
        // Any state may go to Reset, and any but Reset to Error (IBA 10.3.1, the QP state
        // diagram: a QP leaves Reset only for Init; the kernel's qp_state_table).
        (S::Reset, S::Err) => return None,
        (_, S::Reset) | (_, S::Err) => (none, none),
        (S::Reset, S::Init) => match t {
            T::Ud => (ud_qkey, none),
            _ => (rc_uc_access, none),
        },
        (S::Init, S::Init) => match t {
            T::Ud => (none, ud_qkey),
            _ => (none, rc_uc_access),
        },
        (S::Init, S::Rtr) => match t {
            T::Rc | T::XrcRecv => (
                bits(&[
                    M::AV,
                    M::PATH_MTU,
                    M::DEST_QPN,
                    M::RQ_PSN,
                    M::MAX_DEST_RD_ATOMIC,
                    M::MIN_RNR_TIMER,
                ]),
                bits(&[M::ALT_PATH, M::ACCESS_FLAGS, M::PKEY_INDEX]),
            ),
            T::Uc | T::XrcSend => (
                bits(&[M::AV, M::PATH_MTU, M::DEST_QPN, M::RQ_PSN]),
                bits(&[M::ALT_PATH, M::ACCESS_FLAGS, M::PKEY_INDEX]),
            ),
            T::Ud => (none, bits(&[M::PKEY_INDEX, M::QKEY])),
        },
        (S::Rtr, S::Rts) => match t {
            // The kernel's table: an XRC target only answers, so it needs no retry counts.
            T::XrcRecv => (bits(&[M::TIMEOUT, M::SQ_PSN]), rts_opt),
            T::Rc | T::XrcSend => (
                bits(&[
                    M::TIMEOUT,
                    M::RETRY_CNT,
                    M::RNR_RETRY,
                    M::SQ_PSN,
                    M::MAX_QP_RD_ATOMIC,
                ]),
                rts_opt,
            ),
            T::Uc | T::Ud => (M::SQ_PSN, rts_opt),
        },
        (S::Rts, S::Rts) | (S::Sqd, S::Rts) => (none, rts_opt),
        (S::Rts, S::Sqd) => (none, M::EN_SQD_ASYNC_NOTIFY),
        (S::Sqd, S::Sqd) => (
            none,
            match t {
                T::Rc | T::XrcSend | T::XrcRecv => bits(&[
                    M::PORT,
                    M::AV,
                    M::TIMEOUT,
                    M::RETRY_CNT,
                    M::RNR_RETRY,
                    M::MAX_QP_RD_ATOMIC,
                    M::MAX_DEST_RD_ATOMIC,
                    M::ALT_PATH,
                    M::ACCESS_FLAGS,
                    M::PKEY_INDEX,
                    M::MIN_RNR_TIMER,
                    M::PATH_MIG_STATE,
                ]),
                T::Uc => bits(&[
                    M::AV,
                    M::ALT_PATH,
                    M::ACCESS_FLAGS,
                    M::PKEY_INDEX,
                    M::PATH_MIG_STATE,
                ]),
                T::Ud => bits(&[M::PKEY_INDEX, M::QKEY]),
            },
        ),
        (S::Sqe, S::Rts) => match t {
            T::Rc | T::XrcSend | T::XrcRecv => return None,
            T::Uc => (none, bits(&[M::CUR_STATE, M::ACCESS_FLAGS])),
            T::Ud => (none, bits(&[M::CUR_STATE, M::QKEY])),
        },
        _ => return None,
    })
}

/// The three transitions that take a new QP of type `t` from RESET to RTS, each with the
/// attributes IBA requires for it (STATE included), from [`transition`]'s table: what every
/// program that connects a QP does.
pub fn bring_up(t: QpType) -> [(QpState, AttrMask); 3] {
    [(S::Reset, S::Init), (S::Init, S::Rtr), (S::Rtr, S::Rts)].map(|(from, to)| {
        let (required, _) = transition(t, from, to).expect("every type goes RESET to RTS");
        (to, required.union(M::STATE))
    })
}

/// Checks a `modify_qp` call against the transition table, as `ib_modify_qp_is_ok` does:
/// the transition must exist, every required attribute must be given, and nothing else but
/// the optional ones. Returns the target state.
pub fn check_modify(t: QpType, cur: QpState, attr: &QpAttr, mask: AttrMask) -> Result<QpState> {
    let from = if mask.contains(M::CUR_STATE) {
        if !matches!(cur, S::Rtr | S::Rts | S::Sqd | S::Sqe) {
            return Err(VerbsError::Invalid(
                "cur_qp_state is not allowed in this state",
            ));
        }
        attr.cur_qp_state
    } else {
        cur
    };
    let to = if mask.contains(M::STATE) {
        attr.qp_state
    } else {
        from
    };
    let (required, optional) =
        transition(t, from, to).ok_or(VerbsError::Invalid("state transition not allowed"))?;
    if !mask.contains(required) {
        return Err(VerbsError::Invalid(
            "a required attribute for this transition is missing",
        ));
    }
    let allowed = required.union(optional).union(M::STATE);
    if !allowed.contains(mask) {
        return Err(VerbsError::Invalid(
            "an attribute is not allowed in this transition",
        ));
    }
    if mask.contains(M::PORT) && attr.port_num != 1 {
        return Err(VerbsError::Invalid("port_num must be 1"));
    }
    // The P_Key table holds one entry, the default P_Key (as a RoCE port's): an index beyond
    // it is an invalid modifier (IBA 11.2.5.3), EINVAL as mlx5 gives; rxe 6.1 does not check.
    if mask.contains(M::PKEY_INDEX) && attr.pkey_index != 0 {
        return Err(VerbsError::Invalid("pkey_index must be 0"));
    }
    if mask.contains(M::AV) && attr.ah.is_none() {
        return Err(VerbsError::Invalid("an address vector is required"));
    }
    if mask.contains(M::TIMEOUT) && attr.timeout > 31 {
        return Err(VerbsError::Invalid("timeout is 5 bits"));
    }
    if (mask.contains(M::RETRY_CNT) && attr.retry_cnt > 7)
        || (mask.contains(M::RNR_RETRY) && attr.rnr_retry > 7)
    {
        return Err(VerbsError::Invalid("retry counts are 3 bits"));
    }
    if mask.contains(M::MIN_RNR_TIMER) && attr.min_rnr_timer > 31 {
        return Err(VerbsError::Invalid("min_rnr_timer is 5 bits"));
    }
    if (mask.contains(M::RQ_PSN) && attr.rq_psn > crate::psn::MASK)
        || (mask.contains(M::SQ_PSN) && attr.sq_psn > crate::psn::MASK)
    {
        return Err(VerbsError::Invalid("PSNs are 24 bits"));
    }
    if mask.contains(M::DEST_QPN) && attr.dest_qp_num > crate::psn::MASK {
        return Err(VerbsError::Invalid("QP numbers are 24 bits"));
    }
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init_mask() -> AttrMask {
        bits(&[M::STATE, M::PKEY_INDEX, M::PORT, M::ACCESS_FLAGS])
    }

    #[test]
    fn reset_to_init_needs_its_attributes() {
        let attr = QpAttr {
            qp_state: S::Init,
            ..QpAttr::default()
        };
        assert_eq!(
            check_modify(T::Rc, S::Reset, &attr, init_mask()),
            Ok(S::Init)
        );
        let missing = init_mask().difference(M::PORT);
        assert_eq!(
            check_modify(T::Rc, S::Reset, &attr, missing)
                .unwrap_err()
                .errno(),
            22
        );
        // QKEY is a UD attribute: EINVAL on RC.
        let extra = init_mask().union(M::QKEY);
        assert!(check_modify(T::Rc, S::Reset, &attr, extra).is_err());
        let ud = bits(&[M::STATE, M::PKEY_INDEX, M::PORT, M::QKEY]);
        assert_eq!(check_modify(T::Ud, S::Reset, &attr, ud), Ok(S::Init));
    }

    #[test]
    fn skipping_states_is_einval() {
        let attr = QpAttr {
            qp_state: S::Rts,
            ..QpAttr::default()
        };
        assert!(check_modify(T::Rc, S::Init, &attr, M::STATE).is_err());
        assert!(check_modify(T::Rc, S::Reset, &attr, M::STATE).is_err());
        let err = QpAttr {
            qp_state: S::Err,
            ..attr
        };
        assert_eq!(check_modify(T::Rc, S::Init, &err, M::STATE), Ok(S::Err));
        let reset = QpAttr {
            qp_state: S::Reset,
            ..attr
        };
        assert_eq!(check_modify(T::Uc, S::Err, &reset, M::STATE), Ok(S::Reset));
    }

    #[test]
    fn rtr_and_rts_for_each_type() {
        let ah = AddressHandle::to(Default::default(), 0);
        let rtr = QpAttr {
            qp_state: S::Rtr,
            ah: Some(ah),
            ..QpAttr::default()
        };
        let rc_rtr = bits(&[
            M::STATE,
            M::AV,
            M::PATH_MTU,
            M::DEST_QPN,
            M::RQ_PSN,
            M::MAX_DEST_RD_ATOMIC,
            M::MIN_RNR_TIMER,
        ]);
        assert_eq!(check_modify(T::Rc, S::Init, &rtr, rc_rtr), Ok(S::Rtr));
        // UC has no responder resources: MAX_DEST_RD_ATOMIC is EINVAL.
        assert!(check_modify(T::Uc, S::Init, &rtr, rc_rtr).is_err());
        assert_eq!(check_modify(T::Ud, S::Init, &rtr, M::STATE), Ok(S::Rtr));
        let rts = QpAttr {
            qp_state: S::Rts,
            ..rtr
        };
        let rc_rts = bits(&[
            M::STATE,
            M::TIMEOUT,
            M::RETRY_CNT,
            M::RNR_RETRY,
            M::SQ_PSN,
            M::MAX_QP_RD_ATOMIC,
        ]);
        assert_eq!(check_modify(T::Rc, S::Rtr, &rts, rc_rts), Ok(S::Rts));
        assert!(check_modify(T::Rc, S::Rtr, &rts, M::STATE.union(M::SQ_PSN)).is_err());
        assert_eq!(
            check_modify(T::Ud, S::Rtr, &rts, M::STATE.union(M::SQ_PSN)),
            Ok(S::Rts)
        );
        let bad = QpAttr {
            retry_cnt: 8,
            ..rts
        };
        assert!(check_modify(T::Rc, S::Rtr, &bad, rc_rts).is_err());
    }

    #[test]
    fn bring_up_names_each_transitions_required_attributes() {
        let ud = bring_up(T::Ud);
        assert_eq!(
            ud[0],
            (S::Init, bits(&[M::STATE, M::PKEY_INDEX, M::PORT, M::QKEY]))
        );
        assert_eq!(ud[1], (S::Rtr, M::STATE));
        assert_eq!(ud[2], (S::Rts, M::STATE.union(M::SQ_PSN)));
        let rc = bring_up(T::Rc);
        assert!(rc[1].1.contains(M::MAX_DEST_RD_ATOMIC) && rc[2].1.contains(M::RETRY_CNT));
        // Each step passes the checker with exactly those attributes.
        let attr = QpAttr {
            ah: Some(AddressHandle::to(Default::default(), 0)),
            ..QpAttr::default()
        };
        for t in [T::Rc, T::Uc, T::Ud] {
            let mut state = S::Reset;
            for (to, mask) in bring_up(t) {
                let a = QpAttr {
                    qp_state: to,
                    ..attr
                };
                state = check_modify(t, state, &a, mask).unwrap();
            }
            assert_eq!(state, S::Rts);
        }
    }

    #[test]
    fn cur_state_only_from_rtr_on() {
        let attr = QpAttr {
            qp_state: S::Rts,
            cur_qp_state: S::Rts,
            ..QpAttr::default()
        };
        let mask = M::STATE.union(M::CUR_STATE);
        assert_eq!(check_modify(T::Rc, S::Rts, &attr, mask), Ok(S::Rts));
        assert!(check_modify(T::Rc, S::Init, &attr, mask).is_err());
        // SQE to RTS does not exist for RC.
        assert!(check_modify(T::Rc, S::Sqe, &attr, M::STATE).is_err());
        assert_eq!(check_modify(T::Ud, S::Sqe, &attr, M::STATE), Ok(S::Rts));
    }

    #[test]
    fn error_is_reached_from_every_state_but_reset() {
        let err = QpAttr {
            qp_state: S::Err,
            ..QpAttr::default()
        };
        for t in [T::Rc, T::Uc, T::Ud] {
            assert!(check_modify(t, S::Reset, &err, M::STATE).is_err());
            for from in [S::Init, S::Rtr, S::Rts, S::Sqd, S::Sqe, S::Err] {
                assert_eq!(check_modify(t, from, &err, M::STATE), Ok(S::Err));
            }
        }
    }
}
