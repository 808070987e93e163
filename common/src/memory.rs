//! What a process uses of memory and what it may use: its resident set, the
//! memory limit of its cgroup (a container's `resources.limits.memory`), and
//! the budget a node keeps under that limit.
//!
//! Read from Linux `/proc` and `/sys/fs/cgroup`; elsewhere (or when a file
//! is missing) the readings are `None` and no budget is derived.

use std::path::Path;

/// What a node's resident set may reach beyond its budget, as the budget
/// keeps it (design note 0030): a quarter of the budget (the allocator's
/// slack, a publication in progress) plus this much (code, stacks, the
/// kernel's share of the container). The default budget is the largest that
/// keeps `1.25 × budget + DEFAULT_HEADROOM` within the cgroup's limit.
pub const DEFAULT_HEADROOM: u64 = 64 << 20;

/// The process's resident set in bytes (`VmRSS` of `/proc/self/status`, in
/// KiB there, so no page-size assumption).
#[must_use]
pub fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    kib_field(&status, "VmRSS:").map(|kib| kib * 1024)
}

/// The process's peak resident set in bytes (`VmHWM`).
#[must_use]
pub fn peak_resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    kib_field(&status, "VmHWM:").map(|kib| kib * 1024)
}

fn kib_field(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

/// The memory limit of this process's cgroup in bytes: cgroup v2's
/// `memory.max` of the process's own group, else cgroup v1's
/// `memory.limit_in_bytes`; `None` when unlimited or unknown.
#[must_use]
pub fn cgroup_limit_bytes() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok();
    cgroup_limit_in(Path::new("/sys/fs/cgroup"), own.as_deref())
}

/// [`cgroup_limit_bytes`] under `root`, the process's `/proc/self/cgroup`
/// being `own` (tests give their own tree).
#[must_use]
pub fn cgroup_limit_in(root: &Path, own: Option<&str>) -> Option<u64> {
    // cgroup v2: one line "0::/path".
    let v2_group = own.and_then(|text| text.lines().find_map(|line| line.strip_prefix("0::")));
    let mut candidates = Vec::new();
    if let Some(group) = v2_group {
        candidates.push(root.join(group.trim_start_matches('/')).join("memory.max"));
    }
    candidates.push(root.join("memory.max"));
    candidates.push(root.join("memory/memory.limit_in_bytes"));
    candidates
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
        .and_then(|text| parse_limit(&text))
}

/// A cgroup limit file's value: bytes, or `None` for `max` and v1's "no
/// limit" (a page-rounded `i64::MAX`).
fn parse_limit(text: &str) -> Option<u64> {
    let value: u64 = text.trim().parse().ok()?;
    // cgroup v1 writes 9223372036854771712 for "unlimited".
    (value < (1 << 62)).then_some(value)
}

/// A node's memory budget in bytes: `mib` when given (`Some(0)`: none);
/// else the largest budget whose bound, `1.25 × budget + DEFAULT_HEADROOM`,
/// stays within `cgroup_limit`, when there is one (a 1 GiB limit: 768 MiB).
#[must_use]
pub fn budget_bytes(mib: Option<u64>, cgroup_limit: Option<u64>) -> Option<u64> {
    match mib {
        Some(0) => None,
        Some(mib) => Some(mib.saturating_mul(1024 * 1024)),
        None => cgroup_limit.map(|limit| limit.saturating_sub(DEFAULT_HEADROOM) / 5 * 4),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_come_from_the_flag_or_a_share_of_the_cgroup_limit() {
        assert_eq!(budget_bytes(Some(512), Some(4 << 30)), Some(512 << 20));
        assert_eq!(budget_bytes(Some(0), Some(4 << 30)), None);
        assert_eq!(budget_bytes(None, Some(1 << 30)), Some(768 << 20));
        assert_eq!(budget_bytes(None, Some(512 << 20)), Some((448 << 20) / 5 * 4));
        assert_eq!(
            budget_bytes(None, Some(32 << 20)),
            Some(0),
            "a limit below the headroom leaves nothing"
        );
        assert_eq!(budget_bytes(None, None), None);
    }

    #[test]
    fn cgroup_limits_are_read_from_v2_then_v1() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(cgroup_limit_in(root.path(), Some("0::/pod/c\n")), None);
        std::fs::create_dir_all(root.path().join("memory")).unwrap();
        std::fs::write(
            root.path().join("memory/memory.limit_in_bytes"),
            "9223372036854771712\n",
        )
        .unwrap();
        assert_eq!(cgroup_limit_in(root.path(), None), None, "v1 unlimited");
        std::fs::write(root.path().join("memory/memory.limit_in_bytes"), "268435456\n").unwrap();
        assert_eq!(cgroup_limit_in(root.path(), None), Some(256 << 20));
        std::fs::create_dir_all(root.path().join("pod/c")).unwrap();
        std::fs::write(root.path().join("pod/c/memory.max"), "max\n").unwrap();
        assert_eq!(
            cgroup_limit_in(root.path(), Some("0::/pod/c\n")),
            None,
            "the process's own v2 group decides: unlimited"
        );
        std::fs::write(root.path().join("pod/c/memory.max"), "1073741824\n").unwrap();
        assert_eq!(cgroup_limit_in(root.path(), Some("0::/pod/c\n")), Some(1 << 30));
    }

    #[test]
    fn this_process_has_a_resident_set() {
        let resident = resident_bytes().unwrap();
        assert!(resident > 1 << 20, "{resident}");
        assert!(peak_resident_bytes().unwrap() >= resident);
    }
}
