//! Parsing, ICRC verification and building never touch the heap: a counting global allocator
//! watches them.

use softrnic_wire::frame;
use softrnic_wire::sample::{self, Ip};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: defers to the system allocator; only counts calls made on this thread.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

#[test]
fn parse_and_build_do_not_allocate() {
    // Set up outside the measured region: every opcode, both IP versions, 4 KiB payloads too.
    let mut samples = sample::every_opcode(Ip::V4);
    samples.extend(sample::every_opcode(Ip::V6));
    samples.push(sample::example(
        softrnic_wire::Opcode::RcWriteOnly,
        Ip::V4,
        1,
        4096,
    ));
    let frames: Vec<Vec<u8>> = samples.iter().map(|s| s.frame()).collect();
    let mut buf = vec![0u8; 9000];

    let n = allocations_during(|| {
        for (s, f) in samples.iter().zip(&frames) {
            let parsed = frame::parse(f).expect("valid");
            assert_eq!(parsed.payload().len(), s.payload.len());
            let len = s.repr.emit(&s.payload, &mut buf).expect("fits");
            assert_eq!(&buf[..len], &f[..]);
        }
    });
    assert_eq!(n, 0, "parse/build allocated {n} times");

    // The counter works: a Vec allocates.
    assert!(allocations_during(|| drop(std::hint::black_box(vec![1u8; 10]))) > 0);
}
