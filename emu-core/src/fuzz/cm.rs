//! The Communication Manager's fuzz target, and the steps of a CM conversation that the
//! engine's `ops` target also takes (there the MADs arrive in frames to QP1).

use arbitrary::{Arbitrary, Unstructured};
use softrnic_wire::cm::CmMad;
use softrnic_wire::mad::MAD_LEN;

use super::{LOCAL, PEER, PEER_MAC};
use crate::cm::{AcceptParams, Cm, CmEvent, ConnectParams, Peer};
use crate::{Gid, Instant};

/// A step of a conversation with the Communication Manager: a MAD from the peer (a message of
/// any kind with fuzzed fields, aimed at a connection the CM knows when `known` says so, or raw
/// bytes), a call of its consumer, or time passing.
#[derive(Debug, Clone, Arbitrary)]
pub(super) enum CmStep {
    Mad {
        attr: u8,
        known: Option<u8>,
        tid: u64,
        body: Vec<u8>,
    },
    Raw(Vec<u8>),
    /// A well-formed message of the peer's (`kind` says which), naming one of the CM's
    /// connections and the peer's side of it by small numbers, so that whole conversations
    /// (a REQ to a listener, the RTU, a DREQ) come about.
    Message {
        kind: u8,
        ours: u8,
        theirs: u8,
        tid: u8,
        service: u8,
        value: u32,
        private: Vec<u8>,
    },
    Listen(u8),
    Connect(u8, Vec<u8>),
    Accept(u8, Vec<u8>),
    Reject(u8, u16, Vec<u8>),
    ReadyToUse(u8),
    NotifyEstablished(u8),
    Disconnect(u8),
    Destroy(u8),
    SidrRequest(u8),
    SidrReply(u8, u8),
    Advance(u32),
}

/// The consumer's side of the CM under fuzzing: its peer's address and the connection IDs the
/// CM has handed out.
#[derive(Clone)]
pub(super) struct CmSide {
    pub(super) peer: Peer,
    pub(super) ids: Vec<u32>,
}

impl CmSide {
    pub(super) fn new() -> CmSide {
        CmSide {
            peer: Peer {
                gid: Gid::from(core::net::Ipv4Addr::from(PEER)),
                local: Gid::from(core::net::Ipv4Addr::from(LOCAL)),
                mac: PEER_MAC.0,
            },
            ids: Vec::new(),
        }
    }

    fn id(&self, i: u8) -> u32 {
        // Now and then an ID the CM never gave out.
        self.ids
            .get(usize::from(i))
            .copied()
            .unwrap_or(u32::from(i))
    }

    fn service(n: u8) -> u64 {
        softrnic_wire::cm::ip_service_id(softrnic_wire::cm::port_space::TCP, u16::from(n % 4))
    }

