//! Recall: full-text and vector candidates, re-checked against the query's filters by the store,
//! scored by relevance, importance and recency (see [`crate::recall`]); time words in the
//! query favour memories of the span they name, and a question comparing two events gets
//! the best match of each (see [`crate::timeframe`]).

use super::successors::Probed;
use super::*;
use crate::embed::EmbedError;
use crate::rerank::Likeness;
use crate::timeframe::{self, TimeCue, TimeFrame};

/// Where a query's vector comes from when it is on its way (a turn embeds its question
/// from the turn's start): called once, after the full-text search.
pub type VectorSource<'a> = &'a (dyn Fn() -> Option<Vec<f32>> + Sync);

impl LocalMemory {
    /// Memories relevant to `query`, best first.
    pub fn recall(&self, query: &RecallQuery) -> Result<Vec<RecallHit>, MemoryError> {
        self.recall_awaiting(query, None)
    }

    /// [`LocalMemory::recall`], taking the query's vector from `vector` (when given and
    /// embeddings are on) once the full-text search is done, so the search runs while the
    /// model still works.
    pub fn recall_awaiting(
        &self,
        query: &RecallQuery,
        vector: Option<VectorSource<'_>>,
    ) -> Result<Vec<RecallHit>, MemoryError> {
        let limit = query.limit.clamp(1, 1000);
        let now = query.now.or(query.as_of).unwrap_or_else(now_ms);
        let frame = self
            .time_frame(query, now)?
            .map(|frame| frame.ending_by(now));
        if let Some(frame) = &frame
            && timeframe::names_only_a_time(&query.text, frame)
        {
            return self.said_within(query, frame, now, limit);
        }
        let compared = timeframe::compared_events(&query.text);
        let ranking = Ranking {
            now,
            frame: frame.as_ref(),
            limit: limit.max(SHORTEST_RANKING),
            follow_updates: compared.is_none(),
        };
        let mut hits = self.ranked_awaiting(query, ranking, vector)?;
        if let Some(events) = compared {
            hits = self.led_by_each(query, now, events, hits)?;
        }
        hits.truncate(limit);
        Ok(hits)
    }

    /// What was said inside `frame`, newest first, for a question that names the time and
    /// nothing to match ("what happened last week?"): there is no topic for relevance to
    /// measure, so abstaining would answer that nothing was said. Each hit's score is its
    /// recency, and its explanation says why it is there.
    fn said_within(
        &self,
        query: &RecallQuery,
        frame: &TimeFrame,
        now: i64,
        limit: usize,
    ) -> Result<Vec<RecallHit>, MemoryError> {
        let config = &self.config.recall;
        let unmatched = recall::Signals {
            bm25_raw: None,
            best_bm25: 0.0,
            cosine: None,
            centred_cosine: None,
            semantic: false,
        };
        let entries = self.store.newest_matching(&inside(query, frame), limit)?;
        Ok(entries
            .into_iter()
            .map(|entry| {
                let age_ms = now.saturating_sub(entry.valid_from);
                let mut explain = recall::score(config, unmatched, entry.importance, age_ms);
                explain.score = explain.recency;
                explain.time = Some(format!("inside {}", frame.describe()));
                explain.adjusted = Some(
                    "the question names a time and nothing else: what was said then, newest first"
                        .into(),
                );
                RecallHit {
                    score: explain.score,
                    explain,
                    entry,
                }
            })
            .collect())
    }

    /// The span of valid time the query names, if any; "before I moved" is resolved by
    /// recalling the move and taking its time.
    fn time_frame(&self, query: &RecallQuery, now: i64) -> Result<Option<TimeFrame>, MemoryError> {
        let (phrase, before, event) = match timeframe::read(&query.text, now) {
            None => return Ok(None),
            Some(TimeCue::Frame(frame)) => return Ok(Some(frame)),
            Some(TimeCue::Anchored {
                phrase,
                before,
                event,
            }) => (phrase, before, event),
        };
        let found = self.ranked(&probe(query, event), now, None, 1)?;
        Ok(found.first().map(|hit| {
            let edge = Some(hit.entry.valid_from);
            TimeFrame {
                phrase,
                from: if before { None } else { edge },
                to: if before { edge } else { None },
            }
        }))
    }

