//! The in-memory view of the pending outbox records, bounded: per
//! partition, its depth (kept on disk as a counter, so opening the store
//! reads one number per partition, not every record), its lease version,
//! and a window of its oldest pending records, at most [`WINDOW`] of them,
//! with each one's creation and due time and whether the current lease
//! holder has claimed it.
//!
//! The window is a prefix of the partition's records in seq (creation)
//! order: filled from the file as claims use it up ([`Index::wants_refill`],
//! [`Index::fill`]), and a new record joins it directly only while it holds
//! every pending record. So its memory is bounded by the partitions times
//! the window, whatever the backlog, and a backlog is read once, in order,
//! as it drains. A record beyond the window is not claimable until the
//! window reaches it: with more than [`WINDOW`] records waiting for a
//! retry in one partition, newer ones wait behind them.
//!
//! It is changed only after a commit that made the change durable, so it
//! never shows a record the disk does not hold. Claims live only here: a
//! claim says "this drainer is sending it now", which means nothing after
//! a restart (a new lease makes every record claimable again), so writing
//! it to disk would cost a commit for nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use ferry_core::outbox::PartitionStats;

/// Records of a partition held in memory at most.
pub const WINDOW: usize = 8192;

#[derive(Debug, Clone, Copy)]
struct Entry {
    created_ms: i64,
    next_attempt_ms: i64,
    claimed: bool,
}

#[derive(Debug, Default)]
struct Partition {
    /// Pending records, in memory or not.
    depth: u64,
    lease: u64,
    /// The oldest pending records by seq.
    window: BTreeMap<u64, Entry>,
    /// The unclaimed ones by (due time, seq): what `claim` takes from.
    waiting: BTreeSet<(i64, u64)>,
    /// The highest seq the window has taken in (read or inserted).
    loaded_to: u64,
    /// Whether the window holds every pending record.
    complete: bool,
    /// The highest seq inserted since the store opened.
    last_inserted: u64,
    /// Creation time of the oldest pending record while the window is
    /// empty and not complete (read at open, or the last one removed).
    oldest_hint: Option<i64>,
}

/// A change a commit made, applied to the index once the commit is durable.
#[derive(Debug, Clone)]
pub enum Effect {
    Insert { partition: String, seq: u64, created_ms: i64 },
    Remove { partition: String, seq: u64 },
    Reschedule { partition: String, seq: u64, next_attempt_ms: i64 },
    Lease { partition: String, version: u64 },
}

/// Why a claim found nothing to take.
#[derive(Debug, PartialEq, Eq)]
pub struct StaleLease {
    pub current: u64,
}

/// A record read from the file into the window: (seq, created, due).
pub type Loaded = (u64, i64, i64);

#[derive(Debug, Default)]
pub struct Index {
    partitions: HashMap<String, Partition>,
}

impl Index {
    /// A partition as the file holds it at open: its depth, lease version
    /// and the creation time of its oldest record. Its window fills at the
    /// first claim.
    pub fn load_partition(&mut self, partition: &str, depth: u64, lease: u64, oldest_ms: Option<i64>) {
        let p = self.partitions.entry(partition.to_owned()).or_default();
        p.depth = depth;
        p.lease = lease;
        p.complete = depth == 0;
        p.oldest_hint = oldest_ms;
    }

    /// Where the window of `partition` needs records from the file, when
    /// it is running low and the file has more: the seq to read after, and
    /// how many it has room for.
    pub fn wants_refill(&self, partition: &str) -> Option<(u64, usize)> {
        let p = self.partitions.get(partition)?;
        (!p.complete && p.window.len() < WINDOW / 2).then(|| (p.loaded_to, WINDOW - p.window.len()))
    }

    /// Takes records read from the file after `after` into the window,
    /// oldest first; `to_end`: the read reached the partition's last
    /// record as the read saw it.
    pub fn fill(&mut self, partition: &str, after: u64, loaded: Vec<Loaded>, to_end: bool) {
        let Some(p) = self.partitions.get_mut(partition) else { return };
        if p.loaded_to != after {
            return; // another refill got here first
        }
        for (seq, created_ms, next_attempt_ms) in loaded {
            if p.window.len() >= WINDOW {
                return;
            }
            p.window.insert(seq, Entry { created_ms, next_attempt_ms, claimed: false });
            p.waiting.insert((next_attempt_ms, seq));
            p.loaded_to = seq;
        }
        // A record committed after the read began is not in it: the
        // window holds everything only if nothing newer was inserted.
        if to_end && p.last_inserted <= p.loaded_to {
            p.complete = true;
        }
        p.oldest_hint = None;
    }

