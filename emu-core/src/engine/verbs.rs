//! The engine's verbs: protection domains, memory regions and windows, CQs, SRQs and QPs made,
//! changed and destroyed, and work posted, with the IBA's and rxe's checks.

use std::collections::VecDeque;

use super::{Engine, Pd};
use crate::cq::{Cq, Wc, WcOpcode, WcStatus};
use crate::gid::Gid;
use crate::keys::{Access, MwType, Span};
use crate::memory::{Memory, Space};
use crate::qp::{Completer, NO_OBJECT, Qp, QpInit, Requester, Responder, SendWqe, Srq, XrcSrq};
use crate::qp_attr::{AttrMask, QpAttr, QpState, QpType, check_modify};
use crate::wr::{QpCap, RecvWr, SendWr, Sge, WorkQueue};
use crate::{Result, VerbsError};

impl<M: Memory> Engine<M> {
    // --- Protection domains and memory -------------------------------------------------

    /// Allocates a protection domain whose memory lives in address space `space`.
    pub fn alloc_pd(&mut self, space: Space) -> Result<u32> {
        if self.pds.len() >= self.device.max_pd as usize {
            return Err(VerbsError::NoMemory("too many protection domains"));
        }
        Ok(self.pds.insert(Pd { space }))
    }

    /// Frees a protection domain; EBUSY while anything still uses it.
    pub fn dealloc_pd(&mut self, pd: u32) -> Result<()> {
        self.pds.get(pd).ok_or(VerbsError::Invalid("no such PD"))?;
        // An XRC target QP only borrows the PD of the SRQ its last request named.
        let in_use = self.sh.keys.count_in_pd(pd) > 0
            || self
                .qps
                .values()
                .any(|q| q.pd == pd && q.init.qp_type != QpType::XrcRecv)
            || self.sh.srqs.iter().any(|(_, s)| s.pd == pd);
        if in_use {
            return Err(VerbsError::Busy("the PD still has objects"));
        }
        self.pds.remove(pd);
        Ok(())
    }

    fn space_of(&self, pd: u32) -> Result<Space> {
        Ok(self
            .pds
            .get(pd)
            .ok_or(VerbsError::Invalid("no such PD"))?
            .space)
    }

    /// Registers memory; returns the key, which is both lkey and rkey.
    pub fn reg_mr(&mut self, pd: u32, addr: u64, len: u64, access: Access) -> Result<u32> {
        self.reg_mr_iova(pd, Span::at(addr, len), access)
    }

    /// Registers memory that work requests and peers name by another address, its I/O virtual
    /// address (`ibv_reg_mr_iova`): `region.iova` is its first byte.
    pub fn reg_mr_iova(&mut self, pd: u32, region: Span, access: Access) -> Result<u32> {
        let space = self.space_of(pd)?;
        if region.len > self.device.max_mr_size {
            return Err(VerbsError::Invalid("region larger than max_mr_size"));
        }
        if self.sh.keys.regions() >= self.device.max_mr as usize {
            return Err(VerbsError::NoMemory("too many memory regions"));
        }
        self.sh.keys.register(pd, space, region, access)
    }

    /// Changes a region, its key kept (`ibv_rereg_mr`): moves it to PD `pd`, to the memory
    /// `region`, to `access`, each if given. The PD must share the region's address space.
    pub fn rereg_mr(
        &mut self,
        key: u32,
        pd: Option<u32>,
        region: Option<Span>,
        access: Option<Access>,
    ) -> Result<()> {
        let pd = pd.map(|pd| Ok((pd, self.space_of(pd)?))).transpose()?;
        if region.is_some_and(|r| r.len > self.device.max_mr_size) {
            return Err(VerbsError::Invalid("region larger than max_mr_size"));
        }
        self.sh.keys.reregister(key, pd, region, access)
    }

    /// The memory region `key` registers, and its access.
    pub fn mr(&self, key: u32) -> Option<(Span, Access)> {
        self.sh.keys.region(key)
    }