    /// A question comparing two events needs both: the best match of each leads the hits,
    /// in the order the question names them, then the rest as ranked. The lead is the same
    /// whatever the limit, so a smaller limit still shows the first hits of a larger one.
    /// A match already among the hits keeps its score and moves up; one that is not is
    /// brought in from its own search.
    fn led_by_each(
        &self,
        query: &RecallQuery,
        now: i64,
        events: [String; 2],
        mut hits: Vec<RecallHit>,
    ) -> Result<Vec<RecallHit>, MemoryError> {
        let mut lead: Vec<RecallHit> = Vec::new();
        for event in events {
            let best = self.ranked(&probe(query, event.clone()), now, None, 1)?;
            let Some(best) = best.into_iter().next() else {
                continue;
            };
            if lead.iter().any(|hit| hit.entry.id == best.entry.id) {
                continue;
            }
            let mut led = match hits.iter().position(|hit| hit.entry.id == best.entry.id) {
                Some(at) => hits.remove(at),
                None => best,
            };
            led.explain.adjusted = Some(format!("leads: the best match for \"{event}\""));
            lead.push(led);
        }
        lead.append(&mut hits);
        Ok(lead)
    }

    /// Candidates from both signals, scored and ranked; `frame` favours memories of a span.
    fn ranked(
        &self,
        query: &RecallQuery,
        now: i64,
        frame: Option<&TimeFrame>,
        limit: usize,
    ) -> Result<Vec<RecallHit>, MemoryError> {
        let ranking = Ranking {
            now,
            frame,
            limit,
            follow_updates: false,
        };
        self.ranked_awaiting(query, ranking, None)
    }

    /// [`Self::ranked`], the query's vector taken from `vector` after the full-text search
    /// when one is on its way.
    fn ranked_awaiting(
        &self,
        query: &RecallQuery,
        ranking: Ranking<'_>,
        vector: Option<VectorSource<'_>>,
    ) -> Result<Vec<RecallHit>, MemoryError> {
        let Ranking { frame, limit, .. } = ranking;
        let candidates = (limit * self.config.recall.candidates_per_hit.max(1)).max(50);
        let (bm25, query_vector) = match vector {
            Some(on_its_way) if self.wants_vector(query) && query.query_vector.is_none() => {
                let bm25 = self.framed_lexical_candidates(query, frame, candidates);
                (bm25, on_its_way())
            }
            // The model embeds the question on its own thread while full-text search runs.
            _ => std::thread::scope(|scope| {
                let embedding = self
                    .needs_embedding(query)
                    .then(|| scope.spawn(|| self.query_vector(query)));
                let bm25 = self.framed_lexical_candidates(query, frame, candidates);
                let vector = match embedding {
                    Some(thread) => thread.join().unwrap_or(None),
                    None => self.query_vector(query),
                };
                (bm25, vector)
            }),
        };
        let bm25 = bm25?;
        // A span narrows what counts: look further among the nearest vectors for it.
        let nearest = if frame.is_some() {
            candidates * 4
        } else {
            candidates
        };
        let (mut cosines, mut vectors) = match &query_vector {
            Some(vector) => self.semantic_candidates(query, vector, &bm25, nearest),
            None => Default::default(),
        };
        let semantic = self.embedder.as_ref().is_some_and(|e| e.semantic());
        let neighbours = match &query_vector {
            Some(vector) if semantic && ranking.follow_updates => {
                self.neighbours_of_best(query, vector, &mut cosines, &mut vectors)
            }
            _ => Vec::new(),
        };
        let (centred, centred_vectors) = match &query_vector {
            Some(vector) if semantic => self.centred_cosines(vector, &vectors),
            _ => (HashMap::new(), HashMap::new()),
        };
        let mut seqs: Vec<i64> = bm25.keys().chain(cosines.keys()).copied().collect();
        seqs.sort_unstable();
        seqs.dedup();
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let entries = self.store.entries_matching(&seqs, query)?;
        let signals = Signals {
            bm25: &bm25,
            cosines: query_vector.as_ref().map(|_| &cosines),
            centred: &centred,
            vectors,
            centred_vectors,
            semantic,
            neighbours: &neighbours,
        };
        Ok(self.rank(query, entries, signals, ranking))
    }

