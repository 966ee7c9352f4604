//! The one checked cast from bytes to block slices.
//!
//! Every block type is a `#[repr(C)]` struct deriving `bytemuck::Pod`, with a
//! compile-time size assertion next to its definition. Bytes become `&[Block]`
//! only through `as_blocks` / `as_blocks_mut`, which check length and alignment.

use bytemuck::Pod;

/// Views `bytes` as blocks. Panics when the length is not a whole number of
/// blocks or the bytes are misaligned for `B`: both are caller bugs (tensor
/// rows come from the validated GGUF reader, activations from our own buffers).
#[inline]
pub fn as_blocks<B: Pod>(bytes: &[u8]) -> &[B] {
    match bytemuck::try_cast_slice(bytes) {
        Ok(b) => b,
        Err(e) => panic!(
            "{} bytes are not a slice of {}-byte blocks: {e:?}",
            bytes.len(),
            std::mem::size_of::<B>()
        ),
    }
}

/// Mutable form of [`as_blocks`].
#[inline]
pub fn as_blocks_mut<B: Pod>(bytes: &mut [u8]) -> &mut [B] {
    let len = bytes.len();
    match bytemuck::try_cast_slice_mut(bytes) {
        Ok(b) => b,
        Err(e) => panic!(
            "{len} bytes are not a slice of {}-byte blocks: {e:?}",
            std::mem::size_of::<B>()
        ),
    }
}

/// Asserts at compile time that a block type has its ggml size.
#[macro_export]
macro_rules! assert_block_size {
    ($t:ty, $n:expr) => {
        const _: () = assert!(std::mem::size_of::<$t>() == $n);
    };
}
