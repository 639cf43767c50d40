//! Connections: the REQ (or SIDR_REQ) of `rdma_connect`, the REP (or SIDR_REP) of
//! `rdma_accept`, the RTU, `rdma_reject`, and the QP attributes of `rdma_init_qp_attr`.

use softrnic_emu_core::cm::{AcceptParams, ConnectParams, Peer};
use softrnic_emu_core::{Access, AttrMask, Instant, QpAttr, QpState, QpType};
use softrnic_wire::cm::{CmPath, CmaHeader, ip_service_id, port_space, rej_reason};

use super::{
    ACK_TIMEOUT, ConnParam, Daemon, HOP_LIMIT, Id, REJ_DATA, REP_DATA, REQ_USER_DATA, Refusal,
    Reply, SIDR_REP_DATA, SIDR_REQ_USER_DATA, State, UDP_QKEY, cm_error, error, refuse, refused,
};
use crate::device_at;

impl Daemon {
    /// The CM path of a connection from `x`.
    pub(super) fn path(x: &Id) -> CmPath {
        CmPath {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: x.sgid.0,
            remote_gid: x.dgid.0,
            traffic_class: x.tos,
            hop_limit: HOP_LIMIT,
            local_ack_timeout: x.ack_timeout.unwrap_or(ACK_TIMEOUT),
            ..CmPath::default()
        }
    }

    /// The peer as the device's CM addresses it.
    pub(super) fn peer(x: &Id) -> Peer {
        Peer {
            gid: x.dgid,
            local: x.sgid,
            mac: x.dmac,
        }
    }

    /// rdma_cm's header, then the program's private data.
    pub(super) fn with_header(x: &Id, user: &[u8], room: usize) -> Result<Vec<u8>, Refusal> {
        if user.len() > room {
            return Err(refuse(
                libc::EINVAL,
                format!("{} bytes of private data; at most {room} fit", user.len()),
            ));
        }
        let (src, dst) = (x.src.expect("resolved"), x.dst.expect("resolved"));
        let header = CmaHeader {
            src_port: src.port(),
            src: src.ip(),
            dst: dst.ip(),
        };
        let mut data = vec![0; CmaHeader::LEN];
        header
            .emit(&mut data)
            .map_err(|_| refuse(libc::EAFNOSUPPORT, "addresses of two families"))?;
        data.extend_from_slice(user);
        Ok(data)
    }

    /// `rdma_connect`: a REQ for a connected id, a SIDR_REQ for a UD one.
    pub(super) fn cm_connect(&mut self, now: Instant, id: u32, param: ConnParam) -> Reply {
        let psn = (self.cm.random() & 0xff_ffff) as u32;
        let x = &self.cm.ids[&id];
        if x.state != State::RouteResolved {
            return error(libc::EINVAL, "resolve the route first");
        }
        let d = x.device.expect("resolved");
        let service = ip_service_id(x.ps, x.dst.expect("resolved").port());
        let room = if x.ud() {
            SIDR_REQ_USER_DATA
        } else {
            REQ_USER_DATA
        };
        let data = match Self::with_header(x, &param.private_data, room) {
            Ok(d) => d,
            Err(r) => return refused(r),
        };
        let peer = Self::peer(x);
        let connect = ConnectParams {
            transport: u8::from(x.qp_type == QpType::Uc),
            responder_resources: param.responder_resources,
            initiator_depth: param.initiator_depth,
            retry_count: param.retry_count.min(7),
            rnr_retry_count: param.rnr_retry_count.min(7),
            path_mtu: x.path_mtu as u8,
            srq: param.srq,
            path: Self::path(x),
            private_data: data,
            ..ConnectParams::rc(peer, service, param.qp_num, psn)
        };
        let ud = x.ud();
        let Some(mut dev) = device_at(&self.devices, d) else {
            return error(libc::ENODEV, "the device is gone");
        };
        let conn = if ud {
            dev.engine
                .cm()
                .sidr_request(now, peer, service, &connect.private_data)
        } else {
            dev.engine.cm().connect(now, connect)
        };
        let conn = match conn {
            Ok(c) => c,
            Err(e) => return cm_error(e),
        };
        tracing::debug!(id, conn, service, ud, "rdma_cm: connecting");
        self.cm.conns.insert((d, conn), id);
        let x = self.cm.ids.get_mut(&id).expect("checked");
        x.conn = Some(conn);
        x.state = State::Connect;
        x.active = true;
        x.psn = psn;
        x.responder_resources = param.responder_resources;
        x.initiator_depth = param.initiator_depth;
        x.retry_count = param.retry_count.min(7);
        Reply::Ok
    }