    pub fn apply(&mut self, effect: Effect) {
        match effect {
            Effect::Insert { partition, seq, created_ms } => {
                let p = self.partitions.entry(partition).or_default();
                if p.depth == 0 && p.window.is_empty() {
                    p.complete = true;
                }
                p.depth += 1;
                p.last_inserted = p.last_inserted.max(seq);
                if seq <= p.loaded_to {
                    return; // a refill read it already
                }
                if p.complete && p.window.len() < WINDOW {
                    p.window.insert(seq, Entry { created_ms, next_attempt_ms: created_ms, claimed: false });
                    p.waiting.insert((created_ms, seq));
                    p.loaded_to = seq;
                } else {
                    p.complete = false;
                }
            }
            Effect::Remove { partition, seq } => {
                if let Some(p) = self.partitions.get_mut(&partition) {
                    p.depth = p.depth.saturating_sub(1);
                    if let Some(e) = p.window.remove(&seq) {
                        p.waiting.remove(&(e.next_attempt_ms, seq));
                        if p.window.is_empty() && !p.complete {
                            p.oldest_hint = Some(e.created_ms);
                        }
                    }
                }
            }
            Effect::Reschedule { partition, seq, next_attempt_ms } => {
                if let Some(p) = self.partitions.get_mut(&partition)
                    && let Some(e) = p.window.get_mut(&seq)
                {
                    p.waiting.remove(&(e.next_attempt_ms, seq));
                    e.next_attempt_ms = next_attempt_ms;
                    e.claimed = false;
                    p.waiting.insert((next_attempt_ms, seq));
                }
            }
            Effect::Lease { partition, version } => {
                // A new holder may claim everything the old one had claimed.
                let p = self.partitions.entry(partition).or_default();
                p.lease = version;
                for (seq, e) in p.window.iter_mut().filter(|(_, e)| e.claimed) {
                    e.claimed = false;
                    p.waiting.insert((e.next_attempt_ms, *seq));
                }
            }
        }
    }

    /// Marks up to `limit` due, unclaimed records of the window as claimed
    /// and returns their seqs, earliest due first.
    pub fn claim(&mut self, partition: &str, version: u64, limit: usize, now_ms: i64) -> Result<Vec<u64>, StaleLease> {
        let Some(p) = self.partitions.get_mut(partition) else {
            return if version == 0 { Ok(Vec::new()) } else { Err(StaleLease { current: 0 }) };
        };
        if p.lease != version {
            return Err(StaleLease { current: p.lease });
        }
        let mut seqs = Vec::new();
        while seqs.len() < limit {
            let Some(&(due, seq)) = p.waiting.first() else { break };
            if due > now_ms {
                break;
            }
            p.waiting.pop_first();
            if let Some(e) = p.window.get_mut(&seq) {
                e.claimed = true;
                seqs.push(seq);
            }
        }
        Ok(seqs)
    }

    /// Puts claimed records back unchanged (their values could not be read).
    pub fn unclaim(&mut self, partition: &str, seqs: &[u64]) {
        if let Some(p) = self.partitions.get_mut(partition) {
            for seq in seqs {
                if let Some(e) = p.window.get_mut(seq) {
                    e.claimed = false;
                    p.waiting.insert((e.next_attempt_ms, *seq));
                }
            }
        }
    }

    /// The partition's lease version (0: never leased).
    pub fn lease(&self, partition: &str) -> u64 {
        self.partitions.get(partition).map_or(0, |p| p.lease)
    }

    pub fn depth(&self, partition: &str) -> u64 {
        self.partitions.get(partition).map_or(0, |p| p.depth)
    }

    pub fn oldest(&self, partition: &str) -> Option<i64> {
        self.partitions.get(partition).and_then(oldest_of)
    }

    pub fn stats(&self) -> Vec<PartitionStats> {
        let mut out: Vec<PartitionStats> = self
            .partitions
            .iter()
            .filter(|(_, p)| p.depth > 0)
            .map(|(name, p)| PartitionStats { partition: name.clone(), depth: p.depth, oldest_ms: oldest_of(p) })
            .collect();
        out.sort_by(|a, b| a.partition.cmp(&b.partition));
        out
    }

    /// Records held in memory over all partitions.
    pub fn held(&self) -> usize {
        self.partitions.values().map(|p| p.window.len()).sum()
    }
}

