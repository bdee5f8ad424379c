#!/usr/bin/env python3
"""Where a message's cost goes: a profile's functions summed into the groups of BENCHMARKS.md
("Where a durable message's cost goes").

  bench/cost-groups.py cachegrind FILE MESSAGES [-v]   # FILE: cg_diff of two cachegrind runs
  bench/cost-groups.py perf FILE [-v]                  # FILE: perf report --stdio --no-children
                                                       #       --sort dso,sym

With `cachegrind`, FILE is what `cg_diff` makes of a run with 2 x MESSAGES messages and one with
MESSAGES (so start-up and shutdown cancel); counts are printed per message. With `perf`, the
self-time percentages of the report are summed (kernel symbols in groups of their own). A
function goes to the first group whose pattern its name matches; -v lists each group's largest.
"""
import collections
import re
import sys

# (group, pattern); the first match wins, so the narrower patterns come first.
USER_GROUPS = [
    ("RocksDB: flush and compaction (background threads)",
     r"FlushJob|Compaction|BlockBasedTableBuilder|BlockBuilder|TableBuilder|BuildTable|"
     r"FilterBitsBuilder|XXH3|XXH64|Bloom|Ribbon|MergingIterator|IndexBuilder|RangeDelAggregator|"
     r"FragmentedRangeTombstone|TruncatedRangeDel|WritableFileWriter|LZ4|lz4|VersionSet|"
     r"VersionBuilder|SstFile|TableCache|BlockFetcher|PropertyBlock|CompressBlock|BlockHandle"),
    ("RocksDB: write path, WAL and memtable",
     r"rocksdb|crc32c|MemTable|SkipList|WriteBatch|WriteThread|DBImpl|log::Writer|Arena"),
    ("allocation (mimalloc)",
     r"\b_?mi_|mimalloc|malloc|\bfree\b|__rust_alloc|__rust_dealloc|__rust_realloc|"
     r"alloc::alloc|RawVec.*grow|finish_grow"),
    ("memcpy, memmove, memset", r"memcpy|memmove|memset|memcmp|bcmp"),
    ("metrics", r"metrics|quanta|Stopwatch|prometheus"),
    ("tokio: scheduler, channels, wake-ups (user space)",
     r"tokio|futures_util|futures_core|parking_lot|std::sync|std::thread|Notify|oneshot|mpsc|"
     r"waker|RawWaker|syscall|pthread|__lll|futex|epoll"),
    ("AMQP performatives: serde_amqp, fe2o3 types", r"serde_amqp|fe2o3|serde::"),
    ("AMQP framing and message codec (ironbus)", r"ironbus_transport_amqp::(codec|frame|guard)"),
    ("AMQP connection: links, deliveries, dispositions", r"ironbus_transport_amqp"),
    ("partition cycle and state", r"ironbus_core::partition"),
    ("broker, receivers, store seam", r"ironbus_core|ironbus_store_rocksdb"),
    ("std collections, hashing, formatting, bytes",
     r"hashbrown|btree|BTree|core::hash|xxhash|core::fmt|alloc::fmt|alloc::string|alloc::vec|"
     r"core::str|bytes::"),
    ("libc and the rest", r"."),
]
KERNEL_GROUPS = [
    ("kernel: TCP over loopback (send, receive, copies)",
     r"tcp|sock|skb|ip_|__dev|net_|napi|loopback|inet|sendto|recvfrom|sendmsg|recvmsg|"
     r"copy_to_iter|copy_from_iter|copy_user"),
    ("kernel: futex, scheduler, epoll (wake-ups)",
     r"futex|schedule|switch|enqueue|dequeue|wake|select_task|epoll|ep_|update_curr|pick_next|"
     r"psi_|sched|finish_task|hrtimer|timerqueue|ttwu|idle|load_balance"),
    ("kernel: file system, fdatasync, block I/O",
     r"ext4|jbd2|blk|bio|nvme|virtio|fsync|sync|writeback|filemap|iomap|xfs|folio|submit"),
    ("kernel: other (system-call entry, memory, ...)", r"."),
]


def group_of(name, kernel):
    for group, pattern in KERNEL_GROUPS if kernel else USER_GROUPS:
        if re.search(pattern, name):
            return group
    return "libc and the rest"


def cachegrind(path):
    costs = collections.Counter()
    fn = None
    for line in open(path, errors="replace"):
        if line.startswith("fn="):
            fn = line[3:].strip()
        elif fn is not None and line[:1].isdigit():
            parts = line.split()
            if len(parts) >= 2:
                costs[fn] += int(parts[1])
    return costs


def perf(path):
    costs = collections.Counter()
    for line in open(path, errors="replace"):
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[([k.])\]\s+(.*)", line)
        if m:
            costs[("k" if m.group(3) == "k" else "u", m.group(4).strip())] += float(m.group(1))
    return costs


def main():
    args = [a for a in sys.argv[1:] if a != "-v"]
    verbose = "-v" in sys.argv
    groups = collections.Counter()
    members = collections.defaultdict(collections.Counter)
    if args[0] == "cachegrind":
        per = float(args[2])
        for fn, cost in cachegrind(args[1]).items():
            group = group_of(fn, False)
            groups[group] += cost / per
            members[group][fn] += cost / per
        unit, total = "instructions per message", sum(groups.values())
        print(f"{total:10,.0f}  {unit}")
        fmt = lambda v: f"{v:10,.0f}  {100 * v / total:5.1f} %"
    else:
        for (kind, sym), pct in perf(args[1]).items():
            group = group_of(sym, kind == "k")
            groups[group] += pct
            members[group][sym] += pct
        total = sum(groups.values())
        print(f"{total:6.1f} %  of the samples")
        fmt = lambda v: f"{v:6.1f} %"
    for group, value in groups.most_common():
        print(f"{fmt(value)}  {group}")
    if verbose:
        for group, value in groups.most_common():
            print(f"\n== {group}")
            for name, cost in members[group].most_common(12):
                print(f"{fmt(cost)}  {name[:150]}")


if __name__ == "__main__":
    main()
