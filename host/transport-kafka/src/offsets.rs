//! [`Offsets`]: which offset of each partition a consumer may commit.
//!
//! Kafka keeps one committed offset per partition of a group: the next
//! offset the group reads after a restart or a rebalance. ferry commits a
//! partition's offset only up to the lowest offset it still holds (handed
//! to the route and not yet acknowledged or dead-lettered, retries and
//! outbox persists included), so a crash re-delivers what was in flight
//! and never skips it. Past the last offset taken when nothing is held.

use std::collections::{BTreeMap, BTreeSet};

/// A topic and partition.
pub type Partition = (String, i32);

/// The offsets a consumer holds, by partition.
#[derive(Debug, Default)]
pub struct Offsets {
    partitions: BTreeMap<Partition, Held>,
}

#[derive(Debug, Default)]
struct Held {
    /// Taken and not settled.
    pending: BTreeSet<i64>,
    /// One past the highest offset taken.
    next: i64,
    /// What was last committed (or reported to be).
    committed: Option<i64>,
}

impl Held {
    /// The offset that may be committed now.
    fn committable(&self) -> i64 {
        self.pending.first().copied().unwrap_or(self.next)
    }
}

impl Offsets {
    /// `offset` of `partition` was handed to the route (again, after a
    /// rebalance: no harm).
    pub fn taken(&mut self, partition: &Partition, offset: i64) {
        let held = self.partitions.entry(partition.clone()).or_default();
        held.pending.insert(offset);
        held.next = held.next.max(offset + 1);
    }

    /// The route is done with `offset` (delivered or dead-lettered). An
    /// offset of a partition this consumer no longer has is ignored.
    pub fn settled(&mut self, partition: &Partition, offset: i64) {
        if let Some(held) = self.partitions.get_mut(partition) {
            held.pending.remove(&offset);
        }
    }

    /// The offsets to commit: for each partition whose committable offset
    /// moved since it was last reported, that offset (reported once).
    pub fn to_commit(&mut self) -> Vec<(Partition, i64)> {
        let mut out = Vec::new();
        for (partition, held) in &mut self.partitions {
            let offset = held.committable();
            if held.next > 0 && held.committed.is_none_or(|c| offset > c) {
                held.committed = Some(offset);
                out.push((partition.clone(), offset));
            }
        }
        out
    }

    /// The cluster refused the commit of `offset` of `partition` (during a
    /// rebalance, say): the next [`Offsets::to_commit`] reports the
    /// partition again, even if nothing moved meanwhile (a partition at
    /// its end would otherwise keep a stale committed offset for good).
    pub fn commit_failed(&mut self, partition: &Partition, offset: i64) {
        if let Some(held) = self.partitions.get_mut(partition)
            && held.committed == Some(offset)
        {
            held.committed = None;
        }
    }

    /// The offset of `partition` that may be committed now, if it has had
    /// anything taken.
    pub fn committable(&self, partition: &Partition) -> Option<i64> {
        self.partitions.get(partition).filter(|h| h.next > 0).map(Held::committable)
    }

    /// Whether `offset` of `partition` is still held.
    pub fn is_held(&self, partition: &Partition, offset: i64) -> bool {
        self.partitions.get(partition).is_some_and(|h| h.pending.contains(&offset))
    }

    /// Offsets of `partition` still held.
    pub fn held(&self, partition: &Partition) -> usize {
        self.partitions.get(partition).map_or(0, |h| h.pending.len())
    }

    /// Offsets held in all.
    pub fn held_in_all(&self) -> usize {
        self.partitions.values().map(|h| h.pending.len()).sum()
    }

    /// `partition` was taken away (a rebalance): forgotten; what it still
    /// held comes again to whichever consumer gets it, from the committed
    /// offset.
    pub fn revoke(&mut self, partition: &Partition) {
        self.partitions.remove(partition);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(n: i32) -> Partition {
        ("orders".to_owned(), n)
    }

    #[test]
    fn a_refused_commit_is_reported_again_though_nothing_moved() {
        let mut o = Offsets::default();
        o.taken(&p(0), 4);
        o.settled(&p(0), 4);
        assert_eq!(o.to_commit(), vec![(p(0), 5)]);
        assert!(o.to_commit().is_empty());
        o.commit_failed(&p(0), 3);
        assert!(o.to_commit().is_empty(), "an older refusal changes nothing");
        o.commit_failed(&p(0), 5);
        assert_eq!(o.to_commit(), vec![(p(0), 5)], "reported again");
        o.commit_failed(&p(9), 5);
        assert!(o.to_commit().is_empty(), "a partition not held is ignored");
    }

    #[test]
    fn the_commit_follows_settled_offsets_in_order() {
        let mut o = Offsets::default();
        assert!(o.to_commit().is_empty(), "nothing taken, nothing to commit");
        for offset in 10..13 {
            o.taken(&p(0), offset);
        }
        assert_eq!(o.to_commit(), vec![(p(0), 10)], "nothing settled: the first held offset");
        assert!(o.to_commit().is_empty(), "reported once");
        o.settled(&p(0), 10);
        o.settled(&p(0), 11);
        assert_eq!(o.to_commit(), vec![(p(0), 12)]);
        o.settled(&p(0), 12);
        assert_eq!(o.to_commit(), vec![(p(0), 13)], "past the last one taken");
        assert_eq!(o.held_in_all(), 0);
    }

    #[test]
    fn a_held_offset_keeps_the_commit_behind_it_whatever_settles_after_it() {
        let mut o = Offsets::default();
        for offset in 0..5 {
            o.taken(&p(0), offset);
        }
        o.to_commit();
        // Offset 1 is being retried (or persisted): 2, 3 and 4 went.
        for offset in [0, 2, 3, 4] {
            o.settled(&p(0), offset);
        }
        assert_eq!(o.to_commit(), vec![(p(0), 1)]);
        assert_eq!(o.committable(&p(0)), Some(1));
        assert_eq!(o.held(&p(0)), 1);
        assert!(o.is_held(&p(0), 1) && !o.is_held(&p(0), 2));
        o.settled(&p(0), 1);
        assert_eq!(o.to_commit(), vec![(p(0), 5)]);
    }

    #[test]
    fn partitions_move_on_their_own_and_a_revoked_one_is_forgotten() {
        let mut o = Offsets::default();
        o.taken(&p(0), 7);
        o.taken(&p(1), 100);
        o.taken(&p(1), 101);
        o.settled(&p(1), 100);
        let mut commits = o.to_commit();
        commits.sort();
        assert_eq!(commits, vec![(p(0), 7), (p(1), 101)]);
        o.revoke(&p(1));
        o.settled(&p(1), 101);
        assert_eq!(o.committable(&p(1)), None, "not ours any more");
        assert_eq!(o.held_in_all(), 1);
        // Taken again after the rebalance gave it back, from its commit.
        o.taken(&p(1), 101);
        o.taken(&p(1), 101);
        assert_eq!(o.held(&p(1)), 1, "the same offset twice is held once");
        o.settled(&p(1), 101);
        assert_eq!(o.to_commit(), vec![(p(1), 102)]);
    }

    #[test]
    fn an_offset_settled_twice_or_never_taken_changes_nothing() {
        let mut o = Offsets::default();
        o.taken(&p(0), 3);
        o.taken(&p(0), 4);
        o.settled(&p(0), 9);
        o.settled(&p(0), 3);
        o.settled(&p(0), 3);
        assert_eq!(o.to_commit(), vec![(p(0), 4)]);
    }
}
