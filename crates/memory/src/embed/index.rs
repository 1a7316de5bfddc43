//! The in-memory vector index: the newest vectors of the configured model, grouped by
//! user so that a recall scoped to one user scores only that user's vectors and the shared
//! ones. Each user keeps at most a window of vectors in memory (the recall scan limit), so
//! neither a recall's time nor the host's memory grows with a user's history; older vectors
//! stay in the store, read back for the few lexical candidates that need them. Vectors are
//! held as memory stores them, int8 with a scale each (a quarter of f32's size, and a
//! recall ranks the same before and after a restart); a scan scores the query against them
//! as they are.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::RwLock;

use cairn_storage::memory::quantize_int8;

use super::cosine;
use crate::Scope;

/// Scope keys of one indexed vector (0 = none), so a scan skips other users' entries
/// before scoring. SQL re-checks every candidate; this only keeps the scan focused.
#[derive(Clone, Copy)]
struct IndexedScope {
    agent: u32,
    user: u32,
    session: u32,
}

/// A slot no vector holds (its vector was removed or moved to another user).
const EMPTY: i64 = i64::MIN;

/// One user's vectors (or the shared ones): a ring of at most `window` slots in the order
/// they were indexed, the oldest overwritten by the next once full.
#[derive(Default)]
struct Shelf {
    seqs: Vec<i64>,
    scopes: Vec<IndexedScope>,
    /// Each slot's vector as int8 codes, `dims` per slot ([`quantize_int8`]).
    codes: Vec<i8>,
    /// Each slot's scale: a code times it is the component.
    scales: Vec<f32>,
    /// The oldest slot once the ring is full (0 before).
    oldest: usize,
    /// Slots marked [`EMPTY`].
    empty: usize,
}

impl Shelf {
    /// Slots newest first.
    fn newest_first(&self) -> impl Iterator<Item = usize> + '_ {
        let len = self.seqs.len();
        (0..len).map(move |back| (self.oldest + len - 1 - back) % len)
    }

    fn codes(&self, slot: usize, dims: usize) -> &[i8] {
        &self.codes[slot * dims..(slot + 1) * dims]
    }

    /// The vector of `slot`, back as f32s.
    fn vector(&self, slot: usize, dims: usize) -> Vec<f32> {
        let scale = self.scales[slot];
        self.codes(slot, dims)
            .iter()
            .map(|&code| f32::from(code) * scale)
            .collect()
    }

    /// The cosine of unit vector `query` and the vector of `slot`.
    fn score(&self, slot: usize, dims: usize, query: &[f32]) -> f32 {
        super::dot(query, self.codes(slot, dims)) * self.scales[slot]
    }

    /// Put `vector` (quantized) in `slot`, which exists or is the next one.
    fn place(&mut self, slot: usize, dims: usize, (scale, codes): (f32, Vec<i8>)) {
        if slot == self.scales.len() {
            self.scales.push(scale);
            self.codes.extend_from_slice(&codes);
        } else {
            self.scales[slot] = scale;
            self.codes[slot * dims..(slot + 1) * dims].copy_from_slice(&codes);
        }
    }
}

#[derive(Default)]
struct IndexData {
    dims: usize,
    /// Each user's shelf (key 0: vectors shared by every user).
    shelves: HashMap<u32, Shelf>,
    /// Where each indexed entry is: its user's key and its slot on that shelf.
    position: HashMap<i64, (u32, usize)>,
    names: HashMap<String, u32>,
    /// Sum of the vectors held, per dimension (for their mean, see [`VectorIndex::mean`]).
    sum: Vec<f64>,
}

impl IndexData {
    /// Count `vector` into the sum (`sign` 1) or out of it (-1).
    fn tally(&mut self, vector: &[f32], sign: f64) {
        if self.sum.len() != vector.len() {
            self.sum = vec![0.0; vector.len()];
        }
        for (total, value) in self.sum.iter_mut().zip(vector) {
            *total += sign * f64::from(*value);
        }
    }

    fn key(&mut self, name: &Option<String>) -> u32 {
        match name {
            None => 0,
            Some(name) => {
                let next = self.names.len() as u32 + 1;
                *self.names.entry(name.clone()).or_insert(next)
            }
        }
    }