    /// `rdma_accept` on a passive id (a REP, or a SIDR_REP with the QP), or the active side's
    /// RTU once its QP is ready.
    pub(super) fn cm_accept(&mut self, now: Instant, id: u32, param: ConnParam) -> Reply {
        let x = &self.cm.ids[&id];
        // The PSN was chosen with the request: the program readied its QP with it.
        let psn = x.psn;
        let (Some(d), Some(conn), State::Connect) = (x.device, x.conn, x.state) else {
            return error(libc::EINVAL, "no connection request to accept");
        };
        let (active, sidr, ps) = (x.active, x.sidr, x.ps);
        let Some(mut dev) = device_at(&self.devices, d) else {
            return error(libc::ENODEV, "the device is gone");
        };
        let cm = dev.engine.cm();
        let done = if active {
            cm.ready_to_use(conn, &[])
        } else if sidr {
            if param.private_data.len() > SIDR_REP_DATA {
                return error(libc::EINVAL, "too much private data for a SIDR_REP");
            }
            let qkey = if ps == port_space::IPOIB {
                param.qkey
            } else {
                UDP_QKEY
            };
            cm.sidr_reply(conn, 0, param.qp_num, qkey, &param.private_data)
        } else {
            if param.private_data.len() > REP_DATA {
                return error(libc::EINVAL, "too much private data for a REP");
            }
            cm.accept(
                now,
                conn,
                AcceptParams {
                    qpn: param.qp_num,
                    starting_psn: psn,
                    responder_resources: param.responder_resources,
                    initiator_depth: param.initiator_depth,
                    rnr_retry_count: param.rnr_retry_count.min(7),
                    srq: param.srq,
                    private_data: param.private_data.clone(),
                },
            )
        };
        if let Err(e) = done {
            return cm_error(e);
        }
        let x = self.cm.ids.get_mut(&id).expect("checked");
        if active {
            x.state = State::Established;
        } else if sidr {
            // A SIDR request is answered and forgotten.
            self.cm.conns.remove(&(d, conn));
            x.conn = None;
            x.state = State::Established;
        } else {
            x.responder_resources = param.responder_resources;
            x.initiator_depth = param.initiator_depth;
        }
        Reply::Ok
    }

    /// `rdma_reject`: a REJ (consumer-defined) or a SIDR_REP that refuses.
    pub(super) fn cm_reject(&mut self, id: u32, private_data: &[u8]) -> Reply {
        let x = &self.cm.ids[&id];
        let (Some(d), Some(conn)) = (x.device, x.conn) else {
            return error(libc::EINVAL, "no connection request to reject");
        };
        let sidr = x.sidr;
        let Some(mut dev) = device_at(&self.devices, d) else {
            return error(libc::ENODEV, "the device is gone");
        };
        let done = if sidr {
            // IBA 12.11.2: status 1, the service refuses.
            dev.engine.cm().sidr_reply(conn, 1, 0, 0, private_data)
        } else {
            if private_data.len() > REJ_DATA {
                return error(libc::EINVAL, "too much private data for a REJ");
            }
            dev.engine
                .cm()
                .reject(conn, rej_reason::CONSUMER, private_data)
        };
        if let Err(e) = done {
            return cm_error(e);
        }
        self.cm.conns.remove(&(d, conn));
        let x = self.cm.ids.get_mut(&id).expect("checked");
        x.conn = None;
        x.state = State::Disconnect;
        Reply::Ok
    }

