//! A device CM's events as the programs see them: connection requests matched to listeners
//! (a new passive id each), responses, refusals, timeouts and disconnects.

use std::net::{IpAddr, SocketAddr};

use softrnic_emu_core::Mtu;
use softrnic_emu_core::cm::{CmEvent as Cm, ConnId, ConnectParams, Peer};
use softrnic_wire::cm::{CmaHeader, ip_service, rej_reason};

use super::{
    ConnParam, Daemon, Id, REJ_DATA, REP_DATA, REQ_USER_DATA, Remote, SIDR_REP_DATA,
    SIDR_REQ_USER_DATA, State, event,
};
use crate::device_at;

impl Daemon {
    /// Turns device `d`'s CM events into the programs' rdma_cm events.
    pub(crate) fn cm_events(&mut self, d: usize) {
        loop {
            let Some(ev) = device_at(&self.devices, d).and_then(|mut x| x.engine.cm().poll_event())
            else {
                return;
            };
            self.cm_event(d, ev);
        }
    }

    pub(super) fn cm_event(&mut self, d: usize, ev: Cm) {
        let conn = match &ev {
            Cm::ReqReceived { req, id } => return self.connect_request(d, *id, req.clone()),
            Cm::SidrReqReceived {
                id,
                peer,
                service_id,
                private_data,
            } => return self.sidr_request(d, *id, *peer, *service_id, private_data),
            Cm::RepReceived { id, .. }
            | Cm::Established { id }
            | Cm::Rejected { id, .. }
            | Cm::Unreachable { id }
            | Cm::Disconnected { id }
            | Cm::TimewaitExit { id }
            | Cm::SidrRepReceived { id, .. } => *id,
        };
        let Some(&id) = self.cm.conns.get(&(d, conn)) else {
            return;
        };
        let x = self.cm.ids.get_mut(&id).expect("mapped");
        let mut out = event(id, 0, 0);
        match ev {
            Cm::RepReceived {
                qpn,
                starting_psn,
                responder_resources,
                initiator_depth,
                rnr_retry_count,
                private_data,
                ..
            } => {
                // ib_cm's view: what the other side accepts at once we may send at once.
                x.remote.qpn = qpn;
                x.remote.psn = starting_psn;
                x.remote.rnr_retry_count = rnr_retry_count;
                x.initiator_depth = x.initiator_depth.min(responder_resources);
                x.responder_resources = x.responder_resources.min(initiator_depth);
                out.event = event::CONNECT_RESPONSE;
                out.param = ConnParam {
                    private_data: padded(&private_data, REP_DATA),
                    responder_resources: x.responder_resources,
                    initiator_depth: x.initiator_depth,
                    rnr_retry_count,
                    qp_num: qpn,
                    ..ConnParam::default()
                };
            }
            Cm::Established { .. } => {
                x.state = State::Established;
                // The active side's library turned CONNECT_RESPONSE into ESTABLISHED itself.
                if x.active {
                    return;
                }
                out.event = event::ESTABLISHED;
                out.param.qp_num = x.remote.qpn;
            }
            Cm::Rejected {
                reason,
                private_data,
                ..
            } => {
                self.cm.conns.remove(&(d, conn));
                x.conn = None;
                x.state = State::Disconnect;
                // rdma_cm reports the IB reject reason as the status.
                out.event = event::REJECTED;
                out.status = i32::from(reason);
                out.param.private_data = padded(&private_data, REJ_DATA);
            }
            Cm::Unreachable { .. } => {
                self.cm.conns.remove(&(d, conn));
                x.conn = None;
                x.state = State::Disconnect;
                out.event = event::UNREACHABLE;
                out.status = -libc::ETIMEDOUT;
            }
            Cm::Disconnected { .. } => {
                x.state = State::Disconnect;
                out.event = event::DISCONNECTED;
            }
            Cm::TimewaitExit { .. } => {
                self.cm.conns.remove(&(d, conn));
                x.conn = None;
                out.event = event::TIMEWAIT_EXIT;
            }
            Cm::SidrRepReceived {
                status,
                qpn,
                qkey,
                private_data,
                ..
            } => {
                self.cm.conns.remove(&(d, conn));
                x.conn = None;
                if status == 0 {
                    x.state = State::Established;
                    x.remote.qpn = qpn;
                    x.remote.qkey = qkey;
                    out.event = event::ESTABLISHED;
                    out.param = ConnParam {
                        private_data: padded(&private_data, SIDR_REP_DATA),
                        qp_num: qpn,
                        qkey,
                        ..ConnParam::default()
                    };
                    out.ah = Some(x.address());
                } else {
                    x.state = State::Disconnect;
                    out.event = event::UNREACHABLE;
                    out.status = i32::from(status);
                }
            }
            Cm::ReqReceived { .. } | Cm::SidrReqReceived { .. } => unreachable!("handled above"),
        }
        self.queue_event(id, out);
    }

