//! The extension headers after the BTH (IBA 9.3 and A14: XRCETH, DETH, FETH, RETH, AtomicETH, AETH, AtomicAckETH,
//! ImmDt, IETH, and the CNP's reserved bytes), as the opcode table says which follow.

use crate::Result;
use crate::aeth::{Aeth, AethRepr};
use crate::atomic::{AtomicAckEth, AtomicAckEthRepr, AtomicEth, AtomicEthRepr};
use crate::deth::{Deth, DethRepr};
use crate::feth::{Feth, FethRepr};
use crate::imm::{Ieth, ImmDt};
use crate::opcode::Headers;
use crate::reth::{Reth, RethRepr};
use crate::xrceth::XrcEth;

/// The extension headers after the BTH. Exactly those the opcode requires must be present.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExtRepr {
    /// XRCETH: the XRC SRQ number (XRC requests).
    pub xrceth: Option<u32>,
    /// DETH (UD).
    pub deth: Option<DethRepr>,
    /// FETH (FLUSH).
    pub feth: Option<FethRepr>,
    /// RETH (RDMA WRITE first/only, READ request, FLUSH, ATOMIC WRITE).
    pub reth: Option<RethRepr>,
    /// AtomicETH (COMPARE_SWAP, FETCH_ADD).
    pub atomic_eth: Option<AtomicEthRepr>,
    /// AETH (ACK, READ response first/last/only, ATOMIC ACK).
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH (ATOMIC ACK).
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// Immediate data.
    pub immdt: Option<u32>,
    /// IETH: the R_Key to invalidate.
    pub ieth: Option<u32>,
}

impl ExtRepr {
    /// The set of headers present (the CNP's reserved bytes have no fields, so never included).
    pub fn headers(&self) -> Headers {
        let mut h = Headers::empty();
        for (present, header) in [
            (self.xrceth.is_some(), Headers::XRCETH),
            (self.deth.is_some(), Headers::DETH),
            (self.feth.is_some(), Headers::FETH),
            (self.reth.is_some(), Headers::RETH),
            (self.atomic_eth.is_some(), Headers::ATOMIC_ETH),
            (self.aeth.is_some(), Headers::AETH),
            (self.atomic_ack_eth.is_some(), Headers::ATOMIC_ACK_ETH),
            (self.immdt.is_some(), Headers::IMMDT),
            (self.ieth.is_some(), Headers::IETH),
        ] {
            if present {
                h = h.union(header);
            }
        }
        h
    }

    /// Writes the headers in wire order into `buf`, which starts right after the BTH and holds
    /// exactly `headers.len()` bytes. The caller has checked that `self.headers()` matches.
    pub(super) fn emit(&self, headers: Headers, buf: &mut [u8]) {
        let at = |h| headers.offset_of(h).unwrap_or(0);
        if let Some(v) = self.xrceth {
            XrcEth::new_unchecked(&mut buf[at(Headers::XRCETH)..]).emit(v);
        }
        if let Some(r) = &self.deth {
            r.emit(&mut Deth::new_unchecked(&mut buf[at(Headers::DETH)..]));
        }
        if let Some(r) = &self.feth {
            r.emit(&mut Feth::new_unchecked(&mut buf[at(Headers::FETH)..]));
        }
        if let Some(r) = &self.reth {
            r.emit(&mut Reth::new_unchecked(&mut buf[at(Headers::RETH)..]));
        }
        if let Some(r) = &self.atomic_eth {
            r.emit(&mut AtomicEth::new_unchecked(
                &mut buf[at(Headers::ATOMIC_ETH)..],
            ));
        }
        if let Some(r) = &self.aeth {
            r.emit(&mut Aeth::new_unchecked(&mut buf[at(Headers::AETH)..]));
        }
        if let Some(r) = &self.atomic_ack_eth {
            r.emit(&mut AtomicAckEth::new_unchecked(
                &mut buf[at(Headers::ATOMIC_ACK_ETH)..],
            ));
        }
        if let Some(v) = self.immdt {
            ImmDt::new_unchecked(&mut buf[at(Headers::IMMDT)..]).emit(v);
        }
        if let Some(v) = self.ieth {
            Ieth::new_unchecked(&mut buf[at(Headers::IETH)..]).emit(v);
        }
        if let Some(off) = headers.offset_of(Headers::CNP_RESERVED) {
            buf[off..off + 16].fill(0);
        }
    }

    /// Parses the headers `headers` from `buf`, which starts right after the BTH and holds at
    /// least `headers.len()` bytes.
    pub(super) fn parse(headers: Headers, buf: &[u8]) -> Result<ExtRepr> {
        let at = |h| headers.offset_of(h).map(|off| &buf[off..]);
        Ok(ExtRepr {
            xrceth: at(Headers::XRCETH)
                .map(|b| XrcEth::new_unchecked(b).parse())
                .transpose()?,
            deth: at(Headers::DETH)
                .map(|b| DethRepr::parse(&Deth::new_unchecked(b)))
                .transpose()?,
            feth: at(Headers::FETH)
                .map(|b| FethRepr::parse(&Feth::new_unchecked(b)))
                .transpose()?,
            reth: at(Headers::RETH)
                .map(|b| RethRepr::parse(&Reth::new_unchecked(b)))
                .transpose()?,
            atomic_eth: at(Headers::ATOMIC_ETH)
                .map(|b| AtomicEthRepr::parse(&AtomicEth::new_unchecked(b)))
                .transpose()?,
            aeth: at(Headers::AETH)
                .map(|b| AethRepr::parse(&Aeth::new_unchecked(b)))
                .transpose()?,
            atomic_ack_eth: at(Headers::ATOMIC_ACK_ETH)
                .map(|b| AtomicAckEthRepr::parse(&AtomicAckEth::new_unchecked(b)))
                .transpose()?,
            immdt: at(Headers::IMMDT)
                .map(|b| ImmDt::new_unchecked(b).parse())
                .transpose()?,
            ieth: at(Headers::IETH)
                .map(|b| Ieth::new_unchecked(b).parse())
                .transpose()?,
        })
    }
}
