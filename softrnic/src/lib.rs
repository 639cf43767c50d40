//! softrnic: a userspace RoCEv2 software RNIC. For now this crate holds the `softrnic` command's
//! frame dissector over capture files; the device daemon joins it later.

pub mod capture;
