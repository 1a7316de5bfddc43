//! What the generated users say and are asked, as phrasebooks. Every seed draws from the same
//! phrasebook, so seeds alone cannot show whether a setting fits one book's wording: the
//! recall knobs were tuned on [`FIRST`], and [`SECOND`], written apart from it with other
//! topics and other sentence shapes, was never tuned on.

mod first;
mod second;

pub use first::FIRST;
pub use second::SECOND;

/// Everything a generated user can say or be asked.
pub struct Bank {
    /// The phrasebook's name in reports.
    pub name: &'static str,
    /// Facts with one value at a time (single-session and knowledge-update questions).
    pub aspects: &'static [Aspect],
    /// Pairs of messages one question needs together (multi-session questions).
    pub pairs: &'static [Pair],
    /// Dated events (temporal questions).
    pub events: &'static [Event],
    /// How a user asks about two events (`{a}`, `{b}`): which came first, how far apart.
    pub order_questions: &'static [&'static str],
    /// Questions nothing a user says answers (abstention).
    pub unanswerable: &'static [&'static str],
    /// Everyday chatter between the facts.
    pub small_talk: &'static [&'static str],
    /// Replies of the assistant, stored as episodes too.
    pub acks: &'static [&'static str],
}

/// Something about a user that has one value at a time.
pub struct Aspect {
    /// Ways a user first mentions it (`{}` is the value).
    pub statements: &'static [&'static str],
    /// Ways a user says it changed (`{}` is the new value).
    pub updates: &'static [&'static str],
    /// Ways a user asks about it later.
    pub questions: &'static [&'static str],
    /// The values it takes.
    pub values: &'static [&'static str],
}

/// Two things said in different sessions that one question needs together.
pub struct Pair {
    /// The first thing said.
    pub first: &'static str,
    /// The second thing said, sessions later.
    pub second: &'static str,
    /// The question that needs both.
    pub question: &'static str,
}

/// Something that happened once, on a day, and how a user refers to it later.
pub struct Event {
    /// How the user tells it when it happens.
    pub told: &'static str,
    /// How the user refers to it in a question.
    pub named: &'static str,
}
