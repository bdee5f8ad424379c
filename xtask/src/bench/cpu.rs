//! CPU time of processes, from `/proc/<pid>/stat` (Linux), in seconds: what `bench cluster`
//! charges to ironbus's nodes, to PostgreSQL and to the load generator.

use std::{fs, process::Command};

/// The fields of `/proc/<pid>/stat` that count CPU time, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    parent: u32,
    /// `utime + stime`: the process's own.
    own: u64,
    /// `cutime + cstime`: its children's, once it has waited for them.
    reaped: u64,
}

/// Reads clock ticks as seconds (`getconf CLK_TCK`, 100 where that fails).
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    ticks_per_second: u64,
}

impl Clock {
    pub(super) fn new() -> Clock {
        let output = Command::new("getconf").arg("CLK_TCK").output();
        let ticks = output.ok().and_then(|out| String::from_utf8(out.stdout).ok());
        let ticks_per_second = ticks.and_then(|text| text.trim().parse().ok()).unwrap_or(100);
        Clock { ticks_per_second }
    }

    fn seconds(self, ticks: u64) -> f64 {
        ticks as f64 / self.ticks_per_second.max(1) as f64
    }

    /// The CPU time processes `pids` have used (those that cannot be read count 0).
    pub(super) fn processes(self, pids: &[u32]) -> f64 {
        let ticks = pids.iter().filter_map(|&pid| stat(pid)).map(|stat| stat.own).sum();
        self.seconds(ticks)
    }

    /// The CPU time of process `root` and of its children, alive or reaped: its own, what it
    /// reaped, and what its live children used. For PostgreSQL's postmaster, whose backends and
    /// background workers are all its children, a difference between two readings is what
    /// the server used in between, connections opened or closed meanwhile included.
    pub(super) fn tree(self, root: u32) -> f64 {
        let Some(root_stat) = stat(root) else { return 0.0 };
        let children: u64 = live_pids()
            .into_iter()
            .filter_map(stat)
            .filter(|stat| stat.parent == root)
            .map(|stat| stat.own + stat.reaped)
            .sum();
        self.seconds(root_stat.own + root_stat.reaped + children)
    }

    /// The CPU time of the children this process has waited for.
    pub(super) fn reaped_children(self) -> f64 {
        let stat = fs::read_to_string("/proc/self/stat").ok().and_then(|text| parse(&text));
        self.seconds(stat.map_or(0, |stat| stat.reaped))
    }
}

fn stat(pid: u32) -> Option<Stat> {
    parse(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Parses a `/proc/<pid>/stat` line: after the command name in parentheses (which may hold
/// spaces and parentheses itself), field 4 is the parent, 14 to 17 are utime, stime, cutime
/// and cstime.
fn parse(line: &str) -> Option<Stat> {
    let (_, after) = line.rsplit_once(')')?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `fields[0]` is field 3 (the state).
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    Some(Stat {
        parent: u32::try_from(field(4)?).ok()?,
        own: field(14)? + field(15)?,
        reaped: field(16)? + field(17)?,
    })
}

/// Every process id in `/proc`.
fn live_pids() -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else { return Vec::new() };
    entries.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_parent_own_and_reaped_ticks() {
        let line = "4242 (post gres: (x)) S 4200 4242 4242 0 -1 4194560 100 0 0 0 \
                    70 30 5 6 20 0 1 0 123 456 789";
        let stat = parse(line).unwrap();
        assert_eq!(stat, Stat { parent: 4200, own: 100, reaped: 11 });
        assert_eq!(parse("4242 (short) S 1"), None);
    }

    #[test]
    fn this_process_can_be_read() {
        let clock = Clock::new();
        let me = std::process::id();
        assert!(stat(me).is_some());
        // Read one after the other: CPU time only grows, and the tree holds the process.
        let own = clock.processes(&[me]);
        assert!(own >= 0.0);
        assert!(clock.tree(me) >= own);
        assert!(clock.reaped_children() >= 0.0);
    }
}
