//! The machine's available memory, for refusing a large buffer before any page of it is touched.
//!
//! On Linux (and Android) a large allocation succeeds under memory overcommit and the pages are
//! only backed when written: a KV cache zero-filled past the machine's memory ends with the OOM
//! killer taking the whole host app down, 30–50 s later. The engine (`Session::with_options`) and
//! the CPU buffers' fallible allocator therefore compare a large request with
//! [`available_bytes`] first.
//!
//! Source: `MemAvailable` of `/proc/meminfo` on Linux and Android (the kernel's estimate of what
//! can be allocated without swapping). On other systems (macOS, iOS, Windows) there is no such
//! check: `None`, and the allocator's own refusal (`try_reserve`, typed) is the only bound.

/// Requests at least this large are compared with [`available_bytes`] (smaller ones are not
/// worth a read of `/proc/meminfo`).
pub const CHECK_FROM_BYTES: u64 = 64 << 20;

/// Bytes the system can still give this process without swapping, if the OS says.
pub fn available_bytes() -> Option<u64> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        parse_meminfo(&text)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        None
    }
}

/// `MemAvailable` (kB) of a `/proc/meminfo` text, in bytes.
pub fn parse_meminfo(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line
        .trim_start_matches("MemAvailable:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kb.checked_mul(1024)
}

/// `Err(available)` when `bytes` is at least [`CHECK_FROM_BYTES`] and more than the system says
/// it has available; `Ok(())` otherwise (also when the OS does not say).
pub fn check_fits(bytes: u64) -> Result<(), u64> {
    if bytes < CHECK_FROM_BYTES {
        return Ok(());
    }
    match available_bytes() {
        Some(avail) if bytes > avail => Err(avail),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_parses_and_huge_requests_are_refused() {
        let t = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   12000000 kB\n";
        assert_eq!(parse_meminfo(t), Some(12_000_000 * 1024));
        assert_eq!(parse_meminfo("MemTotal: 1 kB\n"), None);
        assert!(check_fits(1 << 20).is_ok());
        if available_bytes().is_some() {
            assert!(check_fits(u64::MAX / 2).is_err());
        }
    }
}
