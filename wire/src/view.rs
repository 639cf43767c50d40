//! The part every fixed-size header view shares.

/// Declares a zero-copy view `$name<T: AsRef<[u8]>>` over a header of `$len` bytes, with the
/// constructors and the length check every header needs. Field accessors are written per header.
macro_rules! header_view {
    ($(#[$doc:meta])* $name:ident, $len:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// The length of this header in bytes.
            pub const LEN: usize = $len;

            /// Wraps a buffer without checking its length; accessors may panic if it is short.
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wraps a buffer, checking that it holds the whole header.
            pub fn new_checked(buffer: T) -> $crate::Result<Self> {
                let view = Self::new_unchecked(buffer);
                view.check_len()?;
                Ok(view)
            }

            /// Fails with [`Error::Truncated`](crate::Error::Truncated) if the buffer is shorter
            /// than the header.
            pub fn check_len(&self) -> $crate::Result<()> {
                if self.buffer.as_ref().len() < Self::LEN {
                    Err($crate::Error::Truncated)
                } else {
                    Ok(())
                }
            }

            /// Returns the underlying buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The header's bytes.
            pub fn as_bytes(&self) -> &[u8] {
                &self.buffer.as_ref()[..Self::LEN]
            }

            #[allow(dead_code)]
            fn be(&self, range: core::ops::Range<usize>) -> u64 {
                $crate::view::read_be(&self.buffer.as_ref()[range])
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            #[allow(dead_code)]
            fn set_be(&mut self, range: core::ops::Range<usize>, value: u64) {
                $crate::view::write_be(&mut self.buffer.as_mut()[range], value)
            }
        }
    };
}

/// Reads a big-endian unsigned integer of 1 to 8 bytes.
#[inline]
pub(crate) fn read_be(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0, |acc, &b| (acc << 8) | u64::from(b))
}

/// Writes the low `bytes.len()` bytes of `value` big-endian.
#[inline]
pub(crate) fn write_be(bytes: &mut [u8], value: u64) {
    let n = bytes.len();
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = (value >> (8 * (n - 1 - i))) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn be_round_trip() {
        let mut b = [0u8; 3];
        write_be(&mut b, 0x12_3456);
        assert_eq!(b, [0x12, 0x34, 0x56]);
        assert_eq!(read_be(&b), 0x12_3456);
        let mut b = [0u8; 8];
        write_be(&mut b, u64::MAX - 1);
        assert_eq!(read_be(&b), u64::MAX - 1);
    }
}