fn oldest_of(p: &Partition) -> Option<i64> {
    if p.depth == 0 {
        return None;
    }
    p.window.values().next().map(|e| e.created_ms).or(p.oldest_hint)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insert(index: &mut Index, seq: u64, created_ms: i64) {
        index.apply(Effect::Insert { partition: "p".into(), seq, created_ms });
    }

    #[test]
    fn claims_take_due_records_once_and_a_new_lease_frees_them() {
        let mut index = Index::default();
        index.apply(Effect::Lease { partition: "p".into(), version: 1 });
        for seq in 1..=5 {
            insert(&mut index, seq, 100);
        }
        index.apply(Effect::Reschedule { partition: "p".into(), seq: 2, next_attempt_ms: 500 });
        assert_eq!(index.claim("p", 1, 10, 200), Ok(vec![1, 3, 4, 5]));
        assert_eq!(index.claim("p", 1, 10, 200), Ok(vec![]), "claimed records are not claimed twice");
        assert_eq!(index.claim("p", 1, 10, 500), Ok(vec![2]), "a rescheduled record waits for its time");
        assert_eq!(index.claim("p", 0, 10, 500), Err(StaleLease { current: 1 }));
        index.apply(Effect::Lease { partition: "p".into(), version: 2 });
        assert_eq!(index.claim("p", 2, 2, 500), Ok(vec![1, 3]));
        index.apply(Effect::Remove { partition: "p".into(), seq: 4 });
        assert_eq!(index.claim("p", 2, 10, 500), Ok(vec![5, 2]), "earliest due first");
        assert_eq!(index.depth("p"), 4);
        assert_eq!(index.oldest("p"), Some(100));
        assert_eq!(index.wants_refill("p"), None, "every record is in memory");
    }

    #[test]
    fn a_backlog_beyond_the_window_is_read_in_order_as_it_drains() {
        let mut index = Index::default();
        // At open: 20,000 records on file, none in memory.
        let depth = 20_000u64;
        index.load_partition("p", depth, 1, Some(7));
        assert_eq!((index.depth("p"), index.oldest("p"), index.held()), (depth, Some(7), 0));
        assert_eq!(index.claim("p", 1, 10, 1_000), Ok(vec![]), "nothing claimable before a refill");
        let mut next = 1;
        let mut claimed = 0;
        loop {
            if let Some((after, room)) = index.wants_refill("p") {
                let to = (after + room as u64).min(depth);
                let loaded: Vec<Loaded> = (after + 1..=to).map(|seq| (seq, seq as i64, seq as i64)).collect();
                index.fill("p", after, loaded, to == depth);
            }
            assert!(index.held() <= WINDOW, "bounded: {}", index.held());
            let seqs = index.claim("p", 1, 1_000, i64::MAX).expect("claim");
            if seqs.is_empty() {
                break;
            }
            assert_eq!(seqs.first(), Some(&next), "oldest first, none skipped");
            assert_eq!(index.oldest("p"), Some(next as i64));
            for seq in &seqs {
                index.apply(Effect::Remove { partition: "p".into(), seq: *seq });
            }
            next += seqs.len() as u64;
            claimed += seqs.len() as u64;
        }
        assert_eq!((claimed, index.depth("p"), index.held()), (depth, 0, 0));
        insert(&mut index, depth + 1, 50);
        assert_eq!(index.claim("p", 1, 10, 100), Ok(vec![depth + 1]));
    }

    #[test]
    fn a_record_committed_during_a_refill_is_not_lost_or_doubled() {
        let mut index = Index::default();
        index.load_partition("p", 2, 1, Some(1));
        let (after, _) = index.wants_refill("p").expect("refill");
        // The read saw records 1 and 2; record 3 commits before the fill
        // lands, record 4 after it.
        insert(&mut index, 3, 3);
        index.fill("p", after, vec![(1, 1, 1), (2, 2, 2)], true);
        assert_eq!(index.wants_refill("p").map(|r| r.0), Some(2), "3 is not in the window yet: read again");
        index.fill("p", 2, vec![(3, 3, 3)], true);
        insert(&mut index, 4, 4);
        assert_eq!(index.claim("p", 1, 10, 10), Ok(vec![1, 2, 3, 4]));
        // A refill whose read already saw a record that is then inserted.
        let mut index = Index::default();
        index.load_partition("q", 1, 1, Some(1));
        index.fill("q", 0, vec![(1, 1, 1), (2, 2, 2)], true);
        index.apply(Effect::Insert { partition: "q".into(), seq: 2, created_ms: 2 });
        assert_eq!(index.claim("q", 1, 10, 10), Ok(vec![1, 2]));
        assert_eq!(index.claim("q", 1, 10, 10), Ok(vec![]), "not claimable twice");
    }
}