    /// Deregisters memory: its key stops working at once.
    pub fn dereg_mr(&mut self, key: u32) -> Result<()> {
        self.sh.keys.deregister(key)
    }

    /// Allocates a memory window; returns its rkey (unbound until a bind).
    pub fn alloc_mw(&mut self, pd: u32, mw_type: MwType) -> Result<u32> {
        self.space_of(pd)?;
        if self.sh.keys.windows() >= self.device.max_mw as usize {
            return Err(VerbsError::NoMemory("too many memory windows"));
        }
        Ok(self.sh.keys.alloc_mw(pd, mw_type))
    }

    /// Frees a memory window, named by any of its keys (the one `alloc_mw` gave, or the one
    /// its last bind set).
    pub fn dealloc_mw(&mut self, key: u32) -> Result<()> {
        self.sh.keys.dealloc_mw(key)
    }

    // --- Completion queues ---------------------------------------------------------------

    /// Creates a CQ with room for `cqe` completions.
    pub fn create_cq(&mut self, cqe: u32) -> Result<u32> {
        if cqe == 0 || cqe > self.device.max_cqe {
            return Err(VerbsError::Invalid("cqe must be 1..=max_cqe"));
        }
        Ok(self.sh.cqs.insert(Cq::new(cqe as usize)))
    }

    /// Destroys a CQ; EBUSY while a QP uses it.
    pub fn destroy_cq(&mut self, cq: u32) -> Result<()> {
        self.sh
            .cqs
            .get(cq)
            .ok_or(VerbsError::Invalid("no such CQ"))?;
        // An XRC target QP only borrows the CQ of the SRQ its last request named.
        let own = |q: &&Qp| q.init.qp_type != QpType::XrcRecv;
        if self
            .qps
            .values()
            .filter(own)
            .any(|q| q.init.send_cq == cq || q.init.recv_cq == cq)
        {
            return Err(VerbsError::Busy("a QP uses the CQ"));
        }
        if self
            .sh
            .srqs
            .iter()
            .any(|(_, s)| s.xrc.is_some_and(|x| x.cq == cq))
        {
            return Err(VerbsError::Busy("an XRC SRQ completes to the CQ"));
        }
        self.sh.cqs.remove(cq);
        Ok(())
    }

    /// Changes a CQ's size.
    pub fn resize_cq(&mut self, cq: u32, cqe: u32) -> Result<()> {
        if cqe == 0 || cqe > self.device.max_cqe {
            return Err(VerbsError::Invalid("cqe must be 1..=max_cqe"));
        }
        self.cq_mut(cq)?.resize(cqe as usize)
    }

    /// How many completions wait in a CQ.
    pub fn cq_len(&self, cq: u32) -> Result<usize> {
        self.sh
            .cqs
            .get(cq)
            .map(Cq::len)
            .ok_or(VerbsError::Invalid("no such CQ"))
    }

    fn cq_mut(&mut self, cq: u32) -> Result<&mut Cq> {
        self.sh
            .cqs
            .get_mut(cq)
            .ok_or(VerbsError::Invalid("no such CQ"))
    }

    /// Takes up to `out.len()` completions.
    pub fn poll_cq(&mut self, cq: u32, out: &mut [Wc]) -> Result<usize> {
        Ok(self.cq_mut(cq)?.poll(out))
    }

    /// Appends to `out` the CQs given completions since the last call, each once: a driver
    /// that moves completions elsewhere (the daemon, into the programs' rings) looks only at
    /// these, not at every CQ.
    pub fn take_filled_cqs(&mut self, out: &mut Vec<u32>) {
        for cq in self.sh.filled.drain(..) {
            if let Some(q) = self.sh.cqs.get_mut(cq) {
                q.unlist();
                out.push(cq);
            }
        }
    }

