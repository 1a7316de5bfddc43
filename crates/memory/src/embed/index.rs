//! The in-memory vector index: every vector of the configured model, grouped by user so
//! that a recall scoped to one user scores only that user's vectors and the shared ones —
//! its cost grows with the user's memories, not with everyone's.

use std::collections::HashMap;
use std::sync::RwLock;

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

#[derive(Default)]
struct IndexData {
    dims: usize,
    vectors: Vec<f32>,
    seqs: Vec<i64>,
    scopes: Vec<IndexedScope>,
    position: HashMap<i64, usize>,
    names: HashMap<String, u32>,
    /// Positions of each user's vectors (key 0: vectors shared by every user).
    by_user: HashMap<u32, Vec<usize>>,
}

impl IndexData {
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

    /// Note that the vector at `at` belongs to `user`.
    fn file_under(&mut self, user: u32, at: usize) {
        self.by_user.entry(user).or_default().push(at);
    }

    /// Forget that the vector at `at` belongs to `user`.
    fn unfile(&mut self, user: u32, at: usize) {
        if let Some(positions) = self.by_user.get_mut(&user) {
            positions.retain(|&p| p != at);
            if positions.is_empty() {
                self.by_user.remove(&user);
            }
        }
    }

    /// The positions a scan for `user` visits, newest first: that user's and the shared
    /// ones (at most `newest` of each), or the newest `newest` of all when the scan is not
    /// for one user.
    fn positions(&self, user: Option<u32>, newest: usize) -> Box<dyn Iterator<Item = usize> + '_> {
        match user {
            None => Box::new((0..self.seqs.len()).rev().take(newest)),
            Some(user) => Box::new(
                [user, 0]
                    .into_iter()
                    .filter_map(|u| self.by_user.get(&u))
                    .flat_map(move |positions| positions.iter().rev().take(newest).copied()),
            ),
        }
    }
}

/// Which indexed vectors a scan may return.
pub struct ScanFilter<'a> {
    /// The query's scope: a set agent or user also admits entries shared at that level.
    pub scope: &'a Scope,
    /// Entries of this session are skipped.
    pub exclude_session: Option<&'a str>,
    /// Vectors scored at most, the newest first, of the user's own and of the shared ones
    /// (see [`crate::RecallConfig::scan_limit`]): a recall's cost stops growing there.
    pub newest: usize,
}

/// Every vector of the configured model, in memory, scanned exhaustively (within a user's
/// own and the shared vectors when the scan names a user) at recall.
#[derive(Default)]
pub struct VectorIndex {
    data: RwLock<IndexData>,
}

impl VectorIndex {
    /// Add or replace the vector of entry `seq`.
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
            Some(at) => {
                let dims = data.dims;
                data.vectors[at * dims..(at + 1) * dims].copy_from_slice(vector);
                let was = data.scopes[at].user;
                if was != indexed.user {
                    data.unfile(was, at);
                    data.file_under(indexed.user, at);
                }
                data.scopes[at] = indexed;
            }
            None => {
                let at = data.seqs.len();
                data.vectors.extend_from_slice(vector);
                data.seqs.push(seq);
                data.scopes.push(indexed);
                data.position.insert(seq, at);
                data.file_under(indexed.user, at);
            }
        }
    }

    /// Drop the vector of entry `seq` (purged).
    pub fn remove(&self, seq: i64) {
        let mut data = self.data.write().unwrap_or_else(|p| p.into_inner());
        let Some(at) = data.position.remove(&seq) else {
            return;
        };
        let last = data.seqs.len() - 1;
        let dims = data.dims;
        let user = data.scopes[at].user;
        data.unfile(user, at);
        if at != last {
            data.vectors
                .copy_within(last * dims..(last + 1) * dims, at * dims);
            let moved = data.seqs[last];
            data.seqs[at] = moved;
            data.scopes[at] = data.scopes[last];
            data.position.insert(moved, at);
            let moved_user = data.scopes[at].user;
            data.unfile(moved_user, last);
            data.file_under(moved_user, at);
        }
        data.vectors.truncate(last * dims);
        data.seqs.pop();
        data.scopes.pop();
    }

    /// How many vectors the index holds.
    pub fn len(&self) -> usize {
        self.data
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .seqs
            .len()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The vector of entry `seq`, if indexed.
    pub fn vector(&self, seq: i64) -> Option<Vec<f32>> {
        let data = self.data.read().unwrap_or_else(|p| p.into_inner());
        let at = *data.position.get(&seq)?;
        Some(data.vectors[at * data.dims..(at + 1) * data.dims].to_vec())
    }

    /// The `k` entries most similar to `query` that pass `filter`, best first.
    pub fn nearest(&self, query: &[f32], filter: &ScanFilter<'_>, k: usize) -> Vec<(i64, f32)> {
        let data = self.data.read().unwrap_or_else(|p| p.into_inner());
        if data.dims == 0 || query.len() != data.dims || k == 0 {
            return Vec::new();
        }
        let agent = data.lookup(&filter.scope.agent_id);
        let user = data.lookup(&filter.scope.user_id);
        let session = data.lookup(&filter.scope.session_id);
        let excluded = filter
            .exclude_session
            .map(|s| data.names.get(s).copied().unwrap_or(u32::MAX));
        let admits = |key: u32, wanted: Option<u32>| wanted.is_none_or(|w| key == w || key == 0);
        let mut best: Vec<(i64, f32)> = Vec::with_capacity(k + 1);
        let mut floor = f32::MIN;
        for at in data.positions(user, filter.newest) {
            let scope = data.scopes[at];
            if !admits(scope.agent, agent)
                || session.is_some_and(|s| scope.session != s)
                || excluded.is_some_and(|s| scope.session == s)
            {
                continue;
            }
            let score = cosine(query, &data.vectors[at * data.dims..(at + 1) * data.dims]);
            if best.len() == k && score <= floor {
                continue;
            }
            let place = best.partition_point(|(_, s)| *s >= score);
            best.insert(place, (data.seqs[at], score));
            best.truncate(k);
            if best.len() == k {
                floor = best[k - 1].1;
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::HashEmbedder;

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
            newest: usize::MAX,
        };
        index
            .nearest(query, &filter, 5)
            .iter()
            .map(|h| h.0)
            .collect()
    }

    #[test]
    fn the_index_scans_only_admitted_scopes() {
        let index = VectorIndex::default();
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
        let index = VectorIndex::default();
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

    #[test]
    fn a_scan_scores_only_the_newest_vectors_of_a_user_and_of_the_shared() {
        let index = VectorIndex::default();
        let embedder = HashEmbedder::new(64);
        for seq in 1..=5 {
            index.upsert(seq, &scope("alice"), &embedder.vector("likes tea"));
        }
        index.upsert(6, &Scope::default(), &embedder.vector("likes tea"));
        index.upsert(7, &Scope::default(), &embedder.vector("likes tea"));
        let alice = scope("alice");
        let filter = ScanFilter {
            scope: &alice,
            exclude_session: None,
            newest: 2,
        };
        let mut found: Vec<i64> = index
            .nearest(&embedder.vector("tea"), &filter, 10)
            .iter()
            .map(|h| h.0)
            .collect();
        found.sort();
        assert_eq!(found, vec![4, 5, 6, 7]);
    }
}
