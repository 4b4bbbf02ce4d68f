//! Giving the heap's free pages back to the system after work that frees a lot at once.
//!
//! glibc keeps what a thread freed in its arena for reuse; after a burst of short-lived
//! allocations (an erase's fragment rewrite and index remaps, a resident load's streamed
//! batches, a vector index build's read of every vector) the process keeps that memory resident
//! though nothing uses it. At 100k rows an erase held ~350 MB more after 20 erases; a resident
//! load of 100k messages streams about 200 MB of batches that its snapshot then holds again in
//! its own form; after the vector index build, 100k messages held 498–597 MB, 408–433 MB with
//! the heap given back.

/// Return the free heap pages to the kernel. Takes the arenas' locks itself and touches no
/// memory in use; costs a walk of the heap (milliseconds), so call it after rare, large work.
pub(crate) fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap pages to the kernel; it takes the arenas'
    // locks itself and touches no memory in use.
    unsafe {
        libc::malloc_trim(0);
    }
}
