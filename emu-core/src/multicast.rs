//! Multicast groups (IBA 10.5): the UD QPs attached to each multicast GID, within the device's
//! limits. A packet to a group goes to every QP attached to it.

use std::collections::BTreeMap;

use crate::attr::DeviceAttr;
use crate::gid::Gid;
use crate::{Result, VerbsError};

#[derive(Debug, Default)]
#[cfg_attr(feature = "fuzz", derive(Clone))]
pub(crate) struct Groups {
    members: BTreeMap<Gid, Vec<u32>>,
    /// Attachments over all groups.
    total: usize,
}

impl Groups {
    /// Attaches `qpn` to `gid`. Attaching twice is not an error (the kernel's uverbs keeps one
    /// attachment); the limits are rxe's, with its ENOMEM.
    pub fn attach(&mut self, gid: Gid, qpn: u32, limits: &DeviceAttr) -> Result<()> {
        if self.members.get(&gid).is_some_and(|m| m.contains(&qpn)) {
            return Ok(());
        }
        if !self.members.contains_key(&gid) && self.members.len() >= limits.max_mcast_grp as usize {
            return Err(VerbsError::NoMemory("too many multicast groups"));
        }
        if self.total >= limits.max_total_mcast_qp_attach as usize {
            return Err(VerbsError::NoMemory("too many multicast attachments"));
        }
        let members = self.members.entry(gid).or_default();
        if members.len() >= limits.max_mcast_qp_attach as usize {
            return Err(VerbsError::NoMemory("too many QPs attached to the group"));
        }
        members.push(qpn);
        self.total += 1;
        Ok(())
    }

    /// Detaches `qpn` from `gid`: EINVAL if it is not attached, as in uverbs.
    pub fn detach(&mut self, gid: Gid, qpn: u32) -> Result<()> {
        let members = self
            .members
            .get_mut(&gid)
            .ok_or(VerbsError::Invalid("the QP is not attached to this group"))?;
        let at = members
            .iter()
            .position(|&q| q == qpn)
            .ok_or(VerbsError::Invalid("the QP is not attached to this group"))?;
        members.swap_remove(at);
        if members.is_empty() {
            self.members.remove(&gid);
        }
        self.total -= 1;
        Ok(())
    }

    /// Detaches `qpn` from every group (it is being destroyed).
    pub fn detach_all(&mut self, qpn: u32) {
        let total = &mut self.total;
        self.members.retain(|_, m| {
            let before = m.len();
            m.retain(|&q| q != qpn);
            *total -= before - m.len();
            !m.is_empty()
        });
    }

    /// The QPs attached to `gid`.
    pub fn members(&self, gid: &Gid) -> &[u32] {
        self.members.get(gid).map_or(&[], Vec::as_slice)
    }

    /// The groups with at least one QP attached.
    pub fn groups(&self) -> impl Iterator<Item = Gid> + '_ {
        self.members.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(n: u8) -> Gid {
        Gid::from(core::net::Ipv4Addr::new(239, 0, 0, n))
    }

    #[test]
    fn attach_is_idempotent_and_detach_needs_an_attachment() {
        let mut g = Groups::default();
        let limits = DeviceAttr::default();
        g.attach(group(1), 0x20, &limits).unwrap();
        g.attach(group(1), 0x20, &limits).unwrap();
        g.attach(group(1), 0x21, &limits).unwrap();
        assert_eq!(g.members(&group(1)), &[0x20, 0x21]);
        assert!(matches!(
            g.detach(group(2), 0x20),
            Err(VerbsError::Invalid(_))
        ));
        g.detach(group(1), 0x20).unwrap();
        assert!(g.detach(group(1), 0x20).is_err());
        g.detach_all(0x21);
        assert_eq!(g.groups().count(), 0);
        assert_eq!(g.total, 0);
    }

    #[test]
    fn limits_give_enomem() {
        let mut g = Groups::default();
        let limits = DeviceAttr {
            max_mcast_grp: 2,
            max_mcast_qp_attach: 2,
            max_total_mcast_qp_attach: 3,
            ..DeviceAttr::default()
        };
        g.attach(group(1), 1, &limits).unwrap();
        g.attach(group(1), 2, &limits).unwrap();
        assert!(matches!(
            g.attach(group(1), 3, &limits),
            Err(VerbsError::NoMemory(_))
        ));
        g.attach(group(2), 1, &limits).unwrap();
        assert!(matches!(
            g.attach(group(3), 1, &limits),
            Err(VerbsError::NoMemory(_))
        ));
        assert!(matches!(
            g.attach(group(2), 2, &limits),
            Err(VerbsError::NoMemory(_))
        ));
        g.detach_all(1);
        assert_eq!(g.total, 1);
        g.attach(group(3), 1, &limits).unwrap();
    }
}