    /// Appends to `out` the SGE lists (empty, with their allocations) of the WRs the engine is
    /// done with since the last call: a driver that decodes WRs decodes into them, and posting
    /// allocates nothing.
    pub fn take_spare_sgls(&mut self, out: &mut Vec<Vec<Sge>>) {
        out.append(&mut self.sh.spare_sgls);
    }

    /// Arms a CQ for one notification (`ibv_req_notify_cq`).
    pub fn req_notify_cq(&mut self, cq: u32, solicited_only: bool) -> Result<()> {
        self.cq_mut(cq)?.arm(solicited_only);
        Ok(())
    }

    // --- Shared receive queues -----------------------------------------------------------

    /// Creates an SRQ.
    pub fn create_srq(&mut self, pd: u32, max_wr: u32, max_sge: u32) -> Result<u32> {
        self.space_of(pd)?;
        if max_wr == 0 || max_wr > self.device.max_srq_wr || max_sge > self.device.max_srq_sge {
            return Err(VerbsError::Invalid("SRQ size beyond the device's limits"));
        }
        Ok(self.sh.srqs.insert(Srq {
            pd,
            queue: VecDeque::new(),
            max_wr,
            max_sge,
            limit: 0,
            lent: 0,
            xrc: None,
        }))
    }

    /// Creates an XRC SRQ in domain `xrcd`, completing to `cq` (`ibv_create_srq_ex` with
    /// `IBV_SRQT_XRC`). Its handle is its number (`ibv_get_srq_num`), which initiators put in
    /// their requests' XRCETH.
    pub fn create_xrc_srq(
        &mut self,
        pd: u32,
        xrcd: u32,
        cq: u32,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<u32> {
        self.xrcds
            .get(xrcd)
            .ok_or(VerbsError::Invalid("no such XRC domain"))?;
        self.cq_mut(cq)?;
        let srq = self.create_srq(pd, max_wr, max_sge)?;
        if let Some(s) = self.sh.srqs.get_mut(srq) {
            s.xrc = Some(XrcSrq { xrcd, cq });
        }
        Ok(srq)
    }

    /// Arms an SRQ's limit event (`ibv_modify_srq` with IBV_SRQ_LIMIT).
    pub fn modify_srq_limit(&mut self, srq: u32, limit: u32) -> Result<()> {
        let s = self
            .sh
            .srqs
            .get_mut(srq)
            .ok_or(VerbsError::Invalid("no such SRQ"))?;
        if limit > s.max_wr {
            return Err(VerbsError::Invalid("limit above the SRQ's size"));
        }
        s.limit = limit;
        Ok(())
    }

    /// Destroys an SRQ; EBUSY while a QP uses it.
    pub fn destroy_srq(&mut self, srq: u32) -> Result<()> {
        self.sh
            .srqs
            .get(srq)
            .ok_or(VerbsError::Invalid("no such SRQ"))?;
        // An XRC target QP only borrows the SRQ its last request named.
        let own = |q: &Qp| q.init.srq == Some(srq) && q.init.qp_type != QpType::XrcRecv;
        if self.qps.values().any(own) {
            return Err(VerbsError::Busy("a QP uses the SRQ"));
        }
        self.sh.srqs.remove(srq);
        Ok(())
    }

    /// How many more WRs the queue takes before a post fails with ENOMEM (0 for a queue that
    /// does not exist): for a program that posts through shared memory, which the daemon
    /// leaves there while the engine has no room.
    pub fn room(&self, queue: WorkQueue) -> usize {
        let qp = |qpn| self.qps.get(&qpn);
        match queue {
            WorkQueue::Send(qpn) => {
                qp(qpn).map_or(0, |q| q.init.cap.max_send_wr as usize - q.sq.len())
            }
            WorkQueue::Recv(qpn) => qp(qpn).map_or(0, Qp::recv_room),
            WorkQueue::Srq(srq) => self.sh.srqs.get(srq).map_or(0, Srq::room),
        }
    }

    /// Posts a receive WR to an SRQ.
    pub fn post_srq_recv(&mut self, srq: u32, wr: RecvWr) -> Result<()> {
        let s = self
            .sh
            .srqs
            .get_mut(srq)
            .ok_or(VerbsError::Invalid("no such SRQ"))?;
        if wr.sgl.len() > s.max_sge as usize {
            return Err(VerbsError::Invalid("too many SGEs"));
        }
        if s.room() == 0 {
            return Err(VerbsError::NoMemory("the SRQ is full"));
        }
        s.queue.push_back(wr);
        Ok(())
    }

    // --- XRC domains --------------------------------------------------------------------------

    /// Opens a new XRC domain (`ibv_open_xrcd`; sharing one between programs is the daemon's).
    pub fn alloc_xrcd(&mut self) -> Result<u32> {
        if self.xrcds.len() >= self.device.max_pd as usize {
            return Err(VerbsError::NoMemory("too many XRC domains"));
        }
        Ok(self.xrcds.insert(()))
    }

    /// Closes an XRC domain; EBUSY while an SRQ or target QP belongs to it.
    pub fn dealloc_xrcd(&mut self, xrcd: u32) -> Result<()> {
        self.xrcds
            .get(xrcd)
            .ok_or(VerbsError::Invalid("no such XRC domain"))?;
        let in_use = self.qps.values().any(|q| q.xrcd == Some(xrcd))
            || self
                .sh
                .srqs
                .iter()
                .any(|(_, s)| s.xrc.is_some_and(|x| x.xrcd == xrcd));
        if in_use {
            return Err(VerbsError::Busy("the XRC domain still has objects"));
        }
        self.xrcds.remove(xrcd);
        Ok(())
    }

    /// Creates an XRC target QP in domain `xrcd` (`IBV_QPT_XRC_RECV`): no PD, CQs or queues of
    /// its own; each request it takes works against the SRQ its XRCETH names.
    pub fn create_xrc_recv_qp(&mut self, xrcd: u32) -> Result<u32> {
        self.xrcds
            .get(xrcd)
            .ok_or(VerbsError::Invalid("no such XRC domain"))?;
        let init = QpInit::new(QpType::XrcRecv, NO_OBJECT, QpCap::new(0, 0, 0));
        let qpn = self.insert_qp(NO_OBJECT, 0, init)?;
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.xrcd = Some(xrcd);
        }
        Ok(qpn)
    }