    fn lookup(&self, name: &Option<String>) -> Option<u32> {
        name.as_ref()
            .map(|n| self.names.get(n).copied().unwrap_or(u32::MAX))
    }

    /// Put a new vector on its user's shelf, pushing the oldest out of memory once the
    /// shelf holds `window`.
    fn shelve(&mut self, window: usize, seq: i64, scope: IndexedScope, vector: &[f32]) {
        let dims = self.dims;
        let shelf = self.shelves.entry(scope.user).or_default();
        let mut pushed_out_vector = None;
        let slot = if shelf.seqs.len() < window {
            shelf.seqs.push(seq);
            shelf.scopes.push(scope);
            shelf.seqs.len() - 1
        } else {
            let slot = shelf.oldest;
            shelf.oldest = (slot + 1) % window;
            let pushed_out = std::mem::replace(&mut shelf.seqs[slot], seq);
            if pushed_out == EMPTY {
                shelf.empty -= 1;
            } else {
                self.position.remove(&pushed_out);
                pushed_out_vector = Some(shelf.vector(slot, dims));
            }
            shelf.scopes[slot] = scope;
            slot
        };
        shelf.place(slot, dims, quantize_int8(vector));
        let held = shelf.vector(slot, dims);
        self.position.insert(seq, (scope.user, slot));
        self.tally(&held, 1.0);
        if let Some(old) = pushed_out_vector {
            self.tally(&old, -1.0);
        }
    }

    /// Empty the slot of entry `seq`, if indexed; a shelf mostly empty is compacted.
    fn unshelve(&mut self, seq: i64) {
        let Some((user, slot)) = self.position.remove(&seq) else {
            return;
        };
        let Some(shelf) = self.shelves.get_mut(&user) else {
            return;
        };
        shelf.seqs[slot] = EMPTY;
        shelf.empty += 1;
        let gone = shelf.vector(slot, self.dims);
        let mostly_empty = shelf.empty * 2 > shelf.seqs.len();
        self.tally(&gone, -1.0);
        if mostly_empty {
            self.compact(user);
        }
    }

    /// Rebuild `user`'s shelf without its empty slots, oldest first.
    fn compact(&mut self, user: u32) {
        let Some(old) = self.shelves.remove(&user) else {
            return;
        };
        let dims = self.dims;
        let mut slots: Vec<usize> = old.newest_first().collect();
        slots.reverse();
        let mut shelf = Shelf::default();
        for slot in slots.into_iter().filter(|&s| old.seqs[s] != EMPTY) {
            let seq = old.seqs[slot];
            self.position.insert(seq, (user, shelf.seqs.len()));
            shelf.seqs.push(seq);
            shelf.scopes.push(old.scopes[slot]);
            shelf.scales.push(old.scales[slot]);
            shelf.codes.extend_from_slice(old.codes(slot, dims));
        }
        if !shelf.seqs.is_empty() {
            self.shelves.insert(user, shelf);
        }
    }

    /// The newest `window` slots across every shelf (each shelf is newest first: merge).
    fn newest_of_all(&self, window: usize) -> Vec<(u32, usize)> {
        let mut heads: Vec<_> = self
            .shelves
            .iter()
            .map(|(&user, shelf)| (user, shelf, shelf.newest_first().peekable()))
            .collect();
        let mut next = BinaryHeap::new();
        for (at, (_, shelf, slots)) in heads.iter_mut().enumerate() {
            if let Some(&slot) = slots.peek() {
                next.push((shelf.seqs[slot], Reverse(at)));
            }
        }
        let mut scanned = Vec::new();
        while scanned.len() < window {
            let Some((_, Reverse(at))) = next.pop() else {
                break;
            };
            let (user, shelf, slots) = &mut heads[at];
            if let Some(slot) = slots.next() {
                scanned.push((*user, slot));
            }
            if let Some(&slot) = slots.peek() {
                next.push((shelf.seqs[slot], Reverse(at)));
            }
        }
        scanned
    }
}

