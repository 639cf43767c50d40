//! Memory regions and memory windows, and the key checks every data access passes.
//!
//! An lkey/rkey is `hidden index << 8 | key byte` (IBA 10.6.3.1: the low 8 bits are the
//! consumer key part). The index passes through a secret permutation and the key byte of each
//! registration comes from a secret stream, so keys are not guessable from earlier keys, and a
//! freed index is not reused with the same byte.

use crate::memory::Space;
use crate::rng::Rng;

bitflags::bitflags! {
    /// Access flags, numbered as `enum ibv_access_flags`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
    pub struct Access: u32 {
        /// The owner may write (needed for receive buffers and READ/atomic results).
        const LOCAL_WRITE = 1;
        /// Peers may RDMA WRITE.
        const REMOTE_WRITE = 2;
        /// Peers may RDMA READ.
        const REMOTE_READ = 4;
        /// Peers may execute atomics.
        const REMOTE_ATOMIC = 8;
        /// Memory windows may be bound to the region.
        const MW_BIND = 16;
        /// Remote addresses are offsets from the region's start.
        const ZERO_BASED = 32;
        /// Peers may FLUSH for global visibility (IBA 1.5).
        const FLUSH_GLOBAL = 1 << 8;
        /// Peers may FLUSH for persistence (IBA 1.5).
        const FLUSH_PERSISTENT = 1 << 9;
    }
}

impl Access {
    /// Whether any remote access is granted (IBA 10.6.3.1: remote write or atomic requires
    /// local write).
    const fn needs_local_write(self) -> bool {
        self.intersects(Access::REMOTE_WRITE.union(Access::REMOTE_ATOMIC))
    }
}

/// A memory window bind, carried by a BIND_MW work request (type 2) or `ibv_bind_mw` (type 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct MwBind {
    /// The window's current rkey.
    pub mw_rkey: u32,
    /// The key byte for the bound window (type 2).
    pub new_key: u8,
    /// The region's lkey.
    pub mr_lkey: u32,
    /// Start address.
    pub addr: u64,
    /// Length.
    pub len: u64,
    /// Remote access granted.
    pub access: Access,
}

/// Why a key check failed. The caller maps it to the completion status or NAK its role uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyError {
    /// No such key, or it was deregistered or invalidated.
    Invalid,
    /// The key belongs to another protection domain (or a type 2 window to another QP).
    WrongOwner,
    /// The key does not grant the access.
    Access,
    /// The range is not inside the region.
    Range,
}

/// A memory window's type (IBA 10.6.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum MwType {
    /// Bound with `ibv_bind_mw`; invalidated only by rebinding or deallocation.
    Type1,
    /// Bound by a BIND_MW work request on one QP; invalidated by local or remote invalidate.
    Type2,
}

#[derive(Debug, Clone)]
enum Kind {
    Mr {
        windows: u32,
    },
    Mw {
        mw_type: MwType,
        mr: Option<u32>,
        qpn: Option<u32>,
    },
}

#[derive(Debug, Clone)]
struct Entry {
    key: u8,
    pd: u32,
    space: Space,
    /// Where the bytes are in the address space.
    addr: u64,
    /// The address work requests and peers name the first byte by (the region's I/O virtual
    /// address; `addr` unless registered with another).
    iova: u64,
    len: u64,
    access: Access,
    valid: bool,
    kind: Kind,
}

/// Memory to register: `len` bytes at `addr`, which work requests and peers name from `iova`
/// on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Where the bytes are.
    pub addr: u64,
    /// The address of the first byte to work requests and peers.
    pub iova: u64,
    /// How many.
    pub len: u64,
}

impl Span {
    /// `len` bytes at `addr`, named by their address.
    pub const fn at(addr: u64, len: u64) -> Span {
        Span {
            addr,
            iova: addr,
            len,
        }
    }
}

