//! Names and numbers: the `ibv_*_str` names of enums, and the rate conversions
//! (`ibv_rate_to_mult`, `ibv_rate_to_mbps` and back), as rdma-core's verbs.c has them.

use std::ffi::{c_char, c_int};

use crate::abi::*;

/// A NUL-terminated string literal as a C string.
macro_rules! cstr {
    ($s:expr) => {
        concat!($s, "\0").as_ptr().cast::<c_char>()
    };
}

/// (multiplier, Mb/s) for each `ibv_rate`, as rdma-core's verbs.c tabulates them.
const RATES: &[(u32, c_int, c_int)] = &[
    (IBV_RATE_2_5_GBPS, 1, 2500),
    (IBV_RATE_5_GBPS, 2, 5000),
    (IBV_RATE_10_GBPS, 4, 10000),
    (IBV_RATE_20_GBPS, 8, 20000),
    (IBV_RATE_30_GBPS, 12, 30000),
    (IBV_RATE_40_GBPS, 16, 40000),
    (IBV_RATE_60_GBPS, 24, 60000),
    (IBV_RATE_80_GBPS, 32, 80000),
    (IBV_RATE_120_GBPS, 48, 120000),
    (IBV_RATE_14_GBPS, -1, 14062),
    (IBV_RATE_56_GBPS, -1, 56250),
    (IBV_RATE_112_GBPS, -1, 112500),
    (IBV_RATE_168_GBPS, -1, 168750),
    (IBV_RATE_25_GBPS, -1, 25781),
    (IBV_RATE_100_GBPS, -1, 103125),
    (IBV_RATE_200_GBPS, -1, 206250),
    (IBV_RATE_300_GBPS, -1, 309375),
    (IBV_RATE_28_GBPS, 11, 28125),
    (IBV_RATE_50_GBPS, 20, 53125),
    (IBV_RATE_400_GBPS, 160, 425000),
    (IBV_RATE_600_GBPS, 240, 637500),
    (IBV_RATE_800_GBPS, 320, 850000),
    (IBV_RATE_1200_GBPS, 480, 1275000),
];

fn rate_by<T: PartialEq>(pick: impl Fn(&(u32, c_int, c_int)) -> T, v: T) -> u32 {
    RATES
        .iter()
        .find(|r| pick(r) == v)
        .map_or(IBV_RATE_MAX, |r| r.0)
}

fn rate_of(rate: u32, pick: impl Fn(&(u32, c_int, c_int)) -> c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, pick)
}