/// Which indexed vectors a scan may return.
pub struct ScanFilter<'a> {
    /// The query's scope: a set agent or user also admits entries shared at that level.
    pub scope: &'a Scope,
    /// Entries of this session are skipped.
    pub exclude_session: Option<&'a str>,
}

/// The newest vectors of the configured model, in memory — at most `window` of each
/// user's and of the shared ones (see [`crate::RecallConfig::scan_limit`]) — scanned
/// exhaustively (within a user's own and the shared vectors when the scan names a user)
/// at recall.
pub struct VectorIndex {
    window: usize,
    data: RwLock<IndexData>,
}

impl VectorIndex {
    /// An empty index keeping at most `window` vectors of each user (at least one).
    pub fn new(window: usize) -> Self {
        Self {
            window: window.max(1),
            data: RwLock::default(),
        }
    }

    /// Add or replace the vector of entry `seq`; the user's oldest leaves memory when the
    /// user already has a full window.
    pub fn upsert(&self, seq: i64, scope: &Scope, vector: &[f32]) {
        let mut data = self.data.write().unwrap_or_else(|p| p.into_inner());
        if data.dims == 0 {
            data.dims = vector.len();
        }
        if vector.len() != data.dims {
            // A model with other dimensions: the index starts over with it.
            *data = IndexData {
                dims: vector.len(),
                ..IndexData::default()
            };
        }
        let indexed = IndexedScope {
            agent: data.key(&scope.agent_id),
            user: data.key(&scope.user_id),
            session: data.key(&scope.session_id),
        };
        match data.position.get(&seq).copied() {
            Some((user, slot)) if user == indexed.user => {
                let dims = data.dims;
                let Some(shelf) = data.shelves.get_mut(&user) else {
                    return;
                };
                let replaced = shelf.vector(slot, dims);
                shelf.place(slot, dims, quantize_int8(vector));
                shelf.scopes[slot] = indexed;
                let held = shelf.vector(slot, dims);
                data.tally(&replaced, -1.0);
                data.tally(&held, 1.0);
            }
            Some(_) => {
                data.unshelve(seq);
                data.shelve(self.window, seq, indexed, vector);
            }
            None => data.shelve(self.window, seq, indexed, vector),
        }
    }

    /// Drop the vector of entry `seq` (purged).
    pub fn remove(&self, seq: i64) {
        let mut data = self.data.write().unwrap_or_else(|p| p.into_inner());
        data.unshelve(seq);
    }