    /// The peer's message of kind `kind % 9`: `ours` picks the CM's connection it names,
    /// `theirs` the peer's communication ID, `value` the numbers it carries.
    fn message<'a>(
        &self,
        kind: u8,
        ours: u8,
        theirs: u8,
        service: u8,
        value: u32,
        private: &'a [u8],
    ) -> softrnic_wire::cm::CmMessage<'a> {
        use softrnic_wire::cm::{
            CmMessage, CmPath, Dreq, Ids, Mra, Rej, Rep, Req, SidrRep, SidrReq,
        };
        let local_comm_id = 0x100 + u32::from(theirs % 8);
        let remote_comm_id = self.id(ours);
        let guid = 0xfeed_0000 + u64::from(theirs >> 4);
        let qpn = 0x20 + (value & 0xff);
        let service_id = Self::service(service);
        let private = &private[..private.len().min(92)];
        match kind % 9 {
            0 => CmMessage::Req(Req {
                local_comm_id,
                service_id,
                local_ca_guid: guid,
                local_qkey: 0,
                local_qpn: qpn,
                responder_resources: (value >> 8) as u8 % 4,
                initiator_depth: (value >> 10) as u8 % 4,
                remote_cm_response_timeout: (value >> 12) as u8 % 32,
                transport: (value >> 17) as u8 % 4,
                end_to_end_flow_control: false,
                starting_psn: value & crate::psn::MASK,
                local_cm_response_timeout: (value >> 19) as u8 % 32,
                retry_count: 7,
                pkey: 0xffff,
                path_mtu: (value >> 24) as u8 % 6,
                rdc_exists: false,
                rnr_retry_count: 7,
                max_cm_retries: 15,
                srq: value & 1 != 0,
                extended_transport: 0,
                primary_path: CmPath {
                    local_gid: self.peer.gid.0,
                    remote_gid: self.peer.local.0,
                    hop_limit: 64,
                    local_ack_timeout: 14,
                    ..CmPath::default()
                },
                alternate_path: CmPath::default(),
                private_data: private,
            }),
            1 => CmMessage::Rep(Rep {
                local_comm_id,
                remote_comm_id,
                local_qkey: 0,
                local_qpn: qpn,
                starting_psn: value & crate::psn::MASK,
                responder_resources: 1,
                initiator_depth: 1,
                target_ack_delay: 0,
                failover_accepted: 0,
                end_to_end_flow_control: false,
                rnr_retry_count: 7,
                srq: false,
                local_ca_guid: guid,
                private_data: private,
            }),
            2 => CmMessage::Rtu(Ids {
                local_comm_id,
                remote_comm_id,
                private_data: private,
            }),
            3 => CmMessage::Rej(Rej {
                local_comm_id: if value & 1 != 0 { 0 } else { local_comm_id },
                remote_comm_id,
                message_rejected: (value >> 1) as u8 % 3,
                reject_info_len: 0,
                reason: (value >> 3) as u16 % 32,
                ari: &[],
                private_data: private,
            }),
            4 => CmMessage::Mra(Mra {
                local_comm_id,
                remote_comm_id,
                message_mraed: value as u8 % 3,
                service_timeout: (value >> 2) as u8 % 32,
                private_data: private,
            }),
            5 => CmMessage::Dreq(Dreq {
                local_comm_id,
                remote_comm_id,
                remote_qpn: 0x12,
                private_data: private,
            }),
            6 => CmMessage::Drep(Ids {
                local_comm_id,
                remote_comm_id,
                private_data: private,
            }),
            7 => CmMessage::SidrReq(SidrReq {
                request_id: local_comm_id,
                pkey: 0xffff,
                service_id,
                private_data: private,
            }),
            _ => CmMessage::SidrRep(SidrRep {
                request_id: remote_comm_id,
                status: value as u8 % 6,
                additional_info_len: 0,
                qpn,
                service_id,
                qkey: value,
                class_port_info: &[],
                private_data: private,
            }),
        }
    }

    /// The MAD the peer sends in this step, if the step is one.
    pub(super) fn mad(&self, s: &CmStep) -> Option<Vec<u8>> {
        match s {
            CmStep::Mad {
                attr,
                known,
                tid,
                body,
            } => {
                // A valid header, so the fuzzer reaches the messages' handling.
                let mut mad = [0u8; MAD_LEN];
                mad[..4].copy_from_slice(&[1, 0x07, 2, 0x03]);
                mad[8..16].copy_from_slice(&tid.to_be_bytes());
                mad[17] = 0x10 + attr % 10;
                let n = body.len().min(MAD_LEN - 24);
                mad[24..24 + n].copy_from_slice(&body[..n]);
                if let Some(k) = known {
                    // The receiver's ID: where a connection message names ours, or a SIDR_REP
                    // its request.
                    let at = if mad[17] == 0x18 { 24 } else { 28 };
                    mad[at..at + 4].copy_from_slice(&self.id(*k).to_be_bytes());
                }
                Some(mad.to_vec())
            }
            CmStep::Raw(bytes) => Some(bytes.clone()),
            CmStep::Message {
                kind,
                ours,
                theirs,
                tid,
                service,
                value,
                private,
            } => {
                let mad = CmMad {
                    transaction_id: u64::from(*tid),
                    message: self.message(*kind, *ours, *theirs, *service, *value, private),
                };
                let mut buf = vec![0u8; MAD_LEN];
                mad.emit(&mut buf).ok()?;
                Some(buf)
            }
            _ => None,
        }
    }

    /// Carries out a step that is a call of the CM's consumer (MADs and time are the caller's).
    pub(super) fn call(&mut self, cm: &mut Cm, now: Instant, s: &CmStep) {
        match s {
            CmStep::Listen(n) => {
                let _ = cm.listen(Self::service(*n));
            }
            CmStep::Connect(n, private) => {
                let params = ConnectParams {
                    private_data: private.clone(),
                    ..ConnectParams::rc(self.peer, Self::service(*n), 0x11, 1)
                };
                if let Ok(id) = cm.connect(now, params) {
                    self.ids.push(id);
                }
            }
            CmStep::Accept(i, private) => {
                let params = AcceptParams {
                    qpn: 0x12,
                    starting_psn: 2,
                    responder_resources: 1,
                    initiator_depth: 1,
                    rnr_retry_count: 7,
                    srq: false,
                    private_data: private.clone(),
                };
                let _ = cm.accept(now, self.id(*i), params);
            }
            CmStep::Reject(i, reason, private) => {
                let _ = cm.reject(self.id(*i), *reason, private);
            }
            CmStep::ReadyToUse(i) => {
                let _ = cm.ready_to_use(self.id(*i), &[]);
            }
            CmStep::NotifyEstablished(i) => {
                let _ = cm.notify_established(self.id(*i));
            }
            CmStep::Disconnect(i) => {
                let _ = cm.disconnect(now, self.id(*i));
            }
            CmStep::Destroy(i) => cm.destroy(now, self.id(*i)),
            CmStep::SidrRequest(n) => {
                if let Ok(id) = cm.sidr_request(now, self.peer, Self::service(*n), &[]) {
                    self.ids.push(id);
                }
            }
            CmStep::SidrReply(i, status) => {
                let _ = cm.sidr_reply(self.id(*i), *status, 0x12, 0x1234, b"fuzz");
            }
            CmStep::Mad { .. } | CmStep::Raw(_) | CmStep::Message { .. } | CmStep::Advance(_) => {}
        }
    }

    /// Takes the CM's events, keeping the IDs of the connections it reports.
    pub(super) fn events(&mut self, cm: &mut Cm) {
        while let Some(e) = cm.poll_event() {
            if let CmEvent::ReqReceived { id, .. } | CmEvent::SidrReqReceived { id, .. } = e {
                self.ids.push(id);
            }
        }
    }
}