    // --- Queue pairs -----------------------------------------------------------------------

    /// Creates a QP in RESET; returns its number.
    pub fn create_qp(&mut self, pd: u32, init: QpInit) -> Result<u32> {
        if init.qp_type == QpType::XrcRecv {
            return Err(VerbsError::Invalid("an XRC target QP needs an XRC domain"));
        }
        let space = self.space_of(pd)?;
        let d = &self.device;
        let c = &init.cap;
        if c.max_send_wr > d.max_qp_wr
            || c.max_recv_wr > d.max_qp_wr
            || c.max_send_sge > d.max_sge
            || c.max_recv_sge > d.max_sge
            || c.max_inline_data > d.max_inline_data
        {
            return Err(VerbsError::Invalid(
                "QP capabilities beyond the device's limits",
            ));
        }
        if self.sh.cqs.get(init.send_cq).is_none() || self.sh.cqs.get(init.recv_cq).is_none() {
            return Err(VerbsError::Invalid("no such CQ"));
        }
        if let Some(srq) = init.srq
            && self
                .sh
                .srqs
                .get(srq)
                .is_none_or(|s| s.pd != pd || s.xrc.is_some())
        {
            return Err(VerbsError::Invalid("no such SRQ in this PD"));
        }
        if init.qp_type == QpType::XrcSend && (init.cap.max_recv_wr > 0 || init.srq.is_some()) {
            return Err(VerbsError::Invalid("an XRC initiator QP receives nothing"));
        }
        self.insert_qp(pd, space, init)
    }

