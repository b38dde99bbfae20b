//! Receive buffers lent out as `Bytes` and recycled when the last slice of
//! them is dropped.
//!
//! A GRO read brings up to 64 KiB of one flow's data in one buffer. Copying
//! the payload out of it into a fresh allocation costs a pass over every byte
//! and, whenever the allocator hands out pages it had returned to the
//! kernel, a page fault and a zeroing per 4 KiB, a large share of a
//! download's time. Instead the buffer itself moves
//! into the core as a `Bytes` (the core keeps slices of it in its receive
//! queues, and charges them, see `mptun_proto::RECV_ZERO_COPY_MIN`), the
//! batch slot takes a recycled buffer in its place, and the lent buffer
//! comes back here when the last slice of it is dropped (the application
//! read the last byte of it, or the queue holding it was pruned or closed),
//! on whichever thread that happens. The pool keeps at most [`POOL_MAX`]
//! buffers; beyond that a returning buffer is freed, so an idle stack holds
//! at most that much.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use bytes::Bytes;

/// Buffers a pool keeps for reuse: 64 super-packet buffers (about 4 MiB),
/// the receive window of one fast flow.
pub const POOL_MAX: usize = 64;

/// A free list of receive buffers, shared with the `Bytes` lent from it.
#[derive(Clone, Default)]
pub(crate) struct BufferPool {
    free: Arc<Mutex<Vec<Vec<u8>>>>,
}

/// A lent buffer: the owner behind a `Bytes`, returned to its pool on drop.
/// The pool is held weakly, so buffers still lent when their batch goes away
/// are simply freed.
struct Lent {
    buf: Vec<u8>,
    pool: Weak<Mutex<Vec<Vec<u8>>>>,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            let mut free = pool.lock().unwrap_or_else(PoisonError::into_inner);
            if free.len() < POOL_MAX {
                free.push(std::mem::take(&mut self.buf));
            }
        }
    }
}

impl BufferPool {
    /// A buffer of at least `len` bytes (contents unspecified): a recycled
    /// one if any is free, else a new one.
    pub fn get(&self, len: usize) -> Vec<u8> {
        let recycled = self.free.lock().unwrap_or_else(PoisonError::into_inner).pop();
        match recycled {
            Some(mut b) => {
                if b.len() < len {
                    b.resize(len, 0);
                }
                b
            }
            None => vec![0; len],
        }
    }

    /// `buf[range]` as `Bytes` without a copy; `buf` comes back to this
    /// pool when the last slice of it is dropped.
    pub fn lend(&self, buf: Vec<u8>, range: std::ops::Range<usize>) -> Bytes {
        Bytes::from_owner(Lent { buf, pool: Arc::downgrade(&self.free) }).slice(range)
    }

    /// Buffers waiting for reuse.
    #[cfg(test)]
    pub fn free_len(&self) -> usize {
        self.free.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lent_buffer_comes_back_when_its_last_slice_drops() {
        let pool = BufferPool::default();
        let mut buf = pool.get(100);
        buf[10..20].copy_from_slice(b"0123456789");
        let ptr = buf.as_ptr();
        let b = pool.lend(buf, 10..20);
        assert_eq!(&b[..], b"0123456789");
        let half = b.slice(5..);
        drop(b);
        assert_eq!(pool.free_len(), 0, "a slice still holds it");
        drop(half);
        assert_eq!(pool.free_len(), 1);
        let again = pool.get(50);
        assert_eq!(again.as_ptr(), ptr, "the same allocation, not a new one");
        assert!(again.len() >= 100);
    }

    #[test]
    fn the_pool_keeps_at_most_pool_max_and_outlives_nothing() {
        let pool = BufferPool::default();
        let lent: Vec<Bytes> = (0..POOL_MAX + 10).map(|_| pool.lend(pool.get(8), 0..8)).collect();
        drop(lent);
        assert_eq!(pool.free_len(), POOL_MAX);
        // Buffers lent when the pool goes away are freed, not kept.
        let b = pool.lend(pool.get(8), 0..8);
        drop(pool);
        drop(b);
    }
}
