//! CPU pinning with `sched_setaffinity`, and the list of CPUs this process may use (so a scenario
//! that pins to a CPU that does not exist is rejected before anything runs).

/// CPUs in this process's affinity mask.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: an all-zero cpu_set_t is the empty set; sched_getaffinity only writes into it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; the size matches the set we pass.
    let ok =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) }
            == 0;
    if !ok {
        return (0..std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1))
            .collect();
    }
    // SAFETY: CPU_ISSET reads a bit of a valid set for an index below CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    pin_current_thread_to(&[cpu])
}

/// Lets the calling thread run on `cpus` only.
pub fn pin_current_thread_to(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: as above; CPU_SET writes one bit of our own set (below CPU_SETSIZE: the CPUs
    // come from `allowed_cpus` or a checked scenario).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; the size matches the set.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_has_cpus_and_a_thread_can_pin_to_each() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty());
        let first = cpus[0];
        std::thread::spawn(move || pin_current_thread(first).unwrap())
            .join()
            .unwrap();
    }
}