    /// Full-text candidates of the query, and of the span it names.
    fn framed_lexical_candidates(
        &self,
        query: &RecallQuery,
        frame: Option<&TimeFrame>,
        candidates: usize,
    ) -> Result<HashMap<i64, f64>, MemoryError> {
        let mut bm25 = self.lexical_candidates(query, candidates)?;
        if let Some(frame) = frame {
            bm25.extend(self.lexical_candidates(&inside(query, frame), candidates)?);
        }
        Ok(bm25)
    }

    /// Whether the query is searched by meaning too (embeddings on, not lexical only).
    fn wants_vector(&self, query: &RecallQuery) -> bool {
        self.embedder.is_some() && !query.lexical_only
    }

    /// Whether recall must run the model on the query's text (no vector given).
    fn needs_embedding(&self, query: &RecallQuery) -> bool {
        self.wants_vector(query) && query.query_vector.is_none() && !query.text.trim().is_empty()
    }

    /// BM25 of the entries whose words match the query text (lower is better).
    fn lexical_candidates(
        &self,
        query: &RecallQuery,
        candidates: usize,
    ) -> Result<HashMap<i64, f64>, MemoryError> {
        let Some(fts) =
            recall::fts_match(&query.text, &query.scope, query.exclude_session.as_deref())
        else {
            return Ok(HashMap::new());
        };
        Ok(self.store.lexical_candidates(&fts, query, candidates)?)
    }

    /// The query text's vector, when embeddings are on (BM25 alone when the provider fails).
    fn query_vector(&self, query: &RecallQuery) -> Option<Vec<f32>> {
        if !self.wants_vector(query) {
            return None;
        }
        match &query.query_vector {
            Some(vector) => Some(vector.clone()),
            None => self.embed_query(&query.text),
        }
    }

    /// The vector of a recall query's text, by the configured provider: None without
    /// embeddings, for blank text, or when the provider fails (recall is then lexical, and
    /// says so in the log).
    pub fn embed_query(&self, text: &str) -> Option<Vec<f32>> {
        self.try_embed_query(text).unwrap_or_else(|e| {
            tracing::warn!("recall falls back to BM25 only: {e}");
            None
        })
    }

    /// [`LocalMemory::embed_query`], with the provider's failure as the error rather than
    /// logged: for a caller that tells a person their search was by words only (the CLI,
    /// which has no log to read).
    pub fn try_embed_query(&self, text: &str) -> Result<Option<Vec<f32>>, EmbedError> {
        let Some(embedder) = self.embedder.as_ref() else {
            return Ok(None);
        };
        if text.trim().is_empty() {
            return Ok(None);
        }
        Ok(embedder.embed(&[text.to_string()])?.pop())
    }

    /// Cosine similarity of the nearest vectors in scope and of every lexical candidate,
    /// with the candidates' vectors (for reranking).
    fn semantic_candidates(
        &self,
        query: &RecallQuery,
        vector: &[f32],
        bm25: &HashMap<i64, f64>,
        candidates: usize,
    ) -> (HashMap<i64, f64>, HashMap<i64, Vec<f32>>) {
        let filter = ScanFilter {
            scope: &query.scope,
            exclude_session: query.exclude_session.as_deref(),
        };
        let nearest = self.current_index().nearest(vector, &filter, candidates);
        let mut seqs: Vec<i64> = nearest.iter().map(|(seq, _)| *seq).collect();
        seqs.extend(bm25.keys());
        seqs.sort_unstable();
        seqs.dedup();
        let vectors = self.vectors_of(&seqs);
        // The scan scored the nearest already; only the other lexical candidates are new.
        let mut cosines: HashMap<i64, f64> = nearest
            .into_iter()
            .map(|(seq, similarity)| (seq, f64::from(similarity)))
            .collect();
        for (seq, stored) in &vectors {
            cosines
                .entry(*seq)
                .or_insert_with(|| f64::from(embed::cosine(vector, stored)));
        }
        (cosines, vectors)
    }

