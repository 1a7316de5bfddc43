//! A generated recall benchmark: many users, each with several conversation sessions in
//! which facts about them are planted among small talk, some facts later updated, and
//! questions naming the memories that answer them.
//!
//! Deterministic for a seed, so recall@k is comparable between runs.

use cairn::memory::{MemoryKind, NewMemory, RecallQuery, Scope};

/// One attribute a user can state, how they state it, and how they are asked about it.
struct Template {
    predicate: &'static str,
    statement: &'static str,
    update: &'static str,
    question: &'static str,
    paraphrase: &'static str,
    values: &'static [&'static str],
}

const TEMPLATES: &[Template] = &[
    Template {
        predicate: "lives_in",
        statement: "I live in {} these days, close to the old harbour.",
        update: "Big news: I moved, I now live in {}.",
        question: "Which city do I live in?",
        paraphrase: "Where is home for me these days?",
        values: &[
            "Lisbon", "Oslo", "Nairobi", "Osaka", "Lima", "Tallinn", "Perth", "Quito",
        ],
    },
    Template {
        predicate: "favourite_colour",
        statement: "My favourite colour is {}, always has been.",
        update: "Funny, my favourite colour changed, it is {} now.",
        question: "What is my favourite colour?",
        paraphrase: "Which shade do I like best?",
        values: &[
            "teal", "crimson", "ochre", "violet", "amber", "indigo", "olive",
        ],
    },
    Template {
        predicate: "dog_name",
        statement: "Our dog is called {} and he chews everything.",
        update: "We adopted a second puppy and renamed the dog to {}.",
        question: "What is my dog called?",
        paraphrase: "What is the name of our pet?",
        values: &[
            "Biscuit", "Rex", "Pepper", "Nemo", "Juniper", "Waffles", "Ziggy",
        ],
    },
    Template {
        predicate: "job",
        statement: "At my job I work as a {} at the city hospital.",
        update: "I changed jobs, I work as a {} now.",
        question: "What do I work as?",
        paraphrase: "What is my profession?",
        values: &[
            "nurse",
            "radiologist",
            "pharmacist",
            "paramedic",
            "surgeon",
            "dietitian",
        ],
    },
    Template {
        predicate: "allergy",
        statement: "Careful with dinner, I am allergic to {}.",
        update: "The doctor retested me: I am allergic to {}, not what we thought.",
        question: "What am I allergic to?",
        paraphrase: "Which food must I avoid?",
        values: &[
            "peanuts",
            "shellfish",
            "sesame",
            "kiwi",
            "mustard",
            "celery",
        ],
    },
    Template {
        predicate: "car",
        statement: "I drive a {} to work every morning.",
        update: "Sold the old one, I drive a {} now.",
        question: "Which car do I drive?",
        paraphrase: "What vehicle do I own?",
        values: &["Volvo", "Subaru", "Tesla", "Fiat", "Skoda", "Mazda"],
    },
    Template {
        predicate: "sister",
        statement: "My sister {} is visiting next month.",
        update: "Correction: my sister goes by {} now.",
        question: "What is my sister's name?",
        paraphrase: "Who is my sibling?",
        values: &["Ingrid", "Maya", "Zora", "Lucia", "Hana", "Greta"],
    },
    Template {
        predicate: "instrument",
        statement: "On weekends I play the {} in a small band.",
        update: "I switched instruments, I play the {} in the band now.",
        question: "Which instrument do I play?",
        paraphrase: "What music do I make on weekends?",
        values: &["cello", "trumpet", "banjo", "accordion", "clarinet", "harp"],
    },
];

const SMALL_TALK: &[&str] = &[
    "The weather was lovely this afternoon.",
    "I watched a documentary about volcanoes last night.",
    "Can you remind me to buy bread tomorrow?",
    "Traffic was terrible on the bridge again.",
    "I am thinking about repainting the kitchen.",
    "The football match went to penalties.",
    "I finally finished that long novel.",
    "Our neighbours are throwing a party on Saturday.",
    "I need a recipe for a quick lunch.",
    "The train was late by twenty minutes.",
    "My phone battery dies so quickly lately.",
    "We are planning a hike in the mountains.",
    "I tried a new coffee shop near the station.",
    "The garden needs watering before the heat wave.",
];

