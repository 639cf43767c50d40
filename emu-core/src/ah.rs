//! Address handles: where a packet goes (the destination GID and the next hop's MAC), for a
//! connected QP's path and a UD send.

use smoltcp::wire::EthernetAddress;

use crate::gid::Gid;

/// Where packets go: the fields of an address handle, plus the next hop's MAC, which the
/// device resolves (ARP/ND) before it hands the AH to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct AddressHandle {
    /// Destination GID.
    pub dgid: Gid,
    /// Index of the source GID in the GID table.
    pub sgid_index: u8,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Traffic class: DSCP in the high six bits, ECN in the low two.
    pub traffic_class: u8,
    /// IPv6 flow label.
    pub flow_label: u32,
    /// The next hop's MAC.
    #[cfg_attr(feature = "serde", serde(with = "mac"))]
    pub dmac: EthernetAddress,
}

/// EthernetAddress as its six bytes.
#[cfg(feature = "serde")]
mod mac {
    use smoltcp::wire::EthernetAddress;

    pub fn serialize<S: serde::Serializer>(m: &EthernetAddress, s: S) -> Result<S::Ok, S::Error> {
        serde::Serialize::serialize(&m.0, s)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<EthernetAddress, D::Error> {
        <[u8; 6] as serde::Deserialize>::deserialize(d).map(EthernetAddress)
    }
}

impl AddressHandle {
    /// A handle to `dgid` from source GID `sgid_index`, hop limit 64, traffic class 0, and a MAC
    /// still to resolve (the device fills it in).
    pub fn to(dgid: Gid, sgid_index: u8) -> AddressHandle {
        AddressHandle {
            dgid,
            sgid_index,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            dmac: EthernetAddress([0; 6]),
        }
    }

    /// The same handle, sent to `mac`.
    pub fn via(self, mac: EthernetAddress) -> AddressHandle {
        AddressHandle { dmac: mac, ..self }
    }
}