/// A region's access and extent are possible: known flags, remote write or atomic access only
/// with local write (IBA 10.6.3.1), no wrap of either address space.
fn check_region(region: &Span, access: Access) -> crate::Result<()> {
    if !Access::all().contains(access) {
        return Err(crate::VerbsError::Invalid("unknown access flags"));
    }
    if access.needs_local_write() && !access.contains(Access::LOCAL_WRITE) {
        return Err(crate::VerbsError::Invalid(
            "remote write or atomic access requires local write",
        ));
    }
    if access.contains(Access::FLUSH_PERSISTENT) {
        // As rxe refuses it for memory that is not persistent (rxe_mr.c): a region here is
        // ordinary memory, which no flush makes persistent.
        return Err(crate::VerbsError::Invalid(
            "persistent flush access needs persistent memory",
        ));
    }
    if region.addr.checked_add(region.len).is_none()
        || region.iova.checked_add(region.len).is_none()
    {
        return Err(crate::VerbsError::Invalid("region wraps the address space"));
    }
    Ok(())
}

/// A region or window a key resolves to: where an access lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The address space.
    pub space: Space,
    /// The virtual address to access.
    pub addr: u64,
}

/// Every MR and MW of an engine, indexed by key.
#[derive(Debug)]
#[cfg_attr(feature = "fuzz", derive(Clone))]
pub struct KeyTable {
    entries: Vec<Option<Entry>>,
    free: Vec<u32>,
    /// The key byte last used at each index, so a reused index gets a different one.
    last_key: Vec<u8>,
    /// Where each index appears in a key.
    scramble: Scramble,
    /// The key bytes: a stream of the secret's own, apart from the engine's other random
    /// choices (QPNs and CM ids show those on the wire).
    tags: Rng,
    /// Live regions and windows, for the device's limits.
    regions: usize,
    windows: usize,
}

/// The object a key names, whatever its key byte: an L_Key or R_Key is the object's
/// (scrambled) index and a variant byte (IBA 10.6: the low 8 bits are the consumer's key
/// portion, which a memory window's bind changes).
pub fn key_index(key: u32) -> u32 {
    key >> 8
}

/// A secret permutation of the 24-bit object indexes (IBA 10.6 leaves a key's upper 24 bits to
/// the implementation): a four-round Feistel network over two 12-bit halves, each round keyed
/// by 64 secret bits. A key shows neither how many objects came before it nor which index the
/// next one gets, so a program or a peer cannot guess another's keys from its own. (A cheap
/// mix rather than a cipher: it runs on every key lookup.)
#[derive(Debug, Clone, Copy)]
struct Scramble([u64; 4]);

impl Scramble {
    fn new(secret: u64) -> Scramble {
        let mut rng = Rng::new(secret);
        Scramble(std::array::from_fn(|_| rng.next_u64()))
    }

    fn round(k: u64, half: u32) -> u32 {
        ((u64::from(half) ^ k).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) as u32
    }

    /// The index as a key shows it.
    fn hide(&self, index: u32) -> u32 {
        let (mut l, mut r) = (index >> 12 & 0xfff, index & 0xfff);
        for &k in &self.0 {
            (l, r) = (r, l ^ Self::round(k, r));
        }
        l << 12 | r
    }

    /// The index behind a key's upper 24 bits.
    fn reveal(&self, shown: u32) -> u32 {
        let (mut l, mut r) = (shown >> 12 & 0xfff, shown & 0xfff);
        for &k in self.0.iter().rev() {
            (l, r) = (r ^ Self::round(k, l), l);
        }
        l << 12 | r
    }
}

impl KeyTable {
    /// A table whose keys come from `secret` (give it real randomness wherever programs or
    /// peers must not guess each other's keys).
    pub fn new(secret: u64) -> KeyTable {
        KeyTable {
            entries: Vec::new(),
            free: Vec::new(),
            last_key: Vec::new(),
            scramble: Scramble::new(secret),
            tags: Rng::new(!secret),
            regions: 0,
            windows: 0,
        }
    }

    /// The index and key byte of `key`.
    fn split(&self, key: u32) -> (usize, u8) {
        (self.scramble.reveal(key_index(key)) as usize, key as u8)
    }