/// Small talk that shares the questions' words without answering them for the user.
const DISTRACTORS: &[&str] = &[
    "My friend lives in Madrid and keeps inviting me over.",
    "The neighbours' dog is called Bruno and barks at night.",
    "My colleague drives a Jeep with a broken mirror.",
    "I could never play the drums, too loud for me.",
    "My cousin is allergic to cats, poor thing.",
    "My brother's favourite colour is orange, he paints everything orange.",
    "Her sister works as a teacher in the village school.",
    "Which car would you recommend for a family of five?",
    "Do you know any city where rent is cheap?",
    "The band played a song about a dog called Lucky.",
];

const ACKS: &[&str] = &[
    "Thanks for telling me, noted.",
    "Got it. Anything else I can help with?",
    "Sounds good to me.",
    "I will keep that in mind.",
];

/// A memory to store, in order, with the label the questions use for it.
pub struct PlannedMemory {
    /// Label of this memory (`u3-s1-e4`), unique in the dataset.
    pub label: String,
    /// The memory itself.
    pub memory: NewMemory,
}

/// A question and the labels of the memories that answer it.
pub struct Question {
    /// The user asking (the scope of the recall).
    pub user: String,
    /// The question text.
    pub text: String,
    /// Labels of the memories that answer it (any one of them counts).
    pub evidence: Vec<String>,
    /// Labels of outdated facts that must not be recalled.
    pub stale: Vec<String>,
    /// Whether the fact was updated after it was first stated.
    pub updated: bool,
    /// Whether the question avoids the words the user used (hard for lexical recall).
    pub paraphrase: bool,
}

/// The generated set.
pub struct Dataset {
    /// Memories in the order to store them.
    pub memories: Vec<PlannedMemory>,
    /// Questions with their evidence.
    pub questions: Vec<Question>,
    /// How many conversations (sessions) it holds.
    pub sessions: usize,
}

/// A small deterministic generator (xorshift64*).
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

const DAY_MS: i64 = 86_400_000;

/// A line of a session: its text, and which planted fact it states (slot, is an update).
type Line = (String, Option<(usize, bool)>);

/// Labels of the memories that state one planted fact.
#[derive(Clone, Default)]
struct Labels {
    first_episode: Option<String>,
    first_fact: Option<String>,
    update_episode: Option<String>,
    update_fact: Option<String>,
}

