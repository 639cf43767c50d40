//! The out-of-band exchange of rdma-core's `ibv_rc_pingpong` (libibverbs/examples), so that
//! an unmodified pingpong server can be the peer: the client connects over TCP and writes its
//! `LID:QPN:PSN:GID` as text with a NUL (52 bytes), reads the server's (sent once the server's
//! QP is ready), and writes `done` with its NUL.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The length of one side's message: `sizeof "0000:000000:000000:" + 32 hex digits`.
const MESSAGE_LEN: usize = 52;

/// One side's QP, as pingpong tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    /// The LID (0 on RoCE).
    pub lid: u16,
    /// The QP number.
    pub qpn: u32,
    /// The first PSN it sends.
    pub psn: u32,
    /// The GID, in network order.
    pub gid: [u8; 16],
}

impl Dest {
    /// The message: `%04x:%06x:%06x:` then the GID's 16 bytes as hex, then a NUL.
    pub fn to_message(&self) -> [u8; MESSAGE_LEN] {
        let gid: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
        let text = format!("{:04x}:{:06x}:{:06x}:{gid}", self.lid, self.qpn, self.psn);
        let mut msg = [0; MESSAGE_LEN];
        msg[..text.len()].copy_from_slice(text.as_bytes());
        msg
    }

    /// Reads a peer's message.
    pub fn parse(msg: &[u8]) -> Result<Dest, String> {
        let text = msg.split(|&b| b == 0).next().unwrap_or_default();
        let text = std::str::from_utf8(text).map_err(|_| "the peer's address is not text")?;
        let bad = || format!("the peer's address {text:?} is not LID:QPN:PSN:GID");
        let fields: Vec<&str> = text.split(':').collect();
        let [lid, qpn, psn, gid] = fields[..] else {
            return Err(bad());
        };
        let hex = |s: &str| u32::from_str_radix(s, 16).map_err(|_| bad());
        if gid.len() != 32 {
            return Err(bad());
        }
        let mut bytes = [0; 16];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(&gid[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Dest {
            lid: hex(lid)? as u16,
            qpn: hex(qpn)? & 0xff_ffff,
            psn: hex(psn)? & 0xff_ffff,
            gid: bytes,
        })
    }
}

/// Exchanges QPs with a pingpong server at `server`, as its client does.
pub fn exchange(server: SocketAddr, ours: &Dest, timeout: Duration) -> io::Result<Dest> {
    let mut s = TcpStream::connect_timeout(&server, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.write_all(&ours.to_message())?;
    let mut msg = [0; MESSAGE_LEN];
    s.read_exact(&mut msg)?;
    s.write_all(b"done\0")?;
    Dest::parse(&msg).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_what_pingpong_writes_and_reads() {
        let mut gid = [0u8; 16];
        gid[10..].copy_from_slice(&[0xff, 0xff, 198, 18, 0, 1]);
        let d = Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0xabcdef,
            gid,
        };
        let msg = d.to_message();
        assert_eq!(
            &msg[..MESSAGE_LEN - 1],
            b"0000:000011:abcdef:00000000000000000000ffffc6120001"
        );
        assert_eq!(msg[MESSAGE_LEN - 1], 0);
        assert_eq!(Dest::parse(&msg), Ok(d));
        assert!(Dest::parse(b"0000:11:22").is_err());
        assert!(Dest::parse(b"0000:000011:abcdef:zz000000000000000000ffffc6120001\0").is_err());
    }
}