    /// How many vectors the index holds.
    pub fn len(&self) -> usize {
        self.data
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .position
            .len()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The mean of the vectors held and how many there are (None when empty). Vectors of
    /// a sentence model share a common direction (any two sentences are somewhat alike);
    /// recall takes it out before comparing (see [`crate::RecallConfig::centring_count`]).
    pub fn mean(&self) -> Option<(Vec<f32>, usize)> {
        let data = self.data.read().unwrap_or_else(|p| p.into_inner());
        let count = data.position.len();
        if count == 0 || data.sum.len() != data.dims {
            return None;
        }
        let mean = data.sum.iter().map(|t| (t / count as f64) as f32).collect();
        Some((mean, count))
    }

    /// The vector of entry `seq`, if it is in memory.
    pub fn vector(&self, seq: i64) -> Option<Vec<f32>> {
        let data = self.data.read().unwrap_or_else(|p| p.into_inner());
        let (user, slot) = *data.position.get(&seq)?;
        Some(data.shelves.get(&user)?.vector(slot, data.dims))
    }

    /// The `k` entries most similar to `query` that pass `filter`, best first.
    pub fn nearest(&self, query: &[f32], filter: &ScanFilter<'_>, k: usize) -> Vec<(i64, f32)> {
        self.nearest_each(&[query], filter, k)
            .pop()
            .unwrap_or_default()
    }

    /// [`Self::nearest`] for each of `queries`, in one pass over the vectors (each is read
    /// once, whatever the number of queries).
    pub fn nearest_each(
        &self,
        queries: &[&[f32]],
        filter: &ScanFilter<'_>,
        k: usize,
    ) -> Vec<Vec<(i64, f32)>> {
        let data = self.data.read().unwrap_or_else(|p| p.into_inner());
        let mut found: Vec<Nearest> = queries.iter().map(|_| Nearest::new(k)).collect();
        if data.dims == 0 || k == 0 || queries.iter().any(|q| q.len() != data.dims) {
            return found.into_iter().map(|n| n.best).collect();
        }
        let agent = data.lookup(&filter.scope.agent_id);
        let user = data.lookup(&filter.scope.user_id);
        let session = data.lookup(&filter.scope.session_id);
        let excluded = filter
            .exclude_session
            .map(|s| data.names.get(s).copied().unwrap_or(u32::MAX));
        let admits = |key: u32, wanted: Option<u32>| wanted.is_none_or(|w| key == w || key == 0);
        let mut decoded = Vec::with_capacity(data.dims);
        let mut consider = |shelf: &Shelf, slot: usize| {
            let (seq, scope) = (shelf.seqs[slot], shelf.scopes[slot]);
            if seq == EMPTY
                || !admits(scope.agent, agent)
                || session.is_some_and(|s| scope.session != s)
                || excluded.is_some_and(|s| scope.session == s)
            {
                return;
            }
            if let [query] = queries {
                found[0].offer(seq, shelf.score(slot, data.dims, query));
                return;
            }
            // Several queries: the codes are turned into numbers once, not once per query.
            decoded.clear();
            decoded.extend(shelf.codes(slot, data.dims).iter().map(|&c| f32::from(c)));
            for (query, nearest) in queries.iter().zip(&mut found) {
                nearest.offer(seq, cosine(query, &decoded) * shelf.scales[slot]);
            }
        };
        match user {
            // The user's own shelf and the shared one, whole (each holds at most a window).
            Some(user) => {
                for shelf in [user, 0].iter().filter_map(|u| data.shelves.get(u)) {
                    shelf.newest_first().for_each(|slot| consider(shelf, slot));
                }
            }
            None => {
                for (user, slot) in data.newest_of_all(self.window) {
                    if let Some(shelf) = data.shelves.get(&user) {
                        consider(shelf, slot);
                    }
                }
            }
        }
        found.into_iter().map(|n| n.best).collect()
    }
}

/// The `k` best-scored entries offered so far, best first.
struct Nearest {
    k: usize,
    best: Vec<(i64, f32)>,
    floor: f32,
}

impl Nearest {
    fn new(k: usize) -> Self {
        Self {
            k,
            best: Vec::with_capacity(k + 1),
            floor: f32::MIN,
        }
    }

