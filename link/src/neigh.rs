//! Where to send a frame for an IP address: the next hop from the kernel's routing table and
//! its MAC from the kernel's neighbour table, both read over rtnetlink. When the neighbour is
//! not known yet, a datagram to it makes the kernel resolve it (ARP for IPv4, ND for IPv6), as
//! rxe leaves resolution to the kernel too.

use std::io;
use std::net::{IpAddr, UdpSocket};
use std::time::{Duration, Instant};

use softrnic_sys as sys;
use softrnic_sys::rtnetlink::{attrs, ip_from, messages, request};

const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
const NLM_F_DUMP: u16 = 0x300;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
/// Neighbour states whose address can be used: REACHABLE, STALE, DELAY, PROBE, PERMANENT,
/// NOARP.
const NUD_USABLE: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x80 | 0x40;

fn family(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => libc::AF_INET as u8,
        IpAddr::V6(_) => libc::AF_INET6 as u8,
    }
}

fn octets(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

/// The next hop towards `dst` and the interface index it leaves by (RTM_GETROUTE).
pub fn next_hop(dst: IpAddr) -> io::Result<(IpAddr, u32)> {
    let addr = octets(dst);
    // struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags.
    let mut body = vec![
        family(dst),
        (addr.len() * 8) as u8,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    ];
    body.extend_from_slice(&((4 + addr.len()) as u16).to_ne_bytes());
    body.extend_from_slice(&RTA_DST.to_ne_bytes());
    body.extend_from_slice(&addr);
    let reply = sys::netlink(&request(RTM_GETROUTE, 0, &body), false)?;
    for (kind, body) in messages(&reply) {
        if kind == 2 {
            let errno = body
                .get(..4)
                .map_or(0, |e| i32::from_ne_bytes(e.try_into().unwrap_or([0; 4])));
            return Err(io::Error::from_raw_os_error(-errno));
        }
        if kind != RTM_NEWROUTE {
            continue;
        }
        let (mut gateway, mut oif) = (None, 0);
        for (t, data) in attrs(body, 12) {
            match t {
                RTA_GATEWAY => gateway = ip_from(data),
                RTA_OIF if data.len() == 4 => {
                    oif = u32::from_ne_bytes(data.try_into().unwrap_or([0; 4]))
                }
                _ => {}
            }
        }
        return Ok((gateway.unwrap_or(dst), oif));
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("no route to {dst}"),
    ))
}

/// The MAC the kernel's neighbour table has for `ip` on interface `ifindex`, if usable.
pub fn lookup(ip: IpAddr, ifindex: u32) -> io::Result<Option<[u8; 6]>> {
    // struct ndmsg: family, pad, pad, ifindex, state, flags, type.
    let mut body = vec![family(ip), 0, 0, 0];
    body.extend_from_slice(&(ifindex as i32).to_ne_bytes());
    body.extend_from_slice(&[0; 4]);
    let reply = sys::netlink(&request(RTM_GETNEIGH, NLM_F_DUMP, &body), true)?;
    for (kind, body) in messages(&reply) {
        if kind != RTM_NEWNEIGH || body.len() < 12 {
            continue;
        }
        let index = u32::from_ne_bytes(body[4..8].try_into().unwrap_or([0; 4]));
        let state = u16::from_ne_bytes([body[8], body[9]]);
        if index != ifindex || state & NUD_USABLE == 0 {
            continue;
        }
        let (mut dst, mut mac) = (None, None);
        for (t, data) in attrs(body, 12) {
            match t {
                NDA_DST => dst = ip_from(data),
                NDA_LLADDR if data.len() == 6 => mac = <[u8; 6]>::try_from(data).ok(),
                _ => {}
            }
        }
        if dst == Some(ip) && mac.is_some() {
            return Ok(mac);
        }
    }
    Ok(None)
}

/// The MAC to send frames for `dst` to, resolving it through the kernel if needed (waits up to
/// `timeout`). Works in the calling thread's network namespace.
pub fn resolve(dst: IpAddr, timeout: Duration) -> io::Result<[u8; 6]> {
    let (hop, ifindex) = next_hop(dst)?;
    let deadline = Instant::now() + timeout;
    let mut nudged = false;
    loop {
        if let Some(mac) = lookup(hop, ifindex)? {
            return Ok(mac);
        }
        if !nudged {
            // Any datagram makes the kernel resolve the next hop; the discard port answers
            // nothing.
            let any: IpAddr = match dst {
                IpAddr::V4(_) => [0, 0, 0, 0].into(),
                IpAddr::V6(_) => [0u16; 8].into(),
            };
            let sock = UdpSocket::bind((any, 0))?;
            let _ = sock.send_to(&[], (dst, 9));
            nudged = true;
        }
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no ARP/ND answer from {hop} (next hop to {dst})"),
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