/// Arbitrary MADs, consumer calls and time into the Communication Manager: no panic, nothing
/// due left undone, and only valid MADs sent, to the peer it talks to.
pub fn cm(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let mut cm = Cm::new(0xa, 1);
    let mut side = CmSide::new();
    let mut now = Instant::ZERO;
    for _ in 0..256 {
        let Ok(step) = CmStep::arbitrary(&mut u) else {
            break;
        };
        match (&step, side.mad(&step)) {
            (_, Some(mad)) => cm.handle_mad(now, side.peer, &mad),
            (CmStep::Advance(us), None) => {
                now = now + core::time::Duration::from_micros(u64::from(*us) * 16);
                cm.handle_timeout(now);
                // Nothing due is left undone.
                assert!(cm.poll_timeout().is_none_or(|t| t > now));
            }
            (_, None) => side.call(&mut cm, now, &step),
        }
        while let Some(o) = cm.poll_transmit() {
            assert_eq!(o.to, side.peer);
            CmMad::parse(&o.mad).expect("the CM sends valid MADs");
        }
        side.events(&mut cm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: u8, service: u8) -> CmStep {
        CmStep::Message {
            kind,
            ours: 0,
            theirs: 3,
            tid: 1,
            service,
            value: 0x0300_0000,
            private: vec![1, 2, 3],
        }
    }

    /// The typed messages make whole passive-side conversations: REQ to a listener, accept,
    /// RTU, DREQ.
    #[test]
    fn messages_carry_a_conversation_through() {
        let mut cm = Cm::new(0xa, 1);
        let mut side = CmSide::new();
        let now = Instant::ZERO;
        side.call(&mut cm, now, &CmStep::Listen(2));
        cm.handle_mad(now, side.peer, &side.mad(&message(0, 2)).unwrap());
        side.events(&mut cm);
        assert_eq!(side.ids.len(), 1, "the REQ reached the listener");
        side.call(&mut cm, now, &CmStep::Accept(0, vec![]));
        let rep = cm.poll_transmit().expect("a REP");
        assert_eq!(CmMad::parse(&rep.mad).unwrap().message.name(), "REP");
        cm.handle_mad(now, side.peer, &side.mad(&message(2, 2)).unwrap());
        assert!(matches!(cm.poll_event(), Some(CmEvent::Established { .. })));
        cm.handle_mad(now, side.peer, &side.mad(&message(5, 2)).unwrap());
        assert!(matches!(
            cm.poll_event(),
            Some(CmEvent::Disconnected { .. })
        ));
    }
}
