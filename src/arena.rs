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
//! directly. `bash scripts/miri-arena.sh` runs the tests below under Miri (strict provenance).

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
        self.mem.get().addr()
    }

    /// Whether `ptr` is one of the arena's blocks.
    pub fn owns(&self, ptr: *const u8) -> bool {
        let p = ptr.addr();
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
                // From the arena's own pointer, not from an integer: the block keeps the arena's
                // provenance (scripts/miri-arena.sh checks it under Miri).
                Ok(_) => return Some(self.mem.get().cast::<u8>().wrapping_add(start)),
                Err(now) => cur = now,
            }
        }
    }

    /// Move the end of the block at `ptr` from `old_end` to `new_end` bytes past its start, if it
    /// is the most recent block (nothing lies after it).
    fn resize_last(&self, ptr: *mut u8, old_size: usize, new_size: usize) -> bool {
        let off = ptr.addr() - self.base();
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

    /// max_block of the edge tests' arenas.
    const ARENA_MAX: usize = 1024;

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
    fn the_largest_block_is_the_arenas_and_one_byte_more_is_the_systems() {
        let a = Arena::<4096, 1024>::new();
        // SAFETY: as above.
        unsafe {
            let largest = a.alloc(layout(ARENA_MAX, 1));
            assert!(a.owns(largest), "a block of exactly max_block comes from the arena");
            assert_eq!(a.used(), ARENA_MAX);
            let over = a.alloc(layout(ARENA_MAX + 1, 1));
            assert!(!over.is_null() && !a.owns(over), "max_block + 1 goes to the system allocator");
            assert_eq!(a.used(), ARENA_MAX, "a system block takes nothing from the arena");
            a.dealloc(over, layout(ARENA_MAX + 1, 1));
            // Growing the arena's block to exactly max_block stays in place; one byte more moves.
            a.dealloc(largest, layout(ARENA_MAX, 1));
            let p = a.alloc(layout(8, 1));
            let grown = a.realloc(p, layout(8, 1), ARENA_MAX);
            assert_eq!(grown, p, "grown to max_block in place");
            let moved = a.realloc(grown, layout(ARENA_MAX, 1), ARENA_MAX + 1);
            assert!(!a.owns(moved), "grown past max_block: moved to the system allocator");
            assert_eq!(a.used(), 0, "the moved block was the most recent: its bytes came back");
            a.dealloc(moved, layout(ARENA_MAX + 1, 1));
        }
    }

    #[test]
    fn a_block_that_ends_at_the_arenas_end_fits_and_then_the_system_takes_over() {
        let a = Arena::<4096, 4096>::new();
        // SAFETY: as above; every block is freed with its own layout.
        unsafe {
            let head = a.alloc(layout(4000, 8));
            // 96 bytes remain: a block of exactly that ends at the arena's last byte.
            let tail = a.alloc(layout(96, 8));
            assert!(a.owns(tail) && a.owns(tail.add(95)), "the last 96 bytes are the arena's");
            assert_eq!(a.used(), 4096);
            // Exhausted: every block from here is the system's, and is usable and freed there.
            let spilled: Vec<_> = (0..64).map(|i| (a.alloc(layout(8 + i, 8)), 8 + i)).collect();
            for &(p, size) in &spilled {
                assert!(!p.is_null() && !a.owns(p), "a full arena falls back to the system allocator");
                std::ptr::write_bytes(p, 0xa5, size);
            }
            assert_eq!(a.used(), 4096, "the system's blocks leave the offset alone");
            for (p, size) in spilled {
                a.dealloc(p, layout(size, 8));
            }
            // Freeing the most recent arena block makes room again.
            a.dealloc(tail, layout(96, 8));
            assert_eq!(a.used(), 4000);
            let again = a.alloc(layout(64, 8));
            assert!(a.owns(again), "the freed tail is handed out again");
            a.dealloc(again, layout(64, 8));
            a.dealloc(head, layout(4000, 8));
            assert_eq!(a.used(), 0);
        }
    }

    #[test]
    fn an_alignment_that_would_pass_the_end_falls_back_to_the_system_allocator() {
        let a = Arena::<4096, 4096>::new();
        // SAFETY: as above.
        unsafe {
            let head = a.alloc(layout(4000, 1));
            // 96 bytes remain, but aligning to 256 puts the block's start at 4096: it cannot fit.
            let p = a.alloc(layout(8, 256));
            assert!(!a.owns(p), "no arena block may start at or past its end");
            assert_eq!(p as usize % 256, 0);
            assert_eq!(a.used(), 4000);
            a.dealloc(p, layout(8, 256));
            a.dealloc(head, layout(4000, 1));
        }
    }

    #[test]
    fn realloc_across_the_arenas_end_moves_the_block_with_its_bytes() {
        let a = Arena::<4096, 4096>::new();
        // SAFETY: as above.
        unsafe {
            let head = a.alloc(layout(4000, 8));
            let last = a.alloc(layout(64, 8));
            for i in 0..64 {
                *last.add(i) = i as u8;
            }
            // Growing the most recent block to exactly the arena's end keeps it in place.
            let at_end = a.realloc(last, layout(64, 8), 96);
            assert_eq!(at_end, last);
            assert_eq!(a.used(), 4096);
            // One byte past the end: it moves to the system allocator, keeps its bytes, and the
            // arena takes its old bytes back (it was the most recent block).
            let across = a.realloc(at_end, layout(96, 8), 97);
            assert!(!across.is_null() && !a.owns(across), "moved out of the arena");
            assert!((0..64).all(|i| *across.add(i) == i as u8), "the bytes moved with it");
            assert_eq!(a.used(), 4000);
            // Shrinking it again leaves it with the system allocator (realloc of a system block).
            let shrunk = a.realloc(across, layout(97, 8), 32);
            assert!(!a.owns(shrunk));
            assert!((0..32).all(|i| *shrunk.add(i) == i as u8));
            a.dealloc(shrunk, layout(32, 8));
            // An older block grown across the end moves too, and its bytes stay used in the arena.
            let older = a.alloc(layout(16, 8));
            let newest = a.alloc(layout(16, 8));
            std::ptr::write_bytes(older, 3, 16);
            let older_moved = a.realloc(older, layout(16, 8), 200);
            assert!(!a.owns(older_moved), "no room left at the arena's end for 200 bytes");
            assert!(std::slice::from_raw_parts(older_moved, 16).iter().all(|&b| b == 3));
            assert_eq!(a.used(), 4032, "the older block's old bytes are not reused");
            a.dealloc(older_moved, layout(200, 8));
            a.dealloc(newest, layout(16, 8));
            a.dealloc(head, layout(4000, 8));
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