    /// Cosines of the query and the candidates' `vectors` with the common direction of the
    /// index's vectors taken out, weighted by how many it holds (see
    /// [`crate::RecallConfig::centring_count`]), and those centred vectors (for
    /// re-ranking); both empty when nothing is indexed.
    fn centred_cosines(
        &self,
        query: &[f32],
        vectors: &HashMap<i64, Vec<f32>>,
    ) -> (HashMap<i64, f64>, HashMap<i64, Vec<f32>>) {
        let prior = self.config.recall.centring_count;
        let Some((mean, count)) = self.index().mean() else {
            return Default::default();
        };
        if mean.len() != query.len() {
            return Default::default();
        }
        let weight = (count as f64 / (count as f64 + prior)) as f32;
        let query = embed::centre(query, &mean, weight);
        let centred: HashMap<i64, Vec<f32>> = vectors
            .iter()
            .map(|(seq, vector)| (*seq, embed::centre(vector, &mean, weight)))
            .collect();
        let cosines = centred
            .iter()
            .map(|(seq, vector)| (*seq, f64::from(embed::cosine(&query, vector))))
            .collect();
        (cosines, centred)
    }

    /// Score the entries, drop the irrelevant, collapse near-duplicates, keep the best —
    /// with a semantic model, newer memories on the same subject first and the top k
    /// diversified (see [`crate::rerank`]).
    fn rank(
        &self,
        query: &RecallQuery,
        entries: Vec<(i64, MemoryEntry)>,
        mut signals: Signals<'_>,
        ranking: Ranking<'_>,
    ) -> Vec<RecallHit> {
        let config = &self.config.recall;
        let Ranking {
            now, frame, limit, ..
        } = ranking;
        let best_bm25 = signals.bm25.values().map(|b| -b).fold(0.0, f64::max);
        let semantic = signals.semantic && signals.cosines.is_some();
        // How plainly a hit answers, on the scale the floor and abstention are set on.
        let relevance = |parts: &recall::ScoreParts| recall::plain_relevance(config, parts);
        let default_floor = if semantic {
            config.min_similarity
        } else {
            config.min_relevance
        };
        let min_relevance = query.min_relevance.unwrap_or(default_floor);
        let mut hits: Vec<(i64, RecallHit)> = entries
            .into_iter()
            .map(|(seq, entry)| {
                let cosine = signals.cosines.and_then(|c| c.get(&seq).copied());
                let scored = recall::Signals {
                    bm25_raw: signals.bm25.get(&seq).copied(),
                    best_bm25,
                    cosine,
                    centred_cosine: signals.centred.get(&seq).copied(),
                    semantic: signals.semantic,
                };
                let parts = recall::score(
                    config,
                    scored,
                    entry.importance,
                    now.saturating_sub(entry.valid_from),
                );
                let hit = RecallHit {
                    score: parts.score,
                    explain: parts,
                    entry,
                };
                (seq, hit)
            })
            .collect();
        let successors = if semantic {
            self.successors(query, &hits, signals.neighbours, &signals.vectors, now)
        } else {
            HashMap::new()
        };
        if semantic && config.crowding_penalty > 0.0 {
            mark_down_crowded(config, &mut hits, &signals.centred_vectors);
        }
        if let Some(frame) = frame {
            let mut scored: Vec<&mut RecallHit> = hits.iter_mut().map(|(_, hit)| hit).collect();
            recall::favour_span(config, &mut scored, frame, semantic);
        }
        let (mut hits, mut below): (Vec<_>, Vec<_>) = hits.into_iter().partition(|(seq, hit)| {
            // An update found among a candidate's nearest memories competes whatever its
            // relevance, unless the query set its own floor.
            relevance(&hit.explain) >= min_relevance
                || (query.min_relevance.is_none() && successors.contains_key(seq))
        });
        hits.sort_by(|(_, a), (_, b)| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| b.entry.recorded_at.cmp(&a.entry.recorded_at))
        });
        if !semantic {
            let hits = hits.into_iter().map(|(_, hit)| hit).collect();
            return recall::collapse_duplicates(hits, config.duplicate_similarity, limit);
        }
        // Nothing said is about the question: answer nothing rather than the least unrelated.
        let best = hits
            .iter()
            .filter(|(_, h)| !rerank::asks(&h.entry))
            .map(|(_, h)| relevance(&h.explain))
            .fold(0.0, f64::max);
        if query.min_relevance.is_none() && best < config.abstain_below {
            return Vec::new();
        }
        let literals = crate::literal::literals(&query.text);
        let mut candidates: Vec<rerank::Candidate> = hits
            .into_iter()
            .map(|(seq, hit)| rerank::Candidate {
                literals_named: crate::literal::named(&literals, &hit.entry.content),
                vector: signals.vectors.remove(&seq),
                centred: signals.centred_vectors.remove(&seq),
                outside_asked_time: frame.is_some_and(|f| !f.contains(hit.entry.valid_from)),
                tells_of_change: crate::change::tells_of_change(&hit.entry.content),
                said_after_now: hit.entry.valid_from > now.saturating_add(recall::CLOCK_SLACK_MS),
                succeeds: successors.get(&seq).cloned(),
                promoted: false,
                hit,
            })
            .collect();
        let strict = config.same_subject_similarity as f32;
        rerank::promote_updates(&mut candidates, rerank::SameSubject::alike(strict));
        let picked = rerank::diversify(
            candidates,
            config.diversity_lambda,
            candidates_len(limit),
            Likeness::Centred,
        );
        let mut kept = keep_unrepeated(picked, config.duplicate_similarity, limit);
        // Among the hits kept, a newer one that answers nearly as well is the update even
        // when worded unlike the older: reordering them changes nothing else's rank. Plain
        // likeness here: on both phrasebooks of the dev set it puts the newest statement
        // first more often than the centred one (1 to 7 points fewer stale answers, the
        // same recall@5), at the price of some newer non-updates moving up.
        let both_answer = rerank::SameSubject {
            similarity: strict,
            similarity_when_both_answer: config.same_subject_when_both_answer as f32,
            relevance_ratio: config.update_relevance_ratio,
            similarity_when_changed: config.same_subject_when_changed as f32,
            relevance_ratio_when_changed: config.update_relevance_ratio_when_changed,
            likeness: Likeness::Plain,
        };
        // The first few are reordered among themselves only: promotions from further down
        // the list put newer non-updates above answers (on the dev set, multi-session
        // recall@5 fell 4 points when the first ten were reordered together).
        let mut rest = kept.split_off(kept.len().min(REORDERED_TOGETHER));
        rerank::promote_updates(&mut kept, both_answer);
        rerank::promote_updates(&mut rest, both_answer);
        kept.append(&mut rest);
        if config.fill_below_floor && query.min_relevance.is_none() && kept.len() < limit {
            below.retain(|(_, hit)| relevance(&hit.explain) >= min_relevance / 2.0);
            below.sort_by(|(_, a), (_, b)| relevance(&b.explain).total_cmp(&relevance(&a.explain)));
            let below = below.into_iter().map(|(_, hit)| hit);
            kept = fill_below_floor(kept, below, config.duplicate_similarity, limit);
        }
        kept.into_iter().map(|c| c.hit).collect()
    }
}