exported! {
    /// `ibv_node_type_str`.
    fn ibv_node_type_str(node_type: c_int) -> *const c_char {
        match node_type {
            1 => cstr!("InfiniBand channel adapter"),
            2 => cstr!("InfiniBand switch"),
            3 => cstr!("InfiniBand router"),
            4 => cstr!("iWARP NIC"),
            5 => cstr!("usNIC"),
            6 => cstr!("usNIC UDP"),
            7 => cstr!("unspecified"),
            _ => cstr!("unknown"),
        }
    }

    /// `ibv_port_state_str`.
    fn ibv_port_state_str(port_state: u32) -> *const c_char {
        match port_state {
            0 => cstr!("no state change (NOP)"),
            1 => cstr!("down"),
            2 => cstr!("init"),
            3 => cstr!("armed"),
            4 => cstr!("active"),
            5 => cstr!("active defer"),
            _ => cstr!("unknown"),
        }
    }

    /// `ibv_event_type_str`.
    fn ibv_event_type_str(event: u32) -> *const c_char {
        match event {
            0 => cstr!("CQ error"),
            1 => cstr!("local work queue catastrophic error"),
            2 => cstr!("invalid request local work queue error"),
            3 => cstr!("local access violation work queue error"),
            4 => cstr!("communication established"),
            5 => cstr!("send queue drained"),
            6 => cstr!("path migrated"),
            7 => cstr!("path migration request error"),
            8 => cstr!("local catastrophic error"),
            9 => cstr!("port active"),
            10 => cstr!("port error"),
            11 => cstr!("LID change"),
            12 => cstr!("P_Key change"),
            13 => cstr!("SM change"),
            14 => cstr!("SRQ catastrophic error"),
            15 => cstr!("SRQ limit reached"),
            16 => cstr!("last WQE reached"),
            17 => cstr!("client reregistration"),
            18 => cstr!("GID table change"),
            19 => cstr!("WQ fatal"),
            _ => cstr!("unknown"),
        }
    }

    /// `ibv_wc_status_str`.
    fn ibv_wc_status_str(status: u32) -> *const c_char {
        match status {
            0 => cstr!("success"),
            1 => cstr!("local length error"),
            2 => cstr!("local QP operation error"),
            3 => cstr!("local EE context operation error"),
            4 => cstr!("local protection error"),
            5 => cstr!("Work Request Flushed Error"),
            6 => cstr!("memory management operation error"),
            7 => cstr!("bad response error"),
            8 => cstr!("local access error"),
            9 => cstr!("remote invalid request error"),
            10 => cstr!("remote access error"),
            11 => cstr!("remote operation error"),
            12 => cstr!("transport retry counter exceeded"),
            13 => cstr!("RNR retry counter exceeded"),
            14 => cstr!("local RDD violation error"),
            15 => cstr!("remote invalid RD request"),
            16 => cstr!("aborted error"),
            17 => cstr!("invalid EE context number"),
            18 => cstr!("invalid EE context state"),
            19 => cstr!("fatal error"),
            20 => cstr!("response timeout error"),
            21 => cstr!("general error"),
            22 => cstr!("TM error"),
            23 => cstr!("TM software rendezvous"),
            _ => cstr!("unknown"),
        }
    }

    /// `ibv_wr_opcode_str` (rdma-core 56 and later export it from `IBVERBS_PRIVATE_34`; its
    /// `ibv_wr_*` tracing names). The opcodes rdma-core leaves unnamed (12, 13) are "unknown"
    /// here, not a null pointer.
    fn ibv_wr_opcode_str(opcode: u32) -> *const c_char {
        match opcode {
            0 => cstr!("rdma-write"),
            1 => cstr!("rdma-write-with-imm"),
            2 => cstr!("send"),
            3 => cstr!("send-with-imm"),
            4 => cstr!("rdma-read"),
            5 => cstr!("atomic-cmp-and-swp"),
            6 => cstr!("atomic-fetch-and-add"),
            7 => cstr!("local-inv"),
            8 => cstr!("bind-mw"),
            9 => cstr!("send-with-inv"),
            10 => cstr!("tso"),
            11 => cstr!("driver1"),
            14 => cstr!("flush"),
            15 => cstr!("atomic-write"),
            _ => cstr!("unknown"),
        }
    }

    /// `ibv_rate_to_mult`.
    fn ibv_rate_to_mult(rate: u32) -> c_int {
        rate_of(rate, |r| r.1)
    }

    /// `mult_to_ibv_rate`.
    fn mult_to_ibv_rate(mult: c_int) -> u32 {
        if mult < 0 { IBV_RATE_MAX } else { rate_by(|r| r.1, mult) }
    }

    /// `ibv_rate_to_mbps`.
    fn ibv_rate_to_mbps(rate: u32) -> c_int {
        rate_of(rate, |r| r.2)
    }

    /// `mbps_to_ibv_rate`.
    fn mbps_to_ibv_rate(mbps: c_int) -> u32 {
        rate_by(|r| r.2, mbps)
    }
}

crate::private::other_private_versions!(ibv_wr_opcode_str);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_round_trip_as_rdma_core() {
        // SAFETY: pure functions.
        unsafe {
            assert_eq!(ibv_rate_to_mult(IBV_RATE_10_GBPS), 4);
            assert_eq!(mult_to_ibv_rate(4), IBV_RATE_10_GBPS);
            assert_eq!(ibv_rate_to_mult(IBV_RATE_14_GBPS), -1);
            assert_eq!(mult_to_ibv_rate(3), IBV_RATE_MAX);
            assert_eq!(ibv_rate_to_mbps(IBV_RATE_100_GBPS), 103125);
            assert_eq!(mbps_to_ibv_rate(25781), IBV_RATE_25_GBPS);
            assert_eq!(mbps_to_ibv_rate(1), IBV_RATE_MAX);
        }
    }

    #[test]
    fn work_request_opcodes_have_rdma_cores_names() {
        let name = |op| {
            // SAFETY: a pure function returning a static string.
            unsafe { std::ffi::CStr::from_ptr(ibv_wr_opcode_str(op)) }
                .to_str()
                .unwrap()
        };
        assert_eq!(name(0), "rdma-write");
        assert_eq!(name(15), "atomic-write");
        assert_eq!(name(12), "unknown");
        assert_eq!(name(99), "unknown");
    }
}
