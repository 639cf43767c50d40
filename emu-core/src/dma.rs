//! Moving message bytes between packets and a scatter/gather list, with the local key checks
//! (IBA 10.6.3.2: every SGE's lkey, PD, access and range are checked before the access).

use crate::cq::WcStatus;
use crate::keys::{Access, KeyTable};
use crate::memory::Memory;
use crate::wr::Sge;

/// The pieces of `sgl` covering message bytes `offset..offset + len`, each checked for
/// `access`: (space, address, piece length). Fails with LOC_PROT_ERR on a bad key and
/// LOC_LEN_ERR if the list is too short.
fn pieces<'a>(
    keys: &'a KeyTable,
    pd: u32,
    access: Access,
    sgl: &'a [Sge],
    offset: u32,
    len: usize,
) -> impl Iterator<Item = Result<(u32, u64, usize), WcStatus>> + 'a {
    let mut skip = offset as u64;
    let mut left = len;
    let mut sges = sgl.iter();
    core::iter::from_fn(move || {
        while left > 0 {
            let Some(sge) = sges.next() else {
                left = 0;
                return Some(Err(WcStatus::LocLenErr));
            };
            let sge_len = sge.length as u64;
            if skip >= sge_len {
                skip -= sge_len;
                continue;
            }
            let n = ((sge_len - skip) as usize).min(left);
            let addr = sge.addr.wrapping_add(skip);
            skip = 0;
            left -= n;
            return Some(
                keys.check_local(sge.lkey, pd, access, addr, n as u64)
                    .map(|t| (t.space, t.addr, n))
                    .map_err(|_| WcStatus::LocProtErr),
            );
        }
        None
    })
}

/// Copies message bytes from `offset` out of the SGL into `dst`.
pub(crate) fn gather<M: Memory>(
    mem: &M,
    keys: &KeyTable,
    pd: u32,
    sgl: &[Sge],
    offset: u32,
    dst: &mut [u8],
) -> Result<(), WcStatus> {
    let mut at = 0;
    for piece in pieces(keys, pd, Access::default(), sgl, offset, dst.len()) {
        let (space, addr, n) = piece?;
        mem.read(space, addr, &mut dst[at..at + n])
            .map_err(|_| WcStatus::LocProtErr)?;
        at += n;
    }
    Ok(())
}

/// Copies `src` into the SGL from message byte `offset` on; the SGEs need local write.
pub(crate) fn scatter<M: Memory>(
    mem: &mut M,
    keys: &KeyTable,
    pd: u32,
    sgl: &[Sge],
    offset: u32,
    src: &[u8],
) -> Result<(), WcStatus> {
    let mut at = 0;
    for piece in pieces(keys, pd, Access::LOCAL_WRITE, sgl, offset, src.len()) {
        let (space, addr, n) = piece?;
        mem.write(space, addr, &src[at..at + n])
            .map_err(|_| WcStatus::LocProtErr)?;
        at += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::HeapMemory;

    #[test]
    fn gathers_and_scatters_across_sges_with_checks() {
        let mut mem = HeapMemory::new();
        let (a, b) = (mem.alloc(4), mem.alloc(4));
        let mut keys = KeyTable::new(0);
        let ka = keys
            .register(1, 0, crate::keys::Span::at(a, 4), Access::LOCAL_WRITE)
            .unwrap();
        let kb = keys
            .register(1, 0, crate::keys::Span::at(b, 4), Access::default())
            .unwrap();
        let sgl = [
            Sge {
                addr: a,
                length: 4,
                lkey: ka,
            },
            Sge {
                addr: b,
                length: 4,
                lkey: kb,
            },
        ];
        scatter(&mut mem, &keys, 1, &sgl[..1], 1, &[7, 8, 9]).unwrap();
        mem.write(0, b, &[1, 2, 3, 4]).unwrap();
        let mut out = [0; 5];
        gather(&mem, &keys, 1, &sgl, 2, &mut out).unwrap();
        assert_eq!(out, [8, 9, 1, 2, 3]);
        // Past the end of the list: a length error. Wrong PD or no local write: protection.
        assert_eq!(
            gather(&mem, &keys, 1, &sgl, 4, &mut [0; 5]),
            Err(WcStatus::LocLenErr)
        );
        assert_eq!(
            gather(&mem, &keys, 2, &sgl, 0, &mut [0; 1]),
            Err(WcStatus::LocProtErr)
        );
        assert_eq!(
            scatter(&mut mem, &keys, 1, &sgl, 3, &[0, 0]),
            Err(WcStatus::LocProtErr)
        );
    }
}