    /// `rdma_init_qp_attr` (the kernel's `rdma_init_qp_attr` and `ib_cm_init_qp_attr`).
    pub(super) fn init_qp_attr(
        &self,
        id: u32,
        state: QpState,
    ) -> Result<(QpAttr, AttrMask), Refusal> {
        let x = &self.cm.ids[&id];
        if x.device.is_none() {
            return Err(refuse(libc::EINVAL, "the id has no device yet"));
        }
        let mut a = QpAttr {
            qp_state: state,
            ..QpAttr::default()
        };
        let m = |masks: &[AttrMask]| masks.iter().fold(AttrMask::empty(), |m, &b| m.union(b));
        let mask = match (state, x.ud()) {
            (QpState::Init, true) => {
                a.qkey = UDP_QKEY;
                m(&[
                    AttrMask::STATE,
                    AttrMask::PKEY_INDEX,
                    AttrMask::PORT,
                    AttrMask::QKEY,
                ])
            }
            (QpState::Init, false) => {
                // Before a connection, no remote access; with one, WRITEs, and READs and
                // atomics if the QP takes any.
                a.qp_access_flags = if x.conn.is_none() {
                    Access::default()
                } else if x.responder_resources > 0 {
                    Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC
                } else {
                    Access::REMOTE_WRITE
                };
                m(&[
                    AttrMask::STATE,
                    AttrMask::PKEY_INDEX,
                    AttrMask::PORT,
                    AttrMask::ACCESS_FLAGS,
                ])
            }
            (QpState::Rtr, true) | (QpState::Rts, true) => AttrMask::STATE,
            (QpState::Rtr, false) if x.conn.is_some() => {
                a.ah = Some(x.address());
                a.path_mtu = x.path_mtu;
                a.dest_qp_num = x.remote.qpn;
                // The PSN this side named in its REQ or REP (the kernel's rdma_init_qp_attr
                // sets rq_psn to its own seq_num).
                a.rq_psn = x.psn;
                a.max_dest_rd_atomic = x.responder_resources;
                // ib_cm's value: 0 encodes the longest RNR NAK timer (655 ms).
                a.min_rnr_timer = 0;
                let mut mask = m(&[
                    AttrMask::STATE,
                    AttrMask::AV,
                    AttrMask::PATH_MTU,
                    AttrMask::DEST_QPN,
                    AttrMask::RQ_PSN,
                ]);
                if x.qp_type == QpType::Rc {
                    mask = mask
                        .union(AttrMask::MAX_DEST_RD_ATOMIC)
                        .union(AttrMask::MIN_RNR_TIMER);
                }
                mask
            }
            (QpState::Rts, false) if x.conn.is_some() => {
                // The PSN the other side named: ib_cm's sq_psn.
                a.sq_psn = x.remote.psn;
                a.timeout = x.ack_timeout.unwrap_or(ACK_TIMEOUT);
                a.retry_cnt = x.retry_count;
                a.rnr_retry = x.remote.rnr_retry_count;
                a.max_rd_atomic = x.initiator_depth;
                let mut mask = m(&[AttrMask::STATE, AttrMask::SQ_PSN]);
                if x.qp_type == QpType::Rc {
                    mask = mask.union(m(&[
                        AttrMask::TIMEOUT,
                        AttrMask::RETRY_CNT,
                        AttrMask::RNR_RETRY,
                        AttrMask::MAX_QP_RD_ATOMIC,
                    ]));
                }
                mask
            }
            _ => {
                return Err(refuse(
                    libc::EINVAL,
                    format!("no attributes for {state:?} yet"),
                ));
            }
        };
        Ok((a, mask))
    }
}
