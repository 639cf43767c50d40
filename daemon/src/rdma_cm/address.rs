//! Addresses: binding ids to ports per port space, resolving a destination to a device, its
//! GIDs and the next hop (as the kernel's `rdma_resolve_addr` does), and listening.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use softrnic_emu_core::Gid;
use softrnic_wire::cm::ip_service_id;

use super::{Daemon, HOP_LIMIT, MAX_BACKLOG, Refusal, Reply, State, error, event, refuse, refused};
use crate::device_at;
use softrnic_client::proto::{CmListener, CmRoute};

impl Daemon {
    /// The device index and GID index of local address `ip`, if a device has it.
    pub(super) fn local_gid(&self, ip: IpAddr) -> Option<(usize, u8)> {
        let gid = Gid::from_ip(ip);
        self.heads().into_iter().find_map(|d| {
            let i = device_at(&self.devices, d)?
                .info
                .gids
                .iter()
                .position(|g| *g == gid)?;
            Some((d, i as u8))
        })
    }

    /// `rdma_bind_addr`.
    pub(super) fn cm_bind(&mut self, id: u32, addr: SocketAddr) -> Result<(), Refusal> {
        let x = &self.cm.ids[&id];
        if x.state != State::Idle {
            return Err(refuse(libc::EINVAL, "the id is bound already"));
        }
        let (ps, reuse) = (x.ps, x.reuse);
        // The kernel's cma_any_addr counts a loopback address as a wildcard: the id has no
        // device until it resolves (here: unless a device has the address, as the local one).
        let device = if addr.ip().is_unspecified() {
            None
        } else if addr.ip().is_loopback() {
            self.local_gid(addr.ip())
        } else {
            let (d, index) = self.local_gid(addr.ip()).ok_or_else(|| {
                // rdma_translate_ip finds no device with the address: ENODEV.
                refuse(
                    libc::ENODEV,
                    format!("{} is not an address of a softrnic device", addr.ip()),
                )
            })?;
            Some((d, index))
        };
        let port = match addr.port() {
            0 => self
                .cm
                .ephemeral(id, ps, addr, reuse)
                .ok_or_else(|| refuse(libc::EADDRNOTAVAIL, "no ephemeral port is free"))?,
            p => match self.cm.port_clash(id, ps, addr, reuse) {
                Some(errno) => return Err(refuse(errno, format!("port {p} is in use"))),
                None => p,
            },
        };
        let gids =
            device.and_then(|(d, _)| device_at(&self.devices, d).map(|v| v.info.gids.clone()));
        let x = self.cm.ids.get_mut(&id).expect("checked");
        x.src = Some(SocketAddr::new(addr.ip(), port));
        x.state = State::AddrBound;
        if let (Some((d, index)), Some(gids)) = (device, gids) {
            x.device = Some(d);
            x.sgid_index = index;
            x.sgid = gids[usize::from(index)];
        }
        Ok(())
    }

