//! The master's barrier bookkeeping: who holds which replica index, who is healthy, and who is
//! ready for which generation.
//!
//! Counters are kept incrementally so that each hello, health change or rejoin costs O(1): a
//! barrier of many thousand replicas must not rescan every slot on every event.

use std::collections::HashMap;

use super::admission::{admit, Expected, Refusal};
use super::frame::Hello;

/// Identifies one accepted connection, so a stale connection never touches its successor's slot.
pub type ConnId = u64;

/// Where the master's barrier is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for every replica to be present, healthy and ready for this generation.
    Gathering(u64),
    /// This generation was released; late joiners are released as they come.
    Released(u64),
}

impl Phase {
    /// The generation gathered or released.
    pub fn generation(self) -> u64 {
        match self {
            Phase::Gathering(g) | Phase::Released(g) => g,
        }
    }
}

#[derive(Debug, Clone)]
struct Slot {
    conn: ConnId,
    node: String,
    healthy: bool,
    ready: Option<u64>,
    released: Option<u64>,
}

impl Slot {
    fn counts(&self, generation: u64) -> bool {
        self.healthy && self.ready == Some(generation)
    }
}

/// What a worker's `Rejoin{generation}` means relative to the master's generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejoin {
    /// It acknowledges the generation being gathered or run.
    Current,
    /// It asks for a newer generation (a job-scope restart the master has not ordered yet).
    Ahead,
    /// It is behind; tell it to restart into this generation.
    Behind(u64),
    /// Not allowed: nothing changes.
    Refused(RejoinRefusal),
}

/// The most generations a job may go through: far beyond any real job (each is a job-wide
/// restart), far below where `generation + 1` could wrap.
pub const MAX_GENERATION: u64 = 1 << 32;

/// Why a worker's `Rejoin` changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RejoinRefusal {
    /// Under restart scope `replica`, a worker's failure restarts only that worker.
    #[error("the restart scope is replica: only the job's own restart policy (scope job) starts a new generation")]
    ReplicaScope,
    /// Generations move forward one at a time.
    #[error("the current generation is {current}: expected at most {}", next_generation(*current).unwrap_or(*current))]
    Skips {
        /// The master's generation.
        current: u64,
    },
}

/// The generation after `current`, unless the bound is reached.
pub fn next_generation(current: u64) -> Option<u64> {
    current.checked_add(1).filter(|&g| g <= MAX_GENERATION)
}

/// Connections to send `Release{generation}` to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// The released generation.
    pub generation: u64,
    /// Who to tell.
    pub conns: Vec<ConnId>,
}

/// Why a barrier is not complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    /// The generation gathered.
    pub generation: u64,
    /// Worker indexes not connected, or connected but not ready for this generation.
    pub missing: Vec<u32>,
    /// Replica indexes (0 = the master) whose node is unhealthy.
    pub unhealthy: Vec<u32>,
}

/// The barrier's state; pure, driven by the master's task.
#[derive(Debug)]
pub struct Roster {
    expected: Expected,
    master_healthy: bool,
    phase: Phase,
    slots: HashMap<u32, Slot>,
    counted: usize,
    new_generations: bool,
}

impl Roster {
    /// A roster gathering generation 0.
    pub fn new(expected: Expected, master_healthy: bool) -> Self {
        Roster {
            expected,
            master_healthy,
            phase: Phase::Gathering(0),
            slots: HashMap::new(),
            counted: 0,
            new_generations: false,
        }
    }

    /// Whether a worker may ask for a new generation (restart scope `job`); off by default.
    pub fn allowing_new_generations(mut self, allow: bool) -> Self {
        self.new_generations = allow;
        self
    }

    /// Where the barrier is.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// How many workers are connected.
    pub fn present(&self) -> usize {
        self.slots.len()
    }

    fn workers(&self) -> usize {
        self.expected.replica_count.saturating_sub(1) as usize
    }

    /// The node of the connected peer holding `index`, if any.
    pub fn holder(&self, index: u32) -> Option<String> {
        self.slots.get(&index).map(|s| s.node.clone())
    }

