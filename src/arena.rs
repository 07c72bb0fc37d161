//! The binary's global allocator: a bump arena in `.bss` for the first allocations, then the
//! system allocator.
//!
//! Start-up (clap's command tree, the environment snapshot, tracing, the runtime) makes a few
//! thousand small allocations and frees most of them at once. musl's allocator (the image's
//! build) maps a page per size class and unmaps it as soon as it is empty: 50-70 `mmap`/`munmap`
//! calls and about a quarter of rankvisor's start-up instructions. The arena hands out memory by
//! moving one offset, takes back the most recent block on free (the common pattern of
//! temporaries and growing vectors), grows the most recent block in place, and never returns
//! pages. When it is full every further allocation goes to the system allocator, so it costs at
//! most its size in memory ([`ARENA_BYTES`]); blocks larger than [`ARENA_MAX_BLOCK`] go there
//! directly.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The arena's size: start-up up to the first child's start takes about 112 KiB (the lean build
/// launching `/bin/true`); every restart about 2 KiB more (blocks freed out of order are not
/// reused), so the arena is full after a few restarts and the RSS stays flat from there. Only
/// the pages it touches count in the RSS.
pub const ARENA_BYTES: usize = 128 * 1024;
/// Larger blocks go to the system allocator.
pub const ARENA_MAX_BLOCK: usize = 16 * 1024;

#[repr(C, align(4096))]
struct Pages<const N: usize>([u8; N]);

/// A bump arena of `N` bytes in front of the system allocator, for blocks up to `MAX` bytes.
/// All zero when new, so a static one lives in `.bss` (not in the binary).
pub struct Arena<const N: usize, const MAX: usize> {
    mem: UnsafeCell<Pages<N>>,
    /// Offset of the first free byte; every live arena block lies below it.
    next: AtomicUsize,
}

// SAFETY: the bytes are handed out by compare-and-swap on `next`, so no two live blocks overlap;
// the arena itself never reads or writes them.
unsafe impl<const N: usize, const MAX: usize> Sync for Arena<N, MAX> {}

impl<const N: usize, const MAX: usize> Arena<N, MAX> {
    /// An empty arena (all zeroes: it lives in `.bss` as a static).
    pub const fn new() -> Self {
        Self { mem: UnsafeCell::new(Pages([0; N])), next: AtomicUsize::new(0) }
    }

    fn base(&self) -> usize {
        self.mem.get() as usize
    }

    /// Whether `ptr` is one of the arena's blocks.
    pub fn owns(&self, ptr: *const u8) -> bool {
        let p = ptr as usize;
        p >= self.base() && p < self.base() + N
    }

    /// Bytes handed out so far (the high-water mark, less what was taken back).
    #[cfg(test)]
    fn used(&self) -> usize {
        self.next.load(Ordering::Acquire)
    }

    /// A block for `layout` from the arena, or None when it does not fit.
    fn carve(&self, layout: Layout) -> Option<*mut u8> {
        if layout.size() > MAX {
            return None;
        }
        let base = self.base();
        let mut cur = self.next.load(Ordering::Acquire);
        loop {
            // Align the address, not the offset: any power-of-two alignment works.
            let start = (base + cur).checked_next_multiple_of(layout.align())? - base;
            let end = start.checked_add(layout.size())?;
            if end > N {
                return None;
            }
            match self.next.compare_exchange_weak(cur, end, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some((base + start) as *mut u8),
                Err(now) => cur = now,
            }
        }
    }