    /// `rdma_resolve_addr`: binds the id if it is not yet (to `src`, or the wildcard), finds
    /// the device and source address that reach `dst` (the daemon's own devices first, then
    /// the route in each device's namespace) and the next hop's MAC; ADDR_RESOLVED or
    /// ADDR_ERROR follows.
    pub(super) fn resolve_addr(
        &mut self,
        id: u32,
        src: Option<SocketAddr>,
        dst: SocketAddr,
    ) -> Reply {
        let x = &self.cm.ids[&id];
        if x.state == State::Idle {
            let any = match dst {
                SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            };
            if let Err(r) = self.cm_bind(id, src.unwrap_or(SocketAddr::new(any, 0))) {
                return refused(r);
            }
        } else if x.state != State::AddrBound {
            return error(libc::EINVAL, "the id's address is resolved already");
        }
        let x = &self.cm.ids[&id];
        let bound = x.src.expect("bound");
        // resolve_prepare_src: the bound address and the destination are of one family; the
        // id stays bound.
        if bound.is_ipv4() != dst.is_ipv4() {
            return error(
                libc::EINVAL,
                format!("the id is bound to {bound}, another family than {dst}'s"),
            );
        }
        // (device, source address, source GID index, destination GID)
        let found = if dst.ip().is_loopback()
            && (bound.ip().is_unspecified() || bound.ip().is_loopback())
        {
            // The kernel's `cma_bind_loopback`: the first device, to itself.
            self.loopback(dst.ip())
        } else if !bound.ip().is_unspecified() {
            let Some((d, index)) = self.local_gid(bound.ip()) else {
                // A source no device has (a loopback one, to another host; or its device is
                // gone): the kernel's addr_handler finds no device (cma_acquire_dev_by_src_ip).
                self.queue_event(id, event(id, event::ADDR_ERROR, -libc::ENODEV));
                return Reply::Ok;
            };
            Some((d, bound.ip(), index, Gid::from_ip(dst.ip())))
        } else if let Some((d, index)) = self.local_gid(dst.ip()) {
            // To an address of this daemon: through the device that has it.
            Some((d, dst.ip(), index, Gid::from_ip(dst.ip())))
        } else {
            let routed = self.route_to(dst.ip()).map(|(d, src)| {
                let index = self.local_gid(src).map_or(0, |(_, i)| i);
                (d, src, index, Gid::from_ip(dst.ip()))
            });
            // A group no wire device routes to is reached on this host: through the first
            // device, which hands multicast to every device of this daemon.
            routed.or_else(|| {
                let (d, _, index, gid) = self.loopback(dst.ip())?;
                dst.ip()
                    .is_multicast()
                    .then(|| (d, gid.to_ip(), index, Gid::from_ip(dst.ip())))
            })
        };
        // No route: rdma_resolve_ip fails at once (addr_resolve's route lookup), and the id
        // stays bound.
        let Some((d, src_ip, index, dgid)) = found else {
            return error(libc::ENETUNREACH, format!("no route to {}", dst.ip()));
        };
        let mac = match device_at(&self.devices, d)
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
            .and_then(|mut dev| dev.resolve(&self.shared.switch, dgid))
        {
            Ok(mac) => mac,
            Err(e) => {
                // The kernel's address resolution retries ARP until its timeout, and then
                // reports ETIMEDOUT (process_one_req).
                tracing::debug!(%e, "rdma_resolve_addr: no neighbour");
                self.queue_event(id, event(id, event::ADDR_ERROR, -libc::ETIMEDOUT));
                return Reply::Ok;
            }
        };
        let (gids, mtu) = {
            let dev = device_at(&self.devices, d).expect("found");
            (dev.info.gids.clone(), dev.engine.query_port().active_mtu)
        };
        let x = self.cm.ids.get_mut(&id).expect("checked");
        x.device = Some(d);
        x.sgid_index = index;
        x.sgid = gids.get(usize::from(index)).copied().unwrap_or_default();
        x.dgid = dgid;
        x.dmac = mac;
        x.path_mtu = mtu;
        x.src = Some(SocketAddr::new(src_ip, bound.port()));
        x.dst = Some(dst);
        x.state = State::AddrResolved;
        self.queue_event(id, event(id, event::ADDR_RESOLVED, 0));
        Reply::Ok
    }

    /// A loopback destination's device, addresses and GIDs: the device that has `dst` (the one
    /// on `lo`), else the first device with a GID of `dst`'s family, talking to itself.
    pub(super) fn loopback(&self, dst: IpAddr) -> Option<(usize, IpAddr, u8, Gid)> {
        if let Some((d, index)) = self.local_gid(dst) {
            return Some((d, dst, index, Gid::from_ip(dst)));
        }
        self.heads().into_iter().find_map(|d| {
            let gids = &device_at(&self.devices, d)?.info.gids;
            let index = gids
                .iter()
                .position(|g| g.to_ip().is_ipv4() == dst.is_ipv4())?;
            Some((d, dst, index as u8, gids[index]))
        })
    }

    /// The device and source address the kernel's routing picks for `dst`, looked up in each
    /// wire device's namespace.
    pub(super) fn route_to(&self, dst: IpAddr) -> Option<(usize, IpAddr)> {
        self.heads().into_iter().find_map(|d| {
            let dev = device_at(&self.devices, d)?;
            if matches!(dev.wire, crate::Wire::Local) {
                return None;
            }
            let src = crate::in_netns(dev.info.netns.as_deref(), move || {
                let any: SocketAddr = match dst {
                    IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
                    IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
                };
                // A UDP connect sends nothing: it only asks the routing table.
                let s = std::net::UdpSocket::bind(any)?;
                s.connect((dst, 4791))?;
                Ok(s.local_addr()?.ip())
            })
            .ok()?;
            dev.info
                .gids
                .contains(&Gid::from_ip(src))
                .then_some((d, src))
        })
    }

