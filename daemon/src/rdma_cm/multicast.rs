//! Multicast joins, as the kernel's rdma_cm makes them on RoCE (`cma_iboe_join_multicast`):
//! there is no subnet administrator to ask, so a join is answered at once with the group's
//! address handle, Q_Key and the multicast QPN. The library attaches the program's QP (the
//! device then receives the group), unless it joined as a send-only member.

use std::net::{IpAddr, SocketAddr};

use softrnic_emu_core::{AddressHandle, Gid, QpType};
use softrnic_wire::cm::port_space;
use softrnic_wire::{EthernetAddress, MULTICAST_QPN};

use super::{Daemon, HOP_LIMIT, Reply, State, UDP_QKEY, error, event};
use softrnic_client::proto::cm_event;

/// The kernel's ENOTSUPP (524), which rdma_cm returns for an IPv6 group on a RoCEv2 port.
const ENOTSUPP: i32 = 524;

/// One join of an id.
#[derive(Debug)]
pub(super) struct Join {
    pub id: u32,
    /// Its events the program has read.
    pub events: u32,
}

impl Daemon {
    /// `rdma_join_multicast` on id `id`: the kernel's checks (a device, an address bound or
    /// resolved, a UD id, a group address), then MULTICAST_JOIN.
    pub(super) fn cm_join(&mut self, id: u32, addr: SocketAddr) -> Reply {
        let x = &self.cm.ids[&id];
        if x.device.is_none() || !matches!(x.state, State::AddrBound | State::AddrResolved) {
            return error(libc::EINVAL, "bind or resolve the id's address first");
        }
        if x.qp_type != QpType::Ud {
            return error(libc::EINVAL, "only UD ids join multicast groups");
        }
        let group = match addr.ip() {
            IpAddr::V4(v4) if v4.is_multicast() => Gid::from(v4),
            ip if ip.is_unspecified() => return error(libc::EINVAL, "no group address"),
            // cma_iboe_join_multicast: RoCEv2 joins IPv4 groups only.
            IpAddr::V6(_) => {
                return error(ENOTSUPP, "rdma_cm joins only IPv4 groups on RoCEv2");
            }
            ip => return error(libc::EINVAL, format!("{ip} is not a multicast address")),
        };
        // cma_set_default_qkey: RDMA_PS_UDP and RDMA_PS_IB use RDMA_UDP_QKEY.
        let qkey = match x.ps {
            port_space::UDP | port_space::IB => UDP_QKEY,
            _ => 0,
        };
        let ah = AddressHandle {
            dgid: group,
            sgid_index: x.sgid_index,
            hop_limit: HOP_LIMIT,
            traffic_class: 0,
            flow_label: 0,
            dmac: EthernetAddress(group.multicast_mac().expect("a group")),
        };
        let cm = &mut self.cm;
        cm.next_mc = cm.next_mc.wrapping_add(1).max(1);
        while cm.joins.contains_key(&cm.next_mc) {
            cm.next_mc = cm.next_mc.wrapping_add(1).max(1);
        }
        let mc = cm.next_mc;
        cm.joins.insert(mc, Join { id, events: 0 });
        let mut ev = event(id, cm_event::MULTICAST_JOIN, 0);
        ev.ah = Some(ah);
        ev.param.qp_num = MULTICAST_QPN;
        ev.param.qkey = qkey;
        ev.mc = Some(mc);
        self.queue_event(id, ev);
        Reply::Handle(mc)
    }

    /// `rdma_leave_multicast` by channel `i`: the join goes, with its events not yet read;
    /// the program waits for the ones it read to be acknowledged.
    pub(super) fn cm_leave(&mut self, i: usize, mc: u32) -> Reply {
        let Some(join) = self.cm.joins.get(&mc) else {
            return error(libc::ENOENT, "no such multicast join");
        };
        let Some(x) = self.cm.ids.get(&join.id) else {
            return error(libc::ENOENT, "no such multicast join");
        };
        if x.channel != i {
            return error(libc::EINVAL, "the join is another channel's");
        }
        let join = self.cm.joins.remove(&mc).expect("checked");
        if let Some(ch) = self.contexts[i].as_mut().and_then(|c| c.cm.as_mut()) {
            ch.events.retain(|e| e.mc != Some(mc));
        }
        Reply::Handle(join.events)
    }
}