    /// Numbers and inserts a new QP in RESET.
    fn insert_qp(&mut self, pd: u32, space: Space, init: QpInit) -> Result<u32> {
        if self.qps.len() >= self.device.max_qp as usize {
            return Err(VerbsError::NoMemory("too many QPs"));
        }
        let qpn = loop {
            let qpn = self.next_qpn;
            self.next_qpn = self.lane.after(qpn);
            // A number whose connection waits out TIMEWAIT is skipped (IBA 12.9.8.3).
            if !self.qps.contains_key(&qpn) && !self.cm.holds_qpn(qpn) {
                break qpn;
            }
        };
        // RoCEv2 puts per-flow entropy in the UDP source port (Annex A17.5.1.1), from the
        // dynamic range as rxe does.
        let udp_src_port = 0xc000 | (self.sh.rng.next_u32() as u16 & 0x3fff);
        let attr = QpAttr::default();
        let qp = Qp {
            qpn,
            xrcd: None,
            init,
            state: QpState::Reset,
            pd,
            space,
            attr,
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            req: Requester::default(),
            comp: Completer::default(),
            resp: Responder::default(),
            np: None,
            rp: None,
            path: None,
            udp_src_port,
            queued: false,
            established: false,
            drained: false,
        };
        self.qps.insert(qpn, qp);
        Ok(qpn)
    }

    /// The QP's current attributes and state.
    pub fn query_qp(&self, qpn: u32) -> Result<(QpAttr, QpCap)> {
        let qp = self
            .qps
            .get(&qpn)
            .ok_or(VerbsError::Invalid("no such QP"))?;
        let attr = QpAttr {
            qp_state: qp.state,
            cur_qp_state: qp.state,
            ..qp.attr
        };
        Ok((attr, qp.init.cap))
    }

    /// The QP's transport.
    pub fn qp_type(&self, qpn: u32) -> Option<QpType> {
        self.qps.get(&qpn).map(|q| q.init.qp_type)
    }

    /// The XRC domain of an XRC target QP.
    pub fn xrcd_of(&self, qpn: u32) -> Option<u32> {
        self.qps.get(&qpn)?.xrcd
    }

    /// The QP's state.
    pub fn qp_state(&self, qpn: u32) -> Option<QpState> {
        self.qps.get(&qpn).map(|q| q.state)
    }