    /// Admit a hello on connection `conn`, or say why not. A hello with the identity (index and
    /// node) of the connected holder replaces the holder's connection, returned here: the same
    /// replica reconnected, so the old connection is stale (half-open).
    pub fn admit(&mut self, conn: ConnId, hello: &Hello) -> Result<Option<ConnId>, Refusal> {
        let same = |s: &Slot| s.node == hello.node;
        let stale = self.slots.get(&hello.replica_index).filter(|s| same(s)).map(|s| s.conn);
        admit(hello, &self.expected, |i| self.slots.get(&i).filter(|s| !same(s)).map(|s| s.node.clone()))?;
        if let Some(old) = stale {
            self.leave(hello.replica_index, old);
        }
        let g = self.phase.generation();
        let slot = Slot { conn, node: hello.node.clone(), healthy: hello.healthy, ready: Some(g), released: None };
        self.counted += usize::from(slot.counts(g));
        self.slots.insert(hello.replica_index, slot);
        Ok(stale)
    }

    fn update(&mut self, index: u32, conn: ConnId, change: impl FnOnce(&mut Slot)) -> bool {
        let g = self.phase.generation();
        let Some(slot) = self.slots.get_mut(&index).filter(|s| s.conn == conn) else {
            return false;
        };
        let before = slot.counts(g);
        change(slot);
        match (before, slot.counts(g)) {
            (false, true) => self.counted += 1,
            (true, false) => self.counted -= 1,
            _ => {}
        }
        true
    }

    /// Connection `conn` holding `index` is gone; false if it no longer held the index.
    pub fn leave(&mut self, index: u32, conn: ConnId) -> bool {
        if !self.update(index, conn, |s| s.healthy = false) {
            return false;
        }
        self.slots.remove(&index);
        true
    }

    /// A worker's node health changed; false if `conn` does not hold `index`.
    #[must_use = "the master acts on the roster's answer"]
    pub fn set_health(&mut self, index: u32, conn: ConnId, healthy: bool) -> bool {
        self.update(index, conn, |s| s.healthy = healthy)
    }

    /// The master's own node health changed.
    pub fn set_master_health(&mut self, healthy: bool) {
        self.master_healthy = healthy;
    }

    /// A worker is ready for `generation`; None if `conn` does not hold `index`. Asking for a
    /// newer generation is allowed only when new generations are (scope `job`), and only for the
    /// next one; a refused rejoin changes nothing.
    #[must_use = "the master acts on the roster's answer"]
    pub fn rejoin(&mut self, index: u32, conn: ConnId, generation: u64) -> Option<Rejoin> {
        let current = self.phase.generation();
        self.slots.get(&index).filter(|s| s.conn == conn)?;
        if generation > current {
            if !self.new_generations {
                return Some(Rejoin::Refused(RejoinRefusal::ReplicaScope));
            }
            if Some(generation) != next_generation(current) {
                return Some(Rejoin::Refused(RejoinRefusal::Skips { current }));
            }
        }
        self.update(index, conn, |s| {
            s.ready = Some(generation);
            s.released = None;
        });
        Some(match generation.cmp(&current) {
            std::cmp::Ordering::Equal => Rejoin::Current,
            std::cmp::Ordering::Greater => Rejoin::Ahead,
            std::cmp::Ordering::Less => Rejoin::Behind(current),
        })
    }

    /// Start gathering `generation`: Ok(true) if it is new, Ok(false) if it is the current one,
    /// Err(current) if it is older than the current one.
    pub fn gather(&mut self, generation: u64) -> Result<bool, u64> {
        let current = self.phase.generation();
        if generation < current {
            return Err(current);
        }
        if generation == current {
            return Ok(false);
        }
        self.phase = Phase::Gathering(generation);
        self.counted = self.slots.values().filter(|s| s.counts(generation)).count();
        Ok(true)
    }

