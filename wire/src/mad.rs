//! Management Datagrams (IBA Vol 1 13.4): 256-byte messages that ride in UD SEND_ONLY packets to
//! the General Services Interface, QP1 (Q_Key 0x80010000). Every MAD starts with this 24-byte
//! common header; the Communication Manager's messages ([`crate::cm`]) fill the other 232 bytes.
//!
//! `BaseVersion(1) MgmtClass(1) ClassVersion(1) R|Method(1) Status(2) ClassSpecific(2)
//! TransactionID(8) AttributeID(2) Reserved(2) AttributeModifier(4)`

use crate::{Error, Result};

/// The length of every MAD (IBA 13.4.2: a MAD is exactly 256 bytes).
pub const MAD_LEN: usize = 256;
/// The QP that receives MADs of the General Services Interface (IBA 13.5.1).
pub const GSI_QPN: u32 = 1;
/// The well-known Q_Key of QP1 (IBA 13.5.1: 0x80010000).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The only MAD base version (IBA 13.4.2).
pub const BASE_VERSION: u8 = 1;

mod field {
    use core::ops::Range;
    pub const BASE_VERSION: usize = 0;
    pub const MGMT_CLASS: usize = 1;
    pub const CLASS_VERSION: usize = 2;
    pub const METHOD: usize = 3;
    pub const STATUS: Range<usize> = 4..6;
    pub const CLASS_SPECIFIC: Range<usize> = 6..8;
    pub const TRANSACTION_ID: Range<usize> = 8..16;
    pub const ATTRIBUTE_ID: Range<usize> = 16..18;
    pub const ATTRIBUTE_MODIFIER: Range<usize> = 20..24;
}

header_view!(
    /// A zero-copy view of a MAD's common header.
    MadHeader,
    24
);

impl<T: AsRef<[u8]>> MadHeader<T> {
    /// The MAD base version (1).
    pub fn base_version(&self) -> u8 {
        self.buffer.as_ref()[field::BASE_VERSION]
    }
    /// The management class (0x07: Communication Management).
    pub fn mgmt_class(&self) -> u8 {
        self.buffer.as_ref()[field::MGMT_CLASS]
    }
    /// The class's version (2 for the CM).
    pub fn class_version(&self) -> u8 {
        self.buffer.as_ref()[field::CLASS_VERSION]
    }
    /// The method byte: the response bit (0x80) and the method.
    pub fn method(&self) -> u8 {
        self.buffer.as_ref()[field::METHOD]
    }
    /// The status (0 in requests and in the CM's SENDs).
    pub fn status(&self) -> u16 {
        self.be(field::STATUS) as u16
    }
    /// The class-specific word.
    pub fn class_specific(&self) -> u16 {
        self.be(field::CLASS_SPECIFIC) as u16
    }
    /// The transaction ID, which pairs a response with its request.
    pub fn transaction_id(&self) -> u64 {
        self.be(field::TRANSACTION_ID)
    }
    /// What the MAD carries (for the CM: which message).
    pub fn attribute_id(&self) -> u16 {
        self.be(field::ATTRIBUTE_ID) as u16
    }
    /// The attribute modifier.
    pub fn attribute_modifier(&self) -> u32 {
        self.be(field::ATTRIBUTE_MODIFIER) as u32
    }
}

/// The fields of a MAD's common header (the reserved word is written as zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadRepr {
    /// Management class.
    pub mgmt_class: u8,
    /// Class version.
    pub class_version: u8,
    /// Method, with the response bit.
    pub method: u8,
    /// Status.
    pub status: u16,
    /// Class-specific word.
    pub class_specific: u16,
    /// Transaction ID.
    pub transaction_id: u64,
    /// Attribute ID.
    pub attribute_id: u16,
    /// Attribute modifier.
    pub attribute_modifier: u32,
}

/// MAD methods (IBA 13.4.5): the CM sends all its messages with [`METHOD_SEND`].
pub const METHOD_SEND: u8 = 0x03;

impl MadRepr {
    /// Parses a MAD's header, refusing any base version but 1.
    pub fn parse<T: AsRef<[u8]>>(mad: &MadHeader<T>) -> Result<MadRepr> {
        mad.check_len()?;
        if mad.base_version() != BASE_VERSION {
            return Err(Error::BadMad);
        }
        Ok(MadRepr {
            mgmt_class: mad.mgmt_class(),
            class_version: mad.class_version(),
            method: mad.method(),
            status: mad.status(),
            class_specific: mad.class_specific(),
            transaction_id: mad.transaction_id(),
            attribute_id: mad.attribute_id(),
            attribute_modifier: mad.attribute_modifier(),
        })
    }

    /// Writes the header into the first 24 bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) {
        let h = &mut buf[..MadHeader::<&[u8]>::LEN];
        h.fill(0);
        h[field::BASE_VERSION] = BASE_VERSION;
        h[field::MGMT_CLASS] = self.mgmt_class;
        h[field::CLASS_VERSION] = self.class_version;
        h[field::METHOD] = self.method;
        crate::view::write_be(&mut h[field::STATUS], self.status.into());
        crate::view::write_be(&mut h[field::CLASS_SPECIFIC], self.class_specific.into());
        crate::view::write_be(&mut h[field::TRANSACTION_ID], self.transaction_id);
        crate::view::write_be(&mut h[field::ATTRIBUTE_ID], self.attribute_id.into());
        crate::view::write_be(
            &mut h[field::ATTRIBUTE_MODIFIER],
            self.attribute_modifier.into(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_emit() {
        let repr = MadRepr {
            mgmt_class: 0x07,
            class_version: 2,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            transaction_id: 0x0000_1234_5678_9abc,
            attribute_id: 0x0010,
            attribute_modifier: 0,
        };
        let mut buf = [0xffu8; 24];
        repr.emit(&mut buf);
        assert_eq!(
            buf,
            [
                1, 7, 2, 3, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0, 0x10, 0, 0, 0,
                0, 0, 0
            ]
        );
        let view = MadHeader::new_checked(&buf[..]).unwrap();
        assert_eq!(MadRepr::parse(&view), Ok(repr));
        buf[0] = 2;
        let view = MadHeader::new_checked(&buf[..]).unwrap();
        assert_eq!(MadRepr::parse(&view), Err(Error::BadMad));
        assert_eq!(MadHeader::new_checked(&buf[..23]), Err(Error::Truncated));
    }
}