    /// Move the end of the block at `ptr` from `old_end` to `new_end` bytes past its start, if it
    /// is the most recent block (nothing lies after it).
    fn resize_last(&self, ptr: *mut u8, old_size: usize, new_size: usize) -> bool {
        let off = ptr as usize - self.base();
        let Some(new_end) = off.checked_add(new_size).filter(|&e| e <= N) else {
            return false;
        };
        self.next.compare_exchange(off + old_size, new_end, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }
}

// SAFETY: blocks from the arena are aligned as asked (the address is rounded up to the layout's
// alignment), within the arena and disjoint (see `Sync`); everything else is the system
// allocator's, and each pointer goes back to the allocator it came from (`owns`).
unsafe impl<const N: usize, const MAX: usize> GlobalAlloc for Arena<N, MAX> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.carve(layout) {
            Some(p) => p,
            // SAFETY: the caller's layout contract, passed on.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if self.owns(ptr) {
            // The most recent block is taken back; any other stays used (the arena never reuses
            // space below its offset).
            self.resize_last(ptr, layout.size(), 0);
        } else {
            // SAFETY: `ptr` came from System.alloc with this layout (the arena did not make it).
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !self.owns(ptr) {
            // SAFETY: the caller's contract, for a block of the system allocator.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        if new_size <= layout.size() {
            // Shrinking: give the tail back if nothing follows; the block stays where it is.
            self.resize_last(ptr, layout.size(), new_size);
            return ptr;
        }
        if new_size <= MAX && self.resize_last(ptr, layout.size(), new_size) {
            return ptr;
        }
        // SAFETY: new_size is non-zero and, rounded up to the alignment, does not overflow
        // isize (the caller's contract for realloc).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: as for alloc.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are live, disjoint and at least layout.size() long.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size());
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn blocks_are_aligned_disjoint_and_inside() {
        let a = Arena::<4096, 1024>::new();
        let mut blocks = Vec::new();
        for (size, align) in [(1, 1), (24, 8), (3, 1), (64, 64), (16, 16), (100, 4)] {
            // SAFETY: non-zero sizes.
            let p = unsafe { a.alloc(layout(size, align)) };
            assert!(a.owns(p), "{size}/{align} came from the arena");
            assert_eq!(p as usize % align, 0, "{size}/{align} aligned");
            blocks.push((p as usize, size));
        }
        blocks.sort();
        for w in blocks.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "disjoint: {blocks:?}");
        }
    }

    #[test]
    fn the_most_recent_block_is_taken_back_and_grows_in_place() {
        let a = Arena::<4096, 4096>::new();
        let l = layout(32, 8);
        // SAFETY: the layouts are valid and each pointer is freed with the layout it has.
        unsafe {
            let p = a.alloc(l);
            let q = a.alloc(l);
            assert_eq!(a.used(), 64);
            // q is the most recent: growing it keeps its address, freeing it gives the bytes back.
            let q2 = a.realloc(q, l, 96);
            assert_eq!(q2, q);
            assert_eq!(a.used(), 128);
            a.dealloc(q2, layout(96, 8));
            assert_eq!(a.used(), 32);
            // p is the most recent again.
            a.dealloc(p, l);
            assert_eq!(a.used(), 0);
        }
    }

    #[test]
    fn an_older_block_moves_when_it_grows_and_keeps_its_bytes() {
        let a = Arena::<4096, 4096>::new();
        // SAFETY: as above.
        unsafe {
            let p = a.alloc(layout(8, 1));
            std::ptr::copy_nonoverlapping(b"abcdefgh".as_ptr(), p, 8);
            let _q = a.alloc(layout(8, 1));
            let p2 = a.realloc(p, layout(8, 1), 16);
            assert_ne!(p2, p, "p is not the most recent block");
            assert_eq!(std::slice::from_raw_parts(p2, 8), b"abcdefgh");
            // Freeing a block that is not the most recent keeps the offset.
            let used = a.used();
            a.dealloc(_q, layout(8, 1));
            assert_eq!(a.used(), used);
        }
    }

    #[test]
    fn a_full_arena_and_large_blocks_fall_back_to_the_system_allocator() {
        let a = Arena::<4096, 1024>::new();
        // SAFETY: as above.
        unsafe {
            let big = a.alloc(layout(2048, 8));
            assert!(!big.is_null() && !a.owns(big), "larger than max_block: the system's");
            a.dealloc(big, layout(2048, 8));
            let blocks: Vec<_> = (0..5).map(|_| a.alloc(layout(1000, 8))).collect();
            assert!(blocks[..4].iter().all(|&p| a.owns(p)));
            assert!(!a.owns(blocks[4]), "the arena is full: the system's");
            // An arena block grown past max_block moves to the system allocator with its bytes.
            std::ptr::write_bytes(blocks[3], 7, 1000);
            let moved = a.realloc(blocks[3], layout(1000, 8), 3000);
            assert!(!a.owns(moved));
            assert!(std::slice::from_raw_parts(moved, 1000).iter().all(|&b| b == 7));
            a.dealloc(moved, layout(3000, 8));
            a.dealloc(blocks[4], layout(1000, 8));
        }
    }

    #[test]
    fn threads_get_disjoint_blocks() {
        static A: Arena<{ 64 * 1024 }, 1024> = Arena::new();
        let handles: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    (0..200)
                        .map(|_| {
                            // SAFETY: a valid layout; the block is written, never freed.
                            let p = unsafe { A.alloc(layout(48, 16)) };
                            unsafe { std::ptr::write_bytes(p, t as u8, 48) };
                            p as usize
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<usize> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 800, "no block handed out twice");
        assert!(all.windows(2).all(|w| w[1] - w[0] >= 48), "disjoint");
    }
}
