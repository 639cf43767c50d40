//! Errors from verbs calls, with the errno a real provider returns for each.

use core::fmt;

/// Why a verbs call failed. [`VerbsError::errno`] gives the value rdma-core with rxe returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VerbsError {
    /// An argument is invalid: a bad handle, an attribute not allowed in this state transition,
    /// a WR for the wrong QP type (EINVAL).
    Invalid(&'static str),
    /// A queue is full or a limit is reached (ENOMEM).
    NoMemory(&'static str),
    /// The object is still in use by another (EBUSY).
    Busy(&'static str),
    /// The operation is not supported by softrnic (EOPNOTSUPP).
    NotSupported(&'static str),
    /// An index names an empty entry of a table, as a source GID index with no GID
    /// (ENODATA, as the kernel's `rdma_get_gid_attr`).
    NoData(&'static str),
}

impl VerbsError {
    /// The errno for this error.
    pub const fn errno(self) -> i32 {
        match self {
            VerbsError::Invalid(_) => 22,
            VerbsError::NoMemory(_) => 12,
            VerbsError::Busy(_) => 16,
            VerbsError::NotSupported(_) => 95,
            VerbsError::NoData(_) => 61,
        }
    }
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, why) = match self {
            VerbsError::Invalid(w) => ("EINVAL", w),
            VerbsError::NoMemory(w) => ("ENOMEM", w),
            VerbsError::Busy(w) => ("EBUSY", w),
            VerbsError::NotSupported(w) => ("EOPNOTSUPP", w),
            VerbsError::NoData(w) => ("ENODATA", w),
        };
        write!(f, "{why} ({name})")
    }
}

impl std::error::Error for VerbsError {}

/// The result of a verbs call.
pub type Result<T> = core::result::Result<T, VerbsError>;