    /// Who to release now: everyone when the barrier just completed, or the replica at `changed`
    /// when it became ready after its generation was released.
    #[must_use = "the master acts on the roster's answer"]
    pub fn take_release(&mut self, changed: Option<u32>) -> Option<Release> {
        match self.phase {
            Phase::Gathering(g) => {
                if !self.master_healthy || self.counted < self.workers() {
                    return None;
                }
                self.phase = Phase::Released(g);
                let mut conns = Vec::with_capacity(self.slots.len());
                for slot in self.slots.values_mut() {
                    slot.released = Some(g);
                    conns.push(slot.conn);
                }
                Some(Release { generation: g, conns })
            }
            Phase::Released(g) => {
                let slot = self.slots.get_mut(&changed?)?;
                if !slot.counts(g) || slot.released == Some(g) {
                    return None;
                }
                slot.released = Some(g);
                Some(Release { generation: g, conns: vec![slot.conn] })
            }
        }
    }

    /// Who the barrier waits for.
    pub fn shortfall(&self) -> Shortfall {
        let g = self.phase.generation();
        let missing = (1..self.expected.replica_count)
            .filter(|i| !matches!(self.slots.get(i), Some(s) if s.ready == Some(g)))
            .collect();
        let mut unhealthy: Vec<u32> = self.slots.iter().filter(|(_, s)| !s.healthy).map(|(&i, _)| i).collect();
        if !self.master_healthy {
            unhealthy.push(0);
        }
        unhealthy.sort_unstable();
        Shortfall { generation: g, missing, unhealthy }
    }