/// Take each hit's crowding among the candidates (see [`rerank::crowding`]) off its score,
/// `crowding_penalty` of it weighted as relevance is, and record it in the explanation.
fn mark_down_crowded(
    config: &recall::RecallConfig,
    hits: &mut [(i64, RecallHit)],
    centred: &HashMap<i64, Vec<f32>>,
) {
    hits.sort_by(|(_, a), (_, b)| b.score.total_cmp(&a.score));
    let vectors: Vec<Option<&[f32]>> = hits
        .iter()
        .map(|(seq, _)| centred.get(seq).map(Vec::as_slice))
        .collect();
    let crowding = rerank::crowding(&vectors, config.crowding_neighbours);
    for ((_, hit), crowding) in hits.iter_mut().zip(crowding) {
        if let Some(crowding) = crowding {
            hit.score -= config.relevance_weight * config.crowding_penalty * crowding;
            hit.explain.score = hit.score;
            hit.explain.crowding = Some(crowding);
        }
    }
}

/// `kept` followed by hits from below the relevance floor (best first, each marked in its
/// explanation) until `limit` are kept, near-repeats of a kept hit skipped: the floor
/// decides which hits compete for the top k, not whether a top k with room is shown.
fn fill_below_floor(
    kept: Vec<rerank::Candidate>,
    below: impl Iterator<Item = RecallHit>,
    threshold: f64,
    limit: usize,
) -> Vec<rerank::Candidate> {
    let room = limit.saturating_sub(kept.len());
    let fillers = below.take(candidates_len(room)).map(|mut hit| {
        hit.explain.adjusted = Some("below the relevance floor: fills the top k".into());
        rerank::Candidate {
            hit,
            vector: None,
            centred: None,
            outside_asked_time: false,
            tells_of_change: false,
            said_after_now: false,
            literals_named: 0,
            succeeds: None,
            promoted: false,
        }
    });
    keep_unrepeated(kept.into_iter().chain(fillers).collect(), threshold, limit)
}

