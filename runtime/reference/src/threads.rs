//! The size of the process-wide thread pool that splits the matrix products (feature
//! `parallel`: rayon's global pool).

/// Make the pool run `n` threads. The pool is built once per process: by the first call here,
/// or with one thread per core by the first parallel product. Asking for the size it already
/// has is fine; another size afterwards is an error naming the size in use (the pool cannot be
/// resized). Without the `parallel` feature every product runs on the calling thread: `n = 1`
/// is fine, another count an error.
pub fn set_pool_threads(n: usize) -> Result<(), String> {
    #[cfg(feature = "parallel")]
    {
        if rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .is_ok()
        {
            return Ok(());
        }
        let now = rayon::current_num_threads();
        if now == n {
            Ok(())
        } else {
            Err(format!(
                "the CPU thread pool already runs {now} threads (it is made once per process, by \
                 the first model that runs on the CPU): ask for {now} or set the count in the \
                 first model loaded"
            ))
        }
    }
    #[cfg(not(feature = "parallel"))]
    {
        if n == 1 {
            Ok(())
        } else {
            Err(format!(
                "this build runs on the calling thread only (no `parallel` feature): {n} threads"
            ))
        }
    }
}

/// Threads of the pool (1 without the `parallel` feature).
pub fn pool_threads() -> usize {
    #[cfg(feature = "parallel")]
    {
        rayon::current_num_threads()
    }
    #[cfg(not(feature = "parallel"))]
    {
        1
    }
}