    pub(super) fn route(&self, id: u32) -> CmRoute {
        let x = &self.cm.ids[&id];
        let device = x
            .device
            .and_then(|d| device_at(&self.devices, d))
            .map(|d| d.info.name.clone());
        CmRoute {
            src: x.src,
            dst: x.dst,
            device,
            sgid: x.sgid,
            sgid_index: x.sgid_index,
            dgid: x.dgid,
            resolved: matches!(
                x.state,
                State::RouteResolved | State::Connect | State::Established | State::Disconnect
            ),
            path_mtu: x.path_mtu as u8,
            traffic_class: x.tos,
            hop_limit: HOP_LIMIT,
        }
    }

    /// `rdma_listen`: binds the wildcard if the id is not bound, and takes the service on
    /// its device (or every device).
    pub(super) fn cm_listen(&mut self, id: u32, backlog: u32) -> Reply {
        let backlog = if backlog == 0 || backlog > MAX_BACKLOG {
            MAX_BACKLOG
        } else {
            backlog
        };
        let x = &self.cm.ids[&id];
        match x.state {
            State::Idle => {
                let any = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);
                if let Err(r) = self.cm_bind(id, any) {
                    return refused(r);
                }
            }
            State::AddrBound => {}
            _ => return error(libc::EINVAL, "the id is in use"),
        }
        let x = &self.cm.ids[&id];
        let (ps, src, reuse) = (x.ps, x.src.expect("bound"), x.reuse);
        // `rdma_listen`: an id bound with reuse checks its port again, as one that takes no
        // reuse, and then stops allowing it (a listener does not share its port).
        if let Some(errno) = reuse
            .then(|| self.cm.port_clash(id, ps, src, false))
            .flatten()
        {
            return error(errno, format!("port {} is in use", src.port()));
        }
        tracing::debug!(id, ps, %src, backlog, "rdma_cm: listening");
        let x = self.cm.ids.get_mut(&id).expect("checked");
        x.state = State::Listen;
        x.reuse = false;
        x.backlog = backlog;
        let service = ip_service_id(ps, src.port());
        let devices: Vec<usize> = match x.device {
            Some(d) => vec![d],
            None => self.heads(),
        };
        for d in devices {
            self.take_service(d, service);
        }
        Reply::Ok
    }

    /// Every listening id.
    pub(crate) fn cm_listeners(&self) -> Vec<CmListener> {
        let mut v: Vec<CmListener> = self
            .cm
            .ids
            .values()
            .filter(|x| x.state == State::Listen)
            .filter_map(|x| {
                Some(CmListener {
                    ps: x.ps,
                    addr: x.src?,
                    pid: x.pid,
                })
            })
            .collect();
        v.sort_by_key(|l| (l.addr.port(), l.ps));
        v
    }

    /// Listens for `service` on device `d` (once, however many ids listen there).
    pub(super) fn take_service(&mut self, d: usize, service: u64) {
        let Some(mut dev) = device_at(&self.devices, d) else {
            return;
        };
        let n = self.cm.services.entry((d, service)).or_insert(0);
        if *n == 0 {
            let _ = dev.engine.cm().listen(service);
        }
        *n += 1;
    }

    /// A device added after wildcard listeners started: it listens for their services too.
    pub(crate) fn listen_on_new_device(&mut self, d: usize) {
        let services: Vec<u64> = self
            .cm
            .ids
            .values()
            .filter(|x| x.state == State::Listen && x.device.is_none())
            .map(|x| ip_service_id(x.ps, x.port()))
            .collect();
        for s in services {
            self.take_service(d, s);
        }
    }

    pub(super) fn drop_service(&mut self, d: usize, service: u64) {
        if let Some(n) = self.cm.services.get_mut(&(d, service)) {
            *n -= 1;
            if *n == 0 {
                self.cm.services.remove(&(d, service));
                if let Some(mut dev) = device_at(&self.devices, d) {
                    dev.engine.cm().unlisten(service);
                }
            }
        }
    }
}