    /// Changes a QP's attributes and state (`ibv_modify_qp`), with the IBA rules for which
    /// attributes each transition requires and allows.
    pub fn modify_qp(&mut self, qpn: u32, attr: &QpAttr, mask: AttrMask) -> Result<()> {
        let (max_rd, max_dest) = (self.device.max_qp_init_rd_atom, self.device.max_qp_rd_atom);
        let qp = self
            .qps
            .get(&qpn)
            .ok_or(VerbsError::Invalid("no such QP"))?;
        let to = check_modify(qp.init.qp_type, qp.state, attr, mask)?;
        if mask.contains(AttrMask::MAX_QP_RD_ATOMIC) && attr.max_rd_atomic as u32 > max_rd {
            return Err(VerbsError::Invalid(
                "max_rd_atomic above the device's limit",
            ));
        }
        if mask.contains(AttrMask::MAX_DEST_RD_ATOMIC) && attr.max_dest_rd_atomic as u32 > max_dest
        {
            return Err(VerbsError::Invalid(
                "max_dest_rd_atomic above the device's limit",
            ));
        }
        let path = match (mask.contains(AttrMask::AV), attr.ah) {
            (true, Some(ah)) => {
                if self.sh.gids.get(usize::from(ah.sgid_index)).is_none() {
                    return Err(VerbsError::NoData("sgid_index names an empty GID entry"));
                }
                Some(
                    self.sh
                        .qp_path(&ah, qp.udp_src_port)
                        .ok_or(VerbsError::Invalid(
                            "the source and destination GIDs are of different IP versions",
                        ))?,
                )
            }
            _ => None,
        };
        let qp = self.qps.get_mut(&qpn).expect("checked");
        let a = &mut qp.attr;
        let m = |bit| mask.contains(bit);
        macro_rules! take {
            ($($bit:ident => $field:ident),* $(,)?) => {
                $(if m(AttrMask::$bit) { a.$field = attr.$field; })*
            };
        }
        take!(
            ACCESS_FLAGS => qp_access_flags,
            QKEY => qkey,
            AV => ah,
            PATH_MTU => path_mtu,
            TIMEOUT => timeout,
            RETRY_CNT => retry_cnt,
            RNR_RETRY => rnr_retry,
            RQ_PSN => rq_psn,
            SQ_PSN => sq_psn,
            MAX_QP_RD_ATOMIC => max_rd_atomic,
            MAX_DEST_RD_ATOMIC => max_dest_rd_atomic,
            MIN_RNR_TIMER => min_rnr_timer,
            DEST_QPN => dest_qp_num,
            EN_SQD_ASYNC_NOTIFY => en_sqd_async_notify,
            PKEY_INDEX => pkey_index,
        );
        // What follows from the new values.
        if m(AttrMask::AV) {
            qp.path = path;
        }
        if m(AttrMask::RETRY_CNT) {
            qp.comp.retry_left = a.retry_cnt;
        }
        if m(AttrMask::RNR_RETRY) {
            qp.comp.rnr_left = a.rnr_retry;
        }
        if m(AttrMask::RQ_PSN) {
            qp.resp = Responder::new(a.rq_psn);
        }
        if m(AttrMask::SQ_PSN) {
            qp.req = Requester::new(a.sq_psn);
            qp.comp = Completer::new(a.sq_psn, a.retry_cnt, a.rnr_retry);
            self.sh.timers.stop_all(qpn);
        }
        match to {
            QpState::Err => qp.enter_error(&mut self.sh),
            QpState::Reset => {
                // IBA 10.3.1: RESET discards all WRs without completions.
                qp.sq.clear();
                qp.rq.clear();
                qp.resp = Responder::default();
                qp.req = Requester::default();
                qp.comp = Completer::default();
                self.sh.timers.stop_all(qpn);
                // The next connection starts unlimited, with no CNP owed.
                (qp.np, qp.rp) = (None, None);
                qp.established = false;
                qp.state = QpState::Reset;
                for cq in [qp.init.send_cq, qp.init.recv_cq] {
                    if let Some(cq) = self.sh.cqs.get_mut(cq) {
                        cq.forget(qpn);
                    }
                }
            }
            QpState::Sqd => {
                if qp.state != QpState::Sqd {
                    qp.drained = false;
                }
                qp.state = QpState::Sqd;
                qp.check_drained(&mut self.sh);
            }
            s => qp.state = s,
        }
        self.mark_ready(qpn);
        Ok(())
    }

    /// Destroys a QP; its outstanding WRs are discarded and it leaves its multicast groups.
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<()> {
        let mut qp = self
            .qps
            .remove(&qpn)
            .ok_or(VerbsError::Invalid("no such QP"))?;
        // An SRQ's WQE it held is gone with it (no completion, as on a device).
        qp.release_held(&mut self.sh);
        self.sh.timers.stop_all(qpn);
        self.groups.detach_all(qpn);
        Ok(())
    }

    /// Attaches a UD QP to the multicast group `gid` (`ibv_attach_mcast`). As in the kernel's
    /// `ib_attach_mcast`, the GID must be a multicast one and the QP UD (EINVAL); on RoCE the
    /// multicast LID is ignored (Annex A16/A17).
    pub fn attach_mcast(&mut self, qpn: u32, gid: Gid) -> Result<()> {
        let qp = self
            .qps
            .get(&qpn)
            .ok_or(VerbsError::Invalid("no such QP"))?;
        if !gid.is_multicast() {
            return Err(VerbsError::Invalid("not a multicast GID"));
        }
        if qp.init.qp_type != QpType::Ud {
            return Err(VerbsError::Invalid("only UD QPs join multicast groups"));
        }
        self.groups.attach(gid, qpn, &self.device)
    }