    /// The listener a request for `service_id` to `dst` on device `d` is for, if its backlog
    /// has room.
    pub(super) fn listener(&self, d: usize, service_id: u64, dst: IpAddr) -> Option<u32> {
        let (ps, port) = ip_service(service_id)?;
        let mut candidates: Vec<(&u32, &Id)> = self
            .cm
            .ids
            .iter()
            .filter(|(_, x)| {
                x.state == State::Listen
                    && x.ps == ps
                    && x.port() == port
                    && x.device.is_none_or(|xd| xd == d)
                    && x.covers(dst)
            })
            .collect();
        // A listener bound to the address wins over a wildcard one.
        candidates.sort_by_key(|(_, x)| x.src.is_some_and(|s| s.ip().is_unspecified()));
        candidates.first().map(|(n, _)| **n)
    }

    /// A new passive id for a request to listener `l`, as the kernel's `cma_ib_new_conn_id`
    /// makes it: the listener's channel, port space and QP type, the addresses from rdma_cm's
    /// header.
    pub(super) fn passive_id(&mut self, l: u32, d: usize, peer: Peer, header: &CmaHeader) -> u32 {
        let listener = &self.cm.ids[&l];
        let mut x = Id::new(
            listener.channel,
            listener.pid,
            listener.ps,
            listener.qp_type,
        );
        x.tos = listener.tos;
        x.ack_timeout = listener.ack_timeout;
        let port = listener.port();
        x.listener = Some(l);
        x.device = Some(d);
        x.src = Some(SocketAddr::new(header.dst, port));
        x.dst = Some(SocketAddr::new(header.src, header.src_port));
        x.sgid = peer.local;
        x.dgid = peer.gid;
        x.dmac = peer.mac;
        if let Some(dev) = device_at(&self.devices, d) {
            x.sgid_index = dev
                .info
                .gids
                .iter()
                .position(|g| *g == peer.local)
                .unwrap_or(0) as u8;
            x.path_mtu = dev.engine.query_port().active_mtu;
        }
        x.state = State::Connect;
        x.psn = (self.cm.random() & 0xff_ffff) as u32;
        let cm = &mut self.cm;
        cm.next = cm.next.wrapping_add(1).max(1);
        while cm.ids.contains_key(&cm.next) {
            cm.next = cm.next.wrapping_add(1).max(1);
        }
        let id = cm.next;
        cm.ids.insert(id, x);
        if let Some(listener) = cm.ids.get_mut(&l) {
            listener.waiting += 1;
        }
        id
    }

