//! The plugin's memory allocator in wasm: small blocks a call freed are handed out
//! again as they are, in front of the system allocator (wasi-libc's dlmalloc).
//!
//! Why: a plugin's work is JSON: parsing a review or an object builds a tree of many
//! small strings, maps and vectors, and drops it again a few microseconds later. In
//! the SidecarSet plugin's `inject-pod`, dlmalloc's `malloc` and `free` were 27 % of
//! the plugin's own time per review (BENCHMARKS.md, issue 23). A free list per size
//! class makes each of those a few loads and stores: the review got 11–13 % cheaper.
//! talc, a kept allocator for wasm, gave 5 %: it still splits and merges blocks.
//!
//! Guarantees: blocks of up to [`MAX_SMALL`] bytes (alignment up to 16) come from one
//! list per 16-byte size class; everything else goes to the system allocator
//! untouched. At most [`MAX_CACHED`] bytes wait in the lists: a block freed beyond
//! that goes back to the system allocator, so what this holds on top of dlmalloc is
//! bounded however a plugin allocates.
//!
//! Caveats: a cached block serves only its own size class (no merging, as dlmalloc
//! would); single-threaded wasm only (a plugin built with threads gets dlmalloc). A
//! plugin with an allocator of its own turns this off: `wasmop-sdk` with
//! `default-features = false`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;

/// The largest block served from the lists. Why 256: the strings, map nodes and small
/// vectors of a parsed object are nearly all below it.
pub const MAX_SMALL: usize = 256;
/// The most bytes the lists keep; see the module docs.
pub const MAX_CACHED: usize = 1 << 20;
const STEP: usize = 16;
const CLASSES: usize = MAX_SMALL / STEP;

/// Small-block lists in front of [`System`].
pub struct SmallBlocks(UnsafeCell<Lists>);

struct Lists {
    /// The first free block of each class; each free block holds the next one's address.
    heads: [*mut u8; CLASSES],
    cached: usize,
}

// SAFETY: installed only where there are no threads (single-threaded wasm); the
// tests use their own instance from one thread.
unsafe impl Sync for SmallBlocks {}

impl SmallBlocks {
    pub const fn new() -> Self {
        SmallBlocks(UnsafeCell::new(Lists { heads: [std::ptr::null_mut(); CLASSES], cached: 0 }))
    }
}

impl Default for SmallBlocks {
    fn default() -> Self {
        Self::new()
    }
}

/// The size class of `l`, if the lists serve it.
fn class(l: &Layout) -> Option<usize> {
    (l.size() <= MAX_SMALL && l.align() <= STEP).then(|| l.size().saturating_sub(1) / STEP)
}

/// The layout every block of class `c` has in the system allocator.
fn block(c: usize) -> Layout {
    // SAFETY: a multiple of 16, at most MAX_SMALL, with a power-of-two alignment.
    unsafe { Layout::from_size_align_unchecked((c + 1) * STEP, STEP) }
}

unsafe impl GlobalAlloc for SmallBlocks {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let Some(c) = class(&l) else { return unsafe { System.alloc(l) } };
        // SAFETY: no threads, and nothing here allocates: no other borrow of the lists.
        let lists = unsafe { &mut *self.0.get() };
        let p = lists.heads[c];
        if p.is_null() {
            return unsafe { System.alloc(block(c)) };
        }
        // SAFETY: a free block of this class, holding the next free block's address.
        lists.heads[c] = unsafe { *(p as *mut *mut u8) };
        lists.cached -= block(c).size();
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        let Some(c) = class(&l) else { return unsafe { System.dealloc(p, l) } };
        let lists = unsafe { &mut *self.0.get() };
        if lists.cached + block(c).size() > MAX_CACHED {
            return unsafe { System.dealloc(p, block(c)) };
        }
        // SAFETY: the caller gives the block up; it is at least 16 bytes, 16-aligned.
        unsafe { *(p as *mut *mut u8) = lists.heads[c] };
        lists.heads[c] = p;
        lists.cached += block(c).size();
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        let new = unsafe { Layout::from_size_align_unchecked(new_size, l.align()) };
        match (class(&l), class(&new)) {
            // The block already has room: a string or vector growing within its class.
            (Some(a), Some(b)) if a == b => p,
            (None, None) => unsafe { System.realloc(p, l, new_size) },
            _ => {
                let q = unsafe { self.alloc(new) };
                if !q.is_null() {
                    unsafe {
                        std::ptr::copy_nonoverlapping(p, q, l.size().min(new_size));
                        self.dealloc(p, l);
                    }
                }
                q
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lay(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn a_freed_small_block_serves_the_next_of_its_class_only() {
        let a = SmallBlocks::new();
        unsafe {
            let p = a.alloc(lay(40, 8));
            a.dealloc(p, lay(40, 8));
            assert_ne!(a.alloc(lay(20, 8)), p, "a 20-byte block came from the 48-byte class");
            assert_eq!(a.alloc(lay(33, 4)), p, "the freed 48-byte block was not reused");
            assert_eq!((*a.0.get()).cached, 0);
        }
    }

    #[test]
    fn large_or_overaligned_blocks_bypass_the_lists() {
        let a = SmallBlocks::new();
        unsafe {
            for l in [lay(MAX_SMALL + 1, 8), lay(64, 32), lay(4096, 16)] {
                let p = a.alloc(l);
                assert_eq!(p as usize % l.align(), 0);
                a.dealloc(p, l);
                assert_eq!((*a.0.get()).cached, 0, "{l:?} was cached");
            }
        }
    }

    #[test]
    fn the_lists_keep_at_most_max_cached_bytes() {
        let a = SmallBlocks::new();
        let l = lay(MAX_SMALL, 16);
        let n = MAX_CACHED / MAX_SMALL + 100;
        unsafe {
            let blocks: Vec<_> = (0..n).map(|_| a.alloc(l)).collect();
            for p in blocks {
                a.dealloc(p, l);
            }
            assert_eq!((*a.0.get()).cached, MAX_CACHED);
        }
    }

    #[test]
    fn realloc_keeps_the_bytes_within_and_across_classes() {
        let a = SmallBlocks::new();
        unsafe {
            let p = a.alloc(lay(10, 1));
            std::ptr::copy_nonoverlapping(b"0123456789".as_ptr(), p, 10);
            assert_eq!(a.realloc(p, lay(10, 1), 16), p, "growing within its class moved the block");
            let q = a.realloc(p, lay(16, 1), 1000);
            assert_eq!(std::slice::from_raw_parts(q, 10), b"0123456789");
            let r = a.realloc(q, lay(1000, 1), 20);
            assert_eq!(std::slice::from_raw_parts(r, 10), b"0123456789");
            a.dealloc(r, lay(20, 1));
        }
    }
}
