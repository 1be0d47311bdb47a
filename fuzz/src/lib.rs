//! Helpers shared by the fuzz targets of shardkeeper.

use std::future::Future;
use std::sync::OnceLock;

/// Runs `future` to completion on a single-threaded runtime that lives as
/// long as the process (one per fuzzing process, not one per input).
pub fn block_on<F: Future>(future: F) -> F::Output {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a current-thread runtime builds")
        })
        .block_on(future)
}

/// True if `part` lies inside `whole` (same memory, not just equal bytes).
pub fn within(whole: &[u8], part: &[u8]) -> bool {
    let start = whole.as_ptr() as usize;
    let end = start + whole.len();
    let p = part.as_ptr() as usize;
    p >= start && p + part.len() <= end
}