    fn insert(&mut self, entry: impl FnOnce(u8) -> Entry) -> u32 {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                // The index whose key would be 0 (a common "unset" value) is never used, so
                // key 0 never resolves.
                while self.scramble.hide(self.entries.len() as u32) == 0 {
                    self.entries.push(None);
                    self.last_key.push(0);
                }
                self.entries.push(None);
                self.last_key.push(0);
                (self.entries.len() - 1) as u32
            }
        };
        let mut key = self.tags.next_u32() as u8;
        if key == self.last_key[index as usize] {
            key = key.wrapping_add(1);
        }
        self.last_key[index as usize] = key;
        self.entries[index as usize] = Some(entry(key));
        self.scramble.hide(index) << 8 | key as u32
    }

    fn get(&self, key: u32) -> Option<&Entry> {
        let (index, byte) = self.split(key);
        self.entries.get(index)?.as_ref().filter(|e| e.key == byte)
    }

    fn get_mut(&mut self, key: u32) -> Option<&mut Entry> {
        let (index, byte) = self.split(key);
        self.entries
            .get_mut(index)?
            .as_mut()
            .filter(|e| e.key == byte)
    }

    /// Registers `len` bytes at `addr`, named by work requests and peers from `iova` on, and
    /// returns the key (lkey and rkey are the same, as in rxe).
    pub fn register(
        &mut self,
        pd: u32,
        space: Space,
        region: Span,
        access: Access,
    ) -> crate::Result<u32> {
        check_region(&region, access)?;
        self.regions += 1;
        Ok(self.insert(|key| Entry {
            key,
            pd,
            space,
            addr: region.addr,
            iova: region.iova,
            len: region.len,
            access,
            valid: true,
            kind: Kind::Mr { windows: 0 },
        }))
    }

    /// Changes a region in place, its key kept (`ibv_rereg_mr`): its PD (with that PD's
    /// address space, which must be the region's), its bytes, its access, each if given. EBUSY
    /// while windows are bound to it (they name its bytes).
    pub fn reregister(
        &mut self,
        key: u32,
        pd: Option<(u32, Space)>,
        region: Option<Span>,
        access: Option<Access>,
    ) -> crate::Result<()> {
        let e = self
            .get(key)
            .ok_or(crate::VerbsError::Invalid("no such memory region"))?;
        if pd.is_some_and(|(_, space)| space != e.space) {
            return Err(crate::VerbsError::Invalid("the PD is another program's"));
        }
        match e.kind {
            Kind::Mr { windows: 0 } => {}
            Kind::Mr { .. } => return Err(crate::VerbsError::Busy("windows are bound")),
            Kind::Mw { .. } => return Err(crate::VerbsError::Invalid("no such memory region")),
        }
        let region = region.unwrap_or(Span {
            addr: e.addr,
            iova: e.iova,
            len: e.len,
        });
        let access = access.unwrap_or(e.access);
        check_region(&region, access)?;
        let e = self.get_mut(key).expect("checked");
        e.pd = pd.map_or(e.pd, |(pd, _)| pd);
        (e.addr, e.iova, e.len, e.access) = (region.addr, region.iova, region.len, access);
        Ok(())
    }

    /// Deregisters a region; its key is invalid at once. EBUSY while windows are bound to it.
    pub fn deregister(&mut self, key: u32) -> crate::Result<()> {
        match self.get(key).map(|e| &e.kind) {
            Some(Kind::Mr { windows: 0 }) => {}
            Some(Kind::Mr { .. }) => return Err(crate::VerbsError::Busy("windows are bound")),
            _ => return Err(crate::VerbsError::Invalid("no such memory region")),
        }
        self.remove(key);
        self.regions -= 1;
        Ok(())
    }

    fn remove(&mut self, key: u32) {
        let (index, _) = self.split(key);
        self.entries[index] = None;
        self.free.push(index as u32);
    }

    /// Allocates an unbound memory window.
    pub fn alloc_mw(&mut self, pd: u32, mw_type: MwType) -> u32 {
        self.windows += 1;
        self.insert(|key| Entry {
            key,
            pd,
            space: 0,
            addr: 0,
            iova: 0,
            len: 0,
            access: Access::default(),
            valid: false,
            kind: Kind::Mw {
                mw_type,
                mr: None,
                qpn: None,
            },
        })
    }

    /// Frees a memory window, unbinding it.
    pub fn dealloc_mw(&mut self, handle: u32) -> crate::Result<()> {
        // A window is named by its index: its key byte changes with every bind.
        let (index, _) = self.split(handle);
        let rkey = match self.entries.get(index).and_then(Option::as_ref) {
            Some(
                e @ Entry {
                    kind: Kind::Mw { .. },
                    ..
                },
            ) => handle & !0xff | u32::from(e.key),
            _ => return Err(crate::VerbsError::Invalid("no such memory window")),
        };
        self.unbind(rkey);
        self.remove(rkey);
        self.windows -= 1;
        Ok(())
    }

    fn unbind(&mut self, rkey: u32) {
        let mr = match self.get_mut(rkey) {
            Some(Entry {
                kind: Kind::Mw { mr, .. },
                valid,
                ..
            }) => {
                *valid = false;
                mr.take()
            }
            _ => None,
        };
        if let Some(Entry {
            kind: Kind::Mr { windows },
            ..
        }) = mr.and_then(|k| self.get_mut(k))
        {
            *windows -= 1;
        }
    }

    /// Binds a window to part of a region (IBA 10.6.7.2 checks: same PD, the region allows
    /// binding, the window lies inside it, and remote write/atomic requires the region's local
    /// write). `qpn` is the binding QP, which alone may use a type 2 window. Returns the
    /// window's new rkey.
    pub fn bind(&mut self, pd: u32, qpn: u32, req: &MwBind) -> Result<u32, KeyError> {
        let mw = self.get(req.mw_rkey).ok_or(KeyError::Invalid)?;
        let mw_type = match mw.kind {
            Kind::Mw { mw_type, .. } => mw_type,
            Kind::Mr { .. } => return Err(KeyError::Invalid),
        };
        // Type 2 windows must be unbound (invalidated) before a new bind (IBA 10.6.7.2.2).
        if mw_type == MwType::Type2 && mw.valid {
            return Err(KeyError::Invalid);
        }
        if mw.pd != pd {
            return Err(KeyError::WrongOwner);
        }
        let mr = self.get(req.mr_lkey).ok_or(KeyError::Invalid)?;
        if !matches!(mr.kind, Kind::Mr { .. }) || !mr.valid {
            return Err(KeyError::Invalid);
        }
        if mr.pd != pd {
            return Err(KeyError::WrongOwner);
        }
        if !mr.access.contains(Access::MW_BIND)
            || (req.access.needs_local_write() && !mr.access.contains(Access::LOCAL_WRITE))
        {
            return Err(KeyError::Access);
        }
        if !in_range(mr, req.addr, req.len) {
            return Err(KeyError::Range);
        }
        let (space, addr) = (mr.space, mr.addr + (req.addr - mr.iova));
        self.unbind(req.mw_rkey);
        let (index, _) = self.split(req.mw_rkey);
        let key = req.new_key;
        let bound = req.len > 0;
        if bound
            && let Some(Entry {
                kind: Kind::Mr { windows },
                ..
            }) = self.get_mut(req.mr_lkey)
        {
            *windows += 1;
        }
        let entry = self.entries[index].as_mut().ok_or(KeyError::Invalid)?;
        entry.key = key;
        entry.space = space;
        entry.addr = addr;
        entry.iova = req.addr;
        entry.len = req.len;
        entry.access = req.access;
        entry.valid = bound;
        entry.kind = Kind::Mw {
            mw_type,
            mr: bound.then_some(req.mr_lkey),
            qpn: (mw_type == MwType::Type2).then_some(qpn),
        };
        Ok(req.mw_rkey & !0xff | u32::from(key))
    }

    /// Invalidates a key (local invalidate, or send with invalidate), as IBA 10.6.6 allows:
    /// a region, or a type 2 window, of the same PD.
    pub fn invalidate(&mut self, key: u32, pd: u32) -> Result<(), KeyError> {
        let e = self.get(key).ok_or(KeyError::Invalid)?;
        if e.pd != pd {
            return Err(KeyError::WrongOwner);
        }
        match e.kind {
            Kind::Mw {
                mw_type: MwType::Type1,
                ..
            } => Err(KeyError::Invalid),
            Kind::Mw { .. } => {
                self.unbind(key);
                Ok(())
            }
            Kind::Mr { .. } => {
                self.get_mut(key).ok_or(KeyError::Invalid)?.valid = false;
                Ok(())
            }
        }
    }

    /// Checks a local key (an SGE's lkey): a valid region of `pd` with `access` covering the
    /// range.
    pub fn check_local(
        &self,
        lkey: u32,
        pd: u32,
        access: Access,
        addr: u64,
        len: u64,
    ) -> Result<Target, KeyError> {
        let e = self.get(lkey).ok_or(KeyError::Invalid)?;
        if !matches!(e.kind, Kind::Mr { .. }) {
            return Err(KeyError::Invalid);
        }
        check(e, pd, access, addr, len)
    }

    /// Checks a remote key (from a RETH or AtomicETH): a valid region or window of `pd` with
    /// `access`; a type 2 window only for the QP it was bound on.
    pub fn check_remote(
        &self,
        rkey: u32,
        pd: u32,
        qpn: u32,
        access: Access,
        addr: u64,
        len: u64,
    ) -> Result<Target, KeyError> {
        let e = self.get(rkey).ok_or(KeyError::Invalid)?;
        if let Kind::Mw { qpn: Some(q), .. } = e.kind
            && q != qpn
        {
            return Err(KeyError::WrongOwner);
        }
        check(e, pd, access, addr, len)
    }

    /// The range a key covers, as peers name it (from 0 for a zero-based region): what a
    /// FLUSH of the whole region checks (IBA 1.5).
    pub fn extent(&self, rkey: u32) -> Option<(u64, u64)> {
        let e = self.get(rkey)?;
        let start = if e.access.contains(Access::ZERO_BASED) {
            0
        } else {
            e.iova
        };
        Some((start, e.len))
    }

    /// The memory a region's key registers, and its access (`None` for a window or no key).
    pub fn region(&self, key: u32) -> Option<(Span, Access)> {
        let e = self
            .get(key)
            .filter(|e| matches!(e.kind, Kind::Mr { .. }))?;
        let span = Span {
            addr: e.addr,
            iova: e.iova,
            len: e.len,
        };
        Some((span, e.access))
    }

    /// How many regions and windows belong to `pd` (a PD in use cannot be freed).
    pub fn count_in_pd(&self, pd: u32) -> usize {
        self.entries.iter().flatten().filter(|e| e.pd == pd).count()
    }

    /// Live regions.
    pub fn regions(&self) -> usize {
        self.regions
    }

    /// Live windows.
    pub fn windows(&self) -> usize {
        self.windows
    }
}