    /// The barrier failed: drop every waiting worker, returning (index, conn) to tell them.
    #[must_use = "the master acts on the roster's answer"]
    pub fn fail(&mut self) -> Vec<(u32, ConnId)> {
        if let Phase::Released(_) = self.phase {
            return Vec::new();
        }
        let mut waiting: Vec<(u32, ConnId)> = self.slots.drain().map(|(i, s)| (i, s.conn)).collect();
        waiting.sort_unstable();
        self.counted = 0;
        waiting
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roster(count: u32) -> Roster {
        Roster::new(Expected { job: "j".into(), replica_count: count }, true).allowing_new_generations(true)
    }

    fn hello(r: &Roster, index: u32, node: &str, healthy: bool) -> Hello {
        Hello {
            job: "j".into(),
            replica_index: index,
            replica_count: r.expected.replica_count,
            node: node.into(),
            healthy,
            health: crate::rendezvous::NodeHealth::Off,
            nonce: String::new(),
        }
    }

    fn join(r: &mut Roster, conn: ConnId, index: u32, healthy: bool) -> Result<(), Refusal> {
        let h = hello(r, index, &format!("node-{index}"), healthy);
        r.admit(conn, &h).map(|_| ())
    }

    fn conns(r: Option<Release>) -> Option<(u64, Vec<ConnId>)> {
        r.map(|mut r| {
            r.conns.sort_unstable();
            (r.generation, r.conns)
        })
    }

    #[test]
    fn releases_when_all_are_present_and_healthy() {
        let mut r = roster(4);
        for i in 1..4 {
            assert_eq!(r.take_release(None), None, "not before replica {i}");
            join(&mut r, u64::from(i) * 10, i, true).unwrap();
        }
        assert_eq!(conns(r.take_release(None)), Some((0, vec![10, 20, 30])));
        assert_eq!(r.phase(), Phase::Released(0));
        assert_eq!(r.take_release(None), None, "released once");
    }

    #[test]
    fn a_single_replica_job_releases_at_once() {
        let mut r = roster(1);
        assert_eq!(conns(r.take_release(None)), Some((0, vec![])));
    }

    #[test]
    fn an_unhealthy_replica_holds_the_barrier_until_healthy() {
        let mut r = roster(3);
        join(&mut r, 1, 1, true).unwrap();
        join(&mut r, 2, 2, false).unwrap();
        assert_eq!(r.take_release(Some(2)), None);
        let s = r.shortfall();
        assert_eq!((s.missing, s.unhealthy), (vec![], vec![2]));
        assert!(!r.set_health(2, 99, true), "another connection cannot flip it");
        assert_eq!(r.take_release(Some(2)), None);
        assert!(r.set_health(2, 2, true));
        assert_eq!(conns(r.take_release(Some(2))), Some((0, vec![1, 2])));
    }

    #[test]
    fn an_unhealthy_master_holds_the_barrier() {
        let mut r = roster(2);
        r.set_master_health(false);
        join(&mut r, 1, 1, true).unwrap();
        assert_eq!(r.take_release(None), None);
        assert_eq!(r.shortfall().unhealthy, vec![0]);
        r.set_master_health(true);
        assert!(r.take_release(None).is_some());
    }

    #[test]
    fn the_same_replica_reconnecting_replaces_its_stale_connection() {
        let mut r = roster(3);
        join(&mut r, 1, 1, true).unwrap();
        join(&mut r, 2, 2, true).unwrap();
        let again = hello(&r, 1, "node-1", true);
        assert_eq!(r.admit(7, &again), Ok(Some(1)), "connection 1 is replaced by 7");
        assert_eq!(r.present(), 2);
        assert!(!r.leave(1, 1), "the stale connection holds nothing any more");
        assert_eq!(r.rejoin(1, 7, 0), Some(Rejoin::Current));
        assert_eq!(conns(r.take_release(None)), Some((0, vec![2, 7])));
    }

    #[test]
    fn duplicates_are_refused_until_the_holder_leaves() {
        let mut r = roster(3);
        join(&mut r, 1, 1, true).unwrap();
        let other_node = hello(&r, 1, "node-x", true);
        assert!(matches!(r.admit(2, &other_node), Err(Refusal::Duplicate { index: 1, .. })));
        assert!(!r.leave(1, 2), "the refused connection holds nothing");
        assert!(r.leave(1, 1));
        assert_eq!(r.present(), 0);
        join(&mut r, 3, 1, true).unwrap();
        assert_eq!(r.holder(1).as_deref(), Some("node-1"));
    }

    #[test]
    fn leaving_undoes_the_count() {
        let mut r = roster(3);
        join(&mut r, 1, 1, true).unwrap();
        join(&mut r, 2, 2, true).unwrap();
        assert!(r.leave(2, 2));
        assert_eq!(r.take_release(None), None);
        assert_eq!(r.shortfall().missing, vec![2]);
        join(&mut r, 3, 2, true).unwrap();
        assert_eq!(conns(r.take_release(None)), Some((0, vec![1, 3])));
    }

    #[test]
    fn shortfall_names_missing_and_unhealthy() {
        let mut r = roster(5);
        join(&mut r, 1, 1, true).unwrap();
        join(&mut r, 3, 3, false).unwrap();
        r.set_master_health(false);
        let s = r.shortfall();
        assert_eq!(s.generation, 0);
        assert_eq!(s.missing, vec![2, 4]);
        assert_eq!(s.unhealthy, vec![0, 3]);
    }

    #[test]
    fn late_joiners_are_released_into_the_running_generation() {
        let mut r = roster(3);
        join(&mut r, 1, 1, true).unwrap();
        join(&mut r, 2, 2, true).unwrap();
        assert!(r.take_release(None).is_some());
        assert!(r.leave(2, 2));
        join(&mut r, 5, 2, false).unwrap();
        assert_eq!(r.take_release(Some(2)), None, "not while unhealthy");
        assert!(r.set_health(2, 5, true));
        assert_eq!(conns(r.take_release(Some(2))), Some((0, vec![5])));
        assert_eq!(r.take_release(Some(2)), None, "once");
    }

    #[test]
    fn a_new_generation_waits_for_every_rejoin() {
        let mut r = roster(3);
        join(&mut r, 1, 1, true).unwrap();
        join(&mut r, 2, 2, true).unwrap();
        r.take_release(None).unwrap();
        assert_eq!(r.gather(1), Ok(true));
        assert_eq!(r.phase(), Phase::Gathering(1));
        assert_eq!(r.take_release(None), None);
        assert_eq!(r.shortfall().missing, vec![1, 2]);
        assert_eq!(r.rejoin(1, 1, 1), Some(Rejoin::Current));
        assert_eq!(r.take_release(Some(1)), None);
        assert_eq!(r.rejoin(2, 99, 1), None, "wrong connection");
        assert_eq!(r.rejoin(2, 2, 1), Some(Rejoin::Current));
        assert_eq!(conns(r.take_release(Some(2))), Some((1, vec![1, 2])));
    }

    #[test]
    fn rejoins_ahead_are_kept_for_the_next_generation() {
        let mut r = roster(3);
        join(&mut r, 1, 1, true).unwrap();
        join(&mut r, 2, 2, true).unwrap();
        r.take_release(None).unwrap();
        assert_eq!(r.rejoin(2, 2, 1), Some(Rejoin::Ahead));
        assert_eq!(r.take_release(Some(2)), None);
        assert_eq!(r.gather(1), Ok(true));
        assert_eq!(r.shortfall().missing, vec![1], "2 already acknowledged");
        assert_eq!(r.rejoin(1, 1, 1), Some(Rejoin::Current));
        assert!(r.take_release(Some(1)).is_some());
    }

    #[test]
    fn generations_move_forward_by_one_and_only_under_job_scope() {
        let mut r = roster(2);
        join(&mut r, 1, 1, true).unwrap();
        r.take_release(None).unwrap();
        let skip = Some(Rejoin::Refused(RejoinRefusal::Skips { current: 0 }));
        assert_eq!(r.rejoin(1, 1, u64::MAX), skip, "no wrap-around");
        assert_eq!(r.rejoin(1, 1, 2), skip);
        assert_eq!(r.rejoin(1, 1, 1), Some(Rejoin::Ahead));
        assert_eq!(next_generation(MAX_GENERATION), None);
        assert_eq!(next_generation(u64::MAX), None);
        let e = RejoinRefusal::Skips { current: 0 }.to_string();
        assert_eq!(e, "the current generation is 0: expected at most 1");

        let mut replica_scope = Roster::new(Expected { job: "j".into(), replica_count: 2 }, true);
        join(&mut replica_scope, 1, 1, true).unwrap();
        replica_scope.take_release(None).unwrap();
        assert_eq!(replica_scope.rejoin(1, 1, 1), Some(Rejoin::Refused(RejoinRefusal::ReplicaScope)));
        assert_eq!(replica_scope.take_release(Some(1)), None, "a refused rejoin changes nothing");
        assert_eq!(replica_scope.rejoin(1, 1, 0), Some(Rejoin::Current), "the running generation is fine");
    }

    #[test]
    fn rejoins_behind_are_told_the_current_generation() {
        let mut r = roster(2);
        join(&mut r, 1, 1, true).unwrap();
        r.gather(3).unwrap();
        assert_eq!(r.rejoin(1, 1, 2), Some(Rejoin::Behind(3)));
        assert_eq!(r.take_release(None), None);
    }

    #[test]
    fn a_rejoin_of_the_running_generation_is_released_again() {
        let mut r = roster(2);
        join(&mut r, 1, 1, true).unwrap();
        r.take_release(None).unwrap();
        assert_eq!(r.rejoin(1, 1, 0), Some(Rejoin::Current));
        assert_eq!(conns(r.take_release(Some(1))), Some((0, vec![1])));
    }

    #[test]
    fn gather_refuses_older_generations_and_repeats_are_no_ops() {
        let mut r = roster(2);
        assert_eq!(r.gather(0), Ok(false));
        assert_eq!(r.gather(2), Ok(true));
        assert_eq!(r.gather(2), Ok(false));
        assert_eq!(r.gather(1), Err(2));
    }

    #[test]
    fn newcomers_while_gathering_are_ready_for_that_generation() {
        let mut r = roster(2);
        r.gather(4).unwrap();
        join(&mut r, 1, 1, true).unwrap();
        assert_eq!(conns(r.take_release(None)), Some((4, vec![1])));
    }

    #[test]
    fn failing_drops_every_waiting_worker() {
        let mut r = roster(4);
        join(&mut r, 7, 3, true).unwrap();
        join(&mut r, 5, 1, true).unwrap();
        assert_eq!(r.fail(), vec![(1, 5), (3, 7)]);
        assert_eq!(r.present(), 0);
        assert_eq!(r.shortfall().missing, vec![1, 2, 3]);
        join(&mut r, 8, 1, true).unwrap();
        join(&mut r, 9, 2, true).unwrap();
        join(&mut r, 10, 3, true).unwrap();
        assert!(r.take_release(None).is_some(), "counts were reset");
        assert_eq!(r.fail(), vec![], "nothing to fail once released");
    }
}