    /// A REQ for a service listened on: a CONNECT_REQUEST on the listener's channel, or a REJ
    /// when no listener takes its address or the backlog is full.
    pub(super) fn connect_request(&mut self, d: usize, conn: ConnId, req: ConnectParams) {
        let header = CmaHeader::parse(&req.private_data);
        let found = header
            .as_ref()
            .ok()
            .and_then(|h| self.listener(d, req.service_id, h.dst));
        let (Ok(header), Some(l)) = (header, found) else {
            tracing::debug!(
                service = req.service_id,
                ?header,
                "a REQ no listener takes: refused"
            );
            if let Some(mut dev) = device_at(&self.devices, d) {
                let _ = dev
                    .engine
                    .cm()
                    .reject(conn, rej_reason::INVALID_SERVICE_ID, &[]);
            }
            return;
        };
        let listener = &self.cm.ids[&l];
        if listener.waiting >= listener.backlog || listener.ud() {
            tracing::debug!(
                waiting = listener.waiting,
                "a REQ the listener has no room for: refused"
            );
            if let Some(mut dev) = device_at(&self.devices, d) {
                let _ = dev.engine.cm().reject(conn, rej_reason::CONSUMER, &[]);
            }
            return;
        }
        let id = self.passive_id(l, d, req.peer, &header);
        self.cm.conns.insert((d, conn), id);
        let port_mtu = self.cm.ids[&id].path_mtu;
        let x = self.cm.ids.get_mut(&id).expect("made");
        x.conn = Some(conn);
        x.path_mtu = mtu_min(port_mtu, req.path_mtu);
        x.retry_count = req.retry_count;
        x.ack_timeout = x.ack_timeout.or(Some(req.path.local_ack_timeout));
        x.remote = Remote {
            qpn: req.qpn,
            psn: req.starting_psn,
            qkey: 0,
            rnr_retry_count: req.rnr_retry_count,
        };
        x.responder_resources = req.initiator_depth;
        x.initiator_depth = req.responder_resources;
        // ib_cm's view from this side: what the requester sends at once we accept at once.
        let mut out = event(id, event::CONNECT_REQUEST, 0);
        out.listen = Some(l);
        out.param = ConnParam {
            private_data: padded(&req.private_data[CmaHeader::LEN..], REQ_USER_DATA),
            responder_resources: req.initiator_depth,
            initiator_depth: req.responder_resources,
            flow_control: 0,
            retry_count: req.retry_count,
            rnr_retry_count: req.rnr_retry_count,
            srq: req.srq,
            qp_num: req.qpn,
            qkey: 0,
        };
        self.queue_event(id, out);
    }

    /// A SIDR_REQ: a CONNECT_REQUEST (UD) on the listener's channel, or a refusal.
    pub(super) fn sidr_request(
        &mut self,
        d: usize,
        conn: ConnId,
        peer: Peer,
        service_id: u64,
        private_data: &[u8],
    ) {
        let header = CmaHeader::parse(private_data);
        let found = header
            .as_ref()
            .ok()
            .and_then(|h| self.listener(d, service_id, h.dst))
            .filter(|l| self.cm.ids[l].ud() && self.cm.ids[l].waiting < self.cm.ids[l].backlog);
        let (Ok(header), Some(l)) = (header, found) else {
            if let Some(mut dev) = device_at(&self.devices, d) {
                // IBA 12.11.2: status 1, no such service.
                let _ = dev.engine.cm().sidr_reply(conn, 1, 0, 0, &[]);
            }
            return;
        };
        let id = self.passive_id(l, d, peer, &header);
        self.cm.conns.insert((d, conn), id);
        let x = self.cm.ids.get_mut(&id).expect("made");
        x.conn = Some(conn);
        x.sidr = true;
        let mut out = event(id, event::CONNECT_REQUEST, 0);
        out.listen = Some(l);
        out.param.private_data = padded(&private_data[CmaHeader::LEN..], SIDR_REQ_USER_DATA);
        out.ah = Some(x.address());
        self.queue_event(id, out);
    }
}

/// `data` padded with zeros to the `len` bytes a CM message carries, as the kernel hands
/// private data to the program.
fn padded(data: &[u8], len: usize) -> Vec<u8> {
    let mut v = data.to_vec();
    v.resize(len, 0);
    v
}

/// The smaller of a port's MTU and the IBA code a REQ carries.
fn mtu_min(port: Mtu, code: u8) -> Mtu {
    Mtu::from_ibv(code).map_or(port, |asked| asked.min(port))
}