    fn offer(&mut self, seq: i64, score: f32) {
        if self.best.len() == self.k && score <= self.floor {
            return;
        }
        let place = self.best.partition_point(|(_, s)| *s >= score);
        self.best.insert(place, (seq, score));
        self.best.truncate(self.k);
        if self.best.len() == self.k {
            self.floor = self.best[self.k - 1].1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::HashEmbedder;

    /// `vector` as the index holds it: int8, back as f32s.
    fn held(vector: &[f32]) -> Vec<f32> {
        let (scale, codes) = quantize_int8(vector);
        codes.iter().map(|&code| f32::from(code) * scale).collect()
    }

    #[test]
    fn a_vector_is_held_in_a_quarter_of_its_size_and_scores_as_stored() {
        let embedder = HashEmbedder::new(256);
        let fresh = embedder.vector("my sister Emma lives in Lisbon");
        let index = VectorIndex::new(10);
        index.upsert(1, &scope("ana"), &fresh);
        // The same vector as memory.db gives it back after a restart.
        index.upsert(2, &scope("bo"), &held(&fresh));
        let query = embedder.vector("where does Emma live");
        let score = |user: &str| {
            let scope = scope(user);
            let filter = ScanFilter {
                scope: &scope,
                exclude_session: None,
            };
            index.nearest(&query, &filter, 1)[0].1
        };
        assert!((score("ana") - score("bo")).abs() < 1e-6);
        assert!((score("ana") - cosine(&query, &fresh)).abs() < 0.01);
        assert_eq!(index.vector(1), Some(held(&fresh)));
        let data = index.data.read().expect("index");
        let shelf = &data.shelves[&data.names["ana"]];
        assert_eq!(shelf.codes.len(), fresh.len(), "one byte per component");
        assert_eq!(shelf.scales.len(), 1);
    }

    fn scope(user: &str) -> Scope {
        Scope {
            user_id: Some(user.into()),
            ..Scope::default()
        }
    }

    fn nearest_for(index: &VectorIndex, user: &str, query: &[f32]) -> Vec<i64> {
        let scope = scope(user);
        let filter = ScanFilter {
            scope: &scope,
            exclude_session: None,
        };
        index
            .nearest(query, &filter, 5)
            .iter()
            .map(|h| h.0)
            .collect()
    }

    #[test]
    fn one_pass_for_several_queries_finds_what_one_pass_each_finds() {
        let index = VectorIndex::new(100);
        let vector = |seq: i64| {
            let angle = seq as f32 * 0.37;
            [angle.cos(), angle.sin(), 0.5]
        };
        for seq in 0..40 {
            let user = if seq % 3 == 0 { "bo" } else { "ana" };
            index.upsert(seq, &scope(user), &vector(seq));
        }
        let queries: [&[f32]; 3] = [&[1.0, 0.0, 0.0], &[0.0, 1.0, 0.2], &[-0.5, 0.5, 1.0]];
        let ana = scope("ana");
        let filter = ScanFilter {
            scope: &ana,
            exclude_session: None,
        };
        let each = index.nearest_each(&queries, &filter, 4);
        assert_eq!(each.len(), 3);
        for (query, found) in queries.iter().zip(&each) {
            // Every one of ana's vectors scored as held (int8), the best four.
            let mut expected: Vec<(i64, f32)> = (0..40)
                .filter(|seq| seq % 3 != 0)
                .map(|seq| (seq, cosine(query, &held(&vector(seq)))))
                .collect();
            expected.sort_by(|a, b| b.1.total_cmp(&a.1));
            expected.truncate(4);
            let seqs = |hits: &[(i64, f32)]| hits.iter().map(|h| h.0).collect::<Vec<_>>();
            assert_eq!(seqs(found), seqs(&expected));
            for ((_, score), (_, wanted)) in found.iter().zip(&expected) {
                assert!((score - wanted).abs() < 1e-5, "{score} against {wanted}");
            }
            assert_eq!(found, &index.nearest(query, &filter, 4));
        }
        assert!(index.nearest_each(&[], &filter, 4).is_empty());
    }

    #[test]
    fn the_mean_follows_what_the_index_holds() {
        let index = VectorIndex::new(2);
        assert!(index.mean().is_none());
        let mean = |index: &VectorIndex| {
            let (mean, count) = index.mean().expect("a mean");
            (
                mean.iter()
                    .map(|v| (v * 100.0).round() / 100.0)
                    .collect::<Vec<_>>(),
                count,
            )
        };
        index.upsert(1, &scope("ana"), &[1.0, 0.0]);
        index.upsert(2, &scope("bo"), &[0.0, 1.0]);
        assert_eq!(mean(&index), (vec![0.5, 0.5], 2));
        index.upsert(2, &scope("bo"), &[0.0, -1.0]);
        assert_eq!(
            mean(&index),
            (vec![0.5, -0.5], 2),
            "a replaced vector counts anew"
        );
        index.upsert(3, &scope("ana"), &[1.0, 0.0]);
        index.upsert(4, &scope("ana"), &[0.0, 1.0]);
        assert_eq!(
            mean(&index),
            (vec![0.33, 0.0], 3),
            "ana's window of 2 pushed her first out"
        );
        index.remove(2);
        assert_eq!(mean(&index), (vec![0.5, 0.5], 2));
        index.upsert(3, &scope("bo"), &[0.0, 1.0]);
        assert_eq!(mean(&index), (vec![0.0, 1.0], 2), "moved to another user");
    }
    #[test]
    fn the_index_scans_only_admitted_scopes() {
        let index = VectorIndex::new(usize::MAX);
        let embedder = HashEmbedder::new(64);
        index.upsert(1, &scope("alice"), &embedder.vector("likes tea"));
        index.upsert(2, &scope("bob"), &embedder.vector("likes tea"));
        index.upsert(3, &Scope::default(), &embedder.vector("likes coffee"));
        let query = embedder.vector("tea");
        assert_eq!(
            nearest_for(&index, "bob", &query),
            vec![2, 3],
            "bob's own entry first, the shared one after, never alice's"
        );
        assert_eq!(nearest_for(&index, "carol", &query), vec![3]);
        index.remove(2);
        assert_eq!(index.len(), 2);
        assert!(index.vector(2).is_none());
        assert!(index.vector(3).is_some());
    }

    #[test]
    fn a_users_vectors_stay_theirs_through_moves_and_removals() {
        let index = VectorIndex::new(usize::MAX);
        let embedder = HashEmbedder::new(64);
        for seq in 1..=6 {
            let user = if seq % 2 == 0 { "bob" } else { "alice" };
            index.upsert(seq, &scope(user), &embedder.vector(&format!("note {seq}")));
        }
        // Removing from the middle moves the last vector (bob's 6) into the hole.
        index.remove(1);
        index.remove(4);
        // A vector re-filed under another user follows its new owner.
        index.upsert(3, &scope("bob"), &embedder.vector("note 3"));
        let query = embedder.vector("note");
        let mut bob = nearest_for(&index, "bob", &query);
        bob.sort();
        assert_eq!(bob, vec![2, 3, 6]);
        assert_eq!(nearest_for(&index, "alice", &query), vec![5]);
    }

    fn found(index: &VectorIndex, scope: &Scope, query: &[f32]) -> Vec<i64> {
        let filter = ScanFilter {
            scope,
            exclude_session: None,
        };
        let mut found: Vec<i64> = index
            .nearest(query, &filter, 100)
            .iter()
            .map(|h| h.0)
            .collect();
        found.sort();
        found
    }

    #[test]
    fn memory_keeps_only_the_newest_window_of_a_user_and_of_the_shared() {
        let index = VectorIndex::new(2);
        let embedder = HashEmbedder::new(64);
        for seq in 1..=5 {
            index.upsert(seq, &scope("alice"), &embedder.vector("likes tea"));
        }
        index.upsert(6, &Scope::default(), &embedder.vector("likes tea"));
        index.upsert(7, &Scope::default(), &embedder.vector("likes tea"));
        index.upsert(8, &scope("bob"), &embedder.vector("likes tea"));
        let query = embedder.vector("tea");
        assert_eq!(found(&index, &scope("alice"), &query), vec![4, 5, 6, 7]);
        assert_eq!(index.len(), 5, "alice's 3 oldest left memory");
        assert!(index.vector(3).is_none() && index.vector(4).is_some());
        // A scan for no one user takes the newest window of all.
        assert_eq!(found(&index, &Scope::default(), &query), vec![7, 8]);
        // A re-filed vector leaves its old shelf and pushes out the new owner's oldest.
        index.upsert(5, &scope("bob"), &embedder.vector("likes tea"));
        assert_eq!(found(&index, &scope("alice"), &query), vec![4, 6, 7]);
        assert_eq!(found(&index, &scope("bob"), &query), vec![5, 6, 7, 8]);
        index.upsert(9, &scope("bob"), &embedder.vector("likes tea"));
        assert_eq!(found(&index, &scope("bob"), &query), vec![5, 6, 7, 9]);
    }

    #[test]
    fn a_shelf_emptied_by_removals_is_compacted_and_keeps_the_rest() {
        let index = VectorIndex::new(4);
        let embedder = HashEmbedder::new(64);
        for seq in 1..=6 {
            index.upsert(
                seq,
                &scope("alice"),
                &embedder.vector(&format!("note {seq}")),
            );
        }
        index.remove(3);
        index.remove(5);
        index.remove(6);
        let query = embedder.vector("note");
        assert_eq!(found(&index, &scope("alice"), &query), vec![4]);
        for seq in 7..=10 {
            index.upsert(
                seq,
                &scope("alice"),
                &embedder.vector(&format!("note {seq}")),
            );
        }
        assert_eq!(found(&index, &scope("alice"), &query), vec![7, 8, 9, 10]);
        assert_eq!(index.len(), 4);
        assert_eq!(index.vector(9), Some(held(&embedder.vector("note 9"))));
    }
}
