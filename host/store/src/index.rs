//! The in-memory view of the pending outbox records: per partition, each
//! record's creation and due time and whether the current lease holder has
//! claimed it, plus the partition's lease version.
//!
//! It is built from the file at open and changed only after a commit that
//! made the change durable, so it never shows a record the disk does not
//! hold. Claims live only here: a claim says "this drainer is sending it
//! now", which means nothing after a restart (a new lease makes every record
//! claimable again), so writing it to disk would cost a commit for nothing.
//! That makes `claim`, `depth`, `oldest` and `stats` cheap: no scan of the
//! file, no decoding of records that are not due.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use ferry_core::outbox::PartitionStats;

#[derive(Debug, Clone, Copy)]
struct Entry {
    created_ms: i64,
    next_attempt_ms: i64,
    claimed: bool,
}

#[derive(Debug, Default)]
struct Partition {
    /// Every pending record by seq (creation order).
    entries: BTreeMap<u64, Entry>,
    /// The unclaimed ones by (due time, seq): what `claim` takes from.
    waiting: BTreeSet<(i64, u64)>,
    lease: u64,
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

#[derive(Debug, Default)]
pub struct Index {
    partitions: HashMap<String, Partition>,
}

impl Index {
    /// Adds a record read from the file at open.
    pub fn load_record(&mut self, partition: &str, seq: u64, created_ms: i64, next_attempt_ms: i64) {
        let p = self.partitions.entry(partition.to_owned()).or_default();
        p.entries.insert(seq, Entry { created_ms, next_attempt_ms, claimed: false });
        p.waiting.insert((next_attempt_ms, seq));
    }

    /// Sets a lease version read from the file at open.
    pub fn load_lease(&mut self, partition: &str, version: u64) {
        self.partitions.entry(partition.to_owned()).or_default().lease = version;
    }

    pub fn apply(&mut self, effect: Effect) {
        match effect {
            Effect::Insert { partition, seq, created_ms } => self.load_record(&partition, seq, created_ms, created_ms),
            Effect::Remove { partition, seq } => {
                if let Some(p) = self.partitions.get_mut(&partition)
                    && let Some(e) = p.entries.remove(&seq)
                {
                    p.waiting.remove(&(e.next_attempt_ms, seq));
                }
            }
            Effect::Reschedule { partition, seq, next_attempt_ms } => {
                if let Some(p) = self.partitions.get_mut(&partition)
                    && let Some(e) = p.entries.get_mut(&seq)
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
                for (seq, e) in p.entries.iter_mut().filter(|(_, e)| e.claimed) {
                    e.claimed = false;
                    p.waiting.insert((e.next_attempt_ms, *seq));
                }
            }
        }
    }

    /// Marks up to `limit` due, unclaimed records as claimed and returns
    /// their seqs, earliest due first.
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
            if let Some(e) = p.entries.get_mut(&seq) {
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
                if let Some(e) = p.entries.get_mut(seq) {
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
        self.partitions.get(partition).map_or(0, |p| p.entries.len() as u64)
    }

    pub fn oldest(&self, partition: &str) -> Option<i64> {
        self.partitions.get(partition).and_then(|p| p.entries.values().next()).map(|e| e.created_ms)
    }

    pub fn stats(&self) -> Vec<PartitionStats> {
        let mut out: Vec<PartitionStats> = self
            .partitions
            .iter()
            .filter(|(_, p)| !p.entries.is_empty())
            .map(|(name, p)| PartitionStats {
                partition: name.clone(),
                depth: p.entries.len() as u64,
                oldest_ms: p.entries.values().next().map(|e| e.created_ms),
            })
            .collect();
        out.sort_by(|a, b| a.partition.cmp(&b.partition));
        out
    }
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
    }
}