/// The candidates [`recall::collapse_duplicates`] keeps of `picked`, in order, with their
/// vectors.
fn keep_unrepeated(
    picked: Vec<rerank::Candidate>,
    threshold: f64,
    limit: usize,
) -> Vec<rerank::Candidate> {
    let hits = picked.iter().map(|c| c.hit.clone()).collect();
    let kept: std::collections::HashSet<String> =
        recall::collapse_duplicates(hits, threshold, limit)
            .into_iter()
            .map(|hit| hit.entry.id)
            .collect();
    picked
        .into_iter()
        .filter(|c| kept.contains(&c.hit.entry.id))
        .collect()
}

/// The fewest hits a recall ranks (from as many candidates), however few it returns: a
/// recall for up to this many shows the first of one ranking, so `--limit 1` answers with
/// the top hit of the default `--limit 10`.
const SHORTEST_RANKING: usize = 10;

/// How many of the first hits the last re-ranking reorders among themselves (as many as the
/// agent's context takes by default); those below are reordered among themselves.
const REORDERED_TOGETHER: usize = 5;

/// Hits picked before near-verbatim repeats are collapsed, for `limit` kept.
fn candidates_len(limit: usize) -> usize {
    limit * 2
}

/// A recall for `text` in the same scope and filters as `query`, for one part of it.
fn probe(query: &RecallQuery, text: String) -> RecallQuery {
    RecallQuery {
        text,
        query_vector: None,
        ..query.clone()
    }
}

/// `query` narrowed to the valid times of `frame`.
fn inside(query: &RecallQuery, frame: &TimeFrame) -> RecallQuery {
    RecallQuery {
        since: query.since.max(frame.from),
        until: [query.until, frame.to].into_iter().flatten().min(),
        ..query.clone()
    }
}

/// When "now" is, the span the query names, and how many hits to keep.
#[derive(Clone, Copy)]
struct Ranking<'a> {
    now: i64,
    frame: Option<&'a TimeFrame>,
    limit: usize,
    /// Whether the best candidates' updates are looked for among their nearest memories
    /// (see [`crate::RecallConfig::successor_probes`]): not for a question comparing two
    /// events, which asks about both and not about what replaced either, nor for the
    /// probes that find one event.
    follow_updates: bool,
}

/// The relevance signals of a recall's candidates: BM25 by seq, cosine by seq when the
/// query has a vector (plain and, with a semantic model, centred; and the candidates'
/// vectors, plain and centred), and whether those vectors carry meaning.
struct Signals<'a> {
    bm25: &'a HashMap<i64, f64>,
    cosines: Option<&'a HashMap<i64, f64>>,
    centred: &'a HashMap<i64, f64>,
    vectors: HashMap<i64, Vec<f32>>,
    centred_vectors: HashMap<i64, Vec<f32>>,
    semantic: bool,
    /// The nearest memories of the candidates most like the query, in the order probed
    /// (see [`LocalMemory::neighbours_of_best`]).
    neighbours: &'a [Probed],
}