/// Generate `users` users with three sessions each, four planted facts per user and about
/// a third of the facts updated in the last session. Times count back from `now`.
pub fn generate(users: usize, seed: u64, now: i64) -> Dataset {
    let mut rng = Rng::new(seed);
    let mut memories = Vec::new();
    let mut questions = Vec::new();
    let mut sessions = 0;
    for u in 0..users {
        let user = format!("user-{u:04}");
        let mut picked: Vec<usize> = (0..TEMPLATES.len()).collect();
        for i in (1..picked.len()).rev() {
            picked.swap(i, rng.below(i + 1));
        }
        picked.truncate(4);
        let mut plan: Vec<Vec<Line>> = vec![Vec::new(); 3];
        let mut values = Vec::new();
        for (slot, template) in picked.iter().enumerate() {
            let t = &TEMPLATES[*template];
            let first = t.values[rng.below(t.values.len())];
            let session = slot % 2;
            plan[session].push((t.statement.replace("{}", first), Some((slot, false))));
            let updated = rng.below(3) == 0;
            let mut latest = first;
            if updated {
                let mut next = t.values[rng.below(t.values.len())];
                while next == first {
                    next = t.values[rng.below(t.values.len())];
                }
                plan[2].push((t.update.replace("{}", next), Some((slot, true))));
                latest = next;
            }
            values.push((*template, first, latest, updated));
        }
        let mut labels: Vec<Labels> = vec![Labels::default(); picked.len()];
        for (s, lines) in plan.iter_mut().enumerate() {
            for _ in 0..4 {
                let at = rng.below(lines.len() + 1);
                lines.insert(
                    at,
                    (SMALL_TALK[rng.below(SMALL_TALK.len())].to_string(), None),
                );
            }
            for _ in 0..2 {
                let at = rng.below(lines.len() + 1);
                let line = DISTRACTORS[rng.below(DISTRACTORS.len())];
                lines.insert(at, (line.to_string(), None));
            }
            sessions += 1;
            let session_id = format!("chat:{user}-s{s}");
            let day = now - (30 - 10 * s as i64) * DAY_MS;
            for (e, (text, planted)) in lines.iter().enumerate() {
                let label = format!("{user}-s{s}-e{e}");
                let at = day + e as i64 * 60_000;
                memories.push(PlannedMemory {
                    label: label.clone(),
                    memory: episode(&user, &session_id, text, "user", at),
                });
                memories.push(PlannedMemory {
                    label: format!("{label}-ack"),
                    memory: episode(
                        &user,
                        &session_id,
                        ACKS[rng.below(ACKS.len())],
                        "assistant",
                        at + 1_000,
                    ),
                });
                if let Some((slot, is_update)) = planted {
                    let (template, first, latest, _) = values[*slot];
                    let t = &TEMPLATES[template];
                    let value = if *is_update { latest } else { first };
                    let fact_label = format!("{label}-fact");
                    let mut fact = NewMemory::new(
                        MemoryKind::Fact,
                        format!("{user} {}: {value}", t.predicate.replace('_', " ")),
                    );
                    fact.scope = Scope {
                        agent_id: Some("main".into()),
                        user_id: Some(user.clone()),
                        session_id: None,
                    };
                    fact.subject = Some(user.clone());
                    fact.predicate = Some(t.predicate.into());
                    fact.valid_from = Some(at + 3_600_000);
                    fact.sources = vec![label.clone()];
                    memories.push(PlannedMemory {
                        label: fact_label.clone(),
                        memory: fact,
                    });
                    let entry = &mut labels[*slot];
                    if *is_update {
                        entry.update_episode = Some(label.clone());
                        entry.update_fact = Some(fact_label);
                    } else {
                        entry.first_episode = Some(label.clone());
                        entry.first_fact = Some(fact_label);
                    }
                }
            }
        }
        for (slot, (template, _, _, updated)) in values.iter().enumerate() {
            let Labels {
                first_episode,
                first_fact,
                update_episode,
                update_fact,
            } = labels[slot].clone();
            let (evidence, stale): (Vec<String>, Vec<String>) = if *updated {
                (
                    [update_episode, update_fact]
                        .into_iter()
                        .flatten()
                        .collect(),
                    first_fact.into_iter().collect(),
                )
            } else {
                (
                    [first_episode, first_fact].into_iter().flatten().collect(),
                    Vec::new(),
                )
            };
            for (text, paraphrase) in [
                (TEMPLATES[*template].question, false),
                (TEMPLATES[*template].paraphrase, true),
            ] {
                questions.push(Question {
                    user: user.clone(),
                    text: text.to_string(),
                    evidence: evidence.clone(),
                    stale: stale.clone(),
                    updated: *updated,
                    paraphrase,
                });
            }
        }
    }
    Dataset {
        memories,
        questions,
        sessions,
    }
}

/// An episode of `user` in `session`, said by `role` at `at`.
pub fn episode(user: &str, session: &str, text: &str, role: &str, at: i64) -> NewMemory {
    let mut memory = NewMemory::new(MemoryKind::Episode, text);
    memory.scope = Scope {
        agent_id: Some("main".into()),
        user_id: Some(user.to_string()),
        session_id: Some(session.to_string()),
    };
    memory.tags = vec![role.to_string()];
    memory.valid_from = Some(at);
    memory
}

/// The recall a question of a generated set makes: the top 5 of `user`'s memories with the
/// agent `main`, by meaning and words, or by words alone when `lexical_only`.
pub fn question_recall(user: &str, text: &str, lexical_only: bool) -> RecallQuery {
    RecallQuery {
        text: text.to_string(),
        scope: Scope {
            agent_id: Some("main".into()),
            user_id: Some(user.to_string()),
            session_id: None,
        },
        limit: 5,
        lexical_only,
        ..RecallQuery::default()
    }
}