    /// Detaches a QP from a multicast group (`ibv_detach_mcast`): EINVAL if not attached.
    pub fn detach_mcast(&mut self, qpn: u32, gid: Gid) -> Result<()> {
        if !self.qps.contains_key(&qpn) {
            return Err(VerbsError::Invalid("no such QP"));
        }
        self.groups.detach(gid, qpn)
    }

    /// The multicast groups some QP of this device is attached to: the device's link must
    /// receive their packets.
    pub fn multicast_groups(&self) -> impl Iterator<Item = Gid> + '_ {
        self.groups.groups()
    }

    /// Posts a send WR (`ibv_post_send`). Checks what rxe checks at post time (EINVAL for a
    /// WR the QP cannot carry, ENOMEM when the queue is full); a QP in error completes it at
    /// once with IBV_WC_WR_FLUSH_ERR.
    pub fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<()> {
        self.post_send_with(qpn, wr, None)
    }

    /// [`post_send`](Self::post_send) with the bytes of an inline WR already taken (by a
    /// program that posts through shared memory and copied them when it posted). They must
    /// be the SGEs' total length.
    pub fn post_send_with(&mut self, qpn: u32, wr: SendWr, taken: Option<Vec<u8>>) -> Result<()> {
        let qp = self
            .qps
            .get_mut(&qpn)
            .ok_or(VerbsError::Invalid("no such QP"))?;
        if qp.state < QpState::Rts && qp.state != QpState::Err {
            return Err(VerbsError::Invalid("the QP is not ready to send"));
        }
        let len = wr.check(qp.init.qp_type, &qp.init.cap)?;
        if qp.sq.len() >= qp.init.cap.max_send_wr as usize {
            return Err(VerbsError::NoMemory("the send queue is full"));
        }
        let inline = if wr.is_inline() {
            // Inline data is copied now; its lkeys are not checked (IBA 10.8.2.2).
            if let Some(data) = taken {
                if data.len() != len as usize {
                    return Err(VerbsError::Invalid("inline data of the wrong length"));
                }
                Some(data.into_boxed_slice())
            } else {
                let mut data = vec![0; len as usize].into_boxed_slice();
                let mut at = 0;
                for sge in &wr.sgl {
                    let dst = &mut data[at..at + sge.length as usize];
                    self.sh
                        .mem
                        .read(qp.space, sge.addr, dst)
                        .map_err(|_| VerbsError::Invalid("inline data address not readable"))?;
                    at += sge.length as usize;
                }
                Some(data)
            }
        } else {
            None
        };
        qp.sq.push_back(SendWqe {
            wr,
            inline,
            len,
            first_psn: 0,
            last_psn: 0,
            read_done: 0,
            status: None,
            sent: false,
        });
        if qp.state == QpState::Err {
            qp.enter_error(&mut self.sh);
        }
        self.mark_ready(qpn);
        Ok(())
    }

    /// Posts a receive WR to a QP's own receive queue (`ibv_post_recv`).
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<()> {
        let qp = self
            .qps
            .get_mut(&qpn)
            .ok_or(VerbsError::Invalid("no such QP"))?;
        if qp.init.srq.is_some() {
            return Err(VerbsError::Invalid("the QP uses an SRQ"));
        }
        if qp.state == QpState::Reset {
            return Err(VerbsError::Invalid("the QP is in RESET"));
        }
        if wr.sgl.len() > qp.init.cap.max_recv_sge as usize {
            return Err(VerbsError::Invalid("too many SGEs"));
        }
        if qp.recv_room() == 0 {
            return Err(VerbsError::NoMemory("the receive queue is full"));
        }
        if qp.state == QpState::Err {
            let wc = Wc::new(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, qpn);
            let cq = qp.init.recv_cq;
            self.sh.complete(cq, wc);
            return Ok(());
        }
        qp.rq.push_back(wr);
        Ok(())
    }
}