/// Whether `[va, va + len)` lies in the entry, by the addresses work requests name.
fn in_range(e: &Entry, va: u64, len: u64) -> bool {
    match va.checked_add(len) {
        Some(end) => va >= e.iova && end <= e.iova + e.len,
        None => false,
    }
}

fn check(e: &Entry, pd: u32, access: Access, addr: u64, len: u64) -> Result<Target, KeyError> {
    if !e.valid {
        return Err(KeyError::Invalid);
    }
    if e.pd != pd {
        return Err(KeyError::WrongOwner);
    }
    if !e.access.contains(access) {
        return Err(KeyError::Access);
    }
    let va = if e.access.contains(Access::ZERO_BASED) {
        e.iova.checked_add(addr).ok_or(KeyError::Range)?
    } else {
        addr
    };
    if !in_range(e, va, len) {
        return Err(KeyError::Range);
    }
    Ok(Target {
        space: e.space,
        addr: e.addr + (va - e.iova),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RW: Access = Access::from_bits_retain(1 | 2 | 4);

    fn table() -> KeyTable {
        KeyTable::new(1)
    }

    #[test]
    fn the_hidden_index_is_a_permutation_that_shows_no_order() {
        let s = Scramble::new(0x1234_5678);
        for i in (0..1 << 24).step_by(97).chain([0xff_ffff]) {
            let shown = s.hide(i);
            assert!(shown < 1 << 24);
            assert_eq!(s.reveal(shown), i);
        }
        // Keys of regions registered one after another: neither their order nor their steps
        // repeat, and another secret gives others.
        let keys = |secret| {
            let mut t = KeyTable::new(secret);
            (0..64)
                .map(|_| t.register(1, 0, Span::at(0x1000, 16), RW).unwrap())
                .collect::<Vec<_>>()
        };
        let (a, b) = (keys(1), keys(2));
        let steps: std::collections::HashSet<i64> = a
            .windows(2)
            .map(|w| i64::from(w[1] >> 8) - i64::from(w[0] >> 8))
            .collect();
        assert!(steps.len() > 48, "steps between indexes: {steps:?}");
        assert!(!a.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(a.iter().zip(&b).filter(|(x, y)| x == y).count(), 0);
        assert!(a.iter().all(|&k| k >> 8 != 0), "key 0 never resolves");
    }

    #[test]
    fn key_is_index_and_byte_and_checks_everything() {
        let mut t = table();
        let k = t.register(1, 0, Span::at(0x1000, 0x100), RW).unwrap();
        assert_eq!(t.split(k), (0, k as u8), "the first index, hidden");
        assert_ne!(k >> 8, 0);
        let ok = t.check_remote(k, 1, 5, Access::REMOTE_WRITE, 0x1000, 0x100);
        assert_eq!(
            ok,
            Ok(Target {
                space: 0,
                addr: 0x1000
            })
        );
        // Boundaries: just inside succeeds, one byte out fails.
        assert!(t.check_local(k, 1, Access::LOCAL_WRITE, 0x10ff, 1).is_ok());
        assert_eq!(
            t.check_local(k, 1, Access::LOCAL_WRITE, 0x10ff, 2),
            Err(KeyError::Range)
        );
        assert_eq!(
            t.check_local(k, 1, Access::LOCAL_WRITE, 0xfff, 1),
            Err(KeyError::Range)
        );
        assert_eq!(
            t.check_local(k, 1, Access::LOCAL_WRITE, u64::MAX, 2),
            Err(KeyError::Range)
        );
        assert_eq!(
            t.check_remote(k, 2, 5, Access::REMOTE_READ, 0x1000, 1),
            Err(KeyError::WrongOwner)
        );
        assert_eq!(
            t.check_remote(k, 1, 5, Access::REMOTE_ATOMIC, 0x1000, 8),
            Err(KeyError::Access)
        );
        assert_eq!(
            t.check_remote(k ^ 1, 1, 5, Access::REMOTE_READ, 0x1000, 1),
            Err(KeyError::Invalid)
        );
    }

    #[test]
    fn deregistration_invalidates_at_once_and_reuse_changes_the_byte() {
        let mut t = table();
        let k = t.register(1, 0, Span::at(0, 16), RW).unwrap();
        t.deregister(k).unwrap();
        assert_eq!(
            t.check_local(k, 1, Access::LOCAL_WRITE, 0, 1),
            Err(KeyError::Invalid)
        );
        assert!(t.deregister(k).is_err());
        let k2 = t.register(1, 0, Span::at(0, 16), RW).unwrap();
        assert_eq!(k2 >> 8, k >> 8);
        assert_ne!(k2, k);
    }

    #[test]
    fn remote_write_without_local_write_is_einval() {
        let mut t = table();
        let err = t.register(1, 0, Span::at(0, 16), Access::REMOTE_WRITE);
        assert_eq!(err.unwrap_err().errno(), 22);
        assert!(
            t.register(1, 0, Span::at(0, 16), Access::REMOTE_READ)
                .is_ok()
        );
    }

    #[test]
    fn zero_based_regions_take_offsets() {
        let mut t = table();
        let access = RW.union(Access::ZERO_BASED);
        let k = t.register(1, 0, Span::at(0x5000, 0x10), access).unwrap();
        let target = t.check_remote(k, 1, 0, Access::REMOTE_READ, 4, 4).unwrap();
        assert_eq!(target.addr, 0x5004);
        assert!(
            t.check_remote(k, 1, 0, Access::REMOTE_READ, 0xd, 4)
                .is_err()
        );
    }

    #[test]
    fn windows_bind_invalidate_and_pin_their_region() {
        let mut t = table();
        let mr = t
            .register(1, 0, Span::at(0x1000, 0x1000), RW.union(Access::MW_BIND))
            .unwrap();
        let mw = t.alloc_mw(1, MwType::Type2);
        // Unbound: unusable.
        assert!(t.check_remote(mw, 1, 9, Access::REMOTE_READ, 0, 0).is_err());
        let req = MwBind {
            mw_rkey: mw,
            new_key: 0x42,
            mr_lkey: mr,
            addr: 0x1100,
            len: 0x100,
            access: Access::REMOTE_READ,
        };
        let rkey = t.bind(1, 9, &req).unwrap();
        assert_eq!(rkey & 0xff, 0x42);
        assert!(
            t.check_remote(rkey, 1, 9, Access::REMOTE_READ, 0x1100, 0x100)
                .is_ok()
        );
        assert_eq!(
            t.check_remote(rkey, 1, 8, Access::REMOTE_READ, 0x1100, 1),
            Err(KeyError::WrongOwner)
        );
        assert_eq!(
            t.check_remote(rkey, 1, 9, Access::REMOTE_WRITE, 0x1100, 1),
            Err(KeyError::Access)
        );
        assert_eq!(
            t.check_remote(rkey, 1, 9, Access::REMOTE_READ, 0x10ff, 1),
            Err(KeyError::Range)
        );
        assert!(t.deregister(mr).is_err());
        // A bound type 2 window cannot be rebound before it is invalidated.
        assert!(
            t.bind(
                1,
                9,
                &MwBind {
                    mw_rkey: rkey,
                    ..req
                }
            )
            .is_err()
        );
        t.invalidate(rkey, 1).unwrap();
        assert!(
            t.check_remote(rkey, 1, 9, Access::REMOTE_READ, 0x1100, 1)
                .is_err()
        );
        t.deregister(mr).unwrap();
    }

    #[test]
    fn bind_checks_the_region() {
        let mut t = table();
        let mr = t.register(1, 0, Span::at(0x1000, 0x1000), RW).unwrap();
        let mw = t.alloc_mw(1, MwType::Type1);
        let req = MwBind {
            mw_rkey: mw,
            new_key: 0,
            mr_lkey: mr,
            addr: 0x1000,
            len: 0x10,
            access: Access::REMOTE_READ,
        };
        assert_eq!(t.bind(1, 0, &req), Err(KeyError::Access));
        let mr2 = t
            .register(1, 0, Span::at(0x1000, 0x1000), RW.union(Access::MW_BIND))
            .unwrap();
        let far = MwBind {
            mr_lkey: mr2,
            addr: 0x1ff8,
            ..req
        };
        assert_eq!(t.bind(1, 0, &far), Err(KeyError::Range));
        assert_eq!(
            t.bind(
                2,
                0,
                &MwBind {
                    mr_lkey: mr2,
                    ..req
                }
            ),
            Err(KeyError::WrongOwner)
        );
        let k = t
            .bind(
                1,
                0,
                &MwBind {
                    mr_lkey: mr2,
                    ..req
                },
            )
            .unwrap();
        // Type 1 windows are not invalidated by invalidate operations.
        assert_eq!(t.invalidate(k, 1), Err(KeyError::Invalid));
        // The window goes by the key alloc_mw gave even after a bind changed its key byte.
        let rebound = t
            .bind(
                1,
                0,
                &MwBind {
                    mw_rkey: k,
                    new_key: k as u8 ^ 0x5a,
                    mr_lkey: mr2,
                    ..req
                },
            )
            .unwrap();
        assert_ne!(rebound, mw);
        t.dealloc_mw(mw).unwrap();
        assert!(t.get(rebound).is_none());
        assert!(t.dealloc_mw(mw).is_err());
        t.deregister(mr2).unwrap();
    }

    #[test]
    fn a_region_is_named_by_its_iova() {
        let mut t = table();
        let region = Span {
            addr: 0x7000,
            iova: 0x1_0000,
            len: 0x100,
        };
        let k = t.register(1, 0, region, RW.union(Access::MW_BIND)).unwrap();
        // Local and remote accesses name the IOVA; they land at the address.
        let local = t
            .check_local(k, 1, Access::LOCAL_WRITE, 0x1_0010, 8)
            .unwrap();
        assert_eq!(local.addr, 0x7010);
        let remote = t
            .check_remote(k, 1, 5, Access::REMOTE_READ, 0x1_00f8, 8)
            .unwrap();
        assert_eq!(remote.addr, 0x70f8);
        // The address itself is not a name of the region.
        assert_eq!(
            t.check_local(k, 1, Access::LOCAL_WRITE, 0x7000, 8),
            Err(KeyError::Range)
        );
        // A window bound inside it is named by the region's IOVA too.
        let mw = t.alloc_mw(1, MwType::Type1);
        let bind = MwBind {
            mw_rkey: mw,
            new_key: 9,
            mr_lkey: k,
            addr: 0x1_0020,
            len: 0x10,
            access: Access::REMOTE_READ,
        };
        let rkey = t.bind(1, 5, &bind).unwrap();
        let target = t
            .check_remote(rkey, 1, 5, Access::REMOTE_READ, 0x1_0028, 8)
            .unwrap();
        assert_eq!(target.addr, 0x7028);
        // Windows name its bytes: it cannot change under them.
        assert_eq!(
            t.reregister(k, None, None, Some(RW)),
            Err(crate::VerbsError::Busy("windows are bound"))
        );
    }

    #[test]
    fn reregistering_keeps_the_key_and_changes_what_it_names() {
        let mut t = table();
        let k = t.register(1, 0, Span::at(0x1000, 0x100), RW).unwrap();
        let moved = Span::at(0x8000, 0x10);
        t.reregister(k, Some((2, 0)), Some(moved), Some(Access::LOCAL_WRITE))
            .unwrap();
        let at = |pd, access, addr| t.check_local(k, pd, access, addr, 8);
        assert_eq!(
            at(1, Access::LOCAL_WRITE, 0x8000),
            Err(KeyError::WrongOwner)
        );
        assert_eq!(at(2, Access::LOCAL_WRITE, 0x8000).unwrap().addr, 0x8000);
        assert_eq!(at(2, Access::LOCAL_WRITE, 0x1000), Err(KeyError::Range));
        assert_eq!(
            t.check_remote(k, 2, 5, Access::REMOTE_READ, 0x8000, 8),
            Err(KeyError::Access)
        );
        // Another program's PD, or remote write without local write, is refused, and the region
        // stays as it was.
        assert!(t.reregister(k, Some((3, 1)), None, None).is_err());
        assert!(
            t.reregister(k, None, None, Some(Access::REMOTE_WRITE))
                .is_err()
        );
        assert_eq!(
            t.check_local(k, 2, Access::LOCAL_WRITE, 0x8000, 8)
                .unwrap()
                .addr,
            0x8000
        );
    }
}
