//! rtnetlink messages: a request's header, and walking a reply's messages and attributes
//! without trusting its lengths.

use std::net::IpAddr;

const NLM_F_REQUEST: u16 = 1;

/// The messages in a netlink reply: (type, payload after the 16-byte header).
pub fn messages(buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let hdr = buf.get(at..at + 16)?;
        let len = u32::from_ne_bytes(hdr[0..4].try_into().ok()?) as usize;
        let kind = u16::from_ne_bytes(hdr[4..6].try_into().ok()?);
        let body = buf.get(at + 16..at + len.max(16))?;
        at += (len.max(16) + 3) & !3;
        Some((kind, body))
    })
}

/// The attributes after a fixed header of `skip` bytes: (type, data).
pub fn attrs(body: &[u8], skip: usize) -> impl Iterator<Item = (u16, &[u8])> {
    let mut at = skip;
    std::iter::from_fn(move || {
        let hdr = body.get(at..at + 4)?;
        let len = u16::from_ne_bytes([hdr[0], hdr[1]]) as usize;
        let kind = u16::from_ne_bytes([hdr[2], hdr[3]]) & 0x3fff;
        let data = body.get(at + 4..at + len.max(4))?;
        at += (len.max(4) + 3) & !3;
        Some((kind, data))
    })
}

/// A request of `kind` with `flags` (NLM_F_REQUEST is added) and `body`.
pub fn request(kind: u16, flags: u16, body: &[u8]) -> Vec<u8> {
    let len = 16 + body.len();
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&(flags | NLM_F_REQUEST).to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    m.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel
    m.extend_from_slice(body);
    m
}

/// An IPv4 or IPv6 address from its 4 or 16 bytes.
pub fn ip_from(data: &[u8]) -> Option<IpAddr> {
    match data.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(data).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(data).ok()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RTM_NEWNEIGH: u16 = 28;
    const NDA_DST: u16 = 1;
    const NDA_LLADDR: u16 = 2;

    #[test]
    fn parses_messages_and_attributes() {
        let mut msg = request(RTM_NEWNEIGH, 0, &[2, 0, 0, 0, 7, 0, 0, 0, 2, 0, 0, 1]);
        // NDA_DST 198.18.0.2 and NDA_LLADDR 02:00:00:00:00:02.
        msg.extend_from_slice(&[8, 0, 1, 0, 198, 18, 0, 2]);
        msg.extend_from_slice(&[10, 0, 2, 0, 2, 0, 0, 0, 0, 2, 0, 0]);
        let len = msg.len() as u32;
        msg[..4].copy_from_slice(&len.to_ne_bytes());
        let all: Vec<_> = messages(&msg).collect();
        assert_eq!(all.len(), 1);
        let (kind, body) = all[0];
        assert_eq!(kind, RTM_NEWNEIGH);
        let found: Vec<_> = attrs(body, 12).collect();
        assert_eq!(found[0], (NDA_DST, &[198, 18, 0, 2][..]));
        assert_eq!(found[1], (NDA_LLADDR, &[2, 0, 0, 0, 0, 2][..]));
        // Truncated input ends the walk instead of panicking.
        assert_eq!(messages(&msg[..20]).count(), 0);
        assert_eq!(attrs(&body[..14], 12).count(), 0);
    }
}
